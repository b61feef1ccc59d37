"""Records <-> the exporter's rows: text attribute maps with type hints, kinds, statuses.

The exporter keeps every attribute as text (``Map(LowCardinality(String), String)``: OTLP
``AnyValue.AsString()``: strings as they are, integers in decimal, booleans ``true``/``false``,
doubles as numbers, arrays and maps as JSON). That text is what queries compare (a
``TraceQuery`` attribute matches as text, as the protocol says). What the text loses, and what
the exporter's columns have no place for, a record *we* write carries in one reserved entry of
its own attribute map, :data:`META_KEY` (``coremetry.types``), as compact JSON:

- ``a`` / ``r``: the types of the span's (or log record's) attributes / resource attributes
  that are not strings (``i`` integer, ``f`` double, ``b`` boolean, ``l`` list);
- ``e`` / ``l``: the same for each event's / link's attributes (a list, one map per event or
  link, ``{}`` for all-string ones);
- ``o``: a log record's ``observed_time_unix_nano`` (the exporter's logs table has no column
  for it).

The entry is left out when there is nothing to say (an all-string span without events), so
rows the backend writes look like the exporter's to every other reader. Rows the Collector
wrote have no entry: their attributes come back as strings (their original types are not
stored anywhere) and a log record's observed time as 0. A record whose own attributes use the
key ``coremetry.types`` loses that attribute on write (the key is reserved).

Span kinds and status codes are written as the exporter writes them (``SPAN_KIND_SERVER``,
``STATUS_CODE_ERROR``: ``traceutil.SpanKindStr``/``StatusCodeStr``) and read in that form or
the short pdata form (``Server``, ``Error``).
"""

from __future__ import annotations

from typing import Final

import msgspec

