"""``SqliteStore`` and ``open_sqlite_store``: the embedded backend's trio face.

Concurrency model:

- **Threads.** Every blocking call runs in a worker thread (:func:`trio.to_thread.run_sync`)
  while holding one token of a :class:`trio.CapacityLimiter` of ``query_threads`` tokens, so
  at most that many store threads run at once.
- **Reads** take a connection from a small pool (at most one per token; opened lazily, kept
  open, ``query_only``) and run in one read transaction (a consistent snapshot; WAL readers
  never wait for the writer). A cancelled read is *interrupted*: the thread stops at the
  running statement (:mod:`._runtime`), the connection goes back to the pool.
- **Writes** go through the one writer connection, serialised by a :class:`trio.Lock`. Each
  ``write`` is one transaction. Writes are **not** interruptible: cancelling a write waits
  until its transaction has committed or rolled back (at most the duration of one batch),
  then raises ``Cancelled`` — so a cancelled write is stored entirely or not at all.
- **Retention** is a background task in the store's own nursery: every
  ``retention_interval_s`` seconds (the first pass one interval after open) it deletes records
  older than ``retention_days`` in chunks of :data:`RETENTION_CHUNK` rows per kind, one
  transaction per chunk, releasing the write lock between chunks so that writes interleave.

Errors: ``sqlite3`` operational failures (I/O, disk full, locked past the busy timeout, a
corrupt file) become :class:`~coremetry.store.errors.StoreUnavailable` naming the file; other
``sqlite3`` errors are bugs and propagate as they are.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Final, TypeVar

import trio

from coremetry.private_files import create_private_file
from coremetry.store._query_args import (
    check_limit,
    check_metric_query,
    check_range,
    check_step,
    check_trace_ids,
)
from coremetry.store.errors import QueryRejected, StoreClosed, StoreUnavailable
from coremetry.store.interface import (
    DeployRecord,
    LogCountSeries,
    LogQuery,
    MetricDescriptor,
    MetricQuery,
    MetricSeries,
    OperationSummary,
    Page,
    RetentionResult,
    ServiceEdge,
    ServiceRedSeries,
    ServiceSummary,
    StoreStatistics,
    TimeRange,
    TraceQuery,
    TraceSummary,
    WriteResult,
)
from coremetry.store.model import LogRecord, Span, TelemetryBatch
from coremetry.supervision import supervise

from . import _queries, _rollups
from ._runtime import ReadContext, connect, release_free_memory, run_interruptible
from ._schema import SchemaTooNew, migrate
from ._writer import Writer

__all__ = ["NANOS_PER_DAY", "RETENTION_CHUNK", "SqliteStore", "open_sqlite_store"]

log = logging.getLogger("coremetry.store.sqlite")

T = TypeVar("T")

NANOS_PER_DAY: Final = 86_400 * 1_000_000_000
RETENTION_CHUNK: Final = 5000
"""Rows per kind deleted in one retention transaction."""
PENDING_PASS_S: Final = 5.0
"""Seconds between two runs of the roll-ups' deferred pass (children whose parent came)."""
IDLE_RELEASE_S: Final = 10.0
"""Seconds without a read after which the store gives back the memory its reads held: the
pooled reader connections are closed (their page caches freed, their ``mmap`` of the file
unmapped; the next read opens one again, ~1 ms), the writer's page cache is shrunk
(``PRAGMA shrink_memory``) and the C allocator returns freed pages to the OS
(:func:`~._runtime.release_free_memory`). So a burst of large reads raises the process's RSS
only while it lasts."""


def _is_operational(exc: sqlite3.Error) -> bool:
    # DatabaseError itself: "file is not a database", "database disk image is malformed".
    return isinstance(exc, sqlite3.OperationalError | sqlite3.InternalError) or (
        type(exc) is sqlite3.DatabaseError
    )


