"""Problems: related anomalies grouped into one record per onset, most likely origin first.

Pure functions over :class:`~coremetry.detection.Anomaly` records, the judged series and the
service graph (the ``(caller, callee)`` pairs of
:meth:`coremetry.store.TelemetryStore.service_edges`); no I/O.

**Grouping** (:func:`group_problems`): one problem per *onset* — a burst of related symptoms
starting together. Anomalies are taken in start order (symptoms before traffic changes at the
same instant). A *symptom* (an anomaly whose signal is not ``traffic``) joins a problem when it
is *related* to one of the problem's services — the same service, or a caller or callee of it
in the service graph — and starts at most ``quiet_gap_ns`` after the problem's latest symptom
onset and at most ``max_onset_spread_ns`` after its first onset; a symptom related to several
such problems merges those that began within ``max_onset_spread_ns`` of each other. The bound on
the spread is what keeps a new fault minutes later from joining a problem still growing
(symptoms every two minutes along a call chain would otherwise chain into one problem that
never ends and swallows every later fault). Otherwise it opens a new
problem: a new symptom after a quiet gap is a new incident, even while earlier anomalies are
still open (their hysteresis keeps them open across the gap; they stay with the problem they
opened). A *traffic change* joins a related problem whose span ``[first onset, latest symptom
onset + quiet_gap_ns]`` covers its start, and otherwise stands alone (a traffic problem that no
later symptom joins: traffic is usually a consequence). Anomalies without a service relate
only to episodes of the same series.

**Evidence** (:func:`service_evidence`): which services were visibly unwell while the problem
began — ``[first onset, latest symptom onset + evidence_tail_ns]`` — judged over *every*
series of the run, not only the anomalous ones (a caller's client latency can be far above
normal without passing the detector's envelope, and a callee's server latency can be plainly
normal: both are evidence). A series shows a *symptom* when its peak in that window is at least
``evidence_ratio`` times, and ``evidence_z`` robust standard deviations above, its median over
the ``history_ns`` before the window (the scale is the interquartile range / 1.349, the
detector's; a falling "success" series mirrored). Kinds: *server latency* (entry spans,
``*.server.*`` durations, latency of no stated side), *client latency* (``*.client.*``
durations: time spent waiting on calls), *saturation* (a utilisation — unit ``1`` — that also
reaches ``saturation_level`` of its limit), *load* (other CPU/memory rises), *errors*, *logs*
(ERROR/WARN bursts, new log templates). The problem's own anomalies count as evidence too.

**Origin ranking** (:func:`rank_origins`). A fault at a service makes its callers slow or
failing too, because they wait for it, while its own callees see less traffic, not slower
service: the "deepest anomalous callee" rule of microservice root-cause localisation (MicroRCA,
Wu et al., NOMS 2020; the call-graph walk of Sieve and of Dynatrace's Davis), refined with the
client/server split of call latencies and, where traces exist, their critical paths. Roles,
most likely origin first:

1. ``trace_origin`` — the service the problem's traces blame against a *reference* of the
   same requests before the problem (:mod:`~coremetry.detection.spectrum`: the share of the
   slowdown its critical-path time explains, or its excess of originated errors, at least
   ``trace_share``); without any reference, the service whose critical-path time grew most
   from typical to slow traces of the window (:mod:`coremetry.analysis.critical_path`; a
   caller's wait on a call counts for the callee). Traces see the call tree itself, so this
   comes first.
2. ``own_cause`` — evidence that the trouble is the service's own: saturation near its limit,
   errors or error logs (these first), or server latency up while its client latency is
   observed and normal (its own work slowed, not its calls).
3. ``silent_callee`` — a service with no symptom, called by a *frontier waiting* service
   (client latency up, and no symptomatic service anywhere below it), whose own server latency
   is observed and normal: the time is lost between the caller's client and the callee's
   server — the callee's network or queueing, which its own server-side metrics cannot see.
4. ``symptomatic`` — any other service with a symptom.
5. ``traffic_only`` — only its traffic changed: usually a consequence.

Within ``own_cause``, the strongest kind of own evidence first: a resource at its limit
(saturation explains slowness by itself, the USE method's reading), then the service's own
errors, then bursts of ERROR/WARN log lines (noisy, and often a consequence: a service logs
the failed call it made), then a server latency rise with normal calls (one slow request
among few moves a percentile). Within a role: services without a symptomatic callee first
(the fault does not come from further down), then more symptomatic callers (the fault spread
upwards as it should), deeper along the symptomatic call chain, earlier first anomaly, larger
score, name. Every :class:`ServiceRank` carries its reason in words and its evidence (series
with usual level and peak in the series' unit; the trace figures against the reference; for a
silent callee, its waiting callers' client latency and its own server latency levels); the
first one's reason also says why it is ahead of the second: the first of these rules on which
the two differ, with the figures it compared.

**Scores** are robust z-scores (median and interquartile range of the history) with a floor
on the scale: 5 % of the usual level, or for a series with neither spread nor level (a log
rate that is 0 every minute) 5 % of the value reached, so such a series scores at most 20
rather than ~1e11 and does not outrank a real saturation.

A run's problem id is derived from the problem's earliest anomaly (series and start), so
re-running the detector over the same data, on the same bucket grid, gives the same ids. A
problem keeps the first id it was stored under across runs that see it differently (another
history, another window): :mod:`~coremetry.detection.problem_store` matches a run's problems to
the stored ones by content.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Literal, TypeAlias

import msgspec

from coremetry.store import TimeRange

from .detector import Anomaly, Series

__all__ = [
    "NO_EVIDENCE",
    "GroupingConfig",
    "Problem",
    "ProblemStatus",
    "Role",
    "SeriesIndex",
    "ServiceEvidence",
    "ServiceRank",
    "Symptom",
    "SymptomKind",
    "TraceBlame",
    "describe_anomaly",
    "evidence_window",
    "group_problems",
    "index_series",
    "rank_origins",
    "retitle",
    "service_evidence",
    "value_with_unit",
    "with_trace_blame",
]

ProblemStatus: TypeAlias = Literal["open", "resolved"]
"""``open`` while one of its anomalies is still ongoing or a symptom may still join it (see
:func:`group_problems`), else ``resolved``."""

Role: TypeAlias = Literal[
    "trace_origin", "own_cause", "silent_callee", "symptomatic", "traffic_only"
]
"""Why a service is where it is in a problem's ranking (module docstring, "Origin ranking")."""

