"""JSON-RPC 2.0 framing of the dispatcher: ids, error codes, notifications and batches.

Field failures B05, B06, B08 and B09 (``shared/reference/field-failures.md``).
"""

import json
from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dispatch_support import (
    LATEST_HANDSHAKE,
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
    stateless_meta,
)

from coremetry.mcp import Connection, PendingBatch, PendingCall, Reply
from coremetry.server import build_mcp_server

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


async def _answer(
    session: Session, data: bytes, revision: str | None = None
) -> tuple[JsonObj, int]:
    reply = await session.server.handle(data, session.conn)
    assert reply is not None
    message = check(decode(reply.body), revision or session.revision)
    return message, reply.http_status


# ---- ids -------------------------------------------------------------------------------------

ECHOED_IDS: list[RequestId] = [0, -5, 9007199254740991, 2**70, "", "1", "req-β-😀"]


@pytest.mark.parametrize("request_id", ECHOED_IDS, ids=repr)
@pytest.mark.parametrize("method", ["ping", "tools/list"])
async def test_request_id_echoed_with_value_and_json_type(
    request_id: RequestId, method: str
) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    message = await session.request(method, request_id=request_id)
    result_of(message)
    assert message["id"] == request_id
    assert type(message["id"]) is type(request_id)


@pytest.mark.parametrize("request_id", ECHOED_IDS, ids=repr)
async def test_request_id_echoed_on_errors_and_gated_calls(request_id: RequestId) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    unknown = await session.request("no/such/method", request_id=request_id)
    assert error_of(unknown)["code"] == METHOD_NOT_FOUND
    echo = await session.request(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}}, request_id=request_id
    )
    for message in (unknown, echo):
        assert message["id"] == request_id
        assert type(message["id"]) is type(request_id)


async def test_initialize_with_id_zero_is_a_real_request() -> None:
    session = Session()
    message = await session.request(
        "initialize", {"protocolVersion": LATEST_HANDSHAKE, "capabilities": {}}, request_id=0
    )
    assert message["id"] == 0
    assert type(message["id"]) is int
    assert result_of(message)["protocolVersion"] == LATEST_HANDSHAKE


@pytest.mark.parametrize("raw_id", ["null", "true", "1.5", "{}", "[]", "1e2"])
async def test_invalid_id_is_invalid_request_with_null_id(raw_id: str) -> None:
    session = Session()
    data = b'{"jsonrpc":"2.0","id":' + raw_id.encode() + b',"method":"ping"}'
    message, status = await _answer(session, data)
    assert "id" in message
    assert message["id"] is None
    assert error_of(message)["code"] == INVALID_REQUEST
    assert status == 400


# ---- parse errors and invalid requests -------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"pi', id="truncated"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping \x97"}', id="byte-0x97"),
        pytest.param(b"", id="empty"),
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"é"}'.encode("latin-1"), id="latin-1"),
        pytest.param(b"\xff\xfe{\x00}\x00", id="utf-16-bom"),
        pytest.param(b"{'jsonrpc': '2.0'}", id="single-quotes"),
        # Found by the fuzzer (bench/fuzz.py): a wrong type *before* the truncation was
        # answered -32600 (msgspec validates as it parses and stopped at the id).
        pytest.param(b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"', id="null-id-cut"),
        pytest.param(b'{"jsonrpc":"2.0","id":true,"method":"ping"', id="bool-id-cut"),
        pytest.param(b'{"jsonrpc":1,"id":1,"method":"ping",}', id="bad-jsonrpc-trailing-comma"),
        pytest.param(b'[1, {"jsonrpc":"2.0","id":1,"method":"ping"}', id="batch-cut"),
    ],
)
async def test_parse_error(data: bytes) -> None:
    session = Session()
    message, status = await _answer(session, data)
    assert message["id"] is None
    assert error_of(message)["code"] == PARSE_ERROR
    assert status == 400


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","methHd":"notifications/initialized","params":{}}',
        b'{"jsonrpc":"2.0"}',
        b"{}",
    ],
)
async def test_object_without_method_or_id_is_invalid_request(data: bytes) -> None:
    """Found by the fuzzer: neither a request, a notification nor a response; it was dropped
    (HTTP 202, no answer on stdio) instead of answered -32600 with id null."""
    session = Session()
    message, status = await _answer(session, data)
    assert message["id"] is None
    assert error_of(message)["code"] == INVALID_REQUEST
    assert status == 400


@pytest.mark.parametrize("data", [b"42", b'"x"', b"null", b"true", b"3.5"])
async def test_non_object_json_is_invalid_request(data: bytes) -> None:
    session = Session()
    message, status = await _answer(session, data)
    assert message["id"] is None
    assert error_of(message)["code"] == INVALID_REQUEST
    assert status == 400


