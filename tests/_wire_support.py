"""JSON-RPC message builders, JSON shape checks and raw-socket helpers shared by transport tests.

Imported as ``from _wire_support import ...``: pytest puts ``tests/`` on ``sys.path`` (there is
no ``tests/__init__.py``), the way ``conftest`` is imported.
"""

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import trio
from conftest import check_emitted

from coremetry.app import CoremetryApp
from coremetry.http_worker import serve_http
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


# ---- server-sent events -------------------------------------------------------------------


@dataclass(frozen=True)
class SseItem:
    """One SSE block: an event (``event``/``data``) or a comment (``event`` is ``None``)."""

    event: str | None
    data: str


class SseReader:
    """Parses the blocks of one SSE response as its body arrives.

    A subclass supplies the body through :meth:`next_chunk`. Each event must be exactly an
    ``event:`` line and one ``data:`` line; a block of ``:`` lines is a comment.

    Args:
        revision: The MCP revision ``message`` events are validated against by default.
        check_line_breaks: Also assert no line holds ``\\r``, NEL, LS or PS (characters
            another line splitter would break the line at).
    """

    def __init__(self, revision: str, *, check_line_breaks: bool = False) -> None:
        self._revision = revision
        self._check_line_breaks = check_line_breaks
        self._buffer = b""

    async def next_chunk(self) -> bytes | None:
        """The next piece of the response body, ``None`` once it has ended."""
        raise NotImplementedError

    async def next_item(self) -> SseItem | None:
        """The next SSE block, or ``None`` once the response has ended (nothing left over)."""
        while b"\n\n" not in self._buffer:
            chunk = await self.next_chunk()
            if chunk is None:
                assert self._buffer == b"", self._buffer
                return None
            self._buffer += chunk
        block, self._buffer = self._buffer.split(b"\n\n", 1)
        text = block.decode("utf-8")
        lines = text.split("\n")
        if all(line.startswith(":") for line in lines):
            return SseItem(None, "\n".join(line[1:].strip() for line in lines))
        fields = [line.split(": ", 1) for line in lines]
        assert [name for name, _ in fields] == ["event", "data"], text  # one safe data line
        if self._check_line_breaks:
            for line in lines:
                assert not set(line) & {"\r", "\x85", "\u2028", "\u2029"}, line
        return SseItem(fields[0][1], fields[1][1])

    async def next_event(self) -> SseItem:
        """The next event, skipping comments; asserts the stream has not ended."""
        while True:
            item = await self.next_item()
            assert item is not None, "the stream ended"
            if item.event is not None:
                return item

    async def next_message(self, method: str | None, revision: str | None = None) -> JsonObject:
        """The next ``message`` event, validated as the answer to ``method`` (or not).

        Args:
            method: The method of the request it answers; ``None`` for anything else.
            revision: The schema revision; the reader's own when ``None``.
        """
        item = await self.next_event()
        assert item.event == "message", item
        message = json.loads(item.data)
        check_emitted(message, revision or self._revision, method)
        assert isinstance(message, dict)
        return message

    async def rest(self) -> list[SseItem]:
        """Every block until the response ends."""
        items: list[SseItem] = []
        while (item := await self.next_item()) is not None:
            items.append(item)
        return items


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
        headers: Fields added to (or replacing) the upgrade request's own; an empty value
            removes the field.

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
    lines = [f"{name}: {value}\r\n" for name, value in fields.items() if value]  # "" omits
    request_head = f"GET {path} HTTP/1.1\r\n" + "".join(lines)
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
        Leaving the block begins the app's drain (as ``serve`` does: sessions answer their
        calls in flight, then end), sets ``app.shutting_down`` and waits for hypercorn to stop.
    """
    stop = trio.Event()

    async def trigger() -> None:
        await stop.wait()
        app.drain.begin(app.config.http.graceful_shutdown_s)
        app.shutting_down.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(app.drain.run)
        binds: list[str] = await nursery.start(
            partial(serve_http, app, hypercorn_config(app.config), shutdown_trigger=trigger)
        )
        try:
            yield binds[0]
        finally:
            stop.set()
