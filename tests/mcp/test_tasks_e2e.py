"""MCP tasks end to end (issue 19): task-augmented ``tools/call`` in both revisions.

2025-11-25 runs through the official ``mcp`` SDK's client (its task request and result types
sent with ``session.send_request``) over Streamable HTTP and stdio, every message the server
emitted validated against the revision's schema (:func:`conftest.check_emitted`). The
2026-07-28 tasks extension has no schema file; its wire shapes are checked field by field here
(the conformance suite's ``tasks-*`` scenarios check them too, ``nox -s conformance``).

Every test is bounded by ``trio.fail_after`` (a hang guard); nothing asserts on timings.
"""

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar, Final, Literal

import httpx2
import msgspec
import pytest
import trio
from _sdk_support import TapTransport, only_text
from _wire_support import as_list, as_object
from conftest import check_emitted
from mcp import Client, ClientSession, types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types import EmptyResult, Result

from coremetry.config import load_config
from coremetry.mcp import CallContext, Caller, Connection, Server, Tool
from coremetry.mcp.observe import CallRecord
from coremetry.mcp.tasks import META_RELATED_TASK, RESTART_MESSAGE, SHUTDOWN_MESSAGE
from coremetry.server import build_mcp_server, serve
from coremetry.store.sqlite import open_sqlite_store
from coremetry.store.sqlite._runtime import ReadContext

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

JsonObject = dict[str, object]

LIMIT_S: Final = 30.0
"""Hang guard of every test: a hang fails, a slow machine does not."""

HANDSHAKE: Final = "2025-11-25"
STATELESS: Final = "2026-07-28"
EXTENSION: Final = "io.modelcontextprotocol/tasks"

LONG_QUERY: Final = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
    "SELECT count(*) FROM c"
)
"""Counts to ten billion: minutes of SQLite work unless interrupted."""


class NoArgs(msgspec.Struct, kw_only=True):
    """No arguments."""


async def start_server(nursery: trio.Nursery, mcp: Server) -> str:
    """Serve ``mcp`` (tasks running) on a free port; return the MCP endpoint URL."""
    config = load_config(environ={}, overrides={"http": {"port": 0}})
    base: str = await nursery.start(
        partial(serve, config, mcp, announce=False, shutdown=trio.Event())
    )
    return base + "/api/mcp"


def emitted(body: bytes, content_type: str) -> list[JsonObject]:
    """The JSON-RPC messages of one HTTP answer (a JSON body or an event stream)."""
    if not body:
        return []
    if content_type.startswith("text/event-stream"):
        found: list[JsonObject] = []
        for block in body.decode("utf-8").split("\n\n"):
            for line in block.split("\n"):
                if line.startswith("data:") and line[5:].strip():
                    found.append(as_object(json.loads(line[5:])))
        return found
    return [as_object(json.loads(body))]


# ---- the SDK's task support: a tasks-extension claim -------------------------------------------


class TaskIdParams(types.RequestParams):  # type: ignore[explicit-any]  # pydantic's BaseModel carries Any; the SDK's models are the API
    """``{taskId}``: params of ``tasks/get`` and ``tasks/cancel`` (2026-07-28 extension)."""

    task_id: str


class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):  # type: ignore[explicit-any]  # pydantic's BaseModel carries Any; the SDK's models are the API
    """``tasks/get``; ``Mcp-Name`` carries the task id (SEP-2663 routing headers)."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


class TasksCancel(types.Request[TaskIdParams, Literal["tasks/cancel"]]):  # type: ignore[explicit-any]  # pydantic's BaseModel carries Any; the SDK's models are the API
    """``tasks/cancel``."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


class CreatedTask(Result):  # type: ignore[explicit-any]  # pydantic's BaseModel carries Any; the SDK's models are the API
    """The flat 2026-07-28 ``CreateTaskResult``."""

    result_type: Literal["task"]
    task_id: str
    status: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class DetailedTask(Result):  # type: ignore[explicit-any]  # pydantic's BaseModel carries Any; the SDK's models are the API
    """A ``tasks/get`` answer: the task, with its inlined result or error once it ended."""

    result_type: Literal["complete"]
    task_id: str
    status: str
    result: dict[str, object] | None = None
    error: dict[str, object] | None = None


