"""Checks of the metric queries.

metric_names, metric_series (every aggregation), the bucketed RED series and log counts, and
NaN/±Inf values.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Final, cast

from coremetry.store.interface import (
    DEFAULT_AGGREGATIONS,
    MAX_LIMIT,
    Aggregation,
    LabelMatcher,
    MetricQuery,
    MetricSeries,
    TimeRange,
)
from coremetry.store.model import HistogramValue, MetricPoint, Span, StatusCode, TelemetryBatch

from ._dataset import (
    _INF,
    _NAN,
    _base_time,
    _counter_points,
    _gauge_points,
    _histogram_points,
    make_dataset,
)
from ._reference import _expected_series, _in_range, _is_entry, _nearest_rank, _series_key
from ._support import (
    HOUR,
    MINUTE,
    SECOND,
    MakeStore,
    _close,
    _equal,
    _equal_red,
    _expect,
    _rejected,
)


def _same_series(actual: list[MetricSeries], expected: list[MetricSeries], what: str) -> None:
    actual = [s for s in actual if s.points]
    expected = [s for s in expected if s.points]
    _equal([s.labels for s in actual], [s.labels for s in expected], f"{what}: series labels")
    for a, e in zip(actual, expected, strict=True):
        _equal((a.name, a.type, a.unit), (e.name, e.type, e.unit), f"{what}: series metadata")
        _equal([t for t, _ in a.points], [t for t, _ in e.points], f"{what} {e.labels}: buckets")
        for (t, av), (_, ev) in zip(a.points, e.points, strict=True):
            _close(av, ev, f"{what} {e.labels} at bucket {t}")


async def check_metric_names(make_store: MakeStore) -> None:
    """Every metric with a point in range: type, unit, label keys, series count, prefix."""
    base = _base_time()
    points = [*_gauge_points(base), *_counter_points(base), *_histogram_points(base)]
    async with make_store() as store:
        await store.write(TelemetryBatch(metrics=points))
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + 3 * HOUR)
        for prefix in (None, "http.", "zzz"):
            expected: dict[str, list[MetricPoint]] = defaultdict(list)
            for p in points:
                if _in_range(p.time_unix_nano, window) and (
                    prefix is None or p.name.startswith(prefix)
                ):
                    expected[p.name].append(p)
            page = await store.metric_names(window, limit=MAX_LIMIT, prefix=prefix)
            _equal(
                [
                    (
                        d.name,
                        d.type,
                        d.unit,
                        d.label_keys,
                        d.series_count,
                        d.last_seen_unix_nano,
                        d.service_names,
                    )
                    for d in page.items
                ],
                [
                    (
                        name,
                        ps[0].type,
                        ps[0].unit,
                        sorted({"service.name", *(k for p in ps for k in p.attributes)}),
                        len({_series_key(p) for p in ps}),
                        max(p.time_unix_nano for p in ps),
                        sorted({p.service_name for p in ps}),
                    )
                    for name, ps in sorted(expected.items())
                ],
                f"metric_names(prefix={prefix!r})",
            )
            _equal(page.total, len(expected), "metric_names total")
        gauge = (await store.metric_names(window, limit=1)).items[0]
        _equal(gauge.description, "CPU use of the container", "metric description")
        late = TimeRange(start_unix_nano=base + 25 * MINUTE, end_unix_nano=base + HOUR)
        _equal(
            [d.name for d in (await store.metric_names(late, limit=10)).items],
            sorted({p.name for p in points if _in_range(p.time_unix_nano, late)}),
            "metric_names of a later range",
        )


async def check_metric_series(make_store: MakeStore) -> None:
    """Aggregations per bucket, matchers, grouping, rate, percentiles, NaN/Inf skipped."""
    base = _base_time()
    points = [*_gauge_points(base), *_counter_points(base), *_histogram_points(base)]
    async with make_store() as store:
        await store.write(TelemetryBatch(metrics=points))
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + 30 * MINUTE)
        inner = TimeRange(
            start_unix_nano=base + 7 * MINUTE + 3 * SECOND, end_unix_nano=base + 23 * MINUTE
        )
        cpu = "container.cpu.utilization"
        queries: list[MetricQuery] = []
        aggregations: tuple[Aggregation, ...] = (
            "avg",
            "min",
            "max",
            "sum",
            "count",
            "last",
            "p50",
            "p90",
            "p99",
        )
        for aggregation in aggregations:
            queries.append(
                MetricQuery(name=cpu, time_range=window, step_ns=MINUTE, aggregation=aggregation)
            )
        matcher_sets = [
            [LabelMatcher(label="k8s.pod.name", value="pod-a")],
            [LabelMatcher(label="k8s.pod.name", op="!=", value="pod-a")],
            [LabelMatcher(label="k8s.pod.name", op="=~", value="pod-[ab]")],
            [LabelMatcher(label="k8s.pod.name", op="!~", value="pod-(a|c)")],
            [LabelMatcher(label="zone", value="")],  # missing label counts as ""
            [LabelMatcher(label="zone", op="!=", value="")],
            [LabelMatcher(label="service.name", value="frontend")],
        ]
        for matchers in matcher_sets:
            queries.append(
                MetricQuery(name=cpu, time_range=inner, step_ns=2 * MINUTE, matchers=matchers)
            )
        queries += [
            MetricQuery(
                name=cpu,
                time_range=window,
                step_ns=5 * MINUTE,
                aggregation="max",
                group_by=["zone"],
            ),
            MetricQuery(
                name=cpu, time_range=window, step_ns=5 * MINUTE, aggregation="sum", group_by=[]
            ),
            MetricQuery(
                name=cpu,
                time_range=window,
                step_ns=5 * MINUTE,
                aggregation="avg",
                service_name="checkout",
            ),
            MetricQuery(name=cpu, time_range=inner, step_ns=7 * SECOND, aggregation="count"),
            MetricQuery(
                name="http.server.request.count",
                time_range=window,
                step_ns=MINUTE,
                aggregation="rate",
            ),
            MetricQuery(
                name="http.server.request.count",
                time_range=inner,
                step_ns=3 * MINUTE,
                aggregation="rate",
                group_by=[],
            ),
            MetricQuery(
                name="http.server.request.count",
                time_range=window,
                step_ns=MINUTE,
                aggregation="last",
            ),
            MetricQuery(
                name="jobs.processed", time_range=window, step_ns=2 * MINUTE, aggregation="rate"
            ),
            MetricQuery(name="jobs.processed", time_range=inner, step_ns=MINUTE, aggregation="sum"),
            MetricQuery(
                name="jobs.processed", time_range=inner, step_ns=MINUTE, aggregation="rate"
            ),  # the last bucket is cut short by the range
            MetricQuery(
                name="http.server.request.duration",
                time_range=window,
                step_ns=2 * MINUTE,
                aggregation="p95",
            ),
            MetricQuery(
                name="http.server.request.duration",
                time_range=inner,
                step_ns=5 * MINUTE,
                aggregation="p50",
                group_by=[],
            ),
            MetricQuery(
                name="rpc.server.duration", time_range=window, step_ns=2 * MINUTE, aggregation="p90"
            ),
            MetricQuery(
                name="rpc.server.duration", time_range=inner, step_ns=4 * MINUTE, aggregation="p99"
            ),
            # Issue 17: count/sum/avg of histograms, the increase of cumulative sums, and the
            # metric type's default aggregation.
            MetricQuery(
                name="http.server.request.duration",
                time_range=window,
                step_ns=2 * MINUTE,
                aggregation="count",
            ),
            MetricQuery(
                name="http.server.request.duration",
                time_range=inner,
                step_ns=3 * MINUTE,
                aggregation="sum",
                group_by=[],
            ),
            MetricQuery(
                name="http.server.request.duration",
                time_range=window,
                step_ns=5 * MINUTE,
                aggregation="avg",
            ),
            MetricQuery(
                name="rpc.server.duration",
                time_range=inner,
                step_ns=2 * MINUTE,
                aggregation="count",
            ),
            MetricQuery(name="rpc.server.duration", time_range=window, step_ns=3 * MINUTE),
            MetricQuery(
                name="http.server.request.count",
                time_range=window,
                step_ns=MINUTE,
                aggregation="sum",
            ),
            MetricQuery(
                name="http.server.request.count",
                time_range=inner,
                step_ns=3 * MINUTE,
                aggregation="increase",
                group_by=[],
            ),
            MetricQuery(name="http.server.request.count", time_range=window, step_ns=MINUTE),
            MetricQuery(
                name="jobs.processed", time_range=inner, step_ns=MINUTE, aggregation="increase"
            ),
        ]
        for query in queries:
            expected = _expected_series(points, query)
            _expect(any(s.points for s in expected), f"the dataset answers {query}")
            actual = await store.metric_series(query, limit=MAX_LIMIT)
            applied = {s.aggregation for s in actual}
            _equal(applied, {e.aggregation for e in expected}, f"{query}: aggregation echoed")
            _same_series(
                actual,
                expected,
                f"metric_series({query.name}, {query.aggregation}, "
                f"matchers={query.matchers}, group_by={query.group_by})",
            )
        limited = await store.metric_series(
            MetricQuery(name=cpu, time_range=window, step_ns=MINUTE), limit=2
        )
        _equal(len(limited), 2, "metric_series limit=2")
        _equal(
            [s.labels for s in limited],
            [
                s.labels
                for s in _expected_series(
                    points, MetricQuery(name=cpu, time_range=window, step_ns=MINUTE)
                )[:2]
            ],
            "metric_series limit keeps the first series by labels",
        )
        unknown = await store.metric_series(
            MetricQuery(name="no.such.metric", time_range=window, step_ns=MINUTE), limit=10
        )
        _equal(unknown, [], "metric_series of an unknown metric")
        rejected: list[tuple[MetricQuery, str]] = [
            (
                MetricQuery(name=cpu, time_range=window, step_ns=MINUTE, aggregation="rate"),
                "aggregation",
            ),
            (
                MetricQuery(
                    name="http.server.request.count",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation="p95",
                ),
                "aggregation",
            ),
            (
                MetricQuery(
                    name="http.server.request.duration",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation="last",
                ),
                "aggregation",
            ),
            (
                MetricQuery(
                    name="http.server.request.duration",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation="increase",
                ),
                "aggregation",
            ),
            (
                MetricQuery(name=cpu, time_range=window, step_ns=MINUTE, aggregation="increase"),
                "aggregation",
            ),
            (MetricQuery(name="", time_range=window, step_ns=MINUTE), "name"),
            # A caller ignoring the types: refused, not a search for a name that cannot exist.
            (MetricQuery(name=cast(str, 42), time_range=window, step_ns=MINUTE), "name"),
            (MetricQuery(name=cpu, time_range=window, step_ns=0), "step_ns"),
            (MetricQuery(name=cpu, time_range=window, step_ns=-5), "step_ns"),
            (MetricQuery(name=cpu, time_range=window, step_ns=1), "step_ns"),
            (
                MetricQuery(
                    name=cpu,
                    time_range=window,
                    step_ns=MINUTE,
                    matchers=[LabelMatcher(label="k8s.pod.name", op="=~", value="(")],
                ),
                "matchers[0].value",
            ),
        ]
        for query, field in rejected:
            await _rejected(store.metric_series(query, limit=10), field, f"metric_series {query}")


SDK_DEFAULT_BOUNDS: Final = [
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    7500.0, 10000.0,
]  # fmt: skip
"""The OpenTelemetry SDKs' default explicit bucket boundaries."""


