"""Records <-> rows: validation, JSON columns, fingerprints (all pure, all blocking-free).

Ids are stored as raw bytes and come back as lowercase hex; attribute maps are stored as JSON
text with sorted keys (one canonical form, so equal maps hash equally), ``NULL`` when empty.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from typing import Final

import msgspec

from coremetry.store.errors import QueryRejected
from coremetry.store.model import (
    Attributes,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
    TelemetryBatch,
)

__all__ = [
    "MAX_INT64",
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
    "validate_batch",
]

MAX_INT64: Final = 2**63 - 1

_JSON: Final = msgspec.json.Encoder(order="sorted")
_MSGPACK: Final = msgspec.msgpack.Encoder()
_ATTRIBUTES: Final = msgspec.json.Decoder(Attributes)
_EVENTS: Final = msgspec.json.Decoder(list[SpanEvent])
_LINKS: Final = msgspec.json.Decoder(list[SpanLink])
_HISTOGRAM: Final = msgspec.json.Decoder(HistogramValue)

_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_METRIC_TYPES: Final = frozenset(("gauge", "sum", "histogram"))
_TEMPORALITIES: Final = frozenset(("unspecified", "delta", "cumulative"))

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


def _reject(field: str, message: str) -> QueryRejected:
    return QueryRejected(field, message)


def _check_time(value: object, field: str) -> None:
    if type(value) is not int or not 0 <= value <= MAX_INT64:
        raise _reject(field, f"must be an integer of unix nanoseconds in [0, 2**63), got {value!r}")


def _check_str(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise _reject(field, f"must be text, got {type(value).__name__}")


def _check_id(value: object, pattern: re.Pattern[str], field: str, *, optional: bool) -> None:
    if optional and value == "":
        return
    if not isinstance(value, str) or pattern.fullmatch(value) is None or not value.strip("0"):
        width = 32 if pattern is _TRACE_ID else 16
        raise _reject(
            field, f"must be {width} lowercase hex characters, not all zero, got {value!r}"
        )


def _check_attributes(value: object, field: str) -> None:
    if not isinstance(value, dict):
        raise _reject(field, f"must be a map, got {type(value).__name__}")


def _validate_span(span: Span, at: str) -> None:
    _check_id(span.trace_id, _TRACE_ID, f"{at}.trace_id", optional=False)
    _check_id(span.span_id, _SPAN_ID, f"{at}.span_id", optional=False)
    _check_id(span.parent_span_id, _SPAN_ID, f"{at}.parent_span_id", optional=True)
    _check_str(span.service_name, f"{at}.service_name")
    _check_str(span.name, f"{at}.name")
    _check_time(span.start_time_unix_nano, f"{at}.start_time_unix_nano")
    _check_time(span.end_time_unix_nano, f"{at}.end_time_unix_nano")
    if not 0 <= span.kind <= 5:
        raise _reject(f"{at}.kind", f"must be an OTLP SpanKind 0..5, got {span.kind!r}")
    if not 0 <= span.status_code <= 2:
        raise _reject(
            f"{at}.status_code", f"must be an OTLP StatusCode 0..2, got {span.status_code!r}"
        )
    _check_attributes(span.attributes, f"{at}.attributes")
    _check_attributes(span.resource_attributes, f"{at}.resource_attributes")


def _validate_log(record: LogRecord, at: str) -> None:
    _check_time(record.time_unix_nano, f"{at}.time_unix_nano")
    _check_time(record.observed_time_unix_nano, f"{at}.observed_time_unix_nano")
    _check_id(record.trace_id, _TRACE_ID, f"{at}.trace_id", optional=True)
    _check_id(record.span_id, _SPAN_ID, f"{at}.span_id", optional=True)
    _check_str(record.body, f"{at}.body")
    _check_str(record.service_name, f"{at}.service_name")
    _check_str(record.severity_text, f"{at}.severity_text")
    if type(record.severity_number) is not int or not 0 <= record.severity_number <= 24:
        raise _reject(
            f"{at}.severity_number",
            f"must be an OTel severity number 0..24, got {record.severity_number!r}",
        )
    _check_attributes(record.attributes, f"{at}.attributes")
    _check_attributes(record.resource_attributes, f"{at}.resource_attributes")


def _validate_point(point: MetricPoint, at: str) -> None:
    _check_str(point.name, f"{at}.name")
    if not point.name:
        raise _reject(f"{at}.name", "must not be empty")
    _check_str(point.service_name, f"{at}.service_name")
    if point.type not in _METRIC_TYPES:
        raise _reject(f"{at}.type", f"must be gauge, sum or histogram, got {point.type!r}")
    if point.temporality not in _TEMPORALITIES:
        raise _reject(
            f"{at}.temporality",
            f"must be unspecified, delta or cumulative, got {point.temporality!r}",
        )
    _check_time(point.time_unix_nano, f"{at}.time_unix_nano")
    _check_time(point.start_time_unix_nano, f"{at}.start_time_unix_nano")
    _check_attributes(point.attributes, f"{at}.attributes")
    _check_attributes(point.resource_attributes, f"{at}.resource_attributes")
    if point.type == "histogram":
        histogram = point.histogram
        if histogram is None:
            raise _reject(f"{at}.histogram", "is required for a histogram point")
        if len(histogram.bucket_counts) != len(histogram.explicit_bounds) + 1:
            raise _reject(
                f"{at}.histogram.bucket_counts",
                f"must have len(explicit_bounds) + 1 = {len(histogram.explicit_bounds) + 1} "
                f"entries, got {len(histogram.bucket_counts)}",
            )
        if any(type(c) is not int or c < 0 for c in histogram.bucket_counts):
            raise _reject(f"{at}.histogram.bucket_counts", "must be non-negative integers")
        bounds = histogram.explicit_bounds
        if any(not math.isfinite(b) for b in bounds) or any(
            a >= b for a, b in itertools.pairwise(bounds)
        ):
            raise _reject(
                f"{at}.histogram.explicit_bounds", "must be finite and strictly increasing"
            )
    elif point.value is None or isinstance(point.value, bool):
        raise _reject(f"{at}.value", f"is required for a {point.type} point (a number)")
    elif not isinstance(point.value, int | float):
        raise _reject(f"{at}.value", f"must be a number, got {type(point.value).__name__}")


def validate_batch(batch: TelemetryBatch) -> None:
    """Check every record of ``batch`` can be stored as given.

    Raises:
        QueryRejected: the first malformed record; ``field`` is its path, e.g.
            ``spans[3].trace_id``.
    """
    trace_ok, span_ok = _TRACE_ID.fullmatch, _SPAN_ID.fullmatch
    for i, span in enumerate(batch.spans):
        # The common case in one expression (no messages built); the field-by-field checks
        # run only to name what is wrong.
        start, end, kind, status = (
            span.start_time_unix_nano,
            span.end_time_unix_nano,
            span.kind,
            span.status_code,
        )
        parent = span.parent_span_id
        if not (
            trace_ok(span.trace_id)
            and span.trace_id != _ZERO_TRACE
            and span_ok(span.span_id)
            and span.span_id != _ZERO_SPAN
            and (parent == "" or (span_ok(parent) and parent != _ZERO_SPAN))
            and type(start) is int
            and type(end) is int
            and 0 <= start <= MAX_INT64
            and 0 <= end <= MAX_INT64
            and 0 <= kind <= 5
            and 0 <= status <= 2
            and type(span.service_name) is str
            and type(span.name) is str
            and type(span.attributes) is dict
            and type(span.resource_attributes) is dict
        ):
            _validate_span(span, f"spans[{i}]")
    for i, record in enumerate(batch.logs):
        _validate_log(record, f"logs[{i}]")
    for i, point in enumerate(batch.metrics):
        _validate_point(point, f"metrics[{i}]")


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