class TasksExtension(ClientExtension):
    """The ``io.modelcontextprotocol/tasks`` extension as the SDK's claim mechanism takes it.

    ``client.call_tool`` of a task-supporting tool gets a :class:`CreatedTask`; the claim polls
    ``tasks/get`` until the task ends and returns its inlined ``CallToolResult``. Every task
    id and polled status is recorded for the test.
    """

    identifier = EXTENSION

    def __init__(self) -> None:
        self.created: list[CreatedTask] = []
        self.polled: list[str] = []

    def claims(self) -> Sequence[ResultClaim[CreatedTask]]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve),)

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        detail = await get_detail(ctx.session, created.task_id)
        while detail.status not in ("completed", "failed", "cancelled"):
            self.polled.append(detail.status)
            await trio.sleep(0.01)
            detail = await get_detail(ctx.session, created.task_id)
        self.polled.append(detail.status)
        if detail.status != "completed" or detail.result is None:
            raise RuntimeError(f"task {created.task_id} ended {detail.status}: {detail.error}")
        return types.CallToolResult.model_validate(detail.result)


async def get_detail(session: ClientSession, task_id: str) -> DetailedTask:
    request = TasksGet(params=TaskIdParams(task_id=task_id))
    return await session.send_request(request, DetailedTask)


@dataclass
class Stateless:
    """An SDK client on 2026-07-28 declaring the tasks extension, its HTTP exchanges tapped."""

    client: Client
    tasks: TasksExtension
    tap: TapTransport


@asynccontextmanager
async def stateless_client(url: str) -> AsyncIterator[Stateless]:
    """Connect the SDK (2026-07-28, tasks extension); on exit validate what the server sent."""
    tap = TapTransport()
    tasks = TasksExtension()
    http = httpx2.AsyncClient(transport=tap, timeout=httpx2.Timeout(LIMIT_S))
    async with http:
        transport = streamable_http_client(url, http_client=http)
        # "auto" probes server/discover: our dual-era server is served statelessly.
        async with Client(transport, mode="auto", extensions=[tasks]) as client:
            assert client.protocol_version == STATELESS
            yield Stateless(client, tasks, tap)
    checked = 0
    for exchange in tap.exchanges:
        if exchange.method != "POST" or not exchange.request_body:
            continue
        request = as_object(json.loads(exchange.request_body))
        method = request.get("method")
        content_type = exchange.response_headers.get("content-type", "")
        for message in emitted(bytes(exchange.body), content_type):
            answers = "result" in message and isinstance(method, str)
            check_emitted(message, STATELESS, str(method) if answers else None)
            if answers and method == "tools/call":
                check_created_task(as_object(message["result"]))
            checked += 1
    assert checked


def check_created_task(result: JsonObject) -> None:
    """A 2026-07-28 ``tools/call`` result that created a task has the flat extension shape."""
    if result.get("resultType") != "task":
        return
    assert isinstance(result["taskId"], str)
    assert result["status"] in ("working", "input_required", "completed", "failed", "cancelled")
    for stamp in ("createdAt", "lastUpdatedAt"):
        assert str(result[stamp]).endswith("Z")
    assert isinstance(result["ttlMs"], int)
    assert isinstance(result["pollIntervalMs"], int)
    for absent in ("task", "ttl", "pollInterval", "result", "error", "requestState"):
        assert absent not in result


# ---- 2026-07-28 over Streamable HTTP, with the SDK ---------------------------------------------


async def test_sdk_call_runs_as_a_task_and_is_collected(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, build_mcp_server(fixture=True))
        async with stateless_client(url) as conn:
            capabilities = conn.client.server_capabilities
            result = await conn.client.call_tool("sleep_ms", {"ms": 30})
            direct = await conn.client.call_tool("echo", {"text": "not a task"})
    assert capabilities.extensions is not None
    assert EXTENSION in capabilities.extensions
    assert capabilities.tasks is None  # the 2025-11-25 slot is not used in 2026-07-28
    assert only_text(result.content) == "slept 30 ms"
    assert result.is_error is False
    [created] = conn.tasks.created
    assert created.status == "working"
    assert len(created.task_id) >= 40  # 256 random bits, URL-safe
    assert conn.tasks.polled[-1] == "completed"
    assert only_text(direct.content) == "not a task"  # forbidden: answered directly


