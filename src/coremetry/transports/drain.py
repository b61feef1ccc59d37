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
"""

import math
from typing import Final, Protocol

import msgspec
import trio

from coremetry.mcp import BackendUnavailable, classify_tool_error, codes, tool_error_json, versions
from coremetry.mcp.tool_errors import tool_error_dict
from coremetry.mcp.wire import RequestId

RETRY_AFTER_S: Final = 5
"""``Retry-After`` of a request refused during the drain, in seconds."""

SHUTDOWN_MESSAGE: Final = "the server is shutting down; retry the request (on another instance)"


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
        error = classify_tool_error(BackendUnavailable(SHUTDOWN_MESSAGE))
        result: dict[str, object] = {
            "content": [{"type": "text", "text": tool_error_json(error)}],
            "isError": True,
        }
        if versions.at_least(version, versions.V2025_06_18):
            result["structuredContent"] = dict(tool_error_dict(error))
        if versions.is_stateless(version):
            result["resultType"] = "complete"
        return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "result": result})
    return msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": codes.INTERNAL_ERROR,
                "message": f"Server shutting down: {SHUTDOWN_MESSAGE}",
                "data": {"retryable": True, "retry_after_ms": RETRY_AFTER_S * 1000},
            },
        }
    )