class SqliteStore:
    """The embedded telemetry store (:class:`~coremetry.store.TelemetryStore`) over SQLite.

    Create it with :func:`open_sqlite_store`; every method is documented on the protocol.
    """

    def __init__(
        self,
        path: Path,
        writer: Writer,
        *,
        retention_days: float,
        query_threads: int,
    ) -> None:
        self.path = path
        self._writer = writer
        # Merged roll-up rows of past days, shared by the reads (checked per read against the
        # days' generations in its snapshot).
        self._closed_days = _rollups.ClosedDays()
        self._retention_days = retention_days
        self._limiter = trio.CapacityLimiter(query_threads)
        self._write_lock = trio.Lock()
        self._readers: list[sqlite3.Connection] = []
        self._reads_in_flight = 0
        self._last_read_end = trio.current_time()
        self._memory_released = True
        self._closed = False
        self._background: trio.CancelScope | None = None

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if _is_operational(exc):
                raise StoreUnavailable(f"telemetry store {self.path}: {exc}") from exc
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the telemetry store {self.path} is closed")

    def _retention_cutoff(self) -> int | None:
        if self._retention_days <= 0:
            return None
        return time.time_ns() - int(self._retention_days * NANOS_PER_DAY)

    async def _read(self, fn: Callable[[ReadContext], T]) -> T:
        self._check_open()
        async with self._limiter:
            self._check_open()
            conn = self._readers.pop() if self._readers else None
            healthy = False
            self._reads_in_flight += 1
            self._memory_released = False
            try:
                with self._mapped():
                    if conn is None:
                        conn = await trio.to_thread.run_sync(
                            lambda: connect(self.path, reader=True)
                        )
                    result = await run_interruptible(conn, fn)
                healthy = True
                return result
            except (QueryRejected, trio.Cancelled):
                healthy = True
                raise
            finally:
                self._reads_in_flight -= 1
                self._last_read_end = trio.current_time()
                if conn is not None:
                    if healthy and not self._closed and not conn.in_transaction:
                        self._readers.append(conn)
                    else:
                        conn.close()

    # -- write side -------------------------------------------------------------------------

    async def write(self, batch: TelemetryBatch) -> WriteResult:
        """See :meth:`TelemetryStore.write`. Cancellation waits for commit or rollback."""
        self._check_open()
        async with self._write_lock, self._limiter:
            self._check_open()
            with self._mapped():
                return await trio.to_thread.run_sync(
                    self._writer.write, batch, self._retention_cutoff()
                )

    async def delete_before(self, cutoff_unix_nano: int) -> RetentionResult:
        """See :meth:`TelemetryStore.delete_before` (chunks of :data:`RETENTION_CHUNK`)."""
        spans = logs = points = 0
        while True:
            self._check_open()
            async with self._write_lock, self._limiter:
                self._check_open()
                with self._mapped():
                    chunk = await trio.to_thread.run_sync(
                        self._writer.delete_chunk, cutoff_unix_nano, RETENTION_CHUNK
                    )
            spans += chunk.spans_deleted
            logs += chunk.logs_deleted
            points += chunk.metric_points_deleted
            if max(chunk.spans_deleted, chunk.logs_deleted, chunk.metric_points_deleted) < (
                RETENTION_CHUNK
            ):
                return RetentionResult(
                    spans_deleted=spans, logs_deleted=logs, metric_points_deleted=points
                )

    async def resolve_pending(self) -> None:
        """Run the roll-ups' deferred pass now (see :mod:`._rollups`).

        Rolls up the tail (the spans above the roll-ups' mark) and the waiting children
        whose parent came since. The store runs it every :data:`PENDING_PASS_S` seconds;
        answers are the same before and after it.
        """
        self._check_open()
        async with self._write_lock, self._limiter:
            self._check_open()
            with self._mapped():
                await trio.to_thread.run_sync(self._writer.resolve_pending)

    async def _run_pending(self) -> None:
        while True:
            await trio.sleep(PENDING_PASS_S)
            try:
                await self.resolve_pending()
            except StoreClosed:
                return
            except StoreUnavailable as exc:
                log.warning("roll-up pass failed (will retry): %s", exc)

    @property
    def pooled_readers(self) -> int:
        """Reader connections open and idle in the pool (each holds a page cache and a map)."""
        return len(self._readers)

    async def release_idle_memory(self) -> bool:
        """Give back the memory reads held, if no read ran for :data:`IDLE_RELEASE_S` seconds.

        Returns:
            ``True`` if it released (the store was idle and had read since the last release).
        """
        idle_s = trio.current_time() - self._last_read_end
        if self._memory_released or self._reads_in_flight or idle_s < IDLE_RELEASE_S:
            return False
        self._check_open()
        readers, self._readers = self._readers, []
        self._memory_released = True
        for conn in readers:
            conn.close()
        async with self._write_lock:
            self._check_open()
            with self._mapped():
                await trio.to_thread.run_sync(self._writer.conn.execute, "PRAGMA shrink_memory")
        await trio.to_thread.run_sync(release_free_memory)
        return True

    async def _run_idle_release(self) -> None:
        while True:
            await trio.sleep(IDLE_RELEASE_S / 2)
            try:
                await self.release_idle_memory()
            except StoreClosed:
                return
            except StoreUnavailable as exc:
                log.warning("releasing idle memory failed (will retry): %s", exc)

    async def _run_retention(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            cutoff = self._retention_cutoff()
            if cutoff is not None:
                try:
                    result = await self.delete_before(cutoff)
                except StoreClosed:
                    return
                except StoreUnavailable as exc:
                    log.warning("retention pass failed (will retry): %s", exc)
                else:
                    if result.spans_deleted or result.logs_deleted or result.metric_points_deleted:
                        log.info(
                            "retention: deleted %d spans, %d log records, %d metric points "
                            "older than %g days",
                            result.spans_deleted,
                            result.logs_deleted,
                            result.metric_points_deleted,
                            self._retention_days,
                        )

    # -- read side --------------------------------------------------------------------------

    async def statistics(self) -> StoreStatistics:
        """See :meth:`TelemetryStore.statistics`. ``size_bytes`` includes the WAL file."""
        stats = await self._read(_queries.statistics)
        size = 0
        for suffix in ("", "-wal"):
            with suppress(FileNotFoundError):
                size += os.stat(f"{self.path}{suffix}").st_size
        return StoreStatistics(
            span_count=stats.span_count,
            log_count=stats.log_count,
            metric_point_count=stats.metric_point_count,
            oldest_unix_nano=stats.oldest_unix_nano,
            newest_unix_nano=stats.newest_unix_nano,
            size_bytes=size,
        )

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        """See :meth:`TelemetryStore.services`."""
        check_range(time_range)
        check_limit(limit)
        return await self._read(
            lambda ctx: _rollups.services(ctx, time_range, limit, service_name, self._closed_days)
        )

    async def operations(
        self, service_name: str, time_range: TimeRange, *, limit: int
    ) -> Page[OperationSummary]:
        """See :meth:`TelemetryStore.operations`."""
        check_range(time_range)
        check_limit(limit)
        return await self._read(
            lambda ctx: _rollups.operations(ctx, service_name, time_range, limit, self._closed_days)
        )

    async def get_trace(
        self, trace_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[Span]:
        """See :meth:`TelemetryStore.get_trace`."""
        tid = _queries.check_trace_id(trace_id, "trace_id")
        check_limit(limit)
        return await self._read(lambda ctx: _queries.get_trace(ctx, tid, limit, cursor))

    async def get_traces(self, trace_ids: Sequence[str], *, limit: int) -> list[Page[Span]]:
        """See :meth:`TelemetryStore.get_traces`: one read (a thread hop) for every trace."""
        tids = [bytes.fromhex(one) for one in check_trace_ids(trace_ids)]
        check_limit(limit)
        return await self._read(
            lambda ctx: [_queries.get_trace(ctx, tid, limit, None) for tid in tids]
        )

    async def search_traces(
        self, query: TraceQuery, *, limit: int, cursor: str | None = None
    ) -> Page[TraceSummary]:
        """See :meth:`TelemetryStore.search_traces`."""
        check_range(query.time_range)
        check_limit(limit)
        return await self._read(lambda ctx: _queries.search_traces(ctx, query, limit, cursor))

    async def search_logs(
        self, query: LogQuery, *, limit: int, cursor: str | None = None
    ) -> Page[LogRecord]:
        """See :meth:`TelemetryStore.search_logs`."""
        check_range(query.time_range)
        check_limit(limit)
        plan = _queries.plan_log_search(query)
        return await self._read(lambda ctx: _queries.search_logs(ctx, plan, limit, cursor))

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        """See :meth:`TelemetryStore.metric_names`."""
        check_range(time_range)
        check_limit(limit)
        return await self._read(lambda ctx: _queries.metric_names(ctx, time_range, limit, prefix))

    async def metric_series(self, query: MetricQuery, *, limit: int) -> list[MetricSeries]:
        """See :meth:`TelemetryStore.metric_series`."""
        check_range(query.time_range)
        check_limit(limit)
        check_metric_query(query)
        return await self._read(lambda ctx: _queries.metric_series(ctx, query, limit))

    async def service_edges(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[ServiceEdge]:
        """See :meth:`TelemetryStore.service_edges`."""
        check_range(time_range)
        check_limit(limit)
        return await self._read(
            lambda ctx: _rollups.service_edges(
                ctx, time_range, limit, service_name, self._closed_days
            )
        )

    async def deploys(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[DeployRecord]:
        """See :meth:`TelemetryStore.deploys`."""
        check_range(time_range)
        check_limit(limit)
        return await self._read(
            lambda ctx: _rollups.deploys(ctx, time_range, limit, service_name, self._closed_days)
        )

    async def service_red_series(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[ServiceRedSeries]:
        """See :meth:`TelemetryStore.service_red_series`."""
        check_range(time_range)
        check_limit(limit)
        check_step(time_range, step_ns)
        return await self._read(
            lambda ctx: _queries.service_red_series(ctx, time_range, step_ns, limit)
        )

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        """See :meth:`TelemetryStore.log_counts`."""
        check_range(time_range)
        check_limit(limit)
        check_step(time_range, step_ns)

        def read(ctx: ReadContext) -> list[LogCountSeries]:
            rolled = _rollups.log_counts(ctx, time_range, step_ns, limit)
            if rolled is not None:
                return rolled
            return _queries.log_counts(ctx, time_range, step_ns, limit)

        return await self._read(read)

    # -- closing ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """See :meth:`TelemetryStore.aclose`: waits for a write in progress, then closes."""
        if self._closed:
            return
        self._closed = True
        if self._background is not None:
            self._background.cancel()
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                self._writer.conn.close()
        while self._readers:
            self._readers.pop().close()


def _open_writer(path: Path) -> Writer:
    try:
        create_private_file(path)  # 0600 from the start: telemetry carries user data
    except OSError as exc:
        message = f"telemetry store {path}: cannot create it: {exc}"
        raise StoreUnavailable(message) from exc
    try:
        conn = connect(path, reader=False)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"telemetry store {path}: cannot open: {exc}") from exc
    try:
        migrate(conn)
    except SchemaTooNew as exc:
        conn.close()
        raise StoreUnavailable(f"telemetry store {path}: {exc}") from None
    except sqlite3.Error as exc:
        conn.close()
        raise StoreUnavailable(f"telemetry store {path}: cannot open: {exc}") from exc
    return Writer(conn)


@asynccontextmanager
async def open_sqlite_store(
    path: Path,
    *,
    retention_days: float = 7.0,
    retention_interval_s: float = 300.0,
    query_threads: int = 4,
) -> AsyncIterator[SqliteStore]:
    """Open (creating or migrating) the embedded store at ``path`` and run its retention.

    Args:
        path: the database file, e.g. ``<data_dir>/telemetry.db`` (its directory is created).
            Also uses ``<path>-wal`` and ``<path>-shm`` (WAL mode).
        retention_days: records older than this many days are deleted by the background
            task (config ``store.retention_days``); ``0`` keeps everything.
        retention_interval_s: seconds between retention passes (config
            ``store.retention_interval_s``); the first pass runs one interval after open, so
            that records just imported stay until then (``WriteResult.outside_retention``
            says how many will go).
        query_threads: worker threads the store may use at once (config
            ``store.query_threads``).

    Yields:
        The open store; on exit it is closed (a write in progress finishes first).

    Raises:
        ValueError: an argument is out of range (the message names it).
        StoreUnavailable: the file cannot be opened or migrated, or was written by a newer
            Coremetry (its schema version is newer than this code's).
    """
    if not (math.isfinite(retention_days) and retention_days >= 0):
        raise ValueError(f"retention_days must be a finite number >= 0, got {retention_days!r}")
    if not (math.isfinite(retention_interval_s) and retention_interval_s > 0):
        raise ValueError(
            f"retention_interval_s must be a finite number > 0, got {retention_interval_s!r}"
        )
    if query_threads < 1:
        raise ValueError(f"query_threads must be >= 1, got {query_threads!r}")
    writer = await trio.to_thread.run_sync(_open_writer, path)
    store = SqliteStore(path, writer, retention_days=retention_days, query_threads=query_threads)
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            store._background = nursery.cancel_scope
            # A bug in a retention pass is logged and the loop starts again; never fatal.
            nursery.start_soon(
                partial(
                    supervise,
                    "store retention",
                    partial(store._run_retention, retention_interval_s),
                    restart_after_s=retention_interval_s,
                )
            )
            nursery.start_soon(
                partial(
                    supervise,
                    "store roll-up pass",
                    store._run_pending,
                    restart_after_s=PENDING_PASS_S,
                )
            )
            nursery.start_soon(
                partial(
                    supervise,
                    "store idle memory release",
                    store._run_idle_release,
                    restart_after_s=IDLE_RELEASE_S,
                )
            )
            try:
                yield store
            except BaseException as exc:
                # Re-raised below, outside the nursery, so the caller sees its own exception
                # rather than an ExceptionGroup.
                body_error = exc
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
    if body_error is not None:
        raise body_error
