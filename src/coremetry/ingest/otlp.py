"""OTLP decoders: Export{Trace,Logs,Metrics}ServiceRequest, protobuf and JSON, to store records.

Protobuf bodies are parsed with the official ``opentelemetry-proto`` messages; JSON bodies with
the msgspec wire Structs of :mod:`coremetry.ingest._otlp_json` (OTLP's JSON mapping: hex ids,
64-bit integers as strings or numbers, integer enums). Both produce the same records.

Mapping (OTLP data model -> :mod:`coremetry.store.model`):

- ``service_name`` is the resource's ``service.name`` (``unknown_service`` when absent);
  resource attributes are kept whole on every record; ``scope_name`` is the scope's name.
- Attributes are flattened: a ``kvlistValue`` becomes dotted keys (``map.attribute`` holding
  ``{"some.map.key": "v"}`` -> ``map.attribute.some.map.key = "v"``); ``bytesValue`` becomes
  base64 text; an array keeps its scalar elements, and a nested array or map element becomes its
  JSON text; an empty value is left out.
- A log record's non-string body is stored as its JSON text (a ``kvlistValue`` body as a JSON
  object); ``eventName`` is kept as the attribute ``event.name``; a severity number of 0 with a
  known level text (``WARN``) gets that level's number.
- Gauges and sums keep their type, monotonicity and temporality; explicit-bucket histograms are
  kept; **exponential histograms are converted** to explicit buckets (bucket ``i`` of scale
  ``s`` covers ``(2^(i/2^s), 2^((i+1)/2^s)]``; the zero bucket's upper bound is the zero
  threshold); **summaries are converted** to one gauge point per quantile (attribute
  ``quantile``) plus cumulative sums ``<name>_sum`` and ``<name>_count`` -- the shape a
  Prometheus summary has.

Rejected items (see :class:`~coremetry.ingest.Decoded`; the rest of the request is kept):
spans without a trace id, span id or sane start time; log records with neither a sane
``timeUnixNano`` nor a sane ``observedTimeUnixNano``; data points without a sane time or a
value, flagged "no recorded value", or histograms whose bucket counts do not match their
bounds; ids of the wrong length and numbers that do not parse. Stored after adjusting, with a
note: a span whose end time is missing or corrupt (duration 0), a span whose end is before its
start (duration 0: a clock stepped back while it ran; its start and place in the trace are
kept), a log record whose event time is missing or corrupt (its observed time is used),
malformed trace/span ids on a log record (dropped). Clock skew (a child starting before its
parent) is kept as sent. Records dated too far in the future are refused after decoding
(:meth:`~coremetry.ingest.Decoded.refuse_future`), by the receiver and the importer.

A JSON body whose top-level keys are all another message's (a logs request posted to
``/v1/metrics``) is refused naming the key expected; protobuf cannot tell (unknown fields are
skipped by the protobuf rules, so such a body is an empty request).

A body that cannot be decoded at all raises :class:`~coremetry.ingest.MalformedInput` and
nothing of it is kept.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Generic, Protocol, TypeVar

import msgspec
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from coremetry.ingest import _otlp_json as wire
from coremetry.ingest._convert import (
    MAX_UNIX_NANO,
    ItemRejected,
    base64_text,
    bytes_span_id,
    bytes_trace_id,
    hex_span_id,
    hex_trace_id,
    is_sane_time,
    parse_float,
    parse_int,
    scalar_text,
    service_name_of,
    severity_number_from_text,
)
from coremetry.ingest.decoded import Decoded, Signal
from coremetry.ingest.errors import MalformedInput
from coremetry.store.model import (
    AggregationTemporality,
    Attributes,
    AttributeScalar,
    AttributeValue,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

__all__ = [
    "SENDER_WARNINGS",
    "decode_logs_json",
    "decode_logs_protobuf",
    "decode_metrics_json",
    "decode_metrics_protobuf",
    "decode_otlp_json_document",
    "decode_traces_json",
    "decode_traces_protobuf",
]

_KINDS: Final = tuple(SpanKind)
_STATUS: Final = tuple(StatusCode)
_TEMPORALITY: Final[tuple[AggregationTemporality, ...]] = ("unspecified", "delta", "cumulative")
_NO_RECORDED_VALUE: Final = 1
"""``DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`` (metrics.proto)."""

SPAN_START_UNUSABLE: Final = "span start time is missing or outside 1970..2262"
SPAN_END_ADJUSTED: Final = "span end time missing or corrupt; stored with duration 0"
SPAN_END_BEFORE_START: Final = (
    "span end time before its start time (a clock stepped back); stored with duration 0"
)
SPAN_NO_TRACE_ID: Final = "span has no trace_id"
SPAN_NO_SPAN_ID: Final = "span has no span_id"
LOG_TIME_UNUSABLE: Final = (
    "log record has no usable time (timeUnixNano and observedTimeUnixNano missing or "
    "outside 1970..2262)"
)
LOG_TIME_FROM_OBSERVED: Final = (
    "log record timeUnixNano missing or corrupt (outside 1970..2262); used observedTimeUnixNano"
)
LOG_IDS_DROPPED: Final = "log record trace_id/span_id malformed; stored without them"
POINT_TIME_UNUSABLE: Final = "data point time is missing or outside 1970..2262"
POINT_NO_VALUE: Final = "data point has no value"
POINT_NOT_RECORDED: Final = "data point flagged 'no recorded value'"
METRIC_NO_NAME: Final = "metric has no name"
EXPONENTIAL_CONVERTED: Final = "exponential histogram point converted to explicit buckets"
SUMMARY_CONVERTED: Final = (
    "summary point stored as one gauge per quantile plus <name>_sum and <name>_count"
)
SENDER_WARNINGS: Final = frozenset({SPAN_END_ADJUSTED, SPAN_END_BEFORE_START, LOG_IDS_DROPPED})
"""Notes the OTLP receiver also tells the sender (``partial_success`` with 0 rejected: a
warning): its data was wrong and was stored adjusted. Format conversions (exponential
histograms, summaries) and a log record timed by its observed time (the OTel log data model
allows that) are not warnings."""

W = TypeVar("W")


def _parse_pb(message: Message, body: bytes) -> None:
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        name = message.DESCRIPTOR.name
        raise MalformedInput(f"the body is not a protobuf {name}: {exc}") from None


def _parse_json(body: bytes, decoder: msgspec.json.Decoder[W], name: str) -> W:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise MalformedInput(f"the body is not an OTLP JSON {name}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedInput(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise MalformedInput("the body is nested too deeply") from None


_TOP_LEVEL: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SIGNAL_KEYS: Final = {
    "resourceSpans": ("ExportTraceServiceRequest", "/v1/traces"),
    "resourceLogs": ("ExportLogsServiceRequest", "/v1/logs"),
    "resourceMetrics": ("ExportMetricsServiceRequest", "/v1/metrics"),
}


def _check_top_level(body: bytes, expected: str) -> None:
    """Refuse a JSON body without ``expected`` that carries other top-level keys.

    Called only when the decoded request came out empty (so the cost is paid only then): an
    empty object ``{}`` is a valid, empty request, while ``{"resourceLogs": [...]}`` posted to
    ``/v1/metrics`` (or ``{"resource_spans": ...}``, snake_case) is a sender's mistake that
    would otherwise be answered 200 and dropped. The OTLP spec asks receivers to ignore unknown
    fields; we still do beside the expected key — a body with *nothing but* unknown keys holds
    no telemetry we could store, and saying so beats a silent success.

    Raises:
        MalformedInput: the body has top-level keys and none of them is ``expected``; the
            message names the expected key and where a found signal key belongs.
    """
    try:
        keys = list(_TOP_LEVEL.decode(body))
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return  # not an object: the typed decoder has already said what it accepts
    if not keys or expected in keys:
        return
    message, path = _SIGNAL_KEYS[expected]
    found = ", ".join(repr(k[:40]) for k in keys[:5])
    other = next((_SIGNAL_KEYS[k][1] for k in keys if k in _SIGNAL_KEYS), None)
    hint = f"; {found} belongs in a request to {other}" if other else ""
    if any("_" in k for k in keys):
        hint += "; OTLP JSON keys are lowerCamelCase"
    raise MalformedInput(
        f"the body has no {expected!r} (top-level keys: {found}): a {path} JSON body is an "
        f"{message}, {{{expected!r}: [...]}}{hint}"
    )


# ---- attributes: protobuf ----------------------------------------------------------------------


def _pb_plain(value: common_pb2.AnyValue) -> object:
    """An AnyValue as plain Python (for JSON text): maps stay maps."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "bytes_value":
        return base64_text(value.bytes_value)
    if which == "array_value":
        return [_pb_plain(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_plain(kv.value) for kv in value.kvlist_value.values}
    return None


def _pb_element(value: common_pb2.AnyValue) -> AttributeScalar | None:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "bytes_value":
        return base64_text(value.bytes_value)
    if which is None:
        return None
    return msgspec.json.encode(_pb_plain(value)).decode()


def _pb_attributes(pairs: Iterable[common_pb2.KeyValue]) -> Attributes:
    # The hot loop of protobuf ingest (bench/otlp_ingest.py): scalars inline, the rest aside.
    result: Attributes = {}
    for kv in pairs:
        value = kv.value
        which = value.WhichOneof("value")
        if which == "string_value":
            result[kv.key] = value.string_value
        elif which == "int_value":
            result[kv.key] = value.int_value
        elif which == "double_value":
            result[kv.key] = value.double_value
        elif which == "bool_value":
            result[kv.key] = value.bool_value
        elif which is not None:
            _pb_nested(result, kv.key, value, which)
    return result


def _pb_nested(result: Attributes, key: str, value: common_pb2.AnyValue, which: str) -> None:
    """Maps (flattened to dotted keys), arrays and bytes, into ``result``."""
    if which == "kvlist_value":
        for name, item in _pb_attributes(value.kvlist_value.values).items():
            result[f"{key}.{name}"] = item
    elif which == "array_value":
        items = [_pb_element(v) for v in value.array_value.values]
        result[key] = [v for v in items if v is not None]
    elif which == "bytes_value":
        result[key] = base64_text(value.bytes_value)


def _pb_body(record: logs_pb2.LogRecord) -> str:
    if not record.HasField("body"):
        return ""
    body = record.body
    if body.WhichOneof("value") == "string_value":
        return body.string_value
    plain = _pb_plain(body)
    if plain is None:
        return ""
    if isinstance(plain, str):
        return plain  # bytes: base64 text
    return msgspec.json.encode(plain).decode()


# ---- attributes: JSON --------------------------------------------------------------------------


def _json_plain(value: wire.AnyValue) -> object:
    if value.string_value is not None:
        return value.string_value
    if value.int_value is not None:
        return parse_int(value.int_value, "intValue")
    if value.double_value is not None:
        number = parse_float(value.double_value, "doubleValue")
        return number if math.isfinite(number) else scalar_text(number)
    if value.bool_value is not None:
        return value.bool_value
    if value.bytes_value is not None:
        return value.bytes_value
    if value.array_value is not None:
        return [_json_plain(v) for v in value.array_value.values]
    if value.kvlist_value is not None:
        return {kv.key: _json_plain(kv.value) for kv in value.kvlist_value.values}
    return None


def _json_element(value: wire.AnyValue) -> AttributeScalar | None:
    if value.string_value is not None:
        return value.string_value
    if value.int_value is not None:
        return parse_int(value.int_value, "intValue")
    if value.double_value is not None:
        return parse_float(value.double_value, "doubleValue")
    if value.bool_value is not None:
        return value.bool_value
    if value.bytes_value is not None:
        return value.bytes_value
    if value.array_value is None and value.kvlist_value is None:
        return None
    return msgspec.json.encode(_json_plain(value)).decode()


def _json_attributes(
    pairs: Sequence[wire.KeyValue], out: Attributes | None = None, prefix: str = ""
) -> Attributes:
    result: Attributes = {} if out is None else out
    for kv in pairs:
        value = kv.value
        if value.kvlist_value is not None:
            _json_attributes(value.kvlist_value.values, result, prefix + kv.key + ".")
            continue
        converted: AttributeValue | None
        if value.array_value is not None:
            items = [_json_element(v) for v in value.array_value.values]
            converted = [v for v in items if v is not None]
        else:
            converted = _json_element(value)
        if converted is not None:
            result[prefix + kv.key] = converted
    return result


def _json_body(body: wire.AnyValue | None) -> str:
    if body is None:
        return ""
    if body.string_value is not None:
        return body.string_value
    plain = _json_plain(body)
    if plain is None:
        return ""
    if isinstance(plain, str):
        return plain
    return msgspec.json.encode(plain).decode()


def _json_time(raw: int | str, what: str) -> int:
    return parse_int(raw, what)


# ---- the walk every request shares: resources -> scopes -> items -------------------------------


class _Resource(Protocol):
    """``Resource{Spans,Logs,Metrics}`` of protobuf."""

    @property
    def resource(self) -> resource_pb2.Resource: ...


def _pb_resource(resource: _Resource) -> Attributes:
    return _pb_attributes(resource.resource.attributes)


def _json_resource(resource: wire._Resourced) -> Attributes:
    return _json_attributes(resource.resource.attributes)


class _Named(Protocol):
    """``InstrumentationScope`` of either encoding."""

    @property
    def name(self) -> str: ...


class _Scope(Protocol):
    """``Scope{Spans,Logs,Metrics}`` of either encoding: its ``InstrumentationScope``."""

    @property
    def scope(self) -> _Named: ...


ResourceT = TypeVar("ResourceT")
ScopeT = TypeVar("ScopeT", bound=_Scope)
ItemT = TypeVar("ItemT")
RecordT = TypeVar("RecordT")


class _Layout(Generic[ResourceT, ScopeT, ItemT]):
    """How one signal nests in one encoding: resources, their scopes, the scopes' items.

    The three requests share one shape, ``resourceSpans[r].scopeSpans[s].spans[i]``,
    ``resourceLogs[r].scopeLogs[s].logRecords[i]``, ``resourceMetrics[r].scopeMetrics[s]
    .metrics[i]`` (OTLP trace.proto, logs.proto, metrics.proto); a layout holds the accessors of
    one of them in one encoding (protobuf messages or JSON wire Structs), so that one walk
    (:func:`_scopes`) serves the six decoders.

    Attributes:
        signal: what the items are counted and rejected as.
        keys: the JSON names of the three levels, for rejection paths.
        resource_attributes: a resource's attributes, converted; raises ``ItemRejected`` when
            one cannot be (only JSON can carry a bad value).
        scopes: a resource's scopes.
        items: a scope's items (spans, log records, metrics).
        points: metrics only: how many data points a metric holds (each is counted and
            rejected when its resource is refused; ``None``: one per item).
    """

    __slots__ = ("items", "keys", "points", "resource_attributes", "scopes", "signal")

    def __init__(
        self,
        signal: Signal,
        keys: tuple[str, str, str],
        resource_attributes: Callable[[ResourceT], Attributes],
        scopes: Callable[[ResourceT], Sequence[ScopeT]],
        items: Callable[[ScopeT], Sequence[ItemT]],
        points: Callable[[ItemT], int] | None = None,
    ) -> None:
        self.signal: Final = signal
        self.keys: Final = keys
        self.resource_attributes: Final = resource_attributes
        self.scopes: Final = scopes
        self.items: Final = items
        self.points: Final = points

    def where(self, r: int, s: int, i: int) -> str:
        """The JSON path of item ``i`` of scope ``s`` of resource ``r``."""
        resource, scope, item = self.keys
        return f"{resource}[{r}].{scope}[{s}].{item}[{i}]"


def _scopes(
    out: Decoded, layout: _Layout[ResourceT, ScopeT, ItemT], resources: Iterable[ResourceT]
) -> Iterator[tuple[int, int, ScopeT, str, Attributes]]:
    """Every scope of every resource: ``(r, s, scope, service_name, resource_attributes)``.

    ``service_name`` is the resource's ``service.name`` (``unknown_service`` when absent). A
    resource whose attributes are refused is not yielded: every item under it is counted read
    and rejected with the reason ``resource <why>`` -- a span or log record at its own path, a
    metric's data points at the resource's (``resourceMetrics[r]``).
    """
    signal, attributes_of, scopes_of = layout.signal, layout.resource_attributes, layout.scopes
    for r, resource in enumerate(resources):
        try:
            resource_attributes = attributes_of(resource)
        except ItemRejected as exc:
            reason = f"resource {exc.reason}"
            for s, scope in enumerate(layout.scopes(resource)):
                for i, item in enumerate(layout.items(scope)):
                    if layout.points is None:
                        out.count_read(signal)
                        out.reject(signal, reason, layout.where(r, s, i))
                        continue
                    for _ in range(layout.points(item)):
                        out.count_read(signal)
                        out.reject(signal, reason, f"{layout.keys[0]}[{r}]")
            continue
        service = service_name_of(resource_attributes)
        for s, scope in enumerate(scopes_of(resource)):
            yield r, s, scope, service, resource_attributes


def _decode_records(
    out: Decoded,
    layout: _Layout[ResourceT, ScopeT, ItemT],
    resources: Iterable[ResourceT],
    build: Callable[[Decoded, ItemT, str, Attributes, str], RecordT],
    records: list[RecordT],
) -> None:
    """Append ``build(out, item, service_name, resource_attributes, scope_name)`` of every item.

    Every item is counted read; one whose ``build`` raises ``ItemRejected`` is rejected with
    that reason at its path (``resourceSpans[r].scopeSpans[s].spans[i]``). Spans and log
    records; protobuf spans are the hot path of ingest (``bench/otlp_ingest.py``), so the item
    loop stays this plain.
    """
    signal, items_of, append = layout.signal, layout.items, records.append
    for r, s, scope, service, resource_attributes in _scopes(out, layout, resources):
        scope_name = scope.scope.name
        items = items_of(scope)
        if items:
            out.count_read(signal, len(items))
        for i, item in enumerate(items):
            try:
                append(build(out, item, service, resource_attributes, scope_name))
            except ItemRejected as exc:
                out.reject(signal, exc.reason, layout.where(r, s, i))


# ---- traces ------------------------------------------------------------------------------------


def _span(
    out: Decoded,
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    service_name: str,
    name: str,
    kind: int,
    start: int,
    end: int,
    status_code: int,
    status_message: str,
    attributes: Attributes,
    resource_attributes: Attributes,
    events: list[SpanEvent],
    links: list[SpanLink],
    scope_name: str,
) -> Span:
    if not trace_id:
        raise ItemRejected(SPAN_NO_TRACE_ID)
    if not span_id:
        raise ItemRejected(SPAN_NO_SPAN_ID)
    if not is_sane_time(start):
        raise ItemRejected(SPAN_START_UNUSABLE)
    if not is_sane_time(end):
        out.note(SPAN_END_ADJUSTED)
        end = start
    elif end < start:
        out.note(SPAN_END_BEFORE_START)
        end = start
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        service_name=service_name,
        name=name,
        kind=_KINDS[kind] if 0 <= kind < len(_KINDS) else SpanKind.UNSPECIFIED,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        status_code=_STATUS[status_code] if 0 <= status_code < len(_STATUS) else StatusCode.UNSET,
        status_message=status_message,
        attributes=attributes,
        resource_attributes=resource_attributes,
        events=events,
        links=links,
        scope_name=scope_name,
    )


