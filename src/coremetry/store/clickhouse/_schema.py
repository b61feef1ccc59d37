"""The OpenTelemetry Collector ClickHouse exporter's tables: names, the columns we use, DDL.

The backend reads and writes the tables the exporter creates
(``exporter/clickhouseexporter/internal/sqltemplates/*_table.sql`` in
opentelemetry-collector-contrib, default "bloom filter" variant): ``otel_traces``,
``otel_logs``, ``otel_metrics_gauge``, ``otel_metrics_sum`` and ``otel_metrics_histogram`` in
the database ``default`` unless configured otherwise. Their sort keys, which every query
leads with, are:

- traces: ``ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)``, partitioned
  by day, with a ``bloom_filter`` skip index on ``TraceId`` and on the attribute maps' keys
  and values, and a ``minmax`` index on ``Duration``;
- logs: ``ORDER BY (ServiceName, TimestampTime, Timestamp)``, a ``bloom_filter`` on
  ``TraceId`` and a ``tokenbf_v1`` on ``Body``;
- metrics: ``ORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))``;
- the trace-id lookup ``otel_traces_trace_id_ts`` (``traces_id_ts_lookup_table.sql``):
  ``TraceId String, Start DateTime, End DateTime``, ``ORDER BY (TraceId, Start)``, filled by the
  materialized view ``otel_traces_trace_id_ts_mv`` (``traces_id_ts_lookup_mv.sql``) with
  ``min(Timestamp)``/``max(Timestamp)`` of each ``TraceId`` in every block inserted into
  ``otel_traces``. ``DateTime`` keeps whole seconds (the conversion truncates), so a trace's
  spans start in ``[Start, End + 1 s)``; a trace inserted over several blocks has several
  rows (take ``min(Start)``, ``max(End)``). Older exporter versions have no lookup table, some
  deployments use ``DateTime64(9)`` or ``SimpleAggregateFunction(min, DateTime)`` columns: it
  is optional (:func:`trace_lookup_problem`), and reads fall back to the ``TraceId`` bloom
  filter without it.

:data:`REQUIRED_COLUMNS` lists, per table, the columns the backend uses and the type family it
expects; the startup check (:func:`missing_columns`) compares them with ``system.columns`` and
names every table or column that is missing or of another type. :func:`exporter_ddl` writes
``CREATE TABLE`` statements with the exporter's columns, types, sort keys and skip indexes:
tests run the backend on them (chDB), and ``clickhouse.create_tables`` creates them on a
server that has none yet (a single node that runs on ClickHouse end to end).
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from coremetry.store._sketch import KEY_MULTIPLIER, ZERO_KEY

__all__ = [
    "EDGE_COLUMNS",
    "EDGE_DONE_COLUMNS",
    "IDENTIFIER",
    "LOOKUP_MAX_S",
    "REQUIRED_COLUMNS",
    "TableNames",
    "edge_rollup_ddl",
    "edge_rollup_problem",
    "exporter_ddl",
    "missing_columns",
    "quote_identifier",
    "rollup_ddl",
    "rollup_problem",
    "rollup_select",
    "rollup_ttl_ddl",
    "trace_lookup_problem",
    "ttl_interval",
]

IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""Database and table names the backend accepts (they are the only text put into SQL)."""


def quote_identifier(name: str, what: str) -> str:
    """``name`` in backquotes, after checking it is a plain identifier.

    Raises:
        ValueError: ``name`` is not letters, digits and ``_`` (not starting with a digit);
            the message names ``what`` (the configuration key).
    """
    if IDENTIFIER.fullmatch(name) is None:
        raise ValueError(
            f"{what} must be a plain ClickHouse identifier (letters, digits, _), got {name!r}"
        )
    return f"`{name}`"


