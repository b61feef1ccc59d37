"""End-to-end tests of stateless Streamable HTTP (``POST /api/mcp``) with raw httpx.

Every test starts the real server (``coremetry.server.serve``: hypercorn's trio worker, the ASGI
app, the dispatcher with the fixture registry) in the test's nursery on a free loopback port,
and speaks HTTP to it. Every JSON-RPC message the server emits — JSON bodies, batch arrays and
each SSE event — goes through :func:`conftest.check_emitted` for the revision in use.

The cases follow ``shared/reference/field-failures.md`` (B05, B06, B08, B09, B10, B13, B14, B15,
B19, B20, B21, B23, B25) and ``shared/reference/mcp-spec.md`` §2. Every test is bounded by
``trio.fail_after`` (a hang guard only); nothing asserts on wall-clock timings.
"""

import base64
import itertools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Final

import httpx
import msgspec
import pytest
import trio
from _wire_support import as_list, as_object
from conftest import check_emitted
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, HTTPScope

import coremetry.app
from coremetry.config import load_config
from coremetry.conformance_fixture.fixture import GREET_NAMES
from coremetry.mcp import CallContext, Server, Tool
from coremetry.mcp.versions import ALL_VERSIONS, DEFAULT_WITHOUT_HEADER, STATELESS_VERSIONS
from coremetry.server import build_mcp_server, serve
from coremetry.transports.streamable_http import StreamableHttp

JsonObject = dict[str, object]

LIMIT_S: Final = 30.0
"""Hang guard of every test: a hang fails, a slow machine does not."""

STATELESS: Final = "2026-07-28"
BOTH: Final = "application/json, text/event-stream"
JSON_HEADERS: Final[Mapping[str, str]] = {"content-type": "application/json", "accept": BOTH}
FIXTURE_TOOLS: Final = {"echo", "sleep_ms", "big_output", "fail", "log_levels"}


# ---- the server ----------------------------------------------------------------------------


async def start_server(
    nursery: trio.Nursery,
    mcp: Server | None = None,
    *,
    http: Mapping[str, object] | None = None,
    sse: Mapping[str, object] | None = None,
    shutdown: trio.Event | None = None,
) -> str:
    """Start ``serve`` in ``nursery`` on a free port; return the MCP endpoint URL."""
    overrides: dict[str, object] = {"http": {"port": 0, **(http or {})}}
    if sse is not None:
        overrides["sse"] = dict(sse)
    config = load_config(environ={}, overrides=overrides)
    server = mcp if mcp is not None else build_mcp_server(fixture=True)
    base: str = await nursery.start(
        partial(
            serve,
            config,
            server,
            announce=False,
            shutdown=trio.Event() if shutdown is None else shutdown,
        )
    )
    return base + "/api/mcp"


@asynccontextmanager
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=LIMIT_S, follow_redirects=False) as client:
        yield client


# ---- messages ------------------------------------------------------------------------------


def rpc(method: str, request_id: object = 1, params: JsonObject | None = None) -> JsonObject:
    """A JSON-RPC request (or a notification when ``request_id`` is ``None``)."""
    message: JsonObject = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return message


def stateless_meta(**extra: object) -> JsonObject:
    return {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        **extra,
    }


def header_value(value: str) -> str:
    """An MCP header value: visible ASCII as is, anything else ``=?base64?…?=`` (2026-07-28)."""
    if value.isascii() and value.isprintable():
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def stateless(
    method: str, request_id: object = 1, params: JsonObject | None = None, **meta: object
) -> tuple[JsonObject, dict[str, str]]:
    """A 2026-07-28 request and the headers a conforming client sends with it."""
    body_params: JsonObject = dict(params or {})
    body_params["_meta"] = stateless_meta(**meta)
    headers = {**JSON_HEADERS, "mcp-protocol-version": STATELESS, "mcp-method": method}
    name = body_params.get("uri") if method == "resources/read" else body_params.get("name")
    if method in ("tools/call", "prompts/get", "resources/read") and isinstance(name, str):
        headers["mcp-name"] = header_value(name)
    return rpc(method, request_id, body_params), headers


def revision_for(body: object, headers: Mapping[str, str | None]) -> str:
    """The revision the server serves a request at: ``_meta``, else the header, else 2025-03-26."""
    params = body.get("params") if isinstance(body, dict) else None
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            version = meta.get("io.modelcontextprotocol/protocolVersion")
            if version in STATELESS_VERSIONS:
                return str(version)
    header = {k.lower(): v for k, v in headers.items()}.get("mcp-protocol-version")
    if header is not None and header.strip() in ALL_VERSIONS:
        return header.strip()
    return DEFAULT_WITHOUT_HEADER


def methods_by_id(body: object) -> dict[object, str]:
    """Request id -> method, for every request in a body (one message or a batch)."""
    items = body if isinstance(body, list) else [body]
    found: dict[object, str] = {}
    for item in items:
        if isinstance(item, dict) and "id" in item and isinstance(item.get("method"), str):
            found[item["id"]] = str(item["method"])
    return found


# ---- SSE -----------------------------------------------------------------------------------


@dataclass
class SseParse:
    events: list[tuple[str, bytes]] = field(default_factory=list)
    comments: int = 0


def parse_sse(body: bytes) -> SseParse:
    """Parse an event stream (WHATWG HTML §9.2.6), checking that every event is well formed."""
    parsed = SseParse()
    text = body.decode("utf-8")
    assert "\r" not in text, "the server frames events with LF only"
    for block in text.split("\n\n"):
        if not block:
            continue
        event = "message"
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                parsed.comments += 1
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE field {line!r}")
        if data:
            assert len(data) == 1, f"one data line per event: {block!r}"
            parsed.events.append((event, data[0].encode()))
    assert text == "" or text.endswith("\n\n"), "the stream ends on an event boundary"
    return parsed


# ---- answers -------------------------------------------------------------------------------


@dataclass
class Answer:
    """One HTTP answer and the JSON-RPC messages it carried (all schema-validated)."""

    status: int
    headers: httpx.Headers
    body: bytes
    messages: list[JsonObject]
    batch: bool = False
    comments: int = 0

    @property
    def content_type(self) -> str:
        value: str = self.headers.get("content-type", "")
        return value.split(";")[0].strip().lower()

    @property
    def is_sse(self) -> bool:
        return self.content_type == "text/event-stream"

    def only(self) -> JsonObject:
        assert not self.batch, self.body
        assert len(self.messages) == 1, self.body
        return self.messages[0]

    def result(self) -> JsonObject:
        message = self.only()
        assert "result" in message, message
        return as_object(message["result"])

    def error(self) -> JsonObject:
        message = self.only()
        assert "error" in message, message
        return as_object(message["error"])

    def error_code(self) -> object:
        return self.error()["code"]


