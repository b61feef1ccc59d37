"""Registries as clients see them: list shapes, role filtering, the call gate and pagination.

Field failure B23 (pagination) and the gate contract of ``coremetry.mcp.gate`` (B25's rate-limit
shape: ``-32000`` with ``data.retry_after_ms``).
"""

import logging
import re
from collections.abc import Mapping, Sequence

import jsonschema
import msgspec
import pytest
import trio.testing
from test_dispatch_support import (
    HANDSHAKE_REVISIONS,
    STATELESS,
    JsonObj,
    Session,
    arr,
    error_of,
    obj,
    result_of,
    text,
    tool_error,
    tool_text,
)

from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import (
    CallContext,
    GateCall,
    GateError,
    Prompt,
    PromptArgument,
    RateLimited,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
    denied,
    role_gate,
)
from coremetry.server import build_mcp_server

INVALID_PARAMS = -32602
RATE_LIMITED = -32000
FORBIDDEN = -32001

LISTS: Mapping[str, str] = {
    "tools/list": "tools",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
    "prompts/list": "prompts",
}


def _key(method: str, item: JsonObj) -> str:
    if method == "resources/list":
        return text(item["uri"])
    if method == "resources/templates/list":
        return text(item["uriTemplate"])
    return text(item["name"])


async def _items(session: Session, method: str, *, stateless: bool = False) -> list[JsonObj]:
    result = await session.result(method, stateless=stateless)
    return [obj(item) for item in arr(result[LISTS[method]])]


# ---- list shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize("revision", [*HANDSHAKE_REVISIONS, STATELESS])
async def test_tools_list_shape(revision: str) -> None:
    session = Session(role="admin")
    stateless = revision == STATELESS
    if not stateless:
        await session.initialize(revision)
    tools = {
        text(tool["name"]): tool
        for tool in await _items(session, "tools/list", stateless=stateless)
    }
    assert set(tools) == {"echo", "sleep_ms", "big_output", "fail", "admin_only", "log_levels"}
    echo = tools["echo"]
    assert (
        echo["description"] == "Return the text argument unchanged. A fixture for transport tests."
    )
    schema = obj(echo["inputSchema"])
    assert schema["type"] == "object"
    assert obj(schema["properties"])["text"] == {"type": "string"}
    assert schema["required"] == ["text"]
    if revision == "2024-11-05":
        assert "annotations" not in echo
    else:
        assert obj(echo["annotations"])["readOnlyHint"] is True


async def test_resources_list_shape() -> None:
    session = Session()
    await session.initialize("2025-06-18")
    resources = {
        _key("resources/list", item): item for item in await _items(session, "resources/list")
    }
    assert set(resources) == {"coremetry://server", "fixture://info"}
    info = resources["fixture://info"]
    assert info["name"] == "fixture-info"
    assert info["mimeType"] == "application/json"
    assert info["description"] == "Static fixture resource."
    assert resources["coremetry://server"]["title"] == "Coremetry server"


async def test_resources_list_has_no_title_before_2025_06_18() -> None:
    session = Session()
    await session.initialize("2025-03-26")
    for item in await _items(session, "resources/list"):
        assert "title" not in item


async def test_resource_templates_list_shape() -> None:
    session = Session()
    await session.initialize("2025-11-25")
    templates = await _items(session, "resources/templates/list")
    assert templates == [
        {
            "uriTemplate": "fixture://echo/{text}",
            "name": "fixture-echo",
            "description": "Echoes the path segment back as JSON.",
            "mimeType": "application/json",
        }
    ]


async def test_prompts_list_shape() -> None:
    session = Session()
    await session.initialize("2025-11-25")
    prompts = await _items(session, "prompts/list")
    assert len(prompts) == 1
    greet = prompts[0]
    assert greet["name"] == "greet"
    assert greet["description"] == "Ask the model to greet someone."
    arguments = [obj(argument) for argument in arr(greet["arguments"])]
    assert [(a["name"], a["required"]) for a in arguments] == [("name", True), ("style", False)]


