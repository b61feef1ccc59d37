"""Gated calls: pending calls, the call gate, tools/call, resources/read, prompts/get, complete.

Contract:

- Every gated call runs in its own cancel scope, registered under its request id (in
  :attr:`Connection.in_flight`) before the call starts; ``notifications/cancelled`` cancels
  exactly that scope and no answer is sent. A cancel that races the answer yields the answer or
  nothing, never both and never two answers (spec: ``basic/utilities/cancellation``).
- The call's deadline is ``min(entry budget, server maximum, _meta["coremetry/timeout_ms"])``;
  the gate, the handler and the encoding all run under it; expiry is the ``timeout`` tool-error
  class (``shared/DESIGN.md`` §3).
- The gate runs before every ``tools/call``, ``resources/read`` and ``prompts/get`` handler:
  :class:`~coremetry.mcp.gate.Denied` -> ``-32001`` naming the required role, any other gate
  error -> ``-32000`` (with ``retry_after_ms`` when the gate gives one).
- A handler's exception is classified by :func:`~coremetry.mcp.tool_errors.classify_tool_error`
  with the error classes handed to the server at assembly; an ``internal`` one is logged with an
  incident id that the answer carries. A tool's failure is an ``isError`` result; a resource's
  or prompt's a JSON-RPC error carrying the same five-class object.
- Tool arguments that do not decode are a ``bad_args`` result whose detail names the field (its
  JSON path) and, for an enumerated field, the accepted values.
- With a call observer, exactly one :class:`~coremetry.mcp.observe.CallRecord` per
  ``tools/call``, ``resources/read`` and ``prompts/get`` (see :mod:`coremetry.mcp.observe`).
"""

import base64
import contextlib
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import msgspec
import trio
from msgspec import UNSET, Raw, Struct, UnsetType

from . import codes
from .context import CallContext
from .framing import (
    EMPTY_OBJECT,
    ProtocolError,
    Reply,
    Request,
    Send,
    UnknownEntry,
    decode_error_message,
    error_reply,
    result_reply,
)
from .gate import (
    ANONYMOUS_VIEWER,
    Caller,
    CallGate,
    CallKind,
    Denied,
    GateCall,
    role_gate,
    role_satisfies,
)
from .observe import (
    UNOBSERVED,
    CallAudit,
    CallObserver,
    CallOutcome,
    CallRecord,
    audit_name,
    is_cancellation,
    notify_observer,
    observer_failed,
    outcome_for_code,
    outcome_for_error,
)
from .outbound import OutboundRequests
from .registry import InputRequired, Registry, Resource, ToolOutput
from .request_state import StateSealer
from .tool_errors import (
    BUILTIN_ERROR_CLASSES,
    ErrorClasses,
    ToolError,
    ToolErrorKind,
    classify_tool_error,
    sanitize_detail,
    tool_error_dict,
    tool_error_json,
)
from .versions import V2025_06_18, at_least
from .wire import (
    ENCODER,
    BlobResourceContents,
    CallToolParams,
    CallToolResult,
    CompleteParams,
    CompleteResult,
    Completion,
    Content,
    GetPromptParams,
    GetPromptResult,
    InputRequiredResult,
    JsonObject,
    LogLevel,
    PromptMessage,
    ReadResourceParams,
    ReadResourceResult,
    RequestId,
    ResourceContents,
    ResultResponse,
    RetryableParams,
    TextContent,
    TextResourceContents,
)

log = logging.getLogger("coremetry.mcp")

_MAX_COMPLETION_VALUES: Final = 100

HandleItem = Callable[[bytes, "Connection"], Awaitable[Reply | None]]
"""Answers one element of a batch completely (the server's ``handle`` for batch elements)."""


