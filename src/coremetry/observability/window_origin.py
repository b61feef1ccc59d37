"""One likely origin per window, the same in list_problems, get_problem, triage, get_service.

Two analyses name an origin: the detector's problems (:mod:`coremetry.detection.problems`:
traces against a fault-free reference, then saturation, error and latency evidence along the
service graph; stored by every detection run) and the on-demand trace analysis of a window
(:func:`.origin.likely_origin`: slow against typical traces of the window). Told apart, they
can name two services for the same incident, and a model reading ``list_problems`` and
``triage_brief`` side by side cannot tell which to trust. So every tool takes the origin from
here:

- :func:`problem_origin` — a problem's origin is the first service of its ranking
  (``list_problems``' ``origin``, ``get_problem``'s ``origin`` and ``ranking[0]``).
- :func:`leading_problem` — the problem a window's origin comes from: among the stored
  problems overlapping the time the window's slow traces ran (the trace analysis's *focus*;
  the whole window when no trace was slow) and involving the service asked about: one whose
  origin is the one the window's trace analysis names (two independent analyses agree),
  then one holding the slowest trace's start (``[start, end + 1 min]``), then the one with
  the most distinct series among its anomalies (the largest incident), then the newest. On
  the whole Nezha fault day, without the first rule the window's origin was the injected
  service for 8 of 17 faults, with it 14 (the trace analysis alone: 15).
- :func:`window_origin` — ``triage_brief``'s and ``get_service``'s ``likely_origin``: the
  trace analysis of the window, whose ``service`` is replaced by the leading problem's origin
  when there is one (``source: "problem"``, with ``problem_id`` and the problem's top ranking
  rows, evidence per candidate), the trace analysis's own answer kept beside it
  (``trace_analysis``) so a disagreement is visible; without a stored problem, the trace
  analysis alone (``source: "traces"``).

So for the same window the four tools name the same service whenever the detector stored a
problem there, and the detector's ranking — the one scored on labelled incidents
(``bench/detect_score.py``) — is the one they name.
"""

from collections.abc import Sequence
from typing import Final

from coremetry.detection import Problem, ServiceRank
from coremetry.mcp import BadArgs
from coremetry.store import ServiceEdge, ServiceSummary, TelemetryStore, TimeRange

from .budget import JsonObject, shorten
from .origin import Origin, likely_origin, origin_evidence
from .ranges import NS_PER_S, parse_rfc3339_ns, rfc3339

__all__ = [
    "RANKING_ROWS",
    "REASON_CHARS",
    "leading_problem",
    "problem_origin",
    "reason_text",
    "window_origin",
]

RANKING_ROWS: Final = 3
"""Rows of the leading problem's ranking a ``likely_origin`` shows (the rest: ``get_problem``)."""
_SLOWEST_SLACK_NS: Final = 60 * NS_PER_S

REASON_CHARS: Final = 700
"""Longest origin reason shown (characters): room for the rule that put the first service
ahead of the second with the figures it compared; the output budget still bounds the whole."""


_AHEAD: Final = ". Ahead of "


