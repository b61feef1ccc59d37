"""The FLOOR for ``bench/http_echo.py``: a bare ASGI callable on hypercorn's trio worker.

Run: ``python bench/http_floor_server.py --port P``.

Served as ``coremetry serve`` serves its app (hypercorn's trio worker, ``hypercorn.trio.serve``
here where ours runs its contained copy of it, with ``coremetry.server.hypercorn_config``: access
log off, same limits; the same garbage-collector setting,
``coremetry.http_worker.tune_garbage_collector``), but the app does the least
any MCP server on hypercorn + trio + msgspec must do per request: read the body, decode the
JSON-RPC request with msgspec into small Structs, and answer 200 with a canned
``CallToolResult`` carrying the request's id. No header checks, no routing, no auth, no cancel
scope. A request whose ``params._meta`` names a protocol version (2026-07-28) gets the
per-request-era result (``resultType``, ``_meta.serverInfo``), the same bytes ours sends.
"""

import argparse
import sys
from typing import Final

import msgspec
import trio
from hypercorn.trio import serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from msgspec import UNSET, Raw, Struct, UnsetType

from coremetry.config import load_config
from coremetry.http_worker import tune_garbage_collector
from coremetry.server import hypercorn_config

ECHO_TEXT: Final = "hello, coremetry"


class _Args(Struct):
    text: str


class _Meta(Struct):
    protocol_version: str | UnsetType = msgspec.field(
        default=UNSET, name="io.modelcontextprotocol/protocolVersion"
    )


class _Params(Struct):
    name: str
    arguments: _Args
    meta: _Meta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class _Request(Struct):
    jsonrpc: str
    id: int | str
    method: str
    params: _Params


class _Response(Struct):
    id: int | str
    result: Raw
    jsonrpc: str = "2.0"


_DECODER: Final = msgspec.json.Decoder(_Request)
_ENCODER: Final = msgspec.json.Encoder()
_HANDSHAKE_RESULT: Final = Raw(
    msgspec.json.encode({"content": [{"type": "text", "text": ECHO_TEXT}]})
)
_STATELESS_RESULT: Final = Raw(
    msgspec.json.encode(
        {
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "floor", "version": "0"}},
            "content": [{"type": "text", "text": ECHO_TEXT}],
        }
    )
)
_JSON: Final = b"application/json"


async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """The floor ASGI app: any POST body is a tools/call echo; anything else is a 400."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    chunks: list[bytes] = []
    while True:
        event = await receive()
        if event["type"] != "http.request":
            return  # the client went away
        chunks.append(event.get("body", b""))
        if not event.get("more_body", False):
            break
    status = 200
    try:
        request = _DECODER.decode(b"".join(chunks))
    except (msgspec.DecodeError, msgspec.ValidationError):
        status, body = 400, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}'
    else:
        meta = request.params.meta
        stateless = not isinstance(meta, UnsetType) and not isinstance(
            meta.protocol_version, UnsetType
        )
        result = _STATELESS_RESULT if stateless else _HANDSHAKE_RESULT
        body = _ENCODER.encode(_Response(id=request.id, result=result))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())],
            "trailers": False,
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve until killed."""
    parser = argparse.ArgumentParser(description="Floor ASGI echo server (benchmark baseline).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    config = load_config(overrides={"http": {"host": str(args.host), "port": int(args.port)}})
    # The same garbage-collector setting as ``coremetry serve`` (the floor of *our* stack).
    tune_garbage_collector()
    try:
        trio.run(serve, app, hypercorn_config(config))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
