"""Unit tests of the legacy HTTP+SSE transport: :class:`LegacySse`'s ASGI handlers, in memory.

Each ``GET /api/mcp/sse`` runs as a task fed by a fake ASGI ``receive`` (one empty request,
then ``http.disconnect`` when the test says so) and a ``send`` that records every chunk; POSTs
are single in-memory requests. Every message parsed off a stream is validated against the
official schema of the negotiated revision (``check_emitted``). Every test is bounded by
``trio.fail_after``; timer tests run on trio's autojump clock, so nothing depends on the speed
of the machine and nothing asserts on wall-clock durations.
"""

import json
import math
import string
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import pytest
import trio
import trio.testing
from _wire_support import SseItem as Item
from _wire_support import SseReader, as_object
from conftest import check_emitted
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    ConnectionState,
    HTTPScope,
)

from coremetry.http_edge import SSE_HEADERS, Headers, HttpPolicy
from coremetry.mcp import CallContext, Caller, Server, Tool
from coremetry.server import build_mcp_server
from coremetry.transports.sse import INBOX_SIZE, MESSAGES_PATH, SSE_PATH, LegacySse

JsonObject = dict[str, object]
Handler = Callable[[HTTPScope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]

LIMIT_S = 30.0
"""Hang guard of every test (virtual seconds on the autojump clock)."""

REVISION = "2024-11-05"
TASKS_REVISION = "2025-11-25"
SSE_ACCEPT = (b"accept", b"text/event-stream")
JSON_BODY = (b"content-type", b"application/json")


# ---- a tracked tool: proves that ending a session cancels its calls ------------------------


class NoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


@dataclass
class Tracker:
    started: trio.Event = field(default_factory=trio.Event)
    cancelled: trio.Event = field(default_factory=trio.Event)


def tracked_server() -> tuple[Server, Tracker]:
    """The fixture server plus ``block``, a tool that runs until cancelled and records it."""
    server = build_mcp_server(fixture=True)
    tracker = Tracker()

    async def block(args: NoArgs, ctx: CallContext) -> str:
        tracker.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            tracker.cancelled.set()
            raise

    server.register_tool(Tool("block", "Block until cancelled (a test tool).", NoArgs, block))
    return server, tracker


# ---- ASGI plumbing -------------------------------------------------------------------------


def http_scope(
    method: str,
    path: str,
    *,
    query: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] = (),
    host: bytes = b"127.0.0.1:8080",
) -> HTTPScope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", host), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": ConnectionState({}),
        "extensions": {},
    }


@dataclass
class Response:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    def error(self) -> JsonObject:
        message = json.loads(self.body)
        check_emitted(message, REVISION)
        assert message["id"] is None, message
        error = message["error"]
        assert isinstance(error, dict)
        return error


async def request(
    handler: Handler,
    method: str,
    path: str,
    *,
    query: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] = (),
    body: bytes = b"",
    host: bytes = b"127.0.0.1:8080",
) -> Response:
    """One complete request/response exchange (not for a stream that stays open)."""
    pending: list[ASGIReceiveEvent] = [{"type": "http.request", "body": body, "more_body": False}]
    response = Response()

    async def receive() -> ASGIReceiveEvent:
        if pending:
            return pending.pop(0)
        await trio.sleep_forever()

    async def send(message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start":
            response.status = message["status"]
            response.headers = list(message["headers"])
        elif message["type"] == "http.response.body":
            response.body += message["body"]

    await handler(http_scope(method, path, query=query, headers=headers, host=host), receive, send)
    return response


class Stream(SseReader):
    """One ``GET /api/mcp/sse`` running in a task, seen from the client's side."""

    def __init__(self) -> None:
        super().__init__(REVISION, check_line_breaks=True)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.ended = False
        """The handler ended the response (``more_body: False``)."""
        self.finished = trio.Event()
        """The handler returned."""
        self.after_disconnect: list[bytes] = []
        """Body chunks sent after the client disconnected (must stay empty)."""
        self.hold: trio.Event | None = None
        """When set to an event, ``send`` of message events waits for it (a stalled client)."""
        self._requested = False
        self._gone = trio.Event()
        self._chunks_send, self._chunks = trio.open_memory_channel[bytes](math.inf)

    async def receive(self) -> ASGIReceiveEvent:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: ASGISendEvent) -> None:
        assert not self.ended, f"sent after the end: {message!r}"
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message["headers"])
            return
        assert message["type"] == "http.response.body", message
        if self._gone.is_set():
            self.after_disconnect.append(message["body"])
        if self.hold is not None and message["body"].startswith(b"event: message"):
            await self.hold.wait()
        self._chunks_send.send_nowait(message["body"])
        if not message["more_body"]:
            self.ended = True
            self._chunks_send.close()

    def disconnect(self) -> None:
        self._gone.set()

    def handler_returned(self) -> None:
        self.finished.set()
        self._chunks_send.close()

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    async def next_chunk(self) -> bytes | None:
        try:
            return await self._chunks.receive()
        except trio.EndOfChannel:
            return None


