"""The dispatcher: bytes in, one JSON-RPC answer (or none) out, for any transport.

The :class:`Server` owns the registries, the call gate and the routing of every MCP method. A
transport hands it each message with the :class:`Connection` it arrived on and gets back:

- ``None`` — nothing to send (a notification, a client response, a cancelled call);
- a :class:`Reply` — the encoded answer plus the HTTP status an HTTP transport should use;
- a :class:`PendingCall` — a gated call (``tools/call``, ``resources/read``, ``prompts/get``,
  ``completion/complete``) to ``await .run()``, typically in a task of the connection's nursery,
  so that ``notifications/cancelled`` can reach it while it runs.

:meth:`Server.handle` does all of that in one await, for request/response transports.

Guarantees:

- Request ids are echoed exactly (JSON type and value); an unreadable id is answered ``null``.
- Decoding is two-stage (``shared/STYLE.md`` habit 4): not JSON -> ``-32700``; not a valid
  envelope -> ``-32600``; params that do not fit the method -> ``-32602`` with msgspec's message,
  which names the field. No input makes :meth:`Server.receive` raise.
- Every gated call runs in its own cancel scope, registered under its request id before the call
  starts; ``notifications/cancelled`` cancels exactly that scope and no answer is sent. A cancel
  that races the answer yields the answer or nothing, never both and never two answers. The
  call's deadline is ``min(entry budget, server maximum, _meta["coremetry/timeout_ms"])``; expiry
  is the ``timeout`` tool-error class (spec: ``basic/utilities/cancellation``; our contract:
  ``shared/DESIGN.md`` §3).
- Era selection (``shared/reference/mcp-spec.md`` §1'): a request whose ``_meta`` names a
  protocol version (or that arrives on a connection pinned to 2026-07-28) is served statelessly —
  ``server/discover``, ``resultType`` on every result, ``ttlMs``/``cacheScope`` on lists and
  reads, ``-32022``/``-32602`` for a bad or missing ``_meta`` (HTTP 400), removed methods
  ``-32601`` (HTTP 404) whatever their ``_meta``. Otherwise the handshake era applies:
  ``initialize`` negotiates the revision of the connection.

Call observer (the audit hook):

- :meth:`Server.set_call_observer` installs one synchronous :data:`CallObserver`. It receives
  exactly one :class:`CallRecord` per gated call — every ``tools/call``, ``resources/read`` and
  ``prompts/get`` request, however it ends — and nothing for any other method (``initialize``,
  ``ping``, the lists, completion, listen) nor for a notification.
- The outcome: ``ok`` (a result, including a 2026-07-28 ``input_required`` result); for an
  ``isError`` result or a resource/prompt failure its class (``timeout``,
  ``backend_unavailable``, ``bad_args``, ``not_found``, ``internal``); ``denied`` (gate -32001)
  and ``rate_limited`` (any other gate refusal, -32000); ``bad_args`` for other JSON-RPC errors
  (undecodable params, a missing prompt argument, a bad ``_meta``, an id already in flight);
  ``not_found`` for an unknown tool, prompt or resource; ``timeout`` when the deadline expired;
  ``cancelled`` when the client cancelled (no answer is sent) or the call's task was torn down.
- Calls refused before they run (unknown name, undecodable params) are recorded from
  :meth:`Server.receive` with ``duration_ms == 0.0``; every other call when
  :meth:`PendingCall.run` ends (``time.perf_counter`` for the duration, ``time.time_ns`` for the
  start). A :class:`PendingCall` that is never run records nothing.
- ``name`` identifies the entry (a templated read is recorded under its URI template, not the
  expanded URI) and ``arguments_sha256`` is a digest, never the arguments: SHA-256 of the raw
  ``arguments`` JSON bytes as sent (``{}`` when absent) for tools, of the URI (UTF-8) for
  resources, of the canonical JSON (sorted keys, compact) of the arguments for prompts, and of
  the raw ``params`` when they could not be decoded at all.
- The observer runs on the trio loop, in the call's task, just before the answer is handed to
  the transport: it must not block (queue the record and return). An exception out of it is
  logged and never changes the call's answer.
- Cost: without an observer a call pays a few ``is None`` tests (no allocation, no clock read);
  the clock reads and the record are paid only when an observer is set. The digest is not
  computed on the call's path: the record carries the arguments privately
  (:class:`CallArguments`) and ``arguments_sha256`` is computed when first read — by the audit
  log, in its writer thread. Arguments over :data:`LAZY_DIGEST_MAX_BYTES` are digested when the
  call is set up, so a queued record never holds more than that much of them.
"""

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import Final, Literal, TypeVar, get_args

import msgspec
import trio
from msgspec import UNSET, Raw, Struct, UnsetType

from . import codes
from .gate import ANONYMOUS_VIEWER, Caller, CallGate, CallKind, Denied, GateCall, role_gate
from .gate import role_satisfies as _role_ok
from .registry import (
    InputRequired,
    Prompt,
    Resource,
    ResourceTemplate,
    Tool,
    ToolOutput,
)
from .tool_errors import (
    ToolError,
    ToolErrorKind,
    classify_tool_error,
    tool_error_dict,
    tool_error_json,
)
from .versions import (
    ALL_VERSIONS,
    LATEST_HANDSHAKE,
    STATELESS_VERSIONS,
    V2025_03_26,
    V2025_06_18,
    at_least,
    is_stateless,
    negotiate,
)
from .wire import (
    ENCODER,
    INBOUND_DECODER,
    LOG_LEVELS,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    BlobResourceContents,
    CallToolParams,
    CallToolResult,
    CancelledParams,
    CompleteParams,
    CompleteResult,
    Completion,
    Content,
    DiscoverResult,
    EmptyParams,
    EmptyResult,
    ErrorObject,
    ErrorResponse,
    GetPromptParams,
    GetPromptResult,
    Implementation,
    InboundMessage,
    InitializeParams,
    InitializeResult,
    InputRequiredResult,
    JsonObject,
    ListChangedCapability,
    ListChangedParams,
    ListenParams,
    ListParams,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    LoggingMessageParams,
    LogLevel,
    Notification,
    OutboundRequest,
    ProgressParams,
    ProgressToken,
    PromptArgumentInfo,
    PromptInfo,
    PromptMessage,
    ReadResourceParams,
    ReadResourceResult,
    RequestId,
    RequestMeta,
    ResourceContents,
    ResourceInfo,
    ResourcesCapability,
    ResourceTemplateInfo,
    ResourceUpdatedParams,
    Result,
    ResultResponse,
    ServerCapabilities,
    SetLevelParams,
    SubscriptionAcknowledgedParams,
    SubscriptionFilter,
    TextContent,
    TextResourceContents,
    ToolInfo,
    _RetryableParams,
)

log = logging.getLogger("coremetry.mcp")

Send = Callable[[bytes], Awaitable[None]]
"""Writes one encoded JSON-RPC message to the peer. Must be safe to call from concurrent tasks
(transports serialise writes, e.g. through a memory channel to one writer task)."""

_EMPTY_OBJECT: Final = b"{}"
_MAX_COMPLETION_VALUES: Final = 100


_ArgsT = TypeVar("_ArgsT", bound=Struct)


class Reply(Struct, frozen=True):
    """An encoded answer and the HTTP status an HTTP transport should send it with.

    ``http_status`` is 200 except: parse errors and invalid requests (400); and, for stateless
    (2026-07-28) requests, ``-32601`` (404) and the ``-32602``/``-32020``/``-32021``/``-32022``
    ``_meta`` and header errors (400) (2026-07-28 ``basic/transports/streamable-http``).
    """

    body: bytes
    http_status: int = 200


