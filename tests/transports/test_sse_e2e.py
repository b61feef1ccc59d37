"""End-to-end tests of the legacy HTTP+SSE transport on a real server (hypercorn, real sockets).

The server runs in the test's nursery (:func:`coremetry.server.serve`, port 0). Tests drive it
with httpx (``client.stream("GET", ...)``, events parsed here) and with the official MCP Python
SDK's ``sse_client`` + ``ClientSession`` (through a wire tap). Every message parsed off an SSE
stream is validated against the official schema of the revision in use (``check_emitted``).
Every test is bounded by ``trio.fail_after``; nothing asserts on wall-clock durations.
"""

import json
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import httpx
import msgspec
import trio
from _sdk_support import TapRead, TapWrite, only_text
from _wire_support import SseItem as Item
from _wire_support import SseReader, open_app_server
from conftest import check_emitted
from mcp import ClientSession, types
from mcp.client.sse import sse_client

from coremetry.app import CoremetryApp
from coremetry.config import Config, load_config
from coremetry.http_edge import Headers
from coremetry.mcp import CallContext, Caller, Server, Tool
from coremetry.server import build_mcp_server, serve

JsonObject = dict[str, object]

LIMIT_S = 30.0
"""Generous bound of every test: a hang fails, a slow machine does not."""

REVISION = "2024-11-05"
SSE_PATH = "/api/mcp/sse"
SSE_ACCEPT = {"accept": "text/event-stream"}
PING: JsonObject = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


# ---- the server ----------------------------------------------------------------------------


def make_config(**sse: float) -> Config:
    return load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0, "allowed_hosts": ["mcp.example.com"]},
            "sse": {"keepalive_interval_s": 0.2, **sse},
        },
    )


@dataclass
class Running:
    url: str
    stop: trio.Event


@asynccontextmanager
async def running(server: Server | None = None, **sse: float) -> AsyncIterator[Running]:
    """The real server on a free port; stopped (gracefully) when the block ends."""
    stop = trio.Event()
    mcp = server if server is not None else build_mcp_server(fixture=True)
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            partial(serve, make_config(**sse), mcp, announce=False, shutdown=stop)
        )
        try:
            yield Running(url, stop)
        finally:
            stop.set()


class NoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


class SleepArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How long to sleep, in milliseconds."""

    ms: int


@dataclass
class Tracker:
    started: trio.Event = field(default_factory=trio.Event)
    cancelled: trio.Event = field(default_factory=trio.Event)
    finished: list[str] = field(default_factory=list)


def tracked_server() -> tuple[Server, Tracker]:
    """The fixture server plus ``tracked_sleep_ms``: ``sleep_ms`` that records cancellation."""
    server = build_mcp_server(fixture=True)
    tracker = Tracker()

    async def tracked_sleep(args: SleepArgs, ctx: CallContext) -> str:
        tracker.started.set()
        try:
            slept = 0
            while slept < args.ms:
                await trio.sleep(0.01)
                slept += 10
                await ctx.report_progress(slept, total=args.ms)
        except trio.Cancelled:
            tracker.cancelled.set()
            raise
        tracker.finished.append(f"slept {args.ms} ms")
        return f"slept {args.ms} ms"

    server.register_tool(
        Tool(
            "tracked_sleep_ms",
            "sleep_ms, recording trio.Cancelled (a test tool).",
            SleepArgs,
            tracked_sleep,
            read_budget_s=60.0,
        )
    )
    return server, tracker


# ---- SSE over httpx ------------------------------------------------------------------------


class Events(SseReader):
    """Parses the blocks of one SSE response (httpx) as they arrive."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(REVISION)
        self.response = response
        self._chunks = response.aiter_bytes()

    async def next_chunk(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None


@dataclass
class Opened:
    events: Events
    endpoint: str


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient, headers: Mapping[str, str] = SSE_ACCEPT
) -> AsyncIterator[Opened]:
    """``GET /api/mcp/sse`` and read the ``endpoint`` event (the first one)."""
    async with client.stream("GET", SSE_PATH, headers=dict(headers)) as response:
        assert response.status_code == 200, await response.aread()
        events = Events(response)
        first = await events.next_item()
        assert first is not None
        assert first.event == "endpoint", first
        yield Opened(events, first.data)