# ---- role filtering and denial ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "sees_admin_only"), [("viewer", False), ("editor", False), ("admin", True)]
)
@pytest.mark.parametrize("stateless", [False, True])
async def test_tools_list_filtered_by_role(
    role: str, sees_admin_only: bool, stateless: bool
) -> None:
    session = Session(role=role)
    if not stateless:
        await session.initialize("2025-11-25")
    names = {
        text(tool["name"]) for tool in await _items(session, "tools/list", stateless=stateless)
    }
    assert "echo" in names
    assert ("admin_only" in names) is sees_admin_only


@pytest.mark.parametrize("stateless", [False, True])
async def test_viewer_calling_admin_only_is_forbidden(stateless: bool) -> None:
    session = Session(role="viewer")
    if not stateless:
        await session.initialize("2025-11-25")
    message = await session.request(
        "tools/call", {"name": "admin_only"}, request_id="x", stateless=stateless
    )
    assert message["id"] == "x"
    error = error_of(message)
    assert error["code"] == FORBIDDEN
    assert re.search(r"\badmin\b", text(error["message"])), error


async def test_admin_calls_admin_only() -> None:
    session = Session(role="admin")
    await session.initialize("2025-11-25")
    assert tool_text(await session.call_tool("admin_only", {})) == "admin secret"


async def test_denial_message_names_the_role_even_when_the_gate_does_not() -> None:
    server = Server("t", "1")
    register_fixture(server)

    async def terse(call: GateCall) -> None:
        if call.min_role:
            raise denied("no")

    server.set_call_gate(terse)
    server.register_tool(
        Tool("secret", "A tool for editors.", _NoArgs, _ok_tool, min_role="editor")
    )
    session = Session(server, role="viewer")
    await session.initialize("2025-11-25")
    error = await session.error("tools/call", {"name": "secret"})
    assert error["code"] == FORBIDDEN
    assert re.search(r"\beditor\b", text(error["message"])), error


class _NoArgs(msgspec.Struct, kw_only=True):
    """No arguments."""


async def _ok_tool(args: _NoArgs, ctx: CallContext) -> str:
    return "ok"


async def _read_static(uri: str, ctx: CallContext) -> str:
    return '{"static":true}'


