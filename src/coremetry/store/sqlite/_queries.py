"""The read side of the embedded store: one blocking function per query, run in a worker thread.

Each function receives a :class:`~._runtime.ReadContext` (one read transaction) and issues a
fixed, small number of SQL statements whose aggregation, ranking and limiting run in SQLite.
Python only builds the statements, checks arguments, and turns the (at most ``limit``) result
rows into records. Two documented exceptions, both over already-aggregated data: grouping the
*series* of a metric (one row per series, not per point) for ``metric_series``, and the
histogram interpolation over the summed bucket counts of each output bucket.

Conventions used below:

- Percentiles are nearest-rank: with ``n`` values ordered ascending and numbered ``rn`` from
  1, the ``p``-th percentile is the value at ``rn = ceil(n * p / 100)``, which SQL computes as
  ``(n * p + 99) / 100`` in integer arithmetic.
- Attribute values are compared as text: strings as they are, integers in decimal, booleans
  ``true``/``false``, doubles as SQLite prints them, lists as their JSON
  (:data:`_TEXT_VALUE`).
- Pages ask SQLite for ``limit + 1`` rows; the extra row only says that there is a next page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, cast

import msgspec

from coremetry.store import _query_args as _args
from coremetry.store._histogram import MergedHistogram, histogram_value
from coremetry.store._query_args import (
    PERCENTILE_AGGREGATIONS,
    SIMPLE_AGGREGATIONS,
    CursorCodec,
    CursorKey,
    check_aggregation_applies,
    query_hash,
)
from coremetry.store.errors import QueryRejected
from coremetry.store.interface import (
    LogCountPoint,
    LogCountSeries,
    LogQuery,
    MetricDescriptor,
    MetricQuery,
    MetricSeries,
    Page,
    RedPoint,
    ServiceRedSeries,
    StoreStatistics,
    TimeRange,
    TraceQuery,
    TraceSummary,
)
from coremetry.store.model import (
    Attributes,
    LogRecord,
    MetricType,
    Span,
    normalize_span_id,
)

from ._codec import (
    LogOutRow,
    SpanOutRow,
    decode_attributes,
    log_from_row,
    span_from_row,
)
from ._runtime import ReadContext, SqlParam
from ._text import fts_match

__all__ = [
    "LogPlan",
    "check_trace_id",
    "get_trace",
    "log_counts",
    "metric_names",
    "metric_series",
    "plan_log_search",
    "search_logs",
    "search_traces",
    "service_red_series",
    "statistics",
]

_ERROR: Final = 2  # StatusCode.ERROR
_NANOS_PER_MINUTE: Final = 60_000_000_000
_MAX_FINITE: Final = "1.7976931348623157e308"
_FINITE_VALUE: Final = (
    f"CASE WHEN p.value BETWEEN -{_MAX_FINITE} AND {_MAX_FINITE} THEN p.value END"
)
"""A point's value, NULL when NaN (stored as NULL) or ±Inf: what aggregations skip."""

_TEXT_VALUE: Final = (
    "CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END"
)
"""The text form of a ``json_each`` row ``j``'s value (see the module docstring)."""

_ENTRY: Final = "(s.kind IN (2, 5) OR s.parent_span_id IS NULL)"
"""An entry span: kind SERVER or CONSUMER, or a root (what a service served)."""

_SPAN_COLUMNS: Final = (
    "s.trace_id, s.span_id, s.parent_span_id, s.service_name, s.name, s.kind, "
    "s.start_unix_nano, s.end_unix_nano, s.status_code, s.status_message, s.attributes, "
    "s.events, s.links, s.scope_name, s.resource_id"
)
_LOG_COLUMNS: Final = (
    "l.time_unix_nano, l.observed_time_unix_nano, l.severity_number, l.severity_text, l.body, "
    "l.service_name, l.trace_id, l.span_id, l.attributes, l.scope_name, l.resource_id, l.id"
)


def _percentiles(value: str = "d") -> str:
    """Nearest-rank p50, p95, p99 of ``value`` over rows numbered ``rn`` of ``n`` (grouped)."""
    return ", ".join(
        f"max(CASE WHEN rn = (n * {p} + 99) / 100 THEN {value} END) AS p{p}" for p in (50, 95, 99)
    )


# -- argument checks (run in the trio thread, before any I/O; shared: ``store._query_args``) --

_CURSORS: Final = CursorCodec()
"""Cursors of this store: ``[query_hash, key]`` (no tag, as since the first version)."""


def check_trace_id(trace_id: str, field: str) -> bytes:
    """The 16 bytes of a trace id given as hex (case-insensitive; 64-bit ids left-padded).

    Raises:
        QueryRejected: ``field``: not hex, longer than 32 characters, or all zero.
    """
    return bytes.fromhex(_args.check_trace_id(trace_id, field))


def _span_id_bytes(span_id: str) -> bytes:
    try:
        normalized = normalize_span_id(span_id)
    except ValueError:
        normalized = ""
    if not normalized:
        raise QueryRejected("cursor", "is not a cursor returned by this query")
    return bytes.fromhex(normalized)