def _sdk_histogram(values: list[float], *, with_extremes: bool = True) -> HistogramValue:
    """A histogram of ``values`` in the SDK's default buckets, as an SDK exports it."""
    counts = [0] * (len(SDK_DEFAULT_BOUNDS) + 1)
    for value in values:
        counts[bisect.bisect_left(SDK_DEFAULT_BOUNDS, value)] += 1
    return HistogramValue(
        count=len(values),
        sum=sum(values),
        bucket_counts=counts,
        explicit_bounds=list(SDK_DEFAULT_BOUNDS),
        min=min(values) if with_extremes else None,
        max=max(values) if with_extremes else None,
    )


async def check_metric_math(make_store: MakeStore) -> None:
    """Known values, known answers (issue 17).

    Percentiles clamped to the exported min/max and the bucket they rest in, histogram
    count/sum/avg, the increase of a cumulative counter, and each type's default aggregation.
    """
    base = _base_time()
    window = TimeRange(start_unix_nano=base, end_unix_nano=base + 10 * MINUTE)

    def histogram(
        name: str, values: list[float], unit: str, *, extremes: bool = True
    ) -> MetricPoint:
        return MetricPoint(
            name=name,
            type="histogram",
            unit=unit,
            service_name="math",
            time_unix_nano=base + MINUTE,
            start_time_unix_nano=base,
            histogram=_sdk_histogram(values, with_extremes=extremes),
            temporality="cumulative",
        )

    def counter(at: int, value: float, start: int) -> MetricPoint:
        return MetricPoint(
            name="math.orders",
            type="sum",
            service_name="math",
            time_unix_nano=at,
            start_time_unix_nano=start,
            value=value,
            is_monotonic=True,
            temporality="cumulative",
        )

    points = [
        histogram("math.seconds", [0.05, 0.2, 1.5], "s"),
        histogram("math.millis", [100.0, 200.0, 300.0], "ms"),
        histogram("math.unclamped", [100.0, 200.0, 300.0], "ms", extremes=False),
        histogram("math.overflow", [20_000.0, 30_000.0], "ms"),
        # A counter at 5 exported twice, then at 8: it increased by 8, not 18.
        counter(base + MINUTE, 5.0, base + SECOND),
        counter(base + 2 * MINUTE, 5.0, base + SECOND),
        counter(base + 3 * MINUTE, 8.0, base + SECOND),
    ]

    async def one(name: str, aggregation: Aggregation | None) -> MetricSeries:
        query = MetricQuery(
            name=name, time_range=window, step_ns=10 * MINUTE, aggregation=aggregation
        )
        (series,) = await store.metric_series(query, limit=10)
        return series

    async with make_store() as store:
        await store.write(TelemetryBatch(metrics=points))
        expected: list[tuple[str, Aggregation | None, float, tuple[float, float] | None]] = [
            # all three in (0, 5]: clamped to [0.05, 1.5], not 2.5 / 4.95
            ("math.seconds", "p50", 0.05 + 1.45 * 0.5, (0.05, 1.5)),
            ("math.seconds", "p99", 0.05 + 1.45 * 0.99, (0.05, 1.5)),
            ("math.seconds", "count", 3.0, None),
            ("math.seconds", "sum", 1.75, None),
            ("math.seconds", "avg", 1.75 / 3, None),
            ("math.seconds", None, 0.05 + 1.45 * 0.95, (0.05, 1.5)),  # default p95
            # 300 in (250, 500]: clamped to max 300, not 492.5
            ("math.millis", "p99", 250.0 + 50.0 * 0.97, (250.0, 300.0)),
            ("math.millis", "p50", 175.0, (100.0, 250.0)),
            ("math.unclamped", "p99", 250.0 + 250.0 * 0.97, (250.0, 500.0)),
            # the +Inf bucket reaches up to the exported max
            ("math.overflow", "p50", 25_000.0, (20_000.0, 30_000.0)),
            ("math.orders", "sum", 8.0, None),
            ("math.orders", "increase", 8.0, None),
            ("math.orders", "last", 8.0, None),
        ]
        for name, aggregation, value, bounds in expected:
            series = await one(name, aggregation)
            what = f"metric_series({name}, {aggregation})"
            _equal(len(series.points), 1, f"{what}: one bucket")
            _close(series.points[0][1], value, what)
            _equal(series.aggregation, aggregation or DEFAULT_AGGREGATIONS[series.type], what)
            if bounds is None:
                _equal(series.quantile_bounds, None, f"{what}: no quantile bounds")
            else:
                _equal(len(series.quantile_bounds or []), 1, f"{what}: quantile bounds")
                got_lower, got_upper = (series.quantile_bounds or [(math.nan, math.nan)])[0]
                _close(got_lower, bounds[0], f"{what}: quantile bounds' lower end")
                _close(got_upper, bounds[1], f"{what}: quantile bounds' upper end")
        rate = await one("math.orders", None)
        _equal(rate.aggregation, "rate", "metric_series(math.orders): a sum's default is rate")


