"""Regression tests on the real NAB files: the headline figures of ``bench/detect_score.py``.

Thresholds sit a little below the figures measured with the default parameters (recorded in
``bench/README.md``), so a change that loses a detected window or adds false positives
fails here. Scoring rules: :mod:`coremetry.detection.evaluation`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Final

import pytest
from conftest import DATA

from coremetry.detection import Anomaly, Series, detect_series
from coremetry.detection.evaluation import (
    SeriesScore,
    load_nab_series,
    load_nab_windows,
    score_series,
)

NAB: Final = DATA / "nab"
QUIET: Final = "realAWSCloudwatch/ec2_cpu_utilization_c6585a.csv"


def run_folder(folder: str) -> tuple[list[SeriesScore], dict[str, list[Anomaly]]]:
    windows = load_nab_windows(NAB / "labels" / "combined_windows.json")
    scores: list[SeriesScore] = []
    found: dict[str, list[Anomaly]] = {}
    for key in sorted(k for k in windows if k.startswith(folder + "/")):
        path: Path = NAB / key
        if not path.exists():
            continue
        points = load_nab_series(path)
        found[key] = detect_series(Series(series_id=key, name=key, points=points))[0]
        scores.append(score_series(key, points, windows[key], found[key]))
    return scores, found


def totals(scores: list[SeriesScore]) -> tuple[int, int, float]:
    detected = sum(s.detected for s in scores)
    windows = sum(s.windows for s in scores)
    fp = sum(s.false_positives for s in scores)
    outside = sum(s.points_outside for s in scores)
    return detected, windows, 1000 * fp / outside


@pytest.fixture(scope="module")
def aws() -> tuple[list[SeriesScore], dict[str, list[Anomaly]]]:
    return run_folder("realAWSCloudwatch")


def test_aws_cloudwatch_recall_and_false_positives(
    aws: tuple[list[SeriesScore], dict[str, list[Anomaly]]],
) -> None:
    scores, _ = aws
    assert len(scores) == 17  # every realAWSCloudwatch file copied
    detected, windows, fp_per_1000 = totals(scores)
    # measured: 22 of 30 windows (0.733), 0.59 false positives per 1,000 points
    assert windows == 30
    assert detected / windows >= 0.70
    assert fp_per_1000 <= 1.0


def test_aws_series_without_anomaly_raises_none(
    aws: tuple[list[SeriesScore], dict[str, list[Anomaly]]],
) -> None:
    _, found = aws
    assert found[QUIET] == []


def test_anomaly_records_are_coherent(
    aws: tuple[list[SeriesScore], dict[str, list[Anomaly]]],
) -> None:
    _, found = aws
    every = [a for anomalies in found.values() for a in anomalies]
    assert every
    for one in every:
        assert one.start_unix_nano <= one.detected_unix_nano <= one.end_unix_nano
        assert one.points >= 2  # minimum evidence: never a lone point
        assert one.score >= 2.5
        if one.direction == "up":
            assert one.observed > one.baseline
        else:
            assert one.observed < one.baseline
    for anomalies in found.values():  # hysteresis: episodes of one series never overlap
        for before, after in itertools.pairwise(anomalies):
            assert before.end_unix_nano < after.start_unix_nano


def test_known_cause_held_out() -> None:
    # realKnownCause played no part in choosing the parameters.
    scores, _ = run_folder("realKnownCause")
    assert len(scores) == 6
    detected, windows, fp_per_1000 = totals(scores)
    # measured: 9 of 16 windows (0.56), 0.81 false positives per 1,000 points
    assert windows == 16
    assert detected / windows >= 0.5
    assert fp_per_1000 <= 1.2
