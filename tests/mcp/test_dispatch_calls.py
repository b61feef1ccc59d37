"""Gated calls: tools/call, resources/read, prompts/get, completion, deadlines, cancellation,
progress and logging.

Field failures B19 (progress), B20 (tools/call error shapes), B21 (prompts/get) and B25
(deadlines); ``basic/utilities/cancellation`` and ``server/utilities/logging``.
"""

import json
from itertools import pairwise

import pytest
import trio
import trio.testing
from test_dispatch_support import (
    HANDSHAKE_REVISIONS,
    LATEST_HANDSHAKE,
    META_LOG_LEVEL,
    STATELESS,
    JsonObj,
    RequestId,
    Session,
    arr,
    check,
    decode,
    encode,
    error_of,
    obj,
    result_of,
    text,
    tool_error,
    tool_text,
)

from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import Caller, Connection, PendingCall, Reply, Server, serve_connection, versions

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
ALL_REVISIONS = (*HANDSHAKE_REVISIONS, STATELESS)


async def _session(revision: str, server: Server | None = None, role: str = "viewer") -> Session:
    session = Session(server, role=role)
    if revision != STATELESS:
        await session.initialize(revision)
    return session


# ---- tools/call ------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_echo(revision: str) -> None:
    session = await _session(revision)
    result = await session.call_tool("echo", {"text": "héllo 😀"}, stateless=revision == STATELESS)
    assert tool_text(result) == "héllo 😀"


@pytest.mark.parametrize("revision", ALL_REVISIONS)
@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"name": "no_such_tool_zz", "arguments": {}}, id="unknown"),
        pytest.param({"name": "no_such_tool_zz"}, id="unknown-no-args"),
        pytest.param({"arguments": {"text": "x"}}, id="missing-name"),
        pytest.param({}, id="empty"),
        pytest.param({"name": 5}, id="name-not-string"),
    ],
)
async def test_tools_call_protocol_errors(revision: str, params: JsonObj) -> None:
    session = await _session(revision)
    message = await session.request(
        "tools/call", params, request_id=9, stateless=revision == STATELESS
    )
    assert message["id"] == 9
    error = error_of(message)
    assert error["code"] == INVALID_PARAMS
    if params.get("name") == "no_such_tool_zz":
        assert "no_such_tool_zz" in text(error["message"])


@pytest.mark.parametrize("revision", ALL_REVISIONS)
@pytest.mark.parametrize(
    "arguments",
    [{"text": 123}, {}, {"text": None}, {"text": ["a"]}],
    ids=["int", "missing", "null", "list"],
)
async def test_bad_arguments_are_is_error_naming_the_field(
    revision: str, arguments: JsonObj
) -> None:
    session = await _session(revision)
    result = await session.call_tool("echo", arguments, stateless=revision == STATELESS)
    error = tool_error(result)
    assert error["error"] == "bad_args"
    assert error["retryable"] is False
    assert "$.text" in text(error["detail"])


async def test_arguments_not_an_object_is_bad_args() -> None:
    session = await _session(LATEST_HANDSHAKE)
    message = await session.request("tools/call", {"name": "echo", "arguments": "text"})
    if "error" in message:
        assert error_of(message)["code"] == INVALID_PARAMS
    else:
        assert tool_error(result_of(message))["error"] == "bad_args"


async def test_unknown_argument_is_bad_args() -> None:
    session = await _session(LATEST_HANDSHAKE)
    error = tool_error(await session.call_tool("echo", {"text": "x", "colour": "red"}))
    assert error["error"] == "bad_args"
    assert "colour" in text(error["detail"])


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [
        ("timeout", True),
        ("backend_unavailable", True),
        ("bad_args", False),
        ("not_found", False),
        ("internal", False),
    ],
)
@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_fail_kinds(kind: str, retryable: bool, revision: str) -> None:
    session = await _session(revision)
    result = await session.call_tool("fail", {"kind": kind}, stateless=revision == STATELESS)
    error = tool_error(result)
    assert list(error) == ["error", "retryable", "hint", "detail"]
    assert error["error"] == kind
    assert error["retryable"] is retryable
    assert text(error["hint"])
    assert text(error["detail"])
    if versions.at_least(revision, "2025-06-18"):
        structured = obj(result["structuredContent"])
        assert structured == error
        assert list(structured) == ["error", "retryable", "hint", "detail"]
    else:
        assert "structuredContent" not in result


