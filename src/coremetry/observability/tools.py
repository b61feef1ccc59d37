"""The Coremetry tools: read-only views of the telemetry store for a model.

Each tool takes a msgspec Struct of arguments (the ``inputSchema`` is generated from it) and
returns a :class:`~.budget.Shaped` result that the registration passes through
:func:`~.budget.fit` — no result exceeds the output budget. Conventions of every result:

- times are RFC 3339 UTC (``"2023-01-30T13:15:43.651Z"``), durations milliseconds in fields
  named ``*_ms``, ratios in ``[0, 1]`` (``error_rate``);
- a windowed result carries ``window: {start, end}``; an empty one carries ``note`` and
  ``data_extent`` (where stored data actually is), so a model can retry rather than conclude
  "nothing happened";
- lists carry ``truncated`` (and ``total`` when cheap); a cut list carries ``cursor``: pass it
  back with the same arguments to continue;
- failures raise the five tool-error classes (:mod:`coremetry.mcp.tool_errors`) with hints that
  name the next useful tool.

Problems and anomalies come from the detector's stored problems (:mod:`.problems`); when no
detection has run, ``list_problems``, ``list_anomalies`` and ``get_problem`` say so and return
no data — never made-up problems.
"""

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, ClassVar, Final, Literal

import msgspec

from coremetry.analysis import SpanNode, TraceAnalysis, analyse_trace, interval_union_ns
from coremetry.mcp import BadArgs, CallContext, NotFound
from coremetry.store import (
    MAX_LIMIT,
    Aggregation,
    DeployRecord,
    LabelMatcher,
    LogQuery,
    LogRecord,
    MetricQuery,
    MetricSeries,
    OperationSummary,
    ServiceEdge,
    ServiceSummary,
    Span,
    SpanKind,
    StatusFilter,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    TraceSummary,
)

from ._reading import absent_data_note, fetch_trace_spans, parse_trace_id, stored_extent
from .budget import (
    CursorState,
    JsonObject,
    Shaped,
    Trimmable,
    decode_cursor,
    encode_cursor,
    encoded_size,
    fingerprint,
    shorten,
    shrink_value,
)
from .paging import Pager
from .problems import (
    DETECTED_BY,
    NO_DETECTION_NOTE,
    ProblemSource,
    anomaly_row,
    find_problem,
    in_window,
    involving,
    problem_page,
    problem_row,
)
from .ranges import (
    NS_PER_MS,
    NS_PER_S,
    RangeArgs,
    ResolvedRange,
    auto_step_ns,
    duration_ns,
    ms,
    resolve_range,
    rfc3339,
)
from .self_time import self_intervals, service_intervals
from .service_names import require_known_service
from .window_origin import window_origin

__all__ = [
    "SEVERITIES",
    "CompareDeploysArgs",
    "GetProblemArgs",
    "GetServiceArgs",
    "GetServiceMapArgs",
    "GetTraceArgs",
    "ListAnomaliesArgs",
    "ListDeploysArgs",
    "ListMetricsArgs",
    "ListProblemsArgs",
    "ListServicesArgs",
    "ObservabilityTools",
    "QueryMetricArgs",
    "SearchLogsArgs",
    "SearchTracesArgs",
    "AttributeFilter",
    "Filters",
    "filter_map",
    "event_rows",
    "key_attributes",
    "ordered_attributes",
]


SEVERITIES: Final[Mapping[str, int]] = {
    "TRACE": 1,
    "DEBUG": 5,
    "INFO": 9,
    "WARN": 13,
    "ERROR": 17,
    "FATAL": 21,
}
"""Severity names accepted by ``search_logs`` -> the lowest OTel severity number of each."""

_KEY_ATTRIBUTES: Final = (
    "http.request.method",
    "http.method",
    "http.route",
    "url.path",
    "http.target",
    "url.full",
    "http.url",
    "http.response.status_code",
    "http.status_code",
    "rpc.system",
    "rpc.method",
    "db.system.name",
    "db.system",
    "db.operation.name",
    "db.query.text",
    "db.statement",
    "messaging.system",
    "messaging.destination.name",
    "server.address",
    "peer.service",
    "error.type",
    "exception.type",
    "exception.message",
    "error",
)
_SEMCONV_FIRST: Final = (
    # HTTP (current name, then its older names)
    "http.request.method",
    "http.method",
    "http.route",
    "url.full",
    "http.url",
    "url.path",
    "http.target",
    "url.query",
    "url.scheme",
    "http.scheme",
    "http.response.status_code",
    "http.status_code",
    # RPC
    "rpc.system",
    "rpc.service",
    "rpc.method",
    "rpc.grpc.status_code",
    "rpc.response.status_code",
    # Database
    "db.system.name",
    "db.system",
    "db.namespace",
    "db.name",
    "db.operation.name",
    "db.operation",
    "db.collection.name",
    "db.sql.table",
    "db.query.summary",
    "db.query.text",
    "db.statement",
    "db.response.status_code",
    # Messaging
    "messaging.system",
    "messaging.operation.type",
    "messaging.operation",
    "messaging.destination.name",
    "messaging.destination",
    # Peer
    "server.address",
    "net.peer.name",
    "server.port",
    "net.peer.port",
    "peer.service",
    # Errors
    "error.type",
    "exception.type",
    "exception.message",
    "exception.stacktrace",
    "error",
)
"""Attribute keys shown first, in this order: OpenTelemetry semantic conventions (current
names, each followed by its older names), https://opentelemetry.io/docs/specs/semconv/."""
_SEMCONV_RANK: Final = {key: i for i, key in enumerate(_SEMCONV_FIRST)}
_SEMCONV_PREFIXES: Final = (
    "http.",
    "url.",
    "rpc.",
    "db.",
    "messaging.",
    "server.",
    "client.",
    "network.",
    "net.",
    "peer.",
    "exception.",
    "error.",
    "user_agent.",
    "code.",
    "thread.",
    "log.",
)
"""Namespaces of other semantic-convention keys: shown after :data:`_SEMCONV_FIRST`, before
the rest (each group in key order)."""
_MAX_ROW_ATTRIBUTES: Final = 64
"""Most attributes shown per span, span event or log record; the rest are counted."""
_MAX_SPAN_EVENTS: Final = 32
"""Most events shown per span; the rest are counted in ``events_omitted``."""
_MAX_KEY_ATTRIBUTES: Final = 6
_MAX_ATTRIBUTE_CHARS: Final = 160
_MAX_BODY_CHARS: Final = 1000
_MAX_MESSAGE_CHARS: Final = 300
_MAX_BUCKETS: Final = 1000
_MAX_PATH_ROWS: Final = 12
_MAX_ERROR_ROWS: Final = 10
_MAX_SERVICE_ROWS: Final = 15
_MAX_PROBLEM_ROWS: Final = 10
_MAX_NAME_CHARS: Final = 256
"""Span and operation names are cut here (with the ``…(+N bytes)`` marker): a name carrying a
whole URL query is not worth a page."""
MAX_DURATION_MS: Final = 400 * 86_400 * 1000
"""Largest ``min_duration_ms`` accepted: 400 days (the longest window), in milliseconds."""


# ---- arguments ------------------------------------------------------------------------------

_Cursor = Annotated[
    str | None,
    msgspec.Meta(description="From a previous result's `cursor`, with the same arguments."),
]
_Service = Annotated[str, msgspec.Meta(min_length=1, description="service.name, exactly.")]
_OptService = Annotated[str | None, msgspec.Meta(description="Only this service.name (exact).")]


