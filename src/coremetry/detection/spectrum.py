"""Trace evidence against a fault-free reference: which service's share of each request grew.

Pure functions over analysed traces (:func:`coremetry.analysis.analyse_trace`); no I/O.

**Method.** A problem's traces are compared with traces of the same kind of request taken
*before* the problem (its reference), not with other traces of the same window: a service that
is always slow is slow in the reference too, so it is not blamed, which comparing slow with
typical traces of one window does (issue 16). After the spectrum-based localisation of
MicroRank (Yu et al., WWW 2021) and TraceRCA (Li et al., IWQoS 2021), which contrast traces
judged anomalous with normal ones per service, kept to what sampled traces of a minute or two
can support:

1. **Profile** (:func:`profile_trace`). Each trace is reduced to its *request kind* (root
   service and root span name), its duration, and per service the time it held the critical
   path — its own work, plus its callers' wait on calls into it (network and queueing are
   the callee's latency as its callers see it; :mod:`coremetry.analysis.critical_path`) —
   and the services that *originated* an error: a span with status ERROR none of whose
   children in another service failed (the deepest failing service of the chain).
2. **Reference** (:func:`compare_to_reference`). Per request kind with at least
   ``min_reference`` reference traces: the median duration and, per service, the median
   critical-path time. Medians, so a reference that holds a few traces of an earlier incident
   still describes the usual request.
3. **Latency excess.** The problem's *slow* traces are those that took longer than their
   kind's reference median by ``min_slowdown`` of it and by three robust standard deviations
   (median absolute deviation times 1.4826) — the anomalous traces of MicroRank, judged against
   the reference rather than against the window. For each: how much longer it took than its
   kind's median (the *gap*) and, per service, how much more critical-path time the service
   held than its median there (the *excess*), averaged over the slow traces. The excesses
   add up to the gap, so ``excess / gap`` is the share of the slowdown a service explains.
   *Which* traces are read matters when a fault slows only the few requests that pass
   through one service: an even sample of thirty out of a window's hundred and fifty held no
   slow trace at all for two network delays of a whole fault day, and one or two for two
   more. So, as MicroRank first tells anomalous traces from normal ones over *every* trace
   and only then looks inside, the caller picks the window's slow traces from the summaries
   of all of them — duration against the same threshold, computed over the summaries of the
   whole reference period (:func:`slow_by_summary`) — and reads a sample of those besides the
   even sample (``slow_sample``); they count for the latency comparison only.
   *Whose wait.* A caller's wait on a call, outside the callee's spans, counts for the
   callee (the callee's network or queueing, as its callers see it). But a caller starved of
   CPU, or with its own network slowed, sends and reads every call late: its waits on *all*
   its callees grow at once, and each callee then looks slow. So the waits are kept per
   ``(caller, callee)`` edge (:attr:`TraceProfile.waits_ns`), against their reference medians
   too, and when a caller's waits on two or more distinct callees each grew by at least
   ``min_share`` of the slowdown, the part of that growth they have in common (the smallest
   of them, from each) is the caller's own; a callee slower still keeps the rest. The common
   factor of several slow edges is the service they share, as spectrum analysis reads a
   service common to the anomalous traces (TraceRCA). A slow callee shows on every caller's
   edge into it, and not on its callers' other edges; a slow caller shows on all its edges
   out, by about as much.
4. **Error excess.** Per service: the share of problem traces in which it originated an
   error minus that share in the reference (every kind counts; a kind unseen before has no
   reference latency but its errors still count). A fault that does not slow anything
   (an exception, a wrong return) shows here. It counts only when it is *significant*: the
   chance of seeing at least that many erring traces among the problem's, were the service
   erring at its reference rate (the binomial tail, the reference rate taken as
   ``(errors + 1) / (traces + 2)``, Laplace's rule, so a reference without errors is not a
   rate of zero), is at most ``error_alpha`` (:data:`ERROR_ALPHA`). Three erring traces of
   thirty against none of forty is what a service that errs now and then shows by chance
   (tail 0.03); it named such a service the origin of unrelated faults on a whole fault day.
   The few reference traces read may miss a request kind's usual errors, so where the caller
   gives each request kind's usual error rate over the whole reference period (from trace
   summaries: :func:`kind_error_rates`), the chance rate is at least the mean usual rate of
   the problem traces' kinds: a window that merely holds more of a kind that always fails
   now and then (business errors) names nobody; a kind that never failed and now fails does.
5. **Score.** When at least two traces are slow, the latency share (the slowdown is the
   problem; a few errors among a few dozen traces are weaker evidence than where the time
   went); otherwise the error excess (a fault that does not slow anything).
   The origin is the best-scoring service when its score reaches ``min_share``
   (:data:`MIN_SHARE`). Every candidate keeps its figures
   (reference vs observed milliseconds, error shares) for the problem's evidence.

Parameters: ``min_reference`` (reference traces a request kind needs, default 3),
``min_slowdown`` (default 0.1: ten per cent slower than usual), ``min_share`` (default 0.1,
the share of the gap the critical-path comparison used before) and ``error_alpha`` (default
0.01, the usual significance level for one test among the few services of a trace).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from coremetry.analysis import TraceAnalysis

__all__ = [
    "ERROR_ALPHA",
    "MIN_REFERENCE",
    "MIN_SHARE",
    "SpectrumCandidate",
    "SpectrumResult",
    "TraceProfile",
    "binomial_tail",
    "compare_to_reference",
    "kind_error_rates",
    "profile_trace",
    "slow_by_summary",
]

MIN_REFERENCE: Final = 3
"""Reference traces a request kind needs before its latency is compared."""
MIN_SHARE: Final = 0.1
"""Score the best candidate needs to be named the origin."""
ERROR_ALPHA: Final = 0.01
"""Largest binomial tail at which a service's error excess counts (module docstring, step 4)."""
MIN_SLOWDOWN: Final = 0.1
"""A trace is slow when it took this share longer than its kind's reference median (and
more than three robust standard deviations above it)."""
_MAD_TO_SIGMA: Final = 1.4826
_SLOW_Z: Final = 3.0
_MIN_SLOW: Final = 2  # slow traces needed for latency to decide