def decode_answer(
    status: int, headers: httpx.Headers, body: bytes, revision: str, methods: Mapping[object, str]
) -> Answer:
    """Decode and validate every message of an answer (JSON object, batch array or SSE)."""
    assert status < 500, f"server error {status}: {body!r}"
    answer = Answer(status, headers, body, [])
    if answer.is_sse:
        parsed = parse_sse(body)
        answer.comments = parsed.comments
        for event, data in parsed.events:
            assert event == "message", event
            answer.messages.append(as_object(json.loads(data)))
    elif body:
        assert answer.content_type == "application/json", headers
        decoded = json.loads(body)
        if isinstance(decoded, list):
            answer.batch = True
            answer.messages = [as_object(item) for item in decoded]
        else:
            answer.messages = [as_object(decoded)]
    for message in answer.messages:
        method = methods.get(message["id"]) if "id" in message else None
        check_emitted(message, revision, method if "result" in message else None)
    return answer


def build(
    client: httpx.AsyncClient,
    url: str,
    body: object,
    headers: Mapping[str, str | None] | None = None,
    *,
    http_method: str = "POST",
) -> httpx.Request:
    """An HTTP request; a header given as ``None`` is removed (httpx adds defaults)."""
    wanted: dict[str, str | None] = {**JSON_HEADERS, **(headers or {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = client.build_request(http_method, url, content=content)
    for name, value in wanted.items():
        if value is None:
            if name in request.headers:
                del request.headers[name]
        else:
            request.headers[name] = value
    return request


async def post(
    client: httpx.AsyncClient,
    url: str,
    body: object,
    headers: Mapping[str, str | None] | None = None,
    *,
    revision: str | None = None,
) -> Answer:
    """POST ``body`` (a JSON value, or raw bytes) and validate the answer."""
    request = build(client, url, body, headers)
    response = await client.send(request)
    decoded_body = body
    if isinstance(body, bytes):
        try:
            decoded_body = json.loads(body)
        except ValueError:
            decoded_body = None
    return decode_answer(
        response.status_code,
        response.headers,
        response.content,
        revision or revision_for(decoded_body, headers or {}),
        methods_by_id(decoded_body),
    )


def tool_error(result: JsonObject) -> JsonObject:
    """The tool-error JSON of an ``isError`` result."""
    assert result.get("isError") is True, result
    content = as_list(result["content"])
    assert len(content) == 1, content
    text = as_object(content[0])["text"]
    assert isinstance(text, str)
    payload = as_object(json.loads(text))
    assert set(payload) >= {"error", "retryable", "hint", "detail"}, payload
    return payload


def text_of(result: JsonObject) -> str:
    content = as_list(result["content"])
    assert len(content) == 1, content
    text = as_object(content[0])["text"]
    assert isinstance(text, str)
    return text


# ---- B14: paths and HTTP methods -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/mcp", "/api/mcp/"])
async def test_post_is_served_with_and_without_a_trailing_slash(
    nursery: trio.Nursery, path: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        base = url.removesuffix("/api/mcp")
        async with http_client() as client:
            answer = await post(client, base + path, rpc("tools/list", 2))
    assert answer.status == 200, answer.body
    assert "location" not in answer.headers
    assert answer.content_type == "application/json"
    names = {as_object(t)["name"] for t in as_list(answer.result()["tools"])}
    assert names >= FIXTURE_TOOLS


@pytest.mark.parametrize("http_method", ["GET", "DELETE", "PUT", "PATCH"])
async def test_other_methods_get_405_with_allow_at_once(
    nursery: trio.Nursery, http_method: str
) -> None:
    """B14: never a held-open stream; 405 + Allow (RFC 9110 §15.5.6), session headers ignored."""
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            request = build(
                client,
                url,
                b"",
                {
                    "accept": "text/event-stream",
                    "content-type": None,
                    "mcp-session-id": "abc",
                    "last-event-id": "1",
                },
                http_method=http_method,
            )
            response = await client.send(request, stream=True)
            try:
                body = await response.aread()  # the answer ends: no stream is held open
            finally:
                await response.aclose()
    assert response.status_code == 405
    allow = {m.strip() for m in response.headers["allow"].split(",")}
    assert "POST" in allow
    assert "mcp-session-id" not in response.headers
    decode_answer(405, response.headers, body, DEFAULT_WITHOUT_HEADER, {})
    assert not response.headers.get("content-type", "").startswith("text/event-stream")


# ---- B05: 202 for notifications and responses, 200 for requests ----------------------------


@pytest.mark.parametrize(
    "message",
    [
        rpc("notifications/initialized", None),
        rpc("notifications/zz_unknown", None, {"x": 1}),
        rpc("notifications/cancelled", None, {"requestId": "never-sent", "reason": "test"}),
        rpc("notifications/progress", None, {"progressToken": 1, "progress": 1}),
        {"jsonrpc": "2.0", "id": 99, "result": {}},
        {"jsonrpc": "2.0", "id": "s-1", "error": {"code": -32601, "message": "no"}},
    ],
    ids=["initialized", "unknown", "cancelled-unknown", "progress", "response", "error"],
)
@pytest.mark.parametrize("version", [None, "2025-06-18", "2025-11-25"])
async def test_notifications_and_responses_get_202_with_an_empty_body(
    nursery: trio.Nursery, message: JsonObject, version: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            headers = {} if version is None else {"mcp-protocol-version": version}
            answer = await post(client, url, message, headers)
    assert answer.status == 202
    assert answer.body == b""  # no "null", no text, no JSON-RPC error
    assert "content-type" not in answer.headers
    assert answer.headers.get("content-length") == "0"


async def test_stateless_notification_gets_202(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless("notifications/zz_unknown", None)
        async with http_client() as client:
            answer = await post(client, url, body, headers)
    assert (answer.status, answer.body) == (202, b"")


async def test_requests_get_200_json(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("tools/list", 2))
            stateless_body, headers = stateless("tools/list", 3)
            modern = await post(client, url, stateless_body, headers)
    assert (answer.status, answer.content_type) == (200, "application/json")
    assert answer.only()["id"] == 2
    assert (modern.status, modern.content_type) == (200, "application/json")
    result = modern.result()
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int)
    assert result["cacheScope"] in ("public", "private")


# ---- B06: ids echoed exactly ---------------------------------------------------------------


ODD_IDS: Final[Sequence[object]] = [0, "1", "req-β-😀", 9007199254740991, -5, "", "0", 2**63]


@pytest.mark.parametrize("request_id", ODD_IDS, ids=repr)
async def test_ids_are_echoed_with_their_json_type(
    nursery: trio.Nursery, request_id: object
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            ping = await post(client, url, rpc("ping", request_id))
            listed = await post(client, url, rpc("tools/list", request_id))
            body, headers = stateless("tools/call", request_id, {"name": "nope_zz"})
            failed = await post(client, url, body, headers)
    for answer in (ping, listed, failed):
        echoed = answer.only()["id"]
        assert echoed == request_id
        assert type(echoed) is type(request_id)
    raw = json.dumps(request_id, ensure_ascii=False).encode()
    assert b'"id":' + raw + b"," in ping.body  # byte for byte, no re-encoding of the id


async def test_initialize_with_id_zero(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        params: JsonObject = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "tests", "version": "1"},
        }
        async with http_client() as client:
            answer = await post(client, url, rpc("initialize", 0, params), revision="2025-11-25")
    message = answer.only()
    assert message["id"] == 0
    assert type(message["id"]) is int
    assert as_object(message["result"])["protocolVersion"] == "2025-11-25"
    assert "mcp-session-id" not in answer.headers  # stateless: no session is ever minted


# ---- B08: batches --------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
@pytest.mark.parametrize(
    "batch",
    [
        [rpc("tools/list", 1), rpc("ping", 2)],
        [],
        [
            rpc(
                "initialize",
                1,
                {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}},
            )
        ],
    ],
    ids=["list-and-ping", "empty", "initialize"],
)
async def test_batches_are_refused_after_2025_03_26(
    nursery: trio.Nursery, version: str, batch: list[JsonObject]
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, batch, {"mcp-protocol-version": version})
    assert answer.status == 400
    assert not answer.batch  # one error object, not an array
    message = answer.only()
    assert message["id"] is None
    assert as_object(message["error"])["code"] == -32600


@pytest.mark.parametrize("version", [None, "2025-03-26"])
async def test_empty_batch_is_refused_at_2025_03_26(
    nursery: trio.Nursery, version: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        headers = {} if version is None else {"mcp-protocol-version": version}
        async with http_client() as client:
            answer = await post(client, url, [], headers)
    assert answer.status == 400
    assert answer.error_code() == -32600


async def test_initialize_batch_is_refused_at_2025_03_26(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        init = rpc(
            "initialize", 1, {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {}}
        )
        async with http_client() as client:
            answer = await post(client, url, [init, rpc("tools/list", 2)])
    assert answer.status == 400
    assert not answer.batch
    assert answer.error_code() == -32600


@pytest.mark.parametrize("version", [None, "2025-03-26"])
async def test_batch_at_2025_03_26_answers_each_request_once(
    nursery: trio.Nursery, version: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        headers = {} if version is None else {"mcp-protocol-version": version}
        batch = [rpc("ping", 1), rpc("notifications/zz_unknown", None), rpc("ping", 2)]
        async with http_client() as client:
            answer = await post(client, url, batch, headers)
    assert answer.status == 200
    assert answer.batch
    assert len(answer.messages) == 2
    assert sorted(m["id"] for m in answer.messages if isinstance(m["id"], int)) == [1, 2]
    assert all(m["result"] == {} for m in answer.messages)


async def test_notification_only_batch_gets_202(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        batch = [rpc("notifications/initialized", None), rpc("notifications/zz", None)]
        async with http_client() as client:
            answer = await post(client, url, batch)
    assert (answer.status, answer.body) == (202, b"")


# ---- B09: error mapping --------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "2025-06-18", "2025-11-25"])
async def test_unknown_method_is_200_method_not_found_in_the_handshake_era(
    nursery: trio.Nursery, version: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        headers = {} if version is None else {"mcp-protocol-version": version}
        async with http_client() as client:
            answer = await post(client, url, rpc("totally/bogus", 2), headers)
    assert answer.status == 200
    assert answer.only()["id"] == 2
    assert answer.error_code() == -32601


@pytest.mark.parametrize("method", ["totally/bogus", "ping", "initialize", "logging/setLevel"])
async def test_unknown_method_is_404_method_not_found_in_2026_07_28(
    nursery: trio.Nursery, method: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless(method, "m-2")
        async with http_client() as client:
            answer = await post(client, url, body, headers)
    assert answer.status == 404
    assert answer.content_type == "application/json"  # the body tells it from a plain 404
    assert answer.only()["id"] == "m-2"
    assert answer.error_code() == -32601


async def test_server_discover(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless("server/discover", 3)
        async with http_client() as client:
            answer = await post(client, url, body, headers)
    assert answer.status == 200
    result = answer.result()
    assert STATELESS in as_list(result["supportedVersions"])
    assert as_object(as_object(result["_meta"])["io.modelcontextprotocol/serverInfo"])["name"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"pi',
        b'{"jsonrpc":"2.0","id":1,"method":"ping\x97"}',
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"a\x97b"}}',
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"text":"a\x97b"}}}',
        ),
        b"",
        b"   \n",
        b"{",
        b"\xff\xfe{}",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing',
    ],
    ids=[
        "truncated",
        "byte-0x97-in-method",
        "byte-0x97-in-params",
        "byte-0x97-in-arguments",
        "empty",
        "whitespace",
        "brace",
        "bom-garbage",
        "trailing",
    ],
)
async def test_unreadable_bodies_get_400_parse_error_with_id_null(
    nursery: trio.Nursery, body: bytes
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, body)
            after = await post(client, url, rpc("ping", 5))  # the server is unharmed
    assert answer.status == 400
    assert answer.only()["id"] is None
    assert answer.error_code() == -32700
    assert after.status == 200


@pytest.mark.parametrize("body", [b"42", b'"ping"', b"null", b"true", b'{"id":1}'])
async def test_json_that_is_not_a_request_gets_400_invalid_request(
    nursery: trio.Nursery, body: bytes
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, body)
    assert answer.status == 400
    assert answer.error_code() == -32600


async def test_bad_params_get_invalid_params(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        message = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": "not-an-object"}
        async with http_client() as client:
            answer = await post(client, url, message)
    assert answer.only()["id"] == 7
    assert answer.error_code() == -32602


# ---- B10: no handshake needed --------------------------------------------------------------


async def test_requests_before_any_initialize_are_served(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            ping = await post(client, url, rpc("ping", 1))
            listed = await post(client, url, rpc("tools/list", 2), {"mcp-protocol-version": None})
    assert ping.result() == {}
    assert as_list(listed.result()["tools"])


# ---- MCP-Protocol-Version ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["bogus", "2099-01-01", "2025-13-45", "", "2025-06-18, 2025-11-25"]
)
async def test_unsupported_protocol_version_header_is_400(
    nursery: trio.Nursery, value: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", "v-1"), {"mcp-protocol-version": value})
    assert answer.status == 400
    message = answer.only()
    assert message["id"] == "v-1"  # the id could be read, so it is echoed
    error = as_object(message["error"])
    assert error["code"] == -32022
    assert STATELESS in as_list(as_object(error["data"])["supported"])


async def test_absent_protocol_version_means_2025_03_26(nursery: trio.Nursery) -> None:
    """Absent header: 2025-03-26 semantics (batches accepted, no structuredContent)."""
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        call = rpc("tools/call", 1, {"name": "fail", "arguments": {"kind": "not_found"}})
        async with http_client() as client:
            batch = await post(client, url, [rpc("ping", 1)], {"mcp-protocol-version": None})
            old = await post(client, url, call, {"mcp-protocol-version": None})
            new = await post(client, url, call, {"mcp-protocol-version": "2025-06-18"})
    assert batch.status == 200
    assert batch.batch
    assert "structuredContent" not in old.result()
    assert "structuredContent" in new.result()


# ---- 2026-07-28 header rules ---------------------------------------------------------------


def _mismatch_cases() -> list[tuple[str, JsonObject, dict[str, str | None]]]:
    call_params: JsonObject = {"name": "echo", "arguments": {"text": "hi"}}
    read_params: JsonObject = {"uri": "fixture://echo/héllo"}
    prompt_params: JsonObject = {"name": "greet", "arguments": {"name": "ada"}}
    return [
        ("tools/list", {}, {"mcp-protocol-version": None}),
        ("tools/list", {}, {"mcp-protocol-version": "2025-11-25"}),
        ("tools/list", {}, {"mcp-protocol-version": "bogus"}),
        ("tools/list", {}, {"mcp-method": None}),
        ("tools/list", {}, {"mcp-method": "tools/call"}),
        ("tools/list", {}, {"mcp-method": "Tools/List"}),
        ("tools/call", call_params, {"mcp-name": None}),
        ("tools/call", call_params, {"mcp-name": "Echo"}),
        ("tools/call", call_params, {"mcp-name": "=?base64?not base64!?="}),
        ("tools/call", call_params, {"mcp-name": header_value("echö")}),
        ("resources/read", read_params, {"mcp-name": "fixture://echo/h?llo"}),
        ("resources/read", read_params, {"mcp-name": None}),
        ("prompts/get", prompt_params, {"mcp-name": "greeting"}),
    ]


@pytest.mark.parametrize(
    ("method", "params", "changes"),
    _mismatch_cases(),
    ids=[
        "no-version",
        "other-version",
        "bogus-version",
        "no-method",
        "wrong-method",
        "method-case",
        "no-name",
        "wrong-name",
        "bad-base64",
        "wrong-base64-name",
        "wrong-uri",
        "no-uri",
        "wrong-prompt",
    ],
)
async def test_stateless_header_mismatch_is_400_header_mismatch(
    nursery: trio.Nursery,
    method: str,
    params: JsonObject,
    changes: dict[str, str | None],
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless(method, "h-1", params)
        async with http_client() as client:
            answer = await post(client, url, body, {**headers, **changes})
    assert answer.status == 400
    assert answer.only()["id"] == "h-1"
    assert answer.error_code() == -32020


@pytest.mark.parametrize(
    ("method", "params", "changes"),
    [
        (
            "tools/call",
            {"name": "echo", "arguments": {"text": "hi"}},
            {"MCP-PROTOCOL-VERSION": STATELESS, "MCP-METHOD": "tools/call", "MCP-NAME": "echo"},
        ),
        (
            "tools/call",
            {"name": "echo", "arguments": {"text": "hi"}},
            {
                "mcp-method": "=?base64?" + base64.b64encode(b"tools/call").decode() + "?=",
                "mcp-name": "=?base64?" + base64.b64encode(b"echo").decode() + "?=",
            },
        ),
        ("resources/read", {"uri": "fixture://echo/héllo"}, {}),
        ("prompts/get", {"name": "greet", "arguments": {"name": "ada"}}, {}),
    ],
    ids=["upper-case-names", "base64-ascii", "base64-utf8-uri", "prompt"],
)
async def test_stateless_headers_in_every_valid_spelling_are_accepted(
    nursery: trio.Nursery, method: str, params: JsonObject, changes: dict[str, str]
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless(method, 4, params)
        lowered = {k.lower() for k in changes}
        merged = {k: v for k, v in headers.items() if k not in lowered} | changes
        async with http_client() as client:
            answer = await post(client, url, body, merged)
    assert answer.status == 200, answer.body
    assert answer.result()["resultType"] == "complete"


async def raw_exchange(url: str, head: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 exchange over a plain socket (for bytes httpx refuses to send).

    Returns:
        The status, the headers (names lower-cased) and the body.
    """
    parsed = httpx.URL(url)
    assert parsed.port is not None
    stream = await trio.open_tcp_stream(parsed.host, parsed.port)
    async with stream:
        request = (
            f"POST {parsed.path} HTTP/1.1\r\n{head}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        await stream.send_all(request.encode("latin-1") + body)
        received = bytearray()
        while chunk := await stream.receive_some(65536):
            received.extend(chunk)
    head_bytes, _, rest = bytes(received).partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert "chunked" not in headers.get("transfer-encoding", "")
    return int(status_line.split()[1]), headers, rest


async def test_stateless_header_values_with_surrounding_whitespace_are_accepted(
    nursery: trio.Nursery,
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, _ = stateless("tools/call", 4, {"name": "echo", "arguments": {"text": "hi"}})
        parsed = httpx.URL(url)
        head = (
            f"Host: {parsed.host}:{parsed.port}\r\n"
            "Content-Type: application/json\r\n"
            f"Accept: {BOTH}\r\n"
            f"mcp-protocol-version: \t {STATELESS}  \r\n"
            "MCP-Method:    tools/call\t\r\n"
            "Mcp-Name:  echo \r\n"
        )
        status, headers, content = await raw_exchange(url, head, json.dumps(body).encode())
    answer = decode_answer(status, httpx.Headers(headers), content, STATELESS, {4: "tools/call"})
    assert answer.status == 200, content
    assert text_of(answer.result()) == "hi"


@pytest.mark.parametrize(
    "meta",
    [
        {"io.modelcontextprotocol/protocolVersion": STATELESS},
        {"io.modelcontextprotocol/clientCapabilities": {}},
        None,
    ],
    ids=["no-capabilities", "no-version", "no-meta"],
)
async def test_stateless_request_missing_meta_fields_is_400_invalid_params(
    nursery: trio.Nursery, meta: JsonObject | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        params: JsonObject = {} if meta is None else {"_meta": meta}
        headers = {**JSON_HEADERS, "mcp-protocol-version": STATELESS, "mcp-method": "tools/list"}
        async with http_client() as client:
            answer = await post(client, url, rpc("tools/list", 8, params), headers)
    assert answer.status == 400
    assert answer.only()["id"] == 8
    assert answer.error_code() == -32602


async def test_stateless_request_without_client_info_is_served(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        meta = {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers = {**JSON_HEADERS, "mcp-protocol-version": STATELESS, "mcp-method": "tools/list"}
        async with http_client() as client:
            answer = await post(client, url, rpc("tools/list", 8, {"_meta": meta}), headers)
    assert answer.status == 200


@pytest.mark.parametrize("version", ["2099-01-01", "2025-11-25"])
async def test_stateless_request_with_an_unsupported_version_is_400(
    nursery: trio.Nursery, version: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        meta = {**stateless_meta(), "io.modelcontextprotocol/protocolVersion": version}
        headers = {**JSON_HEADERS, "mcp-protocol-version": version, "mcp-method": "tools/list"}
        async with http_client() as client:
            answer = await post(
                client, url, rpc("tools/list", 9, {"_meta": meta}), headers, revision=STATELESS
            )
    assert answer.status == 400
    assert answer.only()["id"] == 9
    error = answer.error()
    assert error["code"] == -32022
    data = as_object(error["data"])
    assert STATELESS in as_list(data["supported"])
    assert data["requested"] == version


# ---- B13: Accept and Content-Type ----------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "status", "content_type"),
    [
        ("application/json", 200, "application/json"),
        ("*/*", 200, "application/json"),
        ("application/*", 200, "application/json"),
        (BOTH, 200, "application/json"),
        ("text/event-stream, application/json;q=0.9", 200, "application/json"),
        ("APPLICATION/JSON; charset=utf-8", 200, "application/json"),
        (None, 200, "application/json"),
        ("", 200, "application/json"),
        ("text/event-stream", 200, "text/event-stream"),
        ("text/event-stream, application/json;q=0", 200, "text/event-stream"),
        ("text/html", 406, "application/json"),
        ("application/json;q=0", 406, "application/json"),
        ("image/*", 406, "application/json"),
    ],
)
async def test_accept_variants(
    nursery: trio.Nursery, accept: str | None, status: int, content_type: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"accept": accept})
    assert answer.status == status, answer.body
    assert answer.content_type == content_type
    if status == 200:
        assert answer.result() == {}
        if answer.is_sse:  # the stream carries the one answer and ends
            assert answer.headers["x-accel-buffering"] == "no"
            assert "no-cache" in answer.headers["cache-control"]
    else:
        assert answer.error_code() == -32600


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json; charset=utf-8", 200),
        ("Application/JSON", 200),
        ("application/json;charset=UTF-8", 200),
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        ("application/json-patch+json", 415),
        (None, 415),
    ],
)
async def test_content_type_variants(
    nursery: trio.Nursery, content_type: str | None, status: int
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"content-type": content_type})
    assert answer.status == status, answer.body
    if status == 200:
        assert answer.result() == {}
    else:
        assert answer.error_code() == -32600


async def test_body_over_the_limit_is_413(nursery: trio.Nursery) -> None:
    limit = 512
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, http={"max_body_bytes": limit})
        exact = json.dumps(rpc("ping", 1, {"pad": ""}), separators=(",", ":")).encode()
        exact = exact.replace(b'"pad":""', b'"pad":"' + b"x" * (limit - len(exact)) + b'"')
        assert len(exact) == limit
        over = exact.replace(b'"pad":"', b'"pad":"x')

        async def chunked() -> AsyncIterator[bytes]:
            for i in range(0, len(over), 100):
                yield over[i : i + 100]

        async with http_client() as client:
            at_limit = await post(client, url, exact)
            too_big = await post(client, url, over)
            request = client.build_request("POST", url, content=chunked(), headers=JSON_HEADERS)
            assert "content-length" not in request.headers
            streamed = await client.send(request)
            after = await post(client, url, rpc("ping", 2))
    assert at_limit.status == 200
    assert too_big.status == 413
    assert too_big.error_code() == -32600
    assert streamed.status_code == 413
    decode_answer(413, streamed.headers, streamed.content, DEFAULT_WITHOUT_HEADER, {})
    assert after.status == 200


# ---- B15: Origin, Host, CORS ---------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "http://localhost.evil.com",
        "http://127.0.0.1.evil.com",
        "null",
        "file://",
        "http://evil.example:8080",
    ],
)
async def test_foreign_origin_is_403_without_cors(nursery: trio.Nursery, origin: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"origin": origin})
            get = await client.get(url, headers={"origin": origin})
    assert answer.status == 403
    assert answer.error_code() == -32600
    assert "access-control-allow-origin" not in answer.headers
    assert get.status_code == 403


@pytest.mark.parametrize(
    "origin",
    [
        None,
        "http://localhost",
        "http://localhost:5173",
        "https://localhost:8443",
        "http://127.0.0.1:3000",
        "http://[::1]:8080",
        "https://app.example.com",
    ],
)
async def test_loopback_and_configured_origins_are_served(
    nursery: trio.Nursery, origin: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, http={"allowed_origins": ["https://app.example.com"]})
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"origin": origin})
            refused = await post(
                client, url, rpc("ping", 1), {"origin": origin, "content-type": "text/plain"}
            )
    assert answer.status == 200
    assert answer.result() == {}
    assert refused.status == 415
    for response in (answer, refused):
        if origin is None:
            assert "access-control-allow-origin" not in response.headers
        else:  # errors to an allowed origin carry CORS headers too
            assert response.headers["access-control-allow-origin"] == origin
            assert "origin" in response.headers["vary"].lower()


@pytest.mark.parametrize(
    "host", ["evil.example.com", "evil.example.com:80", "localhost.evil.com", "127.0.0.2.nip.io"]
)
async def test_foreign_host_is_refused(nursery: trio.Nursery, host: str) -> None:
    """DNS-rebinding protection while bound to loopback."""
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"host": host})
    assert 400 <= answer.status < 500
    assert answer.error_code() == -32600


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8080",
        "LOCALHOST:1",
        "127.0.0.1",
        "127.0.0.1:65535",
        "[::1]",
        "[::1]:9000",
        "mcp.example.com",
        "mcp.example.com:443",
    ],
)
async def test_loopback_and_configured_hosts_are_served(nursery: trio.Nursery, host: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, http={"allowed_hosts": ["mcp.example.com:*"]})
        async with http_client() as client:
            answer = await post(client, url, rpc("ping", 1), {"host": host})
    assert answer.status == 200
    assert answer.result() == {}


async def test_preflight_from_an_allowed_origin(nursery: trio.Nursery) -> None:
    asked = "authorization, content-type, mcp-protocol-version, mcp-session-id, last-event-id"
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            response = await client.options(
                url,
                headers={
                    "origin": "http://localhost:5173",
                    "access-control-request-method": "POST",
                    "access-control-request-headers": asked,
                },
            )
    assert response.status_code in (200, 204)
    assert response.content == b""
    assert response.headers["access-control-allow-origin"] == "http://localhost:5173"
    methods = {m.strip() for m in response.headers["access-control-allow-methods"].split(",")}
    assert "POST" in methods
    allowed = {
        h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")
    }
    assert allowed >= {h.strip() for h in asked.split(",")} | {"mcp-method", "mcp-name"}
    exposed = response.headers["access-control-expose-headers"].lower()
    assert "www-authenticate" in exposed


async def test_preflight_from_a_foreign_origin_gets_no_cors(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            response = await client.options(
                url,
                headers={
                    "origin": "https://evil.example",
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "content-type",
                },
            )
    assert 400 <= response.status_code < 500
    assert not any(name.startswith("access-control-") for name in response.headers)


# ---- B19: SSE answers with progress --------------------------------------------------------


def sleep_call(request_id: object, ms: int, token: object | None) -> JsonObject:
    params: JsonObject = {"name": "sleep_ms", "arguments": {"ms": ms}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return rpc("tools/call", request_id, params)


def check_progress_stream(answer: Answer, token: object, request_id: object) -> None:
    """Progress first (identical token, strictly increasing, constant total), the result last."""
    assert answer.is_sse, answer.headers
    assert answer.headers["x-accel-buffering"] == "no"
    assert "no-cache" in answer.headers["cache-control"]
    assert "content-length" not in answer.headers
    *progress, last = answer.messages
    assert progress, "progress notifications come before the result"
    values: list[float] = []
    totals: set[object] = set()
    for message in progress:
        assert message["method"] == "notifications/progress"
        assert "id" not in message
        params = as_object(message["params"])
        assert params["progressToken"] == token
        assert type(params["progressToken"]) is type(token)
        value = params["progress"]
        assert isinstance(value, int | float)
        values.append(value)
        totals.add(params.get("total"))
    assert all(a < b for a, b in itertools.pairwise(values)), values
    assert len(totals) == 1
    assert last["id"] == request_id
    assert "result" in last


@pytest.mark.parametrize("token", [0, "tok-é-1", "0", -1, 2**53], ids=repr)
async def test_progress_streams_before_the_result(nursery: trio.Nursery, token: object) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, sleep_call(11, 40, token))
    check_progress_stream(answer, token, 11)
    assert text_of(as_object(answer.messages[-1]["result"])) == "slept 40 ms"


async def test_progress_streams_in_the_stateless_era(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = stateless(
            "tools/call", "s-1", {"name": "sleep_ms", "arguments": {"ms": 30}}, progressToken="p"
        )
        async with http_client() as client:
            answer = await post(client, url, body, headers)
    check_progress_stream(answer, "p", "s-1")
    assert as_object(answer.messages[-1]["result"])["resultType"] == "complete"


async def test_no_progress_token_means_no_progress(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, sleep_call(12, 30, None))
    assert answer.content_type == "application/json"
    assert text_of(answer.result()) == "slept 30 ms"


async def test_json_only_client_gets_one_result_and_no_progress(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(client, url, sleep_call(13, 30, 0), {"accept": "application/json"})
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert text_of(answer.result()) == "slept 30 ms"


async def test_sse_only_client_gets_progress_and_result(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(
                client, url, sleep_call(14, 30, "t"), {"accept": "text/event-stream"}
            )
    check_progress_stream(answer, "t", 14)


# ---- a server with tools that block until released -----------------------------------------


class NoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


@dataclass
class Probe:
    """What a blocking tool observed."""

    started: trio.Event = field(default_factory=trio.Event)
    release: trio.Event = field(default_factory=trio.Event)
    cancelled: trio.Event = field(default_factory=trio.Event)
    finished: trio.Event = field(default_factory=trio.Event)
    cancelled_before_deadline: bool | None = None


def blocking_server(probe: Probe) -> Server:
    """The fixture registry plus ``block``: it reports progress, then waits for ``release``."""
    server = build_mcp_server(fixture=True)

    async def block(args: NoArgs, ctx: CallContext) -> str:
        try:
            await ctx.report_progress(1, message="started")
            probe.started.set()
            await probe.release.wait()
            await ctx.report_progress(2, message="released")
            return "released"
        except trio.Cancelled:
            probe.cancelled_before_deadline = ctx.remaining_s() > 0
            probe.cancelled.set()
            raise
        finally:
            probe.finished.set()

    # A budget far beyond the test's hang guard: only a disconnect can cancel the call in time.
    server.register_tool(Tool("block", "Block until the test releases it.", NoArgs, block))
    return server


@dataclass
class Exchange:
    """What the ASGI app sent for one HTTP request."""

    sent: list[ASGISendEvent] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> list[Exchange]:
    """Record every ASGI event the Streamable HTTP handler sends, per request."""
    recorded: list[Exchange] = []

    class Recording(StreamableHttp):
        async def __call__(
            self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
        ) -> None:
            exchange = Exchange()
            recorded.append(exchange)

            async def tap(message: ASGISendEvent) -> None:
                exchange.sent.append(message)
                await send(message)

            try:
                await super().__call__(scope, receive, tap)
            finally:
                exchange.done.set()

    monkeypatch.setattr(coremetry.app, "StreamableHttp", Recording)
    return recorded


def block_call(request_id: object, token: object | None) -> JsonObject:
    params: JsonObject = {"name": "block", "arguments": {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return rpc("tools/call", request_id, params)


def bodies(exchange: Exchange) -> list[bytes]:
    out: list[bytes] = []
    for event in exchange.sent:
        if event["type"] == "http.response.body":
            out.append(bytes(event.get("body", b"")))
    return out


async def test_dropped_stream_cancels_the_call(
    nursery: trio.Nursery, exchanges: list[Exchange]
) -> None:
    probe = Probe()
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, blocking_server(probe))
        async with http_client() as client:
            request = build(client, url, block_call("c-1", "tok"))
            response = await client.send(request, stream=True)
            try:
                assert response.headers["content-type"] == "text/event-stream"
                lines = response.aiter_lines()
                first = await lines.__anext__()
                assert first == "event: message"
            finally:
                await response.aclose()  # the client goes away mid-call
            await probe.cancelled.wait()
            await probe.finished.wait()
            (exchange,) = exchanges
            await exchange.done.wait()
            after = await post(client, url, rpc("ping", 2))  # the server is unharmed
    assert probe.cancelled_before_deadline is True
    assert not probe.release.is_set()
    # Nothing after the progress event: no result, no end-of-stream frame.
    sent = bodies(exchange)
    assert sent, exchange.sent
    assert all(b"notifications/progress" in body for body in sent), sent
    assert all(
        event.get("more_body") is True
        for event in exchange.sent
        if event["type"] == "http.response.body"
    )
    assert after.status == 200


async def test_dropped_json_request_cancels_the_call(
    nursery: trio.Nursery, exchanges: list[Exchange]
) -> None:
    probe = Probe()
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, blocking_server(probe))
        async with http_client() as client:
            async with trio.open_nursery() as inner:

                async def call() -> None:
                    await client.post(
                        url,
                        content=json.dumps(block_call("c-2", "tok")).encode(),
                        headers={**JSON_HEADERS, "accept": "application/json"},
                    )

                inner.start_soon(call)
                await probe.started.wait()
                inner.cancel_scope.cancel()  # the client abandons the request
            await probe.cancelled.wait()
            (exchange,) = exchanges
            await exchange.done.wait()
            after = await post(client, url, rpc("ping", 3))
    assert probe.cancelled_before_deadline is True
    assert exchange.sent == []  # not a byte was written for the abandoned call
    assert after.status == 200


async def test_idle_stream_gets_keepalive_comments(
    nursery: trio.Nursery, exchanges: list[Exchange]
) -> None:
    probe = Probe()
    with trio.fail_after(LIMIT_S):
        url = await start_server(
            nursery, blocking_server(probe), sse={"keepalive_interval_s": 0.02}
        )
        async with http_client() as client:
            request = build(client, url, block_call(21, 7))
            response = await client.send(request, stream=True)
            raw = bytearray()
            try:
                async for chunk in response.aiter_raw():
                    raw.extend(chunk)
                    if b"\n: ping\n" in b"\n" + bytes(raw) and not probe.release.is_set():
                        probe.release.set()  # released only once a keepalive was seen
            finally:
                await response.aclose()
        (exchange,) = exchanges
        await exchange.done.wait()
    answer = decode_answer(
        200, response.headers, bytes(raw), DEFAULT_WITHOUT_HEADER, {21: "tools/call"}
    )
    assert answer.comments >= 1
    check_progress_stream(answer, 7, 21)
    assert text_of(as_object(answer.messages[-1]["result"])) == "released"
    last = exchange.sent[-1]
    assert last["type"] == "http.response.body"
    assert last.get("more_body") is False  # the stream ended after the result


# ---- B20: tools/call errors ----------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "2025-06-18", "2025-11-25", STATELESS])
async def test_tools_call_error_shapes(nursery: trio.Nursery, version: str | None) -> None:
    def call(request_id: int, params: JsonObject) -> tuple[JsonObject, dict[str, str | None]]:
        if version == STATELESS:
            body, headers = stateless("tools/call", request_id, params)
            return body, dict(headers)
        headers_: dict[str, str | None] = {"mcp-protocol-version": version}
        return rpc("tools/call", request_id, params), headers_

    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            unknown = await post(client, url, *call(1, {"name": "no_such_tool_zz"}))
            wrong_type = await post(
                client, url, *call(2, {"name": "echo", "arguments": {"text": 123}})
            )
            missing = await post(client, url, *call(3, {"name": "echo"}))
            nameless = await post(client, url, *call(4, {"arguments": {}}))
            admin = await post(client, url, *call(5, {"name": "admin_only", "arguments": {}}))
    assert unknown.error_code() == -32602
    for answer, needle in ((wrong_type, "text"), (missing, "text")):
        payload = tool_error(answer.result())
        assert payload["error"] == "bad_args"
        assert needle in str(payload["detail"])
    assert nameless.error_code() == -32602
    assert admin.error_code() == -32001
    for answer in (unknown, wrong_type, missing, nameless, admin):
        assert answer.status in (200, 400)


@pytest.mark.parametrize(
    "kind", ["timeout", "backend_unavailable", "bad_args", "not_found", "internal"]
)
async def test_failing_tool_is_an_is_error_result_without_secrets(
    nursery: trio.Nursery, kind: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        call = rpc("tools/call", 1, {"name": "fail", "arguments": {"kind": kind}})
        async with http_client() as client:
            answer = await post(client, url, call, {"mcp-protocol-version": "2025-11-25"})
    assert answer.status == 200
    result = answer.result()
    payload = tool_error(result)
    assert payload["error"] == kind
    assert result["structuredContent"] == payload
    for secret in (b"hunter2", b"/srv/secret", b"Traceback", b"RuntimeError"):
        assert secret not in answer.body


# ---- B21: prompts --------------------------------------------------------------------------


async def test_prompts_get_errors(nursery: trio.Nursery) -> None:
    def get(request_id: int, params: JsonObject) -> JsonObject:
        return rpc("prompts/get", request_id, params)

    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            listed = await post(client, url, rpc("prompts/list", 1))
            unknown = await post(client, url, get(2, {"name": "no_such_prompt_zz"}))
            empty = await post(client, url, get(3, {"name": "greet", "arguments": {}}))
            omitted = await post(client, url, get(4, {"name": "greet"}))
            number = await post(client, url, get(5, {"name": "greet", "arguments": {"name": 5}}))
            extra = await post(
                client, url, get(6, {"name": "greet", "arguments": {"name": "ada", "zz": "1"}})
            )
    assert "greet" in {as_object(p)["name"] for p in as_list(listed.result()["prompts"])}
    assert unknown.error_code() == -32602
    for answer in (empty, omitted):
        error = answer.error()
        assert error["code"] == -32602
        assert "name" in str(error["message"])
    assert number.error_code() == -32602
    if "error" in extra.only():
        assert extra.error_code() == -32602
    else:
        text = json.dumps(extra.result())
        assert "ada" in text
        assert "None" not in text
        assert "{name}" not in text


async def test_prompt_completion(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        params: JsonObject = {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "name", "value": "a"},
        }
        async with http_client() as client:
            answer = await post(client, url, rpc("completion/complete", 1, params))
    values = as_list(as_object(answer.result()["completion"])["values"])
    assert values == [n for n in GREET_NAMES if n.startswith("a")]


# ---- B23: pagination -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "key"),
    [
        ("tools/list", "tools"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
        ("prompts/list", "prompts"),
    ],
)
async def test_pagination_advances_ends_and_rejects_garbage(
    nursery: trio.Nursery, method: str, key: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, build_mcp_server(fixture=True, page_size=2))
        async with http_client() as client:
            seen: list[str] = []
            cursor: object = None
            for page in range(50):
                params: JsonObject = {} if cursor is None else {"cursor": cursor}
                answer = await post(client, url, rpc(method, page, params))
                result = answer.result()
                items = as_list(result[key])
                assert items or page == 0
                seen.extend(json.dumps(item, sort_keys=True) for item in items)
                cursor = result.get("nextCursor")
                if cursor is None:
                    break
            else:
                raise AssertionError("the list never ended")
            bogus = await post(client, url, rpc(method, 100, {"cursor": "bogus"}))
            typed = await post(client, url, rpc(method, 101, {"cursor": 123}))
            null = await post(client, url, rpc(method, 102, {"cursor": None}))
    assert len(seen) == len(set(seen))
    assert bogus.error_code() == -32602
    assert typed.error_code() == -32602
    assert "result" in null.only()


# ---- B25: deadlines ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["server-maximum", "client-timeout-meta"])
async def test_a_call_over_its_budget_is_a_timeout_and_the_next_ping_is_served(
    nursery: trio.Nursery, how: str
) -> None:
    with trio.fail_after(LIMIT_S):
        if how == "server-maximum":
            url = await start_server(nursery, build_mcp_server(fixture=True, max_budget_s=0.1))
            params: JsonObject = {"name": "sleep_ms", "arguments": {"ms": 60_000}}
        else:
            url = await start_server(nursery)
            params = {
                "name": "sleep_ms",
                "arguments": {"ms": 60_000},
                "_meta": {"coremetry/timeout_ms": 100},
            }
        async with http_client() as client:
            answer = await post(
                client, url, rpc("tools/call", 1, params), {"mcp-protocol-version": "2025-11-25"}
            )
            ping = await post(client, url, rpc("ping", 2))
    payload = tool_error(answer.result())
    assert payload["error"] == "timeout"
    assert payload["retryable"] is True
    assert ping.result() == {}


# ---- resources -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-11-25", STATELESS])
async def test_resources_read_static_template_and_unknown(
    nursery: trio.Nursery, version: str
) -> None:
    def read(request_id: int, uri: str) -> tuple[JsonObject, dict[str, str | None]]:
        if version == STATELESS:
            body, headers = stateless("resources/read", request_id, {"uri": uri})
            return body, dict(headers)
        return rpc("resources/read", request_id, {"uri": uri}), {"mcp-protocol-version": version}

    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            info = await post(client, url, *read(1, "fixture://info"))
            echoed = await post(client, url, *read(2, "fixture://echo/h%C3%A9llo"))
            unknown = await post(client, url, *read(3, "fixture://nope"))
    (contents,) = as_list(info.result()["contents"])
    assert as_object(contents)["uri"] == "fixture://info"
    (contents,) = as_list(echoed.result()["contents"])
    assert json.loads(str(as_object(contents)["text"])) == {"text": "héllo"}
    error = unknown.error()
    assert error["code"] == (-32602 if version == STATELESS else -32002)
    assert as_object(error["data"])["uri"] == "fixture://nope"


# ---- shutdown: listen streams end ----------------------------------------------------------


async def listen_through_shutdown(url: str, stop: trio.Event) -> Answer:
    """Open a ``subscriptions/listen`` stream, start the drain once acknowledged, read to the end.

    Raises:
        httpx.RemoteProtocolError: the server cut the stream instead of ending it.
    """
    body, headers = stateless(
        "subscriptions/listen", 1, {"notifications": {"toolsListChanged": True}}
    )
    async with http_client() as client:
        response = await client.send(build(client, url, body, headers), stream=True)
        raw = bytearray()
        try:
            async for chunk in response.aiter_raw():
                raw.extend(chunk)
                if b"notifications/subscriptions/acknowledged" in raw:
                    stop.set()
        finally:
            await response.aclose()
    return decode_answer(response.status_code, response.headers, bytes(raw), STATELESS, {})


def check_clean_end(answer: Answer) -> None:
    assert answer.is_sse
    # The acknowledgment, then SubscriptionsListenResult (the graceful teardown), then the end.
    ack, ended = answer.messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ended["id"] == 1
    result = as_object(ended["result"])
    assert result["resultType"] == "complete"
    assert as_object(result["_meta"])["io.modelcontextprotocol/subscriptionId"] == 1


async def test_shutdown_ends_listen_streams(nursery: trio.Nursery) -> None:
    stop = trio.Event()
    with trio.fail_after(LIMIT_S):
        # A long grace period: the listen must end at once, not when the drain gives up.
        url = await start_server(nursery, http={"graceful_shutdown_s": 20.0}, shutdown=stop)
        answer = await listen_through_shutdown(url, stop)
    check_clean_end(answer)


# ---- an unknown method is 404 in 2026-07-28 whatever its params ----------------------------

UNREADABLE_META: Final[Mapping[str, object]] = {
    "negative-timeout": stateless_meta(**{"coremetry/timeout_ms": -5}),
    "object-progress-token": stateless_meta(progressToken={}),
    "unknown-log-level": stateless_meta(**{"io.modelcontextprotocol/logLevel": "loud"}),
    "capabilities-not-an-object": stateless_meta(
        **{"io.modelcontextprotocol/clientCapabilities": 3}
    ),
    "version-not-a-string": {"io.modelcontextprotocol/protocolVersion": 20260728},
    "meta-a-list": [STATELESS],
    "meta-null": None,
}


def with_meta(method: str, meta: object) -> tuple[JsonObject, dict[str, str]]:
    """A 2026-07-28 request (the headers a conforming client sends) whose ``_meta`` is ``meta``."""
    _, headers = stateless(method, "u-1")
    return {"jsonrpc": "2.0", "id": "u-1", "method": method, "params": {"_meta": meta}}, headers


@pytest.mark.parametrize("meta", list(UNREADABLE_META), ids=list(UNREADABLE_META))
@pytest.mark.parametrize("method", ["totally/bogus", "ping", "initialize"])
async def test_unknown_method_with_an_undecodable_meta_is_404_in_2026_07_28(
    nursery: trio.Nursery, method: str, meta: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = with_meta(method, UNREADABLE_META[meta])
        async with http_client() as client:
            answer = await post(client, url, body, headers, revision=STATELESS)
    assert answer.status == 404
    assert answer.content_type == "application/json"
    assert answer.only()["id"] == "u-1"
    assert answer.error_code() == -32601


INCOMPLETE_PARAMS: Final[Mapping[str, JsonObject | None]] = {
    "no-params": None,
    "no-meta": {},
    "empty-meta": {"_meta": {}},
    "meta-without-capabilities": {"_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS}},
}


@pytest.mark.parametrize("params", list(INCOMPLETE_PARAMS), ids=list(INCOMPLETE_PARAMS))
@pytest.mark.parametrize("method", ["totally/bogus", "ping", "initialize", "logging/setLevel"])
async def test_unknown_method_without_the_required_meta_is_404_in_2026_07_28(
    nursery: trio.Nursery, method: str, params: str
) -> None:
    # A method 2026-07-28 removed was checked for _meta's required keys first: 400 -32602.
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        _, headers = stateless(method, "u-2")
        body = rpc(method, "u-2", INCOMPLETE_PARAMS[params])
        async with http_client() as client:
            answer = await post(client, url, body, headers, revision=STATELESS)
    assert answer.status == 404
    assert answer.content_type == "application/json"
    assert answer.only()["id"] == "u-2"
    assert answer.error_code() == -32601


@pytest.mark.parametrize("params", ["no-params", "no-meta", "meta-without-capabilities"])
async def test_known_method_without_the_required_meta_stays_400_invalid_params(
    nursery: trio.Nursery, params: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        _, headers = stateless("tools/list", "u-3")
        body = rpc("tools/list", "u-3", INCOMPLETE_PARAMS[params])
        async with http_client() as client:
            answer = await post(client, url, body, headers, revision=STATELESS)
    assert answer.status == 400
    assert answer.only()["id"] == "u-3"
    assert answer.error_code() == -32602


@pytest.mark.parametrize("meta", list(UNREADABLE_META), ids=list(UNREADABLE_META))
async def test_known_method_with_an_undecodable_meta_stays_invalid_params(
    nursery: trio.Nursery, meta: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        body, headers = with_meta("tools/list", UNREADABLE_META[meta])
        async with http_client() as client:
            answer = await post(client, url, body, headers, revision=STATELESS)
    assert answer.status == 200
    assert answer.only()["id"] == "u-1"
    assert answer.error_code() == -32602
