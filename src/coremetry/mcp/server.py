"""The dispatcher: bytes in, one JSON-RPC answer (or none) out, for any transport.

:class:`Server` assembles the seams of the protocol core — framing (:mod:`.framing`), the method
table (:mod:`.methods`), the registries (:mod:`.registry`), lists (:mod:`.lists`,
:mod:`.pagination`), gated calls (:mod:`.calls`), the audit record (:mod:`.observe`),
server-to-client requests (:mod:`.outbound`), the sealed ``requestState``
(:mod:`.request_state`) and the subscription streams (:mod:`.subscriptions`). A transport hands
it each message with the :class:`~coremetry.mcp.calls.Connection` it arrived on and gets back:

- ``None`` — nothing to send (a notification, a client response, a cancelled call);
- a :class:`~coremetry.mcp.framing.Reply` — the encoded answer plus the HTTP status an HTTP
  transport should use;
- a :class:`~coremetry.mcp.calls.PendingCall` — a gated call (``tools/call``,
  ``resources/read``, ``prompts/get``, ``completion/complete``, ``subscriptions/listen``) to
  ``await .run()``, typically in a task of the connection's nursery, so that
  ``notifications/cancelled`` can reach it while it runs;
- a :class:`~coremetry.mcp.calls.PendingBatch` — a 2025-03-26 batch, run the same way.

:meth:`Server.handle` does all of that in one await, for request/response transports.

Guarantees: no input makes :meth:`Server.receive` raise (an unexpected failure is ``-32603``
with an incident id that the server log carries); a notification is never answered; the
guarantees of each seam are stated in its module. Handshake era: ``initialize`` negotiates the
revision of the connection (an unknown requested revision is answered with our latest).
"""

import contextlib
import logging
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import msgspec
import trio
from msgspec import UNSET, Struct, UnsetType

from . import codes
from .calls import Calls, Connection, PendingBatch, PendingCall
from .framing import (
    DECODE_ERRORS,
    EMPTY_OBJECT,
    ProtocolError,
    Reply,
    Request,
    UnknownEntry,
    batch_items,
    error_reply,
    invalid_envelope,
    meta_of,
    parse_problem,
    result_reply,
    utf8_problem,
)
from .gate import CallGate
from .lists import Listings
from .methods import Method, MethodSpec, ParamsT, is_stateless_request
from .observe import CallObserver, CallOutcome, notify_observer, outcome_for_code, refusal_record
from .outbound import OutboundRequests
from .registry import Prompt, Registry, Resource, ResourceTemplate, Tool
from .request_state import StateSealer
from .subscriptions import Subscriptions
from .tasks import (
    TASKS_EXTENSION,
    TaskIdParams,
    TaskListParams,
    TaskManager,
    TaskUpdateParams,
    handshake_capability,
)
from .tool_errors import BUILTIN_ERROR_CLASSES, ErrorClasses, merge_error_classes
from .versions import (
    ALL_VERSIONS,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
    at_least,
    is_stateless,
    negotiate,
)
from .wire import (
    INBOUND_DECODER,
    META_SERVER_INFO,
    CallToolParams,
    CancelledParams,
    CompleteParams,
    DiscoverResult,
    EmptyParams,
    EmptyResult,
    GetPromptParams,
    Implementation,
    InboundMessage,
    InitializeParams,
    InitializeResult,
    JsonObject,
    ListChangedCapability,
    ListenParams,
    ListParams,
    LogLevel,
    ReadResourceParams,
    RequestId,
    ResourcesCapability,
    ServerCapabilities,
    SetLevelParams,
)

log = logging.getLogger("coremetry.mcp")

_ArgsT = TypeVar("_ArgsT", bound=Struct)

Outcome = Reply | PendingCall | PendingBatch | None
"""What :meth:`Server.receive` returns for one inbound message."""


