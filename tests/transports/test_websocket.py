"""End-to-end tests of the WebSocket transport at ``/api/mcp/ws``.

The real server (``coremetry.server.serve``: hypercorn's trio worker and our ASGI app) runs on
``127.0.0.1:0`` in the test's nursery and trio-websocket drives it over a real socket, offering
the ``mcp`` subprotocol. Every frame the server sends is decoded and validated against the
official MCP schema of the negotiated revision (``check_emitted``).

Tests that must see inside the server (what the app sent after the client left, an
authenticator that refuses) serve a :class:`CoremetryApp` with hypercorn directly.

Every test is bounded by ``trio.fail_after``; nothing asserts on timings. Where a test must show
that something does NOT happen (no answer to a cancelled call), it waits for a later event that
would have come after it.
"""

import json
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio
from _wire_support import (
    RequestId,
    as_list,
    as_object,
    call,
    notification,
    open_app_server,
    request,
)
from _wire_support import upgrade_by_hand as raw_upgrade
from conftest import check_emitted
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    ConnectionState,
    Scope,
    WebsocketScope,
)
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    wrap_client_stream,
)

from coremetry.app import CoremetryApp
from coremetry.config import Config, load_config
from coremetry.conformance_fixture.fixture import NoArgs
from coremetry.http_edge import Headers, HttpPolicy
from coremetry.mcp import CallContext, Caller, Connection, Server, Tool, codes
from coremetry.mcp.server import Outcome
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.server import build_mcp_server, serve
from coremetry.transports.websocket import WebSocketTransport

JsonObject = dict[str, object]

LIMIT_S = 30.0
"""Generous bound of every test: a hang fails, a slow machine does not."""

PATH = "/api/mcp/ws"
SMALL_LIMIT = 1024


# ---- messages ------------------------------------------------------------------------------


def echo(text: str) -> JsonObject:
    """``tools/call`` params of the fixture's ``echo``."""
    return {"name": "echo", "arguments": {"text": text}}


def cancel(request_id: RequestId) -> JsonObject:
    return notification("notifications/cancelled", {"requestId": request_id, "reason": "test"})


def tool_text(reply: Mapping[str, object]) -> str:
    """The text of a ``tools/call`` result with one text content item."""
    result = as_object(reply["result"])
    assert result.get("isError") is not True, reply
    content = as_list(result["content"])
    assert len(content) == 1, content
    item = as_object(content[0])
    assert item["type"] == "text"
    text = item["text"]
    assert isinstance(text, str)
    return text


def is_answer(message: Mapping[str, object]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)


# ---- the client side -----------------------------------------------------------------------


@dataclass
class Session:
    """The test's side of one socket: every frame read is decoded and schema-validated."""

    ws: WebSocketConnection
    revision: str = LATEST_HANDSHAKE
    methods: dict[RequestId, str] = field(default_factory=dict)
    seen: list[JsonObject] = field(default_factory=list)

    async def send(self, *messages: Mapping[str, object]) -> None:
        """Send each message as its own text frame, remembering the method of each request."""
        for message in messages:
            request_id, method = message.get("id"), message.get("method")
            if isinstance(request_id, int | str) and isinstance(method, str):
                self.methods[request_id] = method
            await self.ws.send_message(json.dumps(message, separators=(",", ":")))

    async def message(self) -> JsonObject:
        """The next frame the server sent, as a validated JSON-RPC message."""
        frame = await self.ws.get_message()
        assert isinstance(frame, str), f"the server sent a binary frame: {frame!r}"
        message = as_object(json.loads(frame))
        request_id = message.get("id")
        method = (
            self.methods.get(request_id)
            if isinstance(request_id, int | str) and "method" not in message
            else None
        )
        if method == "initialize" and "result" in message:
            version = as_object(message["result"])["protocolVersion"]
            assert isinstance(version, str)
            self.revision = version
        check_emitted(message, self.revision, method)
        self.seen.append(message)
        return message

    async def reply(self, request_id: RequestId) -> JsonObject:
        """Read frames until the answer to ``request_id`` (the others stay in ``seen``)."""
        while True:
            message = await self.message()
            if is_answer(message) and message.get("id") == request_id:
                return message

    async def request(
        self, request_id: RequestId, method: str, params: Mapping[str, object] | None = None
    ) -> JsonObject:
        await self.send(request(request_id, method, params))
        return await self.reply(request_id)

    async def handshake(self) -> None:
        reply = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": LATEST_HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "ws-test", "version": "0"},
            },
        )
        assert as_object(reply["result"])["protocolVersion"] == LATEST_HANDSHAKE
        await self.send(notification("notifications/initialized"))