def reason_text(reason: str, max_chars: int = REASON_CHARS) -> str:
    """A ranking reason cut to ``max_chars``, its "why ahead of the second" kept whole.

    The first service's reason ends with ``". Ahead of <second>: <the rule and figures>"``
    (:func:`coremetry.detection.problems.rank_origins`); when the reason is too long, its
    head is cut (:func:`.budget.shorten`) and that sentence kept (itself cut to half of
    ``max_chars`` at most), so every tool showing the origin says why it beat the second.
    """
    if len(reason) <= max_chars:
        return reason
    cut = reason.rfind(_AHEAD)
    if cut < 0:
        return shorten(reason, max_chars)
    tail = shorten(reason[cut:], max_chars // 2)
    return shorten(reason[:cut], max_chars - len(tail)) + tail


def problem_origin(problem: Problem) -> str | None:
    """A problem's origin: the first service of its ranking, ``None`` when it has none."""
    return problem.services[0] if problem.services else None


def _overlaps(problem: Problem, window: TimeRange) -> bool:
    return (
        problem.start_unix_nano < window.end_unix_nano
        and problem.end_unix_nano >= window.start_unix_nano
    )


def leading_problem(
    problems: Sequence[Problem],
    focus: TimeRange,
    *,
    service: str | None = None,
    slowest_start_unix_nano: int | None = None,
    trace_origin: str | None = None,
) -> Problem | None:
    """The problem a window's origin comes from (module docstring), or ``None``.

    Args:
        problems: the stored problems.
        focus: when the window's slow traces ran (or the window itself), unix ns.
        service: only problems involving this service; ``None``: any.
        slowest_start_unix_nano: the slowest trace's start, when one was read: a problem
            holding it (from its start to a minute after its end) leads.
        trace_origin: the origin the window's own trace analysis names, if any: a problem
            naming the same origin leads before all others (two independent analyses agree).

    Returns:
        The leading problem with an origin, or ``None`` when no such problem overlaps.
    """
    chosen = [
        p
        for p in problems
        if p.services and _overlaps(p, focus) and (service is None or service in p.services)
    ]

    def holds_slowest(problem: Problem) -> bool:
        moment = slowest_start_unix_nano
        return (
            moment is not None
            and problem.start_unix_nano <= moment <= problem.end_unix_nano + _SLOWEST_SLACK_NS
        )

    return max(
        chosen,
        key=lambda p: (
            trace_origin is not None and problem_origin(p) == trace_origin,
            holds_slowest(p),
            len({(a.service_name, a.name) for a in p.anomalies}),
            p.start_unix_nano,
            p.problem_id,
        ),
        default=None,
    )


def _rank_row(rank: ServiceRank) -> JsonObject:
    return {
        "service": rank.service_name,
        "role": rank.role,
        "reason": reason_text(rank.reason),
        "evidence": [shorten(line, 200) for line in rank.evidence[:3]],
    }


def _slowest_start(body: JsonObject) -> int | None:
    """The start (unix ns) of the slowest trace the analysis read, from its ``slow_traces``."""
    slow = body.get("slow_traces")
    if not isinstance(slow, list) or not slow or not isinstance(slow[0], dict):
        return None
    start = slow[0].get("start")
    if not isinstance(start, str):
        return None
    try:
        return parse_rfc3339_ns(start, "slow_traces.start")
    except BadArgs:
        return None


async def window_origin(
    store: TelemetryStore,
    window: TimeRange,
    summaries: Sequence[ServiceSummary],
    edges: Sequence[ServiceEdge],
    problems: Sequence[Problem] | None,
    *,
    service: str | None = None,
    slow_traces: int = 20,
    typical_traces: int = 20,
    evidence: bool = True,
) -> Origin:
    """The likely origin of ``window`` as every tool states it (module docstring).

    Args:
        store: the store.
        window: the window asked about.
        summaries: ``store.services(window)``, as :func:`.origin.likely_origin` takes them.
        edges: ``store.service_edges(window)``, likewise.
        problems: the stored problems (``None``: no detection has run).
        service: the service asked about (``get_service``), ``None`` for the whole system.
        slow_traces: most slow traces read per group by the trace analysis.
        typical_traces: most typical traces read per group.
        evidence: gather per-edge latency, error logs and metric shifts of the origin.

    Returns:
        The :class:`.origin.Origin` of :func:`.origin.likely_origin` with ``source``
        (``"problem"`` or ``"traces"``) added; with a leading problem, ``service`` is its
        origin, ``summary`` says so, and ``problem_id``, ``ranking`` (its first
        :data:`RANKING_ROWS` rows: service, role, reason with why the first beats the second,
        evidence lines) and ``trace_analysis`` (what the traces alone named) are added.

    Raises:
        QueryRejected, StoreUnavailable, StoreClosed: from the store.
    """
    traced = await likely_origin(
        store,
        window,
        summaries,
        edges,
        service=service,
        slow_traces=slow_traces,
        typical_traces=typical_traces,
        evidence=False,
    )
    body = dict(traced.body)
    named = body.get("service")
    problem = (
        leading_problem(
            problems,
            traced.focus,
            service=service,
            slowest_start_unix_nano=_slowest_start(body),
            trace_origin=named if isinstance(named, str) else None,
        )
        if problems
        else None
    )
    origin = problem_origin(problem) if problem is not None else None
    if problem is None or origin is None:
        body["source"] = "traces"
        top = body.get("service")
        if evidence and isinstance(top, str):
            body["evidence"] = await origin_evidence(store, window, traced.focus, top)
        return Origin(body=body, focus=traced.focus)
    trace_top = body.get("service")
    first = problem.ranking[0]
    agreement = (
        f"the trace analysis of this window names it too: {body.get('summary')}"
        if trace_top == origin
        else (
            f"the slow traces of this window alone point at {trace_top} (see trace_analysis)"
            if isinstance(trace_top, str)
            else "the traces of this window alone name no origin"
        )
    )
    body["trace_analysis"] = {"service": trace_top, "summary": body.get("summary")}
    body["service"] = origin
    body["source"] = "problem"
    body["problem_id"] = problem.problem_id
    body["problem_start"] = rfc3339(problem.start_unix_nano)
    body["summary"] = (
        f"{origin} is the likely origin: detected problem {problem.problem_id} ranks it first "
        f"({reason_text(first.reason)}); {agreement.rstrip('.')}."
    )
    body["ranking"] = [_rank_row(rank) for rank in problem.ranking[:RANKING_ROWS]]
    if evidence:
        body["evidence"] = await origin_evidence(store, window, traced.focus, origin)
    return Origin(body=body, focus=traced.focus)
