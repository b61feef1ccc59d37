"""JSON-RPC message builders, JSON shape checks and raw-socket helpers shared by transport tests.

Imported as ``from _wire_support import ...``: pytest puts ``tests/`` on ``sys.path`` (there is
no ``tests/__init__.py``), the way ``conftest`` is imported.
"""

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial

import trio
from hypercorn.trio import serve as hypercorn_serve

from coremetry.app import CoremetryApp
from coremetry.server import hypercorn_config

JsonObject = dict[str, object]
RequestId = int | str


# ---- JSON-RPC 2.0 messages -----------------------------------------------------------------


def request(
    request_id: RequestId, method: str, params: Mapping[str, object] | None = None
) -> JsonObject:
    """A JSON-RPC 2.0 request object; ``params`` is left out when ``None``."""
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = dict(params)
    return message


def notification(method: str, params: Mapping[str, object] | None = None) -> JsonObject:
    """A JSON-RPC 2.0 notification (no ``id``); ``params`` is left out when ``None``."""
    message: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = dict(params)
    return message


def call(
    request_id: RequestId, tool: str, arguments: Mapping[str, object], **meta: object
) -> JsonObject:
    """A ``tools/call`` request; keyword arguments become ``params._meta`` (when any)."""
    params: JsonObject = {"name": tool, "arguments": dict(arguments)}
    if meta:
        params["_meta"] = dict(meta)
    return request(request_id, "tools/call", params)


# ---- JSON shapes ---------------------------------------------------------------------------


def as_object(value: object) -> JsonObject:
    """``value`` as a JSON object (string keys); asserts it is one."""
    assert isinstance(value, dict), f"not a JSON object: {value!r}"
    return {str(k): v for k, v in value.items()}


def as_list(value: object) -> list[object]:
    """``value`` as a JSON array; asserts it is one."""
    assert isinstance(value, list), f"not a JSON array: {value!r}"
    return list(value)


# ---- sockets -------------------------------------------------------------------------------


async def upgrade_by_hand(
    host_port: str, path: str, headers: Mapping[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """Send a WebSocket upgrade request (offering ``mcp``) over raw TCP and read the answer.

    Written by hand, not with trio-websocket: a refused handshake leaves no stream open, an
    accepted one (101) is simply dropped, and any ``Host`` can be sent.

    Args:
        host_port: ``host:port`` to connect to (also the default ``Host`` field).
        path: The request target, query included.
        headers: Fields added to (or replacing) the upgrade request's own.

    Returns:
        The status code, the response's header fields (names lowercased) and its body
        (``Content-Length`` bytes; empty for a 101).
    """
    host, port = host_port.rsplit(":", 1)
    fields = {
        "host": host_port,
        "upgrade": "websocket",
        "connection": "Upgrade",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "sec-websocket-version": "13",
        "sec-websocket-protocol": "mcp",
        **headers,
    }
    request_head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request_head.encode("latin-1") + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            assert chunk, f"the connection closed before a response: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ")[1])
        received: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            received[name.strip().lower()] = value.strip()
        length = int(received.get("content-length", "0")) if status != 101 else 0
        while len(body) < length:
            chunk = await stream.receive_some()
            assert chunk, "the connection closed in the middle of the body"
            body += chunk
    return status, received, body


@asynccontextmanager
async def open_app_server(app: CoremetryApp) -> AsyncIterator[str]:
    """Serve a test-built ``app`` with hypercorn (as ``serve`` does) for the block.

    Yields:
        The base URL bound (``http://127.0.0.1:<port>``, port from the app's config, 0 for any).
        Leaving the block sets ``app.shutting_down`` and waits for hypercorn to stop.
    """
    stop = trio.Event()

    async def trigger() -> None:
        await stop.wait()
        app.shutting_down.set()

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(hypercorn_serve, app, hypercorn_config(app.config), shutdown_trigger=trigger)
        )
        try:
            yield binds[0]
        finally:
            stop.set()
