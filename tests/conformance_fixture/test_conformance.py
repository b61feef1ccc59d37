"""In-process tests of the conformance fixture (:mod:`~coremetry.conformance_fixture.conformance`).

They drive :class:`~coremetry.mcp.Server` directly, as a sessionless HTTP transport would: one
:class:`~coremetry.mcp.Connection` per request. Handshake-era client input (sampling,
elicitation) is answered by a fake client that reads the server's request from the call's
stream and posts its answer on a new connection. Every message the server emits is validated
against the official schema of the revision in use (``check_emitted``). The full suite runs
against the real server in ``nox -s conformance`` (``tests/conformance/run.py``).
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import msgspec
import pytest
import trio
import trio.testing
from conftest import check_emitted, validate_definition

from coremetry.conformance_fixture.conformance import (
    JSON_SCHEMA_2020_12_INPUT,
    SEP1034_PROPERTIES,
    SEP1330_PROPERTIES,
    NoArgs,
    build_conformance_server,
)
from coremetry.mcp import (
    CallContext,
    Connection,
    PendingCall,
    Reply,
    Server,
    Tool,
    codes,
)
from coremetry.mcp.wire import ListChangedCapability

JsonObject = dict[str, object]

STATELESS: Final = "2026-07-28"
HANDSHAKE: Final = "2025-11-25"
LIMIT_S: Final = 10.0
ALL_CAPABILITIES: Final[JsonObject] = {"sampling": {}, "elicitation": {}, "roots": {}}

SUITE_TOOLS: Final = frozenset(
    {
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_tool_with_logging",
        "test_error_handling",
        "test_tool_with_progress",
        "test_sampling",
        "test_elicitation",
        "test_elicitation_sep1034_defaults",
        "test_elicitation_sep1330_enums",
        "json_schema_2020_12_tool",
        "test_missing_capability",
        "test_logging_tool",
        "test_streaming_elicitation",
        "test_trigger_tool_change",
        "test_trigger_prompt_change",
        "test_input_required_result_elicitation",
        "test_input_required_result_sampling",
        "test_input_required_result_list_roots",
        "test_input_required_result_request_state",
        "test_input_required_result_multiple_inputs",
        "test_input_required_result_multi_round",
        "test_input_required_result_tampered_state",
        "test_input_required_result_capabilities",
    }
)


def obj(value: object) -> JsonObject:
    assert isinstance(value, dict), f"expected a JSON object, got {value!r}"
    return {str(k): v for k, v in value.items()}


def arr(value: object) -> list[object]:
    assert isinstance(value, list), f"expected a JSON array, got {value!r}"
    return list(value)


def text_of(result: JsonObject) -> str:
    """The text of the single text block of a complete ``tools/call`` result."""
    content = result["content"]
    assert isinstance(content, list)
    assert len(content) == 1, content
    block = obj(content[0])
    assert block["type"] == "text"
    value = block["text"]
    assert isinstance(value, str)
    return value


def message(request_id: int | str, method: str, params: Mapping[str, object]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode()


class Client:
    """A 2026-07-28 client: every request carries the per-request ``_meta``."""

    def __init__(self, server: Server | None = None) -> None:
        self.server = server or build_conformance_server()
        self.next_id = 0
        self.notifications: list[JsonObject] = []

    async def send(
        self,
        method: str,
        params: JsonObject,
        *,
        capabilities: JsonObject | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> tuple[JsonObject, int]:
        """One request on a fresh connection; the validated answer and its HTTP status."""
        self.next_id += 1
        all_meta: JsonObject = {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": (
                ALL_CAPABILITIES if capabilities is None else capabilities
            ),
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
            **(meta or {}),
        }
        conn = Connection(transport="test", send=self._notified)
        reply = await self.server.handle(
            message(self.next_id, method, {**params, "_meta": all_meta}), conn
        )
        assert reply is not None
        answer = obj(json.loads(reply.body))
        assert answer["id"] == self.next_id
        result = answer.get("result")
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            check_emitted(answer, STATELESS, None)
            validate_definition(result, STATELESS, "InputRequiredResult")
        else:
            check_emitted(answer, STATELESS, method)
        return answer, reply.http_status

    async def _notified(self, data: bytes) -> None:
        note = obj(json.loads(data))
        check_emitted(note, STATELESS, None)
        self.notifications.append(note)

    async def call(
        self, name: str, arguments: JsonObject | None = None, **retry: object
    ) -> JsonObject:
        """``tools/call`` that must succeed; its ``result``."""
        answer, status = await self.send(
            "tools/call", {"name": name, "arguments": arguments or {}, **retry}
        )
        assert status == 200
        return obj(answer["result"])

    async def call_error(self, name: str, **retry: object) -> tuple[JsonObject, int]:
        """``tools/call`` that must fail; its ``error`` and HTTP status."""
        capabilities = retry.pop("capabilities", None)
        answer, status = await self.send(
            "tools/call",
            {"name": name, "arguments": {}, **retry},
            capabilities=None if capabilities is None else obj(capabilities),
        )
        assert "result" not in answer, answer
        return obj(answer["error"]), status


def input_requests(result: JsonObject) -> JsonObject:
    assert result["resultType"] == "input_required", result
    return obj(result["inputRequests"])


def accept(**content: object) -> JsonObject:
    return {"action": "accept", "content": content}


def sampled(text: str) -> JsonObject:
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn",
    }


ROOTS: Final[JsonObject] = {"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}


# ---- listing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stateless", [True, False])
async def test_every_suite_tool_is_listed(stateless: bool) -> None:
    server = build_conformance_server()
    if stateless:
        answer, _ = await Client(server).send("tools/list", {})
    else:
        reply = await server.handle(
            message(1, "tools/list", {}), Connection(protocol_version=HANDSHAKE)
        )
        assert reply is not None
        answer = obj(json.loads(reply.body))
        check_emitted(answer, HANDSHAKE, "tools/list")
    tools = {str(obj(t)["name"]): obj(t) for t in arr(obj(answer["result"])["tools"])}
    assert SUITE_TOOLS - tools.keys() == set()
    assert tools["json_schema_2020_12_tool"]["inputSchema"] == JSON_SCHEMA_2020_12_INPUT


async def test_list_changed_is_advertised_in_the_stateless_era_only() -> None:
    server = build_conformance_server()
    answer, _ = await Client(server).send("server/discover", {})
    caps = obj(obj(answer["result"])["capabilities"])
    assert obj(caps["tools"])["listChanged"] is True
    assert obj(caps["prompts"])["listChanged"] is True
    legacy = server.capabilities(HANDSHAKE)
    assert isinstance(legacy.tools, ListChangedCapability)
    assert legacy.tools.list_changed is False


# ---- MRTR (2026-07-28) -----------------------------------------------------------------------


async def test_elicitation_round_trip_and_re_asking() -> None:
    client = Client()
    name = "test_input_required_result_elicitation"
    first = await client.call(name)
    request = obj(input_requests(first)["user_name"])
    assert request["method"] == "elicitation/create"
    done = await client.call(name, inputResponses={"user_name": accept(name="Alice")})
    assert done["resultType"] == "complete"
    assert text_of(done) == "Hello, Alice!"
    # A wrong key, or a value that is not an ElicitResult, is asked for again.
    for responses in ({"wrong_key": accept(data="x")}, {"user_name": 12345}):
        again = await client.call(name, inputResponses=responses)
        assert set(input_requests(again)) == {"user_name"}
    # Unknown keys next to the right one are ignored.
    extra = await client.call(
        name, inputResponses={"user_name": accept(name="Bo"), "other": accept(x=1)}
    )
    assert text_of(extra) == "Hello, Bo!"


async def test_null_input_responses_are_a_protocol_error() -> None:
    error, _ = await Client().call_error(
        "test_input_required_result_elicitation", inputResponses=None
    )
    assert error["code"] == codes.INVALID_PARAMS


async def test_sampling_and_roots_round_trips() -> None:
    client = Client()
    first = await client.call("test_input_required_result_sampling")
    assert obj(input_requests(first)["capital_question"])["method"] == "sampling/createMessage"
    done = await client.call(
        "test_input_required_result_sampling",
        inputResponses={"capital_question": sampled("Paris.")},
    )
    assert text_of(done) == "Sampling said: Paris."
    roots = await client.call(
        "test_input_required_result_list_roots", inputResponses={"client_roots": ROOTS}
    )
    assert text_of(roots) == "Client roots: file:///test/root"


async def test_request_state_round_trip() -> None:
    client = Client()
    name = "test_input_required_result_request_state"
    first = await client.call(name)
    state = first["requestState"]
    assert isinstance(state, str)
    assert "confirm" in input_requests(first)
    done = await client.call(name, inputResponses={"confirm": accept(ok=True)}, requestState=state)
    assert "state-ok" in text_of(done)


def _tampered(state: str) -> list[str]:
    flipped = ("A" if state[0] != "A" else "B") + state[1:]
    return [state + "-TAMPERED", flipped, state[:-4], "", "not base64 !!"]


async def test_tampered_state_is_rejected() -> None:
    client = Client()
    name = "test_input_required_result_tampered_state"
    first = await client.call(name)
    state = first["requestState"]
    assert isinstance(state, str)
    for bad in _tampered(state):
        error, status = await client.call_error(
            name, inputResponses={"confirm": accept(ok=True)}, requestState=bad
        )
        assert error["code"] == codes.INVALID_PARAMS, bad
        assert status == 200
    done = await client.call(name, inputResponses={"confirm": accept(ok=True)}, requestState=state)
    assert text_of(done) == "state verified: confirmed=True"


async def test_state_is_bound_to_its_entry_and_its_server() -> None:
    client = Client(build_conformance_server(state_key=b"k" * 32))
    first = await client.call("test_input_required_result_tampered_state")
    state = first["requestState"]
    # Replayed on another entry: refused.
    error, _ = await client.call_error(
        "test_input_required_result_request_state",
        inputResponses={"confirm": accept(ok=True)},
        requestState=state,
    )
    assert error["code"] == codes.INVALID_PARAMS
    # Sealed by another server key: refused.
    other = Client(build_conformance_server(state_key=b"x" * 32))
    error, _ = await other.call_error(
        "test_input_required_result_tampered_state",
        inputResponses={"confirm": accept(ok=True)},
        requestState=state,
    )
    assert error["code"] == codes.INVALID_PARAMS


async def test_multi_round_state_evolves() -> None:
    client = Client()
    name = "test_input_required_result_multi_round"
    first = await client.call(name)
    assert "step1" in input_requests(first)
    second = await client.call(
        name, inputResponses={"step1": accept(name="Alice")}, requestState=first["requestState"]
    )
    assert "step2" in input_requests(second)
    assert second["requestState"] != first["requestState"]
    third = await client.call(
        name, inputResponses={"step2": accept(color="blue")}, requestState=second["requestState"]
    )
    assert text_of(third) == "Alice likes blue."


async def test_multiple_inputs_asks_again_for_the_missing_ones_only() -> None:
    client = Client()
    name = "test_input_required_result_multiple_inputs"
    first = await client.call(name)
    methods = {str(obj(r)["method"]) for r in input_requests(first).values()}
    assert methods == {"elicitation/create", "sampling/createMessage", "roots/list"}
    state = first["requestState"]
    partial = await client.call(
        name, inputResponses={"user_name": accept(name="Alice")}, requestState=state
    )
    assert set(input_requests(partial)) == {"greeting", "client_roots"}
    done = await client.call(
        name,
        inputResponses={
            "user_name": accept(name="Alice"),
            "greeting": sampled("Hello"),
            "client_roots": ROOTS,
        },
        requestState=partial["requestState"],
    )
    assert text_of(done) == "Hello Alice (roots: file:///test/root)"


async def test_only_declared_capabilities_are_asked_for() -> None:
    client = Client()
    answer, _ = await client.send(
        "tools/call",
        {"name": "test_input_required_result_capabilities", "arguments": {}},
        capabilities={"sampling": {}},
    )
    methods = {str(obj(r)["method"]) for r in input_requests(obj(answer["result"])).values()}
    assert methods == {"sampling/createMessage"}
    nothing, _ = await client.send(
        "tools/call",
        {"name": "test_input_required_result_capabilities", "arguments": {}},
        capabilities={},
    )
    assert obj(nothing["result"])["resultType"] == "complete"


async def test_undeclared_capability_is_32021_with_http_400() -> None:
    error, status = await Client().call_error("test_missing_capability", capabilities={})
    assert error["code"] == codes.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert status == 400
    assert obj(error["data"])["requiredCapabilities"] == {"sampling": {}}


async def test_prompt_asks_for_input_then_renders() -> None:
    client = Client()
    params: JsonObject = {"name": "test_input_required_result_prompt"}
    first, _ = await client.send("prompts/get", params)
    assert "user_context" in input_requests(obj(first["result"]))
    done, _ = await client.send(
        "prompts/get", {**params, "inputResponses": {"user_context": accept(context="ctx")}}
    )
    result = obj(done["result"])
    assert result["resultType"] == "complete"
    content = obj(obj(arr(result["messages"])[0])["content"])
    assert content["text"] == "Use this context: ctx"


async def test_logging_tool_logs_only_when_asked() -> None:
    client = Client()
    await client.call("test_logging_tool")
    assert client.notifications == []
    await client.send(
        "tools/call",
        {"name": "test_logging_tool", "arguments": {}},
        meta={"io.modelcontextprotocol/logLevel": "info"},
    )
    assert [n["method"] for n in client.notifications] == ["notifications/message"]


async def test_trigger_reaches_a_listen_stream() -> None:
    server = build_conformance_server()
    frames: list[JsonObject] = []
    got = trio.Event()

    async def capture(data: bytes) -> None:
        frames.append(obj(json.loads(data)))
        got.set()

    meta: JsonObject = {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    listen = server.receive(
        message(
            7, "subscriptions/listen", {"notifications": {"toolsListChanged": True}, "_meta": meta}
        ),
        Connection(send=capture),
    )
    assert isinstance(listen, PendingCall)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen.run)
            await got.wait()
            got = trio.Event()
            await Client(server).call("test_trigger_prompt_change")  # not subscribed: nothing
            await Client(server).call("test_trigger_tool_change")
            await got.wait()
            listen.cancel()
    assert [f["method"] for f in frames] == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ]


# ---- handshake era: requests over the call's stream -----------------------------------------

Answerer = Callable[[JsonObject], Awaitable[JsonObject | None]]


async def call_handshake(
    server: Server,
    name: str,
    arguments: JsonObject,
    answer: Answerer,
    *,
    conn: Connection | None = None,
) -> tuple[JsonObject, list[JsonObject]]:
    """A 2025-11-25 ``tools/call`` whose server requests ``answer`` handles (``None``: error).

    Returns the validated reply and the requests the server sent on the call's stream.
    """
    sent: list[JsonObject] = []
    inbox_send, inbox = trio.open_memory_channel[JsonObject](8)

    async def stream(data: bytes) -> None:
        frame = obj(json.loads(data))
        check_emitted(frame, HANDSHAKE, None)
        await inbox_send.send(frame)

    call_conn = conn or Connection(send=stream, protocol_version=HANDSHAKE)
    call_conn.send = stream
    outcome = server.receive(
        message(1, "tools/call", {"name": name, "arguments": arguments}), call_conn
    )
    assert isinstance(outcome, PendingCall)
    reply: Reply | None = None

    async def run() -> None:
        nonlocal reply
        reply = await outcome.run()
        await inbox_send.aclose()

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            async for frame in inbox:
                if "id" not in frame:
                    continue  # a notification
                sent.append(frame)
                result = await answer(frame)
                body: JsonObject = {"jsonrpc": "2.0", "id": frame["id"]}
                if result is None:
                    body["error"] = {"code": -32601, "message": "Method not found"}
                else:
                    body["result"] = result
                # The answer arrives on a new POST: a new connection.
                back = Connection(protocol_version=HANDSHAKE)
                assert server.receive(json.dumps(body).encode(), back) is None
    assert reply is not None
    answered = obj(json.loads(reply.body))
    check_emitted(answered, HANDSHAKE, "tools/call")
    return answered, sent


async def test_sampling_over_the_call_stream() -> None:
    async def model(request: JsonObject) -> JsonObject:
        assert request["method"] == "sampling/createMessage"
        params = obj(request["params"])
        assert params["maxTokens"] == 100
        messages = params["messages"]
        assert messages == [{"role": "user", "content": {"type": "text", "text": "Hi?"}}]
        return sampled("Hello from the client")

    reply, sent = await call_handshake(
        build_conformance_server(), "test_sampling", {"prompt": "Hi?"}, model
    )
    assert len(sent) == 1
    assert text_of(obj(reply["result"])) == "LLM response: Hello from the client"


@pytest.mark.parametrize(
    ("tool", "properties"),
    [
        ("test_elicitation_sep1034_defaults", SEP1034_PROPERTIES),
        ("test_elicitation_sep1330_enums", SEP1330_PROPERTIES),
    ],
)
async def test_elicitation_forms_over_the_call_stream(
    tool: str, properties: Mapping[str, object]
) -> None:
    async def user(request: JsonObject) -> JsonObject:
        assert request["method"] == "elicitation/create"
        schema = obj(obj(request["params"])["requestedSchema"])
        assert schema["properties"] == properties
        return accept(name="Jane")

    reply, _ = await call_handshake(build_conformance_server(), tool, {}, user)
    text = text_of(obj(reply["result"]))
    assert text == 'Elicitation completed: action=accept, content={"name":"Jane"}'


async def test_elicitation_refused_by_the_client_is_a_tool_error() -> None:
    async def refuse(request: JsonObject) -> None:
        return None

    reply, _ = await call_handshake(
        build_conformance_server(), "test_elicitation", {"message": "m"}, refuse
    )
    result = obj(reply["result"])
    assert result["isError"] is True
    assert "elicitation/create" in text_of(result)


async def test_declared_capabilities_are_respected_in_the_handshake_era() -> None:
    server = build_conformance_server()
    conn = Connection(protocol_version=HANDSHAKE)
    init = {
        "protocolVersion": HANDSHAKE,
        "capabilities": {},
        "clientInfo": {"name": "tests", "version": "1"},
    }
    assert await server.handle(message(0, "initialize", init), conn) is not None

    async def never(request: JsonObject) -> JsonObject:
        raise AssertionError("the server asked for an undeclared capability")

    reply, sent = await call_handshake(server, "test_sampling", {"prompt": "x"}, never, conn=conn)
    assert sent == []
    assert obj(reply["error"])["code"] == codes.MISSING_REQUIRED_CLIENT_CAPABILITY


# ---- the JSON Schema 2020-12 tool and Tool(input_schema=...) ---------------------------------


async def test_json_schema_tool_decodes_with_its_struct() -> None:
    client = Client()
    ok = await client.call(
        "json_schema_2020_12_tool",
        {"name": "n", "contactMethod": "phone", "phone": "1", "address": {"city": "c"}},
    )
    assert text_of(ok).startswith("JSON Schema 2020-12 tool called with: {")
    bad_arguments: list[JsonObject] = [
        {"name": "n"},
        {"contactMethod": "phone", "email": "e"},
        {"email": "e", "x": 1},
    ]
    for bad in bad_arguments:
        result = await client.call("json_schema_2020_12_tool", bad)
        assert result["isError"] is True, bad
        assert json.loads(text_of(result))["error"] == "bad_args"


async def _noop(args: NoArgs, ctx: CallContext) -> str:
    return ""


def test_explicit_input_schema_must_be_an_object_schema() -> None:
    with pytest.raises(ValueError, match="object"):
        Tool("t", "d", NoArgs, _noop, input_schema={"type": "string"})
    tool = Tool("t", "d", NoArgs, _noop, input_schema=JSON_SCHEMA_2020_12_INPUT)
    assert msgspec.json.decode(tool.input_schema_json) == JSON_SCHEMA_2020_12_INPUT


# ---- sealing (Server.seal_state / open_state) ------------------------------------------------


def test_seal_and_open() -> None:
    server = Server("s", "1", state_key=b"k" * 32)
    token = server.seal_state(b"payload")
    assert server.open_state(token) == b"payload"
    for bad in _tampered(token):
        assert server.open_state(bad) is None, bad
    assert Server("s", "1", state_key=b"j" * 32).open_state(token) is None


# ---- the tasks extension fixtures (tasks-* scenarios) --------------------------------------

TASKS: Final = "io.modelcontextprotocol/tasks"
WITH_TASKS: Final[JsonObject] = {**ALL_CAPABILITIES, "extensions": {TASKS: {}}}


async def task_request(client: Client, method: str, task_id: str, **extra: object) -> JsonObject:
    """A ``tasks/*`` request declaring the extension; its ``result``."""
    answer, status = await client.send(
        method, {"taskId": task_id, **extra}, capabilities=WITH_TASKS
    )
    assert status == 200
    return obj(answer["result"])


async def start_task(client: Client, name: str, arguments: JsonObject | None = None) -> str:
    answer, status = await client.send(
        "tools/call", {"name": name, "arguments": arguments or {}}, capabilities=WITH_TASKS
    )
    result = obj(answer["result"])
    assert status == 200
    assert result["resultType"] == "task"
    return str(result["taskId"])


async def test_a_task_waits_for_each_input_and_resumes_when_all_are_answered() -> None:
    server = build_conformance_server()
    client = Client(server)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            task_id = await start_task(client, "multi_input")
            await trio.testing.wait_all_tasks_blocked()  # the task parks for its inputs
            parked = await task_request(client, "tasks/get", task_id)
            ack = await task_request(
                client,
                "tasks/update",
                task_id,
                inputResponses={"first": accept(name="Ada"), "unknown": accept(x=1)},
            )
            partial = await task_request(client, "tasks/get", task_id)
            await task_request(
                client, "tasks/update", task_id, inputResponses={"second": accept(confirm=True)}
            )
            await server.tasks.wait_done(task_id)
            done = await task_request(client, "tasks/get", task_id)
    assert parked["status"] == "input_required"
    assert set(obj(parked["inputRequests"])) == {"first", "second"}
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    assert partial["status"] == "input_required"
    assert set(obj(partial["inputRequests"])) == {"second"}  # the answered one is gone
    assert done["status"] == "completed"
    assert text_of(obj(done["result"])) == "Got Ada and both answers."
    assert "requestState" not in done


async def test_input_first_then_the_task() -> None:
    server = build_conformance_server()
    client = Client(server)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            first, _ = await client.send(
                "tools/call",
                {"name": "test_tool_with_task", "arguments": {}},
                capabilities=WITH_TASKS,
            )
            round_one = obj(first["result"])
            second, _ = await client.send(
                "tools/call",
                {
                    "name": "test_tool_with_task",
                    "arguments": {},
                    "inputResponses": {"user_name": accept(name="Alice")},
                },
                capabilities=WITH_TASKS,
            )
            created = obj(second["result"])
            await server.tasks.wait_done(str(created["taskId"]))
            done = await task_request(client, "tasks/get", str(created["taskId"]))
    assert round_one["resultType"] == "input_required"
    assert "taskId" not in round_one
    assert created["resultType"] == "task"
    assert "requestState" not in created
    assert "inputRequests" not in created
    assert "Alice" in text_of(obj(done["result"]))


async def test_tool_errors_complete_and_protocol_errors_fail() -> None:
    server = build_conformance_server()
    client = Client(server)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            tool_error = await start_task(client, "failing_job")
            broken = await start_task(client, "protocol_error_job")
            for task_id in (tool_error, broken):
                await server.tasks.wait_done(task_id)
            completed = await task_request(client, "tasks/get", tool_error)
            failed = await task_request(client, "tasks/get", broken)
    assert completed["status"] == "completed"
    assert obj(completed["result"])["isError"] is True
    assert failed["status"] == "failed"
    assert "result" not in failed
    assert obj(failed["error"])["code"] == codes.INTERNAL_ERROR


async def test_without_the_extension_tasks_are_refused_and_calls_run_directly() -> None:
    server = build_conformance_server()
    client = Client(server)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            required, required_status = await client.call_error("failing_job")
            direct = await client.call("slow_compute", {"seconds": 0, "label": "x"})
            gated, gated_status = await client.send("tasks/get", {"taskId": "x"})
    assert (required["code"], required_status) == (-32021, 400)
    assert obj(required["data"]) == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert direct["resultType"] == "complete"
    assert text_of(direct) == "Computed x after 0 s."
    assert (obj(gated["error"])["code"], gated_status) == (-32021, 400)