@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_internal_failure_leaks_nothing(revision: str) -> None:
    session = await _session(revision)
    data = session.build(
        "tools/call",
        {"name": "fail", "arguments": {"kind": "internal"}},
        stateless=revision == STATELESS,
    )
    reply = await session.server.handle(data, session.conn)
    assert reply is not None
    body = reply.body.decode("utf-8")
    for secret in ("/srv/secret", "hunter2", "Traceback", "RuntimeError", "password", "fixture.py"):
        assert secret not in body, secret
    message = check(
        decode(reply.body), STATELESS if revision == STATELESS else revision, "tools/call"
    )
    detail = text(tool_error(result_of(message))["detail"])
    assert "unexpected error" in detail


async def test_tool_output_is_utf8_json_text() -> None:
    session = await _session(LATEST_HANDSHAKE)
    result = await session.call_tool("big_output", {"size_bytes": 100_000})
    assert tool_text(result) == "x" * 100_000


# ---- resources/read --------------------------------------------------------------------------


@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_read_static_resource(revision: str) -> None:
    session = await _session(revision)
    result = await session.result(
        "resources/read", {"uri": "fixture://info"}, stateless=revision == STATELESS
    )
    contents = arr(result["contents"])
    assert len(contents) == 1
    item = obj(contents[0])
    assert item["uri"] == "fixture://info"
    assert item["mimeType"] == "application/json"
    assert json.loads(text(item["text"])) == {"fixture": True, "uri": "fixture://info"}


@pytest.mark.parametrize("revision", ALL_REVISIONS)
@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("fixture://echo/caf%C3%A9", "café"),
        ("fixture://echo/plain", "plain"),
        ("fixture://echo/a%20b", "a b"),
        ("fixture://echo/%F0%9F%98%80", "😀"),
        ("fixture://echo/api%2Fgateway", "api/gateway"),
        ("fixture://echo/a%252Fb", "a%2Fb"),
    ],
)
async def test_read_template_decodes_the_value(revision: str, uri: str, expected: str) -> None:
    session = await _session(revision)
    result = await session.result("resources/read", {"uri": uri}, stateless=revision == STATELESS)
    item = obj(arr(result["contents"])[0])
    assert item["uri"] == uri
    assert json.loads(text(item["text"])) == {"text": expected}


_MISSING_URIS = [
    "fixture://echo/..",
    "fixture://echo/%2E%2E",
    "fixture://echo/.",
    "fixture://echo/a%2F..",
    "fixture://echo/a/b",
    "fixture://echo/",
    "fixture://nope",
    "nope://fixture/info",
    "",
]


@pytest.mark.parametrize("uri", _MISSING_URIS)
@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
async def test_read_unknown_uri_handshake_is_32002(uri: str, revision: str) -> None:
    session = await _session(revision)
    message = await session.request("resources/read", {"uri": uri}, request_id="r")
    assert message["id"] == "r"
    error = error_of(message)
    assert error["code"] == RESOURCE_NOT_FOUND
    assert obj(error["data"])["uri"] == uri


@pytest.mark.parametrize("uri", _MISSING_URIS)
async def test_read_unknown_uri_stateless_is_32602(uri: str) -> None:
    session = Session()
    message = await session.request("resources/read", {"uri": uri}, request_id="r", stateless=True)
    assert message["id"] == "r"
    error = error_of(message)
    assert error["code"] == INVALID_PARAMS
    assert obj(error["data"])["uri"] == uri