async def check_bucketed_series(make_store: MakeStore) -> None:
    """service_red_series and log_counts: services() and counted logs per bucket; steps."""
    data = make_dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans, logs=data.logs))
        window = data.window
        for step in (7 * MINUTE, HOUR, 4 * HOUR):
            red: dict[str, dict[int, list[Span]]] = defaultdict(lambda: defaultdict(list))
            for span in data.spans:
                if _in_range(span.start_time_unix_nano, window) and _is_entry(span):
                    bucket = (span.start_time_unix_nano - window.start_unix_nano) // step
                    red[span.service_name][window.start_unix_nano + bucket * step].append(span)
            expected_red = [
                (
                    name,
                    [
                        (
                            start,
                            len(spans),
                            sum(1 for s in spans if s.status_code == StatusCode.ERROR),
                            _nearest_rank([s.duration_ns for s in spans], 50),
                            _nearest_rank([s.duration_ns for s in spans], 95),
                            _nearest_rank([s.duration_ns for s in spans], 99),
                        )
                        for start, spans in sorted(buckets.items())
                    ],
                )
                for name, buckets in sorted(red.items())
            ]
            series = await store.service_red_series(window, step_ns=step, limit=MAX_LIMIT)
            actual_red = [
                (
                    one.service_name,
                    [
                        (
                            p.bucket_start_unix_nano,
                            p.request_count,
                            p.error_count,
                            p.p50_duration_ns,
                            p.p95_duration_ns,
                            p.p99_duration_ns,
                        )
                        for p in one.points
                    ],
                )
                for one in series
            ]
            _equal(actual_red, expected_red, f"service_red_series(step={step})")
            # One bucket's RED is services() over that bucket.
            name, points = expected_red[0]
            start = points[0][0]
            bucket_range = TimeRange(start_unix_nano=start, end_unix_nano=start + step)
            summary = next(
                s
                for s in (await store.services(bucket_range, limit=MAX_LIMIT)).items
                if s.service_name == name
            )
            _equal_red(
                [(summary.request_count, summary.p95_duration_ns)],
                [(points[0][1], points[0][4])],
                (1,),
                [summary.percentile_relative_error],
                "service_red_series against services() over the bucket",
            )
            limited = await store.service_red_series(window, step_ns=step, limit=2)
            _equal(
                [s.service_name for s in limited],
                [e[0] for e in expected_red[:2]],
                "service_red_series limit",
            )

            counts: dict[str, dict[int, list[int]]] = defaultdict(dict)
            for record in data.logs:
                if _in_range(record.time_unix_nano, window):
                    bucket = (record.time_unix_nano - window.start_unix_nano) // step
                    row = counts[record.service_name].setdefault(
                        window.start_unix_nano + bucket * step, [0, 0, 0]
                    )
                    row[0] += 1
                    row[1] += 13 <= record.severity_number <= 16
                    row[2] += record.severity_number >= 17
            expected_logs = [
                (name, [(start, *row) for start, row in sorted(buckets.items())])
                for name, buckets in sorted(counts.items())
            ]
            logs = await store.log_counts(window, step_ns=step, limit=MAX_LIMIT)
            actual_logs = [
                (
                    one.service_name,
                    [
                        (p.bucket_start_unix_nano, p.records, p.warn_records, p.error_records)
                        for p in one.points
                    ],
                )
                for one in logs
            ]
            _equal(actual_logs, expected_logs, f"log_counts(step={step})")
        empty = TimeRange(start_unix_nano=1, end_unix_nano=2)
        _equal(await store.service_red_series(empty, step_ns=1, limit=5), [], "empty range")
        _equal(await store.log_counts(empty, step_ns=1, limit=5), [], "empty range (logs)")
        for bad_step in (0, -MINUTE, 1):
            await _rejected(
                store.service_red_series(window, step_ns=bad_step, limit=5),
                "step_ns",
                f"service_red_series(step_ns={bad_step})",
            )
            await _rejected(
                store.log_counts(window, step_ns=bad_step, limit=5),
                "step_ns",
                f"log_counts(step_ns={bad_step})",
            )


