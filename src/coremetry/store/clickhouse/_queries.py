"""The read side: one parameter-bound ClickHouse statement per query (two for metric series).

Every statement is text written here plus ``{name:Type}`` server-side parameters; the only
other text in it is a table name from the configuration, checked to be a plain identifier
(:func:`._schema.quote_identifier`) and our own constants. Aggregation, ranking, percentiles
and limits run in ClickHouse; Python turns at most ``limit`` (+1) rows into records. Two
documented exceptions, as in the embedded store: grouping the *series* of a metric (one row
per series) and interpolating histogram quantiles over already summed bucket counts.

How each query uses the exporter's sort keys and skip indexes (see ``_schema``):

- time ranges filter ``Timestamp``/``TimeUnix`` (partition pruning by day, and the sort key's
  ``toDateTime(Timestamp)``); the logs table's key column ``TimestampTime`` is filtered too;
- a service filters ``ServiceName``, the first column of every sort key;
- a trace by id reads the trace's time bounds from the exporter's lookup table
  (``otel_traces_trace_id_ts``, sorted by ``TraceId``) in a scalar subquery, and filters its
  spans by ``TraceId`` *and* ``Timestamp`` within those bounds (partitions by day and the sort
  key's ``toDateTime(Timestamp)``), as the Grafana ClickHouse data source and the Jaeger
  ClickHouse plugin do in two round trips; without a lookup row it filters ``TraceId`` alone
  (see :meth:`Reader.get_trace`);
- a trace id filters ``TraceId`` (``idx_trace_id`` bloom filter), attributes
  ``SpanAttributes[k] = v`` (``idx_*_attr_*`` bloom filters), a minimum duration ``Duration``
  (``idx_duration`` minmax).

Conventions:

- Percentiles are nearest-rank: ``arraySort(groupArray(d))[intDiv(n * p + 99, 100)]``
  (ClickHouse's ``quantileExact*`` pick other ranks).
- A span is an entry span when its ``SpanKind`` is SERVER or CONSUMER or it has no parent;
  it failed when its ``StatusCode`` is ERROR (both text forms, see ``_codec``).
- Pages ask for ``limit + 1`` rows; the extra row only says that there is a next page.
  Log records have no insertion order in ClickHouse: ties on time are broken by
  ``cityHash64`` of the record (stable across pages; identical copies tie completely).
- Spans and parents: an edge's parent span is looked up among the spans of the children's
  traces that start within :data:`PARENT_WINDOW_NS` of the range.
- Rates and cumulative histograms look for a series' last point before the range within
  :data:`LOOKBACK_NS`.
"""

from __future__ import annotations

import math
import re
import struct
import time
from collections.abc import Sequence
from typing import Final, cast

import trio

from coremetry.store import _query_args as _args
from coremetry.store._histogram import MergedHistogram, histogram_value
from coremetry.store._query_args import (
    MAX_NS,
    PERCENTILE_AGGREGATIONS,
    CursorCodec,
    check_aggregation_applies,
    query_hash,
)
from coremetry.store._sketch import RELATIVE_ACCURACY, LatencySketch
from coremetry.store.interface import (
    DeployRecord,
    LogCountPoint,
    LogCountSeries,
    LogQuery,
    MetricDescriptor,
    MetricQuery,
    MetricSeries,
    OperationSummary,
    Page,
    RedPoint,
    ServiceEdge,
    ServiceRedSeries,
    ServiceSummary,
    StoreStatistics,
    TimeRange,
    TraceQuery,
    TraceSummary,
)
from coremetry.store.model import LogRecord, MetricType, Span

from ._codec import (
    ENTRY_KINDS,
    ERROR_STATUSES,
    LOG_SELECT,
    META_KEY,
    SPAN_SELECT,
    LogOut,
    SpanOut,
    log_from_row,
    span_from_row,
)
from ._runtime import Param, Runtime
from ._schema import LOOKUP_MAX_S, TableNames, sketch_key_sql
from ._text import Term, text_terms

__all__ = [
    "EDGE_SETTLE_NS",
    "LOOKBACK_NS",
    "PARENT_WINDOW_NS",
    "Reader",
]

SECOND: Final = 1_000_000_000
PARENT_WINDOW_NS: Final = 3600 * SECOND
"""How far outside the range a call's parent span may start (one hour)."""
EDGE_SETTLE_NS: Final = PARENT_WINDOW_NS
"""How long after its end a minute's calls are rolled up (``<traces>_edges_1m``); newer minutes
are read raw. A parent span is exported when it ends, often after its children: an hour is the
horizon the raw join gives a parent, too."""
LOOKBACK_NS: Final = 86_400 * SECOND
"""How far before the range ``rate`` and cumulative histograms look for a predecessor (a day)."""
_NO_GROUP: Final = 4_294_967_295
_CURSORS: Final = CursorCodec("ch")
"""Cursors of this store: ``["ch", query_hash, key]`` (refused by, and refusing, others')."""


def _strings(values: Sequence[str]) -> str:
    """A tuple literal of our own constant strings (letters and ``_`` only)."""
    assert all(re.fullmatch(r"[A-Za-z_]+", v) for v in values)
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


ERROR: Final = f"StatusCode IN {_strings(ERROR_STATUSES)}"
ENTRY: Final = f"(SpanKind IN {_strings(ENTRY_KINDS)} OR ParentSpanId = '')"
DURATION: Final = "greatest(toInt64(Duration), 0)"
SPAN_TIME: Final = (
    "Timestamp >= fromUnixTimestamp64Nano({start:Int64}) "
    "AND Timestamp < fromUnixTimestamp64Nano({end:Int64})"
)
LOG_TIME: Final = (
    "TimestampTime >= toDateTime({start_s:UInt32}) AND TimestampTime <= toDateTime({end_s:UInt32}) "
    "AND Timestamp >= fromUnixTimestamp64Nano({start:Int64}) "
    "AND Timestamp < fromUnixTimestamp64Nano({end:Int64})"
)
POINT_TIME: Final = (
    "TimeUnix >= fromUnixTimestamp64Nano({start:Int64}) "
    "AND TimeUnix < fromUnixTimestamp64Nano({end:Int64})"
)
LOG_HASH: Final = (
    "cityHash64(Timestamp, ServiceName, SeverityNumber, SeverityText, Body, TraceId, SpanId, "
    "LogAttributes, ResourceAttributes, ScopeName)"
)
TOKENS: Final = r"extractAll(lowerUTF8(Body), '[\\p{L}\\p{N}]+')"
"""A log body's tokens (``_text``): lower-cased runs of letters and digits."""


def _percentiles(array: str) -> str:
    return ", ".join(
        f"if(length({array}) = 0, NULL, {array}[intDiv(length({array}) * {p} + 99, 100)])"
        for p in (50, 95, 99)
    )


