"""Issue 4's acceptance tests, end to end: every call authenticated and gated.

Every test runs the real server (:func:`coremetry.server.serve`: hypercorn's trio worker, the
ASGI app, the fixture registry) on a free loopback port with real security
(:func:`coremetry.server.open_security` over a temporary data dir: identity store, JWT secret,
rate limiter, audit log), and talks to it over real sockets — Streamable HTTP in both eras,
legacy SSE, WebSocket — or runs ``coremetry stdio --fixture`` as a subprocess holding a service
token in ``COREMETRY_TOKEN``. Every JSON-RPC message the server emits is validated against the
official schema of the revision in use (:func:`conftest.check_emitted`).

1. The role matrix: every registered entry (the fixture's and every observability tool,
   resource, template and prompt, over a store holding the demo telemetry and the detector's
   problems) x every role x every transport is allowed or refused with ``-32001`` (naming the
   needed role) exactly as ``min_role`` says, and the list methods show exactly what the role
   may use.
2. The credential attack set: each refused credential gets 401 with the Bearer challenge (plus
   ``error="invalid_token"`` when a token was sent) on every HTTP entry point; valid JWTs (header
   and cookie) and service tokens are accepted; too low a role is never a 401.
3. Session binding: another identity can neither post into a legacy SSE session nor see or
   inject into another WebSocket; a revoked token can no longer use a session or socket it
   opened before the revocation ("revocable with immediate effect").
4. The rate limit: exactly the calls over the burst get ``-32000`` with ``retry_after_ms``; other
   identities are unaffected; after the wait calls pass again; REST answers 429 + Retry-After.
5. The audit log: one record per gated call with the right outcome and identity, and no secret
   in the database files or in any log line.

Every test is bounded by ``trio.fail_after`` (a hang guard); nothing asserts on wall-clock time.
Two tests wait for real: the rate-limit test sleeps the advertised ``retry_after_ms`` (about a
second; its burst assumes ten loopback calls take well under the second a token needs to
refill), and the attack test lets a three-second service token expire.
"""

import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final, Literal

import httpx
import jwt
import pytest
import trio
from _wire_support import as_list, as_object, request, upgrade_by_hand
from conftest import check_emitted
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from coremetry.audit import RECENT_URI, AuditEntry
from coremetry.config import Config, load_config
from coremetry.detection.problem_store import PROBLEMS_FILE
from coremetry.mcp import Server
from coremetry.mcp.versions import LATEST_HANDSHAKE, V2024_11_05, V2025_11_25, V2026_07_28
from coremetry.server import Security, build_mcp_server, open_security, serve_with_store
from coremetry.store import TelemetryStore, TimeRange, TraceQuery
from coremetry.store.open import TELEMETRY_DB, open_telemetry_store

JsonObject = dict[str, object]
RequestId = int | str

LIMIT_S: Final = 60.0
"""Hang guard of every test: a hang fails, a slow machine does not."""

ROLE_ORDER: Final = ("viewer", "editor", "admin")
"""The roles, least privileged first (issue 4: viewer < editor < admin)."""

CHALLENGE: Final = 'Bearer realm="coremetry"'
INVALID_TOKEN_CHALLENGE: Final = 'Bearer realm="coremetry", error="invalid_token"'
EXPIRED_CHALLENGE: Final = (
    'Bearer realm="coremetry", error="invalid_token", error_description="The access token expired"'
)


def discovery(base: str) -> str:
    """What every 401's challenge ends with: the OAuth protected-resource metadata (issue 18)."""
    return f', resource_metadata="{base}/.well-known/oauth-protected-resource/api/mcp"'


MCP_PATH: Final = "/api/mcp"
SSE_PATH: Final = "/api/mcp/sse"
WS_PATH: Final = "/api/mcp/ws"
LOGIN_PATH: Final = "/api/auth/login"
REST_ECHO_PATH: Final = "/api/tools/echo"

BOTH: Final = "application/json, text/event-stream"

FORBIDDEN: Final = -32001
RATE_LIMITED: Final = -32000

PASSWORD: Final = "correct horse battery staple 4e2e"
"""The test user's password (a secret: it must appear nowhere)."""

TOOL_ARGUMENTS: Final[Mapping[str, JsonObject]] = {
    "echo": {"text": "x"},
    "sleep_ms": {"ms": 0},
    "big_output": {"size_bytes": 1},
    "fail": {"kind": "not_found"},  # an isError result: the call was allowed
    "admin_only": {},
    "log_levels": {},
    "list_services": {"range": "24h"},
    "get_service": {"service": "ts-travel-service", "range": "24h"},
    "get_service_map": {"range": "24h"},
    "search_traces": {"service": "ts-travel-service", "range": "24h"},
    "get_trace": {"trace_id": "<trace_id>"},
    "search_logs": {"text": "error", "range": "24h"},
    "list_metrics": {"range": "24h"},
    "query_metric": {"name": "<metric>", "range": "24h"},
    "list_deploys": {"range": "24h"},
    "compare_deploys": {"service": "ts-travel-service", "range": "24h"},
    "list_problems": {"range": "24h"},
    "get_problem": {"problem_id": "<problem_id>"},
    "list_anomalies": {"range": "24h"},
}
"""Minimal valid arguments of every tool (a tool missing here fails the matrix); ``<name>``
stands for a value read from the demo data (:class:`Telemetry`)."""

TOOL_ERRORS_EXPECTED: Final = frozenset({"fail", "compare_deploys"})
"""Tools whose allowed call answers a tool error (``isError``: past the gate): ``fail`` by
design, ``compare_deploys`` because no shipped dataset carries ``service.version``."""

TEMPLATE_VALUES: Final[Mapping[str, str]] = {
    "fixture://echo/{text}": "fixture://echo/x",
    "coremetry://service/{name}": "coremetry://service/ts-travel-service",
    "coremetry://trace/{trace_id}": "coremetry://trace/<trace_id>",
    "coremetry://logs/{service}": "coremetry://logs/ts-travel-service",
    "coremetry://metric/{name}": "coremetry://metric/<metric>",
    "coremetry://problem/{id}": "coremetry://problem/<problem_id>",
}
"""A URI each template serves on the demo data (a template missing here fails the matrix)."""

PROMPT_ARGUMENTS: Final[Mapping[str, JsonObject]] = {
    "greet": {"name": "x"},
    "explain_trace": {"trace_id": "<trace_id>"},
    "suggest_runbook": {"service": "ts-travel-service"},
    "compare_deploys": {"service": "ts-travel-service"},
    "investigate_service": {"service": "ts-travel-service"},
    "triage_brief": {},
}
"""Arguments of every prompt (a prompt missing here fails the matrix)."""