@asynccontextmanager
async def connect(
    url: str,
    *,
    subprotocols: tuple[str, ...] = ("mcp",),
    extra_headers: list[tuple[bytes, bytes]] | None = None,
) -> AsyncIterator[WebSocketConnection]:
    """A trio-websocket client over a TCP stream the test owns, closed when the block ends.

    ``open_websocket_url`` would do, but trio-websocket 0.12.2 never closes its TCP stream when
    the *server* starts the close (``aclose()`` returns early once a close reason is recorded,
    and the reader task stops at end-of-file without closing): the socket is left to the
    garbage collector and its ``ResourceWarning`` fails a later test. Owning the stream fixes
    that.
    """
    host_port = url.removeprefix("ws://").removesuffix(PATH)
    host, port = host_port.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, host_port, PATH, subprotocols=subprotocols, extra_headers=extra_headers
        )
        try:
            yield ws
        finally:
            await ws.aclose()
            await stream.aclose()  # ends the reader task if the server left it reading


@asynccontextmanager
async def session(url: str) -> AsyncIterator[Session]:
    """An initialized MCP session over one socket that offered the ``mcp`` subprotocol."""
    async with connect(url) as ws:
        assert ws.subprotocol == "mcp"
        client = Session(ws)
        await client.handshake()
        yield client


async def closed_with(ws: WebSocketConnection) -> tuple[int, str | None]:
    """Read until the server closes the socket; its close code and reason.

    Raises:
        AssertionError: a frame arrived instead of the close.
    """
    try:
        frame = await ws.get_message()
    except ConnectionClosed as closed:
        reason = closed.reason
        assert reason is not None
        return reason.code, reason.reason
    raise AssertionError(f"a frame instead of a close: {frame!r}")


