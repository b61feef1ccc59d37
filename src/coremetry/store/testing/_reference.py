"""The reference model: what each query must answer, computed in plain Python from the records.

Expected values in the checks come from here, never hard-coded.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import TypeVar

from coremetry.store.interface import (
    DEFAULT_AGGREGATIONS,
    LabelMatcher,
    MetricQuery,
    MetricSeries,
    TimeRange,
    TraceQuery,
    TraceSummary,
)
from coremetry.store.model import (
    AttributeValue,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanKind,
    StatusCode,
)

from ._dataset import _INF
from ._support import SECOND

N = TypeVar("N", int, float)


def _nearest_rank(values: Sequence[N], p: int) -> N | None:
    """Nearest-rank percentile: the value at rank ceil(n * p / 100) of the sorted values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[(len(ordered) * p + 99) // 100 - 1]


def _in_range(t: int, time_range: TimeRange) -> bool:
    return time_range.start_unix_nano <= t < time_range.end_unix_nano


def _is_entry(span: Span) -> bool:
    return span.kind in (SpanKind.SERVER, SpanKind.CONSUMER) or not span.parent_span_id


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _contains_phrase(body: str, phrase: str, *, prefix: bool = False) -> bool:
    words = _tokens(body)
    wanted = _tokens(phrase)
    for i in range(len(words) - len(wanted) + 1):
        window = words[i : i + len(wanted)]
        if window[:-1] == wanted[:-1] and (
            window[-1].startswith(wanted[-1]) if prefix else window[-1] == wanted[-1]
        ):
            return True
    return False


def _text(value: AttributeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _expected_summary(spans: list[Span]) -> TraceSummary:
    roots = sorted(
        (s for s in spans if not s.parent_span_id),
        key=lambda s: (s.start_time_unix_nano, s.span_id),
    )
    root = roots[0] if roots else min(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    start = min(s.start_time_unix_nano for s in spans)
    end = max(s.end_time_unix_nano for s in spans)
    return TraceSummary(
        trace_id=spans[0].trace_id,
        root_service_name=root.service_name,
        root_name=root.name,
        root_missing=not roots,
        start_time_unix_nano=start,
        duration_ns=max(0, end - start),
        span_count=len(spans),
        error_count=sum(1 for s in spans if s.status_code == StatusCode.ERROR),
        services=sorted({s.service_name for s in spans}),
    )


def _expected_traces(spans: list[Span], query: TraceQuery) -> list[TraceSummary]:
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)

    def matches(span: Span) -> bool:
        if not _in_range(span.start_time_unix_nano, query.time_range):
            return False
        if query.service_name is not None and span.service_name != query.service_name:
            return False
        if query.operation is not None and span.name != query.operation:
            return False
        if query.min_duration_ns is not None and span.duration_ns < query.min_duration_ns:
            return False
        if query.status == "error" and span.status_code != StatusCode.ERROR:
            return False
        if query.status == "ok" and span.status_code == StatusCode.ERROR:
            return False
        for key, value in query.attributes.items():
            found = [
                _text(v)
                for attrs in (span.attributes, span.resource_attributes)
                for k, v in attrs.items()
                if k == key
            ]
            if value not in found:
                return False
        return True

    summaries = [
        _expected_summary(trace_spans)
        for trace_spans in by_trace.values()
        if any(matches(s) for s in trace_spans)
    ]
    summaries.sort(key=lambda t: t.trace_id)
    summaries.sort(key=lambda t: t.start_time_unix_nano, reverse=True)
    return summaries


def _expected_logs(
    logs: list[LogRecord],
    time_range: TimeRange,
    *,
    service: str | None = None,
    min_severity: int | None = None,
    trace_id: str | None = None,
    attributes: dict[str, str] | None = None,
) -> list[LogRecord]:
    def has(record: LogRecord, key: str, value: str) -> bool:
        return any(
            k == key and _text(v) == value
            for attrs in (record.attributes, record.resource_attributes)
            for k, v in attrs.items()
        )

    return [
        r
        for r in logs
        if _in_range(r.time_unix_nano, time_range)
        and (service is None or r.service_name == service)
        and (min_severity is None or r.severity_number >= min_severity)
        and (trace_id is None or r.trace_id == trace_id)
        and all(has(r, k, v) for k, v in (attributes or {}).items())
    ]


def _log_key(record: LogRecord) -> tuple[object, ...]:
    return (record.time_unix_nano, record.body, record.service_name, record.span_id)


def _series_key(point: MetricPoint) -> tuple[str, tuple[tuple[str, str], ...]]:
    return point.service_name, tuple(sorted((k, _text(v)) for k, v in point.attributes.items()))


def _labels(point: MetricPoint) -> dict[str, str]:
    return {
        **{k: _text(v) for k, v in point.attributes.items()},
        "service.name": point.service_name,
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _reference_quantile(q: float, bounds: list[float], counts: list[int]) -> float | None:
    """Prometheus histogram_quantile over one histogram (bounds ascending, last +Inf)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if seen + count >= rank and count > 0:
            upper = bounds[i]
            if math.isinf(upper):
                return bounds[i - 1] if i > 0 else None
            lower = bounds[i - 1] if i > 0 else (0.0 if upper > 0 else upper)
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return bounds[-2] if len(bounds) > 1 else None


def _matches(labels: dict[str, str], matchers: Sequence[LabelMatcher]) -> bool:
    for m in matchers:
        value = labels.get(m.label, "")
        if m.op == "=" and value != m.value:
            return False
        if m.op == "!=" and value == m.value:
            return False
        if m.op == "=~" and re.fullmatch(m.value, value) is None:
            return False
        if m.op == "!~" and re.fullmatch(m.value, value) is not None:
            return False
    return True


def _expected_series(points: list[MetricPoint], query: MetricQuery) -> list[MetricSeries]:
    """The reference implementation of metric_series (see the interface's Aggregation)."""
    start, end, step = (
        query.time_range.start_unix_nano,
        query.time_range.end_unix_nano,
        query.step_ns,
    )
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[MetricPoint]] = defaultdict(list)
    for p in points:
        if p.name == query.name and (query.service_name in (None, p.service_name)):
            series[_series_key(p)].append(p)
    selected = {
        key: sorted(ps, key=lambda p: p.time_unix_nano)
        for key, ps in series.items()
        if _matches(_labels(ps[0]), query.matchers)
        and any(_in_range(p.time_unix_nano, query.time_range) for p in ps)
    }
    groups: dict[tuple[tuple[str, str], ...], list[list[MetricPoint]]] = defaultdict(list)
    for ps in selected.values():
        labels = _labels(ps[0])
        if query.group_by is not None:
            labels = {k: labels.get(k, "") for k in query.group_by if labels.get(k, "")}
        groups[tuple(sorted(labels.items()))].append(ps)
    result: list[MetricSeries] = []
    for label_items in sorted(groups):
        members = groups[label_items]
        buckets: dict[int, list[float]] = defaultdict(list)
        stamped: dict[int, list[tuple[int, float]]] = defaultdict(list)
        hist: dict[int, dict[float, int]] = defaultdict(lambda: defaultdict(int))
        totals: dict[int, list[float | None]] = defaultdict(list)
        metric_type = members[0][0].type
        agg = query.aggregation or DEFAULT_AGGREGATIONS[metric_type]
        for ps in members:
            inside = [p for p in ps if _in_range(p.time_unix_nano, query.time_range)]
            if agg == "rate":
                for b, rate in _reference_rates(ps, start, end, step).items():
                    buckets[b].append(rate)
                continue
            if agg in ("sum", "increase") and metric_type == "sum" and ps[0].temporality != "delta":
                for b, grown in _reference_increases(ps, start, end, step).items():
                    buckets[b].append(grown)
                continue
            if metric_type == "histogram":
                for b, counts in _reference_histograms(ps, start, end, step).items():
                    for bound, count in counts.items():
                        hist[b][bound] += count
                for b, total in _reference_histogram_sums(ps, start, end, step).items():
                    totals[b].append(total)
                continue
            for p in inside:
                v = _finite(p.value)
                if v is not None:
                    b = (p.time_unix_nano - start) // step
                    buckets[b].append(v)
                    stamped[b].append((p.time_unix_nano, v))
        values: list[tuple[int, float]] = []
        if hist:
            for b in sorted(hist):
                count = sum(hist[b].values())
                sums = totals.get(b, [])
                total = None if None in sums else sum(x for x in sums if x is not None)
                if agg == "count":
                    values.append((start + b * step, float(count)))
                    continue
                if agg in ("sum", "avg"):
                    if total is not None and (agg == "sum" or count > 0):
                        values.append((start + b * step, total if agg == "sum" else total / count))
                    continue
                ordered = sorted(hist[b])
                q = _reference_quantile(int(agg[1:]) / 100, ordered, [hist[b][x] for x in ordered])
                if q is not None:
                    values.append((start + b * step, q))
        for b in sorted(buckets):
            vs = buckets[b]
            if agg in ("rate", "increase"):
                value = sum(vs)
            elif agg == "avg":
                value = sum(vs) / len(vs)
            elif agg == "min":
                value = min(vs)
            elif agg == "max":
                value = max(vs)
            elif agg == "sum":
                value = sum(vs)
            elif agg == "count":
                value = float(len(vs))
            elif agg == "last":
                value = max(stamped[b], key=lambda tv: tv[0])[1]
            else:
                found = _nearest_rank(vs, int(agg[1:]))
                assert found is not None
                value = float(found)
            values.append((start + b * step, value))
        first = members[0][0]
        result.append(
            MetricSeries(
                name=query.name,
                type=first.type,
                unit=first.unit,
                labels=dict(label_items),
                points=values,
                aggregation=agg,
            )
        )
    return result


def _reference_rates(ps: list[MetricPoint], start: int, end: int, step: int) -> dict[int, float]:
    finite = [p for p in ps if _finite(p.value) is not None and p.time_unix_nano < end]
    rates: dict[int, float] = {}
    if finite and finite[0].temporality == "delta":
        sums: dict[int, float] = defaultdict(float)
        for p in finite:
            if p.time_unix_nano >= start:
                assert p.value is not None
                sums[(p.time_unix_nano - start) // step] += p.value
        for b, total in sums.items():
            width = min(start + (b + 1) * step, end) - (start + b * step)
            rates[b] = total * SECOND / width
        return rates
    increase: dict[int, float] = defaultdict(float)
    elapsed: dict[int, int] = defaultdict(int)
    for prev, point in itertools.pairwise(finite):
        if point.time_unix_nano < start:
            continue
        assert prev.value is not None
        assert point.value is not None
        reset = (point.is_monotonic and point.value < prev.value) or (
            point.start_time_unix_nano > 0
            and prev.start_time_unix_nano > 0
            and point.start_time_unix_nano != prev.start_time_unix_nano
        )
        b = (point.time_unix_nano - start) // step
        increase[b] += point.value if reset else point.value - prev.value
        elapsed[b] += point.time_unix_nano - prev.time_unix_nano
    return {b: increase[b] * SECOND / elapsed[b] for b in increase if elapsed[b] > 0}


def _reference_increases(
    ps: list[MetricPoint], start: int, end: int, step: int
) -> dict[int, float]:
    """``sum``/``increase`` of a cumulative sum: reset-aware increases per bucket."""
    finite = [p for p in ps if _finite(p.value) is not None and p.time_unix_nano < end]
    grown: dict[int, float] = {}
    if finite and finite[0].time_unix_nano >= start:
        first = finite[0]
        if first.start_time_unix_nano > 0 and first.start_time_unix_nano >= start:
            assert first.value is not None
            grown[(first.time_unix_nano - start) // step] = first.value
    for prev, point in itertools.pairwise(finite):
        if point.time_unix_nano < start or point.time_unix_nano <= prev.time_unix_nano:
            continue
        assert prev.value is not None
        assert point.value is not None
        reset = (point.is_monotonic and point.value < prev.value) or (
            point.start_time_unix_nano > 0
            and prev.start_time_unix_nano > 0
            and point.start_time_unix_nano != prev.start_time_unix_nano
        )
        b = (point.time_unix_nano - start) // step
        grown[b] = grown.get(b, 0.0) + (point.value if reset else point.value - prev.value)
    return grown


def _reference_histogram_sums(
    ps: list[MetricPoint], start: int, end: int, step: int
) -> dict[int, float | None]:
    """The sum of the observations per bucket (``None``: a point exported none)."""
    out: dict[int, float | None] = {}

    def add(b: int, h: HistogramValue, prev: HistogramValue | None) -> None:
        whole = prev is None or h.count < prev.count
        if h.sum is None or (not whole and prev is not None and prev.sum is None):
            out[b] = None
            return
        before = 0.0 if whole or prev is None or prev.sum is None else prev.sum
        current = out.get(b, 0.0)
        out[b] = None if current is None else current + h.sum - before

    if ps[0].temporality == "delta":
        for p in ps:
            if start <= p.time_unix_nano < end:
                assert p.histogram is not None
                add((p.time_unix_nano - start) // step, p.histogram, None)
        return out
    last_of: dict[int, MetricPoint] = {}
    before = [p for p in ps if p.time_unix_nano < start]
    for p in ps:
        if start <= p.time_unix_nano < end:
            last_of[(p.time_unix_nano - start) // step] = p
    prev = before[-1].histogram if before else None
    for b in sorted(last_of):
        h = last_of[b].histogram
        assert h is not None
        add(b, h, prev)
        prev = h
    return out


def _reference_histograms(
    ps: list[MetricPoint], start: int, end: int, step: int
) -> dict[int, dict[float, int]]:
    out: dict[int, dict[float, int]] = defaultdict(lambda: defaultdict(int))

    def add(b: int, h: HistogramValue, prev: HistogramValue | None) -> None:
        bounds = [*h.explicit_bounds, _INF]
        whole = prev is None or h.count < prev.count
        for i, count in enumerate(h.bucket_counts):
            before = 0 if whole or prev is None else prev.bucket_counts[i]
            out[b][bounds[i]] += count - before

    if ps[0].temporality == "delta":
        for p in ps:
            if _in_range(p.time_unix_nano, TimeRange(start_unix_nano=start, end_unix_nano=end)):
                assert p.histogram is not None
                add((p.time_unix_nano - start) // step, p.histogram, None)
        return out
    last_of: dict[int, MetricPoint] = {}
    before = [p for p in ps if p.time_unix_nano < start]
    for p in ps:
        if start <= p.time_unix_nano < end:
            last_of[(p.time_unix_nano - start) // step] = p
    prev = before[-1].histogram if before else None
    for b in sorted(last_of):
        h = last_of[b].histogram
        assert h is not None
        add(b, h, prev)
        prev = h
    return out
