"""The audit record of a gated call, handed to one synchronous sink (the call observer).

Contract:

- :meth:`Server.set_call_observer <coremetry.mcp.Server.set_call_observer>` installs one
  :data:`CallObserver`. It receives exactly one :class:`CallRecord` per gated call — every
  ``tools/call``, ``resources/read`` and ``prompts/get`` request, however it ends — and nothing
  for any other method (``initialize``, ``ping``, the lists, completion, listen) nor for a
  notification.
- The outcome: ``ok`` (a result, including a 2026-07-28 ``input_required`` result); for an
  ``isError`` result or a resource/prompt failure its class (``timeout``,
  ``backend_unavailable``, ``bad_args``, ``not_found``, ``internal``); ``denied`` (gate -32001)
  and ``rate_limited`` (any other gate refusal, -32000); ``bad_args`` for other JSON-RPC errors
  (undecodable params, a missing prompt argument, a bad ``_meta``, an id already in flight);
  ``not_found`` for an unknown tool, prompt or resource; ``timeout`` when the deadline expired;
  ``cancelled`` when the client cancelled (no answer is sent) or the call's task was torn down.
- Calls refused before they run (unknown name, undecodable params) are recorded when they are
  received, with ``duration_ms == 0.0``; every other call when its
  :class:`~coremetry.mcp.PendingCall` ends (``time.perf_counter`` for the duration,
  ``time.time_ns`` for the start). A pending call that is never run records nothing.
- ``name`` identifies the entry (a templated read is recorded under its URI template, not the
  expanded URI) and ``arguments_sha256`` is a digest, never the arguments: SHA-256 of the raw
  ``arguments`` JSON bytes as sent (``{}`` when absent) for tools, of the URI (UTF-8) for
  resources, of the canonical JSON (sorted keys, compact) of the arguments for prompts, and of
  the raw ``params`` when they could not be decoded at all.
- The observer runs on the trio loop, in the call's task, just before the answer is handed to
  the transport: it must not block (queue the record and return). An exception out of it is
  logged and never changes the call's answer.
- Without an observer a call pays a few ``is None`` tests (no allocation, no clock read). The
  digest is never computed on the call's path unless the arguments exceed
  :data:`LAZY_DIGEST_MAX_BYTES` (see :class:`CallArguments`).
"""

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final, Literal, get_args

import msgspec
import trio
from msgspec import Struct, UnsetType

from . import codes
from .framing import EMPTY_OBJECT
from .gate import Caller, CallKind
from .registry import Resource, ResourceTemplate
from .tool_errors import ToolError, ToolErrorKind
from .wire import CallToolParams, GetPromptParams, ReadResourceParams, RequestId, RequestParams

log = logging.getLogger("coremetry.mcp")

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


class CallAudit(CallArguments):
    """What a gated call's body tells the observer (the outcome), and its arguments.

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


UNOBSERVED: Final = CallAudit("tool", "", b"")
"""Shared stand-in written to by calls nobody observes (its content is never read): it saves
an allocation per call on the path without an observer."""


def audit_name(entry: Resource | ResourceTemplate) -> str:
    """The name a read is recorded under: the static URI, or the template of a templated read."""
    # The variables of a templated read are arguments, which the record carries only as a
    # digest (of the whole URI).
    return entry.uri if isinstance(entry, Resource) else entry.uri_template


def notify_observer(observer: CallObserver, record: CallRecord) -> None:
    """Hand ``record`` to ``observer``; its failure is logged, never passed on."""
    # The observer is the app's audit hook: its failure must never break or change the call.
    try:
        observer(record)
    except Exception:
        observer_failed(record)


def observer_failed(record: CallRecord) -> None:
    """Log the exception being handled, an observer's failure (never changes the call)."""
    log.exception(
        "call observer failed for %s %r (outcome %s)", record.kind, record.name, record.outcome
    )


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is trio's cancellation (alone or as every leaf of a group)."""
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return isinstance(exc, trio.Cancelled)


def outcome_for_code(code: int) -> CallOutcome:
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


def outcome_for_error(err: ToolError) -> CallOutcome:
    """The outcome class of a classified failure (one of the five tool-error classes)."""
    return _ERROR_OUTCOMES.get(err.error, "internal")


def refusal_record(
    kind: CallKind,
    decoded: RequestParams | None,
    raw_params: bytes,
    *,
    caller: Caller,
    transport: str,
    request_id: RequestId,
    outcome: CallOutcome,
) -> CallRecord:
    """The record of a gated call answered with an error before it could run.

    Args:
        kind: the call's kind.
        decoded: its params, or ``None`` when they did not decode (the raw params are then
            digested and the name is ``""``).
        raw_params: the params as sent (``{}`` when absent).
        caller: the connection's identity.
        transport: the connection's transport.
        request_id: the JSON-RPC id.
        outcome: how it was refused.
    """
    name = ""
    payload: ArgumentsPayload = raw_params
    if isinstance(decoded, CallToolParams):
        name = decoded.name
        payload = (
            EMPTY_OBJECT if isinstance(decoded.arguments, UnsetType) else bytes(decoded.arguments)
        )
    elif isinstance(decoded, ReadResourceParams):
        name = payload = decoded.uri
    elif isinstance(decoded, GetPromptParams):
        name = decoded.name
        payload = dict(decoded.arguments or {})
    return CallRecord(
        kind=kind,
        name=name,
        caller=caller,
        transport=transport,
        outcome=outcome,
        duration_ms=0.0,
        arguments=CallArguments(payload),
        started_at_unix_nano=time.time_ns(),
        request_id=request_id,
    )