class Connection:
    """One client connection (or one stateless HTTP request) as the core sees it.

    Args:
        caller: the authenticated identity; its role filters lists and feeds the gate.
        transport: ``"stdio"``, ``"http"``, ``"sse"``, ``"ws"`` (for the gate and the audit log).
        send: how to send notifications (progress, log messages) on this connection; ``None``
            when the transport cannot (a JSON-only HTTP answer): notifications are then dropped.
        protocol_version: a revision the transport already knows (e.g. from the
            ``MCP-Protocol-Version`` header); ``initialize`` sets it for handshake sessions.

    Attributes:
        initialized: ``notifications/initialized`` was received.
        log_level: threshold set by ``logging/setLevel`` (handshake era); ``None`` = server
            default.
        client_capabilities: what the client declared in ``initialize`` on this connection.
        capabilities_declared: an ``initialize`` was received on this connection, so
            ``client_capabilities`` is what the client declared. False on a transport that keeps
            no session (stateless HTTP serving a handshake-era request): the server then cannot
            know the client's capabilities.
    """

    def __init__(
        self,
        *,
        caller: Caller = ANONYMOUS_VIEWER,
        transport: str = "",
        send: Send | None = None,
        protocol_version: str | None = None,
    ) -> None:
        self.caller = caller
        self.transport = transport
        self.send = send
        self.protocol_version = protocol_version
        self.initialized = False
        self.log_level: LogLevel | None = None
        self.client_capabilities: JsonObject = {}
        self.capabilities_declared = False
        self.client_info: JsonObject = {}
        self.in_flight: dict[RequestId, PendingCall] = {}

    def cancel_all(self) -> None:
        """Cancel every in-flight call of this connection (the peer went away)."""
        for call in list(self.in_flight.values()):
            call.cancel()


class PendingCall:
    """A gated call routed by the server's ``receive``, registered under its request id.

    The call runs in one trio cancel scope whose deadline is the call's budget; the gate, the
    handler and the encoding all run inside it. ``await run()`` returns the :class:`Reply`; the
    timeout reply when the deadline expired first; or ``None`` when the client cancelled it
    (``notifications/cancelled``, or the transport called :meth:`cancel`). Run it once.

    For ``tools/call``, ``resources/read`` and ``prompts/get``, when the server has a call
    observer, ``run()`` hands it one :class:`CallRecord` as the call ends, however it ends (also
    when the task is cancelled from outside or the body raises).
    """

    def __init__(
        self,
        conn: Connection,
        request_id: RequestId,
        body: Callable[[], Awaitable[Reply]],
        *,
        deadline: float = math.inf,
        on_timeout: Callable[[], Reply] | None = None,
        context: CallContext | None = None,
        audit: CallAudit | None = None,
        observer: CallObserver | None = None,
    ) -> None:
        self.conn = conn
        self.request_id = request_id
        self._body = body
        self._on_timeout = on_timeout
        self._context = context
        self._client_cancelled = False
        self._audit = UNOBSERVED if audit is None else audit
        self._observer = None if audit is None or audit is UNOBSERVED else observer
        self.scope = trio.CancelScope(deadline=deadline)

    def _current(self) -> contextlib.AbstractContextManager[object]:
        # The call's context is current_call_context() while the body runs (none: nothing).
        return contextlib.nullcontext() if self._context is None else self._context.current()

    def cancel(self) -> None:
        """Cancel the call: it stops at its next checkpoint and answers nothing."""
        self._client_cancelled = True
        self.scope.cancel()

    async def run(self) -> Reply | None:
        """Execute the call (blocks until it completes, times out or is cancelled).

        Returns:
            The answer (a timeout answer if the deadline expired first), or ``None`` if the
            call was cancelled by the client.
        """
        observer = self._observer
        reply: Reply | None = None
        if observer is None:
            try:
                with self.scope, self._current():
                    reply = await self._body()
            finally:
                # Inlined _finish(): this is the hot path of every gated call.
                if self._context is not None:
                    self._context.close()
                if self.conn.in_flight.get(self.request_id) is self:
                    del self.conn.in_flight[self.request_id]
            if self._client_cancelled:
                return None
            if reply is None:
                # Only the deadline can end the scope without a reply or a client cancel.
                return self._on_timeout() if self._on_timeout is not None else None
            return reply
        # Observed: the same, plus one CallRecord for the observer. Inlined here rather than
        # awaited as a second coroutine, and the common ending (a reply) builds its record
        # in place: every audited call runs this.
        started_ns = time.time_ns()
        started = time.perf_counter()
        try:
            with self.scope, self._current():
                reply = await self._body()
        except BaseException as exc:
            self._finish()
            # Torn down from outside (connection closed, server shutdown), or a bug.
            outcome: CallOutcome = "cancelled" if is_cancellation(exc) else "internal"
            self._observe(observer, outcome, started_ns, started)
            raise
        if self._context is not None:
            self._context.close()
        conn = self.conn
        if conn.in_flight.get(self.request_id) is self:
            del conn.in_flight[self.request_id]
        if self._client_cancelled:
            self._observe(observer, "cancelled", started_ns, started)
            return None
        if reply is None:
            self._observe(observer, "timeout", started_ns, started)
            return self._on_timeout() if self._on_timeout is not None else None
        audit = self._audit
        record = CallRecord(
            kind=audit.kind,
            name=audit.name,
            caller=conn.caller,
            transport=conn.transport,
            outcome=audit.outcome,
            duration_ms=(time.perf_counter() - started) * 1000.0,
            arguments=audit,
            started_at_unix_nano=started_ns,
            request_id=self.request_id,
        )
        try:
            observer(record)
        except Exception:
            observer_failed(record)
        return reply

    def _finish(self) -> None:
        if self._context is not None:
            self._context.close()
        if self.conn.in_flight.get(self.request_id) is self:
            del self.conn.in_flight[self.request_id]

    def _observe(
        self, observer: CallObserver, outcome: CallOutcome, started_ns: int, started: float
    ) -> None:
        audit = self._audit
        record = CallRecord(
            kind=audit.kind,
            name=audit.name,
            caller=self.conn.caller,
            transport=self.conn.transport,
            outcome=outcome,
            duration_ms=(time.perf_counter() - started) * 1000.0,
            arguments=audit,
            started_at_unix_nano=started_ns,
            request_id=self.request_id,
        )
        notify_observer(observer, record)