@dataclass
class Session:
    stream: Stream
    endpoint: str
    session_id: str


def new_transport(
    server: Server | None = None,
    policy: HttpPolicy | None = None,
    *,
    keepalive_interval_s: float = 3600.0,
    max_sessions: int = 100,
    session_idle_s: float = 3600.0,
) -> LegacySse:
    return LegacySse(
        server if server is not None else build_mcp_server(fixture=True),
        policy if policy is not None else HttpPolicy(),
        keepalive_interval_s=keepalive_interval_s,
        max_sessions=max_sessions,
        session_idle_s=session_idle_s,
    )


async def open_session(
    nursery: trio.Nursery,
    sse: LegacySse,
    headers: Iterable[tuple[bytes, bytes]] = (SSE_ACCEPT,),
) -> Session:
    stream = Stream()
    scope = http_scope("GET", SSE_PATH, headers=headers)

    async def run() -> None:
        await sse.open_stream(scope, stream.receive, stream.send)
        stream.handler_returned()

    nursery.start_soon(run)
    first = await stream.next_item()
    assert first is not None
    assert first.event == "endpoint", first
    session_id = first.data.partition("?sessionId=")[2]
    return Session(stream, first.data, session_id)


def rpc(request_id: int, method: str, params: JsonObject | None = None) -> bytes:
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


async def post(
    sse: LegacySse,
    session_id: str,
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (JSON_BODY,),
) -> Response:
    query = b"sessionId=" + session_id.encode()
    return await request(
        sse.post_message, "POST", MESSAGES_PATH, query=query, headers=headers, body=body
    )


async def initialize(sse: LegacySse, session: Session) -> None:
    params: JsonObject = {
        "protocolVersion": REVISION,
        "capabilities": {},
        "clientInfo": {"name": "test-sse", "version": "0"},
    }
    assert (await post(sse, session.session_id, rpc(0, "initialize", params))).status == 202
    init = await session.stream.next_message("initialize")
    result = init["result"]
    assert isinstance(result, dict)
    assert result["protocolVersion"] == REVISION
    note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert (await post(sse, session.session_id, note)).status == 202


def call(request_id: int, tool: str, arguments: JsonObject) -> bytes:
    return rpc(request_id, "tools/call", {"name": tool, "arguments": arguments})


# ---- GET: the stream -----------------------------------------------------------------------


async def test_stream_headers_and_endpoint_event_first() -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            stream = session.stream
            assert stream.status == 200
            for name, value in SSE_HEADERS:
                assert stream.header(name) == value
            assert stream.header(b"content-type") == b"text/event-stream"
            assert stream.header(b"cache-control") == b"no-cache"
            assert stream.header(b"x-accel-buffering") == b"no"
            assert stream.header(b"content-length") is None
            # Root-relative, never an absolute URI with the bind address.
            assert session.endpoint == f"{MESSAGES_PATH}?sessionId={session.session_id}"
            assert len(session.session_id) >= 32
            allowed = set(string.ascii_letters + string.digits + "-_")
            assert set(session.session_id) <= allowed
            assert set(sse.sessions) == {session.session_id}
            stream.disconnect()
    assert sse.sessions == {}