async def test_cancelling_a_task_interrupts_its_sqlite_query(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    started = trio.Event()
    stopped = trio.Event()
    recorded = trio.Event()
    seen: dict[str, object] = {}
    records: list[CallRecord] = []
    async with open_sqlite_store(tmp_path / "t.db", query_threads=1) as store:

        def long_read(ctx: ReadContext) -> object:
            trio.from_thread.run_sync(started.set)
            try:
                return ctx.execute(LONG_QUERY)
            except Exception as exc:  # the store's SQLite module's OperationalError
                seen["error"] = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                trio.from_thread.run_sync(stopped.set)

        async def long_scan(args: NoArgs, ctx: CallContext) -> str:
            await store._read(long_read)
            return "finished"

        def observe(record: CallRecord) -> None:
            records.append(record)
            recorded.set()

        server = Server("t", "0")
        server.register_tool(
            Tool("long_scan", "A very long scan.", NoArgs, long_scan, task_support="optional")
        )
        server.set_call_observer(observe)
        with trio.fail_after(LIMIT_S):
            url = await start_server(nursery, server)
            async with stateless_client(url) as conn:
                created = await conn.client.session.call_tool("long_scan", {}, allow_claimed=True)
                assert isinstance(created, CreatedTask)
                await started.wait()
                ack = await conn.client.session.send_request(
                    TasksCancel(params=TaskIdParams(task_id=created.task_id)), EmptyResult
                )
                await stopped.wait()
                after = await get_detail(conn.client.session, created.task_id)
                again = await conn.client.session.send_request(
                    TasksCancel(params=TaskIdParams(task_id=created.task_id)), EmptyResult
                )
            await recorded.wait()  # the audit record is written as the call unwinds
    assert ack.result_type == "complete"
    assert again.result_type == "complete"  # idempotent on a terminal task
    # The cancel stopped the store's work: SQLite's interrupt mid-query, or (when it arrived
    # between the read starting and its statement) the store's stop before the statement ran.
    # Either way the count to ten billion never reached its natural end.
    assert seen["error"] in ("OperationalError: interrupted", "ReadStopped: ")
    assert after.status == "cancelled"
    assert after.result is None
    assert [(r.name, r.outcome) for r in records] == [("long_scan", "cancelled")]


# ---- ownership, TTL, restart (the core, several identities) -----------------------------------


ALICE: Final = Caller(subject="alice", role="viewer")
BOB: Final = Caller(subject="bob", role="viewer")


async def rpc(server: Server, conn: Connection, method: str, params: JsonObject) -> JsonObject:
    """One request through the dispatcher; the decoded answer, schema-checked."""
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = await server.handle(json.dumps(message).encode(), conn)
    assert reply is not None
    answer = as_object(json.loads(reply.body))
    revision = STATELESS if isinstance(params.get("_meta"), dict) else HANDSHAKE
    check_emitted(answer, revision, method if "result" in answer else None)
    return answer


def handshake_conn(caller: Caller) -> Connection:
    conn = Connection(caller=caller, transport="stdio", protocol_version=HANDSHAKE)
    conn.initialized = True
    return conn


def created_id(answer: JsonObject) -> str:
    task = as_object(as_object(answer["result"])["task"])
    return str(task["taskId"])


def error_of(answer: JsonObject) -> JsonObject:
    return as_object(answer["error"])


async def test_another_identity_gets_not_found_never_status_or_result() -> None:
    server = build_mcp_server(fixture=True)
    alice, bob = handshake_conn(ALICE), handshake_conn(BOB)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            created = await rpc(
                server,
                alice,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 0}, "task": {"ttl": 60_000}},
            )
            task_id = created_id(created)
            await server.tasks.wait_done(task_id)
            refused = {
                method: await rpc(server, bob, method, {"taskId": task_id})
                for method in ("tasks/get", "tasks/result", "tasks/cancel")
            }
            unknown = await rpc(server, bob, "tasks/get", {"taskId": "no-such-task"})
            bobs = await rpc(server, bob, "tasks/list", {})
            alices = await rpc(server, alice, "tasks/list", {})
            mine = await rpc(server, alice, "tasks/result", {"taskId": task_id})
    for answer in refused.values():
        error = error_of(answer)
        assert error["code"] == -32602
        assert "completed" not in json.dumps(answer)
        assert "slept" not in json.dumps(answer)
        # Exactly the answer an id that never existed gets (with its own id in it).
        assert str(error["message"]).replace(task_id, "X") == str(
            error_of(unknown)["message"]
        ).replace("no-such-task", "X")
    assert as_list(as_object(bobs["result"])["tasks"]) == []
    assert [as_object(t)["taskId"] for t in as_list(as_object(alices["result"])["tasks"])] == [
        task_id
    ]
    assert "slept 0 ms" in json.dumps(mine)
    assert server.tasks.status_of(task_id) == "completed"  # bob's cancel did nothing