@dataclass(frozen=True)
class Telemetry:
    """A data dir holding the demo telemetry and the detector's problems, made once per module
    with the real commands (``coremetry demo load``, ``coremetry detect``), and values in it."""

    data_dir: Path
    values: Mapping[str, str]
    """``<trace_id>``, ``<metric>``, ``<problem_id>`` -> a real value of the demo data."""

    def fill(self, value: object) -> object:
        """``value`` with every ``<name>`` placeholder replaced (recursively)."""
        if isinstance(value, str):
            for key, real in self.values.items():
                value = value.replace(key, real)
            return value
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value

    def copy_into(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        for name in (TELEMETRY_DB, PROBLEMS_FILE):
            shutil.copy2(self.data_dir / name, data_dir / name)
        shutil.copytree(self.data_dir / "demo", data_dir / "demo")


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Telemetry:
    data_dir = tmp_path_factory.mktemp("telemetry")
    for command in (["demo", "load"], ["detect", "--range", "13h"]):
        subprocess.run(
            [sys.executable, "-m", "coremetry", *command, "--data-dir", str(data_dir)],
            check=True,
            capture_output=True,
            timeout=LIMIT_S * 3,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    problems = as_list(as_object(json.loads((data_dir / PROBLEMS_FILE).read_text()))["problems"])
    assert problems, "the detector found no problem in the demo data"
    problem_id = str(as_object(problems[0])["problem_id"])
    config = load_config(environ={}, overrides={"data_dir": str(data_dir)})

    async def read_values() -> tuple[str, str]:
        async with open_telemetry_store(config) as store:
            stats = await store.statistics()
            assert stats.newest_unix_nano is not None
            day = TimeRange(
                start_unix_nano=stats.newest_unix_nano - 86_400 * 10**9,
                end_unix_nano=stats.newest_unix_nano + 1,
            )
            traces = await store.search_traces(
                TraceQuery(time_range=day, service_name="ts-travel-service"), limit=1
            )
            metrics = await store.metric_names(day, limit=1)
            return traces.items[0].trace_id, metrics.items[0].name

    trace_id, metric = trio.run(read_values)
    return Telemetry(
        data_dir,
        {"<trace_id>": trace_id, "<metric>": metric, "<problem_id>": problem_id},
    )


def rank(role: str) -> int:
    """The rank of a role; ``""`` (no ``min_role``) is the viewer floor."""
    return ROLE_ORDER.index(role or "viewer")


def may_use(role: str, min_role: str) -> bool:
    return rank(role) >= rank(min_role)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def initialize_params(revision: str) -> JsonObject:
    return {
        "protocolVersion": revision,
        "capabilities": {},
        "clientInfo": {"name": "auth-e2e", "version": "0"},
    }


def error_of(reply: Mapping[str, object]) -> JsonObject:
    assert "result" not in reply, reply
    return as_object(reply.get("error"))


def result_of(reply: Mapping[str, object]) -> JsonObject:
    assert "error" not in reply, reply
    return as_object(reply.get("result"))


def text_of(result: Mapping[str, object]) -> str:
    """The text of a one-item text result (``tools/call``) or resource read."""
    items = as_list(result["content"] if "content" in result else result["contents"])
    assert len(items) == 1, items
    text = as_object(items[0])["text"]
    assert isinstance(text, str)
    return text


# ---- the server --------------------------------------------------------------------------------


@dataclass
class Live:
    """A running server with real security, and the credentials made for the test."""

    base: str
    config: Config
    security: Security
    mcp: Server
    data_dir: Path
    tokens: dict[str, str]
    """Service token by role (names ``e2e-<role>``)."""
    extra_tokens: dict[str, str]
    """Further service tokens by name."""
    stop: trio.Event

    @property
    def ws_url(self) -> str:
        return "ws://" + self.base.removeprefix("http://") + WS_PATH

    def sub(self, role: str) -> str:
        return f"token:e2e-{role}"


@asynccontextmanager
async def live_server(
    tmp_path: Path,
    *,
    rate_limit: Mapping[str, object] | None = None,
    users: Sequence[tuple[str, str]] = (),
    extra_tokens: Sequence[tuple[str, str]] = (),
    telemetry: Telemetry | None = None,
    config_overrides: Mapping[str, object] | None = None,
) -> AsyncIterator[Live]:
    """``serve_with_store`` with ``open_security`` on a fresh data dir, as ``coremetry serve``
    runs it (the telemetry store open, the observability entries registered); stopped and
    drained on exit.

    Args:
        rate_limit: the ``[rate_limit]`` section (default: large enough never to interfere).
        users: ``(name, role)`` users to add, all with :data:`PASSWORD`.
        extra_tokens: ``(name, role)`` service tokens besides ``e2e-<role>`` for every role.
        telemetry: telemetry to start with (copied into the data dir); default: an empty store.
        config_overrides: further configuration sections (e.g. ``{"auth": {...}}``).
    """
    data_dir = tmp_path / "data"
    if telemetry is not None:
        telemetry.copy_into(data_dir)
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 2.0},
            "data_dir": str(data_dir),
            "rate_limit": dict(rate_limit or {"per_second": 1000.0, "burst": 1000}),
            **(config_overrides or {}),
        },
    )
    security = open_security(config)
    try:
        tokens = {
            role: security.store.create_token(f"e2e-{role}", role, None)[0] for role in ROLE_ORDER
        }
        extras = {
            name: security.store.create_token(name, role, None)[0] for name, role in extra_tokens
        }
        for name, role in users:
            security.store.add_user(name, role, PASSWORD)
        built: list[Server] = []

        def build(store: TelemetryStore) -> Server:
            mcp = build_mcp_server(
                fixture=True, store=store, problems_path=data_dir / PROBLEMS_FILE
            )
            built.append(mcp)
            return mcp

        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            base: str = await nursery.start(
                partial(
                    serve_with_store,
                    config,
                    build,
                    announce=False,
                    shutdown=stop,
                    security=security,
                )
            )
            try:
                yield Live(base, config, security, built[0], data_dir, tokens, extras, stop)
            finally:
                stop.set()
    finally:
        security.close()


async def login(base: str, username: str, password: str) -> tuple[str, str]:
    """``POST /api/auth/login`` with a client of its own; the JWT and the cookie it set."""
    async with httpx.AsyncClient(base_url=base, timeout=LIMIT_S) as client:
        response = await client.post(LOGIN_PATH, json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    body = as_object(response.json())
    token = body["token"]
    assert isinstance(token, str)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    name_value = cookie.split(";", 1)[0]
    assert name_value == f"coremetry_session={token}"
    return token, name_value


# ---- the registry: what each role may use ------------------------------------------------------

EntryKind = Literal["tool", "resource", "template", "prompt"]


@dataclass(frozen=True)
class Entry:
    """One registered entry, the call that uses it and the list that shows it."""

    kind: EntryKind
    key: str
    """The tool or prompt name, the resource URI or the URI template."""
    min_role: str
    method: str
    params: JsonObject

    @property
    def needed(self) -> str:
        return self.min_role or "viewer"


def registry_entries(mcp: Server, telemetry: Telemetry) -> list[Entry]:
    """Every entry of ``mcp`` (read after ``serve`` installed the admin audit resource), each
    with a call that succeeds on the demo data for a role allowed to make it."""
    entries: list[Entry] = []
    for tool in mcp.tools():
        assert tool.name in TOOL_ARGUMENTS, f"give {tool.name!r} minimal arguments"
        arguments = as_object(telemetry.fill(dict(TOOL_ARGUMENTS[tool.name])))
        params: JsonObject = {"name": tool.name, "arguments": arguments}
        entries.append(Entry("tool", tool.name, tool.min_role, "tools/call", params))
    for resource in mcp.resources():
        entries.append(
            Entry(
                "resource", resource.uri, resource.min_role, "resources/read", {"uri": resource.uri}
            )
        )
    for template in mcp.resource_templates():
        assert template.uri_template in TEMPLATE_VALUES, f"give {template.uri_template!r} a URI"
        uri = str(telemetry.fill(TEMPLATE_VALUES[template.uri_template]))
        entries.append(
            Entry(
                "template", template.uri_template, template.min_role, "resources/read", {"uri": uri}
            )
        )
    for prompt in mcp.prompts():
        assert prompt.name in PROMPT_ARGUMENTS, f"give {prompt.name!r} arguments"
        params = {"name": prompt.name, "arguments": telemetry.fill(PROMPT_ARGUMENTS[prompt.name])}
        entries.append(Entry("prompt", prompt.name, prompt.min_role, "prompts/get", params))
    return entries


LISTS: Final[Mapping[EntryKind, tuple[str, str, str]]] = {
    "tool": ("tools/list", "tools", "name"),
    "resource": ("resources/list", "resources", "uri"),
    "template": ("resources/templates/list", "resourceTemplates", "uriTemplate"),
    "prompt": ("prompts/list", "prompts", "name"),
}
"""Entry kind -> (list method, result key, identifying field)."""


# ---- transports: one connection, many requests -------------------------------------------------

Call = tuple[str, JsonObject]
"""A request: method and params."""

Runner = Callable[[Sequence[Call]], Awaitable[list[JsonObject]]]
"""Sends requests over one connection; returns the answers, in request order."""

TransportName = Literal["http-handshake", "http-2026", "sse", "ws", "stdio"]
TRANSPORTS: Final[tuple[TransportName, ...]] = ("http-handshake", "http-2026", "sse", "ws", "stdio")


def stateless_meta() -> JsonObject:
    return {
        "io.modelcontextprotocol/protocolVersion": V2026_07_28,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "auth-e2e", "version": "0"},
    }


def parse_sse_body(body: bytes) -> list[JsonObject]:
    """The ``message`` events of a complete SSE answer body."""
    messages: list[JsonObject] = []
    for block in body.decode("utf-8").split("\n\n"):
        event, data = "message", ""
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "event":
                event = value.strip()
            elif name == "data":
                data += value.removeprefix(" ")
        if data:
            assert event == "message", block
            messages.append(as_object(json.loads(data)))
    return messages


