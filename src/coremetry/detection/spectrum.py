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
    """

    trace_id: str
    kind: str
    start_unix_nano: int
    duration_ns: int
    critical_ns: dict[str, int]
    error_origins: list[str] = msgspec.field(default_factory=list)


def profile_trace(analysis: TraceAnalysis) -> TraceProfile:
    """Reduce an analysed trace to its :class:`TraceProfile` (module docstring, step 1)."""
    critical: dict[str, int] = {}
    for segment in analysis.critical_path:
        name = segment.attributed_service
        critical[name] = critical.get(name, 0) + segment.duration_ns
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
    """

    service_name: str
    score: float
    excess_ms: float
    reference_ms: float
    observed_ms: float
    error_share: float
    reference_error_share: float

    def describe(self) -> str:
        """One line: the figures with units."""
        text = (
            f"critical path {self.observed_ms:,.1f} ms per request vs {self.reference_ms:,.1f} "
            f"ms before ({self.excess_ms:+,.1f} ms)"
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
    """

    candidates: list[SpectrumCandidate]
    gap_ms: float
    compared: int
    slow: int
    traces: int
    reference: int

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
    kind_error_rates: Mapping[str, float] | None = None,
) -> SpectrumResult:
    """Compare a problem's traces with reference traces taken before it (module docstring).

    Args:
        traces: the problem window's traces.
        reference: traces from before the problem (none of ``traces``).
        min_reference: reference traces a request kind needs for its latency to be compared.
        min_slowdown: see :data:`MIN_SLOWDOWN` (not negative).
        error_alpha: see :data:`ERROR_ALPHA`; 1 counts every error excess.
        kind_error_rates: per request kind, the share of its traces with any error over
            the whole reference period (from trace summaries, many more than the reference
            traces read; :func:`kind_error_rates`); with it, the chance rate of step 4 is at
            least the problem traces' mean usual error rate of their kinds (a kind never
            seen: 0.5). ``None``: the reference traces' rate alone.

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
    compared = [one for one in traces if one.kind in medians]
    # The problem's slow requests: slower than their kind has been (MicroRank's anomalous
    # traces); the comparison of where the time went is made on those.
    slow = [one for one in compared if one.duration_ns > medians[one.kind][1]]
    gap = 0.0
    excess: dict[str, float] = {}
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
    )
