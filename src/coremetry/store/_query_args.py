"""Checks of query arguments shared by every backend (no I/O), and the opaque page cursors.

A backend calls these at the head of each query, before any I/O, so that the same input is
refused with the same :class:`~coremetry.store.errors.QueryRejected` (same ``field``, same
message) whichever backend answers. The contract they enforce is
:class:`~coremetry.store.TelemetryStore`'s: ``1 <= limit <= MAX_LIMIT``, half-open
``[start, end)`` ranges of int64 unix nanoseconds, hex trace ids (64-bit ids left-padded, as
OTel's Zipkin receiver does), at most ``MAX_LIMIT`` buckets per series, the aggregations of
:data:`~coremetry.store.interface.Aggregation` and PromQL's label matchers.

**Cursors.** A cursor is URL-safe base64 (no padding) of msgspec JSON
``[query_hash, [key...]]``, or ``[tag, query_hash, [key...]]`` for a backend that tags its
cursors (:class:`CursorCodec`): ``query_hash`` is 8 bytes of BLAKE2b (hex) over the method
name and every argument that shapes the result except ``limit`` (pages may change size), and
``key`` the sort key of the last item returned. The next page continues strictly after that
key, so paging visits every item once while the stored data do not change. A cursor from
another query, another method, another backend's format, or that does not decode is
``QueryRejected("cursor", ...)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from typing import Final, TypeAlias, cast

import msgspec

from coremetry.store._histogram import HISTOGRAM_AGGREGATIONS
from coremetry.store._text_query import TextTerm, parse_text_query
from coremetry.store.errors import QueryRejected
from coremetry.store.interface import (
    DEFAULT_AGGREGATIONS,
    MAX_LIMIT,
    MAX_TRACES_PER_READ,
    Aggregation,
    LogQuery,
    MetricQuery,
    TimeRange,
    TraceQuery,
)
from coremetry.store.model import MetricType, normalize_trace_id

__all__ = [
    "MAX_NS",
    "PERCENTILE_AGGREGATIONS",
    "SIMPLE_AGGREGATIONS",
    "CursorCodec",
    "CursorKey",
    "check_aggregation_applies",
    "check_limit",
    "check_log_query",
    "check_metric_query",
    "check_prefix",
    "check_range",
    "check_step",
    "check_trace_id",
    "check_trace_ids",
    "check_trace_query",
    "query_hash",
]

MAX_NS: Final = 2**63 - 1
"""The largest int64: times are int64 unix nanoseconds."""

PERCENTILE_AGGREGATIONS: Final = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}
"""The percentile aggregations and their percent (histograms and gauges)."""
SIMPLE_AGGREGATIONS: Final = frozenset(("avg", "min", "max", "sum", "count", "last"))
"""The aggregations over a bucket's point values (gauges and sums; over a cumulative sum,
``sum`` is the increase)."""
_MATCH_OPS: Final = frozenset(("=", "!=", "=~", "!~"))


# -- limits, ranges, steps --------------------------------------------------------------------


def check_limit(limit: object) -> None:
    """Check a page or result size.

    Raises:
        QueryRejected: ``field == "limit"``: not an int in ``[1, MAX_LIMIT]``.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise QueryRejected("limit", f"must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")


def check_range(time_range: TimeRange) -> None:
    """Check a half-open time range ``[start_unix_nano, end_unix_nano)`` (nanoseconds).

    Raises:
        QueryRejected: ``field == "time_range"``: not two int64 times, or ``end <= start``.
    """
    start, end = time_range.start_unix_nano, time_range.end_unix_nano
    if type(start) is not int or type(end) is not int:
        raise QueryRejected("time_range", "start and end must be integers of unix nanoseconds")
    if not (-MAX_NS <= start <= MAX_NS and -MAX_NS <= end <= MAX_NS):
        raise QueryRejected("time_range", "start and end must fit in 64 bits of nanoseconds")
    if end <= start:
        raise QueryRejected(
            "time_range",
            f"end_unix_nano ({end}) must be after start_unix_nano ({start}); "
            "the range is half-open [start, end)",
        )