@dataclass
class Refusal:
    """A handshake's HTTP answer other than 101."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> JsonObject:
        assert self.headers.get("content-type") == "application/json", self.headers
        return as_object(json.loads(self.body))


async def upgrade_by_hand(url: str, headers: Mapping[str, str] | None = None) -> Refusal:
    """Send a WebSocket upgrade request (offering ``mcp``) over raw TCP; read the refusal.

    Written by hand, not with trio-websocket: its refused handshakes leave their TCP stream
    open (see :func:`connect`), and a raw request can send any ``Host``.
    """
    host_port = url.removeprefix("ws://").removesuffix(PATH)
    status, received, body = await raw_upgrade(host_port, PATH, headers or {})
    assert status != 101, "the server upgraded the connection"
    return Refusal(status, received, body)


# ---- the server side -----------------------------------------------------------------------


def make_config(**websocket: object) -> Config:
    return load_config(
        overrides={"http": {"port": 0, "graceful_shutdown_s": 2.0}, "websocket": websocket}
    )


def ws_url(base: str) -> str:
    assert base.startswith("http://"), base
    return "ws://" + base.removeprefix("http://") + PATH


@asynccontextmanager
async def live_server(
    mcp: Server | None = None, config: Config | None = None, stop: trio.Event | None = None
) -> AsyncIterator[str]:
    """Run ``serve`` for the block; yield the WebSocket URL; leaving waits for ``serve`` to end."""
    stop = stop if stop is not None else trio.Event()
    async with trio.open_nursery() as nursery:
        base: str = await nursery.start(
            partial(
                serve,
                config if config is not None else make_config(),
                mcp if mcp is not None else build_mcp_server(fixture=True),
                announce=False,
                shutdown=stop,
            )
        )
        try:
            yield ws_url(base)
        finally:
            stop.set()


class TappedApp(CoremetryApp):
    """The real app, recording every ASGI event of its websocket connections, in order."""

    def __init__(self, config: Config, mcp: Server) -> None:
        super().__init__(config, mcp)
        self.events: list[str] = []
        self.handler_done = trio.Event()

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] != "websocket":
            await super().__call__(scope, receive, send)
            return

        async def tap_receive() -> ASGIReceiveEvent:
            event = await receive()
            self.events.append(f"in:{event['type']}")
            return event

        async def tap_send(event: ASGISendEvent) -> None:
            self.events.append(f"out:{event['type']}")
            await send(event)

        try:
            await super().__call__(scope, tap_receive, tap_send)
        finally:
            self.handler_done.set()


@asynccontextmanager
async def app_server(app: CoremetryApp) -> AsyncIterator[str]:
    """Serve ``app`` with hypercorn for the block (as ``serve`` does); yield its WebSocket URL."""
    async with open_app_server(app) as base:
        yield ws_url(base)


@dataclass
class Blocker:
    """A ``block`` tool that runs until cancelled and records how it ended."""

    started: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    endings: list[BaseException | None] = field(default_factory=list)

    async def block(self, args: NoArgs, ctx: CallContext) -> str:
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.endings.append(sys.exception())
            self.finished.set()

    def server(self) -> Server:
        """The fixture server plus ``block``."""
        mcp = build_mcp_server(fixture=True)
        mcp.register_tool(Tool("block", "Block until cancelled (a test tool).", NoArgs, self.block))
        return mcp

    def assert_cancelled(self) -> None:
        assert len(self.endings) == 1, self.endings
        assert isinstance(self.endings[0], trio.Cancelled), self.endings


# ---- the session ---------------------------------------------------------------------------


async def test_initialize_and_tools_list() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            reply = await client.request(1, "tools/list")
            names = {as_object(t)["name"] for t in as_list(as_object(reply["result"])["tools"])}
            assert {"echo", "sleep_ms"} <= names
            pong = await client.request(2, "ping")
            assert pong["result"] == {}


async def test_echo_resource_and_prompt() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            text = "hello \u00e9\u4e2d \U0001f600 \u2028 line\nbreak"
            assert tool_text(await client.request(1, "tools/call", echo(text))) == text

            reply = await client.request(2, "resources/read", {"uri": "fixture://echo/x"})
            contents = as_list(as_object(reply["result"])["contents"])
            assert len(contents) == 1
            item = as_object(contents[0])
            assert item["uri"] == "fixture://echo/x"
            assert json.loads(str(item["text"])) == {"text": "x"}

            reply = await client.request(
                3, "prompts/get", {"name": "greet", "arguments": {"name": "ada"}}
            )
            messages = as_list(as_object(reply["result"])["messages"])
            assert "ada" in json.dumps(messages)


async def test_progress_notifications_come_before_the_result() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            await client.send(call(1, "sleep_ms", {"ms": 50}, progressToken="tok"))
            reply = await client.reply(1)
            assert tool_text(reply) == "slept 50 ms"
            progress = [
                as_object(m["params"])
                for m in client.seen
                if m.get("method") == "notifications/progress"
            ]
            assert [p["progress"] for p in progress] == [10, 20, 30, 40, 50]
            assert all(p["progressToken"] == "tok" and p["total"] == 50 for p in progress)
            assert client.seen[-1] is reply  # nothing about the call follows its answer


async def test_notifications_cancelled_stops_a_running_call_without_an_answer() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            await client.send(call(1, "sleep_ms", {"ms": 300}, progressToken="p1"))
            first = await client.message()  # the call is running once it reports progress
            assert first.get("method") == "notifications/progress"
            await client.send(cancel(1))
            # A longer call started later: had call 1 not been cancelled, it would have answered
            # before this one does.
            await client.send(call(2, "sleep_ms", {"ms": 400}))
            assert tool_text(await client.reply(2)) == "slept 400 ms"
            answered = [m.get("id") for m in client.seen if is_answer(m)]
            assert 1 not in answered
            # The socket is still fine.
            assert tool_text(await client.request(3, "tools/call", echo("after"))) == "after"


async def test_pipelined_requests_are_answered_with_matching_ids() -> None:
    blocker = Blocker()
    with trio.fail_after(LIMIT_S):
        async with live_server(blocker.server()) as url, session(url) as client:
            # A call that never ends first: the others must not queue behind it.
            await client.send(call("slow", "block", {}))
            ids: list[RequestId] = [*range(1, 21), *(f"s{n}" for n in range(1, 6))]
            await client.send(*(call(i, "echo", {"text": f"echo {i!r}"}) for i in ids))
            await client.send(request(100, "ping"), request(101, "tools/list"))
            expected: set[RequestId] = {*ids, 100, 101}
            answers: dict[RequestId, JsonObject] = {}
            while set(answers) != expected:
                message = await client.message()
                if is_answer(message):
                    request_id = message["id"]
                    assert isinstance(request_id, int | str)
                    assert request_id not in answers, f"answered twice: {request_id!r}"
                    assert request_id != "slow"
                    answers[request_id] = message
            for i in ids:
                assert tool_text(answers[i]) == f"echo {i!r}"
                # ids keep their JSON type
                assert type(answers[i]["id"]) is type(i)
            await client.send(cancel("slow"))
            await blocker.finished.wait()
            blocker.assert_cancelled()
            assert (await client.request(102, "ping"))["result"] == {}
            assert "slow" not in [m.get("id") for m in client.seen if is_answer(m)]


async def test_garbage_frame_gets_parse_error_and_the_socket_stays_usable() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            await client.ws.send_message("this is not json {")
            error = await client.message()
            assert error["id"] is None
            assert as_object(error["error"])["code"] == codes.PARSE_ERROR
            reply = await client.request(1, "tools/call", echo("ok"))
            assert tool_text(reply) == "ok"


@pytest.mark.parametrize("blank", ["", " ", "\r\n\t"])
async def test_blank_frame_gets_parse_error(blank: str) -> None:
    """Found by the fuzzer: an empty text frame was skipped without an answer (as stdio skips
    blank lines), leaving the client waiting; a frame is one message, and this one is not JSON."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            await client.ws.send_message(blank)
            error = await client.message()
            assert error["id"] is None
            assert as_object(error["error"])["code"] == codes.PARSE_ERROR
            reply = await client.request(1, "tools/call", echo("ok"))
            assert tool_text(reply) == "ok"


