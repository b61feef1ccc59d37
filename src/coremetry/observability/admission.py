"""Store admission: every store call of a tool, resource or prompt is admitted per identity.

One identity must not hold every query thread (issue 13: ten heavy calls from one token made a
trivial call from another token wait 27 s). So a gated call
(:func:`~coremetry.mcp.context.current_call_context`) takes a slot of :class:`StoreAdmission` at
its first store read and holds it until the call ends:

- at most ``max_calls_per_identity`` calls of one identity (``caller.subject``) use the store
  at once, and at most ``max_calls`` in all (config ``store.max_calls_per_identity``,
  ``store.max_calls``; defaults 2 and 4, with ``store.query_threads`` = 4: one identity holds at
  most half the threads, so another identity always finds a slot);
- waiters are served fairly: when a slot frees, the identities with waiting calls take turns
  (round robin, each identity's own calls in arrival order); an identity at its own limit is
  skipped, so it never blocks another identity's waiting call;
- a call waiting for a slot still honours its deadline: it waits inside the call's own cancel
  scope, marked with :meth:`~coremetry.mcp.CallContext.waiting`, so when the deadline expires
  the answer is ``timeout`` whose hint says the server is busy with this identity's other calls
  (or with other clients' calls) and to retry later or narrow the window;
- store calls made outside a gated call (CLI, detection, retention, ingest writes) are not
  admitted here: they have no caller and no deadline of a call.

:class:`AdmittedStore` is the :class:`~coremetry.store.TelemetryStore` the tools, resources
and prompts read through (:func:`~.registration.register_observability` wraps the store in
it), so every read of every entry passes the one admission point.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Final

import trio

from coremetry.mcp import CallContext, current_call_context
from coremetry.store import (
    DeployRecord,
    LogQuery,
    LogRecord,
    MetricDescriptor,
    MetricQuery,
    MetricSeries,
    OperationSummary,
    Page,
    RetentionResult,
    ServiceEdge,
    ServiceSummary,
    Span,
    StoreStatistics,
    TelemetryBatch,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    TraceSummary,
    WriteResult,
)
from coremetry.store.interface import LogCountSeries, ServiceRedSeries

__all__ = [
    "DEFAULT_MAX_CALLS",
    "DEFAULT_MAX_CALLS_PER_IDENTITY",
    "IDENTITY_BUSY_HINT",
    "SERVER_BUSY_HINT",
    "AdmittedStore",
    "StoreAdmission",
]

DEFAULT_MAX_CALLS_PER_IDENTITY: Final = 2
"""Store calls one identity may run at once (``store.max_calls_per_identity``)."""

DEFAULT_MAX_CALLS: Final = 4
"""Store calls all identities together may run at once (``store.max_calls``)."""

IDENTITY_BUSY_HINT: Final = (
    "The server is busy with other calls from this same identity. Wait for them to finish, "
    "then retry; make fewer calls at once or narrow the time window."
)
"""The ``timeout`` hint of a call that waited on its identity's own limit."""
SERVER_BUSY_HINT: Final = (
    "The server is busy with calls from other clients. Retry later, or narrow the time window."
)
"""The ``timeout`` hint of a call that waited on the global limit."""


class _Waiter:
    __slots__ = ("granted", "wakeup")

    def __init__(self) -> None:
        self.wakeup = trio.Event()
        self.granted = False


def _calls(n: int) -> str:
    return "1 store call" if n == 1 else f"{n} store calls"