class TableNames(msgspec.Struct, frozen=True, kw_only=True):
    """Where the exporter's tables are (its database and table-name options).

    ``database``, ``traces`` (``traces_table_name``), ``logs`` (``logs_table_name``) and
    ``metrics`` (``metrics_table_name``: the metric tables are that name plus ``_gauge``,
    ``_sum``, ``_histogram``, as the exporter names them). The trace-id lookup table and its
    materialized view are the traces table's name plus ``_trace_id_ts`` and
    ``_trace_id_ts_mv``, as the exporter names them.
    """

    database: str = "default"
    traces: str = "otel_traces"
    logs: str = "otel_logs"
    metrics: str = "otel_metrics"

    def check(self) -> None:
        """Raises: ValueError: a name is not a plain identifier (names the key)."""
        quote_identifier(self.database, "clickhouse.database")
        quote_identifier(self.traces, "clickhouse.traces_table_name")
        quote_identifier(self.traces + "_trace_id_ts_mv", "clickhouse.traces_table_name")
        quote_identifier(self.traces + "_red_1m_mv", "clickhouse.traces_table_name")
        quote_identifier(self.traces + "_edges_1m_done", "clickhouse.traces_table_name")
        quote_identifier(self.logs, "clickhouse.logs_table_name")
        quote_identifier(self.metrics + "_histogram", "clickhouse.metrics_table_name")

    def table(self, kind: str) -> str:
        """The bare name of ``kind``.

        Kinds: traces, logs, gauge, sum, histogram, trace_id_ts[_mv], red_1m[_mv],
        edges_1m[_done].
        """
        if kind == "traces":
            return self.traces
        if kind in (
            "trace_id_ts",
            "trace_id_ts_mv",
            "red_1m",
            "red_1m_mv",
            "edges_1m",
            "edges_1m_done",
        ):
            return f"{self.traces}_{kind}"
        if kind == "logs":
            return self.logs
        return f"{self.metrics}_{kind}"

    def qualified(self, kind: str) -> str:
        """```database`.`table``` of ``kind``, quoted."""
        return (
            f"{quote_identifier(self.database, 'database')}."
            f"{quote_identifier(self.table(kind), 'table')}"
        )


TABLE_KINDS: Final = ("traces", "logs", "gauge", "sum", "histogram")

_MAP: Final = "Map(LowCardinality(String), String)"
_METRIC_COMMON: Final = {
    "ResourceAttributes": _MAP,
    "ServiceName": "LowCardinality(String)",
    "MetricName": "String",
    "MetricDescription": "String",
    "MetricUnit": "String",
    "Attributes": _MAP,
    "StartTimeUnix": "DateTime64(9)",
    "TimeUnix": "DateTime64(9)",
}

REQUIRED_COLUMNS: Final[dict[str, dict[str, str]]] = {
    "traces": {
        "Timestamp": "DateTime64(9)",
        "TraceId": "String",
        "SpanId": "String",
        "ParentSpanId": "String",
        "SpanName": "LowCardinality(String)",
        "SpanKind": "LowCardinality(String)",
        "ServiceName": "LowCardinality(String)",
        "ResourceAttributes": _MAP,
        "ScopeName": "String",
        "SpanAttributes": _MAP,
        "Duration": "UInt64",
        "StatusCode": "LowCardinality(String)",
        "StatusMessage": "String",
        "Events.Timestamp": "Array(DateTime64(9))",
        "Events.Name": "Array(LowCardinality(String))",
        "Events.Attributes": f"Array({_MAP})",
        "Links.TraceId": "Array(String)",
        "Links.SpanId": "Array(String)",
        "Links.TraceState": "Array(String)",
        "Links.Attributes": f"Array({_MAP})",
    },
    "logs": {
        "Timestamp": "DateTime64(9)",
        "TraceId": "String",
        "SpanId": "String",
        "SeverityText": "LowCardinality(String)",
        "SeverityNumber": "UInt8",
        "ServiceName": "LowCardinality(String)",
        "Body": "String",
        "ResourceAttributes": _MAP,
        "ScopeName": "String",
        "LogAttributes": _MAP,
    },
    "gauge": {**_METRIC_COMMON, "Value": "Float64"},
    "sum": {
        **_METRIC_COMMON,
        "Value": "Float64",
        "AggregationTemporality": "Int32",
        "IsMonotonic": "Bool",
    },
    "histogram": {
        **_METRIC_COMMON,
        "Count": "UInt64",
        "Sum": "Float64",
        "BucketCounts": "Array(UInt64)",
        "ExplicitBounds": "Array(Float64)",
        "Min": "Float64",
        "Max": "Float64",
        "AggregationTemporality": "Int32",
    },
}
"""Per table kind, the columns the backend reads or writes and the type it expects.

Types are compared after removing ``LowCardinality(...)`` (so a ``String`` where the exporter
has ``LowCardinality(String)`` is accepted) and a ``DateTime64(9)`` time zone argument."""

