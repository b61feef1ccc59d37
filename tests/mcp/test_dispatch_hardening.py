"""Inputs found by trying to break the server: deep nesting, line separators, visible counts."""

import json

import pytest
import trio

from coremetry.mcp import Caller, Connection, codes
from coremetry.mcp.wire import line_safe
from coremetry.server import build_mcp_server

DEEP = 5000


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"a":' * DEEP + b"1" + b"}" * DEEP,
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":'
        + b"[" * DEEP
        + b"]" * DEEP
        + b"}}",
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":'
        b'{"text":' + b"[" * DEEP + b"]" * DEEP + b"}}}",
    ],
    ids=["array", "object", "params", "arguments"],
)
async def test_deeply_nested_json_is_a_parse_error_and_the_server_carries_on(body: bytes) -> None:
    server = build_mcp_server(fixture=True)
    conn = Connection()
    reply = await server.handle(body, conn)
    assert reply is not None
    answer = json.loads(reply.body)
    assert answer["error"]["code"] in (codes.PARSE_ERROR, codes.INVALID_REQUEST)
    after = await server.handle(b'{"jsonrpc":"2.0","id":9,"method":"ping"}', conn)
    assert after is not None
    assert json.loads(after.body) == {"jsonrpc": "2.0", "id": 9, "result": {}}


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_line_safe_escapes_separators_and_keeps_the_meaning(char: str) -> None:
    raw = json.dumps({"text": f"a{char}b"}, ensure_ascii=False).encode()
    safe = line_safe(raw)
    assert char.encode() not in safe
    assert len(safe.decode().splitlines()) == 1
    assert json.loads(safe) == {"text": f"a{char}b"}


async def test_echo_with_line_separators_stays_one_line_on_stdio() -> None:
    from coremetry.transports.stdio import serve_stdio

    server = build_mcp_server(fixture=True)
    in_send, in_recv = trio.testing.memory_stream_one_way_pair()
    out_send, out_recv = trio.testing.memory_stream_one_way_pair()
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x\u2028y\u2029z\u0085"}},
    }
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: serve_stdio(
                    server,
                    caller=Caller(subject="t", role="viewer"),
                    stdin=in_recv,
                    stdout=out_send,
                )
            )
            await in_send.send_all(json.dumps(request).encode() + b"\n")
            await in_send.aclose()
            data = b""
            while not data.endswith(b"\n"):
                data += await out_recv.receive_some()
    lines = data.decode().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["result"]["content"][0]["text"] == "x\u2028y\u2029z\u0085"


@pytest.mark.parametrize(("role", "tools"), [("viewer", 5), ("admin", 6)])
async def test_server_resource_counts_only_what_the_caller_sees(role: str, tools: int) -> None:
    server = build_mcp_server(fixture=True)
    conn = Connection(caller=Caller(subject="u", role=role))
    listed = await server.handle(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', conn)
    assert listed is not None
    assert len(json.loads(listed.body)["result"]["tools"]) == tools
    reply = await server.handle(
        b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"coremetry://server"}}',
        conn,
    )
    assert reply is not None
    info = json.loads(json.loads(reply.body)["result"]["contents"][0]["text"])
    assert info["tools"] == tools
    assert info["caller"] == {"subject": "u", "role": role}
