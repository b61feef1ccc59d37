"""Task-augmented requests: a long ``tools/call`` answered at once, its result collected later.

Two revisions define tasks, and both are served:

- **2025-11-25** (experimental tasks, ``basic/utilities/tasks``): the client asks with
  ``params.task`` (``{ttl?}``) on a ``tools/call`` of a tool whose ``execution.taskSupport`` is
  ``optional`` or ``required``; the answer is ``CreateTaskResult`` (``{task: Task}``).
  ``tasks/get`` answers the :class:`Task` fields, ``tasks/result`` blocks until the task ends
  and answers what the call would have (its result, or its JSON-RPC error) with
  ``_meta["io.modelcontextprotocol/related-task"]``, ``tasks/list`` pages the caller's tasks
  and ``tasks/cancel`` answers the cancelled task. ``notifications/tasks/status`` goes out on
  session transports (stdio, WebSocket, legacy SSE) when a status changes. A ``required`` tool
  called without ``task`` and a ``forbidden`` one called with it are ``-32601``. The server
  capability is ``tasks: {list, cancel, requests: {tools: {call}}}``. Older revisions have no
  tasks: ``params.task`` is ignored there and ``tasks/*`` is ``-32601``.
- **2026-07-28** (extension ``io.modelcontextprotocol/tasks``, SEP-2663): the server decides.
  When the request's ``_meta`` client capabilities carry the extension, a ``tools/call`` of a
  task-supporting tool answers a flat ``CreateTaskResult`` (``resultType: "task"``, ``taskId``,
  ``status``, ``createdAt``, ``lastUpdatedAt``, ``ttlMs``, ``pollIntervalMs``); without it the
  call runs synchronously, and a ``required`` tool is ``-32021`` naming the extension.
  ``tasks/get`` inlines ``result`` (completed), ``error`` (failed) or ``inputRequests``
  (``input_required``); ``tasks/update`` delivers ``inputResponses`` (answered keys leave
  ``inputRequests``; the task resumes once none is pending); ``tasks/cancel`` and
  ``tasks/update`` answer an empty ``{resultType: "complete"}``; ``tasks/result`` and
  ``tasks/list`` do not exist (``-32601``). ``tasks/*`` without the extension is ``-32021``.
  The server advertises ``capabilities.extensions["io.modelcontextprotocol/tasks"]``.

Guarantees (both revisions):

- A task runs the same :class:`~coremetry.mcp.calls.PendingCall` a direct call runs — the gate,
  the rate limit, the audit record and the cancel scope (so cancelling it interrupts the
  store's query) — in a nursery owned by the server (:meth:`TaskManager.running`), so it
  outlives the request, HTTP or other, that created it. Its deadline is the server's task
  budget (``task_max_budget_s``), not the tool's.
- A task belongs to the identity that created it (``Caller.subject``); its id is 256 bits from
  :func:`secrets.token_urlsafe`. Any other identity gets ``-32602`` "unknown task" for it,
  exactly as for an id that never existed.
- A tool that reports an error (``isError``) completes; ``failed`` is a protocol-level error
  (the JSON-RPC error the call would have answered), or a task the server lost.
- A task is kept ``ttl`` ms from its creation (the client may ask for less than the server's
  maximum, never more); finished results are kept within a byte budget per identity — when a
  new result would exceed it, that identity's oldest finished tasks are dropped first.
- With a store path, tasks survive a restart: the file is rewritten atomically (temporary file,
  then ``os.replace``) whenever a task is created, ends or goes; at start, a task that was
  still running is ``failed`` with a message saying so, and finished ones stay until their TTL.
"""

import contextlib
import datetime
import logging
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final, Literal

import msgspec
import trio
from msgspec import UNSET, Struct, UnsetType, field

from . import codes
from .calls import Connection, PendingCall
from .framing import ProtocolError, Reply, Request, Send, error_reply
from .pagination import page
from .registry import Tool
from .versions import V2025_11_25, at_least
from .wire import (
    ENCODER,
    META_CLIENT_CAPABILITIES,
    CallToolParams,
    JsonObject,
    Notification,
    RequestParams,
    ResultResponse,
)

