"""End-to-end tests: ``coremetry stdio --fixture`` as a subprocess.

Most tests drive the process with the official MCP Python SDK (``mcp`` 2.x: ``stdio_client`` and
``ClientSession``, anyio-based, running on trio here). A wire tap between the SDK's transport and
its session records every JSON-RPC message in both directions, so tests can see what the SDK
sent (``notifications/cancelled``, ``progressToken``) and everything the server answered.

The raw-process tests speak newline-delimited JSON-RPC directly and validate every stdout line
against the official MCP schema (``check_emitted``).

Every test is bounded by ``trio.fail_after``; nothing asserts on timings.
"""

import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from _sdk_support import TapRead, TapWrite, only_text
from _wire_support import as_object
from conftest import check_emitted, stdio_identity
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from coremetry import __version__
from coremetry.mcp.versions import HANDSHAKE_VERSIONS, LATEST_HANDSHAKE

JsonObject = dict[str, object]

LIMIT_S = 30.0
"""Generous bound of every test: a hang fails, a slow machine does not."""

REPO = Path(__file__).resolve().parents[2]
SERVER_ARGS = ("-m", "coremetry", "stdio", "--fixture")
FIXTURE_TOOLS = {"echo", "sleep_ms", "big_output", "fail", "log_levels"}


# ---- the SDK side --------------------------------------------------------------------------


@dataclass
class Wire:
    """Every JSON-RPC message of one session, in order, as JSON objects."""

    inbound: list[JsonObject] = field(default_factory=list)
    """Server -> client."""
    outbound: list[JsonObject] = field(default_factory=list)
    """Client -> server."""

    def responses_to(self, request_id: object) -> list[JsonObject]:
        return [m for m in self.inbound if "method" not in m and m.get("id") == request_id]

    def progress_for(self, token: object, messages: list[JsonObject]) -> list[JsonObject]:
        return [
            params
            for m in messages
            if m.get("method") == "notifications/progress"
            and (params := as_object(m.get("params")))["progressToken"] == token
        ]

    def sent_calls(self, tool: str) -> list[JsonObject]:
        return [
            m
            for m in self.outbound
            if m.get("method") == "tools/call" and as_object(m.get("params"))["name"] == tool
        ]


@dataclass
class Connected:
    session: ClientSession
    init: types.InitializeResult
    wire: Wire
    stderr_path: Path


def server_params(env: dict[str, str], *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[*SERVER_ARGS, *extra], cwd=REPO, env=env
    )


@asynccontextmanager
async def sdk_session(
    tmp_path: Path, *extra: str, role: str = "viewer"
) -> AsyncIterator[Connected]:
    """Launch the server, connect the SDK through a wire tap, and run ``initialize``."""
    stderr_path = tmp_path / "server-stderr.log"
    wire = Wire()
    with stderr_path.open("w") as errlog:
        async with (
            stdio_client(
                server_params(stdio_identity(tmp_path / "data", role), *extra), errlog=errlog
            ) as (read, write),
            ClientSession(TapRead(read, wire.inbound), TapWrite(write, wire.outbound)) as session,
        ):
            init = await session.initialize()
            yield Connected(session, init, wire, stderr_path)


def tool_error_payload(result: types.CallToolResult) -> JsonObject:
    """The tool-error JSON of an ``isError`` result (text content; structured from 2025-06-18)."""
    assert result.is_error is True, result
    payload = as_object(json.loads(only_text(result.content)))
    assert set(payload) >= {"error", "retryable", "hint", "detail"}, payload
    assert result.structured_content == payload
    return payload


# ---- lifecycle and listing -----------------------------------------------------------------


