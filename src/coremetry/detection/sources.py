"""The series the server-side detector judges, read from a telemetry store.

Three sources, each through :class:`~coremetry.store.TelemetryStore` only (so every backend
works):

- **RED per service, from spans** (:func:`red_series`): the store's bucketed per-service
  summary of entry spans (:meth:`TelemetryStore.service_red_series`, one query: request
  count, error count, p95/p99 duration per bucket) becomes four series per service —
  ``service.request.rate`` (requests/s, traffic, either way), ``service.error.ratio``
  (errors/requests, up), ``service.duration.p95`` and ``service.duration.p99`` (seconds, up;
  side ``server``: entry spans are the requests it served). A bucket in which a service served
  no request gives no point (sampled traces cannot tell "no traffic" from "not sampled").
- **Metric series** (:func:`metric_series`): every metric with points in the range, bucketed
  by the store (:meth:`TelemetryStore.metric_series`): gauges by ``avg``, monotonic sums by
  ``rate`` (per second), other sums by ``avg``, histograms by ``p99``. The metric's name
  decides what it measures (:func:`classify_metric`): ``*duration*``/``*latency*`` is latency
  (up), ``*error*``/``*fail*`` errors (up), ``*success*`` errors (down), request counts and
  rates and network/syscall rates traffic (either way), CPU/memory/utilization saturation (up),
  anything else ``other`` (either way). A latency whose name holds ``.client.`` is side
  ``client`` (the service waiting on its calls), ``.server.`` side ``server``. Node-level
  metrics (``k8s.node.*``, ``system.*`` of a node) are skipped when they carry a service: they
  describe the machine, not the service.
- **Log severity rates** (:func:`log_series`): the store's bucketed log counts per service
  (:meth:`TelemetryStore.log_counts`) become ``log.records.error`` (ERROR and worse) and
  ``log.records.warn`` (WARN) in records/s (signal ``logs``, up), with zero for every bucket
  from the service's first log record on (a service that logs nothing at ERROR logs zero
  errors; before its first record nothing is known). New log templates are read separately
  (:func:`warn_records`, mined by :mod:`coremetry.detection.templates`), and so are the
  records of every severity for log patterns (:func:`log_events`, judged by
  :mod:`coremetry.detection.events`).

Times are unix nanoseconds; a bucket's point is stamped with the bucket's start.
"""

from __future__ import annotations

from typing import Final

from coremetry.store import (
    MAX_LIMIT,
    LogQuery,
    MetricQuery,
    QueryRejected,
    TelemetryStore,
    TimeRange,
)
from coremetry.store.interface import Aggregation, LogCountPoint

from .detector import Series, Side, Signal, Watch

__all__ = [
    "classify_metric",
    "log_events",
    "log_series",
    "metric_series",
    "metric_side",
    "red_series",
    "warn_records",
]

