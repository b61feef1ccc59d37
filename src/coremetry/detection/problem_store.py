"""Where problems are kept: ``<data_dir>/problems.json``, next to the telemetry store.

A small JSON file rather than a table of the telemetry store, so that every backend
(embedded SQLite, ClickHouse read-only) keeps problems the same way and the store contract
stays about telemetry. Shape: ``{"version": 1, "problems": [Problem, ...]}`` with each
:class:`~coremetry.detection.Problem` encoded by msgspec (times in unix ns), newest start
first, at most :data:`MAX_PROBLEMS` of them.

Merging (:func:`save_problems`): a detection run is authoritative for the range it judged,
so stored problems with the same id as a new one, or that *start* inside the run's range,
are replaced by the run's problems; problems that start outside it are kept. Writes go to a
temporary file renamed over the old one (atomic on POSIX), so a reader never sees half a
file. These are blocking file operations: call them from a worker thread in async code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import msgspec

from coremetry.store import TimeRange

from .problems import Problem

__all__ = ["MAX_PROBLEMS", "PROBLEMS_FILE", "ProblemFileError", "load_problems", "save_problems"]

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
    merged = sorted([*kept, *problems], key=lambda p: (-p.start_unix_nano, p.problem_id))
    merged = merged[:MAX_PROBLEMS]
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(msgspec.json.encode(_ProblemFile(problems=merged)))
    os.replace(temporary, path)
    return merged
