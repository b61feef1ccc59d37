"""``TelemetryStore``: the one interface every telemetry backend implements.

The observability tools read only through this protocol, and ingest writes only through it,
so the embedded SQLite backend (the default) and the ClickHouse backend are interchangeable;
:func:`coremetry.store.testing.check_store_conformance` holds both to the same behaviour.

Contract shared by every method (each method's docstring adds its own):

- **Units.** Times are unix nanoseconds (``*_unix_nano``), durations nanoseconds (``*_ns``),
  rates per second. Time ranges are half-open ``[start_unix_nano, end_unix_nano)`` and filter
  on a span's *start*, a log record's ``time_unix_nano`` and a point's ``time_unix_nano``.
- **Work happens in the database.** Every read is one backend query (or a fixed, small number
  of them) whose aggregation, ranking and limiting run in the database, never Python loops
  over rows. (One kind of exception: a backend may merge pre-aggregated rows in Python — the
  embedded store's RED roll-ups, whose latency sketches SQL cannot add — as long as their
  number grows with the answer and the window's buckets, never with the records.)
- **Limits and pages.** ``limit`` is required, ``1 <= limit <= MAX_LIMIT``. List results are a
  :class:`Page`: ``items`` in the documented order, ``next_cursor`` (an opaque string, ``None``
  on the last page) to pass back unchanged with the *same* query to get the next page, and
  ``total`` when the backend knows it cheaply (else ``None``).
- **Errors.** :class:`~coremetry.store.errors.QueryRejected` for arguments the backend cannot
  run (names the field: bad cursor, bad full-text syntax, ``limit`` out of range, inverted
  range); :class:`~coremetry.store.errors.StoreUnavailable` when the backend fails;
  :class:`~coremetry.store.errors.StoreClosed` after :meth:`TelemetryStore.aclose`.
- **Cancellation.** Every method is a trio checkpoint and may be cancelled. A cancelled
  *read* stops the backend's work (the embedded store interrupts its SQLite connection, the
  ClickHouse store kills the query) and leaves nothing behind; the store stays usable. A
  cancelled *write* either committed entirely or not at all (one transaction per call).
- **Concurrency.** Methods may be called concurrently from many tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Generic, Literal, Protocol, TypeAlias, TypeVar

import msgspec

from .model import LogRecord, MetricType, Span, TelemetryBatch

__all__ = [
    "MAX_LIMIT",
    "MAX_TRACES_PER_READ",
    "Aggregation",
    "DeployRecord",
    "LabelMatcher",
    "LogCountPoint",
    "LogCountSeries",
    "LogQuery",
    "MetricDescriptor",
    "MetricQuery",
    "MetricSeries",
    "OperationSummary",
    "Page",
    "RedPoint",
    "RetentionResult",
    "ServiceEdge",
    "ServiceRedSeries",
    "ServiceSummary",
    "StatusFilter",
    "StoreStatistics",
    "TelemetryStore",
    "TimeRange",
    "TraceQuery",
    "TraceSummary",
    "WriteResult",
]

MAX_LIMIT: Final = 10_000
"""Largest ``limit`` any query accepts."""
MAX_TRACES_PER_READ: Final = 100
"""Most trace ids one :meth:`TelemetryStore.get_traces` call accepts."""

T = TypeVar("T")


class TimeRange(msgspec.Struct, frozen=True, kw_only=True):
    """Half-open interval ``[start_unix_nano, end_unix_nano)`` in unix nanoseconds (UTC).

    Queries raise ``QueryRejected("time_range", ...)`` when ``end <= start``.
    """

    start_unix_nano: int
    end_unix_nano: int


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list result.

    Attributes:
        items: the page, in the order the method documents.
        next_cursor: opaque; pass it back with the same query for the next page. ``None`` on
            the last page.
        total: the number of items over all pages when cheap to know, else ``None``.
    """

    items: list[T]
    next_cursor: str | None = None
    total: int | None = None


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`TelemetryStore.write` did with one batch.

    ``*_written`` count records newly stored; ``*_duplicate`` count records already present
    (same identity) and therefore not stored again — imports are idempotent.
    ``outside_retention`` counts records older than the retention window: they are stored,
    and the next retention pass will drop them (so the caller can say so, never a silent
    loss).
    """

    spans_written: int = 0
    spans_duplicate: int = 0
    logs_written: int = 0
    logs_duplicate: int = 0
    metric_points_written: int = 0
    metric_points_duplicate: int = 0
    outside_retention: int = 0


class RetentionResult(msgspec.Struct, frozen=True, kw_only=True):
    """Records removed by one :meth:`TelemetryStore.delete_before` pass."""

    spans_deleted: int = 0
    logs_deleted: int = 0
    metric_points_deleted: int = 0


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counts and extent of what is stored (``statistics()``, trio's naming).

    ``oldest_unix_nano`` / ``newest_unix_nano`` cover spans, logs and metric points together;
    both are ``None`` when the store is empty. ``size_bytes`` is the on-disk size when known.
    """

    span_count: int
    log_count: int
    metric_point_count: int
    oldest_unix_nano: int | None
    newest_unix_nano: int | None
    size_bytes: int | None = None