class PendingBatch:
    """A 2025-03-26 JSON-RPC batch; ``await run()`` answers it as one array (or ``None``)."""

    def __init__(self, handle: "HandleItem", items: list[Raw], conn: Connection) -> None:
        self._handle = handle
        self._items = items
        self._conn = conn
        self._scope = trio.CancelScope()

    def cancel(self) -> None:
        """Cancel every call of the batch (the client went away): ``run()`` answers nothing."""
        self._scope.cancel()

    async def run(self) -> Reply | None:
        """Answer every request of the batch, concurrently; notifications get no entry.

        Returns:
            A JSON array of the responses, or ``None`` when the batch held only notifications
            or was cancelled.
        """
        results: list[Raw | None] = [None] * len(self._items)

        async def one(index: int, item: Raw) -> None:
            reply = await self._handle(bytes(item), self._conn)
            if reply is not None:
                results[index] = Raw(reply.body)

        with self._scope:
            async with trio.open_nursery() as nursery:
                for index, item in enumerate(self._items):
                    nursery.start_soon(one, index, item)
        if self._scope.cancel_called:
            return None
        answers = [r for r in results if r is not None]
        if not answers:
            return None
        return Reply(ENCODER.encode(answers))


class Calls:
    """The gated methods of one server (``tools/call``, ``resources/read``, ``prompts/get``).

    Also ``completion/complete``, which runs as a pending call but is not gated by role.

    Args:
        registry: the entries served.
        outbound: the server's server-to-client requests (for :meth:`CallContext.request`).
        sealer: seals ``requestState`` (for :meth:`CallContext.seal_state`).
        server_meta: the ``_meta`` of every stateless result.
        max_budget_s: the server maximum for any call's deadline, in seconds.
        read_ttl_ms: ``ttlMs`` on 2026-07-28 ``resources/read`` results, in milliseconds.
        default_log_level: the log threshold of a handshake connection that never sent
            ``logging/setLevel``.
        error_classes: how handler exceptions map onto the five tool-error classes.

    Attributes:
        gate: the call gate (replace it through the server's ``set_call_gate``).
        observer: the call observer, or ``None``.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        outbound: OutboundRequests,
        sealer: StateSealer,
        server_meta: JsonObject,
        max_budget_s: float,
        read_ttl_ms: int,
        default_log_level: LogLevel,
        error_classes: ErrorClasses = BUILTIN_ERROR_CLASSES,
    ) -> None:
        self._registry = registry
        self._outbound = outbound
        self._sealer = sealer
        self._server_meta = server_meta
        self._max_budget_s = max_budget_s
        self._read_ttl_ms = read_ttl_ms
        self._default_log_level: LogLevel = default_log_level
        self._error_classes = error_classes
        self.gate: CallGate = role_gate
        self.observer: CallObserver | None = None

    def _classify_logged(self, exc: Exception, kind: str, name: str) -> ToolError:
        """Classify a handler's failure; an ``internal`` one is logged with an incident id."""
        err = classify_tool_error(exc, self._error_classes)
        if err.error == ToolErrorKind.INTERNAL:
            incident = secrets.token_hex(4)
            log.error("%s %r failed (incident %s)", kind, name, incident, exc_info=exc)
            err = ToolError(
                error=err.error,
                retryable=err.retryable,
                hint=err.hint,
                detail=f"{err.detail} (incident {incident})",
            )
        return err

    def _input_required(
        self, request: Request, output: InputRequired, kind: str, name: str, audit: CallAudit
    ) -> Reply:
        if not request.stateless or (
            output.input_requests is None and output.request_state is None
        ):
            audit.outcome = "internal"
            err = self._classify_logged(
                RuntimeError(
                    "handler asked for client input outside the 2026-07-28 era, or with "
                    "neither inputRequests nor requestState"
                ),
                kind,
                name,
            )
            return _rpc_error_for(request.id, err, {"name": name})
        result = InputRequiredResult(
            input_requests=(
                UNSET if output.input_requests is None else dict(output.input_requests)
            ),
            request_state=UNSET if output.request_state is None else output.request_state,
        )
        result.meta = self._server_meta
        result.result_type = "input_required"
        return Reply(ENCODER.encode(ResultResponse(id=request.id, result=result)))

    def _context(
        self,
        request: Request,
        conn: Connection,
        budget_s: float,
        retry: RetryableParams | UnsetType = UNSET,
        *,
        task_budget_s: float | None = None,
    ) -> CallContext:
        now = trio.current_time()
        limit_s = min(budget_s, self._max_budget_s) if task_budget_s is None else task_budget_s
        client_ms = request.meta.timeout_ms
        if not isinstance(client_ms, UnsetType):  # >= 0: RequestMeta refuses the rest
            limit_s = min(limit_s, float(client_ms) / 1000.0)
        threshold: LogLevel | None
        if request.stateless:
            level = request.meta.log_level
            threshold = None if isinstance(level, UnsetType) else level
        else:
            threshold = conn.log_level or self._default_log_level
        capabilities = request.meta.client_capabilities
        return CallContext(
            request_id=request.id,
            caller=conn.caller,
            protocol_version=request.version,
            deadline=now + limit_s,
            budget_s=limit_s,
            progress_token=request.meta.progress_token,
            log_threshold=threshold,
            send=conn.send,
            outbound=self._outbound,
            sealer=self._sealer,
            stateless=request.stateless,
            client_capabilities=(
                conn.client_capabilities if isinstance(capabilities, UnsetType) else capabilities
            ),
            client_capabilities_known=(
                conn.capabilities_declared or not isinstance(capabilities, UnsetType)
            ),
            input_responses=None if isinstance(retry, UnsetType) else retry.input_responses or None,
            request_state=(
                None
                if isinstance(retry, UnsetType) or isinstance(retry.request_state, UnsetType)
                else retry.request_state
            ),
        )

    async def _pass_gate(
        self,
        request: Request,
        conn: Connection,
        kind: CallKind,
        name: str,
        min_role: str,
        audit: CallAudit,
    ) -> Reply | None:
        """Ask the gate; return the refusal to send, or ``None`` when the call may go on.

        A refusal also sets ``audit.outcome`` (``denied`` or ``rate_limited``).
        """
        call = GateCall(
            kind=kind, name=name, min_role=min_role, caller=conn.caller, transport=conn.transport
        )
        try:
            await self.gate(call)
        except Denied as exc:
            needed = min_role or "viewer"
            message = (
                exc.message if needed in exc.message else f"{exc.message} (requires role {needed})"
            )
            audit.outcome = "denied"
            return error_reply(request.id, codes.FORBIDDEN, message, {"required_role": needed})
        except Exception as exc:
            audit.outcome = "rate_limited"
            retry = getattr(exc, "retry_after_ms", None)
            data: JsonObject | None = (
                {"retry_after_ms": int(retry)} if isinstance(retry, int | float) else None
            )
            text: object = getattr(exc, "message", None)
            return error_reply(
                request.id,
                codes.RATE_LIMITED,
                text if isinstance(text, str) else "Call refused by the server's call gate",
                data,
            )
        return None

    def call_tool(
        self,
        request: Request,
        params: CallToolParams,
        conn: Connection,
        *,
        task_budget_s: float | None = None,
    ) -> PendingCall:
        """``tools/call``: decode the arguments with the tool's Struct, gate, run, classify.

        ``task_budget_s`` (a call running as a task, :mod:`coremetry.mcp.tasks`) replaces the
        tool's budget and the server maximum; the client's ``timeout_ms`` still shortens it.
        """
        tool = self._registry.tools.get(params.name)
        if tool is None:
            raise UnknownEntry(
                codes.INVALID_PARAMS, f"Unknown tool: {params.name}", {"name": params.name}
            )
        arguments = (
            EMPTY_OBJECT if isinstance(params.arguments, UnsetType) else bytes(params.arguments)
        )

        ctx = self._context(request, conn, tool.read_budget_s, params, task_budget_s=task_budget_s)
        audit = UNOBSERVED if self.observer is None else CallAudit("tool", tool.name, arguments)

        async def body() -> Reply:
            refusal = await self._pass_gate(request, conn, "tool", tool.name, tool.min_role, audit)
            if refusal is not None:
                return refusal
            try:
                run = tool.bind(arguments)
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
                bad = classify_tool_error(
                    msgspec.ValidationError(_arguments_message(exc, tool.args))
                )
                audit.outcome = "bad_args"
                return result_reply(
                    self._server_meta, request, _tool_error_result(bad, request.version)
                )
            try:
                output = await run(ctx)
            except ProtocolError as exc:
                audit.outcome = outcome_for_code(exc.code)
                return error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                err = self._classify_logged(exc, "tool", tool.name)
                audit.outcome = outcome_for_error(err)
                return result_reply(
                    self._server_meta, request, _tool_error_result(err, request.version)
                )
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "tool", tool.name, audit)
            return result_reply(self._server_meta, request, _tool_result(output, request.version))

        def on_timeout() -> Reply:
            return result_reply(
                self._server_meta, request, _tool_error_result(_budget_error(ctx), request.version)
            )

        return PendingCall(
            conn,
            request.id,
            body,
            deadline=ctx.deadline,
            on_timeout=on_timeout,
            context=ctx,
            audit=audit,
            observer=self.observer,
        )

    def _resource_not_found(self, request: Request, uri: str) -> ProtocolError:
        code = codes.INVALID_PARAMS if request.stateless else codes.RESOURCE_NOT_FOUND
        return UnknownEntry(code, f"Resource not found: {uri}", {"uri": uri})

    def read_resource(
        self, request: Request, params: ReadResourceParams, conn: Connection
    ) -> PendingCall:
        """``resources/read``: a static resource first, else the first matching template."""
        uri = params.uri
        found = self._registry.find_resource(uri)
        if found is None:
            raise self._resource_not_found(request, uri)
        entry, variables = found

        ctx = self._context(request, conn, entry.read_budget_s, params)
        audit = (
            UNOBSERVED if self.observer is None else CallAudit("resource", audit_name(entry), uri)
        )

        def failure(err: ToolError) -> Reply:
            audit.outcome = outcome_for_error(err)
            if err.error == ToolErrorKind.NOT_FOUND:
                missing = self._resource_not_found(request, uri)
                return error_reply(request.id, missing.code, missing.message, missing.data)
            return _rpc_error_for(request.id, err, {"uri": uri})

        async def body() -> Reply:
            refusal = await self._pass_gate(request, conn, "resource", uri, entry.min_role, audit)
            if refusal is not None:
                return refusal
            try:
                if isinstance(entry, Resource):
                    output = await entry.handler(uri, ctx)
                else:
                    output = await entry.handler(uri, variables, ctx)
            except ProtocolError as exc:
                audit.outcome = outcome_for_code(exc.code)
                return error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                return failure(self._classify_logged(exc, "resource", uri))
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "resource", uri, audit)
            contents = _resource_contents(uri, entry.mime_type, output)
            if not contents:
                empty = RuntimeError(f"resource handler for {uri!r} returned no contents")
                return failure(self._classify_logged(empty, "resource", uri))
            return result_reply(
                self._server_meta,
                request,
                ReadResourceResult(contents=contents),
                cache=self._read_ttl_ms,
            )

        def on_timeout() -> Reply:
            return failure(_budget_error(ctx))

        return PendingCall(
            conn,
            request.id,
            body,
            deadline=ctx.deadline,
            on_timeout=on_timeout,
            context=ctx,
            audit=audit,
            observer=self.observer,
        )

    def get_prompt(
        self, request: Request, params: GetPromptParams, conn: Connection
    ) -> PendingCall:
        """``prompts/get``: gate, check the required arguments, render."""
        prompt = self._registry.prompts.get(params.name)
        if prompt is None:
            raise UnknownEntry(
                codes.INVALID_PARAMS, f"Unknown prompt: {params.name}", {"name": params.name}
            )
        arguments = dict(params.arguments or {})

        ctx = self._context(request, conn, prompt.read_budget_s, params)
        audit = UNOBSERVED if self.observer is None else CallAudit("prompt", prompt.name, arguments)

        async def body() -> Reply:
            refusal = await self._pass_gate(
                request, conn, "prompt", prompt.name, prompt.min_role, audit
            )
            if refusal is not None:
                return refusal
            missing = [a.name for a in prompt.arguments if a.required and not arguments.get(a.name)]
            if missing:
                audit.outcome = "bad_args"
                return error_reply(
                    request.id,
                    codes.INVALID_PARAMS,
                    f"Missing required argument(s) for prompt {prompt.name!r}: "
                    + ", ".join(missing),
                    {"missing": list(missing)},
                )
            try:
                output = await prompt.handler(arguments, ctx)
            except ProtocolError as exc:
                audit.outcome = outcome_for_code(exc.code)
                return error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                err = self._classify_logged(exc, "prompt", prompt.name)
                audit.outcome = outcome_for_error(err)
                return _rpc_error_for(request.id, err, {"name": prompt.name})
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "prompt", prompt.name, audit)
            return result_reply(
                self._server_meta, request, _prompt_result(output, prompt.description)
            )

        def on_timeout() -> Reply:
            return _rpc_error_for(request.id, _budget_error(ctx), {"name": prompt.name})

        return PendingCall(
            conn,
            request.id,
            body,
            deadline=ctx.deadline,
            on_timeout=on_timeout,
            context=ctx,
            audit=audit,
            observer=self.observer,
        )

    def complete(self, request: Request, params: CompleteParams, conn: Connection) -> PendingCall:
        """``completion/complete``: at most 100 values from the entry's completer (none: empty)."""
        ref = params.ref
        completer = None
        if ref.type == "ref/prompt" and isinstance(ref.name, str):
            prompt = self._registry.prompts.get(ref.name)
            if prompt is None or not role_satisfies(conn.caller.role, prompt.min_role):
                raise ProtocolError(codes.INVALID_PARAMS, f"Unknown prompt: {ref.name}")
            completer = prompt.completer
        elif ref.type == "ref/resource" and isinstance(ref.uri, str):
            template = self._registry.templates.get(ref.uri)
            static = self._registry.resources.get(ref.uri)
            entry = template or static
            if entry is None or not role_satisfies(conn.caller.role, entry.min_role):
                raise ProtocolError(codes.INVALID_PARAMS, f"Unknown resource template: {ref.uri}")
            completer = template.completer if template is not None else None
        else:
            raise ProtocolError(
                codes.INVALID_PARAMS,
                f"Invalid params: unsupported completion ref type {ref.type!r} "
                "(expected ref/prompt with name or ref/resource with uri)",
            )
        context_args: Mapping[str, str] = {}
        if not isinstance(params.context, UnsetType) and params.context.arguments:
            context_args = params.context.arguments

        async def body() -> Reply:
            values: list[str] = []
            if completer is not None:
                with trio.move_on_after(self._max_budget_s):
                    try:
                        values = [
                            str(v)
                            for v in await completer(
                                params.argument.name, params.argument.value, context_args
                            )
                        ]
                    except Exception as exc:
                        self._classify_logged(exc, "completion", params.argument.name)
                        values = []
            shown = values[:_MAX_COMPLETION_VALUES]
            completion = Completion(
                values=shown,
                total=len(values),
                has_more=len(values) > len(shown),
            )
            return result_reply(self._server_meta, request, CompleteResult(completion=completion))

        return PendingCall(conn, request.id, body)