class TraceProfile(msgspec.Struct, frozen=True, kw_only=True):
    """One trace reduced to what the comparison needs.

    Attributes:
        trace_id: the trace.
        kind: its request kind, ``"<root service> <root span name>"``.
        start_unix_nano: when its root started.
        duration_ns: its duration, nanoseconds.
        critical_ns: per service, critical-path nanoseconds (own work plus callers' wait on it).
        error_origins: services that originated an error in it (sorted).
        waits_ns: per caller, per callee, the critical-path nanoseconds the caller spent
            waiting on calls into the callee outside the callee's spans (counted in the
            callee's ``critical_ns``; module docstring, step 3, "whose wait").
    """

    trace_id: str
    kind: str
    start_unix_nano: int
    duration_ns: int
    critical_ns: dict[str, int]
    error_origins: list[str] = msgspec.field(default_factory=list)
    waits_ns: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


def profile_trace(analysis: TraceAnalysis) -> TraceProfile:
    """Reduce an analysed trace to its :class:`TraceProfile` (module docstring, step 1)."""
    critical: dict[str, int] = {}
    waits: dict[str, dict[str, int]] = {}
    for segment in analysis.critical_path:
        name = segment.attributed_service
        critical[name] = critical.get(name, 0) + segment.duration_ns
        if segment.waiting:
            row = waits.setdefault(segment.node.service, {})
            row[name] = row.get(name, 0) + segment.duration_ns
    origins: set[str] = set()
    for node in analysis.nodes:
        if not node.is_error:
            continue
        if not any(c.is_error and c.service != node.service for c in node.children):
            origins.add(node.service)
    root = analysis.root
    return TraceProfile(
        trace_id=root.span.trace_id,
        kind=f"{root.service} {root.span.name}",
        start_unix_nano=analysis.start_ns,
        duration_ns=analysis.duration_ns,
        critical_ns=critical,
        error_origins=sorted(origins),
        waits_ns=waits,
    )


class SpectrumCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """One service's figures in a comparison.

    Attributes:
        service_name: the service.
        score: the latency share or the error excess (module docstring, step 5).
        excess_ms: mean critical-path milliseconds per slow trace above its kind's
            reference median.
        reference_ms: its reference median critical-path milliseconds per trace (averaged
            over the slow traces' kinds).
        observed_ms: its mean critical-path milliseconds per slow trace.
        error_share: share of the problem's traces in which it originated an error.
        reference_error_share: the same share in the reference.
        late_callees: callees whose grown wait counts as this service's own (module
            docstring, step 3, "whose wait"), sorted; empty for most.
    """

    service_name: str
    score: float
    excess_ms: float
    reference_ms: float
    observed_ms: float
    error_share: float
    reference_error_share: float
    late_callees: list[str] = msgspec.field(default_factory=list)

    def describe(self) -> str:
        """One line: the figures with units."""
        text = (
            f"critical path {self.observed_ms:,.1f} ms per request vs {self.reference_ms:,.1f} "
            f"ms before ({self.excess_ms:+,.1f} ms)"
        )
        if self.late_callees:
            text += (
                f", counting its longer waits on {', '.join(self.late_callees)} (every call "
                "it makes waited longer: its own CPU or network)"
            )
        if self.error_share or self.reference_error_share:
            text += (
                f"; originated errors in {self.error_share:.0%} of requests vs "
                f"{self.reference_error_share:.0%} before"
            )
        return text


class SpectrumResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the comparison found.

    Attributes:
        candidates: every service with a positive score, best first (ties by name).
        gap_ms: mean milliseconds the slow traces took above their kind's reference median.
        compared: problem traces whose kind had a reference.
        slow: of those, the slow ones (module docstring, step 3).
        traces: problem traces read.
        reference: reference traces read.
        waiting_callers: callers whose grown waits on two or more callees were counted as
            their own time, not their callees' (module docstring, step 3, "whose wait").
    """

    candidates: list[SpectrumCandidate]
    gap_ms: float
    compared: int
    slow: int
    traces: int
    reference: int
    waiting_callers: list[str] = msgspec.field(default_factory=list)

    def origin(self, min_share: float = MIN_SHARE) -> SpectrumCandidate | None:
        """The best candidate when its score reaches ``min_share``, else ``None``."""
        if self.candidates and self.candidates[0].score >= min_share:
            return self.candidates[0]
        return None


def kind_error_rates(kinds: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Per request kind, its usual error rate with Laplace's rule: ``(errors + 1) / (n + 2)``.

    Args:
        kinds: one ``(kind, had an error)`` per trace of the reference period; the kind as
            :attr:`TraceProfile.kind` (``"<root service> <root span name>"``).
    """
    counts: dict[str, list[int]] = {}
    for kind, failed in kinds:
        row = counts.setdefault(kind, [0, 0])
        row[0] += 1
        row[1] += failed
    return {kind: (errors + 1) / (total + 2) for kind, (total, errors) in counts.items()}


def slow_by_summary(
    window: Sequence[tuple[str, int]],
    reference: Iterable[tuple[str, int]],
    *,
    min_reference: int = MIN_REFERENCE,
    min_slowdown: float = MIN_SLOWDOWN,
) -> list[int]:
    """Which of a window's traces are slow, judged from their summaries (module docstring, step 3).

    Args:
        window: one ``(kind, duration ns)`` per trace of the window (the kind as
            :attr:`TraceProfile.kind`).
        reference: the same for every trace of the reference period.
        min_reference: reference traces a kind needs (fewer: none of its traces is slow).
        min_slowdown: see :data:`MIN_SLOWDOWN` (not negative).

    Returns:
        The indices into ``window`` of the traces longer than their kind's reference median
        by ``min_slowdown`` of it and by three robust standard deviations, in order.

    Raises:
        ValueError: ``min_reference`` below 1 or ``min_slowdown`` negative.
    """
    if min_reference < 1 or min_slowdown < 0:
        raise ValueError("slow_by_summary: min_reference must be >= 1, min_slowdown >= 0")
    durations: dict[str, list[int]] = {}
    for kind, duration in reference:
        durations.setdefault(kind, []).append(duration)
    limits: dict[str, float] = {}
    for kind, values in durations.items():
        if len(values) < min_reference:
            continue
        middle = statistics.median(values)
        spread = statistics.median(abs(d - middle) for d in values) * _MAD_TO_SIGMA
        limits[kind] = max(middle * (1 + min_slowdown), middle + _SLOW_Z * spread)
    return [
        i for i, (kind, duration) in enumerate(window) if kind in limits and duration > limits[kind]
    ]