async def _read_template(uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
    return msgspec.json.encode(dict(variables)).decode()


# ---- the call gate ---------------------------------------------------------------------------

_GATED_CALLS: Sequence[tuple[str, JsonObj]] = [
    ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
    ("resources/read", {"uri": "fixture://info"}),
    ("resources/read", {"uri": "fixture://echo/abc"}),
    ("prompts/get", {"name": "greet", "arguments": {"name": "ada"}}),
]


@pytest.mark.parametrize(("method", "params"), _GATED_CALLS)
@pytest.mark.parametrize("stateless", [False, True])
async def test_rate_limited_gate_is_32000_with_retry_after(
    method: str, params: JsonObj, stateless: bool
) -> None:
    server = build_mcp_server(fixture=True)

    async def slow_down(call: GateCall) -> None:
        raise RateLimited("slow down", retry_after_ms=1500)

    server.set_call_gate(slow_down)
    session = Session(server)
    if not stateless:
        await session.initialize("2025-11-25")
    message = await session.request(method, params, request_id=41, stateless=stateless)
    assert message["id"] == 41
    error = error_of(message)
    assert error["code"] == RATE_LIMITED
    assert error["message"] == "slow down"
    assert obj(error["data"])["retry_after_ms"] == 1500


@pytest.mark.parametrize(("method", "params"), _GATED_CALLS)
@pytest.mark.parametrize(
    "exc",
    [GateError("closed for maintenance"), RuntimeError("db /srv/secret/gate.db: password=hunter2")],
    ids=["gate-error", "unexpected"],
)
async def test_other_gate_errors_are_32000_without_data(
    method: str, params: JsonObj, exc: Exception
) -> None:
    server = build_mcp_server(fixture=True)

    async def refuse(call: GateCall) -> None:
        raise exc

    server.set_call_gate(refuse)
    session = Session(server)
    await session.initialize("2025-11-25")
    error = await session.error(method, params)
    assert error["code"] == RATE_LIMITED
    assert "data" not in error
    assert "hunter2" not in text(error["message"])
    assert "/srv/secret" not in text(error["message"])


async def test_refused_call_does_not_run() -> None:
    server = build_mcp_server(fixture=True)

    async def refuse(call: GateCall) -> None:
        raise RateLimited("later", retry_after_ms=10)

    server.set_call_gate(refuse)
    session = Session(server)
    await session.initialize("2025-11-25")
    error_of(await session.request("tools/call", {"name": "log_levels", "arguments": {}}))
    assert session.notifications == []


def _recording_server() -> tuple[Server, list[GateCall]]:
    server = Server("t", "1")
    register_fixture(server)
    server.register_resource_template(
        ResourceTemplate("tmpl://editors/{item}", "editors", _read_template, min_role="editor")
    )
    server.register_resource(Resource("static://admins", "admins", _read_static, min_role="admin"))
    server.register_prompt(
        Prompt(
            "edit",
            "An editors' prompt.",
            _render,
            arguments=[PromptArgument(name="x")],
            min_role="editor",
        )
    )
    calls: list[GateCall] = []

    async def recording(call: GateCall) -> None:
        calls.append(call)
        await role_gate(call)

    server.set_call_gate(recording)
    return server, calls


async def _render(arguments: Mapping[str, str], ctx: CallContext) -> str:
    return "rendered"


@pytest.mark.parametrize(
    ("method", "params", "kind", "name", "min_role"),
    [
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}, "tool", "echo", ""),
        ("tools/call", {"name": "admin_only"}, "tool", "admin_only", "admin"),
        ("resources/read", {"uri": "fixture://info"}, "resource", "fixture://info", ""),
        ("resources/read", {"uri": "static://admins"}, "resource", "static://admins", "admin"),
        (
            "resources/read",
            {"uri": "tmpl://editors/abc"},
            "resource",
            "tmpl://editors/abc",
            "editor",
        ),
        ("prompts/get", {"name": "edit"}, "prompt", "edit", "editor"),
        ("prompts/get", {"name": "greet", "arguments": {"name": "x"}}, "prompt", "greet", ""),
    ],
)
@pytest.mark.parametrize("stateless", [False, True])
async def test_gate_consulted_for_gated_calls(
    method: str, params: JsonObj, kind: str, name: str, min_role: str, stateless: bool
) -> None:
    server, calls = _recording_server()
    session = Session(server, role="admin")
    if not stateless:
        await session.initialize("2025-11-25")
    calls.clear()
    result_of(await session.request(method, params, stateless=stateless))
    assert len(calls) == 1
    call = calls[0]
    assert (call.kind, call.name, call.min_role) == (kind, name, min_role)
    assert call.caller.subject == "u"
    assert call.caller.role == "admin"
    assert call.transport == "test"


async def test_template_min_role_enforced_for_matching_uris() -> None:
    server, calls = _recording_server()
    session = Session(server, role="viewer")
    await session.initialize("2025-11-25")
    error = await session.error("resources/read", {"uri": "tmpl://editors/abc"})
    assert error["code"] == FORBIDDEN
    assert re.search(r"\beditor\b", text(error["message"])), error
    assert [call.min_role for call in calls] == ["editor"]


@pytest.mark.parametrize("stateless", [False, True])
async def test_gate_not_consulted_outside_gated_calls(stateless: bool) -> None:
    server, calls = _recording_server()
    session = Session(server, role="admin")
    if stateless:
        await session.result("server/discover", stateless=True)
    else:
        await session.initialize("2025-11-25")
        await session.result("ping")
        await session.result("logging/setLevel", {"level": "info"})
    for method in LISTS:
        await session.result(method, stateless=stateless)
    assert calls == []


async def test_gate_not_consulted_for_unknown_entries() -> None:
    server, calls = _recording_server()
    session = Session(server, role="admin")
    await session.initialize("2025-11-25")
    error_of(await session.request("tools/call", {"name": "zz"}))
    error_of(await session.request("resources/read", {"uri": "zz://x"}))
    error_of(await session.request("prompts/get", {"name": "zz"}))
    assert calls == []


# ---- pagination ------------------------------------------------------------------------------


