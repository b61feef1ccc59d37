"""``ClickHouseStore`` and ``open_clickhouse_store``: the ClickHouse backend's trio face.

Reads (``_queries``) and writes go through one :class:`~._runtime.Runtime` (worker threads
under a capacity limiter, a query id, ``readonly`` and the remaining budget on every read,
``KILL QUERY`` on cancellation).

**Writes and idempotency.** ClickHouse has no unique keys, and the exporter's tables are plain
``MergeTree`` (a ``ReplacingMergeTree`` would deduplicate only at some later merge, and is not
the exporter's schema). So :meth:`ClickHouseStore.write` makes imports idempotent itself,
inside the call, serialised by a lock (one writer per store):

1. the batch is validated whole (the embedded store's rules: ``QueryRejected`` naming
   ``spans[3].trace_id`` and the like, nothing stored);
2. records repeated *within* the batch count as duplicates;
3. one read per kind asks which of the batch's identities are stored already — spans by
   ``(TraceId, SpanId)`` among the batch's trace ids (bloom filter) whose start is within
   :data:`SPAN_IDENTITY_WINDOW_NS` of the batch's; log records by every field, among the
   records of the batch's services at the batch's timestamps (sort key); metric points by
   ``(MetricName, ServiceName, Attributes, TimeUnix)`` (sort key);
4. the rest is inserted, one ``INSERT`` per table (``insert_deduplicate=0``: the check above
   is the deduplication).

What this does not cover: another writer (a Collector, a second Coremetry) inserting the same
records at the same moment, and the same span sent again with a start time more than a day
away. Reads do not deduplicate: copies a Collector stored twice count twice.

**Atomicity.** One ``INSERT`` of one block is atomic in ClickHouse; a batch of several kinds
is one ``INSERT`` per table with no transaction around them. A cancelled write is shielded
once its inserts begin (it completes, then ``Cancelled`` is raised); a failed insert leaves
the kinds inserted before it stored, and repeating the write is safe (step 3 counts them as
duplicates).

**Retention.** The exporter's tables carry their own ``TTL`` (the exporter's ``ttl``
option): the store runs no retention task. The roll-ups follow the traces table's TTL: at open,
with ``create_tables``, a roll-up table whose TTL differs is given ``TTL Minute + <the traces
table's interval>`` (without it, the statements are logged for the operator to run), so a
minute's figures go with its spans. :meth:`ClickHouseStore.delete_before` is a
lightweight ``DELETE`` per table (one mutation each, not chunked).

**Startup.** :func:`open_clickhouse_store` connects, reads ``system.columns`` and raises
:class:`~coremetry.store.errors.StoreSchemaError` naming every missing table or column (or
creates the exporter's tables first with ``create_tables``). It also looks for the exporter's
trace-id lookup table (``otel_traces_trace_id_ts``, see ``_schema``): optional, logged when it
is missing or not of the exporter's shape; ``get_trace`` then reads by the ``TraceId`` bloom
filter alone. ``create_tables`` creates the lookup table and its materialized view only with
the traces table (a view added over stored spans would give straddling traces short bounds).
Our own inserts into ``otel_traces`` fill the lookup through that view, as the exporter's do.
``create_tables`` also creates the edge roll-up (``otel_traces_edges_1m`` and ``..._done``,
:func:`._schema.edge_rollup_ddl`) when it is missing, beside existing tables too: it is
filled by the reads (settled minutes rolled up from the stored spans), not by a view.

Problems, anomalies, users, tokens and the audit log are not telemetry: they stay in the
embedded files of the data dir whichever backend holds the telemetry.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, cast

import msgspec
import trio
from clickhouse_connect.driver.client import Client

from coremetry.store._query_args import (
    check_limit,
    check_metric_query,
    check_range,
    check_step,
    check_trace_id,
    check_trace_ids,
)
from coremetry.store.errors import StoreClosed, StoreError, StoreSchemaError
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
from coremetry.store.model import LogRecord, MetricPoint, MetricType, Span, TelemetryBatch
from coremetry.store.validation import validate_batch

from ._codec import (
    LOG_SELECT,
    LogColumns,
    LogOut,
    SpanColumns,
    canonical_attributes,
    log_key,
    log_row,
    span_row,
)
from ._queries import ENTRY, ERROR, Reader
from ._runtime import Param, Runtime, connect, redacted_url
from ._schema import (
    REQUIRED_COLUMNS,
    ROLLUP_KINDS,
    TABLE_KINDS,
    TableNames,
    edge_rollup_ddl,
    edge_rollup_problem,
    exporter_ddl,
    missing_columns,
    rollup_ddl,
    rollup_problem,
    rollup_select,
    rollup_ttl_ddl,
    trace_lookup_problem,
    ttl_interval,
)

__all__ = [
    "ClickHouseOptions",
    "ClickHouseStore",
    "SPAN_IDENTITY_WINDOW_NS",
    "open_clickhouse_store",
]

log = logging.getLogger("coremetry.store.clickhouse")

NANOS_PER_DAY: Final = 86_400 * 1_000_000_000
SPAN_IDENTITY_WINDOW_NS: Final = NANOS_PER_DAY
"""A span already stored is recognised when its start is within a day of the batch's spans."""
_MAX_NS: Final = 2**63 - 1
_TEMPORALITY: Final = {"unspecified": 0, "delta": 1, "cumulative": 2}


class ClickHouseOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach the exporter's tables (the ``[clickhouse]`` configuration section).

    Attributes:
        url: ``http://host:8123`` / ``https://host:8443`` (a server's HTTP interface), or
            ``chdb:///path`` / ``chdb://memory`` (an embedded chDB engine in this process).
        username: the ClickHouse user (``""``: the server's default user).
        password: its password (from the environment or a file, never the command line).
        tables: database and table names, as the exporter is configured.
        query_threads: statements in flight at once.
        connect_timeout_s: seconds to wait for a connection.
        create_tables: create the exporter's tables when they are missing.
        retention_days: ``outside_retention`` counts records older than this (0: none); the
            tables' own TTL deletes them.
    """

    url: str
    username: str = ""
    password: str = ""
    tables: TableNames = msgspec.field(default_factory=TableNames)
    query_threads: int = 4
    connect_timeout_s: float = 10.0
    create_tables: bool = False
    retention_days: float = 0.0


def _columns(kind: str) -> tuple[list[str], list[str]]:
    names = {
        "traces": list(SpanColumns),
        "logs": list(LogColumns),
        "gauge": [*_METRIC_COLUMNS, "Value"],
        "sum": [*_METRIC_COLUMNS, "Value", "AggregationTemporality", "IsMonotonic"],
        "histogram": [
            *_METRIC_COLUMNS,
            "Count",
            "Sum",
            "BucketCounts",
            "ExplicitBounds",
            "Min",
            "Max",
            "AggregationTemporality",
        ],
    }[kind]
    return names, [REQUIRED_COLUMNS[kind][name] for name in names]


_METRIC_COLUMNS: Final = (
    "ResourceAttributes",
    "ServiceName",
    "MetricName",
    "MetricDescription",
    "MetricUnit",
    "Attributes",
    "StartTimeUnix",
    "TimeUnix",
)


def _point_row(point: MetricPoint, attributes: dict[str, str]) -> list[object]:
    row: list[object] = [
        canonical_attributes(point.resource_attributes),
        point.service_name,
        point.name,
        point.description,
        point.unit,
        attributes,
        point.start_time_unix_nano,
        point.time_unix_nano,
    ]
    if point.type == "histogram":
        histogram = point.histogram
        assert histogram is not None  # validated
        row += [
            histogram.count,
            histogram.sum if histogram.sum is not None else 0.0,
            list(histogram.bucket_counts),
            list(histogram.explicit_bounds),
            histogram.min if histogram.min is not None else 0.0,
            histogram.max if histogram.max is not None else 0.0,
            _TEMPORALITY[point.temporality],
        ]
    else:
        assert point.value is not None  # validated
        row.append(float(point.value))
        if point.type == "sum":
            row += [_TEMPORALITY[point.temporality], bool(point.is_monotonic)]
    return row


PointKey = tuple[str, str, tuple[tuple[str, str], ...], int]


class ClickHouseStore:
    """The ClickHouse telemetry store (:class:`~coremetry.store.TelemetryStore`).

    Create it with :func:`open_clickhouse_store`; every method is documented on the protocol,
    the differences from the embedded store in this package's docstrings. ``trace_lookup``:
    the exporter's trace-id lookup table exists and is of its shape (``get_trace`` reads a
    trace's time bounds from it first). ``rollups``: the RED roll-up table exists
    (:func:`._schema.rollup_ddl`): ``services``, ``operations`` and ``deploys`` read it.
    ``edge_rollups``: the edge roll-up tables exist (:func:`._schema.edge_rollup_ddl`):
    ``service_edges`` rolls up settled minutes into them and reads them.
    """

    def __init__(
        self,
        options: ClickHouseOptions,
        runtime: Runtime,
        *,
        trace_lookup: bool = False,
        rollups: bool = False,
        edge_rollups: bool = False,
    ) -> None:
        self.options = options
        self.runtime = runtime
        self.rollups = rollups
        self.edge_rollups = edge_rollups
        self._reader = Reader(
            options.tables,
            runtime,
            trace_lookup=trace_lookup,
            rollups=rollups,
            edge_rollups=edge_rollups,
        )
        self._write_lock = trio.Lock()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the ClickHouse store at {self.runtime.where} is closed")

    # -- write side -------------------------------------------------------------------------

    async def write(self, batch: TelemetryBatch) -> WriteResult:
        """See :meth:`TelemetryStore.write` and the module docstring (idempotency, atomicity)."""
        self._check_open()
        validate_batch(batch)
        async with self._write_lock:
            self._check_open()
            spans, spans_dup = await self._new_spans(batch.spans)
            logs, logs_dup = await self._new_logs(batch.logs)
            points, points_dup = await self._new_points(batch.metrics)
            with trio.CancelScope(shield=True):
                await self._insert(spans, logs, points)
        cutoff = self._retention_cutoff()
        outside = 0
        if cutoff is not None:
            outside = (
                sum(1 for s in batch.spans if s.start_time_unix_nano < cutoff)
                + sum(1 for r in batch.logs if r.time_unix_nano < cutoff)
                + sum(1 for p in batch.metrics if p.time_unix_nano < cutoff)
            )
        return WriteResult(
            spans_written=len(spans),
            spans_duplicate=spans_dup,
            logs_written=len(logs),
            logs_duplicate=logs_dup,
            metric_points_written=sum(len(rows) for rows in points.values()),
            metric_points_duplicate=points_dup,
            outside_retention=outside,
        )

    def _retention_cutoff(self) -> int | None:
        days = self.options.retention_days
        if days <= 0:
            return None
        return time.time_ns() - int(days * NANOS_PER_DAY)

    async def _new_spans(self, spans: Sequence[Span]) -> tuple[list[list[object]], int]:
        if not spans:
            return [], 0
        seen: set[tuple[str, str]] = set()
        unique: list[Span] = []
        for span in spans:
            key = (span.trace_id, span.span_id)
            if key not in seen:
                seen.add(key)
                unique.append(span)
        starts = [s.start_time_unix_nano for s in unique]
        rows = await self.runtime.query(
            f"""
            SELECT TraceId, SpanId FROM {self._reader.traces}
            WHERE TraceId IN {{trace_ids:Array(String)}}
              AND Timestamp >= fromUnixTimestamp64Nano({{low:Int64}})
              AND Timestamp <= fromUnixTimestamp64Nano({{high:Int64}})
            """,
            {
                "trace_ids": sorted({s.trace_id for s in unique}),
                "low": max(0, min(starts) - SPAN_IDENTITY_WINDOW_NS),
                "high": min(_MAX_NS, max(starts) + SPAN_IDENTITY_WINDOW_NS),
            },
        )
        stored = {(cast(str, row[0]), cast(str, row[1])) for row in rows}
        fresh = [span_row(s) for s in unique if (s.trace_id, s.span_id) not in stored]
        return fresh, len(spans) - len(fresh)

    async def _new_logs(self, records: Sequence[LogRecord]) -> tuple[list[list[object]], int]:
        if not records:
            return [], 0
        by_key: dict[tuple[object, ...], list[object]] = {}
        for record in records:
            row = log_row(record)
            by_key.setdefault(log_key(cast(LogOut, tuple(row))), row)
        times = sorted({r.time_unix_nano for r in records})
        rows = await self.runtime.query(
            f"""
            SELECT {LOG_SELECT} FROM {self._reader.logs}
            WHERE ServiceName IN {{services:Array(String)}}
              AND TimestampTime >= toDateTime({{low_s:UInt32}})
              AND TimestampTime <= toDateTime({{high_s:UInt32}})
              AND Timestamp >= fromUnixTimestamp64Nano({{low:Int64}})
              AND Timestamp <= fromUnixTimestamp64Nano({{high:Int64}})
              AND toUnixTimestamp64Nano(Timestamp) IN {{times:Array(Int64)}}
            """,
            {
                "services": sorted({r.service_name for r in records}),
                "low_s": min(times[0] // 1_000_000_000, 2**32 - 1),
                "high_s": min(times[-1] // 1_000_000_000, 2**32 - 1),
                "low": times[0],
                "high": times[-1],
                "times": times,
            },
        )
        stored = {log_key(cast(LogOut, row)) for row in rows}
        fresh = [row for key, row in by_key.items() if key not in stored]
        return fresh, len(records) - len(fresh)

    async def _new_points(
        self, points: Sequence[MetricPoint]
    ) -> tuple[dict[MetricType, list[list[object]]], int]:
        by_kind: dict[MetricType, dict[PointKey, list[object]]] = {}
        for point in points:
            attributes = canonical_attributes(point.attributes)
            key: PointKey = (
                point.service_name,
                point.name,
                tuple(attributes.items()),
                point.time_unix_nano,
            )
            by_kind.setdefault(point.type, {}).setdefault(key, _point_row(point, attributes))
        fresh: dict[MetricType, list[list[object]]] = {}
        for kind, rows_by_key in by_kind.items():
            keys = list(rows_by_key)
            times = sorted({k[3] for k in keys})
            params: dict[str, Param] = {
                "names": sorted({k[1] for k in keys}),
                "services": sorted({k[0] for k in keys}),
                "low": times[0],
                "high": times[-1],
                "times": times,
            }
            rows = await self.runtime.query(
                f"""
                SELECT toString(ServiceName), MetricName,
                       CAST(Attributes, 'Map(String, String)'),
                       toUnixTimestamp64Nano(TimeUnix)
                FROM {self._reader.metric_tables[kind]}
                WHERE ServiceName IN {{services:Array(String)}}
                  AND MetricName IN {{names:Array(String)}}
                  AND TimeUnix >= fromUnixTimestamp64Nano({{low:Int64}})
                  AND TimeUnix <= fromUnixTimestamp64Nano({{high:Int64}})
                  AND toUnixTimestamp64Nano(TimeUnix) IN {{times:Array(Int64)}}
                """,
                params,
            )
            stored = {
                (
                    cast(str, row[0]),
                    cast(str, row[1]),
                    tuple(sorted(cast("dict[str, str]", row[2]).items())),
                    cast(int, row[3]),
                )
                for row in rows
            }
            fresh[kind] = [row for key, row in rows_by_key.items() if key not in stored]
        written = sum(len(rows) for rows in fresh.values())
        return {k: v for k, v in fresh.items() if v}, len(points) - written

    async def _insert(
        self,
        spans: list[list[object]],
        logs: list[list[object]],
        points: dict[MetricType, list[list[object]]],
    ) -> None:
        tables = self.options.tables
        work: list[tuple[str, list[list[object]]]] = [("traces", spans), ("logs", logs)]
        kinds: tuple[MetricType, ...] = ("gauge", "sum", "histogram")
        work += [(kind, points.get(kind, [])) for kind in kinds]
        for kind, rows in work:
            if rows:
                names, types = _columns(kind)
                await self.runtime.insert(tables.table(kind), tables.database, names, types, rows)

    async def delete_before(self, cutoff_unix_nano: int) -> RetentionResult:
        """See :meth:`TelemetryStore.delete_before`: a lightweight ``DELETE`` per table."""
        self._check_open()
        cutoff = max(0, min(int(cutoff_unix_nano), _MAX_NS))
        counts: dict[str, int] = {}
        async with self._write_lock:
            for kind in TABLE_KINDS:
                column = "TimeUnix" if kind not in ("traces", "logs") else "Timestamp"
                table = self.options.tables.qualified(kind)
                condition = f"{column} < fromUnixTimestamp64Nano({{cutoff:Int64}})"
                rows = await self.runtime.query(
                    f"SELECT count() FROM {table} WHERE {condition}", {"cutoff": cutoff}
                )
                counts[kind] = cast(int, rows[0][0])
                if counts[kind]:
                    with trio.CancelScope(shield=True):
                        await self.runtime.command(
                            f"DELETE FROM {table} WHERE {condition}", {"cutoff": cutoff}
                        )
            if self.rollups and counts["traces"]:
                with trio.CancelScope(shield=True):
                    await self._rollups_after_retention(cutoff)
            if self.edge_rollups and counts["traces"]:
                with trio.CancelScope(shield=True):
                    await self._edges_after_retention(cutoff)
        return RetentionResult(
            spans_deleted=counts["traces"],
            logs_deleted=counts["logs"],
            metric_points_deleted=counts["gauge"] + counts["sum"] + counts["histogram"],
        )

    async def _rollups_after_retention(self, cutoff: int) -> None:
        """Drop the roll-up minutes before the cutoff's, rebuild its minute from what is left."""
        tables = self.options.tables
        rollup = tables.qualified("red_1m")
        minute = cutoff - cutoff % (60 * 1_000_000_000)
        params: dict[str, Param] = {"minute": minute // 1_000_000_000, "cutoff": cutoff}
        # The cutoff's own minute goes too when the cutoff is inside it (rebuilt below).
        upto = "<" if minute == cutoff else "<="
        await self.runtime.command(
            f"DELETE FROM {rollup} WHERE Minute {upto} toDateTime({{minute:UInt32}})", params
        )
        if minute < cutoff:
            where = (
                "WHERE Timestamp >= fromUnixTimestamp64Nano({cutoff:Int64}) "
                "AND Timestamp < fromUnixTimestamp64Nano({next:Int64})"
            )
            await self.runtime.command(
                f"INSERT INTO {rollup} "
                + rollup_select(tables.qualified("traces"), where, ENTRY, ERROR),
                {**params, "next": min(minute + 60 * 1_000_000_000, _MAX_NS)},
            )

    async def _edges_after_retention(self, cutoff: int) -> None:
        """Drop the edge roll-up's minutes before the cutoff's.

        The cutoff's own minute goes too when the cutoff is inside it (its rows and its mark:
        the next read rolls it up again from the spans left).
        """
        tables = self.options.tables
        minute = cutoff - cutoff % (60 * 1_000_000_000)
        upto = "<" if minute == cutoff else "<="
        async with self._reader.edge_lock:  # not while a read is rolling minutes up
            for kind in ("edges_1m_done", "edges_1m"):
                await self.runtime.command(
                    f"DELETE FROM {tables.qualified(kind)} "
                    f"WHERE Minute {upto} toDateTime({{minute:UInt32}})",
                    {"minute": minute // 1_000_000_000},
                )

    # -- read side --------------------------------------------------------------------------

    async def statistics(self) -> StoreStatistics:
        """See :meth:`TelemetryStore.statistics`; ``size_bytes`` is the tables' parts on disk."""
        self._check_open()
        return await self._reader.statistics()

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        """See :meth:`TelemetryStore.services`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        return await self._reader.services(time_range, limit, service_name)

    async def operations(
        self, service_name: str, time_range: TimeRange, *, limit: int
    ) -> Page[OperationSummary]:
        """See :meth:`TelemetryStore.operations`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        return await self._reader.operations(service_name, time_range, limit)

    async def get_trace(
        self, trace_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[Span]:
        """See :meth:`TelemetryStore.get_trace`."""
        self._check_open()
        tid = check_trace_id(trace_id, "trace_id")
        check_limit(limit)
        return await self._reader.get_trace(tid, limit, cursor)

    async def get_traces(self, trace_ids: Sequence[str], *, limit: int) -> list[Page[Span]]:
        """See :meth:`TelemetryStore.get_traces`: one statement for every id."""
        self._check_open()
        tids = check_trace_ids(trace_ids)
        check_limit(limit)
        return await self._reader.get_traces(tids, limit)

    async def search_traces(
        self, query: TraceQuery, *, limit: int, cursor: str | None = None
    ) -> Page[TraceSummary]:
        """See :meth:`TelemetryStore.search_traces`."""
        self._check_open()
        check_range(query.time_range)
        check_limit(limit)
        return await self._reader.search_traces(query, limit, cursor)

    async def search_logs(
        self, query: LogQuery, *, limit: int, cursor: str | None = None
    ) -> Page[LogRecord]:
        """See :meth:`TelemetryStore.search_logs` (BM25 over the filtered range: ``_queries``)."""
        self._check_open()
        check_range(query.time_range)
        check_limit(limit)
        return await self._reader.search_logs(query, limit, cursor)

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        """See :meth:`TelemetryStore.metric_names`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        return await self._reader.metric_names(time_range, limit, prefix)

    async def metric_series(self, query: MetricQuery, *, limit: int) -> list[MetricSeries]:
        """See :meth:`TelemetryStore.metric_series`."""
        self._check_open()
        check_range(query.time_range)
        check_limit(limit)
        check_metric_query(query)
        return await self._reader.metric_series(query, limit)

    async def service_edges(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[ServiceEdge]:
        """See :meth:`TelemetryStore.service_edges`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        return await self._reader.service_edges(time_range, limit, service_name)

    async def deploys(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[DeployRecord]:
        """See :meth:`TelemetryStore.deploys`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        return await self._reader.deploys(time_range, limit, service_name)

    async def service_red_series(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[ServiceRedSeries]:
        """See :meth:`TelemetryStore.service_red_series`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        check_step(time_range, step_ns)
        return await self._reader.service_red_series(time_range, step_ns, limit)

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        """See :meth:`TelemetryStore.log_counts`."""
        self._check_open()
        check_range(time_range)
        check_limit(limit)
        check_step(time_range, step_ns)
        return await self._reader.log_counts(time_range, step_ns, limit)

    async def aclose(self) -> None:
        """See :meth:`TelemetryStore.aclose`: waits for a write in progress, then closes."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                await trio.to_thread.run_sync(self.runtime.close)


async def _read_columns(runtime: Runtime, options: ClickHouseOptions) -> dict[str, dict[str, str]]:
    """Per table kind (and ``trace_id_ts``), the columns of the tables that exist."""
    tables = options.tables
    names = {
        tables.table(kind): kind
        for kind in (*TABLE_KINDS, "trace_id_ts", "red_1m", "edges_1m", "edges_1m_done")
    }
    rows = await runtime.query(
        "SELECT table, name, type FROM system.columns "
        "WHERE database = {database:String} AND table IN {tables:Array(String)}",
        {"database": tables.database, "tables": sorted(names)},
    )
    found: dict[str, dict[str, str]] = {}
    for table, column, type_name in rows:
        found.setdefault(names[cast(str, table)], {})[cast(str, column)] = cast(str, type_name)
    return found


async def _follow_traces_ttl(runtime: Runtime, options: ClickHouseOptions) -> None:
    """Give the roll-up tables the traces table's time-to-live (module docstring, Retention).

    With ``create_tables``, a roll-up whose TTL is not the traces table's (none, or another
    interval) is altered to ``TTL Minute + <interval>``; without it, the statements to run
    are logged (WARNING): the roll-ups would otherwise keep every minute after its spans are
    gone. A traces table without a TTL, or with one of another shape than the exporter's
    (:func:`._schema.ttl_interval`), leaves the roll-ups as they are. A refused ``ALTER`` (a
    user without the right) is logged and the store opens.
    """
    tables = options.tables
    kinds = {tables.table(kind): kind for kind in ("traces", *ROLLUP_KINDS)}
    rows = await runtime.query(
        "SELECT name, engine_full FROM system.tables "
        "WHERE database = {database:String} AND name IN {tables:Array(String)}",
        {"database": tables.database, "tables": sorted(kinds)},
    )
    engines = {kinds[cast(str, name)]: cast(str, engine) for name, engine in rows}
    interval = ttl_interval(engines.get("traces", ""))
    if interval is None:
        return
    statements = [
        rollup_ttl_ddl(tables, kind, interval)
        for kind in ROLLUP_KINDS
        if kind in engines and ttl_interval(engines[kind]) != interval
    ]
    if not statements:
        return
    if not options.create_tables:
        log.warning(
            "ClickHouse at %s: the traces table deletes spans after %s (TTL) but roll-up "
            "tables keep their minutes; with clickhouse.create_tables the store sets it, or "
            "run: %s",
            runtime.where,
            interval,
            "; ".join(statements),
        )
        return
    try:
        for statement in statements:
            await runtime.command(statement, {})
    except StoreError as error:
        log.warning(
            "ClickHouse at %s: could not give the roll-ups the traces table's TTL (%s): %s",
            runtime.where,
            interval,
            error,
        )
        return
    log.info(
        "ClickHouse at %s: roll-ups follow the traces table's TTL (%s)", runtime.where, interval
    )


@asynccontextmanager
async def open_clickhouse_store(options: ClickHouseOptions) -> AsyncIterator[ClickHouseStore]:
    """Connect to ClickHouse, check the exporter's tables, and yield the store.

    Args:
        options: where and how (see :class:`ClickHouseOptions`).

    Yields:
        The open store; on exit it is closed (a write in progress finishes first).

    Raises:
        ValueError: an option is out of range or a name is not a plain identifier (names it).
        StoreUnavailable: the server cannot be reached or refuses the credentials.
        StoreSchemaError: a table or column the store needs is missing or of another type;
            the message lists every one.
    """
    options.tables.check()
    if options.query_threads < 1:
        raise ValueError(f"clickhouse.query_threads must be >= 1, got {options.query_threads}")
    if not (math.isfinite(options.connect_timeout_s) and options.connect_timeout_s > 0):
        raise ValueError("clickhouse.connect_timeout_s must be a positive number")
    url = options.url
    if not url.startswith(("http://", "https://", "chdb:")):
        raise ValueError(
            f"clickhouse.url must be http://, https:// or chdb://, got {redacted_url(url)!r}"
        )
    embedded = url.startswith("chdb:")

    def new_client() -> Client:
        return connect(
            url,
            username=options.username,
            password=options.password,
            connect_timeout_s=options.connect_timeout_s,
            dedicated_pool=True,
        )

    def make_clients() -> Runtime:
        client = new_client()
        # A server's client is shared (and a second one kills); an embedded engine's
        # statements take a client each, a new one when none is idle (``_runtime``).
        killer = None if embedded else new_client()
        return Runtime(
            client,
            killer,
            where=redacted_url(url),
            query_threads=options.query_threads,
            reconnect=new_client if embedded else None,
        )

    runtime = await trio.to_thread.run_sync(make_clients)
    try:
        found = await _read_columns(runtime, options)
        problems = missing_columns(options.tables, found)
        if problems and options.create_tables:
            new_traces = "traces" not in found
            for statement in exporter_ddl(options.tables, trace_lookup=new_traces):
                await runtime.command(statement, {})
            if new_traces:
                for statement in rollup_ddl(options.tables, entry=ENTRY, error=ERROR):
                    await runtime.command(statement, {})
            found = await _read_columns(runtime, options)
            problems = missing_columns(options.tables, found)
        if (
            options.create_tables
            and not problems
            and "edges_1m" not in found
            and "edges_1m_done" not in found
        ):
            # Rolled up from the stored spans when read: safe to add to existing tables.
            for statement in edge_rollup_ddl(options.tables):
                await runtime.command(statement, {})
            found = await _read_columns(runtime, options)
        if problems:
            raise StoreSchemaError(
                f"the ClickHouse tables at {runtime.where} are not the OpenTelemetry "
                "Collector exporter's: " + "; ".join(problems)
            )
        await _follow_traces_ttl(runtime, options)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(runtime.close)
        raise
    lookup_problem = trace_lookup_problem(options.tables, found.get("trace_id_ts"))
    if lookup_problem is not None:
        log.info(
            "ClickHouse at %s: no usable trace-id lookup (%s); get_trace reads by the TraceId "
            "bloom filter alone",
            runtime.where,
            lookup_problem,
        )
    no_rollups = rollup_problem(options.tables, found.get("red_1m"))
    if no_rollups is not None:
        log.info(
            "ClickHouse at %s: no RED roll-ups (%s); services, operations and deploys read the "
            "raw spans (clickhouse.create_tables creates them with a new traces table)",
            runtime.where,
            no_rollups,
        )
    no_edge_rollups = edge_rollup_problem(
        options.tables, found.get("edges_1m"), found.get("edges_1m_done")
    )
    if no_edge_rollups is not None:
        log.info(
            "ClickHouse at %s: no edge roll-up (%s); service_edges reads the raw spans "
            "(clickhouse.create_tables creates it)",
            runtime.where,
            no_edge_rollups,
        )
    store = ClickHouseStore(
        options,
        runtime,
        trace_lookup=lookup_problem is None,
        rollups=no_rollups is None,
        edge_rollups=no_edge_rollups is None,
    )
    try:
        yield store
    finally:
        await store.aclose()