def binomial_tail(hits: int, trials: int, rate: float) -> float:
    """``P(X >= hits)`` for ``X ~ Binomial(trials, rate)``: 1 for ``hits <= 0``.

    Raises:
        ValueError: ``trials`` negative or ``rate`` outside ``[0, 1]``.
    """
    if trials < 0 or not 0.0 <= rate <= 1.0:
        raise ValueError("binomial_tail: trials must be >= 0 and rate in [0, 1]")
    if hits <= 0:
        return 1.0
    if hits > trials:
        return 0.0
    below = sum(math.comb(trials, k) * rate**k * (1.0 - rate) ** (trials - k) for k in range(hits))
    return max(0.0, 1.0 - below)


def compare_to_reference(
    traces: Sequence[TraceProfile],
    reference: Sequence[TraceProfile],
    *,
    min_reference: int = MIN_REFERENCE,
    min_slowdown: float = MIN_SLOWDOWN,
    error_alpha: float = ERROR_ALPHA,
    min_share: float = MIN_SHARE,
    kind_error_rates: Mapping[str, float] | None = None,
    slow_sample: Sequence[TraceProfile] = (),
) -> SpectrumResult:
    """Compare a problem's traces with reference traces taken before it (module docstring).

    Args:
        traces: the problem window's traces.
        reference: traces from before the problem (none of ``traces``).
        min_reference: reference traces a request kind needs for its latency to be compared.
        min_slowdown: see :data:`MIN_SLOWDOWN` (not negative).
        error_alpha: see :data:`ERROR_ALPHA`; 1 counts every error excess.
        min_share: see :data:`MIN_SHARE`; here also the share of the slowdown a caller's
            grown wait on each of two or more callees needs for that wait to be its own
            (module docstring, step 3, "whose wait").
        kind_error_rates: per request kind, the share of its traces with any error over
            the whole reference period (from trace summaries, many more than the reference
            traces read; :func:`kind_error_rates`); with it, the chance rate of step 4 is at
            least the problem traces' mean usual error rate of their kinds (a kind never
            seen: 0.5). ``None``: the reference traces' rate alone.
        slow_sample: more traces of the window, chosen because their summaries were slow
            (module docstring, step 3): they join ``traces`` for the latency comparison only
            (a trace in both counts once); the error shares stay those of ``traces``, an
            unbiased sample of the window.

    Returns:
        The :class:`SpectrumResult`.

    Raises:
        ValueError: ``min_reference`` below 1.
    """
    if min_reference < 1:
        raise ValueError("min_reference must be at least 1")
    by_kind: dict[str, list[TraceProfile]] = {}
    for one in reference:
        by_kind.setdefault(one.kind, []).append(one)
    medians: dict[str, tuple[float, float, dict[str, float]]] = {}
    edge_medians: dict[str, dict[tuple[str, str], float]] = {}
    for kind, members in by_kind.items():
        if len(members) < min_reference:
            continue
        names = {name for one in members for name in one.critical_ns}
        durations = [one.duration_ns for one in members]
        middle = statistics.median(durations)
        spread = statistics.median(abs(d - middle) for d in durations) * _MAD_TO_SIGMA
        medians[kind] = (
            middle,
            max(middle * (1 + min_slowdown), middle + _SLOW_Z * spread),
            {n: statistics.median(one.critical_ns.get(n, 0) for one in members) for n in names},
        )
        pairs = {(c, e) for one in members for c, row in one.waits_ns.items() for e in row}
        edge_medians[kind] = {
            (c, e): statistics.median(one.waits_ns.get(c, {}).get(e, 0) for one in members)
            for c, e in pairs
        }
    compared = [one for one in traces if one.kind in medians]
    ids = {one.trace_id for one in traces}
    latency_pool = [
        *compared,
        *(one for one in slow_sample if one.kind in medians and one.trace_id not in ids),
    ]
    # The problem's slow requests: slower than their kind has been (MicroRank's anomalous
    # traces); the comparison of where the time went is made on those.
    slow = [one for one in latency_pool if one.duration_ns > medians[one.kind][1]]
    gap = 0.0
    excess: dict[str, float] = {}
    edge_excess: dict[tuple[str, str], list[float]] = {}  # (caller, callee) -> [now, before]
    moved: list[str] = []
    late: dict[str, list[str]] = {}
    observed: dict[str, float] = {}
    usual: dict[str, float] = {}
    for one in slow:
        duration, _, per_service = medians[one.kind]
        gap += one.duration_ns - duration
        for name in set(per_service) | set(one.critical_ns):
            now = float(one.critical_ns.get(name, 0))
            before = per_service.get(name, 0.0)
            excess[name] = excess.get(name, 0.0) + now - before
            observed[name] = observed.get(name, 0.0) + now
            usual[name] = usual.get(name, 0.0) + before
        usual_waits = edge_medians[one.kind]
        pairs = {(c, e) for c, row in one.waits_ns.items() for e in row} | set(usual_waits)
        for caller, callee in pairs:
            edge = edge_excess.setdefault((caller, callee), [0.0, 0.0])
            edge[0] += one.waits_ns.get(caller, {}).get(callee, 0)
            edge[1] += usual_waits.get((caller, callee), 0.0)
    # Whose wait (step 3): a caller whose waits on several callees all grew is the common
    # factor — its own CPU or network slows every call it makes — not each of its callees.
    for caller in sorted({c for c, _ in edge_excess}):
        grown = [
            (callee, now, before)
            for (c, callee), (now, before) in sorted(edge_excess.items())
            if c == caller and now - before >= min_share * gap > 0
        ]
        if len(grown) < 2:
            continue
        # Only the part the grown edges have in common is the caller's: a callee slower
        # still (its own network too) keeps the rest.
        common = min(now - before for _, now, before in grown)
        for callee, _, _ in grown:
            for table in (excess, observed):
                table[callee] = table.get(callee, 0.0) - common
                table[caller] = table.get(caller, 0.0) + common
        moved.append(caller)
        late[caller] = sorted(callee for callee, _, _ in grown)
    count = len(slow)
    gap_mean = gap / count if count else 0.0
    slowed = count >= _MIN_SLOW and gap > 0
    erring: dict[str, int] = {}
    reference_erring: dict[str, int] = {}
    for one in traces:
        for name in one.error_origins:
            erring[name] = erring.get(name, 0) + 1
    for one in reference:
        for name in one.error_origins:
            reference_erring[name] = reference_erring.get(name, 0) + 1
    errors = {name: count / len(traces) for name, count in erring.items()}
    reference_errors = {name: count / len(reference) for name, count in reference_erring.items()}
    # Only a significant excess counts (module docstring, step 4).
    usual_rate = (
        sum(kind_error_rates.get(one.kind, 0.5) for one in traces) / len(traces)
        if kind_error_rates is not None and traces
        else None
    )
    significant = {
        name
        for name, count in erring.items()
        if binomial_tail(
            count,
            len(traces),
            max(
                (reference_erring.get(name, 0) + 1) / (len(reference) + 2),
                usual_rate if usual_rate is not None else 0.0,
            ),
        )
        <= error_alpha
    }
    candidates: list[SpectrumCandidate] = []
    for name in sorted(set(excess) | set(errors)):
        mean_excess = excess.get(name, 0.0) / count if count else 0.0
        latency_share = mean_excess / gap_mean if gap_mean > 0 else 0.0
        error_excess = (
            errors.get(name, 0.0) - reference_errors.get(name, 0.0) if name in significant else 0.0
        )
        score = latency_share if slowed else error_excess
        if score <= 0:
            continue
        candidates.append(
            SpectrumCandidate(
                service_name=name,
                score=round(score, 4),
                excess_ms=round(mean_excess / 1e6, 3),
                reference_ms=round(usual.get(name, 0.0) / count / 1e6, 3) if count else 0.0,
                observed_ms=round(observed.get(name, 0.0) / count / 1e6, 3) if count else 0.0,
                error_share=round(errors.get(name, 0.0), 4),
                reference_error_share=round(reference_errors.get(name, 0.0), 4),
                late_callees=late.get(name, []),
            )
        )
    candidates.sort(key=lambda c: (-c.score, -c.excess_ms, c.service_name))
    return SpectrumResult(
        candidates=candidates,
        gap_ms=round(gap_mean / 1e6, 3),
        compared=len(compared),
        slow=count,
        traces=len(traces),
        reference=len(reference),
        waiting_callers=moved,
    )