# ---- the client leaving --------------------------------------------------------------------


async def test_closing_the_socket_cancels_the_running_call_and_nothing_more_is_sent() -> None:
    blocker = Blocker()
    mcp = blocker.server()
    app = TappedApp(make_config(), mcp)
    with trio.fail_after(LIMIT_S):
        async with app_server(app) as url:
            async with session(url) as client:
                await client.send(call(1, "block", {}))
                await blocker.started.wait()
            # Leaving the block closed the socket (close 1000) with call 1 still running.
            await blocker.finished.wait()
            await app.handler_done.wait()
    blocker.assert_cancelled()
    assert "in:websocket.disconnect" in app.events, app.events
    after = app.events[app.events.index("in:websocket.disconnect") + 1 :]
    assert after == [], f"the app sent after the client left: {after}"
    assert app.events.count("out:websocket.accept") == 1


# Shutdown (the drain: calls in flight answered, then close 1001): test_drain.py.


class BrokenServer(Server):
    """A dispatcher with a bug: the frame ``boom`` makes ``receive`` raise."""

    def receive(self, data: bytes, conn: Connection, *, in_batch: bool = False) -> Outcome:
        if data == b"boom":
            raise RuntimeError("a bug in the dispatcher")
        return super().receive(data, conn, in_batch=in_batch)