@pytest.mark.parametrize(
    ("root_path", "forwarded", "prefix"),
    [
        ("", None, ""),
        ("/root", None, "/root"),
        ("/root/", None, "/root"),
        ("", "/proxy", "/proxy"),
        ("/root", "/proxy/mcp/", "/proxy/mcp"),
        ("/root", "/", ""),
        # Not sane: ignored, the configured root path applies.
        ("/root", "//evil.example", "/root"),
        ("/root", "proxy", "/root"),
        ("/root", "/a//b", "/root"),
        ("/root", "/a\r\nevent: endpoint", "/root"),
        ("/root", "/a b", "/root"),
        ("/root", "/a?x=1", "/root"),
        ("/root", "/a#frag", "/root"),
        ("", "http://evil.example/x", ""),
    ],
)
async def test_endpoint_prefix(root_path: str, forwarded: str | None, prefix: str) -> None:
    sse = new_transport(policy=HttpPolicy(root_path=root_path))
    headers = [SSE_ACCEPT]
    if forwarded is not None:
        headers.append((b"x-forwarded-prefix", forwarded.encode("latin-1")))
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse, headers)
            assert session.endpoint == f"{prefix}{MESSAGES_PATH}?sessionId={session.session_id}"
            session.stream.disconnect()


@pytest.mark.parametrize(
    ("headers", "host", "status"),
    [
        ([(b"accept", b"application/json")], b"localhost:8080", 406),
        ([(b"accept", b"text/event-stream;q=0")], b"localhost", 406),
        ([SSE_ACCEPT, (b"origin", b"https://evil.example")], b"127.0.0.1", 403),
        ([SSE_ACCEPT], b"evil.example", 421),
        ([SSE_ACCEPT], b"evil.example:8080", 421),
    ],
)
async def test_stream_refusals(
    headers: list[tuple[bytes, bytes]], host: bytes, status: int
) -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        response = await request(sse.open_stream, "GET", SSE_PATH, headers=headers, host=host)
    assert response.status == status
    assert response.error()["code"] == -32600
    assert sse.sessions == {}


async def test_stream_authentication_failure_is_401() -> None:
    async def refuse_everyone(headers: Headers) -> Caller:
        raise PermissionError("no token")

    sse = new_transport()
    sse.authenticate = refuse_everyone
    with trio.fail_after(LIMIT_S):
        response = await request(sse.open_stream, "GET", SSE_PATH, headers=[SSE_ACCEPT])
    assert response.status == 401
    assert response.header(b"www-authenticate") == b'Bearer realm="coremetry"'
    assert "no token" not in response.body.decode()
    assert sse.sessions == {}


async def test_methods_and_preflight() -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        put = await request(sse.open_stream, "PUT", SSE_PATH)
        get_messages = await request(sse.post_message, "GET", MESSAGES_PATH)
        origin = (b"origin", b"http://localhost:5173")
        pre_sse = await request(sse.open_stream, "OPTIONS", SSE_PATH, headers=[origin])
        pre_messages = await request(sse.post_message, "OPTIONS", MESSAGES_PATH, headers=[origin])
        pre_evil = await request(
            sse.post_message,
            "OPTIONS",
            MESSAGES_PATH,
            headers=[(b"origin", b"https://evil.example")],
        )
    assert put.status == 405
    assert put.header(b"allow") == b"GET, OPTIONS"
    assert put.error()["code"] == -32600
    assert get_messages.status == 405
    assert get_messages.header(b"allow") == b"POST, OPTIONS"
    assert pre_sse.status == 204
    assert pre_sse.header(b"access-control-allow-methods") == b"GET, OPTIONS"
    assert pre_sse.header(b"access-control-allow-origin") == b"http://localhost:5173"
    assert pre_messages.status == 204
    assert pre_messages.header(b"access-control-allow-methods") == b"POST, OPTIONS"
    assert pre_evil.status == 403
    assert pre_evil.header(b"access-control-allow-origin") is None


# ---- POST: messages ------------------------------------------------------------------------


