"""End-to-end tests of Streamable HTTP with the official MCP Python SDK client (``mcp`` 2.x).

The real server runs in the test's nursery (``coremetry.server.serve``); the SDK's high-level
``Client`` connects to ``/api/mcp`` in each of its modes (``shared/reference/conformance.md``
§5): ``"auto"`` (probes ``server/discover``: our dual-era server is served statelessly),
``"legacy"`` (``initialize`` handshake) and ``"2026-07-28"`` (stateless, no probe).

Most tests pass the SDK an ``httpx2`` client whose transport taps every HTTP exchange, so every
JSON-RPC message the server emitted — JSON bodies and each SSE event — is validated with
:func:`conftest.check_emitted` for the revision in use, byte for byte as sent (the SDK itself
rewrites some ids before its session sees them). One test per mode uses the plain URL form.

Every test is bounded by ``trio.fail_after`` (a hang guard); nothing asserts on timings.
"""

import itertools
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final, cast

import httpx2
import msgspec
import pytest
import trio
from _sdk_support import Exchange, TapTransport, only_text, revision_of
from _wire_support import as_object
from conftest import check_emitted
from mcp import Client, MCPError, types
from mcp.client.streamable_http import streamable_http_client

from coremetry import __version__
from coremetry.config import load_config
from coremetry.mcp import CallContext, Server, Tool
from coremetry.mcp.versions import (
    LATEST_HANDSHAKE,
)
from coremetry.server import build_mcp_server, serve

JsonObject = dict[str, object]

pytestmark = [
    # The SDK's httpx2 stack leaves async generators to the garbage collector when a stream is
    # abandoned (the project's filter covers httpx/httpcore, the 1.x names).
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

LIMIT_S: Final = 30.0
"""Hang guard of every test: a hang fails, a slow machine does not."""

STATELESS: Final = "2026-07-28"
MODES: Final = ("auto", "legacy", STATELESS)
NEGOTIATED: Final[Mapping[str, str]] = {
    "auto": STATELESS,
    "legacy": LATEST_HANDSHAKE,
    STATELESS: STATELESS,
}
FIXTURE_TOOLS: Final = {"echo", "sleep_ms", "big_output", "fail", "log_levels"}


async def start_server(nursery: trio.Nursery, mcp: Server | None = None) -> str:
    """Start ``serve`` in ``nursery`` on a free port; return the MCP endpoint URL."""
    config = load_config(environ={}, overrides={"http": {"port": 0}})
    server = mcp if mcp is not None else build_mcp_server(fixture=True)
    base: str = await nursery.start(
        partial(serve, config, server, announce=False, shutdown=trio.Event())
    )
    return base + "/api/mcp"


# ---- the wire tap --------------------------------------------------------------------------


@dataclass
class Connected:
    client: Client
    tap: TapTransport

    def posted_methods(self) -> list[str]:
        methods: list[str] = []
        for exchange in self.tap.exchanges:
            if exchange.method == "POST":
                methods.append(str(json.loads(exchange.request_body).get("method", "")))
        return methods


@asynccontextmanager
async def connect(
    url: str, mode: str, **options: object
) -> AsyncIterator[Connected]:  # options: Client keyword arguments
    tap = TapTransport()
    http = httpx2.AsyncClient(transport=tap, timeout=httpx2.Timeout(LIMIT_S))
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, **options) as client:  # type: ignore[arg-type]  # typed keywords forwarded as-is
            yield Connected(client, tap)
    validate_wire(tap.exchanges)


def parse_sse(body: bytes) -> list[JsonObject]:
    """The JSON-RPC messages of an event stream (comments skipped), each a single data line."""
    messages: list[JsonObject] = []
    text = body.decode("utf-8")
    for block in text.split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if data:
            assert len(data) == 1, block
            messages.append(as_object(json.loads(data[0])))
    assert text == "" or text.endswith("\n\n"), "the stream ends on an event boundary"
    return messages


def validate_wire(exchanges: list[Exchange]) -> None:
    """Validate every message the server sent, and the HTTP shape of every exchange."""
    for exchange in exchanges:
        assert exchange.status < 500, (exchange.status, bytes(exchange.body))
        assert "mcp-session-id" not in exchange.response_headers  # stateless: never minted
        content_type = exchange.response_headers.get("content-type", "")
        body = bytes(exchange.body)
        if exchange.method != "POST":
            assert exchange.status == 405, exchange  # the SDK's GET stream, refused at once
            assert "POST" in exchange.response_headers["allow"]
        if exchange.status == 202:
            assert body == b""
            continue
        if content_type.startswith("text/event-stream"):
            messages = parse_sse(body)
        elif body:
            assert content_type.startswith("application/json"), exchange
            messages = [as_object(json.loads(body))]
        else:
            messages = []
        if exchange.complete:  # every whole answer but a 202 carries JSON-RPC, all checked
            assert messages, exchange
        request: object = json.loads(exchange.request_body) if exchange.request_body else None
        revision = revision_of(exchange, request, messages)
        method = request.get("method") if isinstance(request, dict) else None
        for message in messages:
            answers = "result" in message and isinstance(method, str)
            check_emitted(message, revision, str(method) if answers else None)


