"""Adversarial connections: nothing one client does ends the server or disturbs another.

Each test runs the real server (``coremetry.server.serve``: the contained hypercorn worker and
the whole app, the fixture tools registered) on ``127.0.0.1:0`` in the test's own nursery, does
something a broken or hostile client does — over raw TCP where the bytes must be malformed or
cut short, with trio-websocket / httpx otherwise — and then checks that the server still serves
a normal MCP call over Streamable HTTP and over WebSocket. Had the server crashed, ``serve``
would have raised out of the nursery and failed the test.

Loops are bounded, everything is loopback, and nothing asserts on timings: ``trio.fail_after``
only turns a hang into a failure.

Issue 13, item 1 (the process ending with ``trio.BusyResourceError`` after a few WebSockets
without the ``mcp`` subprotocol) is :func:`test_websocket_without_the_mcp_subprotocol_repeated_fast`
and, for the race itself on an accepted socket,
:func:`test_closes_crossing_on_an_accepted_websocket_repeated`; the minimal reproduction against
hypercorn's own class is in ``test_http_worker.py``.
"""

import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final

import httpx
import pytest
import trio
from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent, ConnectionState, HTTPScope
from trio_websocket import ConnectionClosed, wrap_client_stream

from coremetry.app import CoremetryApp
from coremetry.config import load_config
from coremetry.server import build_mcp_server, serve

LIMIT_S: Final = 60.0
"""Generous bound of every test: a hang fails, a slow machine does not."""

MAX_MESSAGE_BYTES: Final = 4096
"""The server's WebSocket message cap in these tests (frames above it are refused)."""

WS_PATH: Final = "/api/mcp/ws"
VERSION: Final = "2025-11-25"
JSON_HEADERS: Final = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": VERSION,
}
UPGRADE_KEY: Final = "dGhlIHNhbXBsZSBub25jZQ=="


@dataclass(frozen=True)
class Live:
    """A running server: where to reach it."""

    host: str
    port: int

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


@asynccontextmanager
async def live_server() -> AsyncIterator[Live]:
    """Run ``serve`` (fixture tools, small WebSocket cap) for the block."""
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "websocket": {"max_message_bytes": MAX_MESSAGE_BYTES},
        },
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        base: str = await nursery.start(
            partial(serve, config, build_mcp_server(fixture=True), announce=False, shutdown=stop)
        )
        host, port = base.removeprefix("http://").rsplit(":", 1)
        try:
            yield Live(host, int(port))
        finally:
            stop.set()


# ---- what "still serving" means --------------------------------------------------------------


async def assert_serves(live: Live) -> None:
    """A normal ``tools/call`` over Streamable HTTP and a ``ping`` over WebSocket succeed."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "still here"}},
    }
    async with httpx.AsyncClient(timeout=LIMIT_S) as client:
        response = await client.post(f"{live.base}/api/mcp", json=body, headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["id"] == 1
    assert answer["result"]["content"][0]["text"] == "still here"

    stream = await trio.open_tcp_stream(live.host, live.port)
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, f"{live.host}:{live.port}", WS_PATH, subprotocols=["mcp"]
        )
        try:
            await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            assert json.loads(await ws.get_message()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        finally:
            await ws.aclose()
            await stream.aclose()


# ---- raw bytes -----------------------------------------------------------------------------


def upgrade_request(subprotocol: str | None = "mcp", path: str = WS_PATH) -> bytes:
    """A WebSocket upgrade request; ``subprotocol=None`` offers none."""
    fields = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {UPGRADE_KEY}",
        "Sec-WebSocket-Version: 13",
    ]
    if subprotocol is not None:
        fields.append(f"Sec-WebSocket-Protocol: {subprotocol}")
    return ("\r\n".join(fields) + "\r\n\r\n").encode()


def frame(opcode: int, payload: bytes = b"", *, declared_length: int | None = None) -> bytes:
    """One masked client frame (FIN set); ``declared_length`` lies about the payload length."""
    length = len(payload) if declared_length is None else declared_length
    if length < 126:
        header = bytes([0x80 | opcode, 0x80 | length])
    elif length < 1 << 16:
        header = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack("!H", length)
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack("!Q", length)
    mask = os.urandom(4)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


TEXT, BINARY, CLOSE, PING = 0x1, 0x2, 0x8, 0x9


def close_frame(code: int = 1000) -> bytes:
    return frame(CLOSE, struct.pack("!H", code))


async def connect(live: Live) -> trio.SocketStream:
    return await trio.open_tcp_stream(live.host, live.port)


async def read_head(stream: trio.SocketStream) -> tuple[int, bytes]:
    """The status code of the response and whatever bytes followed its head."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


