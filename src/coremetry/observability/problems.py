"""Problems and anomalies as the detector stored them, for ``list_problems`` and friends.

The detector (:mod:`coremetry.detection`, run by ``coremetry detect``) keeps its problems in
``<data_dir>/problems.json`` (:mod:`coremetry.detection.problem_store`). This module reads that
file — in a worker thread, it is a blocking read of a small file — and renders problems and
their anomalies for a model. When no detection has run (no file), the tools say so
(:data:`NO_DETECTION_NOTE`) and list nothing: never made-up problems.

A problem is in a window when it overlaps it (``start < window end`` and ``end >= window
start``). Times are RFC 3339 UTC, values in the series' own unit (named in ``unit``).

``get_problem`` (:func:`problem_page`) always answers the problem, whatever its size: the
origin ranking first (the first :data:`FULL_RANKS` services with every evidence line, the rest
with their strongest one and a shorter reason; each service the detector sampled — the first
three by default — with its own ``sample_trace_ids``, ``sample_log_lines`` and
``samples_note``, and ``candidate_samples`` saying so when later ones were not), the
:data:`FIRST_PAGE_ANOMALIES` strongest anomalies (by score; a ``cursor`` continues them,
weakest last), then the problem's samples (its origin's). Each list carries its total and how
many are shown; the output budget cuts the problem's sample log lines first, then each sampled
service's (the last one's first), then the ranking's tail, then the list of service names,
then the anomalies — never below the origin and the strongest anomaly. The origin's reason
always keeps its last sentence, why it is ahead of the second
(:func:`.window_origin.reason_text`), in ``get_problem`` and ``list_problems`` alike. With
``service`` it answers that one service's place in the ranking, all its evidence and its
anomalies.
"""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import trio

from coremetry.detection import Anomaly, Problem, ServiceRank
from coremetry.detection.problem_store import load_problems
from coremetry.store import TimeRange

from .budget import (
    MAX_CURSOR_OFFSET,
    JsonObject,
    Shaped,
    Trimmable,
    encoded_size,
    shorten,
    shrink_value,
)
from .ranges import rfc3339
from .window_origin import REASON_CHARS, problem_origin, reason_text

__all__ = [
    "DETECTED_BY",
    "FIRST_PAGE_ANOMALIES",
    "FULL_RANKS",
    "NO_DETECTION_NOTE",
    "ProblemSource",
    "anomaly_row",
    "find_problem",
    "in_window",
    "involving",
    "problem_page",
    "problem_row",
    "strongest_first",
]

NO_DETECTION_NOTE: Final = (
    "No problem detection has run on this data yet (`coremetry serve` runs the detector every "
    "detection.interval_s, 60 s by default, the first time one interval after it starts; "
    "`coremetry detect` runs it once), so there is nothing to list: this is not evidence "
    "that all is well. Use get_service (likely_origin), list_services (error rates, p95) and "
    "search_logs with min_severity ERROR instead."
)
"""What the problem and anomaly tools say when no detection has stored problems."""

DETECTED_BY: Final = (
    "the anomaly detector over per-service RED series from spans, metric series and log "
    "severity rates (run every detection.interval_s by coremetry serve, or by coremetry "
    "detect); its origin ranking uses the traces' critical paths where traces cover the "
    "problem, then saturation, error and latency evidence along the service graph: it is a "
    "heuristic. get_service's and triage_brief's likely_origin state the same origin for the "
    "same window, with what the window's traces alone say beside it (trace_analysis)"
)
"""Where problems come from, as the tools say it."""

FULL_RANKS: Final = 5
"""Ranking rows ``get_problem`` shows with every evidence line; later ones show their strongest
line only (``get_problem(service=...)`` shows any service's in full)."""

FIRST_PAGE_ANOMALIES: Final = 10
"""Anomalies on ``get_problem``'s first page (the strongest; its cursor continues them)."""


