"""Lifecycle: initialize negotiation, ping, logging/setLevel, and the stateless 2026-07-28 era.

Field failure B10 (requests before initialize); ``shared/reference/mcp-spec.md`` §1 and §1'.
"""

import pytest
from test_dispatch_support import (
    HANDSHAKE_REVISIONS,
    LATEST_HANDSHAKE,
    META_CAPS,
    META_SERVER_INFO,
    META_VERSION,
    STATELESS,
    JsonObj,
    Session,
    arr,
    error_of,
    obj,
    result_of,
)

from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import Server, versions

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
UNSUPPORTED_PROTOCOL_VERSION = -32022


# ---- initialize ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "negotiated"),
    [
        *[(revision, revision) for revision in HANDSHAKE_REVISIONS],
        ("1999-01-01", LATEST_HANDSHAKE),
        ("2026-07-28", LATEST_HANDSHAKE),
        ("", LATEST_HANDSHAKE),
        ("2025-11-25-draft", LATEST_HANDSHAKE),
    ],
)
async def test_initialize_negotiates_revision(requested: str, negotiated: str) -> None:
    session = Session()
    message = await session.initialize(requested)  # validated at the negotiated revision
    result = result_of(message)
    assert result["protocolVersion"] == negotiated
    assert session.conn.protocol_version == negotiated
    server_info = obj(result["serverInfo"])
    assert server_info["name"] == "coremetry"
    assert isinstance(server_info["version"], str)
    assert isinstance(result.get("instructions"), str)
    for key in ("resultType", "ttlMs", "cacheScope"):
        assert key not in result, f"{key} is a 2026-07-28 field"


@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
async def test_initialize_capabilities_per_revision(revision: str) -> None:
    session = Session()
    result = result_of(await session.initialize(revision))
    capabilities = obj(result["capabilities"])
    for feature in ("tools", "resources", "prompts", "logging"):
        assert feature in capabilities, feature
    if revision == "2024-11-05":
        assert "completions" not in capabilities
    else:
        assert capabilities["completions"] == {}


@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
async def test_initialize_server_title_from_2025_06_18(revision: str) -> None:
    session = Session()
    server_info = obj(result_of(await session.initialize(revision))["serverInfo"])
    if versions.at_least(revision, "2025-06-18"):
        assert server_info["title"] == "Coremetry MCP"
    else:
        assert "title" not in server_info


async def test_initialize_records_client_capabilities_and_info() -> None:
    session = Session()
    message = await session.request(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": True}},
            "clientInfo": {"name": "c", "version": "9"},
        },
    )
    result_of(message)
    assert session.conn.client_capabilities == {"roots": {"listChanged": True}}
    assert session.conn.client_info == {"name": "c", "version": "9"}


async def test_initialize_without_protocol_version_is_invalid_params() -> None:
    session = Session()
    error = await session.error("initialize", {"capabilities": {}})
    assert error["code"] == INVALID_PARAMS
    assert "protocolVersion" in str(error["message"])
    assert session.conn.protocol_version is None


async def test_notifications_initialized_marks_the_connection() -> None:
    session = Session()
    await session.initialize("2025-06-18")
    assert session.conn.initialized


# ---- ping, early requests, logging/setLevel --------------------------------------------------


@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
async def test_ping_returns_empty_result(revision: str) -> None:
    session = Session()
    await session.initialize(revision)
    assert await session.result("ping") == {}
    assert await session.result("ping", {}) == {}
    assert await session.result("ping", {"_meta": {"progressToken": 1}}) == {}


async def test_requests_before_initialize_are_answered() -> None:
    session = Session()
    ping = await session.request("ping", request_id=1)
    assert ping["id"] == 1
    assert result_of(ping) == {}
    early = await session.request("tools/list", request_id=2)
    assert early["id"] == 2
    assert "result" in early or "error" in early
    await session.initialize("2025-06-18")
    later = await session.request("tools/list", request_id=4)
    assert later["id"] == 4
    names = {obj(tool)["name"] for tool in arr(result_of(later)["tools"])}
    assert "echo" in names