def _resources(ctx: ReadContext, ids: set[int]) -> dict[int, Attributes]:
    """The attribute maps of the resources ``ids`` (one statement)."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = cast(
        "list[tuple[int, str | None]]",
        ctx.execute(f"SELECT id, attributes FROM resources WHERE id IN ({marks})", sorted(ids)),
    )
    return {rid: decode_attributes(text) for rid, text in rows}


# -- statistics -------------------------------------------------------------------------------


def statistics(ctx: ReadContext) -> StoreStatistics:
    """Counts and time extent (``size_bytes`` left for the caller).

    Spans and log records are counted from the roll-ups' day rows (``red_services``,
    ``red_logs``: every stored span and record is in exactly one, kept in its write's
    transaction; for spans, plus the rows of the tail above the roll-ups' mark, at most a
    few seconds of ingest), not by scanning an index of every row: ``count(*)`` cost ~10 ms
    per million rows, and ``list_services`` reads the store's extent on every call. Between
    two chunks of one retention pass these counts may differ from the rows left, as the roll-ups do
    (:mod:`._rollups`); equal again when the pass ends. Metric points are counted (no roll-up).
    """
    row = cast(
        "tuple[int, int, int, int | None, int | None, int | None, int | None, int | None, "
        "int | None]",
        ctx.execute(
            "SELECT "
            "(SELECT coalesce(sum(span_count), 0) FROM red_services WHERE width = 86400) "
            "+ (SELECT count(*) FROM spans WHERE id > (SELECT span_id FROM rollup_mark)), "
            "(SELECT coalesce(sum(records), 0) FROM red_logs WHERE width = 86400), "
            "(SELECT count(*) FROM metric_points), "
            "(SELECT min(start_unix_nano) FROM spans), (SELECT max(start_unix_nano) FROM spans), "
            "(SELECT min(time_unix_nano) FROM logs), (SELECT max(time_unix_nano) FROM logs), "
            "(SELECT min(time_unix_nano) FROM metric_points), "
            "(SELECT max(time_unix_nano) FROM metric_points)"
        )[0],
    )
    lows = [t for t in (row[3], row[5], row[7]) if t is not None]
    highs = [t for t in (row[4], row[6], row[8]) if t is not None]
    return StoreStatistics(
        span_count=row[0],
        log_count=row[1],
        metric_point_count=row[2],
        oldest_unix_nano=min(lows) if lows else None,
        newest_unix_nano=max(highs) if highs else None,
    )


# -- bucketed RED and log counts ---------------------------------------------------------------
# (services, operations, edges and deploys read the roll-ups: ``._rollups``)


_STRINGS: Final = msgspec.json.Decoder(list[str])


_SERVICE_RED_SERIES: Final = f"""
WITH win AS MATERIALIZED (
    SELECT s.service_name, (s.start_unix_nano - :start) / :step AS b, s.duration_ns AS d,
           s.status_code
    FROM spans s
    WHERE s.start_unix_nano >= :start AND s.start_unix_nano < :end AND {_ENTRY}
),
chosen AS (
    SELECT DISTINCT service_name FROM win ORDER BY service_name LIMIT :limit
),
ranked AS (
    SELECT service_name, b, d, status_code,
           row_number() OVER (PARTITION BY service_name, b ORDER BY d) AS rn,
           count(*) OVER (PARTITION BY service_name, b) AS n
    FROM win WHERE service_name IN (SELECT service_name FROM chosen)
)
SELECT service_name, b, count(*), sum(status_code = {_ERROR}), {_percentiles()}
FROM ranked GROUP BY service_name, b
ORDER BY service_name, b
"""


def service_red_series(
    ctx: ReadContext, time_range: TimeRange, step: int, limit: int
) -> list[ServiceRedSeries]:
    """RED of entry spans per service and bucket (see ``TelemetryStore.service_red_series``)."""
    rows = cast(
        "list[tuple[str, int, int, int, int, int, int]]",
        ctx.execute(
            _SERVICE_RED_SERIES,
            {
                "start": time_range.start_unix_nano,
                "end": time_range.end_unix_nano,
                "step": step,
                "limit": limit,
            },
        ),
    )
    found: dict[str, list[RedPoint]] = {}
    for name, bucket, requests, errors, p50, p95, p99 in rows:
        found.setdefault(name, []).append(
            RedPoint(
                bucket_start_unix_nano=time_range.start_unix_nano + bucket * step,
                request_count=requests,
                error_count=errors,
                p50_duration_ns=p50,
                p95_duration_ns=p95,
                p99_duration_ns=p99,
            )
        )
    return [ServiceRedSeries(service_name=name, points=points) for name, points in found.items()]


_LOG_COUNTS: Final = """
WITH win AS MATERIALIZED (
    SELECT l.service_name, (l.time_unix_nano - :start) / :step AS b, l.severity_number AS sev
    FROM logs l
    WHERE l.time_unix_nano >= :start AND l.time_unix_nano < :end
),
chosen AS (
    SELECT DISTINCT service_name FROM win ORDER BY service_name LIMIT :limit
)
SELECT service_name, b, count(*), sum(sev BETWEEN 13 AND 16), sum(sev >= 17)
FROM win WHERE service_name IN (SELECT service_name FROM chosen)
GROUP BY service_name, b
ORDER BY service_name, b
"""


def log_counts(
    ctx: ReadContext, time_range: TimeRange, step: int, limit: int
) -> list[LogCountSeries]:
    """Log records per service and bucket by severity (see ``TelemetryStore.log_counts``)."""
    rows = cast(
        "list[tuple[str, int, int, int, int]]",
        ctx.execute(
            _LOG_COUNTS,
            {
                "start": time_range.start_unix_nano,
                "end": time_range.end_unix_nano,
                "step": step,
                "limit": limit,
            },
        ),
    )
    found: dict[str, list[LogCountPoint]] = {}
    for name, bucket, records, warn, error in rows:
        found.setdefault(name, []).append(
            LogCountPoint(
                bucket_start_unix_nano=time_range.start_unix_nano + bucket * step,
                records=records,
                warn_records=warn,
                error_records=error,
            )
        )
    return [LogCountSeries(service_name=name, points=points) for name, points in found.items()]


# -- traces -----------------------------------------------------------------------------------


def get_trace(ctx: ReadContext, trace_id: bytes, limit: int, cursor: str | None) -> Page[Span]:
    """The spans of one trace, by start time then span id."""
    qhash = query_hash("get_trace", trace_id.hex())
    after = _CURSORS.page_after(cursor, qhash, (int, str))
    params: list[SqlParam] = [trace_id]
    where = "s.trace_id = ?"
    if after is not None:
        where += " AND (s.start_unix_nano, s.span_id) > (?, ?)"
        params += [after[0], _span_id_bytes(cast(str, after[1]))]
    rows = cast(
        "list[SpanOutRow]",
        ctx.execute(
            f"SELECT {_SPAN_COLUMNS} FROM spans s WHERE {where} "
            "ORDER BY s.start_unix_nano, s.span_id LIMIT ?",
            [*params, limit + 1],
        ),
    )
    more = len(rows) > limit
    if after is None and not more:
        total = len(rows)  # the whole trace is on this page
    else:
        total = cast(
            int, ctx.execute("SELECT count(*) FROM spans WHERE trace_id = ?", [trace_id])[0][0]
        )
        rows = rows[:limit]
    resources = _resources(ctx, {row[14] for row in rows})
    items = [span_from_row(row, resources[row[14]]) for row in rows]
    next_cursor = None
    if more:
        last = rows[-1]
        next_cursor = _CURSORS.encode(qhash, (last[6], last[1].hex()))
    return Page(items=items, next_cursor=next_cursor, total=total)


def _attribute_condition(params: list[SqlParam], key: str, value: str) -> str:
    """Span attribute ``key`` or its resource's attribute ``key`` equals ``value`` as text."""
    params += [key, value, key, value]
    return (
        "(EXISTS (SELECT 1 FROM json_each(s.attributes) j "
        f"WHERE j.key = ? AND {_TEXT_VALUE} = ?) "
        "OR EXISTS (SELECT 1 FROM resources r, json_each(r.attributes) j "
        f"WHERE r.id = s.resource_id AND j.key = ? AND {_TEXT_VALUE} = ?))"
    )