def _range(time_range: TimeRange) -> dict[str, Param]:
    """Clamped bounds: stored times are in ``[0, 2**63)``; ``DateTime`` seconds in 32 bits."""
    start = max(0, time_range.start_unix_nano)
    end = max(0, time_range.end_unix_nano)
    return {
        "start": start,
        "end": end,
        "start_s": min(start // SECOND, 2**32 - 1),
        "end_s": min(max(end - 1, 0) // SECOND, 2**32 - 1),
    }


def _parent_window(start: int, end: int) -> dict[str, Param]:
    """``parent_start``/``parent_end`` (ns): where the parents of ``[start, end)`` are sought.

    :data:`PARENT_WINDOW_NS` either side of the children's range, clamped to ``[0, MAX_NS]``.
    """
    return {
        "parent_start": max(0, start - PARENT_WINDOW_NS),
        "parent_end": min(MAX_NS, end + PARENT_WINDOW_NS),
    }


def _score_bits(score: float) -> int:
    """The IEEE-754 bits of a positive score: ordered as the scores, exact in a cursor."""
    bits: int = struct.unpack("<Q", struct.pack("<d", score))[0]
    return bits


class _Series:
    __slots__ = ("labels", "monotonic", "service", "sid", "temporality", "type", "unit")

    def __init__(
        self,
        *,
        sid: int,
        type: MetricType,
        service: str,
        labels: dict[str, str],
        unit: str,
        temporality: int,
        monotonic: bool,
    ) -> None:
        self.sid = sid
        self.type = type
        self.service = service
        self.labels = labels
        self.unit = unit
        self.temporality = temporality
        self.monotonic = monotonic


_TYPE_ORDER: Final[tuple[MetricType, ...]] = ("gauge", "sum", "histogram")


class Reader:
    """The queries of one store: its tables and runtime.

    Args:
        tables: the configured table names (checked).
        runtime: where statements run.
        trace_lookup: the exporter's trace-id lookup table is there (and of its shape).
        rollups: the RED roll-up table (:func:`._schema.rollup_ddl`) is there: ``services``,
            ``operations`` and ``deploys`` read it for a window's whole minutes.
        edge_rollups: the edge roll-up (:func:`._schema.edge_rollup_ddl`) is there:
            ``service_edges`` rolls up a window's settled whole minutes into it (once each) and
            reads them from it.
    """

    def __init__(
        self,
        tables: TableNames,
        runtime: Runtime,
        *,
        trace_lookup: bool = False,
        rollups: bool = False,
        edge_rollups: bool = False,
    ) -> None:
        tables.check()
        self.tables = tables
        self.run = runtime
        self.traces = tables.qualified("traces")
        self.trace_lookup = tables.qualified("trace_id_ts") if trace_lookup else None
        self.rollup = tables.qualified("red_1m") if rollups else None
        self.edges = tables.qualified("edges_1m") if edge_rollups else None
        self.edges_done = tables.qualified("edges_1m_done") if edge_rollups else None
        self.edge_lock = trio.Lock()
        """Held while minutes are rolled up into the edge roll-up (and by retention)."""
        self.logs = tables.qualified("logs")
        self.metric_tables: dict[MetricType, str] = {
            kind: tables.qualified(kind) for kind in _TYPE_ORDER
        }

    # -- statistics ---------------------------------------------------------------------------

    async def statistics(self) -> StoreStatistics:
        """Counts and time extent, and the tables' size on disk."""
        g, s, h = (self.metric_tables[k] for k in _TYPE_ORDER)
        rows = await self.run.query(
            f"""
            SELECT
                (SELECT count() FROM {self.traces}),
                (SELECT count() FROM {self.logs}),
                (SELECT count() FROM {g}) + (SELECT count() FROM {s}) + (SELECT count() FROM {h}),
                (SELECT toUnixTimestamp64Nano(minOrNull(Timestamp)) FROM {self.traces}),
                (SELECT toUnixTimestamp64Nano(maxOrNull(Timestamp)) FROM {self.traces}),
                (SELECT toUnixTimestamp64Nano(minOrNull(Timestamp)) FROM {self.logs}),
                (SELECT toUnixTimestamp64Nano(maxOrNull(Timestamp)) FROM {self.logs}),
                (SELECT toUnixTimestamp64Nano(minOrNull(TimeUnix)) FROM {g}),
                (SELECT toUnixTimestamp64Nano(maxOrNull(TimeUnix)) FROM {g}),
                (SELECT toUnixTimestamp64Nano(minOrNull(TimeUnix)) FROM {s}),
                (SELECT toUnixTimestamp64Nano(maxOrNull(TimeUnix)) FROM {s}),
                (SELECT toUnixTimestamp64Nano(minOrNull(TimeUnix)) FROM {h}),
                (SELECT toUnixTimestamp64Nano(maxOrNull(TimeUnix)) FROM {h}),
                (SELECT sum(bytes_on_disk) FROM system.parts
                 WHERE active AND database = {{database:String}}
                   AND table IN {{names:Array(String)}})
            """,
            {
                "database": self.tables.database,
                "names": [self.tables.table(kind) for kind in ("traces", "logs", *_TYPE_ORDER)],
            },
        )
        row = cast("tuple[int | None, ...]", rows[0])
        lows = [t for t in row[3:13:2] if t is not None]
        highs = [t for t in row[4:13:2] if t is not None]
        return StoreStatistics(
            span_count=row[0] or 0,
            log_count=row[1] or 0,
            metric_point_count=row[2] or 0,
            oldest_unix_nano=min(lows) if lows else None,
            newest_unix_nano=max(highs) if highs else None,
            size_bytes=row[13],
        )

    # -- services and operations ----------------------------------------------------------

    async def services(
        self, time_range: TimeRange, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        """RED per service from its entry spans (see :class:`ServiceSummary`).

        From the roll-ups when there are (plus the raw spans of the window's partial
        minutes), else from the raw spans. ``service_name``: that service's only.
        """
        if self.rollup is not None:
            return await self._rolled_services(time_range, limit, service_name)
        return await self._raw_services(time_range, limit, service_name)

    async def _raw_services(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> Page[ServiceSummary]:
        """RED per service from the raw spans (exact percentiles)."""
        only, only_params = _only_service(service_name)
        rows = await self.run.query(
            f"""
            SELECT service, span_count, request_count, error_count, {_percentiles("ds")},
                   last_seen, versions, total
            FROM (
                SELECT ServiceName AS service, count() AS span_count,
                       countIf(entry) AS request_count, countIf(entry AND failed) AS error_count,
                       arraySort(groupArrayIf(d, entry)) AS ds,
                       toUnixTimestamp64Nano(max(Timestamp)) AS last_seen,
                       arraySort(groupUniqArrayIf(version, version != '')) AS versions,
                       count() OVER () AS total
                FROM (
                    SELECT ServiceName, Timestamp, {DURATION} AS d, {ENTRY} AS entry,
                           {ERROR} AS failed, ResourceAttributes['service.version'] AS version
                    FROM {self.traces} WHERE {SPAN_TIME} {only}
                )
                GROUP BY ServiceName
            )
            ORDER BY request_count DESC, service
            LIMIT {{limit:UInt32}}
            """,
            {**_range(time_range), "limit": limit, **only_params},
        )
        items = [
            ServiceSummary(
                service_name=cast(str, row[0]),
                span_count=cast(int, row[1]),
                request_count=cast(int, row[2]),
                error_count=cast(int, row[3]),
                p50_duration_ns=cast("int | None", row[4]),
                p95_duration_ns=cast("int | None", row[5]),
                p99_duration_ns=cast("int | None", row[6]),
                last_seen_unix_nano=cast(int, row[7]),
                versions=list(cast("list[str]", row[8])),
            )
            for row in rows
        ]
        return Page(items=items, total=cast(int, rows[0][9]) if rows else 0)

    async def service_red_series(
        self, time_range: TimeRange, step: int, limit: int
    ) -> list[ServiceRedSeries]:
        """RED of entry spans per service and bucket, the first ``limit`` services by name."""
        rows = await self.run.query(
            f"""
            SELECT toString(ServiceName) AS service, b, count(), countIf({ERROR}),
                   {_percentiles("arraySort(groupArray(d))")}
            FROM (
                SELECT ServiceName, StatusCode, {DURATION} AS d,
                       intDiv(toUnixTimestamp64Nano(Timestamp) - {{origin:Int64}},
                              {{step:Int64}}) AS b
                FROM {self.traces}
                WHERE {SPAN_TIME} AND {ENTRY}
                  AND ServiceName IN (
                      SELECT DISTINCT ServiceName FROM {self.traces}
                      WHERE {SPAN_TIME} AND {ENTRY}
                      ORDER BY ServiceName LIMIT {{limit:UInt32}}
                  )
            )
            GROUP BY ServiceName, b
            ORDER BY service, b
            """,
            {
                **_range(time_range),
                "origin": time_range.start_unix_nano,
                "step": step,
                "limit": limit,
            },
        )
        start = time_range.start_unix_nano
        found: dict[str, list[RedPoint]] = {}
        for row in rows:
            found.setdefault(cast(str, row[0]), []).append(
                RedPoint(
                    bucket_start_unix_nano=start + cast(int, row[1]) * step,
                    request_count=cast(int, row[2]),
                    error_count=cast(int, row[3]),
                    p50_duration_ns=cast(int, row[4]),
                    p95_duration_ns=cast(int, row[5]),
                    p99_duration_ns=cast(int, row[6]),
                )
            )
        return [
            ServiceRedSeries(service_name=name, points=points) for name, points in found.items()
        ]

    async def log_counts(
        self, time_range: TimeRange, step: int, limit: int
    ) -> list[LogCountSeries]:
        """Log records per service and bucket by severity, the first ``limit`` services."""
        rows = await self.run.query(
            f"""
            SELECT toString(ServiceName) AS service, b, count(),
                   countIf(SeverityNumber BETWEEN 13 AND 16), countIf(SeverityNumber >= 17)
            FROM (
                SELECT ServiceName, SeverityNumber,
                       intDiv(toUnixTimestamp64Nano(Timestamp) - {{origin:Int64}},
                              {{step:Int64}}) AS b
                FROM {self.logs}
                WHERE {LOG_TIME}
                  AND ServiceName IN (
                      SELECT DISTINCT ServiceName FROM {self.logs} WHERE {LOG_TIME}
                      ORDER BY ServiceName LIMIT {{limit:UInt32}}
                  )
            )
            GROUP BY ServiceName, b
            ORDER BY service, b
            """,
            {
                **_range(time_range),
                "origin": time_range.start_unix_nano,
                "step": step,
                "limit": limit,
            },
        )
        start = time_range.start_unix_nano
        found: dict[str, list[LogCountPoint]] = {}
        for row in rows:
            found.setdefault(cast(str, row[0]), []).append(
                LogCountPoint(
                    bucket_start_unix_nano=start + cast(int, row[1]) * step,
                    records=cast(int, row[2]),
                    warn_records=cast(int, row[3]),
                    error_records=cast(int, row[4]),
                )
            )
        return [LogCountSeries(service_name=name, points=points) for name, points in found.items()]

    async def operations(
        self, service_name: str, time_range: TimeRange, limit: int
    ) -> Page[OperationSummary]:
        """RED per span name of one service, over all of its spans (roll-ups when there are)."""
        if self.rollup is not None:
            return await self._rolled_operations(service_name, time_range, limit)
        return await self._raw_operations(service_name, time_range, limit)

    async def _raw_operations(
        self, service_name: str, time_range: TimeRange, limit: int
    ) -> Page[OperationSummary]:
        """RED per span name of one service from the raw spans."""
        rows = await self.run.query(
            f"""
            SELECT name, span_count, error_count, {_percentiles("ds")}, total
            FROM (
                SELECT SpanName AS name, count() AS span_count, countIf({ERROR}) AS error_count,
                       arraySort(groupArray({DURATION})) AS ds, count() OVER () AS total
                FROM {self.traces}
                WHERE ServiceName = {{service:String}} AND {SPAN_TIME}
                GROUP BY SpanName
            )
            ORDER BY span_count DESC, name
            LIMIT {{limit:UInt32}}
            """,
            {**_range(time_range), "service": service_name, "limit": limit},
        )
        items = [
            OperationSummary(
                service_name=service_name,
                name=cast(str, row[0]),
                span_count=cast(int, row[1]),
                error_count=cast(int, row[2]),
                p50_duration_ns=cast("int | None", row[3]),
                p95_duration_ns=cast("int | None", row[4]),
                p99_duration_ns=cast("int | None", row[5]),
            )
            for row in rows
        ]
        return Page(items=items, total=cast(int, rows[0][6]) if rows else 0)

    # -- traces -------------------------------------------------------------------------------

    def _within_lookup_bounds(self, traces: str) -> tuple[str, str]:
        """The ``WITH`` clause and ``WHERE`` condition of a read of the spans of ``traces``.

        ``traces`` is a condition on ``TraceId`` naming ``{count:UInt64}`` traces. With the
        lookup table, the read is bounded by the union of their rows' bounds (whole seconds,
        truncated: the spans start in ``[min(Start), max(End) + 1 s)``; an ``End`` at the
        largest ``DateTime``, our view's stand-in for later times, leaves it open above) when
        every trace has a row and none wraps (``End`` before ``Start``: the exporter's view past
        2106); otherwise, and without a lookup table, by ``traces`` alone.
        """
        if self.trace_lookup is None:
            return "", traces
        bounds = f"""
            WITH (
                SELECT tuple(toUnixTimestamp64Nano(toDateTime64(min(Start), 9)),
                             toUnixTimestamp64Nano(toDateTime64(max(End), 9)),
                             uniqExact(TraceId), countIf(End < Start))
                FROM {self.trace_lookup} WHERE {traces}
            ) AS bounds
        """
        where = (
            f"{traces} AND (bounds.3 < {{count:UInt64}} OR bounds.4 > 0"
            " OR (Timestamp >= fromUnixTimestamp64Nano(bounds.1)"
            " AND Timestamp < fromUnixTimestamp64Nano("
            f"if(bounds.2 >= {LOOKUP_MAX_S * SECOND}, {MAX_NS}, bounds.2 + {SECOND}))))"
        )
        return bounds, where

    async def get_trace(self, trace_id: str, limit: int, cursor: str | None) -> Page[Span]:
        """The spans of one trace, by start time then span id.

        With the exporter's lookup table, one statement still: a scalar subquery reads the
        trace's bounds from it (``min(Start)``, ``max(End)``, rows), which ClickHouse runs
        first and folds into constants, so the span read that follows prunes by them (the
        day's partitions, the sort key's ``toDateTime(Timestamp)`` ranges) before the
        ``TraceId`` bloom filter (:meth:`_within_lookup_bounds`). No row (a trace written
        past the view, or before it existed) or a row that wraps: the read is by ``TraceId``
        alone, as without a lookup table. The spans and the total are the same either way.
        """
        qhash = query_hash("get_trace", trace_id)
        params: dict[str, Param] = {"trace_id": trace_id, "limit": limit + 1, "count": 1}
        bounds, where = self._within_lookup_bounds("TraceId = {trace_id:String}")
        after = ""
        if cursor is not None:
            key = _CURSORS.decode(cursor, qhash, (int, str))
            after = "WHERE (start, SpanId) > ({after_start:Int64}, {after_span:String})"
            params["after_start"] = key[0]
            params["after_span"] = key[1]
        # One scan of the trace's granules (TraceId bloom filter): the total is a window count
        # over the whole trace, taken before the page's cursor condition.
        rows = await self.run.query(
            f"""
            SELECT * EXCEPT (start) FROM (
                {bounds}
                SELECT {SPAN_SELECT}, count() OVER () AS total,
                       toUnixTimestamp64Nano(Timestamp) AS start
                FROM {self.traces}
                WHERE {where}
            )
            {after}
            ORDER BY start, SpanId
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        items = [span_from_row(cast(SpanOut, row[:19])) for row in rows]
        total = cast(int, rows[0][19]) if rows else (0 if cursor is None else None)
        if total is None:
            count = await self.run.query(
                f"{bounds} SELECT count() FROM {self.traces} WHERE {where}",
                {"trace_id": trace_id, "count": 1},
            )
            total = cast(int, count[0][0])
        next_cursor = None
        if more:
            last = items[-1]
            next_cursor = _CURSORS.encode(qhash, (last.start_time_unix_nano, last.span_id))
        return Page(items=items, next_cursor=next_cursor, total=total)

    async def get_traces(self, trace_ids: Sequence[str], limit: int) -> list[Page[Span]]:
        """The first page of each trace, as :meth:`get_trace` gives it, in one statement.

        ``TraceId IN`` the ids; each trace's spans are numbered by start time then span id and
        cut after ``limit`` (a window per trace), its total a window count, its cursor the one
        :meth:`get_trace` would give (so paging goes on with it).

        With the lookup table the read is bounded by the union of the traces' bounds when
        every id has a row there and none wraps, else by the ids alone
        (:meth:`_within_lookup_bounds`). ``trace_ids`` are normalised (``check_trace_ids``);
        a repeated id gets the same page again, an unknown one an empty page with total 0.
        """
        unique = list(dict.fromkeys(trace_ids))
        if not unique:
            return []
        params: dict[str, Param] = {"ids": unique, "limit": limit, "count": len(unique)}
        bounds, where = self._within_lookup_bounds("TraceId IN {ids:Array(String)}")
        # One scan of the traces' granules; rank and total are windows over each whole trace.
        rows = await self.run.query(
            f"""
            SELECT * EXCEPT (start, rank) FROM (
                {bounds}
                SELECT {SPAN_SELECT}, count() OVER (PARTITION BY TraceId) AS total,
                       toUnixTimestamp64Nano(Timestamp) AS start,
                       row_number() OVER (PARTITION BY TraceId ORDER BY start, SpanId) AS rank
                FROM {self.traces}
                WHERE {where}
            )
            WHERE rank <= {{limit:UInt32}} + 1
            ORDER BY TraceId, start, SpanId
            """,
            params,
        )
        found: dict[str, list[Span]] = {}
        totals: dict[str, int] = {}
        for row in rows:
            span = span_from_row(cast(SpanOut, row[:19]))
            found.setdefault(span.trace_id, []).append(span)
            totals[span.trace_id] = cast(int, row[19])
        pages: dict[str, Page[Span]] = {}
        for tid in unique:
            spans = found.get(tid, [])
            items = spans[:limit]
            next_cursor = None
            if len(spans) > limit:
                last = items[-1]
                next_cursor = _CURSORS.encode(
                    query_hash("get_trace", tid), (last.start_time_unix_nano, last.span_id)
                )
            pages[tid] = Page(items=items, next_cursor=next_cursor, total=totals.get(tid, 0))
        return [pages[tid] for tid in trace_ids]

    async def search_traces(
        self, query: TraceQuery, limit: int, cursor: str | None
    ) -> Page[TraceSummary]:
        """Traces with a span matching every condition, newest trace start first."""
        _args.check_trace_query(query)
        attributes = sorted(query.attributes.items())
        qhash = query_hash(
            "search_traces",
            query.time_range.start_unix_nano,
            query.time_range.end_unix_nano,
            query.service_name,
            query.operation,
            query.min_duration_ns,
            query.status,
            attributes,
        )
        params: dict[str, Param] = {**_range(query.time_range), "limit": limit + 1}
        conditions = [SPAN_TIME]
        if query.service_name is not None:
            conditions.append("ServiceName = {service:String}")
            params["service"] = query.service_name
        if query.operation is not None:
            conditions.append("SpanName = {operation:String}")
            params["operation"] = query.operation
        if query.min_duration_ns is not None and query.min_duration_ns > 0:
            conditions.append(
                "Duration >= {min_duration:UInt64} AND toInt64(Duration) >= {min_duration:Int64}"
            )
            params["min_duration"] = query.min_duration_ns
        if query.status == "error":
            conditions.append(ERROR)
        elif query.status == "ok":
            conditions.append(f"NOT {ERROR}")
        for i, (key, value) in enumerate(attributes):
            if key == META_KEY:
                conditions.append("0")
                continue
            k, v = f"{{attribute_key_{i}:String}}", f"{{attribute_value_{i}:String}}"
            conditions.append(
                f"((mapContains(SpanAttributes, {k}) AND SpanAttributes[{k}] = {v}) "
                f"OR (mapContains(ResourceAttributes, {k}) AND ResourceAttributes[{k}] = {v}))"
            )
            params[f"attribute_key_{i}"] = key
            params[f"attribute_value_{i}"] = value
        page = ""
        if cursor is not None:
            after = _CURSORS.decode(cursor, qhash, (int, str))
            page = (
                "WHERE trace_start < {after_start:Int64} "
                "OR (trace_start = {after_start:Int64} AND trace_id > {after_trace:String})"
            )
            params["after_start"] = after[0]
            params["after_trace"] = after[1]
        rows = await self.run.query(
            f"""
            SELECT trace_id, trace_start, trace_end, span_count, error_count, services, root,
                   total
            FROM (
                SELECT TraceId AS trace_id,
                       toUnixTimestamp64Nano(min(Timestamp)) AS trace_start,
                       max(toUnixTimestamp64Nano(Timestamp) + {DURATION}) AS trace_end,
                       count() AS span_count, countIf({ERROR}) AS error_count,
                       arraySort(groupUniqArray(ServiceName)) AS services,
                       argMin((toString(ServiceName), toString(SpanName), ParentSpanId != ''),
                              (ParentSpanId != '', Timestamp, SpanId)) AS root,
                       count() OVER () AS total
                FROM {self.traces}
                WHERE TraceId IN (
                    SELECT TraceId FROM {self.traces} WHERE {" AND ".join(conditions)}
                )
                GROUP BY TraceId
            )
            {page}
            ORDER BY trace_start DESC, trace_id
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        items: list[TraceSummary] = []
        for row in rows:
            root = cast("tuple[str, str, bool]", row[6])
            start, end = cast(int, row[1]), cast(int, row[2])
            items.append(
                TraceSummary(
                    trace_id=cast(str, row[0]),
                    root_service_name=root[0],
                    root_name=root[1],
                    root_missing=bool(root[2]),
                    start_time_unix_nano=start,
                    duration_ns=max(0, end - start),
                    span_count=cast(int, row[3]),
                    error_count=cast(int, row[4]),
                    services=list(cast("list[str]", row[5])),
                )
            )
        total = cast(int, rows[0][7]) if rows and cursor is None else None
        if not rows and cursor is None:
            total = 0
        next_cursor = None
        if more:
            last = items[-1]
            next_cursor = _CURSORS.encode(qhash, (last.start_time_unix_nano, last.trace_id))
        return Page(items=items, next_cursor=next_cursor, total=total)

    # -- logs ---------------------------------------------------------------------------------

    async def search_logs(self, query: LogQuery, limit: int, cursor: str | None) -> Page[LogRecord]:
        """Matching log records: BM25 then newest with text, newest first without."""
        parsed, trace_id = _args.check_log_query(query)
        terms = text_terms(parsed) if parsed is not None else None
        severity = query.min_severity_number
        qhash = query_hash(
            "search_logs",
            query.time_range.start_unix_nano,
            query.time_range.end_unix_nano,
            [(t.tokens, t.prefix) for t in terms] if terms is not None else None,
            query.service_name,
            severity,
            trace_id,
            sorted(query.attributes.items()),
        )
        params: dict[str, Param] = {**_range(query.time_range), "limit": limit + 1}
        filters = [LOG_TIME]
        if query.service_name is not None:
            filters.append("ServiceName = {service:String}")
            params["service"] = query.service_name
        if severity is not None:
            filters.append("SeverityNumber >= {severity:UInt8}")
            params["severity"] = severity
        if trace_id is not None:
            filters.append("TraceId = {trace_id:String}")
            params["trace_id"] = trace_id
        for i, (key, value) in enumerate(sorted(query.attributes.items())):
            if key == META_KEY:
                filters.append("0")
                continue
            k, v = f"{{attribute_key_{i}:String}}", f"{{attribute_value_{i}:String}}"
            filters.append(
                f"((mapContains(LogAttributes, {k}) AND LogAttributes[{k}] = {v}) "
                f"OR (mapContains(ResourceAttributes, {k}) AND ResourceAttributes[{k}] = {v}))"
            )
            params[f"attribute_key_{i}"] = key
            params[f"attribute_value_{i}"] = value
        where = " AND ".join(filters)
        if terms is None:
            return await self._logs_by_time(where, params, qhash, limit, cursor)
        return await self._logs_by_text(where, params, terms, qhash, limit, cursor)

    async def _logs_by_time(
        self,
        where: str,
        params: dict[str, Param],
        qhash: str,
        limit: int,
        cursor: str | None,
    ) -> Page[LogRecord]:
        page = ""
        if cursor is not None:
            key = _CURSORS.decode(cursor, qhash, (int, int))
            page = (
                "AND (Timestamp < fromUnixTimestamp64Nano({after_time:Int64}) "
                "OR (Timestamp = fromUnixTimestamp64Nano({after_time:Int64}) "
                "AND h > {after_hash:UInt64}))"
            )
            params["after_time"] = key[0]
            params["after_hash"] = key[1]
        rows = await self.run.query(
            f"""
            SELECT {LOG_SELECT}, {LOG_HASH} AS h
            FROM {self.logs}
            WHERE {where} {page}
            ORDER BY Timestamp DESC, h
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        items = [log_from_row(cast(LogOut, row[:10])) for row in rows]
        next_cursor = None
        if more:
            last = rows[-1]
            next_cursor = _CURSORS.encode(qhash, (cast(int, last[0]), cast(int, last[10])))
        return Page(items=items, next_cursor=next_cursor)

    async def _logs_by_text(
        self,
        where: str,
        params: dict[str, Param],
        terms: list[Term],
        qhash: str,
        limit: int,
        cursor: str | None,
    ) -> Page[LogRecord]:
        matches: list[str] = []
        frequencies: list[str] = []
        for i, term in enumerate(terms):
            match, frequency = _term_sql(i, term, params)
            matches.append(match)
            frequencies.append(frequency)
        # A cheap necessary condition first: a term's tokens occur in the lower-cased body
        # (substring search). Bodies are tokenized only where it holds.
        # (One position() per token: a lambda over a parameter array here made ClickHouse
        # tokenize every record before filtering.)
        contains: list[str] = []
        for i, term in enumerate(terms):
            tests: list[str] = []
            for j, token in enumerate(sorted(set(term.tokens))):
                params[f"needle_{i}_{j}"] = token
                tests.append(f"position(lowerUTF8(Body), {{needle_{i}_{j}:String}}) > 0")
            contains.append("(" + " AND ".join(tests) + ")")
        # BM25 (k1 = 1.2, b = 0.75), idf = ln(1 + (N - df + 0.5) / (df + 0.5)), over the records
        # the filters select: N, their mean length (in characters: only dl / avgdl counts,
        # and it needs no tokenizing of every record) and each term's df.
        frequency_of = ", ".join(
            f"countIf({_term_sql(i, term, params, 'dtk')[0]})" for i, term in enumerate(terms)
        )
        score = " + ".join(
            f"log(1 + (base.1 - df.{i + 1} + 0.5) / (df.{i + 1} + 0.5)) * ({f}) * 2.2 "
            f"/ (({f}) + 1.2 * (0.25 + 0.75 * lengthUTF8(Body) / (base.2 / base.1)))"
            for i, f in enumerate(frequencies)
        )
        page = ""
        if cursor is not None:
            key = _CURSORS.decode(cursor, qhash, (int, int, int))
            page = (
                "AND (bits < {after_score:UInt64} OR (bits = {after_score:UInt64} "
                "AND (t < {after_time:Int64} OR (t = {after_time:Int64} "
                "AND h > {after_hash:UInt64}))))"
            )
            params["after_score"] = key[0]
            params["after_time"] = key[1]
            params["after_hash"] = key[2]
        rows = await self.run.query(
            f"""
            WITH
                (
                    SELECT tuple(count(), sum(lengthUTF8(Body)))
                    FROM {self.logs} WHERE {where}
                ) AS base,
                (
                    SELECT tuple({frequency_of}) FROM (
                        SELECT {TOKENS} AS dtk FROM {self.logs}
                        WHERE {where} AND ({" OR ".join(contains)})
                    )
                ) AS df
            SELECT * EXCEPT (tk, bits) FROM (
                SELECT *, {score} AS score, reinterpretAsUInt64(score) AS bits FROM (
                    SELECT {LOG_SELECT}, {LOG_HASH} AS h,
                           toUnixTimestamp64Nano(Timestamp) AS t, {TOKENS} AS tk
                    FROM {self.logs}
                    WHERE {where} AND {" AND ".join(contains)}
                )
                WHERE {" AND ".join(matches)}
            )
            WHERE 1 {page}
            ORDER BY score DESC, t DESC, h
            LIMIT {{limit:UInt32}}
            """,
            params,
            # Pushed into the scan, the token match would tokenize every record of the range
            # before the substring prefilter has thrown most of them out.
            settings={"enable_optimize_predicate_expression": 0},
        )
        more = len(rows) > limit
        rows = rows[:limit]
        items = [log_from_row(cast(LogOut, row[:10])) for row in rows]
        next_cursor = None
        if more:
            last = rows[-1]
            next_cursor = _CURSORS.encode(
                qhash,
                (_score_bits(cast(float, last[12])), cast(int, last[11]), cast(int, last[10])),
            )
        return Page(items=items, next_cursor=next_cursor)

    # -- edges and deploys ----------------------------------------------------------------

    async def service_edges(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[ServiceEdge]:
        """Calls between services: child spans whose parent span is another service's.

        From the edge roll-up when there is one (the window's settled whole minutes; the raw
        spans of the rest), else from the raw spans.
        """
        if self.edges is not None:
            return await self._rolled_edges(time_range, limit, service_name)
        return await self._raw_edges(time_range, limit, service_name)

    async def _raw_edges(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[ServiceEdge]:
        """Calls between services from the raw spans (exact percentiles)."""
        params: dict[str, Param] = {
            **_range(time_range),
            "limit": limit,
            **_parent_window(time_range.start_unix_nano, max(0, time_range.end_unix_nano)),
        }
        only = ""
        if service_name is not None:
            only = "AND (p.ServiceName = {service:String} OR c.ServiceName = {service:String})"
            params["service"] = service_name
        children = (
            f"SELECT TraceId, ParentSpanId, ServiceName, StatusCode, Duration "
            f"FROM {self.traces} WHERE {SPAN_TIME} AND ParentSpanId != ''"
        )
        rows = await self.run.query(
            f"""
            SELECT caller, callee, call_count, error_count, {_percentiles("ds")}
            FROM (
                SELECT toString(p.ServiceName) AS caller, toString(c.ServiceName) AS callee,
                       count() AS call_count, countIf(c.{ERROR}) AS error_count,
                       arraySort(groupArray(greatest(toInt64(c.Duration), 0))) AS ds
                {self._with_parents(children, only)}
                GROUP BY caller, callee
            )
            ORDER BY call_count DESC, caller, callee
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        return [
            ServiceEdge(
                caller=cast(str, row[0]),
                callee=cast(str, row[1]),
                call_count=cast(int, row[2]),
                error_count=cast(int, row[3]),
                p50_duration_ns=cast("int | None", row[4]),
                p95_duration_ns=cast("int | None", row[5]),
                p99_duration_ns=cast("int | None", row[6]),
            )
            for row in rows
        ]

    def _calls_sql(self, children: str, only: str) -> str:
        """SQL: one row per call whose child span matches ``children``.

        Columns: the child's minute, the caller and callee services, whether it failed, its
        latency-sketch bin. The parent is looked up among the spans of the children's traces
        starting within ``[{parent_start}, {parent_end})``, as :meth:`_raw_edges` does.
        """
        child_spans = (
            f"SELECT TraceId, ParentSpanId, ServiceName, Timestamp, StatusCode, Duration "
            f"FROM {self.traces} WHERE ({children}) AND ParentSpanId != ''"
        )
        return f"""
            SELECT toDateTime(toStartOfMinute(c.Timestamp)) AS minute,
                   toString(p.ServiceName) AS caller, toString(c.ServiceName) AS callee,
                   c.{ERROR} AS failed, {sketch_key_sql("c.Duration")} AS bin
            {self._with_parents(child_spans, only)}
        """

    def _with_parents(self, children: str, only: str) -> str:
        """SQL: ``FROM`` child spans ``c`` joined to parents ``p`` of another service (a call).

        ``children`` (the query behind ``c``) selects at least ``TraceId``, ``ParentSpanId``
        and ``ServiceName``; the parents are looked up among the spans of the children's
        traces starting within ``[{parent_start}, {parent_end})`` (:func:`_parent_window`);
        ``only`` is appended to the ``WHERE`` (``AND ...``, or empty).
        """
        return f"""FROM ({children}) AS c
            INNER JOIN (
                SELECT TraceId, SpanId, ServiceName FROM {self.traces}
                WHERE Timestamp >= fromUnixTimestamp64Nano({{parent_start:Int64}})
                  AND Timestamp < fromUnixTimestamp64Nano({{parent_end:Int64}})
                  AND TraceId IN (SELECT TraceId FROM ({children}))
            ) AS p ON c.TraceId = p.TraceId AND c.ParentSpanId = p.SpanId
            WHERE p.ServiceName != c.ServiceName {only}"""

    async def _roll_edges(self, first: int, end: int) -> None:
        """Roll up the minutes in ``[first, end)`` (ns, whole minutes) not rolled up yet.

        Minutes before the oldest stored span are not rolled up: they hold no span, so the
        roll-up's answer for them, nothing, is the raw one (a window reaching back years costs
        no more than the data). The oldest span's time comes from the parts' ``min_time`` (the
        partition key's time column, ``Timestamp`` in the exporter's ``toDate(Timestamp)``),
        else from the spans of the window. Per day of minutes at
        most (:data:`_ROLL_MINUTES`, so the join's memory stays a day's), one ``INSERT ...
        SELECT`` of their calls from the raw spans, then one of their marks. Cancelling is safe
        at any point: rows without a mark (a roll cut short) are written again, whole, by the
        next roll, and reads take each key's latest row.
        """
        async with self.edge_lock:
            parts = await self.run.query(
                "SELECT count(), toUInt32(min(min_time)) FROM system.parts "
                "WHERE active AND database = {database:String} AND table = {table:String}",
                {"database": self.tables.database, "table": self.tables.table("traces")},
            )
            if not cast(int, parts[0][0]):
                return  # no span stored
            oldest = cast(int, parts[0][1]) * SECOND
            if oldest == 0:  # a partition key without the time column: ask the spans
                found = await self.run.query(
                    f"SELECT toUnixTimestamp64Nano(minOrNull(Timestamp)) FROM {self.traces} "
                    "WHERE Timestamp >= fromUnixTimestamp64Nano({c0:Int64}) "
                    "AND Timestamp < fromUnixTimestamp64Nano({c1:Int64})",
                    {"c0": first, "c1": end},
                )
                if found[0][0] is None:
                    return  # no span in these minutes: nothing to roll up
                oldest = cast(int, found[0][0])
            first = max(first, oldest - oldest % _MINUTE)
            if first >= end:
                return
            marked = (
                f"FROM {self.edges_done} "
                "WHERE Minute >= toDateTime({m0:UInt32}) AND Minute < toDateTime({m1:UInt32})"
            )
            bounds: dict[str, Param] = {"m0": first // SECOND, "m1": end // SECOND}
            count = await self.run.query(f"SELECT uniqExact(Minute) {marked}", bounds)
            if cast(int, count[0][0]) == (end - first) // _MINUTE:
                return  # all rolled up (the usual case: one small read)
            rows = await self.run.query(f"SELECT DISTINCT toUInt32(Minute) {marked}", bounds)
            have = {cast(int, row[0]) for row in rows}
            missing = [m for m in range(first // SECOND, end // SECOND, 60) if m not in have]
            for at in range(0, len(missing), _ROLL_MINUTES):
                await self._roll_minutes(missing[at : at + _ROLL_MINUTES])

    async def _roll_minutes(self, minutes: list[int]) -> None:
        """Roll up ``minutes`` (unix seconds, ascending): their rows, then their marks."""
        low, high = minutes[0] * SECOND, (minutes[-1] + 60) * SECOND
        params: dict[str, Param] = {
            "c0": low,
            "c1": high,
            "minutes": minutes,
            **_parent_window(low, high),
        }
        children = (
            "Timestamp >= fromUnixTimestamp64Nano({c0:Int64}) "
            "AND Timestamp < fromUnixTimestamp64Nano({c1:Int64}) "
            "AND has({minutes:Array(UInt32)}, toUInt32(toDateTime(toStartOfMinute(Timestamp))))"
        )
        await self.run.command(
            f"""
            INSERT INTO {self.edges}
                (Minute, Caller, Callee, Calls, Errors, Keys, Counts, RolledAt)
            SELECT minute, caller, callee, calls, errors, m.1, m.2, now64(9)
            FROM (
                SELECT minute, caller, callee, count() AS calls,
                       countIf(failed) AS errors, sumMap([bin], [toUInt64(1)]) AS m
                FROM ({self._calls_sql(children, "")})
                GROUP BY minute, caller, callee
            )
            """,
            params,
        )
        await self.run.command(
            f"INSERT INTO {self.edges_done} (Minute, RolledAt) "
            "SELECT toDateTime(arrayJoin({minutes:Array(UInt32)})), now64(9)",
            {"minutes": minutes},
        )

    async def _rolled_edges(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[ServiceEdge]:
        """Edges from the roll-up's settled whole minutes plus the raw spans of the rest.

        The window's whole minutes that ended :data:`EDGE_SETTLE_NS` ago or earlier are rolled
        up first when they are not yet (:meth:`_roll_edges`); the partial minutes at its ends
        and the unsettled minutes are joined raw. Counts are exact; percentiles come from the
        merged latency sketches (within ``RELATIVE_ACCURACY``).
        """
        start = max(0, time_range.start_unix_nano)
        end = max(0, time_range.end_unix_nano)
        first = min(-(-start // _MINUTE) * _MINUTE, MAX_NS)
        settled = max(0, time.time_ns() - EDGE_SETTLE_NS)
        rolled_end = min(end - end % _MINUTE, settled - settled % _MINUTE)
        params: dict[str, Param] = {
            "limit": limit,
            **_parent_window(start, end),
        }
        raw: list[tuple[int, int]] = []
        if first >= rolled_end:
            raw.append((start, end))
        else:
            await self._roll_edges(first, rolled_end)
            raw += [(start, first), (rolled_end, end)]
        only_rolled = only_raw = ""
        if service_name is not None:
            only_rolled = "AND (Caller = {service:String} OR Callee = {service:String})"
            only_raw = "AND (p.ServiceName = {service:String} OR c.ServiceName = {service:String})"
            params["service"] = service_name
        parts = []
        if first < rolled_end:
            params.update(m0=first // SECOND, m1=rolled_end // SECOND)
            parts.append(
                f"""
                SELECT caller, callee, r.1 AS calls, r.2 AS errors, r.3 AS k, r.4 AS n
                FROM (
                    SELECT toString(Caller) AS caller, toString(Callee) AS callee,
                           argMax((Calls, Errors, Keys, Counts), RolledAt) AS r
                    FROM {self.edges}
                    WHERE Minute >= toDateTime({{m0:UInt32}})
                      AND Minute < toDateTime({{m1:UInt32}}) {only_rolled}
                    GROUP BY Minute, Caller, Callee
                )
                """
            )
        conditions = []
        for i, (low, high) in enumerate(r for r in raw if r[0] < r[1]):
            params.update({f"r{i}": low, f"s{i}": high})
            conditions.append(
                f"(Timestamp >= fromUnixTimestamp64Nano({{r{i}:Int64}}) "
                f"AND Timestamp < fromUnixTimestamp64Nano({{s{i}:Int64}}))"
            )
        if conditions:
            parts.append(
                f"""
                SELECT caller, callee, calls, errors, m.1 AS k, m.2 AS n
                FROM (
                    SELECT caller, callee, toUInt64(count()) AS calls,
                           toUInt64(countIf(failed)) AS errors,
                           sumMap([bin], [toUInt64(1)]) AS m
                    FROM ({self._calls_sql(" OR ".join(conditions), only_raw)})
                    GROUP BY caller, callee
                )
                """
            )
        if not parts:
            return []
        rows = await self.run.query(
            f"""
            SELECT caller, callee, sum(calls) AS call_count, sum(errors), sumMap(k, n)
            FROM ({" UNION ALL ".join(parts)})
            GROUP BY caller, callee
            ORDER BY call_count DESC, caller, callee
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        edges = []
        for row in rows:
            p50, p95, p99 = _sketch_of(row[4]).percentiles()
            edges.append(
                ServiceEdge(
                    caller=cast(str, row[0]),
                    callee=cast(str, row[1]),
                    call_count=cast(int, row[2]),
                    error_count=cast(int, row[3]),
                    p50_duration_ns=p50,
                    p95_duration_ns=p95,
                    p99_duration_ns=p99,
                    percentile_relative_error=RELATIVE_ACCURACY,
                )
            )
        return edges

    async def deploys(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[DeployRecord]:
        """Distinct ``service.version`` per service in the range, latest first seen first.

        From the roll-ups when there are (plus the partial minutes' raw spans).
        """
        if self.rollup is not None:
            return await self._rolled_deploys(time_range, limit, service_name)
        return await self._raw_deploys(time_range, limit, service_name)

    async def _raw_deploys(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[DeployRecord]:
        """Distinct ``service.version`` per service from the raw spans."""
        params: dict[str, Param] = {**_range(time_range), "limit": limit}
        only = ""
        if service_name is not None:
            only = "AND ServiceName = {service:String}"
            params["service"] = service_name
        rows = await self.run.query(
            f"""
            SELECT toString(ServiceName) AS service, version,
                   toUnixTimestamp64Nano(min(Timestamp)) AS first_seen,
                   toUnixTimestamp64Nano(max(Timestamp)), count()
            FROM (
                SELECT ServiceName, Timestamp, ResourceAttributes['service.version'] AS version
                FROM {self.traces} WHERE {SPAN_TIME} {only}
            )
            WHERE version != ''
            GROUP BY ServiceName, version
            ORDER BY first_seen DESC, service, version
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        return [
            DeployRecord(
                service_name=cast(str, row[0]),
                version=cast(str, row[1]),
                first_seen_unix_nano=cast(int, row[2]),
                last_seen_unix_nano=cast(int, row[3]),
                span_count=cast(int, row[4]),
            )
            for row in rows
        ]

    # -- RED from the roll-ups ----------------------------------------------------------------

    def _split(self, time_range: TimeRange) -> tuple[dict[str, Param], str | None, str | None]:
        """Parameters and the conditions of the two parts of a window.

        The roll-up rows of its whole minutes (on ``Minute``) and the raw spans of its partial
        minutes (on ``Timestamp``); ``None`` for a part the window does not have.
        """
        start = max(0, time_range.start_unix_nano)
        end = max(0, time_range.end_unix_nano)
        first = min(-(-start // _MINUTE) * _MINUTE, MAX_NS)
        last = end - end % _MINUTE
        params: dict[str, Param] = {}
        raw: list[str] = []
        if first >= last:
            params.update(r0=start, r1=end)
            raw.append(
                "(Timestamp >= fromUnixTimestamp64Nano({r0:Int64}) "
                "AND Timestamp < fromUnixTimestamp64Nano({r1:Int64}))"
            )
            return params, None, raw[0]
        params.update(m0=first // SECOND, m1=last // SECOND)
        rolled = "Minute >= toDateTime({m0:UInt32}) AND Minute < toDateTime({m1:UInt32})"
        if start < first:
            params.update(h0=start, h1=first)
            raw.append(
                "(Timestamp >= fromUnixTimestamp64Nano({h0:Int64}) "
                "AND Timestamp < fromUnixTimestamp64Nano({h1:Int64}))"
            )
        if last < end:
            params.update(t0=last, t1=end)
            raw.append(
                "(Timestamp >= fromUnixTimestamp64Nano({t0:Int64}) "
                "AND Timestamp < fromUnixTimestamp64Nano({t1:Int64}))"
            )
        return params, rolled, (" OR ".join(raw) or None)

    async def _rolled_services(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> Page[ServiceSummary]:
        params, rolled, raw = self._split(time_range)
        only, only_params = _only_service(service_name)
        parts = []
        if rolled is not None:
            parts.append(
                f"""
                SELECT toString(ServiceName) AS service, sum(Spans) AS spans,
                       sumIf(Spans, Entry = 1) AS requests, sumIf(Errors, Entry = 1) AS errors,
                       toUnixTimestamp64Nano(max(Last)) AS last,
                       groupUniqArrayIf(Version, Version != '') AS versions,
                       sumMapMerge(Bins) AS m, Entry AS entry
                FROM {self.rollup} WHERE ({rolled}) {only}
                GROUP BY ServiceName, Entry
                """
            )
        if raw is not None:
            parts.append(
                f"""
                SELECT toString(ServiceName) AS service, toUInt64(count()) AS spans,
                       toUInt64(countIf({ENTRY})) AS requests,
                       toUInt64(countIf({ENTRY} AND {ERROR})) AS errors,
                       toUnixTimestamp64Nano(max(Timestamp)) AS last,
                       groupUniqArrayIf(ResourceAttributes['service.version'],
                                        ResourceAttributes['service.version'] != '') AS versions,
                       sumMapIf([{sketch_key_sql("Duration")}], [toUInt64(1)], {ENTRY}) AS m,
                       toUInt8(1) AS entry
                FROM {self.traces} WHERE ({raw}) {only}
                GROUP BY ServiceName
                """
            )
        rows = await self.run.query(
            f"""
            SELECT service, sum(spans) AS span_count, sum(requests) AS request_count,
                   sum(errors), max(last), arraySort(groupUniqArrayArray(versions)),
                   sumMapIf(m.1, m.2, entry = 1) AS bins, count() OVER () AS total
            FROM ({" UNION ALL ".join(parts)})
            GROUP BY service
            ORDER BY request_count DESC, service
            LIMIT {{limit:UInt32}}
            """,
            {**params, "limit": limit, **only_params},
        )
        items = []
        for row in rows:
            p50, p95, p99 = _sketch_of(row[6]).percentiles()
            items.append(
                ServiceSummary(
                    service_name=cast(str, row[0]),
                    span_count=cast(int, row[1]),
                    request_count=cast(int, row[2]),
                    error_count=cast(int, row[3]),
                    p50_duration_ns=p50,
                    p95_duration_ns=p95,
                    p99_duration_ns=p99,
                    last_seen_unix_nano=cast(int, row[4]),
                    versions=list(cast("list[str]", row[5])),
                    percentile_relative_error=RELATIVE_ACCURACY,
                )
            )
        return Page(items=items, total=cast(int, rows[0][7]) if rows else 0)

    async def _rolled_operations(
        self, service_name: str, time_range: TimeRange, limit: int
    ) -> Page[OperationSummary]:
        params, rolled, raw = self._split(time_range)
        parts = []
        if rolled is not None:
            parts.append(
                f"""
                SELECT toString(SpanName) AS name, sum(Spans) AS spans, sum(Errors) AS errors,
                       sumMapMerge(Bins) AS m
                FROM {self.rollup} WHERE ServiceName = {{service:String}} AND {rolled}
                GROUP BY SpanName
                """
            )
        if raw is not None:
            parts.append(
                f"""
                SELECT toString(SpanName) AS name, toUInt64(count()) AS spans,
                       toUInt64(countIf({ERROR})) AS errors,
                       sumMap([{sketch_key_sql("Duration")}], [toUInt64(1)]) AS m
                FROM {self.traces} WHERE ServiceName = {{service:String}} AND ({raw})
                GROUP BY SpanName
                """
            )
        rows = await self.run.query(
            f"""
            SELECT name, sum(spans) AS span_count, sum(errors), sumMap(m.1, m.2),
                   count() OVER () AS total
            FROM ({" UNION ALL ".join(parts)})
            GROUP BY name
            ORDER BY span_count DESC, name
            LIMIT {{limit:UInt32}}
            """,
            {**params, "service": service_name, "limit": limit},
        )
        items = []
        for row in rows:
            p50, p95, p99 = _sketch_of(row[3]).percentiles()
            items.append(
                OperationSummary(
                    service_name=service_name,
                    name=cast(str, row[0]),
                    span_count=cast(int, row[1]),
                    error_count=cast(int, row[2]),
                    p50_duration_ns=p50,
                    p95_duration_ns=p95,
                    p99_duration_ns=p99,
                    percentile_relative_error=RELATIVE_ACCURACY,
                )
            )
        return Page(items=items, total=cast(int, rows[0][4]) if rows else 0)

    async def _rolled_deploys(
        self, time_range: TimeRange, limit: int, service_name: str | None
    ) -> list[DeployRecord]:
        params, rolled, raw = self._split(time_range)
        only = ""
        if service_name is not None:
            only = "AND ServiceName = {service:String}"
            params["service"] = service_name
        parts = []
        if rolled is not None:
            parts.append(
                f"""
                SELECT toString(ServiceName) AS service, Version AS version,
                       min(First) AS first, max(Last) AS last, sum(Spans) AS spans
                FROM {self.rollup} WHERE Version != '' {only} AND {rolled}
                GROUP BY ServiceName, Version
                """
            )
        if raw is not None:
            parts.append(
                f"""
                SELECT toString(ServiceName) AS service,
                       ResourceAttributes['service.version'] AS version,
                       min(Timestamp) AS first, max(Timestamp) AS last,
                       toUInt64(count()) AS spans
                FROM {self.traces} WHERE ({raw}) {only}
                GROUP BY ServiceName, version HAVING version != ''
                """
            )
        rows = await self.run.query(
            f"""
            SELECT service, version, toUnixTimestamp64Nano(min(first)) AS first_seen,
                   toUnixTimestamp64Nano(max(last)), sum(spans)
            FROM ({" UNION ALL ".join(parts)})
            GROUP BY service, version
            ORDER BY first_seen DESC, service, version
            LIMIT {{limit:UInt32}}
            """,
            {**params, "limit": limit},
        )
        return [
            DeployRecord(
                service_name=cast(str, row[0]),
                version=cast(str, row[1]),
                first_seen_unix_nano=cast(int, row[2]),
                last_seen_unix_nano=cast(int, row[3]),
                span_count=cast(int, row[4]),
            )
            for row in rows
        ]

    # -- metrics ------------------------------------------------------------------------------

    async def metric_names(
        self, time_range: TimeRange, limit: int, prefix: str | None
    ) -> Page[MetricDescriptor]:
        """Metric names with a point in the range, by name."""
        params: dict[str, Param] = {**_range(time_range), "limit": limit}
        by_prefix = ""
        if prefix:
            _args.check_prefix(prefix)
            by_prefix = "AND startsWith(MetricName, {prefix:String})"
            params["prefix"] = prefix
        parts = [
            f"""
            SELECT MetricName AS name, '{kind}' AS type,
                   argMax(MetricUnit, TimeUnix) AS unit,
                   argMax(MetricDescription, TimeUnix) AS description,
                   groupUniqArrayArray(mapKeys(Attributes)) AS keys,
                   uniqExact(ServiceName, Attributes) AS series,
                   toUnixTimestamp64Nano(max(TimeUnix)) AS last,
                   groupUniqArray(toString(ServiceName)) AS services
            FROM {table} WHERE {POINT_TIME} {by_prefix}
            GROUP BY MetricName
            """
            for kind, table in self.metric_tables.items()
        ]
        rows = await self.run.query(
            f"""
            SELECT name, argMax(type, last), argMax(unit, last), argMax(description, last),
                   arraySort(arrayDistinct(arrayFlatten(groupArray(keys)))), sum(series),
                   max(last), count() OVER (), arraySort(groupUniqArrayArray(services))
            FROM ({" UNION ALL ".join(parts)})
            GROUP BY name
            ORDER BY name
            LIMIT {{limit:UInt32}}
            """,
            params,
        )
        items = [
            MetricDescriptor(
                name=cast(str, row[0]),
                type=cast(MetricType, row[1]),
                unit=cast(str, row[2]),
                description=cast(str, row[3]),
                label_keys=sorted({"service.name", *cast("list[str]", row[4])} - {META_KEY}),
                series_count=cast(int, row[5]),
                last_seen_unix_nano=cast(int, row[6]),
                service_names=list(cast("list[str]", row[8])),
            )
            for row in rows
        ]
        return Page(items=items, total=cast(int, rows[0][7]) if rows else 0)

    async def _select_series(self, query: MetricQuery) -> list[_Series]:
        params: dict[str, Param] = {**_range(query.time_range), "name": query.name}
        conditions = ["MetricName = {name:String}", POINT_TIME]
        if query.service_name is not None:
            conditions.append("ServiceName = {service:String}")
            params["service"] = query.service_name
        for i, matcher in enumerate(query.matchers):
            if matcher.label == "service.name":
                value = "toString(ServiceName)"
            else:
                value = f"Attributes[{{label_{i}:String}}]"
                params[f"label_{i}"] = matcher.label
            if matcher.op == "=":
                conditions.append(f"{value} = {{match_{i}:String}}")
                params[f"match_{i}"] = matcher.value
            elif matcher.op == "!=":
                conditions.append(f"{value} != {{match_{i}:String}}")
                params[f"match_{i}"] = matcher.value
            else:
                negate = "NOT " if matcher.op == "!~" else ""
                conditions.append(f"{negate}match({value}, {{match_{i}:String}})")
                params[f"match_{i}"] = f"^(?:{matcher.value})$"
        where = " AND ".join(conditions)
        extra = {
            "gauge": "toInt32(0), toUInt8(0)",
            "sum": (
                "argMax(AggregationTemporality, TimeUnix), toUInt8(argMax(IsMonotonic, TimeUnix))"
            ),
            "histogram": "argMax(AggregationTemporality, TimeUnix), toUInt8(0)",
        }
        parts = [
            f"""
            SELECT '{kind}' AS type, toString(ServiceName) AS service,
                   CAST(Attributes, 'Map(String, String)') AS attributes,
                   argMax(MetricUnit, TimeUnix), {extra[kind]},
                   cityHash64(ServiceName, Attributes) AS sid
            FROM {table} WHERE {where}
            GROUP BY ServiceName, Attributes
            """
            for kind, table in self.metric_tables.items()
        ]
        rows = await self.run.query(" UNION ALL ".join(parts), params)
        found = [
            _Series(
                sid=cast(int, row[6]),
                type=cast(MetricType, row[0]),
                service=cast(str, row[1]),
                labels={**cast("dict[str, str]", row[2]), "service.name": cast(str, row[1])},
                unit=cast(str, row[3]),
                temporality=cast(int, row[4]),
                monotonic=bool(row[5]),
            )
            for row in rows
        ]
        found.sort(key=lambda s: (_TYPE_ORDER.index(s.type), sorted(s.labels.items())))
        return found

    async def metric_series(self, query: MetricQuery, limit: int) -> list[MetricSeries]:
        """Bucketed, aggregated series of one metric (see :class:`MetricQuery`)."""
        series = await self._select_series(query)
        if not series:
            return []
        metric_type = series[0].type
        unit = series[0].unit
        series = [s for s in series if s.type == metric_type]
        aggregation = check_aggregation_applies(query.aggregation, metric_type)
        groups: dict[tuple[tuple[str, str], ...], list[_Series]] = {}
        for s in series:
            if query.group_by is None:
                labels = s.labels
            else:
                labels = {k: s.labels.get(k, "") for k in query.group_by if s.labels.get(k, "")}
            groups.setdefault(tuple(sorted(labels.items())), []).append(s)
        outputs = sorted(groups.items())[:limit]
        members = [(index, s) for index, (_, group) in enumerate(outputs) for s in group]
        start, end, step = (
            query.time_range.start_unix_nano,
            query.time_range.end_unix_nano,
            query.step_ns,
        )
        delta = all(s.temporality == 1 for _, s in members)
        increase = metric_type == "sum" and aggregation in ("sum", "increase") and not delta
        lookback = not delta and (aggregation == "rate" or increase or metric_type == "histogram")
        params: dict[str, Param] = {
            "name": query.name,
            "start": start,
            "end": max(0, end),
            "step": step,
            "from": max(0, start - LOOKBACK_NS if lookback else start),
            "sids": [s.sid for _, s in members],
            "groups": [index for index, _ in members],
            "services": sorted({s.service for _, s in members}),
        }
        table = self.metric_tables[metric_type]
        histogram = (
            "BucketCounts AS h, Count AS c, ExplicitBounds AS eb, Sum AS sm, Min AS mn, Max AS mx"
            if metric_type == ("histogram")
            else "Value AS v, IsMonotonic AS mono"
            if metric_type == "sum"
            else "Value AS v"
        )
        points = f"""
            SELECT * FROM (
                SELECT transform(cityHash64(ServiceName, Attributes), {{sids:Array(UInt64)}},
                                 {{groups:Array(UInt32)}}, toUInt32({_NO_GROUP})) AS grp,
                       cityHash64(ServiceName, Attributes) AS sid,
                       toUnixTimestamp64Nano(TimeUnix) AS t,
                       toUnixTimestamp64Nano(StartTimeUnix) AS st,
                       intDiv(t - {{start:Int64}}, {{step:Int64}}) AS b, {histogram}
                FROM {table}
                WHERE MetricName = {{name:String}} AND ServiceName IN {{services:Array(String)}}
                  AND TimeUnix >= fromUnixTimestamp64Nano({{from:Int64}})
                  AND TimeUnix < fromUnixTimestamp64Nano({{end:Int64}})
            ) WHERE grp != {_NO_GROUP}
        """
        quantiles: dict[int, list[tuple[float, float]]] | None = None
        if metric_type == "histogram":
            values, quantiles = await self._histogram(points, params, aggregation, delta)
        elif aggregation == "rate":
            values = await self._rate(points, params, delta)
        elif increase:
            values = await self._rate(points, params, delta, increase=True)
        else:
            simple = "sum" if aggregation == "increase" else aggregation
            values = await self._simple(points, params, simple)
        return [
            MetricSeries(
                name=query.name,
                type=metric_type,
                unit=unit,
                labels=dict(labels),
                points=[(start + b * step, v) for b, v in values.get(index, [])],
                aggregation=aggregation,
                quantile_bounds=None if quantiles is None else quantiles.get(index, []),
            )
            for index, (labels, _) in enumerate(outputs)
        ]

    async def _collect(
        self, sql: str, params: dict[str, Param]
    ) -> dict[int, list[tuple[int, float]]]:
        found: dict[int, list[tuple[int, float]]] = {}
        for row in await self.run.query(sql, params):
            value = cast("float | None", row[2])
            if value is not None:
                found.setdefault(cast(int, row[0]), []).append((cast(int, row[1]), float(value)))
        return found

    async def _simple(
        self, points: str, params: dict[str, Param], aggregation: str
    ) -> dict[int, list[tuple[int, float]]]:
        if aggregation in PERCENTILE_AGGREGATIONS:
            p = PERCENTILE_AGGREGATIONS[aggregation]
            value = f"arraySort(groupArray(v))[intDiv(count() * {p} + 99, 100)]"
        elif aggregation == "last":
            value = "argMax(v, (t, sid))"
        elif aggregation == "count":
            value = "toFloat64(count())"
        else:
            value = f"toFloat64({aggregation}(v))"
        return await self._collect(
            f"""
            SELECT grp, b, {value} FROM ({points})
            WHERE isFinite(v) AND t >= {{start:Int64}}
            GROUP BY grp, b ORDER BY grp, b
            """,
            params,
        )

    async def _rate(
        self, points: str, params: dict[str, Param], delta: bool, *, increase: bool = False
    ) -> dict[int, list[tuple[int, float]]]:
        # increase=True (cumulative sums only): the increase itself, not divided by the time,
        # and a series' first point ever counts whole when its start time is inside the range.
        if delta:
            # Each point is the increase since the previous one: their sum over the bucket's
            # width (the last bucket may be cut short by the range's end).
            return await self._collect(
                f"""
                SELECT grp, b,
                       sum(v) * 1e9
                       / (least({{start:Int64}} + (b + 1) * {{step:Int64}}, {{end:Int64}})
                          - ({{start:Int64}} + b * {{step:Int64}}))
                FROM ({points}) WHERE isFinite(v) AND t >= {{start:Int64}}
                GROUP BY grp, b ORDER BY grp, b
                """,
                params,
            )
        # Cumulative: per series, consecutive finite points (the last one before the range as
        # the first one's predecessor); a decrease of a monotonic sum or a new start time is a
        # reset (the increase is then the new value). Rates of a group's series add up.
        per_series = "sum(dv)" if increase else "sum(dv) * 1e9 / sum(dt)"
        first = "(rn = 1 AND st > 0 AND st >= {start:Int64})" if increase else "0"
        return await self._collect(
            f"""
            SELECT grp, b, sum(r) FROM (
                SELECT grp, sid, b, {per_series} AS r FROM (
                    SELECT grp, sid, b, if(rn = 1, 0, t - pt) AS dt,
                           if(rn = 1 OR (mono AND v < pv) OR (st > 0 AND pst > 0 AND st != pst),
                              v, v - pv) AS dv
                    FROM (
                        SELECT grp, sid, b, t, st, v, mono,
                               lagInFrame(v) OVER w AS pv, lagInFrame(t) OVER w AS pt,
                               lagInFrame(st) OVER w AS pst, row_number() OVER w AS rn
                        FROM ({points}) WHERE isFinite(v)
                        WINDOW w AS (PARTITION BY sid ORDER BY t
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                    )
                    WHERE t >= {{start:Int64}} AND ((rn > 1 AND t > pt) OR {first})
                )
                GROUP BY grp, sid, b HAVING {"1" if increase else "sum(dt) > 0"}
            )
            GROUP BY grp, b ORDER BY grp, b
            """,
            params,
        )

    async def _histogram(
        self, points: str, params: dict[str, Param], aggregation: str, delta: bool
    ) -> tuple[dict[int, list[tuple[int, float]]], dict[int, list[tuple[float, float]]] | None]:
        # Min and Max are 0 when the point had none (the exporter's schema has no NULL): a
        # pair of zeros is taken as "not exported".
        extremes = (
            "minIfOrNull(mn, NOT (mn = 0 AND mx = 0)), maxIfOrNull(mx, NOT (mn = 0 AND mx = 0))"
        )
        if delta:
            sql = f"""
                SELECT grp, b, eb, sumForEach(arrayMap(x -> toInt64(x), h)), {extremes},
                       sum(toInt64(c)), sum(sm)
                FROM ({points}) WHERE t >= {{start:Int64}}
                GROUP BY grp, b, eb
            """
        else:
            # Per series and bucket, the last point minus the previous bucket's last point
            # (or the last point before the range); a smaller count or a new start time is a
            # reset, and a series' first point counts whole. Min and max are the last
            # point's (over the series' life so far: outer bounds of the increase).
            last = (
                "argMax(h, t) AS h, argMax(c, t) AS c, argMax(st, t) AS st, argMax(eb, t) AS eb, "
                "argMax(sm, t) AS sm, argMax(mn, t) AS mn, argMax(mx, t) AS mx"
            )
            reset = "rn = 1 OR c < pc OR (st > 0 AND pst > 0 AND st != pst)"
            sql = f"""
                SELECT grp, b, eb, sumForEach(counts), {extremes}, sum(cnt), sum(dsm) FROM (
                    SELECT grp, b, eb, mn, mx,
                           if({reset} OR length(h) != length(ph),
                              arrayMap(x -> toInt64(x), h),
                              arrayMap((x, i) -> toInt64(x) - toInt64(ph[i]), h,
                                       arrayEnumerate(h))) AS counts,
                           if({reset}, toInt64(c), toInt64(c) - toInt64(pc)) AS cnt,
                           if({reset}, sm, sm - psm) AS dsm
                    FROM (
                        SELECT grp, sid, b, h, c, st, eb, sm, mn, mx,
                               lagInFrame(h) OVER w AS ph, lagInFrame(c) OVER w AS pc,
                               lagInFrame(st) OVER w AS pst, lagInFrame(sm) OVER w AS psm,
                               row_number() OVER w AS rn
                        FROM (
                            SELECT grp, sid, b, {last} FROM ({points})
                            WHERE t >= {{start:Int64}} GROUP BY grp, sid, b
                            UNION ALL
                            SELECT grp, sid, toInt64(-1) AS b, {last} FROM ({points})
                            WHERE t < {{start:Int64}} GROUP BY grp, sid
                        )
                        WINDOW w AS (PARTITION BY sid ORDER BY b
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                    )
                    WHERE b >= 0
                )
                GROUP BY grp, b, eb
            """
        merged: dict[tuple[int, int], MergedHistogram] = {}
        for row in await self.run.query(sql, params):
            grp, b = cast(int, row[0]), cast(int, row[1])
            merged.setdefault((grp, b), MergedHistogram()).add(
                [*cast("list[float]", row[2]), math.inf],
                cast("list[int | None]", row[3]),
                count=cast(int, row[6]),
                total=cast(float, row[7]),
                minimum=cast("float | None", row[4]),
                maximum=cast("float | None", row[5]),
            )
        found: dict[int, list[tuple[int, float]]] = {}
        quantiles: dict[int, list[tuple[float, float]]] = {}
        for (grp, b), histogram in sorted(merged.items()):
            try:
                value, quantile = histogram_value(aggregation, histogram)
            except LookupError:
                continue
            found.setdefault(grp, []).append((b, value))
            if quantile is not None:
                quantiles.setdefault(grp, []).append((quantile.lower, quantile.upper))
        return found, (quantiles if aggregation in PERCENTILE_AGGREGATIONS else None)


def _term_sql(i: int, term: Term, params: dict[str, Param], tk: str = "tk") -> tuple[str, str]:
    """The match condition and the frequency expression of term ``i`` over the tokens ``tk``."""
    words = list(term.tokens)
    if len(words) == 1:
        params[f"word_{i}"] = words[0]
        if term.prefix:
            test = f"x -> startsWith(x, {{word_{i}:String}})"
            return f"arrayExists({test}, {tk})", f"arrayCount({test}, {tk})"
        return f"has({tk}, {{word_{i}:String}})", f"countEqual({tk}, {{word_{i}:String}})"
    n = len(words)
    if term.prefix:
        params[f"head_{i}"] = words[:-1]
        params[f"word_{i}"] = words[-1]
        test = (
            f"j -> arraySlice({tk}, j, {n - 1}) = {{head_{i}:Array(String)}} "
            f"AND startsWith({tk}[j + {n - 1}], {{word_{i}:String}})"
        )
        return (
            f"arrayExists({test}, arrayEnumerate({tk}))",
            f"arrayCount({test}, arrayEnumerate({tk}))",
        )
    params[f"phrase_{i}"] = words
    test = f"j -> arraySlice({tk}, j, {n}) = {{phrase_{i}:Array(String)}}"
    return (
        f"hasSubstr({tk}, {{phrase_{i}:Array(String)}})",
        f"arrayCount({test}, arrayEnumerate({tk}))",
    )


_MINUTE: Final = 60 * SECOND
_ROLL_MINUTES: Final = 1440
"""The most minutes one edge roll-up statement covers (a day)."""


def _only_service(service_name: str | None) -> tuple[str, dict[str, Param]]:
    """The condition (and parameter) that keeps one service's rows, or none."""
    if service_name is None:
        return "", {}
    return "AND ServiceName = {only_service:String}", {"only_service": service_name}


def _sketch_of(bins: object) -> LatencySketch:
    """The sketch of a ``sumMap`` result: ``(keys, counts)`` (ClickHouse gives a tuple)."""
    keys, counts = cast("tuple[Sequence[int], Sequence[int]]", bins)
    sketch = LatencySketch()
    sketch.add_bins(keys, counts)
    return sketch