def decode_traces_protobuf(body: bytes) -> Decoded:
    """Decode a protobuf ``ExportTraceServiceRequest`` (the body of ``POST /v1/traces``).

    Args:
        body: the uncompressed request body.

    Returns:
        The spans (in request order) and rejections; see the module docstring.

    Raises:
        MalformedInput: the body is not a protobuf ``ExportTraceServiceRequest``.
    """
    request = ExportTraceServiceRequest()
    _parse_pb(request, body)
    out = Decoded()
    _decode_records(out, _PB_SPANS, request.resource_spans, _pb_span, out.batch.spans)
    return out


def _pb_span(
    out: Decoded,
    span: trace_pb2.Span,
    service: str,
    resource_attributes: Attributes,
    scope_name: str,
) -> Span:
    # Same rules as _span (the JSON path), inlined: this is the hot path of protobuf ingest.
    trace_id = bytes_trace_id(span.trace_id)
    if not trace_id:
        raise ItemRejected(SPAN_NO_TRACE_ID)
    span_id = bytes_span_id(span.span_id)
    if not span_id:
        raise ItemRejected(SPAN_NO_SPAN_ID)
    start = span.start_time_unix_nano
    if not 0 < start <= MAX_UNIX_NANO:
        raise ItemRejected(SPAN_START_UNUSABLE)
    end = span.end_time_unix_nano
    if not 0 < end <= MAX_UNIX_NANO:
        out.note(SPAN_END_ADJUSTED)
        end = start
    elif end < start:
        out.note(SPAN_END_BEFORE_START)
        end = start
    kind = span.kind
    status = span.status
    code = status.code
    events = span.events
    links = span.links
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=bytes_span_id(span.parent_span_id, "parent_span_id"),
        service_name=service,
        name=span.name,
        kind=_KINDS[kind] if 0 <= kind < len(_KINDS) else SpanKind.UNSPECIFIED,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        status_code=_STATUS[code] if 0 <= code < len(_STATUS) else StatusCode.UNSET,
        status_message=status.message,
        attributes=_pb_attributes(span.attributes),
        resource_attributes=resource_attributes,
        events=[
            SpanEvent(
                time_unix_nano=event.time_unix_nano,
                name=event.name,
                attributes=_pb_attributes(event.attributes),
            )
            for event in events
        ]
        if events
        else [],
        links=[
            SpanLink(
                trace_id=bytes_trace_id(link.trace_id, "link trace_id"),
                span_id=bytes_span_id(link.span_id, "link span_id"),
                attributes=_pb_attributes(link.attributes),
            )
            for link in links
        ]
        if links
        else [],
        scope_name=scope_name,
    )


