"""HTTP/1.1 keep-alive as a client sees it: no request may leave on a connection being closed.

Issue 13: ``bench/soak.py`` and ``bench/fuzz.py`` met "Server disconnected without sending a
response" / "Connection reset by peer" on POSTs. Two causes, each reproduced here on a real
server (:func:`coremetry.server.serve`, loopback, raw sockets, so every byte is the client's):

1. A refusal sent before the request body was read (a 413 on a declared ``Content-Length``
   over the cap, a 415, …) made hypercorn close the connection after the answer, without
   ``Connection: close``; a client reusing the connection for its next request (httpx's pool
   does, at once) got no answer. Now the rest of the body is read and dropped first and the
   connection stays usable; a body too large to drop gets ``Connection: close``.
2. Idle connections were closed after hypercorn's default 5 s, the idle expiry of httpx's pool
   too: a request leaving on a connection idle for just under 5 s met the close. Now
   ``http.keep_alive_timeout_s`` (75 s by default) keeps the server's idle close after the
   client's.

Every wait is bounded by ``trio.fail_after``; nothing asserts on durations.
"""

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import httpx
import pytest
import trio
from conftest import check_emitted

from coremetry import http_edge
from coremetry.config import load_config
from coremetry.http_edge import UNREAD_BODY_MAX_BYTES
from coremetry.server import build_mcp_server, serve

LIMIT_S = 30.0
"""Generous bound of every test: a hang fails, a slow machine does not."""

CAP = 64 * 1024
"""``http.max_body_bytes`` of these servers (the fuzzer's cap)."""

PING = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'


@dataclass
class Live:
    url: str
    host: str
    port: int


@asynccontextmanager
async def live_server(**http: object) -> AsyncIterator[Live]:
    """The real server (fixture tools) on a free loopback port, for the block."""
    overrides = {"http": {"port": 0, "graceful_shutdown_s": 1.0, "max_body_bytes": CAP, **http}}
    config = load_config(environ={}, overrides=overrides)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            partial(serve, config, build_mcp_server(fixture=True), announce=False, shutdown=stop)
        )
        host, port = url.removeprefix("http://").rsplit(":", 1)
        try:
            yield Live(url, host, int(port))
        finally:
            stop.set()


