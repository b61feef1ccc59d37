"""Unit tests of the stdio transport: ``serve_stdio`` over in-memory byte streams.

Every line the server writes is decoded and validated against the official MCP schema of the
negotiated revision (``check_emitted``). Every test is bounded by ``trio.fail_after``.
"""

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from _wire_support import RequestId, as_list, as_object, call, notification, request
from conftest import check_emitted

from coremetry.mcp import Caller, codes
from coremetry.mcp.versions import HANDSHAKE_VERSIONS, LATEST_HANDSHAKE
from coremetry.server import build_mcp_server
from coremetry.transports.stdio import serve_stdio

JsonObject = dict[str, object]

LIMIT_S = 30.0
"""Bound of every test (virtual seconds under ``autojump_clock``)."""

CALLER = Caller(subject="tester", role="viewer", kind="local")
SMALL_LIMIT = 1024


def encode(message: Mapping[str, object]) -> bytes:
    """One message as one compact JSON line, newline included."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def initialize(request_id: RequestId = 0, revision: str = LATEST_HANDSHAKE) -> JsonObject:
    return request(
        request_id,
        "initialize",
        {
            "protocolVersion": revision,
            "capabilities": {},
            "clientInfo": {"name": "stdio-unit-test", "version": "0"},
        },
    )


def tool_text(reply: Mapping[str, object]) -> str:
    """The text of a ``tools/call`` result with one text content item."""
    result = as_object(reply["result"])
    content = as_list(result["content"])
    assert len(content) == 1, content
    item = as_object(content[0])
    assert item["type"] == "text"
    text = item["text"]
    assert isinstance(text, str)
    return text


def check_message(message: JsonObject, revision: str, method: str | None) -> None:
    """``check_emitted``, plus JSON-RPC's ``"id": null`` for errors on unreadable input.

    JSON-RPC 2.0 (and the official SDK's ``JSONRPCError``) answer a parse error with
    ``"id": null``; the MCP ``schema.json`` files type ``id`` as string-or-integer only, so such
    an error is checked with the id swapped for a placeholder, and its id asserted to be null.
    """
    if "error" in message and "id" in message and message["id"] is None:
        assert set(message) == {"jsonrpc", "id", "error"}, message
        check_emitted({**message, "id": 0}, revision, None)
        return
    check_emitted(message, revision, method)


@dataclass
class Client:
    """The test's side of one ``serve_stdio`` run.

    ``send`` writes raw bytes to the server's stdin; ``message``/``reply`` read its stdout line by
    line, decoding and schema-validating every line (the ``methods`` map says which request each
    id answers; ``revision`` is the negotiated revision).
    """

    to_server: trio.testing.MemorySendStream
    from_server: trio.testing.MemoryReceiveStream
    from_server_writer: trio.testing.MemorySendStream
    stopped: trio.Event
    revision: str = LATEST_HANDSHAKE
    methods: dict[RequestId, str] = field(default_factory=dict)
    buffer: bytearray = field(default_factory=bytearray)
    raw: bytearray = field(default_factory=bytearray)
    seen: list[JsonObject] = field(default_factory=list)
    stdin_closed: bool = False

    async def send(self, data: bytes) -> None:
        await self.to_server.send_all(data)

    async def send_messages(self, *messages: Mapping[str, object]) -> None:
        """Send several messages in ONE chunk, remembering the method of each request."""
        for message in messages:
            if "id" in message and "method" in message:
                request_id = message["id"]
                method = message["method"]
                assert isinstance(request_id, int | str)
                assert isinstance(method, str)
                self.methods[request_id] = method
        await self.send(b"".join(encode(m) for m in messages))

    async def close_stdin(self) -> None:
        self.stdin_closed = True
        await self.to_server.aclose()

    async def _line(self) -> bytes | None:
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                return line
            chunk = await self.from_server.receive_some()
            if not chunk:
                assert not self.buffer, f"output ends without a newline: {bytes(self.buffer)!r}"
                return None
            self.raw += chunk
            self.buffer += chunk

    def _decode(self, line: bytes) -> JsonObject:
        assert line, "an empty line on stdout"
        assert line.strip() == line, f"stray whitespace around a message: {line!r}"
        message = as_object(json.loads(line))
        request_id = message.get("id")
        method = self.methods.get(request_id) if isinstance(request_id, int | str) else None
        if method == "initialize" and "result" in message:
            version = as_object(message["result"])["protocolVersion"]
            assert isinstance(version, str)
            self.revision = version
        check_message(message, self.revision, method)
        self.seen.append(message)
        return message

    async def message(self) -> JsonObject:
        """The next message the server wrote."""
        line = await self._line()
        assert line is not None, "stdout ended while a message was expected"
        return self._decode(line)

    async def reply(self, request_id: RequestId) -> JsonObject:
        """Read messages until the answer to ``request_id`` (keeping the others in ``seen``)."""
        while True:
            message = await self.message()
            if "method" not in message and message.get("id") == request_id:
                return message

    async def rest(self) -> list[JsonObject]:
        """Every message left, up to end-of-output (call once ``serve_stdio`` has returned)."""
        await self.stopped.wait()
        await self.from_server_writer.aclose()
        messages: list[JsonObject] = []
        while (line := await self._line()) is not None:
            messages.append(self._decode(line))
        return messages

    async def handshake(self, revision: str = LATEST_HANDSHAKE) -> None:
        await self.send_messages(initialize(0, revision))
        reply = await self.reply(0)
        assert as_object(reply["result"])["protocolVersion"] == revision
        await self.send_messages(notification("notifications/initialized"))


@asynccontextmanager
async def stdio_session(max_line_bytes: int | None = None) -> AsyncIterator[Client]:
    """Run ``serve_stdio`` with the fixture server on memory streams for the block's duration."""
    server = build_mcp_server(fixture=True)
    stdin_send, stdin_recv = trio.testing.memory_stream_one_way_pair()
    stdout_send, stdout_recv = trio.testing.memory_stream_one_way_pair()
    stopped = trio.Event()

    async def run() -> None:
        try:
            if max_line_bytes is None:
                await serve_stdio(server, caller=CALLER, stdin=stdin_recv, stdout=stdout_send)
            else:
                await serve_stdio(
                    server,
                    caller=CALLER,
                    stdin=stdin_recv,
                    stdout=stdout_send,
                    max_line_bytes=max_line_bytes,
                )
        finally:
            stopped.set()

    client = Client(
        to_server=stdin_send,
        from_server=stdout_recv,
        from_server_writer=stdout_send,
        stopped=stopped,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        yield client
        # Leaving the block ends the session: end-of-input, then serve_stdio must return.
        if not client.stdin_closed:
            await client.close_stdin()
        await stopped.wait()


def ids_answered(messages: list[JsonObject]) -> list[object]:
    return [m.get("id") for m in messages if "method" not in m]


# ---- framing -------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", HANDSHAKE_VERSIONS)
async def test_replies_are_one_json_message_per_line_and_nothing_else(revision: str) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.send_messages(
                initialize(1, revision),
                notification("notifications/initialized"),
                request(2, "ping"),
                request(3, "tools/list"),
                call(4, "echo", {"text": "line one\nline two\r\n\ttab \u00e9\u4e2d \U0001f600"}),
                request("five", "resources/read", {"uri": "fixture://info"}),
                request(6, "prompts/get", {"name": "greet", "arguments": {"name": "ada"}}),
            )
            await client.close_stdin()
            messages = await client.rest()

    assert client.revision == revision
    raw = bytes(client.raw)
    # One message per line: as many newlines as messages, each line one JSON object.
    assert raw.endswith(b"\n")
    assert raw.count(b"\n") == len(messages) == 6
    assert all(line for line in raw.split(b"\n")[:-1])
    assert sorted(map(str, ids_answered(messages))) == ["1", "2", "3", "4", "6", "five"]
    by_id = {str(m["id"]): m for m in messages}
    for message in messages:
        assert "error" not in message, message
    assert tool_text(by_id["4"]) == "line one\nline two\r\n\ttab \u00e9\u4e2d \U0001f600"
    init = as_object(by_id["1"]["result"])
    assert as_object(init["serverInfo"])["name"] == "coremetry"


async def test_request_split_across_chunks_is_reassembled() -> None:
    text = "split \u00e9\u4e2d\U0001f600 across chunks"
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            message = call(7, "echo", {"text": text})
            client.methods[7] = "tools/call"
            data = json.dumps(message, ensure_ascii=False).encode() + b"\n"
            # Three bytes at a time: splits inside keys, values and multi-byte UTF-8 characters.
            for start in range(0, len(data), 3):
                await client.send(data[start : start + 3])
                # Let serve_stdio consume this piece before the next one arrives.
                await trio.testing.wait_all_tasks_blocked()
            reply = await client.reply(7)
    assert tool_text(reply) == text


async def test_several_requests_in_one_chunk_are_all_answered() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.send_messages(
                initialize(0),
                notification("notifications/initialized"),
                *(call(i, "echo", {"text": f"message {i}"}) for i in range(1, 21)),
                request(21, "ping"),
            )
            await client.close_stdin()
            messages = await client.rest()
    replies = {m["id"]: m for m in messages}
    assert sorted(str(i) for i in replies) == sorted(str(i) for i in range(22))
    for i in range(1, 21):
        assert tool_text(replies[i]) == f"message {i}"
    assert replies[21]["result"] == {}


async def test_final_line_without_newline_is_served_at_eof() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            client.methods[9] = "tools/call"
            await client.send(encode(call(9, "echo", {"text": "last"})).rstrip(b"\n"))
            await client.close_stdin()
            messages = await client.rest()
    assert len(messages) == 1
    assert tool_text(messages[0]) == "last"


async def test_blank_lines_are_ignored() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.send(b"\n\n")
            await client.handshake()
            client.methods[1] = "ping"
            client.methods[2] = "ping"
            await client.send(
                b"\n   \n\t\n\r\n"
                + encode(request(1, "ping"))
                + b"\n\n \n"
                + encode(request(2, "ping"))
            )
            await client.send(b"\n")
            await client.close_stdin()
            messages = await client.rest()
    # Only the two pings are answered: no error for any blank or whitespace-only line.
    assert messages == [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 2, "result": {}},
    ]


async def test_crlf_line_endings_are_accepted() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            client.methods[3] = "tools/call"
            await client.send(encode(call(3, "echo", {"text": "crlf"})).replace(b"\n", b"\r\n"))
            reply = await client.reply(3)
    assert tool_text(reply) == "crlf"


# ---- over-long lines -----------------------------------------------------------------------


def echo_line_of(size: int, request_id: int) -> bytes:
    """An echo request encoded as exactly ``size`` bytes, newline excluded."""
    base = json.dumps(call(request_id, "echo", {"text": ""}), separators=(",", ":")).encode()
    pad = size - len(base)
    assert pad >= 0
    line = json.dumps(call(request_id, "echo", {"text": "y" * pad}), separators=(",", ":")).encode()
    assert len(line) == size
    return line


def assert_too_long_error(message: Mapping[str, object]) -> None:
    assert message["id"] is None
    error = as_object(message["error"])
    assert error["code"] == codes.PARSE_ERROR == -32700
    assert isinstance(error["message"], str)
    assert str(SMALL_LIMIT) in error["message"]


@pytest.mark.parametrize("piece", [None, 100, 1000], ids=["one-chunk", "100-byte-chunks", "1000"])
async def test_line_longer_than_limit_gets_parse_error_and_next_line_works(
    piece: int | None,
) -> None:
    long_line = echo_line_of(SMALL_LIMIT * 3 + 17, 5) + b"\n"
    with trio.fail_after(LIMIT_S):
        async with stdio_session(max_line_bytes=SMALL_LIMIT) as client:
            await client.handshake()
            client.methods[5] = "tools/call"
            client.methods[6] = "ping"
            data = long_line + encode(request(6, "ping"))
            if piece is None:
                await client.send(data)
            else:
                for start in range(0, len(data), piece):
                    await client.send(data[start : start + piece])
                    await trio.testing.wait_all_tasks_blocked()
            first = await client.message()
            second = await client.message()
            await client.close_stdin()
            rest = await client.rest()
    assert_too_long_error(first)
    assert second == {"jsonrpc": "2.0", "id": 6, "result": {}}
    assert rest == []  # exactly one error for the long line, and the long request never ran


async def test_line_exactly_at_limit_is_accepted_and_one_byte_more_is_not() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session(max_line_bytes=SMALL_LIMIT) as client:
            await client.handshake()
            client.methods[1] = "tools/call"
            client.methods[2] = "tools/call"
            await client.send(echo_line_of(SMALL_LIMIT, 1) + b"\n")
            at_limit = await client.message()
            await client.send(echo_line_of(SMALL_LIMIT + 1, 2) + b"\n")
            over = await client.message()
    assert at_limit["id"] == 1
    assert tool_text(at_limit).startswith("y")
    assert_too_long_error(over)


async def test_too_long_final_line_without_newline_still_gets_an_error() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session(max_line_bytes=SMALL_LIMIT) as client:
            await client.handshake()
            await client.send(echo_line_of(SMALL_LIMIT * 2, 1))
            await client.close_stdin()
            messages = await client.rest()
    assert len(messages) == 1
    assert_too_long_error(messages[0])


async def test_garbage_line_gets_parse_error_and_session_goes_on() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            client.methods[2] = "ping"
            await client.send(b"{not json\n" + encode(request(2, "ping")))
            bad = await client.message()
            good = await client.message()
    assert bad["id"] is None
    assert as_object(bad["error"])["code"] == codes.PARSE_ERROR
    assert good == {"jsonrpc": "2.0", "id": 2, "result": {}}


# ---- end of input and cancellation --------------------------------------------------------


async def test_eof_lets_in_flight_call_finish_and_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            start = trio.current_time()
            await client.send_messages(call(2, "sleep_ms", {"ms": 200}))
            await client.close_stdin()
            # rest() waits for serve_stdio to return, THEN closes stdout and reads it: whatever
            # it finds was written before serve_stdio returned.
            messages = await client.rest()
            assert trio.current_time() - start >= 0.2
    assert len(messages) == 1
    reply = messages[0]
    assert reply["id"] == 2
    assert as_object(reply["result"]).get("isError") in (None, False)
    assert tool_text(reply) == "slept 200 ms"


async def test_eof_with_several_in_flight_calls_answers_them_all(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(
                call(1, "sleep_ms", {"ms": 300}),
                call(2, "sleep_ms", {"ms": 150}, progressToken="t2"),
                call(3, "echo", {"text": "quick"}),
            )
            await client.close_stdin()
            messages = await client.rest()
    replies = {m["id"]: m for m in messages if "method" not in m}
    assert set(replies) == {1, 2, 3}
    assert tool_text(replies[1]) == "slept 300 ms"
    assert tool_text(replies[2]) == "slept 150 ms"
    assert tool_text(replies[3]) == "quick"
    # Progress notifications for call 2 all come before its answer, never after.
    order = [m.get("id", m.get("method")) for m in messages]
    last_progress = max(
        i
        for i, m in enumerate(messages)
        if m.get("method") == "notifications/progress"
        and as_object(m["params"])["progressToken"] == "t2"
    )
    assert last_progress < order.index(2)


@pytest.mark.parametrize("ms", [10, 50, 100, 140, 200])
async def test_sleep_ms_with_progress_token_succeeds(
    autojump_clock: trio.testing.MockClock, ms: int
) -> None:
    """BUG (conformance_fixture/fixture.py ``_sleep``): for ms in 100..140 the float sum of
    0.01 s steps falls short of the total by ~1e-17 s, one extra step reports the same rounded
    progress again, ``report_progress`` raises ValueError and the call answers ``internal``."""
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(call(1, "sleep_ms", {"ms": ms}, progressToken="p"))
            reply = await client.reply(1)
    assert tool_text(reply) == f"slept {ms} ms"
    progress = [
        as_object(m["params"]) for m in client.seen if m.get("method") == "notifications/progress"
    ]
    values = [v for p in progress if isinstance(v := p["progress"], int | float)]
    assert len(values) == len(progress) > 0, progress
    assert values == sorted(set(values))  # strictly increasing
    assert values[-1] == ms
    assert all(p["total"] == ms and p["progressToken"] == "p" for p in progress)


@pytest.mark.parametrize("call_id", [2, "call-2"])
async def test_cancelled_in_flight_call_is_never_answered(
    autojump_clock: trio.testing.MockClock, call_id: RequestId
) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(call(call_id, "sleep_ms", {"ms": 200}, progressToken="slow"))
            # Wait until the call is really running: its first progress notification.
            first = await client.message()
            assert first["method"] == "notifications/progress"
            assert as_object(first["params"])["progressToken"] == "slow"
            await client.send_messages(
                notification(
                    "notifications/cancelled", {"requestId": call_id, "reason": "user gave up"}
                ),
                call(3, "echo", {"text": "still here"}),
            )
            echo = await client.reply(3)
            after_echo = len(client.seen)
            # Let the cancelled call's 200 ms (and much more) pass: nothing may come for it.
            await trio.sleep(5)
            # The id is free again: a new call under the same id is served normally.
            await client.send_messages(call(call_id, "echo", {"text": "reused id"}))
            reused = await client.reply(call_id)
            await client.close_stdin()
            rest = await client.rest()
    assert tool_text(echo) == "still here"
    assert tool_text(reused) == "reused id"
    assert rest == []
    answers_for_call = [m for m in client.seen if "method" not in m and m["id"] == call_id]
    assert answers_for_call == [reused]
    # No progress for the cancelled call after the cancellation took effect.
    late_progress = [
        m for m in client.seen[after_echo:] if m.get("method") == "notifications/progress"
    ]
    assert late_progress == []


async def test_call_cancelled_in_the_same_chunk_is_never_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(
                call(2, "sleep_ms", {"ms": 200}),
                notification("notifications/cancelled", {"requestId": 2}),
                call(3, "echo", {"text": "after"}),
            )
            await client.close_stdin()
            messages = await client.rest()
    assert ids_answered(messages) == [3]


async def test_cancel_of_unknown_or_finished_id_is_ignored() -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(call(1, "echo", {"text": "done"}))
            done = await client.reply(1)
            await client.send_messages(
                notification("notifications/cancelled", {"requestId": 1}),
                notification("notifications/cancelled", {"requestId": 999}),
                notification("notifications/cancelled", {"nonsense": True}),
                request(2, "ping"),
            )
            await client.close_stdin()
            messages = await client.rest()
    assert tool_text(done) == "done"
    assert messages == [{"jsonrpc": "2.0", "id": 2, "result": {}}]


async def test_broken_stdout_makes_serve_stdio_return(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(call(1, "sleep_ms", {"ms": 60_000}))
            # The client goes away: its end of stdout is closed while stdin stays open.
            await client.from_server.aclose()
            await client.send_messages(request(2, "ping"))
            # serve_stdio notices on its next write and returns (without raising), cancelling
            # the in-flight call; stdin is still open, so nothing else would end it.
            await client.stopped.wait()
            assert not client.stdin_closed


async def test_a_task_on_stdio_reports_its_status_and_is_collected() -> None:
    """2025-11-25 tasks over stdio: the task is created at once, its status change is a
    ``notifications/tasks/status`` line, and ``tasks/result`` answers the call's result."""
    with trio.fail_after(LIMIT_S):
        async with stdio_session() as client:
            await client.handshake()
            await client.send_messages(
                request(1, "tools/call", {"name": "sleep_ms", "arguments": {"ms": 20}, "task": {}})
            )
            created = await client.reply(1)
            task_id = as_object(as_object(created["result"])["task"])["taskId"]
            status: JsonObject = {}
            while not status:
                message = await client.message()
                if message.get("method") == "notifications/tasks/status":
                    status = as_object(message["params"])
            await client.send_messages(request(2, "tasks/result", {"taskId": task_id}))
            collected = await client.reply(2)
    assert status["taskId"] == task_id
    assert status["status"] == "completed"
    assert tool_text(collected) == "slept 20 ms"
    meta = as_object(as_object(collected["result"])["_meta"])
    assert meta["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