def _log_attribute_condition(params: list[SqlParam], key: str, value: str) -> str:
    """Log attribute ``key`` or its resource's attribute ``key`` equals ``value`` as text."""
    params += [key, value, key, value]
    return (
        "(EXISTS (SELECT 1 FROM json_each(l.attributes) j "
        f"WHERE j.key = ? AND {_TEXT_VALUE} = ?) "
        "OR EXISTS (SELECT 1 FROM resources r, json_each(r.attributes) j "
        f"WHERE r.id = l.resource_id AND j.key = ? AND {_TEXT_VALUE} = ?))"
    )


def search_traces(
    ctx: ReadContext, query: TraceQuery, limit: int, cursor: str | None
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
    after = _CURSORS.page_after(cursor, qhash, (int, str))
    params: list[SqlParam] = [query.time_range.start_unix_nano, query.time_range.end_unix_nano]
    conditions = ["s.start_unix_nano >= ?", "s.start_unix_nano < ?"]
    if query.service_name is not None:
        # By resource: a service's spans are those of its (few) resources, which the
        # (resource_id, start) index finds range by range.
        conditions.append(
            "s.resource_id IN (SELECT r.id FROM resources r WHERE r.service_name = ?)"
        )
        params.append(query.service_name)
    if query.operation is not None:
        conditions.append("s.name = ?")
        params.append(query.operation)
    if query.min_duration_ns is not None:
        conditions.append("s.duration_ns >= ?")
        params.append(query.min_duration_ns)
    if query.status == "error":
        conditions.append(f"s.status_code = {_ERROR}")
    elif query.status == "ok":
        conditions.append(f"s.status_code != {_ERROR}")
    for key, value in attributes:
        conditions.append(_attribute_condition(params, key, value))
    page_filter = ""
    if after is not None:
        page_filter = "WHERE t.trace_start < ? OR (t.trace_start = ? AND t.trace_id > ?)"
        after_id = check_trace_id(cast(str, after[1]), "cursor")
        params += [after[0], after[0], after_id]
    params.append(limit + 1)
    found = cast(
        "list[tuple[bytes, int, int]]",
        ctx.execute(
            f"""
            WITH m AS (SELECT DISTINCT s.trace_id FROM spans s WHERE {" AND ".join(conditions)}),
            t AS (
                SELECT m.trace_id,
                       (SELECT min(x.start_unix_nano) FROM spans x WHERE x.trace_id = m.trace_id)
                           AS trace_start,
                       count(*) OVER () AS total
                FROM m
            )
            SELECT t.trace_id, t.trace_start, t.total FROM t {page_filter}
            ORDER BY t.trace_start DESC, t.trace_id
            LIMIT ?
            """,
            params,
        ),
    )
    more = len(found) > limit
    found = found[:limit]
    if not found:
        return Page(items=[], total=0 if after is None else None)
    total = found[0][2]
    summaries = _trace_summaries(ctx, [row[0] for row in found])
    items = [summaries[row[0]] for row in found]
    next_cursor = None
    if more:
        next_cursor = _CURSORS.encode(qhash, (found[-1][1], found[-1][0].hex()))
    return Page(items=items, next_cursor=next_cursor, total=total)


def _trace_summaries(ctx: ReadContext, trace_ids: list[bytes]) -> dict[bytes, TraceSummary]:
    """Summaries of ``trace_ids`` (every stored span of each, any time).

    Three index reads by ``(trace_id, start)``, none sorting spans: the aggregates per trace,
    the root span (no parent; the earliest by start then span id when there are several: the
    index walk in that order stops at it), and
    only for traces without a root the earliest span, which stands in for it. (One window
    function ranking every span of every trace cost 4-5x the aggregate on 200 traces.)
    """
    marks = ", ".join("?" * len(trace_ids))
    rows = cast(
        "list[tuple[bytes, int, int, int, int, str]]",
        ctx.execute(
            f"""
            SELECT trace_id, min(start_unix_nano), max(end_unix_nano), count(*),
                   sum(status_code = {_ERROR}), json_group_array(DISTINCT service_name)
            FROM spans WHERE trace_id IN ({marks})
            GROUP BY trace_id
            """,
            trace_ids,
        ),
    )
    # Each trace's first root in (start, span id) order: the index walk in that order stops at
    # it, usually the trace's first span (filtering every span of the traces for a root read
    # each row: 10-14 ms against 0.5 ms for 200 traces of ~110 spans on the 5 M store).
    roots: dict[bytes, tuple[str, str]] = {
        trace_id: (service, name)
        for trace_id, service, name in cast(
            "list[tuple[bytes, str, str]]",
            ctx.execute(
                f"WITH ids(trace_id) AS (VALUES {', '.join(['(?)'] * len(trace_ids))}) "
                "SELECT s.trace_id, s.service_name, s.name FROM ids CROSS JOIN spans s "
                "ON s.id = (SELECT r.id FROM spans r WHERE r.trace_id = ids.trace_id "
                "AND r.parent_span_id IS NULL ORDER BY r.start_unix_nano, r.span_id LIMIT 1)",
                trace_ids,
            ),
        )
    }
    rootless = [row[0] for row in rows if row[0] not in roots]
    stand_ins: dict[bytes, tuple[str, str]] = {}
    for trace_id in rootless:
        first = cast(
            "list[tuple[str, str]]",
            ctx.execute(
                "SELECT service_name, name FROM spans WHERE trace_id = ? "
                "ORDER BY start_unix_nano, span_id LIMIT 1",
                [trace_id],
            ),
        )
        if first:
            stand_ins[trace_id] = first[0]
    summaries = {}
    for trace_id, start, end, count, errors, services in rows:
        root = roots.get(trace_id)
        service, name = root if root is not None else stand_ins[trace_id]
        summaries[trace_id] = TraceSummary(
            trace_id=trace_id.hex(),
            root_service_name=service,
            root_name=name,
            root_missing=root is None,
            start_time_unix_nano=start,
            duration_ns=max(0, end - start),
            span_count=count,
            error_count=errors,
            services=sorted(_STRINGS.decode(services)),
        )
    return summaries


# -- logs -------------------------------------------------------------------------------------


class LogPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A checked log query: the FTS5 expression (if any) and the bound filters."""

    query: LogQuery
    match: str | None
    trace_id: bytes | None
    qhash: str


def plan_log_search(query: LogQuery) -> LogPlan:
    """Check a :class:`LogQuery` and translate its text (no I/O).

    Raises:
        QueryRejected: bad ``text`` (see :mod:`coremetry.store._text_query`), ``trace_id`` or
            ``min_severity_number`` (:func:`coremetry.store._query_args.check_log_query`).
    """
    terms, trace_hex = _args.check_log_query(query)
    match = fts_match(terms) if terms is not None else None
    trace_id = bytes.fromhex(trace_hex) if trace_hex is not None else None
    severity = query.min_severity_number
    qhash = query_hash(
        "search_logs",
        query.time_range.start_unix_nano,
        query.time_range.end_unix_nano,
        match,
        query.service_name,
        severity,
        trace_id.hex() if trace_id is not None else None,
        sorted(query.attributes.items()),
    )
    return LogPlan(query=query, match=match, trace_id=trace_id, qhash=qhash)


def search_logs(ctx: ReadContext, plan: LogPlan, limit: int, cursor: str | None) -> Page[LogRecord]:
    """Matching log records: by BM25 then newest with text, newest first without."""
    query = plan.query
    ranked = plan.match is not None
    after = _CURSORS.page_after(cursor, plan.qhash, (float, int, int) if ranked else (int, int))
    params: list[SqlParam] = []
    conditions = ["l.time_unix_nano >= ?", "l.time_unix_nano < ?"]
    params += [query.time_range.start_unix_nano, query.time_range.end_unix_nano]
    if query.service_name is not None:
        conditions.append(
            "l.resource_id IN (SELECT r.id FROM resources r WHERE r.service_name = ?)"
        )
        params.append(query.service_name)
    if query.min_severity_number is not None:
        conditions.append("l.severity_number >= ?")
        params.append(query.min_severity_number)
    if plan.trace_id is not None:
        conditions.append("l.trace_id = ?")
        params.append(plan.trace_id)
    for attribute, value in sorted(query.attributes.items()):
        conditions.append(_log_attribute_condition(params, attribute, value))
    if ranked:
        # Only the rowids logged in the range's minutes go to FTS5 (it seeks a rowid range),
        # so BM25 is computed for the matches of the range, not of every record.
        span_ids = ctx.execute(
            "SELECT min(min_id), max(max_id) FROM log_minutes WHERE minute BETWEEN ? AND ?",
            [
                query.time_range.start_unix_nano // _NANOS_PER_MINUTE,
                (query.time_range.end_unix_nano - 1) // _NANOS_PER_MINUTE,
            ],
        )[0]
        if span_ids[0] is None:
            return Page(items=[])
        source = (
            "(SELECT rowid, bm25(logs_fts) AS score FROM logs_fts "
            "WHERE logs_fts MATCH ? AND rowid BETWEEN ? AND ?) f "
            "JOIN logs l ON l.id = f.rowid"
        )
        params[0:0] = [plan.match, span_ids[0], span_ids[1]]
        order = "f.score, l.time_unix_nano DESC, l.id"
        score = "f.score"
        if after is not None:
            conditions.append(
                "(f.score > ? OR (f.score = ? AND (l.time_unix_nano < ? "
                "OR (l.time_unix_nano = ? AND l.id > ?))))"
            )
            params += [after[0], after[0], after[1], after[1], after[2]]
    else:
        source = "logs l"
        order = "l.time_unix_nano DESC, l.id"
        score = "0.0"
        if after is not None:
            conditions.append("(l.time_unix_nano < ? OR (l.time_unix_nano = ? AND l.id > ?))")
            params += [after[0], after[0], after[1]]
    params.append(limit + 1)
    where = " AND ".join(conditions)
    if ranked:
        # Rank with the sort key only (every match goes through the sort), then read the
        # page's records: carrying bodies and attributes through the sort cost a third more.
        keys = cast(
            "list[tuple[int, int, float]]",
            ctx.execute(
                f"SELECT l.id, l.time_unix_nano, {score} FROM {source} "
                f"WHERE {where} ORDER BY {order} LIMIT ?",
                params,
            ),
        )
        marks = ", ".join("?" * len(keys))
        by_id = {
            row[11]: row
            for row in cast(
                "list[LogOutRow]",
                ctx.execute(
                    f"SELECT {_LOG_COLUMNS}, 0.0 FROM logs l WHERE l.id IN ({marks})",
                    [k[0] for k in keys],
                ),
            )
        }
        rows = [(*by_id[k[0]][:12], k[2]) for k in keys]
    else:
        rows = cast(
            "list[LogOutRow]",
            ctx.execute(
                f"SELECT {_LOG_COLUMNS}, {score} FROM {source} "
                f"WHERE {where} ORDER BY {order} LIMIT ?",
                params,
            ),
        )
    more = len(rows) > limit
    rows = rows[:limit]
    resources = _resources(ctx, {row[10] for row in rows})
    items = [log_from_row(row, resources[row[10]]) for row in rows]
    next_cursor = None
    if more:
        last = rows[-1]
        key: CursorKey = (last[12], last[0], last[11]) if ranked else (last[0], last[11])
        next_cursor = _CURSORS.encode(plan.qhash, key)
    return Page(items=items, next_cursor=next_cursor)


# -- metrics ----------------------------------------------------------------------------------


def metric_names(
    ctx: ReadContext, time_range: TimeRange, limit: int, prefix: str | None
) -> Page[MetricDescriptor]:
    """Metric names with a point in the range, by name."""
    params: dict[str, SqlParam] = {
        "start": time_range.start_unix_nano,
        "end": time_range.end_unix_nano,
        "limit": limit,
    }
    by_prefix = ""
    if prefix:
        _args.check_prefix(prefix)
        # The range lets the name index work; substr() makes it exact.
        by_prefix = (
            "WHERE ms.name >= :prefix AND ms.name < :prefix_end "
            "AND substr(ms.name, 1, length(:prefix)) = :prefix"
        )
        params["prefix"] = prefix
        params["prefix_end"] = prefix + "\U0010ffff"
    rows = cast(
        "list[tuple[str, str, str, str, str | None, int, int, int, str]]",
        ctx.execute(
            f"""
            WITH s AS MATERIALIZED (
                SELECT ms.id, ms.name, ms.type, ms.unit, ms.description, ms.attributes,
                       ms.service_name,
                       (SELECT p.time_unix_nano FROM metric_points p
                        WHERE p.series_id = ms.id
                          AND p.time_unix_nano >= :start AND p.time_unix_nano < :end
                        ORDER BY p.time_unix_nano DESC LIMIT 1) AS last
                FROM metric_series ms {by_prefix}
            ),
            live AS (SELECT * FROM s WHERE last IS NOT NULL),
            meta AS (
                SELECT name, type, unit, description,
                       row_number() OVER (PARTITION BY name ORDER BY last DESC, id DESC) AS rn
                FROM live
            ),
            agg AS (SELECT name, count(*) AS series_count, max(last) AS last_seen,
                           json_group_array(DISTINCT service_name) AS services
                    FROM live GROUP BY name),
            keys AS (
                SELECT live.name, json_group_array(DISTINCT j.key) AS label_keys
                FROM live, json_each(live.attributes) j GROUP BY live.name
            )
            SELECT agg.name, meta.type, meta.unit, meta.description, keys.label_keys,
                   agg.series_count, agg.last_seen, count(*) OVER () AS total, agg.services
            FROM agg
            JOIN meta ON meta.name = agg.name AND meta.rn = 1
            LEFT JOIN keys ON keys.name = agg.name
            ORDER BY agg.name
            LIMIT :limit
            """,
            params,
        ),
    )
    items = [
        MetricDescriptor(
            name=row[0],
            type=cast(MetricType, row[1]),
            unit=row[2],
            description=row[3],
            label_keys=sorted({"service.name", *(_STRINGS.decode(row[4]) if row[4] else [])}),
            series_count=row[5],
            last_seen_unix_nano=row[6],
            service_names=sorted(_STRINGS.decode(row[8])),
        )
        for row in rows
    ]
    return Page(items=items, total=rows[0][7] if rows else 0)


def _label_text(column_params: list[SqlParam], label: str) -> str:
    """SQL for series ``ms``'s label ``label`` as text ('' when missing)."""
    if label == "service.name":
        return "ms.service_name"
    column_params.append(label)
    return f"coalesce((SELECT {_TEXT_VALUE} FROM json_each(ms.attributes) j WHERE j.key = ?), '')"


class _Series(msgspec.Struct, frozen=True):
    id: int
    type: MetricType
    unit: str
    monotonic: bool
    temporality: str
    labels: dict[str, str]
    group: str
    max_buckets: int


_LABELS: Final = msgspec.json.Decoder(dict[str, str])


def _select_series(ctx: ReadContext, query: MetricQuery) -> list[_Series]:
    params: list[SqlParam] = []
    group_expr = "''"
    if query.group_by is not None:
        group_params: list[SqlParam] = []
        parts = [_label_text(group_params, k) for k in query.group_by]
        group_expr = f"json_array({', '.join(parts)})" if parts else "'[]'"
        params += group_params
    conditions = ["ms.name = ?"]
    params.append(query.name)
    if query.service_name is not None:
        conditions.append("ms.service_name = ?")
        params.append(query.service_name)
    for matcher in query.matchers:
        value = _label_text(params, matcher.label)
        if matcher.op == "=":
            conditions.append(f"{value} = ?")
        elif matcher.op == "!=":
            conditions.append(f"{value} != ?")
        elif matcher.op == "=~":
            conditions.append(f"{value} REGEXP ?")
        else:
            conditions.append(f"NOT ({value} REGEXP ?)")
        params.append(matcher.value)
    params += [query.time_range.start_unix_nano, query.time_range.end_unix_nano]
    rows = cast(
        "list[tuple[int, str, str, int, str, str, int]]",
        ctx.execute(
            f"""
            SELECT ms.id, ms.type, ms.unit, ms.is_monotonic, ms.temporality,
                   {group_expr} AS grp, ms.max_buckets
            FROM metric_series ms
            WHERE {" AND ".join(conditions)}
              AND EXISTS (SELECT 1 FROM metric_points p WHERE p.series_id = ms.id
                          AND p.time_unix_nano >= ? AND p.time_unix_nano < ?)
            ORDER BY ms.id
            """,
            params,
        ),
    )
    if not rows:
        return []
    labels = _series_labels(ctx, [row[0] for row in rows])
    return [
        _Series(
            id=row[0],
            type=cast(MetricType, row[1]),
            unit=row[2],
            monotonic=bool(row[3]),
            temporality=row[4],
            labels=labels[row[0]],
            group=row[5],
            max_buckets=row[6],
        )
        for row in rows
    ]


def _series_labels(ctx: ReadContext, ids: list[int]) -> dict[int, dict[str, str]]:
    marks = ", ".join("?" * len(ids))
    rows = cast(
        "list[tuple[int, str, str]]",
        ctx.execute(
            f"""
            SELECT ms.id, ms.service_name,
                   (SELECT json_group_object(j.key, {_TEXT_VALUE})
                    FROM json_each(ms.attributes) j)
            FROM metric_series ms WHERE ms.id IN ({marks})
            """,
            ids,
        ),
    )
    return {
        row[0]: {**(_LABELS.decode(row[2]) if row[2] else {}), "service.name": row[1]}
        for row in rows
    }


def metric_series(ctx: ReadContext, query: MetricQuery, limit: int) -> list[MetricSeries]:
    """Bucketed, aggregated series of one metric (see :class:`MetricQuery`)."""
    series = _select_series(ctx, query)
    if not series:
        return []
    # One metric name has one type; should two series disagree, the first one's wins.
    metric_type = series[0].type
    unit = series[0].unit
    series = [s for s in series if s.type == metric_type]
    aggregation = check_aggregation_applies(query.aggregation, metric_type)

    # Output series: each stored series alone, or those agreeing on the group_by labels.
    groups: dict[str, list[_Series]] = {}
    for s in series:
        groups.setdefault(s.group if query.group_by is not None else str(s.id), []).append(s)
    outputs: list[tuple[dict[str, str], list[_Series]]] = []
    for members in groups.values():
        if query.group_by is None:
            labels = members[0].labels
        else:
            first = members[0].labels
            labels = {k: first.get(k, "") for k in query.group_by if first.get(k, "")}
        outputs.append((labels, members))
    outputs.sort(key=lambda item: sorted(item[0].items()))
    outputs = outputs[:limit]

    assignment = {str(s.id): index for index, (_, members) in enumerate(outputs) for s in members}
    start = query.time_range.start_unix_nano
    step = query.step_ns
    params: dict[str, SqlParam] = {
        "groups": msgspec.json.encode(assignment).decode(),
        "start": start,
        "end": query.time_range.end_unix_nano,
        "step": step,
    }
    quantiles: dict[int, list[tuple[float, float]]] | None = None
    cumulative = _temporality(outputs) != "delta"
    if metric_type == "histogram":
        points, quantiles = _histogram(ctx, aggregation, params, outputs)
    elif aggregation == "rate":
        points = _rate(ctx, params, outputs)
    elif metric_type == "sum" and aggregation in ("sum", "increase") and cumulative:
        points = _rate(ctx, params, outputs, increase=True)
    elif aggregation in SIMPLE_AGGREGATIONS or aggregation == "increase":
        points = _simple(ctx, "sum" if aggregation == "increase" else aggregation, params)
    else:
        points = _gauge_percentile(ctx, PERCENTILE_AGGREGATIONS[aggregation], params)
    result: list[MetricSeries] = []
    for index, (labels, _) in enumerate(outputs):
        result.append(
            MetricSeries(
                name=query.name,
                type=metric_type,
                unit=unit,
                labels=labels,
                points=[(start + b * step, v) for b, v in points.get(index, [])],
                aggregation=aggregation,
                quantile_bounds=None if quantiles is None else quantiles.get(index, []),
            )
        )
    return result


_POINTS: Final = f"""
g(series_id, grp) AS (SELECT CAST(key AS INTEGER), value FROM json_each(:groups)),
pts AS (
    SELECT g.grp, p.series_id, p.time_unix_nano AS t, p.start_time_unix_nano AS st,
           (p.time_unix_nano - :start) / :step AS b, {_FINITE_VALUE} AS v, p.histogram AS h
    FROM g CROSS JOIN metric_points p
        ON p.series_id = g.series_id AND p.time_unix_nano >= :start AND p.time_unix_nano < :end
)
"""
"""The points of the selected series in the range with their output group and bucket."""


def _collect(rows: Sequence[tuple[SqlParam, ...]]) -> dict[int, list[tuple[int, float]]]:
    points: dict[int, list[tuple[int, float]]] = {}
    for grp, b, value in cast("Sequence[tuple[int, int, float | None]]", rows):
        if value is not None:
            points.setdefault(grp, []).append((b, float(value)))
    return points


def _simple(
    ctx: ReadContext, aggregation: str, params: dict[str, SqlParam]
) -> dict[int, list[tuple[int, float]]]:
    if aggregation == "last":
        sql = f"""
            WITH {_POINTS}
            SELECT grp, b, v FROM (
                SELECT grp, b, v,
                       row_number() OVER (PARTITION BY grp, b ORDER BY t DESC, series_id DESC)
                           AS rn
                FROM pts WHERE v IS NOT NULL
            ) WHERE rn = 1 ORDER BY grp, b
        """
    else:
        sql = f"""
            WITH {_POINTS}
            SELECT grp, b, {aggregation}(v) FROM pts
            GROUP BY grp, b HAVING count(v) > 0 ORDER BY grp, b
        """
    return _collect(ctx.execute(sql, params))


def _gauge_percentile(
    ctx: ReadContext, p: int, params: dict[str, SqlParam]
) -> dict[int, list[tuple[int, float]]]:
    sql = f"""
        WITH {_POINTS},
        ranked AS (
            SELECT grp, b, v,
                   row_number() OVER (PARTITION BY grp, b ORDER BY v) AS rn,
                   count(*) OVER (PARTITION BY grp, b) AS n
            FROM pts WHERE v IS NOT NULL
        )
        SELECT grp, b, max(CASE WHEN rn = (n * {p} + 99) / 100 THEN v END)
        FROM ranked GROUP BY grp, b ORDER BY grp, b
    """
    return _collect(ctx.execute(sql, params))


def _temporality(outputs: list[tuple[dict[str, str], list[_Series]]]) -> str:
    kinds = {s.temporality for _, members in outputs for s in members}
    return "delta" if kinds == {"delta"} else "cumulative"


def _rate(
    ctx: ReadContext,
    params: dict[str, SqlParam],
    outputs: list[tuple[dict[str, str], list[_Series]]],
    *,
    increase: bool = False,
) -> dict[int, list[tuple[int, float]]]:
    # increase=True (cumulative sums only): the increase itself, not divided by the time, and
    # a series' first point ever counts whole when its start time is inside the range.
    if _temporality(outputs) == "delta":
        # Each point is the increase since the previous one: sum them, divide by the width of
        # the bucket (the last bucket may be cut short by the range's end).
        sql = f"""
            WITH {_POINTS}
            SELECT grp, b,
                   sum(v) * 1e9 / (min(:start + (b + 1) * :step, :end) - (:start + b * :step))
            FROM pts GROUP BY grp, b HAVING count(v) > 0 ORDER BY grp, b
        """
        return _collect(ctx.execute(sql, params))
    # Cumulative (or unspecified): per series, the increase between consecutive finite points
    # (the last point before the range included, so the first bucket has a rate too), divided
    # by the time between them; a decrease of a monotonic sum, or a new start time, is a reset
    # (the increase is then the new value). Rates of the series of a group add up.
    monotonic = {str(s.id): int(s.monotonic) for _, members in outputs for s in members}
    params = {
        **params,
        "monotonic": msgspec.json.encode(monotonic).decode(),
        "whole": int(increase),
    }
    per_bucket = "sum(dv)" if increase else "sum(dv) * 1e9 / sum(dt)"
    sql = f"""
        WITH {_POINTS},
        prev AS (
            SELECT g.grp, p.series_id, p.time_unix_nano AS t, p.start_time_unix_nano AS st,
                   -1 AS b, p.value AS v
            FROM g CROSS JOIN metric_points p
                ON p.series_id = g.series_id AND p.time_unix_nano = (
                    SELECT q.time_unix_nano FROM metric_points q
                    WHERE q.series_id = g.series_id AND q.time_unix_nano < :start
                      AND q.value BETWEEN -{_MAX_FINITE} AND {_MAX_FINITE}
                    ORDER BY q.time_unix_nano DESC LIMIT 1)
        ),
        seq AS (
            SELECT grp, series_id, t, st, b, v,
                   lag(v) OVER w AS pv, lag(t) OVER w AS pt, lag(st) OVER w AS pst
            FROM (SELECT grp, series_id, t, st, b, v FROM pts WHERE v IS NOT NULL
                  UNION ALL SELECT * FROM prev)
            WINDOW w AS (PARTITION BY series_id ORDER BY t)
        ),
        inc AS (
            SELECT seq.grp, seq.series_id, seq.b, seq.t - seq.pt AS dt,
                   CASE WHEN seq.pv IS NULL
                             OR (m.value AND seq.v < seq.pv)
                             OR (seq.st > 0 AND seq.pst > 0 AND seq.st != seq.pst)
                        THEN seq.v ELSE seq.v - seq.pv END AS dv
            FROM seq JOIN json_each(:monotonic) m ON CAST(m.key AS INTEGER) = seq.series_id
            WHERE seq.b >= 0 AND (
                (seq.pv IS NOT NULL AND seq.t > seq.pt)
                OR (:whole AND seq.pv IS NULL AND seq.st > 0 AND seq.st >= :start))
        ),
        per_series AS (
            SELECT grp, b, {per_bucket} AS r FROM inc GROUP BY grp, series_id, b
        )
        SELECT grp, b, sum(r) FROM per_series GROUP BY grp, b ORDER BY grp, b
    """
    return _collect(ctx.execute(sql, params))


def _histogram(
    ctx: ReadContext,
    aggregation: str,
    params: dict[str, SqlParam],
    outputs: list[tuple[dict[str, str], list[_Series]]],
) -> tuple[dict[int, list[tuple[int, float]]], dict[int, list[tuple[float, float]]] | None]:
    # Bucket counts are summed as columns (one json_extract per bucket index, as many as the
    # longest histogram of these series has: metric_series.max_buckets) grouped by output
    # series, time bucket and explicit bounds — not unnested into one row per bucket, which
    # made SQLite sort ten times as many rows. Count, sum, min and max ride along.
    width = max(s.max_buckets for _, members in outputs for s in members)
    field = "json_extract(h, '$.{}')".format
    if _temporality(outputs) == "delta":
        # Delta points count what happened since the previous point: sum them.
        counts = "".join(f", sum(json_extract(h, '$.bucket_counts[{i}]'))" for i in range(width))
        sql = f"""
            WITH {_POINTS}
            SELECT grp, b, {field("explicit_bounds")} AS bounds,
                   min({field("min")}), max({field("max")}), sum({field("count")}),
                   sum({field("sum")}), count(*) - count({field("sum")}) {counts}
            FROM pts GROUP BY grp, b, bounds
        """
    else:
        # Cumulative points count since the series' start: per series and bucket take the
        # last point, subtract the previous bucket's last point (or the last point before the
        # range) bucket by bucket; a smaller total count, or a new start time, is a reset (the
        # point counts whole). A series' first point ever counts whole. Min and max are the
        # last point's (over the series' life so far: outer bounds of the increase).
        def grown(path: str, name: str) -> str:
            return f"""CASE WHEN reset THEN json_extract(h, '$.{path}')
                     ELSE json_extract(h, '$.{path}')
                          - coalesce(json_extract(ph, '$.{path}'), 0) END AS {name}"""

        increases = "".join(f", {grown(f'bucket_counts[{i}]', f'c{i}')}" for i in range(width))
        counts = "".join(f", sum(c{i})" for i in range(width))
        sql = f"""
            WITH {_POINTS},
            lastp AS (
                SELECT grp, series_id, b, st, h FROM (
                    SELECT grp, series_id, b, st, h,
                           row_number() OVER (PARTITION BY series_id, b ORDER BY t DESC) AS rn
                    FROM pts
                ) WHERE rn = 1
            ),
            prev AS (
                SELECT g.grp, p.series_id, -1 AS b, p.start_time_unix_nano AS st,
                       p.histogram AS h
                FROM g CROSS JOIN metric_points p
                    ON p.series_id = g.series_id AND p.time_unix_nano = (
                        SELECT max(q.time_unix_nano) FROM metric_points q
                        WHERE q.series_id = g.series_id AND q.time_unix_nano < :start)
            ),
            seq AS (
                SELECT grp, series_id, b, st, h,
                       lag(h) OVER w AS ph, lag(st) OVER w AS pst
                FROM (SELECT * FROM lastp UNION ALL SELECT * FROM prev)
                WINDOW w AS (PARTITION BY series_id ORDER BY b)
            ),
            inc AS (
                SELECT grp, b, {field("explicit_bounds")} AS bounds,
                       {field("min")} AS mn, {field("max")} AS mx,
                       {grown("count", "cnt")}, {grown("sum", "sm")} {increases}
                FROM (
                    SELECT *, (ph IS NULL
                               OR json_extract(h, '$.count') < json_extract(ph, '$.count')
                               OR (st > 0 AND pst > 0 AND st != pst)) AS reset
                    FROM seq WHERE b >= 0
                )
            )
            SELECT grp, b, bounds, min(mn), max(mx), sum(cnt), sum(sm), count(*) - count(sm)
                   {counts}
            FROM inc GROUP BY grp, b, bounds
        """
    rows = ctx.execute(sql, params)
    # The documented Python step, over the already summed values of each output bucket (and
    # each set of bounds): merged by upper bound, then aggregated (store/_histogram.py).
    merged: dict[tuple[int, int], MergedHistogram] = {}
    parsed: dict[str, list[float]] = {}
    for row in rows:
        grp, b, bounds_text = cast(int, row[0]), cast(int, row[1]), cast(str, row[2])
        bounds = parsed.get(bounds_text)
        if bounds is None:
            bounds = parsed[bounds_text] = [*_BOUNDS.decode(bounds_text), math.inf]
        merged.setdefault((grp, b), MergedHistogram()).add(
            bounds,
            cast("list[int | None]", list(row[8:])),
            count=cast("int | None", row[5]),
            total=cast("float | None", row[6]) if row[7] == 0 else None,
            minimum=cast("float | None", row[3]),
            maximum=cast("float | None", row[4]),
        )
    points: dict[int, list[tuple[int, float]]] = {}
    quantiles: dict[int, list[tuple[float, float]]] = {}
    for (grp, b), histogram in sorted(merged.items()):
        try:
            value, quantile = histogram_value(aggregation, histogram)
        except LookupError:
            continue
        points.setdefault(grp, []).append((b, value))
        if quantile is not None:
            quantiles.setdefault(grp, []).append((quantile.lower, quantile.upper))
    return points, (quantiles if aggregation in PERCENTILE_AGGREGATIONS else None)


_BOUNDS: Final = msgspec.json.Decoder(list[float])