from coremetry.store.model import (
    Attributes,
    AttributeScalar,
    AttributeValue,
    LogRecord,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

__all__ = [
    "ENTRY_KINDS",
    "ERROR_STATUSES",
    "KIND_NAMES",
    "LOG_SELECT",
    "LogColumns",
    "LogOut",
    "META_KEY",
    "SPAN_SELECT",
    "STATUS_NAMES",
    "SpanColumns",
    "SpanOut",
    "attribute_text",
    "canonical_attributes",
    "decode_kind",
    "decode_status",
    "log_from_row",
    "log_key",
    "log_row",
    "span_from_row",
    "span_row",
]

META_KEY: Final = "coremetry.types"
"""The reserved attribute key holding what the exporter's columns cannot (module docstring)."""

KIND_NAMES: Final = {kind: f"SPAN_KIND_{kind.name}" for kind in SpanKind}
"""How the exporter writes each span kind."""
STATUS_NAMES: Final = {code: f"STATUS_CODE_{code.name}" for code in StatusCode}
"""How the exporter writes each status code."""
ENTRY_KINDS: Final = ("SPAN_KIND_SERVER", "SPAN_KIND_CONSUMER", "Server", "Consumer")
"""``SpanKind`` texts of entry spans (SERVER, CONSUMER), in both forms."""
ERROR_STATUSES: Final = ("STATUS_CODE_ERROR", "Error")
"""``StatusCode`` texts of a failed span, in both forms."""

_KINDS_BY_TEXT: Final = {
    **{f"SPAN_KIND_{kind.name}": kind for kind in SpanKind},
    **{kind.name: kind for kind in SpanKind},
}
_STATUS_BY_TEXT: Final = {
    **{f"STATUS_CODE_{code.name}": code for code in StatusCode},
    **{code.name: code for code in StatusCode},
}

_JSON: Final = msgspec.json.Encoder(order="sorted")
_LIST: Final = msgspec.json.Decoder(list[AttributeScalar])


class _Meta(msgspec.Struct, omit_defaults=True):
    a: dict[str, str] = msgspec.field(default_factory=dict)
    r: dict[str, str] = msgspec.field(default_factory=dict)
    e: list[dict[str, str]] = msgspec.field(default_factory=list)
    l: list[dict[str, str]] = msgspec.field(default_factory=list)  # noqa: E741 (a wire key)
    o: int = 0


_META_DECODER: Final = msgspec.json.Decoder(_Meta)
_META_ENCODER: Final = msgspec.json.Encoder()


def decode_kind(text: str) -> SpanKind:
    """The :class:`SpanKind` of the exporter's text (either form; unknown: UNSPECIFIED)."""
    kind = _KINDS_BY_TEXT.get(text)
    if kind is None:
        kind = _KINDS_BY_TEXT.get(text.upper(), SpanKind.UNSPECIFIED)
    return kind


def decode_status(text: str) -> StatusCode:
    """The :class:`StatusCode` of the exporter's text (either form; unknown: UNSET)."""
    code = _STATUS_BY_TEXT.get(text)
    if code is None:
        code = _STATUS_BY_TEXT.get(text.upper(), StatusCode.UNSET)
    return code


def _scalar_text(value: AttributeScalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def attribute_text(value: AttributeValue) -> str:
    """The text the exporter's maps hold for ``value`` (lists as JSON)."""
    if isinstance(value, list):
        return _JSON.encode(value).decode()
    return _scalar_text(value)


def _type_of(value: AttributeValue) -> str | None:
    if isinstance(value, bool):
        return "b"
    if isinstance(value, str):
        return None
    if isinstance(value, int):
        return "i"
    if isinstance(value, float):
        return "f"
    return "l"


def _encode_map(attributes: Attributes) -> tuple[dict[str, str], dict[str, str]]:
    """Text map (keys sorted: one canonical order) and the non-string types."""
    texts: dict[str, str] = {}
    types: dict[str, str] = {}
    for key in sorted(attributes):
        if key == META_KEY:
            continue
        value = attributes[key]
        texts[key] = attribute_text(value)
        kind = _type_of(value)
        if kind is not None:
            types[key] = kind
    return texts, types


def canonical_attributes(attributes: Attributes) -> dict[str, str]:
    """``attributes`` as the text map written for it (keys sorted; metric labels)."""
    return _encode_map(attributes)[0]


def _decode_value(text: str, kind: str | None) -> AttributeValue:
    try:
        if kind == "i":
            return int(text)
        if kind == "f":
            return float(text)
        if kind == "b":
            return text == "true"
        if kind == "l":
            return _LIST.decode(text)
    except (ValueError, msgspec.DecodeError):
        pass
    return text


def _decode_map(texts: dict[str, str], types: dict[str, str]) -> Attributes:
    return {
        key: _decode_value(text, types.get(key)) if types else text
        for key, text in texts.items()
        if key != META_KEY
    }


def _meta(texts: dict[str, str]) -> _Meta:
    raw = texts.get(META_KEY)
    if raw is None:
        return _Meta()
    try:
        return _META_DECODER.decode(raw)
    except msgspec.DecodeError:
        return _Meta()


def _with_meta(texts: dict[str, str], meta: _Meta) -> dict[str, str]:
    if meta.a or meta.r or any(meta.e) or any(meta.l) or meta.o:
        texts[META_KEY] = _META_ENCODER.encode(meta).decode()
    return texts


SpanColumns: Final = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
)
"""The traces columns a write fills, in the order of :func:`span_row`."""


def span_row(span: Span) -> list[object]:
    """The values of :data:`SpanColumns` for ``span`` (times as int ns ticks)."""
    attributes, attribute_types = _encode_map(span.attributes)
    resource, resource_types = _encode_map(span.resource_attributes)
    event_maps: list[dict[str, str]] = []
    event_types: list[dict[str, str]] = []
    for event in span.events:
        texts, types = _encode_map(event.attributes)
        event_maps.append(texts)
        event_types.append(types)
    link_maps: list[dict[str, str]] = []
    link_types: list[dict[str, str]] = []
    for link in span.links:
        texts, types = _encode_map(link.attributes)
        link_maps.append(texts)
        link_types.append(types)
    meta = _Meta(
        a=attribute_types,
        r=resource_types,
        e=event_types if any(event_types) else [],
        l=link_types if any(link_types) else [],
    )
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    return [
        start,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        span.name,
        KIND_NAMES[SpanKind(span.kind)],
        span.service_name,
        resource,
        span.scope_name,
        _with_meta(attributes, meta),
        end - start if end > start else 0,
        STATUS_NAMES[StatusCode(span.status_code)],
        span.status_message,
        [event.time_unix_nano for event in span.events],
        [event.name for event in span.events],
        event_maps,
        [link.trace_id for link in span.links],
        [link.span_id for link in span.links],
        ["" for _ in span.links],
        link_maps,
    ]


SpanOut = tuple[
    int,  # start ns
    str,  # TraceId
    str,  # SpanId
    str,  # ParentSpanId
    str,  # ServiceName
    str,  # SpanName
    str,  # SpanKind
    int,  # duration ns (never negative)
    str,  # StatusCode
    str,  # StatusMessage
    dict[str, str],  # SpanAttributes
    dict[str, str],  # ResourceAttributes
    list[int],  # Events.Timestamp ns
    list[str],  # Events.Name
    list[dict[str, str]],  # Events.Attributes
    list[str],  # Links.TraceId
    list[str],  # Links.SpanId
    list[dict[str, str]],  # Links.Attributes
    str,  # ScopeName
]
"""The span columns the queries select (:data:`SPAN_SELECT`), in order."""

SPAN_SELECT: Final = (
    "toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, ServiceName, SpanName, "
    "SpanKind, greatest(toInt64(Duration), 0), StatusCode, StatusMessage, SpanAttributes, "
    "ResourceAttributes, arrayMap(x -> toUnixTimestamp64Nano(x), `Events.Timestamp`), "
    "`Events.Name`, `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, "
    "`Links.Attributes`, ScopeName"
)
"""The select list producing :data:`SpanOut` (a collector's negative duration reads as 0)."""


def _at(items: list[dict[str, str]], index: int) -> dict[str, str]:
    return items[index] if index < len(items) else {}


def span_from_row(row: SpanOut) -> Span:
    """Build a :class:`Span` from :data:`SpanOut` columns."""
    attributes = row[10]
    meta = _meta(attributes)
    start = row[0]
    return Span(
        trace_id=row[1],
        span_id=row[2],
        parent_span_id=row[3],
        service_name=row[4],
        name=row[5],
        kind=decode_kind(row[6]),
        start_time_unix_nano=start,
        end_time_unix_nano=start + row[7],
        status_code=decode_status(row[8]),
        status_message=row[9],
        attributes=_decode_map(attributes, meta.a),
        resource_attributes=_decode_map(row[11], meta.r),
        events=[
            SpanEvent(
                time_unix_nano=t,
                name=name,
                attributes=_decode_map(texts, _at(meta.e, i)),
            )
            for i, (t, name, texts) in enumerate(zip(row[12], row[13], row[14], strict=False))
        ],
        links=[
            SpanLink(
                trace_id=trace_id,
                span_id=span_id,
                attributes=_decode_map(texts, _at(meta.l, i)),
            )
            for i, (trace_id, span_id, texts) in enumerate(
                zip(row[15], row[16], row[17], strict=False)
            )
        ],
        scope_name=row[18],
    )


LogColumns: Final = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "SeverityText",
    "SeverityNumber",
    "ServiceName",
    "Body",
    "ResourceAttributes",
    "ScopeName",
    "LogAttributes",
)
"""The logs columns a write fills, in the order of :func:`log_row`."""


