"""Log event patterns: template frequency and sequence change at every severity.

A fault often shows in a service's logs only as a *changed pattern* of ordinary INFO lines —
a step that stops being logged, a branch taken instead of another — with no WARN or ERROR
line and no change in the number of records. This module finds such changes per service and
per step (one minute by default), against the service's own reference: the ``history_ns``
before the step (the hour, as the trace-only step of :mod:`~coremetry.detection.runner`).

**Events.** Every log record of the range, at every severity, is mined into templates per
service with the same Drain-style miner as the WARN-and-worse templates
(:class:`~coremetry.detection.templates.TemplateMiner`; Drain, He et al., ICWS 2017). An
*event* is ``(service, template)``.

**(a) Frequency change** (a template's share of its service's events): per service and
step, each template's count ``k`` among the service's ``n`` events of the step is compared
with its share in the reference, estimated by Laplace's rule ``p = (r + 1) / (R + 2)`` (``r``
of the reference's ``R`` events), by the binomial tail in its direction (``P(X >= k)`` for a
rise, ``P(X <= k)`` for a fall, ``X ~ Binomial(n, p)``). Shares rather than rates: a change of
traffic moves every template together and is the request-rate series' business, not a
pattern change. Where records carry a trace id, each trace counts once per template
(records of one request are not independent draws).

**(b) Sequence change** (Nezha's event patterns, Yu et al., "Nezha: Interpretable
Fine-Grained Root Causes Analysis for Microservices on Multi-modal Observability Data",
FSE 2023, whose event graphs link consecutive events of one trace; the next-event view of
DeepLog, Du et al., CCS 2017, and LogAnomaly, Meng et al., IJCAI 2019): the records of one
trace id, ordered by time, give transitions ``A -> B`` between consecutive events (the last
one to ``end``); a trace belongs to the step of its first record. For each event ``A`` of
the service, the share of the step's traces holding ``A`` that go on to ``B`` is compared
with the same share in the reference (Laplace's rule again) by the binomial tail: a usual
transition that *vanished* (lower tail) or a *new* one (upper tail). The transition is the
service of ``A``'s: what follows its event changed.

**Significance.** Per service and step, the smallest tail of each test times the number of
tails it chose among (Bonferroni) must be at most ``alpha``
(:attr:`~coremetry.detection.runner.DetectionOptions.log_pattern_alpha`); a service needs
:data:`MIN_EVENTS` events (frequency) or traces through the event (sequence) in the step and
in its reference, so a service that logs little is never judged. Consecutive significant
steps of one service and kind are one anomaly.

**Output.** :class:`~coremetry.detection.detector.Anomaly` records, signal ``logs``, names
``log.pattern.frequency`` and ``log.pattern.sequence``, unit ``1`` (the share), baseline the
reference share, observed the step's, score the normal quantile of the corrected tail; label
``log.pattern`` says it in words ("template '<tokens>' 0.4/min usually (12 % of the service's
events), 0 in this minute"; "sequence A -> B in 93 % of traces with A usually, 2 % now"). The
runner joins them to the problems of their service as evidence (:func:`with_log_patterns`).

Cost: one pass over the records, of which only a body's first 200 characters are mined (its
statement and first arguments; some bodies are request dumps of many kilobytes), and, per
service and step, one tail per template or transition seen; on the Nezha fault day, 94 k
records in about 2-3 s on a loaded two-core machine. At most :data:`MAX_EVENTS` records are
read (the newest).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias, TypeVar

import msgspec

from coremetry.store import TimeRange

from .detector import Anomaly
from .problems import NO_EVIDENCE, GroupingConfig, Problem, ServiceRank, evidence_window
from .templates import TemplateMiner

__all__ = [
    "MAX_EVENTS",
    "MIN_EVENTS",
    "LogEvent",
    "log_pattern_anomalies",
    "with_log_patterns",
]

MAX_EVENTS: Final = 200_000
"""Log records a run reads for patterns, at most (the newest; the runner's read:
:func:`~coremetry.detection.sources.log_events`)."""

MIN_EVENTS: Final = 10
"""Events (or traces through an event) a service needs in a step and in its reference."""

_END: Final = -1  # the pseudo-event after a trace's last record
_MIN_P: Final = 1e-15  # smallest tail turned into a score (float precision)
_TEXT_CHARS: Final = 120
_BODY_CHARS: Final = 200  # a body's head names its statement; the tail is data
_HOLDING: Final = ("", 0)  # key of a source's count of traces holding it
_K = TypeVar("_K")

LogEvent: TypeAlias = tuple[str, int, str, str]
"""``(service_name, time_unix_nano, trace_id, body)`` of one log record."""


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def _tail(k: int, n: int, p: float, up: bool) -> float:
    """``P(X >= k)`` (``up``) or ``P(X <= k)`` for ``X ~ Binomial(n, p)``, ``0 < p < 1``."""
    if up and k <= 0:
        return 1.0
    if not up and k >= n:
        return 1.0
    terms = range(k, n + 1) if up else range(k + 1)
    total = 0.0
    for i in terms:
        term = math.exp(_log_binom_pmf(i, n, p))
        total += term
        if i != k and term < total * 1e-17:  # the rest is below float precision
            break
    return min(1.0, total)


class _Finding(msgspec.Struct, frozen=True, kw_only=True):
    kind: str  # "frequency" or "sequence"
    corrected: float
    up: bool
    baseline: float
    observed: float
    text: str


def _template_text(miner: TemplateMiner, template_id: int) -> str:
    if template_id == _END:
        return "end"
    return miner.templates[template_id - 1].text[:_TEXT_CHARS]


def log_pattern_anomalies(
    records: Iterable[LogEvent],
    *,
    step_ns: int,
    history_ns: int,
    time_range: TimeRange,
    alpha: float,
) -> list[Anomaly]:
    """Template frequency and sequence changes per service and step (module docstring).

    Args:
        records: the log records, oldest first (:data:`LogEvent`).
        step_ns: the step width (ns); steps are ``time_range``'s buckets.
        history_ns: the reference: how far before each step (ns).
        time_range: the judged range (unix ns, half-open; on the step's grid); records
            before it serve as reference only.
        alpha: the family-wise level per service, step and test, in (0, 1).

    Returns:
        One anomaly per run of consecutive significant steps of a service and kind, ordered
        by start then series id.

    Raises:
        ValueError: ``step_ns`` or ``history_ns`` not positive, or ``alpha`` outside (0, 1).
    """
    if step_ns <= 0 or history_ns <= 0:
        raise ValueError("step_ns and history_ns must be positive")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    origin = time_range.start_unix_nano
    miners: dict[str, TemplateMiner] = {}
    # per (service, step): event counts (a trace counts once per template)
    freq: dict[tuple[str, int], Counter[int]] = {}
    seen: set[tuple[str, int, str]] = set()
    traces: dict[str, list[tuple[int, str, int]]] = {}
    for service, time, trace_id, body in records:
        miner = miners.get(service)
        if miner is None:
            miner = miners[service] = TemplateMiner()
        template_id = miner.add(body[:_BODY_CHARS]).template_id
        step = (time - origin) // step_ns
        if trace_id:
            traces.setdefault(trace_id, []).append((time, service, template_id))
            key = (service, template_id, trace_id)
            if key in seen:
                continue
            seen.add(key)
        freq.setdefault((service, step), Counter())[template_id] += 1
    # per (service, step): traces holding event A -> set of successors; counted per trace.
    seq: dict[tuple[str, int], dict[int, Counter[tuple[str, int]]]] = {}
    for events in traces.values():
        events.sort()
        step = (events[0][0] - origin) // step_ns
        pairs: set[tuple[str, int, str, int]] = set()
        for (_, s1, t1), (_, s2, t2) in zip(events, [*events[1:], (0, "", _END)], strict=True):
            pairs.add((s1, t1, s2, t2))
        sources: set[tuple[str, int]] = set()
        for s1, t1, s2, t2 in pairs:
            bucket = seq.setdefault((s1, step), {})
            bucket.setdefault(t1, Counter())[(s2, t2)] += 1
            sources.add((s1, t1))
        for s1, t1 in sources:  # traces holding A, under the key ("", 0)
            seq[(s1, step)][t1][_HOLDING] += 1
    reach = max(1, history_ns // step_ns)
    last_step = (time_range.end_unix_nano - origin) // step_ns
    steps_of: dict[str, set[int]] = {}
    for service, step in [*freq, *seq]:
        steps_of.setdefault(service, set()).add(step)
    found: list[Anomaly] = []
    for service in sorted(steps_of):
        steps = sorted(steps_of[service])
        runs: dict[str, list[tuple[int, _Finding]]] = {}
        reference = _Reference()
        entered = left = 0  # steps[left:entered] are in the reference
        for step in steps:
            while entered < len(steps) and steps[entered] < step:
                reference.add(
                    freq.get((service, steps[entered])), seq.get((service, steps[entered]))
                )
                entered += 1
            while steps[left] < step - reach:
                reference.remove(freq.get((service, steps[left])), seq.get((service, steps[left])))
                left += 1
            if step < 0 or step >= last_step:
                continue
            for finding in (
                _frequency(miners[service], freq.get((service, step)), reference),
                _sequence(miners, service, seq.get((service, step)), reference),
            ):
                if finding is not None and finding.corrected <= alpha:
                    runs.setdefault(finding.kind, []).append((step, finding))
        for kind, hits in runs.items():
            found.extend(_runs(service, kind, hits, origin, step_ns, time_range.end_unix_nano))
    found.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    return found


def _move(total: Counter[_K], counts: Counter[_K], sign: int) -> None:
    for key, value in counts.items():
        left = total[key] + sign * value
        if left:
            total[key] = left
        else:
            del total[key]


class _Reference:
    """A service's events over the steps of its reference window (a sliding sum)."""

    def __init__(self) -> None:
        self.freq: Counter[int] = Counter()
        self.steps = 0
        self.seq: dict[int, Counter[tuple[str, int]]] = {}

    def add(
        self,
        freq: Counter[int] | None,
        seq: dict[int, Counter[tuple[str, int]]] | None,
    ) -> None:
        self._move(freq, seq, 1)

    def remove(
        self,
        freq: Counter[int] | None,
        seq: dict[int, Counter[tuple[str, int]]] | None,
    ) -> None:
        self._move(freq, seq, -1)

    def _move(
        self,
        freq: Counter[int] | None,
        seq: dict[int, Counter[tuple[str, int]]] | None,
        sign: int,
    ) -> None:
        if freq:
            _move(self.freq, freq, sign)
            self.steps += sign
        for source, nexts in (seq or {}).items():
            total = self.seq.setdefault(source, Counter())
            _move(total, nexts, sign)
            if not total:
                del self.seq[source]


def _frequency(miner: TemplateMiner, now: Counter[int] | None, ref: _Reference) -> _Finding | None:
    if not now:
        return None
    reference, active = ref.freq, ref.steps
    n, total = sum(now.values()), sum(reference.values())
    if n < MIN_EVENTS or total < MIN_EVENTS:
        return None
    candidates = set(now) | set(reference)
    best: tuple[float, int, bool] | None = None
    for template_id in sorted(candidates):
        k = now.get(template_id, 0)
        p = (reference.get(template_id, 0) + 1) / (total + 2)
        up = k > n * p
        tail = _tail(k, n, p, up)
        if best is None or tail < best[0]:
            best = (tail, template_id, up)
    assert best is not None
    tail, template_id, up = best
    usual = reference.get(template_id, 0)
    k = now.get(template_id, 0)
    text = (
        f"template '{_template_text(miner, template_id)}' {usual / active:.1f}/min usually "
        f"({100 * usual / total:.0f} % of the service's events), {k} in this minute "
        f"({100 * k / n:.0f} %)"
    )
    return _Finding(
        kind="frequency",
        corrected=min(1.0, tail * 2 * len(candidates)),
        up=up,
        baseline=usual / total,
        observed=k / n,
        text=text,
    )


def _sequence(
    miners: dict[str, TemplateMiner],
    service: str,
    now: dict[int, Counter[tuple[str, int]]] | None,
    ref: _Reference,
) -> _Finding | None:
    if not now:
        return None
    reference = ref.seq
    tested = 0
    best: tuple[float, int, tuple[str, int], bool, float, float] | None = None
    for source in sorted(now):
        nexts, usual = now[source], reference.get(source)
        n = nexts[_HOLDING]
        if usual is None or n < MIN_EVENTS or usual[_HOLDING] < MIN_EVENTS:
            continue
        total = usual[_HOLDING]
        for target in sorted((set(nexts) | set(usual)) - {_HOLDING}):
            k = nexts.get(target, 0)
            p = (usual.get(target, 0) + 1) / (total + 2)
            up = k > n * p
            tail = _tail(k, n, p, up)
            tested += 1
            if best is None or tail < best[0]:
                best = (tail, source, target, up, usual.get(target, 0) / total, k / n)
    if best is None:
        return None
    tail, source, (next_service, next_id), up, before, after = best
    own = miners[service]
    target_text = (
        "end"
        if next_id == _END
        else f"{next_service}: {_template_text(miners[next_service], next_id)}"
    )
    text = (
        f"sequence '{_template_text(own, source)}' -> '{target_text}' in "
        f"{100 * before:.0f} % of traces with the first usually, {100 * after:.0f} % now"
    )
    return _Finding(
        kind="sequence",
        corrected=min(1.0, tail * tested),
        up=up,
        baseline=before,
        observed=after,
        text=text,
    )


def _runs(
    service: str,
    kind: str,
    hits: list[tuple[int, _Finding]],
    origin: int,
    step_ns: int,
    end: int,
) -> list[Anomaly]:
    """Consecutive significant steps as one anomaly each (its first step's finding)."""
    found: list[Anomaly] = []
    groups: list[list[tuple[int, _Finding]]] = []
    for step, finding in hits:
        if groups and step == groups[-1][-1][0] + 1:
            groups[-1].append((step, finding))
        else:
            groups.append([(step, finding)])
    for group in groups:
        first_step, first = group[0]
        last_step = group[-1][0]
        strongest = min(f.corrected for _, f in group)
        start = origin + first_step * step_ns
        found.append(
            Anomaly(
                series_id=f"logs/{service}/pattern.{kind}",
                name=f"log.pattern.{kind}",
                labels={"service.name": service, "log.pattern": first.text},
                service_name=service,
                unit="1",
                signal="logs",
                direction="up" if first.up else "down",
                start_unix_nano=start,
                detected_unix_nano=min(start + step_ns, end),
                end_unix_nano=origin + last_step * step_ns,
                ongoing=origin + (last_step + 1) * step_ns >= end,
                baseline=first.baseline,
                observed=first.observed,
                score=statistics.NormalDist().inv_cdf(1.0 - min(0.5, max(strongest, _MIN_P))),
                points=len(group),
            )
        )
    return found


def with_log_patterns(
    problems: Sequence[Problem],
    patterns: Sequence[Anomaly],
    config: GroupingConfig,
    step_ns: int,
) -> list[Problem]:
    """The problems with the log-pattern anomalies of their services joined as evidence.

    A pattern anomaly joins a problem when its service is among the problem's services and
    it starts within the problem's evidence window widened by one step before (a minute's
    logs show a fault as early as its series' first bucket): it is added to the problem's
    anomalies (so it counts as a symptom: signal ``logs``) and its words are added to that
    service's evidence in the ranking. The ranking's order is not changed.
    """
    found: list[Problem] = []
    for problem in problems:
        window = evidence_window(problem, config)
        services = set(problem.services)
        joined = [
            a
            for a in patterns
            if a.service_name in services
            and window.start_unix_nano - step_ns <= a.start_unix_nano < window.end_unix_nano
        ]
        if not joined:
            found.append(problem)
            continue
        ranking = [
            _with_patterns(
                rank,
                [
                    f"log pattern: {a.labels['log.pattern']}"
                    for a in joined
                    if a.service_name == rank.service_name
                ],
            )
            for rank in problem.ranking
        ]
        anomalies = sorted(
            [*problem.anomalies, *joined], key=lambda a: (a.start_unix_nano, a.series_id)
        )
        found.append(msgspec.structs.replace(problem, ranking=ranking, anomalies=anomalies))
    return found


def _with_patterns(rank: ServiceRank, patterns: list[str]) -> ServiceRank:
    """``rank`` with its log-pattern lines appended (its "none: ..." line gone when any join)."""
    if not patterns:
        return rank
    kept = [line for line in rank.evidence if line != NO_EVIDENCE]
    return msgspec.structs.replace(rank, evidence=[*kept, *patterns])