async def test_messages_are_answered_on_the_stream() -> None:
    sse = new_transport()
    text = "line\nsep\u2028para\u2029nel\u0085end \u00e9\U0001f600"
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            await initialize(sse, session)
            accepted = await post(sse, session.session_id, rpc(1, "ping"))
            assert accepted.status == 202
            assert accepted.body in (b"", b"Accepted")
            assert (await session.stream.next_message("ping"))["id"] == 1

            assert (await post(sse, session.session_id, rpc(2, "tools/list"))).status == 202
            listed = await session.stream.next_message("tools/list")
            result = listed["result"]
            assert isinstance(result, dict)
            tools = result["tools"]
            assert isinstance(tools, list)
            assert {"echo", "sleep_ms"} <= {t["name"] for t in tools}

            # U+2028/2029/0085 and newlines never break the single data line.
            assert (
                await post(sse, session.session_id, call(3, "echo", {"text": text}))
            ).status == 202
            echoed = await session.stream.next_message("tools/call")
            assert echoed["id"] == 3
            assert echoed["result"] == {"content": [{"type": "text", "text": text}]}

            # Garbage is answered on the stream with a parse error (id null).
            assert (await post(sse, session.session_id, b"{not json")).status == 202
            garbage = await session.stream.next_message(None)
            error = garbage["error"]
            assert isinstance(error, dict)
            assert error["code"] == -32700
            session.stream.disconnect()


async def test_progress_notifications_ride_the_stream() -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            await initialize(sse, session)
            body = rpc(
                7,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 50}, "_meta": {"progressToken": "p7"}},
            )
            assert (await post(sse, session.session_id, body)).status == 202
            progress: list[float] = []
            while True:
                item = await session.stream.next_event()
                message = json.loads(item.data)
                if message.get("method") == "notifications/progress":
                    check_emitted(message, REVISION)
                    assert message["params"]["progressToken"] == "p7"
                    progress.append(message["params"]["progress"])
                    continue
                check_emitted(message, REVISION, "tools/call")
                assert message["id"] == 7
                break
            assert progress == sorted(set(progress))
            assert progress[-1] == 50
            session.stream.disconnect()


async def test_post_refusals_b01() -> None:
    """B01: missing/empty sessionId 400, unknown 404; never 202 without a live session."""
    sse = new_transport(policy=HttpPolicy(max_body_bytes=1024))
    ping = rpc(1, "ping")
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            sid = session.session_id.encode()

            async def post_query(
                query: bytes,
                body: bytes = ping,
                headers: Iterable[tuple[bytes, bytes]] = (JSON_BODY,),
            ) -> Response:
                return await request(
                    sse.post_message, "POST", MESSAGES_PATH, query=query, headers=headers, body=body
                )

            missing = await post_query(b"")
            empty = await post_query(b"sessionId=")
            twice = await post_query(b"sessionId=" + sid + b"&sessionId=" + sid)
            other_name = await post_query(b"session_id=" + sid)
            unknown = await post_query(b"sessionId=" + b"A" * 32)
            not_json = await post_query(
                b"sessionId=" + sid, headers=[(b"content-type", b"text/plain")]
            )
            no_type = await post_query(b"sessionId=" + sid, headers=[])
            too_big = await post_query(b"sessionId=" + sid, body=b" " * 2048)
            blank = await post_query(b"sessionId=" + sid, body=b"  \n")
            evil = await post_query(
                b"sessionId=" + sid, headers=[JSON_BODY, (b"origin", b"https://evil.example")]
            )
            json_upper = await post_query(
                b"sessionId=" + sid, headers=[(b"content-type", b"Application/JSON; charset=utf-8")]
            )
            assert json_upper.status == 202
            assert (await session.stream.next_message("ping"))["id"] == 1
            session.stream.disconnect()
    for response in (missing, empty, twice, other_name, blank):
        assert response.status == 400, response
        response.error()
    assert unknown.status == 404
    assert not_json.status == 415
    assert no_type.status == 415
    assert too_big.status == 413
    assert evil.status == 403
    for response in (unknown, not_json, no_type, too_big, evil):
        response.error()


async def test_post_from_another_identity_is_404() -> None:
    async def by_token(headers: Headers) -> Caller:
        token = headers.get("authorization") or ""
        return Caller(subject=token.removeprefix("Bearer "), role="viewer", kind="jwt")

    sse = new_transport()
    sse.authenticate = by_token
    alice = (b"authorization", b"Bearer alice")
    mallory = (b"authorization", b"Bearer mallory")
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse, [SSE_ACCEPT, alice])
            stolen = await post(sse, session.session_id, rpc(1, "ping"), [JSON_BODY, mallory])
            anonymous = await post(sse, session.session_id, rpc(2, "ping"), [JSON_BODY])
            unknown = await post(sse, "B" * 32, rpc(3, "ping"), [JSON_BODY, mallory])
            own = await post(sse, session.session_id, rpc(4, "ping"), [JSON_BODY, alice])
            assert own.status == 202
            assert (await session.stream.next_message("ping"))["id"] == 4  # not 1, not 2
            session.stream.disconnect()
    # Same answer as for an unknown session: existence is not revealed.
    assert stolen.status == anonymous.status == unknown.status == 404
    assert stolen.body == unknown.body


