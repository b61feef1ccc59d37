"""The authentication hook of the Streamable HTTP endpoint: a refusal is a 401 with a challenge."""

from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent, ConnectionState, HTTPScope

from coremetry.http_edge import Headers, HttpPolicy
from coremetry.mcp import Caller
from coremetry.server import build_mcp_server
from coremetry.transports.streamable_http import StreamableHttp

BODY = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def scope() -> HTTPScope:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/mcp",
        "raw_path": b"/api/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": ConnectionState({}),
        "extensions": {},
    }


async def call(handler: StreamableHttp) -> list[ASGISendEvent]:
    sent: list[ASGISendEvent] = []

    async def receive() -> ASGIReceiveEvent:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(event: ASGISendEvent) -> None:
        sent.append(event)

    await handler(scope(), receive, send)
    return sent


async def test_refused_credentials_get_401_with_a_bearer_challenge() -> None:
    async def refuse(headers: Headers) -> Caller:
        raise PermissionError("no credentials")

    handler = StreamableHttp(build_mcp_server(), HttpPolicy(), authenticate=refuse)
    start, body = await call(handler)
    assert start["type"] == "http.response.start"
    assert start["status"] == 401
    assert (b"www-authenticate", b'Bearer realm="coremetry"') in list(start["headers"])
    assert body["type"] == "http.response.body"
    assert b"no credentials" not in body["body"]  # the auth layer's reason is not leaked


async def test_accepted_caller_is_served() -> None:
    async def viewer(headers: Headers) -> Caller:
        return Caller(subject="alice", role="viewer")

    handler = StreamableHttp(build_mcp_server(), HttpPolicy(), authenticate=viewer)
    start, body = await call(handler)
    assert start["type"] == "http.response.start"
    assert start["status"] == 200
    assert body["type"] == "http.response.body"
    assert body["body"] == b'{"jsonrpc":"2.0","id":1,"result":{}}'