@pytest.mark.parametrize(
    "level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
)
async def test_set_level_valid(level: str) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    assert await session.result("logging/setLevel", {"level": level}) == {}
    assert session.conn.log_level == level


@pytest.mark.parametrize(
    "params",
    [{"level": "loud"}, {"level": "INFO"}, {"level": 3}, {"level": None}, {}],
    ids=["loud", "upper", "number", "null", "missing"],
)
async def test_set_level_invalid_is_invalid_params(params: JsonObj) -> None:
    session = Session()
    await session.initialize(LATEST_HANDSHAKE)
    await session.result("logging/setLevel", {"level": "error"})
    error = await session.error("logging/setLevel", params)
    assert error["code"] == INVALID_PARAMS
    assert session.conn.log_level == "error"  # unchanged


# ---- stateless era (2026-07-28) --------------------------------------------------------------


def _assert_stateless_result(result: JsonObj, *, cached: bool, name: str = "coremetry") -> None:
    assert result["resultType"] == "complete"
    meta = obj(result["_meta"])
    server_info = obj(meta[META_SERVER_INFO])
    assert server_info["name"] == name
    if cached:
        ttl = result["ttlMs"]
        assert isinstance(ttl, int)
        assert ttl >= 0
        assert result["cacheScope"] in ("public", "private")


async def test_server_discover() -> None:
    session = Session()
    result = await session.result("server/discover", stateless=True)
    _assert_stateless_result(result, cached=True)
    supported = arr(result["supportedVersions"])
    assert STATELESS in supported
    assert all(isinstance(version, str) for version in supported)
    capabilities = obj(result["capabilities"])
    assert "tools" in capabilities
    assert "completions" in capabilities
    assert obj(capabilities["resources"]).get("subscribe") in (None, False)


async def test_server_discover_on_a_handshake_connection_is_still_stateless() -> None:
    session = Session()
    await session.initialize("2025-06-18")
    result = await session.result("server/discover", stateless=True)
    _assert_stateless_result(result, cached=True)
    assert session.conn.protocol_version == "2025-06-18"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("server/discover", None),
        ("tools/list", None),
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
    ],
)
@pytest.mark.parametrize(
    "meta",
    [
        pytest.param({META_CAPS: {}}, id="no-protocolVersion"),
        pytest.param({META_VERSION: STATELESS}, id="no-clientCapabilities"),
        pytest.param({}, id="empty-meta"),
    ],
)
async def test_stateless_missing_required_meta_is_400(
    method: str, params: JsonObj | None, meta: JsonObj
) -> None:
    # A transport that saw ``MCP-Protocol-Version: 2026-07-28`` pins the connection.
    session = Session(protocol_version=STATELESS)
    message, status = await session.request_reply(method, params, meta=meta)
    assert error_of(message)["code"] == INVALID_PARAMS
    assert status == 400
    assert "io.modelcontextprotocol/" in str(error_of(message)["message"])


async def test_server_discover_without_meta_is_400() -> None:
    session = Session()
    message, status = await session.request_reply("server/discover", request_id="d")
    assert message["id"] == "d"
    assert error_of(message)["code"] == INVALID_PARAMS
    assert status == 400


