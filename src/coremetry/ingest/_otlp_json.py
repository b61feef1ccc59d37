"""Wire types: OTLP's JSON encoding of the Export*ServiceRequest messages (msgspec Structs).

They mirror ``opentelemetry-proto`` v1.x (``collector/{trace,logs,metrics}/v1/*_service.proto``
and the messages they use) under OTLP's JSON mapping
(https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):

- keys are lowerCamelCase (``rename="camel"``);
- ``traceId`` / ``spanId`` are hex strings, not base64;
- enums are integers;
- 64-bit integers arrive as decimal strings or numbers (``int | str``), doubles as numbers or
  the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (``float | str``);
- unknown fields are ignored (tolerant readers: ``forbid_unknown_fields`` stays off), as the
  OTLP spec requires of receivers.

Every field has a default, so absent fields decode as their proto3 defaults. Only the fields the
decoders use are declared ("decode only the fields you need"). Conversion to the store's domain
records is in :mod:`coremetry.ingest.otlp`.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "AnyValue",
    "ArrayValue",
    "ExponentialBuckets",
    "ExponentialHistogram",
    "ExponentialHistogramDataPoint",
    "ExportLogsPartialSuccess",
    "ExportLogsServiceRequest",
    "ExportLogsServiceResponse",
    "ExportMetricsPartialSuccess",
    "ExportMetricsServiceRequest",
    "ExportMetricsServiceResponse",
    "ExportTracePartialSuccess",
    "ExportTraceServiceRequest",
    "ExportTraceServiceResponse",
    "Gauge",
    "Histogram",
    "HistogramDataPoint",
    "InstrumentationScope",
    "KeyValue",
    "KeyValueList",
    "LogRecord",
    "Metric",
    "NumberDataPoint",
    "Resource",
    "ResourceLogs",
    "ResourceMetrics",
    "ResourceSpans",
    "RpcStatus",
    "ScopeLogs",
    "ScopeMetrics",
    "ScopeSpans",
    "Span",
    "SpanEvent",
    "SpanLink",
    "Status",
    "Sum",
    "Summary",
    "SummaryDataPoint",
    "ValueAtQuantile",
]


class _Wire(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """Base of the OTLP JSON wire Structs (STYLE.md habit 3)."""


# ---- common.proto / resource.proto -------------------------------------------------------------


class AnyValue(_Wire):
    """``AnyValue``: exactly one of the fields is set (none set is an empty value)."""

    string_value: str | None = None
    bool_value: bool | None = None
    int_value: int | str | None = None
    double_value: float | str | None = None
    array_value: ArrayValue | None = None
    kvlist_value: KeyValueList | None = None
    bytes_value: str | None = None
    """Base64 (proto3 JSON mapping of ``bytes``)."""


class ArrayValue(_Wire):
    """``ArrayValue``."""

    values: list[AnyValue] = msgspec.field(default_factory=list)


class KeyValue(_Wire):
    """``KeyValue``."""

    key: str = ""
    value: AnyValue = msgspec.field(default_factory=AnyValue)


class KeyValueList(_Wire):
    """``KeyValueList``."""

    values: list[KeyValue] = msgspec.field(default_factory=list)


class Resource(_Wire):
    """``Resource``."""

    attributes: list[KeyValue] = msgspec.field(default_factory=list)


class InstrumentationScope(_Wire):
    """``InstrumentationScope``."""

    name: str = ""
    version: str = ""


class _Resourced(_Wire):
    """What ``Resource{Spans,Logs,Metrics}`` share: the resource."""

    resource: Resource = msgspec.field(default_factory=Resource)


class _Scoped(_Wire):
    """What ``Scope{Spans,Logs,Metrics}`` share: the instrumentation scope."""

    scope: InstrumentationScope = msgspec.field(default_factory=InstrumentationScope)


# ---- trace.proto -------------------------------------------------------------------------------


class SpanEvent(_Wire):
    """``Span.Event``."""

    time_unix_nano: int | str = 0
    name: str = ""
    attributes: list[KeyValue] = msgspec.field(default_factory=list)


class SpanLink(_Wire):
    """``Span.Link``."""

    trace_id: str = ""
    span_id: str = ""
    attributes: list[KeyValue] = msgspec.field(default_factory=list)


class Status(_Wire):
    """``Status``."""

    message: str = ""
    code: int = 0


class Span(_Wire):
    """``Span``."""

    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    name: str = ""
    kind: int = 0
    start_time_unix_nano: int | str = 0
    end_time_unix_nano: int | str = 0
    attributes: list[KeyValue] = msgspec.field(default_factory=list)
    events: list[SpanEvent] = msgspec.field(default_factory=list)
    links: list[SpanLink] = msgspec.field(default_factory=list)
    status: Status = msgspec.field(default_factory=Status)


class ScopeSpans(_Scoped):
    """``ScopeSpans``."""

    spans: list[Span] = msgspec.field(default_factory=list)


class ResourceSpans(_Resourced):
    """``ResourceSpans``."""

    scope_spans: list[ScopeSpans] = msgspec.field(default_factory=list)


class ExportTraceServiceRequest(_Wire):
    """``ExportTraceServiceRequest`` (the body of ``POST /v1/traces``)."""

    resource_spans: list[ResourceSpans] = msgspec.field(default_factory=list)


# ---- logs.proto --------------------------------------------------------------------------------


class LogRecord(_Wire):
    """``LogRecord``."""

    time_unix_nano: int | str = 0
    observed_time_unix_nano: int | str = 0
    severity_number: int = 0
    severity_text: str = ""
    body: AnyValue | None = None
    attributes: list[KeyValue] = msgspec.field(default_factory=list)
    trace_id: str = ""
    span_id: str = ""
    event_name: str = ""


class ScopeLogs(_Scoped):
    """``ScopeLogs``."""

    log_records: list[LogRecord] = msgspec.field(default_factory=list)


class ResourceLogs(_Resourced):
    """``ResourceLogs``."""

    scope_logs: list[ScopeLogs] = msgspec.field(default_factory=list)


class ExportLogsServiceRequest(_Wire):
    """``ExportLogsServiceRequest`` (the body of ``POST /v1/logs``)."""

    resource_logs: list[ResourceLogs] = msgspec.field(default_factory=list)


# ---- metrics.proto -----------------------------------------------------------------------------


class _DataPoint(_Wire):
    """What every data point has: attributes, times (unix ns) and ``DataPointFlags``."""

    attributes: list[KeyValue] = msgspec.field(default_factory=list)
    start_time_unix_nano: int | str = 0
    time_unix_nano: int | str = 0
    flags: int = 0


class NumberDataPoint(_DataPoint):
    """``NumberDataPoint``: ``asDouble`` or ``asInt``."""

    as_double: float | str | None = None
    as_int: int | str | None = None


class _HistogramDataPoint(_DataPoint):
    """What both histogram data points have beside their buckets."""

    count: int | str = 0
    sum: float | str | None = None
    min: float | str | None = None
    max: float | str | None = None


class HistogramDataPoint(_HistogramDataPoint):
    """``HistogramDataPoint``."""

    bucket_counts: list[int | str] = msgspec.field(default_factory=list)
    explicit_bounds: list[float | str] = msgspec.field(default_factory=list)


class ExponentialBuckets(_Wire):
    """``ExponentialHistogramDataPoint.Buckets``."""

    offset: int = 0
    bucket_counts: list[int | str] = msgspec.field(default_factory=list)


class ExponentialHistogramDataPoint(_HistogramDataPoint):
    """``ExponentialHistogramDataPoint``."""

    scale: int = 0
    zero_count: int | str = 0
    positive: ExponentialBuckets = msgspec.field(default_factory=ExponentialBuckets)
    negative: ExponentialBuckets = msgspec.field(default_factory=ExponentialBuckets)
    zero_threshold: float | str = 0.0


class ValueAtQuantile(_Wire):
    """``SummaryDataPoint.ValueAtQuantile``."""

    quantile: float | str = 0.0
    value: float | str = 0.0


class SummaryDataPoint(_DataPoint):
    """``SummaryDataPoint``."""

    count: int | str = 0
    sum: float | str = 0.0
    quantile_values: list[ValueAtQuantile] = msgspec.field(default_factory=list)


class Gauge(_Wire):
    """``Gauge``."""

    data_points: list[NumberDataPoint] = msgspec.field(default_factory=list)


class Sum(_Wire):
    """``Sum``."""

    data_points: list[NumberDataPoint] = msgspec.field(default_factory=list)
    aggregation_temporality: int = 0
    is_monotonic: bool = False


class Histogram(_Wire):
    """``Histogram``."""

    data_points: list[HistogramDataPoint] = msgspec.field(default_factory=list)
    aggregation_temporality: int = 0


class ExponentialHistogram(_Wire):
    """``ExponentialHistogram``."""

    data_points: list[ExponentialHistogramDataPoint] = msgspec.field(default_factory=list)
    aggregation_temporality: int = 0


class Summary(_Wire):
    """``Summary``."""

    data_points: list[SummaryDataPoint] = msgspec.field(default_factory=list)


class Metric(_Wire):
    """``Metric``: one of gauge, sum, histogram, exponentialHistogram or summary is set."""

    name: str = ""
    description: str = ""
    unit: str = ""
    gauge: Gauge | None = None
    sum: Sum | None = None
    histogram: Histogram | None = None
    exponential_histogram: ExponentialHistogram | None = None
    summary: Summary | None = None


class ScopeMetrics(_Scoped):
    """``ScopeMetrics``."""

    metrics: list[Metric] = msgspec.field(default_factory=list)


class ResourceMetrics(_Resourced):
    """``ResourceMetrics``."""

    scope_metrics: list[ScopeMetrics] = msgspec.field(default_factory=list)


class ExportMetricsServiceRequest(_Wire):
    """``ExportMetricsServiceRequest`` (the body of ``POST /v1/metrics``)."""

    resource_metrics: list[ResourceMetrics] = msgspec.field(default_factory=list)


# ---- responses (collector/*/v1/*_service.proto) ------------------------------------------------


class ExportTracePartialSuccess(_Wire):
    """``ExportTracePartialSuccess``; ``rejectedSpans`` is an int64, sent as a string."""

    rejected_spans: str = "0"
    error_message: str = ""


class ExportTraceServiceResponse(_Wire):
    """``ExportTraceServiceResponse``; ``partialSuccess`` unset on full success (OTLP spec)."""

    partial_success: ExportTracePartialSuccess | None = None


class ExportLogsPartialSuccess(_Wire):
    """``ExportLogsPartialSuccess``."""

    rejected_log_records: str = "0"
    error_message: str = ""


class ExportLogsServiceResponse(_Wire):
    """``ExportLogsServiceResponse``."""

    partial_success: ExportLogsPartialSuccess | None = None


class ExportMetricsPartialSuccess(_Wire):
    """``ExportMetricsPartialSuccess``."""

    rejected_data_points: str = "0"
    error_message: str = ""


class ExportMetricsServiceResponse(_Wire):
    """``ExportMetricsServiceResponse``."""

    partial_success: ExportMetricsPartialSuccess | None = None


class RpcStatus(_Wire):
    """``google.rpc.Status``: the body of every OTLP/HTTP 4xx/5xx answer (JSON encoding).

    OTLP does not use ``code`` (clients must not act on it); we send the gRPC code that fits
    (3 ``INVALID_ARGUMENT``, 16 ``UNAUTHENTICATED``, ...) for troubleshooting.
    """

    code: int = 0
    message: str = ""