class Server:
    """An MCP server: registries, the call gate, and routing for every method.

    Args:
        name: ``serverInfo.name``.
        version: ``serverInfo.version``.
        instructions: optional guidance for the model, sent in ``initialize``/``server/discover``.
        title: ``serverInfo.title`` (2025-06-18+).
        max_budget_s: the server maximum for any call's deadline, in seconds.
        page_size: items per page of the list methods.
        list_ttl_ms: ``ttlMs`` on 2026-07-28 list results, in milliseconds.
        read_ttl_ms: ``ttlMs`` on 2026-07-28 ``resources/read`` results, in milliseconds.
        default_log_level: the log threshold of a handshake connection that never sent
            ``logging/setLevel``.
        resource_subscriptions: accept ``resources/subscribe``/``unsubscribe`` (handshake era)
            and ``resourceSubscriptions`` on ``subscriptions/listen``; advertise
            ``resources.subscribe``.
        state_key: the HMAC key sealing MRTR ``requestState`` (default: random per process).
        list_changed: advertise ``listChanged`` for tools, prompts and resources in the
            2026-07-28 capabilities — set it when the application calls
            :meth:`notify_list_changed` whenever a list changes (the notifications reach
            ``subscriptions/listen`` streams). Handshake-era capabilities keep
            ``listChanged: false``: those connections get no list-changed notifications.
        error_classes: how the application's own exception types map onto the five tool-error
            classes (laid over :data:`~coremetry.mcp.tool_errors.BUILTIN_ERROR_CLASSES`; see
            :func:`~coremetry.mcp.tool_errors.merge_error_classes`). Handed in at assembly: the
            core keeps no process-wide table.
        task_max_budget_s: the deadline of a call running as a task, in seconds (larger than
            ``max_budget_s``; :mod:`coremetry.mcp.tasks`).
        task_ttl_ms: how long a task and its result are kept from creation, at most, in ms.
        task_poll_interval_ms: the polling interval suggested to task clients, in ms.
        task_result_budget_bytes: bytes of finished task results kept per identity.
        task_store_path: the file tasks are kept in across restarts (``None``: memory only).

    Tasks run only inside :meth:`tasks_running` (the server-owned nursery the hosts open
    around their transports); outside it no task capability is advertised.

    Raises:
        ValueError: a non-positive budget or page size.
        TypeError: ``error_classes`` maps a type that cannot be a tool error.
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        instructions: str | None = None,
        title: str | None = None,
        max_budget_s: float = 60.0,
        page_size: int = 100,
        list_ttl_ms: int = 60_000,
        read_ttl_ms: int = 0,
        default_log_level: LogLevel = "info",
        resource_subscriptions: bool = False,
        state_key: bytes | None = None,
        list_changed: bool = False,
        error_classes: ErrorClasses | None = None,
        task_max_budget_s: float = 600.0,
        task_ttl_ms: int = 3_600_000,
        task_poll_interval_ms: int = 1000,
        task_result_budget_bytes: int = 8 * 1024 * 1024,
        task_store_path: Path | None = None,
    ) -> None:
        if max_budget_s <= 0:
            raise ValueError("max_budget_s must be positive")
        if page_size <= 0:
            raise ValueError("page_size must be positive")
        self.info = Implementation(name=name, version=version)
        self.info_with_title = Implementation(
            name=name, version=version, title=UNSET if title is None else title
        )
        self.instructions = instructions
        self.max_budget_s = max_budget_s
        self.page_size = page_size
        self.list_ttl_ms = list_ttl_ms
        self.read_ttl_ms = read_ttl_ms
        self.default_log_level: LogLevel = default_log_level
        self.resource_subscriptions = resource_subscriptions
        self.list_changed = list_changed
        # The 2026-07-28 serverInfo is the handshake era's latest one, title included.
        server_meta: JsonObject = {META_SERVER_INFO: msgspec.to_builtins(self.info_with_title)}
        self._server_meta = server_meta
        self._registry = Registry()
        self._outbound = OutboundRequests()
        self._sealer = StateSealer(state_key)
        self._calls = Calls(
            self._registry,
            outbound=self._outbound,
            sealer=self._sealer,
            server_meta=server_meta,
            max_budget_s=max_budget_s,
            read_ttl_ms=read_ttl_ms,
            default_log_level=default_log_level,
            error_classes=(
                BUILTIN_ERROR_CLASSES
                if error_classes is None
                else merge_error_classes(error_classes)
            ),
        )
        lists = Listings(
            self._registry, page_size=page_size, list_ttl_ms=list_ttl_ms, server_meta=server_meta
        )
        self._lists = lists
        self.tasks = TaskManager(
            server_meta=server_meta,
            max_budget_s=task_max_budget_s,
            max_ttl_ms=task_ttl_ms,
            poll_interval_ms=task_poll_interval_ms,
            result_budget_bytes=task_result_budget_bytes,
            page_size=page_size,
            store_path=task_store_path,
        )
        self._subscriptions = Subscriptions(
            resource_subscriptions=resource_subscriptions, server_meta=server_meta
        )
        self._methods: dict[str, Method] = {}
        calls, subscriptions = self._calls, self._subscriptions
        add = self.add_method
        add("initialize", MethodSpec(InitializeParams, self._initialize, eras="handshake"))
        add("ping", MethodSpec(EmptyParams, self._ping, eras="handshake"))
        add("server/discover", MethodSpec(EmptyParams, self._discover, eras="stateless"))
        add("logging/setLevel", MethodSpec(SetLevelParams, self._set_level, eras="handshake"))
        for method in ("resources/subscribe", "resources/unsubscribe"):
            add(method, MethodSpec(ReadResourceParams, subscriptions.subscribe, eras="handshake"))
        add("tools/list", MethodSpec(ListParams, lists.list_tools, eras="both"))
        add("resources/list", MethodSpec(ListParams, lists.list_resources, eras="both"))
        add("resources/templates/list", MethodSpec(ListParams, lists.list_templates, eras="both"))
        add("prompts/list", MethodSpec(ListParams, lists.list_prompts, eras="both"))
        add(
            "tools/call",
            MethodSpec(CallToolParams, self._call_tool, eras="both", gated=True, observed="tool"),
        )
        tasks = self.tasks
        add("tasks/get", MethodSpec(TaskIdParams, tasks.get, eras="both"))
        add("tasks/cancel", MethodSpec(TaskIdParams, tasks.cancel, eras="both"))
        add("tasks/update", MethodSpec(TaskUpdateParams, tasks.update, eras="stateless"))
        add("tasks/result", MethodSpec(TaskIdParams, tasks.result, eras="handshake", gated=True))
        add("tasks/list", MethodSpec(TaskListParams, tasks.list, eras="handshake"))
        add(
            "resources/read",
            MethodSpec(
                ReadResourceParams,
                calls.read_resource,
                eras="both",
                gated=True,
                observed="resource",
            ),
        )
        add(
            "prompts/get",
            MethodSpec(
                GetPromptParams, calls.get_prompt, eras="both", gated=True, observed="prompt"
            ),
        )
        add(
            "completion/complete",
            MethodSpec(CompleteParams, calls.complete, eras="both", gated=True),
        )
        add(
            "subscriptions/listen",
            MethodSpec(ListenParams, subscriptions.listen, eras="stateless", gated=True),
        )

    def _call_tool(
        self, request: Request, params: CallToolParams, conn: Connection
    ) -> Reply | PendingCall:
        """``tools/call``, directly or as a task (:meth:`TaskManager.wants_task`)."""
        calls = self._calls
        tool = self._registry.tools.get(params.name)
        if tool is None or not self.tasks.wants_task(request, params, tool):
            return calls.call_tool(request, params, conn)

        def start(
            round_params: CallToolParams, task_conn: Connection, budget_s: float
        ) -> PendingCall:
            return calls.call_tool(request, round_params, task_conn, task_budget_s=budget_s)

        return self.tasks.create(request, params, conn, start)

    @contextlib.asynccontextmanager
    async def tasks_running(self) -> AsyncIterator[None]:
        """Run task-augmented requests for the duration of the block (see :mod:`.tasks`).

        The hosts (``coremetry serve``, ``stdio``, the conformance fixture) open it around
        their transports; on exit the tasks still running are recorded failed.
        """
        async with self.tasks.running():
            self._lists.task_execution = True
            try:
                yield
            finally:
                self._lists.task_execution = False

    def add_method(self, method: str, spec: MethodSpec[ParamsT]) -> None:
        """Serve ``method`` with ``spec`` (replacing any earlier spec of that name).

        Like python-sdk's ``add_request_handler(method, params_type, handler)``: a
        :class:`~coremetry.mcp.methods.MethodSpec` pairs the params type with its handler, so
        the two are checked against each other where the spec is written.
        """
        self._methods[method] = spec

    # -- registries --------------------------------------------------------------------------

    def register_tool(self, tool: Tool[_ArgsT]) -> None:
        """Register a tool; a duplicate name logs a warning and the last registration wins."""
        self._registry.register_tool(tool)

    def register_resource(self, resource: Resource) -> None:
        """Register a static resource; a duplicate URI logs a warning and the last one wins."""
        self._registry.register_resource(resource)

    def register_resource_template(self, template: ResourceTemplate) -> None:
        """Register a resource template; a duplicate template string: warning, last one wins."""
        self._registry.register_resource_template(template)

    def register_prompt(self, prompt: Prompt) -> None:
        """Register a prompt; a duplicate name logs a warning and the last registration wins."""
        self._registry.register_prompt(prompt)

    def param_headers(self, tool: str) -> dict[str, str]:
        """The arguments of ``tool`` mirrored into ``Mcp-Param-*`` headers (SEP-2243).

        Returns:
            ``{argument: header name suffix}``; empty for an unknown tool or one with none.
        """
        entry = self._registry.tools.get(tool)
        return {} if entry is None else entry.param_headers

    def tool_count(self) -> int:
        """Number of registered tools."""
        return len(self._registry.tools)

    def resource_count(self) -> tuple[int, int]:
        """Numbers of registered (static resources, resource templates)."""
        return len(self._registry.resources), len(self._registry.templates)

    def prompt_count(self) -> int:
        """Number of registered prompts."""
        return len(self._registry.prompts)

    def tools(self) -> Sequence[Tool[Struct]]:
        """The registered tools, in registration order."""
        return tuple(self._registry.tools.values())

    def resources(self) -> Sequence[Resource]:
        """The registered static resources, in registration order."""
        return tuple(self._registry.resources.values())

    def resource_templates(self) -> Sequence[ResourceTemplate]:
        """The registered resource templates, in registration order."""
        return tuple(self._registry.templates.values())

    def prompts(self) -> Sequence[Prompt]:
        """The registered prompts, in registration order."""
        return tuple(self._registry.prompts.values())

    def visible_counts(self, role: str) -> dict[str, int]:
        """How many entries of each kind a caller with ``role`` sees in the list methods.

        Returns:
            ``{"tools": n, "resources": n, "resource_templates": n, "prompts": n}``.
        """
        return self._registry.visible_counts(role)

    def set_call_gate(self, gate: CallGate) -> None:
        """Replace the call gate.

        The default, :func:`~coremetry.mcp.gate.role_gate`, checks roles only. The gate is
        consulted before every ``tools/call``, ``resources/read`` and ``prompts/get``.
        """
        self._calls.gate = gate

    def set_call_observer(self, observer: CallObserver | None) -> None:
        """Install (or, with ``None``, remove) the call observer — the audit hook.

        ``observer(record)`` is called once per ``tools/call``, ``resources/read`` and
        ``prompts/get``, when the call ends, with a :class:`~coremetry.mcp.observe.CallRecord`
        (see :mod:`coremetry.mcp.observe` for the outcomes). It runs synchronously on the trio
        loop and must not block; an exception out of it is logged and does not affect the call.
        Calls already in flight keep the observer they started with.
        """
        self._calls.observer = observer

    # -- MRTR state, subscriptions -------------------------------------------------------------

    def seal_state(self, data: bytes) -> str:
        """Seal ``data`` with HMAC-SHA256 under this server's key (URL-safe token)."""
        return self._sealer.seal(data)

    def open_state(self, token: str) -> bytes | None:
        """Return the data of a token from :meth:`seal_state`, or ``None`` if it was altered."""
        return self._sealer.open(token)

    def notify_list_changed(self, kind: Literal["tools", "prompts", "resources"]) -> None:
        """Tell every ``subscriptions/listen`` stream that asked for it that ``kind`` changed."""
        self._subscriptions.notify_list_changed(kind)

    def notify_resource_updated(self, uri: str) -> None:
        """Tell every listen stream subscribed to ``uri`` that the resource changed."""
        self._subscriptions.notify_resource_updated(uri)

    def end_subscriptions(self) -> None:
        """End every ``subscriptions/listen`` stream gracefully (call when shutting down).

        Each open listen call answers ``SubscriptionsListenResult`` (``resultType: complete``,
        ``_meta`` carrying its subscription id), which the transport sends before ending the
        stream; listens started afterwards end at once the same way.
        """
        self._subscriptions.end()

    # -- entry points --------------------------------------------------------------------------

    async def handle(
        self, data: bytes, conn: Connection, *, in_batch: bool = False
    ) -> Reply | None:
        """Answer one inbound message completely (for request/response transports).

        Args:
            data: the message's bytes (any bytes: garbage gets a JSON-RPC error).
            conn: the connection it arrived on.
            in_batch: internal; the message is an element of a batch.

        Returns:
            The reply, or ``None`` when nothing is to be sent (notification, cancelled call).
        """
        outcome = self.receive(data, conn, in_batch=in_batch)
        if outcome is None or isinstance(outcome, Reply):
            return outcome
        return await outcome.run()

    async def _handle_batch_item(self, data: bytes, conn: Connection) -> Reply | None:
        return await self.handle(data, conn, in_batch=True)

    def receive(self, data: bytes, conn: Connection, *, in_batch: bool = False) -> Outcome:
        """Decode and route one inbound message without blocking.

        Notifications take effect at once (so a cancel is never queued behind other work);
        requests that need no I/O are answered at once; gated calls are registered in
        ``conn.in_flight`` and returned as a :class:`~coremetry.mcp.calls.PendingCall` to run.

        Args:
            data: the message's bytes.
            conn: the connection it arrived on.
            in_batch: internal; the message is an element of a batch.

        Returns:
            See :data:`Outcome`. Never raises for any input.
        """
        if not data.isascii():
            problem = utf8_problem(data)
            if problem is not None:
                return problem
        try:
            msg = INBOUND_DECODER.decode(data)
        except msgspec.ValidationError as exc:
            # msgspec validates as it parses: a wrong type early in a body cut short (an `"id":
            # null` before the truncation) fails validation before the parse would. JSON-RPC
            # 2.0 §5.1: invalid JSON is a parse error, whatever else is wrong with it.
            unparsable = parse_problem(data)
            if unparsable is not None:
                return unparsable
            if data.lstrip().startswith(b"["):
                items = batch_items(data, conn.protocol_version, in_batch=in_batch)
                if isinstance(items, Reply):
                    return items
                return PendingBatch(self._handle_batch_item, items, conn)
            return invalid_envelope(data, exc)
        except msgspec.DecodeError as exc:
            return error_reply(None, codes.PARSE_ERROR, f"Parse error: {exc}", http_status=400)
        except RecursionError:
            return error_reply(
                None, codes.PARSE_ERROR, "Parse error: JSON nested too deeply", http_status=400
            )
        try:
            return self._route(msg, conn, in_batch=in_batch)
        except ProtocolError as exc:
            request_id = msg.id if not isinstance(msg.id, UnsetType) else None
            if request_id is None:
                if isinstance(msg.method, UnsetType):
                    # Neither a request, a notification nor a response (no "method", no id):
                    # JSON-RPC 2.0 §5 answers an invalid Request with id null, even without
                    # an id. (It was dropped like a notification; found by the fuzzer.)
                    return error_reply(None, exc.code, exc.message, exc.data, exc.http_status)
                return None
            if self._calls.observer is not None:
                outcome: CallOutcome = (
                    "not_found" if isinstance(exc, UnknownEntry) else outcome_for_code(exc.code)
                )
                self._observe_refusal(msg, conn, request_id, outcome)
            return error_reply(request_id, exc.code, exc.message, exc.data, exc.http_status)
        except Exception:
            incident = secrets.token_hex(4)
            log.exception("internal error routing a message (incident %s)", incident)
            request_id = msg.id if not isinstance(msg.id, UnsetType) else None
            if request_id is None:
                return None
            if self._calls.observer is not None:
                self._observe_refusal(msg, conn, request_id, "internal")
            return error_reply(
                request_id, codes.INTERNAL_ERROR, f"Internal error (incident {incident})"
            )

    def _observe_refusal(
        self, msg: InboundMessage, conn: Connection, request_id: RequestId, outcome: CallOutcome
    ) -> None:
        """Record a gated call answered with an error before it could run (error path only)."""
        observer = self._calls.observer
        spec = self._methods.get(msg.method) if isinstance(msg.method, str) else None
        kind = None if spec is None else spec.observed
        if observer is None or spec is None or kind is None:
            return
        raw = EMPTY_OBJECT if isinstance(msg.params, UnsetType) else bytes(msg.params)
        try:
            decoded = spec.decode(raw)
        except DECODE_ERRORS:
            decoded = None
        record = refusal_record(
            kind,
            decoded,
            raw,
            caller=conn.caller,
            transport=conn.transport,
            request_id=request_id,
            outcome=outcome,
        )
        notify_observer(observer, record)

    # -- routing ---------------------------------------------------------------------------------

    def _route(self, msg: InboundMessage, conn: Connection, *, in_batch: bool) -> Outcome:
        if msg.jsonrpc != "2.0":
            raise ProtocolError(
                codes.INVALID_REQUEST,
                f'Invalid Request: "jsonrpc" must be "2.0", got {msg.jsonrpc!r}',
                http_status=400,
            )
        method = msg.method
        if isinstance(method, UnsetType):
            if isinstance(msg.id, UnsetType) or (
                isinstance(msg.result, UnsetType) and isinstance(msg.error, UnsetType)
            ):
                raise ProtocolError(
                    codes.INVALID_REQUEST,
                    'Invalid Request: missing "method"',
                    http_status=400,
                )
            # A client's response to a server request: nothing to answer.
            self._outbound.deliver(msg.id, msg.result, msg.error)
            return None
        params = EMPTY_OBJECT if isinstance(msg.params, UnsetType) else bytes(msg.params)
        if isinstance(msg.id, UnsetType):
            self._notification(method, params, conn)
            return None
        spec = self._methods.get(method)
        if spec is None:
            stateless = is_stateless_request(meta_of(params), conn)
            raise ProtocolError(
                codes.METHOD_NOT_FOUND,
                f"Method not found: {method}",
                http_status=404 if stateless else 200,
            )
        return spec.route(msg.id, method, params, conn, in_batch=in_batch)

    def _notification(self, method: str, params: bytes, conn: Connection) -> None:
        if method == "notifications/initialized":
            conn.initialized = True
        elif method == "notifications/cancelled":
            try:
                cancelled = msgspec.json.decode(params, type=CancelledParams)
            except DECODE_ERRORS:
                return  # invalid cancellations SHOULD be ignored
            call = conn.in_flight.get(cancelled.request_id)
            if call is not None:
                call.cancel()
        # Every other notification (roots/list_changed, unknown ones) is ignored, as JSON-RPC
        # requires: a notification is never answered.

    # -- lifecycle -------------------------------------------------------------------------------

    def capabilities(self, version: str) -> ServerCapabilities:
        """The capabilities advertised at ``version`` (``basic/lifecycle`` "Capabilities").

        ``completions`` exists from 2025-03-26 (2024-11-05 had the method but no capability).
        ``resources.subscribe`` only in the handshake era and only when enabled; ``listChanged``
        only in the stateless era and only when enabled (see ``list_changed``).
        """
        stateless = is_stateless(version)
        list_changed = self.list_changed and stateless
        caps = ServerCapabilities(
            tools=ListChangedCapability(list_changed=list_changed),
            resources=ResourcesCapability(
                subscribe=self.resource_subscriptions and not stateless,
                list_changed=list_changed,
            ),
            prompts=ListChangedCapability(list_changed=list_changed),
            logging={},
        )
        if at_least(version, V2025_03_26):
            caps.completions = {}
        if self.tasks.enabled:
            if stateless:
                caps.extensions = {TASKS_EXTENSION: {}}
            elif at_least(version, V2025_11_25):
                caps.tasks = handshake_capability()
        return caps

    def _initialize(self, request: Request, params: InitializeParams, conn: Connection) -> Reply:
        version = negotiate(params.protocol_version)
        conn.protocol_version = version
        conn.client_capabilities = params.capabilities
        conn.capabilities_declared = True
        if not isinstance(params.client_info, UnsetType):
            conn.client_info = params.client_info
        result = InitializeResult(
            protocol_version=version,
            capabilities=self.capabilities(version),
            server_info=self.info_with_title if at_least(version, V2025_06_18) else self.info,
            instructions=UNSET if self.instructions is None else self.instructions,
        )
        return result_reply(self._server_meta, request, result)

    def _discover(self, request: Request, params: EmptyParams, conn: Connection) -> Reply:
        result = DiscoverResult(
            supported_versions=list(ALL_VERSIONS),
            capabilities=self.capabilities(request.version),
            instructions=UNSET if self.instructions is None else self.instructions,
        )
        return result_reply(self._server_meta, request, result, cache=self.list_ttl_ms)

    def _ping(self, request: Request, params: EmptyParams, conn: Connection) -> Reply:
        return result_reply(self._server_meta, request, EmptyResult())

    def _set_level(self, request: Request, params: SetLevelParams, conn: Connection) -> Reply:
        conn.log_level = params.level
        return result_reply(self._server_meta, request, EmptyResult())