_WRAPPERS: Final = re.compile(r"LowCardinality\((.*?)\)")
_DATETIME64: Final = re.compile(r"DateTime64\(9(?:,\s*'[^']*')?\)")


def _normalized(type_name: str) -> str:
    text = type_name.replace(" ", "")
    while True:
        stripped = _WRAPPERS.sub(r"\1", text)
        if stripped == text:
            break
        text = stripped
    text = _DATETIME64.sub("DateTime64(9)", text)
    return text.replace("Boolean", "Bool")


def missing_columns(names: TableNames, found: dict[str, dict[str, str]]) -> list[str]:
    """What the startup check reports: every missing table, missing column or wrong type.

    Args:
        names: the configured tables.
        found: per table kind, the columns ``system.columns`` lists (name -> type); a kind
            whose table does not exist is absent.

    Returns:
        One line per problem, e.g. ``table default.otel_logs is missing`` or ``column
        default.otel_traces.Duration is Int64, expected UInt64``; empty when all is well.
    """
    problems: list[str] = []
    for kind, required in REQUIRED_COLUMNS.items():
        table = f"{names.database}.{names.table(kind)}"
        columns = found.get(kind)
        if columns is None:
            problems.append(f"table {table} is missing")
            continue
        for column, expected in required.items():
            actual = columns.get(column)
            if actual is None:
                problems.append(f"column {table}.{column} ({expected}) is missing")
            elif _normalized(actual) != _normalized(expected):
                problems.append(f"column {table}.{column} is {actual}, expected {expected}")
    return problems


LOOKUP_MAX_S: Final = 2**32 - 1
"""The largest ``DateTime`` (2106-02-07 06:28:15 UTC): our view stores later times as this."""

_LOOKUP_TIME: Final = re.compile(r"DateTime(?:\('[^']*'\))?|DateTime64\(\d(?:,'[^']*')?\)")
_SIMPLE_AGGREGATE: Final = re.compile(r"SimpleAggregateFunction\((?:min|max),(.*)\)")


def trace_lookup_problem(names: TableNames, found: dict[str, str] | None) -> str | None:
    """Why the exporter's trace-id lookup table cannot be used, or ``None`` when it can.

    Args:
        names: the configured tables.
        found: the lookup table's columns as ``system.columns`` lists them (name -> type);
            ``None`` when the table does not exist.

    Returns:
        ``None`` when ``TraceId`` is a ``String`` and ``Start``/``End`` are ``DateTime`` or
        ``DateTime64`` (optionally ``SimpleAggregateFunction(min|max, ...)``); otherwise one
        line naming the table and what is missing or of another type.
    """
    table = f"{names.database}.{names.table('trace_id_ts')}"
    if found is None:
        return f"table {table} is missing"
    trace_id = found.get("TraceId")
    if trace_id is None or _normalized(trace_id) != "String":
        return f"column {table}.TraceId is {trace_id or 'missing'}, expected String"
    for column in ("Start", "End"):
        actual = found.get(column)
        text = (actual or "").replace(" ", "")
        aggregate = _SIMPLE_AGGREGATE.fullmatch(text)
        if _LOOKUP_TIME.fullmatch(aggregate.group(1) if aggregate else text) is None:
            return f"column {table}.{column} is {actual or 'missing'}, expected DateTime"
    return None