_TRACES_JSON: Final = msgspec.json.Decoder(wire.ExportTraceServiceRequest)


def decode_traces_json(body: bytes) -> Decoded:
    """Decode an OTLP JSON ``ExportTraceServiceRequest``.

    Raises:
        MalformedInput: the body is not JSON, or not shaped like the message (the message
            carries msgspec's ``- at `$.path``` location).
    """
    request = _parse_json(body, _TRACES_JSON, "ExportTraceServiceRequest")
    if not request.resource_spans:
        _check_top_level(body, "resourceSpans")
    return _traces_from_json(request)


def _traces_from_json(
    request: wire.ExportTraceServiceRequest, out: Decoded | None = None
) -> Decoded:
    result = Decoded() if out is None else out
    _decode_records(result, _JSON_SPANS, request.resource_spans, _json_span, result.batch.spans)
    return result


def _json_span(
    out: Decoded,
    span: wire.Span,
    service: str,
    resource_attributes: Attributes,
    scope_name: str,
) -> Span:
    events = [
        SpanEvent(
            time_unix_nano=_json_time(event.time_unix_nano, "event timeUnixNano"),
            name=event.name,
            attributes=_json_attributes(event.attributes),
        )
        for event in span.events
    ]
    links = [
        SpanLink(
            trace_id=hex_trace_id(link.trace_id, "link traceId"),
            span_id=hex_span_id(link.span_id, "link spanId"),
            attributes=_json_attributes(link.attributes),
        )
        for link in span.links
    ]
    return _span(
        out,
        trace_id=hex_trace_id(span.trace_id, "traceId"),
        span_id=hex_span_id(span.span_id, "spanId"),
        parent_span_id=hex_span_id(span.parent_span_id, "parentSpanId"),
        service_name=service,
        name=span.name,
        kind=span.kind,
        start=_json_time(span.start_time_unix_nano, "startTimeUnixNano"),
        end=_json_time(span.end_time_unix_nano, "endTimeUnixNano"),
        status_code=span.status.code,
        status_message=span.status.message,
        attributes=_json_attributes(span.attributes),
        resource_attributes=resource_attributes,
        events=events,
        links=links,
        scope_name=scope_name,
    )