class ConnectionDrain(Protocol):
    """How :func:`serve_connection` takes part in the server's shutdown drain.

    Implemented by :class:`coremetry.transports.drain.Drain` (the core imports no transport).
    Once :attr:`started` is set, a request arriving on the connection is refused with
    :meth:`refusal`'s answer, a call the drain cut off at its deadline is answered with
    :meth:`cut_reply`, and the connection ends as soon as no call of its own is in flight.
    """

    @property
    def started(self) -> trio.Event:
        """Set when the drain begins."""
        ...

    def track(self, call: PendingCall | PendingBatch) -> None:
        """Record a call that starts running (synchronously, before its task starts)."""

    def untrack(self, call: PendingCall | PendingBatch) -> None:
        """Record that a call ended and its answer (if any) was written."""

    def was_cut(self, call: PendingCall | PendingBatch) -> bool:
        """Whether the drain cancelled ``call`` at its deadline."""
        ...

    def refusal(self, data: bytes, conn: Connection) -> bytes | None:
        """The answer to ``data`` arriving during the drain; ``None`` routes it (not a request)."""
        ...

    def cut_reply(self, data: bytes, conn: Connection) -> bytes:
        """The answer of the call carried by ``data`` when the drain cut it off."""
        ...


async def serve_connection(
    server: Server,
    conn: Connection,
    incoming: AsyncIterable[bytes],
    *,
    drain_on_eof: bool = True,
    drain: ConnectionDrain | None = None,
    skip_blank: bool = True,
) -> None:
    """Serve one session-style connection (stdio, legacy SSE, WebSocket) until it ends.

    Messages are routed in arrival order; each gated call runs in its own task of a nursery
    owned by this function, so cancellations and pings are never queued behind slow calls.
    Replies and notifications go out through ``conn.send`` (which must serialise writes).

    Args:
        server: the dispatcher.
        conn: the connection; ``conn.send`` must be set.
        incoming: the peer's messages, one JSON-RPC message (or 2025-03-26 batch) each.
        drain_on_eof: when ``incoming`` ends, let in-flight calls finish (bounded by their
            deadlines) and send their answers — right for stdio, where a client may close
            stdin after its last request. When False, cancel them (the peer is gone).
        drain: the server's shutdown drain (:class:`ConnectionDrain`). Once it has begun,
            requests are answered with its refusal (notifications and client responses are
            still routed, so a cancel or an elicitation answer reaches a running call), every
            call in flight is answered (its result, or the drain's answer if cut off), and
            this function returns when none is left — the transport then closes the session.
        skip_blank: ignore blank messages (stdio: empty lines between messages). When False a
            blank message is answered like any other body that is not JSON (``-32700``) —
            right where each message is framed on its own (a WebSocket text frame).

    Raises:
        ValueError: ``conn.send`` is not set.
    """
    send = conn.send
    if send is None:
        raise ValueError("serve_connection needs a connection with send set")
    active = 0
    idle = trio.Event()

    async def run(pending: PendingCall | PendingBatch, data: bytes) -> None:
        nonlocal active
        try:
            reply = await pending.run()
            if reply is None and drain is not None and drain.was_cut(pending):
                reply = Reply(drain.cut_reply(data, conn))
            if reply is not None:
                try:
                    await send(reply.body)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    conn.cancel_all()
        finally:
            if drain is not None:
                drain.untrack(pending)
            active -= 1
            if not active:
                idle.set()

    async def end_when_drained(nursery: trio.Nursery, started: trio.Event) -> None:
        await started.wait()
        while active:
            await idle.wait()
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        if drain is not None:
            nursery.start_soon(end_when_drained, nursery, drain.started)
        async for data in incoming:
            if skip_blank and not data.strip():
                continue
            if drain is not None and drain.started.is_set():
                refused = drain.refusal(data, conn)
                if refused is not None:
                    await send(refused)
                    continue
            outcome = server.receive(data, conn)
            if outcome is None:
                continue
            if isinstance(outcome, Reply):
                await send(outcome.body)
            else:
                if drain is not None:
                    drain.track(outcome)
                if not active:
                    idle = trio.Event()
                active += 1
                nursery.start_soon(run, outcome, data)
        if drain_on_eof:
            while active:
                await idle.wait()
        else:
            conn.cancel_all()
        nursery.cancel_scope.cancel()