async def read_to_end(stream: trio.SocketStream) -> bytes:
    """Everything until the server closes (or resets) the connection."""
    data = b""
    try:
        while chunk := await stream.receive_some():
            data += chunk
    except trio.BrokenResourceError:
        pass  # a reset is an end too
    return data


def reset(stream: trio.SocketStream) -> None:
    """Close with a TCP RST (SO_LINGER 0): the peer sees a reset, not an orderly FIN."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


# ---- WebSocket -----------------------------------------------------------------------------


async def test_websocket_without_the_mcp_subprotocol_repeated_fast() -> None:
    """Issue 13, item 1: refused during the handshake (400), each time, and nothing breaks."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for offered in [None, "graphql-ws"] * 25:
                stream = await connect(live)
                async with stream:
                    await stream.send_all(upgrade_request(offered))
                    status, _ = await read_head(stream)
                    assert status == 400
                    await stream.send_all(close_frame())  # as an eager client would
            await assert_serves(live)


async def test_closes_crossing_on_an_accepted_websocket_repeated() -> None:
    """The server closes (1003 for a binary frame) while the client's own close is on the way:
    hypercorn's reader answers the client's close as the app's task closes the connection."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(50):
                stream = await connect(live)
                async with stream:
                    await stream.send_all(upgrade_request())
                    status, _ = await read_head(stream)
                    assert status == 101
                    await stream.send_all(frame(BINARY, b"\x00") + close_frame())
                    await read_to_end(stream)
            await assert_serves(live)


@pytest.mark.parametrize("when", ["before the request ends", "before the answer", "at the 101"])
async def test_websocket_closed_during_the_handshake(when: str) -> None:
    request = upgrade_request()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(20):
                stream = await connect(live)
                if when == "before the request ends":
                    await stream.send_all(request[: len(request) // 2])
                    reset(stream)
                    continue
                await stream.send_all(request)
                if when == "at the 101":
                    await stream.receive_some(1)
                reset(stream)
            await assert_serves(live)


async def test_websocket_closed_while_the_server_sends() -> None:
    """Many requests pipelined, then a reset while their answers are being written."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(10):
                stream = await connect(live)
                await stream.send_all(upgrade_request())
                status, _ = await read_head(stream)
                assert status == 101
                await stream.send_all(frame(TEXT, ping) * 200)
                await stream.receive_some(1)  # answers have started
                reset(stream)
            await assert_serves(live)


async def test_ping_flood() -> None:
    """Thousands of pings without reading a pong; then the client leaves."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            stream = await connect(live)
            await stream.send_all(upgrade_request())
            status, _ = await read_head(stream)
            assert status == 101
            flood = frame(PING, b"flood") * 500
            with trio.move_on_after(5):  # the server may stop reading once its pongs back up
                for _ in range(20):
                    await stream.send_all(flood)
            await assert_serves(live)  # meanwhile, others are served
            reset(stream)
            await assert_serves(live)


@pytest.mark.parametrize("kind", ["text over the cap", "declared 2**62 bytes", "fragments"])
async def test_oversized_frames(kind: str) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            stream = await connect(live)
            async with stream:
                await stream.send_all(upgrade_request())
                status, _ = await read_head(stream)
                assert status == 101
                if kind == "text over the cap":
                    await stream.send_all(frame(TEXT, b"x" * (MAX_MESSAGE_BYTES * 4)))
                elif kind == "declared 2**62 bytes":
                    await stream.send_all(frame(TEXT, b"x" * 1024, declared_length=1 << 62))
                else:  # a message cut in continuation frames that never ends
                    first = frame(TEXT, b"x" * 1024)
                    await stream.send_all(bytes([first[0] & 0x7F]) + first[1:])  # FIN clear
                    for _ in range(MAX_MESSAGE_BYTES // 1024 + 2):
                        await stream.send_all(bytes([0x00]) + frame(0, b"x" * 1024)[1:])
                if kind != "declared 2**62 bytes":
                    # Refused with 1009 (message too big). (hypercorn stops parsing that
                    # read's frames after the 1009, so after fragments our close answer may sit
                    # unparsed: we close the TCP connection rather than wait for the server's.)
                    data = b""
                    while len(data) < 4:
                        data += await stream.receive_some()
                    assert data[:1] == b"\x88"
                    assert struct.unpack("!H", data[2:4])[0] == 1009
                    await stream.send_all(close_frame(1009))
            await assert_serves(live)


async def test_garbage_after_the_upgrade() -> None:
    """Unmasked, reserved-bit and unknown-opcode frames: the socket is failed, nothing else."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for bad in (b"\x81\x05hello", b"\xf1\x80abcd", b"\x83\x80abcd", os.urandom(64)):
                stream = await connect(live)
                async with stream:
                    await stream.send_all(upgrade_request())
                    status, _ = await read_head(stream)
                    assert status == 101
                    await stream.send_all(bad)
                    with trio.move_on_after(5):  # only against a hang
                        await read_to_end(stream)
            await assert_serves(live)