# ---- the modes -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_plain_url_client_negotiates_and_calls(nursery: trio.Nursery, mode: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with Client(url, mode=mode) as client:
            assert client.protocol_version == NEGOTIATED[mode]
            listed = await client.list_tools()
            result = await client.call_tool("echo", {"text": "hi"})
    assert {t.name for t in listed.tools} >= FIXTURE_TOOLS
    assert result.is_error is False
    assert only_text(result.content) == "hi"


@pytest.mark.parametrize("mode", MODES)
async def test_negotiation_on_the_wire(nursery: trio.Nursery, mode: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with connect(url, mode) as conn:
            version = conn.client.protocol_version
            info = conn.client.server_info
    methods = conn.posted_methods()  # once the client closed: its last POSTs are done
    assert version == NEGOTIATED[mode]
    if mode == "auto":
        # Stateless via server/discover: no initialize was needed.
        assert methods[0] == "server/discover"
        assert "initialize" not in methods
        assert info is not None
        assert (info.name, info.version) == ("coremetry", __version__)
    elif mode == "legacy":
        assert methods[0] == "initialize"
        assert "notifications/initialized" in methods
        assert "server/discover" not in methods
        assert info is not None
        assert (info.name, info.version) == ("coremetry", __version__)
    else:
        assert "initialize" not in methods
        assert "server/discover" not in methods


@pytest.mark.parametrize("mode", MODES)
async def test_tools_resources_and_prompts(nursery: trio.Nursery, mode: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with connect(url, mode) as conn:
            client = conn.client
            tools = await client.list_tools()
            echoed = await client.call_tool("echo", {"text": "héllo 😀 \u2028 line"})
            templates = await client.list_resource_templates()
            resource = await client.read_resource("fixture://echo/h%C3%A9llo")
            static = await client.read_resource("fixture://info")
            prompt = await client.get_prompt("greet", {"name": "ada", "style": "pirate"})
    names = {t.name for t in tools.tools}
    assert names >= FIXTURE_TOOLS
    assert "admin_only" not in names  # hidden from the anonymous viewer
    assert only_text(echoed.content) == "héllo 😀 \u2028 line"
    assert "fixture://echo/{text}" in {t.uri_template for t in templates.resource_templates}
    (contents,) = resource.contents
    assert isinstance(contents, types.TextResourceContents)
    assert json.loads(contents.text) == {"text": "héllo"}
    (info,) = static.contents
    assert isinstance(info, types.TextResourceContents)
    assert json.loads(info.text)["fixture"] is True
    (message,) = prompt.messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "Say hello to ada in a pirate style."


@pytest.mark.parametrize("mode", MODES)
async def test_progress_callback(nursery: trio.Nursery, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with connect(url, mode) as conn:
            result = await conn.client.call_tool(
                "sleep_ms", {"ms": 50}, progress_callback=on_progress
            )
    sse_answers = [
        e
        for e in conn.tap.exchanges
        if e.response_headers.get("content-type", "").startswith("text/event-stream")
    ]
    assert only_text(result.content) == "slept 50 ms"
    assert seen, "progress reached the callback"
    values = [p for p, _, _ in seen]
    assert all(a < b for a, b in itertools.pairwise(values)), values
    assert {total for _, total, _ in seen} == {50}
    assert len(sse_answers) == 1  # the progress rode the call's own SSE answer


@pytest.mark.parametrize("mode", MODES)
async def test_errors_reach_the_sdk_in_their_shape(nursery: trio.Nursery, mode: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with connect(url, mode) as conn:
            failed = await conn.client.call_tool("fail", {"kind": "backend_unavailable"})
            bad = await conn.client.call_tool("echo", {"text": 123})
            with pytest.raises(MCPError) as unknown:
                await conn.client.call_tool("no_such_tool_zz", {})
            with pytest.raises(MCPError) as missing:
                await conn.client.get_prompt("greet", {})
            slow = await conn.client.call_tool(
                "sleep_ms",
                {"ms": 60_000},
                meta=cast(types.RequestParamsMeta, {"coremetry/timeout_ms": 50}),
            )
            after = await conn.client.call_tool("echo", {"text": "still here"})
    assert failed.is_error is True
    assert json.loads(only_text(failed.content))["error"] == "backend_unavailable"
    assert bad.is_error is True
    assert "text" in json.loads(only_text(bad.content))["detail"]
    assert unknown.value.code == -32602
    assert missing.value.code == -32602
    assert "name" in missing.value.message
    assert slow.is_error is True
    assert json.loads(only_text(slow.content))["error"] == "timeout"
    assert only_text(after.content) == "still here"


# ---- cancellation --------------------------------------------------------------------------


class NoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


async def test_cancelling_a_stateless_call_in_the_sdk_cancels_the_handler(
    nursery: trio.Nursery,
) -> None:
    """At 2026-07-28 the SDK cancels by closing the POST; the handler sees trio.Cancelled."""
    started, cancelled = trio.Event(), trio.Event()
    server = build_mcp_server(fixture=True)

    async def block(args: NoArgs, ctx: CallContext) -> str:
        try:
            started.set()
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    server.register_tool(Tool("block", "Block until cancelled.", NoArgs, block))
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, server)
        async with connect(url, STATELESS) as conn:
            async with trio.open_nursery() as inner:

                async def call() -> None:
                    await conn.client.call_tool("block", {})

                inner.start_soon(call)
                await started.wait()
                inner.cancel_scope.cancel()
            await cancelled.wait()
            after = await conn.client.call_tool("echo", {"text": "next"})
    assert only_text(after.content) == "next"