def _budget_error(ctx: CallContext) -> ToolError:
    base = classify_tool_error(trio.TooSlowError())
    budget_ms = round(ctx.budget_s * 1000)
    note = ctx.wait_note
    if note is None:
        return ToolError(
            error=base.error,
            retryable=base.retryable,
            hint=base.hint,
            detail=f"the call did not finish within its deadline ({budget_ms} ms)",
        )
    # Expired while waiting (e.g. for store admission): say what it waited for and what to do.
    return ToolError(
        error=base.error,
        retryable=base.retryable,
        hint=sanitize_detail(note.hint),
        detail=sanitize_detail(
            f"the call's deadline ({budget_ms} ms) expired while it waited: {note.detail}"
        ),
    )


def _tool_error_result(err: ToolError, version: str) -> CallToolResult:
    structured = at_least(version, V2025_06_18)
    return CallToolResult(
        content=[TextContent(text=tool_error_json(err))],
        structured_content=dict(tool_error_dict(err)) if structured else UNSET,
        is_error=True,
    )


def _tool_result(output: ToolOutput, version: str) -> CallToolResult:
    structured = at_least(version, V2025_06_18)
    if isinstance(output, CallToolResult):
        if not structured:
            output.structured_content = UNSET
        return output
    if isinstance(output, str):
        return CallToolResult(content=[TextContent(text=output)])
    if isinstance(output, Struct | dict):
        builtins = msgspec.to_builtins(output)
        text = ENCODER.encode(builtins).decode()
        return CallToolResult(
            content=[TextContent(text=text)],
            structured_content=builtins if structured and isinstance(builtins, dict) else UNSET,
        )
    content: list[Content] = list(output)
    return CallToolResult(content=content)