def exporter_ddl(
    names: TableNames, *, engine: str = "MergeTree", trace_lookup: bool = True
) -> list[str]:
    """``CREATE DATABASE``/``CREATE TABLE IF NOT EXISTS`` statements for the exporter's schema.

    Columns, types, codecs, sort keys, partitions and skip indexes are those of the exporter's
    ``sqltemplates`` (default bloom-filter variant, no TTL). ``engine`` is the table engine
    (``MergeTree``; a cluster uses ``ReplicatedMergeTree``). With ``trace_lookup``, the last two
    statements create the trace-id lookup table and its materialized view (the exporter's
    ``traces_id_ts_lookup_*.sql``); the view differs from the exporter's in one way: a time
    after 2106-02-07 06:28:15 (past ``DateTime``) is stored as that largest ``DateTime``,
    where the exporter's view wraps it around. Create them only with the traces table: a view
    added over stored spans sees new inserts only, and a trace that straddles its creation
    would get bounds that miss the older spans.

    Raises:
        ValueError: a name is not a plain identifier.
    """
    names.check()
    db = quote_identifier(names.database, "clickhouse.database")
    if not re.fullmatch(r"[A-Za-z]+(\([^;]*\))?", engine):
        raise ValueError(f"engine must be a table engine such as MergeTree, got {engine!r}")
    bloom = "TYPE bloom_filter(0.01) GRANULARITY 1"
    settings = "SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"
    metric_columns = f"""
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ResourceSchemaUrl String CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    ScopeAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeDroppedAttrCount UInt32 CODEC(ZSTD(1)),
    ScopeSchemaUrl String CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    MetricName String CODEC(ZSTD(1)),
    MetricDescription String CODEC(ZSTD(1)),
    MetricUnit String CODEC(ZSTD(1)),
    Attributes {_MAP} CODEC(ZSTD(1)),
    StartTimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),
    TimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),"""
    exemplars = f"""
    Exemplars Nested (
        FilteredAttributes {_MAP},
        TimeUnix DateTime64(9),
        Value Float64,
        SpanId String,
        TraceId String
    ) CODEC(ZSTD(1)),"""
    metric_indexes = f"""
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) {bloom},
    INDEX idx_res_attr_value mapValues(ResourceAttributes) {bloom},
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) {bloom},
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) {bloom},
    INDEX idx_attr_key mapKeys(Attributes) {bloom},
    INDEX idx_attr_value mapValues(Attributes) {bloom}"""
    metric_tail = f"""ENGINE = {engine}
PARTITION BY toDate(TimeUnix)
ORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))
{settings}"""
    statements = [
        f"CREATE DATABASE IF NOT EXISTS {db}",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("traces")} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes {_MAP} CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) {bloom},
    INDEX idx_res_attr_value mapValues(ResourceAttributes) {bloom},
    INDEX idx_span_attr_key mapKeys(SpanAttributes) {bloom},
    INDEX idx_span_attr_value mapValues(SpanAttributes) {bloom},
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = {engine}
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
{settings}""",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("logs")} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    TraceFlags UInt8,
    SeverityText LowCardinality(String) CODEC(ZSTD(1)),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Body String CODEC(ZSTD(1)),
    ResourceSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion LowCardinality(String) CODEC(ZSTD(1)),
    ScopeAttributes {_MAP} CODEC(ZSTD(1)),
    LogAttributes {_MAP} CODEC(ZSTD(1)),
    EventName String CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) {bloom},
    INDEX idx_res_attr_value mapValues(ResourceAttributes) {bloom},
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) {bloom},
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) {bloom},
    INDEX idx_log_attr_key mapKeys(LogAttributes) {bloom},
    INDEX idx_log_attr_value mapValues(LogAttributes) {bloom},
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = {engine}
PARTITION BY toDate(TimestampTime)
PRIMARY KEY (ServiceName, TimestampTime)
ORDER BY (ServiceName, TimestampTime, Timestamp)
{settings}""",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("gauge")} ({metric_columns}
    Value Float64 CODEC(ZSTD(1)),
    Flags UInt32 CODEC(ZSTD(1)),{exemplars}{metric_indexes}
) {metric_tail}""",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("sum")} ({metric_columns}
    Value Float64 CODEC(ZSTD(1)),
    Flags UInt32 CODEC(ZSTD(1)),{exemplars}
    AggregationTemporality Int32 CODEC(ZSTD(1)),
    IsMonotonic Boolean CODEC(Delta, ZSTD(1)),{metric_indexes}
) {metric_tail}""",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("histogram")} ({metric_columns}
    Count UInt64 CODEC(Delta, ZSTD(1)),
    Sum Float64 CODEC(ZSTD(1)),
    BucketCounts Array(UInt64) CODEC(ZSTD(1)),
    ExplicitBounds Array(Float64) CODEC(ZSTD(1)),{exemplars}
    Flags UInt32 CODEC(ZSTD(1)),
    Min Float64 CODEC(ZSTD(1)),
    Max Float64 CODEC(ZSTD(1)),
    AggregationTemporality Int32 CODEC(ZSTD(1)),{metric_indexes}
) {metric_tail}""",
    ]
    if not trace_lookup:
        return statements
    largest = f"toDateTime64({LOOKUP_MAX_S}, 9)"
    return [
        *statements,
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("trace_id_ts")} (
    TraceId String CODEC(ZSTD(1)),
    Start DateTime CODEC(Delta, ZSTD(1)),
    End DateTime CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = {engine}
PARTITION BY toDate(Start)
ORDER BY (TraceId, Start)
{settings}""",
        f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {names.qualified("trace_id_ts_mv")}
