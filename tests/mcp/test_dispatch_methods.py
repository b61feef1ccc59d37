"""The method table: one typed ``MethodSpec`` per method, registered with ``Server.add_method``.

A method registered this way is routed like the built-in ones: its params decode into its
Struct (a bad one is ``-32602`` naming the field), its era decides where it exists, and a gated
one runs as a :class:`PendingCall` registered under its id.
"""

import json
from typing import Literal

import msgspec
import trio

from coremetry.mcp import Connection, MethodSpec, PendingCall, Reply, Server
from coremetry.mcp.framing import Request, result_reply
from coremetry.mcp.wire import EmptyResult, RequestParams

HANDSHAKE = "2025-11-25"
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class ShoutParams(RequestParams, kw_only=True):
    word: str


def _message(method: str, params: dict[str, object], request_id: int = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode()


def _server(
    *, eras: Literal["both", "handshake"] = "both", gated: bool = False
) -> tuple[Server, list[str]]:
    server = Server("t", "1")
    heard: list[str] = []

    def shout(request: Request, params: ShoutParams, conn: Connection) -> Reply | PendingCall:
        heard.append(params.word)
        result = EmptyResult()
        result.meta = {"shouted": params.word.upper()}
        reply = result_reply({}, request, result)
        if not gated:
            return reply

        async def body() -> Reply:
            await trio.lowlevel.checkpoint()
            return reply

        return PendingCall(conn, request.id, body)

    if eras == "both":
        server.add_method("x/shout", MethodSpec(ShoutParams, shout, eras="both", gated=gated))
    else:
        server.add_method("x/shout", MethodSpec(ShoutParams, shout, eras="handshake"))
    return server, heard


def _decode(reply: Reply | None) -> dict[str, object]:
    assert reply is not None
    decoded = msgspec.json.decode(reply.body)
    assert isinstance(decoded, dict)
    return decoded


async def test_a_registered_method_is_answered_with_its_decoded_params() -> None:
    server, heard = _server()
    conn = Connection(protocol_version=HANDSHAKE)
    answer = _decode(await server.handle(_message("x/shout", {"word": "hi"}), conn))
    assert answer["id"] == 1
    assert answer["result"] == {"_meta": {"shouted": "HI"}}
    assert heard == ["hi"]


async def test_bad_params_of_a_registered_method_name_the_field() -> None:
    server, heard = _server()
    conn = Connection(protocol_version=HANDSHAKE)
    answer = _decode(await server.handle(_message("x/shout", {"word": 5}), conn))
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32602
    assert "$.word" in str(error["message"])
    assert heard == []


async def test_a_handshake_only_method_is_not_found_in_the_stateless_era() -> None:
    server, heard = _server(eras="handshake")
    reply = await server.handle(
        _message("x/shout", {"word": "hi", "_meta": STATELESS_META}), Connection()
    )
    assert reply is not None
    assert reply.http_status == 404
    error = _decode(reply)["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32601
    assert heard == []


async def test_a_gated_method_is_registered_in_flight_and_refuses_a_reused_id() -> None:
    server, _ = _server(gated=True)
    conn = Connection(protocol_version=HANDSHAKE)
    pending = server.receive(_message("x/shout", {"word": "a"}, request_id=3), conn)
    assert isinstance(pending, PendingCall)
    assert conn.in_flight == {3: pending}
    again = _decode(await server.handle(_message("x/shout", {"word": "b"}, request_id=3), conn))
    error = again["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32600
    assert _decode(await pending.run())["result"] == {"_meta": {"shouted": "A"}}
    assert conn.in_flight == {}