class ProblemSource:
    """The detector's stored problems.

    Args:
        path: ``<data_dir>/problems.json``; ``None`` when the server has no data dir.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    async def load(self) -> list[Problem] | None:
        """The stored problems, newest start first; ``None`` when no detection has run.

        Raises:
            ProblemFileError: the file exists but cannot be read or is not a problems file.
        """
        path = self.path
        if path is None or not await trio.to_thread.run_sync(path.exists):
            return None
        return await trio.to_thread.run_sync(load_problems, path)


def in_window(problem: Problem, window: TimeRange) -> bool:
    """The problem overlaps the window."""
    return (
        problem.start_unix_nano < window.end_unix_nano
        and problem.end_unix_nano >= window.start_unix_nano
    )


def problem_row(problem: Problem) -> JsonObject:
    """One problem, summarised (for lists)."""
    reason = problem.ranking[0].reason if problem.ranking else ""
    return {
        "problem_id": problem.problem_id,
        "status": problem.status,
        "title": shorten(problem.title, 300),
        "start": rfc3339(problem.start_unix_nano),
        "end": rfc3339(problem.end_unix_nano),
        "detected": rfc3339(problem.detected_unix_nano),
        "origin": problem_origin(problem),
        "origin_reason": reason_text(reason),
        "services": problem.services,
        "anomaly_count": len(problem.anomalies),
        "sample_trace_ids": problem.sample_trace_ids,
    }


def _rank_row(
    rank: ServiceRank, evidence_lines: int = 5, reason_chars: int = REASON_CHARS
) -> JsonObject:
    row: JsonObject = {
        "service": rank.service_name,
        "role": rank.role,
        "symptomatic": rank.symptomatic,
        "reason": reason_text(rank.reason, reason_chars),
        "evidence": [shorten(line, 200) for line in rank.evidence[:evidence_lines]],
        "evidence_total": len(rank.evidence),
        "anomalous_callers": rank.anomalous_callers,
        "anomalous_callees": rank.anomalous_callees,
        "depth": rank.depth,
        "first_anomaly": rfc3339(rank.first_anomaly_unix_nano),
        "max_score": round(rank.max_score, 2),
    }
    if rank.samples_note:  # sampled by the detector: its own traces and log lines
        row["sample_trace_ids"] = list(rank.sample_trace_ids)
        row["sample_log_lines"] = [shorten(line, 300) for line in rank.sample_log_lines]
        row["samples_note"] = shorten(rank.samples_note, _NOTE_CHARS)
    return row


_NOTE_CHARS: Final = 400


def _samples_cut(ranks: Sequence[ServiceRank]) -> str | None:
    """What ``get_problem`` says when only the first services of a ranking were sampled."""
    sampled = sum(1 for rank in ranks if rank.samples_note)
    if not sampled or sampled == len(ranks):
        return None
    return (
        f"the first {sampled} of the {len(ranks)} ranked services carry their own sample "
        "traces and log lines (the detector samples the first three at most: "
        "DetectionOptions.sample_candidates); for another one, search_traces and "
        "search_logs with its service over the problem's start..end"
    )


def anomaly_row(anomaly: Anomaly) -> JsonObject:
    """One anomalous episode of one series."""
    return {
        "service": anomaly.service_name or None,
        "series": anomaly.name,
        "labels": anomaly.labels,
        "signal": anomaly.signal,
        "unit": anomaly.unit,
        "direction": anomaly.direction,
        "start": rfc3339(anomaly.start_unix_nano),
        "detected": rfc3339(anomaly.detected_unix_nano),
        "end": rfc3339(anomaly.end_unix_nano),
        "ongoing": anomaly.ongoing,
        "baseline": round(anomaly.baseline, 6),
        "observed": round(anomaly.observed, 6),
        "score": round(anomaly.score, 2),
    }


def involving(problems: Sequence[Problem], service: str | None) -> list[Problem]:
    """The problems that involve ``service`` (all when ``None``)."""
    return [p for p in problems if service is None or service in p.services]


def find_problem(stored: Sequence[Problem], problem_id: str) -> Problem | None:
    """The stored problem with that id, or that answers to it as an alias (merged), or ``None``."""
    for problem in stored:
        if problem.problem_id == problem_id:
            return problem
    for problem in stored:
        if problem_id in problem.aliases:
            return problem
    return None


def strongest_first(anomalies: Sequence[Anomaly]) -> list[Anomaly]:
    """The anomalies by score, largest first (then start time, series id)."""
    return sorted(anomalies, key=lambda a: (-a.score, a.start_unix_nano, a.series_id))


def problem_page(
    problem: Problem,
    *,
    requested_id: str,
    service: str | None,
    offset: int,
    cursor_at: Callable[[int], str],
) -> Shaped:
    """``get_problem``'s answer: one problem, its most useful parts first (module docstring).

    Args:
        problem: the stored problem.
        requested_id: the id asked for (an alias of ``problem`` when it was merged into it).
        service: focus on this service of the problem (it must be one of
            ``problem.services``), or ``None`` for the whole problem.
        offset: anomalies already shown (a cursor's offset; ``0`` for the first page — only
            the first page carries the ranking and the samples).
        cursor_at: the cursor continuing the anomalies after that many of them.

    Returns:
        The body with its trimmable lists, for the output budget (:func:`.budget.fit`):
        ``ranking_total``/``ranking_shown``, ``anomaly_count``/``anomalies_shown`` and
        ``truncated`` say what was cut; ``cursor`` continues the anomalies.
    """
    row = problem_row(problem)
    body: JsonObject = {
        key: row[key]
        for key in ("problem_id", "status", "title", "start", "end", "detected", "origin")
    }
    body["origin_reason"] = row["origin_reason"]
    if requested_id != problem.problem_id:
        body["requested_id"] = requested_id
        body["merged_note"] = (
            f"{requested_id} is the same incident as {problem.problem_id}: a later detection "
            f"run merged it into this problem; use {problem.problem_id} from now on"
        )
    anomalies = problem.anomalies
    ranks = problem.ranking
    if service is not None:
        position = problem.services.index(service)
        anomalies = [a for a in anomalies if a.service_name == service]
        ranks = [r for r in ranks if r.service_name == service]
        body["service"] = service
        body["position"] = position + 1
    ordered = strongest_first(anomalies)
    page = ordered[offset:] if offset else ordered[:FIRST_PAGE_ANOMALIES]
    body["truncated"] = False
    body["service_count"] = len(problem.services)
    trimmable: list[Trimmable] = []
    if offset == 0:
        if service is None:
            body["services"] = list(problem.services)
            body["ranking"] = [
                _rank_row(rank) if index < FULL_RANKS else _rank_row(rank, 1, 160)
                for index, rank in enumerate(ranks)
            ]
        else:
            body["ranking"] = [_rank_row(rank) for rank in ranks]
        body["ranking_total"] = len(ranks)
        body["ranking_shown"] = len(ranks)
        cut = _samples_cut(problem.ranking) if service is None else None
        if cut is not None:
            body["candidate_samples"] = cut
    else:
        body["anomalies_offset"] = offset
    body["anomaly_count"] = len(ordered)
    body["anomalies_shown"] = len(page)
    body["anomalies"] = [anomaly_row(a) for a in page]
    body["anomalies_order"] = "strongest first"
    if offset == 0 and (service is None or service == row["origin"]):
        body["sample_trace_ids"] = list(problem.sample_trace_ids)
        body["sample_log_lines"] = [shorten(line, 300) for line in problem.sample_log_lines]
        trimmable.append(Trimmable(("sample_log_lines",)))
    if offset == 0:
        # Then each sampled candidate's log lines, the last candidate's first.
        trimmable.extend(
            Trimmable(("ranking", index, "sample_log_lines"))
            for index in reversed(range(len(ranks)))
            if ranks[index].sample_log_lines
        )
    body["detected_by"] = DETECTED_BY
    body["next"] = (
        "get_problem(problem_id, service=...) for one service's evidence and anomalies; "
        "get_trace on a sample trace id; get_service on the origin"
    )

    def more_anomalies(kept: int) -> JsonObject:
        return {
            "anomalies_shown": kept,
            "cursor": cursor_at(min(offset + kept, MAX_CURSOR_OFFSET)),
        }

    def more_ranks(kept: int) -> JsonObject:
        return {"ranking_shown": kept}

    if offset == 0:
        trimmable.append(Trimmable(("ranking",), more_ranks, _shrink_rank))
    if offset == 0 and service is None:
        trimmable.append(Trimmable(("services",)))  # the ranking names the first ones too
    trimmable.append(Trimmable(("anomalies",), more_anomalies, _shrink_anomaly))
    if offset + len(page) < len(ordered):
        body.update(more_anomalies(len(page)))
        body["truncated"] = True
    return Shaped(body, trimmable)


_RANK_ESSENTIALS: Final = ("service", "role", "max_score", "evidence_total")
_ANOMALY_ESSENTIALS: Final = ("service", "series", "direction", "score", "start", "end")


def _shrink_to(item: object, max_bytes: int, essentials: Sequence[str]) -> object:
    """A row that does not fit, smaller: its long strings and lists cut, then only ``essentials``.

    Never a placeholder: the service (and role or series) a row is about always stays.
    """
    if not isinstance(item, dict):
        return shrink_value(item, max_bytes)
    for chars, items in ((160, 1), (80, 0)):
        smaller = {
            key: (
                shorten(value, chars) if isinstance(value, str) and key not in essentials else value
            )
            for key, value in item.items()
        }
        smaller = {k: (v[:items] if isinstance(v, list) else v) for k, v in smaller.items()}
        if encoded_size(smaller) <= max_bytes:
            return smaller
    return {key: item[key] for key in essentials if key in item}


def _shrink_rank(item: object, max_bytes: int) -> object:
    return _shrink_to(item, max_bytes, _RANK_ESSENTIALS)


def _shrink_anomaly(item: object, max_bytes: int) -> object:
    return _shrink_to(item, max_bytes, _ANOMALY_ESSENTIALS)
