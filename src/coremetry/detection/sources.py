"""The series the server-side detector judges, read from a telemetry store.

Two sources, each through :class:`~coremetry.store.TelemetryStore` only (so every backend
works):

- **RED per service, from spans** (:func:`red_series`): for each ``step_ns`` bucket, the
  store's per-service summary of entry spans (:meth:`TelemetryStore.services`: request count,
  error count, p95/p99 duration) becomes four series per service — ``service.request.rate``
  (requests/s, traffic, either way), ``service.error.ratio`` (errors/requests, up),
  ``service.duration.p95`` and ``service.duration.p99`` (seconds, up). A bucket in which a
  service served no request gives no point (sampled traces cannot tell "no traffic" from "not
  sampled"). The store has no bucketed RED query yet, so this is one ``services()`` query per
  bucket that holds spans (found by a first pass over blocks of 60 buckets): ~0.2 ms each on
  the embedded store. A bucketed store method would make it one query.
- **Metric series** (:func:`metric_series`): every metric with points in the range, bucketed
  by the store (:meth:`TelemetryStore.metric_series`): gauges by ``avg``, monotonic sums by
  ``rate`` (per second), other sums by ``avg``, histograms by ``p99``. The metric's name
  decides what it measures (:func:`classify_metric`): ``*duration*``/``*latency*`` is latency
  (up), ``*error*``/``*fail*`` errors (up), ``*success*`` errors (down), request counts and
  rates and network/syscall rates traffic (either way), CPU/memory/utilization saturation (up),
  anything else ``other`` (either way). Node-level metrics (``k8s.node.*``, ``system.*`` of a
  node) are skipped when they carry a service: they describe the machine, not the service.

Times are unix nanoseconds; a bucket's point is stamped with the bucket's start.
"""

from __future__ import annotations

from typing import Final

from coremetry.store import (
    MAX_LIMIT,
    MetricQuery,
    QueryRejected,
    TelemetryStore,
    TimeRange,
)
from coremetry.store.interface import Aggregation

from .detector import Series, Signal, Watch

__all__ = [
    "classify_metric",
    "metric_series",
    "red_series",
]

_NS_PER_S: Final = 1_000_000_000
_COARSE: Final = 60


def classify_metric(name: str) -> tuple[Signal, Watch]:
    """What a metric measures and which departures matter, from its (OTel-style) name.

    Returns:
        ``(signal, watch)``; see the module docstring for the rules.
    """
    lowered = name.lower()
    if "duration" in lowered or "latency" in lowered:
        return "latency", "up"
    if "success" in lowered:
        return "errors", "down"
    if "error" in lowered or "fail" in lowered:
        return "errors", "up"
    if "cpu" in lowered or "memory" in lowered or "utilization" in lowered:
        return "saturation", "up"
    if "request" in lowered or "network" in lowered or "syscall" in lowered:
        return "traffic", "both"
    return "other", "both"


async def red_series(store: TelemetryStore, time_range: TimeRange, step_ns: int) -> list[Series]:
    """Per-service RED series from entry spans, one point per bucket with requests.

    Args:
        store: the store to read.
        time_range: the half-open range, unix ns.
        step_ns: bucket width in nanoseconds (> 0).

    Returns:
        Four series per service with requests in the range (see the module docstring),
        ordered by service then name.

    Raises:
        ValueError: ``step_ns`` is not positive.
        StoreError: as the store's ``services`` query.
    """
    if step_ns <= 0:
        raise ValueError("step_ns must be positive")
    rate: dict[str, list[tuple[int, float]]] = {}
    errors: dict[str, list[tuple[int, float]]] = {}
    p95: dict[str, list[tuple[int, float]]] = {}
    p99: dict[str, list[tuple[int, float]]] = {}
    step_s = step_ns / _NS_PER_S
    for bucket in await _buckets_with_spans(store, time_range, step_ns):
        end = min(bucket + step_ns, time_range.end_unix_nano)
        page = await store.services(
            TimeRange(start_unix_nano=bucket, end_unix_nano=end), limit=MAX_LIMIT
        )
        for summary in page.items:
            if summary.request_count == 0:
                continue
            name = summary.service_name
            rate.setdefault(name, []).append((bucket, summary.request_count / step_s))
            errors.setdefault(name, []).append((bucket, summary.error_rate))
            if summary.p95_duration_ns is not None:
                p95.setdefault(name, []).append((bucket, summary.p95_duration_ns / _NS_PER_S))
            if summary.p99_duration_ns is not None:
                p99.setdefault(name, []).append((bucket, summary.p99_duration_ns / _NS_PER_S))

    found: list[Series] = []
    kinds: list[tuple[str, dict[str, list[tuple[int, float]]], str, Signal, Watch]] = [
        ("service.request.rate", rate, "{request}/s", "traffic", "both"),
        ("service.error.ratio", errors, "1", "errors", "up"),
        ("service.duration.p95", p95, "s", "latency", "up"),
        ("service.duration.p99", p99, "s", "latency", "up"),
    ]
    for service in sorted(rate):
        for name, table, unit, signal, watch in kinds:
            points = table.get(service)
            if points:
                found.append(
                    Series(
                        series_id=f"red/{service}/{name}",
                        name=name,
                        points=points,
                        labels={"service.name": service},
                        service_name=service,
                        unit=unit,
                        watch=watch,
                        signal=signal,
                    )
                )
    return found