# ---- prompts/get and completion --------------------------------------------------------------


@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_get_prompt(revision: str) -> None:
    session = await _session(revision)
    stateless = revision == STATELESS
    result = await session.result(
        "prompts/get", {"name": "greet", "arguments": {"name": "ada"}}, stateless=stateless
    )
    messages = [obj(m) for m in arr(result["messages"])]
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    content = obj(messages[0]["content"])
    assert content == {"type": "text", "text": "Say hello to ada in a plain style."}
    pirate = await session.result(
        "prompts/get",
        {"name": "greet", "arguments": {"name": "ada", "style": "pirate"}},
        stateless=stateless,
    )
    assert "pirate" in text(obj(obj(arr(pirate["messages"])[0])["content"])["text"])


@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_get_unknown_prompt_is_32602(revision: str) -> None:
    session = await _session(revision)
    error = await session.error(
        "prompts/get", {"name": "no_such_prompt_zz"}, stateless=revision == STATELESS
    )
    assert error["code"] == INVALID_PARAMS
    assert "no_such_prompt_zz" in text(error["message"])


@pytest.mark.parametrize(
    "params",
    [
        {"name": "greet"},
        {"name": "greet", "arguments": {}},
        {"name": "greet", "arguments": None},
        {"name": "greet", "arguments": {"style": "pirate"}},
        {"name": "greet", "arguments": {"name": ""}},
    ],
    ids=["omitted", "empty", "null", "only-optional", "empty-string"],
)
@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_get_prompt_missing_required_argument(params: JsonObj, revision: str) -> None:
    session = await _session(revision)
    error = await session.error("prompts/get", params, stateless=revision == STATELESS)
    assert error["code"] == INVALID_PARAMS
    message = text(error["message"])
    assert "name" in message.replace("greet", "")
    assert "None" not in message
    assert "{" not in message


async def test_get_prompt_wrong_argument_type_is_32602() -> None:
    session = await _session(LATEST_HANDSHAKE)
    error = await session.error("prompts/get", {"name": "greet", "arguments": {"name": 5}})
    assert error["code"] == INVALID_PARAMS


@pytest.mark.parametrize("revision", ALL_REVISIONS)
@pytest.mark.parametrize(
    ("value", "expected"),
    [("a", ["ada", "alan"]), ("A", ["ada", "alan"]), ("g", ["grace"]), ("zz", [])],
)
async def test_complete_prompt_argument(revision: str, value: str, expected: list[str]) -> None:
    session = await _session(revision)
    result = await session.result(
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "name", "value": value},
        },
        stateless=revision == STATELESS,
    )
    completion = obj(result["completion"])
    assert completion["values"] == expected
    total = completion.get("total")
    assert total is None or total == len(expected)
    assert completion.get("hasMore", False) is False


async def test_complete_unknown_prompt_is_32602() -> None:
    session = await _session(LATEST_HANDSHAKE)
    error = await session.error(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "zz"}, "argument": {"name": "name", "value": "a"}},
    )
    assert error["code"] == INVALID_PARAMS


# ---- deadlines -------------------------------------------------------------------------------


def _assert_timeout(result: JsonObj) -> None:
    error = tool_error(result)
    assert error["error"] == "timeout"
    assert error["retryable"] is True