TO {names.qualified("trace_id_ts")}
AS SELECT
    TraceId,
    toDateTime(least(min(Timestamp), {largest})) AS Start,
    toDateTime(least(max(Timestamp), {largest})) AS End
FROM {names.qualified("traces")}
WHERE TraceId != ''
GROUP BY TraceId""",
    ]


ROLLUP_COLUMNS: Final[dict[str, str]] = {
    "Minute": "DateTime",
    "ServiceName": "LowCardinality(String)",
    "Version": "String",
    "SpanName": "LowCardinality(String)",
    "Entry": "UInt8",
    "Spans": "SimpleAggregateFunction(sum, UInt64)",
    "Errors": "SimpleAggregateFunction(sum, UInt64)",
    "First": "SimpleAggregateFunction(min, DateTime64(9))",
    "Last": "SimpleAggregateFunction(max, DateTime64(9))",
    "Bins": "AggregateFunction(sumMap, Array(Int32), Array(UInt64))",
}
"""The RED roll-up table's columns (``<traces>_red_1m``), as :func:`rollup_ddl` creates them."""


def sketch_key_sql(duration: str) -> str:
    """SQL for the latency-sketch bin of ``duration`` (ns, an integer expression).

    The bin :class:`~coremetry.store._sketch.LatencySketch` gives it (``ddsketch``'s
    ``LogarithmicMapping``: ``ceil(log2(d) * multiplier)``), and
    :data:`~coremetry.store._sketch.ZERO_KEY` below 1 ns. ClickHouse's ``log2`` may differ from
    Python's in the last bit, which moves a duration exactly on a bin's bound into the next
    bin: still within the sketch's relative accuracy of it.
    """
    return (
        f"if({duration} >= 1, toInt32(ceil(log2(toFloat64({duration})) * {KEY_MULTIPLIER!r})), "
        f"toInt32({ZERO_KEY}))"
    )


def rollup_select(source: str, where: str, entry: str, error: str) -> str:
    """The per-minute RED aggregation of spans of ``source`` (the view's, and retention's)."""
    return f"""SELECT
    toDateTime(toStartOfMinute(Timestamp)) AS Minute,
    ServiceName,
    ResourceAttributes['service.version'] AS Version,
    SpanName,
    toUInt8({entry}) AS Entry,
    toUInt64(count()) AS Spans,
    toUInt64(countIf({error})) AS Errors,
    min(Timestamp) AS First,
    max(Timestamp) AS Last,
    sumMapState([{sketch_key_sql("Duration")}], [toUInt64(1)]) AS Bins
FROM {source}
{where}
GROUP BY Minute, ServiceName, Version, SpanName, Entry"""