@dataclass
class HttpMcp:
    """Streamable HTTP (``POST /api/mcp``) as one identity, in one era."""

    client: httpx.AsyncClient
    headers: Mapping[str, str]
    era: Literal["handshake", "stateless"]
    seen: list[JsonObject] = field(default_factory=list)

    @property
    def revision(self) -> str:
        return V2025_11_25 if self.era == "handshake" else V2026_07_28

    async def post(self, request_id: RequestId, method: str, params: JsonObject) -> httpx.Response:
        """POST one request; every message of the answer is validated and kept in ``seen``."""
        headers = {"content-type": "application/json", "accept": BOTH, **self.headers}
        body_params = dict(params)
        if self.era == "stateless":
            body_params["_meta"] = stateless_meta()
            headers["mcp-protocol-version"] = V2026_07_28
            headers["mcp-method"] = method
            name = params.get("uri") if method == "resources/read" else params.get("name")
            if method in ("tools/call", "prompts/get", "resources/read"):
                assert isinstance(name, str)
                assert name.isascii()
                headers["mcp-name"] = name
        else:
            headers["mcp-protocol-version"] = V2025_11_25
        response = await self.client.post(
            MCP_PATH, content=json.dumps(request(request_id, method, body_params)), headers=headers
        )
        assert response.status_code < 500, response.text
        if response.status_code in (401, 403):
            return response
        content_type = response.headers.get("content-type", "").split(";")[0].strip()
        if content_type == "text/event-stream":
            messages = parse_sse_body(response.content)
        else:
            assert content_type == "application/json", response.headers
            messages = [as_object(response.json())]
        for message in messages:
            answers = "method" not in message and message.get("id") == request_id
            check_emitted(message, self.revision, method if answers else None)
            self.seen.append(message)
        return response

    async def call(self, request_id: RequestId, method: str, params: JsonObject) -> JsonObject:
        response = await self.post(request_id, method, params)
        assert response.status_code not in (401, 403), (response.status_code, response.text)
        replies = [m for m in self.seen if "method" not in m and m.get("id") == request_id]
        assert len(replies) == 1, replies
        self.seen.remove(replies[0])
        return replies[0]


@asynccontextmanager
async def http_mcp(
    base: str, headers: Mapping[str, str], era: Literal["handshake", "stateless"]
) -> AsyncIterator[HttpMcp]:
    async with httpx.AsyncClient(base_url=base, timeout=LIMIT_S) as client:
        channel = HttpMcp(client, headers, era)
        if era == "handshake":
            init = await channel.call("init", "initialize", initialize_params(V2025_11_25))
            assert result_of(init)["protocolVersion"] == V2025_11_25
        yield channel


class SseReader:
    """The events of one legacy SSE stream, parsed as they arrive (comments skipped)."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._buffer = b""

    async def next_event(self) -> tuple[str, str]:
        while True:
            while b"\n\n" not in self._buffer:
                try:
                    self._buffer += await self._chunks.__anext__()
                except StopAsyncIteration:
                    raise AssertionError(f"the stream ended: {self._buffer!r}") from None
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            lines = [line for line in block.decode("utf-8").split("\n") if not line.startswith(":")]
            if not lines:
                continue  # a keep-alive comment
            fields = dict(line.split(": ", 1) for line in lines)
            assert set(fields) == {"event", "data"}, lines
            return fields["event"], fields["data"]


@dataclass
class SseSession:
    """An initialized legacy SSE session (2024-11-05) of one identity."""

    client: httpx.AsyncClient
    reader: SseReader
    endpoint: str
    headers: Mapping[str, str]
    methods: dict[RequestId, str] = field(default_factory=dict)
    seen: list[JsonObject] = field(default_factory=list)

    async def next_message(self) -> JsonObject:
        event, data = await self.reader.next_event()
        assert event == "message", (event, data)
        message = as_object(json.loads(data))
        request_id = message.get("id")
        method = (
            self.methods.get(request_id)
            if isinstance(request_id, int | str) and "method" not in message
            else None
        )
        check_emitted(message, V2024_11_05, method)
        self.seen.append(message)
        return message

    async def send(self, message: JsonObject) -> None:
        request_id, method = message.get("id"), message.get("method")
        if isinstance(request_id, int | str) and isinstance(method, str):
            self.methods[request_id] = method
        posted = await self.client.post(self.endpoint, json=message, headers=dict(self.headers))
        assert posted.status_code == 202, (posted.status_code, posted.text)

    async def call(self, request_id: RequestId, method: str, params: JsonObject) -> JsonObject:
        await self.send(request(request_id, method, params))
        while True:
            message = await self.next_message()
            if "method" not in message and message.get("id") == request_id:
                return message


@asynccontextmanager
async def sse_session(base: str, headers: Mapping[str, str]) -> AsyncIterator[SseSession]:
    async with (
        httpx.AsyncClient(base_url=base, timeout=LIMIT_S) as client,
        client.stream(
            "GET", SSE_PATH, headers={"accept": "text/event-stream", **headers}
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        reader = SseReader(response)
        event, endpoint = await reader.next_event()
        assert event == "endpoint", (event, endpoint)
        assert endpoint.startswith("/api/mcp/messages?sessionId="), endpoint
        session = SseSession(client, reader, endpoint, headers)
        init = await session.call(0, "initialize", initialize_params(V2024_11_05))
        assert result_of(init)["protocolVersion"] == V2024_11_05
        await session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield session


@dataclass
class WsSession:
    """An initialized WebSocket session of one identity; every frame read is validated."""

    ws: WebSocketConnection
    revision: str = LATEST_HANDSHAKE
    methods: dict[RequestId, str] = field(default_factory=dict)
    seen: list[JsonObject] = field(default_factory=list)

    async def send(self, message: JsonObject) -> None:
        request_id, method = message.get("id"), message.get("method")
        if isinstance(request_id, int | str) and isinstance(method, str):
            self.methods[request_id] = method
        await self.ws.send_message(json.dumps(message))

    async def next_message(self) -> JsonObject:
        frame = await self.ws.get_message()
        assert isinstance(frame, str), frame
        message = as_object(json.loads(frame))
        request_id = message.get("id")
        method = (
            self.methods.get(request_id)
            if isinstance(request_id, int | str) and "method" not in message
            else None
        )
        check_emitted(message, self.revision, method)
        self.seen.append(message)
        return message

    async def reply(self, request_id: RequestId) -> JsonObject:
        while True:
            message = await self.next_message()
            if "method" not in message and message.get("id") == request_id:
                return message

    async def call(self, request_id: RequestId, method: str, params: JsonObject) -> JsonObject:
        await self.send(request(request_id, method, params))
        return await self.reply(request_id)


@asynccontextmanager
async def ws_connect(url: str, headers: Mapping[str, str]) -> AsyncIterator[WebSocketConnection]:
    """A trio-websocket client over a TCP stream the test owns (see ``test_websocket.connect``)."""
    host_port = url.removeprefix("ws://").removesuffix(WS_PATH)
    host, port = host_port.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    extra = [(name.encode(), value.encode()) for name, value in headers.items()]
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, host_port, WS_PATH, subprotocols=["mcp"], extra_headers=extra
        )
        try:
            yield ws
        finally:
            await ws.aclose()
            await stream.aclose()


@asynccontextmanager
async def ws_session(url: str, headers: Mapping[str, str]) -> AsyncIterator[WsSession]:
    async with ws_connect(url, headers) as ws:
        assert ws.subprotocol == "mcp"
        session = WsSession(ws)
        init = await session.call(0, "initialize", initialize_params(LATEST_HANDSHAKE))
        assert result_of(init)["protocolVersion"] == LATEST_HANDSHAKE
        await session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield session


def stdio_env(live: Live, token: str) -> dict[str, str]:
    """The environment of a ``coremetry stdio`` subprocess on the test's data dir and limits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = str(live.data_dir)
    env["COREMETRY_TOKEN"] = token
    env["COREMETRY_RATE_LIMIT_PER_SECOND"] = str(live.config.rate_limit.per_second)
    env["COREMETRY_RATE_LIMIT_BURST"] = str(live.config.rate_limit.burst)
    return env


@dataclass
class StdioRun:
    replies: list[JsonObject]
    stderr: str