def _resource_contents(
    uri: str, mime_type: str, output: str | bytes | Sequence[ResourceContents] | None
) -> list[ResourceContents]:
    if output is None:
        return []
    if isinstance(output, str):
        return [TextResourceContents(uri=uri, mime_type=mime_type, text=output)]
    if isinstance(output, bytes):
        blob = base64.b64encode(output).decode("ascii")
        return [BlobResourceContents(uri=uri, mime_type=mime_type, blob=blob)]
    return list(output)


def _prompt_result(
    output: GetPromptResult | Sequence[PromptMessage] | str, description: str
) -> GetPromptResult:
    if isinstance(output, GetPromptResult):
        return output
    if isinstance(output, str):
        messages = [PromptMessage(role="user", content=TextContent(text=output))]
    else:
        messages = list(output)
    return GetPromptResult(messages=messages, description=description or UNSET)


_ERROR_CODES: Final[Mapping[str, int]] = {
    ToolErrorKind.BAD_ARGS: codes.INVALID_PARAMS,
    ToolErrorKind.NOT_FOUND: codes.INVALID_PARAMS,
}


def _rpc_error_for(request_id: RequestId, err: ToolError, extra: JsonObject) -> Reply:
    """A resource or prompt failure as a JSON-RPC error carrying the five-class object."""
    code = _ERROR_CODES.get(err.error, codes.INTERNAL_ERROR)
    data: JsonObject = dict(tool_error_dict(err))
    data.update(extra)
    return error_reply(request_id, code, f"{err.error}: {err.detail}", data)


_MISSING_FIELD = re.compile(r"Object missing required field `([^`]+)`(?: - at `\$([^`]*)`)?")


def _arguments_message(exc: Exception, args: type[Struct]) -> str:
    """Word a decode failure of tool ``arguments`` so that it names the field's JSON path.

    msgspec names the path for a wrong type (``- at `$.text```) but, for a missing top-level
    field, only the field: make both say where, e.g. "missing required argument `text` at
    `$.text`". A bad value of an enumerated field also lists the accepted values (issue 21).
    """
    if isinstance(exc, RecursionError):
        return "Invalid arguments: JSON nested too deeply"
    text = str(exc)
    missing = _MISSING_FIELD.fullmatch(text)
    if missing is not None:
        field, parent = missing.group(1), missing.group(2) or ""
        return f"Invalid arguments: missing required argument `{field}` at `${parent}.{field}`"
    return f"Invalid arguments: {decode_error_message(exc, args)}"
