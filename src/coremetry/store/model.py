"""Telemetry records in OpenTelemetry's data model: the store's domain types.

These are *domain* types (STYLE.md habit 2): what the store keeps and returns. They are not
wire types — OTLP's protobuf/JSON shapes live in ``coremetry.ingest`` and are converted to
these at the edge; the protocol core never sees them.

Conventions (all from the OpenTelemetry data model and semantic conventions):

- Times are ``*_unix_nano: int`` (nanoseconds since the Unix epoch, UTC), as in OTLP.
  Durations are nanoseconds (``duration_ns``) unless a name says otherwise.
- ``trace_id`` is 32 lowercase hex characters, ``span_id`` 16; an absent id is ``""``
  (OTLP sends absent ids as empty bytes). Ids are normalised by :func:`normalize_trace_id` /
  :func:`normalize_span_id` at ingest.
- ``service_name`` is the resource attribute ``service.name``; a record without one gets
  :data:`UNKNOWN_SERVICE` (``unknown_service``, the OTel SDK default).
- Attributes are flat: nested ``kvlistValue`` maps are flattened to dotted keys at ingest,
  bytes become base64 text, and values are scalars or homogeneous lists of scalars.

Sources: OTLP ``trace.proto`` / ``logs.proto`` / ``metrics.proto`` (opentelemetry-proto
v1.x); https://opentelemetry.io/docs/specs/otel/logs/data-model/ ;
https://opentelemetry.io/docs/specs/otel/metrics/data-model/ ;
https://opentelemetry.io/docs/specs/semconv/resource/#service .
"""

from __future__ import annotations

import enum
import re
from typing import Final, Literal, TypeAlias

import msgspec

__all__ = [
    "UNKNOWN_SERVICE",
    "AttributeScalar",
    "AttributeValue",
    "Attributes",
    "AggregationTemporality",
    "HistogramValue",
    "LogRecord",
    "MetricPoint",
    "MetricType",
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanLink",
    "StatusCode",
    "TelemetryBatch",
    "normalize_span_id",
    "normalize_trace_id",
]

UNKNOWN_SERVICE: Final = "unknown_service"
"""``service.name`` given to records that carry none (the OpenTelemetry SDK default)."""

AttributeScalar: TypeAlias = str | bool | int | float
"""One attribute value: OTLP ``AnyValue`` string/bool/int/double (bytes arrive as base64 text)."""

AttributeValue: TypeAlias = AttributeScalar | list[AttributeScalar]
"""An attribute value: a scalar or a list of scalars (OTLP ``arrayValue``)."""

Attributes: TypeAlias = dict[str, AttributeValue]
"""Flat attribute map, keys as sent (OTel semantic-convention names such as ``http.route``)."""


class SpanKind(enum.IntEnum):
    """OTLP ``Span.SpanKind`` (trace.proto); the numeric values are the wire values."""

    UNSPECIFIED = 0
    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.IntEnum):
    """OTLP ``Status.StatusCode`` (trace.proto): only ``ERROR`` marks a failed span."""

    UNSET = 0
    OK = 1
    ERROR = 2


MetricType: TypeAlias = Literal["gauge", "sum", "histogram"]
"""OTLP metric data kinds the store keeps. Summaries and exponential histograms are
converted or rejected at ingest (the importer says which, with a reason)."""

