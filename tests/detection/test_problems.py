"""Grouping anomalies into problems (one per onset) and ranking their origin, on small service
graphs: the graph rules from anomalies alone, then with the evidence of every series and of
traces."""

from __future__ import annotations

import random

import msgspec
import pytest

from coremetry.detection import (
    Anomaly,
    GroupingConfig,
    Series,
    Side,
    Signal,
    group_problems,
    rank_origins,
)
from coremetry.detection.problems import (
    ServiceEvidence,
    Symptom,
    TraceBlame,
    evidence_window,
    service_evidence,
    value_with_unit,
    with_trace_blame,
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


def test_quiet_gap_decides_whether_onsets_of_one_service_are_one_problem() -> None:
    near = [anomaly("payment", 0, 10), anomaly("payment", 3, 20, name="errors")]
    assert len(group_problems(near)) == 1  # 3 minutes apart: within the 3-minute gap
    far = [anomaly("payment", 0, 10), anomaly("payment", 4, 20, name="errors")]
    assert len(group_problems(far)) == 2  # a new onset 4 minutes later is a new problem
    assert len(group_problems(far, config=GroupingConfig(quiet_gap_ns=5 * MINUTE))) == 1


def test_a_new_onset_while_an_old_anomaly_is_still_open_is_a_new_problem() -> None:
    found = [
        anomaly("checkout", 0, 40),  # held open by hysteresis across both incidents
        anomaly("payment", 1, 5),
        anomaly("payment", 20, 25, name="errors", signal="errors"),
        anomaly("checkout", 21, 25, name="client"),
    ]
    first, second = group_problems(found, CHAIN)
    assert {a.start_unix_nano for a in first.anomalies} == {T0, T0 + MINUTE}
    assert {a.start_unix_nano for a in second.anomalies} == {T0 + 20 * MINUTE, T0 + 21 * MINUTE}
    assert second.services[0] == "payment"
    assert second.detected_unix_nano == T0 + 21 * MINUTE


def test_a_traffic_change_joins_a_problem_it_falls_in_and_otherwise_stands_alone() -> None:
    found = [
        anomaly("ledger-db", 0, 8, signal="traffic", name="rpc.server.request.rate"),
        anomaly("payment", 10, 20),
        anomaly("ledger-db", 11, 20, signal="traffic", name="rpc.server.request.rate"),
    ]
    alone, incident = group_problems(found, CHAIN)
    assert [a.start_unix_nano for a in alone.anomalies] == [T0]
    assert alone.services == ["ledger-db"]
    assert alone.ranking[0].role == "traffic_only"
    assert incident.services == ["payment", "ledger-db"]
    # A symptom never joins a problem made of traffic changes only.
    [traffic, symptom] = group_problems([found[0], anomaly("payment", 2, 9)], CHAIN)
    assert traffic.services == ["ledger-db"]
    assert symptom.services == ["payment"]


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
        anomaly("a", 8, 20),  # earliest, one anomalous caller
        anomaly("b", 9, 20),  # two anomalous callers
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
        anomaly("payment", 10, 20, signal="errors", score=4.0),
        anomaly("ledger-db", 11, 30, signal="traffic", score=90.0),
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
        for series_id, start in (("host-a/cpu", 0), ("host-b/cpu", 0), ("host-a/cpu", 2))
    ]
    problems = group_problems(loose)
    assert sorted(len(p.anomalies) for p in problems) == [1, 2]
    assert all(p.services == [] for p in problems)
    assert all(p.title.startswith("system.cpu.utilization up: 0.1 -> 0.9") for p in problems)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("quiet_gap_ns", -1),
        ("evidence_tail_ns", -1),
        ("history_ns", 0),
        ("min_history_points", 1),
        ("evidence_z", 0.0),
        ("evidence_ratio", 1.0),
        ("saturation_level", 1.5),
        ("trace_share", -0.1),
    ],
)
def test_bad_grouping_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"GroupingConfig.{field} "):
        group_problems([], config=GroupingConfig(**{field: value}))  # type: ignore[arg-type]  # one field at a time, by name