async def test_websocket_message_then_vanish_mid_call() -> None:
    """A call is running when the client disappears; the call is cancelled, nothing else."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "sleep_ms", "arguments": {"ms": 1000}},
    }
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(5):
                stream = await connect(live)
                await stream.send_all(upgrade_request())
                status, _ = await read_head(stream)
                assert status == 101
                await stream.send_all(frame(TEXT, json.dumps(call).encode()))
                reset(stream)
            await assert_serves(live)


# ---- HTTP and SSE ----------------------------------------------------------------------------


def post_head(path: str, length: int, accept: str = "application/json, text/event-stream") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Accept: {accept}\r\nMCP-Protocol-Version: {VERSION}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def test_http_body_aborted_midway() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for path in ("/api/mcp", "/api/mcp/messages?sessionId=x", "/api/tools/echo", "/x"):
                for _ in range(5):
                    stream = await connect(live)
                    await stream.send_all(post_head(path, 10_000) + b'{"jsonrpc": "2.0", "id"')
                    reset(stream)
            await assert_serves(live)


async def test_http_body_ended_early_with_a_half_close() -> None:
    """The client shuts its write side before the declared body is complete."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(10):
                stream = await connect(live)
                async with stream:
                    await stream.send_all(post_head("/api/mcp", 10_000) + b"{")
                    await stream.send_eof()
                    with trio.move_on_after(10):  # only against a hang; the server closes
                        await read_to_end(stream)
            await assert_serves(live)