@pytest.mark.parametrize(
    ("data", "expected_id"),
    [
        pytest.param(b'{"jsonrpc":"2.0","id":7}', 7, id="missing-method"),
        pytest.param(b'{"jsonrpc":"2.0","id":"s","params":{}}', "s", id="missing-method-str-id"),
        pytest.param(b'{"jsonrpc":"1.0","id":7,"method":"ping"}', 7, id="jsonrpc-1.0"),
        pytest.param(b'{"jsonrpc":"1.0","id":"a","method":"ping"}', "a", id="jsonrpc-1.0-str"),
        pytest.param(b'{"id":8,"method":"ping"}', 8, id="jsonrpc-missing"),
        pytest.param(b'{"jsonrpc":2.0,"id":9,"method":"ping"}', 9, id="jsonrpc-number"),
        pytest.param(b'{"jsonrpc":"2.0","id":10,"method":5}', 10, id="method-number"),
        pytest.param(b'{"jsonrpc":"2.0","id":0,"method":null}', 0, id="method-null-id-0"),
        pytest.param(b'{"jsonrpc":"2.0","method":"ping"', None, id="unreadable"),
    ],
)
async def test_invalid_request_echoes_readable_id(
    data: bytes, expected_id: RequestId | None
) -> None:
    session = Session()
    message, status = await _answer(session, data)
    assert message["id"] == expected_id
    assert type(message["id"]) is type(expected_id)
    code = error_of(message)["code"]
    assert code == (PARSE_ERROR if expected_id is None else INVALID_REQUEST)
    assert status == 400


async def test_unknown_method_handshake_is_32601_http_200() -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    message, status = await session.request_reply("totally/bogus", request_id=2)
    assert message["id"] == 2
    assert error_of(message)["code"] == METHOD_NOT_FOUND
    assert status == 200


async def test_unknown_method_stateless_is_32601_http_404() -> None:
    session = Session()
    message, status = await session.request_reply("totally/bogus", request_id=2, stateless=True)
    assert message["id"] == 2
    assert error_of(message)["code"] == METHOD_NOT_FOUND
    assert status == 404


@pytest.mark.parametrize("params", ['"not-an-object"', "[1,2]", "42", "null"])
@pytest.mark.parametrize("method", ["tools/list", "ping", "tools/call", "resources/read"])
async def test_params_not_an_object_is_invalid_params(params: str, method: str) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    data = (
        b'{"jsonrpc":"2.0","id":3,"method":"'
        + method.encode()
        + b'","params":'
        + params.encode()
        + b"}"
    )
    message, _status = await _answer(session, data)
    assert message["id"] == 3
    assert error_of(message)["code"] == INVALID_PARAMS


# ---- notifications and client responses ------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', id="initialized"),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"notifications/zz_unknown","params":{}}', id="unknown"
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":424242}}',
            id="cancel-unknown-id",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}',
            id="cancel-malformed",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled"}', id="cancel-no-params"
        ),
        pytest.param(b'{"jsonrpc":"2.0","id":99,"result":{}}', id="client-result"),
        pytest.param(b'{"jsonrpc":"2.0","id":"r","result":{"roots":[]}}', id="client-result-str"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":99,"error":{"code":-32601,"message":"nope"}}', id="client-error"
        ),
        pytest.param(b'{"jsonrpc":"2.0","method":"ping"}', id="ping-as-notification"),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"zz/unknown","params":"not-an-object"}',
            id="unknown-method-bad-params",
        ),
    ],
)
async def test_notifications_and_responses_get_no_answer(data: bytes) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    assert await session.server.handle(data, session.conn) is None
    assert session.server.receive(data, session.conn) is None
    assert session.notifications == []


async def test_client_error_response_with_null_id_gets_no_answer() -> None:
    # JSON-RPC 2.0 §5: a client that could not read one of our messages answers with an error
    # response whose id is null. It is a response, not a request: answering it (with yet another
    # error) is how two peers end up ping-ponging errors forever.
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    data = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    reply = await session.server.handle(data, session.conn)
    assert reply is None, reply


@pytest.mark.parametrize("stateless", [False, True])
async def test_gated_method_sent_as_notification_runs_nothing(stateless: bool) -> None:
    session = Session()
    if not stateless:
        await session.initialize(LATEST_HANDSHAKE)
    params: JsonObj = {"name": "log_levels", "arguments": {}}
    if stateless:
        params["_meta"] = stateless_meta(**{"io.modelcontextprotocol/logLevel": "debug"})
    data = encode({"jsonrpc": "2.0", "method": "tools/call", "params": params})
    assert await session.server.handle(data, session.conn) is None
    assert session.notifications == []
    assert session.conn.in_flight == {}