async def initialize(client: httpx.AsyncClient, opened: Opened) -> None:
    params: JsonObject = {
        "protocolVersion": REVISION,
        "capabilities": {},
        "clientInfo": {"name": "test-sse-e2e", "version": "0"},
    }
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    assert (await client.post(opened.endpoint, json=init)).status_code == 202
    answer = await opened.events.next_message("initialize")
    result = answer["result"]
    assert isinstance(result, dict)
    assert result["protocolVersion"] == REVISION
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await client.post(opened.endpoint, json=note)).status_code == 202


async def post_until_refused(client: httpx.AsyncClient, endpoint: str) -> httpx.Response:
    """POST pings to a session whose stream the client closed until one is not accepted.

    The server learns of the close asynchronously (TCP FIN, then ``http.disconnect``): 202s
    are tolerated for a moment, bounded by a hang guard, never by an assertion on time.
    """
    with trio.fail_after(5):
        for _ in range(10_000):
            response = await client.post(endpoint, json=PING)
            if response.status_code != 202:
                return response
            await trio.sleep(0.02)
    raise AssertionError("the session was never freed")


def tool_call(request_id: int, name: str, arguments: JsonObject, **meta: object) -> JsonObject:
    params: JsonObject = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = dict(meta)
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def error_code(response: httpx.Response) -> object:
    message = response.json()
    check_emitted(message, REVISION)
    assert message["id"] is None, message
    return message["error"]["code"]


# ---- the official SDK client ---------------------------------------------------------------


async def test_sdk_client_over_legacy_sse() -> None:
    inbound: list[JsonObject] = []
    outbound: list[JsonObject] = []
    send_progress, receive_progress = trio.open_memory_channel[float](math.inf)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        send_progress.send_nowait(progress)

    with trio.fail_after(LIMIT_S):
        async with (
            running() as server,
            sse_client(server.url + SSE_PATH) as (read, write),
            ClientSession(TapRead(read, inbound), TapWrite(write, outbound)) as session,
        ):
            init = await session.initialize()
            listed = await session.list_tools()
            echo = await session.call_tool("echo", {"text": "hello \u2028 sse"})
            resource = await session.read_resource("fixture://echo/x")
            prompt = await session.get_prompt("greet", {"name": "ada"})
            slept = await session.call_tool("sleep_ms", {"ms": 100}, progress_callback=on_progress)
            await session.send_ping()
            first_progress = await receive_progress.receive()

    revision = init.protocol_version
    assert init.server_info.name == "coremetry"
    assert {"echo", "sleep_ms"} <= {tool.name for tool in listed.tools}
    assert only_text(echo.content) == "hello \u2028 sse"
    (contents,) = resource.contents
    assert isinstance(contents, types.TextResourceContents)
    assert json.loads(contents.text) == {"text": "x"}
    assert isinstance(prompt.messages[0].content, types.TextContent)
    assert prompt.messages[0].content.text == "Say hello to ada in a plain style."
    assert only_text(slept.content) == "slept 100 ms"
    assert 0 < first_progress <= 100

    # Everything the server sent validates; every request got exactly one answer.
    methods = {m["id"]: str(m["method"]) for m in outbound if "id" in m and "method" in m}
    answered: list[object] = []
    for message in inbound:
        if "method" in message:
            check_emitted(message, revision)
        else:
            answered.append(message["id"])
            check_emitted(message, revision, methods[message["id"]])
    assert sorted(map(str, answered)) == sorted(map(str, methods))
    (sleep_call,) = [
        m for m in outbound if m.get("method") == "tools/call" and "sleep" in json.dumps(m)
    ]
    params = sleep_call["params"]
    assert isinstance(params, dict)
    token = params["_meta"]["progressToken"]
    progress = [
        params
        for m in inbound
        if m.get("method") == "notifications/progress"
        and isinstance(params := m["params"], dict)
        and params["progressToken"] == token
    ]
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))
    assert values[-1] == 100