async def run_stdio(live: Live, token: str, calls: Sequence[Call]) -> StdioRun:
    """One ``coremetry stdio --fixture`` process: initialize, then ``calls`` (ids 1..n)."""
    lines = [
        request("init", "initialize", initialize_params(LATEST_HANDSHAKE)),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(request(i, method, params) for i, (method, params) in enumerate(calls, start=1)),
    ]
    stdin = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    result = await trio.run_process(
        [sys.executable, "-m", "coremetry", "stdio", "--fixture", "--log-level", "DEBUG"],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=stdio_env(live, token),
        start_new_session=True,
    )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    methods: dict[object, str] = {"init": "initialize"}
    methods.update({i: method for i, (method, _params) in enumerate(calls, start=1)})
    out: bytes = result.stdout
    messages = [as_object(json.loads(raw)) for raw in out.splitlines() if raw.strip()]
    by_id: dict[object, JsonObject] = {}
    for message in messages:
        answer_to = message.get("id") if "method" not in message else None
        check_emitted(message, LATEST_HANDSHAKE, methods.get(answer_to))
        if answer_to is not None:
            assert answer_to not in by_id, f"two answers to {answer_to!r}"
            by_id[answer_to] = message
    assert set(by_id) == set(methods), (sorted(map(str, by_id)), stderr)
    return StdioRun([by_id[i] for i in range(1, len(calls) + 1)], stderr)


@asynccontextmanager
async def open_runner(transport: TransportName, live: Live, token: str) -> AsyncIterator[Runner]:
    """One connection of ``transport`` as the holder of ``token``."""
    if transport == "stdio":

        async def batch(calls: Sequence[Call]) -> list[JsonObject]:
            return (await run_stdio(live, token, calls)).replies

        yield batch
        return

    async def sequential(
        call: Callable[[RequestId, str, JsonObject], Awaitable[JsonObject]], calls: Sequence[Call]
    ) -> list[JsonObject]:
        return [await call(i, method, params) for i, (method, params) in enumerate(calls, start=1)]

    if transport == "sse":
        async with sse_session(live.base, bearer(token)) as sse:
            yield partial(sequential, sse.call)
    elif transport == "ws":
        async with ws_session(live.ws_url, bearer(token)) as ws:
            yield partial(sequential, ws.call)
    else:
        era: Literal["handshake", "stateless"] = (
            "handshake" if transport == "http-handshake" else "stateless"
        )
        async with http_mcp(live.base, bearer(token), era) as http:
            yield partial(sequential, http.call)


# ---- 1. the role matrix ------------------------------------------------------------------------


def check_role_matrix(
    live: Live,
    role: str,
    entries: Sequence[Entry],
    calls: Sequence[Call],
    replies: list[JsonObject],
) -> list[str]:
    """Compare one role's answers with ``min_role``; returns the mismatches, described."""
    problems: list[str] = []
    lists, entry_replies = replies[: len(LISTS)], replies[len(LISTS) :]
    for (kind, (method, key, field_name)), reply in zip(LISTS.items(), lists, strict=True):
        result = result_of(reply)
        assert "nextCursor" not in result, f"{method}: one page expected"
        shown = {str(as_object(item)[field_name]) for item in as_list(result[key])}
        wanted = {e.key for e in entries if e.kind == kind and may_use(role, e.min_role)}
        if shown != wanted:
            problems.append(f"{role} {method}: shows {sorted(shown)}, expected {sorted(wanted)}")
    for entry, reply in zip(entries, entry_replies, strict=True):
        label = f"{role} {entry.method} {entry.key} (min_role {entry.needed})"
        if may_use(role, entry.min_role):
            if "result" not in reply:
                problems.append(f"{label}: refused {reply.get('error')}, expected allowed")
                continue
            result = as_object(reply["result"])
            if entry.kind == "tool":
                failing = entry.key in TOOL_ERRORS_EXPECTED
                if (result.get("isError") is True) != failing:
                    problems.append(f"{label}: unexpected tool result {result}")
            elif entry.kind == "prompt":
                if not as_list(result["messages"]):
                    problems.append(f"{label}: no messages")
            elif not as_list(result["contents"]):
                problems.append(f"{label}: no contents")
        else:
            error = as_object(reply.get("error")) if "error" in reply else {}
            message = str(error.get("message", ""))
            if error.get("code") != FORBIDDEN or f"requires role {entry.needed}" not in message:
                problems.append(f"{label}: answered {reply}, expected -32001 naming the role")
    # The identity the connection carries, as the server resource reports it.
    server_entry = [i for i, e in enumerate(entries) if e.key == "coremetry://server"]
    for index in server_entry:
        if "result" not in entry_replies[index]:
            continue  # reported above
        info = json.loads(text_of(as_object(entry_replies[index]["result"])))
        caller = as_object(info["caller"])
        if caller != {"subject": live.sub(role), "role": role}:
            problems.append(f"{role}: coremetry://server says the caller is {caller}")
        visible = {
            "tools": sum(e.kind == "tool" and may_use(role, e.min_role) for e in entries),
            "resources": sum(e.kind == "resource" and may_use(role, e.min_role) for e in entries),
            "resource_templates": sum(
                e.kind == "template" and may_use(role, e.min_role) for e in entries
            ),
            "prompts": sum(e.kind == "prompt" and may_use(role, e.min_role) for e in entries),
        }
        counts = {key: info.get(key) for key in visible}
        if counts != visible:
            problems.append(f"{role}: coremetry://server counts {counts}, expected {visible}")
    assert len(calls) == len(replies)
    return problems


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_role_matrix(tmp_path: Path, transport: TransportName, telemetry: Telemetry) -> None:
    """Every entry x every role over ``transport``: allowed or -32001 exactly as ``min_role``."""
    with trio.fail_after(LIMIT_S * 2):
        async with live_server(tmp_path, telemetry=telemetry) as live:
            entries = registry_entries(live.mcp, telemetry)
            # The fixture registry has entries of every kind, some of them admin-only.
            assert {e.kind for e in entries} == {"tool", "resource", "template", "prompt"}
            assert {e.key for e in entries} >= {
                "admin_only",
                RECENT_URI,
                "fixture://echo/{text}",
                "get_trace",
                "coremetry://trace/{trace_id}",
                "triage_brief",
            }
            assert any(e.min_role == "admin" for e in entries)
            calls: list[Call] = [(method, {}) for method, _key, _field in LISTS.values()]
            calls += [(entry.method, entry.params) for entry in entries]
            problems: list[str] = []
            replies_by_role: dict[str, list[JsonObject]] = {}

            async def run_role(role: str) -> None:
                async with open_runner(transport, live, live.tokens[role]) as run:
                    replies_by_role[role] = await run(calls)

            async with trio.open_nursery() as nursery:
                for role in ROLE_ORDER:
                    nursery.start_soon(run_role, role)
            for role in ROLE_ORDER:
                problems += check_role_matrix(live, role, entries, calls, replies_by_role[role])
    assert problems == []


# ---- 2. the credential attack set --------------------------------------------------------------


def b64url_json(value: object) -> str:
    return jwt.utils.base64url_encode(json.dumps(value).encode()).decode()


def claims(**changes: object) -> JsonObject:
    """Claims the server would accept (for user ``alice``, role admin) with ``changes``."""
    now = int(time.time())
    payload: JsonObject = {
        "sub": "alice",
        "role": "admin",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "iss": "coremetry",
        "aud": "coremetry",
        "jti": secrets.token_urlsafe(8),
    }
    payload.update(changes)
    return payload


def hs256(payload: JsonObject, key: bytes) -> str:
    return jwt.encode(payload, key, algorithm="HS256")


@dataclass(frozen=True)
class Attempt:
    """One way of presenting (or not) a credential."""

    label: str
    headers: Mapping[str, str]
    query: str = ""
    accepted: bool = False
    token_sent: bool = True
    expired: bool = False