class StoreAdmission:
    """Concurrent store calls per identity and in all, with fair turns between identities.

    Args:
        max_calls_per_identity: store calls one identity may run at once; at least 1.
        max_calls: store calls that may run at once in all; at least ``max_calls_per_identity``.

    Raises:
        ValueError: a limit is below 1, or the per-identity limit is above the global one.
    """

    def __init__(
        self,
        max_calls_per_identity: int = DEFAULT_MAX_CALLS_PER_IDENTITY,
        max_calls: int = DEFAULT_MAX_CALLS,
    ) -> None:
        if max_calls_per_identity < 1:
            raise ValueError(
                f"max_calls_per_identity must be at least 1, got {max_calls_per_identity}"
            )
        if max_calls < max_calls_per_identity:
            raise ValueError(
                f"max_calls ({max_calls}) must be at least max_calls_per_identity "
                f"({max_calls_per_identity})"
            )
        self.max_calls_per_identity = max_calls_per_identity
        self.max_calls = max_calls
        self._running: dict[str, int] = {}
        self._total = 0
        # Identities with waiting calls, in turn order (the next to be served first).
        self._queues: collections.OrderedDict[str, collections.deque[_Waiter]] = (
            collections.OrderedDict()
        )

    def running(self, identity: str) -> int:
        """Store calls of ``identity`` running now."""
        return self._running.get(identity, 0)

    @property
    def running_total(self) -> int:
        """Store calls running now, all identities."""
        return self._total

    def waiting(self, identity: str) -> int:
        """Store calls of ``identity`` waiting for a slot now."""
        queue = self._queues.get(identity)
        return 0 if queue is None else len(queue)

    def _take(self, identity: str) -> None:
        self._running[identity] = self._running.get(identity, 0) + 1
        self._total += 1

    def _release(self, identity: str) -> None:
        left = self._running[identity] - 1
        if left:
            self._running[identity] = left
        else:
            del self._running[identity]
        self._total -= 1
        self._serve()

    def _serve(self) -> None:
        # Hand free slots to waiters: identities take turns; one at its own limit is skipped.
        while self._total < self.max_calls and self._queues:
            identity = next(
                (
                    name
                    for name in self._queues
                    if self._running.get(name, 0) < self.max_calls_per_identity
                ),
                None,
            )
            if identity is None:
                return
            queue = self._queues[identity]
            waiter = queue.popleft()
            if queue:
                self._queues.move_to_end(identity)
            else:
                del self._queues[identity]
            self._take(identity)
            waiter.granted = True
            waiter.wakeup.set()

    def _busy_hint(self, identity: str) -> tuple[str, str]:
        if self._running.get(identity, 0) >= self.max_calls_per_identity:
            return (
                f"admission to the telemetry store: this identity already runs "
                f"{_calls(self.max_calls_per_identity)} at once, its limit "
                "(store.max_calls_per_identity)",
                IDENTITY_BUSY_HINT,
            )
        return (
            f"admission to the telemetry store: {_calls(self.max_calls)} of other clients "
            "running, the limit for all (store.max_calls)",
            SERVER_BUSY_HINT,
        )

    @contextlib.asynccontextmanager
    async def slot(self, identity: str) -> AsyncIterator[None]:
        """Hold one store-call slot of ``identity`` for the body of the ``async with`` block.

        Waits (a trio checkpoint either way) until the identity is below its limit, the total
        below the global one, and it is this identity's turn. While waiting inside a gated
        call, the call is marked as waiting for admission (its ``timeout`` answer says so).

        Raises:
            trio.Cancelled: the call was cancelled or its deadline expired while waiting (no
                slot is held then).
        """
        await self.acquire(identity)
        try:
            yield
        finally:
            self.release(identity)

    async def acquire(self, identity: str) -> None:
        """Take one slot of ``identity``, waiting for it as :meth:`slot` does.

        The caller must give it back with :meth:`release` exactly once.

        Raises:
            trio.Cancelled: the call was cancelled or its deadline expired while waiting (no
                slot is held then).
        """
        immediate = (
            identity not in self._queues
            and self._total < self.max_calls
            and self._running.get(identity, 0) < self.max_calls_per_identity
        )
        if immediate:
            self._take(identity)
            try:
                await trio.lowlevel.checkpoint()
            except BaseException:
                self._release(identity)
                raise
        else:
            await self._wait(identity)

    def release(self, identity: str) -> None:
        """Give back a slot taken by :meth:`acquire` (the next waiter's turn comes)."""
        self._release(identity)

    async def _wait(self, identity: str) -> None:
        waiter = _Waiter()
        self._queues.setdefault(identity, collections.deque()).append(waiter)
        ctx = current_call_context()
        detail, hint = self._busy_hint(identity)
        note = contextlib.nullcontext() if ctx is None else ctx.waiting(detail, hint)
        try:
            with note:
                await waiter.wakeup.wait()
        except BaseException:
            if waiter.granted:
                # Served and cancelled in the same instant: hand the slot on.
                self._release(identity)
            else:
                queue = self._queues[identity]
                queue.remove(waiter)
                if not queue:
                    del self._queues[identity]
            raise