class ServiceSummary(msgspec.Struct, frozen=True, kw_only=True):
    """RED summary of one service over a range, from its *entry spans*.

    An entry span is a span with kind SERVER or CONSUMER, or a root span (no parent): the
    requests the service served. ``request_count`` counts them, ``error_count`` those with
    status ERROR; ``p50/p95/p99_duration_ns`` are nearest-rank percentiles of their durations.
    ``span_count`` counts all of the service's spans in the range. ``versions`` lists the
    distinct ``service.version`` values seen (sorted). ``last_seen_unix_nano`` is the latest
    span start.
    """

    service_name: str
    span_count: int
    request_count: int
    error_count: int
    p50_duration_ns: int | None
    p95_duration_ns: int | None
    p99_duration_ns: int | None
    last_seen_unix_nano: int
    versions: list[str] = msgspec.field(default_factory=list)
    percentile_relative_error: float = 0.0
    """The relative error bound of the ``p*_duration_ns`` figures against the exact
    nearest-rank percentiles of the raw spans (``0.0``: exact; a backend answering from
    latency sketches says its sketches' accuracy, e.g. ``0.01``)."""

    @property
    def error_rate(self) -> float:
        """``error_count / request_count`` (0.0 when there were no requests)."""
        return self.error_count / self.request_count if self.request_count else 0.0


class OperationSummary(msgspec.Struct, frozen=True, kw_only=True):
    """RED summary of one operation (span name) of a service over a range.

    Counted over *all* of the service's spans with that name. Percentiles are nearest-rank,
    in nanoseconds.
    """

    service_name: str
    name: str
    span_count: int
    error_count: int
    p50_duration_ns: int | None
    p95_duration_ns: int | None
    p99_duration_ns: int | None
    percentile_relative_error: float = 0.0
    """The relative error bound of the ``p*_duration_ns`` figures against the exact
    nearest-rank percentiles of the raw spans (``0.0``: exact; a backend answering from
    latency sketches says its sketches' accuracy, e.g. ``0.01``)."""


StatusFilter: TypeAlias = Literal["any", "error", "ok"]
"""``error``: status ERROR; ``ok``: any status but ERROR; ``any``: no filter."""


class TraceQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Trace search conditions.

    A trace matches when *one* of its spans in ``time_range`` satisfies every given condition
    together (service, operation, min duration, status, attributes).

    ``attributes`` are equality matches on span attributes *or* resource attributes, values
    compared as text (``{"http.response.status_code": "500"}`` matches the int 500).
    """

    time_range: TimeRange
    service_name: str | None = None
    operation: str | None = None
    min_duration_ns: int | None = None
    status: StatusFilter = "any"
    attributes: dict[str, str] = msgspec.field(default_factory=dict)


class TraceSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One trace, summarised. Times cover all of its stored spans (any range).

    ``root_*`` describe the root span (no parent); when the root is missing, the earliest
    span stands in and ``root_missing`` is true. ``services`` are sorted.
    """

    trace_id: str
    root_service_name: str
    root_name: str
    root_missing: bool
    start_time_unix_nano: int
    duration_ns: int
    span_count: int
    error_count: int
    services: list[str]


class LogQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Log search. All given conditions must hold.

    ``text`` is a full-text query over ``body``: words (all must occur), ``"quoted phrases"``,
    ``prefix*``; case-insensitive. Anything else (operators, unbalanced quotes, column
    filters) is rejected with ``QueryRejected("text", ...)``, never passed raw to the engine.
    ``min_severity_number`` keeps records at or above that OTel severity number (e.g. 17 for
    ERROR and worse). ``attributes`` are equality matches on log record attributes *or*
    resource attributes, values compared as text (``{"thread.id": "2"}`` matches the int 2),
    as in :class:`TraceQuery`.
    """

    time_range: TimeRange
    text: str | None = None
    service_name: str | None = None
    min_severity_number: int | None = None
    trace_id: str | None = None
    attributes: dict[str, str] = msgspec.field(default_factory=dict)


class LabelMatcher(msgspec.Struct, frozen=True, kw_only=True):
    """A Prometheus-style label matcher on a point's attributes (values compared as text).

    ``=``: equal; ``!=``: not equal (a missing label counts as ``""``); ``=~`` / ``!~``: the
    whole value does / does not match the regular expression (Python ``re`` syntax,
    anchored).
    """

    label: str
    op: Literal["=", "!=", "=~", "!~"] = "="
    value: str


Aggregation: TypeAlias = Literal[
    "avg", "min", "max", "sum", "count", "last", "rate", "increase", "p50", "p90", "p95", "p99"
]
"""Per-bucket aggregation for :meth:`TelemetryStore.metric_series`:

- ``avg``/``min``/``max``/``count``/``last`` over gauge/sum point values (NaN and ±Inf
  skipped: they are stored and counted, but no aggregation uses them); ``last`` is the value
  of the latest point of the bucket; ``sum`` adds a gauge's values and a delta sum's deltas;