_SPAN_KEYS: Final = ("resourceSpans", "scopeSpans", "spans")
_PB_SPANS: Final = _Layout[trace_pb2.ResourceSpans, trace_pb2.ScopeSpans, trace_pb2.Span](
    "span", _SPAN_KEYS, _pb_resource, lambda r: r.scope_spans, lambda s: s.spans
)
_JSON_SPANS: Final = _Layout[wire.ResourceSpans, wire.ScopeSpans, wire.Span](
    "span", _SPAN_KEYS, _json_resource, lambda r: r.scope_spans, lambda s: s.spans
)


# ---- logs --------------------------------------------------------------------------------------


def _log(
    out: Decoded,
    *,
    time: int,
    observed: int,
    severity_number: int,
    severity_text: str,
    body: str,
    service_name: str,
    ids: Callable[[], tuple[str, str]],
    attributes: Attributes,
    resource_attributes: Attributes,
    event_name: str,
    scope_name: str,
) -> LogRecord:
    if not is_sane_time(time):
        if not is_sane_time(observed):
            raise ItemRejected(LOG_TIME_UNUSABLE)
        out.note(LOG_TIME_FROM_OBSERVED)
        time = observed
    if not is_sane_time(observed):
        observed = 0
    if not 0 <= severity_number <= 24:
        severity_number = 0
    if severity_number == 0 and severity_text:
        severity_number = severity_number_from_text(severity_text)
    if event_name and "event.name" not in attributes:
        attributes["event.name"] = event_name
    try:
        trace_id, span_id = ids()
    except ItemRejected:
        out.note(LOG_IDS_DROPPED)
        trace_id = span_id = ""
    return LogRecord(
        time_unix_nano=time,
        observed_time_unix_nano=observed,
        severity_number=severity_number,
        severity_text=severity_text,
        body=body,
        service_name=service_name,
        trace_id=trace_id,
        span_id=span_id,
        attributes=attributes,
        resource_attributes=resource_attributes,
        scope_name=scope_name,
    )