_NS_PER_S: Final = 1_000_000_000
_WARN: Final = 13  # OTel severity number of WARN


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
        StoreError: as the store's ``service_red_series`` query.
    """
    if step_ns <= 0:
        raise ValueError("step_ns must be positive")
    step_s = step_ns / _NS_PER_S
    found: list[Series] = []
    red = await store.service_red_series(time_range, step_ns=step_ns, limit=MAX_LIMIT)
    for one in red:
        service = one.service_name
        kinds: list[tuple[str, list[tuple[int, float]], str, Signal, Watch, Side]] = [
            (
                "service.request.rate",
                [(p.bucket_start_unix_nano, p.request_count / step_s) for p in one.points],
                "{request}/s",
                "traffic",
                "both",
                "",
            ),
            (
                "service.error.ratio",
                [(p.bucket_start_unix_nano, p.error_count / p.request_count) for p in one.points],
                "1",
                "errors",
                "up",
                "",
            ),
            (
                "service.duration.p95",
                [(p.bucket_start_unix_nano, p.p95_duration_ns / _NS_PER_S) for p in one.points],
                "s",
                "latency",
                "up",
                "server",
            ),
            (
                "service.duration.p99",
                [(p.bucket_start_unix_nano, p.p99_duration_ns / _NS_PER_S) for p in one.points],
                "s",
                "latency",
                "up",
                "server",
            ),
        ]
        for name, points, unit, signal, watch, side in kinds:
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
                    side=side,
                )
            )
    return found


def metric_side(name: str) -> Side:
    """``client`` for a name holding ``.client.``, ``server`` for ``.server.``, else ``""``."""
    lowered = name.lower()
    if ".client." in lowered:
        return "client"
    if ".server." in lowered:
        return "server"
    return ""


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
                    side=metric_side(output.name) if signal == "latency" else "",
                )
            )
    return found


async def log_series(
    store: TelemetryStore, time_range: TimeRange, step_ns: int
) -> tuple[list[Series], dict[str, int]]:
    """Per-service ERROR and WARN log rates, and when each service started logging.

    Args:
        store: the store to read.
        time_range: the half-open range, unix ns.
        step_ns: bucket width in nanoseconds (> 0).

    Returns:
        ``(series, logging_since)``: two series per service with log records in the range
        (see the module docstring), ordered by service then name; and per service the start
        of its first bucket with a record.

    Raises:
        StoreError: as the store's ``log_counts`` query.
    """
    step_s = step_ns / _NS_PER_S
    found: list[Series] = []
    since: dict[str, int] = {}
    for one in await store.log_counts(time_range, step_ns=step_ns, limit=MAX_LIMIT):
        if not one.points:
            continue
        service = one.service_name
        first = one.points[0].bucket_start_unix_nano
        since[service] = first
        counts = {p.bucket_start_unix_nano: p for p in one.points}
        buckets = range(first, time_range.end_unix_nano, step_ns)
        for name, error in (("log.records.error", True), ("log.records.warn", False)):
            points = [
                (t, _count(counts[t], error) / step_s if t in counts else 0.0) for t in buckets
            ]
            found.append(
                Series(
                    series_id=f"logs/{service}/{name}",
                    name=name,
                    points=points,
                    labels={"service.name": service},
                    service_name=service,
                    unit="{record}/s",
                    watch="up",
                    signal="logs",
                )
            )
    return found, since


def _count(point: LogCountPoint, error: bool) -> int:
    return point.error_records if error else point.warn_records


async def warn_records(
    store: TelemetryStore, time_range: TimeRange, max_records: int
) -> tuple[list[tuple[str, int, str]], bool]:
    """The newest WARN-and-worse log records of the range, for template mining.

    Args:
        store: the store to read.
        time_range: the half-open range, unix ns.
        max_records: read at most this many (newest first), through pages of ``MAX_LIMIT``.

    Returns:
        ``(records, complete)``: ``(service_name, time_unix_nano, body)`` oldest first, and
        whether every such record of the range was read.

    Raises:
        StoreError: as the store's ``search_logs`` query.
    """
    query = LogQuery(time_range=time_range, min_severity_number=_WARN)
    found: list[tuple[str, int, str]] = []
    cursor: str | None = None
    while len(found) < max_records:
        page = await store.search_logs(
            query, limit=min(MAX_LIMIT, max_records - len(found)), cursor=cursor
        )
        found.extend((r.service_name, r.time_unix_nano, r.body) for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    found.reverse()
    return found, cursor is None


async def log_events(
    store: TelemetryStore, time_range: TimeRange, max_records: int
) -> list[tuple[str, int, str, str]]:
    """Every log record of the range (all severities), for :mod:`~coremetry.detection.events`.

    Returns:
        ``(service_name, time_unix_nano, trace_id, body)`` oldest first: the newest
        ``max_records`` of the range, through pages of ``MAX_LIMIT``.

    Raises:
        StoreError: as the store's ``search_logs`` query.
    """
    query = LogQuery(time_range=time_range)
    found: list[tuple[str, int, str, str]] = []
    cursor: str | None = None
    while len(found) < max_records:
        page = await store.search_logs(
            query, limit=min(MAX_LIMIT, max_records - len(found)), cursor=cursor
        )
        found.extend((r.service_name, r.time_unix_nano, r.trace_id, r.body) for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    found.reverse()
    return found