async def raw_upgrade(base: str, path: str, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
    """A WebSocket upgrade request by hand: the status, ``WWW-Authenticate`` (or "") and body.

    Written by hand, not with trio-websocket, so a refused handshake leaves no stream open and
    an accepted one (101) is simply dropped.
    """
    status, fields_in, body = await upgrade_by_hand(base.removeprefix("http://"), path, headers)
    return status, fields_in.get("www-authenticate", ""), body


async def attempt_everywhere(client: httpx.AsyncClient, base: str, attempt: Attempt) -> list[str]:
    """Present ``attempt`` to every authenticated HTTP entry point; the unexpected answers."""
    problems: list[str] = []
    expected_challenge = INVALID_TOKEN_CHALLENGE if attempt.token_sent else CHALLENGE
    if attempt.expired:
        expected_challenge = EXPIRED_CHALLENGE
    expected_challenge += discovery(base)
    query = f"?{attempt.query}" if attempt.query else ""
    headers = {"content-type": "application/json", "accept": BOTH, **attempt.headers}
    call = request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})

    def check(
        where: str, status: int, challenge: str | None, body: bytes, ok_status: int = 200
    ) -> None:
        if attempt.accepted:
            if status != ok_status:
                problems.append(f"{attempt.label} @ {where}: {status}, expected {ok_status}")
            return
        if status != 401:
            problems.append(f"{attempt.label} @ {where}: {status} {body[:200]!r}, expected 401")
            return
        if challenge != expected_challenge:
            problems.append(
                f"{attempt.label} @ {where}: WWW-Authenticate {challenge!r}, "
                f"expected {expected_challenge!r}"
            )
        if b'"result"' in body or b"admin secret" in body:
            problems.append(f"{attempt.label} @ {where}: MCP processing happened: {body!r}")
        try:
            json.loads(body)
        except ValueError:
            problems.append(f"{attempt.label} @ {where}: the 401 body is not JSON: {body!r}")
        # Every 401 says how to authenticate, and an expired credential that it expired.
        if b"Authorization: Bearer" not in body or b"/api/auth/login" not in body:
            problems.append(f"{attempt.label} @ {where}: the 401 says not how: {body!r}")
        if (b"expired" in body) != attempt.expired:
            problems.append(f"{attempt.label} @ {where}: expiry said wrongly: {body!r}")

    for revision in (V2025_11_25, V2026_07_28):
        body_params: JsonObject = dict(as_object(call["params"]))
        extra = {"mcp-protocol-version": revision}
        if revision == V2026_07_28:
            body_params["_meta"] = stateless_meta()
            extra.update({"mcp-method": "tools/call", "mcp-name": "echo"})
        response = await client.post(
            MCP_PATH + query,
            content=json.dumps(request(1, "tools/call", body_params)),
            headers={**headers, **extra},
        )
        check(
            f"POST {MCP_PATH} {revision}",
            response.status_code,
            response.headers.get("www-authenticate"),
            response.content,
        )
        if attempt.accepted and response.status_code == 200:
            reply = as_object(response.json())
            check_emitted(reply, revision, "tools/call")
            if text_of(result_of(reply)) != "x":
                problems.append(f"{attempt.label}: echo answered {reply}")
    rest = await client.post(
        REST_ECHO_PATH + query, json={"text": "x"}, headers=dict(attempt.headers)
    )
    check(
        f"POST {REST_ECHO_PATH}",
        rest.status_code,
        rest.headers.get("www-authenticate"),
        rest.content,
    )
    async with client.stream(
        "GET", SSE_PATH + query, headers={"accept": "text/event-stream", **attempt.headers}
    ) as sse:
        # An accepted stream is left at once (its headers are the answer); a refusal is read.
        sse_body = await sse.aread() if sse.status_code != 200 else b""
        check(f"GET {SSE_PATH}", sse.status_code, sse.headers.get("www-authenticate"), sse_body)
    status, challenge, ws_body = await raw_upgrade(base, WS_PATH + query, attempt.headers)
    check(f"upgrade {WS_PATH}", status, challenge, ws_body, ok_status=101)
    return problems


async def test_401_403_say_why_with_a_reason_phrase(tmp_path: Path) -> None:
    """Issue 17: a 401 says how to authenticate (and that a credential expired), and the status
    lines of 401 and 403 carry their reason phrase (the OTel exporters log ``reason``)."""
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            secret = (live.data_dir / "jwt.secret").read_bytes()
            past = int(time.time()) - 7200
            expired = hs256(claims(iat=past, nbf=past, exp=past + 60), secret)
            call = request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
            headers = {"content-type": "application/json", "accept": BOTH}
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                anonymous = await client.post(MCP_PATH, json=call, headers=headers)
                stale = await client.post(
                    MCP_PATH, json=call, headers={**headers, **bearer(expired)}
                )
                otlp = await client.post(
                    "/v1/traces", content=b"{}", headers={"content-type": "application/json"}
                )
                otlp_stale = await client.post(
                    "/v1/traces",
                    content=b"{}",
                    headers={"content-type": "application/json", **bearer(expired)},
                )
                low = await client.post(
                    "/v1/traces",
                    content=b"{}",
                    headers={
                        "content-type": "application/json",
                        **bearer(live.tokens["viewer"]),
                    },
                )
    for refused in (anonymous, stale, otlp, otlp_stale):
        assert (refused.status_code, refused.reason_phrase) == (401, "Unauthorized")
        assert "Authorization: Bearer" in refused.text
        assert "POST /api/auth/login" in refused.text
    anonymous_error = as_object(anonymous.json()["error"])
    check_emitted(anonymous.json(), LATEST_HANDSHAKE, None)
    assert "expired" not in str(anonymous_error["message"])
    assert str(as_object(stale.json()["error"])["message"]).startswith(
        "Unauthorized: the credential has expired"
    )
    assert stale.headers["www-authenticate"].startswith(EXPIRED_CHALLENGE + ", resource_metadata=")
    assert "expired" in otlp_stale.text
    assert "expired" not in otlp.text
    assert (low.status_code, low.reason_phrase) == (403, "Forbidden")