- ``sum``/``increase`` of a cumulative (or unspecified) sum: the increase within the bucket,
  reset-aware as Prometheus' ``increase()`` (without its extrapolation): per series, the
  differences of consecutive finite points whose later point is in the bucket (the last point
  before the range counts as the first one's predecessor), a decrease of a monotonic sum or a
  changed ``start_time_unix_nano`` being a reset (the increase is then the new value); a
  series' first point ever counts whole when its ``start_time_unix_nano`` is inside the range
  (the counter started there, from 0). A counter at 5 exported twice increased by 5, not 10.
  ``increase`` of a delta sum is the sum of its deltas;
- ``rate``: per-second increase of a sum. Cumulative (or unspecified) temporality: per
  series, the differences of consecutive finite points whose later point is in the bucket
  (as for ``increase``, without the first point's whole count), divided by the time those
  differences span; delta: the sum of the deltas over the bucket's width in seconds (the last
  bucket may be cut short by the range's end). The rates of the series of one output series
  add up;
- on histograms, over the bucket's merged histograms — delta points summed as they are,
  cumulative points by the increase of each series over the bucket (its last point minus the
  previous last point, reset-aware as for ``rate``; a series' first point counts whole):
  ``count`` (observations), ``sum`` (their sum), ``avg`` (``sum / count``) and
  ``p50``..``p99``, a percentile interpolated linearly inside the bucket holding it
  (Prometheus' ``histogram_quantile``) with the bucket clamped to the exported ``min`` and
  ``max`` (the smallest and largest of the merged points'), the ``+Inf`` bucket reaching up to
  ``max`` (or answering the largest finite bound when no max was exported) — see
  :func:`coremetry.store._histogram.histogram_quantile`;
- ``p50``..``p99`` on gauges: the nearest-rank percentile of the values.

``rate`` and ``increase`` apply to sums; percentiles to histograms and gauges; ``min``,
``max`` and ``last`` to gauges and sums; ``avg``, ``sum`` and ``count`` to every type. Any
other pairing is ``QueryRejected("aggregation", ...)``. Without an aggregation the metric type's
default applies (:data:`DEFAULT_AGGREGATIONS`).
"""

DEFAULT_AGGREGATIONS: Final[dict[MetricType, Aggregation]] = {
    "gauge": "avg",
    "sum": "rate",
    "histogram": "p95",
}
"""The aggregation of a :class:`MetricQuery` that names none, by metric type: a gauge's mean, a
sum's (counter's) per-second rate, a histogram's 95th percentile."""


class MetricQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A bucketed series query.

    Buckets are ``[time_range.start + k*step_ns, time_range.start + (k+1)*step_ns)``, labelled
    by their start. ``group_by`` lists the label keys kept on the output series (points of
    series that agree on them are aggregated together; a key whose value is empty is left out
    of the output labels, as Prometheus does); ``None`` keeps each stored series apart.
    ``service_name`` restricts to one service's points. Matchers and ``group_by`` may name
    ``service.name``. ``aggregation`` ``None`` is the metric type's default
    (:data:`DEFAULT_AGGREGATIONS`).
    """

    name: str
    time_range: TimeRange
    step_ns: int
    aggregation: Aggregation | None = None
    matchers: list[LabelMatcher] = msgspec.field(default_factory=list)
    service_name: str | None = None
    group_by: list[str] | None = None


class MetricSeries(msgspec.Struct, frozen=True, kw_only=True):
    """One output series of :meth:`TelemetryStore.metric_series`.

    Its labels and ``(bucket_start_unix_nano, value)`` points in time order; empty buckets are
    omitted (a series whose points in the range are all NaN/Inf has no points).
    ``labels`` include ``service.name`` when not grouped away. ``aggregation`` is the one
    applied (the type's default when the query named none). For a histogram percentile,
    ``quantile_bounds[i]`` is the ``(lower, upper)`` interval ``points[i]`` was interpolated in
    (one bucket's bounds, clamped to the exported min/max: the percentile is only known to lie
    there); ``None`` for every other aggregation.
    """

    name: str
    type: MetricType
    unit: str
    labels: dict[str, str]
    points: list[tuple[int, float]]
    aggregation: Aggregation | None = None
    quantile_bounds: list[tuple[float, float]] | None = None


class MetricDescriptor(msgspec.Struct, frozen=True, kw_only=True):
    """One metric name as stored.

    Type, unit, description, the label keys seen on its points (sorted; ``service.name``
    always among them, as matchers and ``group_by`` accept it), how many series, and the time
    of its latest point in the range. ``service_names``: the services (``service.name``) of
    the series with a point in the range, sorted (a point of any value, NaN included).
    """

    name: str
    type: MetricType
    unit: str
    description: str
    label_keys: list[str]
    series_count: int
    last_seen_unix_nano: int
    service_names: list[str] = msgspec.field(default_factory=list)


class ServiceEdge(msgspec.Struct, frozen=True, kw_only=True):
    """Calls from one service to another over a range.

    A call is a child span whose parent span belongs to a different service, in the same
    trace. Counts and percentiles are over those child spans
    (the callee side's view of the call) that start in the range; durations nanoseconds.
    """

    caller: str
    callee: str
    call_count: int
    error_count: int
    p50_duration_ns: int | None
    p95_duration_ns: int | None
    p99_duration_ns: int | None
    percentile_relative_error: float = 0.0
    """The relative error bound of the ``p*_duration_ns`` figures against the exact
    nearest-rank percentiles of the raw spans (``0.0``: exact; a backend answering from
    latency sketches says its sketches' accuracy, e.g. ``0.01``)."""


class RedPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One bucket of a service's RED series (:meth:`TelemetryStore.service_red_series`).

    Over the service's *entry spans* (as :class:`ServiceSummary`) starting in the bucket
    ``[bucket_start_unix_nano, bucket_start_unix_nano + step_ns)``: how many
    (``request_count``, at least 1), how many with status ERROR, and nearest-rank
    percentiles of their durations in nanoseconds.
    """

    bucket_start_unix_nano: int
    request_count: int
    error_count: int
    p50_duration_ns: int
    p95_duration_ns: int
    p99_duration_ns: int


class ServiceRedSeries(msgspec.Struct, frozen=True, kw_only=True):
    """One service's RED per bucket; buckets without entry spans are omitted."""

    service_name: str
    points: list[RedPoint]


class LogCountPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One bucket of a service's log counts (:meth:`TelemetryStore.log_counts`).

    ``records`` counts every log record of the service whose ``time_unix_nano`` is in the
    bucket; ``warn_records`` those with an OTel severity number from 13 to 16 (WARN);
    ``error_records`` those at 17 or above (ERROR and FATAL).
    """

    bucket_start_unix_nano: int
    records: int
    warn_records: int
    error_records: int


class LogCountSeries(msgspec.Struct, frozen=True, kw_only=True):
    """One service's log counts per bucket; buckets without records are omitted."""

    service_name: str
    points: list[LogCountPoint]


class DeployRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One ``service.version`` of one service as seen in spans.

    First and last span start times and how many spans carried it. Versions are how deploys
    show in telemetry.
    """

    service_name: str
    version: str
    first_seen_unix_nano: int
    last_seen_unix_nano: int
    span_count: int


class TelemetryStore(Protocol):
    """A telemetry backend. See the module docstring for the contract every method shares."""

    async def write(self, batch: TelemetryBatch) -> WriteResult:
        """Store one batch in one transaction; idempotent on record identity.

        Identity: spans by ``(trace_id, span_id)``; log records by all of their fields
        (time, service, severity, body, ids, attributes); metric points by
        ``(name, service_name, attributes, time_unix_nano)``. A record already stored counts
        as ``*_duplicate`` and is not stored again.

        ``outside_retention`` counts the batch's records (duplicates included) older than the
        retention window.

        Raises:
            QueryRejected: a record cannot be stored as given (an id that is not lowercase
                hex of the right width, a time outside ``[0, 2**63)``, a histogram whose
                bucket counts do not match its bounds, ...); ``field`` is the record's path,
                e.g. ``spans[3].trace_id``. Nothing of the batch is stored.
            StoreUnavailable: the write failed; nothing of the batch is stored.
            StoreClosed: the store is closed.
        """
        ...

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        """RED summaries of every service with spans in the range.

        Order: ``request_count`` descending, then ``service_name``. Single page (no cursor);
        ``total`` is the number of services. ``service_name``: only that service's summary
        (``service.name``, exact match): a page of it alone, ``total`` 1, or empty with
        ``total`` 0 when it has no spans in the range; the same summary as in the unfiltered
        page, read at the cost of that service's data only.
        """
        ...

    async def operations(
        self, service_name: str, time_range: TimeRange, *, limit: int
    ) -> Page[OperationSummary]:
        """Per-operation RED of one service. Order: ``span_count`` descending, then name.

        Single page; ``total`` is the number of operations. Unknown service: empty page.
        """
        ...

    async def get_trace(
        self, trace_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[Span]:
        """The spans of one trace (any time).

        Ordered by ``start_time_unix_nano`` then ``span_id``. ``total`` is the trace's span
        count. Unknown trace: empty page, total 0.

        Raises:
            QueryRejected: ``trace_id`` is not 32 hex characters, or a bad cursor.
        """
        ...

    async def get_traces(self, trace_ids: Sequence[str], *, limit: int) -> list[Page[Span]]:
        """The first spans of several traces in one read (a sample's traces, not 40 reads).

        One page per id, in the order given (an id given twice, twice): what
        :meth:`get_trace` with ``limit`` and no cursor answers for it (its first ``limit``
        spans by start then span id, ``total`` the trace's span count, ``next_cursor`` for
        :meth:`get_trace` to go on; an unknown trace: empty page, total 0). At most
        :data:`MAX_TRACES_PER_READ` ids.

        Raises:
            QueryRejected: ``trace_ids``: more than :data:`MAX_TRACES_PER_READ`, or one is not
                32 hex characters; ``limit`` out of range.
        """
        ...

    async def search_traces(
        self, query: TraceQuery, *, limit: int, cursor: str | None = None
    ) -> Page[TraceSummary]:
        """Traces with a matching span (see :class:`TraceQuery`).

        Newest trace start first (ties by trace id). ``total`` may be ``None``.
        """
        ...

    async def search_logs(
        self, query: LogQuery, *, limit: int, cursor: str | None = None
    ) -> Page[LogRecord]:
        """Matching log records.

        With ``text``: best BM25 match first (ties newest first);
        without: newest first (ties by insertion order, stable across pages).
        BM25 scores depend on everything stored, so pages of a text search visit every match
        exactly once only while nothing is written between them.

        Raises:
            QueryRejected: unsupported ``text`` syntax (field ``text``), bad ``trace_id``,
                bad cursor.
        """
        ...

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        """Metrics with points in the range (optionally names starting with ``prefix``).

        Ordered by name. Single page; ``total`` is the number of names.
        """
        ...

    async def metric_series(self, query: MetricQuery, *, limit: int) -> list[MetricSeries]:
        """Bucketed, aggregated series of one metric.

        See :class:`MetricQuery` and :data:`Aggregation`. At most ``limit`` series, ordered
        by their labels; at most
        ``MAX_LIMIT`` buckets (``QueryRejected("step_ns", ...)`` when the range/step needs
        more). Unknown metric: ``[]``.

        Raises:
            QueryRejected: bad ``step_ns``, an aggregation that does not apply to the
                metric's type (``rate`` on a gauge, percentiles on a sum), a bad regex.
        """
        ...

    async def service_edges(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[ServiceEdge]:
        """Service-to-service edges in the range.

        With ``service_name``, only edges where it is caller or callee. Ordered by
        ``call_count`` descending, then caller, callee.
        """
        ...

    async def deploys(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> list[DeployRecord]:
        """Distinct ``service.version`` values seen in spans in the range, per service.

        Ordered by ``first_seen_unix_nano`` descending (latest deploy first). Spans without
        a version are not listed.
        """
        ...

    async def service_red_series(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[ServiceRedSeries]:
        """Per-service RED of entry spans, bucketed: :meth:`services` per bucket in one query.

        Buckets are ``[start + k*step_ns, start + (k+1)*step_ns)`` of ``time_range``, labelled
        by their start; a span belongs to the bucket of its start. At most ``limit`` services
        (the first by name), ordered by ``service_name``, each one's points in time order.

        Raises:
            QueryRejected: ``step_ns`` not a positive integer, or more than ``MAX_LIMIT``
                buckets over the range (field ``step_ns``).
        """
        ...

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        """Per-service log record counts by severity (all, WARN, ERROR and worse), bucketed.

        Buckets as :meth:`service_red_series`, by ``time_unix_nano``. At most ``limit``
        services (the first by name), ordered by ``service_name``; points in time order.

        Raises:
            QueryRejected: ``step_ns`` as :meth:`service_red_series`.
        """
        ...

    async def statistics(self) -> StoreStatistics:
        """Counts and time extent of everything stored."""
        ...

    async def delete_before(self, cutoff_unix_nano: int) -> RetentionResult:
        """Delete spans, logs and points with time before ``cutoff_unix_nano`` (retention).

        Spans are judged by their start time. Runs in bounded chunks so readers are never
        blocked for long; cancellation leaves whole chunks deleted.
        """
        ...

    async def aclose(self) -> None:
        """Close the store: later calls raise ``StoreClosed``; idempotent."""
        ...