class AdmittedStore:
    """A :class:`~coremetry.store.TelemetryStore` whose reads pass a :class:`StoreAdmission`.

    A gated call takes a slot of the caller's identity (``caller.subject`` of
    :func:`~coremetry.mcp.context.current_call_context`) at its first read and holds it until the
    call ends (:meth:`~coremetry.mcp.CallContext.at_close`), so admitted calls run to their end
    in turn rather than all sharing the store until the last one finishes. Outside a call, and
    for ``write``, ``delete_before`` and ``aclose``, the call goes straight to the wrapped store.
    Results and exceptions are the wrapped store's.

    Args:
        store: the store to read (the caller owns it; :meth:`aclose` closes it).
        admission: the limits to apply.
    """

    def __init__(self, store: TelemetryStore, admission: StoreAdmission) -> None:
        self.store = store
        self.admission = admission
        self._holding: set[CallContext] = set()
        self._taking: dict[CallContext, trio.Lock] = {}

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        ctx = current_call_context()
        if ctx is None:
            yield
            return
        if ctx not in self._holding:
            # A call takes its slot at its first read and keeps it until it ends, so calls
            # finish in turn: were every read admitted on its own, waiting reads of all calls
            # would take turns and every call would finish when the last one does, past its
            # deadline. Reads of one call in parallel tasks share its slot.
            lock = self._taking.get(ctx)
            if lock is None:
                lock = self._taking[ctx] = trio.Lock()
            async with lock:
                if ctx not in self._holding:
                    identity = ctx.caller.subject
                    await self.admission.acquire(identity)
                    self._holding.add(ctx)
                    ctx.at_close(functools.partial(self._call_ended, ctx, identity))
        yield

    def _call_ended(self, ctx: CallContext, identity: str) -> None:
        self._holding.discard(ctx)
        self._taking.pop(ctx, None)
        self.admission.release(identity)

    async def write(self, batch: TelemetryBatch) -> WriteResult:
        """See :meth:`TelemetryStore.write` (not admitted: ingest, not a tool call)."""
        return await self.store.write(batch)

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        """See :meth:`TelemetryStore.services`."""
        async with self._admitted():
            return await self.store.services(time_range, limit=limit, service_name=service_name)

    async def operations(
        self, service_name: str, time_range: TimeRange, *, limit: int
    ) -> Page[OperationSummary]:
        """See :meth:`TelemetryStore.operations`."""
        async with self._admitted():
            return await self.store.operations(service_name, time_range, limit=limit)

    async def get_trace(
        self, trace_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[Span]:
        """See :meth:`TelemetryStore.get_trace`."""
        async with self._admitted():
            return await self.store.get_trace(trace_id, limit=limit, cursor=cursor)

    async def get_traces(self, trace_ids: Sequence[str], *, limit: int) -> list[Page[Span]]:
        """See :meth:`TelemetryStore.get_traces`."""
        async with self._admitted():
            return await self.store.get_traces(trace_ids, limit=limit)

    async def search_traces(
        self, query: TraceQuery, *, limit: int, cursor: str | None = None
    ) -> Page[TraceSummary]:
        """See :meth:`TelemetryStore.search_traces`."""
        async with self._admitted():
            return await self.store.search_traces(query, limit=limit, cursor=cursor)

    async def search_logs(
        self, query: LogQuery, *, limit: int, cursor: str | None = None
    ) -> Page[LogRecord]:
        """See :meth:`TelemetryStore.search_logs`."""
        async with self._admitted():
            return await self.store.search_logs(query, limit=limit, cursor=cursor)

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        """See :meth:`TelemetryStore.metric_names`."""
        async with self._admitted():
            return await self.store.metric_names(time_range, limit=limit, prefix=prefix)

    async def metric_series(self, query: MetricQuery, *, limit: int) -> list[MetricSeries]:
        """See :meth:`TelemetryStore.metric_series`."""
        async with self._admitted():
            return await self.store.metric_series(query, limit=limit)

    async def service_edges(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[ServiceEdge]:
        """See :meth:`TelemetryStore.service_edges`."""
        async with self._admitted():
            return await self.store.service_edges(
                time_range, limit=limit, service_name=service_name
            )

    async def deploys(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[DeployRecord]:
        """See :meth:`TelemetryStore.deploys`."""
        async with self._admitted():
            return await self.store.deploys(time_range, limit=limit, service_name=service_name)

    async def service_red_series(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[ServiceRedSeries]:
        """See :meth:`TelemetryStore.service_red_series`."""
        async with self._admitted():
            return await self.store.service_red_series(time_range, step_ns=step_ns, limit=limit)

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        """See :meth:`TelemetryStore.log_counts`."""
        async with self._admitted():
            return await self.store.log_counts(time_range, step_ns=step_ns, limit=limit)

    async def statistics(self) -> StoreStatistics:
        """See :meth:`TelemetryStore.statistics`."""
        async with self._admitted():
            return await self.store.statistics()

    async def delete_before(self, cutoff_unix_nano: int) -> RetentionResult:
        """See :meth:`TelemetryStore.delete_before` (not admitted: retention, not a call)."""
        return await self.store.delete_before(cutoff_unix_nano)

    async def aclose(self) -> None:
        """Close the wrapped store."""
        await self.store.aclose()


def _conforms(store: AdmittedStore) -> TelemetryStore:
    # mypy checks here that AdmittedStore implements the whole protocol.
    return store