async def test_a_bug_in_the_session_closes_with_1011_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(BrokenServer("broken", "0")) as url, session(url) as client:
            await client.ws.send_message("boom")
            code, reason = await closed_with(client.ws)
    assert code == 1011
    assert reason is not None
    assert reason.startswith("internal error (incident ")
    assert "a bug in the dispatcher" not in reason
    logged = [r for r in caplog.records if r.name == "coremetry.transports.websocket"]
    assert len(logged) == 1
    assert reason.removeprefix("internal error (").removesuffix(")") in logged[0].getMessage()


# ---- refusals ------------------------------------------------------------------------------


async def test_bad_origin_is_refused_with_403_before_upgrade() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url:
            refusal = await upgrade_by_hand(url, {"origin": "https://evil.example"})
            assert refusal.status == 403
            error = as_object(refusal.json()["error"])
            assert error["code"] == codes.INVALID_REQUEST
            assert "evil.example" in str(error["message"])
            # A loopback origin is served.
            async with connect(url, extra_headers=[(b"origin", b"http://localhost:5173")]) as ws:
                assert ws.subprotocol == "mcp"


async def test_bad_host_is_refused_with_421() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url:
            refusal = await upgrade_by_hand(url, {"host": "rebind.example"})
    assert refusal.status == 421
    assert "rebind.example" in str(as_object(refusal.json()["error"])["message"])


async def test_refused_authentication_gets_401() -> None:
    async def refuse(headers: Headers) -> Caller:
        raise PermissionError("no token")

    app = CoremetryApp(make_config(), build_mcp_server(fixture=True), authenticate=refuse)
    with trio.fail_after(LIMIT_S):
        async with app_server(app) as url:
            refusal = await upgrade_by_hand(url)
    assert refusal.status == 401
    assert refusal.headers["www-authenticate"] == (
        'Bearer realm="coremetry", resource_metadata="'
        f"http://{url.removeprefix('ws://').removesuffix(PATH)}"
        '/.well-known/oauth-protected-resource/api/mcp"'
    )
    assert b"no token" not in refusal.body
    assert str(as_object(refusal.json()["error"])["message"]).startswith("Unauthorized: send")


async def test_client_without_the_mcp_subprotocol_is_refused_with_400() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url:
            for offered in ("", "graphql-ws", "graphql-ws, chat"):
                refusal = await upgrade_by_hand(url, {"sec-websocket-protocol": offered})
                assert refusal.status == 400, offered
                message = as_object(refusal.json()["error"])["message"]
                assert isinstance(message, str)
                assert "Sec-WebSocket-Protocol: mcp" in message
            # The same client offering mcp is served.
            async with session(url) as client:
                await client.send(request(7, "ping"))
                assert (await client.message())["id"] == 7


async def test_connections_above_the_cap_are_refused_with_503() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(config=make_config(max_connections=1)) as url, session(url):
            refusal = await upgrade_by_hand(url)
            assert refusal.status == 503
            assert "retry-after" in refusal.headers


# ---- frames --------------------------------------------------------------------------------


async def test_binary_frame_closes_with_1003() -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server() as url, session(url) as client:
            await client.ws.send_message(json.dumps(request(1, "ping")).encode())
            code, reason = await closed_with(client.ws)
            assert code == 1003
            assert reason is not None
            assert "text" in reason