def _paged_server(page_size: int = 2) -> Server:
    server = Server("t", "1", page_size=page_size)
    register_fixture(server)
    for index in range(4):
        server.register_resource(Resource(f"extra://r{index}", f"r{index}", _read_static))
        server.register_resource_template(
            ResourceTemplate(f"extra://t{index}/{{item}}", f"t{index}", _read_template)
        )
        server.register_prompt(Prompt(f"p{index}", "A prompt.", _render))
    return server


async def _walk(session: Session, method: str, *, stateless: bool = False) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor: object = None
    for _ in range(50):
        params: JsonObj = {} if cursor is None else {"cursor": cursor}
        result = await session.result(method, params, stateless=stateless)
        pages.append([_key(method, obj(item)) for item in arr(result[LISTS[method]])])
        if "nextCursor" not in result:
            return pages
        cursor = result["nextCursor"]
        assert isinstance(cursor, str)
        assert cursor
    pytest.fail(f"{method}: still a nextCursor after 50 pages")


@pytest.mark.parametrize("method", list(LISTS))
@pytest.mark.parametrize("stateless", [False, True])
async def test_pagination_walks_every_item_once(method: str, stateless: bool) -> None:
    session = Session(_paged_server(page_size=2), role="admin")
    if not stateless:
        await session.initialize("2025-11-25")
    pages = await _walk(session, method, stateless=stateless)
    assert len(pages) >= 3
    assert all(0 < len(page) <= 2 for page in pages), pages
    union = [key for page in pages for key in page]
    assert len(union) == len(set(union)), union
    everything = await _walk(Session(_paged_server(page_size=100), role="admin"), method)
    assert len(everything) == 1
    assert union == everything[0]


async def test_pagination_exact_multiple_ends_without_cursor() -> None:
    server = Server("t", "1", page_size=3)
    register_fixture(server)  # six tools: two full pages
    session = Session(server, role="admin")
    pages = await _walk(session, "tools/list")
    assert [len(page) for page in pages] == [3, 3]


async def test_last_page_omits_next_cursor_and_single_page_lists_too() -> None:
    session = Session(role="admin")
    await session.initialize("2025-11-25")
    for method in LISTS:
        result = await session.result(method)
        assert "nextCursor" not in result, method


@pytest.mark.parametrize("method", list(LISTS))
@pytest.mark.parametrize(
    "cursor",
    ["bogus", "", 123, ["c"], {"c": 1}, "YzE6dG9vbHM6OTk5", "YzE6dG9vbHM6MA", "YzE6dG9vbHM6LTE"],
    ids=["bogus", "empty", "int", "list", "object", "offset-999", "offset-0", "offset-neg"],
)
async def test_invalid_cursor_is_invalid_params(method: str, cursor: object) -> None:
    session = Session(_paged_server(), role="admin")
    await session.initialize("2025-11-25")
    error = await session.error(method, {"cursor": cursor})
    assert error["code"] == INVALID_PARAMS


@pytest.mark.parametrize("source", list(LISTS))
async def test_cursor_from_another_list_is_invalid_params(source: str) -> None:
    session = Session(_paged_server(), role="admin")
    await session.initialize("2025-11-25")
    cursor = (await session.result(source))["nextCursor"]
    for method in LISTS:
        if method == source:
            continue
        error = await session.error(method, {"cursor": cursor})
        assert error["code"] == INVALID_PARAMS, (source, method)


@pytest.mark.parametrize("method", list(LISTS))
async def test_null_cursor_is_first_page(method: str) -> None:
    session = Session(_paged_server(), role="admin")
    await session.initialize("2025-11-25")
    first = await session.result(method)
    assert await session.result(method, {"cursor": None}) == first


# ---- registration ----------------------------------------------------------------------------


async def _describe(arguments: Mapping[str, str], ctx: CallContext) -> str:
    return "second"


