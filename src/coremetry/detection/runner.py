"""Detection over a telemetry store: series from the store, anomalies, problems with samples.

:func:`run_detection` is the entry point the CLI (``coremetry detect``) and, later, the
server's background task call. It reads through :class:`~coremetry.store.TelemetryStore`
only: per-service RED series from spans and every metric series
(:mod:`coremetry.detection.sources`), the service graph (``service_edges``), then judges each
series (:func:`~coremetry.detection.detect_series`, in a worker thread: it is pure CPU work)
and groups the anomalies into problems (:func:`~coremetry.detection.group_problems`), each
with a few sample trace ids and log lines of its most likely origin, looked up in the store.

Parameters for live data (:data:`LIVE_DETECTOR`): the NAB-tuned
:class:`~coremetry.detection.DetectorConfig` defaults, except that judging starts after 10
points of history instead of 72 (ten minutes at the default one-minute step): a live server
must say something about a service that started an hour ago. Everything else (thresholds,
evidence, envelope, seasonality) is the scored set.

Cancellation: the caller owns it; a cancelled run stops at its next store query or abandons
the (side-effect free) detection thread, and returns nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
import trio

from coremetry.store import (
    MAX_LIMIT,
    LogQuery,
    TelemetryStore,
    TimeRange,
    TraceQuery,
)

from .detector import Anomaly, DetectorConfig, Series, detect_series
from .problems import GroupingConfig, Problem, group_problems
from .sources import metric_series, red_series

__all__ = [
    "DEFAULT_STEP_NS",
    "LIVE_DETECTOR",
    "DetectionOptions",
    "DetectionRun",
    "detect_in_store",
    "run_detection",
]

DEFAULT_STEP_NS: Final = 60 * 1_000_000_000
"""Bucket width of the series judged by default: one minute."""

LIVE_DETECTOR: Final = DetectorConfig(min_history_points=10)
"""The detector parameters for live data (see the module docstring)."""

_SAMPLES: Final = 3
_LOG_LINE_CHARS: Final = 300
_WARN_SEVERITY: Final = 13  # OTel severity number of WARN


class DetectionOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How :func:`detect_in_store` reads and judges.

    Attributes:
        step_ns: bucket width of the series, in nanoseconds. Widened to whole minutes when
            the range would need more than ``MAX_LIMIT`` buckets.
        detector: detector parameters (default :data:`LIVE_DETECTOR`).
        grouping: problem grouping parameters.
        spans: judge per-service RED series built from spans.
        metrics: judge the stored metric series.
        samples: how many sample trace ids and log lines each problem gets (0: none).
    """

    step_ns: int = DEFAULT_STEP_NS
    detector: DetectorConfig = LIVE_DETECTOR
    grouping: GroupingConfig = GroupingConfig()
    spans: bool = True
    metrics: bool = True
    samples: int = _SAMPLES