log = logging.getLogger("coremetry.mcp")

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension's identifier (``capabilities.extensions`` key)."""

META_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
"""2025-11-25: the ``_meta`` key tying a message to its task (``{"taskId": ...}``)."""

TASKS_FILE: Final = "tasks.json"
"""The tasks file's name in the data dir (``<data_dir>/tasks.json``)."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
"""A task's status (the same five values in both revisions)."""

TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "cancelled"})
"""Statuses a task never leaves."""

RESTART_MESSAGE: Final = (
    "The server restarted while this task was running, so its work was lost. Run the request again."
)
SHUTDOWN_MESSAGE: Final = (
    "The server shut down while this task was running, so its work was lost. "
    "Run the request again after it is back."
)


class TaskIdParams(RequestParams, kw_only=True):
    """Params of ``tasks/get``, ``tasks/result`` and ``tasks/cancel``: ``{taskId}``."""

    task_id: str = field(name="taskId")


class TaskUpdateParams(RequestParams, kw_only=True):
    """``tasks/update`` params (2026-07-28): ``{taskId, inputResponses}``."""

    task_id: str = field(name="taskId")
    input_responses: JsonObject = field(default_factory=dict, name="inputResponses")


class TaskListParams(RequestParams, kw_only=True):
    """``tasks/list`` params (2025-11-25): an opaque ``cursor``."""

    cursor: str | None = None


class StoredTask(Struct, kw_only=True):
    """A task as kept in memory and in the store file.

    Attributes:
        task_id: the id (``secrets.token_urlsafe(32)``).
        owner: the creating identity's ``Caller.subject``.
        era: ``"handshake"`` (2025-11-25 wire) or ``"stateless"`` (2026-07-28 wire).
        status: the current status.
        status_message: a sentence for people, or ``""``.
        created_at: Unix time of creation, in seconds.
        updated_at: Unix time of the last status change, in seconds.
        ttl_ms: retention from creation in milliseconds.
        poll_interval_ms: the polling interval suggested to the client, in milliseconds.
        result: the call's result object (JSON), once completed.
        error: the JSON-RPC error object (JSON), once failed.
        input_requests: 2026-07-28: the requests still waiting for the client's answer.
        request_state: 2026-07-28: the MRTR ``requestState`` of the round waiting for input.
        kept_bytes: the size of the result or error kept, in bytes of JSON (what the
            per-identity budget counts).
    """

    task_id: str
    owner: str
    era: Literal["handshake", "stateless"]
    status: TaskStatus
    status_message: str = ""
    created_at: float
    updated_at: float
    ttl_ms: int
    poll_interval_ms: int
    result: JsonObject | None = None
    error: JsonObject | None = None
    kept_bytes: int = 0
    input_requests: JsonObject | None = None
    request_state: str | None = None

    @property
    def expires_at(self) -> float:
        """Unix time (s) after which the task is dropped."""
        return self.created_at + self.ttl_ms / 1000.0

    def keep(self, *, result: JsonObject | None = None, error: JsonObject | None = None) -> None:
        """Keep the task's outcome: its result or its error, and their size in bytes of JSON."""
        self.result = result
        self.error = error
        kept = result if result is not None else error
        self.kept_bytes = 0 if kept is None else len(ENCODER.encode(kept))


_FILE_ENCODER: Final = msgspec.json.Encoder()
_FILE_DECODER: Final = msgspec.json.Decoder(list[StoredTask])
_LOOSE: Final = msgspec.json.Decoder()


