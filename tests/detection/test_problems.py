"""Grouping anomalies into problems and ranking their origin, on small service graphs."""

from __future__ import annotations

import random

import pytest

from coremetry.detection import (
    Anomaly,
    GroupingConfig,
    Signal,
    group_problems,
    rank_origins,
)

MINUTE = 60 * 1_000_000_000
T0 = 1_700_000_000 * 1_000_000_000


def anomaly(
    service: str,
    start_minute: int,
    end_minute: int,
    *,
    signal: Signal = "latency",
    name: str = "http.server.request.duration.p99",
    score: float = 10.0,
    ongoing: bool = False,
) -> Anomaly:
    return Anomaly(
        series_id=f"{service}/{name}",
        name=name,
        service_name=service,
        signal=signal,
        unit="s",
        direction="down" if signal == "traffic" else "up",
        start_unix_nano=T0 + start_minute * MINUTE,
        detected_unix_nano=T0 + (start_minute + 1) * MINUTE,
        end_unix_nano=T0 + end_minute * MINUTE,
        baseline=0.2,
        observed=1.5,
        score=score,
        points=end_minute - start_minute + 1,
        ongoing=ongoing,
    )


# frontend -> checkout -> payment -> ledger-db, checkout -> cart
CHAIN = [
    ("frontend", "checkout"),
    ("checkout", "payment"),
    ("payment", "ledger-db"),
    ("checkout", "cart"),
]


def test_fault_spreading_up_a_chain_is_one_problem_with_the_deepest_service_first() -> None:
    found = [
        anomaly("frontend", 12, 30),
        anomaly("checkout", 11, 30),
        anomaly("payment", 10, 31, score=8.0),  # not the strongest, but the deepest
        anomaly("ledger-db", 11, 29, signal="traffic", name="rpc.server.request.rate"),
    ]
    [problem] = group_problems(found, CHAIN)
    assert problem.services == ["payment", "checkout", "frontend", "ledger-db"]
    origin = problem.ranking[0]
    assert origin.anomalous_callers == ["checkout"]
    assert origin.anomalous_callees == []
    assert origin.depth == 2
    assert "deepest anomalous service" in origin.reason
    assert problem.ranking[1].anomalous_callees == ["payment"]
    assert "further down" in problem.ranking[1].reason
    assert not problem.ranking[-1].symptomatic  # only ledger-db's traffic changed
    assert "consequence" in problem.ranking[-1].reason
    assert problem.start_unix_nano == T0 + 10 * MINUTE
    assert problem.end_unix_nano == T0 + 31 * MINUTE
    assert problem.detected_unix_nano == T0 + 11 * MINUTE
    assert problem.status == "resolved"
    assert problem.title.startswith("payment: http.server.request.duration.p99 up: 0.2 -> 1.5 s")
    assert problem.title.endswith("(+3 more services)")
    assert [a.service_name for a in problem.anomalies] == [
        "payment",
        "checkout",
        "ledger-db",
        "frontend",
    ]


def test_unconnected_services_at_the_same_time_are_separate_problems() -> None:
    problems = group_problems([anomaly("cart", 10, 20), anomaly("payment", 10, 20)], CHAIN)
    assert sorted(p.services[0] for p in problems) == ["cart", "payment"]


def test_the_graph_is_read_both_ways() -> None:
    # The callee's anomaly starts first; the caller's joins it: one problem either way.
    problems = group_problems([anomaly("payment", 5, 20), anomaly("checkout", 8, 20)], CHAIN)
    assert len(problems) == 1
    reversed_edges = [(callee, caller) for caller, callee in CHAIN]
    problems = group_problems(
        [anomaly("payment", 5, 20), anomaly("checkout", 8, 20)], reversed_edges
    )
    assert len(problems) == 1
    assert problems[0].services[0] == "checkout"  # now the callee


def test_join_gap_decides_whether_episodes_of_one_service_are_one_problem() -> None:
    near = [anomaly("payment", 0, 10), anomaly("payment", 14, 20, name="errors")]
    assert len(group_problems(near)) == 1  # 4 minutes apart, within the 5-minute gap
    far = [anomaly("payment", 0, 10), anomaly("payment", 16, 20, name="errors")]
    assert len(group_problems(far)) == 2
    assert len(group_problems(far, config=GroupingConfig(join_gap_ns=10 * MINUTE))) == 1