def test_no_anomalies_no_problems() -> None:
    assert group_problems([], CHAIN) == []


# -- evidence from every series: the client/server split, saturation, traces -----------------


def series(
    service: str,
    name: str,
    window: list[float],
    *,
    usual: float = 0.1,
    signal: Signal = "latency",
    side: Side = "",
    unit: str = "s",
    history: int = 60,
) -> Series:
    """``history`` minutes of ``usual`` with a little noise, then ``window`` from minute 60."""
    rng = random.Random(f"{service}/{name}")
    points = [
        (T0 + (60 - history + i) * MINUTE, usual * rng.uniform(0.9, 1.1)) for i in range(history)
    ]
    points += [(T0 + (60 + i) * MINUTE, value) for i, value in enumerate(window)]
    return Series(
        series_id=f"{service}/{name}",
        name=name,
        points=points,
        service_name=service,
        signal=signal,
        side=side,
        unit=unit,
        watch="up",
    )


def client(service: str, window: list[float]) -> Series:
    return series(service, "http.client.request.duration", window, side="client")


def server(service: str, window: list[float]) -> Series:
    return series(service, "http.server.request.duration", window, side="server")


def at(minute: int, service: str, name: str, **kwargs: object) -> Anomaly:
    return msgspec.structs.replace(anomaly(service, minute, minute + 3, name=name), **kwargs)


# gateway -> api -> {route, station}; api -> cache (no metrics at all)
GRAPH = [("gateway", "api"), ("api", "route"), ("api", "station"), ("api", "cache")]
SLOW = [1.0, 1.2, 0.9, 1.1]
FLAT = [0.1, 0.1, 0.1, 0.1]


def test_a_callee_whose_callers_wait_while_its_own_server_latency_is_normal_is_named() -> None:
    judged = [
        server("gateway", SLOW),
        client("api", SLOW),  # api waits on a call
        server("api", SLOW),
        server("route", FLAT),  # observed and normal: the time is lost on the way to it?
        client("route", FLAT),
        server("station", FLAT),
    ]
    found = [
        at(60, "gateway", "http.server.request.duration", side="server"),
        at(60, "api", "http.client.request.duration", side="client"),
    ]
    [problem] = group_problems(found, GRAPH, series=judged)
    roles = {r.service_name: r.role for r in problem.ranking}
    assert roles == {
        "route": "silent_callee",
        "station": "silent_callee",
        "api": "symptomatic",
        "gateway": "symptomatic",
    }  # cache has no series: unobserved, not listed
    assert problem.services[2:] == ["api", "gateway"]  # api is the deeper waiting service
    assert "api waits longer on its calls" in problem.ranking[0].reason
    assert problem.title.startswith(f"{problem.services[0]} (likely origin): ")
    # With route's server latency up, route is the origin: its own work slowed.
    judged[3] = server("route", SLOW)
    [problem] = group_problems(found, GRAPH, series=judged)
    assert problem.services[0] == "route"
    assert problem.ranking[0].role == "own_cause"
    assert "its own work slowed" in problem.ranking[0].reason
    assert any("http.server.request.duration" in line for line in problem.ranking[0].evidence)
    assert "station" not in problem.services  # api's wait is explained by route now