# ---- B01: POSTs that have no live session --------------------------------------------------


async def test_b01_post_after_the_stream_closed_is_404() -> None:
    with trio.fail_after(LIMIT_S):
        async with running() as server, httpx.AsyncClient(base_url=server.url) as client:
            async with open_stream(client) as opened:
                endpoint = opened.endpoint
                await initialize(client, opened)
            # The client closed the stream: the session goes within a moment, never 202 after.
            late = await post_until_refused(client, endpoint)
            missing = await client.post("/api/mcp/messages", json=PING)
            unknown = await client.post("/api/mcp/messages?sessionId=" + "Q" * 32, json=PING)
            empty = await client.post("/api/mcp/messages?sessionId=", json=PING)
    assert late.status_code == 404
    assert error_code(late) == -32600
    assert missing.status_code == 400
    assert unknown.status_code == 404
    assert empty.status_code == 400
    for response in (missing, unknown, empty):
        error_code(response)


# ---- B03: headers, endpoint, prefix, heartbeat ---------------------------------------------


async def test_b03_stream_headers_prefix_and_keepalive() -> None:
    headers = {
        **SSE_ACCEPT,
        "host": "mcp.example.com",
        "x-forwarded-proto": "https",
        "x-forwarded-host": "mcp.example.com",
        "x-forwarded-prefix": "/proxy",
    }
    with trio.fail_after(LIMIT_S):
        async with (
            running() as server,
            httpx.AsyncClient(base_url=server.url) as client,
            open_stream(client, headers) as opened,
        ):
            response = opened.events.response
            assert response.headers["content-type"] == "text/event-stream"
            assert "no-cache" in response.headers["cache-control"]
            assert response.headers["x-accel-buffering"] == "no"
            assert "content-length" not in response.headers
            endpoint = opened.endpoint
            # Root-relative with the public prefix: no scheme, no host, no bind address.
            path, _, query = endpoint.partition("?")
            assert path == "/proxy/api/mcp/messages"
            assert query.startswith("sessionId=")
            # The proxy strips its prefix before forwarding: POST without it.
            opened.endpoint = endpoint.removeprefix("/proxy")
            # Idle: keep-alive comments (not messages) keep coming, the stream survives.
            for _ in range(3):
                item = await opened.events.next_item()
                assert item == Item(None, "ping")
            await initialize(client, opened)
            assert (await client.post(opened.endpoint, json=PING)).status_code == 202
            assert (await opened.events.next_message("ping"))["id"] == 1


# ---- sessions end, and take their calls with them ------------------------------------------


async def test_dropped_client_cancels_the_running_call() -> None:
    server, tracker = tracked_server()
    with trio.fail_after(LIMIT_S):
        async with running(server) as srv, httpx.AsyncClient(base_url=srv.url) as client:
            async with open_stream(client) as opened:
                endpoint = opened.endpoint
                await initialize(client, opened)
                call = tool_call(9, "tracked_sleep_ms", {"ms": 60_000}, progressToken="t9")
                assert (await client.post(endpoint, json=call)).status_code == 202
                progress = await opened.events.next_message(None)
                assert progress["method"] == "notifications/progress"
                # The client drops the stream while the call runs.
            await tracker.cancelled.wait()  # the handler observed trio.Cancelled
            late = await post_until_refused(client, endpoint)
    assert tracker.finished == []
    assert late.status_code == 404


