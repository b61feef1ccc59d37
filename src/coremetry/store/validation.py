"""Validation of a :class:`~coremetry.store.model.TelemetryBatch` before any backend writes it.

Every backend (``sqlite/``, ``clickhouse/``) calls :func:`validate_batch` first, so both refuse
the same records with the same error: :class:`~coremetry.store.errors.QueryRejected` whose
``field`` is the path of the first malformed value (``spans[3].trace_id``,
``metrics[0].histogram.bucket_counts``) and whose message says what it must be. Ids are lowercase
hex of the OTLP width, not all zero; times are unix nanoseconds in ``[0, 2**63)``; enums are in
their OTLP ranges (SpanKind 0..5, StatusCode 0..2, severity number 0..24). Pure and
blocking-free.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Final

from coremetry.store.errors import QueryRejected
from coremetry.store.model import LogRecord, MetricPoint, Span, TelemetryBatch

__all__ = ["MAX_INT64", "validate_batch"]

MAX_INT64: Final = 2**63 - 1
"""The largest time a store accepts, in unix nanoseconds (a signed 64-bit column)."""

_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_METRIC_TYPES: Final = frozenset(("gauge", "sum", "histogram"))
_TEMPORALITIES: Final = frozenset(("unspecified", "delta", "cumulative"))


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
