"""The server's drain: on SIGTERM/SIGINT every call in flight gets an answer before the exit.

:func:`coremetry.server.serve` owns one :class:`Drain` and starts it when asked to stop. From
then on (Streamable HTTP, ``POST /api/mcp``):

- a new request is refused with HTTP 503, ``Retry-After`` and a JSON-RPC error body (the
  listener stays open during the drain so that clients get this answer rather than a refused
  connection);
- a call already running keeps running until the drain's deadline (``http.graceful_shutdown_s``
  after the stop); if it finishes by then, its own answer is sent;
- a call still running at the deadline is cancelled and answered with a retryable error that
  says the server is shutting down (:func:`shutdown_reply`): for ``tools/call`` a tool error
  ``backend_unavailable`` (``isError: true``), for any other request a JSON-RPC error
  ``-32603`` whose ``data`` says ``retryable: true``.

The server stops listening once no call is in flight, or at the deadline (plus the time to
write the last answers), whichever comes first.

The session transports (legacy SSE, WebSocket, stdio) share the same :class:`Drain` through
:func:`coremetry.mcp.serve_connection` (``drain=``; :class:`Drain` is its
:class:`~coremetry.mcp.ConnectionDrain`): once the drain has begun, a request arriving on an
open session is answered with :meth:`Drain.refusal` (a JSON-RPC error ``-32603``, ``retryable:
true``) while notifications and client responses are still routed (a ``notifications/cancelled``
or an elicitation answer still reaches a running call); each call in flight is answered — its
result, or :meth:`Drain.cut_reply` at the deadline — and the session ends (the transport closes
it) once it has no call in flight.
"""

import math
from typing import Final, Protocol

import msgspec
import trio
from msgspec import UNSET, UnsetType

from coremetry.mcp import (
    BackendUnavailable,
    Connection,
    classify_tool_error,
    codes,
    tool_error_json,
    versions,
)
from coremetry.mcp.tool_errors import tool_error_dict
from coremetry.mcp.wire import RequestId

RETRY_AFTER_S: Final = 5
"""``Retry-After`` of a request refused during the drain, in seconds."""

SHUTDOWN_MESSAGE: Final = "the server is shutting down; retry the request (on another instance)"

SHUTDOWN_HINT: Final = (
    "The server is shutting down; the telemetry is fine. Retry the same call in a few seconds "
    "(against another instance if there is one)."
)
"""The hint of a ``tools/call`` cut off by the drain (not the backend's: it did not fail)."""


class Cancellable(Protocol):
    """A call in flight (``PendingCall`` or ``PendingBatch``): cancelled at the deadline."""

    def cancel(self) -> None:
        """Stop the call; it answers nothing itself."""


class Drain:
    """Tracks the calls in flight and cuts off those still running at the drain's deadline.

    Attributes:
        started: set when the drain begins (:meth:`begin`).
        deadline: the trio time at which running calls are cut off (``inf`` before the drain).
    """

    def __init__(self) -> None:
        self.started = trio.Event()
        self.deadline = math.inf
        self._calls: set[Cancellable] = set()
        self._cut: set[Cancellable] = set()
        self._idle = trio.Event()

    def begin(self, grace_s: float) -> None:
        """Start the drain: calls in flight get ``grace_s`` seconds more (idempotent)."""
        if self.started.is_set():
            return
        self.deadline = trio.current_time() + grace_s
        self.started.set()
        if not self._calls:
            self._idle.set()

    def track(self, call: Cancellable) -> None:
        """Record a call that started (before the drain began)."""
        self._calls.add(call)

    def untrack(self, call: Cancellable) -> None:
        """Record that a call ended (answered, cut off or abandoned)."""
        self._calls.discard(call)
        if self.started.is_set() and not self._calls:
            self._idle.set()

    def was_cut(self, call: Cancellable) -> bool:
        """Whether the drain cancelled ``call`` (its transport sends :func:`shutdown_reply`)."""
        return call in self._cut

    async def run(self) -> None:
        """Wait for the drain, then cancel the calls still running at its deadline.

        Returns early when no call is left in flight before the deadline.
        """
        await self.started.wait()
        with trio.move_on_at(self.deadline):
            await self._idle.wait()
            return
        for call in list(self._calls):
            self._cut.add(call)
            call.cancel()

    async def wait_idle(self) -> None:
        """Block until the drain has begun and no tracked call is in flight."""
        await self._idle.wait()

    def refusal(self, data: bytes, conn: Connection) -> bytes | None:
        """The answer to a message that arrives on an open session during the drain.

        Args:
            data: the message as received (a JSON-RPC object or a 2025-03-26 batch).
            conn: the session it arrived on.

        Returns:
            For a request, a JSON-RPC error ``-32603`` with its id that says the server is
            shutting down (``data.retryable: true``, ``retry_after_ms``); for a batch holding
            requests, an array of those errors (the batch is refused whole). ``None`` for a
            notification, a client response or a body that does not decode (the core routes
            or answers those as usual).
        """
        peeked = _peek(data)
        if isinstance(peeked, _Peek):
            return refusal_reply(peeked.request_id) if peeked.is_request else None
        if peeked is None:
            return None
        errors = [_refusal_object(item.request_id) for item in peeked if item.is_request]
        return msgspec.json.encode(errors) if errors else None

    def cut_reply(self, data: bytes, conn: Connection) -> bytes:
        """:func:`shutdown_reply` for the call carried by ``data`` on ``conn``.

        The revision is the request's ``_meta`` one (2026-07-28), else the session's
        negotiated one; a batch (or an unreadable body) is answered with ``id: null``.
        """
        peeked = _peek(data)
        single = peeked if isinstance(peeked, _Peek) else None
        version = (
            (single.meta_version if single is not None else None)
            or conn.protocol_version
            or versions.DEFAULT_WITHOUT_HEADER
        )
        if single is None:
            return shutdown_reply(None, None, version)
        return shutdown_reply(single.request_id, single.method, version)