async def test_duplicate_registration_warns_and_last_wins(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("t", "1")
    register_fixture(server)
    with caplog.at_level(logging.WARNING, logger="coremetry.mcp"):
        server.register_tool(Tool("echo", "The second echo.", _NoArgs, _ok_tool))
        server.register_resource(Resource("fixture://info", "second-info", _read_static))
        server.register_resource_template(
            ResourceTemplate("fixture://echo/{text}", "second-echo", _read_template)
        )
        server.register_prompt(Prompt("greet", "The second greet.", _describe))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    messages = [r.getMessage() for r in warnings]
    assert len(warnings) == 4, messages
    for needle in ("echo", "fixture://info", "fixture://echo/{text}", "greet"):
        assert any(needle in message for message in messages), (needle, messages)
    assert server.tool_count() == 6
    assert server.resource_count() == (1, 1)
    assert server.prompt_count() == 1

    session = Session(server)
    await session.initialize("2025-11-25")
    tools = {text(t["name"]): t for t in await _items(session, "tools/list")}
    assert tools["echo"]["description"] == "The second echo."
    assert [r["name"] for r in await _items(session, "resources/list")] == ["second-info"]
    assert [t["name"] for t in await _items(session, "resources/templates/list")] == ["second-echo"]
    assert (await session.call_tool("echo", {}))["content"] == [{"type": "text", "text": "ok"}]
    read = await session.result("resources/read", {"uri": "fixture://info"})
    assert obj(arr(read["contents"])[0])["text"] == '{"static":true}'


def test_registry_counts() -> None:
    empty = Server("t", "1")
    assert (empty.tool_count(), empty.resource_count(), empty.prompt_count()) == (0, (0, 0), 0)
    fixture_only = Server("t", "1")
    register_fixture(fixture_only)
    assert fixture_only.tool_count() == 6
    assert fixture_only.resource_count() == (1, 1)
    assert fixture_only.prompt_count() == 1
    full = build_mcp_server(fixture=True)
    assert full.tool_count() == 6
    assert full.resource_count() == (2, 1)
    assert full.prompt_count() == 1
    assert build_mcp_server().tool_count() == 0


async def test_counts_match_what_an_admin_lists() -> None:
    server = build_mcp_server(fixture=True)
    session = Session(server, role="admin")
    await session.initialize("2025-11-25")
    assert len(await _items(session, "tools/list")) == server.tool_count()
    static, templates = server.resource_count()
    assert len(await _items(session, "resources/list")) == static
    assert len(await _items(session, "resources/templates/list")) == templates
    assert len(await _items(session, "prompts/list")) == server.prompt_count()


def test_every_tool_has_a_short_description() -> None:
    server = build_mcp_server(fixture=True)
    assert server.tools()
    for tool in server.tools():
        assert tool.short_description.strip(), tool.name
        assert tool.chat_description() == tool.short_description
        assert len(tool.short_description) < len(tool.description), tool.name


def test_chat_description_falls_back_to_description() -> None:
    tool = Tool("t", "The long description.", _NoArgs, _ok_tool)
    assert tool.short_description == ""
    assert tool.chat_description() == "The long description."
    short = Tool("t", "The long description.", _NoArgs, _ok_tool, short_description="Short.")
    assert short.chat_description() == "Short."


async def test_input_schemas_are_valid_json_schema_objects() -> None:
    session = Session(role="admin")
    await session.initialize("2025-11-25")
    tools = await _items(session, "tools/list")
    assert len(tools) == 6
    for tool in tools:
        schema = obj(tool["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object", tool["name"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("echo", {"text": "x"}),
        ("echo", {"text": 1}),
        ("echo", {}),
        ("echo", {"text": "x", "extra": 1}),
        ("sleep_ms", {}),
        ("sleep_ms", {"ms": 1}),
        ("sleep_ms", {"ms": "1"}),
        ("big_output", {"size_bytes": 3}),
        ("big_output", {"size_bytes": 1.5}),
        ("fail", {"kind": "nope"}),
        ("log_levels", {}),
        ("log_levels", {"x": 1}),
    ],
)
async def test_input_schema_agrees_with_argument_decoding(
    name: str, arguments: JsonObj, autojump_clock: trio.testing.MockClock
) -> None:
    # What the advertised inputSchema accepts is exactly what the server accepts as arguments.
    session = Session(role="admin")
    await session.initialize("2025-11-25")
    tools = {text(t["name"]): t for t in await _items(session, "tools/list")}
    schema_ok = jsonschema.Draft202012Validator(obj(tools[name]["inputSchema"])).is_valid(arguments)
    result = await session.call_tool(name, arguments)
    server_ok = not (result.get("isError") is True and tool_error(result)["error"] == "bad_args")
    assert schema_ok == server_ok, result
