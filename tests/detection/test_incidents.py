"""Issue 16 mechanisms: one problem per incident, bounded scores, the stated ranking."""

from __future__ import annotations

import msgspec

from coremetry.detection import Anomaly, GroupingConfig, Series, group_problems
from coremetry.detection.problems import service_evidence

MINUTE = 60 * 1_000_000_000
T0 = 1_700_000_000 * 1_000_000_000
CHAIN = [("frontend", "checkout"), ("checkout", "payment")]


def anomaly(service: str, start_minute: int, name: str = "service.duration.p99") -> Anomaly:
    return Anomaly(
        series_id=f"{service}/{name}",
        name=name,
        service_name=service,
        signal="latency",
        unit="s",
        direction="up",
        start_unix_nano=T0 + start_minute * MINUTE,
        detected_unix_nano=T0 + (start_minute + 1) * MINUTE,
        end_unix_nano=T0 + (start_minute + 3) * MINUTE,
        baseline=0.2,
        observed=1.5,
        score=10.0,
        points=3,
    )


def test_a_new_fault_minutes_later_opens_its_own_problem() -> None:
    # Symptoms every two minutes along the chain: each within the quiet gap of the last, so
    # without a bound they would make one problem swallowing both faults.
    found = [
        anomaly("payment", 0),
        anomaly("checkout", 2),
        anomaly("frontend", 4),
        anomaly("payment", 6, "k8s.pod.cpu.usage"),
        anomaly("checkout", 8, "http.client.request.duration"),
    ]
    problems = group_problems(found, CHAIN, GroupingConfig())
    assert [p.start_unix_nano for p in problems] == [T0, T0 + 6 * MINUTE]
    assert [len(p.anomalies) for p in problems] == [3, 2]
    unbounded = group_problems(found, CHAIN, GroupingConfig(max_onset_spread_ns=60 * MINUTE))
    assert len(unbounded) == 1


def test_a_flat_series_departure_scores_at_most_twenty() -> None:
    # A log rate that is 0 every minute, then 1.1 records/s: its robust scale is 0.
    points = [(T0 + i * MINUTE, 0.0) for i in range(60)] + [(T0 + 60 * MINUTE, 1.1)]
    flat = Series(
        series_id="logs/a/log.records.error",
        name="log.records.error",
        points=points,
        service_name="a",
        unit="{record}/s",
        watch="up",
        signal="logs",
    )
    # A CPU gauge with ordinary noise that saturates.
    cpu_points = [(T0 + i * MINUTE, 0.10 + 0.01 * (i % 3)) for i in range(60)]
    cpu = Series(
        series_id="metric/cpu{b}",
        name="k8s.pod.cpu_limit_utilization",
        points=[*cpu_points, (T0 + 60 * MINUTE, 0.95)],
        service_name="b",
        unit="1",
        watch="up",
        signal="saturation",
    )
    found = service_evidence(
        {"a": [flat], "b": [cpu]}, T0 + 60 * MINUTE, T0 + 61 * MINUTE, GroupingConfig()
    )
    [log_symptom] = found["a"].symptoms
    [cpu_symptom] = found["b"].symptoms
    assert log_symptom.z == 20.0
    assert cpu_symptom.kind == "saturation"
    assert cpu_symptom.z > log_symptom.z


def test_the_origin_says_why_it_beats_the_second() -> None:
    [problem] = group_problems([anomaly("payment", 0), anomaly("checkout", 1)], CHAIN)
    assert problem.services[:2] == ["payment", "checkout"]
    assert "Ahead of checkout:" in problem.ranking[0].reason
    assert "Ahead of" not in problem.ranking[1].reason
    # the reason is part of the problem's stored form
    assert b"Ahead of checkout" in msgspec.json.encode(problem)
