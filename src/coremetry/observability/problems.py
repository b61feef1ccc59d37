"""Problems and anomalies as the detector stored them, for ``list_problems`` and friends.

The detector (:mod:`coremetry.detection`, run by ``coremetry detect``) keeps its problems in
``<data_dir>/problems.json`` (:mod:`coremetry.detection.problem_store`). This module reads that
file — in a worker thread, it is a blocking read of a small file — and renders problems and
their anomalies for a model. When no detection has run (no file), the tools say so
(:data:`NO_DETECTION_NOTE`) and list nothing: never made-up problems.

A problem is in a window when it overlaps it (``start < window end`` and ``end >= window
start``). Times are RFC 3339 UTC, values in the series' own unit (named in ``unit``).
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from coremetry.detection import Anomaly, Problem, ServiceRank
from coremetry.detection.problem_store import load_problems
from coremetry.store import TimeRange

from .budget import JsonObject, shorten
from .ranges import rfc3339

__all__ = [
    "DETECTED_BY",
    "NO_DETECTION_NOTE",
    "ProblemSource",
    "anomaly_row",
    "in_window",
    "involving",
    "problem_detail",
    "problem_row",
]

NO_DETECTION_NOTE: Final = (
    "No problem detection has run on this data yet (`coremetry detect` finds problems and "
    "stores them), so there is nothing to list: this is not evidence that all is well. Use "
    "get_service (likely_origin), list_services (error rates, p95) and search_logs with "
    "min_severity ERROR instead."
)
"""What the problem and anomaly tools say when no detection has stored problems."""

DETECTED_BY: Final = (
    "the anomaly detector over per-service RED series from spans, metric series and log "
    "severity rates (run every detection.interval_s by coremetry serve, or by coremetry "
    "detect); its origin ranking uses the traces' critical paths where traces cover the "
    "problem, then saturation, error and latency evidence along the service graph: it is a "
    "heuristic, so check it against get_service's likely_origin"
)
"""Where problems come from, as the tools say it."""


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
        "origin": problem.services[0] if problem.services else None,
        "origin_reason": shorten(reason, 300),
        "services": problem.services,
        "anomaly_count": len(problem.anomalies),
        "sample_trace_ids": problem.sample_trace_ids,
    }


def _rank_row(rank: ServiceRank) -> JsonObject:
    return {
        "service": rank.service_name,
        "role": rank.role,
        "symptomatic": rank.symptomatic,
        "reason": shorten(rank.reason, 300),
        "evidence": [shorten(line, 200) for line in rank.evidence[:5]],
        "anomalous_callers": rank.anomalous_callers,
        "anomalous_callees": rank.anomalous_callees,
        "depth": rank.depth,
        "first_anomaly": rfc3339(rank.first_anomaly_unix_nano),
        "max_score": round(rank.max_score, 2),
    }


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


def problem_detail(problem: Problem) -> JsonObject:
    """One problem in full: ranking with reasons, anomalies, sample traces and log lines."""
    return {
        **problem_row(problem),
        "ranking": [_rank_row(r) for r in problem.ranking],
        "anomalies": [anomaly_row(a) for a in problem.anomalies],
        "sample_log_lines": [shorten(line, 300) for line in problem.sample_log_lines],
        "detected_by": DETECTED_BY,
    }


def involving(problems: Sequence[Problem], service: str | None) -> list[Problem]:
    """The problems that involve ``service`` (all when ``None``)."""
    return [p for p in problems if service is None or service in p.services]