def _iso(unix_s: float) -> str:
    """RFC 3339 / ISO 8601 UTC timestamp with milliseconds (``2026-12-01T18:00:00.000Z``)."""
    moment = datetime.datetime.fromtimestamp(unix_s, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Live:
    """The runtime side of a task that runs in this process (never persisted)."""

    __slots__ = ("cancel_requested", "changed", "done", "pending", "responses", "wake")

    def __init__(self) -> None:
        self.pending: PendingCall | None = None
        self.cancel_requested = False
        self.done = trio.Event()
        self.wake = trio.Event()
        self.changed: Callable[[], None] | None = None
        self.responses: JsonObject = {}

    def cancelled(self) -> bool:
        """Whether ``tasks/cancel`` (or expiry) asked the task to stop."""
        return self.cancel_requested


Starter = Callable[[CallToolParams, Connection, float], PendingCall]
"""``start(params, conn, budget_s)``: the pending ``tools/call`` a task runs (one MRTR round)."""


class TaskManager:
    """The tasks of one server: creation, the task methods, expiry and the store file.

    Args:
        server_meta: the ``_meta`` of every 2026-07-28 result.
        max_budget_s: a task's deadline, in seconds (``mcp.task_max_budget_s``).
        max_ttl_ms: the longest retention a task gets (a client may ask for less), in ms.
        poll_interval_ms: the polling interval suggested to clients, in ms.
        result_budget_bytes: the bytes of finished results kept per identity.
        page_size: tasks per ``tasks/list`` page.
        store_path: the JSON file tasks are kept in across restarts (``None``: memory only).
        max_running_per_identity: tasks one identity may have running (or waiting for input)
            at once; one more is refused with ``-32000`` (its store calls would only queue).

    Attributes:
        clock: the wall clock (Unix seconds) stamping tasks and expiring them; tests replace it.

    Raises:
        ValueError: a non-positive budget, TTL, interval or page size.
    """

    def __init__(
        self,
        *,
        server_meta: JsonObject,
        max_budget_s: float = 600.0,
        max_ttl_ms: int = 3_600_000,
        poll_interval_ms: int = 1000,
        result_budget_bytes: int = 8 * 1024 * 1024,
        page_size: int = 100,
        store_path: Path | None = None,
        max_running_per_identity: int = 16,
    ) -> None:
        if max_budget_s <= 0 or max_ttl_ms <= 0 or poll_interval_ms <= 0 or page_size <= 0:
            raise ValueError("task budget, TTL, poll interval and page size must be positive")
        if result_budget_bytes <= 0:
            raise ValueError("task_result_budget_bytes must be positive")
        self._server_meta = server_meta
        self.max_budget_s = max_budget_s
        self.max_ttl_ms = max_ttl_ms
        self.poll_interval_ms = poll_interval_ms
        self.result_budget_bytes = result_budget_bytes
        self._page_size = page_size
        self.max_running_per_identity = max_running_per_identity
        self._path = store_path
        self._tasks: dict[str, StoredTask] = {}
        self._live: dict[str, _Live] = {}
        self._nursery: trio.Nursery | None = None
        self._dirty = trio.Event()
        self._write_lock = trio.Lock()
        self.clock: Callable[[], float] = time.time
        if store_path is not None:
            self._load(store_path)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether tasks can run now (inside :meth:`running`)."""
        return self._nursery is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run tasks for the duration of the block (the server-owned nursery).

        The store file is rewritten by a writer task beside them, in a worker thread, each
        time something changed (changes made meanwhile are coalesced into one write). On exit
        every task still running is cancelled and recorded ``failed`` with a message saying the
        server shut down, and the file is written one last time.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                try:
                    yield
                finally:
                    self._nursery = None
                    nursery.cancel_scope.cancel()
        finally:
            self._write(self._snapshot())

    async def flush(self) -> None:
        """Write the store file now, with every change made so far (no-op without a path)."""
        await self._write_current()

    async def _writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await self._write_current()

    async def _write_current(self) -> None:
        # One write at a time, each of a snapshot taken once the previous write ended: the
        # file never goes back to an older state.
        async with self._write_lock:
            await trio.to_thread.run_sync(self._write, self._snapshot())

    def _load(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("tasks: cannot read %s (%s); starting with no tasks", path, exc)
            return
        try:
            stored = _FILE_DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("tasks: %s is not a task file (%s); starting with no tasks", path, exc)
            return
        now = self.clock()
        for task in stored:
            if task.expires_at <= now:
                continue
            if task.status not in TERMINAL:
                self._settle_failed(task, codes.INTERNAL_ERROR, RESTART_MESSAGE, now)
            self._tasks[task.task_id] = task
        self._save()

    def _save(self) -> None:
        """Have the store file rewritten: by the writer task while tasks run, else at once."""
        if self._path is None:
            return
        if self._nursery is None:
            self._write(self._snapshot())
        else:
            self._dirty.set()

    def _snapshot(self) -> bytes | None:
        """The store file's content now (``None`` without a store path)."""
        if self._path is None:
            return None
        return _FILE_ENCODER.encode(list(self._tasks.values()))

    def _write(self, data: bytes | None) -> None:
        """Replace the store file with ``data`` atomically (a failure is logged, not raised)."""
        path = self._path
        if path is None or data is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tasks-", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                os.chmod(tmp, 0o600)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            log.error("tasks: cannot write %s: %s", path, exc)

    # -- deciding ------------------------------------------------------------------------------

    def wants_task(self, request: Request, params: CallToolParams, tool: Tool[Struct]) -> bool:
        """Whether this ``tools/call`` runs as a task (see the module docstring).

        Raises:
            ProtocolError: a ``required`` tool the request cannot run as a task (2026-07-28:
                ``-32021`` naming the extension, HTTP 400; 2025-11-25: ``-32601``), a
                ``forbidden`` one asked for as a task (2025-11-25: ``-32601``), or a task
                asked for while the server runs none (``-32603``).
        """
        support = tool.task_support
        if request.stateless:
            if support == "forbidden":
                return False  # a legacy ``task`` param is tolerated and ignored
            if not extension_declared(request):
                if support == "required":
                    raise ProtocolError(
                        codes.MISSING_REQUIRED_CLIENT_CAPABILITY,
                        f"Missing required client capability: tool {tool.name!r} runs only as "
                        f"a task; declare the {TASKS_EXTENSION} extension",
                        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                        http_status=400,
                    )
                return False
            if tool.input_before_task and isinstance(params.input_responses, UnsetType):
                return False
            self._check_enabled()
            return True
        if not at_least(request.version, V2025_11_25):
            return False  # no tasks before 2025-11-25: ``task`` means nothing there
        asked = not isinstance(params.task, UnsetType)
        if support == "forbidden":
            if asked:
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND,
                    f"Method not found: tool {tool.name!r} does not run as a task "
                    "(execution.taskSupport is forbidden); call it without params.task",
                )
            return False
        if not asked:
            if support == "required":
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND,
                    f"Method not found: tool {tool.name!r} runs only as a task "
                    "(execution.taskSupport is required); call it with params.task",
                )
            return False
        self._check_enabled()
        return True

    def _check_enabled(self) -> None:
        self._running_nursery()

    def _running_nursery(self) -> trio.Nursery:
        """The nursery tasks run in.

        Raises:
            ProtocolError: ``-32603`` outside :meth:`running` (the server runs no tasks now).
        """
        if self._nursery is None:
            raise ProtocolError(
                codes.INTERNAL_ERROR, "Internal error: this server is not running tasks now"
            )
        return self._nursery

    # -- creating ------------------------------------------------------------------------------

    def create(
        self, request: Request, params: CallToolParams, conn: Connection, start: Starter
    ) -> Reply:
        """Start ``params`` as a task of the caller; answer ``CreateTaskResult`` at once.

        The task is recorded before the answer is built, so a ``tasks/get`` right after it
        finds the task (the store file follows at once, from the writer task).
        """
        nursery = self._running_nursery()
        self._expire()
        owner = conn.caller.subject
        running = sum(
            1 for t in self._tasks.values() if t.owner == owner and t.status not in TERMINAL
        )
        if running >= self.max_running_per_identity:
            raise ProtocolError(
                codes.RATE_LIMITED,
                f"Too many tasks running for you ({running}); wait for one to end or cancel "
                "one (tasks/cancel), then retry",
                {"running": running, "limit": self.max_running_per_identity},
            )
        ttl_ms = self.max_ttl_ms
        if not isinstance(params.task, UnsetType) and isinstance(params.task.ttl, int):
            ttl_ms = max(1000, min(ttl_ms, params.task.ttl))
        now = self.clock()
        task = StoredTask(
            task_id=secrets.token_urlsafe(32),
            owner=owner,
            era="stateless" if request.stateless else "handshake",
            status="working",
            created_at=now,
            updated_at=now,
            ttl_ms=ttl_ms,
            poll_interval_ms=self.poll_interval_ms,
        )
        live = _Live()
        self._tasks[task.task_id] = task
        self._live[task.task_id] = live
        if not request.stateless and conn.send is not None and conn.transport != "http":
            send = conn.send
            live.changed = lambda: nursery.start_soon(
                self._send_status, send, self._task_fields(task)
            )
        # The task's own connection: the creator's identity and capabilities, no stream (the
        # request that created it may end long before the task does).
        task_conn = Connection(
            caller=conn.caller, transport=conn.transport, protocol_version=conn.protocol_version
        )
        task_conn.client_capabilities = conn.client_capabilities
        task_conn.capabilities_declared = conn.capabilities_declared
        task_conn.client_info = conn.client_info
        task_conn.log_level = conn.log_level
        first = msgspec.structs.replace(params, task=UNSET)
        self._save()
        nursery.start_soon(self._run, task, live, first, task_conn, start)
        if request.stateless:
            fields = self._task_fields(task)
            body: JsonObject = {"resultType": "task", **fields, "_meta": self._server_meta}
        else:
            body = {"task": self._task_fields(task)}
        return Reply(ENCODER.encode(ResultResponse(id=request.id, result=body)))

    async def _run(
        self,
        task: StoredTask,
        live: _Live,
        params: CallToolParams,
        conn: Connection,
        start: Starter,
    ) -> None:
        deadline = trio.current_time() + self.max_budget_s
        try:
            while True:
                budget_s = deadline - trio.current_time()
                if budget_s <= 0:
                    self._finish_failed(task, codes.INTERNAL_ERROR, self._deadline_message())
                    return
                pending = start(params, conn, budget_s)
                live.pending = pending
                if live.cancel_requested:
                    pending.cancel()
                reply = await pending.run()
                live.pending = None
                if reply is None or live.cancel_requested:
                    if live.cancel_requested:
                        self._finish(task, "cancelled", "Cancelled by the client.")
                    else:
                        self._finish_failed(task, codes.INTERNAL_ERROR, self._deadline_message())
                    return
                answer = _LOOSE.decode(reply.body)
                error = answer.get("error") if isinstance(answer, dict) else None
                result = answer.get("result") if isinstance(answer, dict) else None
                if isinstance(error, dict):
                    task.keep(error=error)
                    self._finish(task, "failed", str(error.get("message", "")))
                    return
                if not isinstance(result, dict):
                    self._finish_failed(task, codes.INTERNAL_ERROR, "Internal error: no result")
                    return
                if result.get("resultType") != "input_required":
                    task.keep(result=result)
                    self._finish(task, "completed", "")
                    return
                # 2026-07-28 MRTR inside a task: park until the client answered every request.
                requests = result.get("inputRequests")
                state = result.get("requestState")
                task.input_requests = dict(requests) if isinstance(requests, dict) else {}
                task.request_state = state if isinstance(state, str) else None
                live.responses = {}
                self._set_status(task, "input_required", "Waiting for the client's input.")
                with trio.move_on_at(deadline):
                    while task.input_requests and not live.cancelled():
                        live.wake = trio.Event()
                        await live.wake.wait()
                if live.cancelled():
                    self._finish(task, "cancelled", "Cancelled by the client.")
                    return
                if task.input_requests:
                    self._finish_failed(task, codes.INTERNAL_ERROR, self._deadline_message())
                    return
                params = msgspec.structs.replace(
                    params,
                    input_responses=dict(live.responses),
                    request_state=UNSET if task.request_state is None else task.request_state,
                )
                task.input_requests = None
                task.request_state = None
                self._set_status(task, "working", "")
        except BaseException:
            # The server is stopping (or a bug): the task's work is lost; say so, clearly.
            if task.status not in TERMINAL:
                self._finish_failed(task, codes.INTERNAL_ERROR, SHUTDOWN_MESSAGE)
            raise
        finally:
            live.done.set()
            self._live.pop(task.task_id, None)

    def _deadline_message(self) -> str:
        return (
            f"The task did not finish within the server's task budget "
            f"({round(self.max_budget_s)} s); narrow the question or split it."
        )

    # -- status changes ------------------------------------------------------------------------

    def _set_status(self, task: StoredTask, status: TaskStatus, message: str) -> None:
        task.status = status
        task.status_message = message
        task.updated_at = self.clock()
        live = self._live.get(task.task_id)
        if live is not None and live.changed is not None:
            live.changed()

    def _finish(self, task: StoredTask, status: TaskStatus, message: str) -> None:
        self._set_status(task, status, message)
        self._enforce_budget(task.owner, keep=task.task_id)
        self._save()

    def _finish_failed(self, task: StoredTask, code: int, message: str) -> None:
        task.keep(error={"code": code, "message": message})
        self._finish(task, "failed", message)

    @staticmethod
    def _settle_failed(task: StoredTask, code: int, message: str, now: float) -> None:
        task.status = "failed"
        task.status_message = message
        task.updated_at = now
        task.keep(error={"code": code, "message": message})
        task.input_requests = None
        task.request_state = None

    def _enforce_budget(self, owner: str, *, keep: str) -> None:
        """Keep ``owner``'s finished results within the budget, ``keep`` (the newest) first.

        A result larger than the whole budget is not kept: its task fails, saying so. Then the
        owner's oldest finished tasks are dropped while their results exceed the budget.
        """
        kept = self._tasks.get(keep)
        if kept is not None and kept.kept_bytes > self.result_budget_bytes:
            self._settle_failed(
                kept,
                codes.INTERNAL_ERROR,
                f"The result ({kept.kept_bytes} bytes) is larger than the server keeps per "
                f"identity ({self.result_budget_bytes} bytes); narrow the question.",
                self.clock(),
            )
        finished = sorted(
            (t for t in self._tasks.values() if t.owner == owner and t.status in TERMINAL),
            key=lambda t: t.updated_at,
        )
        total = sum(t.kept_bytes for t in finished)
        for old in finished:
            if total <= self.result_budget_bytes:
                return
            if old.task_id != keep:
                total -= old.kept_bytes
                del self._tasks[old.task_id]

    def _expire(self) -> None:
        """Drop tasks past their TTL (a running one is cancelled first)."""
        now = self.clock()
        gone = [t for t in self._tasks.values() if t.expires_at <= now]
        for task in gone:
            live = self._live.get(task.task_id)
            if live is not None:
                live.cancel_requested = True
                if live.pending is not None:
                    live.pending.cancel()
                live.wake.set()
            del self._tasks[task.task_id]
        if gone:
            self._save()

    async def _send_status(self, send: Send, fields: JsonObject) -> None:
        """``notifications/tasks/status`` on the creator's session.

        Best effort: a session that went away loses the notification, never the task.
        """
        note = Notification(method="notifications/tasks/status", params=fields)
        with trio.move_on_after(5), contextlib.suppress(Exception):
            await send(ENCODER.encode(note))

    # -- the task methods ------------------------------------------------------------------------

    def _owned(self, task_id: str, conn: Connection) -> StoredTask:
        """The caller's task ``task_id``.

        Raises:
            ProtocolError: ``-32602`` when there is no such task *for this caller* (another
                identity's task reads exactly like one that does not exist).
        """
        self._expire()
        task = self._tasks.get(task_id)
        if task is None or task.owner != conn.caller.subject:
            raise ProtocolError(
                codes.INVALID_PARAMS,
                f"Unknown task: {task_id!r} (it never existed, expired, or is not yours)",
                {"taskId": task_id},
            )
        return task

    def _gate(self, request: Request) -> None:
        if request.stateless and not extension_declared(request):
            raise ProtocolError(
                codes.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Missing required client capability: {request.method} needs the "
                f"{TASKS_EXTENSION} extension declared in _meta[{META_CLIENT_CAPABILITIES!r}]",
                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                http_status=400,
            )
        if not request.stateless:
            if not at_least(request.version, V2025_11_25):
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND,
                    f"Method not found: {request.method} is not part of protocol revision "
                    f"{request.version} (tasks exist from 2025-11-25)",
                )
            self._check_enabled()

    def _task_fields(self, task: StoredTask, *, stateless: bool | None = None) -> JsonObject:
        """The task as the wire shows it, in one revision's shape.

        ``stateless`` picks the revision of the *request* asking (2026-07-28 ``ttlMs`` /
        ``pollIntervalMs``, 2025-11-25 ``ttl`` / ``pollInterval``); ``None``: the revision the
        task was created in (its status notifications go where it was created). A task made
        over one revision and read over the other is shown in the reader's shape, which its
        schema requires.
        """
        fields: JsonObject = {"taskId": task.task_id, "status": task.status}
        if task.status_message:
            fields["statusMessage"] = task.status_message
        fields["createdAt"] = _iso(task.created_at)
        fields["lastUpdatedAt"] = _iso(task.updated_at)
        if task.era == "stateless" if stateless is None else stateless:
            fields["ttlMs"] = task.ttl_ms
            fields["pollIntervalMs"] = task.poll_interval_ms
        else:
            fields["ttl"] = task.ttl_ms
            fields["pollInterval"] = task.poll_interval_ms
        return fields

    def _complete(self, request: Request, body: JsonObject) -> Reply:
        if request.stateless:
            body = {"resultType": "complete", **body, "_meta": self._server_meta}
        return Reply(ENCODER.encode(ResultResponse(id=request.id, result=body)))

    def get(self, request: Request, params: TaskIdParams, conn: Connection) -> Reply:
        """``tasks/get``: the task's status (2026-07-28: with its result, error or inputs)."""
        self._gate(request)
        task = self._owned(params.task_id, conn)
        body = self._task_fields(task, stateless=request.stateless)
        if request.stateless:
            if task.status == "completed" and task.result is not None:
                body["result"] = task.result
            elif task.status == "failed" and task.error is not None:
                body["error"] = task.error
            elif task.status == "input_required" and task.input_requests is not None:
                body["inputRequests"] = task.input_requests
        return self._complete(request, body)

    def cancel(self, request: Request, params: TaskIdParams, conn: Connection) -> Reply:
        """``tasks/cancel``: stop the task's work (its store query included).

        2026-07-28 answers an empty ack, also for a task that already ended; 2025-11-25 answers
        the task, and ``-32602`` for one that already ended (the spec's "terminal" rule).
        """
        self._gate(request)
        task = self._owned(params.task_id, conn)
        if task.status in TERMINAL:
            if request.stateless:
                return self._complete(request, {})
            raise ProtocolError(
                codes.INVALID_PARAMS,
                f"Cannot cancel task {task.task_id!r}: it is already {task.status}",
            )
        live = self._live.get(task.task_id)
        if live is not None:
            live.cancel_requested = True
            if live.pending is not None:
                live.pending.cancel()
            live.wake.set()
        # The status is cancelled from now on (the work stops at its next checkpoint).
        task.input_requests = None
        self._finish(task, "cancelled", "Cancelled by the client.")
        if request.stateless:
            return self._complete(request, {})
        return self._complete(request, self._task_fields(task, stateless=request.stateless))

    def update(self, request: Request, params: TaskUpdateParams, conn: Connection) -> Reply:
        """``tasks/update`` (2026-07-28): answers to the task's pending ``inputRequests``.

        Keys the task is not waiting for are ignored; the task resumes once none is pending.
        """
        self._gate(request)
        task = self._owned(params.task_id, conn)
        live = self._live.get(task.task_id)
        pending = task.input_requests
        if task.status == "input_required" and pending and live is not None:
            answered = [key for key in params.input_responses if key in pending]
            for key in answered:
                live.responses[key] = params.input_responses[key]
                del pending[key]
            if answered:
                task.updated_at = self.clock()
            if not pending:
                live.wake.set()
        return self._complete(request, {})

    def result(self, request: Request, params: TaskIdParams, conn: Connection) -> PendingCall:
        """``tasks/result`` (2025-11-25): wait for the task to end, answer what the call would.

        Returns:
            A pending call (it may wait as long as the task runs; ``notifications/cancelled``
            stops the wait, not the task).
        """
        self._gate(request)
        task = self._owned(params.task_id, conn)

        async def body() -> Reply:
            live = self._live.get(task.task_id)
            if live is not None:
                await live.done.wait()
            related: JsonObject = {META_RELATED_TASK: {"taskId": task.task_id}}
            if task.status == "completed" and task.result is not None:
                result = dict(task.result)
                meta = result.get("_meta")
                result["_meta"] = {**(meta if isinstance(meta, dict) else {}), **related}
                return Reply(ENCODER.encode(ResultResponse(id=request.id, result=result)))
            if task.status == "failed" and task.error is not None:
                error = task.error
                code = error.get("code")
                message = error.get("message")
                data = error.get("data")
                return error_reply(
                    request.id,
                    code if isinstance(code, int) else codes.INTERNAL_ERROR,
                    message if isinstance(message, str) else "Task failed",
                    data if isinstance(data, dict) else None,
                )
            return error_reply(
                request.id,
                codes.INVALID_PARAMS,
                f"Task {task.task_id!r} was {task.status}; it has no result",
                {"taskId": task.task_id},
            )

        return PendingCall(conn, request.id, body)

    def list(self, request: Request, params: TaskListParams, conn: Connection) -> Reply:
        """``tasks/list`` (2025-11-25): the caller's tasks, oldest first, one page."""
        self._gate(request)
        self._expire()
        mine = sorted(
            (t for t in self._tasks.values() if t.owner == conn.caller.subject),
            key=lambda t: (t.created_at, t.task_id),
        )
        shown, next_cursor = page("tasks", mine, params.cursor, self._page_size)
        body: JsonObject = {
            "tasks": [self._task_fields(t, stateless=request.stateless) for t in shown]
        }
        if not isinstance(next_cursor, UnsetType):
            body["nextCursor"] = next_cursor
        return self._complete(request, body)

    # -- introspection (tests, admin) ------------------------------------------------------------

    def status_of(self, task_id: str) -> TaskStatus | None:
        """The status of ``task_id`` whoever owns it, or ``None`` (for tests and operators)."""
        task = self._tasks.get(task_id)
        return None if task is None else task.status

    async def wait_done(self, task_id: str) -> None:
        """Wait until ``task_id`` stops running here (returns at once if it is not running)."""
        live = self._live.get(task_id)
        if live is not None:
            await live.done.wait()


def extension_declared(request: Request) -> bool:
    """Whether a 2026-07-28 request's ``_meta`` client capabilities carry the tasks extension."""
    capabilities = request.meta.client_capabilities
    if isinstance(capabilities, UnsetType):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def handshake_capability() -> JsonObject:
    """The 2025-11-25 server ``tasks`` capability: list, cancel, task-augmented ``tools/call``."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


__all__ = [
    "META_RELATED_TASK",
    "TASKS_EXTENSION",
    "TASKS_FILE",
    "StoredTask",
    "TaskIdParams",
    "TaskListParams",
    "TaskManager",
    "TaskStatus",
    "TaskUpdateParams",
    "extension_declared",
    "handshake_capability",
]
