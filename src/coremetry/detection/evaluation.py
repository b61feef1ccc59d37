"""Scoring a detector against labelled anomaly windows, in the Numenta Anomaly Benchmark's terms.

Used by ``bench/detect_score.py`` and by the regression tests on the real NAB files; kept in
the package so both score the same way.

Rules (issue 7): a labelled window counts as *detected* when an anomaly is raised inside it,
i.e. its :attr:`~coremetry.detection.Anomaly.detected_unix_nano` (the moment the evidence rule
was met, what a live detector would have reported) lies in ``[start, end]`` of the window.
Every anomaly raised outside all windows is one *false positive*; the false-positive rate is
per 1,000 points outside the windows. NAB's own scoring also rewards early detection inside a
window and weighs false positives by profile; we report the two plain figures instead.

File formats (NAB, https://github.com/numenta/NAB): data CSVs ``timestamp,value`` with
``YYYY-MM-DD HH:MM:SS`` timestamps (no zone: read as UTC); ``labels/combined_windows.json``
maps ``"<folder>/<file>.csv"`` to ``[[start, end], ...]`` with ``YYYY-MM-DD HH:MM:SS.ffffff``.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import msgspec

from .detector import Anomaly
from .problems import Problem

__all__ = [
    "Fault",
    "FaultResult",
    "SeriesScore",
    "Window",
    "load_nab_series",
    "load_nab_windows",
    "parse_nab_time",
    "score_faults",
    "score_series",
]


class Window(msgspec.Struct, frozen=True):
    """A labelled anomaly window, inclusive at both ends, in unix nanoseconds."""

    start_unix_nano: int
    end_unix_nano: int


class SeriesScore(msgspec.Struct, frozen=True, kw_only=True):
    """How one series scored.

    Attributes:
        key: the series' label key (``"<folder>/<file>.csv"``).
        points: finite points in the series.
        points_outside: points outside every window.
        windows: labelled windows.
        detected: windows with at least one anomaly raised inside.
        anomalies: anomalies raised in total.
        false_positives: anomalies raised outside every window.
    """

    key: str
    points: int
    points_outside: int
    windows: int
    detected: int
    anomalies: int
    false_positives: int

    @property
    def recall(self) -> float | None:
        """``detected / windows``; ``None`` without windows."""
        return self.detected / self.windows if self.windows else None

    @property
    def fp_per_1000(self) -> float:
        """False positives per 1,000 points outside the windows (0.0 when there are none)."""
        return 1000 * self.false_positives / self.points_outside if self.points_outside else 0.0


def parse_nab_time(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` read as UTC, to unix nanoseconds.

    Raises:
        ValueError: the text is not such a timestamp.
    """
    moment = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def load_nab_series(path: Path) -> list[tuple[int, float]]:
    """Read a NAB data CSV (``timestamp,value``) into ``(time_unix_nano, value)`` points.

    Raises:
        ValueError: a row without a parseable ``timestamp`` or ``value`` (names the row).
        OSError: the file cannot be read.
    """
    points: list[tuple[int, float]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row_number, row in enumerate(csv.DictReader(handle), start=2):
            try:
                points.append((parse_nab_time(row["timestamp"]), float(row["value"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path.name}: row {row_number}: {exc}") from None
    return points


def load_nab_windows(path: Path) -> dict[str, list[Window]]:
    """Read ``combined_windows.json`` into windows per series key.

    Raises:
        ValueError: the file is not a mapping of keys to ``[[start, end], ...]``.
        OSError: the file cannot be read.
    """
    raw = msgspec.json.decode(path.read_bytes(), type=dict[str, list[tuple[str, str]]])
    return {
        key: [Window(parse_nab_time(start), parse_nab_time(end)) for start, end in windows]
        for key, windows in raw.items()
    }


def score_series(
    key: str,
    points: Sequence[tuple[int, float]],
    windows: Sequence[Window],
    anomalies: Sequence[Anomaly],
) -> SeriesScore:
    """Score one series' anomalies against its windows (rules in the module docstring)."""

    def inside(time_unix_nano: int) -> Window | None:
        for window in windows:
            if window.start_unix_nano <= time_unix_nano <= window.end_unix_nano:
                return window
        return None

    detected: set[Window] = set()
    false_positives = 0
    for anomaly in anomalies:
        hit = inside(anomaly.detected_unix_nano)
        if hit is None:
            false_positives += 1
        else:
            detected.add(hit)
    finite = [t for t, v in points if v == v and abs(v) != float("inf")]
    outside = sum(1 for t in finite if inside(t) is None)
    return SeriesScore(
        key=key,
        points=len(finite),
        points_outside=outside,
        windows=len(windows),
        detected=len(detected),
        anomalies=len(anomalies),
        false_positives=false_positives,
    )


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """An injected fault (ground truth): when, and into which service."""

    time_unix_nano: int
    service_name: str
    kind: str = ""


class FaultResult(msgspec.Struct, frozen=True, kw_only=True):
    """How the problems answered one fault.

    Attributes:
        fault: the fault.
        opened: problems *opened* (first raised, ``detected_unix_nano``) within
            ``[fault, fault + window]``: the issue's rule.
        joined: problems with an anomaly raised in that window, opened then or earlier (a
            fault may join a problem already open for a previous fault).
        origin_top: whether the injected service is among the top origins of an opened
            problem.
        joined_origin_top: likewise over the joined problems.
    """

    fault: Fault
    opened: list[str]
    joined: list[str]
    origin_top: bool
    joined_origin_top: bool


def score_faults(
    problems: Sequence[Problem], faults: Sequence[Fault], *, window_ns: int, top: int = 2
) -> list[FaultResult]:
    """Match problems to injected faults (rules in :class:`FaultResult`), one result per fault."""
    results: list[FaultResult] = []
    for fault in faults:
        low, high = fault.time_unix_nano, fault.time_unix_nano + window_ns
        opened = [p for p in problems if low <= p.detected_unix_nano <= high]
        joined = [
            p for p in problems if any(low <= a.detected_unix_nano <= high for a in p.anomalies)
        ]
        results.append(
            FaultResult(
                fault=fault,
                opened=[p.problem_id for p in opened],
                joined=[p.problem_id for p in joined],
                origin_top=any(fault.service_name in p.services[:top] for p in opened),
                joined_origin_top=any(fault.service_name in p.services[:top] for p in joined),
            )
        )
    return results
