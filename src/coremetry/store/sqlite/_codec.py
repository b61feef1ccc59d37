"""Records <-> rows: JSON columns, fingerprints (all pure, all blocking-free).

Batch validation, shared with the ClickHouse backend, is :mod:`coremetry.store.validation`.

Ids are stored as raw bytes and come back as lowercase hex; attribute maps are stored as JSON
text with sorted keys (one canonical form, so equal maps hash equally), ``NULL`` when empty.
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

from coremetry.store.model import (
    Attributes,
    HistogramValue,
    LogRecord,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

__all__ = [
    "LogOutRow",
    "LogRow",
    "PointRow",
    "SpanOutRow",
    "SpanRow",
    "decode_attributes",
    "decode_events",
    "decode_histogram",
    "decode_links",
    "encode_attributes",
    "encode_json",
    "fingerprint",
    "log_from_row",
    "span_from_row",
]

_JSON: Final = msgspec.json.Encoder(order="sorted")
_MSGPACK: Final = msgspec.msgpack.Encoder()
_ATTRIBUTES: Final = msgspec.json.Decoder(Attributes)
_EVENTS: Final = msgspec.json.Decoder(list[SpanEvent])
_LINKS: Final = msgspec.json.Decoder(list[SpanLink])
_HISTOGRAM: Final = msgspec.json.Decoder(HistogramValue)


SpanRow = tuple[
    bytes,  # trace_id
    bytes,  # span_id
    bytes | None,  # parent_span_id
    str,  # service_name
    str,  # name
    int,  # kind
    int,  # start_unix_nano
    int,  # end_unix_nano
    int,  # duration_ns
    int,  # status_code
    str | None,  # status_message
    int,  # resource_id
    str | None,  # attributes
    str | None,  # events
    str | None,  # links
    str | None,  # scope_name
]

LogRow = tuple[
    int,  # time_unix_nano
    int,  # observed_time_unix_nano
    int,  # severity_number
    str,  # severity_text
    str,  # body
    str,  # service_name
    bytes | None,  # trace_id
    bytes | None,  # span_id
    int,  # resource_id
    str | None,  # attributes
    str | None,  # scope_name
    bytes,  # fingerprint
]

PointRow = tuple[int, int, int, float | None, str | None]
"""series_id, time_unix_nano, start_time_unix_nano, value, histogram."""


def encode_json(value: object) -> str:
    """Canonical JSON text (sorted keys) of an attribute map, event list, ... ."""
    return _JSON.encode(value).decode()


def encode_attributes(attributes: Attributes) -> str | None:
    """Canonical JSON of an attribute map, ``None`` when empty."""
    return _JSON.encode(attributes).decode() if attributes else None


def fingerprint(*parts: object) -> bytes:
    """16-byte BLAKE2b of the msgpack encoding of ``parts`` (identity of logs, series, ...)."""
    return hashlib.blake2b(_MSGPACK.encode(parts), digest_size=16).digest()


def decode_attributes(text: str | None) -> Attributes:
    """The attribute map stored as ``text`` (``{}`` for NULL)."""
    return _ATTRIBUTES.decode(text) if text else {}


def decode_events(text: str | None) -> list[SpanEvent]:
    """The span events stored as ``text`` (``[]`` for NULL)."""
    return _EVENTS.decode(text) if text else []


def decode_links(text: str | None) -> list[SpanLink]:
    """The span links stored as ``text`` (``[]`` for NULL)."""
    return _LINKS.decode(text) if text else []


def decode_histogram(text: str) -> HistogramValue:
    """A histogram value stored as JSON text."""
    return _HISTOGRAM.decode(text)


SpanOutRow = tuple[
    bytes,  # trace_id
    bytes,  # span_id
    bytes | None,  # parent_span_id
    str,  # service_name
    str,  # name
    int,  # kind
    int,  # start_unix_nano
    int,  # end_unix_nano
    int,  # status_code
    str | None,  # status_message
    str | None,  # attributes
    str | None,  # events
    str | None,  # links
    str | None,  # scope_name
    int,  # resource_id
]
"""The span columns the queries select, in order."""

LogOutRow = tuple[
    int,  # time_unix_nano
    int,  # observed_time_unix_nano
    int,  # severity_number
    str,  # severity_text
    str,  # body
    str,  # service_name
    bytes | None,  # trace_id
    bytes | None,  # span_id
    str | None,  # attributes
    str | None,  # scope_name
    int,  # resource_id
    int,  # id
    float,  # BM25 score (0.0 without text)
]
"""The log columns the queries select, in order."""


_KINDS: Final = tuple(SpanKind)
_STATUSES: Final = tuple(StatusCode)


def span_from_row(row: SpanOutRow, resource_attributes: Attributes) -> Span:
    """Build a :class:`Span` from the columns of :data:`SpanOutRow`.

    On the hot path of ``get_trace`` (a 1,000-span trace builds 1,000 of these): enum members
    come from tuples and empty JSON columns skip the decoder.
    """
    attributes, events, links = row[10], row[11], row[12]
    return Span(
        trace_id=row[0].hex(),
        span_id=row[1].hex(),
        parent_span_id=row[2].hex() if row[2] is not None else "",
        service_name=row[3],
        name=row[4],
        kind=_KINDS[row[5]],
        start_time_unix_nano=row[6],
        end_time_unix_nano=row[7],
        status_code=_STATUSES[row[8]],
        status_message=row[9] or "",
        attributes=_ATTRIBUTES.decode(attributes) if attributes else {},
        resource_attributes=resource_attributes,
        events=_EVENTS.decode(events) if events else [],
        links=_LINKS.decode(links) if links else [],
        scope_name=row[13] or "",
    )


def log_from_row(row: LogOutRow, resource_attributes: Attributes) -> LogRecord:
    """Build a :class:`LogRecord` from the columns of :data:`LogOutRow`."""
    return LogRecord(
        time_unix_nano=row[0],
        observed_time_unix_nano=row[1],
        severity_number=row[2],
        severity_text=row[3],
        body=row[4],
        service_name=row[5],
        trace_id=row[6].hex() if row[6] is not None else "",
        span_id=row[7].hex() if row[7] is not None else "",
        attributes=decode_attributes(row[8]),
        resource_attributes=resource_attributes,
        scope_name=row[9] or "",
    )