def test_a_silent_callee_carries_its_callers_waits_and_its_own_normal_level_as_evidence() -> None:
    # Issue 16: a callee ranked for what others show names those figures, with units and
    # whose series they are; never an empty evidence list.
    judged = [
        server("gateway", SLOW),
        client("api", [2.0, 2.1, 1.9, 2.0]),  # api waits on its calls: 0.1 s -> 2.1 s
        server("api", SLOW),  # its own server latency is up too (it waits)
        server("route", FLAT),  # route's own server latency stays at 0.1 s
    ]
    found = [
        at(60, "gateway", "http.server.request.duration", side="server"),
        at(60, "api", "http.server.request.duration", side="server"),
    ]
    [problem] = group_problems(found, GRAPH, series=judged)
    first = problem.ranking[0]
    assert (first.service_name, first.role) == ("route", "silent_callee")
    [waits, own] = first.evidence
    assert waits.startswith(
        "api's calls (to it and its other callees): http.client.request.duration: "
    )
    assert "2.1 s at peak (client latency" in waits
    assert own.startswith("its own http.server.request.duration: ")
    assert " s usually, " in own
    assert "(server latency, no symptom: z " in own
    # The "why" says whose server latency stayed normal: route's, not api's (api's rose).
    assert "route's server latency stayed within its usual spread (0.1" in first.reason
    assert "its caller api waits longer on its calls" in first.reason
    assert "api waits longer on calls while its own server latency" not in first.reason
    assert "api's server latency" not in first.reason
    assert all(rank.evidence for rank in problem.ranking)


def test_every_ranked_candidate_states_its_evidence_even_when_only_traces_or_traffic_rank_it() -> (
    None
):
    judged = [client("api", SLOW), server("route", FLAT)]
    found = [
        at(60, "api", "c", side="client"),
        at(60, "station", "rpc.server.request.rate", signal="traffic", direction="down"),
    ]
    [problem] = group_problems(found, GRAPH, series=judged)
    blame = TraceBlame(
        service_name="cache", excess_ns=800e6, gap_ns=1000e6, slow_traces=5, typical_traces=9
    )
    again = with_trace_blame(problem, blame, GRAPH, judged)
    evidence = {rank.service_name: rank.evidence for rank in again.ranking}
    # cache has no series at all: the traces that blamed it are its evidence.
    assert again.services[0] == "cache"
    assert evidence["cache"] == [
        "traces: critical-path time 800.0 ms per trace above typical ones, of a 1,000.0 ms gap "
        "(5 slow and 9 typical traces)"
    ]
    # station only changed traffic: its traffic anomaly is the line.
    assert evidence["station"] == ["rpc.server.request.rate down: 0.2 -> 1.5 s (score 10.0)"]
    assert all(evidence.values())


def test_a_callee_is_only_blamed_by_the_deepest_waiting_service() -> None:
    # gateway waits too, but api (which it calls) is unwell: gateway's own other callees are
    # not suspects.
    graph = [*GRAPH, ("gateway", "auth")]
    judged = [
        client("gateway", SLOW),
        client("api", SLOW),
        server("route", FLAT),
        server("auth", FLAT),
    ]
    found = [at(60, "gateway", "c", side="client"), at(60, "api", "c", side="client")]
    [problem] = group_problems(found, graph, series=judged)
    assert problem.services[0] == "route"
    assert "auth" not in problem.services


def test_saturation_near_the_limit_outranks_a_latency_rise_and_load_does_not() -> None:
    judged = [
        server("gateway", SLOW),
        server("api", SLOW),
        client("api", FLAT),
        series(
            "route",
            "k8s.pod.cpu_limit_utilization",
            [0.9, 1.0, 1.0, 1.0],
            usual=0.05,
            signal="saturation",
            unit="1",
        ),
        server("route", [0.3, 0.3, 0.3, 0.3]),
        client("route", FLAT),
    ]
    found = [
        at(60, "gateway", "g"),
        at(60, "api", "s", side="server"),
        at(
            60,
            "route",
            "k8s.pod.cpu_limit_utilization",
            signal="saturation",
            unit="1",
            observed=1.0,
        ),
    ]
    [problem] = group_problems(found, GRAPH, series=judged)
    assert problem.services[:2] == ["route", "api"]
    # api's server latency rose with normal calls, but its callee route is unwell: waiting.
    assert [r.role for r in problem.ranking[:2]] == ["own_cause", "symptomatic"]
    assert "its own saturation" in problem.ranking[0].reason
    # The same rise to 30 % of the limit is load, not saturation: the ranking follows the
    # client/server evidence instead.
    judged[3] = series(
        "route",
        "k8s.pod.cpu_limit_utilization",
        [0.3, 0.3, 0.3, 0.3],
        usual=0.05,
        signal="saturation",
        unit="1",
    )
    found[2] = msgspec.structs.replace(found[2], observed=0.3)
    [problem] = group_problems(found, GRAPH, series=judged)
    route = next(r for r in problem.ranking if r.service_name == "route")
    assert route.role == "own_cause"
    assert "saturation" not in route.reason