def padded_echo(size_bytes: int, filler: str = "x") -> str:
    """An echo request frame of ``size_bytes`` UTF-8 bytes (one more when ``filler`` is 2 bytes
    wide and the parity does not fit)."""
    empty = json.dumps(call(1, "echo", {"text": ""}), separators=(",", ":"), ensure_ascii=False)
    width = len(filler.encode())
    count = -(-(size_bytes - len(empty.encode())) // width)
    assert count >= 0
    frame = json.dumps(
        call(1, "echo", {"text": filler * count}), separators=(",", ":"), ensure_ascii=False
    )
    assert size_bytes <= len(frame.encode()) < size_bytes + width
    return frame


async def test_frame_at_the_limit_is_served() -> None:
    config = make_config(max_message_bytes=SMALL_LIMIT)
    with trio.fail_after(LIMIT_S):
        async with live_server(config=config) as url, session(url) as client:
            client.methods[1] = "tools/call"
            await client.ws.send_message(padded_echo(SMALL_LIMIT))
            assert set(tool_text(await client.reply(1))) == {"x"}


async def test_ascii_frame_above_the_limit_closes_with_1009() -> None:
    # More characters than the cap: hypercorn's own limit (same value) closes, without a reason.
    config = make_config(max_message_bytes=SMALL_LIMIT)
    with trio.fail_after(LIMIT_S):
        async with live_server(config=config) as url, session(url) as client:
            await client.ws.send_message(padded_echo(2 * SMALL_LIMIT))
            code, _ = await closed_with(client.ws)
            assert code == 1009


async def test_multibyte_frame_above_the_byte_limit_closes_with_1009_and_a_reason() -> None:
    # Fewer characters than the cap (hypercorn counts characters) but more UTF-8 bytes.
    config = make_config(max_message_bytes=SMALL_LIMIT)
    frame = padded_echo(SMALL_LIMIT + 1, "\u00e9")
    assert len(frame) <= SMALL_LIMIT < len(frame.encode())
    with trio.fail_after(LIMIT_S):
        async with live_server(config=config) as url, session(url) as client:
            await client.ws.send_message(frame)
            code, reason = await closed_with(client.ws)
            assert code == 1009
            assert reason == f"message larger than {SMALL_LIMIT} bytes"


# ---- the handler alone ---------------------------------------------------------------------


def websocket_scope() -> WebsocketScope:
    return {
        "type": "websocket",
        "asgi": {"spec_version": "2.3", "version": "3.0"},
        "http_version": "1.1",
        "scheme": "ws",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8080"), (b"origin", b"https://evil.example")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "subprotocols": ["mcp"],
        "state": ConnectionState({}),
        "extensions": {},
    }


async def test_without_the_http_response_extension_a_refusal_is_a_close_before_accept() -> None:
    sent: list[ASGISendEvent] = []

    async def receive() -> ASGIReceiveEvent:
        return {"type": "websocket.connect"}

    async def send(event: ASGISendEvent) -> None:
        sent.append(event)

    handler = WebSocketTransport(build_mcp_server(), HttpPolicy())
    with trio.fail_after(LIMIT_S):
        await handler(websocket_scope(), receive, send)
    assert len(sent) == 1
    close = sent[0]
    assert close["type"] == "websocket.close"
    assert close["code"] == 1008
    reason = close["reason"]
    assert reason is not None
    assert reason.startswith("Origin not allowed")
    assert handler.active == 0


async def test_a_task_outlives_its_socket_and_reports_its_status() -> None:
    """2025-11-25 tasks over WebSocket: the socket that created a task hears its status
    changes (``notifications/tasks/status``); another socket of the same identity collects it
    after the first one closed."""
    with trio.fail_after(LIMIT_S):
        async with live_server() as url:
            async with session(url) as first:
                created = await first.request(
                    1, "tools/call", {"name": "sleep_ms", "arguments": {"ms": 50}, "task": {}}
                )
                task_id = as_object(as_object(created["result"])["task"])["taskId"]
                status: JsonObject = {}
                while not status:  # every frame is schema-checked by Session.message
                    message = await first.message()
                    if message.get("method") == "notifications/tasks/status":
                        status = as_object(message["params"])
            async with session(url) as second:
                collected = await second.request(2, "tasks/result", {"taskId": task_id})
                listed = await second.request(3, "tasks/list")
    assert status["taskId"] == task_id
    assert status["status"] == "completed"
    assert tool_text(collected) == "slept 50 ms"
    tasks = as_list(as_object(listed["result"])["tasks"])
    assert [as_object(t)["taskId"] for t in tasks] == [task_id]