def rollup_ddl(names: TableNames, *, entry: str, error: str) -> list[str]:
    """The RED roll-up table ``<traces>_red_1m`` and the view that fills it (``..._mv``).

    Per minute (of span start), service, ``service.version``, span name and entry flag (a
    SERVER/CONSUMER span or a root: ``entry``): span count, error count (``error``), first and
    last start, and the durations' latency-sketch bins (``sumMap`` state of bin -> count, see
    :func:`sketch_key_sql`), in an ``AggregatingMergeTree``. The view sees every insert into
    the traces table (ours and the Collector exporter's). Create them only with the traces
    table: a view added over stored spans sees new inserts only.

    Raises:
        ValueError: a name is not a plain identifier.
    """
    names.check()
    columns = ",\n    ".join(f"{name} {kind}" for name, kind in ROLLUP_COLUMNS.items())
    return [
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("red_1m")} (
    {columns}
) ENGINE = AggregatingMergeTree
PARTITION BY toDate(Minute)
ORDER BY (Minute, ServiceName, Version, SpanName, Entry)""",
        f"""CREATE MATERIALIZED VIEW IF NOT EXISTS {names.qualified("red_1m_mv")}
TO {names.qualified("red_1m")}
AS {rollup_select(names.qualified("traces"), "", entry, error)}""",
    ]


_STATE_VERSION: Final = re.compile(r"AggregateFunction\(\s*\d+\s*,\s*")


def rollup_problem(names: TableNames, found: dict[str, str] | None) -> str | None:
    """Why the RED roll-up table cannot be used (``None``: it can).

    Args:
        names: the configured tables.
        found: the roll-up table's columns (name -> type); ``None`` when it does not exist.
    """
    table = f"{names.database}.{names.table('red_1m')}"
    if found is None:
        return f"table {table} is missing"
    for column, expected in ROLLUP_COLUMNS.items():
        actual = found.get(column)
        # ClickHouse shows an aggregate function's state version: AggregateFunction(1, sumMap, ..).
        shown = _STATE_VERSION.sub("AggregateFunction(", actual or "")
        if actual is None or _normalized(shown) != _normalized(expected):
            return f"column {table}.{column} is {actual or 'missing'}, expected {expected}"
    return None


EDGE_COLUMNS: Final[dict[str, str]] = {
    "Minute": "DateTime",
    "Caller": "LowCardinality(String)",
    "Callee": "LowCardinality(String)",
    "Calls": "UInt64",
    "Errors": "UInt64",
    "Keys": "Array(Int32)",
    "Counts": "Array(UInt64)",
    "RolledAt": "DateTime64(9)",
}
"""The edge roll-up's columns (``<traces>_edges_1m``), as :func:`edge_rollup_ddl` creates them."""

EDGE_DONE_COLUMNS: Final[dict[str, str]] = {"Minute": "DateTime", "RolledAt": "DateTime64(9)"}
"""The rolled-minute marks' columns (``<traces>_edges_1m_done``)."""