async def test_credential_attacks_get_401_and_valid_credentials_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coremetry")
    with trio.fail_after(LIMIT_S):
        async with live_server(
            tmp_path, users=[("alice", "viewer")], extra_tokens=[("doomed", "viewer")]
        ) as live:
            secret = (live.data_dir / "jwt.secret").read_bytes()
            short, short_info = await trio.to_thread.run_sync(
                live.security.store.create_token, "short-lived", "viewer", 3
            )
            assert short_info.expires_at is not None
            session_jwt, cookie = await login(live.base, "alice", PASSWORD)
            admin = live.tokens["admin"]
            viewer = live.tokens["viewer"]
            header, payload, signature = session_jwt.split(".")
            escalated = b64url_json(
                {**jwt.decode(session_jwt, options={"verify_signature": False}), "role": "admin"}
            )
            unsigned = f"{b64url_json({'alg': 'none', 'typ': 'JWT'})}.{b64url_json(claims())}"
            hs384 = jwt.encode(claims(), secret + secret, algorithm="HS384")
            attempts = [
                # Controls: what must be accepted (forged with the real secret proves the forging).
                Attempt("service token", bearer(admin), accepted=True),
                Attempt("login JWT as Bearer", bearer(session_jwt), accepted=True),
                Attempt("login JWT as cookie", {"cookie": cookie}, accepted=True),
                Attempt(
                    "lower-case scheme, extra spaces",
                    {"authorization": f"bEaReR   {viewer}"},
                    accepted=True,
                ),
                Attempt(
                    "JWT signed with the real secret",
                    # With alice's session generation: a JWT without it is from before an
                    # account change (test_accounts_e2e.py).
                    bearer(
                        hs256(claims(gen=live.security.store.session_generation("alice")), secret)
                    ),
                    accepted=True,
                ),
                # Refused.
                Attempt("JWT of an older session generation", bearer(hs256(claims(), secret))),
                Attempt(
                    "JWT of a user who does not exist",
                    bearer(hs256(claims(sub="mallory"), secret)),
                ),
                Attempt("no credentials", {}, token_sent=False),
                Attempt("Basic", {"authorization": "Basic YWxpY2U6cGFzc3dvcmQ="}, token_sent=False),
                Attempt(
                    "Basic with the token", {"authorization": f"Basic {admin}"}, token_sent=False
                ),
                Attempt("bare service token", {"authorization": admin}, token_sent=False),
                Attempt("bare JWT", {"authorization": session_jwt}, token_sent=False),
                Attempt("?token= service token", {}, query=f"token={admin}", token_sent=False),
                Attempt(
                    "?access_token= service token",
                    {},
                    query=f"access_token={admin}",
                    token_sent=False,
                ),
                Attempt(
                    "?access_token= JWT", {}, query=f"access_token={session_jwt}", token_sent=False
                ),
                Attempt("alg none, empty signature", bearer(f"{unsigned}.")),
                Attempt("alg none, with a signature", bearer(f"{unsigned}.{signature}")),
                Attempt("HS384 with the real secret", bearer(hs384)),
                Attempt(
                    "HS256 with another secret", bearer(hs256(claims(), secrets.token_bytes(32)))
                ),
                Attempt(
                    "tampered payload (role admin)", bearer(f"{header}.{escalated}.{signature}")
                ),
                Attempt("tampered signature", bearer(f"{header}.{payload}.{signature[::-1]}")),
                Attempt(
                    "expired",
                    expired=True,
                    headers=bearer(
                        hs256(
                            claims(
                                iat=int(time.time()) - 7200,
                                nbf=int(time.time()) - 7200,
                                exp=int(time.time()) - 3600,
                            ),
                            secret,
                        )
                    ),
                ),
                Attempt(
                    "not yet valid (nbf)",
                    bearer(hs256(claims(nbf=int(time.time()) + 3600), secret)),
                ),
                Attempt("wrong iss", bearer(hs256(claims(iss="someone-else"), secret))),
                Attempt("wrong aud", bearer(hs256(claims(aud="someone-else"), secret))),
                Attempt("unknown cmk_ token", bearer("cmk_" + secrets.token_urlsafe(32))),
                Attempt("service token in the cookie", {"cookie": f"coremetry_session={admin}"}),
                Attempt("two Bearer tokens", {"authorization": f"Bearer {admin} {viewer}"}),
                Attempt("Bearer and nothing", {"authorization": "Bearer"}),
            ]
            problems: list[str] = []
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                # Used (and so cached by the authenticator) while valid; refused once expired.
                valid = Attempt("expiring service token, still valid", bearer(short), accepted=True)
                problems += await attempt_everywhere(client, live.base, valid)
                for attempt in attempts:
                    problems += await attempt_everywhere(client, live.base, attempt)

                # Revocation while the server runs takes effect at once (no cache window).
                doomed = Attempt(
                    "service token before revocation",
                    bearer(live.extra_tokens["doomed"]),
                    accepted=True,
                )
                problems += await attempt_everywhere(client, live.base, doomed)
                await trio.to_thread.run_sync(live.security.store.revoke_token, "doomed")
                revoked = Attempt("revoked service token", bearer(live.extra_tokens["doomed"]))
                problems += await attempt_everywhere(client, live.base, revoked)

                # A valid identity with too low a role: -32001 (HTTP 200), never 401 or 403.
                for era in ("handshake", "stateless"):
                    async with http_mcp(live.base, bearer(viewer), era) as low:
                        response = await low.post(
                            7, "tools/call", {"name": "admin_only", "arguments": {}}
                        )
                        assert response.status_code == 200, (
                            era,
                            response.status_code,
                            response.text,
                        )
                        reply = [m for m in low.seen if m.get("id") == 7]
                        assert len(reply) == 1
                        error = error_of(reply[0])
                        assert error["code"] == FORBIDDEN
                        assert "requires role admin" in str(error["message"])
                rest = await client.post("/api/tools/admin_only", json={}, headers=bearer(viewer))
                assert rest.status_code == 403, rest.text

                # The session cookie is no passport for a foreign page (cross-site request
                # forgery, cross-site WebSocket hijacking): a foreign Origin is refused first.
                evil = {"cookie": cookie, "origin": "https://evil.example"}
                forged = await client.post(
                    MCP_PATH,
                    json=request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}}),
                    headers={"accept": BOTH, **evil},
                )
                assert forged.status_code == 403, forged.text
                assert (await raw_upgrade(live.base, WS_PATH, evil))[0] == 403

                # The expiring token, past its expiry (a real wait of at most three seconds).
                await trio.sleep(max(0.0, short_info.expires_at - time.time()) + 0.1)
                expired = Attempt("expired service token", bearer(short), expired=True)
                problems += await attempt_everywhere(client, live.base, expired)
    assert problems == []
    sent = [
        admin,
        viewer,
        short,
        session_jwt,
        live.extra_tokens["doomed"],
        PASSWORD,
        unsigned,
        hs384,
    ]
    for secret_text in sent:
        assert secret_text not in caplog.text, "a credential reached the log"


# ---- 3. session binding ------------------------------------------------------------------------


async def test_another_identity_cannot_use_an_sse_session(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(
            tmp_path, users=[("alice", "viewer")], extra_tokens=[("viewer-2", "viewer")]
        ) as live:
            session_jwt, _cookie = await login(live.base, "alice", PASSWORD)
            async with (
                sse_session(live.base, bearer(live.tokens["viewer"])) as victim,
                httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as attacker,
            ):
                attackers: list[tuple[str, dict[str, str], int]] = [
                    ("same role, other token", bearer(live.extra_tokens["viewer-2"]), 404),
                    ("admin token", bearer(live.tokens["admin"]), 404),
                    ("a user's JWT", bearer(session_jwt), 404),
                    ("no credentials", {}, 401),
                    ("a bad token", bearer("cmk_" + secrets.token_urlsafe(32)), 401),
                ]
                bogus = victim.endpoint.split("=", 1)[0] + "=" + secrets.token_urlsafe(24)
                for number, (label, headers, status) in enumerate(attackers, start=100):
                    injected = request(
                        number,
                        "tools/call",
                        {"name": "echo", "arguments": {"text": f"INJECTED-{number}"}},
                    )
                    response = await attacker.post(victim.endpoint, json=injected, headers=headers)
                    assert response.status_code == status, (
                        label,
                        response.status_code,
                        response.text,
                    )
                    if status == 404:
                        # The same answer as for a session that does not exist: nothing revealed.
                        unknown = await attacker.post(bogus, json=injected, headers=headers)
                        assert (unknown.status_code, unknown.content) == (404, response.content)
                    else:
                        assert response.headers["www-authenticate"].startswith(CHALLENGE)
                # Nothing was answered on the victim's stream: the next message is the answer to
                # the victim's own request, sent after every attempt.
                reply = await victim.call(
                    "victim-1", "tools/call", {"name": "echo", "arguments": {"text": "mine"}}
                )
                assert text_of(result_of(reply)) == "mine"
                assert [m.get("id") for m in victim.seen] == [0, "victim-1"]
                assert not any("INJECTED" in json.dumps(m) for m in victim.seen)
                # The victim's own identity still works on its session.
                info = await victim.call(
                    "victim-2", "resources/read", {"uri": "coremetry://server"}
                )
                caller = as_object(json.loads(text_of(result_of(info)))["caller"])
                assert caller["subject"] == live.sub("viewer")


async def test_websockets_are_isolated_per_identity(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            async with (
                ws_session(live.ws_url, bearer(live.tokens["viewer"])) as victim,
                ws_session(live.ws_url, bearer(live.tokens["admin"])) as attacker,
            ):
                # Same request ids on both sockets: each answer goes to its own socket only.
                for number in range(1, 4):
                    await attacker.send(
                        request(
                            number,
                            "tools/call",
                            {"name": "echo", "arguments": {"text": f"INJECTED-{number}"}},
                        )
                    )
                    await victim.send(
                        request(
                            number,
                            "tools/call",
                            {"name": "echo", "arguments": {"text": f"victim-{number}"}},
                        )
                    )
                    assert text_of(result_of(await attacker.reply(number))) == f"INJECTED-{number}"
                    assert text_of(result_of(await victim.reply(number))) == f"victim-{number}"
                # The attacker's admin role does not leak into the victim's socket, nor the reverse.
                denied = await victim.call(
                    10, "tools/call", {"name": "admin_only", "arguments": {}}
                )
                assert error_of(denied)["code"] == FORBIDDEN
                allowed = await attacker.call(
                    10, "tools/call", {"name": "admin_only", "arguments": {}}
                )
                assert text_of(result_of(allowed)) == "admin secret"
                for session, role in ((victim, "viewer"), (attacker, "admin")):
                    info = await session.call(11, "resources/read", {"uri": "coremetry://server"})
                    caller = as_object(json.loads(text_of(result_of(info)))["caller"])
                    assert caller == {"subject": live.sub(role), "role": role}
                # Each socket saw exactly its own answers, in order, nothing else.
                victim_texts = [json.dumps(m) for m in victim.seen]
                attacker_texts = [json.dumps(m) for m in attacker.seen]
                assert not any("INJECTED" in t for t in victim_texts)
                assert not any("victim-" in t for t in attacker_texts)
                assert [m.get("id") for m in victim.seen] == [0, 1, 2, 3, 10, 11]
                assert [m.get("id") for m in attacker.seen] == [0, 1, 2, 3, 10, 11]
            # Without credentials, or with a query-string token, no socket at all.
            assert (await raw_upgrade(live.base, WS_PATH, {}))[:2] == (
                401,
                CHALLENGE + discovery(live.base),
            )
            query = f"{WS_PATH}?access_token={live.tokens['admin']}"
            assert (await raw_upgrade(live.base, query, {}))[:2] == (
                401,
                CHALLENGE + discovery(live.base),
            )


async def test_revocation_reaches_an_open_sse_session(tmp_path: Path) -> None:
    """Every POST to a legacy SSE session is authenticated again: revocation is immediate."""
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, extra_tokens=[("doomed", "viewer")]) as live,
            sse_session(live.base, bearer(live.extra_tokens["doomed"])) as sse,
        ):
            echo: JsonObject = {"name": "echo", "arguments": {"text": "before"}}
            assert text_of(result_of(await sse.call(1, "tools/call", echo))) == "before"
            await trio.to_thread.run_sync(live.security.store.revoke_token, "doomed")
            after = await sse.client.post(
                sse.endpoint,
                json=request(2, "tools/call", {"name": "echo", "arguments": {"text": "after"}}),
                headers=dict(sse.headers),
            )
            assert after.status_code == 401, after.text
            assert after.headers["www-authenticate"] == INVALID_TOKEN_CHALLENGE + discovery(
                live.base
            )
            assert [m.get("id") for m in sse.seen] == [0, 1]