class DetectionRun(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one detection run produced.

    Attributes:
        time_range: the range judged (unix ns, half-open).
        step_ns: the bucket width used.
        series_count: series judged.
        point_count: finite points judged or used as history, over all series.
        edges: the service graph used, ``(caller, callee)`` pairs.
        anomalies: every anomaly, by start time then series id.
        problems: the problems, by start time.
    """

    time_range: TimeRange
    step_ns: int
    series_count: int
    point_count: int
    edges: list[tuple[str, str]]
    anomalies: list[Anomaly]
    problems: list[Problem]


def _step_for(time_range: TimeRange, step_ns: int) -> int:
    if step_ns <= 0:
        raise ValueError("DetectionOptions.step_ns must be positive")
    span = time_range.end_unix_nano - time_range.start_unix_nano
    if span <= 0:
        raise ValueError("time_range: end must be after start")
    if math.ceil(span / step_ns) <= MAX_LIMIT:
        return step_ns
    minute = DEFAULT_STEP_NS
    return math.ceil(span / MAX_LIMIT / minute) * minute


def _judge(series: Sequence[Series], config: DetectorConfig) -> tuple[list[Anomaly], int]:
    found: list[Anomaly] = []
    points = 0
    for one in series:
        anomalies, summary = detect_series(one, config)
        found.extend(anomalies)
        points += summary.points
    found.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    return found, points


async def detect_in_store(
    store: TelemetryStore, time_range: TimeRange, options: DetectionOptions | None = None
) -> DetectionRun:
    """Read the store's series over ``time_range``, judge them and group the anomalies.

    Args:
        store: the telemetry store.
        time_range: what to judge (unix ns, half-open). Points before it are not used as
            history: include the history you want judged against (a few hours at least).
        options: see :class:`DetectionOptions`.

    Returns:
        The run (series, anomalies, problems with samples).

    Raises:
        ValueError: an empty or inverted range, a non-positive step, a bad detector config.
        StoreError: as the store's queries.
    """
    opts = options if options is not None else DetectionOptions()
    opts.detector.validate()
    step = _step_for(time_range, opts.step_ns)
    series: list[Series] = []
    if opts.spans:
        series.extend(await red_series(store, time_range, step))
    if opts.metrics:
        series.extend(await metric_series(store, time_range, step))
    edges = sorted(
        {
            (edge.caller, edge.callee)
            for edge in await store.service_edges(time_range, limit=MAX_LIMIT)
        }
    )
    anomalies, points = await trio.to_thread.run_sync(
        _judge, series, opts.detector, abandon_on_cancel=True
    )
    problems = group_problems(anomalies, edges, opts.grouping)
    if opts.samples > 0:
        problems = [await _with_samples(store, problem, step, opts.samples) for problem in problems]
    return DetectionRun(
        time_range=time_range,
        step_ns=step,
        series_count=len(series),
        point_count=points,
        edges=edges,
        anomalies=anomalies,
        problems=problems,
    )


async def run_detection(
    store: TelemetryStore, time_range: TimeRange, options: DetectionOptions | None = None
) -> list[Problem]:
    """The problems in ``time_range`` (see :func:`detect_in_store`), by start time."""
    return (await detect_in_store(store, time_range, options)).problems


async def _with_samples(store: TelemetryStore, problem: Problem, step: int, count: int) -> Problem:
    """Add sample trace ids and log lines of the problem's most likely origin."""
    if not problem.services:
        return problem
    origin = problem.services[0]
    window = TimeRange(
        start_unix_nano=problem.start_unix_nano,
        end_unix_nano=problem.end_unix_nano + step,
    )
    trace_ids: list[str] = []
    errors = await store.search_traces(
        TraceQuery(time_range=window, service_name=origin, status="error"), limit=count
    )
    trace_ids.extend(t.trace_id for t in errors.items)
    if len(trace_ids) < count:
        slow = [
            a
            for a in problem.anomalies
            if a.service_name == origin and a.signal == "latency" and a.unit == "s"
        ]
        threshold = int(min(a.baseline for a in slow) * 1e9) if slow else None
        more = await store.search_traces(
            TraceQuery(time_range=window, service_name=origin, min_duration_ns=threshold),
            limit=count,
        )
        trace_ids.extend(t.trace_id for t in more.items if t.trace_id not in trace_ids)
    logs = await store.search_logs(
        LogQuery(time_range=window, service_name=origin, min_severity_number=_WARN_SEVERITY),
        limit=count,
    )
    lines = [
        f"{_rfc3339(record.time_unix_nano)} {record.severity_text or record.severity_number} "
        f"{record.body[:_LOG_LINE_CHARS]}"
        for record in logs.items
    ]
    return msgspec.structs.replace(
        problem, sample_trace_ids=trace_ids[:count], sample_log_lines=lines
    )


def _rfc3339(unix_nano: int) -> str:
    moment = datetime.fromtimestamp(unix_nano // 1_000_000_000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
