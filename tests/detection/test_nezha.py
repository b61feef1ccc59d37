"""Regression tests on the Nezha fault day (the shipped demo): the headline figures of
``bench/detect_score.py``'s second part.

The demo is loaded into a fresh store (ending at a fixed instant) and judged as ``coremetry
detect`` would. Thresholds sit a little below the figures measured (recorded in
``bench/README.md``: 6 of 17 faults open a problem within 3 minutes, 5 of 17 name the injected
service among the first two origins), so a change that loses a fault fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec
import pytest
import trio

from coremetry.demo.loader import load_demo
from coremetry.detection.evaluation import Fault, FaultResult, score_faults
from coremetry.detection.runner import DetectionRun, detect_in_store
from coremetry.store import TimeRange
from coremetry.store.sqlite import open_sqlite_store

NOW: Final = 1_767_225_600 * 1_000_000_000
MINUTE: Final = 60 * 1_000_000_000
BASELINE_MINUTE: Final = (1675078732 * 1_000_000_000, 1675078792 * 1_000_000_000)  # 11:38:52
CASE_A: Final = 1675084483 * 1_000_000_000  # 2023-01-30T13:14:43Z, travel's network delay


class Judged(msgspec.Struct, frozen=True):
    run: DetectionRun
    faults: list[Fault]
    results: list[FaultResult]
    shift_ns: int


async def judge(data_dir: Path) -> Judged:
    async with open_sqlite_store(data_dir / "telemetry.db", retention_days=0) as store:
        await load_demo(store, data_dir, now_unix_nano=NOW)
        raw = msgspec.json.decode((data_dir / "demo" / "faults.json").read_bytes())
        faults = [
            Fault(
                time_unix_nano=f["time_unix_nano"], service_name=f["service.name"], kind=f["type"]
            )
            for f in raw["faults"]
        ]
        stats = await store.statistics()
        assert stats.oldest_unix_nano is not None
        run = await detect_in_store(
            store, TimeRange(start_unix_nano=stats.oldest_unix_nano, end_unix_nano=NOW + 1)
        )
    results = score_faults(run.problems, faults, window_ns=3 * MINUTE)
    return Judged(run=run, faults=faults, results=results, shift_ns=int(raw["shift_ns"]))


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Judged:
    # Module-scoped (one load and one run for every test), so it runs its own event loop.
    return trio.run(judge, tmp_path_factory.mktemp("nezha"))


def test_faults_open_problems_naming_the_injected_service(judged: Judged) -> None:
    assert len(judged.results) == 17
    # Measured 6 and 5 (12 and 9 before issue 16, 8 and 6 before independent symptoms): a
    # problem needs a second independent symptom (another signal or service; a pod's CPU
    # usage and CPU limit utilisation are one), a utilisation at its limit, or an origin
    # named by its traces against their reference, and is raised at the end of the bucket
    # that showed it. The demo carries the metrics of 10 pods only and traces of two faults,
    # so several of its faults show in one pod's one signal alone; the whole day
    # (tests/detection/test_nezha_day.py, bench/detect_score.py) is the scored set.
    assert sum(1 for r in judged.results if r.opened) >= 6
    assert sum(1 for r in judged.results if r.origin_top) >= 5


def test_cpu_contention_names_the_injected_service_first(judged: Judged) -> None:
    # By its own saturation; at 13:06 (traces ship) by its critical paths.
    by_id = {p.problem_id: p for p in judged.run.problems}
    cpu = [r for r in judged.results if r.fault.kind == "cpu_contention"]
    assert len(cpu) == 3
    for result in cpu:
        firsts = [by_id[i].ranking[0] for i in result.opened]
        assert any(
            rank.service_name == result.fault.service_name
            and rank.role in ("own_cause", "trace_origin")
            for rank in firsts
        ), (result.fault, firsts)


def test_the_network_delay_with_traces_is_named_by_its_critical_paths(
    judged: Judged,
) -> None:
    by_id = {p.problem_id: p for p in judged.run.problems}
    # The case whose traces and logs ship.
    [result] = [r for r in judged.results if r.fault.time_unix_nano - judged.shift_ns == CASE_A]
    [problem] = [by_id[i] for i in result.opened]
    assert problem.ranking[0].service_name == "ts-travel-service"
    assert problem.ranking[0].role == "trace_origin"
    assert problem.trace_blame is not None
    assert problem.trace_blame.slow_traces >= 1


def test_the_fault_free_baseline_minute_opens_no_problem(judged: Judged) -> None:
    low, high = (t + judged.shift_ns for t in BASELINE_MINUTE)
    assert [
        p.problem_id
        for p in judged.run.problems
        if p.start_unix_nano < high and p.end_unix_nano >= low
    ] == []