def test_evidence_needs_a_real_departure_and_enough_history() -> None:
    config = GroupingConfig()
    low, high = T0 + 60 * MINUTE, T0 + 63 * MINUTE
    cases = {
        "a": [server("a", [0.15, 0.15, 0.15, 0.15])],  # 1.5x: not a symptom
        "b": [server("b", [0.3, 0.1, 0.1, 0.1])],  # 3x at one point: a symptom
        "c": [series("c", "x", SLOW, history=5, side="server")],  # too little history
        "d": [series("d", "rpc.server.request.rate", SLOW, signal="traffic")],  # not a symptom
    }
    found = service_evidence(cases, low, high, config)
    assert found["a"].symptoms == []
    assert found["a"].normal("server_latency")
    [symptom] = found["b"].symptoms
    assert symptom.kind == "server_latency"
    assert symptom.peak == 0.3
    assert 0.09 < symptom.baseline < 0.11
    assert symptom.z >= config.evidence_z
    assert found["c"].symptoms == []  # observed (points in the window) but not judged
    assert "d" not in found
    # Nothing in the window: not even observed.
    assert service_evidence(cases, T0 + 200 * MINUTE, T0 + 210 * MINUTE, config) == {}


def test_the_services_of_traces_critical_paths_come_first() -> None:
    judged = [client("gateway", SLOW), client("api", SLOW), server("route", FLAT)]
    found = [at(60, "gateway", "c", side="client"), at(60, "api", "c", side="client")]
    [problem] = group_problems(found, GRAPH, series=judged)
    assert problem.services[0] == "route"
    blame = TraceBlame(
        service_name="station", excess_ns=800e6, gap_ns=1000e6, slow_traces=5, typical_traces=9
    )
    again = with_trace_blame(problem, blame, GRAPH, judged)
    assert again.services[:2] == ["station", "route"]
    assert again.ranking[0].role == "trace_origin"
    assert "80% of the gap" in again.ranking[0].reason
    assert again.trace_blame == blame
    assert again.problem_id == problem.problem_id
    # A growth that explains too little of the gap names nobody.
    weak = msgspec.structs.replace(blame, excess_ns=50e6)
    assert with_trace_blame(problem, weak, GRAPH, judged).services[0] == "route"


def test_unrelated_unwell_services_are_not_part_of_a_problem() -> None:
    judged = [client("api", SLOW), server("route", FLAT), server("billing", SLOW)]
    found = [at(60, "api", "c", side="client")]
    [problem] = group_problems(found, [*GRAPH, ("billing", "ledger")], series=judged)
    assert "billing" not in problem.services


def test_a_problem_stays_open_while_another_symptom_may_still_join_it() -> None:
    found = [anomaly("payment", 10, 12)]
    [problem] = group_problems(found, CHAIN, end_unix_nano=T0 + 13 * MINUTE)
    assert problem.status == "open"  # 3 minutes after its onset: a symptom may still join
    [problem] = group_problems(found, CHAIN, end_unix_nano=T0 + 14 * MINUTE)
    assert problem.status == "resolved"
    window = evidence_window(problem)
    assert (window.start_unix_nano, window.end_unix_nano) == (
        T0 + 10 * MINUTE,
        T0 + 12 * MINUTE + 1,
    )


