"""Where problems are kept: ``<data_dir>/problems.json``, next to the telemetry store.

A small JSON file rather than a table of the telemetry store, so that every backend
(embedded SQLite, ClickHouse read-only) keeps problems the same way and the store contract
stays about telemetry. Shape: ``{"version": 1, "problems": [Problem, ...]}`` with each
:class:`~coremetry.detection.Problem` encoded by msgspec (times in unix ns), newest start
first, at most :data:`MAX_PROBLEMS` of them.

**Identity.** An incident keeps the id it was first stored under, across runs and restarts.
Each run's problems are matched to the stored ones before they are written: a run's problem
*is* a stored one when their time spans overlap and they share a series, or the same most
likely origin — the strongest pairs first (shared anomalous episodes, i.e. the same series
anomalous at overlapping times; then shared series, the same origin, shared services), each
stored problem matched at most once. A matched problem is updated in place: the run's
evidence, ranking and end, under the stored id, with the earlier ``detected_unix_nano``. A
stored problem left unmatched that shares an episode with one of the run's problems is the
same incident seen whole (a run that grouped two onsets into one): it is merged into that
problem, and its id stays answerable as one of the problem's ``aliases``. So no two stored
problems share an episode, and an id once given out keeps answering while the incident is
stored. Ids stay opaque: ``prb_`` and 16 hex of a hash of the incident's first anomaly.

Nothing a run does not find again is deleted: a stored problem that matches none of a run's
problems and is not merged into one is kept (it happened, and its id was given out) until
:data:`MAX_PROBLEMS` pushes it out. Runs over other ranges judge other histories (``coremetry
detect --range 12h`` beside the server's 6 h window) and find somewhat other anomalies; a run
that misses an incident does not unsay it. Two ways to merge a run's problems into the file,
both with the matching above:

- :func:`save_problems` (``coremetry detect``, on demand): the run's own statuses stand for
  the problems it shows; a stored ``open`` problem it no longer shows is ``resolved`` as it
  stands when the run judged past its end (the range holds the problem's end).
- :func:`merge_live` (the server's background task, every minute): problems close once. A
  stored ``resolved`` problem stays resolved when a run shows it open again (a problem opens
  and closes once; a new incident is a new problem), and a stored ``open`` problem that the
  run no longer shows is ``resolved`` as it stands.

**Writers.** ``coremetry detect`` and a running server's task may write at the same time (two
processes). Each merge holds an exclusive ``fcntl.flock`` on the sidecar file
``problems.json.lock`` while it re-reads the file, matches and writes, so a merge always starts
from what the other writer last wrote and neither overwrites the other's problems. The new file
is written to a temporary file of its own in the same directory, flushed to disk and renamed
over the old one (atomic on POSIX), so a reader (the MCP tools read without the lock) never sees
half a file, and a failed write leaves the old file as it was. These are blocking file
operations: call them from a worker thread in async code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from coremetry.store import TimeRange

from .problems import Problem

__all__ = [
    "LOCK_SUFFIX",
    "MAX_PROBLEMS",
    "PROBLEMS_FILE",
    "ProblemFileError",
    "load_problems",
    "merge_live",
    "save_problems",
    "save_run",
    "shared_episodes",
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
    """Merge one on-demand run's problems into the file (rules in the module docstring).

    Args:
        path: the problems file (its directory must exist).
        judged: the range the run judged (unix ns, half-open).
        problems: the run's problems.

    Returns:
        What the file now holds, newest start first.

    Raises:
        ProblemFileError: the existing file cannot be read.
        OSError: the lock or the new file cannot be written (the old file is left as it was).
    """
    return save_run(path, judged, problems)[0]


def save_run(
    path: Path, judged: TimeRange, problems: list[Problem]
) -> tuple[list[Problem], list[Problem]]:
    """:func:`save_problems`, also returning the run's problems as they were stored.

    A run's own id for a problem names its first anomaly; the file may know the incident under
    an earlier id. What ``coremetry detect`` prints must be the stored ids, the ones
    ``get_problem`` answers.

    Returns:
        ``(stored, run)``: what the file now holds, newest start first; and each of
        ``problems``, in their order, under its stored id, with its stored status, detection
        time and aliases.

    Raises:
        As :func:`save_problems`.
    """
    as_stored: list[Problem] = []

    def merge(stored: list[Problem]) -> list[Problem]:
        merged, leftovers = _reconcile(stored, problems, live=False)
        as_stored[:] = merged
        kept = [
            msgspec.structs.replace(old, status="resolved")
            if old.status == "open"
            and judged.start_unix_nano <= old.end_unix_nano < judged.end_unix_nano
            else old
            for old in leftovers
        ]
        return [*kept, *merged]

    return _update(path, merge), as_stored


LOCK_SUFFIX: Final = ".lock"
"""The sidecar lock file's name is the problems file's name and this (``problems.json.lock``)."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path``'s sidecar file (blocks until it is free)."""
    descriptor = os.open(path.with_name(path.name + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _update(path: Path, merge: Callable[[list[Problem]], list[Problem]]) -> list[Problem]:
    """Under the lock: re-read the file, ``merge`` what it holds, write the result."""
    with _locked(path):
        return _write(path, merge(load_problems(path)))


def _write(path: Path, problems: list[Problem]) -> list[Problem]:
    merged = sorted(problems, key=lambda p: (-p.start_unix_nano, p.problem_id))
    merged = merged[:MAX_PROBLEMS]
    descriptor, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(msgspec.json.encode(_ProblemFile(problems=merged)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return merged


def shared_episodes(a: Problem, b: Problem) -> int:
    """How many anomalies of ``b`` overlap in time an anomaly of the same series in ``a``.

    Overlap is inclusive (an episode of one point starts and ends at that point).
    """
    spans: dict[str, list[tuple[int, int]]] = {}
    for anomaly in a.anomalies:
        spans.setdefault(anomaly.series_id, []).append(
            (anomaly.start_unix_nano, anomaly.end_unix_nano)
        )
    return sum(
        1
        for anomaly in b.anomalies
        if any(
            start <= anomaly.end_unix_nano and anomaly.start_unix_nano <= end
            for start, end in spans.get(anomaly.series_id, ())
        )
    )


def _affinity(old: Problem, new: Problem) -> tuple[int, int, int, int] | None:
    """How strongly ``new`` is the incident ``old`` (larger: stronger); ``None``: it is not.

    By content only: a run's own id for a problem names its first anomaly, and a stored id
    may by now name an incident whose first anomaly is another.
    """
    if not (old.start_unix_nano <= new.end_unix_nano and new.start_unix_nano <= old.end_unix_nano):
        return None
    episodes = shared_episodes(old, new)
    series = len({a.series_id for a in old.anomalies} & {a.series_id for a in new.anomalies})
    same_origin = int(bool(old.services) and old.services[:1] == new.services[:1])
    if not (episodes or series or same_origin):
        return None
    services = len(set(old.services) & set(new.services))
    return episodes, series, same_origin, services


def _reconcile(
    stored: list[Problem], fresh: list[Problem], *, live: bool
) -> tuple[list[Problem], list[Problem]]:
    """Match a run's problems to the stored ones (module docstring, "Identity").

    Returns:
        ``(merged, leftovers)``: the run's problems under their stored ids (matched stored
        problems and those merged into them are consumed), and the stored problems that match
        none of them, as they were.
    """
    pairs = [
        (score, i, j)
        for i, new in enumerate(fresh)
        for j, old in enumerate(stored)
        if (score := _affinity(old, new)) is not None
    ]
    # Strongest first; on a tie the earliest stored problem (a merge keeps the first id).
    pairs.sort(
        key=lambda pair: (
            tuple(-x for x in pair[0]),
            stored[pair[2]].start_unix_nano,
            stored[pair[2]].problem_id,
            pair[1],
        )
    )
    match: dict[int, int] = {}
    taken: set[int] = set()
    for _score, i, j in pairs:
        if i not in match and j not in taken:
            match[i] = j
            taken.add(j)
    folded: dict[int, list[Problem]] = {}
    leftovers: list[Problem] = []
    for j, old in enumerate(stored):
        if j in taken:
            continue
        into = next((i for i in match if shared_episodes(old, fresh[i])), None)
        if into is None:
            leftovers.append(old)
        else:
            folded.setdefault(into, []).append(old)
    # A new problem takes the id its first anomaly gives it — also when that id is an alias
    # now (a run that sees the incident apart again gives it its id back) — unless a stored
    # problem is called so.
    used = {p.problem_id for p in stored}
    aliased = {alias for p in stored for alias in p.aliases}
    merged: list[Problem] = []
    for i, new in enumerate(fresh):
        earlier = [stored[match[i]], *folded.get(i, [])] if i in match else []
        problem_id = earlier[0].problem_id if earlier else new.problem_id
        if not earlier and problem_id in used:
            problem_id = _fresh_id(new, used | aliased)
        used.add(problem_id)
        aliases = [
            *new.aliases,
            *(alias for old in earlier for alias in [old.problem_id, *old.aliases]),
        ]
        status = new.status
        if live and earlier and earlier[0].status == "resolved":
            status = "resolved"
        merged.append(
            msgspec.structs.replace(
                new,
                problem_id=problem_id,
                status=status,
                detected_unix_nano=min(
                    [new.detected_unix_nano, *(old.detected_unix_nano for old in earlier)]
                ),
                aliases=sorted(set(aliases)),
            )
        )
    # An id is a problem's own or an alias of one other problem, never both.
    own = {p.problem_id for p in [*merged, *leftovers]}
    return [_without_aliases(p, own) for p in merged], [_without_aliases(p, own) for p in leftovers]


def _without_aliases(problem: Problem, ids: set[str]) -> Problem:
    if not ids.intersection(problem.aliases):
        return problem
    return msgspec.structs.replace(problem, aliases=[a for a in problem.aliases if a not in ids])


def merge_live(path: Path, problems: list[Problem]) -> list[Problem]:
    """Merge one live run's problems into the file (rules in the module docstring).

    Args:
        path: the problems file (its directory must exist).
        problems: the run's problems.

    Returns:
        What the file now holds, newest start first.

    Raises:
        ProblemFileError: the existing file cannot be read.
        OSError: the lock or the new file cannot be written (the old file is left as it was).
    """

    def merge(stored: list[Problem]) -> list[Problem]:
        merged, leftovers = _reconcile(stored, problems, live=True)
        closed = [
            msgspec.structs.replace(old, status="resolved") if old.status == "open" else old
            for old in leftovers
        ]
        return [*closed, *merged]

    return _update(path, merge)


def _fresh_id(problem: Problem, taken: set[str]) -> str:
    """An id for ``problem`` not in ``taken``, stable for the same problem."""
    salt = 0
    while True:
        salt += 1
        candidate = f"{problem.problem_id[:-2]}{salt:02x}"
        if candidate not in taken:
            return candidate