SymptomKind: TypeAlias = Literal[
    "server_latency", "client_latency", "saturation", "load", "errors", "logs", "other"
]
"""What a :class:`Symptom` shows (module docstring, "Evidence")."""

_MINUTE_NS: Final = 60 * 1_000_000_000
_IQR_TO_SIGMA: Final = 1.349
_P10_P90_TO_SIGMA: Final = 2.563
_ROLE_ORDER: Final[dict[Role, int]] = {
    "trace_origin": 0,
    "own_cause": 1,
    "silent_callee": 2,
    "symptomatic": 3,
    "traffic_only": 4,
}
_OWN_KINDS: Final[frozenset[SymptomKind]] = frozenset({"saturation", "errors", "logs"})
_OWN_STRENGTH: Final[dict[SymptomKind, int]] = {"saturation": 0, "errors": 1, "logs": 2}
"""Within ``own_cause``: a resource at its limit, then the service's own errors, then bursts of
error/warning log lines (module docstring, "Origin ranking")."""


class GroupingConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parameters of :func:`group_problems` and :func:`service_evidence`.

    Attributes:
        quiet_gap_ns: a symptom starting more than this after a related problem's latest
            symptom onset opens a new problem (default 3 minutes).
        evidence_tail_ns: how long after the latest onset the evidence window lasts.
        history_ns: how far back before the evidence window a series' usual level is taken.
        min_history_points: points of history a series needs to show a symptom.
        evidence_z: robust standard deviations above the usual level a symptom needs.
        evidence_ratio: times the usual level a symptom needs (and, for series watched
            downwards, a fall to at most ``1 / evidence_ratio`` of it).
        saturation_level: a utilisation (unit ``1``) counts as saturation from this share of
            its limit on; below it a rise is *load*.
        trace_share: the trace origin must explain at least this share of how much slower
            the slow traces are than the typical ones (with a reference: the score of
            :mod:`~coremetry.detection.spectrum` it needs).
        max_onset_spread_ns: a symptom starting more than this after a problem's first
            onset opens a new problem even when related and within ``quiet_gap_ns`` of the
            latest one (default 5 minutes): a new fault opens its own problem instead of
            joining one still growing, and no problem grows for ever.
    """

    quiet_gap_ns: int = 3 * _MINUTE_NS
    evidence_tail_ns: int = 2 * _MINUTE_NS
    history_ns: int = 60 * _MINUTE_NS
    min_history_points: int = 10
    evidence_z: float = 4.0
    evidence_ratio: float = 2.0
    saturation_level: float = 0.5
    trace_share: float = 0.1
    max_onset_spread_ns: int = 5 * _MINUTE_NS

    def validate(self) -> None:
        """Check the parameters.

        Raises:
            ValueError: naming the first offending field.
        """
        checks: list[tuple[str, bool, str]] = [
            ("quiet_gap_ns", self.quiet_gap_ns >= 0, "must not be negative"),
            ("evidence_tail_ns", self.evidence_tail_ns >= 0, "must not be negative"),
            ("history_ns", self.history_ns > 0, "must be positive"),
            ("min_history_points", self.min_history_points >= 2, "must be at least 2"),
            ("evidence_z", self.evidence_z > 0, "must be positive"),
            ("evidence_ratio", self.evidence_ratio > 1, "must be above 1"),
            ("saturation_level", 0 < self.saturation_level <= 1, "must be in (0, 1]"),
            ("trace_share", 0 <= self.trace_share <= 1, "must be in [0, 1]"),
            ("max_onset_spread_ns", self.max_onset_spread_ns >= 0, "must not be negative"),
        ]
        for field, ok, message in checks:
            if not ok:
                raise ValueError(f"GroupingConfig.{field} {message}")


class Symptom(msgspec.Struct, frozen=True, kw_only=True):
    """One series of a service visibly unwell while a problem began.

    Attributes:
        kind: what it shows (:data:`SymptomKind`).
        series_name: the series' name.
        baseline: its usual level (median over the history), series unit.
        peak: its most extreme value in the evidence window, series unit.
        z: how far ``peak`` is from ``baseline`` in robust standard deviations.
        unit: the series' unit (UCUM, as stored; ``""`` when it has none).
    """

    kind: SymptomKind
    series_name: str
    baseline: float
    peak: float
    z: float
    unit: str = ""


class TraceBlame(msgspec.Struct, frozen=True, kw_only=True):
    """What the traces of a problem's window say (filled by the runner from the store).

    Attributes:
        service_name: the service whose critical-path time grew most from typical to slow
            traces.
        excess_ns: that growth, mean nanoseconds per trace.
        gap_ns: how much slower the slow traces are than the typical ones (mean durations).
        slow_traces: slow traces read (with a reference: the problem window's traces read).
        typical_traces: typical traces read (with a reference: reference traces read).
        reference: the comparison was against traces from before the problem
            (:mod:`~coremetry.detection.spectrum`), not slow against typical ones of the window.
        score: with a reference, the origin's score (share of the slowdown it explains, or
            its error excess); ``None`` otherwise.
        candidates: with a reference, the best services and their figures, one line each
            (``"<service>: <figures>"``).
    """

    service_name: str
    excess_ns: float
    gap_ns: float
    slow_traces: int
    typical_traces: int
    reference: bool = False
    score: float | None = None
    candidates: list[str] = msgspec.field(default_factory=list)


class ServiceRank(msgspec.Struct, frozen=True, kw_only=True):
    """One service's place in a problem's origin ranking.

    Attributes:
        service_name: the service (``service.name``).
        symptomatic: it shows a symptom (evidence or an anomaly other than a traffic change).
        anomalous_callers: its callers (graph edges into it) with a symptom in the problem.
        anomalous_callees: its callees with a symptom in the problem.
        depth: edges on the longest symptomatic call chain from an entry point down to it
            (0 for an entry point or a service without symptomatic callers).
        first_anomaly_unix_nano: start of its earliest anomaly in the problem (for a
            silent callee without one: the problem's start).
        max_score: its largest anomaly or evidence score (robust standard deviations).
        reason: why it ranks where it does, in words; the first service's also says why
            it is ahead of the second (the rule and the figures it compared).
        role: its :data:`Role`.
        evidence: its symptoms, one line each (series, usual level and peak, each with its
            unit: :func:`value_with_unit`). Never empty: a silent callee's lines are its
            waiting callers' client latency (named as theirs) and its own server latency
            levels; a service only the traces blame, their figures; a traffic-only service,
            its traffic anomalies; otherwise one line saying nothing supports it.
        sample_trace_ids: traces of the problem's window that show this service's part (the
            runner fills them for the first ``DetectionOptions.sample_candidates`` services:
            :mod:`coremetry.detection.runner`, step 7); empty from :func:`rank_origins`.
        sample_log_lines: its log lines of the problem's window (likewise), each
            ``"<RFC 3339 time> <severity> <body>"``.
        samples_note: how the samples were chosen, in words; empty when the service was not
            sampled (beyond the bound, or stored before samples were per candidate).
    """

    service_name: str
    symptomatic: bool
    anomalous_callers: list[str]
    anomalous_callees: list[str]
    depth: int
    first_anomaly_unix_nano: int
    max_score: float
    reason: str
    role: Role = "symptomatic"
    evidence: list[str] = msgspec.field(default_factory=list)
    sample_trace_ids: list[str] = msgspec.field(default_factory=list)
    sample_log_lines: list[str] = msgspec.field(default_factory=list)
    samples_note: str = ""


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """Related anomalies as one incident.

    Attributes:
        problem_id: stable id (``prb_`` + 16 hex), derived from the earliest anomaly; the
            problem store keeps the first id an incident was stored under across runs.
        status: ``open`` or ``resolved`` (see :data:`ProblemStatus`).
        start_unix_nano: start of the earliest anomaly.
        end_unix_nano: end of the latest anomaly.
        detected_unix_nano: when the first of its anomalies was raised.
        services: the services involved, most likely origin first.
        ranking: one :class:`ServiceRank` per service, in the order of ``services``.
        anomalies: the evidence, ordered by start time then series id.
        title: one line: the origin and its strongest anomaly.
        sample_trace_ids: traces that show it (filled by the server-side runner from the
            store; empty from :func:`group_problems`).
        sample_log_lines: log lines that show it (likewise).
        trace_blame: what the traces of its window said, when there were any (runner).
        aliases: other ids this problem answers to: stored problems that a later run found
            to be the same incident and merged into it
            (:mod:`~coremetry.detection.problem_store`); empty from :func:`group_problems`.
    """

    problem_id: str
    status: ProblemStatus
    start_unix_nano: int
    end_unix_nano: int
    detected_unix_nano: int
    services: list[str]
    ranking: list[ServiceRank]
    anomalies: list[Anomaly]
    title: str
    sample_trace_ids: list[str] = msgspec.field(default_factory=list)
    sample_log_lines: list[str] = msgspec.field(default_factory=list)
    trace_blame: TraceBlame | None = None
    aliases: list[str] = msgspec.field(default_factory=list)

    @property
    def onsets(self) -> tuple[int, int]:
        """``(first onset, latest symptom onset)`` in unix ns: when the problem began."""
        symptoms = [a.start_unix_nano for a in self.anomalies if a.signal != "traffic"]
        return self.start_unix_nano, max(symptoms, default=self.start_unix_nano)


NO_EVIDENCE: Final = (
    "none: no series of its own showed a symptom in the problem's window, and nothing else "
    "ranked it"
)
"""The evidence line of a ranked service nothing supports (a later step may add evidence)."""


# -- grouping --------------------------------------------------------------------------------

SeriesIndex: TypeAlias = dict[str, list[tuple[Series, list[int]]]]
"""The run's series by service name, each with its point times (read once, bisected often):
:func:`index_series` builds it; pass it to :func:`with_trace_blame` when ranking many problems
of one run again, so it is built once per run."""
_Index = SeriesIndex


def index_series(series: Iterable[Series]) -> SeriesIndex:
    """The :data:`SeriesIndex` of a run's series (those without a service are left out)."""
    index: _Index = {}
    for one in series:
        if one.service_name:
            index.setdefault(one.service_name, []).append((one, [t for t, _ in one.points]))
    return index


_index = index_series


def _group_key(anomaly: Anomaly) -> str:
    return anomaly.service_name if anomaly.service_name else f"\0series:{anomaly.series_id}"


def _adjacency(edges: Iterable[tuple[str, str]]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(callees_of, callers_of)`` without self-loops."""
    callees: dict[str, set[str]] = {}
    callers: dict[str, set[str]] = {}
    for caller, callee in edges:
        if caller == callee:
            continue
        callees.setdefault(caller, set()).add(callee)
        callers.setdefault(callee, set()).add(caller)
    return callees, callers


class _Cluster:
    __slots__ = ("first", "keys", "last_symptom", "members", "symptoms")

    def __init__(self, anomaly: Anomaly) -> None:
        self.members = [anomaly]
        self.keys = {_group_key(anomaly)}
        self.first = anomaly.start_unix_nano
        self.symptoms = anomaly.signal != "traffic"
        self.last_symptom = anomaly.start_unix_nano

    def absorb(self, other: _Cluster) -> None:
        self.members.extend(other.members)
        self.keys |= other.keys
        self.first = min(self.first, other.first)
        self.last_symptom = max(self.last_symptom, other.last_symptom)


def group_problems(
    anomalies: Iterable[Anomaly],
    edges: Iterable[tuple[str, str]] = (),
    config: GroupingConfig | None = None,
    series: Sequence[Series] = (),
    *,
    end_unix_nano: int | None = None,
) -> list[Problem]:
    """Group anomalies into problems, one per onset, and rank each problem's origins.

    A problem is ``open`` while one of its anomalies is ongoing, and also while its latest
    symptom onset is within ``quiet_gap_ns`` of ``end_unix_nano`` (another symptom may still
    join it): so once ``resolved`` a problem stays resolved as the data grows (problem-level
    hysteresis, on top of each anomaly's).

    Args:
        anomalies: the anomalies of one detection run, any order.
        edges: the service graph as ``(caller, callee)`` service-name pairs; duplicates and
            self-loops are ignored.
        config: grouping and evidence parameters; ``None`` uses the defaults.
        series: every series the run judged (their points are read for the evidence of
            :func:`service_evidence`); empty: only the anomalies are evidence.
        end_unix_nano: the end of the judged range; ``None``: only ongoing anomalies keep a
            problem open.

    Returns:
        Problems ordered by start time (then id); each one's anomalies ordered by start time
        then series id. ``trace_blame`` and the samples are left for the runner.

    Raises:
        ValueError: a bad ``config`` field (named).
    """
    cfg = config if config is not None else GroupingConfig()
    cfg.validate()
    ordered = sorted(
        anomalies, key=lambda a: (a.start_unix_nano, a.signal == "traffic", a.series_id)
    )
    edge_list = list(edges)
    callees, callers = _adjacency(edge_list)

    def related(anomaly: Anomaly, cluster: _Cluster) -> bool:
        key = _group_key(anomaly)
        if key in cluster.keys:
            return True
        near = callees.get(key, set()) | callers.get(key, set())
        return not near.isdisjoint(cluster.keys)

    clusters: list[_Cluster] = []
    for anomaly in ordered:
        start = anomaly.start_unix_nano
        if anomaly.signal != "traffic":
            hits = [
                c
                for c in clusters
                if c.symptoms
                and start - c.last_symptom <= cfg.quiet_gap_ns
                and start - c.first <= cfg.max_onset_spread_ns
                and related(anomaly, c)
            ]
            if not hits:
                clusters.append(_Cluster(anomaly))
                continue
            target = hits[0]
            for other in hits[1:]:
                if abs(other.first - target.first) > cfg.max_onset_spread_ns:
                    continue
                target.absorb(other)
                clusters.remove(other)
            target.members.append(anomaly)
            target.keys.add(_group_key(anomaly))
            target.last_symptom = max(target.last_symptom, start)
            continue
        covering = [
            c
            for c in clusters
            if c.first <= start <= c.last_symptom + cfg.quiet_gap_ns
            and start - c.first <= cfg.max_onset_spread_ns
            and related(anomaly, c)
        ]
        if covering:
            covering[0].members.append(anomaly)
            covering[0].keys.add(_group_key(anomaly))
        else:
            clusters.append(_Cluster(anomaly))

    index = _index(series)
    problems = [
        _build_problem(
            sorted(c.members, key=lambda a: (a.start_unix_nano, a.series_id)),
            edge_list,
            index,
            cfg,
            end_unix_nano is not None and end_unix_nano - c.last_symptom <= cfg.quiet_gap_ns,
        )
        for c in clusters
    ]
    problems.sort(key=lambda p: (p.start_unix_nano, p.problem_id))
    return problems


def _build_problem(
    members: list[Anomaly],
    edges: Sequence[tuple[str, str]],
    index: _Index,
    cfg: GroupingConfig,
    recent: bool,
) -> Problem:
    first = members[0]
    digest = hashlib.blake2s(
        f"{first.series_id}\0{first.start_unix_nano}".encode(), digest_size=8
    ).hexdigest()
    ranking = _ranked(members, edges, index, cfg, None)
    services = [rank.service_name for rank in ranking]
    return Problem(
        problem_id=f"prb_{digest}",
        status="open" if recent or any(a.ongoing for a in members) else "resolved",
        start_unix_nano=first.start_unix_nano,
        end_unix_nano=max(a.end_unix_nano for a in members),
        detected_unix_nano=min(a.detected_unix_nano for a in members),
        services=services,
        ranking=ranking,
        anomalies=members,
        title=_title(members, services),
    )


def evidence_window(problem: Problem, config: GroupingConfig | None = None) -> TimeRange:
    """When the problem began: its first onset to its latest symptom onset plus the tail.

    Returns:
        ``[start, latest symptom onset + evidence_tail_ns]`` as a half-open range ending one
        nanosecond after it (unix ns).
    """
    cfg = config if config is not None else GroupingConfig()
    low, latest = problem.onsets
    return TimeRange(start_unix_nano=low, end_unix_nano=latest + cfg.evidence_tail_ns + 1)


def with_trace_blame(
    problem: Problem,
    blame: TraceBlame,
    edges: Iterable[tuple[str, str]],
    series: Sequence[Series] = (),
    config: GroupingConfig | None = None,
    *,
    index: SeriesIndex | None = None,
) -> Problem:
    """The problem ranked again with what its traces said (:data:`Role` ``trace_origin``).

    Args:
        problem: a problem of :func:`group_problems`.
        blame: the critical-path comparison of its window's traces.
        edges: the service graph, as for :func:`group_problems`.
        series: the run's series, as for :func:`group_problems`.
        config: as for :func:`group_problems`.
        index: ``index_series(series)`` when the caller already built it (then ``series``
            is not read).

    Returns:
        The problem with ``trace_blame`` set and its ranking, services and title redone.
    """
    cfg = config if config is not None else GroupingConfig()
    found = index if index is not None else _index(series)
    ranking = _ranked(problem.anomalies, list(edges), found, cfg, blame)
    services = [rank.service_name for rank in ranking]
    return msgspec.structs.replace(
        problem,
        ranking=ranking,
        services=services,
        title=_title(problem.anomalies, services),
        trace_blame=blame,
    )


def _ranked(
    members: Sequence[Anomaly],
    edges: Sequence[tuple[str, str]],
    index: _Index,
    cfg: GroupingConfig,
    traces: TraceBlame | None,
) -> list[ServiceRank]:
    symptoms = [a.start_unix_nano for a in members if a.signal != "traffic"]
    low = min(a.start_unix_nano for a in members)
    high = max(symptoms, default=low) + cfg.evidence_tail_ns
    cache: dict[str, ServiceEvidence | None] = {}

    def lookup(service: str) -> ServiceEvidence | None:
        # Only the services the ranking walks to are judged (the problem's neighbourhood).
        if service not in cache:
            cache[service] = _evidence_of(index.get(service, ()), low, high, cfg)
        return cache[service]

    return _rank(members, edges, lookup, traces, cfg)


# -- evidence --------------------------------------------------------------------------------


def _kind(one: Series, peak: float, cfg: GroupingConfig) -> SymptomKind | None:
    if one.signal == "latency":
        return "client_latency" if one.side == "client" else "server_latency"
    if one.signal == "saturation":
        saturated = one.unit == "1" and peak >= cfg.saturation_level
        return "saturation" if saturated else "load"
    if one.signal == "errors":
        return "errors"
    if one.signal == "logs":
        return "logs"
    return None  # traffic and other series are not symptoms


def _symptom(
    one: Series, times: Sequence[int], low: int, high: int, cfg: GroupingConfig
) -> Symptom | None:
    """The series' symptom in ``[low, high]`` against the ``history_ns`` before ``low``."""
    level, shown = _measure(one, times, low, high, cfg)
    return level if shown else None


def _measure(
    one: Series, times: Sequence[int], low: int, high: int, cfg: GroupingConfig
) -> tuple[Symptom | None, bool]:
    """The series' level in ``[low, high]`` (usual level, peak, z) and whether it is a symptom.

    ``(None, False)`` without enough history, points in the window, or a symptom kind.
    """
    points = one.points
    first = bisect.bisect_left(times, low - cfg.history_ns)
    begin = bisect.bisect_left(times, low)
    stop = bisect.bisect_right(times, high)
    history = sorted(v for _, v in points[first:begin] if math.isfinite(v))
    window = [v for _, v in points[begin:stop] if math.isfinite(v)]
    if len(history) < cfg.min_history_points or not window:
        return None, False
    last = len(history) - 1

    def quantile(q: float) -> float:
        pos = q * last
        below = int(pos)
        return history[below] + (history[min(below + 1, last)] - history[below]) * (pos - below)

    median = quantile(0.5)
    iqr = quantile(0.75) - quantile(0.25)
    scale = iqr / _IQR_TO_SIGMA if iqr > 0 else (quantile(0.9) - quantile(0.1)) / _P10_P90_TO_SIGMA
    if one.watch == "down":
        peak = min(window)
        z = (median - peak) / _floored(scale, median, peak)
        shown = median > 0 and peak <= median / cfg.evidence_ratio
    else:
        peak = max(window)
        z = (peak - median) / _floored(scale, median, peak)
        shown = peak >= cfg.evidence_ratio * median if median > 0 else peak > median
    kind = _kind(one, peak, cfg)
    if kind is None:
        return None, False
    level = Symptom(
        kind=kind, series_name=one.name, baseline=median, peak=peak, z=round(z, 3), unit=one.unit
    )
    return level, shown and z >= cfg.evidence_z


_SCALE_FLOOR: Final = 0.05


def _floored(scale: float, baseline: float, peak: float) -> float:
    """A robust scale with a floor: 5 % of ``|baseline|``, else 5 % of ``|peak|``.

    The second only for a series with neither spread nor level (a log rate of 0 every
    minute). Without it such a series has a scale of 0, and any departure scores ~1e11
    robust standard deviations, outranking a real saturation. With it, a departure from a
    flat zero scores at most 20 (a pseudo-count relative to the value reached).
    """
    floored = max(scale, _SCALE_FLOOR * abs(baseline))
    if floored > 0:
        return floored
    return max(_SCALE_FLOOR * abs(peak), 1e-12)


def _bounded_score(anomaly: Anomaly) -> float:
    """An anomaly's score with the scale floor of :func:`_floored` applied."""
    departure = abs(anomaly.observed - anomaly.baseline)
    cap = departure / _floored(0.0, anomaly.baseline, anomaly.observed)
    return min(anomaly.score, cap) if departure > 0 else anomaly.score


class ServiceEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """What one service's series showed while a problem began (:func:`service_evidence`).

    Attributes:
        symptoms: its series that showed a symptom.
        observed: the latency kinds (``server_latency``, ``client_latency``) of its series
            that had points in the window, symptom or not: "observed and normal" is evidence.
        normal_levels: its latency series that had points in the window and enough history
            but showed no symptom, with their usual level and peak (series unit): what a
            silent callee's "server latency stayed normal" rests on.
    """

    symptoms: list[Symptom] = msgspec.field(default_factory=list)
    observed: list[SymptomKind] = msgspec.field(default_factory=list)
    normal_levels: list[Symptom] = msgspec.field(default_factory=list)

    def shows(self, kind: SymptomKind) -> bool:
        """It has a symptom of that kind."""
        return any(s.kind == kind for s in self.symptoms)

    def normal(self, kind: SymptomKind) -> bool:
        """A series of that kind had points in the window and showed no symptom."""
        return kind in self.observed and not self.shows(kind)


def service_evidence(
    by_service: Mapping[str, Sequence[Series]], low: int, high: int, config: GroupingConfig
) -> dict[str, ServiceEvidence]:
    """Per service, what its series showed in ``[low, high]`` (module docstring, "Evidence").

    Args:
        by_service: the run's series by service name.
        low: start of the evidence window, unix ns.
        high: end of it (inclusive), unix ns.
        config: thresholds (``evidence_*``, ``history_ns``, ``saturation_level``).

    Returns:
        ``{service: ServiceEvidence}`` for every service with a latency, saturation, error or
        log series that had points in the window or showed a symptom.
    """
    found: dict[str, ServiceEvidence] = {}
    for service, judged in by_service.items():
        evidence = _evidence_of(
            [(one, [t for t, _ in one.points]) for one in judged], low, high, config
        )
        if evidence is not None:
            found[service] = evidence
    return found


def _evidence_of(
    judged: Sequence[tuple[Series, list[int]]], low: int, high: int, config: GroupingConfig
) -> ServiceEvidence | None:
    symptoms: list[Symptom] = []
    levels: list[Symptom] = []
    observed: set[SymptomKind] = set()
    for one, times in judged:
        if one.signal not in ("latency", "saturation", "errors", "logs"):
            continue
        level, shown = _measure(one, times, low, high, config)
        symptom = level if shown else None
        if symptom is not None:
            symptoms.append(symptom)
        elif level is not None and one.signal == "latency":
            levels.append(level)
        if one.signal == "latency" and (
            symptom is not None or bisect.bisect_left(times, low) < bisect.bisect_right(times, high)
        ):
            observed.add("client_latency" if one.side == "client" else "server_latency")
    if not symptoms and not observed:
        return None
    symptoms.sort(key=lambda s: (-s.z, s.series_name))
    levels.sort(key=lambda s: (s.kind != "server_latency", -s.z, s.series_name))
    return ServiceEvidence(symptoms=symptoms, observed=sorted(observed), normal_levels=levels)


# -- ranking ---------------------------------------------------------------------------------


def _anomaly_kind(anomaly: Anomaly, cfg: GroupingConfig) -> SymptomKind | None:
    if anomaly.signal == "latency":
        return "client_latency" if anomaly.side == "client" else "server_latency"
    if anomaly.signal == "saturation":
        saturated = (
            anomaly.unit == "1"
            and anomaly.direction == "up"
            and anomaly.observed >= cfg.saturation_level
        )
        return "saturation" if saturated else "load"
    if anomaly.signal == "errors":
        return "errors"
    if anomaly.signal == "logs":
        return "logs"
    if anomaly.signal == "other":
        return "other"
    return None


def _with_anomalies(
    anomalies: Sequence[Anomaly],
    evidence: Mapping[str, ServiceEvidence],
    cfg: GroupingConfig,
) -> dict[str, ServiceEvidence]:
    """The evidence, with each anomaly of the problem as a symptom of its service."""
    merged = dict(evidence)
    for anomaly in anomalies:
        kind = _anomaly_kind(anomaly, cfg)
        if not anomaly.service_name or kind is None:
            continue
        current = merged.get(anomaly.service_name, ServiceEvidence())
        if current.shows(kind):
            continue
        observed = set(current.observed)
        if kind in ("server_latency", "client_latency"):
            observed.add(kind)
        merged[anomaly.service_name] = ServiceEvidence(
            normal_levels=[n for n in current.normal_levels if n.kind != kind],
            symptoms=[
                *current.symptoms,
                Symptom(
                    kind=kind,
                    series_name=anomaly.name,
                    baseline=anomaly.baseline,
                    peak=anomaly.observed,
                    z=round(_bounded_score(anomaly), 3),
                    unit=anomaly.unit,
                ),
            ],
            observed=sorted(observed),
        )
    return merged


def _neighbourhood(
    lookup: Callable[[str], ServiceEvidence | None],
    members: set[str],
    callees: Mapping[str, set[str]],
    callers: Mapping[str, set[str]],
) -> dict[str, ServiceEvidence]:
    """The evidence of the services that belong to the problem.

    Its services with anomalies, everything reached from them in the service graph through
    services with a symptom, and the direct neighbours of those (a silent callee is a
    neighbour without a symptom); other services are not this problem's.
    """
    inside = set(members)
    frontier = sorted(members)
    while frontier:
        service = frontier.pop()
        for near in sorted(callees.get(service, set()) | callers.get(service, set())):
            found = lookup(near) if near not in inside else None
            if found is not None and found.symptoms:
                inside.add(near)
                frontier.append(near)
    around = set(inside)
    for service in inside:
        around |= callees.get(service, set()) | callers.get(service, set())
    return {service: found for service in sorted(around) if (found := lookup(service)) is not None}


def _reachable(start: str, callees: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    frontier = [start]
    while frontier:
        for callee in callees.get(frontier.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                frontier.append(callee)
    seen.discard(start)
    return seen


def rank_origins(
    anomalies: Sequence[Anomaly],
    edges: Iterable[tuple[str, str]] = (),
    *,
    evidence: Mapping[str, ServiceEvidence] | None = None,
    traces: TraceBlame | None = None,
    config: GroupingConfig | None = None,
) -> list[ServiceRank]:
    """Rank the services of one problem, most likely origin first.

    Rules in the module docstring ("Origin ranking").

    Args:
        anomalies: the problem's anomalies (anomalies without a service are not ranked).
        edges: the service graph as ``(caller, callee)`` pairs.
        evidence: what each service's series showed while the problem began
            (:func:`service_evidence`); ``None``: the anomalies are the only evidence.
        traces: what the problem's traces said, when there were any.
        config: ``saturation_level`` and ``trace_share``; ``None``: the defaults.

    Returns:
        One :class:`ServiceRank` per service with an anomaly, a symptom, or the role of a
        silent callee; best first.
    """
    cfg = config if config is not None else GroupingConfig()
    given = evidence if evidence is not None else {}
    return _rank(anomalies, edges, given.get, traces, cfg)


def _rank(
    anomalies: Sequence[Anomaly],
    edges: Iterable[tuple[str, str]],
    lookup: Callable[[str], ServiceEvidence | None],
    traces: TraceBlame | None,
    cfg: GroupingConfig,
) -> list[ServiceRank]:
    callees, callers = _adjacency(edges)
    by_service: dict[str, list[Anomaly]] = {}
    for anomaly in anomalies:
        if anomaly.service_name:
            by_service.setdefault(anomaly.service_name, []).append(anomaly)
    seen = _with_anomalies(
        anomalies, _neighbourhood(lookup, set(by_service), callees, callers), cfg
    )
    start = min((a.start_unix_nano for a in anomalies), default=0)

    symptomatic = {
        service
        for service, found in seen.items()
        if any(s.kind != "load" for s in found.symptoms)
        or (found.symptoms and service in by_service)
    }
    waiting = {
        service
        for service in symptomatic
        if seen[service].shows("client_latency")
        or (seen[service].shows("server_latency") and callees.get(service, set()) & symptomatic)
    }
    frontier = {w for w in waiting if not _reachable(w, callees) & symptomatic}
    depth = _depths(symptomatic, callers)
    trace_origin = (
        traces.service_name
        if traces is not None
        and (
            traces.score >= cfg.trace_share
            if traces.score is not None
            else traces.excess_ns > 0 and traces.excess_ns >= cfg.trace_share * traces.gap_ns
        )
        else None
    )
    trace_lines = {
        line.split(": ", 1)[0]: line.split(": ", 1)[1]
        for line in (traces.candidates if traces is not None else [])
        if ": " in line
    }

    candidates = set(by_service) | symptomatic
    if trace_origin is not None:
        candidates.add(trace_origin)
    silent: dict[str, list[str]] = {}
    for waiter in sorted(frontier):
        for callee in sorted(callees.get(waiter, ())):
            found = seen.get(callee)
            if callee not in symptomatic and found is not None and found.normal("server_latency"):
                silent.setdefault(callee, []).append(waiter)
    candidates |= set(silent)

    ranks: list[ServiceRank] = []
    for service in candidates:
        found = seen.get(service, ServiceEvidence())
        own = by_service.get(service, [])
        bad_callers = sorted(callers.get(service, set()) & symptomatic)
        bad_callees = sorted(callees.get(service, set()) & symptomatic)
        role, reason = _role(
            service,
            found,
            symptomatic=service in symptomatic,
            waiting=service in waiting,
            trace_origin=trace_origin,
            traces=traces,
            silent_for=silent.get(service, []),
            bad_callers=bad_callers,
            bad_callees=bad_callees,
        )
        scores = [_bounded_score(a) for a in own] + [s.z for s in found.symptoms]
        evidence = [_describe_symptom(s) for s in found.symptoms[:5]]
        if service in trace_lines:
            evidence.append(f"traces: {trace_lines[service]}")
        elif role == "trace_origin" and traces is not None:
            evidence.append(_trace_line(traces))
        if role == "silent_callee":
            evidence += _silent_evidence(service, found, silent.get(service, []), seen)
        if role == "traffic_only":
            evidence += [describe_anomaly(a) for a in own[:5]]
        if not evidence:
            evidence.append(NO_EVIDENCE)
        ranks.append(
            ServiceRank(
                service_name=service,
                symptomatic=service in symptomatic,
                anomalous_callers=bad_callers,
                anomalous_callees=bad_callees,
                depth=depth.get(service, 0),
                first_anomaly_unix_nano=min((a.start_unix_nano for a in own), default=start),
                max_score=round(max(scores, default=0.0), 3),
                reason=reason,
                role=role,
                evidence=evidence,
            )
        )
    # Within own_cause, the strongest kind of own evidence first (module docstring).
    strength = {
        service: min(
            (_OWN_STRENGTH[s.kind] for s in found.symptoms if s.kind in _OWN_KINDS),
            default=len(_OWN_STRENGTH),
        )
        for service, found in seen.items()
    }
    ranks.sort(
        key=lambda r: (
            _ROLE_ORDER[r.role],
            strength.get(r.service_name, len(_OWN_STRENGTH)) if r.role == "own_cause" else 0,
            bool(r.anomalous_callees),
            -len(r.anomalous_callers),
            -r.depth,
            r.first_anomaly_unix_nano,
            -r.max_score,
            r.service_name,
        )
    )
    if len(ranks) >= 2:
        first, second = ranks[0], ranks[1]
        why = _why_ahead(first, second, strength)
        ranks[0] = msgspec.structs.replace(
            first, reason=f"{first.reason}. Ahead of {second.service_name}: {why}"
        )
    return ranks


def _why_ahead(
    first: ServiceRank,
    second: ServiceRank,
    strength: Mapping[str, int],
) -> str:
    """The rule that put ``first`` ahead of ``second``, in words, with what it compared.

    The first sort key of :func:`_rank` on which the two differ.
    """
    if first.role != second.role:
        return (
            f"a stronger kind of evidence ({first.role.replace('_', ' ')} over "
            f"{second.role.replace('_', ' ')})"
        )
    mine = strength.get(first.service_name, len(_OWN_STRENGTH))
    theirs = strength.get(second.service_name, len(_OWN_STRENGTH))
    if first.role == "own_cause" and mine != theirs:
        names = {v: k for k, v in _OWN_STRENGTH.items()}
        return (
            f"stronger own evidence ({names.get(mine, 'server latency')} over "
            f"{names.get(theirs, 'server latency')}: a resource at its limit, then errors, then "
            "log bursts, then latency)"
        )
    if bool(first.anomalous_callees) != bool(second.anomalous_callees):
        return (
            f"none of its callees is unwell, while {second.service_name}'s callee "
            f"{_names(second.anomalous_callees)} is (the fault may be further down there)"
        )
    if len(first.anomalous_callers) != len(second.anomalous_callers):
        return (
            f"more of its callers are unwell ({len(first.anomalous_callers)} against "
            f"{len(second.anomalous_callers)}): the trouble spread up from it"
        )
    if first.depth != second.depth:
        return (
            f"deeper on the unwell call chain ({first.depth} calls from the entry against "
            f"{second.depth})"
        )
    if first.first_anomaly_unix_nano != second.first_anomaly_unix_nano:
        lead = (second.first_anomaly_unix_nano - first.first_anomaly_unix_nano) / 1e9
        return f"its trouble began first ({lead:,.0f} s earlier)"
    if first.max_score != second.max_score:
        return f"a larger departure (score {first.max_score:.1f} against {second.max_score:.1f})"
    return "the same evidence by every rule; ordered by name"


def _role(
    service: str,
    found: ServiceEvidence,
    *,
    symptomatic: bool,
    waiting: bool,
    trace_origin: str | None,
    traces: TraceBlame | None,
    silent_for: list[str],
    bad_callers: list[str],
    bad_callees: list[str],
) -> tuple[Role, str]:
    if service == trace_origin and traces is not None and traces.reference:
        return "trace_origin", (
            f"compared with the same requests before the problem ({traces.typical_traces} "
            f"reference traces, {traces.slow_traces} of the problem's), it explains the most: "
            f"score {traces.score or 0:.2f} (share of the slowdown, or of requests whose error "
            f"it originated, above the reference); the requests took {traces.gap_ns / 1e6:,.0f} "
            "ms longer than usual"
        )
    if service == trace_origin and traces is not None:
        share = traces.excess_ns / traces.gap_ns if traces.gap_ns > 0 else 1.0
        return "trace_origin", (
            f"its critical-path time in slow traces is {traces.excess_ns / 1e6:,.0f} ms per "
            f"trace above typical ones ({share:.0%} of the gap; {traces.slow_traces} slow and "
            f"{traces.typical_traces} typical traces read; a caller waiting on its calls counts "
            "for it)"
        )
    kinds = {s.kind for s in found.symptoms}
    if kinds & _OWN_KINDS:
        shown = ", ".join(sorted(k.replace("_", " ") for k in kinds & _OWN_KINDS))
        return "own_cause", f"its own {shown}" + _callers_text(bad_callers, bad_callees)
    if "server_latency" in kinds and not waiting and found.normal("client_latency"):
        return "own_cause", (
            "its server latency rose while its calls to others (client latency) stayed "
            "normal: its own work slowed" + _callers_text(bad_callers, bad_callees)
        )
    if silent_for:
        levels = [n for n in found.normal_levels if n.kind == "server_latency"]
        level = (
            f" ({value_with_unit(levels[0].baseline, levels[0].unit)} usually, "
            f"{value_with_unit(levels[0].peak, levels[0].unit)} at peak, z {levels[0].z:.1f})"
            if levels
            else ""
        )
        one = len(silent_for) == 1
        return "silent_callee", (
            f"no symptom of its own: {service}'s server latency stayed within its usual "
            f"spread{level}, while "
            f"its caller{'' if one else 's'} {_names(silent_for)} wait{'s' if one else ''} "
            f"longer on {'its' if one else 'their'} calls (client latency up) and no service "
            f"below {'it' if one else 'them'} shows a symptom: the time is lost between "
            f"them ({service}'s network or queueing)"
        )
    if not symptomatic:
        return (
            "traffic_only",
            "only its traffic changed, usually a consequence of its callers' trouble",
        )
    return "symptomatic", _reason(bad_callers, bad_callees, waiting)


def _trace_line(traces: TraceBlame) -> str:
    """The evidence line of the service the traces blame, when no candidate line names it."""
    if traces.reference:
        return (
            f"traces: score {traces.score or 0:.2f} against {traces.typical_traces} reference "
            f"traces ({traces.slow_traces} of the problem's); the requests took "
            f"{traces.gap_ns / 1e6:,.1f} ms longer than usual"
        )
    return (
        f"traces: critical-path time {traces.excess_ns / 1e6:,.1f} ms per trace above typical "
        f"ones, of a {traces.gap_ns / 1e6:,.1f} ms gap ({traces.slow_traces} slow and "
        f"{traces.typical_traces} typical traces)"
    )


def _silent_evidence(
    service: str,
    found: ServiceEvidence,
    waiters: list[str],
    seen: Mapping[str, ServiceEvidence],
) -> list[str]:
    """A silent callee's evidence: its waiting callers' client latency, its own normal level.

    The client latency series are the callers' (all their outgoing calls: the series do not
    say which callee), named as such; the server latency line is the callee's own.
    """
    lines: list[str] = []
    for waiter in waiters[:3]:
        waits = [s for s in seen[waiter].symptoms if s.kind == "client_latency"][:1]
        lines += [
            f"{waiter}'s calls (to it and its other callees): {_describe_symptom(s)}" for s in waits
        ]
    levels = [n for n in found.normal_levels if n.kind == "server_latency"][:2]
    lines += [f"its own {_describe_level(n)}" for n in levels]
    if not levels:
        lines.append(
            f"{service}'s own server latency: observed in the window without a symptom (too "
            "little history before it for a usual level)"
        )
    return lines


def _describe_level(level: Symptom) -> str:
    return (
        f"{level.series_name}: {value_with_unit(level.baseline, level.unit)} usually, "
        f"{value_with_unit(level.peak, level.unit)} at peak "
        f"({level.kind.replace('_', ' ')}, no symptom: z {level.z:.1f})"
    )


def _callers_text(bad_callers: list[str], bad_callees: list[str]) -> str:
    if bad_callees:
        return f"; but its callee {_names(bad_callees)} is unwell too"
    if bad_callers:
        return f"; its caller {_names(bad_callers)} is unwell too, as expected"
    return ""


def _reason(bad_callers: list[str], bad_callees: list[str], waiting: bool) -> str:
    if bad_callees:
        return f"unwell, but so is its callee {_names(bad_callees)}: the fault may be further down"
    if waiting:
        return (
            "it waits longer on its calls (client latency up) and none of the services it "
            "calls shows a symptom: the delay is in a callee we do not observe, or its network"
        )
    if bad_callers:
        return (
            f"deepest anomalous service: its caller {_names(bad_callers)} "
            "is anomalous too and none of its callees is"
        )
    return "anomalous; no caller or callee of it is anomalous in this problem"


def _describe_symptom(symptom: Symptom) -> str:
    return (
        f"{symptom.series_name}: {value_with_unit(symptom.baseline, symptom.unit)} usually, "
        f"{value_with_unit(symptom.peak, symptom.unit)} at peak "
        f"({symptom.kind.replace('_', ' ')}, z {symptom.z:.1f})"
    )


_PER_SECOND: Final = "/s"
_UNIT_WORDS: Final[dict[str, str]] = {"By": "bytes", "s": "s", "ms": "ms", "%": "%"}


def value_with_unit(value: float, unit: str) -> str:
    """A series value as an evidence line writes it: always with its unit named.

    The stored unit is UCUM (OTel's convention); it is written for a reader:

    - ``"1"`` (a dimensionless ratio: a utilisation, an error ratio, a share) as a
      percentage: ``0.95`` -> ``"95%"``;
    - a count per second of an annotated thing (``"{record}/s"``, ``"{request}/s"``) per
      minute, the thing in words: ``0.05`` -> ``"3 records/min"`` (log and request rates
      are sparse; a minute is the bucket the detector judges);
    - ``"By"`` as ``bytes``, an annotation alone (``"{cpu}"``) as its word (``"cpu"``);
    - any other unit as stored (``"s"``, ``"ms"``, ``"By/s"``), after the value;
    - no unit stated (``""``): the value followed by ``(no unit stated)``.

    Example: ``value_with_unit(0.38, "s") == "0.38 s"``.
    """
    if unit == "1":
        return f"{value * 100:.4g}%"
    if unit.endswith(_PER_SECOND) and unit.startswith("{") and unit[:-2].endswith("}"):
        thing = unit[1:-3]
        return f"{value * 60:.4g} {thing if thing.endswith('s') else thing + 's'}/min"
    if unit.startswith("{") and unit.endswith("}"):
        return f"{value:.4g} {unit[1:-1]}"
    if not unit:
        return f"{value:.4g} (no unit stated)"
    return f"{value:.4g}{'' if unit == '%' else ' '}{_UNIT_WORDS.get(unit, unit)}"


def _depths(nodes: set[str], callers: dict[str, set[str]]) -> dict[str, int]:
    """Longest path (in edges) to each node within ``nodes``; cycles are cut by a bound."""
    depth = dict.fromkeys(nodes, 0)
    for _ in range(len(nodes)):  # Bellman-Ford-style relaxation, at most |nodes| rounds
        changed = False
        for node in nodes:
            for caller in callers.get(node, ()):
                if caller in nodes and depth[caller] + 1 > depth[node]:
                    depth[node] = min(depth[caller] + 1, len(nodes))
                    changed = True
        if not changed:
            break
    return depth


def _names(services: list[str]) -> str:
    shown = ", ".join(services[:3])
    return shown if len(services) <= 3 else f"{shown} and {len(services) - 3} more"


def describe_anomaly(anomaly: Anomaly) -> str:
    """One line for an anomaly: series, direction, baseline and observed value with unit.

    Example: ``"http.server.request.duration.p99 up: 0.38 -> 3.5 s (score 41.2)"``.
    """
    unit = f" {anomaly.unit}" if anomaly.unit else ""
    return (
        f"{anomaly.name} {anomaly.direction}: {anomaly.baseline:.4g} -> "
        f"{anomaly.observed:.4g}{unit} (score {anomaly.score:.1f})"
    )


def _title(members: list[Anomaly], services: list[str]) -> str:
    if services:
        origin = services[0]
        own = [a for a in members if a.service_name == origin]
        more_count = len(services) - 1
        more = (
            f" (+{more_count} more service{'s' if more_count != 1 else ''})" if more_count else ""
        )
        if own:
            strongest = max(own, key=lambda a: (a.signal != "traffic", a.score))
            return f"{origin}: {describe_anomaly(strongest)}{more}"
        strongest = max(members, key=lambda a: (a.signal != "traffic", a.score))
        return (
            f"{origin} (likely origin): {describe_anomaly(strongest)} at "
            f"{strongest.service_name}{more}"
        )
    strongest = max(members, key=lambda a: a.score)
    return describe_anomaly(strongest)


def retitle(problem: Problem) -> str:
    """The title of a problem after its ranking changed (e.g. with trace evidence)."""
    return _title(problem.anomalies, problem.services)
