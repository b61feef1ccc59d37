"""Quantiles of explicit-bucket histograms, shared by every backend (no I/O).

Both backends sum a group's histogram buckets per time bucket in their query engine and hand
the merged counts here: :func:`histogram_quantile` is the ``p50``..``p99`` aggregation of
:class:`~coremetry.store.interface.MetricQuery` on histograms.
"""

from __future__ import annotations

import bisect
import math

__all__ = ["histogram_quantile"]


def histogram_quantile(q: float, bounds: list[float], counts: list[int]) -> float | None:
    """The ``q`` quantile of one merged histogram, as Prometheus' ``histogram_quantile``.

    The method (Prometheus' ``histogram_quantile``, over OpenTelemetry explicit-bucket
    histograms): the rank is ``q * total``; the bucket holding it is the first whose
    cumulative count reaches the rank, and the estimate is a linear interpolation inside that
    bucket, ``lower + (upper - lower) * (rank - below) / in_bucket``, assuming its
    observations are spread evenly. A bucket's lower bound is the previous bucket's upper
    bound; the first bucket's is 0 when its upper bound is positive (Prometheus' convention),
    else its upper bound. A rank in the ``+Inf`` bucket answers the largest finite bound.

    Args:
        q: the quantile, a fraction 0..1 (``p95`` is 0.95).
        bounds: the buckets' upper bounds (inclusive, OTel's ``explicit_bounds`` plus
            ``inf``), ascending, the last ``math.inf``; in the metric's unit (its OTel
            ``unit``, e.g. ``ms`` or ``s``).
        counts: each bucket's count (not cumulative), one per bound; negative counts (a
            reset seen as a decrease) count as 0.

    Returns:
        The estimate, in the unit of ``bounds``; ``None`` when the histogram counts nothing,
        or the rank falls in the ``+Inf`` bucket and there is no finite bound.
    """
    cumulative: list[int] = []
    running = 0
    for count in counts:
        running += max(0, count)
        cumulative.append(running)
    if running == 0:
        return None
    rank = q * running
    i = min(bisect.bisect_left(cumulative, rank), len(bounds) - 1)
    upper = bounds[i]
    if math.isinf(upper):
        finite = [b for b in bounds if not math.isinf(b)]
        return finite[-1] if finite else None
    lower = bounds[i - 1] if i > 0 else (0.0 if upper > 0 else upper)
    below = cumulative[i - 1] if i > 0 else 0
    in_bucket = cumulative[i] - below
    if in_bucket == 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket
