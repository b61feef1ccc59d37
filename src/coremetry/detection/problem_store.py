"""Where problems are kept: ``<data_dir>/problems.json``, next to the telemetry store.

A small JSON file rather than a table of the telemetry store, so that every backend
(embedded SQLite, ClickHouse read-only) keeps problems the same way and the store contract
stays about telemetry. Shape: ``{"version": 1, "problems": [Problem, ...]}`` with each
:class:`~coremetry.detection.Problem` encoded by msgspec (times in unix ns), newest start
first, at most :data:`MAX_PROBLEMS` of them.

Two ways to merge a run's problems into the file:

- :func:`save_problems` (``coremetry detect``, on demand): the run is authoritative for the
  range it judged, so stored problems with the same id as a new one, or that *start* inside
  the run's range, are replaced by the run's problems; problems that start outside it are kept.
- :func:`merge_live` (the server's background task, every minute): problems keep their
  identity across runs and close once. A run's problem *is* a stored one when it has the same
  id or shares an anomaly with it (same series, overlapping in time: runs over other ranges
  cut other buckets and may start a problem elsewhere); it then keeps the stored id and the
  earlier ``detected_unix_nano``, and a stored ``resolved`` stays resolved (a problem opens
  and closes once; a new incident is a new problem). A stored ``open`` problem that the run no
  longer shows is ``resolved`` as it stands. Nothing is deleted but by :data:`MAX_PROBLEMS`.

Writes go to a temporary file renamed over the old one (atomic on POSIX), so a reader never
sees half a file. These are blocking file operations: call them from a worker thread in async
code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import msgspec

from coremetry.store import TimeRange

from .problems import Problem

__all__ = [
    "MAX_PROBLEMS",
    "PROBLEMS_FILE",
    "ProblemFileError",
    "load_problems",
    "merge_live",
    "save_problems",
]

PROBLEMS_FILE: Final = "problems.json"
"""The file's name in the data dir."""

MAX_PROBLEMS: Final = 1000
"""Problems kept at most (the newest by start time)."""


class _ProblemFile(msgspec.Struct, kw_only=True):
    version: int = 1
    problems: list[Problem] = msgspec.field(default_factory=list)


class ProblemFileError(Exception):
    """Raised by :func:`load_problems` when the file exists but cannot be read as problems.

    The message names the file and what is wrong.
    """


def load_problems(path: Path) -> list[Problem]:
    """The stored problems, newest start first; ``[]`` when the file does not exist.

    Raises:
        ProblemFileError: the file is unreadable or not a problems file.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ProblemFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return msgspec.json.decode(raw, type=_ProblemFile).problems
    except msgspec.DecodeError as exc:
        raise ProblemFileError(f"{path}: not a problems file: {exc}") from None


def save_problems(path: Path, judged: TimeRange, problems: list[Problem]) -> list[Problem]:
    """Merge one run's problems into the file (rules in the module docstring).

    Args:
        path: the problems file (its directory must exist).
        judged: the range the run judged (unix ns, half-open).
        problems: the run's problems.

    Returns:
        What the file now holds, newest start first.

    Raises:
        ProblemFileError: the existing file cannot be read.
        OSError: the new file cannot be written (the old one is left as it was).
    """
    fresh = {p.problem_id for p in problems}
    kept = [
        p
        for p in load_problems(path)
        if p.problem_id not in fresh
        and not judged.start_unix_nano <= p.start_unix_nano < judged.end_unix_nano
    ]
    return _write(path, [*kept, *problems])


def _write(path: Path, problems: list[Problem]) -> list[Problem]:
    merged = sorted(problems, key=lambda p: (-p.start_unix_nano, p.problem_id))
    merged = merged[:MAX_PROBLEMS]
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(msgspec.json.encode(_ProblemFile(problems=merged)))
    os.replace(temporary, path)
    return merged


def _shares_an_anomaly(a: Problem, b: Problem) -> bool:
    spans: dict[str, list[tuple[int, int]]] = {}
    for anomaly in a.anomalies:
        spans.setdefault(anomaly.series_id, []).append(
            (anomaly.start_unix_nano, anomaly.end_unix_nano)
        )
    return any(
        start <= anomaly.end_unix_nano and anomaly.start_unix_nano <= end
        for anomaly in b.anomalies
        for start, end in spans.get(anomaly.series_id, ())
    )


def merge_live(path: Path, problems: list[Problem]) -> list[Problem]:
    """Merge one live run's problems into the file (rules in the module docstring).

    Args:
        path: the problems file (its directory must exist).
        problems: the run's problems.

    Returns:
        What the file now holds, newest start first.

    Raises:
        ProblemFileError: the existing file cannot be read.
        OSError: the new file cannot be written (the old one is left as it was).
    """
    stored = load_problems(path)
    by_id = {p.problem_id: p for p in stored}
    matched: set[str] = set()
    result: dict[str, Problem] = {}
    for fresh in problems:
        old = by_id.get(fresh.problem_id)
        if old is None or old.problem_id in matched:
            old = next(
                (p for p in stored if p.problem_id not in matched and _shares_an_anomaly(p, fresh)),
                None,
            )
        if old is not None:
            matched.add(old.problem_id)
            fresh = msgspec.structs.replace(
                fresh,
                problem_id=old.problem_id,
                detected_unix_nano=min(old.detected_unix_nano, fresh.detected_unix_nano),
                status="resolved" if old.status == "resolved" else fresh.status,
            )
        if fresh.problem_id in result:  # two fresh problems matched one stored: keep both
            fresh = msgspec.structs.replace(fresh, problem_id=_fresh_id(fresh, result))
        result[fresh.problem_id] = fresh
    for old in stored:
        if old.problem_id in matched or old.problem_id in result:
            continue
        result[old.problem_id] = (
            msgspec.structs.replace(old, status="resolved") if old.status == "open" else old
        )
    return _write(path, list(result.values()))


def _fresh_id(problem: Problem, taken: dict[str, Problem]) -> str:
    """An id for ``problem`` not in ``taken``, stable for the same problem."""
    salt = 0
    while True:
        salt += 1
        candidate = f"{problem.problem_id[:-2]}{salt:02x}"
        if candidate not in taken:
            return candidate