def check_step(time_range: TimeRange, step: object) -> None:
    """Check a bucket width (nanoseconds) against the (checked) range it divides.

    Raises:
        QueryRejected: ``field == "step_ns"``: not a positive int, or more than ``MAX_LIMIT``
            buckets over ``time_range`` (the message gives the smallest step that fits).
    """
    if type(step) is not int or step <= 0:
        raise QueryRejected("step_ns", f"must be a positive integer of nanoseconds, got {step!r}")
    width = time_range.end_unix_nano - time_range.start_unix_nano
    buckets = -(-width // step)
    if buckets > MAX_LIMIT:
        raise QueryRejected(
            "step_ns",
            f"gives {buckets} buckets over the range, more than {MAX_LIMIT}: "
            f"use a step of at least {-(-width // MAX_LIMIT)} ns or a shorter range",
        )


# -- ids and filters --------------------------------------------------------------------------


def check_trace_id(trace_id: object, field: str) -> str:
    """The trace id as 32 lowercase hex characters (case-insensitive; 64-bit ids left-padded).

    Args:
        trace_id: the id as given (hex).
        field: the argument's name for the error (``trace_id``, or ``cursor`` for an id read
            back from a cursor).

    Raises:
        QueryRejected: ``field``: not a string of hex, longer than 32 characters, or all zero.
    """
    try:
        normalized = normalize_trace_id(trace_id) if isinstance(trace_id, str) else ""
    except ValueError:
        normalized = ""
    if not normalized:
        raise QueryRejected(field, f"must be a trace id of 32 hex characters, got {trace_id!r}")
    return normalized


def check_trace_ids(trace_ids: Sequence[object]) -> list[str]:
    """The ids of :meth:`~coremetry.store.interface.TelemetryStore.get_traces`, normalised.

    Raises:
        QueryRejected: ``trace_ids``: more than ``MAX_TRACES_PER_READ``, or one is not a trace
            id (:func:`check_trace_id`).
    """
    if isinstance(trace_ids, str | bytes) or len(trace_ids) > MAX_TRACES_PER_READ:
        raise QueryRejected(
            "trace_ids", f"must be a list of at most {MAX_TRACES_PER_READ} trace ids"
        )
    return [check_trace_id(one, "trace_ids") for one in trace_ids]


def check_trace_query(query: TraceQuery) -> None:
    """Check what :class:`TraceQuery` holds besides its range.

    Raises:
        QueryRejected: ``status`` not any/error/ok, or ``min_duration_ns`` not an int.
    """
    if query.status not in ("any", "error", "ok"):
        raise QueryRejected("status", f"must be any, error or ok, got {query.status!r}")
    if query.min_duration_ns is not None and type(query.min_duration_ns) is not int:
        raise QueryRejected("min_duration_ns", "must be an integer of nanoseconds")


def check_log_query(query: LogQuery) -> tuple[list[TextTerm] | None, str | None]:
    """Check what :class:`LogQuery` holds besides its range.

    Returns:
        The parsed full-text terms (``None`` without ``text``) and the trace id as 32
        lowercase hex characters (``None`` without ``trace_id``).

    Raises:
        QueryRejected: bad ``text`` (:func:`~coremetry.store._text_query.parse_text_query`),
            ``trace_id``, or ``min_severity_number`` (not an OTel severity number 0..24).
    """
    terms = parse_text_query(query.text) if query.text is not None else None
    trace_id = check_trace_id(query.trace_id, "trace_id") if query.trace_id is not None else None
    severity = query.min_severity_number
    if severity is not None and (type(severity) is not int or not 0 <= severity <= 24):
        raise QueryRejected(
            "min_severity_number", f"must be an OTel severity number 0..24, got {severity!r}"
        )
    return terms, trace_id


def check_prefix(prefix: object) -> None:
    """Check ``metric_names``' name prefix (``None`` or ``""``: no prefix).

    Raises:
        QueryRejected: ``field == "prefix"``: given, and not a string.
    """
    if prefix and not isinstance(prefix, str):
        raise QueryRejected("prefix", "must be text")


# -- metrics ----------------------------------------------------------------------------------


def check_metric_query(query: MetricQuery) -> None:
    """Check what can be checked of a :class:`MetricQuery` without the database.

    Raises:
        QueryRejected: bad ``name`` (empty or not a string), ``step_ns`` (not positive, or
            more than ``MAX_LIMIT`` buckets over the range), ``aggregation``, ``matchers``
            (operator, or a regular expression that does not compile: ``matchers[i].op``,
            ``matchers[i].value``) or ``group_by``.
    """
    if not query.name or not isinstance(query.name, str):
        raise QueryRejected("name", "must be a metric name")
    check_step(query.time_range, query.step_ns)
    aggregation = query.aggregation
    if (
        aggregation is not None
        and aggregation not in SIMPLE_AGGREGATIONS
        and aggregation not in ("rate", "increase")
        and aggregation not in PERCENTILE_AGGREGATIONS
    ):
        raise QueryRejected("aggregation", f"unknown aggregation {aggregation!r}")
    for i, matcher in enumerate(query.matchers):
        if matcher.op not in _MATCH_OPS:
            raise QueryRejected(f"matchers[{i}].op", f"must be =, !=, =~ or !~, got {matcher.op!r}")
        if matcher.op in ("=~", "!~"):
            try:
                re.compile(matcher.value)
            except re.error as exc:
                raise QueryRejected(
                    f"matchers[{i}].value", f"is not a valid regular expression: {exc}"
                ) from None
    if query.group_by is not None and not all(isinstance(k, str) for k in query.group_by):
        raise QueryRejected("group_by", "must be a list of label names")


def check_aggregation_applies(aggregation: str | None, metric_type: MetricType) -> Aggregation:
    """Check an aggregation against the type of the metric it is asked of.

    Args:
        aggregation: the query's aggregation; ``None`` is the type's default
            (:data:`~coremetry.store.interface.DEFAULT_AGGREGATIONS`).
        metric_type: the metric's type.

    Returns:
        The aggregation to apply.

    Raises:
        QueryRejected: ``field == "aggregation"``: ``rate``/``increase`` of a non-sum, a
            percentile of a sum, or ``min``/``max``/``last`` of a histogram (the message says
            what applies).
    """
    if aggregation is None:
        return DEFAULT_AGGREGATIONS[metric_type]
    if aggregation in ("rate", "increase") and metric_type != "sum":
        raise QueryRejected(
            "aggregation",
            f"{aggregation} applies to sums (counters), and this metric is a {metric_type}",
        )
    if aggregation in PERCENTILE_AGGREGATIONS and metric_type == "sum":
        raise QueryRejected(
            "aggregation",
            f"{aggregation} applies to histograms and gauges, and this metric is a sum "
            "(use rate or increase, or avg/min/max/sum/count/last)",
        )
    if metric_type == "histogram" and aggregation not in HISTOGRAM_AGGREGATIONS:
        raise QueryRejected(
            "aggregation",
            f"{aggregation} does not apply to a histogram: use p50, p90, p95, p99, "
            "count, sum or avg",
        )
    return cast(Aggregation, aggregation)


# -- cursors ----------------------------------------------------------------------------------

CursorKey: TypeAlias = tuple[int | float | str, ...]
"""A sort key: ints (times, row ids, hashes), floats (scores), strings (ids)."""

KeyType: TypeAlias = type[int] | type[float] | type[str]
"""The expected type of one element of a cursor's key (``float`` accepts an int too)."""

_MAX_CURSOR_CHARS: Final = 1024
_ENCODER: Final = msgspec.json.Encoder()
_PLAIN: Final = msgspec.json.Decoder(tuple[str, list[int | float | str]])
_TAGGED: Final = msgspec.json.Decoder(tuple[str, str, list[int | float | str]])
_MSGPACK: Final = msgspec.msgpack.Encoder(order="sorted")


def query_hash(method: str, *args: object) -> str:
    """Hex digest (16 characters) of ``method`` and the result-shaping ``args``.

    ``args`` must be msgspec-encodable; ``limit`` is never among them.
    """
    return hashlib.blake2b(_MSGPACK.encode((method, args)), digest_size=8).hexdigest()


class CursorCodec:
    """One backend's cursor format (see the module docstring).

    Args:
        tag: ``None`` for ``[query_hash, key]``; a short string for ``[tag, query_hash, key]``,
            so that another backend's cursor is refused as "not a cursor returned by this
            store".
    """

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag

    def encode(self, qhash: str, key: CursorKey) -> str:
        """The cursor continuing after ``key`` for the query ``qhash`` (:func:`query_hash`)."""
        document = (qhash, list(key)) if self.tag is None else (self.tag, qhash, list(key))
        return base64.urlsafe_b64encode(_ENCODER.encode(document)).rstrip(b"=").decode()

    def decode(self, cursor: object, qhash: str, types: tuple[KeyType, ...]) -> CursorKey:
        """The sort key inside ``cursor``, checked against the query and the key's shape.

        Args:
            cursor: as returned in ``Page.next_cursor``.
            qhash: :func:`query_hash` of the query now asked.
            types: the expected type of each key element (``float`` accepts ints too, and
                returns them as floats).

        Raises:
            QueryRejected: ``field == "cursor"``: not a string, not a cursor of this store, or
                of another query (the message says to start again without a cursor).
        """
        if not isinstance(cursor, str):
            raise QueryRejected("cursor", "must be a string returned by a previous page")
        if len(cursor) > _MAX_CURSOR_CHARS:
            raise QueryRejected("cursor", "is not a cursor returned by this query (too long)")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            if self.tag is None:
                found_hash, key = _PLAIN.decode(raw)
                tag = None
            else:
                tag, found_hash, key = _TAGGED.decode(raw)
        except (binascii.Error, ValueError, msgspec.DecodeError):
            raise QueryRejected("cursor", "is not a cursor returned by this store") from None
        if tag != self.tag:
            raise QueryRejected("cursor", "is not a cursor returned by this store")
        if found_hash != qhash:
            raise QueryRejected(
                "cursor",
                "belongs to another query: pass it back with the same arguments, "
                "or start again without a cursor",
            )
        if len(key) != len(types):
            raise QueryRejected("cursor", "is not a cursor returned by this query")
        checked: list[int | float | str] = []
        for value, expected in zip(key, types, strict=True):
            if expected is float and type(value) is int:
                value = float(value)
            if type(value) is not expected:
                raise QueryRejected("cursor", "is not a cursor returned by this query")
            checked.append(value)
        return tuple(checked)

    def page_after(
        self, cursor: str | None, qhash: str, types: tuple[KeyType, ...]
    ) -> CursorKey | None:
        """:meth:`decode`, or ``None`` for the first page (``cursor is None``).

        Raises:
            QueryRejected: ``field == "cursor"``: as :meth:`decode`.
        """
        return None if cursor is None else self.decode(cursor, qhash, types)