async def test_initialize_negotiates_a_supported_revision(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            init = conn.init
            assert init.protocol_version in HANDSHAKE_VERSIONS
            assert conn.session.protocol_version == init.protocol_version
            assert init.server_info.name == "coremetry"
            assert init.server_info.version == __version__
            assert init.capabilities.tools is not None
            assert init.capabilities.resources is not None
            assert init.capabilities.prompts is not None
            assert init.instructions is not None
            assert init.instructions.startswith("Coremetry")
            # The SDK followed up with notifications/initialized, and a ping still works.
            await conn.session.send_ping()
            assert any(m.get("method") == "notifications/initialized" for m in conn.wire.outbound)
    assert "Traceback" not in conn.stderr_path.read_text()


async def test_list_tools_for_the_default_viewer_role(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            listed = await conn.session.list_tools()
    names = {tool.name for tool in listed.tools}
    assert names >= FIXTURE_TOOLS
    assert "admin_only" not in names
    echo = next(tool for tool in listed.tools if tool.name == "echo")
    assert echo.input_schema["type"] == "object"
    assert "text" in echo.input_schema["properties"]


async def test_admin_role_sees_and_calls_admin_only(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path, role="admin") as conn:
            listed = await conn.session.list_tools()
            result = await conn.session.call_tool("admin_only", {})
    assert "admin_only" in {tool.name for tool in listed.tools}
    assert result.is_error is not True
    assert only_text(result.content) == "admin secret"


# ---- tools, resources, prompts -------------------------------------------------------------


async def test_call_echo(tmp_path: Path) -> None:
    text = "hello \u00e9\u4e2d\U0001f600\nsecond line"
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.call_tool("echo", {"text": text})
    assert result.is_error is not True
    assert only_text(result.content) == text


async def test_read_templated_resource(tmp_path: Path) -> None:
    uri = "fixture://echo/hello%20world"
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.read_resource(uri)
    assert len(result.contents) == 1
    contents = result.contents[0]
    assert isinstance(contents, types.TextResourceContents), contents
    assert str(contents.uri) == uri
    assert contents.mime_type == "application/json"
    assert json.loads(contents.text) == {"text": "hello world"}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"name": "ada"}, "Say hello to ada in a plain style."),
        ({"name": "grace", "style": "pirate"}, "Say hello to grace in a pirate style."),
    ],
)
async def test_get_greet_prompt(tmp_path: Path, arguments: dict[str, str], expected: str) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.get_prompt("greet", arguments)
    assert len(result.messages) == 1
    message = result.messages[0]
    assert message.role == "user"
    assert isinstance(message.content, types.TextContent), message.content
    assert message.content.text == expected


async def test_fail_not_found_is_an_error_result(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.call_tool("fail", {"kind": "not_found"})
    payload = tool_error_payload(result)
    assert payload["error"] == "not_found"
    assert payload["retryable"] is False


async def test_sleep_beyond_its_budget_is_a_retryable_timeout(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.call_tool("sleep_ms", {"ms": 5000})
    payload = tool_error_payload(result)
    assert payload["error"] == "timeout"
    assert payload["retryable"] is True


# ---- progress and cancellation -------------------------------------------------------------


async def test_progress_callback_sees_increasing_progress(tmp_path: Path) -> None:
    Progress = tuple[float, float | None, str | None]
    send_progress, receive_progress = trio.open_memory_channel[Progress](math.inf)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        send_progress.send_nowait((progress, total, message))

    seen: list[Progress] = []
    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            result = await conn.session.call_tool(
                "sleep_ms", {"ms": 200}, progress_callback=on_progress
            )
            (sent,) = conn.wire.sent_calls("sleep_ms")
            token = as_object(as_object(sent["params"])["_meta"])["progressToken"]
            wire_progress = conn.wire.progress_for(token, conn.wire.inbound)
            # The SDK runs each callback in its own task: wait for one per notification.
            for _ in wire_progress:
                seen.append(await receive_progress.receive())
    assert result.is_error is not True
    assert only_text(result.content) == "slept 200 ms"
    # On the wire: strictly increasing progress, all before the answer, ending at the total.
    values = [v for p in wire_progress if isinstance(v := p["progress"], int | float)]
    assert len(values) == len(wire_progress) >= 1
    assert values == sorted(set(values))
    assert values[-1] == 200
    # Through the SDK's callback: at least one call, every value distinct, total and message set.
    assert len(seen) >= 1
    progresses = sorted(p for p, _, _ in seen)
    assert progresses == sorted(set(progresses))
    assert set(progresses) <= {float(v) for v in values}
    assert all(total == 200.0 and message == "sleeping" for _, total, message in seen)


async def test_cancelled_call_is_dropped_and_session_goes_on(tmp_path: Path) -> None:
    """Cancelling the trio scope around ``call_tool`` makes the SDK send
    ``notifications/cancelled``; the server stops the call and never answers it."""
    running = trio.Event()
    finished: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        running.set()

    with trio.fail_after(LIMIT_S):
        async with sdk_session(tmp_path) as conn:
            session, wire = conn.session, conn.wire
            scope = trio.CancelScope()

            async def slow_call() -> None:
                with scope:
                    finished.append(
                        await session.call_tool(
                            "sleep_ms", {"ms": 5000}, progress_callback=on_progress
                        )
                    )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_call)
                await running.wait()  # the server is running the call: it reports progress
                scope.cancel()
            assert finished == []
            (slow,) = wire.sent_calls("sleep_ms")
            slow_id = slow["id"]

            # The session answers the next call at once (not after the 2 s budget).
            echo = await session.call_tool("echo", {"text": "after cancel"})
            assert only_text(echo.content) == "after cancel"
            echo_id = wire.sent_calls("echo")[0]["id"]
            echo_at = wire.inbound.index(wire.responses_to(echo_id)[0])

            # A barrier on the server's own clock: this call started after the cancelled one
            # and answers when its own 2 s budget runs out, so by then the cancelled call's
            # timeout answer, had the call not been dropped, would have been written first.
            barrier = await session.call_tool("sleep_ms", {"ms": 5000})
            assert tool_error_payload(barrier)["error"] == "timeout"
            await session.send_ping()

    cancels = [m for m in wire.outbound if m.get("method") == "notifications/cancelled"]
    assert [as_object(m["params"])["requestId"] for m in cancels] == [slow_id]
    assert wire.responses_to(slow_id) == []
    # The work stopped: no progress for the cancelled call once the cancellation was processed
    # (the echo request, sent after it, was answered after it).
    assert wire.progress_for(slow_id, wire.inbound[:echo_at]) != []
    assert wire.progress_for(slow_id, wire.inbound[echo_at:]) == []
    assert "Traceback" not in conn.stderr_path.read_text()


# ---- the raw process -----------------------------------------------------------------------


def check_message(message: JsonObject, revision: str, method: str | None) -> None:
    """``check_emitted``, plus JSON-RPC's ``"id": null`` for errors on unreadable input.

    The MCP ``schema.json`` files type ``id`` as string-or-integer only, so an error with
    ``"id": null`` is checked with a placeholder id.
    """
    if "error" in message and "id" in message and message["id"] is None:
        assert set(message) == {"jsonrpc", "id", "error"}, message
        check_emitted({**message, "id": 0}, revision, None)
        return
    check_emitted(message, revision, method)


def line(message: Mapping[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def rpc(request_id: int, method: str, params: Mapping[str, object]) -> bytes:
    return line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)})