def decode_logs_protobuf(body: bytes) -> Decoded:
    """Decode a protobuf ``ExportLogsServiceRequest`` (the body of ``POST /v1/logs``).

    Raises:
        MalformedInput: the body is not a protobuf ``ExportLogsServiceRequest``.
    """
    request = ExportLogsServiceRequest()
    _parse_pb(request, body)
    out = Decoded()
    _decode_records(out, _PB_LOGS, request.resource_logs, _pb_log, out.batch.logs)
    return out


def _pb_log(
    out: Decoded,
    record: logs_pb2.LogRecord,
    service: str,
    resource_attributes: Attributes,
    scope_name: str,
) -> LogRecord:
    return _log(
        out,
        time=record.time_unix_nano,
        observed=record.observed_time_unix_nano,
        severity_number=record.severity_number,
        severity_text=record.severity_text,
        body=_pb_body(record),
        service_name=service,
        ids=lambda: (bytes_trace_id(record.trace_id), bytes_span_id(record.span_id)),
        attributes=_pb_attributes(record.attributes),
        resource_attributes=resource_attributes,
        event_name=record.event_name,
        scope_name=scope_name,
    )


_LOGS_JSON: Final = msgspec.json.Decoder(wire.ExportLogsServiceRequest)


def decode_logs_json(body: bytes) -> Decoded:
    """Decode an OTLP JSON ``ExportLogsServiceRequest``.

    Raises:
        MalformedInput: the body is not JSON, or not shaped like the message.
    """
    request = _parse_json(body, _LOGS_JSON, "ExportLogsServiceRequest")
    if not request.resource_logs:
        _check_top_level(body, "resourceLogs")
    return _logs_from_json(request)


def _logs_from_json(request: wire.ExportLogsServiceRequest, out: Decoded | None = None) -> Decoded:
    result = Decoded() if out is None else out
    _decode_records(result, _JSON_LOGS, request.resource_logs, _json_log, result.batch.logs)
    return result


def _json_log(
    out: Decoded,
    record: wire.LogRecord,
    service: str,
    resource_attributes: Attributes,
    scope_name: str,
) -> LogRecord:
    return _log(
        out,
        time=_json_time(record.time_unix_nano, "timeUnixNano"),
        observed=_json_time(record.observed_time_unix_nano, "observedTimeUnixNano"),
        severity_number=record.severity_number,
        severity_text=record.severity_text,
        body=_json_body(record.body),
        service_name=service,
        ids=lambda: (
            hex_trace_id(record.trace_id, "traceId"),
            hex_span_id(record.span_id, "spanId"),
        ),
        attributes=_json_attributes(record.attributes),
        resource_attributes=resource_attributes,
        event_name=record.event_name,
        scope_name=scope_name,
    )


_LOG_KEYS: Final = ("resourceLogs", "scopeLogs", "logRecords")
_PB_LOGS: Final = _Layout[logs_pb2.ResourceLogs, logs_pb2.ScopeLogs, logs_pb2.LogRecord](
    "log", _LOG_KEYS, _pb_resource, lambda r: r.scope_logs, lambda s: s.log_records
)
_JSON_LOGS: Final = _Layout[wire.ResourceLogs, wire.ScopeLogs, wire.LogRecord](
    "log", _LOG_KEYS, _json_resource, lambda r: r.scope_logs, lambda s: s.log_records
)


# ---- metrics -----------------------------------------------------------------------------------


class _MetricContext(msgspec.Struct):
    """What every point of one metric shares, and where the metric is in the request.

    A Struct: made once per metric, cheaply; the metric's path is formatted only for a
    rejection.
    """

    name: str
    unit: str
    description: str
    service: str
    resource_attributes: Attributes
    r: int
    s: int
    m: int

    def where(self, kind: str, p: int) -> str:
        """The JSON path of the metric's data point ``p``; ``kind``: ``gauge``...``summary``."""
        resource, scope, metric = _METRIC_KEYS
        return f"{resource}[{self.r}].{scope}[{self.s}].{metric}[{self.m}].{kind}.dataPoints[{p}]"


def _point_times(time: int, start: int) -> tuple[int, int]:
    if not is_sane_time(time):
        raise ItemRejected(POINT_TIME_UNUSABLE)
    return time, start if is_sane_time(start) else 0


def _number_point(
    ctx: _MetricContext,
    *,
    kind: str,
    time: int,
    start: int,
    value: float | None,
    flags: int,
    attributes: Attributes,
    is_monotonic: bool = False,
    temporality: AggregationTemporality = "unspecified",
) -> MetricPoint:
    if flags & _NO_RECORDED_VALUE:
        raise ItemRejected(POINT_NOT_RECORDED)
    if value is None:
        raise ItemRejected(POINT_NO_VALUE)
    time, start = _point_times(time, start)
    return MetricPoint(
        name=ctx.name,
        type="sum" if kind == "sum" else "gauge",
        time_unix_nano=time,
        unit=ctx.unit,
        description=ctx.description,
        service_name=ctx.service,
        attributes=attributes,
        resource_attributes=ctx.resource_attributes,
        start_time_unix_nano=start,
        value=value,
        is_monotonic=is_monotonic,
        temporality=temporality,
    )


def _histogram_point(
    ctx: _MetricContext,
    *,
    time: int,
    start: int,
    flags: int,
    attributes: Attributes,
    histogram: HistogramValue,
    temporality: AggregationTemporality,
) -> MetricPoint:
    if flags & _NO_RECORDED_VALUE:
        raise ItemRejected(POINT_NOT_RECORDED)
    counts, bounds = histogram.bucket_counts, histogram.explicit_bounds
    if counts and len(counts) != len(bounds) + 1:
        raise ItemRejected("histogram bucketCounts must have one more entry than explicitBounds")
    if any(not a < b for a, b in itertools.pairwise(bounds)):
        raise ItemRejected("histogram explicitBounds must be strictly increasing")
    time, start = _point_times(time, start)
    return MetricPoint(
        name=ctx.name,
        type="histogram",
        time_unix_nano=time,
        unit=ctx.unit,
        description=ctx.description,
        service_name=ctx.service,
        attributes=attributes,
        resource_attributes=ctx.resource_attributes,
        start_time_unix_nano=start,
        histogram=histogram,
        temporality=temporality,
    )