# ---- batches ---------------------------------------------------------------------------------

PING_BATCH = (
    b'[{"jsonrpc":"2.0","id":1,"method":"ping"},'
    b'{"jsonrpc":"2.0","method":"notifications/zz"},'
    b'{"jsonrpc":"2.0","id":2,"method":"ping"}]'
)


@pytest.mark.parametrize("revision", [None, "2024-11-05", "2025-06-18", "2025-11-25"])
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(PING_BATCH, id="pings"),
        pytest.param(
            b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"ping"}]',
            id="list-and-ping",
        ),
        pytest.param(b"[]", id="empty"),
        pytest.param(
            b'[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}]',
            id="initialize",
        ),
        pytest.param(b"  [1, 2]", id="numbers"),
    ],
)
async def test_batch_rejected_outside_2025_03_26(revision: str | None, data: bytes) -> None:
    session = Session()
    if revision is not None:
        await session.initialize(revision)
    before = session.conn.protocol_version
    reply = await session.server.handle(data, session.conn)
    assert reply is not None
    message = check(decode(reply.body), session.revision)
    assert message["id"] is None
    assert error_of(message)["code"] == INVALID_REQUEST
    assert reply.http_status == 400
    assert session.conn.protocol_version == before  # a rejected batch runs nothing


async def test_batch_rejected_in_stateless_request_style() -> None:
    session = Session()
    item = session.build("tools/list", stateless=True)
    reply = await session.server.handle(b"[" + item + b"]", session.conn)
    assert reply is not None
    message = check(decode(reply.body), STATELESS)
    assert error_of(message)["code"] == INVALID_REQUEST
    assert message["id"] is None


async def test_rejected_batch_does_not_execute_its_calls() -> None:
    session = Session()
    await session.initialize("2025-11-25")
    data = b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"log_levels"}}]'
    reply = await session.server.handle(data, session.conn)
    assert reply is not None
    error_of(check(decode(reply.body), session.revision))
    assert session.notifications == []


async def _batch_2025_03_26(data: bytes) -> tuple[Session, list[JsonObj] | None, int]:
    session = Session()
    await session.initialize("2025-03-26")
    outcome = session.server.receive(data, session.conn)
    assert not isinstance(outcome, PendingCall), outcome
    reply = await outcome.run() if isinstance(outcome, PendingBatch) else outcome
    if reply is None:
        return session, None, 0
    decoded = decode(reply.body)
    if isinstance(decoded, dict):
        return session, [check(decoded, "2025-03-26")], reply.http_status
    items = [check(item, "2025-03-26", "ping") for item in arr(decoded)]
    return session, items, reply.http_status


async def test_batch_at_2025_03_26_answers_each_request_once() -> None:
    _session, items, status = await _batch_2025_03_26(PING_BATCH)
    assert items is not None
    assert len(items) == 2
    assert sorted(int(str(item["id"])) for item in items) == [1, 2]
    for item in items:
        assert result_of(item) == {}
    assert status == 200


async def test_batch_at_2025_03_26_keeps_id_types() -> None:
    data = b'[{"jsonrpc":"2.0","id":"1","method":"ping"},{"jsonrpc":"2.0","id":1,"method":"ping"}]'
    _session, items, _status = await _batch_2025_03_26(data)
    assert items is not None
    ids = sorted((type(item["id"]).__name__, str(item["id"])) for item in items)
    assert ids == [("int", "1"), ("str", "1")]


async def test_empty_batch_at_2025_03_26_is_single_invalid_request() -> None:
    _session, items, status = await _batch_2025_03_26(b"[]")
    assert items is not None
    assert len(items) == 1
    assert items[0]["id"] is None
    assert error_of(items[0])["code"] == INVALID_REQUEST
    assert status == 400


async def test_batched_initialize_at_2025_03_26_refuses_the_whole_batch() -> None:
    # 2025-03-26 basic/lifecycle: initialize MUST NOT be part of a batch. The whole batch is
    # refused before anything in it runs (field-failures B08: no partial execution).
    data = (
        b'[{"jsonrpc":"2.0","id":5,"method":"initialize",'
        b'"params":{"protocolVersion":"2025-06-18","capabilities":{}}},'
        b'{"jsonrpc":"2.0","id":6,"method":"ping"}]'
    )
    session, items, status = await _batch_2025_03_26(data)
    assert items is not None
    assert len(items) == 1
    assert items[0]["id"] is None
    assert error_of(items[0])["code"] == INVALID_REQUEST
    assert status == 400
    assert session.conn.protocol_version == "2025-03-26"  # the batched initialize did nothing


