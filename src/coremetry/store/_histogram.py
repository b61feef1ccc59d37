"""Aggregations of explicit-bucket histograms, shared by every backend (no I/O).

Both backends sum a group's histogram buckets (and counts, sums, mins and maxes) per time bucket
in their query engine and hand the merged values here as a :class:`MergedHistogram`:
:func:`histogram_quantile` is the ``p50``..``p99`` aggregation of
:class:`~coremetry.store.interface.MetricQuery` on histograms, :func:`histogram_value` every
aggregation of a histogram (``count``, ``sum``, ``avg`` and the percentiles).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

__all__ = [
    "HISTOGRAM_AGGREGATIONS",
    "MergedHistogram",
    "Quantile",
    "histogram_quantile",
    "histogram_value",
]

HISTOGRAM_AGGREGATIONS: frozenset[str] = frozenset(
    ("count", "sum", "avg", "p50", "p90", "p95", "p99")
)
"""The aggregations that apply to a histogram."""


@dataclass(frozen=True)
class Quantile:
    """A percentile estimated from bucket counts, and the bucket it was interpolated in.

    Attributes:
        value: the estimate, in the histogram's unit.
        lower: the lower end of the interval the estimate was interpolated in: the bucket's
            lower bound raised to the exported minimum when that is higher.
        upper: the upper end: the bucket's upper bound lowered to the exported maximum when
            that is lower (the exported maximum for ``+Inf``; ``math.inf`` when the rank is in
            the ``+Inf`` bucket and no maximum was exported: the estimate is then only a lower
            limit).

    The estimate rests on that one bucket's bounds: all that is known is that the percentile
    lies in ``[lower, upper]``.
    """

    value: float
    lower: float
    upper: float


def histogram_quantile(
    q: float,
    bounds: list[float],
    counts: list[int],
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Quantile | None:
    """The ``q`` quantile of one merged histogram, interpolated within its bucket.

    The method (Prometheus' ``histogram_quantile`` with the OpenTelemetry exported min/max as
    outer bounds, as the OpenTelemetry Collector's and Grafana's estimators do): the rank is
    ``q * total``; the bucket holding it is the first whose cumulative count reaches the rank,
    and the estimate is a linear interpolation inside that bucket, ``lower + (upper - lower) *
    (rank - below) / in_bucket``, assuming its observations are spread evenly. A bucket's
    lower bound is the previous bucket's upper bound; the first bucket's is 0 when its upper
    bound is positive (Prometheus' convention), else its upper bound. Then the bucket is
    clamped to the observed range: ``lower`` is raised to ``minimum`` and ``upper`` lowered to
    ``maximum`` when they fall inside it (values 100, 200, 300 ms in the SDK's default buckets
    give p99 298.5 ms, not 492.5). A rank in the ``+Inf`` bucket interpolates up to
    ``maximum`` when known, else answers the largest finite bound as the value with an
    unbounded ``upper`` (``math.inf``): the percentile is at least that bound.

    Args:
        q: the quantile, a fraction 0..1 (``p95`` is 0.95).
        bounds: the buckets' upper bounds (inclusive, OTel's ``explicit_bounds`` plus
            ``inf``), ascending, the last ``math.inf``; in the metric's unit (its OTel
            ``unit``, e.g. ``ms`` or ``s``).
        counts: each bucket's count (not cumulative), one per bound; negative counts (a
            reset seen as a decrease) count as 0.
        minimum: the smallest observation (OTLP ``HistogramDataPoint.min``, the smallest of
            the merged points'), or ``None`` when not exported; non-finite values are ignored.
        maximum: the largest observation (``max``), likewise.

    Returns:
        The estimate and its bucket's (clamped) bounds, in the unit of ``bounds``; ``None``
        when the histogram counts nothing, or the rank falls in the ``+Inf`` bucket and there
        is neither a finite bound nor a maximum.
    """
    cumulative: list[int] = []
    running = 0
    for count in counts:
        running += max(0, count)
        cumulative.append(running)
    if running == 0:
        return None
    low = minimum if minimum is not None and math.isfinite(minimum) else None
    high = maximum if maximum is not None and math.isfinite(maximum) else None
    if low is not None and high is not None and low > high:
        low = high = None  # inconsistent: use the buckets alone
    rank = q * running
    i = min(bisect.bisect_left(cumulative, rank), len(bounds) - 1)
    upper = bounds[i]
    finite = [b for b in bounds if not math.isinf(b)]
    lower = bounds[i - 1] if i > 0 else (0.0 if upper > 0 else upper)
    if math.isinf(upper):
        if high is None or high <= lower:
            if not finite:
                return None
            # Prometheus' answer (the largest finite bound), which is only a lower limit
            # here: the rank lies above it, and nothing bounds it from above.
            return Quantile(value=finite[-1], lower=finite[-1], upper=math.inf)
        upper = high
    if low is not None and lower < low <= upper:
        lower = low
    if high is not None and lower <= high < upper:
        upper = high
    below = cumulative[i - 1] if i > 0 else 0
    in_bucket = cumulative[i] - below
    if in_bucket == 0:
        return Quantile(value=upper, lower=lower, upper=upper)
    value = lower + (upper - lower) * (rank - below) / in_bucket
    return Quantile(value=value, lower=lower, upper=upper)


@dataclass
class MergedHistogram:
    """The histograms of one output series in one time bucket, merged (a backend fills it).

    Attributes:
        counts: bucket count by upper bound (``math.inf`` for the overflow bucket).
        count: observations (the sum of the points' ``count``, or of their increases).
        total: the sum of the observations (``sum``); ``None`` when a point had none.
        minimum: the smallest exported ``min`` (``None``: none exported).
        maximum: the largest exported ``max`` (``None``: none exported).
    """

    counts: dict[float, int] = field(default_factory=dict)
    count: int = 0
    total: float | None = 0.0
    minimum: float | None = None
    maximum: float | None = None

    def add(
        self,
        bounds: list[float],
        counts: list[int | None],
        *,
        count: int | None,
        total: float | None,
        minimum: float | None,
        maximum: float | None,
    ) -> None:
        """Merge one row: bucket counts by ``bounds`` (with ``inf``), count, sum, min, max."""
        for le, n in zip(bounds, counts, strict=False):
            if n is not None:
                self.counts[le] = self.counts.get(le, 0) + int(n)
        self.count += int(count or 0)
        self.total = None if total is None or self.total is None else self.total + total
        if minimum is not None and math.isfinite(minimum):
            self.minimum = minimum if self.minimum is None else min(self.minimum, minimum)
        if maximum is not None and math.isfinite(maximum):
            self.maximum = maximum if self.maximum is None else max(self.maximum, maximum)


def histogram_value(aggregation: str, merged: MergedHistogram) -> tuple[float, Quantile | None]:
    """One aggregation of a merged histogram: its value, and for a percentile its bucket.

    ``count``: the observations; ``sum``: their sum; ``avg``: ``sum / count``; ``p50``..``p99``:
    :func:`histogram_quantile` with the merged min and max.

    Returns:
        ``(value, quantile)``; ``quantile`` is set for percentiles only.

    Raises:
        LookupError: nothing to answer: no observations (``avg`` and percentiles), no sum
            exported (``sum``, ``avg``), or no finite bound for a rank in ``+Inf``.
    """
    if aggregation == "count":
        return float(merged.count), None
    if aggregation in ("sum", "avg"):
        if merged.total is None:
            raise LookupError("no sum exported")
        if aggregation == "sum":
            return merged.total, None
        if merged.count <= 0:
            raise LookupError("no observations")
        return merged.total / merged.count, None
    ordered = sorted(merged.counts)
    found = histogram_quantile(
        int(aggregation[1:]) / 100,
        ordered,
        [merged.counts[le] for le in ordered],
        minimum=merged.minimum,
        maximum=merged.maximum,
    )
    if found is None:
        raise LookupError("no observations")
    return found.value, found