async def run_raw(stdin: bytes, data_dir: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, *SERVER_ARGS, *extra],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=REPO,
        env=stdio_identity(data_dir),
        start_new_session=True,
    )


async def test_raw_process_speaks_only_json_rpc_on_stdout_and_exits_cleanly(tmp_path: Path) -> None:
    methods = {
        1: "initialize",
        2: "tools/call",
        3: "tools/call",
        4: "tools/call",
        5: "tools/call",
        6: "ping",
    }
    stdin = b"".join(
        [
            rpc(
                1,
                "initialize",
                {
                    "protocolVersion": LATEST_HANDSHAKE,
                    "capabilities": {},
                    "clientInfo": {"name": "raw-e2e", "version": "0"},
                },
            ),
            line({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            rpc(2, "tools/call", {"name": "echo", "arguments": {"text": "raw\nline"}}),
            rpc(3, "tools/call", {"name": "log_levels", "arguments": {}}),
            # An unexpected failure is logged (with its traceback) on stderr, never on stdout.
            rpc(4, "tools/call", {"name": "fail", "arguments": {"kind": "internal"}}),
            # Still running when stdin closes: its answer must still be written.
            rpc(
                5,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 200}, "_meta": {"progressToken": "p"}},
            ),
            b"\n",
            b"{this is not json\n",
            rpc(6, "ping", {}),
        ]
    )
    with trio.fail_after(LIMIT_S):
        result = await run_raw(stdin, tmp_path / "data", "--log-level", "DEBUG")
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr

    stdout: bytes = result.stdout
    assert stdout.endswith(b"\n")
    messages = [as_object(json.loads(raw)) for raw in stdout.split(b"\n")[:-1]]
    revision = str(as_object(messages[0]["result"])["protocolVersion"])
    assert revision == LATEST_HANDSHAKE
    for message in messages:
        request_id = message.get("id")
        check_message(
            message, revision, methods.get(request_id) if isinstance(request_id, int) else None
        )

    replies = {m.get("id"): m for m in messages if "method" not in m}
    assert set(replies) == {1, 2, 3, 4, 5, 6, None}
    assert as_object(replies[None]["error"])["code"] == -32700

    def text_of(request_id: int) -> str:
        content = as_object(replies[request_id]["result"])["content"]
        assert isinstance(content, list)
        item = as_object(content[0])
        assert isinstance(item["text"], str)
        return item["text"]

    assert text_of(2) == "raw\nline"
    assert text_of(3) == "logged"
    assert json.loads(text_of(4))["error"] == "internal"
    assert "hunter2" not in stdout.decode()
    assert text_of(5) == "slept 200 ms"
    assert replies[6]["result"] == {}
    notified = [m["method"] for m in messages if "method" in m]
    assert set(notified) == {"notifications/message", "notifications/progress"}
    # The server's own logs went to stderr.
    assert "incident" in stderr


async def test_raw_process_with_empty_stdin_exits_cleanly_and_silently(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        result = await run_raw(b"", tmp_path / "data")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
