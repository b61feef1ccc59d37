"""Likely origin of slowness: whose own time on the critical path grew in slow requests.

A slow callee makes every caller slow: the caller's latency *includes* the callee's, so the
service with the highest raw latency is usually the front door, not the cause. This module
looks past that, the way an engineer reads traces:

1. **Entry groups.** With a service named, the group is that service; without one, the *entry
   services* — services with requests that are never a callee in the window (the front doors),
   at most :data:`MAX_ENTRY_GROUPS`, busiest first — each form a group.
2. **Samples.** Per group, the newest :data:`SAMPLE_TRACES` trace summaries through the group's
   service, plus the newest ``slow_traces`` traces with a span of it at or above its p95
   entry-span duration (so slow requests are represented even when the newest ones are fast),
   are ranked by trace duration. Each search reads only the *end* of the window: a recent part
   sized from the group's request rate to hold about twice what is wanted, widened (at most 4x
   at a time, up to the whole window) while it holds fewer (:func:`newest_traces`), so the
   cost grows with the sample, not with the window; ``sampled`` in the result names the part
   each search read. The slowest tenth (at least one, at most ``slow_traces``) are the *slow*
   traces; up to ``typical_traces`` evenly spaced from the faster half are the *typical* ones.
   Each is read (at most :data:`ANALYSIS_SPANS` spans) and analysed
   (:mod:`coremetry.analysis.trace_analysis`).
3. **Attribution.** Each critical-path segment counts for the service doing the work — or, for a
   span waiting on a call into another service, for that callee (network and queueing are the
   callee's latency as its callers see it). With a service named, only segments inside that
   service's subtrees, or attributed to it, count ("the service and its downstream").
4. **Growth.** Per service, the mean critical-path time per slow trace minus the mean per typical
   trace (``excess_ms``). The service whose time grew most is the likely origin, provided its
   excess explains at least :data:`MIN_SHARE_OF_GAP` of the gap between the mean slow and the
   mean typical trace duration. A group with no typical trace gives no baseline and is skipped
   while another group has one.
5. **Evidence** for the top candidate: per-edge latency of calls into it, its ERROR-or-worse log
   records, and its latency metrics that rose while the slow traces ran (the *focus*: their
   time span plus five minutes each side): the peak 1-minute bucket there (the buckets
   ``query_metric`` gives for the focus with ``step="1m"``) against the metric's median over
   the whole window (:func:`series_shift`).

Cost bound: per group two trace-summary searches (each over the recent part of the window that
holds its sample, a few more when it has to widen) plus at most ``slow_traces + typical_traces``
trace reads, then at most six more queries for the evidence; everything under the call's deadline.
The method is a heuristic over samples; the result says which and how many traces it read.
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from coremetry.analysis import CriticalPathTally as _Tally
from coremetry.store import (
    MAX_TRACES_PER_READ,
    Aggregation,
    LogQuery,
    MetricDescriptor,
    MetricQuery,
    MetricSeries,
    QueryRejected,
    ServiceEdge,
    ServiceSummary,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    TraceSummary,
)

from .budget import JsonObject, shorten
from .ranges import NS_PER_S, auto_step_ns, ms, rfc3339

__all__ = [
    "ANALYSIS_SPANS",
    "MAX_ENTRY_GROUPS",
    "METHOD",
    "Origin",
    "entry_services",
    "focus_window",
    "latency_metric_names",
    "latency_series",
    "latency_shifts",
    "likely_origin",
    "newest_traces",
    "origin_evidence",
    "series_shift",
]

ANALYSIS_SPANS: Final = 2_000
"""Most spans read per trace for the origin analysis."""
MAX_ENTRY_GROUPS: Final = 3
"""Most entry services analysed when no service is named."""
MINUTE_NS: Final = 60 * NS_PER_S
SAMPLE_TRACES: Final = 200
"""Trace summaries sampled per group (newest first) to split into slow and typical."""
SLOW_SHARE: Final = 0.05
"""Share of a service's requests at or above its p95: sizes the part searched for slow ones."""
SAMPLE_HEADROOM: Final = 2.0
"""The first part of the window searched is expected to hold this many times what is wanted."""
WIDEN: Final = 4
"""A further search reads a part at most this many times longer (up to the whole window)."""
MIN_SAMPLE_NS: Final = 60 * NS_PER_S
"""The shortest part of the window searched for a sample."""
MIN_SHARE_OF_GAP: Final = 0.1
"""A likely origin's excess must explain at least this share of how much slower the slow
traces are than the typical ones (mean trace durations), else none is named."""
MIN_REQUESTS: Final = 5
"""An entry service needs this many requests in the window to have a meaningful p95."""
ERROR_SEVERITY: Final = 17
"""OTel severity number of ERROR (ERROR and worse are 17..24)."""
_ERROR_LOG_SAMPLE: Final = 200
"""ERROR records counted per candidate (a larger count is reported as a lower bound)."""
METHOD: Final = (
    "critical-path time per slow trace (slowest tenth of the sampled traces through the "
    "service) minus per typical trace (faster half), per service; a caller's wait on a call "
    "into another service counts for the callee"
)