async def test_a_task_expires_after_its_ttl(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    server = build_mcp_server(fixture=True, task_store_path=path)
    now = [1_000_000.0]
    server.tasks.clock = lambda: now[0]
    alice = handshake_conn(ALICE)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            created = await rpc(
                server,
                alice,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 0}, "task": {"ttl": 5_000}},
            )
            task_id = created_id(created)
            await server.tasks.wait_done(task_id)
            task = as_object(as_object(created["result"])["task"])
            now[0] += 4.9  # within its TTL: still there
            kept = await rpc(server, alice, "tasks/get", {"taskId": task_id})
            await server.tasks.flush()
            on_file = path.read_text(encoding="utf-8")
            now[0] += 0.2  # past it: gone, from memory and from the file
            gone = await rpc(server, alice, "tasks/get", {"taskId": task_id})
            listed = await rpc(server, alice, "tasks/list", {})
    assert task["ttl"] == 5_000
    assert as_object(kept["result"])["status"] == "completed"
    assert task_id in on_file
    assert error_of(gone)["code"] == -32602
    assert as_list(as_object(listed["result"])["tasks"]) == []
    assert task_id not in path.read_text(encoding="utf-8")


async def test_a_restart_fails_running_tasks_and_keeps_finished_ones(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    first = build_mcp_server(fixture=True, task_store_path=path)
    alice = handshake_conn(ALICE)
    with trio.fail_after(LIMIT_S):
        async with first.tasks_running():
            done = await rpc(
                first,
                alice,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 0}, "task": {}},
            )
            done_id = created_id(done)
            await first.tasks.wait_done(done_id)
            running = await rpc(
                first,
                alice,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 600_000}, "task": {}},
            )
            running_id = created_id(running)
            await first.tasks.flush()
            # The process dies here (the file still says "working"): a new one starts.
            second = build_mcp_server(fixture=True, task_store_path=path)
            async with second.tasks_running():
                after_crash = {
                    task_id: await rpc(second, alice, "tasks/get", {"taskId": task_id})
                    for task_id in (done_id, running_id)
                }
                kept = await rpc(second, alice, "tasks/result", {"taskId": done_id})
                lost = await rpc(second, alice, "tasks/result", {"taskId": running_id})
        # A graceful stop of the first process: its running task is recorded failed too.
    crashed = as_object(after_crash[running_id]["result"])
    assert as_object(after_crash[done_id]["result"])["status"] == "completed"
    assert only_text_of(kept) == "slept 0 ms"
    assert crashed["status"] == "failed"
    assert crashed["statusMessage"] == RESTART_MESSAGE
    assert error_of(lost)["message"] == RESTART_MESSAGE
    stopped = [
        t for t in json.loads(path.read_text(encoding="utf-8")) if t["task_id"] == running_id
    ]
    assert stopped[0]["status"] == "failed"
    assert stopped[0]["status_message"] == SHUTDOWN_MESSAGE


