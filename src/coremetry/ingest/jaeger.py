"""Jaeger query-API JSON (``GET /api/traces/<id>`` and search results) to store spans.

Accepts ``{"data": [trace, ...]}``, ``{"data": trace}`` (the UI's saved traces), a bare trace
object or a list of traces. A trace has ``spans`` and ``processes`` (``processID`` -> service
name and tags); a span may also embed its ``process``.

Field mapping (Jaeger's JSON model, ``model/json/model.go``; the OpenTelemetry Collector's
``pkg/translator/jaeger`` for the OTel side):

- ``traceID`` (16 or 32 hex) -> ``trace_id`` left-padded to 32; ``spanID`` -> ``span_id``.
- ``references``: the first ``CHILD_OF`` reference in the same trace is the parent (else the
  first ``FOLLOWS_FROM`` one); every other reference becomes a link.
- ``startTime`` / ``duration`` (microseconds) -> start / end in nanoseconds; a missing
  ``duration`` is 0.
- ``tags`` -> attributes, typed (``string``, ``bool``, ``int64``, ``float64``; ``binary`` as
  base64 text), except these, which become fields: ``span.kind`` -> kind; ``otel.status_code``
  (``ERROR``/``OK``) -> status, with ``otel.status_description`` as its message; an ``error``
  tag that is true -> status ERROR (when ``otel.status_code`` does not say otherwise);
  ``otel.scope.name`` / ``otel.library.name`` -> ``scope_name``.
- The process's ``serviceName`` -> ``service_name`` (``unknown_service`` when empty) and its
  tags -> resource attributes (plus ``service.name``).
- ``logs`` -> span events: the ``event`` field is the name (else ``"log"``), every other field
  an attribute; ``timestamp`` (microseconds) is the event's time. A log whose ``timestamp`` is
  missing or outside 1970..2262 is dropped and its span kept; the import summary counts it as a
  note (:data:`BAD_LOG_TIME`).

Rejected: spans without ``traceID``/``spanID``, with ids that are not hex, with a start time
outside 1970..2262, a negative ``duration``, or a ``startTime + duration`` past 2262.
"""

from __future__ import annotations

from typing import Final

import msgspec

from coremetry.ingest._convert import ItemRejected, hex_span_id, hex_trace_id, is_sane_time
from coremetry.ingest.decoded import Decoded
from coremetry.ingest.errors import MalformedInput
from coremetry.store.model import (
    UNKNOWN_SERVICE,
    Attributes,
    AttributeValue,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

__all__ = ["decode_jaeger"]

_KINDS: Final = {
    "client": SpanKind.CLIENT,
    "server": SpanKind.SERVER,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
    "internal": SpanKind.INTERNAL,
}
_FIELD_TAGS: Final = frozenset(
    {"span.kind", "otel.status_code", "otel.status_description", "otel.scope.name"}
)
START_UNUSABLE: Final = "Jaeger span startTime is missing or outside 1970..2262"
NEGATIVE_DURATION: Final = "Jaeger span duration is negative (microseconds, must be 0 or more)"
END_UNUSABLE: Final = "Jaeger span startTime + duration is past 2262"
BAD_LOG_TIME: Final = (
    "Jaeger span log timestamp is missing or outside 1970..2262 (microseconds); "
    "the log was dropped, its span kept"
)


class _Tag(msgspec.Struct, kw_only=True):
    key: str = ""
    type: str = "string"
    value: str | bool | int | float | None = None


class _Reference(msgspec.Struct, kw_only=True):
    ref_type: str = msgspec.field(default="CHILD_OF", name="refType")
    trace_id: str = msgspec.field(default="", name="traceID")
    span_id: str = msgspec.field(default="", name="spanID")


class _Log(msgspec.Struct, kw_only=True):
    timestamp: int = 0  # microseconds; 0 when absent (dropped: see _span)
    fields: list[_Tag] = msgspec.field(default_factory=list)


class _Process(msgspec.Struct, kw_only=True):
    service_name: str = msgspec.field(default="", name="serviceName")
    tags: list[_Tag] = msgspec.field(default_factory=list)


class _JaegerSpan(msgspec.Struct, kw_only=True):
    trace_id: str = msgspec.field(default="", name="traceID")
    span_id: str = msgspec.field(default="", name="spanID")
    operation_name: str = msgspec.field(default="", name="operationName")
    references: list[_Reference] = msgspec.field(default_factory=list)
    start_time: int = msgspec.field(default=0, name="startTime")
    duration: int = 0
    tags: list[_Tag] = msgspec.field(default_factory=list)
    logs: list[_Log] = msgspec.field(default_factory=list)
    process_id: str = msgspec.field(default="", name="processID")
    process: _Process | None = None


class _Trace(msgspec.Struct, kw_only=True):
    spans: list[_JaegerSpan] = msgspec.field(default_factory=list)
    processes: dict[str, _Process] = msgspec.field(default_factory=dict)


class _Envelope(msgspec.Struct, kw_only=True):
    """``{"data": [...]}`` / ``{"data": {...}}``, or a bare trace (``spans``, ``processes``)."""

    data: list[_Trace] | _Trace | None = None
    spans: list[_JaegerSpan] = msgspec.field(default_factory=list)
    processes: dict[str, _Process] = msgspec.field(default_factory=dict)


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)
_TRACE_LIST: Final = msgspec.json.Decoder(list[_Trace])