def test_within_own_causes_a_resource_at_its_limit_comes_before_errors_and_logs() -> None:
    # gateway calls three services; each shows evidence of its own. The log burst starts
    # first and the error service has more callers, yet the saturated one is the origin:
    # a resource at its limit explains slowness by itself, errors are the service's own
    # failures, and log lines are often a consequence (a logged failed call).
    edges = [("gateway", "auth"), ("gateway", "food"), ("gateway", "pay"), ("web", "pay")]
    evidence = {
        "auth": ServiceEvidence(
            symptoms=[
                Symptom(
                    kind="logs", series_name="log.records.warn", baseline=0.0, peak=0.15, z=20.0
                )
            ]
        ),
        "pay": ServiceEvidence(
            symptoms=[
                Symptom(
                    kind="errors", series_name="service.error.ratio", baseline=0.0, peak=0.3, z=20.0
                )
            ]
        ),
        "food": ServiceEvidence(
            symptoms=[
                Symptom(
                    kind="saturation",
                    series_name="k8s.pod.cpu_limit_utilization",
                    baseline=0.01,
                    peak=1.0,
                    z=150.0,
                )
            ]
        ),
    }
    found = [
        anomaly("auth", 58, 62, signal="logs", name="log.records.warn"),
        anomaly("pay", 59, 62, signal="errors", name="service.error.ratio"),
        anomaly("food", 60, 62, signal="saturation", name="k8s.pod.cpu_limit_utilization"),
    ]
    ranking = rank_origins(found, edges, evidence=evidence)
    assert [r.service_name for r in ranking] == ["food", "pay", "auth"]
    assert {r.role for r in ranking} == {"own_cause"}
    assert "stronger own evidence" in ranking[0].reason


def test_evidence_lines_state_the_usual_level_and_the_peak_in_the_series_unit() -> None:
    judged = [server("api", SLOW), client("api", FLAT)]
    [problem] = group_problems([at(60, "api", "http.server.request.duration")], [], series=judged)
    [line] = [e for e in problem.ranking[0].evidence if e.startswith("http.server")]
    assert " s usually, 1.2 s at peak (server latency" in line


@pytest.mark.parametrize(
    ("value", "unit", "written"),
    [
        (0.38, "s", "0.38 s"),
        (0.95, "1", "95%"),  # a utilisation or error ratio: a percentage
        (0.002, "1", "0.2%"),
        (0.05, "{record}/s", "3 records/min"),  # sparse counts per minute, the thing named
        (2.0, "{request}/s", "120 requests/min"),
        (0.0, "{record}/s", "0 records/min"),
        (0.25, "{cpu}", "0.25 cpu"),
        (1.5e9, "By", "1.5e+09 bytes"),
        (42.0, "%", "42%"),
        (3.0, "By/s", "3 By/s"),
        (7.0, "", "7 (no unit stated)"),
    ],
)
def test_every_evidence_value_names_its_unit(value: float, unit: str, written: str) -> None:
    assert value_with_unit(value, unit) == written


def test_a_log_rate_and_a_utilisation_read_with_their_units() -> None:
    rate = Symptom(kind="logs", series_name="log.records.error", baseline=0.0, peak=0.5, z=20.0)
    limit = Symptom(
        kind="saturation",
        series_name="k8s.pod.cpu_limit_utilization",
        baseline=0.3,
        peak=0.98,
        z=41.2,
    )
    evidence = {
        "auth": ServiceEvidence(symptoms=[msgspec.structs.replace(rate, unit="{record}/s")]),
        "food": ServiceEvidence(symptoms=[msgspec.structs.replace(limit, unit="1")]),
    }
    found = [
        anomaly("auth", 60, 62, signal="logs", name="log.records.error"),
        anomaly("food", 60, 62, signal="saturation", name="k8s.pod.cpu_limit_utilization"),
    ]
    lines = {r.service_name: r.evidence for r in rank_origins(found, [], evidence=evidence)}
    assert lines["auth"][0].startswith(
        "log.records.error: 0 records/min usually, 30 records/min at peak (logs"
    )
    assert lines["food"][0].startswith(
        "k8s.pod.cpu_limit_utilization: 30% usually, 98% at peak (saturation"
    )