async def test_replies_go_only_to_their_own_session() -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            running() as server,
            httpx.AsyncClient(base_url=server.url) as client,
            open_stream(client) as a,
            open_stream(client) as b,
        ):
            assert a.endpoint != b.endpoint
            await initialize(client, a)
            await initialize(client, b)
            call_a = tool_call(1, "echo", {"text": "for a"})
            call_b = tool_call(1, "echo", {"text": "for b"})
            assert (await client.post(a.endpoint, json=call_a)).status_code == 202
            assert (await client.post(b.endpoint, json=call_b)).status_code == 202
            assert (await client.post(a.endpoint, json=PING)).status_code == 202
            got_a = await a.events.next_message("tools/call")
            got_a_ping = await a.events.next_message("ping")
            got_b = await b.events.next_message("tools/call")
            # b gets nothing more than pings while a answered twice.
            assert await b.events.next_item() == Item(None, "ping")
    assert got_a["result"] == {"content": [{"type": "text", "text": "for a"}]}
    assert got_a_ping["id"] == 1
    assert got_b["result"] == {"content": [{"type": "text", "text": "for b"}]}


async def test_idle_timeout_ends_the_stream() -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            running(session_idle_s=0.5) as server,
            httpx.AsyncClient(base_url=server.url) as client,
        ):
            async with open_stream(client) as opened:
                await initialize(client, opened)
                items = await opened.events.rest()  # returns when the server ends it
            late = await client.post(opened.endpoint, json=PING)
    assert {i.event for i in items} <= {None}  # only keep-alive comments
    assert late.status_code == 404


# Shutdown (the drain: calls in flight answered as events, then the stream ends): test_drain.py.


# ---- policy --------------------------------------------------------------------------------


async def test_origin_policy() -> None:
    evil = {"origin": "https://evil.example"}
    with trio.fail_after(LIMIT_S):
        async with running() as server, httpx.AsyncClient(base_url=server.url) as client:
            refused_get = await client.get(SSE_PATH, headers={**SSE_ACCEPT, **evil})
            browser = {**SSE_ACCEPT, "origin": "http://localhost:3000"}
            async with open_stream(client, browser) as opened:
                allow = opened.events.response.headers["access-control-allow-origin"]
                refused_post = await client.post(opened.endpoint, json=PING, headers=evil)
                await initialize(client, opened)
    assert refused_get.status_code == 403
    assert error_code(refused_get) == -32600
    assert allow == "http://localhost:3000"
    assert refused_post.status_code == 403


async def test_session_cap_is_503() -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            running(max_sessions=1) as server,
            httpx.AsyncClient(base_url=server.url) as client,
            open_stream(client) as opened,
        ):
            over = await client.get(SSE_PATH, headers=SSE_ACCEPT)
            await initialize(client, opened)
    assert over.status_code == 503
    assert error_code(over) == -32000


async def test_session_is_bound_to_the_identity_that_opened_it() -> None:
    async def by_token(headers: Headers) -> Caller:
        token = (headers.get("authorization") or "").removeprefix("Bearer ")
        if not token:
            raise PermissionError("no token")
        return Caller(subject=token, role="viewer", kind="jwt")

    app = CoremetryApp(make_config(), build_mcp_server(fixture=True), authenticate=by_token)
    alice = {"authorization": "Bearer alice"}
    mallory = {"authorization": "Bearer mallory"}
    with trio.fail_after(LIMIT_S):
        async with open_app_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            anonymous = await client.get(SSE_PATH, headers=SSE_ACCEPT)
            async with client.stream("GET", SSE_PATH, headers={**SSE_ACCEPT, **alice}) as resp:
                events = Events(resp)
                first = await events.next_item()
                assert first is not None
                assert first.event == "endpoint"
                endpoint = first.data
                stolen = await client.post(endpoint, json=PING, headers=mallory)
                own = await client.post(endpoint, json=PING, headers=alice)
                answer = await events.next_message("ping")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == (
        f'Bearer realm="coremetry", resource_metadata="{url}'
        '/.well-known/oauth-protected-resource/api/mcp"'
    )
    assert stolen.status_code == 404
    assert own.status_code == 202
    assert answer["id"] == 1
