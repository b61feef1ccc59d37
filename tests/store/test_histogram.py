"""The shared histogram aggregations (``coremetry.store._histogram``), edge by edge.

The conformance suite's ``check_metric_math`` checks the same function through both backends
with SDK-shaped histograms; these are the cases a backend seldom produces.
"""

import math

import pytest

from coremetry.store._histogram import (
    MergedHistogram,
    Quantile,
    histogram_quantile,
    histogram_value,
)

BOUNDS = [0.0, 5.0, 10.0, math.inf]


def test_equal_min_and_max_answer_that_value() -> None:
    # Four observations of exactly 5 (bucket (0, 5]): every percentile is 5, not 2.5.
    found = histogram_quantile(0.5, BOUNDS, [0, 4, 0, 0], minimum=5.0, maximum=5.0)
    assert found == Quantile(value=5.0, lower=5.0, upper=5.0)


def test_without_min_and_max_the_bucket_bounds_are_used() -> None:
    assert histogram_quantile(0.5, BOUNDS, [0, 4, 0, 0]) == Quantile(2.5, 0.0, 5.0)


def test_inconsistent_min_and_max_are_ignored() -> None:
    assert histogram_quantile(0.5, BOUNDS, [0, 4, 0, 0], minimum=4.0, maximum=1.0) == Quantile(
        2.5, 0.0, 5.0
    )


def test_min_and_max_outside_the_bucket_do_not_move_it() -> None:
    # min 1 lies in the first bucket, max 9 in the second: the p99 bucket (5, 10] is cut at 9.
    found = histogram_quantile(0.99, BOUNDS, [0, 2, 2, 0], minimum=1.0, maximum=9.0)
    assert found is not None
    assert (found.lower, found.upper) == (5.0, 9.0)


def test_the_overflow_bucket_without_max_answers_the_largest_bound_as_a_lower_limit() -> None:
    # The value is Prometheus' (the largest finite bound); the interval is open above.
    assert histogram_quantile(0.5, BOUNDS, [0, 0, 0, 3]) == Quantile(10.0, 10.0, math.inf)
    assert histogram_quantile(0.5, [math.inf], [3]) is None


def test_non_finite_min_and_max_are_ignored() -> None:
    found = histogram_quantile(0.5, BOUNDS, [0, 4, 0, 0], minimum=-math.inf, maximum=math.nan)
    assert found == Quantile(2.5, 0.0, 5.0)


def test_merged_count_sum_avg() -> None:
    merged = MergedHistogram()
    merged.add(BOUNDS, [0, 1, 1, 0], count=2, total=9.0, minimum=2.0, maximum=7.0)
    merged.add(BOUNDS, [0, 1, None, 0], count=1, total=3.0, minimum=3.0, maximum=3.0)
    assert histogram_value("count", merged) == (3.0, None)
    assert histogram_value("sum", merged) == (12.0, None)
    assert histogram_value("avg", merged) == (4.0, None)
    value, quantile = histogram_value("p50", merged)
    assert quantile is not None
    assert (quantile.lower, quantile.upper) == (2.0, 5.0)
    assert value == quantile.value


def test_a_missing_sum_is_no_sum() -> None:
    merged = MergedHistogram()
    merged.add(BOUNDS, [0, 1, 0, 0], count=1, total=None, minimum=None, maximum=None)
    merged.add(BOUNDS, [0, 1, 0, 0], count=1, total=2.0, minimum=None, maximum=None)
    assert histogram_value("count", merged) == (2.0, None)
    for aggregation in ("sum", "avg"):
        with pytest.raises(LookupError, match="no sum"):
            histogram_value(aggregation, merged)


def test_an_empty_histogram_has_no_mean_or_percentile() -> None:
    for aggregation in ("avg", "p95"):
        with pytest.raises(LookupError, match="no observations"):
            histogram_value(aggregation, MergedHistogram())
