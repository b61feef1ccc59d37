"""What a handler sees while it runs: :class:`CallContext`.

Contract:

- ``deadline`` is absolute on trio's clock and ``budget_s`` the whole budget; both are set once,
  when the call is routed (``min(entry budget, server maximum, _meta["coremetry/timeout_ms"])``).
- Progress and log notifications go out only while the call runs: after :meth:`CallContext.close`
  (the answer is being sent) they are silently dropped; so are they when the transport cannot
  carry notifications or the client did not ask for them. A peer that went away is not an error
  here (the transport cancels the call).
- Server-to-client requests exist only in the handshake era, on a connection that can carry
  them; otherwise :class:`ClientRequestError` is raised at once.
- While a gated call runs (gate, handler, encoding), :func:`current_call_context` returns its
  context in that task and in every task or thread it starts, so a layer the handler calls
  without passing ``ctx`` (e.g. the store's admission, keyed by the caller's identity) can find
  it; outside a call it returns ``None``.
- A handler or a layer under it that waits for something other than its own work (admission
  to the store) says so with :meth:`CallContext.waiting`; if the deadline expires meanwhile,
  the ``timeout`` answer carries that wait's detail and hint instead of the generic ones.
"""

import contextlib
import contextvars
import logging
import math
from collections.abc import Callable, Iterator

import trio
from msgspec import UNSET, Struct, UnsetType

from . import codes
from .framing import Send
from .gate import Caller
from .outbound import ClientRequestError, OutboundRequests
from .request_state import StateSealer
from .versions import V2025_03_26, at_least
from .wire import (
    ENCODER,
    LOG_LEVELS,
    JsonObject,
    LoggingMessageParams,
    LogLevel,
    Notification,
    ProgressParams,
    ProgressToken,
    RequestId,
)

__all__ = ["CallContext", "ClientRequestError", "WaitNote", "current_call_context"]


class WaitNote(Struct, frozen=True):
    """Why a call is waiting, for the ``timeout`` answer if its deadline expires meanwhile.

    Attributes:
        detail: what the call was waiting for (a sentence safe to show the model).
        hint: what the model should do next (e.g. retry later, narrow the window).
    """

    detail: str
    hint: str


log = logging.getLogger("coremetry.mcp")

_CURRENT: contextvars.ContextVar["CallContext | None"] = contextvars.ContextVar(
    "coremetry_call_context", default=None
)


def current_call_context() -> "CallContext | None":
    """The context of the gated call running in this task (or the task that started it).

    Set by the dispatcher for the whole of a ``tools/call``, ``resources/read`` or
    ``prompts/get`` (trio copies context variables into child tasks and worker threads).

    Returns:
        The call's :class:`CallContext`, or ``None`` outside a gated call (CLI work, background
        tasks such as detection or retention).
    """
    return _CURRENT.get()


class _Current:
    # A plain class, not @contextmanager: every gated call enters one (the dispatcher's hot path).
    __slots__ = ("_ctx", "_token")

    def __init__(self, ctx: "CallContext") -> None:
        self._ctx = ctx

    def __enter__(self) -> "CallContext":
        self._token = _CURRENT.set(self._ctx)
        return self._ctx

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


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
        outbound: OutboundRequests,
        sealer: StateSealer,
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
        self._outbound = outbound
        self._sealer = sealer
        self._progress_token = progress_token
        self._log_threshold = log_threshold
        self._send = send
        self._last_progress = -math.inf
        self._closed = False
        self._at_close: list[Callable[[], None]] | None = None
        self.wait_note: WaitNote | None = None
        """What the call is waiting for right now (:meth:`waiting`), else ``None``."""

    def current(self) -> "_Current":
        """Make this the :func:`current_call_context` for the body of a ``with`` block."""
        return _Current(self)

    @contextlib.contextmanager
    def waiting(self, detail: str, hint: str) -> Iterator[None]:
        """Mark the call as waiting (``detail``, ``hint``) for the body of the ``with`` block.

        If the call's deadline expires inside the block, its ``timeout`` answer carries this
        ``detail`` and ``hint`` (sanitized) instead of the generic deadline sentence (the note
        then stays set). Otherwise the block's exit restores the outer note (blocks nest).
        """
        outer = self.wait_note
        self.wait_note = WaitNote(detail, hint)
        try:
            yield
        except BaseException:
            # Ended by the deadline while waiting: keep the note for the timeout answer,
            # which is built after the call's scope has unwound.
            if trio.current_time() < self.deadline:
                self.wait_note = outer
            raise
        self.wait_note = outer

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
        """Mark the call complete: later progress and log calls send nothing.

        Runs the callbacks given to :meth:`at_close`, once each, in the order given (a failing
        one is logged; the others still run).
        """
        self._closed = True
        callbacks, self._at_close = self._at_close, None
        if callbacks:
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("a call-end callback failed (request %r)", self.request_id)

    def at_close(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the call ends (:meth:`close`: result, error, timeout or cancel).

        For resources held for the whole call, such as a store admission slot. A callback
        given after the call ended runs at once.
        """
        if self._closed:
            callback()
            return
        if self._at_close is None:
            self._at_close = []
        self._at_close.append(callback)

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
        return await self._outbound.request(self._send, method, params)

    def seal_state(self, data: bytes) -> str:
        """Integrity-protect opaque state for an MRTR ``requestState`` (HMAC-SHA256).

        Returns:
            A URL-safe token carrying ``data`` (readable by the client, not forgeable).
        """
        return self._sealer.seal(data)

    def open_state(self, token: str) -> bytes | None:
        """Verify a ``requestState`` from :meth:`seal_state`.

        Returns:
            The sealed data, or ``None`` when the token was altered or is not ours.
        """
        return self._sealer.open(token)