class AttributeFilter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One equality condition on an attribute (a closed object: ``{"key": …, "value": …}``).

    Attributes:
        key: the attribute key, exactly (e.g. ``http.response.status_code``).
        value: the value it must have, compared as text (``"500"`` matches the integer 500).
    """

    key: Annotated[str, msgspec.Meta(min_length=1, description="Attribute key, exactly.")]
    value: Annotated[str, msgspec.Meta(description="Required value, compared as text.")]


Filters = list[AttributeFilter] | dict[str, str]
"""Equality filters as a tool accepts them: a list of :class:`AttributeFilter` (the form the
input schema advertises, a closed object every strict client converts), or — for callers of
earlier versions — a ``{key: value}`` map, still decoded but no longer advertised
(:func:`~.spec.input_schema` serves the first branch of a union only)."""


def filter_map(filters: Filters, field: str) -> dict[str, str]:
    """``filters`` as ``{key: value}``, whichever form was sent.

    Raises:
        BadArgs: one key given twice with different values (naming ``field`` and the key).
    """
    if isinstance(filters, dict):
        return dict(filters)
    found: dict[str, str] = {}
    for condition in filters:
        if found.get(condition.key, condition.value) != condition.value:
            raise BadArgs(
                f"{field}: key {condition.key!r} is given twice with different values; a value "
                "must equal both, so nothing could match"
            )
        found[condition.key] = condition.value
    return found


class ListServicesArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``list_services``."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=500, description="Most services.")] = 100
    cursor: _Cursor = None


class GetServiceArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``get_service``."""

    service: _Service


class GetServiceMapArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``get_service_map``."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Most edges.")] = 200
    cursor: _Cursor = None


class SearchTracesArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``search_traces``: all given conditions hold on one span of the trace."""

    service: _OptService = None
    operation: Annotated[
        str | None, msgspec.Meta(description="Span name (exact), with or without service.")
    ] = None
    min_duration_ms: Annotated[
        Annotated[float, msgspec.Meta(ge=0, le=MAX_DURATION_MS)] | None,
        msgspec.Meta(description="A matching span lasts at least this long (<= 400 days)."),
    ] = None
    status: Annotated[
        StatusFilter, msgspec.Meta(description="error: spans with status ERROR; ok: others.")
    ] = "any"
    attributes: Annotated[
        Filters,
        msgspec.Meta(
            description="Span or resource attributes equal to these (as text), e.g. "
            '[{"key": "http.response.status_code", "value": "500"}].'
        ),
    ] = msgspec.field(default_factory=list)
    limit: Annotated[int, msgspec.Meta(ge=1, le=100, description="Most traces.")] = 20
    cursor: _Cursor = None


class GetTraceArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``get_trace``."""

    trace_id: Annotated[
        str, msgspec.Meta(min_length=1, description="32 hex characters (16 are left-padded).")
    ]
    limit: Annotated[
        int, msgspec.Meta(ge=1, le=1000, description="Most spans of the tree per page.")
    ] = 100
    cursor: _Cursor = None


class SearchLogsArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``search_logs``."""

    text: Annotated[
        str | None,
        msgspec.Meta(
            description='Full text over the body: words (all must occur), "quoted phrases", '
            "prefix*; case-insensitive."
        ),
    ] = None
    service: _OptService = None
    min_severity: Annotated[
        Literal["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"] | None,
        msgspec.Meta(description="Only records at or above this severity."),
    ] = None
    trace_id: Annotated[
        str | None,
        msgspec.Meta(description="Only records of this trace; without a window, any time."),
    ] = None
    attributes: Annotated[
        Filters,
        msgspec.Meta(
            description="Log record or resource attributes equal to these (as text), e.g. "
            '[{"key": "log.iostream", "value": "stderr"}].'
        ),
    ] = msgspec.field(default_factory=list)
    limit: Annotated[int, msgspec.Meta(ge=1, le=200, description="Most records.")] = 50
    cursor: _Cursor = None


class ListMetricsArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``list_metrics``."""

    prefix: Annotated[
        str | None, msgspec.Meta(description='Only names starting with this, e.g. "http."')
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000, description="Most metrics.")] = 200
    cursor: _Cursor = None


class QueryMetricArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``query_metric``."""

    name: Annotated[str, msgspec.Meta(min_length=1, description="Metric name, from list_metrics.")]
    service: _OptService = None
    labels: Annotated[
        Filters,
        msgspec.Meta(
            description='Point attributes equal to these, e.g. [{"key": "quantile", '
            '"value": "0.99"}].'
        ),
    ] = msgspec.field(default_factory=list)
    group_by: Annotated[
        list[str] | None,
        msgspec.Meta(
            description="Label keys to keep; series agreeing on them are merged ([] merges "
            "all). Default: every stored series apart."
        ),
    ] = None
    aggregation: Annotated[
        Aggregation | None,
        msgspec.Meta(
            description="Per bucket. Default by metric type: gauge avg, sum (counter) rate, "
            "histogram p95 (the result says which was used). Gauges: avg, min, max, sum, "
            "count, last, p50..p99. Sums: rate (per second), increase (how much it grew in "
            "the bucket, reset-aware; sum is the same on a cumulative counter), avg, min, "
            "max, count, last. Histograms: p50..p99, count (observations), sum, avg (mean)."
        ),
    ] = None
    step: Annotated[
        str | None,
        msgspec.Meta(
            description='Bucket width, e.g. "1m", "5m"; buckets start at multiples of it. '
            "Default: about 120 buckets; a step giving more than 1000 is widened (and said)."
        ),
    ] = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=100, description="Most series.")] = 10
    cursor: _Cursor = None


class ListDeploysArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``list_deploys``."""

    default_range: ClassVar[str] = "7d"

    service: _OptService = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500, description="Most versions.")] = 50
    cursor: _Cursor = None


class CompareDeploysArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``compare_deploys``."""

    default_range: ClassVar[str] = "7d"

    service: _Service
    from_version: Annotated[
        str | None, msgspec.Meta(description="Default: the version before to_version.")
    ] = None
    to_version: Annotated[
        str | None, msgspec.Meta(description="Default: the latest version in the window.")
    ] = None


class ListProblemsArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``list_problems``."""

    default_range: ClassVar[str] = "24h"

    service: _OptService = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=200, description="Most problems.")] = 50
    cursor: _Cursor = None


class GetProblemArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``get_problem``."""

    problem_id: Annotated[str, msgspec.Meta(min_length=1, description="From list_problems.")]
    service: Annotated[
        Annotated[str, msgspec.Meta(min_length=1)] | None,
        msgspec.Meta(
            description="Only this service of the problem (exact): its rank, all its evidence "
            "and its anomalies."
        ),
    ] = None
    cursor: _Cursor = None


class ListAnomaliesArgs(RangeArgs, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``list_anomalies``."""

    default_range: ClassVar[str] = "24h"

    service: _OptService = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=200, description="Most anomalies.")] = 50
    cursor: _Cursor = None


# ---- rendering ------------------------------------------------------------------------------