def edge_rollup_ddl(names: TableNames) -> list[str]:
    """The edge roll-up ``<traces>_edges_1m`` and its rolled-minute marks ``..._done``.

    Per minute (of the *child* span's start), caller service and callee service — a call is a
    span whose parent span (same trace) belongs to another service, the embedded store's
    ``red_edges`` definition — the calls, their errors (the child's status ERROR) and the child
    durations' latency-sketch bins (``Keys`` -> ``Counts``, :func:`sketch_key_sql`). Not a
    materialized view: a view sees only the inserted block, and a call's parent and child
    usually come in different inserts. The reader rolls up whole minutes once they have settled
    (:data:`~._queries.EDGE_SETTLE_NS` after their end) from the raw spans, and marks each
    rolled minute in ``..._done`` (a minute with no call has a mark and no row). Both are
    ``ReplacingMergeTree``: rolling a minute twice (two servers at once, or a retry after a
    failure between the two inserts) writes the same rows again, and reads take one row per
    key (the latest ``RolledAt``). Unlike the RED view, they can be added to stored spans.

    Raises:
        ValueError: a name is not a plain identifier.
    """
    names.check()
    columns = ",\n    ".join(f"{name} {kind}" for name, kind in EDGE_COLUMNS.items())
    return [
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("edges_1m")} (
    {columns}
) ENGINE = ReplacingMergeTree(RolledAt)
PARTITION BY toDate(Minute)
ORDER BY (Minute, Caller, Callee)""",
        f"""CREATE TABLE IF NOT EXISTS {names.qualified("edges_1m_done")} (
    Minute DateTime,
    RolledAt DateTime64(9)
) ENGINE = ReplacingMergeTree(RolledAt)
PARTITION BY toDate(Minute)
ORDER BY Minute""",
    ]


def edge_rollup_problem(
    names: TableNames, edges: dict[str, str] | None, done: dict[str, str] | None
) -> str | None:
    """Why the edge roll-up cannot be used (``None``: it can).

    Args:
        names: the configured tables.
        edges: the ``<traces>_edges_1m`` columns (name -> type); ``None`` when it is missing.
        done: the ``<traces>_edges_1m_done`` columns; ``None`` when it is missing.
    """
    for kind, found, expected_columns in (
        ("edges_1m", edges, EDGE_COLUMNS),
        ("edges_1m_done", done, EDGE_DONE_COLUMNS),
    ):
        table = f"{names.database}.{names.table(kind)}"
        if found is None:
            return f"table {table} is missing"
        for column, expected in expected_columns.items():
            actual = found.get(column)
            if actual is None or _normalized(actual) != _normalized(expected):
                return f"column {table}.{column} is {actual or 'missing'}, expected {expected}"
    return None


ROLLUP_KINDS: Final = ("red_1m", "edges_1m", "edges_1m_done")
"""The roll-up tables: each keyed by a ``Minute DateTime`` column (a minute of span start)."""

_TTL_CLAUSE: Final = re.compile(r"\sTTL\s+(?P<expression>.+?)(?:\s+SETTINGS\s|$)", re.DOTALL)
_TTL_INTERVAL: Final = re.compile(
    r"toInterval(?:Second|Minute|Hour|Day|Week|Month|Quarter|Year)\(\d{1,10}\)"
)
_TTL_ON_TIME: Final = re.compile(
    r"(?:toDateTime\(\s*`?(?:Timestamp|TimeUnix)`?\s*\)|`?Minute`?)\s*\+\s*(?P<interval>.+)"
)


def ttl_interval(engine_full: str) -> str | None:
    """The interval of a table's time-to-live, as ClickHouse shows it in ``engine_full``.

    The exporter's ``ttl`` option gives its tables ``TTL toDateTime(Timestamp) +
    toIntervalSecond(N)`` (ClickHouse normalises ``INTERVAL 3 DAY`` to ``toIntervalDay(3)``);
    a roll-up table made to follow it has ``TTL Minute + <the same interval>``.

    Args:
        engine_full: ``system.tables.engine_full`` of the table.

    Returns:
        The interval (``"toIntervalDay(3)"``), or ``None`` when the table has no TTL or one of
        another shape (several rules, a ``WHERE``, a ``DELETE``/``TO DISK`` action, another
        column): only the plain form is followed, and the only text ever put back into SQL is
        one that matches ``toInterval<Unit>(<digits>)`` exactly.
    """
    clause = _TTL_CLAUSE.search(engine_full)
    if clause is None:
        return None
    on_time = _TTL_ON_TIME.fullmatch(clause.group("expression").strip())
    if on_time is None:
        return None
    interval = on_time.group("interval").strip()
    return interval if _TTL_INTERVAL.fullmatch(interval) else None


def rollup_ttl_ddl(names: TableNames, kind: str, interval: str) -> str:
    """``ALTER TABLE <roll-up> MODIFY TTL Minute + <interval>``: a roll-up follows its spans.

    The exporter's tables delete their rows by ``TTL``; a roll-up of the traces table given the
    same interval on its ``Minute`` deletes each minute's figures when that minute's spans go
    (by whole parts on the traces table with ``ttl_only_drop_parts``: a roll-up minute can go a
    little before the last of its spans, never long after).

    Args:
        names: the configured tables.
        kind: one of :data:`ROLLUP_KINDS`.
        interval: from :func:`ttl_interval` (checked again here).

    Raises:
        ValueError: ``kind`` is not a roll-up or ``interval`` is not ``toInterval<Unit>(N)``.
    """
    if kind not in ROLLUP_KINDS or _TTL_INTERVAL.fullmatch(interval) is None:
        raise ValueError(f"not a roll-up TTL: {kind} {interval!r}")
    return f"ALTER TABLE {names.qualified(kind)} MODIFY TTL Minute + {interval}"