async def _buckets_with_spans(
    store: TelemetryStore, time_range: TimeRange, step_ns: int
) -> list[int]:
    """Starts of the ``step_ns`` buckets that may hold spans.

    One ``services()`` query per block of :data:`_COARSE` buckets first, then only the buckets
    of blocks that had spans: imported or sampled traces are often sparse (the demo's spans
    cover 7 of its 741 minutes), and an empty block costs one query instead of 60.
    """
    block = step_ns * _COARSE
    found: list[int] = []
    for start in range(time_range.start_unix_nano, time_range.end_unix_nano, block):
        end = min(start + block, time_range.end_unix_nano)
        page = await store.services(TimeRange(start_unix_nano=start, end_unix_nano=end), limit=1)
        if page.items:
            found.extend(range(start, end, step_ns))
    return found


def _is_node_level(name: str) -> bool:
    return name.startswith(("k8s.node.", "system.", "node_"))


async def metric_series(store: TelemetryStore, time_range: TimeRange, step_ns: int) -> list[Series]:
    """Every stored metric series with points in the range, bucketed by ``step_ns``.

    Args:
        store: the store to read.
        time_range: the half-open range, unix ns.
        step_ns: bucket width in nanoseconds; at most ``MAX_LIMIT`` buckets fit the range.

    Returns:
        One :class:`Series` per stored series (name and labels), ordered by name then labels.

    Raises:
        StoreError: as the store's queries (``QueryRejected("step_ns", ...)`` when the range
            needs more than ``MAX_LIMIT`` buckets).
    """
    names = await store.metric_names(time_range, limit=MAX_LIMIT)
    found: list[Series] = []
    for descriptor in names.items:
        aggregations: list[Aggregation]
        if descriptor.type == "histogram":
            aggregations = ["p99"]
        elif descriptor.type == "sum":
            aggregations = ["rate", "avg"]  # rate applies to monotonic sums only
        else:
            aggregations = ["avg"]
        outputs = None
        for aggregation in aggregations:
            query = MetricQuery(
                name=descriptor.name,
                time_range=time_range,
                step_ns=step_ns,
                aggregation=aggregation,
            )
            try:
                outputs = await store.metric_series(query, limit=MAX_LIMIT)
            except QueryRejected as exc:
                if exc.field == "step_ns" or aggregation == aggregations[-1]:
                    raise
                continue
            break
        signal, watch = classify_metric(descriptor.name)
        for output in outputs or []:
            service = output.labels.get("service.name", "")
            if service and _is_node_level(output.name):
                continue
            label_text = ",".join(f"{k}={v}" for k, v in sorted(output.labels.items()))
            found.append(
                Series(
                    series_id=f"metric/{output.name}{{{label_text}}}",
                    name=output.name,
                    points=output.points,
                    labels=dict(output.labels),
                    service_name=service,
                    unit=output.unit,
                    watch=watch,
                    signal=signal,
                )
            )
    return found