def _number(value: float | None) -> float | None:
    """A float for JSON: non-finite values become ``None``; 6 decimals."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, 6)


def _attr_text(value: object) -> object:
    if isinstance(value, str):
        return shorten(value, _MAX_ATTRIBUTE_CHARS)
    if isinstance(value, list):
        return shorten(msgspec.json.encode(value).decode(), _MAX_ATTRIBUTE_CHARS)
    return value


def _attribute_rank(key: str) -> tuple[int, int, str]:
    rank = _SEMCONV_RANK.get(key)
    if rank is not None:
        return (0, rank, key)
    if key.startswith(_SEMCONV_PREFIXES):
        return (1, 0, key)
    return (2, 0, key)


def ordered_attributes(
    attributes: Mapping[str, object], limit: int = _MAX_ROW_ATTRIBUTES
) -> tuple[JsonObject, int]:
    """Every attribute, most useful first, and how many were left out past ``limit``.

    Order: the semantic-convention keys of :data:`_SEMCONV_FIRST` in that order (a current name
    before its older names, e.g. ``db.system.name`` then ``db.system``), then other keys of a
    semantic-convention namespace (``http.``, ``db.``, ``rpc.``, ``messaging.``, …), then the
    rest; each group by key. String values (and lists, as JSON text) are shortened to 160
    characters with the ``…(+N bytes)`` marker; numbers and booleans are kept as sent.

    Returns:
        ``({key: value}`` of at most ``limit`` attributes``, the number of attributes cut)``.
    """
    keys = sorted(attributes, key=_attribute_rank)
    shown = {key: _attr_text(attributes[key]) for key in keys[:limit]}
    return shown, max(0, len(keys) - limit)


def event_rows(span: Span) -> tuple[list[JsonObject], int]:
    """A span's events (``name``, ``offset_ms`` from the span's start, ordered ``attributes``).

    In time order; past :data:`_MAX_SPAN_EVENTS` the rest are counted (second item), and each
    event past :data:`_MAX_ROW_ATTRIBUTES` attributes counts its own ``attributes_omitted``.
    """
    rows: list[JsonObject] = []
    events = sorted(span.events, key=lambda e: e.time_unix_nano)
    for event in events[:_MAX_SPAN_EVENTS]:
        row: JsonObject = {
            "name": shorten(event.name, _MAX_NAME_CHARS),
            "offset_ms": ms(event.time_unix_nano - span.start_time_unix_nano),
        }
        attributes, omitted = ordered_attributes(event.attributes)
        if attributes:
            row["attributes"] = attributes
        if omitted:
            row["attributes_omitted"] = omitted
        rows.append(row)
    return rows, max(0, len(events) - _MAX_SPAN_EVENTS)


def key_attributes(span: Span) -> JsonObject:
    """The few attributes that say what a span did (HTTP, RPC, DB, messaging, errors).

    At most six, in a fixed order of OpenTelemetry semantic-convention keys, span attributes
    before resource attributes, values shortened to 160 characters; the first ``exception``
    event's type and message are included when present.
    """
    chosen: JsonObject = {}
    for key in _KEY_ATTRIBUTES:
        value = span.attributes.get(key)
        if value is not None:
            chosen[key] = _attr_text(value)
        if len(chosen) >= _MAX_KEY_ATTRIBUTES:
            return chosen
    for event in span.events:
        if event.name == "exception":
            for key in ("exception.type", "exception.message"):
                value = event.attributes.get(key)
                if value is not None and key not in chosen:
                    chosen[key] = _attr_text(value)
            break
    return chosen


def service_row(summary: ServiceSummary, window: TimeRange) -> JsonObject:
    """One service's RED over a window."""
    seconds = (window.end_unix_nano - window.start_unix_nano) / NS_PER_S
    return {
        "service": summary.service_name,
        "request_count": summary.request_count,
        "requests_per_s": round(summary.request_count / seconds, 4) if seconds > 0 else None,
        "error_count": summary.error_count,
        "error_rate": round(summary.error_rate, 4),
        "p50_ms": ms(summary.p50_duration_ns),
        "p95_ms": ms(summary.p95_duration_ns),
        "p99_ms": ms(summary.p99_duration_ns),
        "span_count": summary.span_count,
        "versions": summary.versions,
        "last_seen": rfc3339(summary.last_seen_unix_nano),
    }


def percentile_error(
    *groups: Iterable[ServiceSummary | OperationSummary | ServiceEdge],
) -> JsonObject:
    """The largest percentile error the store declared for these summaries.

    ``{"percentile_relative_error": e}``, or ``{}`` when there are no summaries.
    """
    errors = [item.percentile_relative_error for group in groups for item in group]
    return {"percentile_relative_error": max(errors)} if errors else {}


def edge_row(edge: ServiceEdge) -> JsonObject:
    """One caller -> callee edge with the callee-side RED of its calls."""
    return {
        "caller": edge.caller,
        "callee": edge.callee,
        "call_count": edge.call_count,
        "error_count": edge.error_count,
        "error_rate": round(edge.error_count / edge.call_count, 4) if edge.call_count else 0.0,
        "p50_ms": ms(edge.p50_duration_ns),
        "p95_ms": ms(edge.p95_duration_ns),
        "p99_ms": ms(edge.p99_duration_ns),
    }


def trace_row(trace: TraceSummary) -> JsonObject:
    """One trace summary."""
    return {
        "trace_id": trace.trace_id,
        "root_service": trace.root_service_name,
        "root_name": shorten(trace.root_name, _MAX_NAME_CHARS),
        **({"root_missing": True} if trace.root_missing else {}),
        "start": rfc3339(trace.start_time_unix_nano),
        "duration_ms": ms(trace.duration_ns),
        "span_count": trace.span_count,
        "error_count": trace.error_count,
        "services": trace.services,
    }


def log_row(record: LogRecord) -> JsonObject:
    """One log record (body shortened to 1,000 characters) with its attributes.

    ``attributes`` are the record's own (not its resource's), ordered as in
    :func:`ordered_attributes`; past :data:`_MAX_ROW_ATTRIBUTES` the rest are counted in
    ``attributes_omitted``.
    """
    row: JsonObject = {
        "time": rfc3339(record.time_unix_nano),
        "service": record.service_name,
        "severity": record.severity_text or _severity_name(record.severity_number),
        "body": shorten(record.body, _MAX_BODY_CHARS),
    }
    if record.trace_id:
        row["trace_id"] = record.trace_id
    if record.span_id:
        row["span_id"] = record.span_id
    attributes, omitted = ordered_attributes(record.attributes)
    if attributes:
        row["attributes"] = attributes
    if omitted:
        row["attributes_omitted"] = omitted
    return row


def _severity_name(number: int) -> str:
    for name, low in sorted(SEVERITIES.items(), key=lambda item: -item[1]):
        if number >= low:
            return name
    return "UNSPECIFIED"


def deploy_row(record: DeployRecord) -> JsonObject:
    """One version of one service as seen in spans."""
    return {
        "service": record.service_name,
        "version": record.version,
        "first_seen": rfc3339(record.first_seen_unix_nano),
        "last_seen": rfc3339(record.last_seen_unix_nano),
        "span_count": record.span_count,
    }


def _kind(span: Span) -> str | None:
    if span.kind in (SpanKind.UNSPECIFIED, SpanKind.INTERNAL):
        return None
    return span.kind.name.lower()


def span_row(node: SpanNode, origin_ns: int, on_path: Mapping[SpanNode, int]) -> JsonObject:
    """One span of a trace tree (compact: defaults omitted)."""
    span = node.span
    row: JsonObject = {"span_id": span.span_id}
    if node.parent is not None:
        row["parent_span_id"] = node.parent.span.span_id
    elif span.parent_span_id:
        row["parent_span_id"] = span.parent_span_id
        row["orphan"] = True
    row["depth"] = node.depth
    row["service"] = node.service
    row["name"] = shorten(span.name, _MAX_NAME_CHARS)
    kind = _kind(span)
    if kind is not None:
        row["kind"] = kind
    row["start_offset_ms"] = ms(node.start_ns - origin_ns)
    row["duration_ms"] = ms(node.duration_ns)
    row["self_time_ms"] = ms(node.self_time_ns)
    if node in on_path:
        row["critical_path_ms"] = ms(on_path[node])
    if node.is_error:
        row["status"] = "error"
        if span.status_message:
            row["status_message"] = shorten(span.status_message, _MAX_MESSAGE_CHARS)
    if node.skew_shift_ns:
        row["skew_shift_ms"] = ms(node.skew_shift_ns)
    attributes, omitted = ordered_attributes(span.attributes)
    if attributes:
        row["attributes"] = attributes
    if omitted:
        row["attributes_omitted"] = omitted
    events, events_omitted = event_rows(span)
    if events:
        row["events"] = events
    if events_omitted:
        row["events_omitted"] = events_omitted
    return row


def _series_row(series: MetricSeries) -> JsonObject:
    values = [v for _t, v in series.points if math.isfinite(v)]
    within = series.quantile_bounds
    points: list[object]
    if within is not None and len(within) == len(series.points):
        # A histogram percentile: the bucket it was interpolated in rides along.
        points = [
            [rfc3339(t), _number(v), _number(lower), _number(upper)]
            for (t, v), (lower, upper) in zip(series.points, within, strict=True)
        ]
    else:
        points = [[rfc3339(t), _number(v)] for t, v in series.points]
    return {
        "labels": series.labels,
        "min": _number(min(values)) if values else None,
        "max": _number(max(values)) if values else None,
        "mean": _number(sum(values) / len(values)) if values else None,
        "last": _number(series.points[-1][1]) if series.points else None,
        "point_count": len(series.points),
        "points": points,
    }