@dataclass(frozen=True)
class Origin:
    """What :func:`likely_origin` found.

    Attributes:
        body: the JSON object shown to the model (see :func:`likely_origin`).
        focus: when the slow traces ran, widened by five minutes each side.
    """

    body: JsonObject
    focus: TimeRange


def entry_services(
    summaries: Sequence[ServiceSummary], edges: Sequence[ServiceEdge]
) -> list[ServiceSummary]:
    """Services with requests that no other service calls in the window, busiest first."""
    callees = {edge.callee for edge in edges}
    entries = [
        s for s in summaries if s.service_name not in callees and s.request_count >= MIN_REQUESTS
    ]
    entries.sort(key=lambda s: (-s.request_count, s.service_name))
    return entries


@dataclass(frozen=True)
class _Sampled:
    """One sample search: what it found and the part of the window it read."""

    what: str
    traces: list[TraceSummary]
    part: TimeRange

    def as_json(self) -> JsonObject:
        """The search as shown in ``likely_origin.sampled``.

        ``what`` was searched, the part of the window read (``start``/``end``), how many
        ``traces`` it kept (a limit: the newest), and when the oldest and newest of them began
        (``traces_from``/``traces_to``: the time the sample covers, often much less than the
        part read when the limit was reached).
        """
        body: JsonObject = {
            "what": self.what,
            "start": rfc3339(self.part.start_unix_nano),
            "end": rfc3339(self.part.end_unix_nano),
            "traces": len(self.traces),
        }
        if self.traces:
            starts = [t.start_time_unix_nano for t in self.traces]
            body["traces_from"] = rfc3339(min(starts))
            body["traces_to"] = rfc3339(max(starts))
        return body


async def newest_traces(
    store: TelemetryStore, query: TraceQuery, want: int, expected_per_ns: float
) -> tuple[list[TraceSummary], TimeRange]:
    """The newest ``want`` traces matching ``query``, read from the end of its window.

    The first search reads the last ``SAMPLE_HEADROOM * want / expected_per_ns`` nanoseconds of
    ``query.time_range`` (at least :data:`MIN_SAMPLE_NS`); while it finds fewer than ``want``
    and has not read the whole window, the next search reads a longer part: long enough for
    ``want`` at the rate just found plus a quarter, at least 1.5x and at most :data:`WIDEN`
    times the last (:data:`WIDEN` times when it found none).
    A trace's place among the newest is by its start (as ``search_traces`` orders them), and a
    trace matches by a span in the part read, so the sample is the window's newest ``want``
    up to traces that started before the part read. Each further search reads only the
    stretch before the last part (the traces found so far are kept): the same answer as a
    search of the whole part, and no trace summarised twice but those matching in both.

    Args:
        store: the store.
        query: the search, over the whole window.
        want: how many traces.
        expected_per_ns: matching traces per nanosecond expected over the window (e.g. the
            service's request count over the window's length); 0 reads the whole window.

    Returns:
        ``(traces, part)``: at most ``want`` summaries, newest first, and the part of the
        window the last search read.

    Raises:
        QueryRejected, StoreUnavailable, StoreClosed: from the store.
    """
    window = query.time_range
    whole = window.end_unix_nano - window.start_unix_nano
    if expected_per_ns > 0:
        length = max(MIN_SAMPLE_NS, math.ceil(SAMPLE_HEADROOM * want / expected_per_ns))
    else:
        length = whole
    pool: dict[str, TraceSummary] = {}
    read_from = window.end_unix_nano  # [read_from, end) is read
    while True:
        start = max(window.start_unix_nano, window.end_unix_nano - length)
        part = TimeRange(start_unix_nano=start, end_unix_nano=window.end_unix_nano)
        # Only the stretch not read yet: the last search found every trace matching in
        # [read_from, end) (fewer than ``want``), and the newest ``want`` of the whole part
        # are among those and the stretch's newest ``want`` (a summary covers its whole trace,
        # whichever part matched it): the same traces as a search of the whole part, without
        # summarising the ones found before again.
        page = await store.search_traces(
            msgspec.structs.replace(
                query, time_range=TimeRange(start_unix_nano=start, end_unix_nano=read_from)
            ),
            limit=want,
        )
        for trace in page.items:
            pool.setdefault(trace.trace_id, trace)
        read_from = start
        found = len(pool)
        if found >= want or start == window.start_unix_nano:
            newest = sorted(pool.values(), key=lambda t: (-t.start_time_unix_nano, t.trace_id))
            return newest[:want], part
        # Long enough for the rate just seen (with a quarter more), between 1.5x and WIDEN x.
        length = math.ceil(length * min(WIDEN, max(1.5, 1.25 * want / max(1, found))))