class ProtocolError(Exception):
    """Raised inside the dispatcher when a request must be answered with a JSON-RPC error."""

    def __init__(
        self,
        code: int,
        message: str,
        data: JsonObject | None = None,
        *,
        http_status: int = 200,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


CallOutcome = Literal[
    "ok",
    "timeout",
    "backend_unavailable",
    "bad_args",
    "not_found",
    "internal",
    "denied",
    "rate_limited",
    "cancelled",
]
"""How a gated call ended, as the call observer (and the audit log) records it."""

CALL_OUTCOMES: Final[tuple[CallOutcome, ...]] = get_args(CallOutcome)
"""Every :data:`CallOutcome`, successful first, then the five tool-error classes, then refusals."""


class CallRecord(Struct, frozen=True, kw_only=True):
    """What the call observer learns about one gated call once it has ended.

    Attributes:
        kind: ``"tool"``, ``"resource"`` or ``"prompt"``.
        name: the tool or prompt name; for a resource, the static URI, the URI *template* of a
            templated read (its variables are arguments: only their digest is recorded), or the
            URI as requested when no entry matches; ``""`` when the params could not be
            decoded.
        caller: who called (the connection's identity).
        transport: the connection's transport (``"stdio"``, ``"http"``, ``"sse"``, ``"ws"``...).
        outcome: how it ended; see the module docstring.
        duration_ms: from the start of the call to its end (monotonic ``time.perf_counter``),
            in milliseconds; ``0.0`` for a call refused before it ran.
        arguments: the call's arguments as an observer may see them: only as their digest,
            :attr:`arguments_sha256` (see :class:`CallArguments`).
        started_at_unix_nano: wall-clock start of the call, in ns since the Unix epoch.
        request_id: the JSON-RPC id as the client sent it.
    """

    kind: CallKind
    name: str
    caller: Caller
    transport: str
    outcome: CallOutcome
    duration_ms: float
    arguments: "CallArguments"
    started_at_unix_nano: int
    request_id: RequestId

    @property
    def arguments_sha256(self) -> str:
        """Hex SHA-256 of the arguments (see the module docstring), never the arguments.

        Computed on first access (by the audit log: in its writer's thread), then kept.
        """
        return self.arguments.sha256()


CallObserver = Callable[[CallRecord], None]
"""Receives one :class:`CallRecord` per gated call. Synchronous and called on the trio loop: it
must not block or await anything (queue the record and return); exceptions are logged and
ignored."""


ArgumentsPayload = bytes | str | dict[str, str]
"""What a call's arguments are digested from: the raw ``arguments`` JSON bytes of a tool call,
the URI of a read, the arguments of a prompt (digested as canonical JSON)."""

LAZY_DIGEST_MAX_BYTES: Final = 1024
"""Arguments up to this size are digested lazily, off the call's path (see
:class:`CallArguments`); larger ones are digested when the call is set up, so that records
waiting in an observer's queue never hold more than this much of arguments each."""


def _payload_size(payload: ArgumentsPayload) -> int:
    """The payload's size for :data:`LAZY_DIGEST_MAX_BYTES`: bytes, or characters of text."""
    if isinstance(payload, dict):
        return sum(len(key) + len(value) for key, value in payload.items())
    return len(payload)


def _digest(payload: ArgumentsPayload) -> str:
    """Hex SHA-256 of the raw bytes, the UTF-8 text, or the canonical JSON of a prompt's args."""
    if isinstance(payload, str):
        data = payload.encode("utf-8", "surrogatepass")
    elif isinstance(payload, dict):
        data = msgspec.json.encode(payload, order="sorted")
    else:
        data = payload
    return hashlib.sha256(data).hexdigest()


class CallArguments:
    """The arguments of one gated call, as a :class:`CallRecord` carries them.

    Its only public face is :meth:`sha256`, the hex SHA-256 digest of the arguments (see the
    module docstring for what is digested). The raw payload is kept privately until the digest
    is first asked for — normally by the audit writer, in its worker thread, so a trivial call
    does not pay for hashing — then dropped. Payloads larger than
    :data:`LAZY_DIGEST_MAX_BYTES` are digested at once (bounding what a queued record holds).
    The repr never shows the arguments.
    """

    __slots__ = ("_payload", "_sha256")

    def __init__(self, payload: ArgumentsPayload) -> None:
        self._payload: ArgumentsPayload = payload
        self._sha256: str | None = None
        if _payload_size(payload) > LAZY_DIGEST_MAX_BYTES:
            self.sha256()

    def sha256(self) -> str:
        """Hex SHA-256 of the arguments (computed on the first call, from any thread)."""
        # Safe from several threads at once: the payload is read before the digest, and is
        # dropped only after the digest is stored, so whoever sees no digest yet still holds
        # the payload (two racing threads compute the same string).
        payload = self._payload
        digest = self._sha256
        if digest is None:
            digest = self._sha256 = _digest(payload)
            self._payload = b""
        return digest

    def __repr__(self) -> str:
        digest = self._sha256
        return "CallArguments(<not digested yet>)" if digest is None else f"CallArguments({digest})"


class _CallAudit(CallArguments):
    """Internal: what a gated call's body tells the observer (the outcome), and its arguments.

    Being the record's :class:`CallArguments` itself saves an allocation per observed call.
    """

    __slots__ = ("kind", "name", "outcome")

    def __init__(self, kind: CallKind, name: str, payload: ArgumentsPayload) -> None:
        self.kind: CallKind = kind
        self.name = name
        self.outcome: CallOutcome = "ok"
        self._payload = payload
        self._sha256 = None
        size = _payload_size(payload) if isinstance(payload, dict) else len(payload)
        if size > LAZY_DIGEST_MAX_BYTES:
            self.sha256()


_UNOBSERVED: Final = _CallAudit("tool", "", b"")
"""Shared stand-in written to by calls nobody observes (its content is never read): it saves
an allocation per call on the path without an observer."""


def _audit_name(entry: Resource | ResourceTemplate) -> str:
    # A templated read is recorded under its template: the variables are arguments, which the
    # record carries only as a digest (of the whole URI).
    return entry.uri if isinstance(entry, Resource) else entry.uri_template


def _notify_observer(observer: CallObserver, record: CallRecord) -> None:
    # The observer is the app's audit hook: its failure must never break or change the call.
    try:
        observer(record)
    except Exception:
        _observer_failed(record)


def _observer_failed(record: CallRecord) -> None:
    """Log the exception being handled, an observer's failure (never changes the call)."""
    log.exception(
        "call observer failed for %s %r (outcome %s)", record.kind, record.name, record.outcome
    )


def _is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is trio's cancellation (alone or as every leaf of a group)."""
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return isinstance(exc, trio.Cancelled)


def _outcome_for_code(code: int) -> CallOutcome:
    """The outcome class of a JSON-RPC error answering a gated call."""
    if code == codes.FORBIDDEN:
        return "denied"
    if code == codes.RATE_LIMITED:
        return "rate_limited"
    if code == codes.RESOURCE_NOT_FOUND:
        return "not_found"
    if code == codes.INTERNAL_ERROR:
        return "internal"
    return "bad_args"


_ERROR_OUTCOMES: Final[Mapping[str, CallOutcome]] = {
    ToolErrorKind.TIMEOUT: "timeout",
    ToolErrorKind.BACKEND_UNAVAILABLE: "backend_unavailable",
    ToolErrorKind.BAD_ARGS: "bad_args",
    ToolErrorKind.NOT_FOUND: "not_found",
    ToolErrorKind.INTERNAL: "internal",
}


def _outcome_for_error(err: ToolError) -> CallOutcome:
    """The outcome class of a classified failure (one of the five tool-error classes)."""
    return _ERROR_OUTCOMES.get(err.error, "internal")


class _UnknownEntry(ProtocolError):
    """Internal: raised when a gated call names a tool, prompt or resource we do not serve."""


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


class _Request(Struct, frozen=True, kw_only=True):
    """Internal: what routing learned about one request."""

    id: RequestId
    method: str
    version: str
    stateless: bool
    meta: RequestMeta


class CallContext:
    """What a handler may use while it runs: identity, deadline, progress and logging.

    Attributes:
        request_id: the JSON-RPC id of the call.
        caller: who is calling.
        protocol_version: the revision in use for this request.
        deadline: the call's absolute deadline on trio's clock (``trio.current_time()``), s.
        budget_s: the call's whole budget in seconds (the deadline minus the start).
        stateless: the request is served in the 2026-07-28 era.
        client_capabilities: what the client declared (``initialize`` or the request's
            ``_meta``); a handler must not use a client feature missing here.
        client_capabilities_known: ``client_capabilities`` really is the client's declaration
            (from the request's ``_meta``, or an ``initialize`` on this connection). False for a
            handshake-era request on a transport without sessions (stateless HTTP): the
            declaration was made on another request and is unknown here, so an empty
            ``client_capabilities`` does not mean "declared nothing".
        input_responses: 2026-07-28 MRTR: the client's answers to an earlier
            :class:`~coremetry.mcp.registry.InputRequired`, by key (empty on a first attempt).
        request_state: 2026-07-28 MRTR: the ``requestState`` echoed by the client, as sent
            (verify it with :meth:`open_state` before trusting it).
    """

    def __init__(
        self,
        *,
        request_id: RequestId,
        caller: Caller,
        protocol_version: str,
        deadline: float,
        budget_s: float,
        progress_token: ProgressToken | UnsetType,
        log_threshold: LogLevel | None,
        send: Send | None,
        server: "Server",
        stateless: bool = False,
        client_capabilities: JsonObject | None = None,
        client_capabilities_known: bool = True,
        input_responses: JsonObject | None = None,
        request_state: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.caller = caller
        self.protocol_version = protocol_version
        self.deadline = deadline
        self.budget_s = budget_s
        self.stateless = stateless
        self.client_capabilities: JsonObject = client_capabilities or {}
        self.client_capabilities_known = client_capabilities_known
        self.input_responses: JsonObject = input_responses or {}
        self.request_state = request_state
        self._server = server
        self._progress_token = progress_token
        self._log_threshold = log_threshold
        self._send = send
        self._last_progress = -math.inf
        self._closed = False

    def remaining_s(self) -> float:
        """Seconds left before the call's deadline (never negative)."""
        return max(0.0, self.deadline - trio.current_time())

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send ``notifications/progress`` for this call (``basic/utilities/progress``).

        A no-op when the client sent no ``_meta.progressToken``, when the transport cannot carry
        notifications, or once the call has completed (nothing is sent after the answer).

        Args:
            progress: work done so far; must strictly increase from call to call.
            total: total work, if known (same unit as ``progress``).
            message: a short human-readable status (2025-03-26+; dropped for older revisions).

        Raises:
            ValueError: ``progress`` did not increase.
        """
        if isinstance(self._progress_token, UnsetType) or self._closed or self._send is None:
            return
        if not progress > self._last_progress:
            raise ValueError(
                f"progress must strictly increase: {progress} after {self._last_progress}"
            )
        self._last_progress = progress
        params = ProgressParams(
            progress_token=self._progress_token,
            progress=progress,
            total=UNSET if total is None else total,
            message=(
                UNSET
                if message is None or not at_least(self.protocol_version, V2025_03_26)
                else message
            ),
        )
        await self._notify("notifications/progress", params)

    async def log(self, level: LogLevel, data: object, logger: str | None = None) -> None:
        """Send ``notifications/message`` when ``level`` is at or above the client's threshold.

        Handshake era: the threshold is the connection's ``logging/setLevel`` (else the server
        default). 2026-07-28: only when the request's ``_meta`` carried a ``logLevel``
        (``server/utilities/logging``). Never send secrets or personal data.

        Args:
            level: RFC 5424 severity.
            data: any JSON-encodable value.
            logger: the logger's name, optional.
        """
        threshold = self._log_threshold
        if self._closed or self._send is None or threshold is None:
            return
        if LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
            return
        params = LoggingMessageParams(
            level=level, data=data, logger=UNSET if logger is None else logger
        )
        await self._notify("notifications/message", params)

    async def _notify(self, method: str, params: Struct) -> None:
        assert self._send is not None
        # A peer that is gone makes the transport cancel the call; nothing more to do here.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._send(ENCODER.encode(Notification(method=method, params=params)))

    def close(self) -> None:
        """Mark the call complete: later progress and log calls send nothing."""
        self._closed = True

    async def request(self, method: str, params: JsonObject) -> JsonObject:
        """Send a server-to-client request and wait for its result (handshake era).

        Used for ``sampling/createMessage``, ``elicitation/create`` and ``roots/list``; over
        HTTP it rides the call's SSE response stream and the client answers with a new POST
        (2025-03-26+ ``basic/transports``). In 2026-07-28 use
        :class:`~coremetry.mcp.registry.InputRequired` instead (the spec forbids requests).

        Args:
            method: the request's method.
            params: its params.

        Returns:
            The client's ``result`` object.

        Raises:
            ClientRequestError: the client answered with an error, the connection cannot carry
                requests (a JSON-only HTTP answer, or the stateless era), or it closed.
        """
        if self._send is None or self.stateless or self._closed:
            raise ClientRequestError(
                codes.INTERNAL_ERROR,
                f"cannot send {method} to this client (no stream to carry server requests)",
            )
        return await self._server._outbound_request(self._send, method, params)

    def seal_state(self, data: bytes) -> str:
        """Integrity-protect opaque state for an MRTR ``requestState`` (HMAC-SHA256).

        Returns:
            A URL-safe token carrying ``data`` (readable by the client, not forgeable).
        """
        return self._server.seal_state(data)

    def open_state(self, token: str) -> bytes | None:
        """Verify a ``requestState`` from :meth:`seal_state`.

        Returns:
            The sealed data, or ``None`` when the token was altered or is not ours.
        """
        return self._server.open_state(token)


class ClientRequestError(Exception):
    """Raised by :meth:`CallContext.request` when the client answers with an error.

    Also raised when no answer can come (no stream, stateless era). ``code`` and ``message`` are
    the client's JSON-RPC error, or ours.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PendingCall:
    """A gated call routed by :meth:`Server.receive`, registered under its request id.

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
        context: "CallContext | None" = None,
        audit: _CallAudit | None = None,
        observer: CallObserver | None = None,
    ) -> None:
        self.conn = conn
        self.request_id = request_id
        self._body = body
        self._on_timeout = on_timeout
        self._context = context
        self._client_cancelled = False
        self._audit = _UNOBSERVED if audit is None else audit
        self._observer = None if audit is None or audit is _UNOBSERVED else observer
        self.scope = trio.CancelScope(deadline=deadline)

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
                with self.scope:
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
            with self.scope:
                reply = await self._body()
        except BaseException as exc:
            self._finish()
            # Torn down from outside (connection closed, server shutdown), or a bug.
            outcome: CallOutcome = "cancelled" if _is_cancellation(exc) else "internal"
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
            _observer_failed(record)
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
        _notify_observer(observer, record)


class PendingBatch:
    """A 2025-03-26 JSON-RPC batch; ``await run()`` answers it as one array (or ``None``)."""

    def __init__(self, server: "Server", items: list[Raw], conn: Connection) -> None:
        self._server = server
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
            reply = await self._server.handle(bytes(item), self._conn, in_batch=True)
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


Outcome = Reply | PendingCall | PendingBatch | None
"""What :meth:`Server.receive` returns for one inbound message."""


def _error_reply(
    request_id: RequestId | None,
    code: int,
    message: str,
    data: JsonObject | None = None,
    http_status: int = 200,
) -> Reply:
    error = ErrorObject(code=code, message=message, data=UNSET if data is None else data)
    return Reply(ENCODER.encode(ErrorResponse(id=request_id, error=error)), http_status)


class _MethodOnly(Struct):
    method: object = None


_BATCH_PEEK: Final = msgspec.json.Decoder(_MethodOnly)


def _looks_like_response(data: bytes) -> bool:
    """Whether an envelope that failed validation is a JSON-RPC response (never answered)."""
    try:
        obj = msgspec.json.decode(data, type=dict[str, Raw])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    return "method" not in obj and ("result" in obj or "error" in obj)


_MISSING_FIELD = re.compile(r"Object missing required field `([^`]+)`(?: - at `\$([^`]*)`)?")


def _arguments_message(exc: Exception) -> str:
    """Word a decode failure of tool ``arguments`` so that it names the field's JSON path.

    msgspec names the path for a wrong type (``- at `$.text```) but, for a missing top-level
    field, only the field: make both say where, e.g. "missing required argument `text` at
    `$.text`".
    """
    if isinstance(exc, RecursionError):
        return "Invalid arguments: JSON nested too deeply"
    text = str(exc)
    missing = _MISSING_FIELD.fullmatch(text)
    if missing is not None:
        field, parent = missing.group(1), missing.group(2) or ""
        return f"Invalid arguments: missing required argument `{field}` at `${parent}.{field}`"
    return f"Invalid arguments: {text}"


def _readable_id(data: bytes) -> RequestId | None:
    """Best effort: the ``id`` of a message whose envelope failed validation (else ``None``)."""
    try:
        obj = msgspec.json.decode(data, type=dict[str, Raw])
        raw_id = obj.get("id")
        if raw_id is None:
            return None
        return msgspec.json.decode(raw_id, type=RequestId)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


_CURSOR_PREFIX: Final = "c1:"


def _encode_cursor(kind: str, offset: int) -> str:
    raw = f"{_CURSOR_PREFIX}{kind}:{offset}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_cursor(kind: str, cursor: str | None, total: int) -> int:
    """Offset of an opaque cursor for list ``kind``; ``None`` is the first page.

    Raises:
        ProtocolError: ``-32602`` for a cursor we did not issue for this list.
    """
    if cursor is None:
        return 0
    offset = -1
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
        prefix, cursor_kind, offset_text = text.rsplit(":", 2)
        if prefix + ":" == _CURSOR_PREFIX and cursor_kind == kind:
            offset = int(offset_text)
    except (ValueError, UnicodeError, binascii.Error):
        offset = -1
    if not 0 < offset <= total:
        raise ProtocolError(codes.INVALID_PARAMS, f"Invalid cursor for {kind}/list: {cursor!r}")
    return offset


class _Route(Struct, frozen=True):
    """Internal: in which eras a method exists."""

    handshake: bool
    stateless: bool


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

    Raises:
        ValueError: a non-positive budget or page size.
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
        self._tools: dict[str, Tool[Struct]] = {}
        self._resources: dict[str, Resource] = {}
        self._templates: dict[str, ResourceTemplate] = {}
        self._prompts: dict[str, Prompt] = {}
        self._gate: CallGate = role_gate
        self._observer: CallObserver | None = None
        self._state_key = secrets.token_bytes(32) if state_key is None else state_key
        self._outbound: dict[RequestId, trio.MemorySendChannel[tuple[Raw | None, Raw | None]]] = {}
        self._outbound_seq = 0
        self._changes: list[tuple[str, str]] = []
        self._max_changes = 1024
        self._change_seq = 0
        self._change_event = trio.Event()
        self._subscriptions_ended = False
        self._server_meta: JsonObject = {META_SERVER_INFO: msgspec.to_builtins(self.info)}

    # -- registries --------------------------------------------------------------------------

    def register_tool(self, tool: Tool[_ArgsT]) -> None:
        """Register a tool; a duplicate name logs a warning and the last registration wins."""
        if tool.name in self._tools:
            log.warning("tool %r registered twice; the last registration wins", tool.name)
        self._tools[tool.name] = tool

    def register_resource(self, resource: Resource) -> None:
        """Register a static resource; a duplicate URI logs a warning and the last one wins."""
        if resource.uri in self._resources:
            log.warning("resource %r registered twice; the last registration wins", resource.uri)
        self._resources[resource.uri] = resource

    def register_resource_template(self, template: ResourceTemplate) -> None:
        """Register a resource template; a duplicate template string: warning, last one wins."""
        if template.uri_template in self._templates:
            log.warning(
                "resource template %r registered twice; the last registration wins",
                template.uri_template,
            )
        self._templates[template.uri_template] = template

    def register_prompt(self, prompt: Prompt) -> None:
        """Register a prompt; a duplicate name logs a warning and the last registration wins."""
        if prompt.name in self._prompts:
            log.warning("prompt %r registered twice; the last registration wins", prompt.name)
        self._prompts[prompt.name] = prompt

    def tool_count(self) -> int:
        """Number of registered tools."""
        return len(self._tools)

    def resource_count(self) -> tuple[int, int]:
        """Numbers of registered (static resources, resource templates)."""
        return len(self._resources), len(self._templates)

    def prompt_count(self) -> int:
        """Number of registered prompts."""
        return len(self._prompts)

    def tools(self) -> Sequence[Tool[Struct]]:
        """The registered tools, in registration order."""
        return tuple(self._tools.values())

    def visible_counts(self, role: str) -> dict[str, int]:
        """How many entries of each kind a caller with ``role`` sees in the list methods.

        Returns:
            ``{"tools": n, "resources": n, "resource_templates": n, "prompts": n}``.
        """
        return {
            "tools": sum(_role_ok(role, t.min_role) for t in self._tools.values()),
            "resources": sum(_role_ok(role, r.min_role) for r in self._resources.values()),
            "resource_templates": sum(_role_ok(role, t.min_role) for t in self._templates.values()),
            "prompts": sum(_role_ok(role, p.min_role) for p in self._prompts.values()),
        }

    def set_call_gate(self, gate: CallGate) -> None:
        """Replace the call gate.

        The default, :func:`~coremetry.mcp.gate.role_gate`, checks roles only. The gate is
        consulted before every ``tools/call``, ``resources/read`` and ``prompts/get``.
        """
        self._gate = gate

    def set_call_observer(self, observer: CallObserver | None) -> None:
        """Install (or, with ``None``, remove) the call observer — the audit hook.

        ``observer(record)`` is called once per ``tools/call``, ``resources/read`` and
        ``prompts/get``, when the call ends, with a :class:`CallRecord` (see the module
        docstring for the outcomes). It runs synchronously on the trio loop and must not block;
        an exception out of it is logged and does not affect the call. Calls already in flight
        keep the observer they started with.
        """
        self._observer = observer

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

    def receive(self, data: bytes, conn: Connection, *, in_batch: bool = False) -> Outcome:
        """Decode and route one inbound message without blocking.

        Notifications take effect at once (so a cancel is never queued behind other work);
        requests that need no I/O are answered at once; gated calls are registered in
        ``conn.in_flight`` and returned as a :class:`PendingCall` to run.

        Args:
            data: the message's bytes.
            conn: the connection it arrived on.
            in_batch: internal; the message is an element of a batch.

        Returns:
            See :data:`Outcome`. Never raises for any input.
        """
        if not data.isascii():
            # msgspec validates the UTF-8 of what it decodes into str, not of what it skips or
            # keeps as Raw; JSON text must be UTF-8 throughout (RFC 8259 §8.1).
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                return _error_reply(
                    None,
                    codes.PARSE_ERROR,
                    "Parse error: the message is not valid UTF-8",
                    http_status=400,
                )
        try:
            msg = INBOUND_DECODER.decode(data)
        except msgspec.ValidationError as exc:
            return self._invalid_message(data, conn, exc, in_batch=in_batch)
        except msgspec.DecodeError as exc:
            return _error_reply(None, codes.PARSE_ERROR, f"Parse error: {exc}", http_status=400)
        except RecursionError:
            return _error_reply(
                None, codes.PARSE_ERROR, "Parse error: JSON nested too deeply", http_status=400
            )
        try:
            return self._route(msg, conn, in_batch=in_batch)
        except ProtocolError as exc:
            request_id = msg.id if not isinstance(msg.id, UnsetType) else None
            if request_id is None:
                return None
            if self._observer is not None:
                outcome: CallOutcome = (
                    "not_found" if isinstance(exc, _UnknownEntry) else _outcome_for_code(exc.code)
                )
                self._observe_refusal(msg, conn, request_id, outcome)
            return _error_reply(request_id, exc.code, exc.message, exc.data, exc.http_status)
        except Exception:
            incident = secrets.token_hex(4)
            log.exception("internal error routing a message (incident %s)", incident)
            request_id = msg.id if not isinstance(msg.id, UnsetType) else None
            if request_id is None:
                return None
            if self._observer is not None:
                self._observe_refusal(msg, conn, request_id, "internal")
            return _error_reply(
                request_id, codes.INTERNAL_ERROR, f"Internal error (incident {incident})"
            )

    def _observe_refusal(
        self, msg: InboundMessage, conn: Connection, request_id: RequestId, outcome: CallOutcome
    ) -> None:
        """Record a gated call answered with an error before it could run (error path only)."""
        observer = self._observer
        kind = _OBSERVED.get(msg.method) if isinstance(msg.method, str) else None
        if observer is None or kind is None:
            return
        raw = _EMPTY_OBJECT if isinstance(msg.params, UnsetType) else bytes(msg.params)
        name = ""
        payload: ArgumentsPayload = raw
        try:
            decoded = _decode_params(str(msg.method), raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            decoded = None
        if isinstance(decoded, CallToolParams):
            name = decoded.name
            payload = (
                _EMPTY_OBJECT
                if isinstance(decoded.arguments, UnsetType)
                else bytes(decoded.arguments)
            )
        elif isinstance(decoded, ReadResourceParams):
            name = payload = decoded.uri
        elif isinstance(decoded, GetPromptParams):
            name = decoded.name
            payload = dict(decoded.arguments or {})
        record = CallRecord(
            kind=kind,
            name=name,
            caller=conn.caller,
            transport=conn.transport,
            outcome=outcome,
            duration_ms=0.0,
            arguments=CallArguments(payload),
            started_at_unix_nano=time.time_ns(),
            request_id=request_id,
        )
        _notify_observer(observer, record)

    def _invalid_message(
        self, data: bytes, conn: Connection, exc: msgspec.ValidationError, *, in_batch: bool
    ) -> Outcome:
        stripped = data.lstrip()
        if stripped.startswith(b"["):
            return self._batch(data, conn, in_batch=in_batch)
        if _looks_like_response(data):
            return None  # a response (e.g. an error with "id": null) is never answered
        return _error_reply(
            _readable_id(data), codes.INVALID_REQUEST, f"Invalid Request: {exc}", http_status=400
        )

    def _batch(self, data: bytes, conn: Connection, *, in_batch: bool) -> Outcome:
        try:
            items = msgspec.json.decode(data, type=list[Raw])
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            RecursionError,
        ) as exc:  # pragma: no cover
            return _error_reply(None, codes.PARSE_ERROR, f"Parse error: {exc}", http_status=400)
        if in_batch or conn.protocol_version != V2025_03_26:
            return _error_reply(
                None,
                codes.INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are only accepted at protocol revision "
                "2025-03-26; send one message per request",
                http_status=400,
            )
        if not items:
            return _error_reply(
                None, codes.INVALID_REQUEST, "Invalid Request: empty batch", http_status=400
            )
        for item in items:
            try:
                method = _BATCH_PEEK.decode(item).method
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue  # answered per element
            if method == "initialize":
                # 2025-03-26 basic/lifecycle: initialize MUST NOT be part of a batch. Refuse the
                # whole batch before anything in it runs.
                return _error_reply(
                    None,
                    codes.INVALID_REQUEST,
                    "Invalid Request: initialize must not be part of a JSON-RPC batch",
                    http_status=400,
                )
        return PendingBatch(self, items, conn)

    # -- routing ---------------------------------------------------------------------------------

    def _route(self, msg: InboundMessage, conn: Connection, *, in_batch: bool) -> Outcome:
        if msg.jsonrpc != "2.0":
            raise ProtocolError(
                codes.INVALID_REQUEST,
                f'Invalid Request: "jsonrpc" must be "2.0", got {msg.jsonrpc!r}',
                http_status=400,
            )
        if isinstance(msg.method, UnsetType):
            if isinstance(msg.id, UnsetType) or (
                isinstance(msg.result, UnsetType) and isinstance(msg.error, UnsetType)
            ):
                raise ProtocolError(
                    codes.INVALID_REQUEST,
                    'Invalid Request: missing "method"',
                    http_status=400,
                )
            self._deliver_response(msg.id, msg.result, msg.error)
            return None  # a client's response to a server request: nothing to answer
        params = _EMPTY_OBJECT if isinstance(msg.params, UnsetType) else bytes(msg.params)
        if isinstance(msg.id, UnsetType):
            self._notification(msg.method, params, conn)
            return None
        return self._request(msg.id, msg.method, params, conn, in_batch=in_batch)

    def _notification(self, method: str, params: bytes, conn: Connection) -> None:
        if method == "notifications/initialized":
            conn.initialized = True
        elif method == "notifications/cancelled":
            try:
                cancelled = msgspec.json.decode(params, type=CancelledParams)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return  # invalid cancellations SHOULD be ignored
            call = conn.in_flight.get(cancelled.request_id)
            if call is not None:
                call.cancel()
        # Every other notification (roots/list_changed, unknown ones) is ignored, as JSON-RPC
        # requires: a notification is never answered.

    def _request(
        self,
        request_id: RequestId,
        method: str,
        params: bytes,
        conn: Connection,
        *,
        in_batch: bool,
    ) -> Outcome:
        route = _ROUTES.get(method)
        if route is None:
            meta = _meta_of(params)
            stateless = self._is_stateless(meta, conn)
            raise ProtocolError(
                codes.METHOD_NOT_FOUND,
                f"Method not found: {method}",
                http_status=404 if stateless else 200,
            )
        try:
            decoded = _decode_params(method, params)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            if not route.stateless and self._is_stateless(_meta_of(params), conn):
                # A method the stateless era removed stays "not found", whatever its params.
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND, f"Method not found: {method}", http_status=404
                ) from None
            raise ProtocolError(
                codes.INVALID_PARAMS, f"Invalid params for {method}: {exc}"
            ) from None
        meta = decoded.meta if not isinstance(decoded.meta, UnsetType) else RequestMeta()
        stateless = self._is_stateless(meta, conn) or method == "server/discover"
        if stateless:
            if not route.stateless:
                # A method the stateless era removed is not found whatever its _meta: checked
                # before _meta's required keys (a missing one was a 400 -32602 here).
                revision = meta.protocol_version
                if isinstance(revision, UnsetType):
                    revision = conn.protocol_version or ""
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND,
                    f"Method not found: {method} is not part of protocol revision {revision}",
                    http_status=404,
                )
            version = self._check_stateless(meta, method)
        else:
            version = conn.protocol_version or LATEST_HANDSHAKE
            if method == "initialize" and in_batch:
                raise ProtocolError(
                    codes.INVALID_REQUEST, "Invalid Request: initialize must not be batched"
                )
        request = _Request(
            id=request_id, method=method, version=version, stateless=stateless, meta=meta
        )
        if method in _GATED and request_id in conn.in_flight:
            raise ProtocolError(
                codes.INVALID_REQUEST,
                f"Invalid Request: id {request_id!r} is already in use by a call in progress",
            )
        handler = _HANDLERS[method]
        outcome = handler(self, request, decoded, conn)
        if isinstance(outcome, PendingCall):
            conn.in_flight[request_id] = outcome
        return outcome

    def _is_stateless(self, meta: RequestMeta, conn: Connection) -> bool:
        if not isinstance(meta.protocol_version, UnsetType):
            return True
        return conn.protocol_version is not None and is_stateless(conn.protocol_version)

    def _check_stateless(self, meta: RequestMeta, method: str) -> str:
        version = meta.protocol_version
        if isinstance(version, UnsetType):
            raise ProtocolError(
                codes.INVALID_PARAMS,
                'Invalid params: missing required _meta["io.modelcontextprotocol/protocolVersion"]',
                http_status=400,
            )
        if version not in STATELESS_VERSIONS:
            raise ProtocolError(
                codes.UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported protocol version: {version}",
                {"supported": list(STATELESS_VERSIONS), "requested": version},
                http_status=400,
            )
        if isinstance(meta.client_capabilities, UnsetType):
            raise ProtocolError(
                codes.INVALID_PARAMS,
                'Invalid params: missing required _meta["io.modelcontextprotocol/'
                'clientCapabilities"]',
                http_status=400,
            )
        return version

    # -- results -------------------------------------------------------------------------------

    def _ok(self, request: _Request, result: Result, *, cache: int | None = None) -> Reply:
        if request.stateless:
            result.result_type = "complete"
            result.meta = self._server_meta
            if cache is not None:
                result.ttl_ms = cache
                result.cache_scope = "private"
        return Reply(ENCODER.encode(ResultResponse(id=request.id, result=result)))

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
        return caps

    def _initialize(self, request: _Request, params: InitializeParams, conn: Connection) -> Reply:
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
        return self._ok(request, result)

    def _discover(self, request: _Request, params: EmptyParams, conn: Connection) -> Reply:
        result = DiscoverResult(
            supported_versions=list(ALL_VERSIONS),
            capabilities=self.capabilities(request.version),
            instructions=UNSET if self.instructions is None else self.instructions,
        )
        return self._ok(request, result, cache=self.list_ttl_ms)

    def _ping(self, request: _Request, params: EmptyParams, conn: Connection) -> Reply:
        return self._ok(request, EmptyResult())

    def _set_level(self, request: _Request, params: SetLevelParams, conn: Connection) -> Reply:
        conn.log_level = params.level
        return self._ok(request, EmptyResult())

    def _subscribe(self, request: _Request, params: ReadResourceParams, conn: Connection) -> Reply:
        if not self.resource_subscriptions:
            raise ProtocolError(
                codes.METHOD_NOT_FOUND, f"Method not found: {request.method} is not enabled"
            )
        return self._ok(request, EmptyResult())

    def _page(self, kind: str, items: Sequence[object], cursor: str | None) -> tuple[int, int]:
        start = _decode_cursor(kind, cursor, len(items))
        return start, min(start + self.page_size, len(items))

    def _next_cursor(self, kind: str, end: int, total: int) -> str | UnsetType:
        return _encode_cursor(kind, end) if end < total else UNSET

    def _list_tools(self, request: _Request, params: ListParams, conn: Connection) -> Reply:
        visible = [t for t in self._tools.values() if _role_ok(conn.caller.role, t.min_role)]
        start, end = self._page("tools", visible, params.cursor)
        version = request.version
        infos = [_tool_info(t, version) for t in visible[start:end]]
        result = ListToolsResult(
            tools=infos, next_cursor=self._next_cursor("tools", end, len(visible))
        )
        return self._ok(request, result, cache=self.list_ttl_ms)

    def _list_resources(self, request: _Request, params: ListParams, conn: Connection) -> Reply:
        visible = [r for r in self._resources.values() if _role_ok(conn.caller.role, r.min_role)]
        start, end = self._page("resources", visible, params.cursor)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            ResourceInfo(
                uri=r.uri,
                name=r.name,
                title=r.title if titled and r.title else UNSET,
                description=r.description or UNSET,
                mime_type=r.mime_type,
            )
            for r in visible[start:end]
        ]
        result = ListResourcesResult(
            resources=infos, next_cursor=self._next_cursor("resources", end, len(visible))
        )
        return self._ok(request, result, cache=self.list_ttl_ms)

    def _list_templates(self, request: _Request, params: ListParams, conn: Connection) -> Reply:
        visible = [t for t in self._templates.values() if _role_ok(conn.caller.role, t.min_role)]
        start, end = self._page("resources/templates", visible, params.cursor)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            ResourceTemplateInfo(
                uri_template=t.uri_template,
                name=t.name,
                title=t.title if titled and t.title else UNSET,
                description=t.description or UNSET,
                mime_type=t.mime_type,
            )
            for t in visible[start:end]
        ]
        result = ListResourceTemplatesResult(
            resource_templates=infos,
            next_cursor=self._next_cursor("resources/templates", end, len(visible)),
        )
        return self._ok(request, result, cache=self.list_ttl_ms)

    def _list_prompts(self, request: _Request, params: ListParams, conn: Connection) -> Reply:
        visible = [p for p in self._prompts.values() if _role_ok(conn.caller.role, p.min_role)]
        start, end = self._page("prompts", visible, params.cursor)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            PromptInfo(
                name=p.name,
                title=p.title if titled and p.title else UNSET,
                description=p.description or UNSET,
                arguments=[
                    PromptArgumentInfo(
                        name=a.name,
                        title=a.title if titled and a.title else UNSET,
                        description=a.description or UNSET,
                        required=a.required,
                    )
                    for a in p.arguments
                ]
                or UNSET,
            )
            for p in visible[start:end]
        ]
        result = ListPromptsResult(
            prompts=infos, next_cursor=self._next_cursor("prompts", end, len(visible))
        )
        return self._ok(request, result, cache=self.list_ttl_ms)

    def _input_required(
        self, request: _Request, output: InputRequired, kind: str, name: str, audit: _CallAudit
    ) -> Reply:
        if not request.stateless or (
            output.input_requests is None and output.request_state is None
        ):
            audit.outcome = "internal"
            err = _classify_logged(
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

    # -- server-to-client requests, MRTR state, listen streams -----------------------------------

    async def _outbound_request(self, send: Send, method: str, params: JsonObject) -> JsonObject:
        self._outbound_seq += 1
        request_id = f"coremetry-{self._outbound_seq}-{secrets.token_hex(4)}"
        answer_send, answer_recv = trio.open_memory_channel[tuple[Raw | None, Raw | None]](1)
        self._outbound[request_id] = answer_send
        try:
            await send(ENCODER.encode(OutboundRequest(id=request_id, method=method, params=params)))
            result, error = await answer_recv.receive()
        finally:
            del self._outbound[request_id]
        if error is not None:
            try:
                detail = msgspec.json.decode(error, type=ErrorObject)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise ClientRequestError(
                    codes.INTERNAL_ERROR, "malformed error from client"
                ) from None
            raise ClientRequestError(detail.code, detail.message)
        try:
            return msgspec.json.decode(result or b"{}", type=JsonObject)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise ClientRequestError(codes.INTERNAL_ERROR, "malformed result from client") from None

    def _deliver_response(
        self, request_id: RequestId, result: Raw | UnsetType, error: Raw | UnsetType
    ) -> None:
        """Hand a client's response to the :meth:`CallContext.request` waiting for it."""
        waiter = self._outbound.get(request_id) if isinstance(request_id, str) else None
        if waiter is None:
            return  # late, duplicate or unknown: ignored (basic/utilities/cancellation races)
        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
            waiter.send_nowait(
                (
                    None if isinstance(result, UnsetType) else result,
                    None if isinstance(error, UnsetType) else error,
                )
            )

    def seal_state(self, data: bytes) -> str:
        """Seal ``data`` with HMAC-SHA256 under this server's key (URL-safe token)."""
        mac = hmac.new(self._state_key, data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac + data).decode("ascii").rstrip("=")

    def open_state(self, token: str) -> bytes | None:
        """Return the data of a token from :meth:`seal_state`, or ``None`` if it was altered."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, binascii.Error):
            return None
        mac, data = raw[:32], raw[32:]
        expected = hmac.new(self._state_key, data, hashlib.sha256).digest()
        return data if len(mac) == 32 and hmac.compare_digest(mac, expected) else None

    def notify_list_changed(self, kind: Literal["tools", "prompts", "resources"]) -> None:
        """Tell every ``subscriptions/listen`` stream that asked for it that ``kind`` changed."""
        self._publish((kind, ""))

    def notify_resource_updated(self, uri: str) -> None:
        """Tell every listen stream subscribed to ``uri`` that the resource changed."""
        self._publish(("resource", uri))

    def end_subscriptions(self) -> None:
        """End every ``subscriptions/listen`` stream gracefully (call when shutting down).

        Each open listen call answers ``SubscriptionsListenResult`` (``resultType: complete``,
        ``_meta`` carrying its subscription id), which the transport sends before ending the
        stream; listens started afterwards end at once the same way.
        """
        self._subscriptions_ended = True
        event, self._change_event = self._change_event, trio.Event()
        event.set()

    def _publish(self, change: tuple[str, str]) -> None:
        self._changes.append(change)
        del self._changes[: -self._max_changes]
        self._change_seq += 1
        event, self._change_event = self._change_event, trio.Event()
        event.set()

    def _listen(self, request: _Request, params: ListenParams, conn: Connection) -> PendingCall:
        wanted = params.notifications
        agreed = SubscriptionFilter(
            tools_list_changed=True if wanted.tools_list_changed is True else UNSET,
            prompts_list_changed=True if wanted.prompts_list_changed is True else UNSET,
            resources_list_changed=True if wanted.resources_list_changed is True else UNSET,
            resource_subscriptions=(
                list(wanted.resource_subscriptions)
                if self.resource_subscriptions
                and not isinstance(wanted.resource_subscriptions, UnsetType)
                else UNSET
            ),
        )
        # The subscription id is the listen request's own id, JSON type kept (schema:
        # SubscriptionsAcknowledgedNotification, "io.modelcontextprotocol/subscriptionId").
        meta: JsonObject = {META_SUBSCRIPTION_ID: request.id}
        send = conn.send
        if send is None:
            raise ProtocolError(
                codes.INVALID_REQUEST,
                "subscriptions/listen needs a stream: send Accept: text/event-stream",
            )
        kinds = {
            "tools": agreed.tools_list_changed is True,
            "prompts": agreed.prompts_list_changed is True,
            "resources": agreed.resources_list_changed is True,
        }
        uris = (
            set()
            if isinstance(agreed.resource_subscriptions, UnsetType)
            else set(agreed.resource_subscriptions)
        )

        async def body() -> Reply:
            ack = SubscriptionAcknowledgedParams(notifications=agreed, meta=meta)
            await send(
                ENCODER.encode(
                    Notification(method="notifications/subscriptions/acknowledged", params=ack)
                )
            )
            seen = self._change_seq
            while True:
                if self._subscriptions_ended:
                    # Graceful teardown (server shutdown): SubscriptionsListenResult.
                    ended = EmptyResult(result_type="complete")
                    ended.meta = {**self._server_meta, **meta}
                    return Reply(ENCODER.encode(ResultResponse(id=request.id, result=ended)))
                event = self._change_event
                await event.wait()
                missed = self._change_seq - seen
                seen = self._change_seq
                for kind, uri in self._changes[-missed:] if missed else []:
                    if kind == "resource" and uri in uris:
                        params_out: Struct = ResourceUpdatedParams(uri=uri, meta=meta)
                        method = "notifications/resources/updated"
                    elif kinds.get(kind, False):
                        params_out = ListChangedParams(meta=meta)
                        method = f"notifications/{kind}/list_changed"
                    else:
                        continue
                    await send(ENCODER.encode(Notification(method=method, params=params_out)))

        return PendingCall(conn, request.id, body)

    # -- gated calls ---------------------------------------------------------------------------

    def _context(
        self,
        request: _Request,
        conn: Connection,
        budget_s: float,
        retry: _RetryableParams | UnsetType = UNSET,
    ) -> CallContext:
        now = trio.current_time()
        limit_s = min(budget_s, self.max_budget_s)
        client_ms = request.meta.timeout_ms
        if not isinstance(client_ms, UnsetType):  # >= 0: RequestMeta refuses the rest
            limit_s = min(limit_s, float(client_ms) / 1000.0)
        threshold: LogLevel | None
        if request.stateless:
            level = request.meta.log_level
            threshold = None if isinstance(level, UnsetType) else level
        else:
            threshold = conn.log_level or self.default_log_level
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
            server=self,
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
        request: _Request,
        conn: Connection,
        kind: CallKind,
        name: str,
        min_role: str,
        audit: _CallAudit,
    ) -> Reply | None:
        """Ask the gate; return the refusal to send, or ``None`` when the call may go on.

        A refusal also sets ``audit.outcome`` (``denied`` or ``rate_limited``).
        """
        call = GateCall(
            kind=kind, name=name, min_role=min_role, caller=conn.caller, transport=conn.transport
        )
        try:
            await self._gate(call)
        except Denied as exc:
            needed = min_role or "viewer"
            message = (
                exc.message if needed in exc.message else f"{exc.message} (requires role {needed})"
            )
            audit.outcome = "denied"
            return _error_reply(request.id, codes.FORBIDDEN, message, {"required_role": needed})
        except Exception as exc:
            audit.outcome = "rate_limited"
            retry = getattr(exc, "retry_after_ms", None)
            data: JsonObject | None = (
                {"retry_after_ms": int(retry)} if isinstance(retry, int | float) else None
            )
            text: object = getattr(exc, "message", None)
            return _error_reply(
                request.id,
                codes.RATE_LIMITED,
                text if isinstance(text, str) else "Call refused by the server's call gate",
                data,
            )
        return None

    def _call_tool(
        self, request: _Request, params: CallToolParams, conn: Connection
    ) -> PendingCall:
        tool = self._tools.get(params.name)
        if tool is None:
            raise _UnknownEntry(
                codes.INVALID_PARAMS, f"Unknown tool: {params.name}", {"name": params.name}
            )
        arguments = (
            _EMPTY_OBJECT if isinstance(params.arguments, UnsetType) else bytes(params.arguments)
        )

        ctx = self._context(request, conn, tool.read_budget_s, params)
        audit = _UNOBSERVED if self._observer is None else _CallAudit("tool", tool.name, arguments)

        async def body() -> Reply:
            refusal = await self._pass_gate(request, conn, "tool", tool.name, tool.min_role, audit)
            if refusal is not None:
                return refusal
            try:
                run = tool.bind(arguments)
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
                bad = classify_tool_error(msgspec.ValidationError(_arguments_message(exc)))
                audit.outcome = "bad_args"
                return self._ok(request, _tool_error_result(bad, request.version))
            try:
                output = await run(ctx)
            except ProtocolError as exc:
                audit.outcome = _outcome_for_code(exc.code)
                return _error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                err = _classify_logged(exc, "tool", tool.name)
                audit.outcome = _outcome_for_error(err)
                return self._ok(request, _tool_error_result(err, request.version))
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "tool", tool.name, audit)
            return self._ok(request, _tool_result(output, request.version))

        def on_timeout() -> Reply:
            return self._ok(request, _tool_error_result(_budget_error(ctx), request.version))

        return PendingCall(
            conn,
            request.id,
            body,
            deadline=ctx.deadline,
            on_timeout=on_timeout,
            context=ctx,
            audit=audit,
            observer=self._observer,
        )

    def _find_resource(
        self, uri: str
    ) -> tuple[Resource | ResourceTemplate, Mapping[str, str]] | None:
        resource = self._resources.get(uri)
        if resource is not None:
            return resource, {}
        for template in self._templates.values():
            variables = template.template.match(uri)
            if variables is not None:
                return template, variables
        return None

    def _resource_not_found(self, request: _Request, uri: str) -> ProtocolError:
        code = codes.INVALID_PARAMS if request.stateless else codes.RESOURCE_NOT_FOUND
        return _UnknownEntry(code, f"Resource not found: {uri}", {"uri": uri})

    def _read_resource(
        self, request: _Request, params: ReadResourceParams, conn: Connection
    ) -> PendingCall:
        uri = params.uri
        found = self._find_resource(uri)
        if found is None:
            raise self._resource_not_found(request, uri)
        entry, variables = found

        ctx = self._context(request, conn, entry.read_budget_s, params)
        audit = (
            _UNOBSERVED
            if self._observer is None
            else _CallAudit("resource", _audit_name(entry), uri)
        )

        def failure(err: ToolError) -> Reply:
            audit.outcome = _outcome_for_error(err)
            if err.error == ToolErrorKind.NOT_FOUND:
                missing = self._resource_not_found(request, uri)
                return _error_reply(request.id, missing.code, missing.message, missing.data)
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
                audit.outcome = _outcome_for_code(exc.code)
                return _error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                return failure(_classify_logged(exc, "resource", uri))
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "resource", uri, audit)
            contents = _resource_contents(uri, entry.mime_type, output)
            if not contents:
                empty = RuntimeError(f"resource handler for {uri!r} returned no contents")
                return failure(_classify_logged(empty, "resource", uri))
            return self._ok(request, ReadResourceResult(contents=contents), cache=self.read_ttl_ms)

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
            observer=self._observer,
        )

    def _get_prompt(
        self, request: _Request, params: GetPromptParams, conn: Connection
    ) -> PendingCall:
        prompt = self._prompts.get(params.name)
        if prompt is None:
            raise _UnknownEntry(
                codes.INVALID_PARAMS, f"Unknown prompt: {params.name}", {"name": params.name}
            )
        arguments = dict(params.arguments or {})

        ctx = self._context(request, conn, prompt.read_budget_s, params)
        audit = (
            _UNOBSERVED if self._observer is None else _CallAudit("prompt", prompt.name, arguments)
        )

        async def body() -> Reply:
            refusal = await self._pass_gate(
                request, conn, "prompt", prompt.name, prompt.min_role, audit
            )
            if refusal is not None:
                return refusal
            missing = [a.name for a in prompt.arguments if a.required and not arguments.get(a.name)]
            if missing:
                audit.outcome = "bad_args"
                return _error_reply(
                    request.id,
                    codes.INVALID_PARAMS,
                    f"Missing required argument(s) for prompt {prompt.name!r}: "
                    + ", ".join(missing),
                    {"missing": list(missing)},
                )
            try:
                output = await prompt.handler(arguments, ctx)
            except ProtocolError as exc:
                audit.outcome = _outcome_for_code(exc.code)
                return _error_reply(request.id, exc.code, exc.message, exc.data, exc.http_status)
            except Exception as exc:
                err = _classify_logged(exc, "prompt", prompt.name)
                audit.outcome = _outcome_for_error(err)
                return _rpc_error_for(request.id, err, {"name": prompt.name})
            if isinstance(output, InputRequired):
                return self._input_required(request, output, "prompt", prompt.name, audit)
            return self._ok(request, _prompt_result(output, prompt.description))

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
            observer=self._observer,
        )

    def _complete(self, request: _Request, params: CompleteParams, conn: Connection) -> PendingCall:
        ref = params.ref
        completer = None
        if ref.type == "ref/prompt" and isinstance(ref.name, str):
            prompt = self._prompts.get(ref.name)
            if prompt is None or not _role_ok(conn.caller.role, prompt.min_role):
                raise ProtocolError(codes.INVALID_PARAMS, f"Unknown prompt: {ref.name}")
            completer = prompt.completer
        elif ref.type == "ref/resource" and isinstance(ref.uri, str):
            template = self._templates.get(ref.uri)
            static = self._resources.get(ref.uri)
            entry = template or static
            if entry is None or not _role_ok(conn.caller.role, entry.min_role):
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
                with trio.move_on_after(self.max_budget_s):
                    try:
                        values = [
                            str(v)
                            for v in await completer(
                                params.argument.name, params.argument.value, context_args
                            )
                        ]
                    except Exception as exc:
                        _classify_logged(exc, "completion", params.argument.name)
                        values = []
            shown = values[:_MAX_COMPLETION_VALUES]
            completion = Completion(
                values=shown,
                total=len(values),
                has_more=len(values) > len(shown),
            )
            return self._ok(request, CompleteResult(completion=completion))

        return PendingCall(conn, request.id, body)


# -- helpers ---------------------------------------------------------------------------------------


def _meta_of(params: bytes) -> RequestMeta:
    try:
        decoded = msgspec.json.decode(params, type=EmptyParams)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return RequestMeta()
    return decoded.meta if not isinstance(decoded.meta, UnsetType) else RequestMeta()


def _classify_logged(exc: Exception, kind: str, name: str) -> ToolError:
    err = classify_tool_error(exc)
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


def _budget_error(ctx: CallContext) -> ToolError:
    base = classify_tool_error(trio.TooSlowError())
    return ToolError(
        error=base.error,
        retryable=base.retryable,
        hint=base.hint,
        detail=f"the call did not finish within its deadline ({round(ctx.budget_s * 1000)} ms)",
    )


def _tool_info(tool: Tool[Struct], version: str) -> ToolInfo:
    titled = at_least(version, V2025_06_18)
    return ToolInfo(
        name=tool.name,
        title=tool.title if titled and tool.title else UNSET,
        description=tool.description,
        input_schema=Raw(tool.input_schema_json),
        output_schema=(
            Raw(tool.output_schema_json)
            if titled and tool.output_schema_json is not None
            else UNSET
        ),
        annotations=tool.annotations if at_least(version, V2025_03_26) else UNSET,
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
    return _error_reply(request_id, code, f"{err.error}: {err.detail}", data)


_Decoded = (
    EmptyParams
    | InitializeParams
    | ListParams
    | CallToolParams
    | ReadResourceParams
    | GetPromptParams
    | SetLevelParams
    | CompleteParams
    | ListenParams
)

_DECODERS: Final[dict[str, msgspec.json.Decoder[_Decoded]]] = {}

_PARAM_TYPES: Final[Mapping[str, type[_Decoded]]] = {
    "initialize": InitializeParams,
    "ping": EmptyParams,
    "server/discover": EmptyParams,
    "logging/setLevel": SetLevelParams,
    "tools/list": ListParams,
    "resources/list": ListParams,
    "resources/templates/list": ListParams,
    "prompts/list": ListParams,
    "tools/call": CallToolParams,
    "resources/read": ReadResourceParams,
    "resources/subscribe": ReadResourceParams,
    "resources/unsubscribe": ReadResourceParams,
    "prompts/get": GetPromptParams,
    "completion/complete": CompleteParams,
    "subscriptions/listen": ListenParams,
}

for _method, _type in _PARAM_TYPES.items():
    _DECODERS[_method] = msgspec.json.Decoder(_type)


def _decode_params(method: str, params: bytes) -> _Decoded:
    return _DECODERS[method].decode(params)


_OBSERVED: Final[Mapping[str, CallKind]] = {
    "tools/call": "tool",
    "resources/read": "resource",
    "prompts/get": "prompt",
}
"""The gated methods the call observer hears about, and their :data:`CallKind`."""

_GATED: Final = frozenset(
    {"tools/call", "resources/read", "prompts/get", "completion/complete", "subscriptions/listen"}
)

Era = Literal["handshake", "stateless", "both"]

_ERAS: Final[Mapping[str, Era]] = {
    "initialize": "handshake",
    "ping": "handshake",
    "logging/setLevel": "handshake",
    "resources/subscribe": "handshake",
    "resources/unsubscribe": "handshake",
    "server/discover": "stateless",
    "tools/list": "both",
    "resources/list": "both",
    "resources/templates/list": "both",
    "prompts/list": "both",
    "tools/call": "both",
    "resources/read": "both",
    "prompts/get": "both",
    "completion/complete": "both",
    "subscriptions/listen": "stateless",
}

_ROUTES: Final[Mapping[str, _Route]] = {
    method: _Route(handshake=era != "stateless", stateless=era != "handshake")
    for method, era in _ERAS.items()
}

_Handler = Callable[["Server", _Request, _Decoded, Connection], Reply | PendingCall]

_HANDLERS: Final[Mapping[str, _Handler]] = {
    "initialize": Server._initialize,  # type: ignore[dict-item]  # params narrowed per method by _PARAM_TYPES
    "ping": Server._ping,  # type: ignore[dict-item]  # same
    "server/discover": Server._discover,  # type: ignore[dict-item]  # same
    "logging/setLevel": Server._set_level,  # type: ignore[dict-item]  # same
    "resources/subscribe": Server._subscribe,  # type: ignore[dict-item]  # same
    "resources/unsubscribe": Server._subscribe,  # type: ignore[dict-item]  # same
    "tools/list": Server._list_tools,  # type: ignore[dict-item]  # same
    "resources/list": Server._list_resources,  # type: ignore[dict-item]  # same
    "resources/templates/list": Server._list_templates,  # type: ignore[dict-item]  # same
    "prompts/list": Server._list_prompts,  # type: ignore[dict-item]  # same
    "tools/call": Server._call_tool,  # type: ignore[dict-item]  # same
    "resources/read": Server._read_resource,  # type: ignore[dict-item]  # same
    "prompts/get": Server._get_prompt,  # type: ignore[dict-item]  # same
    "completion/complete": Server._complete,  # type: ignore[dict-item]  # same
    "subscriptions/listen": Server._listen,  # type: ignore[dict-item]  # same
}


async def serve_connection(
    server: Server,
    conn: Connection,
    incoming: AsyncIterable[bytes],
    *,
    drain_on_eof: bool = True,
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

    Raises:
        ValueError: ``conn.send`` is not set.
    """
    send = conn.send
    if send is None:
        raise ValueError("serve_connection needs a connection with send set")

    async def run(pending: PendingCall | PendingBatch) -> None:
        reply = await pending.run()
        if reply is not None:
            try:
                await send(reply.body)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.cancel_all()

    async with trio.open_nursery() as nursery:
        async for data in incoming:
            if not data.strip():
                continue
            outcome = server.receive(data, conn)
            if outcome is None:
                continue
            if isinstance(outcome, Reply):
                await send(outcome.body)
            else:
                nursery.start_soon(run, outcome)
        if not drain_on_eof:
            conn.cancel_all()
            nursery.cancel_scope.cancel()
