"""Log event patterns (coremetry.detection.events) on synthetic logs: a template's frequency
change and a vanished or new transition between consecutive events of a trace are found;
steady noise and a service that logs little are not; the changes join a problem of their
service as evidence."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec
import pytest

from coremetry.detection import Anomaly, group_problems
from coremetry.detection.events import LogEvent, log_pattern_anomalies, with_log_patterns
from coremetry.detection.problems import NO_EVIDENCE, GroupingConfig
from coremetry.detection.runner import DetectionOptions, run_detection
from coremetry.store import TimeRange
from coremetry.store.sqlite import open_sqlite_store

MINUTE: Final = 60 * 1_000_000_000
HOUR: Final = 60 * MINUTE
T0: Final = 1_700_000_000 * 1_000_000_000
HISTORY_STEPS: Final = 60
JUDGED: Final = TimeRange(
    start_unix_nano=T0 + HISTORY_STEPS * MINUTE, end_unix_nano=T0 + (HISTORY_STEPS + 10) * MINUTE
)
FAULT_STEP: Final = HISTORY_STEPS + 5  # the step where the synthetic change happens

# Four log statements of one service, of different lengths (so the miner keeps them apart).
RECEIVED: Final = "request received path /orders id {n}"
READ: Final = "reading cart from database for user {n}"
REPLIED: Final = "reply sent"
FALLBACK: Final = "cache miss falling back to replica for key {n} now"

Trace = Callable[[int, int, random.Random], list[tuple[str, str]]]


def _records(
    make: Trace, *, per_step: int = 30, steps: int = HISTORY_STEPS + 10, seed: int = 1
) -> list[LogEvent]:
    """``per_step`` traces a minute; each trace's events ``(service, body)`` 1 ms apart."""
    rng = random.Random(seed)
    found: list[LogEvent] = []
    for step in range(steps):
        for i in range(per_step):
            start = T0 + step * MINUTE + i * (MINUTE // per_step)
            for j, (service, body) in enumerate(make(step, i, rng)):
                n = rng.randrange(1, 10_000)
                found.append((service, start + j * 1_000_000, f"t{step}-{i}", body.format(n=n)))
    found.sort(key=lambda r: r[1])
    return found


def _judge(records: list[LogEvent], alpha: float = 0.001) -> list[Anomaly]:
    return log_pattern_anomalies(
        records, step_ns=MINUTE, history_ns=HOUR, time_range=JUDGED, alpha=alpha
    )


def _usual(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
    return [("cart", RECEIVED), ("cart", READ), ("cart", REPLIED)]


def test_a_template_that_stops_being_logged_is_a_frequency_change() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:  # the database read is no longer logged; no error either
            return [("cart", RECEIVED), ("cart", REPLIED)]
        return _usual(step, i, rng)

    found = [a for a in _judge(_records(make)) if a.name == "log.pattern.frequency"]
    assert [(a.service_name, a.start_unix_nano, a.direction) for a in found] == [
        ("cart", T0 + FAULT_STEP * MINUTE, "down")
    ]
    [anomaly] = found
    assert anomaly.baseline == pytest.approx(1 / 3, abs=0.01)
    assert anomaly.observed == 0.0
    assert anomaly.signal == "logs"
    assert anomaly.labels["log.pattern"].startswith(
        "template 'reading cart from database for user <*>' 30.0/min usually (33 % of the "
        "service's events), 0 in this minute (0 %)"
    )


def test_a_usual_transition_that_vanishes_and_a_new_one_are_sequence_changes() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:  # the read now falls back before replying: READ -> FALLBACK
            return [("cart", RECEIVED), ("cart", READ), ("cart", FALLBACK), ("cart", REPLIED)]
        return _usual(step, i, rng)

    found = [a for a in _judge(_records(make)) if a.name == "log.pattern.sequence"]
    assert [(a.service_name, a.start_unix_nano) for a in found] == [
        ("cart", T0 + FAULT_STEP * MINUTE)
    ]
    text = found[0].labels["log.pattern"]
    # Either side of the change is the same evidence: READ -> REPLIED vanished (100 % -> 0 %)
    # or READ -> FALLBACK appeared (0 % -> 100 %).
    assert text.startswith("sequence 'reading cart from database for user <*>' -> 'cart: ")
    assert text.endswith("% now")
    assert {found[0].baseline, found[0].observed} == {1.0, 0.0}


def test_a_new_transition_to_another_service_is_a_sequence_change() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        events = _usual(step, i, rng)
        if step == FAULT_STEP and i % 2 == 0:  # half the traces now call stock after the read
            events.insert(2, ("stock", "stock reserved for item {n}"))
        return events

    found = [a for a in _judge(_records(make)) if a.name == "log.pattern.sequence"]
    assert [(a.service_name, a.direction) for a in found] == [("cart", "up")]
    assert found[0].observed == pytest.approx(0.5)
    assert (
        "-> 'stock: stock reserved for item <*>' in 0 % of traces"
        in (found[0].labels["log.pattern"])
    )


def test_steady_noise_is_not_flagged() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        # Two branches in a steady mix, and a varying number of traces a minute.
        if rng.random() < 0.3:
            return [("cart", RECEIVED), ("cart", FALLBACK), ("cart", REPLIED)]
        return _usual(step, i, rng)

    for seed in range(3):
        assert _judge(_records(make, per_step=40, seed=seed)) == []


def test_a_service_that_logs_little_is_not_flagged() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:
            return [("cart", FALLBACK)]
        return _usual(step, i, rng)

    assert _judge(_records(make, per_step=2)) == []


def test_records_without_trace_ids_still_show_frequency_changes() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:
            return [("cart", RECEIVED), ("cart", REPLIED)]
        return _usual(step, i, rng)

    records = [(s, t, "", body) for s, t, _, body in _records(make)]
    found = _judge(records)
    assert [(a.name, a.direction) for a in found] == [("log.pattern.frequency", "down")]


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="alpha"):
        _judge([], alpha=0.0)
    with pytest.raises(ValueError, match="step_ns"):
        log_pattern_anomalies([], step_ns=0, history_ns=HOUR, time_range=JUDGED, alpha=0.01)


def _symptom(service: str, start: int) -> Anomaly:
    return Anomaly(
        series_id=f"red/{service}/service.duration.p95",
        name="service.duration.p95",
        direction="up",
        start_unix_nano=start,
        detected_unix_nano=start + MINUTE,
        end_unix_nano=start + 2 * MINUTE,
        baseline=0.1,
        observed=2.0,
        score=20.0,
        points=3,
        service_name=service,
        unit="s",
        signal="latency",
        side="server",
    )


def test_a_pattern_change_joins_the_problem_of_its_service_as_evidence() -> None:
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:
            return [("cart", RECEIVED), ("cart", REPLIED)]
        return _usual(step, i, rng)

    patterns = _judge(_records(make))
    config = GroupingConfig()
    ours = group_problems([_symptom("cart", T0 + FAULT_STEP * MINUTE)], config=config)
    other = group_problems([_symptom("web", T0 + FAULT_STEP * MINUTE)], config=config)
    later = group_problems([_symptom("cart", T0 + (FAULT_STEP + 30) * MINUTE)], config=config)
    [joined, untouched, too_late] = with_log_patterns(
        [*ours, *other, *later], patterns, config, MINUTE
    )
    # The read no longer logged: its template's share fell, and what follows "received" changed.
    assert [a.name for a in joined.anomalies] == [
        "log.pattern.frequency",
        "log.pattern.sequence",
        "service.duration.p95",
    ]
    [rank] = joined.ranking
    assert rank.evidence[-2].startswith(
        "log pattern: template 'reading cart from database for user <*>'"
    )
    assert rank.evidence[-1].startswith(
        "log pattern: sequence 'request received path /orders id <*>' -> 'cart: "
    )
    assert untouched == other[0]
    assert too_late == later[0]


def test_a_pattern_change_replaces_the_no_evidence_line() -> None:
    # A ranked service nothing else supported says so ("none: ..."); once its log patterns
    # join, that line goes and the patterns are its evidence.
    def make(step: int, i: int, rng: random.Random) -> list[tuple[str, str]]:
        if step == FAULT_STEP:
            return [("cart", RECEIVED), ("cart", REPLIED)]
        return _usual(step, i, rng)

    config = GroupingConfig()
    [problem] = group_problems([_symptom("cart", T0 + FAULT_STEP * MINUTE)], config=config)
    bare = msgspec.structs.replace(
        problem,
        ranking=[msgspec.structs.replace(r, evidence=[NO_EVIDENCE]) for r in problem.ranking],
    )
    [joined] = with_log_patterns([bare], _judge(_records(make)), config, MINUTE)
    [rank] = joined.ranking
    assert rank.evidence, rank
    assert NO_EVIDENCE not in rank.evidence
    assert all(line.startswith("log pattern: ") for line in rank.evidence)


async def test_the_option_is_checked(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "t.db") as store:
        with pytest.raises(ValueError, match="log_pattern_alpha"):
            await run_detection(store, JUDGED, DetectionOptions(log_pattern_alpha=1.5))