async def test_reply_goes_only_to_its_own_session() -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            a = await open_session(nursery, sse)
            b = await open_session(nursery, sse)
            assert a.session_id != b.session_id
            await initialize(sse, a)
            await initialize(sse, b)
            # Same request id on both sessions, different answers.
            assert (await post(sse, a.session_id, call(1, "echo", {"text": "for a"}))).status == 202
            assert (await post(sse, b.session_id, call(1, "echo", {"text": "for b"}))).status == 202
            assert (await post(sse, a.session_id, rpc(2, "ping"))).status == 202
            got_a = [await a.stream.next_message("tools/call"), await a.stream.next_message("ping")]
            got_b = await b.stream.next_message("tools/call")
            a.stream.disconnect()
            b.stream.disconnect()
            rest_a = await a.stream.rest()
            rest_b = await b.stream.rest()
    assert got_a[0]["result"] == {"content": [{"type": "text", "text": "for a"}]}
    assert got_a[1]["id"] == 2
    assert got_b["result"] == {"content": [{"type": "text", "text": "for b"}]}
    assert [i for i in rest_a + rest_b if i.event is not None] == []


# ---- how sessions end ----------------------------------------------------------------------


async def test_disconnect_cancels_in_flight_calls_and_frees_the_session() -> None:
    server, tracker = tracked_server()
    sse = new_transport(server)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            await initialize(sse, session)
            assert (await post(sse, session.session_id, call(5, "block", {}))).status == 202
            await tracker.started.wait()
            session.stream.disconnect()
            await tracker.cancelled.wait()  # the handler observed trio.Cancelled
            await session.stream.finished.wait()  # the GET handler returned
            assert sse.sessions == {}
            late = await post(sse, session.session_id, rpc(6, "ping"))
    assert late.status == 404  # B01: never 202 then silence
    assert session.stream.after_disconnect == []  # no answer written after the disconnect
    assert not session.stream.ended  # nothing, not even the terminator, to a gone client


async def test_post_waiting_on_a_full_inbox_gets_404_when_the_session_ends() -> None:
    sse = new_transport()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            session.stream.hold = trio.Event()  # the client stops reading
            statuses: list[int] = []

            async def post_ping(request_id: int) -> None:
                statuses.append(
                    (await post(sse, session.session_id, rpc(request_id, "ping"))).status
                )

            # One ping is taken (its answer is stuck), INBOX_SIZE fill the inbox.
            for request_id in range(INBOX_SIZE + 1):
                await post_ping(request_id)
            assert statuses == [202] * (INBOX_SIZE + 1)
            async with trio.open_nursery() as posters:
                posters.start_soon(post_ping, 100)
                await trio.testing.wait_all_tasks_blocked()
                assert len(statuses) == INBOX_SIZE + 1  # it is waiting for room
                session.stream.disconnect()
            await session.stream.finished.wait()
    assert statuses[-1] == 404
    assert sse.sessions == {}


async def test_idle_timeout_ends_the_session(autojump_clock: trio.testing.MockClock) -> None:
    server, tracker = tracked_server()
    sse = new_transport(server, keepalive_interval_s=1000.0, session_idle_s=10.0)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            await trio.sleep(8)
            await initialize(sse, session)  # POSTs push the idle deadline back
            assert (await post(sse, session.session_id, call(1, "block", {}))).status == 202
            await tracker.started.wait()
            await trio.sleep(8)  # 16 s since the stream opened, 8 s since the last POST
            assert set(sse.sessions) == {session.session_id}
            assert not session.stream.finished.is_set()
            items = await session.stream.rest()  # ends once 10 s pass without a POST
            await session.stream.finished.wait()
            assert tracker.cancelled.is_set()
            late = await post(sse, session.session_id, rpc(2, "ping"))
    assert [i for i in items if i.event is not None] == []  # the blocked call never answered
    assert session.stream.ended  # a clean end of the stream, not a cut
    assert sse.sessions == {}
    assert late.status == 404