def _traces(data: bytes) -> list[_Trace]:
    try:
        if data.lstrip().startswith(b"["):
            return _TRACE_LIST.decode(data)
        envelope = _ENVELOPE.decode(data)
    except msgspec.ValidationError as exc:
        raise MalformedInput(f"not Jaeger query-API JSON: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedInput(f"not JSON: {exc}") from None
    if envelope.data is None:
        return [_Trace(spans=envelope.spans, processes=envelope.processes)]
    return envelope.data if isinstance(envelope.data, list) else [envelope.data]


def _tag_value(tag: _Tag) -> AttributeValue | None:
    value = tag.value
    if value is None:
        return None
    kind = tag.type.lower()
    try:
        if kind == "int64" and isinstance(value, str):
            return int(value)
        if kind == "float64" and isinstance(value, str):
            return float(value)
        if kind == "bool" and isinstance(value, str):
            return value.strip().lower() == "true"
    except ValueError:
        return value
    return value


def _attributes(tags: list[_Tag], skip: frozenset[str] = frozenset()) -> Attributes:
    out: Attributes = {}
    for tag in tags:
        if tag.key in skip:
            continue
        value = _tag_value(tag)
        if value is not None:
            out[tag.key] = value
    return out


def decode_jaeger(data: bytes) -> Decoded:
    """Decode Jaeger query-API JSON (see the module docstring for the accepted shapes).

    Returns:
        The spans and rejections; ``read["span"]`` counts the JSON span objects.

    Raises:
        MalformedInput: not JSON, or not shaped like Jaeger's JSON model.
    """
    out = Decoded()
    for t, trace in enumerate(_traces(data)):
        resources: dict[str, tuple[str, Attributes]] = {}
        for pid, process in trace.processes.items():
            resources[pid] = _resource(process)
        for i, span in enumerate(trace.spans):
            out.count_read("span")
            try:
                out.batch.spans.append(_span(span, resources, out))
            except ItemRejected as exc:
                out.reject("span", exc.reason, f"data[{t}].spans[{i}]")
    return out


def _resource(process: _Process) -> tuple[str, Attributes]:
    service = process.service_name or UNKNOWN_SERVICE
    attributes = _attributes(process.tags)
    attributes["service.name"] = service
    return service, attributes


def _span(span: _JaegerSpan, resources: dict[str, tuple[str, Attributes]], out: Decoded) -> Span:
    """One Jaeger span as a store span; logs with unusable times dropped with a note in ``out``.

    Raises:
        ItemRejected: the span cannot be stored (the reason names the field).
    """
    trace_id = hex_trace_id(span.trace_id, "traceID")
    span_id = hex_span_id(span.span_id, "spanID")
    if not trace_id:
        raise ItemRejected("Jaeger span has no traceID")
    if not span_id:
        raise ItemRejected("Jaeger span has no spanID")
    start = span.start_time * 1000
    if not is_sane_time(start):
        raise ItemRejected(START_UNUSABLE)
    if span.duration < 0:
        raise ItemRejected(NEGATIVE_DURATION)
    end = start + span.duration * 1000
    if not is_sane_time(end):
        raise ItemRejected(END_UNUSABLE)
    if span.process is not None:
        service, resource_attributes = _resource(span.process)
    else:
        service, resource_attributes = resources.get(
            span.process_id, (UNKNOWN_SERVICE, {"service.name": UNKNOWN_SERVICE})
        )
    parent = ""
    links: list[SpanLink] = []
    candidates = [r for r in span.references if hex_trace_id(r.trace_id) == trace_id]
    chosen = next((r for r in candidates if r.ref_type.upper() == "CHILD_OF"), None)
    if chosen is None:
        chosen = next((r for r in candidates if r.ref_type.upper() == "FOLLOWS_FROM"), None)
    for ref in span.references:
        if ref is chosen:
            parent = hex_span_id(ref.span_id, "references.spanID")
            continue
        links.append(
            SpanLink(
                trace_id=hex_trace_id(ref.trace_id, "references.traceID"),
                span_id=hex_span_id(ref.span_id, "references.spanID"),
                attributes={"opentracing.ref_type": ref.ref_type.lower()},
            )
        )
    tags = {tag.key: tag for tag in span.tags}
    kind = SpanKind.UNSPECIFIED
    if "span.kind" in tags:
        kind = _KINDS.get(str(tags["span.kind"].value).lower(), SpanKind.UNSPECIFIED)
    status, message = _status(tags)
    scope_tag = tags.get("otel.scope.name") or tags.get("otel.library.name")
    events: list[SpanEvent] = []
    for log in span.logs:
        if is_sane_time(log.timestamp * 1000):
            events.append(_event(log))
        else:
            out.note(BAD_LOG_TIME)
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        service_name=service,
        name=span.operation_name,
        kind=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        status_code=status,
        status_message=message,
        attributes=_attributes(span.tags, _FIELD_TAGS),
        resource_attributes=resource_attributes,
        events=events,
        links=links,
        scope_name=str(scope_tag.value) if scope_tag is not None and scope_tag.value else "",
    )


def _status(tags: dict[str, _Tag]) -> tuple[StatusCode, str]:
    code_tag = tags.get("otel.status_code")
    description = tags.get("otel.status_description")
    message = str(description.value) if description is not None and description.value else ""
    if code_tag is not None:
        code = str(code_tag.value).upper()
        if code == "ERROR":
            return StatusCode.ERROR, message
        if code == "OK":
            return StatusCode.OK, ""
    error = tags.get("error")
    if error is not None and _tag_value(error) in (True, "true"):
        return StatusCode.ERROR, message
    return StatusCode.UNSET, ""


def _event(log: _Log) -> SpanEvent:
    name = "log"
    attributes: Attributes = {}
    for field in log.fields:
        if field.key == "event" and isinstance(field.value, str):
            name = field.value
            continue
        value = _tag_value(field)
        if value is not None:
            attributes[field.key] = value
    return SpanEvent(time_unix_nano=log.timestamp * 1000, name=name, attributes=attributes)