def exponential_to_explicit(
    *,
    scale: int,
    zero_count: int,
    zero_threshold: float,
    positive_offset: int,
    positive_counts: Sequence[int],
    negative_offset: int,
    negative_counts: Sequence[int],
) -> tuple[list[int], list[float]]:
    """Explicit ``(bucket_counts, explicit_bounds)`` holding an exponential histogram's counts.

    OTLP ``ExponentialHistogramDataPoint``: with ``base = 2**(2**-scale)``, positive bucket
    ``offset + k`` covers ``(base**(offset+k), base**(offset+k+1)]``, negative buckets mirror
    them below zero, and the zero bucket holds ``[-zero_threshold, zero_threshold]``. Each
    exponential bucket becomes one explicit bucket with the same upper bound (the zero bucket's
    is ``zero_threshold``), plus the final overflow bucket (empty).

    Raises:
        ItemRejected: a bound overflows a double (a scale or offset no real SDK sends).
    """
    counts: list[int] = []
    bounds: list[float] = []
    try:
        base = 2.0 ** (2.0**-scale)
        for k in range(len(negative_counts) - 1, -1, -1):
            bounds.append(-(base ** (negative_offset + k)))
            counts.append(negative_counts[k])
        bounds.append(max(zero_threshold, 0.0))
        counts.append(zero_count)
        for k, count in enumerate(positive_counts):
            upper = base ** (positive_offset + k + 1)
            if upper <= bounds[-1]:  # a positive bucket inside the zero threshold: merge it
                counts[-1] += count
                continue
            bounds.append(upper)
            counts.append(count)
    except OverflowError:
        raise ItemRejected(
            "exponential histogram bucket bounds overflow a double (scale or offset too large)"
        ) from None
    counts.append(0)
    return counts, bounds


def _summary_points(
    ctx: _MetricContext,
    *,
    time: int,
    start: int,
    flags: int,
    attributes: Attributes,
    count: int,
    total: float,
    quantiles: Sequence[tuple[float, float]],
) -> list[MetricPoint]:
    if flags & _NO_RECORDED_VALUE:
        raise ItemRejected(POINT_NOT_RECORDED)
    time, start = _point_times(time, start)
    points = [
        MetricPoint(
            name=ctx.name,
            type="gauge",
            time_unix_nano=time,
            unit=ctx.unit,
            description=ctx.description,
            service_name=ctx.service,
            attributes={**attributes, "quantile": scalar_text(quantile)},
            resource_attributes=ctx.resource_attributes,
            start_time_unix_nano=start,
            value=value,
        )
        for quantile, value in quantiles
    ]
    for suffix, value in (("_sum", total), ("_count", float(count))):
        points.append(
            MetricPoint(
                name=ctx.name + suffix,
                type="sum",
                time_unix_nano=time,
                unit=ctx.unit if suffix == "_sum" else "",
                description=ctx.description,
                service_name=ctx.service,
                attributes=attributes,
                resource_attributes=ctx.resource_attributes,
                start_time_unix_nano=start,
                value=value,
                is_monotonic=True,
                temporality="cumulative",
            )
        )
    return points


def _temporality(raw: int) -> AggregationTemporality:
    return _TEMPORALITY[raw] if 0 <= raw < len(_TEMPORALITY) else "unspecified"


class _Metric(Protocol):
    """``Metric`` of either encoding: what its points share."""

    @property
    def name(self) -> str: ...

    @property
    def unit(self) -> str: ...

    @property
    def description(self) -> str: ...


MetricT = TypeVar("MetricT", bound=_Metric)
PointT = TypeVar("PointT")
MadeT = TypeVar("MadeT")


def _decode_metrics(
    out: Decoded,
    layout: _Layout[ResourceT, ScopeT, MetricT],
    resources: Iterable[ResourceT],
    take: Callable[[Decoded, _MetricContext, MetricT], None],
) -> None:
    """Call ``take(out, context, metric)`` for every metric (its data points are the items)."""
    for r, s, scope, service, resource_attributes in _scopes(out, layout, resources):
        for m, metric in enumerate(layout.items(scope)):
            name, unit, description = metric.name, metric.unit, metric.description
            take(
                out,
                _MetricContext(name, unit, description, service, resource_attributes, r, s, m),
                metric,
            )


def _take_points(
    out: Decoded,
    ctx: _MetricContext,
    kind: str,
    points: Sequence[PointT],
    store: Callable[[MadeT], None],
    convert: Callable[[PointT], MadeT],
    note: str = "",
) -> None:
    """``store(convert(point))`` for every data point of one metric's data, in either encoding.

    ``store`` is the batch's ``metrics.append`` (``convert`` makes one record) or ``.extend``
    (a summary point makes several). Every point is counted read; a point of a metric without
    a name, or one ``convert`` refuses (``ItemRejected``), is rejected with that reason at its
    path (``resourceMetrics[r].scopeMetrics[s].metrics[m].<kind>.dataPoints[p]``, ``kind``
    the data's JSON name). ``note`` (a format conversion) is counted once per stored point.
    """
    count = len(points)
    if count:
        out.count_read("metric_point", count)
    for p, point in enumerate(points):
        try:
            if not ctx.name:
                raise ItemRejected(METRIC_NO_NAME)
            store(convert(point))
        except ItemRejected as exc:
            out.reject("metric_point", exc.reason, ctx.where(kind, p))
            continue
        if note:
            out.note(note)


def decode_metrics_protobuf(body: bytes) -> Decoded:
    """Decode a protobuf ``ExportMetricsServiceRequest`` (the body of ``POST /v1/metrics``).

    Raises:
        MalformedInput: the body is not a protobuf ``ExportMetricsServiceRequest``.
    """
    request = ExportMetricsServiceRequest()
    _parse_pb(request, body)
    out = Decoded()
    _decode_metrics(out, _PB_METRICS, request.resource_metrics, _pb_metric)
    return out


def _pb_point_count(metric: metrics_pb2.Metric) -> int:
    which = metric.WhichOneof("data")
    return 0 if which is None else len(getattr(metric, which).data_points)