async def test_keepalive_comments_while_idle(autojump_clock: trio.testing.MockClock) -> None:
    sse = new_transport(keepalive_interval_s=2.0)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            comments = [await session.stream.next_item() for _ in range(3)]
            assert comments == [Item(None, "ping")] * 3
            # The stream survived the idle period: a ping is still answered.
            await initialize(sse, session)
            assert (await post(sse, session.session_id, rpc(1, "ping"))).status == 202
            assert (await session.stream.next_message("ping"))["id"] == 1
            session.stream.disconnect()


async def test_drain_answers_the_calls_in_flight_then_ends_every_session() -> None:
    server, tracker = tracked_server()
    sse = new_transport(server)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            a = await open_session(nursery, sse)
            b = await open_session(nursery, sse)
            await initialize(sse, a)
            assert (await post(sse, a.session_id, call(1, "block", {}))).status == 202
            await tracker.started.wait()
            sse.drain.begin(0.0)  # no grace: the call still running is cut off at once
            nursery.start_soon(sse.drain.run)
            cut = await a.stream.next_message("tools/call")
            rest_a = await a.stream.rest()
            rest_b = await b.stream.rest()  # an idle session ends at once
            await a.stream.finished.wait()
            await b.stream.finished.wait()
            assert tracker.cancelled.is_set()
            refused = await request(sse.open_stream, "GET", SSE_PATH, headers=[SSE_ACCEPT])
    assert cut["id"] == 1
    result = cut["result"]
    assert isinstance(result, dict)
    assert result["isError"] is True
    assert [i for i in rest_a + rest_b if i.event is not None] == []
    assert a.stream.ended
    assert b.stream.ended
    assert sse.sessions == {}
    assert refused.status == 503
    assert refused.header(b"retry-after") == b"5"
    data = refused.error()["data"]
    assert isinstance(data, dict)
    assert data["retryable"] is True


async def test_session_cap() -> None:
    sse = new_transport(max_sessions=2)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            a = await open_session(nursery, sse)
            b = await open_session(nursery, sse)
            over = await request(sse.open_stream, "GET", SSE_PATH, headers=[SSE_ACCEPT])
            a.stream.disconnect()
            await a.stream.finished.wait()
            c = await open_session(nursery, sse)  # a freed slot is usable again
            assert set(sse.sessions) == {b.session_id, c.session_id}
            b.stream.disconnect()
            c.stream.disconnect()
    assert over.status == 503
    assert over.header(b"retry-after") == b"1"
    assert over.error()["code"] == -32000


async def test_a_task_reports_on_the_stream_and_is_collected() -> None:
    """2025-11-25 tasks over legacy SSE: the answer creating the task, its status change and
    ``tasks/result`` all ride the session's stream, each schema-checked."""
    server = build_mcp_server(fixture=True)
    sse = new_transport(server)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running(), trio.open_nursery() as nursery:
            session = await open_session(nursery, sse)
            hello: JsonObject = {"protocolVersion": TASKS_REVISION, "capabilities": {}}
            assert (await post(sse, session.session_id, rpc(0, "initialize", hello))).status == 202
            await session.stream.next_message("initialize", TASKS_REVISION)
            body = rpc(5, "tools/call", {"name": "sleep_ms", "arguments": {"ms": 30}, "task": {}})
            assert (await post(sse, session.session_id, body)).status == 202
            created = await session.stream.next_message("tools/call", TASKS_REVISION)
            task_id = as_object(as_object(created["result"])["task"])["taskId"]
            status: JsonObject = {}
            while not status:
                message = as_object(json.loads((await session.stream.next_event()).data))
                check_emitted(message, TASKS_REVISION)
                if message.get("method") == "notifications/tasks/status":
                    status = as_object(message["params"])
            fetch = rpc(6, "tasks/result", {"taskId": task_id})
            assert (await post(sse, session.session_id, fetch)).status == 202
            collected = await session.stream.next_message("tasks/result", TASKS_REVISION)
            session.stream.disconnect()
    assert status["taskId"] == task_id
    assert status["status"] == "completed"
    assert collected["id"] == 6
    content = as_object(collected["result"])["content"]
    assert content == [{"type": "text", "text": "slept 30 ms"}]