async def test_batch_of_notifications_only_gets_no_answer() -> None:
    data = b'[{"jsonrpc":"2.0","method":"notifications/zz"},{"jsonrpc":"2.0","id":1,"result":{}}]'
    _session, items, _status = await _batch_2025_03_26(data)
    assert items is None


async def test_nested_batch_is_an_error_element() -> None:
    data = b'[[{"jsonrpc":"2.0","id":1,"method":"ping"}],{"jsonrpc":"2.0","id":2,"method":"ping"}]'
    _session, items, _status = await _batch_2025_03_26(data)
    assert items is not None
    assert len(items) == 2
    errors = [item for item in items if "error" in item]
    assert len(errors) == 1
    assert errors[0]["id"] is None
    assert error_of(errors[0])["code"] == INVALID_REQUEST


# ---- never raises, always JSON-RPC -----------------------------------------------------------

_SERVER = build_mcp_server(fixture=True)

_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_METHODS = st.sampled_from(
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "notifications/cancelled",
        "zz/unknown",
    ]
)
_PARAMS = st.one_of(
    _JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["echo", "fail", "sleep_ms", "admin_only", "greet", "zz"])
            | _JSON,
            "arguments": _JSON,
            "uri": st.sampled_from(["fixture://info", "fixture://echo/x", "zz://"]) | _JSON,
            "cursor": _JSON,
            "level": _JSON,
            "protocolVersion": st.sampled_from(["2025-03-26", "2026-07-28"]) | _JSON,
            "_meta": st.fixed_dictionaries(
                {},
                optional={
                    "io.modelcontextprotocol/protocolVersion": st.sampled_from(
                        ["2026-07-28", "2025-11-25"]
                    )
                    | _JSON,
                    "io.modelcontextprotocol/clientCapabilities": _JSON,
                    "io.modelcontextprotocol/logLevel": _JSON,
                    "progressToken": _JSON,
                    "coremetry/timeout_ms": _JSON,
                },
            ),
        },
    ),
)
_ENVELOPES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | _JSON,
        "id": st.integers() | st.text(max_size=5) | _JSON,
        "method": _METHODS | _JSON,
        "params": _PARAMS,
        "result": _JSON,
        "error": _JSON,
    },
)
_MESSAGES = st.one_of(
    st.binary(max_size=200),
    _JSON.map(lambda value: json.dumps(value).encode()),
    _ENVELOPES.map(lambda value: json.dumps(value).encode()),
    st.lists(_ENVELOPES, max_size=3).map(lambda value: json.dumps(value).encode()),
)


def _given_message(
    strategy: st.SearchStrategy[bytes], revisions: st.SearchStrategy[str | None]
) -> Callable[[Callable[[bytes, str | None], None]], Callable[[], None]]:
    # Typed adapter: hypothesis types the decorated test as Callable[..., None], which mypy's
    # disallow_any_decorated rejects (same approach as test_uri_template.py).
    return given(strategy, revisions)


def _assert_jsonrpc_answer(message: object, revision: str) -> None:
    answer = check(message, revision)
    assert ("result" in answer) != ("error" in answer), answer
    if "error" in answer:
        error_of(answer)
    else:
        obj(answer["result"])


async def _handle_once(data: bytes, revision: str | None) -> None:
    conn = Connection(protocol_version=revision)
    sent: list[bytes] = []

    async def capture(message: bytes) -> None:
        sent.append(message)

    conn.send = capture
    reply = await _SERVER.handle(data, conn)
    schema_revision = revision if revision is not None else LATEST_HANDSHAKE
    if reply is not None:
        assert reply.http_status in (200, 400, 404), reply
        decoded = decode(reply.body)
        if isinstance(decoded, list):
            assert revision == "2025-03-26", decoded
            assert decoded, "an empty batch answer must not be sent"
            for item in decoded:
                _assert_jsonrpc_answer(item, schema_revision)
        else:
            _assert_jsonrpc_answer(decoded, schema_revision)
    for message in sent:
        check(decode(message), schema_revision)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@_given_message(_MESSAGES, st.sampled_from([None, "2025-03-26", "2025-11-25"]))
def test_any_input_gets_none_or_a_jsonrpc_answer(data: bytes, revision: str | None) -> None:
    trio.run(_handle_once, data, revision, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=200, deadline=None)
@_given_message(_MESSAGES, st.sampled_from([None, "2025-03-26", "2026-07-28"]))
def test_receive_never_raises(data: bytes, revision: str | None) -> None:
    conn = Connection(protocol_version=revision)
    outcome = _SERVER.receive(data, conn)
    assert outcome is None or isinstance(outcome, Reply | PendingCall | PendingBatch)
    if isinstance(outcome, PendingCall):
        assert conn.in_flight.get(outcome.request_id) is outcome
