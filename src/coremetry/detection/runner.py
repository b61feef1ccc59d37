"""Detection over a telemetry store: series from the store, anomalies, problems with samples.

:func:`detect_in_store` is the entry point of ``coremetry detect`` and of the server's
background task (:mod:`coremetry.detection.service`). It reads through
:class:`~coremetry.store.TelemetryStore` only:

1. the series (:mod:`coremetry.detection.sources`): per-service RED from spans, every metric
   series, per-service ERROR/WARN log rates; the service graph (``service_edges``);
2. judges each series (:func:`~coremetry.detection.detect_series`) and mines the WARN-and-worse
   log records for new templates (:mod:`coremetry.detection.templates`), in a worker thread
   (pure CPU work);
3. groups the anomalies into problems, one per onset, ranked with the evidence of every series
   (:func:`~coremetry.detection.group_problems`, in the thread too);
4. for every problem whose span holds traces (``trace_problems``: all by default;
   a limit is an option, never silent): compares the traces of the problem's span (its
   first onset to its end, at most ten minutes) with *reference* traces of the same kinds of
   request from the ``history_ns`` before it (:mod:`~coremetry.detection.spectrum`: which
   service's critical-path time grew against its own usual, or which service began
   originating errors; the window's slow traces are told from the summaries of all its
   traces and a sample of them is read besides the even sample), and ranks again with that
   (:func:`~coremetry.detection.problems.with_trace_blame`). The run lists its trace
   summaries once and reads each trace at most once. Only where no reference exists at all
   does it fall back to slow against typical traces of the window itself;
5. drops problems nobody should be paged for: fewer than ``min_corroboration`` independent
   symptoms among their anomalies — distinct ``(service, signal, side)`` triples, traffic
   changes left out — and no origin named by their traces (one series crossing its threshold among
   the hundreds tested is chance, not an incident). Traces corroborate a problem's symptoms
   only: a problem of traffic changes alone is not raised on its traces. A traffic change is
   usually a consequence (as in the grouping), and the slowdown its window's traces show
   belongs to the incident whose symptoms began there; raised on them, the traffic problem
   came first and named what the early part of the slowdown's traces blamed (on a whole
   fault day, a bystander's traffic drop opened a minute before the CPU contention it
   followed from and named another service). Series of one signal of one service are
   not independent: a pod's CPU usage and its CPU limit utilisation are one figure divided by
   a constant, the quantiles of one histogram move together, memory usage and memory limit
   utilisation likewise; and a traffic change is usually a consequence, not a symptom (as in
   the grouping). Counting those as corroboration made most of the remaining false problems
   on a whole fault day (two series of one pod's CPU, or one latency plus its pod's syscalls).
   A service's client latency (waiting on its calls) and its server latency (its requests)
   are two measurements: both rising is the mark of a caller waiting on a slow callee.
   A utilisation that reaches ``saturation_level`` of its limit needs no second symptom: a
   physical limit reached is not a chance crossing;
6. opens a problem from traces alone (:func:`_trace_only_problems`) in a step of the range
   that no problem covers, when the step's slow traces — told from the summaries of all of
   them against the ``history_ns`` before it, as in step 4 — pass through one service more
   often than its reference rate allows by chance: the binomial tail of the slow traces
   through the service among the step's traces through it, at its share of slow traces in
   the reference period (Laplace's rule, ``(slow + 1) / (traces + 2)``), times the number
   of services tested (Bonferroni), at most ``trace_alpha``. This is the first phase of
   spectrum-based trace analysis (MicroRank, Yu et al., WWW 2021; TraceRCA, Li et al.,
   IWQoS 2021: anomalous traces told from normal ones, then the services the anomalous
   ones concentrate on), used as a detector: a network delay on a service whose own
   series are as noisy before the fault as during it shows in no series, only in the
   traces through it. The problem is ranked by its traces' comparison with their
   reference (step 4; none named: no problem) and its one anomaly is the share of slow
   traces through that service (unit ``1``, baseline the reference share, score the
   normal quantile of the corrected tail). Consecutive significant steps, each within
   ``quiet_gap_ns`` of the last, are one slowdown; a slowdown that began while a problem was
   beginning (from ``quiet_gap_ns`` before its first onset to the end of its onset, as the
   grouping bounds it) is that problem's (traces often show a fault a step before the
   series do), and opens none when the problem's onset is over and its traces are still
   slow;
6b. joins to each problem the log template frequency and sequence changes of its services
   (:mod:`~coremetry.detection.events`: every log record of the range and the
   ``history_ns`` before it, all severities, per service and step against the hour before;
   Nezha's event patterns), as evidence lines of those services and as symptoms (signal
   ``logs``) for step 5's count, which runs after it (``log_pattern_alpha``);
7. samples the evidence of each problem's first ranked services (``sample_candidates``,
   default 3: the origin and the two it was preferred to), each its own, from the problem's
   start to a step after its end: up to ``samples`` trace ids of traces passing through the
   service — those with an error it originated first, then those slow against the same
   requests before (as in step 4), the ones where its critical-path time is largest first;
   taken from the run's listing of trace summaries and the traces it already analysed, so
   no trace is read for it — and up to ``samples`` of its log lines: its WARN-and-worse
   lines, else the lines of its *most-changed template* (its lines of the window and of the
   ``history_ns`` before, mined together into Drain templates: the template whose share of
   its lines grew most; a fault that shows only in INFO lines shows there). Each service's
   ``samples_note`` says how its samples were chosen; the problem's own samples are its
   origin's.

Steps 4, 6 and 7 read the summaries of overlapping ranges: the run lists the union once (at
most 50,000 summaries, the newest) and slices it; each trace is read and analysed at most
once per run.

Buckets are aligned on the epoch (:func:`aligned_range`): the judged range is moved down onto
a fixed grid — whole multiples of the step since 1970-01-01T00:00:00Z, plus half a step — so
every run (the server's every minute, ``coremetry detect`` now or later, a restarted process)
cuts the same buckets of the same data, and unchanged data gives the same anomalies and problem
ids whenever it is judged. The half step keeps bucket edges off whole minutes, where many
exporters and scrapers report (a point on an edge falls in either bucket with its jitter); on
the Nezha day, a grid on whole minutes loses the injected service as the origin of one CPU
contention fault (``tests/detection/test_nezha.py``).

Parameters for live data (:data:`LIVE_DETECTOR`): the NAB-tuned
:class:`~coremetry.detection.DetectorConfig` defaults, except that judging starts after 10
points of history instead of 72 (ten minutes at the default one-minute step): a live server
must say something about a service that started an hour ago. Everything else (thresholds,
evidence, envelope, seasonality) is the scored set.

``detected_unix_nano`` of an anomaly of a bucketed series is the *end* of the bucket whose
point completed the evidence: the bucket's point is stamped with its start, but the data that
shows the anomaly is only complete at its end, so a problem is never "detected" before the
data that shows it (it was stamped up to a step early, before the fault it detects). New log
template anomalies keep the time of the record that completed their evidence.

Cancellation: the caller owns it; a cancelled run stops at its next store query or abandons
the (side-effect free) worker thread, and returns nothing.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import statistics
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
import trio

from coremetry.analysis import CriticalPathTally, analyse_trace, critical_path_excess
from coremetry.store import (
    MAX_LIMIT,
    MAX_TRACES_PER_READ,
    LogQuery,
    LogRecord,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    TraceSummary,
)

from .detector import Anomaly, DetectorConfig, Series, detect_series
from .events import MAX_EVENTS, log_pattern_anomalies, with_log_patterns
from .problems import (
    GroupingConfig,
    Problem,
    SeriesIndex,
    TraceBlame,
    evidence_window,
    group_problems,
    index_series,
    with_trace_blame,
)
from .sources import log_events, log_series, metric_series, red_series, warn_records
from .spectrum import (
    TraceProfile,
    binomial_tail,
    compare_to_reference,
    kind_error_rates,
    profile_trace,
    slow_by_summary,
)
from .templates import Template, TemplateMiner, new_template_anomalies

__all__ = [
    "DEFAULT_STEP_NS",
    "LIVE_DETECTOR",
    "DetectionOptions",
    "DetectionRun",
    "TraceCache",
    "aligned_range",
    "detect_in_store",
    "grid_floor",
    "run_detection",
]

DEFAULT_STEP_NS: Final = 60 * 1_000_000_000
"""Bucket width of the series judged by default: one minute."""

LIVE_DETECTOR: Final = DetectorConfig(min_history_points=10)
"""The detector parameters for live data (see the module docstring)."""

TraceCache = MutableMapping[tuple[str, int, int], "TraceBlame | None"]
"""What the traces of a problem's window said, by ``(problem_id, window start, window end)``:
a caller running detection repeatedly (the server's task) passes the same mapping each time so
a closed window's traces are read once."""

_SAMPLES: Final = 3
_SAMPLE_CANDIDATES: Final = 3
_LOG_LINE_CHARS: Final = 300
_LOG_READ: Final = 200  # log records read per side to find a service's most-changed template
_TEMPLATE_CHARS: Final = 120
_WARN_SEVERITY: Final = 13  # OTel severity number of WARN
_TRACE_POOL: Final = 200  # trace summaries sampled per problem window
_MIN_GROUP_TRACES: Final = 4  # traces through a root service needed to split slow/typical
_ANALYSIS_SPANS: Final = 2_000  # spans read per trace
_REFERENCE_SLICES: Final = 4  # whole grid slices of the history (plus the part-slice before)
_TRACE_SPAN_NS: Final = 10 * DEFAULT_STEP_NS  # longest window of a problem's traces
_CATALOGUE: Final = 50_000  # trace summaries a run lists at most for references


class DetectionOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How :func:`detect_in_store` reads and judges.

    Attributes:
        step_ns: bucket width of the series, in nanoseconds. Widened to whole minutes when
            the range would need more than ``MAX_LIMIT`` buckets.
        detector: detector parameters (default :data:`LIVE_DETECTOR`).
        grouping: problem grouping and evidence parameters.
        spans: judge per-service RED series built from spans.
        metrics: judge the stored metric series.
        logs: judge per-service ERROR/WARN log rates and new log templates.
        max_log_records: WARN-and-worse records read for template mining (newest first).
        samples: how many sample trace ids and log lines each sampled service of a problem
            gets (0: none; module docstring, step 7).
        sample_candidates: how many of a problem's ranked services, from the first, get
            their own samples (default 3: the origin and the two it was preferred to; 0:
            none). The problem's own samples are its origin's.
        trace_samples: traces read per slice for the comparison with a reference: up to
            ``3 * trace_samples`` of the problem's window (spread over it) and
            ``trace_samples`` from each of five slices of the ``history_ns`` before it, and
            up to ``trace_samples`` of the window's traces whose summaries are slow
            against the reference period (for the latency comparison only:
            :func:`~coremetry.detection.spectrum.slow_by_summary`) (0: traces are not
            compared). Without a reference, slow and typical traces read per root service of
            the window.
        trace_problems: problems (newest first) whose traces are compared, at most; ``None``
            (the default): every problem whose window holds traces, so the answer for a
            problem does not depend on where the judged range ends.
        min_corroboration: a problem is reported only when its anomalies cover at least this
            many independent symptoms — distinct ``(service, signal, side)`` triples, traffic
            changes not counted (module docstring, step 5) — or its traces, compared with their
            reference, name an origin and it has a symptom (not only traffic changes); 1:
            every group of anomalies is a problem. One series crossing its threshold among
            the hundreds a run tests is what most false problems were.
        trace_alpha: a step no problem covers opens a problem from its traces alone when
            the slow traces through one service are more than chance at its reference rate
            allows: the binomial tail times the number of services tested (Bonferroni) at
            most this (module docstring, step 6; default 0.01); ``None``: only series open
            problems.
        log_pattern_alpha: the level of the log template frequency and sequence tests of
            :mod:`~coremetry.detection.events` (per service and step, Bonferroni over the
            templates or transitions tested; default 0.001): their changes join the problems of
            their service as evidence and symptoms (module docstring, step 6b); ``None``: not
            tested (every log record of the range is read and mined when set).
    """

    step_ns: int = DEFAULT_STEP_NS
    detector: DetectorConfig = LIVE_DETECTOR
    grouping: GroupingConfig = GroupingConfig()
    spans: bool = True
    metrics: bool = True
    logs: bool = True
    max_log_records: int = 20_000
    samples: int = _SAMPLES
    sample_candidates: int = _SAMPLE_CANDIDATES
    trace_samples: int = 10
    trace_problems: int | None = None
    min_corroboration: int = 2
    trace_alpha: float | None = 0.01
    log_pattern_alpha: float | None = 0.001


class DetectionRun(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one detection run produced.

    Attributes:
        time_range: the range judged (unix ns, half-open; on the epoch grid of ``step_ns``).
        step_ns: the bucket width used.
        series_count: series judged.
        point_count: finite points judged or used as history, over all series.
        edges: the service graph used, ``(caller, callee)`` pairs.
        anomalies: every anomaly, by start time then series id.
        problems: the problems, by start time.
        log_records_mined: WARN-and-worse log records mined for templates.
        log_records_complete: every such record of the range was mined (else the newest
            ``max_log_records``).
    """

    time_range: TimeRange
    step_ns: int
    series_count: int
    point_count: int
    edges: list[tuple[str, str]]
    anomalies: list[Anomaly]
    problems: list[Problem]
    log_records_mined: int = 0
    log_records_complete: bool = True


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


def aligned_range(time_range: TimeRange, step_ns: int) -> TimeRange:
    """``time_range`` moved down onto the epoch grid of ``step_ns``: what a run judges.

    Both ends are floored onto the grid ``k * step_ns + step_ns // 2`` (:func:`grid_floor`;
    unix ns since the epoch; the half step: module docstring), so the buckets ``[start +
    k*step, start + (k+1)*step)`` the store cuts do not depend on when the run happens (a
    process's start time, the minute ``coremetry detect`` was typed), and the last bucket is
    whole (a partial last bucket would show a fall in traffic that is only the
    range's end). A range that holds no whole step keeps one bucket: the one its start falls in.

    Args:
        time_range: the requested range (unix ns, half-open, end after start).
        step_ns: the bucket width (> 0).

    Returns:
        The aligned range (unix ns, half-open).
    """
    start = grid_floor(time_range.start_unix_nano, step_ns)
    end = max(grid_floor(time_range.end_unix_nano, step_ns), start + step_ns)
    return TimeRange(start_unix_nano=start, end_unix_nano=end)


def grid_floor(unix_nano: int, step_ns: int) -> int:
    """The latest bucket edge at or before ``unix_nano``: ``k * step_ns + step_ns // 2``.

    The grid of :func:`aligned_range` (unix ns; ``step_ns`` > 0).
    """
    phase = step_ns // 2
    return (unix_nano - phase) // step_ns * step_ns + phase


def _judge(
    series: Sequence[Series],
    edges: list[tuple[str, str]],
    records: list[tuple[str, int, str]],
    logging_since: dict[str, int],
    time_range: TimeRange,
    step: int,
    opts: DetectionOptions,
) -> tuple[list[Anomaly], int, list[Problem]]:
    """The CPU part of a run: every series judged, templates mined, problems grouped."""
    found: list[Anomaly] = []
    points = 0
    for one in series:
        anomalies, summary = detect_series(one, opts.detector)
        # A bucket's point is stamped with its start, but its evidence is complete only at
        # its end: an anomaly is raised then, never before the data that shows it.
        found.extend(
            msgspec.structs.replace(
                a,
                detected_unix_nano=min(a.detected_unix_nano + step, time_range.end_unix_nano),
            )
            for a in anomalies
        )
        points += summary.points
    found.extend(
        new_template_anomalies(
            records,
            logging_since,
            step_ns=step,
            end_unix_nano=time_range.end_unix_nano,
            config=opts.detector,
        )
    )
    found.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    problems = group_problems(
        found, edges, opts.grouping, series, end_unix_nano=time_range.end_unix_nano
    )
    return found, points, problems


async def detect_in_store(
    store: TelemetryStore,
    time_range: TimeRange,
    options: DetectionOptions | None = None,
    *,
    trace_cache: TraceCache | None = None,
) -> DetectionRun:
    """Read the store's series over ``time_range``, judge them and group the anomalies.

    Args:
        store: the telemetry store.
        time_range: what to judge (unix ns, half-open), moved down onto the epoch grid of
            the step (:func:`aligned_range`; the run's ``time_range`` is the aligned one).
            Points before it are not used as history: include the history you want judged
            against (a few hours at least).
        options: see :class:`DetectionOptions`.
        trace_cache: see :data:`TraceCache` (``None``: traces are read every time).

    Returns:
        The run (series, anomalies, problems with samples).

    Raises:
        ValueError: an empty or inverted range, a non-positive step, a bad detector or
            grouping config or ``trace_alpha`` (the field named).
        StoreError: as the store's queries.
    """
    opts = options if options is not None else DetectionOptions()
    opts.detector.validate()
    opts.grouping.validate()
    if opts.trace_alpha is not None and not 0 < opts.trace_alpha < 1:
        raise ValueError("DetectionOptions.trace_alpha must be in (0, 1) or None")
    if opts.log_pattern_alpha is not None and not 0 < opts.log_pattern_alpha < 1:
        raise ValueError("DetectionOptions.log_pattern_alpha must be in (0, 1) or None")
    if opts.samples < 0 or opts.sample_candidates < 0:
        field = "samples" if opts.samples < 0 else "sample_candidates"
        raise ValueError(f"DetectionOptions.{field} must not be negative")
    step = _step_for(time_range, opts.step_ns)
    time_range = aligned_range(time_range, step)
    series: list[Series] = []
    if opts.spans:
        series.extend(await red_series(store, time_range, step))
    if opts.metrics:
        series.extend(await metric_series(store, time_range, step))
    records: list[tuple[str, int, str]] = []
    logging_since: dict[str, int] = {}
    complete = True
    if opts.logs:
        rates, logging_since = await log_series(store, time_range, step)
        series.extend(rates)
        if opts.max_log_records > 0:
            records, complete = await warn_records(store, time_range, opts.max_log_records)
    edges = sorted(
        {
            (edge.caller, edge.callee)
            for edge in await store.service_edges(time_range, limit=MAX_LIMIT)
        }
    )
    anomalies, points, problems = await trio.to_thread.run_sync(
        _judge,
        series,
        edges,
        records,
        logging_since,
        time_range,
        step,
        opts,
        abandon_on_cancel=True,
    )
    # The run's trace summaries (steps 4, 6, 7), listed at most once, and every trace it
    # read and analysed, by id.
    listing = _run_catalogue(store, time_range, problems, step, opts.grouping)
    profiles: dict[str, TraceProfile | None] = {}
    if opts.trace_samples > 0 and (opts.trace_problems is None or opts.trace_problems > 0):
        problems = await _with_traces(
            store,
            problems,
            edges,
            series,
            step,
            opts,
            trace_cache if trace_cache is not None else {},
            listing,
            profiles,
        )
    if opts.trace_alpha is not None and opts.trace_samples > 0:
        problems = await _trace_only_problems(
            store, problems, time_range, edges, series, step, opts, listing, profiles
        )
    if opts.logs and opts.log_pattern_alpha is not None:
        problems = await _with_log_patterns(store, problems, time_range, step, opts)
    if opts.min_corroboration > 1:
        problems = [
            p
            for p in problems
            if _corroborated(p, opts.min_corroboration, opts.grouping.saturation_level)
        ]
    if opts.samples > 0:
        problems = [
            await _with_samples(store, problem, step, opts, listing, profiles)
            for problem in problems
        ]
    return DetectionRun(
        time_range=time_range,
        step_ns=step,
        series_count=len(series),
        point_count=points,
        edges=edges,
        anomalies=anomalies,
        problems=problems,
        log_records_mined=len(records),
        log_records_complete=complete,
    )


async def _with_log_patterns(
    store: TelemetryStore,
    problems: list[Problem],
    time_range: TimeRange,
    step: int,
    opts: DetectionOptions,
) -> list[Problem]:
    """The problems with their services' log pattern changes joined (step 5b)."""
    if not problems or opts.log_pattern_alpha is None:
        return problems
    history = opts.grouping.history_ns
    # Only the steps a pattern could join a problem in are judged (and their reference read).
    windows = [evidence_window(p, opts.grouping) for p in problems]
    low = max(time_range.start_unix_nano, min(w.start_unix_nano for w in windows) - step)
    high = min(time_range.end_unix_nano, max(w.end_unix_nano for w in windows) + step)
    judged = aligned_range(TimeRange(start_unix_nano=low, end_unix_nano=high), step)
    records = await log_events(
        store,
        TimeRange(
            start_unix_nano=judged.start_unix_nano - history,
            end_unix_nano=judged.end_unix_nano,
        ),
        MAX_EVENTS,
    )
    patterns = await trio.to_thread.run_sync(
        functools.partial(
            log_pattern_anomalies,
            records,
            step_ns=step,
            history_ns=history,
            time_range=judged,
            alpha=opts.log_pattern_alpha,
        ),
        abandon_on_cancel=True,
    )
    return with_log_patterns(problems, patterns, opts.grouping, step)


def _corroborated(problem: Problem, needed: int, saturation_level: float) -> bool:
    """Whether a problem is corroborated (:attr:`DetectionOptions.min_corroboration`).

    Enough independent symptoms among its anomalies — distinct ``(service, signal, side)``
    triples, traffic changes left out — or its traces, compared with their reference, name an
    origin while it has at least one symptom (a second, independent signal; traffic changes
    alone are consequences, not symptoms the traces could corroborate), or a utilisation
    (unit ``1``) reached ``saturation_level`` of its limit (a physical limit, not a chance
    crossing).
    """
    symptoms = {
        (a.service_name, a.signal, a.side) for a in problem.anomalies if a.signal != "traffic"
    }
    if problem.trace_blame is not None and problem.trace_blame.reference and symptoms:
        return True  # traces corroborate a symptom, not a traffic change alone
    if any(
        a.signal == "saturation"
        and a.unit == "1"
        and a.direction == "up"
        and a.observed >= saturation_level
        for a in problem.anomalies
    ):
        return True  # a utilisation at its limit is not a chance crossing
    return len(symptoms) >= needed


async def run_detection(
    store: TelemetryStore, time_range: TimeRange, options: DetectionOptions | None = None
) -> list[Problem]:
    """The problems in ``time_range`` (see :func:`detect_in_store`), by start time."""
    return (await detect_in_store(store, time_range, options)).problems


def _trace_window(problem: Problem, step: int, grouping: GroupingConfig) -> TimeRange:
    """The window of a problem's traces compared with their reference (step 4).

    Metric points are stamped at their bucket's start: the window's last bucket runs one
    step further. The traces are read while the problem lasts (a delay shows in requests
    that started after it began), at most :data:`_TRACE_SPAN_NS` from its start.
    """
    began = evidence_window(problem, grouping)
    return TimeRange(
        start_unix_nano=began.start_unix_nano,
        end_unix_nano=min(
            max(began.end_unix_nano, problem.end_unix_nano) + step,
            began.start_unix_nano + _TRACE_SPAN_NS,
        ),
    )


class _Catalogue:
    """The run's trace summaries, listed once and sliced by every step that needs them.

    Steps 4, 6 and 7 (module docstring) each need the summaries of part of one range: from
    ``history_ns`` before the judged range (or its earliest problem) to the latest trace
    window of a problem. Listing it once (at most :data:`_CATALOGUE` summaries, the newest)
    and slicing it gives each step what its own listing gave, without reading the
    overlapping ranges twice.

    Args:
        store: the store.
        time_range: the union to list (unix ns, half-open).
    """

    def __init__(self, store: TelemetryStore, time_range: TimeRange) -> None:
        self._store = store
        self.time_range = time_range
        self._summaries: list[TraceSummary] | None = None
        self._starts: list[int] = []

    async def summaries(self) -> list[TraceSummary]:
        """Every summary listed, oldest first (listed on the first call)."""
        if self._summaries is None:
            self._summaries = await _catalogue_of(self._store, self.time_range)
            self._starts = [t.start_time_unix_nano for t in self._summaries]
        return self._summaries

    @property
    def starts(self) -> list[int]:
        """The listed summaries' start times (unix ns), in order (after :meth:`summaries`)."""
        return self._starts

    async def covering(self, time_range: TimeRange) -> list[TraceSummary] | None:
        """The summaries starting in ``time_range``, oldest first, or ``None``.

        ``None``: the listing does not hold all of it (outside the union, or older than the
        newest :data:`_CATALOGUE` summaries kept).
        """
        found = await self.summaries()
        low, high = time_range.start_unix_nano, time_range.end_unix_nano
        if low < self.time_range.start_unix_nano or high > self.time_range.end_unix_nano:
            return None
        if len(found) >= _CATALOGUE and low <= found[0].start_time_unix_nano:
            return None  # the listing was cut at its oldest end
        return found[bisect.bisect_left(self._starts, low) : bisect.bisect_left(self._starts, high)]


def _run_catalogue(
    store: TelemetryStore,
    time_range: TimeRange,
    problems: Sequence[Problem],
    step: int,
    grouping: GroupingConfig,
) -> _Catalogue:
    """The run's :class:`_Catalogue`: the union of what steps 4, 6 and 7 read.

    From ``history_ns`` before the judged range (step 6's reference; a problem starts in the
    range, so its reference is inside it) to the latest of a step after the range's end (a
    sample window, step 7) and a problem's trace window (step 4).
    """
    high = time_range.end_unix_nano + step  # a sample window ends a step after its problem
    for problem in problems:
        high = max(
            high,
            problem.end_unix_nano + step,
            _trace_window(problem, step, grouping).end_unix_nano + 1,
        )
    low = min([time_range.start_unix_nano, *(p.start_unix_nano for p in problems)])
    return _Catalogue(
        store, TimeRange(start_unix_nano=low - grouping.history_ns, end_unix_nano=high)
    )


async def _with_traces(
    store: TelemetryStore,
    problems: list[Problem],
    edges: list[tuple[str, str]],
    series: list[Series],
    step: int,
    opts: DetectionOptions,
    cache: TraceCache,
    catalogue: _Catalogue,
    profiles: dict[str, TraceProfile | None],
) -> list[Problem]:
    """Rank again the problems whose window holds traces (module docstring, step 4).

    ``catalogue`` is listed only when a window is not in ``cache``; ``profiles`` holds
    every trace the run read and analysed, by trace id (read once per run).
    """
    done = 0
    ranked = list(problems)
    by_window: dict[tuple[int, int], TraceBlame | None] = {}
    series_index: SeriesIndex | None = None  # the run's series by service, built once
    for index in sorted(range(len(problems)), key=lambda i: -problems[i].start_unix_nano):
        if opts.trace_problems is not None and done >= opts.trace_problems:
            break
        problem = problems[index]
        window = _trace_window(problem, step, opts.grouping)
        key = (problem.problem_id, window.start_unix_nano, window.end_unix_nano)
        if key in cache:
            blame = cache[key]
        elif (window.start_unix_nano, window.end_unix_nano) in by_window:
            blame = by_window[(window.start_unix_nano, window.end_unix_nano)]
            cache[key] = blame
        else:
            summaries = await catalogue.summaries()
            starts = catalogue.starts
            pool = summaries[
                bisect.bisect_left(starts, window.start_unix_nano) : bisect.bisect_left(
                    starts, window.end_unix_nano
                )
            ]
            if len(pool) < _MIN_GROUP_TRACES:
                cache[key] = None
                continue
            done += 1
            compared, blame = await _reference_blame(
                store,
                pool,
                summaries,
                window,
                opts.grouping.history_ns,
                opts.trace_samples,
                profiles,
            )
            if not compared:  # no reference to compare with: slow against typical traces
                blame = await _trace_blame(store, pool, opts.trace_samples)
            cache[key] = blame
            by_window[(window.start_unix_nano, window.end_unix_nano)] = blame
        if blame is not None:
            if series_index is None:
                series_index = index_series(series)
            ranked[index] = with_trace_blame(
                problem, blame, edges, series, opts.grouping, index=series_index
            )
    return ranked


_MIN_TRACE_P: Final = 1e-15  # smallest tail turned into a score (float precision)


async def _trace_only_problems(
    store: TelemetryStore,
    problems: list[Problem],
    time_range: TimeRange,
    edges: list[tuple[str, str]],
    series: list[Series],
    step: int,
    opts: DetectionOptions,
    listing: _Catalogue,
    profiles: dict[str, TraceProfile | None],
) -> list[Problem]:
    """``problems`` plus those opened from traces alone (module docstring, step 6).

    Its traces are those of ``listing`` from ``history_ns`` before ``time_range`` to its
    end; ``profiles`` as for :func:`_with_traces`.
    """
    alpha = opts.trace_alpha
    if alpha is None:
        return problems
    history = opts.grouping.history_ns
    everything = await listing.summaries()
    catalogue = everything[
        bisect.bisect_left(
            listing.starts, time_range.start_unix_nano - history
        ) : bisect.bisect_left(listing.starts, time_range.end_unix_nano)
    ]
    if not catalogue:
        return problems
    starts = [t.start_time_unix_nano for t in catalogue]
    # A problem's onset lasts as the grouping has it (a symptom within quiet_gap_ns of its
    # latest onset and max_onset_spread_ns of its first would join it; one up to quiet_gap_ns
    # before it would have been joined by it); its anomalies' long tails do not count (a new
    # fault after them is a new incident).
    gap, spread = opts.grouping.quiet_gap_ns, opts.grouping.max_onset_spread_ns
    covered = [
        (first - gap, min(latest + gap, first + spread) + step)
        for first, latest in (p.onsets for p in problems)
    ]
    found = await trio.to_thread.run_sync(
        _slow_steps,
        catalogue,
        time_range,
        step,
        history,
        alpha,
        gap,
        abandon_on_cancel=True,
    )
    # A slowdown whose first step falls in a problem's onset is that problem's: it opens no
    # second one when the problem's onset is over and the traces are still slow.
    found = [run for run in found if not any(a < run[0] + step and run[0] < b for a, b in covered)]
    if not found:
        return problems
    added: list[Problem] = []
    for first, last, anomaly in found:
        # As for the series' problems: the traces of at most _TRACE_SPAN_NS from its start.
        window = TimeRange(
            start_unix_nano=first, end_unix_nano=min(last + step, first + _TRACE_SPAN_NS)
        )
        pool = catalogue[
            bisect.bisect_left(starts, first) : bisect.bisect_left(starts, window.end_unix_nano)
        ]
        _, blame = await _reference_blame(
            store, pool, catalogue, window, history, opts.trace_samples, profiles
        )
        if blame is None:
            continue
        anomaly = msgspec.structs.replace(
            anomaly,
            end_unix_nano=last,
            ongoing=last + step >= time_range.end_unix_nano,
        )
        [problem] = group_problems(
            [anomaly], edges, opts.grouping, series, end_unix_nano=time_range.end_unix_nano
        )
        added.append(with_trace_blame(problem, blame, edges, series, opts.grouping))
    return sorted([*problems, *added], key=lambda p: (p.start_unix_nano, p.problem_id))


def _slow_steps(
    catalogue: Sequence[TraceSummary],
    time_range: TimeRange,
    step: int,
    history: int,
    alpha: float,
    gap: int,
) -> list[tuple[int, int, Anomaly]]:
    """The range's slowdowns seen in traces: ``(first step, last step, first anomaly)``.

    Each step of ``time_range`` holding enough traces is judged by
    :func:`_slow_concentration` against the ``history`` before it; significant steps each
    within ``gap`` of the last are one slowdown (CPU only: run in a worker thread).
    """
    starts = [t.start_time_unix_nano for t in catalogue]
    found: list[tuple[int, int, Anomaly]] = []
    bucket = grid_floor(max(time_range.start_unix_nano, starts[0]), step)
    while bucket < time_range.end_unix_nano:
        low = bisect.bisect_left(starts, bucket)
        high = bisect.bisect_left(starts, bucket + step)
        if high - low >= _MIN_GROUP_TRACES:
            period = catalogue[bisect.bisect_left(starts, bucket - history) : low]
            anomaly = _slow_concentration(catalogue[low:high], period, bucket, step, alpha)
            if anomaly is not None:
                if found and bucket - found[-1][1] <= gap:
                    first, _, kept = found[-1]
                    found[-1] = (first, bucket, kept)
                else:
                    found.append((bucket, bucket, anomaly))
        bucket += step
    return found


def _slow_concentration(
    window: Sequence[TraceSummary],
    period: Sequence[TraceSummary],
    start: int,
    step: int,
    alpha: float,
) -> Anomaly | None:
    """The service the window's slow traces pass through beyond chance, as an anomaly.

    Slow traces are told by :func:`~coremetry.detection.spectrum.slow_by_summary`, the
    window's against ``period`` and ``period``'s own against itself (its usual share of
    slow traces). For each service the window's traces visit: the binomial tail of its
    slow traces at its reference share (Laplace's rule); the smallest tail times the number
    of services tested must be at most ``alpha``. ``None``: no such service.
    """
    if not period:
        return None
    window_kinds = [(_kind(t), t.duration_ns) for t in window]
    period_kinds = [(_kind(t), t.duration_ns) for t in period]
    slow = set(slow_by_summary(window_kinds, period_kinds))
    if not slow:
        return None
    usual = set(slow_by_summary(period_kinds, period_kinds))
    visits: dict[str, list[int]] = {}  # service -> [traces, slow, reference, reference slow]
    for index, summary in enumerate(window):
        for service in set(summary.services):
            counts = visits.setdefault(service, [0, 0, 0, 0])
            counts[0] += 1
            counts[1] += index in slow
    for index, summary in enumerate(period):
        for service in set(summary.services):
            if service in visits:
                visits[service][2] += 1
                visits[service][3] += index in usual
    best: tuple[float, str, float, float] | None = None
    for service, (traces, hits, reference, reference_slow) in sorted(visits.items()):
        rate = (reference_slow + 1) / (reference + 2)
        tail = binomial_tail(hits, traces, rate)
        if best is None or tail < best[0]:
            best = (tail, service, rate, hits / traces)
    assert best is not None  # slow is not empty, so some service was visited
    tail, service, rate, share = best
    corrected = min(1.0, tail * len(visits))
    if corrected > alpha:
        return None
    return Anomaly(
        series_id=f"traces/{service}/slow.share",
        name="trace.slow.share",
        direction="up",
        start_unix_nano=start,
        detected_unix_nano=start + step,
        end_unix_nano=start,
        baseline=rate,
        observed=share,
        score=statistics.NormalDist().inv_cdf(1.0 - min(0.5, max(corrected, _MIN_TRACE_P))),
        points=1,
        service_name=service,
        unit="1",
        signal="latency",
    )


async def _catalogue_of(store: TelemetryStore, time_range: TimeRange) -> list[TraceSummary]:
    """The trace summaries of ``time_range``, oldest first (at most :data:`_CATALOGUE`)."""
    found: list[TraceSummary] = []
    cursor: str | None = None
    query = TraceQuery(time_range=time_range)
    while len(found) < _CATALOGUE:
        page = await store.search_traces(
            query, limit=min(MAX_LIMIT, _CATALOGUE - len(found)), cursor=cursor
        )
        found.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    found.sort(key=lambda t: (t.start_time_unix_nano, t.trace_id))
    return found


def _spread(items: Sequence[TraceSummary], count: int) -> list[TraceSummary]:
    """At most ``count`` of ``items``, evenly spaced in start order (ties by trace id)."""
    ordered = sorted(items, key=lambda t: (t.start_time_unix_nano, t.trace_id))
    if len(ordered) <= count:
        return ordered
    stride = len(ordered) / count
    return [ordered[int(i * stride)] for i in range(count)]


async def _profiles(
    store: TelemetryStore,
    summaries: Sequence[TraceSummary],
    cache: dict[str, TraceProfile | None],
) -> list[TraceProfile]:
    found: list[TraceProfile] = []
    for summary in summaries:
        if summary.trace_id not in cache:
            page = await store.get_trace(summary.trace_id, limit=_ANALYSIS_SPANS)
            cache[summary.trace_id] = (
                profile_trace(analyse_trace(page.items)) if page.items else None
            )
        profile = cache[summary.trace_id]
        if profile is not None:
            found.append(profile)
    return found


async def _reference_blame(
    store: TelemetryStore,
    pool: Sequence[TraceSummary],
    catalogue: Sequence[TraceSummary],
    window: TimeRange,
    history_ns: int,
    samples: int,
    cache: dict[str, TraceProfile | None],
) -> tuple[bool, TraceBlame | None]:
    """The window's traces against traces from the ``history_ns`` before it (spectrum).

    Returns:
        ``(compared, blame)``: whether any reference was found, and the origin it names.
    """
    reference_summaries: list[TraceSummary] = []
    slice_ns = max(1, history_ns // _REFERENCE_SLICES)
    starts = [t.start_time_unix_nano for t in catalogue]
    # Slices on a fixed grid (plus the part-slice up to the window), so problems close in
    # time pick the same reference traces and each is read and analysed once per run.
    grid = window.start_unix_nano // slice_ns * slice_ns
    edges = [window.start_unix_nano, *(grid - k * slice_ns for k in range(_REFERENCE_SLICES))]
    for high, low in itertools.pairwise(edges):
        piece = catalogue[bisect.bisect_left(starts, low) : bisect.bisect_left(starts, high)]
        reference_summaries.extend(_spread(piece, samples))
    reference = await _profiles(store, reference_summaries, cache)
    if not reference:  # nothing to compare with: the window's traces are not read for it
        return False, None
    traces = await _profiles(store, _spread(pool, 3 * samples), cache)
    period = catalogue[
        bisect.bisect_left(starts, window.start_unix_nano - history_ns) : bisect.bisect_left(
            starts, window.start_unix_nano
        )
    ]
    # The window's slow traces, told from the summaries of all of them (spectrum, step 3).
    slow_pool = [
        pool[i]
        for i in slow_by_summary(
            [(_kind(t), t.duration_ns) for t in pool],
            ((_kind(t), t.duration_ns) for t in period),
        )
    ]
    slow = await _profiles(store, _spread(slow_pool, samples), cache)
    result = compare_to_reference(
        traces,
        reference,
        kind_error_rates=kind_error_rates((_kind(t), t.error_count > 0) for t in period),
        slow_sample=slow,
    )
    origin = result.origin()
    if origin is None or (result.compared == 0 and not origin.error_share):
        return True, None
    return True, TraceBlame(
        service_name=origin.service_name,
        excess_ns=origin.excess_ms * 1e6,
        gap_ns=result.gap_ms * 1e6,
        slow_traces=result.traces,
        typical_traces=result.reference,
        reference=True,
        score=origin.score,
        candidates=[f"{c.service_name}: {c.describe()}" for c in result.candidates[:5]],
    )


def _kind(summary: TraceSummary) -> str:
    """A trace's request kind from its summary (:attr:`TraceProfile.kind`)."""
    return f"{summary.root_service_name} {summary.root_name}"


async def _trace_blame(
    store: TelemetryStore, pool: list[TraceSummary], samples: int
) -> TraceBlame | None:
    """Critical paths of slow against typical traces, per root service, summed."""
    groups: dict[str, list[TraceSummary]] = {}
    for summary in pool:
        groups.setdefault(summary.root_service_name, []).append(summary)
    excess: dict[str, float] = {}
    gap = 0.0
    slow_read = typical_read = 0
    for members in groups.values():
        if len(members) < _MIN_GROUP_TRACES:
            continue
        ranked = sorted(members, key=lambda t: (-t.duration_ns, t.trace_id))
        slow = ranked[: min(samples, max(1, len(ranked) // 10))]
        lower = ranked[len(ranked) // 2 :]
        typical = lower[:: max(1, len(lower) // samples)][:samples]
        slow_tally, typical_tally = CriticalPathTally(), CriticalPathTally()
        for chosen, tally in ((slow, slow_tally), (typical, typical_tally)):
            ids = [summary.trace_id for summary in chosen]
            for at in range(0, len(ids), MAX_TRACES_PER_READ):  # a read takes at most 100 ids
                part = ids[at : at + MAX_TRACES_PER_READ]
                for page in await store.get_traces(part, limit=_ANALYSIS_SPANS):
                    if page.items:
                        tally.add_spans(page.items)
        if not slow_tally.traces or not typical_tally.traces:
            continue
        slow_read += slow_tally.traces
        typical_read += typical_tally.traces
        gap += slow_tally.duration_ns / slow_tally.traces
        gap -= typical_tally.duration_ns / typical_tally.traces
        for row in critical_path_excess(slow_tally, typical_tally):
            excess[row.service_name] = excess.get(row.service_name, 0.0) + row.excess_ns
    if not excess:
        return None
    top, value = max(excess.items(), key=lambda item: (item[1], item[0]))
    return TraceBlame(
        service_name=top,
        excess_ns=value,
        gap_ns=gap,
        slow_traces=slow_read,
        typical_traces=typical_read,
    )


async def _with_samples(
    store: TelemetryStore,
    problem: Problem,
    step: int,
    opts: DetectionOptions,
    listing: _Catalogue,
    profiles: Mapping[str, TraceProfile | None],
) -> Problem:
    """Sample traces and log lines for each of the problem's first ranked services (step 7).

    The first ``opts.sample_candidates`` services of the ranking each get up to
    ``opts.samples`` trace ids (:func:`_trace_samples`) and log lines
    (:func:`_log_samples`) of the problem's window — from its start to a step after its
    end — and a note saying how they were chosen. The problem's own
    ``sample_trace_ids``/``sample_log_lines`` are its origin's (the first service's).
    """
    if not problem.ranking or opts.sample_candidates <= 0:
        return problem
    window = TimeRange(
        start_unix_nano=problem.start_unix_nano,
        end_unix_nano=problem.end_unix_nano + step,
    )
    history = opts.grouping.history_ns
    before = TimeRange(
        start_unix_nano=window.start_unix_nano - history, end_unix_nano=window.start_unix_nano
    )
    pool = await listing.covering(window)
    period = await listing.covering(before)
    if pool is None or period is None:  # outside the run's listing: list this window's own
        both = await _catalogue_of(
            store,
            TimeRange(start_unix_nano=before.start_unix_nano, end_unix_nano=window.end_unix_nano),
        )
        split = bisect.bisect_left([t.start_time_unix_nano for t in both], window.start_unix_nano)
        period, pool = both[:split], both[split:]
    slow = {
        pool[i].trace_id
        for i in slow_by_summary(
            [(_kind(t), t.duration_ns) for t in pool],
            ((_kind(t), t.duration_ns) for t in period),
        )
    }
    ranking = list(problem.ranking)
    for index, rank in enumerate(ranking[: opts.sample_candidates]):
        service = rank.service_name
        trace_ids, traces_note = _trace_samples(
            service, pool, slow, bool(period), profiles, opts.samples
        )
        lines, logs_note = await _log_samples(store, service, window, before, opts.samples)
        ranking[index] = msgspec.structs.replace(
            rank,
            sample_trace_ids=trace_ids,
            sample_log_lines=lines,
            samples_note=f"{traces_note}; {logs_note}",
        )
    origin = ranking[0]
    return msgspec.structs.replace(
        problem,
        ranking=ranking,
        sample_trace_ids=list(origin.sample_trace_ids),
        sample_log_lines=list(origin.sample_log_lines),
    )


def _trace_samples(
    service: str,
    pool: Sequence[TraceSummary],
    slow: set[str],
    referenced: bool,
    profiles: Mapping[str, TraceProfile | None],
    count: int,
) -> tuple[list[str], str]:
    """Up to ``count`` traces of the window that show ``service``'s part, and how chosen.

    Among the window's traces passing through ``service`` (``pool``: summaries, oldest
    first): first those with an error — ones the run analysed where ``service`` itself
    originated an error before the others, and none the run analysed whose errors all
    came from other services; then the slow ones (``slow``: slow against the same kind of
    request before the window, :func:`~coremetry.detection.spectrum.slow_by_summary`) —
    analysed ones with the most critical-path time of ``service`` first, none analysed
    without ``service`` on its critical path, then the slowest; then, when none is either,
    the slowest of its traces (said so).
    """
    through = [t for t in pool if service in t.services]
    if not through:
        return [], "traces: none of the problem's window passes through it"

    def own_error(summary: TraceSummary) -> bool:
        found = profiles.get(summary.trace_id)
        return summary.error_count > 0 and (found is None or service in found.error_origins)

    def on_path_ns(summary: TraceSummary) -> int | None:
        """Its critical-path ns in an analysed trace; ``None``: not analysed."""
        found = profiles.get(summary.trace_id)
        return None if found is None else found.critical_ns.get(service, 0)

    errors = sorted(
        (t for t in through if own_error(t)),
        key=lambda t: (profiles.get(t.trace_id) is None, -t.duration_ns, t.trace_id),
    )
    slow_through = sorted(
        (t for t in through if t.trace_id in slow and on_path_ns(t) != 0),
        key=lambda t: (
            (path := on_path_ns(t)) is None,
            -(path if path is not None else t.duration_ns),
            t.trace_id,
        ),
    )
    chosen: list[str] = []
    for summary in [*errors, *slow_through]:
        if summary.trace_id not in chosen:
            chosen.append(summary.trace_id)
    chosen = chosen[:count]
    erred = sum(1 for t in errors if t.trace_id in chosen)
    if chosen:
        parts = [f"{erred} with an error"] if erred else []
        if len(chosen) > erred:
            parts.append(f"{len(chosen) - erred} slow against the same requests before")
        return chosen, (
            f"traces: {' and '.join(parts)}, of the {len(through)} of the problem's window "
            "passing through it"
        )
    slowest = sorted(through, key=lambda t: (-t.duration_ns, t.trace_id))[:count]
    why = "none slow against the same requests before" if referenced else "no earlier traces"
    return [t.trace_id for t in slowest], (
        f"traces: the slowest of the {len(through)} of the problem's window passing through "
        f"it ({why}, none with an error of its own)"
    )


async def _log_samples(
    store: TelemetryStore,
    service: str,
    window: TimeRange,
    before: TimeRange,
    count: int,
) -> tuple[list[str], str]:
    """Up to ``count`` log lines of ``service`` that show the problem, and how chosen.

    Its WARN-and-worse lines of ``window`` (newest first; found among the newest
    :data:`_LOG_READ` of its lines, else asked for); without any, the lines of its
    *most-changed template*: its lines of ``window`` and of ``before`` (the newest
    :data:`_LOG_READ` of each) are mined into templates together
    (:class:`~coremetry.detection.templates.TemplateMiner`) and the template whose share of
    its lines grew most from ``before`` to ``window`` is shown with its share before and in
    the window (percentages). None grew: no lines, said so.
    """
    during = await store.search_logs(
        LogQuery(time_range=window, service_name=service), limit=_LOG_READ
    )
    if not during.items:
        return [], "log lines: none of it in the window"
    warn = [r for r in during.items if r.severity_number >= _WARN_SEVERITY][:count]
    if len(warn) < count and during.next_cursor is not None:  # older lines were not read
        warn = (
            await store.search_logs(
                LogQuery(
                    time_range=window, service_name=service, min_severity_number=_WARN_SEVERITY
                ),
                limit=count,
            )
        ).items
    if warn:
        return [_log_line(r) for r in warn], "log lines: its WARN and worse in the window"
    earlier = await store.search_logs(
        LogQuery(time_range=before, service_name=service), limit=_LOG_READ
    )
    miner = TemplateMiner()
    tally: dict[int, list[int]] = {}  # template id -> [lines before, lines in the window]
    joined: list[tuple[LogRecord, Template]] = []
    for side, records in ((0, earlier.items), (1, during.items)):
        for record in reversed(records):  # oldest first: the miner's result depends on order
            template = miner.add(record.body)
            tally.setdefault(template.template_id, [0, 0])[side] += 1
            if side:
                joined.append((record, template))
    total_before, total_during = len(earlier.items), len(during.items)

    def growth(template_id: int) -> float:
        old, new = tally[template_id]
        return new / total_during - (old / total_before if total_before else 0.0)

    best = max(tally, key=lambda t: (growth(t), -t))
    if growth(best) <= 0:
        return [], (
            f"log lines: no WARN or worse; its {total_during} lines in the window keep the "
            "shares of templates they had before"
        )
    template = miner.templates[best - 1]
    lines = [_log_line(r) for r, t in reversed(joined) if t.template_id == best][:count]
    old, new = tally[best]
    share_before = f"{old / total_before:.0%}" if total_before else "none (no lines before)"
    read = (
        f"the newest {total_during} of its lines"
        if during.next_cursor is not None
        else f"its {total_during} lines"
    )
    return lines, (
        f"log lines: no WARN or worse; its template whose share grew most, "
        f"{template.text[:_TEMPLATE_CHARS]!r}: {share_before} of its lines before, "
        f"{new / total_during:.0%} of {read} in the window"
    )


def _log_line(record: LogRecord) -> str:
    """``"<RFC 3339 time> <severity> <body>"``, the body cut to :data:`_LOG_LINE_CHARS`."""
    return (
        f"{_rfc3339(record.time_unix_nano)} {record.severity_text or record.severity_number} "
        f"{record.body[:_LOG_LINE_CHARS]}"
    )


def _rfc3339(unix_nano: int) -> str:
    moment = datetime.fromtimestamp(unix_nano // 1_000_000_000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