def _pb_number(point: metrics_pb2.NumberDataPoint) -> float | None:
    which = point.WhichOneof("value")
    if which == "as_double":
        return point.as_double
    if which == "as_int":
        return float(point.as_int)
    return None


def _pb_exponential(point: metrics_pb2.ExponentialHistogramDataPoint) -> HistogramValue:
    counts, bounds = exponential_to_explicit(
        scale=point.scale,
        zero_count=point.zero_count,
        zero_threshold=point.zero_threshold,
        positive_offset=point.positive.offset,
        positive_counts=list(point.positive.bucket_counts),
        negative_offset=point.negative.offset,
        negative_counts=list(point.negative.bucket_counts),
    )
    return HistogramValue(
        count=point.count,
        sum=point.sum if point.HasField("sum") else None,
        bucket_counts=counts,
        explicit_bounds=bounds,
        min=point.min if point.HasField("min") else None,
        max=point.max if point.HasField("max") else None,
    )


def _pb_metric(out: Decoded, ctx: _MetricContext, metric: metrics_pb2.Metric) -> None:
    which = metric.WhichOneof("data")
    if which == "gauge" or which == "sum":
        is_sum = which == "sum"
        number = metric.sum if is_sum else metric.gauge
        monotonic = metric.sum.is_monotonic if is_sum else False
        temporality = _temporality(metric.sum.aggregation_temporality) if is_sum else "unspecified"
        _take_points(
            out,
            ctx,
            which,
            number.data_points,
            out.batch.metrics.append,
            lambda point: _number_point(
                ctx,
                kind=which,
                time=point.time_unix_nano,
                start=point.start_time_unix_nano,
                value=_pb_number(point),
                flags=point.flags,
                attributes=_pb_attributes(point.attributes),
                is_monotonic=monotonic,
                temporality=temporality,
            ),
        )
    elif which == "histogram":
        temporality = _temporality(metric.histogram.aggregation_temporality)
        _take_points(
            out,
            ctx,
            "histogram",
            metric.histogram.data_points,
            out.batch.metrics.append,
            lambda point: _histogram_point(
                ctx,
                histogram=HistogramValue(
                    count=point.count,
                    sum=point.sum if point.HasField("sum") else None,
                    bucket_counts=list(point.bucket_counts),
                    explicit_bounds=list(point.explicit_bounds),
                    min=point.min if point.HasField("min") else None,
                    max=point.max if point.HasField("max") else None,
                ),
                time=point.time_unix_nano,
                start=point.start_time_unix_nano,
                flags=point.flags,
                attributes=_pb_attributes(point.attributes),
                temporality=temporality,
            ),
        )
    elif which == "exponential_histogram":
        temporality = _temporality(metric.exponential_histogram.aggregation_temporality)
        _take_points(
            out,
            ctx,
            "exponentialHistogram",
            metric.exponential_histogram.data_points,
            out.batch.metrics.append,
            lambda point: _histogram_point(
                ctx,
                histogram=_pb_exponential(point),
                time=point.time_unix_nano,
                start=point.start_time_unix_nano,
                flags=point.flags,
                attributes=_pb_attributes(point.attributes),
                temporality=temporality,
            ),
            EXPONENTIAL_CONVERTED,
        )
    elif which == "summary":
        _take_points(
            out,
            ctx,
            "summary",
            metric.summary.data_points,
            out.batch.metrics.extend,
            lambda point: _summary_points(
                ctx,
                time=point.time_unix_nano,
                start=point.start_time_unix_nano,
                flags=point.flags,
                attributes=_pb_attributes(point.attributes),
                count=point.count,
                total=point.sum,
                quantiles=[(q.quantile, q.value) for q in point.quantile_values],
            ),
            SUMMARY_CONVERTED,
        )


_METRIC_KEYS: Final = ("resourceMetrics", "scopeMetrics", "metrics")
_PB_METRICS: Final = _Layout[
    metrics_pb2.ResourceMetrics, metrics_pb2.ScopeMetrics, metrics_pb2.Metric
](
    "metric_point",
    _METRIC_KEYS,
    _pb_resource,
    lambda r: r.scope_metrics,
    lambda s: s.metrics,
    _pb_point_count,
)
_METRICS_JSON: Final = msgspec.json.Decoder(wire.ExportMetricsServiceRequest)


def decode_metrics_json(body: bytes) -> Decoded:
    """Decode an OTLP JSON ``ExportMetricsServiceRequest``.

    Raises:
        MalformedInput: the body is not JSON, or not shaped like the message.
    """
    request = _parse_json(body, _METRICS_JSON, "ExportMetricsServiceRequest")
    if not request.resource_metrics:
        _check_top_level(body, "resourceMetrics")
    return _metrics_from_json(request)


def _metrics_from_json(
    request: wire.ExportMetricsServiceRequest, out: Decoded | None = None
) -> Decoded:
    result = Decoded() if out is None else out
    _decode_metrics(result, _JSON_METRICS, request.resource_metrics, _json_metric)
    return result


def _json_point_count(metric: wire.Metric) -> int:
    for data in (
        metric.gauge,
        metric.sum,
        metric.histogram,
        metric.exponential_histogram,
        metric.summary,
    ):
        if data is not None:
            return len(data.data_points)
    return 0


def _json_number(point: wire.NumberDataPoint) -> float | None:
    if point.as_double is not None:
        return parse_float(point.as_double, "asDouble")
    if point.as_int is not None:
        return float(parse_int(point.as_int, "asInt"))
    return None


def _optional_float(raw: float | str | None, what: str) -> float | None:
    return None if raw is None else parse_float(raw, what)


def _json_histogram(point: wire.HistogramDataPoint) -> HistogramValue:
    return HistogramValue(
        count=parse_int(point.count, "count"),
        sum=_optional_float(point.sum, "sum"),
        bucket_counts=[parse_int(c, "bucketCounts") for c in point.bucket_counts],
        explicit_bounds=[parse_float(b, "explicitBounds") for b in point.explicit_bounds],
        min=_optional_float(point.min, "min"),
        max=_optional_float(point.max, "max"),
    )