def only_text_of(answer: JsonObject) -> str:
    content = as_list(as_object(answer["result"])["content"])
    assert len(content) == 1
    return str(as_object(content[0])["text"])


# ---- 2026-07-28: the tasks extension on the stateless endpoint --------------------------------


def stateless_meta(*, extension: bool) -> JsonObject:
    capabilities: JsonObject = {"extensions": {EXTENSION: {}}} if extension else {}
    return {
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


async def post(
    http: httpx2.AsyncClient, url: str, method: str, params: JsonObject, name: str | None = None
) -> tuple[int, JsonObject]:
    """One stateless POST (its own HTTP request: no session); status and decoded answer."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": STATELESS,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = await http.post(url, json=body, headers=headers)
    messages = emitted(response.content, response.headers.get("content-type", ""))
    assert len(messages) == 1, messages
    return response.status_code, messages[0]


async def test_stateless_task_outlives_the_request_that_created_it(
    nursery: trio.Nursery,
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, build_mcp_server(fixture=True))
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(LIMIT_S)) as http:
            status, created = await post(
                http,
                url,
                "tools/call",
                {
                    "name": "sleep_ms",
                    "arguments": {"ms": 50},
                    "_meta": stateless_meta(extension=True),
                },
                "sleep_ms",
            )
            result = as_object(created["result"])
            task_id = str(result["taskId"])
            detail: JsonObject = {}
            while detail.get("status") != "completed":  # poll, each poll its own request
                _, got = await post(
                    http,
                    url,
                    "tasks/get",
                    {"taskId": task_id, "_meta": stateless_meta(extension=True)},
                    task_id,
                )
                detail = as_object(got["result"])
                await trio.sleep(0.01)
            direct_status, direct = await post(
                http,
                url,
                "tools/call",
                {
                    "name": "sleep_ms",
                    "arguments": {"ms": 0},
                    "_meta": stateless_meta(extension=False),
                },
                "sleep_ms",
            )
            gated_status, gated = await post(
                http,
                url,
                "tasks/get",
                {"taskId": task_id, "_meta": stateless_meta(extension=False)},
                task_id,
            )
            removed_status, removed = await post(
                http,
                url,
                "tasks/list",
                {"_meta": stateless_meta(extension=True)},
            )
    assert status == 200
    assert result["resultType"] == "task"
    assert result["status"] == "working"
    assert "task" not in result
    assert "result" not in result
    assert "requestState" not in result
    assert isinstance(result["ttlMs"], int)
    assert isinstance(result["pollIntervalMs"], int)
    assert "ttl" not in result
    assert "pollInterval" not in result
    inlined = as_object(detail["result"])
    assert detail["resultType"] == "complete"
    assert as_list(inlined["content"]) == [{"type": "text", "text": "slept 50 ms"}]
    assert META_RELATED_TASK not in as_object(inlined.get("_meta", {}))
    check_emitted(direct, STATELESS, "tools/call")  # no extension: an ordinary call
    assert (direct_status, as_object(direct["result"])["resultType"]) == (200, "complete")
    assert gated_status == 400
    assert error_of(gated)["code"] == -32021
    assert as_object(error_of(gated)["data"]) == {
        "requiredCapabilities": {"extensions": {EXTENSION: {}}}
    }
    assert (removed_status, error_of(removed)["code"]) == (404, -32601)


# ---- 2025-11-25 on a session transport: the task methods and status notifications -----------


async def test_handshake_task_methods_and_status_notifications() -> None:
    """2025-11-25 at the wire: the SDK 2.x leaves its v1 task surface out ("tasks/* deliberately
    absent" from its method tables), so these messages are built by hand and schema-checked."""
    server = build_mcp_server(fixture=True)

    async def only_as_task(args: NoArgs, ctx: CallContext) -> str:
        return "done"

    server.register_tool(
        Tool("only_as_task", "Runs only as a task.", NoArgs, only_as_task, task_support="required")
    )
    sent: list[JsonObject] = []
    notified = trio.Event()

    async def send(data: bytes) -> None:
        message = as_object(json.loads(data))
        sent.append(message)
        if as_object(message["params"])["status"] == "completed":
            notified.set()

    conn = Connection(caller=ALICE, transport="stdio", send=send, protocol_version=HANDSHAKE)
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            init = await rpc(
                server, conn, "initialize", {"protocolVersion": HANDSHAKE, "capabilities": {}}
            )
            listed = await rpc(server, conn, "tools/list", {})
            required = await rpc(server, conn, "tools/call", {"name": "only_as_task"})
            forbidden = await rpc(
                server, conn, "tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}}
            )
            created = await rpc(
                server,
                conn,
                "tools/call",
                {"name": "sleep_ms", "arguments": {"ms": 30}, "task": {"ttl": 60_000}},
            )
            task_id = created_id(created)
            polled = await rpc(server, conn, "tasks/get", {"taskId": task_id})
            collected = await rpc(server, conn, "tasks/result", {"taskId": task_id})
            final = await rpc(server, conn, "tasks/get", {"taskId": task_id})
            tasks = await rpc(server, conn, "tasks/list", {})
            late_cancel = await rpc(server, conn, "tasks/cancel", {"taskId": task_id})
            await notified.wait()
    capabilities = as_object(as_object(init["result"])["capabilities"])
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    execution = {
        as_object(t)["name"]: as_object(t).get("execution")
        for t in as_list(as_object(listed["result"])["tools"])
    }
    assert execution["sleep_ms"] == {"taskSupport": "optional"}
    assert execution["only_as_task"] == {"taskSupport": "required"}
    assert execution["echo"] is None
    assert error_of(required)["code"] == -32601
    assert "only as a task" in str(error_of(required)["message"])
    assert error_of(forbidden)["code"] == -32601
    task = as_object(as_object(created["result"])["task"])
    assert (task["status"], task["ttl"]) == ("working", 60_000)
    assert as_object(polled["result"])["status"] in ("working", "completed")
    assert only_text_of(collected) == "slept 30 ms"
    meta = as_object(as_object(collected["result"])["_meta"])
    assert meta[META_RELATED_TASK] == {"taskId": task_id}
    assert as_object(final["result"])["status"] == "completed"
    listed_ids = [as_object(t)["taskId"] for t in as_list(as_object(tasks["result"])["tasks"])]
    assert listed_ids == [task_id]
    assert error_of(late_cancel)["code"] == -32602  # already completed (2025-11-25 rule)
    for message in sent:
        check_emitted(message, HANDSHAKE)
    assert [as_object(m["params"])["taskId"] for m in sent] == [task_id]
    assert sent[0]["method"] == "notifications/tasks/status"


class SizeArgs(msgspec.Struct, kw_only=True):
    """``size``: bytes of text to answer."""

    size: int


async def sized(args: SizeArgs, ctx: CallContext) -> str:
    return "x" * args.size


async def test_results_beyond_an_identity_budget_drop_that_identity_oldest() -> None:
    server = build_mcp_server(fixture=True, task_result_budget_bytes=2500)
    server.register_tool(
        Tool("sized", "Answers size bytes.", SizeArgs, sized, task_support="optional")
    )
    alice, bob = handshake_conn(ALICE), handshake_conn(BOB)

    async def run(conn: Connection, size: int) -> str:
        created = await rpc(
            server, conn, "tools/call", {"name": "sized", "arguments": {"size": size}, "task": {}}
        )
        task_id = created_id(created)
        await server.tasks.wait_done(task_id)
        return task_id

    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            bobs = await run(bob, 1000)
            first, second, third = [await run(alice, 1000) for _ in range(3)]
            huge = await run(alice, 3000)
            statuses = {
                name: await rpc(server, conn, "tasks/get", {"taskId": task_id})
                for name, conn, task_id in (
                    ("bob", bob, bobs),
                    ("first", alice, first),
                    ("second", alice, second),
                    ("third", alice, third),
                    ("huge", alice, huge),
                )
            }
            huge_result = await rpc(server, alice, "tasks/result", {"taskId": huge})
    # Alice's budget holds two 1000-byte results: the third dropped her oldest; the huge one
    # was not kept at all (its small error was), so it dropped nothing.
    assert error_of(statuses["first"])["code"] == -32602
    assert as_object(statuses["second"]["result"])["status"] == "completed"
    assert as_object(statuses["third"]["result"])["status"] == "completed"
    assert as_object(statuses["bob"]["result"])["status"] == "completed"  # not alice's budget
    huge_task = as_object(statuses["huge"]["result"])
    assert huge_task["status"] == "failed"
    assert "larger than the server keeps per identity (2500 bytes)" in str(
        huge_task["statusMessage"]
    )
    assert error_of(huge_result)["message"] == huge_task["statusMessage"]


async def test_an_identity_may_run_only_so_many_tasks_at_once() -> None:
    server = build_mcp_server(fixture=True)
    server.tasks.max_running_per_identity = 1
    alice, bob = handshake_conn(ALICE), handshake_conn(BOB)
    long_sleep: JsonObject = {"name": "sleep_ms", "arguments": {"ms": 600_000}, "task": {}}
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            running = created_id(await rpc(server, alice, "tools/call", long_sleep))
            refused = await rpc(server, alice, "tools/call", long_sleep)
            bobs = created_id(await rpc(server, bob, "tools/call", long_sleep))
            for conn, task_id in ((alice, running), (bob, bobs)):
                await rpc(server, conn, "tasks/cancel", {"taskId": task_id})
            again = created_id(await rpc(server, alice, "tools/call", long_sleep))
            await rpc(server, alice, "tasks/cancel", {"taskId": again})
    error = error_of(refused)
    assert error["code"] == -32000
    assert as_object(error["data"]) == {"running": 1, "limit": 1}
    assert server.tasks.status_of(running) == "cancelled"


async def test_revisions_before_2025_11_25_have_no_tasks() -> None:
    server = build_mcp_server(fixture=True)
    conn = Connection(caller=ALICE, transport="stdio", protocol_version="2025-06-18")
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            init = await server.handle(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
                    }
                ).encode(),
                conn,
            )
            call = {"name": "sleep_ms", "arguments": {"ms": 0}, "task": {}}
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            direct = await server.handle(json.dumps(message).encode(), conn)
            message = {"jsonrpc": "2.0", "id": 2, "method": "tasks/list", "params": {}}
            listed = await server.handle(json.dumps(message).encode(), conn)
    assert init is not None
    assert direct is not None
    assert listed is not None
    capabilities = as_object(as_object(json.loads(init.body)["result"])["capabilities"])
    assert "tasks" not in capabilities
    answer = as_object(json.loads(direct.body))
    check_emitted(answer, "2025-06-18", "tools/call")
    assert only_text_of(answer) == "slept 0 ms"  # answered directly: `task` means nothing here
    assert error_of(as_object(json.loads(listed.body)))["code"] == -32601