@pytest.mark.parametrize("requested", ["2025-11-25", "2024-11-05", "2099-01-01", ""])
async def test_stateless_unsupported_version_is_32022(requested: str) -> None:
    session = Session()
    message, status = await session.request_reply(
        "tools/list", meta={META_VERSION: requested, META_CAPS: {}}, request_id=11
    )
    assert message["id"] == 11
    error = error_of(message)
    assert error["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert status == 400
    data = obj(error["data"])
    assert data["requested"] == requested
    supported = arr(data["supported"])
    assert STATELESS in supported
    assert all(isinstance(version, str) for version in supported)


async def test_stateless_supported_versions_are_really_supported() -> None:
    # The schema says of data.supported: "The client should choose a mutually supported version
    # from this list and retry." Every version listed must therefore work when retried; the
    # version just refused must not be offered back.
    session = Session()
    message = await session.request("tools/list", meta={META_VERSION: "2025-11-25", META_CAPS: {}})
    data = obj(error_of(message)["data"])
    supported = [str(version) for version in arr(data["supported"])]
    assert "2025-11-25" not in supported, supported
    for version in supported:
        retry = await session.request("tools/list", meta={META_VERSION: version, META_CAPS: {}})
        assert "result" in retry, (version, retry)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}),
        ("ping", None),
        ("logging/setLevel", {"level": "info"}),
        ("resources/subscribe", {"uri": "fixture://info"}),
    ],
)
@pytest.mark.parametrize("request_id", [7, "seven"])
async def test_removed_methods_are_32601_http_404(
    method: str, params: JsonObj | None, request_id: int | str
) -> None:
    session = Session()
    message, status = await session.request_reply(
        method, params, request_id=request_id, stateless=True
    )
    assert message["id"] == request_id
    assert error_of(message)["code"] == METHOD_NOT_FOUND
    assert status == 404
    assert session.conn.protocol_version is None  # initialize did not run


@pytest.mark.parametrize("method", ["initialize", "logging/setLevel"])
async def test_removed_methods_are_32601_whatever_their_params(method: str) -> None:
    # The method does not exist in 2026-07-28: its handshake-era params are not required.
    session = Session()
    message, status = await session.request_reply(method, {}, stateless=True)
    assert error_of(message)["code"] == METHOD_NOT_FOUND
    assert status == 404


_STATELESS_CALLS: list[tuple[str, JsonObj | None, bool]] = [
    ("server/discover", None, True),
    ("tools/list", None, True),
    ("resources/list", None, True),
    ("resources/templates/list", None, True),
    ("prompts/list", None, True),
    ("resources/read", {"uri": "fixture://info"}, True),
    ("resources/read", {"uri": "fixture://echo/abc"}, True),
    ("tools/call", {"name": "echo", "arguments": {"text": "x"}}, False),
    ("tools/call", {"name": "fail", "arguments": {"kind": "not_found"}}, False),
    ("prompts/get", {"name": "greet", "arguments": {"name": "ada"}}, False),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": ""}},
        False,
    ),
]


@pytest.mark.parametrize(("method", "params", "cached"), _STATELESS_CALLS)
async def test_every_stateless_result_has_result_type(
    method: str, params: JsonObj | None, cached: bool
) -> None:
    session = Session()
    message, status = await session.request_reply(method, params, stateless=True)
    assert status == 200
    _assert_stateless_result(result_of(message), cached=cached)


async def test_stateless_list_pages_share_cache_scope() -> None:
    server = Server("t", "1", page_size=2)
    register_fixture(server)
    session = Session(server)
    scopes: set[object] = set()
    cursor: object = None
    for _ in range(10):
        params: JsonObj = {} if cursor is None else {"cursor": cursor}
        result = await session.result("tools/list", params, stateless=True)
        _assert_stateless_result(result, cached=True, name="t")
        scopes.add(result["cacheScope"])
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert len(scopes) == 1


async def test_stateless_request_on_a_pinned_connection() -> None:
    session = Session(protocol_version=STATELESS)
    result = await session.result("tools/list", stateless=True)
    _assert_stateless_result(result, cached=True)


async def test_handshake_results_carry_no_stateless_fields() -> None:
    session = Session()
    await session.initialize("2025-06-18")
    calls: list[tuple[str, JsonObj | None]] = [
        ("tools/list", None),
        ("resources/read", {"uri": "fixture://info"}),
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
    ]
    for method, params in calls:
        result = await session.result(method, params)
        for key in ("resultType", "ttlMs", "cacheScope"):
            assert key not in result, (method, key)


async def test_stateless_request_does_not_change_the_session() -> None:
    session = Session()
    await session.initialize("2025-03-26")
    await session.result("tools/list", stateless=True)
    assert session.conn.protocol_version == "2025-03-26"
    # back to the handshake era on the same connection
    assert "resultType" not in await session.result("tools/list")