def _json_exponential(point: wire.ExponentialHistogramDataPoint) -> HistogramValue:
    counts, bounds = exponential_to_explicit(
        scale=point.scale,
        zero_count=parse_int(point.zero_count, "zeroCount"),
        zero_threshold=parse_float(point.zero_threshold, "zeroThreshold"),
        positive_offset=point.positive.offset,
        positive_counts=[
            parse_int(c, "positive.bucketCounts") for c in point.positive.bucket_counts
        ],
        negative_offset=point.negative.offset,
        negative_counts=[
            parse_int(c, "negative.bucketCounts") for c in point.negative.bucket_counts
        ],
    )
    return HistogramValue(
        count=parse_int(point.count, "count"),
        sum=_optional_float(point.sum, "sum"),
        bucket_counts=counts,
        explicit_bounds=bounds,
        min=_optional_float(point.min, "min"),
        max=_optional_float(point.max, "max"),
    )


def _json_numbers(
    out: Decoded, ctx: _MetricContext, kind: str, number: wire.Gauge | wire.Sum
) -> None:
    temporality: AggregationTemporality = "unspecified"
    monotonic = False
    if isinstance(number, wire.Sum):
        temporality = _temporality(number.aggregation_temporality)
        monotonic = number.is_monotonic
    _take_points(
        out,
        ctx,
        kind,
        number.data_points,
        out.batch.metrics.append,
        lambda point: _number_point(
            ctx,
            kind=kind,
            time=_json_time(point.time_unix_nano, "timeUnixNano"),
            start=_json_time(point.start_time_unix_nano, "startTimeUnixNano"),
            value=_json_number(point),
            flags=point.flags,
            attributes=_json_attributes(point.attributes),
            is_monotonic=monotonic,
            temporality=temporality,
        ),
    )


def _json_metric(out: Decoded, ctx: _MetricContext, metric: wire.Metric) -> None:
    # Every kind present is read (a metric should hold one; JSON can carry several).
    if metric.gauge is not None:
        _json_numbers(out, ctx, "gauge", metric.gauge)
    if metric.sum is not None:
        _json_numbers(out, ctx, "sum", metric.sum)
    if metric.histogram is not None:
        temporality = _temporality(metric.histogram.aggregation_temporality)
        _take_points(
            out,
            ctx,
            "histogram",
            metric.histogram.data_points,
            out.batch.metrics.append,
            lambda point: _histogram_point(
                ctx,
                histogram=_json_histogram(point),
                time=_json_time(point.time_unix_nano, "timeUnixNano"),
                start=_json_time(point.start_time_unix_nano, "startTimeUnixNano"),
                flags=point.flags,
                attributes=_json_attributes(point.attributes),
                temporality=temporality,
            ),
        )
    if metric.exponential_histogram is not None:
        temporality = _temporality(metric.exponential_histogram.aggregation_temporality)
        _take_points(
            out,
            ctx,
            "exponentialHistogram",
            metric.exponential_histogram.data_points,
            out.batch.metrics.append,
            lambda point: _histogram_point(
                ctx,
                histogram=_json_exponential(point),
                time=_json_time(point.time_unix_nano, "timeUnixNano"),
                start=_json_time(point.start_time_unix_nano, "startTimeUnixNano"),
                flags=point.flags,
                attributes=_json_attributes(point.attributes),
                temporality=temporality,
            ),
            EXPONENTIAL_CONVERTED,
        )
    if metric.summary is not None:
        _take_points(
            out,
            ctx,
            "summary",
            metric.summary.data_points,
            out.batch.metrics.extend,
            lambda point: _summary_points(
                ctx,
                time=_json_time(point.time_unix_nano, "timeUnixNano"),
                start=_json_time(point.start_time_unix_nano, "startTimeUnixNano"),
                flags=point.flags,
                attributes=_json_attributes(point.attributes),
                count=parse_int(point.count, "count"),
                total=parse_float(point.sum, "sum"),
                quantiles=[
                    (parse_float(q.quantile, "quantile"), parse_float(q.value, "value"))
                    for q in point.quantile_values
                ],
            ),
            SUMMARY_CONVERTED,
        )


_JSON_METRICS: Final = _Layout[wire.ResourceMetrics, wire.ScopeMetrics, wire.Metric](
    "metric_point",
    _METRIC_KEYS,
    _json_resource,
    lambda r: r.scope_metrics,
    lambda s: s.metrics,
    _json_point_count,
)


# ---- files: any of the three, or JSON lines of them --------------------------------------------


class _OtlpDocument(wire._Wire):
    """Any of the three requests (a file may hold one of each kind, or several kinds)."""

    resource_spans: list[wire.ResourceSpans] = msgspec.field(default_factory=list)
    resource_logs: list[wire.ResourceLogs] = msgspec.field(default_factory=list)
    resource_metrics: list[wire.ResourceMetrics] = msgspec.field(default_factory=list)


_DOCUMENT: Final = msgspec.json.Decoder(_OtlpDocument)


def decode_otlp_json_document(data: bytes) -> Decoded:
    """Decode an OTLP JSON file: one request body, or JSON lines of them.

    A file holds an ``ExportTraceServiceRequest``, ``ExportLogsServiceRequest`` or
    ``ExportMetricsServiceRequest`` as JSON (what an SDK POSTs to ``/v1/*``), or one such
    object per line (the OpenTelemetry Collector's ``file`` exporter writes this). Lines are
    numbered from 1 in error messages.

    Raises:
        MalformedInput: the content (or one of its lines) is not such a JSON object.
    """
    try:
        document = _DOCUMENT.decode(data)
    except msgspec.ValidationError as exc:
        raise MalformedInput(f"not an OTLP JSON request: {exc}") from None
    except msgspec.DecodeError as whole:
        lines = [(n, line) for n, line in enumerate(data.splitlines(), start=1) if line.strip()]
        if len(lines) < 2:
            raise MalformedInput(f"not JSON: {whole}") from None
        out = Decoded()
        for n, line in lines:
            try:
                _document_into(_DOCUMENT.decode(line), out)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise MalformedInput(f"line {n}: not an OTLP JSON request: {exc}") from None
        return out
    except RecursionError:
        raise MalformedInput("nested too deeply") from None
    return _document_into(document, Decoded())


def _document_into(document: _OtlpDocument, out: Decoded) -> Decoded:
    if document.resource_spans:
        _traces_from_json(
            wire.ExportTraceServiceRequest(resource_spans=document.resource_spans), out
        )
    if document.resource_logs:
        _logs_from_json(wire.ExportLogsServiceRequest(resource_logs=document.resource_logs), out)
    if document.resource_metrics:
        _metrics_from_json(
            wire.ExportMetricsServiceRequest(resource_metrics=document.resource_metrics), out
        )
    return out