@asynccontextmanager
async def sse_session(live: Live) -> AsyncIterator[str]:
    """Open a legacy SSE session; yields the path of its messages endpoint."""
    async with (
        httpx.AsyncClient(base_url=live.url, timeout=httpx.Timeout(LIMIT_S, read=None)) as client,
        client.stream("GET", "/api/mcp/sse", headers={"accept": "text/event-stream"}) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                yield line.removeprefix("data:").strip()
                return
    raise AssertionError("the stream ended before its endpoint event")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class RawClient:
    """One client connection, as a pooled HTTP/1.1 client uses it: request, answer, repeat."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.buffer = b""

    def head(self, path: str, length: int, headers: Mapping[str, str]) -> bytes:
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.host}", f"Content-Length: {length}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _more(self) -> None:
        try:
            chunk = await self.stream.receive_some()
        except trio.BrokenResourceError as reset:
            raise AssertionError("the connection was reset before an answer") from reset
        if not chunk:
            raise AssertionError("the server closed the connection without an answer")
        self.buffer += chunk

    async def answer(self) -> Answer:
        """Read one response (with ``Content-Length``) off the connection."""
        while b"\r\n\r\n" not in self.buffer:
            await self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            await self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(int(status_line.split(" ", 2)[1]), headers, body)

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """Send a whole request (with ``Content-Length``) and read its answer."""
        return await self.exchange(self.head(path, len(body), headers) + body)

    async def exchange(self, request: bytes) -> Answer:
        """Send ``request`` (while reading its answer, as a client must) and read the answer."""
        answer: list[Answer] = []

        async def write() -> None:
            # The server may stop reading: what it answered is still read below.
            with contextlib.suppress(trio.BrokenResourceError):
                await self.stream.send_all(request)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            answer.append(await self.answer())
        return answer[0]

    async def at_end(self) -> bool:
        """Whether the server closes the connection now that its answer was read."""
        try:
            return await self.stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True


JSON = {"content-type": "application/json"}
MCP_POST = {**JSON, "accept": "application/json, text/event-stream"}


def over_cap(size: int) -> bytes:
    """A ``ping`` whose body is ``size`` bytes (a padding parameter), ``size`` > the cap."""
    prefix = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"'
    return prefix + b"a" * (size - len(prefix) - 3) + b'"}}'


def refusal(answer: Answer, status: int) -> None:
    """``answer`` is ``status`` with a JSON-RPC error body (id null: the body was not read)."""
    assert answer.status == status, answer
    message = json.loads(answer.body)
    check_emitted(message, "2025-11-25")
    assert message["id"] is None
    assert message["error"]["code"] == -32600
    if status == 413:  # names the cap and the setting that raises it
        assert f"exceeds {CAP} bytes (http.max_body_bytes)" in message["error"]["message"]


# ---- a refusal before the body leaves the connection usable ---------------------------------


@pytest.mark.parametrize(
    ("route", "headers", "status"),
    [
        ("sse", JSON, 413),  # the fuzzer's case: legacy SSE POST over the cap
        ("streamable", MCP_POST, 413),
        ("sse", {"content-type": "text/plain"}, 415),  # refused before the body, not for it
    ],
)
async def test_a_refused_post_body_leaves_the_connection_usable(
    route: str, headers: dict[str, str], status: int
) -> None:
    # 2 MiB: far more than hypercorn buffers for a handler that does not read, so the refusal
    # is sent while the body is still arriving.
    body = over_cap(2 * 1024 * 1024)
    with trio.fail_after(LIMIT_S):
        async with live_server() as live, sse_session(live) as endpoint:
            path = endpoint if route == "sse" else "/api/mcp"
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                answer = await client.post(path, body, headers)
                refusal(answer, status)
                assert "connection" not in answer.headers  # kept alive
                # The client's next request, on the same connection, as a pool sends it.
                again = await client.post(path, PING, JSON if route == "sse" else MCP_POST)
                assert again.status == (202 if route == "sse" else 200), again
                if route == "streamable":
                    assert json.loads(again.body) == {"jsonrpc": "2.0", "id": 7, "result": {}}


async def test_a_body_too_large_to_drop_is_refused_with_connection_close() -> None:
    declared = UNREAD_BODY_MAX_BYTES + 1
    with trio.fail_after(LIMIT_S):
        async with live_server() as live, sse_session(live) as endpoint:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                # Only the head and a little of the body: the answer comes without the rest.
                await client.stream.send_all(client.head(endpoint, declared, JSON) + b"{" * 1000)
                answer = await client.answer()
                refusal(answer, 413)
                assert answer.headers.get("connection", "").lower() == "close"
                assert await client.at_end()


async def test_a_chunked_body_over_the_cap_is_413_then_the_connection_serves() -> None:
    # No Content-Length: the cap is found while reading, and the rest is left unread.
    with trio.fail_after(LIMIT_S):
        async with live_server() as live, sse_session(live) as endpoint:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                body = over_cap(2 * 1024 * 1024)
                head = client.head(endpoint, 0, JSON).replace(
                    b"Content-Length: 0", b"Transfer-Encoding: chunked"
                )
                pieces = [body[i : i + 10_000] for i in range(0, len(body), 10_000)]
                chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
                refusal(await client.exchange(head + chunked), 413)
                again = await client.post(endpoint, PING, JSON)
                assert again.status == 202, again


# ---- idle connections: the client's pool closes them first ----------------------------------


async def test_a_connection_idle_past_httpx_pool_expiry_is_still_served() -> None:
    # httpx keeps an idle pooled connection for 5 s (hypercorn's old default idle close): one
    # reused just before that met the server's close. Idle a little longer than 5 s, then
    # reuse: the server (http.keep_alive_timeout_s, 75 s by default) still answers.
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                await trio.sleep(5.5)
                again = await client.post("/api/mcp", PING, MCP_POST)
                assert again.status == 200, again


async def test_keep_alive_timeout_is_the_configured_one() -> None:
    # A short http.keep_alive_timeout_s: the server closes the idle connection by itself.
    with trio.fail_after(LIMIT_S):
        async with live_server(keep_alive_timeout_s=0.2) as live:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                assert await client.at_end()


async def test_every_answer_restarts_the_keep_alive_period() -> None:
    # Three requests each 0.6 s after the last answer, on a 1 s keep-alive: 1.2 s after the
    # first answer the connection is still served, because each answer starts a new period;
    # idle for longer than one, it is closed.
    with trio.fail_after(LIMIT_S):
        async with live_server(keep_alive_timeout_s=1.0) as live:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                for _ in range(3):
                    assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                    await trio.sleep(0.6)
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                assert await client.at_end()


async def test_shutdown_closes_an_idle_kept_alive_connection_at_once() -> None:
    # The drain does not wait out the 75 s keep-alive of a connection between requests.
    stop = trio.Event()
    config = load_config(
        environ={},
        overrides={"http": {"port": 0, "graceful_shutdown_s": 20.0, "max_body_bytes": CAP}},
    )
    with trio.fail_after(10):  # far below both the keep-alive and the graceful period
        async with trio.open_nursery() as nursery:
            url: str = await nursery.start(
                partial(
                    serve, config, build_mcp_server(fixture=True), announce=False, shutdown=stop
                )
            )
            host, port = url.removeprefix("http://").rsplit(":", 1)
            client = RawClient(await trio.open_tcp_stream(host, int(port)), host)
            async with client.stream:
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                stop.set()
                assert await client.at_end()


async def test_a_slow_request_head_on_a_kept_alive_connection_is_cut_off() -> None:
    # The long keep-alive is for idle connections only: once a request's first bytes arrive,
    # its head must be complete within REQUEST_HEAD_TIMEOUT_S (slowloris), as on a new one.
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
                await client.stream.send_all(b"POST /api/mcp HTTP/1.1\r\nHost: ")
                assert await client.at_end()  # closed long before the 75 s keep-alive


# ---- a body that stops half-way --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/mcp", "sse"])
async def test_a_request_body_that_stalls_is_answered_408_and_its_connection_freed(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    # Headers, then part of the declared body, then nothing (a slow-body attack, or a client
    # gone silent without closing): the connection is not held for ever. The pause allowed is
    # http_edge.BODY_STALL_S (30 s), shortened here so the test does not wait for it.
    monkeypatch.setattr(http_edge, "BODY_STALL_S", 0.5)
    with trio.fail_after(LIMIT_S):
        async with live_server() as live, contextlib.AsyncExitStack() as stack:
            if path == "sse":
                path = await stack.enter_async_context(sse_session(live))
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                await client.stream.send_all(client.head(path, 100, JSON) + b'{"jsonrpc":')
                answer = await client.answer()
                assert answer.status == 408, answer
                assert b"Request Timeout" in answer.body
                assert answer.headers.get("connection", "").lower() == "close"
                assert await client.at_end()
            # The server goes on serving.
            fresh = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with fresh.stream:
                assert (await fresh.post("/api/mcp", PING, MCP_POST)).status == 200


@pytest.mark.parametrize("pieces", [1, 3])
async def test_a_body_sent_in_pieces_within_the_stall_limit_is_served(
    monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    # The head first, then the body in pieces with pauses shorter than the stall limit: each
    # wait is timed (the bytes are not there yet) and none ends the request; then the next
    # request on the same connection, whole, is served as well.
    monkeypatch.setattr(http_edge, "BODY_STALL_S", 2.0)
    with trio.fail_after(LIMIT_S):
        async with live_server() as live:
            client = RawClient(await trio.open_tcp_stream(live.host, live.port), live.host)
            async with client.stream:
                await client.stream.send_all(client.head("/api/mcp", len(PING), MCP_POST))
                step = -(-len(PING) // pieces)
                for start in range(0, len(PING), step):
                    await trio.sleep(0.2)
                    await client.stream.send_all(PING[start : start + step])
                answer = await client.answer()
                assert answer.status == 200, answer
                assert b'"id":7' in answer.body
                assert (await client.post("/api/mcp", PING, MCP_POST)).status == 200