async def test_revocation_reaches_an_open_websocket(tmp_path: Path) -> None:
    """Issue 4: a service token is "revocable with immediate effect".

    A socket authenticated with a token that is then revoked must not go on serving calls as
    that identity: the call after the revocation must be refused (an error answer, or the socket
    closed), never answered with a result.
    """
    echo: JsonObject = {"name": "echo", "arguments": {"text": "before"}}
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, extra_tokens=[("doomed", "admin")]) as live,
            ws_session(live.ws_url, bearer(live.extra_tokens["doomed"])) as ws,
        ):
            assert text_of(result_of(await ws.call(1, "tools/call", echo))) == "before"
            await trio.to_thread.run_sync(live.security.store.revoke_token, "doomed")
            # New handshakes are refused at once ...
            status, challenge, _body = await raw_upgrade(
                live.base, WS_PATH, bearer(live.extra_tokens["doomed"])
            )
            assert (status, challenge) == (401, INVALID_TOKEN_CHALLENGE + discovery(live.base))
            # ... and the socket opened before the revocation serves nothing more.
            after: JsonObject | None = None
            with suppress(ConnectionClosed):
                after = await ws.call(2, "tools/call", {"name": "admin_only", "arguments": {}})
            assert after is None or "result" not in after, (
                f"a revoked token's open WebSocket still served a call: {after}"
            )


# ---- 4. the rate limit -------------------------------------------------------------------------

BURST: Final = 5


def retry_after(reply: Mapping[str, object]) -> int:
    error = error_of(reply)
    assert error["code"] == RATE_LIMITED, reply
    value = as_object(error["data"])["retry_after_ms"]
    assert isinstance(value, int)
    return value


async def test_rate_limit_per_identity(tmp_path: Path) -> None:
    echo: JsonObject = {"name": "echo", "arguments": {"text": "x"}}
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path, rate_limit={"per_second": 1.0, "burst": BURST}) as live:
            async with (
                http_mcp(live.base, bearer(live.tokens["viewer"]), "handshake") as first,
                http_mcp(live.base, bearer(live.tokens["editor"]), "stateless") as second,
            ):
                burst = [await first.call(i, "tools/call", echo) for i in range(BURST + 5)]
                assert all("result" in reply for reply in burst[:BURST]), burst
                waits = [retry_after(reply) for reply in burst[BURST:]]
                assert all(0 < wait <= 1000 for wait in waits), waits
                # Another identity in the same window: its own full budget.
                others = [await second.call(i, "tools/call", echo) for i in range(BURST)]
                assert [text_of(result_of(reply)) for reply in others] == ["x"] * BURST
                # Lists are not rate limited.
                assert "result" in await first.call("list", "tools/list", {})
                # After the advertised wait, calls pass again.
                await trio.sleep(waits[-1] / 1000)
                again = await first.call("again", "tools/call", echo)
                assert text_of(result_of(again)) == "x"

            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                rest = [
                    await client.post(
                        REST_ECHO_PATH, json={"text": "x"}, headers=bearer(live.tokens["admin"])
                    )
                    for _ in range(BURST + 5)
                ]
                assert [r.status_code for r in rest] == [200] * BURST + [429] * 5, [
                    r.text for r in rest
                ]
                for response in rest[BURST:]:
                    retry_s = response.headers["retry-after"]
                    assert retry_s.isdigit(), response.headers
                    assert int(retry_s) >= 1, response.headers
                    assert as_object(response.json())["code"] == RATE_LIMITED
                # REST and MCP share the identity's budget (one gate).
                async with http_mcp(live.base, bearer(live.tokens["admin"]), "handshake") as admin:
                    assert retry_after(await admin.call(1, "tools/call", echo)) > 0


# ---- 5. the audit log --------------------------------------------------------------------------


@dataclass
class Expected:
    """The audit records the test expects, built as it makes each gated call."""

    rows: list[tuple[str, str, str, str, str, str, str]] = field(default_factory=list)

    def add(
        self,
        sub: str,
        token_name: str,
        kind: str,
        transport: str,
        call_kind: str,
        name: str,
        outcome: str,
    ) -> None:
        self.rows.append((sub, token_name, kind, transport, call_kind, name, outcome))


def row_of(entry: AuditEntry) -> tuple[str, str, str, str, str, str, str]:
    return (
        entry.sub,
        entry.token_name,
        entry.kind,
        entry.transport,
        entry.call_kind,
        entry.name,
        entry.outcome,
    )