async def test_streamable_http_event_stream_aborted_midway() -> None:
    """``sleep_ms`` with a progress token answers as SSE; the client resets mid-stream."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "sleep_ms",
                "arguments": {"ms": 500},
                "_meta": {"progressToken": "p"},
            },
        }
    ).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(10):
                stream = await connect(live)
                await stream.send_all(post_head("/api/mcp", len(body)) + body)
                status, _ = await read_head(stream)
                assert status == 200
                await stream.receive_some()  # the stream has started
                reset(stream)
            await assert_serves(live)


async def test_legacy_sse_stream_aborted_then_posted_to() -> None:
    request = b"GET /api/mcp/sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for _ in range(10):
                stream = await connect(live)
                await stream.send_all(request)
                status, rest = await read_head(stream)
                assert status == 200
                data = rest
                while b"sessionId=" not in data or b"\n\n" not in data:
                    data += await stream.receive_some()
                endpoint = data.split(b"data: ", 1)[1].split(b"\n", 1)[0].decode().strip()
                reset(stream)
                # Posting to the session whose stream just vanished: answered, never a crash.
                async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                    response = await client.post(
                        f"{live.base}{endpoint}",
                        content=ping,
                        headers={"content-type": "application/json"},
                    )
                assert response.status_code < 500, response.text
            await assert_serves(live)


async def test_a_client_that_never_reads_a_large_answer_does_not_block_others() -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "big_output", "arguments": {"size_bytes": 8 * 1024 * 1024}},
        }
    ).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            stream = await connect(live)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await stream.send_all(post_head("/api/mcp", len(body), "application/json") + body)
            await assert_serves(live)  # the stalled writer holds nothing others need
            reset(stream)
            await assert_serves(live)


async def test_half_open_connections_and_idle_sockets() -> None:
    """Connections that send nothing, or only shut their write side, are closed by the server
    (hypercorn's keep-alive timeout) and hold nothing others need meanwhile."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            idle = [await connect(live) for _ in range(10)]
            half_closed = [await connect(live) for _ in range(10)]
            for stream in half_closed:
                await stream.send_eof()
            await assert_serves(live)
            for stream in idle + half_closed:
                async with stream:
                    assert await read_to_end(stream) == b""  # the server closed it
            await assert_serves(live)


async def test_slow_headers_are_cut_off() -> None:
    """Slowloris: headers trickled a few bytes at a time never complete; the server closes
    those connections (keep-alive timeout), and serves others meanwhile."""
    head = post_head("/api/mcp", 2) + b"{}"

    async def trickle(stream: trio.SocketStream, closed: list[bool]) -> None:
        try:
            for i in range(len(head) - 1):  # never the last byte
                await stream.send_all(head[i : i + 1])
                await trio.sleep(0.2)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed.append(True)  # the server gave up on us

    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            streams = [await connect(live) for _ in range(10)]
            closed: list[bool] = []
            async with trio.open_nursery() as nursery:
                for stream in streams:
                    nursery.start_soon(trickle, stream, closed)
                await assert_serves(live)
                for stream in streams:
                    async with stream:
                        await read_to_end(stream)  # ends when the server closes it
                nursery.cancel_scope.cancel()
            await assert_serves(live)


async def test_request_smuggling_shapes_and_garbage() -> None:
    """Malformed request heads (bad framing, binary garbage, huge header lines): answered with
    4xx or closed, never fatal."""
    shapes = [
        b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST /api/mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 200_000 + b"\r\n\r\n",
        os.urandom(512),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64),  # a TLS hello
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(64),
    ]
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            for shape in shapes:
                stream = await connect(live)
                async with stream:
                    try:
                        await stream.send_all(shape)
                    except trio.BrokenResourceError:
                        continue  # refused before we finished: fine
                    with trio.move_on_after(10):  # only against a hang
                        await read_to_end(stream)
            await assert_serves(live)


async def test_the_suite_itself_sees_a_dead_server() -> None:
    """Guard: :func:`assert_serves` fails when nothing listens (so the checks above can fail)."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            pass
        with pytest.raises((httpx.ConnectError, OSError, ConnectionClosed)):
            await assert_serves(live)


async def test_a_failing_call_watcher_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    """The Streamable HTTP watcher of a long call runs in a trio *system* task, where an
    exception would end the process; here ``receive`` breaks under it (as a buggy server
    layer could), and only that call ends."""
    app = CoremetryApp(load_config(environ={}), build_mcp_server(fixture=True))
    transport = app.http_routes["/api/mcp"]
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "sleep_ms", "arguments": {"ms": 1000}},
        }
    ).encode()
    delivered = False

    async def receive() -> ASGIReceiveEvent:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        raise RuntimeError("a broken receive")

    sent: list[ASGISendEvent] = []

    async def send(event: ASGISendEvent) -> None:
        sent.append(event)

    scope: HTTPScope = {
        "type": "http",
        "asgi": {"spec_version": "2.3", "version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/mcp",
        "raw_path": b"/api/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            *((k.encode(), v.encode()) for k, v in JSON_HEADERS.items()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": ConnectionState({}),
        "extensions": {},
    }
    with trio.fail_after(LIMIT_S):
        await transport(scope, receive, send)
    assert sent == []  # the call was cancelled: nothing written to a client we cannot watch
    logged = [r for r in caplog.records if "call watcher failed (incident" in r.getMessage()]
    assert len(logged) == 1
    assert "RuntimeError: a broken receive" in caplog.text  # with its traceback


async def test_shutdown_completes_while_a_client_never_reads() -> None:
    """hypercorn writes in a shielded scope: a client that stops reading used to block the
    graceful shutdown forever (SIGTERM never ended the process). Its socket is now closed at
    the graceful deadline and ``serve`` returns."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "big_output", "arguments": {"size_bytes": 8 * 1024 * 1024}},
        }
    ).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            stream = await connect(live)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await stream.send_all(post_head("/api/mcp", len(body), "application/json") + body)
            status, _ = await read_head(stream)  # the answer has started; we read no more
            assert status == 200
        # Leaving live_server() stopped the server and waited for serve() to return.
        await stream.aclose()