async def test_a_task_is_shown_in_the_shape_of_the_revision_that_asks() -> None:
    """Created over 2026-07-28, listed and read over 2025-11-25: ``ttl``/``pollInterval``, as
    that revision's schema requires (``rpc`` validates it); found by the fresh-user run, where
    2025-11-25 ``tasks/list`` mixed in 2026 ``ttlMs`` entries and the SDK refused the list."""
    server = build_mcp_server(fixture=True)
    stateless = Connection(caller=ALICE, transport="http")
    with trio.fail_after(LIMIT_S):
        async with server.tasks_running():
            created = await rpc(
                server,
                stateless,
                "tools/call",
                {
                    "name": "sleep_ms",
                    "arguments": {"ms": 0},
                    "_meta": stateless_meta(extension=True),
                },
            )
            task_id = str(as_object(created["result"])["taskId"])
            assert "ttlMs" in as_object(created["result"])
            await server.tasks.wait_done(task_id)
            listed = await rpc(server, handshake_conn(ALICE), "tasks/list", {})
            got = await rpc(server, handshake_conn(ALICE), "tasks/get", {"taskId": task_id})
    (shown,) = as_list(as_object(listed["result"])["tasks"])
    for task in (as_object(shown), as_object(got["result"])):
        assert task["taskId"] == task_id
        assert {"ttl", "pollInterval"} <= task.keys()
        assert not {"ttlMs", "pollIntervalMs"} & task.keys()