async def _samples(
    store: TelemetryStore,
    window: TimeRange,
    group: ServiceSummary,
    slow_traces: int,
    typical_traces: int,
) -> tuple[list[TraceSummary], list[TraceSummary], list[_Sampled]]:
    """The slow and typical traces through ``group``'s service (module docstring, step 2).

    Also returns the searches made (what each found and the part of the window it read).
    """
    per_ns = group.request_count / max(1, window.end_unix_nano - window.start_unix_nano)
    found, part = await newest_traces(
        store,
        TraceQuery(time_range=window, service_name=group.service_name),
        SAMPLE_TRACES,
        per_ns,
    )
    searches = [_Sampled("the newest traces through the service", found, part)]
    pool = {t.trace_id: t for t in found}
    if group.request_count >= MIN_REQUESTS and group.p95_duration_ns is not None:
        slow_found, slow_part = await newest_traces(
            store,
            TraceQuery(
                time_range=window,
                service_name=group.service_name,
                min_duration_ns=group.p95_duration_ns,
            ),
            slow_traces,
            per_ns * SLOW_SHARE,
        )
        searches.append(
            _Sampled(
                "the newest traces with a span of the service at or above its p95 "
                f"({ms(group.p95_duration_ns):,.1f} ms)",
                slow_found,
                slow_part,
            )
        )
        pool.update((t.trace_id, t) for t in slow_found)
    ranked = sorted(pool.values(), key=lambda t: (-t.duration_ns, t.trace_id))
    if len(ranked) < 2:
        return ranked, [], searches
    slow_count = min(slow_traces, max(1, len(ranked) // 10))
    lower = ranked[len(ranked) // 2 :]
    step = max(1, len(lower) // typical_traces)
    return ranked[:slow_count], lower[::step][:typical_traces], searches


async def _analyse(
    store: TelemetryStore,
    samples: Sequence[tuple[Sequence[TraceSummary], _Tally]],
    scope: str | None,
) -> None:
    """Read and analyse each sample's traces into its tally (the slow ones, the typical ones).

    The traces' first :data:`ANALYSIS_SPANS` spans each, read together (a read per trace cost
    a thread hop each: 40 of them were ~40 % of ``get_service`` on a loaded machine).
    """
    ids = [summary.trace_id for summaries, _ in samples for summary in summaries]
    tallies = [tally for summaries, tally in samples for _ in summaries]
    for first in range(0, len(ids), MAX_TRACES_PER_READ):
        pages = await store.get_traces(
            ids[first : first + MAX_TRACES_PER_READ], limit=ANALYSIS_SPANS
        )
        for tally, page in zip(tallies[first:], pages, strict=False):
            if page.items:
                tally.add_spans(page.items, scope)  # only what the tally needs of the analysis


def latency_metric_names(descriptors: Sequence[MetricDescriptor]) -> list[MetricDescriptor]:
    """Latency-like metrics (``duration`` or ``latency`` in the name, not sums), server first."""
    chosen = [
        d
        for d in descriptors
        if ("duration" in d.name.lower() or "latency" in d.name.lower()) and d.type != "sum"
    ]
    chosen.sort(key=lambda d: (0 if "server" in d.name.lower() else 1, d.name))
    return chosen


def series_shift(
    series: MetricSeries,
    focus_series: MetricSeries,
    *,
    bucket_ns: int,
    median_bucket_ns: int,
    aggregation: Aggregation,
    from_ns: int = 0,
) -> JsonObject | None:
    """How far a series rose in the focus: its peak bucket there against its median overall.

    Args:
        series: the metric over the whole window, in buckets of ``median_bucket_ns``.
        focus_series: the same series over the focus, in buckets of ``bucket_ns`` starting at
            multiples of it in unix time — the buckets ``query_metric`` returns for
            ``start``/``end`` = the focus, ``step`` = ``bucket_ns`` and ``aggregation``.
        bucket_ns: the focus buckets' width, nanoseconds.
        median_bucket_ns: the whole-window buckets' width, nanoseconds.
        aggregation: the per-bucket aggregation of both.
        from_ns: the focus's start: buckets starting before it (the first, aligned bucket may
            reach back up to a step before the focus) are not peaks in the focus.

    Returns:
        ``{"metric", "unit", "aggregation", "median", "median_bucket_s", "peak_in_focus",
        "peak_bucket_start", "bucket_s", "peak_to_median"}`` — the peak is the largest focus
        bucket, ``peak_bucket_start`` its start (RFC 3339) — or ``None`` when there is nothing
        to report: fewer than three finite points overall, none in the focus, a non-positive
        median, or no focus bucket above the median (the metric did not rise), so
        ``peak_to_median`` is always above 1.
    """
    points = [v for _t, v in series.points if math.isfinite(v)]
    inside = [(t, v) for t, v in focus_series.points if math.isfinite(v) and t >= from_ns]
    if len(points) < 3 or not inside:
        return None
    median = statistics.median(points)
    peak_time, peak = max(inside, key=lambda p: (p[1], -p[0]))
    if median <= 0 or peak <= median:
        return None
    return {
        "metric": series.name,
        "unit": series.unit,
        "aggregation": aggregation,
        "median": round(median, 6),
        "median_bucket_s": median_bucket_ns / NS_PER_S,
        "peak_in_focus": round(peak, 6),
        "peak_bucket_start": rfc3339(peak_time),
        "bucket_s": bucket_ns / NS_PER_S,
        "peak_to_median": round(peak / median, 2),
    }


async def latency_shifts(
    store: TelemetryStore,
    descriptor: MetricDescriptor,
    window: TimeRange,
    focus: TimeRange,
    *,
    service: str | None = None,
    limit: int = 200,
) -> list[tuple[MetricSeries, JsonObject]]:
    """Latency series that rose in ``focus``, each with its :func:`series_shift` row.

    Two reads of :func:`latency_series`: the whole ``window`` in buckets of at least a minute
    (at most 1440) for the median, and ``focus`` in buckets of at least a minute (at most 300)
    starting at multiples of the step in unix time, as ``query_metric`` aligns them, for the
    peak (among the buckets starting inside the focus). Series are paired by their labels.
    """
    aggregation: Aggregation = "p95" if descriptor.type == "histogram" else "max"
    median_step = auto_step_ns(window.end_unix_nano - window.start_unix_nano, 1440, MINUTE_NS)
    focus_step = auto_step_ns(focus.end_unix_nano - focus.start_unix_nano, 300, MINUTE_NS)
    aligned = TimeRange(
        start_unix_nano=focus.start_unix_nano // focus_step * focus_step,
        end_unix_nano=focus.end_unix_nano,
    )
    whole = await latency_series(
        store, descriptor, window, service=service, limit=limit, step_ns=median_step
    )
    if not whole:
        return []
    in_focus = {
        tuple(sorted(s.labels.items())): s
        for s in await latency_series(
            store, descriptor, aligned, service=service, limit=limit, step_ns=focus_step
        )
    }
    found: list[tuple[MetricSeries, JsonObject]] = []
    for series in whole:
        focus_series = in_focus.get(tuple(sorted(series.labels.items())))
        if focus_series is None:
            continue
        row = series_shift(
            series,
            focus_series,
            bucket_ns=focus_step,
            median_bucket_ns=median_step,
            aggregation=aggregation,
            from_ns=focus.start_unix_nano,
        )
        if row is not None:
            found.append((series, row))
    return found


async def latency_series(
    store: TelemetryStore,
    descriptor: MetricDescriptor,
    window: TimeRange,
    *,
    service: str | None = None,
    limit: int = 200,
    step_ns: int | None = None,
) -> list[MetricSeries]:
    """One latency metric per service over ``window`` (max per bucket, p95 for histograms).

    With ``service``, that service's series merged into one; without, one series per
    ``service.name``. Buckets are ``step_ns`` wide, by default at least a minute and at most
    300 per series. A refused aggregation gives ``[]``.
    """
    aggregation: Aggregation = "p95" if descriptor.type == "histogram" else "max"
    step = step_ns or auto_step_ns(window.end_unix_nano - window.start_unix_nano, 300, MINUTE_NS)
    try:
        return await store.metric_series(
            MetricQuery(
                name=descriptor.name,
                time_range=window,
                step_ns=step,
                aggregation=aggregation,
                service_name=service,
                group_by=[] if service is not None else ["service.name"],
            ),
            limit=limit,
        )
    except QueryRejected:
        return []


def focus_window(slow: Sequence[TraceSummary], window: TimeRange) -> TimeRange:
    """The span of time the slow traces cover, widened by 5 minutes each side (in ``window``)."""
    if not slow:
        return window
    margin = 5 * 60 * NS_PER_S
    start = min(t.start_time_unix_nano for t in slow) - margin
    end = max(t.start_time_unix_nano + t.duration_ns for t in slow) + margin
    return TimeRange(
        start_unix_nano=max(window.start_unix_nano, start),
        end_unix_nano=max(min(window.end_unix_nano, end), max(window.start_unix_nano, start) + 1),
    )


async def _evidence(
    store: TelemetryStore, window: TimeRange, focus: TimeRange, service: str
) -> JsonObject:
    edges = await store.service_edges(window, limit=50, service_name=service)
    calls_into = [
        {
            "caller": e.caller,
            "calls": e.call_count,
            "errors": e.error_count,
            "p50_ms": ms(e.p50_duration_ns),
            "p95_ms": ms(e.p95_duration_ns),
        }
        for e in edges
        if e.callee == service and e.caller != service
    ][:5]
    logs = await store.search_logs(
        LogQuery(time_range=window, service_name=service, min_severity_number=ERROR_SEVERITY),
        limit=_ERROR_LOG_SAMPLE,
    )
    error_logs: JsonObject = {
        "count": logs.total if logs.total is not None else len(logs.items),
        "count_is_lower_bound": logs.total is None and logs.next_cursor is not None,
        "examples": [
            {
                "time": rfc3339(r.time_unix_nano),
                "severity": r.severity_text or str(r.severity_number),
                "body": shorten(r.body, 200),
                "trace_id": r.trace_id or None,
            }
            for r in logs.items[:2]
        ],
    }
    names = await store.metric_names(window, limit=1000)
    metrics: list[JsonObject] = []
    for descriptor in latency_metric_names(names.items)[:4]:
        shifts = await latency_shifts(store, descriptor, window, focus, service=service, limit=1)
        metrics.extend(row for _series, row in shifts)
        if len(metrics) == 2:
            break
    return {"calls_into": calls_into, "error_logs": error_logs, "latency_metrics": metrics}


async def likely_origin(
    store: TelemetryStore,
    window: TimeRange,
    summaries: Sequence[ServiceSummary],
    edges: Sequence[ServiceEdge],
    *,
    service: str | None = None,
    slow_traces: int = 20,
    typical_traces: int = 20,
    evidence: bool = True,
) -> "Origin":
    """Name the service whose own critical-path time grew most in slow traces (module doc).

    Args:
        store: the store.
        window: the window to analyse.
        summaries: ``store.services(window)`` (RED of every service).
        edges: ``store.service_edges(window)`` (used to find entry services).
        service: analyse this service and its downstream; ``None`` for the whole system.
        slow_traces: most slow traces read per group.
        typical_traces: most typical traces read per group.
        evidence: also gather per-edge latency, error logs and metrics for the top candidate.

    Returns:
        The :class:`Origin`: its ``body`` is a JSON object with ``service`` (the likely
        origin, or ``None``), ``summary`` (one sentence), ``candidates`` (top 5 with
        ``excess_ms``, ``slow_trace_ms``, ``typical_trace_ms``, ``own_ms``,
        ``callers_waiting_ms``), ``highest_raw_latency``, ``slow_traces`` (the three slowest
        read), ``focus``, ``traces_analysed``, ``sampled`` (per group, the part of the window
        each sample search read and how many traces it found), ``method``, and ``evidence``
        when asked.

    Raises:
        QueryRejected, StoreUnavailable, StoreClosed: from the store.
    """
    by_name = {s.service_name: s for s in summaries}
    if service is not None:
        own = by_name.get(service)
        groups = [own] if own is not None else []
    else:
        groups = entry_services(summaries, edges)[:MAX_ENTRY_GROUPS]
    tallies: list[tuple[_Tally, _Tally]] = []
    slow_seen: list[TraceSummary] = []
    sampled: list[JsonObject] = []
    for group in groups:
        slow, usual, searches = await _samples(store, window, group, slow_traces, typical_traces)
        sampled.append(
            {"service": group.service_name, "searches": [one.as_json() for one in searches]}
        )
        slow_tally, typical_tally = _Tally(), _Tally()
        await _analyse(store, [(slow, slow_tally), (usual, typical_tally)], service)
        tallies.append((slow_tally, typical_tally))
        slow_seen.extend(slow)
    with_baseline = [pair for pair in tallies if pair[0].traces and pair[1].traces]
    used = with_baseline or [pair for pair in tallies if pair[0].traces]
    rows: dict[str, list[float]] = {}
    gap = 0.0
    slow_mean = typical_mean = 0.0
    for slow_tally, typical_tally in used:
        if slow_tally.traces:
            slow_mean += slow_tally.duration_ns / slow_tally.traces
        if typical_tally.traces:
            typical_mean += typical_tally.duration_ns / typical_tally.traces
        for name in slow_tally.services() | typical_tally.services():
            slow_own, slow_wait = slow_tally.mean_ns(name)
            typical_own, typical_wait = typical_tally.mean_ns(name)
            row = rows.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0])
            row[0] += (slow_own + slow_wait) - (typical_own + typical_wait)
            row[1] += slow_own + slow_wait
            row[2] += typical_own + typical_wait
            row[3] += slow_own
            row[4] += slow_wait
    gap = slow_mean - typical_mean
    ranked = sorted(rows.items(), key=lambda item: (-item[1][0], item[0]))
    candidates: list[JsonObject] = [
        {
            "service": name,
            "excess_ms": ms(row[0]),
            "slow_trace_ms": ms(row[1]),
            "typical_trace_ms": ms(row[2]),
            "own_ms": ms(row[3]),
            "callers_waiting_ms": ms(row[4]),
        }
        for name, row in ranked[:5]
    ]
    top = (
        ranked[0][0]
        if ranked and ranked[0][1][0] > 0 and ranked[0][1][0] >= MIN_SHARE_OF_GAP * gap
        else None
    )
    in_scope = [by_name[name] for name in rows if name in by_name] or list(summaries)
    raw = max(
        (s for s in in_scope if s.p95_duration_ns is not None),
        key=lambda s: (s.p95_duration_ns or 0, s.service_name),
        default=None,
    )
    slowest = sorted(slow_seen, key=lambda t: -t.duration_ns)[:3]
    focus = focus_window(slow_seen, window)
    result: JsonObject = {
        "service": top,
        "summary": _sentence(
            top,
            rows,
            raw,
            bool(with_baseline),
            service,
            _reaches(edges, raw, top),
            slow_mean,
            typical_mean,
        ),
        "slow_trace_mean_ms": ms(slow_mean),
        "typical_trace_mean_ms": ms(typical_mean) if with_baseline else None,
        "candidates": candidates,
        "highest_raw_latency": (
            None
            if raw is None
            else {"service": raw.service_name, "p95_ms": ms(raw.p95_duration_ns)}
        ),
        "slow_traces": [
            {
                "trace_id": t.trace_id,
                "duration_ms": ms(t.duration_ns),
                "start": rfc3339(t.start_time_unix_nano),
                "root": f"{t.root_service_name} {t.root_name}",
            }
            for t in slowest
        ],
        "focus": {
            "start": rfc3339(focus.start_unix_nano),
            "end": rfc3339(focus.end_unix_nano),
            "what": "when the slow traces ran (plus 5 min each side); metric peaks are taken in it",
        },
        "traces_analysed": {
            "slow": sum(slow.traces for slow, _ in tallies),
            "typical": sum(typical.traces for _, typical in tallies),
        },
        "sampled": sampled,
        "method": METHOD,
    }
    if evidence and top is not None:
        result["evidence"] = await _evidence(store, window, focus, top)
    return Origin(body=result, focus=focus)


def _reaches(edges: Sequence[ServiceEdge], raw: ServiceSummary | None, top: str | None) -> bool:
    """``raw``'s service calls ``top``, directly or through other services, in ``edges``."""
    if raw is None or top is None:
        return False
    callees: dict[str, set[str]] = {}
    for edge in edges:
        callees.setdefault(edge.caller, set()).add(edge.callee)
    seen = {raw.service_name}
    frontier = [raw.service_name]
    while frontier:
        for callee in callees.get(frontier.pop(), ()):
            if callee == top:
                return True
            if callee not in seen:
                seen.add(callee)
                frontier.append(callee)
    return False


def _sentence(
    top: str | None,
    rows: dict[str, list[float]],
    raw: ServiceSummary | None,
    baseline: bool,
    scope: str | None,
    raw_calls_top: bool,
    slow_mean: float,
    typical_mean: float,
) -> str:
    if top is None:
        if not rows:
            return "Too few traces in this window to compare slow with typical ones."
        if scope is None:
            return (
                "No service's critical-path time accounts for a material part of how much slower "
                "the slow traces are than typical ones in this window; nothing points at an "
                "origin."
            )
        return (
            f"Neither {scope} nor the services it calls account for a material part of how "
            f"much slower its slow traces are ({ms(slow_mean):,.0f} ms against "
            f"{ms(typical_mean):,.0f} ms typical): the time goes elsewhere in those traces (see "
            "get_trace on one of slow_traces, or get_service on its callers)."
        )
    excess, _slow, _typical, own, waiting = rows[top]
    parts = [
        f"{top} is the likely origin: its time on the critical path of slow traces is "
        f"{ms(excess):,.0f} ms per trace above typical traces"
        if baseline
        else f"{top} is the likely origin: it holds the most critical-path time in slow traces "
        "(no typical traces to compare with)"
    ]
    if waiting > own:
        parts.append(
            f" (mostly callers waiting on its calls, {ms(waiting):,.0f} ms: network or queueing "
            "before its own spans)"
        )
    else:
        parts.append(f" (mostly in its own spans, {ms(own):,.0f} ms)")
    if raw is not None and raw.service_name != top:
        parts.append(
            f". {raw.service_name} shows the highest raw p95 latency "
            f"({ms(raw.p95_duration_ns):,.0f} ms)"
            + (" because its requests include those calls" if raw_calls_top else "")
        )
    return "".join(parts) + "."


async def origin_evidence(
    store: TelemetryStore, window: TimeRange, focus: TimeRange, service: str
) -> JsonObject:
    """The ``evidence`` object of :func:`likely_origin` for any named ``service``.

    Per-edge latency of calls into it, its ERROR-or-worse log records and its latency metrics
    that rose in ``focus`` (module docstring, step 5); used by
    :func:`.window_origin.window_origin` when the origin comes from a detected problem.
    """
    return await _evidence(store, window, focus, service)