def log_row(record: LogRecord) -> list[object]:
    """The values of :data:`LogColumns` for ``record``."""
    attributes, attribute_types = _encode_map(record.attributes)
    resource, resource_types = _encode_map(record.resource_attributes)
    meta = _Meta(a=attribute_types, r=resource_types, o=record.observed_time_unix_nano)
    return [
        record.time_unix_nano,
        record.trace_id,
        record.span_id,
        record.severity_text,
        record.severity_number,
        record.service_name,
        record.body,
        resource,
        record.scope_name,
        _with_meta(attributes, meta),
    ]


LogOut = tuple[
    int,  # time ns
    str,  # TraceId
    str,  # SpanId
    str,  # SeverityText
    int,  # SeverityNumber
    str,  # ServiceName
    str,  # Body
    dict[str, str],  # ResourceAttributes
    str,  # ScopeName
    dict[str, str],  # LogAttributes
]
"""The log columns the queries select (:data:`LOG_SELECT`), in order."""

LOG_SELECT: Final = (
    "toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, SeverityText, SeverityNumber, "
    "ServiceName, Body, ResourceAttributes, ScopeName, LogAttributes"
)
"""The select list producing :data:`LogOut`."""


def log_key(row: LogOut) -> tuple[object, ...]:
    """A stored log row's identity (every field; maps as sorted items)."""
    return (
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        tuple(sorted(row[7].items())),
        row[8],
        tuple(sorted(row[9].items())),
    )


def log_from_row(row: LogOut) -> LogRecord:
    """Build a :class:`LogRecord` from :data:`LogOut` columns."""
    attributes = row[9]
    meta = _meta(attributes)
    return LogRecord(
        time_unix_nano=row[0],
        observed_time_unix_nano=meta.o,
        severity_number=row[4],
        severity_text=row[3],
        body=row[6],
        service_name=row[5],
        trace_id=row[1],
        span_id=row[2],
        attributes=_decode_map(attributes, meta.a),
        resource_attributes=_decode_map(row[7], meta.r),
        scope_name=row[8],
    )