def duration_text(nanoseconds: int) -> str:
    """A length as a ``range``/``step`` value: ``"90s"``, ``"5m"``, ``"2h"``, ``"7d"``."""
    seconds = max(1, -(-nanoseconds // NS_PER_S))
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def series_shrinker(step_ns: int) -> Callable[[object, int], object]:
    """How ``query_metric`` shrinks one series that does not fit a page alone.

    Its points are downsampled evenly — every k-th bucket, the last one always kept — and the
    row says so (``points_shown``, ``points_note``: the step that would show every bucket);
    ``min``/``max``/``mean``/``last`` keep covering every bucket. Anything still too large goes
    through :func:`~.budget.shrink_value`.
    """

    def shrink(row: object, max_bytes: int) -> object:
        if not isinstance(row, dict):
            return shrink_value(row, max_bytes)
        points = row.get("points")
        if not isinstance(points, list) or len(points) < 2:
            return shrink_value(row, max_bytes)
        total = len(points)
        per_point = encoded_size(points) / total
        room = max_bytes - encoded_size({**row, "points": []}) - 320
        stride = max(2, math.ceil(total / max(1, room / per_point)))
        while stride <= total:
            kept = points[::stride]
            if kept[-1] is not points[-1]:
                kept.append(points[-1])
            candidate = {
                **row,
                "points": kept,
                "points_shown": len(kept),
                "points_note": f"1 bucket in {stride} of the {total} is shown (and the last), "
                "to fit the output budget; min/max/mean/last cover all of them. To see every "
                f'bucket, pass step="{duration_text(stride * step_ns)}" (or larger) or a '
                "narrower window",
            }
            if encoded_size(candidate) <= max_bytes:
                return candidate
            stride = max(stride + 1, stride * 5 // 4)
        return shrink_value({**row, "points": [points[-1]], "points_shown": 1}, max_bytes)

    return shrink


def _self_intervals(node: SpanNode) -> list[tuple[int, int]]:
    """The stretches of ``node``'s interval that are its self time, in ns.

    Not covered by a child nor, for a span that is not itself a call, by a sibling call into
    another service (:func:`coremetry.analysis.self_intervals`).
    """
    return self_intervals(node)


# ---- the tools --------------------------------------------------------------------------------


def shown_start(window: ResolvedRange) -> str:
    """The window's start as shown (RFC 3339, comparable as text with other shown times)."""
    return rfc3339(window.start_unix_nano)


class ObservabilityTools:
    """The tool handlers over one store.

    Args:
        store: where telemetry is read from.
        clock: the current time in unix nanoseconds (``time.time_ns``; tests pin it).
        origin_slow_traces: slow traces read per group by the likely-origin analysis.
        origin_typical_traces: typical traces read per group by the likely-origin analysis.
        problems: the detector's stored problems (none: no detection has run).
    """

    def __init__(
        self,
        store: TelemetryStore,
        *,
        clock: Callable[[], int] = time.time_ns,
        origin_slow_traces: int = 20,
        origin_typical_traces: int = 20,
        problems: ProblemSource | None = None,
    ) -> None:
        self.store = store
        self.problems = problems if problems is not None else ProblemSource(None)
        self.clock = clock
        self.origin_slow_traces = origin_slow_traces
        self.origin_typical_traces = origin_typical_traces

    # -- helpers --------------------------------------------------------------------------------

    def _pager(self, tool: str, args: RangeArgs, cursor: str | None) -> Pager:
        """Start a paged call: its query, its window (from the cursor when continuing)."""
        return Pager.start(tool, args, cursor, lambda: resolve_range(args, self.clock()))

    async def _extent_json(self) -> JsonObject | None:
        extent = await stored_extent(self.store)
        if extent is None:
            return None
        return {
            "start": rfc3339(extent.start_unix_nano),
            "end": rfc3339(extent.end_unix_nano - 1),
        }

    async def _all_services(self, window: TimeRange) -> list[ServiceSummary]:
        page = await self.store.services(window, limit=MAX_LIMIT)
        return page.items

    async def _find_service(
        self, name: str, window: ResolvedRange, summaries: list[ServiceSummary] | None = None
    ) -> tuple[ServiceSummary, list[ServiceSummary]]:
        if summaries is None:  # else the caller read them over the same window
            summaries = await self._all_services(window.time_range)
        for summary in summaries:
            if summary.service_name == name:
                return summary, summaries
        await require_known_service(self.store, name)
        shown = window.as_json()
        extent = await self._extent_json()
        where = f" (stored data: {extent['start']} .. {extent['end']})" if extent else ""
        known = ", ".join(s.service_name for s in summaries[:8])
        raise NotFound(
            f"no spans of service {name!r} in {shown['start']} .. {shown['end']}{where}"
            + (f"; services in this window: {known}" if known else ""),
            hint="Check the exact name with list_services, or widen the window (start/end "
            "inside the stored data): the service may only have older data.",
        )

    # -- services -----------------------------------------------------------------------------

    async def list_services(self, args: ListServicesArgs, ctx: CallContext) -> Shaped:
        """``list_services``: every service seen in any signal in the window.

        A service with spans leads with its RED (:func:`service_row`); every row says which
        ``signals`` carried it (``traces``, ``logs``, ``metrics``), with ``log_count`` (records
        in the window) and ``metric_count`` (metric names with its points in the window) where
        it has those. Services with spans come first (in the store's order), then the others by
        name.
        """
        pager = self._pager("list_services", args, args.cursor)
        window = pager.window
        tr = window.time_range
        span_services = (await self.store.services(tr, limit=MAX_LIMIT)).items
        whole = max(1, tr.end_unix_nano - tr.start_unix_nano)
        log_counts: dict[str, int] = {}
        log_seen: dict[str, int] = {}
        for series in await self.store.log_counts(tr, step_ns=whole, limit=MAX_LIMIT):
            if series.service_name and series.points:
                log_counts[series.service_name] = sum(p.records for p in series.points)
                log_seen[series.service_name] = series.points[-1].bucket_start_unix_nano
        metric_counts = await self._metric_services(tr)
        rows: list[JsonObject] = [service_row(summary, tr) for summary in span_services]
        listed = {summary.service_name for summary in span_services}
        rows += [
            {"service": name} for name in sorted((set(log_counts) | set(metric_counts)) - listed)
        ]
        for row in rows:
            name = str(row["service"])
            signals = ["traces"] if name in listed else []
            if name in log_counts:
                signals.append("logs")
                row["log_count"] = log_counts[name]
            if name in metric_counts:
                signals.append("metrics")
                row["metric_count"] = metric_counts[name]
            row["signals"] = signals
        total = len(rows)
        shown = pager.page(rows, args.limit, total=total)
        items = shown.items
        body: JsonObject = {
            "window": window.as_json(),
            "services": list(items),
            "total": total,
            "truncated": shown.more,
            **percentile_error(span_services),
        }
        shown.add_cursor(body)
        if not items:
            body.update(
                await absent_data_note(self.store, "telemetry", window, "traces", args=args)
            )
        else:
            extent = await self._extent_json()
            body["data_extent"] = extent
            oldest = str(extent["start"]) if extent is not None else ""
            if not window.explicit and oldest and oldest < shown_start(window):
                body["note"] = (
                    f"this is the default window (the last {args.default_range}); stored data "
                    f'goes back to {oldest}: pass range (e.g. "24h") or start/end to see more'
                )
            body["next"] = (
                "get_service(service) for one service's operations, edges and likely origin; "
                "search_logs(service) and list_metrics for services without spans"
            )
        return Shaped(body, [shown.trimmable("services")])

    async def _metric_services(self, window: TimeRange) -> dict[str, int]:
        """``service.name`` -> how many metric names have its points in ``window``.

        One ``metric_names`` read: each name lists the services of its series with a point in
        the window (a seek per series, whatever the number of points).
        """
        counts: dict[str, int] = {}
        names = await self.store.metric_names(window, limit=MAX_LIMIT)
        for descriptor in names.items:
            for service in descriptor.service_names:
                if service:
                    counts[service] = counts.get(service, 0) + 1
        return counts

    async def get_service(self, args: GetServiceArgs, ctx: CallContext) -> Shaped:
        """``get_service``: one service's RED, operations, edges, deploys and likely origin."""
        window = resolve_range(args, self.clock())
        tr = window.time_range
        summaries = await self._all_services(tr)
        if not any(s.service_name == args.service for s in summaries):
            metric_counts = await self._metric_services(tr)
            if args.service in metric_counts:
                return await self._service_without_spans(args, window, metric_counts)
        summary, summaries = await self._find_service(args.service, window, summaries)
        operations = await self.store.operations(args.service, tr, limit=10)
        edges = await self.store.service_edges(tr, limit=100, service_name=args.service)
        deploys = await self.store.deploys(tr, limit=5, service_name=args.service)
        await ctx.report_progress(1, 2, "analysing slow traces")
        origin = await window_origin(
            self.store,
            tr,
            summaries,
            edges,
            await self.problems.load(),
            service=args.service,
            slow_traces=self.origin_slow_traces,
            typical_traces=self.origin_typical_traces,
        )
        upstream = [edge_row(e) for e in edges if e.callee == args.service]
        downstream = [edge_row(e) for e in edges if e.caller == args.service]
        body: JsonObject = {
            "service": args.service,
            "window": window.as_json(),
            "red": service_row(summary, tr),
            "likely_origin": origin.body,
            "operations": [
                {
                    "name": shorten(o.name, _MAX_NAME_CHARS),
                    "span_count": o.span_count,
                    "error_count": o.error_count,
                    "p50_ms": ms(o.p50_duration_ns),
                    "p95_ms": ms(o.p95_duration_ns),
                    "p99_ms": ms(o.p99_duration_ns),
                }
                for o in operations.items
            ],
            "operations_total": operations.total,
            "upstream": upstream,
            "downstream": downstream,
            "deploys": [deploy_row(d) for d in deploys],
            **(await self.problems_of(args.service, tr)),
            **percentile_error([summary], operations.items, edges),
            "truncated": False,
            "next": "search_traces(service, min_duration_ms) for slow traces, get_trace for one, "
            "search_logs(service, min_severity=ERROR), query_metric for its metrics",
        }
        return Shaped(
            body,
            [
                Trimmable(("deploys",)),
                Trimmable(("problems",)),
                Trimmable(("likely_origin", "slow_traces")),
                Trimmable(("operations",)),
                Trimmable(("upstream",)),
                Trimmable(("downstream",)),
                Trimmable(("likely_origin", "candidates")),
            ],
        )

    async def _service_without_spans(
        self, args: GetServiceArgs, window: ResolvedRange, metric_counts: Mapping[str, int]
    ) -> Shaped:
        """``get_service`` for a service with metrics but no spans in the window.

        What exists instead of ``not_found``: the names of its metrics with points in the
        window (``metrics``, at most 20; ``metrics_total``), its deploys and problems; no
        ``red``, operations or ``likely_origin`` (they are read from spans), said in ``note``.
        """
        tr = window.time_range
        names = await self.store.metric_names(tr, limit=MAX_LIMIT)
        mine = [d.name for d in names.items if args.service in d.service_names]
        edges = await self.store.service_edges(tr, limit=100, service_name=args.service)
        deploys = await self.store.deploys(tr, limit=5, service_name=args.service)
        body: JsonObject = {
            "service": args.service,
            "window": window.as_json(),
            "metrics": mine[:20],
            "metrics_total": metric_counts.get(args.service, len(mine)),
            "operations": [],
            "operations_total": 0,
            "upstream": [edge_row(e) for e in edges if e.callee == args.service],
            "downstream": [edge_row(e) for e in edges if e.caller == args.service],
            "deploys": [deploy_row(d) for d in deploys],
            **(await self.problems_of(args.service, tr)),
            "truncated": False,
            "note": f"no spans of service {args.service!r} in this window (no traces): no RED, "
            "operations or likely_origin, which are read from spans; its metrics in the window "
            "are listed",
            "next": "query_metric(name, service) for its metrics; search_logs(service) for its "
            "logs; widen the window (range or start/end) for its traces",
        }
        return Shaped(body, [Trimmable(("deploys",)), Trimmable(("problems",))])

    async def get_service_map(self, args: GetServiceMapArgs, ctx: CallContext) -> Shaped:
        """``get_service_map``: services and caller -> callee edges with RED."""
        pager = self._pager("get_service_map", args, args.cursor)
        window, offset = pager.window, pager.offset
        tr = window.time_range
        # Every edge is read (one aggregate either way; graphs are small): the total is exact.
        edges = await self.store.service_edges(tr, limit=MAX_LIMIT)
        page = pager.page(edges, args.limit)
        shown, more = page.items, page.more
        summaries = await self._all_services(tr) if offset == 0 else []
        body: JsonObject = {
            "window": window.as_json(),
            "edges": [edge_row(e) for e in shown],
        }
        if len(edges) < MAX_LIMIT:
            body["total"] = len(edges)
        body["truncated"] = more
        body.update(percentile_error(shown, summaries))
        if offset == 0:
            body["services"] = [
                {
                    "service": s.service_name,
                    "request_count": s.request_count,
                    "error_rate": round(s.error_rate, 4),
                    "p95_ms": ms(s.p95_duration_ns),
                }
                for s in summaries
            ]
        page.add_cursor(body)
        if not shown and offset == 0:
            body.update(
                await absent_data_note(self.store, "service calls", window, "traces", args=args)
            )
        return Shaped(body, [page.trimmable("edges"), Trimmable(("services",))])

    # -- traces -------------------------------------------------------------------------------

    async def search_traces(self, args: SearchTracesArgs, ctx: CallContext) -> Shaped:
        """``search_traces``: traces with a span matching every condition, newest first."""
        min_ns = None if args.min_duration_ms is None else int(args.min_duration_ms * NS_PER_MS)
        # As a map, the filters are one query in any order or form (the cursor's fingerprint).
        args = msgspec.structs.replace(args, attributes=filter_map(args.attributes, "attributes"))
        pager = self._pager("search_traces", args, args.cursor)
        window = pager.window
        trace_query = TraceQuery(
            time_range=window.time_range,
            service_name=args.service,
            operation=args.operation,
            min_duration_ns=min_ns,
            status=args.status,
            attributes=filter_map(args.attributes, "attributes"),
        )
        page = await self.store.search_traces(
            trace_query, limit=pager.fetch_limit(args.limit), cursor=pager.store_cursor
        )
        shown = pager.store_page(page.items, args.limit, page.next_cursor)
        items = shown.items
        body: JsonObject = {"window": window.as_json(), "traces": [trace_row(t) for t in items]}
        if page.total is not None and pager.store_cursor is None:
            body["total"] = page.total
        body["truncated"] = shown.more
        shown.add_cursor(body)
        if not items and pager.first:
            await require_known_service(self.store, args.service)
            body.update(
                await absent_data_note(
                    self.store, "matching traces", window, "traces", service=args.service, args=args
                )
            )
        elif items:
            body["next"] = "get_trace(trace_id) for the tree, self times and critical path"
        return Shaped(body, [shown.trimmable("traces")])

    async def get_trace(self, args: GetTraceArgs, ctx: CallContext) -> Shaped:
        """``get_trace``: the trace tree with self times, critical path and error spans."""
        trace_id = parse_trace_id(args.trace_id)
        query = fingerprint(msgspec.structs.replace(args, trace_id=trace_id))
        offset = 0
        if args.cursor is not None:
            offset = decode_cursor(args.cursor, tool="get_trace", query=query).offset
        spans, total = await fetch_trace_spans(self.store, trace_id)
        if not spans:
            raise NotFound(
                f"no trace {trace_id} is stored",
                hint="Use search_traces over a wider range (or search_logs with this trace_id) "
                "to find a stored trace id.",
            )
        analysis = analyse_trace(spans)
        return Shaped(*self.trace_body(analysis, total, query, offset, args.limit))

    def trace_body(
        self, analysis: TraceAnalysis, total: int, query: str, offset: int, limit: int
    ) -> tuple[JsonObject, list[Trimmable]]:
        """The ``get_trace`` result of an analysed trace (also used by resources and prompts)."""
        root = analysis.root
        origin = analysis.start_ns
        on_path = analysis.critical_time_by_span()
        by_service: dict[str, list[int]] = {}
        # A service's self time is the union of its spans' self intervals: parallel spans of one
        # service count once, so it never exceeds the trace's duration. The self time of its
        # calls into other services is time waiting on them (call_wait_ms), not its own work.
        own_intervals, wait_intervals = service_intervals(analysis.nodes, _self_intervals)
        for node in analysis.nodes:
            row = by_service.setdefault(node.service, [0, 0, 0, 0])
            row[0] += 1
            row[2] += 1 if node.is_error else 0
        for service, intervals in own_intervals.items():
            by_service[service][1] = interval_union_ns(intervals)
        for service, (own, waiting) in analysis.critical_time_by_service().items():
            row = by_service.setdefault(service, [0, 0, 0, 0])
            row[3] = own + waiting
        services = sorted(by_service.items(), key=lambda item: (-item[1][3], item[0]))
        # The critical path in time order, one row per span, limited to the spans holding the
        # most path time (every span row below also carries its critical_path_ms).
        path_nodes: list[SpanNode] = []
        on_path_order: dict[SpanNode, int] = {}
        waiting_on: dict[SpanNode, str] = {}
        for segment in analysis.critical_path:
            if segment.node not in on_path_order:
                on_path_order[segment.node] = len(path_nodes)
                path_nodes.append(segment.node)
            if segment.waiting:
                waiting_on[segment.node] = segment.attributed_service
        heaviest = set(sorted(path_nodes, key=lambda n: -on_path[n])[:_MAX_PATH_ROWS])
        path_rows: list[JsonObject] = []
        for node in path_nodes:
            if node not in heaviest:
                continue
            path_row: JsonObject = {
                "span_id": node.span.span_id,
                "service": node.service,
                "name": shorten(node.span.name, _MAX_NAME_CHARS),
                "critical_path_ms": ms(on_path[node]),
                "self_time_ms": ms(node.self_time_ns),
            }
            if node in waiting_on:
                path_row["waiting_on"] = waiting_on[node]
            path_rows.append(path_row)
        dominant = max(analysis.critical_path, key=lambda s: on_path[s.node], default=None)
        errors = [n for n in analysis.nodes if n.is_error]
        notes: list[str] = []
        if total > len(analysis.nodes):
            notes.append(
                f"the trace has {total} spans; the first {len(analysis.nodes)} by start time "
                "were analysed"
            )
        if analysis.skew_adjusted:
            notes.append(
                f"{analysis.skew_adjusted} spans started before or ended after their caller "
                "(clock skew between hosts) and were shifted into it, with their subtrees"
            )
        tail = analysis.async_tail_spans
        if tail:
            notes.append(
                f"{tail} spans end after the root span ended (asynchronous work or follow-up "
                "requests): the critical path covers the root's duration only"
            )
        orphans = sum(1 for n in analysis.roots if n.orphan)
        if orphans:
            notes.append(f"{orphans} spans name a parent that is not stored; shown as roots")
        if analysis.cycles_broken:
            notes.append(f"{analysis.cycles_broken} parent cycles were cut (corrupt ids)")
        if len(path_rows) < len(path_nodes):
            notes.append(
                f"the critical path runs through {len(path_nodes)} spans; critical_path lists the "
                f"{len(path_rows)} holding the most path time (critical_path_omitted: "
                f"{len(path_nodes) - len(path_rows)}); every span row carries its critical_path_ms"
            )
        page = analysis.nodes[offset : offset + limit]
        tool_query = query

        def continuation(kept: int) -> JsonObject:
            return {
                "cursor": encode_cursor(
                    CursorState(tool="get_trace", query=tool_query, offset=offset + kept)
                )
            }

        body: JsonObject = {
            "trace_id": root.span.trace_id,
            "root": {
                "service": root.service,
                "name": shorten(root.span.name, _MAX_NAME_CHARS),
                "span_id": root.span.span_id,
                "duration_ms": ms(root.duration_ns),
            },
            "start": rfc3339(origin),
            "duration_ms": ms(analysis.end_ns - analysis.start_ns),
            "span_count": total,
            "error_count": len(errors),
            "dominant_span": (
                None
                if dominant is None
                else {
                    "span_id": dominant.node.span.span_id,
                    "service": dominant.node.service,
                    "name": shorten(dominant.node.span.name, _MAX_NAME_CHARS),
                    "critical_path_ms": ms(on_path[dominant.node]),
                    "share_of_root": round(on_path[dominant.node] / analysis.duration_ns, 3)
                    if analysis.duration_ns
                    else None,
                    **({"waiting_on": dominant.attributed_service} if dominant.waiting else {}),
                }
            ),
            "services": [
                {
                    "service": name,
                    "span_count": row[0],
                    "self_time_ms": ms(row[1]),
                    "call_wait_ms": ms(interval_union_ns(wait_intervals.get(name, []))),
                    "critical_path_ms": ms(row[3]),
                    "error_count": row[2],
                }
                for name, row in services[:_MAX_SERVICE_ROWS]
            ],
            "critical_path": path_rows,
            "critical_path_span_count": len(path_nodes),
            **(
                {"critical_path_omitted": len(path_nodes) - len(path_rows)}
                if len(path_rows) < len(path_nodes)
                else {}
            ),
            "error_spans": [
                {
                    "span_id": n.span.span_id,
                    "service": n.service,
                    "name": shorten(n.span.name, _MAX_NAME_CHARS),
                    "status": "error",
                    **(
                        {"status_message": shorten(n.span.status_message, _MAX_MESSAGE_CHARS)}
                        if n.span.status_message
                        else {}
                    ),
                }
                for n in errors[:_MAX_ERROR_ROWS]
            ],
            "notes": notes,
            "spans": [span_row(n, origin, on_path) for n in page],
            "spans_offset": offset,
            "truncated": offset + len(page) < len(analysis.nodes),
        }
        if offset + len(page) < len(analysis.nodes):
            body.update(continuation(len(page)))
        return body, [
            Trimmable(("spans",), continuation),
            Trimmable(("error_spans",)),
            Trimmable(("critical_path",)),
            Trimmable(("services",)),
        ]

    # -- logs ---------------------------------------------------------------------------------

    async def search_logs(self, args: SearchLogsArgs, ctx: CallContext) -> Shaped:
        """``search_logs``: log records by text, service, severity, trace id and attributes."""
        trace_id = None if args.trace_id is None else parse_trace_id(args.trace_id)
        attributes = filter_map(args.attributes, "attributes")
        # The query with the trace id as parsed: both spellings of one id are one query.
        query = msgspec.structs.replace(args, trace_id=trace_id, attributes=attributes)
        if (
            trace_id is not None
            and args.cursor is None
            and args.range is None
            and args.start is None
            and args.end is None
        ):
            extent = await stored_extent(self.store)
            whole = ResolvedRange(
                time_range=extent or TimeRange(start_unix_nano=0, end_unix_nano=1), explicit=False
            )
            pager = Pager.start("search_logs", query, None, lambda: whole)
        else:
            pager = self._pager("search_logs", query, args.cursor)
        window = pager.window
        log_query = LogQuery(
            time_range=window.time_range,
            text=args.text,
            service_name=args.service,
            min_severity_number=None
            if args.min_severity is None
            else SEVERITIES[args.min_severity],
            trace_id=trace_id,
            attributes=attributes,
        )
        page = await self.store.search_logs(
            log_query, limit=pager.fetch_limit(args.limit), cursor=pager.store_cursor
        )
        shown = pager.store_page(page.items, args.limit, page.next_cursor)
        items = shown.items
        body: JsonObject = {"window": window.as_json(), "records": [log_row(r) for r in items]}
        if page.total is not None and pager.store_cursor is None:
            body["total"] = page.total
        body["truncated"] = shown.more
        shown.add_cursor(body)
        if not items and pager.first:
            await require_known_service(self.store, args.service)
            body.update(
                await absent_data_note(
                    self.store,
                    "matching log records",
                    window,
                    "logs",
                    service=args.service,
                    args=args,
                )
            )
        return Shaped(body, [shown.trimmable("records")])

    # -- metrics ------------------------------------------------------------------------------

    async def list_metrics(self, args: ListMetricsArgs, ctx: CallContext) -> Shaped:
        """``list_metrics``: metric names with type, unit, label keys."""
        pager = self._pager("list_metrics", args, args.cursor)
        window = pager.window
        page = await self.store.metric_names(
            window.time_range, limit=pager.fetch_limit(args.limit), prefix=args.prefix
        )
        total = page.total if page.total is not None else len(page.items)
        shown = pager.page(page.items, args.limit, total=total)
        items = shown.items
        body: JsonObject = {
            "window": window.as_json(),
            "metrics": [
                {
                    "name": d.name,
                    "type": d.type,
                    "unit": d.unit,
                    "description": shorten(d.description, 200),
                    "label_keys": d.label_keys,
                    "series_count": d.series_count,
                    "last_seen": rfc3339(d.last_seen_unix_nano),
                }
                for d in items
            ],
            "total": total,
            "truncated": shown.more,
        }
        shown.add_cursor(body)
        if not items and pager.first:
            body.update(
                await absent_data_note(self.store, "metric points", window, "metrics", args=args)
            )
        return Shaped(body, [shown.trimmable("metrics")])

    async def query_metric(self, args: QueryMetricArgs, ctx: CallContext) -> Shaped:
        """``query_metric``: one metric as bucketed series with min/max/mean/last.

        Buckets start at multiples of the step in unix time (so calls with the same step line
        up whatever "now" is): the window's start moves back to the bucket edge at or before
        it, and the result's ``window`` is that aligned window. A step giving more than 1000
        buckets is widened to the smallest "nice" step that does not, with a ``note``.
        """
        args = msgspec.structs.replace(args, labels=filter_map(args.labels, "labels"))
        pager = self._pager("query_metric", args, args.cursor)
        window = pager.window
        length = window.end_unix_nano - window.start_unix_nano
        notes: list[str] = []
        if args.step is not None:
            step = duration_ns(args.step, "step")
            aligned = window.start_unix_nano // step * step
            buckets = -(-(window.end_unix_nano - aligned) // step)
            if buckets > _MAX_BUCKETS:
                step = auto_step_ns(length, max_buckets=_MAX_BUCKETS - 1, min_step_ns=step)
                notes.append(
                    f"step: {args.step!r} gives {buckets} buckets over this window (at most "
                    f'{_MAX_BUCKETS}); step "{duration_text(step)}" was used instead — pass a '
                    "shorter window for finer buckets"
                )
        else:
            step = auto_step_ns(length)
        aligned_start = window.start_unix_nano // step * step
        query_range = TimeRange(start_unix_nano=aligned_start, end_unix_nano=window.end_unix_nano)
        if args.group_by:
            await self._group_by_must_exist(args.name, args.group_by, query_range)
        series = await self.store.metric_series(
            MetricQuery(
                name=args.name,
                time_range=query_range,
                step_ns=step,
                aggregation=args.aggregation,
                matchers=[
                    LabelMatcher(label=k, value=v)
                    for k, v in sorted(filter_map(args.labels, "labels").items())
                ],
                service_name=args.service,
                group_by=args.group_by,
            ),
            limit=pager.fetch_limit(args.limit, lookahead=1),
        )
        page = pager.page(series, args.limit)
        shown = page.items
        applied = shown[0].aggregation if shown else args.aggregation
        percentile = any(s.quantile_bounds is not None for s in shown)
        points_format = (
            "[bucket start (RFC 3339; a multiple of the step in unix time), value]; empty "
            "buckets omitted; null = not a finite number"
        )
        if percentile:
            points_format = (
                "[bucket start (RFC 3339; a multiple of the step in unix time), value, lower, "
                "upper]; empty buckets omitted; null = not a finite number (an upper of null: "
                "the rank is above the largest bucket bound and no max was exported, so the "
                "value is only a lower limit)"
            )
            notes.append(
                f"{applied} of a histogram is estimated from bucket counts: each value is "
                "interpolated inside the one histogram bucket holding that rank, [lower, upper] "
                "(clamped to the exported min and max); the true percentile lies somewhere in "
                "it, so a wide [lower, upper] means a rough estimate"
            )
        body: JsonObject = {
            "metric": args.name,
            "window": {
                "start": rfc3339(query_range.start_unix_nano),
                "end": rfc3339(query_range.end_unix_nano),
            },
            "aggregation": applied,
            "step_s": step / NS_PER_S,
            "type": shown[0].type if shown else None,
            "unit": shown[0].unit if shown else None,
            "series": [_series_row(s) for s in shown],
            "truncated": page.more,
            "points_format": points_format,
        }
        if notes:
            body["note"] = "; ".join(notes)
        page.add_cursor(body)
        if not shown and pager.first:
            await self._metric_must_exist(args.name)
            await require_known_service(self.store, args.service, metric=args.name)
            absent = await absent_data_note(
                self.store,
                f"points of {args.name} matching the filters",
                ResolvedRange(time_range=query_range, explicit=window.explicit),
                "metrics",
                args=args,
            )
            if notes:
                absent["note"] = f"{absent['note']}; {body['note']}"
            body.update(absent)
        return Shaped(body, [page.trimmable("series", series_shrinker(step))])

    async def _group_by_must_exist(self, name: str, group_by: list[str], window: TimeRange) -> None:
        """Refuse ``group_by`` keys the metric does not carry (they would merge every series)."""
        page = await self.store.metric_names(window, limit=MAX_LIMIT, prefix=name)
        descriptor = next((d for d in page.items if d.name == name), None)
        if descriptor is None:
            return  # no points in the window: the empty result explains it
        unknown = [key for key in group_by if key not in descriptor.label_keys]
        if unknown:
            keys = ", ".join(descriptor.label_keys) or "(none)"
            raise BadArgs(
                f"group_by: {', '.join(repr(k[:64]) for k in unknown)} is not a label key of "
                f"{name} in this window (grouping by it would merge every series); its label "
                f"keys: {keys}"
            )

    async def _metric_must_exist(self, name: str) -> None:
        extent = await stored_extent(self.store)
        if extent is None:
            return
        page = await self.store.metric_names(extent, limit=50, prefix=name)
        if any(d.name == name for d in page.items):
            return
        similar = ", ".join(d.name for d in page.items[:5])
        raise NotFound(
            f"no metric named {name!r} is stored"
            + (f"; names starting with it: {similar}" if similar else ""),
            hint="Use list_metrics (optionally with a prefix) to find the exact name.",
        )

    # -- deploys ------------------------------------------------------------------------------

    async def list_deploys(self, args: ListDeploysArgs, ctx: CallContext) -> Shaped:
        """``list_deploys``: versions seen per service, latest first."""
        pager = self._pager("list_deploys", args, args.cursor)
        window = pager.window
        records = await self.store.deploys(
            window.time_range,
            limit=pager.fetch_limit(args.limit, lookahead=1),
            service_name=args.service,
        )
        page = pager.page(records, args.limit)
        shown = page.items
        body: JsonObject = {
            "window": window.as_json(),
            "deploys": [deploy_row(r) for r in shown],
            "truncated": page.more,
        }
        page.add_cursor(body)
        if not shown and pager.first:
            await require_known_service(self.store, args.service)
            body.update(
                await absent_data_note(
                    self.store,
                    "spans carrying service.version (the OTel resource attribute deploys show as)",
                    window,
                    "traces",
                    args=args,
                )
            )
        elif shown:
            body["next"] = "compare_deploys(service) for RED before versus after a change"
        return Shaped(body, [page.trimmable("deploys")])

    async def compare_deploys(self, args: CompareDeploysArgs, ctx: CallContext) -> Shaped:
        """``compare_deploys``: RED of one service before versus after a version change."""
        window = resolve_range(args, self.clock())
        records = await self.store.deploys(
            window.time_range, limit=MAX_LIMIT, service_name=args.service
        )
        if not records:
            await require_known_service(self.store, args.service)
        by_version = {r.version: r for r in records}
        if args.to_version is not None and args.to_version not in by_version:
            raise NotFound(
                f"to_version: {args.service} has no spans with version {args.to_version!r} in "
                "this window",
                hint="Use list_deploys(service) to see the versions seen, or widen the window.",
            )
        if args.from_version is not None and args.from_version not in by_version:
            raise NotFound(
                f"from_version: {args.service} has no spans with version "
                f"{args.from_version!r} in this window",
                hint="Use list_deploys(service) to see the versions seen, or widen the window.",
            )
        ordered = sorted(records, key=lambda r: r.first_seen_unix_nano)
        after = (
            by_version[args.to_version]
            if args.to_version is not None
            else (ordered[-1] if ordered else None)
        )
        before: DeployRecord | None
        if args.from_version is not None:
            before = by_version[args.from_version]
        else:
            older = [
                r
                for r in ordered
                if after is not None
                and r.first_seen_unix_nano < after.first_seen_unix_nano
                and r.version != after.version
            ]
            before = older[-1] if older else None
        if after is None or before is None or before.version == after.version:
            raise NotFound(
                f"{args.service} shows {len(records)} version(s) in this window; a comparison "
                "needs two",
                hint="Use list_deploys to find services with version changes, or widen the "
                "window; versions come from the service.version resource attribute.",
            )
        before_end = min(before.last_seen_unix_nano + 1, after.first_seen_unix_nano)
        if before_end <= before.first_seen_unix_nano:
            before_end = before.last_seen_unix_nano + 1
        windows = {
            "before": TimeRange(
                start_unix_nano=before.first_seen_unix_nano, end_unix_nano=before_end
            ),
            "after": TimeRange(
                start_unix_nano=after.first_seen_unix_nano,
                end_unix_nano=after.last_seen_unix_nano + 1,
            ),
        }
        sides: dict[str, JsonObject] = {}
        operations: dict[str, dict[str, JsonObject]] = {}
        read: list[ServiceSummary | OperationSummary] = []
        for side, tr in windows.items():
            # This service's RED alone (not every service's, to keep one).
            summaries = (await self.store.services(tr, limit=1, service_name=args.service)).items
            red = summaries[0] if summaries else None
            read += [red] if red is not None else []
            sides[side] = {
                "version": (before if side == "before" else after).version,
                "window": {
                    "start": rfc3339(tr.start_unix_nano),
                    "end": rfc3339(tr.end_unix_nano),
                },
                "red": None if red is None else service_row(red, tr),
            }
            ops = await self.store.operations(args.service, tr, limit=20)
            read += ops.items
            for op in ops.items:
                operations.setdefault(op.name, {})[side] = {
                    "span_count": op.span_count,
                    "error_count": op.error_count,
                    "p95_ms": ms(op.p95_duration_ns),
                }
        change: JsonObject = {}
        red_before = sides["before"]["red"]
        red_after = sides["after"]["red"]
        if isinstance(red_before, dict) and isinstance(red_after, dict):
            for key in ("error_rate", "p50_ms", "p95_ms", "p99_ms"):
                old, new = red_before.get(key), red_after.get(key)
                if isinstance(old, int | float) and isinstance(new, int | float):
                    change[f"{key}_delta"] = round(new - old, 4)
        body: JsonObject = {
            "service": args.service,
            "window": window.as_json(),
            "from_version": before.version,
            "to_version": after.version,
            "before": sides["before"],
            "after": sides["after"],
            "change": change,
            "operations": [
                {"name": shorten(name, _MAX_NAME_CHARS), **values}
                for name, values in sorted(operations.items(), key=lambda item: item[0])
            ],
            "truncated": False,
            "note": "each side covers the time its version was seen; traffic mix may differ",
            **percentile_error(read),
        }
        return Shaped(body, [Trimmable(("operations",))])

    # -- problems -----------------------------------------------------------------------------

    async def problems_of(self, service: str | None, window: TimeRange) -> JsonObject:
        """``{"problems": [...]}`` overlapping ``window`` (involving ``service``), or a note."""
        stored = await self.problems.load()
        if stored is None:
            return {"problems": [], "problems_note": NO_DETECTION_NOTE}
        chosen = [p for p in involving(stored, service) if in_window(p, window)]
        return {"problems": [problem_row(p) for p in chosen[:_MAX_PROBLEM_ROWS]]}

    async def list_problems(self, args: ListProblemsArgs, ctx: CallContext) -> Shaped:
        """``list_problems``: the detector's problems overlapping the window, newest first."""
        pager = self._pager("list_problems", args, args.cursor)
        window = pager.window
        stored = await self.problems.load()
        body: JsonObject = {"window": window.as_json()}
        if not stored or not involving(stored, args.service):
            await require_known_service(self.store, args.service)
        if stored is None:
            body.update(
                problems=[],
                total=0,
                truncated=False,
                detection_available=False,
                note=NO_DETECTION_NOTE,
            )
            return Shaped(body)
        chosen = [p for p in involving(stored, args.service) if in_window(p, window.time_range)]
        page = pager.page(chosen, args.limit)
        body.update(
            problems=[problem_row(p) for p in page.items],
            total=len(chosen),
            truncated=page.more,
            detection_available=True,
            detected_by=DETECTED_BY,
        )
        page.add_cursor(body)
        if not chosen:
            body["note"] = (
                f"the detector stored {len(stored)} problem(s), none in this window"
                + (f" involving {args.service}" if args.service else "")
                + "; widen the window to see older ones"
            )
        else:
            body["next"] = "get_problem(problem_id) for its ranking, anomalies and samples"
        return Shaped(body, [page.trimmable("problems")])

    async def get_problem(self, args: GetProblemArgs, ctx: CallContext) -> Shaped:
        """``get_problem``: one stored problem, origin ranking and strongest evidence first.

        An id a later detection run merged into another problem answers that problem (see
        :func:`.problems.problem_page`); ``service`` narrows to one of its services; ``cursor``
        continues the anomalies.
        """
        stored = await self.problems.load()
        if stored is None:
            raise NotFound(
                f"no problem {args.problem_id[:64]!r}: no problem detection has run on this "
                "data yet",
                hint="Use get_service (likely_origin), list_services and search_logs with "
                "min_severity ERROR to investigate instead.",
            )
        query = fingerprint(args)
        offset = 0
        if args.cursor is not None:
            offset = decode_cursor(args.cursor, tool="get_problem", query=query).offset
        problem = find_problem(stored, args.problem_id)
        if problem is None:
            raise NotFound(
                f"no problem {args.problem_id[:64]!r} among the {len(stored)} stored",
                hint="Use list_problems (with a wider window) to find problem ids.",
            )
        if args.service is not None and args.service not in problem.services:
            raise NotFound(
                f"service: {args.service[:64]!r} is not one of the {len(problem.services)} "
                f"services of problem {problem.problem_id}",
                hint=f"Omit service for the whole problem. Its services: "
                f"{shorten(', '.join(problem.services), 200)}",
            )

        def cursor_at(position: int) -> str:
            return encode_cursor(CursorState(tool="get_problem", query=query, offset=position))

        return problem_page(
            problem,
            requested_id=args.problem_id,
            service=args.service,
            offset=offset,
            cursor_at=cursor_at,
        )

    async def list_anomalies(self, args: ListAnomaliesArgs, ctx: CallContext) -> Shaped:
        """``list_anomalies``: the anomalies of the stored problems in the window."""
        pager = self._pager("list_anomalies", args, args.cursor)
        window = pager.window
        stored = await self.problems.load()
        body: JsonObject = {"window": window.as_json()}
        if not stored or not involving(stored, args.service):
            await require_known_service(self.store, args.service)
        if stored is None:
            body.update(
                anomalies=[],
                total=0,
                truncated=False,
                detection_available=False,
                note=NO_DETECTION_NOTE,
            )
            return Shaped(body)
        tr = window.time_range
        found = [
            {"problem_id": p.problem_id, **anomaly_row(a)}
            for p in stored
            for a in p.anomalies
            if (args.service is None or a.service_name == args.service)
            and a.start_unix_nano < tr.end_unix_nano
            and a.end_unix_nano >= tr.start_unix_nano
        ]
        found.sort(key=lambda row: str(row["start"]), reverse=True)
        page = pager.page(found, args.limit)
        body.update(
            anomalies=page.items,
            total=len(found),
            truncated=page.more,
            detection_available=True,
            detected_by=DETECTED_BY,
        )
        page.add_cursor(body)
        return Shaped(body, [page.trimmable("anomalies")])