class _PeekMeta(msgspec.Struct):
    protocol_version: str | UnsetType = msgspec.field(
        default=UNSET, name="io.modelcontextprotocol/protocolVersion"
    )


class _PeekParams(msgspec.Struct):
    meta: _PeekMeta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class _Peek(msgspec.Struct):
    """What the drain needs of a message: its id, method and ``_meta`` revision."""

    id: object = None
    method: object = None
    params: _PeekParams | UnsetType = UNSET

    @property
    def request_id(self) -> RequestId | None:
        """The id when it is a valid JSON-RPC id (string or integer), else ``None``."""
        value = self.id
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    @property
    def is_request(self) -> bool:
        """A request: a string method and a valid id (not a notification, not a response)."""
        return isinstance(self.method, str) and self.request_id is not None

    @property
    def meta_version(self) -> str | None:
        """The ``_meta`` protocol version (2026-07-28 requests), if any."""
        params = self.params
        if isinstance(params, UnsetType) or isinstance(params.meta, UnsetType):
            return None
        version = params.meta.protocol_version
        return None if isinstance(version, UnsetType) else version


_PEEK: Final = msgspec.json.Decoder(_Peek | list[_Peek])


def _peek(data: bytes) -> _Peek | list[_Peek] | None:
    """Decode what the drain needs; ``None`` when ``data`` is not a JSON-RPC message or batch."""
    try:
        return _PEEK.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _refusal_object(request_id: RequestId | None) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": codes.INTERNAL_ERROR,
            "message": f"Server shutting down: {SHUTDOWN_MESSAGE}",
            "data": {"retryable": True, "retry_after_ms": RETRY_AFTER_S * 1000},
        },
    }


def refusal_reply(request_id: RequestId | None) -> bytes:
    """The JSON-RPC error refusing a request during the drain (``-32603``, retryable), encoded.

    Also the answer of a non-``tools/call`` request cut off at the deadline
    (:func:`shutdown_reply`).
    """
    return msgspec.json.encode(_refusal_object(request_id))


def shutdown_reply(request_id: RequestId | None, method: object, version: str) -> bytes:
    """The answer of a call cut off by the drain (module docstring), encoded.

    Args:
        request_id: the request's id (``None``: a batch or an unreadable id; answered with
            ``id: null``).
        method: the request's method (``tools/call`` gets a tool error result).
        version: the protocol revision the request is served at (shapes the result:
            ``structuredContent`` from 2025-06-18, ``resultType`` in stateless revisions).
    """
    if method == "tools/call" and request_id is not None:
        error = classify_tool_error(BackendUnavailable(SHUTDOWN_MESSAGE, hint=SHUTDOWN_HINT))
        result: dict[str, object] = {
            "content": [{"type": "text", "text": tool_error_json(error)}],
            "isError": True,
        }
        if versions.at_least(version, versions.V2025_06_18):
            result["structuredContent"] = dict(tool_error_dict(error))
        if versions.is_stateless(version):
            result["resultType"] = "complete"
        return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "result": result})
    return refusal_reply(request_id)