@pytest.mark.parametrize("revision", [LATEST_HANDSHAKE, STATELESS])
async def test_tool_budget_expires_as_timeout(
    revision: str, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(revision)
    start = trio.current_time()
    result = await session.call_tool("sleep_ms", {"ms": 5000}, stateless=revision == STATELESS)
    _assert_timeout(result)
    elapsed = trio.current_time() - start  # virtual time (MockClock): deterministic
    assert 1.9 <= elapsed <= 2.1
    assert session.conn.in_flight == {}


@pytest.mark.parametrize("revision", [LATEST_HANDSHAKE, STATELESS])
async def test_client_timeout_meta_shortens_the_deadline(
    revision: str, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(revision)
    start = trio.current_time()
    result = await session.call_tool(
        "sleep_ms",
        {"ms": 1000},
        stateless=revision == STATELESS,
        meta={"coremetry/timeout_ms": 100},
    )
    _assert_timeout(result)
    assert trio.current_time() - start <= 0.2


async def test_client_timeout_meta_never_lengthens_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    start = trio.current_time()
    result = await session.call_tool(
        "sleep_ms", {"ms": 5000}, meta={"coremetry/timeout_ms": 60_000}
    )
    _assert_timeout(result)
    assert trio.current_time() - start <= 2.1


@pytest.mark.parametrize("revision", [LATEST_HANDSHAKE, STATELESS])
@pytest.mark.parametrize(
    ("timeout_ms", "why"),
    [
        (-5, "must be a non-negative integer number of milliseconds, got -5"),
        (-0.5, "must be a non-negative integer number of milliseconds, got -0.5"),
        (1.5, "must be a non-negative integer number of milliseconds, got 1.5"),
        (True, "Expected `int | float`, got `bool`"),
        ("100", "Expected `int | float`, got `str`"),
        (None, "Expected `int | float`, got `null`"),
    ],
)
@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
        ("resources/read", {"uri": "fixture://info"}),
        ("ping", None),
    ],
)
async def test_client_timeout_meta_must_be_a_non_negative_integer(
    revision: str,
    timeout_ms: object,
    why: str,
    method: str,
    params: JsonObj | None,
) -> None:
    session = await _session(revision)
    message = await session.request(
        method,
        params,
        request_id=7,
        stateless=revision == STATELESS,
        meta={"coremetry/timeout_ms": timeout_ms},
    )  # validated against the revision's schema.json by the session
    assert message["id"] == 7
    error = error_of(message)
    assert error["code"] == INVALID_PARAMS
    assert text(error["message"]).startswith(f"Invalid params for {method}: ")
    assert "coremetry/timeout_ms" in text(error["message"])
    assert why in text(error["message"])
    assert session.conn.in_flight == {}