async def check_nan_and_infinity(make_store: MakeStore) -> None:
    """NaN and ±Inf points are stored (counted, idempotent) and skipped by aggregations."""
    base = _base_time()
    special = [
        MetricPoint(
            name="queue.depth",
            type="gauge",
            time_unix_nano=base + i * SECOND,
            value=v,
            attributes={"queue": "q1"},
        )
        for i, v in enumerate([1.0, _NAN, _INF, 3.0, -_INF, _NAN])
    ]
    all_bad = [
        MetricPoint(
            name="queue.depth",
            type="gauge",
            time_unix_nano=base + i * SECOND,
            value=v,
            attributes={"queue": "q2"},
        )
        for i, v in enumerate([_NAN, _INF])
    ]
    async with make_store() as store:
        result = await store.write(TelemetryBatch(metrics=[*special, *all_bad]))
        _equal(result.metric_points_written, 8, "NaN/Inf points are stored")
        again = await store.write(TelemetryBatch(metrics=special))
        _equal(again.metric_points_duplicate, 6, "NaN/Inf points are idempotent")
        _equal((await store.statistics()).metric_point_count, 8, "NaN/Inf points counted")
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + MINUTE)
        cases: tuple[tuple[Aggregation, float], ...] = (
            ("avg", 2.0),
            ("min", 1.0),
            ("max", 3.0),
            ("sum", 4.0),
            ("count", 2.0),
            ("last", 3.0),
            ("p50", 1.0),
        )
        for aggregation, expected in cases:
            series = await store.metric_series(
                MetricQuery(
                    name="queue.depth",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation=aggregation,
                    matchers=[LabelMatcher(label="queue", value="q1")],
                ),
                limit=10,
            )
            _equal([s.points for s in series], [[(base, expected)]], f"{aggregation} skips NaN/Inf")
        only_bad = await store.metric_series(
            MetricQuery(
                name="queue.depth",
                time_range=window,
                step_ns=MINUTE,
                matchers=[LabelMatcher(label="queue", value="q2")],
            ),
            limit=10,
        )
        _equal([s.points for s in only_bad if s.points], [], "a bucket of NaN/Inf only is empty")
        names = await store.metric_names(window, limit=10)
        _equal([d.series_count for d in names.items], [2], "NaN-only series still listed")