def test_a_chain_joins_through_the_middle_service_only_when_it_is_anomalous() -> None:
    ends = [anomaly("frontend", 10, 20), anomaly("payment", 10, 20)]
    assert len(group_problems(ends, CHAIN)) == 2  # frontend does not call payment
    [problem] = group_problems([*ends, anomaly("checkout", 12, 18)], CHAIN)
    assert problem.services[0] == "payment"


def test_fan_in_the_callee_of_several_anomalous_callers_ranks_first() -> None:
    edges = [("web", "auth"), ("mobile-api", "auth"), ("web", "search")]
    found = [
        anomaly("web", 10, 20, score=30.0),
        anomaly("mobile-api", 9, 20, score=25.0),
        anomaly("auth", 11, 20, score=5.0),  # started last, weakest: still the origin
    ]
    [problem] = group_problems(found, edges)
    assert problem.services[0] == "auth"
    assert problem.ranking[0].anomalous_callers == ["mobile-api", "web"]


def test_between_sinks_caller_support_then_onset_decide() -> None:
    edges = [("gw", "a"), ("gw", "b"), ("x", "b")]
    found = [
        anomaly("gw", 10, 20),
        anomaly("x", 10, 20),
        anomaly("a", 5, 20),  # earliest, one anomalous caller
        anomaly("b", 8, 20),  # two anomalous callers
    ]
    [problem] = group_problems(found, edges)
    assert problem.services[:2] == ["b", "a"]


def test_without_a_graph_the_earliest_then_strongest_service_ranks_first() -> None:
    ranks = rank_origins(
        [anomaly("a", 10, 20, score=50.0), anomaly("b", 5, 20), anomaly("c", 5, 20, score=20.0)]
    )
    assert [r.service_name for r in ranks] == ["c", "b", "a"]
    assert all("no caller or callee" in r.reason for r in ranks)


def test_a_call_cycle_terminates_and_the_rules_still_order_it() -> None:
    # Every service has an anomalous callee; "a" has the most anomalous callers (b and c);
    # b and c tie on that and on depth, and b turned anomalous first.
    edges = [("a", "b"), ("b", "a"), ("b", "c"), ("c", "a")]
    [problem] = group_problems(
        [anomaly("a", 6, 20), anomaly("b", 5, 20), anomaly("c", 7, 20)], edges
    )
    assert problem.services == ["a", "b", "c"]
    assert all(r.depth <= 3 for r in problem.ranking)


def test_traffic_only_changes_never_rank_above_a_symptom() -> None:
    found = [
        anomaly("ledger-db", 1, 30, signal="traffic", score=90.0),
        anomaly("payment", 10, 20, signal="errors", score=4.0),
    ]
    [problem] = group_problems(found, CHAIN)
    assert problem.services == ["payment", "ledger-db"]


def test_status_id_and_order_do_not_depend_on_input_order() -> None:
    found = [
        anomaly("frontend", 12, 30),
        anomaly("checkout", 11, 30, ongoing=True),
        anomaly("payment", 10, 31),
    ]
    [problem] = group_problems(found, CHAIN)
    assert problem.status == "open"
    shuffled = list(found)
    random.Random(1).shuffle(shuffled)
    [again] = group_problems(shuffled, list(reversed(CHAIN)))
    assert again == problem
    assert problem.problem_id.startswith("prb_")
    assert len(problem.problem_id) == 4 + 16
    [other] = group_problems([anomaly("payment", 11, 31)], CHAIN)
    assert other.problem_id != problem.problem_id


def test_anomalies_without_a_service_group_only_with_their_own_series() -> None:
    loose = [
        Anomaly(
            series_id=series_id,
            name="system.cpu.utilization",
            direction="up",
            start_unix_nano=T0 + start * MINUTE,
            detected_unix_nano=T0 + start * MINUTE,
            end_unix_nano=T0 + (start + 10) * MINUTE,
            baseline=0.1,
            observed=0.9,
            score=9.0,
            points=10,
        )
        for series_id, start in (("host-a/cpu", 0), ("host-b/cpu", 0), ("host-a/cpu", 12))
    ]
    problems = group_problems(loose)
    assert sorted(len(p.anomalies) for p in problems) == [1, 2]
    assert all(p.services == [] for p in problems)
    assert all(p.title.startswith("system.cpu.utilization up: 0.1 -> 0.9") for p in problems)


def test_negative_join_gap_is_refused() -> None:
    with pytest.raises(ValueError, match="join_gap_ns"):
        group_problems([], config=GroupingConfig(join_gap_ns=-1))


def test_no_anomalies_no_problems() -> None:
    assert group_problems([], CHAIN) == []