@pytest.mark.parametrize("timeout_ms", [0, 0.0, 250, 250.0])
async def test_client_timeout_meta_accepts_whole_milliseconds(
    timeout_ms: float, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    start = trio.current_time()
    result = await session.call_tool(
        "sleep_ms", {"ms": 1000}, meta={"coremetry/timeout_ms": timeout_ms}
    )
    _assert_timeout(result)
    assert trio.current_time() - start == pytest.approx(timeout_ms / 1000, abs=0.01)


async def test_server_max_budget_caps_the_tool_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Server("t", "1", max_budget_s=0.5)
    register_fixture(server)
    session = await _session(LATEST_HANDSHAKE, server)
    start = trio.current_time()
    _assert_timeout(await session.call_tool("sleep_ms", {"ms": 1000}))
    assert trio.current_time() - start <= 0.6
    assert tool_text(await session.call_tool("sleep_ms", {"ms": 200})) == "slept 200 ms"


async def test_next_call_works_after_a_timeout(autojump_clock: trio.testing.MockClock) -> None:
    session = await _session(LATEST_HANDSHAKE)
    message = await session.request(
        "tools/call", {"name": "sleep_ms", "arguments": {"ms": 5000}}, request_id=1
    )
    _assert_timeout(result_of(message))
    assert await session.result("ping") == {}
    again = await session.request(
        "tools/call", {"name": "echo", "arguments": {"text": "y"}}, request_id=1
    )
    assert again["id"] == 1
    assert tool_text(result_of(again)) == "y"
    assert tool_text(await session.call_tool("sleep_ms", {"ms": 20})) == "slept 20 ms"


# ---- cancellation ----------------------------------------------------------------------------


def _cancel(request_id: RequestId) -> bytes:
    return encode(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    )


def _sleep_call(session: Session, request_id: RequestId, ms: int, *, token: object = None) -> bytes:
    meta = None if token is None else {"progressToken": token}
    return session.build(
        "tools/call",
        {"name": "sleep_ms", "arguments": {"ms": ms}},
        request_id=request_id,
        meta=meta,
    )


@pytest.mark.parametrize("request_id", [0, 7, "c-1", ""])
async def test_cancelled_call_answers_nothing(
    request_id: RequestId, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    pending = session.server.receive(
        _sleep_call(session, request_id, 1000, token="t"), session.conn
    )
    assert isinstance(pending, PendingCall)
    assert request_id in session.conn.in_flight
    outcomes: list[Reply | None] = []
    start = trio.current_time()

    async def run() -> None:
        outcomes.append(await pending.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(0.05)
        assert session.server.receive(_cancel(request_id), session.conn) is None
        progress_at_cancel = len(session.notifications)
    assert outcomes == [None]
    assert trio.current_time() - start < 0.1  # the handler stopped; it did not sleep on
    assert session.conn.in_flight == {}
    assert 0 < progress_at_cancel == len(session.notifications)
    assert tool_text(await session.call_tool("echo", {"text": "after"})) == "after"


async def test_cancel_before_run_answers_nothing(autojump_clock: trio.testing.MockClock) -> None:
    session = await _session(LATEST_HANDSHAKE)
    pending = session.server.receive(
        session.build("tools/call", {"name": "echo", "arguments": {"text": "x"}}, request_id=3),
        session.conn,
    )
    assert isinstance(pending, PendingCall)
    assert session.server.receive(_cancel(3), session.conn) is None
    assert await pending.run() is None
    assert session.conn.in_flight == {}


@pytest.mark.parametrize("other", [8, "7", 424242])
async def test_cancel_for_unknown_id_is_ignored(
    other: RequestId, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    pending = session.server.receive(_sleep_call(session, 7, 100), session.conn)
    assert isinstance(pending, PendingCall)
    outcomes: list[Reply | None] = []

    async def run() -> None:
        outcomes.append(await pending.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(0.02)
        assert session.server.receive(_cancel(other), session.conn) is None
    reply = outcomes[0]
    assert reply is not None
    message = session.record(reply, session.revision, "tools/call")
    assert message["id"] == 7
    assert tool_text(result_of(message)) == "slept 100 ms"


async def test_cancel_after_completion_is_ignored(autojump_clock: trio.testing.MockClock) -> None:
    session = await _session(LATEST_HANDSHAKE)
    pending = session.server.receive(_sleep_call(session, 5, 20), session.conn)
    assert isinstance(pending, PendingCall)
    reply = await pending.run()
    assert reply is not None
    session.record(reply, session.revision, "tools/call")
    # the cancel arrives right after the handler returned: still exactly one answer
    assert session.server.receive(_cancel(5), session.conn) is None
    assert session.conn.in_flight == {}
    again = await session.request(
        "tools/call", {"name": "echo", "arguments": {"text": "z"}}, request_id=5
    )
    assert tool_text(result_of(again)) == "z"
    assert [kind for kind, _ in session.events].count("reply") == 3  # initialize + two calls


@pytest.mark.parametrize("cancel_after_s", [0.0, 0.005, 0.009, 0.01, 0.011, 0.02, 0.5])
async def test_cancel_racing_completion_never_answers_twice(
    cancel_after_s: float, autojump_clock: trio.testing.MockClock
) -> None:
    server = Server("t", "1")
    register_fixture(server)
    sent: list[JsonObj] = []

    async def capture(data: bytes) -> None:
        sent.append(obj(decode(data)))

    conn = Connection(caller=Caller(subject="u", role="viewer"), transport="test", send=capture)
    methods: dict[object, str] = {0: "initialize", 1: "tools/call", 2: "ping"}
    send_channel, receive_channel = trio.open_memory_channel[bytes](16)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, server, conn, receive_channel)
        async with send_channel:
            await send_channel.send(
                encode(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
                    }
                )
            )
            await send_channel.send(
                encode(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "sleep_ms", "arguments": {"ms": 10}},
                    }
                )
            )
            await trio.sleep(cancel_after_s)
            await send_channel.send(_cancel(1))
            await send_channel.send(encode({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
            await trio.sleep(1)
    for message in sent:
        check(message, "2025-11-25", methods[message.get("id")])
    answers = [m for m in sent if m.get("id") == 1]
    assert len(answers) <= 1, answers
    if cancel_after_s >= 0.02:
        assert len(answers) == 1
        assert tool_text(result_of(answers[0])) == "slept 10 ms"
    assert [m["id"] for m in sent if m.get("id") in (0, 2)] == [0, 2]
    assert conn.in_flight == {}


async def test_duplicate_in_flight_id_is_invalid_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    first = session.server.receive(_sleep_call(session, 5, 50), session.conn)
    assert isinstance(first, PendingCall)
    outcomes: list[Reply | None] = []

    async def run() -> None:
        outcomes.append(await first.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(0.01)
        duplicate = await session.request(
            "tools/call", {"name": "echo", "arguments": {"text": "dup"}}, request_id=5
        )
        assert duplicate["id"] == 5
        assert error_of(duplicate)["code"] == INVALID_REQUEST
        other_type = await session.request(
            "tools/call", {"name": "echo", "arguments": {"text": "str id"}}, request_id="5"
        )
        assert tool_text(result_of(other_type)) == "str id"
    reply = outcomes[0]
    assert reply is not None
    assert (
        tool_text(result_of(session.record(reply, session.revision, "tools/call"))) == "slept 50 ms"
    )
    reused = await session.request(
        "tools/call", {"name": "echo", "arguments": {"text": "r"}}, request_id=5
    )
    assert tool_text(result_of(reused)) == "r"


async def test_cancel_all_on_disconnect(autojump_clock: trio.testing.MockClock) -> None:
    session = await _session(LATEST_HANDSHAKE)
    calls = [session.server.receive(_sleep_call(session, i, 1000), session.conn) for i in range(3)]
    outcomes: list[Reply | None] = []

    async def run(call: PendingCall) -> None:
        outcomes.append(await call.run())

    async with trio.open_nursery() as nursery:
        for call in calls:
            assert isinstance(call, PendingCall)
            nursery.start_soon(run, call)
        await trio.sleep(0.05)
        session.conn.cancel_all()
    assert outcomes == [None, None, None]
    assert session.conn.in_flight == {}


# ---- progress --------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [0, "tok-é-1", "", 9007199254740991, -3])
@pytest.mark.parametrize("revision", ALL_REVISIONS)
async def test_progress_echoes_the_token(
    token: RequestId, revision: str, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(revision)
    stateless = revision == STATELESS
    result = await session.call_tool(
        "sleep_ms", {"ms": 50}, stateless=stateless, meta={"progressToken": token}
    )
    assert tool_text(result) == "slept 50 ms"
    await trio.sleep(1)  # nothing may follow the answer
    kinds = [kind for kind, _ in session.events]
    # initialize's reply (handshake), the progress notifications, then the call's reply, last
    assert kinds[-1] == "reply"
    progress = [m for kind, m in session.events[:-1] if kind == "notification"]
    assert len(progress) >= 2
    assert progress == session.notifications
    values: list[float] = []
    totals: set[object] = set()
    for message in progress:
        assert message["method"] == "notifications/progress"
        params = obj(message["params"])
        assert params["progressToken"] == token
        assert type(params["progressToken"]) is type(token)
        value = params["progress"]
        assert isinstance(value, int | float)
        values.append(value)
        totals.add(params.get("total"))
        if revision == "2024-11-05":
            assert "message" not in params
        else:
            assert params["message"] == "sleeping"
    assert all(b > a for a, b in pairwise(values)), values
    assert len(totals) == 1


@pytest.mark.parametrize("revision", [LATEST_HANDSHAKE, STATELESS])
async def test_no_token_no_progress(revision: str, autojump_clock: trio.testing.MockClock) -> None:
    session = await _session(revision)
    result = await session.call_tool("sleep_ms", {"ms": 50}, stateless=revision == STATELESS)
    assert tool_text(result) == "slept 50 ms"
    assert session.notifications == []


@pytest.mark.parametrize("ms", [10, 30, 100, 120, 250, 1000])
async def test_progress_reporting_call_completes(
    ms: int, autojump_clock: trio.testing.MockClock
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    result = await session.call_tool("sleep_ms", {"ms": ms}, meta={"progressToken": "p"})
    assert tool_text(result) == f"slept {ms} ms"
    assert session.notifications
    last = obj(session.notifications[-1]["params"])
    assert last["progress"] == ms == last["total"]


async def test_progress_without_a_notification_channel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = Session(can_notify=False)
    await session.initialize(LATEST_HANDSHAKE)
    result = await session.call_tool("sleep_ms", {"ms": 50}, meta={"progressToken": 1})
    assert tool_text(result) == "slept 50 ms"


async def test_timed_out_call_sends_no_progress_after_its_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await _session(LATEST_HANDSHAKE)
    _assert_timeout(
        await session.call_tool(
            "sleep_ms", {"ms": 1000}, meta={"progressToken": 1, "coremetry/timeout_ms": 55}
        )
    )
    count = len(session.notifications)
    await trio.sleep(2)
    assert len(session.notifications) == count
    assert session.events[-1][0] == "reply"


# ---- logging ---------------------------------------------------------------------------------


def _levels(session: Session) -> list[str]:
    levels: list[str] = []
    for message in session.notifications:
        assert message["method"] == "notifications/message"
        params = obj(message["params"])
        assert params["logger"] == "fixture"
        assert params["data"] == {"level": params["level"]}
        levels.append(text(params["level"]))
    return levels


@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
async def test_logging_default_level_is_info(revision: str) -> None:
    session = await _session(revision)
    assert tool_text(await session.call_tool("log_levels", {})) == "logged"
    assert _levels(session) == list(LEVELS[1:])


@pytest.mark.parametrize("level", LEVELS)
async def test_logging_after_set_level(level: str) -> None:
    session = await _session(LATEST_HANDSHAKE)
    assert await session.result("logging/setLevel", {"level": level}) == {}
    await session.call_tool("log_levels", {})
    assert _levels(session) == list(LEVELS[LEVELS.index(level) :])


async def test_logging_set_level_error() -> None:
    session = await _session("2025-03-26")
    await session.result("logging/setLevel", {"level": "error"})
    await session.call_tool("log_levels", {})
    assert _levels(session) == ["error", "critical", "alert", "emergency"]


async def test_logging_stateless_without_log_level_sends_nothing() -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    await session.result("logging/setLevel", {"level": "debug"})  # a handshake-era setting
    await session.call_tool("log_levels", {}, stateless=True)
    assert session.notifications == []


@pytest.mark.parametrize("level", ["warning", "debug", "emergency"])
async def test_logging_stateless_with_log_level(level: str) -> None:
    session = Session()
    await session.call_tool("log_levels", {}, stateless=True, meta={META_LOG_LEVEL: level})
    assert _levels(session) == list(LEVELS[LEVELS.index(level) :])


async def test_logging_stateless_log_level_is_per_request() -> None:
    session = Session()
    await session.call_tool("log_levels", {}, stateless=True, meta={META_LOG_LEVEL: "warning"})
    count = len(session.notifications)
    await session.call_tool("log_levels", {}, stateless=True)
    assert len(session.notifications) == count