async def test_audit_log_after_a_mixed_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coremetry")
    argument_marker = "ARGUMENT-" + secrets.token_hex(8)
    expected = Expected()
    with trio.fail_after(LIMIT_S):
        async with live_server(
            tmp_path,
            rate_limit={"per_second": 0.001, "burst": 20},
            users=[("alice", "editor")],
            extra_tokens=[("burst", "viewer")],
        ) as live:
            session_jwt, cookie = await login(live.base, "alice", PASSWORD)
            # A failed login and a refused token leave no audit record (and no secret in logs).
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                wrong = await client.post(
                    LOGIN_PATH, json={"username": "alice", "password": PASSWORD + "!"}
                )
                assert wrong.status_code == 401
                refused = await client.post(
                    MCP_PATH,
                    json=request(1, "ping", {}),
                    headers=bearer(live.tokens["admin"] + "x"),
                )
                assert refused.status_code == 401
            viewer_sub, viewer_name = live.sub("viewer"), "e2e-viewer"
            svc = "service_token"

            # Streamable HTTP, handshake era, as the viewer token: every outcome class.
            async with http_mcp(live.base, bearer(live.tokens["viewer"]), "handshake") as http:
                assert (
                    text_of(
                        result_of(
                            await http.call(
                                1,
                                "tools/call",
                                {"name": "echo", "arguments": {"text": argument_marker}},
                            )
                        )
                    )
                    == argument_marker
                )
                expected.add(viewer_sub, viewer_name, svc, "http", "tool", "echo", "ok")
                for number, kind in enumerate(
                    ("timeout", "backend_unavailable", "bad_args", "not_found", "internal"), start=2
                ):
                    reply = await http.call(
                        number, "tools/call", {"name": "fail", "arguments": {"kind": kind}}
                    )
                    assert result_of(reply)["isError"] is True
                    expected.add(viewer_sub, viewer_name, svc, "http", "tool", "fail", kind)
                assert (
                    error_of(
                        await http.call(10, "tools/call", {"name": "admin_only", "arguments": {}})
                    )["code"]
                    == FORBIDDEN
                )
                expected.add(viewer_sub, viewer_name, svc, "http", "tool", "admin_only", "denied")
                assert (
                    error_of(
                        await http.call(11, "tools/call", {"name": "no_such_tool", "arguments": {}})
                    )["code"]
                    == -32602
                )
                expected.add(
                    viewer_sub, viewer_name, svc, "http", "tool", "no_such_tool", "not_found"
                )
                assert "result" in await http.call(12, "resources/read", {"uri": "fixture://info"})
                expected.add(
                    viewer_sub, viewer_name, svc, "http", "resource", "fixture://info", "ok"
                )
                assert "result" in await http.call(
                    13, "resources/read", {"uri": f"fixture://echo/{argument_marker}"}
                )
                expected.add(
                    viewer_sub, viewer_name, svc, "http", "resource", "fixture://echo/{text}", "ok"
                )
                assert (
                    error_of(await http.call(14, "resources/read", {"uri": "fixture://nope"}))[
                        "code"
                    ]
                    == -32002
                )
                expected.add(
                    viewer_sub, viewer_name, svc, "http", "resource", "fixture://nope", "not_found"
                )
                assert (
                    error_of(await http.call(15, "resources/read", {"uri": RECENT_URI}))["code"]
                    == FORBIDDEN
                )
                expected.add(viewer_sub, viewer_name, svc, "http", "resource", RECENT_URI, "denied")
                assert "result" in await http.call(
                    16, "prompts/get", {"name": "greet", "arguments": {"name": argument_marker}}
                )
                expected.add(viewer_sub, viewer_name, svc, "http", "prompt", "greet", "ok")
                # Ungated methods leave no record.
                for number, method in enumerate(
                    ("tools/list", "resources/list", "prompts/list", "ping"), start=20
                ):
                    assert "result" in await http.call(number, method, {})

            # Rate limited: burst 20, virtually no refill.
            burst_sub = "token:burst"
            async with http_mcp(
                live.base, bearer(live.extra_tokens["burst"]), "stateless"
            ) as limited:
                for number in range(22):
                    reply = await limited.call(
                        number, "tools/call", {"name": "echo", "arguments": {"text": "b"}}
                    )
                    outcome = "ok" if number < 20 else "rate_limited"
                    if outcome == "rate_limited":
                        assert retry_after(reply) > 0
                    expected.add(burst_sub, "burst", svc, "http", "tool", "echo", outcome)

            # A user's JWT (header, then cookie) over Streamable HTTP 2026-07-28.
            for headers in (bearer(session_jwt), {"cookie": cookie}):
                async with http_mcp(live.base, headers, "stateless") as user:
                    assert "result" in await user.call(
                        1, "tools/call", {"name": "echo", "arguments": {"text": "u"}}
                    )
                    expected.add("alice", "", "jwt", "http", "tool", "echo", "ok")

            # Legacy SSE as the editor token.
            async with sse_session(live.base, bearer(live.tokens["editor"])) as sse:
                assert "result" in await sse.call(
                    1, "prompts/get", {"name": "greet", "arguments": {"name": "ada"}}
                )
                expected.add(live.sub("editor"), "e2e-editor", svc, "sse", "prompt", "greet", "ok")
                assert (
                    error_of(await sse.call(2, "prompts/get", {"name": "greet", "arguments": {}}))[
                        "code"
                    ]
                    == -32602
                )
                expected.add(
                    live.sub("editor"), "e2e-editor", svc, "sse", "prompt", "greet", "bad_args"
                )

            # WebSocket as the admin token, with a cancelled call.
            admin_sub = live.sub("admin")
            async with ws_session(live.ws_url, bearer(live.tokens["admin"])) as ws:
                assert (
                    text_of(
                        result_of(
                            await ws.call(1, "tools/call", {"name": "admin_only", "arguments": {}})
                        )
                    )
                    == "admin secret"
                )
                expected.add(admin_sub, "e2e-admin", svc, "ws", "tool", "admin_only", "ok")
                assert "result" in await ws.call(2, "resources/read", {"uri": RECENT_URI})
                expected.add(admin_sub, "e2e-admin", svc, "ws", "resource", RECENT_URI, "ok")
                await ws.send(
                    request(
                        3,
                        "tools/call",
                        {
                            "name": "sleep_ms",
                            "arguments": {"ms": 1500},
                            "_meta": {"progressToken": "p"},
                        },
                    )
                )
                while (await ws.next_message()).get("method") != "notifications/progress":
                    pass  # the call is running
                await ws.send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": 3, "reason": "test"},
                    }
                )
                assert "result" in await ws.call(4, "ping", {})
                expected.add(admin_sub, "e2e-admin", svc, "ws", "tool", "sleep_ms", "cancelled")

            # REST, as the admin token.
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                rest = await client.post(
                    REST_ECHO_PATH, json={"text": "r"}, headers=bearer(live.tokens["admin"])
                )
                assert rest.status_code == 200
                expected.add(admin_sub, "e2e-admin", svc, "rest", "tool", "echo", "ok")

            # stdio, in its own process on the same data dir, as the viewer token.
            stdio = await run_stdio(
                live,
                live.tokens["viewer"],
                [
                    ("tools/call", {"name": "echo", "arguments": {"text": argument_marker}}),
                    ("tools/call", {"name": "admin_only", "arguments": {}}),
                ],
            )
            assert "result" in stdio.replies[0]
            assert error_of(stdio.replies[1])["code"] == FORBIDDEN
            expected.add(viewer_sub, viewer_name, svc, "stdio", "tool", "echo", "ok")
            expected.add(viewer_sub, viewer_name, svc, "stdio", "tool", "admin_only", "denied")
            live.stop.set()
        # serve has returned: the audit writer flushed and closed.
        entries = await trio.to_thread.run_sync(live.security.audit.tail, 1000)

    assert Counter(row_of(entry) for entry in entries) == Counter(expected.rows)
    assert len(entries) == len(expected.rows)
    roles = {
        "token:e2e-viewer": "viewer",
        "token:e2e-editor": "editor",
        "token:e2e-admin": "admin",
        "token:burst": "viewer",
        "alice": "editor",
    }
    for entry in entries:
        assert entry.source == "mcp"
        assert entry.role == roles[entry.sub], entry
        assert re.fullmatch(r"[0-9a-f]{64}", entry.arguments_sha256), entry
        assert entry.duration_ms >= 0
        assert entry.at_unix_nano > 0

    secrets_sent = [*live.tokens.values(), *live.extra_tokens.values(), session_jwt, PASSWORD]
    db_files = sorted(live.data_dir.glob("coremetry.db*"))
    assert db_files
    for path in db_files:
        data = path.read_bytes()
        for secret_text in [*secrets_sent, argument_marker]:
            assert secret_text.encode() not in data, f"a secret or an argument is in {path.name}"
    logged = caplog.text + "\n".join(record.getMessage() for record in caplog.records)
    assert any(record.name.startswith("coremetry") for record in caplog.records)
    for secret_text in secrets_sent:
        assert secret_text not in logged, "a secret reached the server's log"
        assert secret_text not in stdio.stderr, "a secret reached the stdio server's log"


async def test_rest_and_mcp_allow_and_refuse_the_same_calls_for_every_tool_and_role(
    tmp_path: Path,
) -> None:
    """REST parity: ``POST /api/tools/<name>`` is refused exactly when ``tools/call`` is."""
    with trio.fail_after(60):
        async with live_server(tmp_path) as live, httpx.AsyncClient(timeout=30) as client:
            for role in ROLE_ORDER:
                token = live.tokens[role]
                for tool in live.mcp.tools():
                    arguments = dict(TOOL_ARGUMENTS[tool.name])
                    rest = await client.post(
                        f"{live.base}/api/tools/{tool.name}", json=arguments, headers=bearer(token)
                    )
                    mcp = await client.post(
                        f"{live.base}/api/mcp",
                        json=request(1, "tools/call", {"name": tool.name, "arguments": arguments}),
                        headers={
                            **bearer(token),
                            "accept": "application/json",
                            "mcp-protocol-version": "2025-11-25",
                        },
                    )
                    answer = as_object(mcp.json())
                    mcp_refused = "error" in answer
                    rest_refused = rest.status_code == 403
                    assert mcp_refused == rest_refused, (role, tool.name, rest.status_code, answer)
                    assert mcp_refused == (not may_use(role, tool.min_role))
                    if mcp_refused:
                        assert error_of(answer)["code"] == -32001