AggregationTemporality: TypeAlias = Literal["unspecified", "delta", "cumulative"]
"""OTLP ``AggregationTemporality`` for sums and histograms."""


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A timestamped event on a span (OTLP ``Span.Event``), e.g. ``exception``."""

    time_unix_nano: int
    name: str
    attributes: Attributes = msgspec.field(default_factory=dict)


class SpanLink(msgspec.Struct, frozen=True, kw_only=True):
    """A link from a span to another span (OTLP ``Span.Link``)."""

    trace_id: str
    span_id: str
    attributes: Attributes = msgspec.field(default_factory=dict)


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """One span (OTLP ``Span`` plus its resource's ``service.name``).

    Identity is ``(trace_id, span_id)``: writing the same pair twice keeps one span (the
    store is idempotent on it). ``parent_span_id == ""`` marks a root span. A span may start
    before its parent (clock skew between hosts); the store keeps times as sent.
    """

    trace_id: str
    span_id: str
    parent_span_id: str = ""
    service_name: str = UNKNOWN_SERVICE
    name: str
    kind: SpanKind = SpanKind.UNSPECIFIED
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    attributes: Attributes = msgspec.field(default_factory=dict)
    resource_attributes: Attributes = msgspec.field(default_factory=dict)
    events: list[SpanEvent] = msgspec.field(default_factory=list)
    links: list[SpanLink] = msgspec.field(default_factory=list)
    scope_name: str = ""
    """Instrumentation scope name (OTLP ``InstrumentationScope.name``)."""

    @property
    def duration_ns(self) -> int:
        """End minus start in nanoseconds, never negative (corrupt ends clamp to 0)."""
        return max(0, self.end_time_unix_nano - self.start_time_unix_nano)

    @property
    def service_version(self) -> str:
        """The resource attribute ``service.version`` as text, ``""`` when absent."""
        value = self.resource_attributes.get("service.version", "")
        return value if isinstance(value, str) else str(value)


class LogRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One log record (OTel logs data model).

    ``time_unix_nano`` is the event time; when a source has none (or a corrupt one) the
    importer uses ``observed_time_unix_nano`` and says so. ``severity_number`` follows the
    OTel scale (1-4 TRACE, 5-8 DEBUG, 9-12 INFO, 13-16 WARN, 17-20 ERROR, 21-24 FATAL;
    0 unspecified); ``severity_text`` is the source's own level text. Non-string bodies are
    kept as their JSON text.
    """

    time_unix_nano: int
    observed_time_unix_nano: int = 0
    severity_number: int = 0
    severity_text: str = ""
    body: str = ""
    service_name: str = UNKNOWN_SERVICE
    trace_id: str = ""
    span_id: str = ""
    attributes: Attributes = msgspec.field(default_factory=dict)
    resource_attributes: Attributes = msgspec.field(default_factory=dict)
    scope_name: str = ""


class HistogramValue(msgspec.Struct, frozen=True, kw_only=True):
    """An explicit-bucket histogram data point's value (OTLP ``HistogramDataPoint``).

    ``bucket_counts`` has ``len(explicit_bounds) + 1`` entries; bucket ``i`` counts values in
    ``(explicit_bounds[i-1], explicit_bounds[i]]`` (OTLP's upper-inclusive rule).
    """

    count: int
    sum: float | None = None
    bucket_counts: list[int] = msgspec.field(default_factory=list)
    explicit_bounds: list[float] = msgspec.field(default_factory=list)
    min: float | None = None
    max: float | None = None


class MetricPoint(msgspec.Struct, frozen=True, kw_only=True):
    """One metric data point with its metric's metadata (OTLP ``Metric`` + one data point).

    A *series* is ``(name, service_name, attributes)``; its points are unique by
    ``time_unix_nano`` (writing the same point twice keeps one). ``value`` is set for gauges
    and sums and may be NaN or ±Inf (kept as sent; aggregations skip NaN); ``histogram`` is
    set for histograms. ``attributes`` are the point's labels; ``resource_attributes`` the
    emitting resource's.
    """

    name: str
    type: MetricType
    time_unix_nano: int
    unit: str = ""
    description: str = ""
    service_name: str = UNKNOWN_SERVICE
    attributes: Attributes = msgspec.field(default_factory=dict)
    resource_attributes: Attributes = msgspec.field(default_factory=dict)
    start_time_unix_nano: int = 0
    value: float | None = None
    histogram: HistogramValue | None = None
    is_monotonic: bool = False
    temporality: AggregationTemporality = "unspecified"


class TelemetryBatch(msgspec.Struct, kw_only=True):
    """What one write carries: one OTLP request, or one chunk of an imported file.

    A batch is written in one transaction: all of it or none of it.
    """

    spans: list[Span] = msgspec.field(default_factory=list)
    logs: list[LogRecord] = msgspec.field(default_factory=list)
    metrics: list[MetricPoint] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.spans) + len(self.logs) + len(self.metrics)


_HEX = re.compile(r"[0-9a-f]*")


def _normalize_id(raw: str, width: int, what: str) -> str:
    text = raw.strip().lower()
    if not text:
        return ""
    if len(text) > width or _HEX.fullmatch(text) is None:
        raise ValueError(f"{what} must be up to {width} hex characters, got {raw!r}")
    if int(text, 16) == 0:
        return ""  # all-zero ids are invalid in OTel: treat as absent
    return text.rjust(width, "0")


def normalize_trace_id(raw: str) -> str:
    """Return a trace id as 32 lowercase hex characters (``""`` for absent/all-zero).

    Shorter hex ids (Zipkin's 64-bit ids) are left-padded with zeros, as Zipkin and the OTel
    Zipkin receiver do.

    Raises:
        ValueError: ``raw`` is not hex or is longer than 32 characters.
    """
    return _normalize_id(raw, 32, "trace_id")


def normalize_span_id(raw: str) -> str:
    """Return a span id as 16 lowercase hex characters (``""`` for absent/all-zero).

    Raises:
        ValueError: ``raw`` is not hex or is longer than 16 characters.
    """
    return _normalize_id(raw, 16, "span_id")
