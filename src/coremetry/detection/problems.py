"""Problems: related anomalies grouped into one record, most likely origin first.

Pure functions over :class:`~coremetry.detection.Anomaly` records and the service graph (the
``(caller, callee)`` pairs of :meth:`coremetry.store.TelemetryStore.service_edges`); no I/O.

**Grouping** (:func:`group_problems`). Two anomalies are *related* when their time spans
overlap, each widened by ``join_gap_ns`` (a latency anomaly that closes a minute before an
error burst opens is the same incident), and they belong to the same service or to two
services joined by an edge of the service graph, either way round. A problem is a connected
component of that relation, so a fault that spreads caller by caller up a call chain is one
problem, while two unrelated services misbehaving at the same time are two. Anomalies of
series that belong to no service group only with other episodes of the same series.

**Origin ranking** (:func:`rank_origins`), after the "deepest anomalous callee" rule of
microservice root-cause localisation (e.g. MicroRCA, Wu et al., NOMS 2020; the call-graph
walk of Sieve and of Dynatrace's Davis): a fault at a service makes its callers slow or
failing too, because they wait for it, while its own callees see less traffic, not slower
service. So among the services with a *symptom* (an anomaly whose signal is not
``traffic``), the most likely origin is one

1. none of whose callees has a symptom (the fault does not come from further down),
2. whose callers do have one (the fault spread upwards as it should), the more the better,
3. deepest along the anomalous call chain (longest path from an anomalous entry point),
4. earliest to turn anomalous, then with the largest score.

Services whose only anomalies are traffic changes rank last: they are usually consequences.
Every :class:`ServiceRank` carries the reason in words, for the model and the operator.

The problem id is derived from the earliest anomaly (series and start), so re-running the
detector over the same data gives the same ids and a store can upsert by id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Final, Literal, TypeAlias

import msgspec

from .detector import Anomaly

__all__ = [
    "GroupingConfig",
    "Problem",
    "ProblemStatus",
    "ServiceRank",
    "describe_anomaly",
    "group_problems",
    "rank_origins",
]

ProblemStatus: TypeAlias = Literal["open", "resolved"]
"""``open`` while one of its anomalies is still ongoing, else ``resolved``."""

_MINUTE_NS: Final = 60 * 1_000_000_000


class GroupingConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parameters of :func:`group_problems`.

    Attributes:
        join_gap_ns: anomalies whose spans come within this many nanoseconds of each other
            count as overlapping (default 5 minutes).
    """

    join_gap_ns: int = 5 * _MINUTE_NS


class ServiceRank(msgspec.Struct, frozen=True, kw_only=True):
    """One service's place in a problem's origin ranking.

    Attributes:
        service_name: the service (``service.name``).
        symptomatic: it has an anomaly other than a traffic change.
        anomalous_callers: its callers (graph edges into it) with a symptom in the problem.
        anomalous_callees: its callees with a symptom in the problem.
        depth: edges on the longest symptomatic call chain from an entry point down to it
            (0 for an entry point or a service without symptomatic callers).
        first_anomaly_unix_nano: start of its earliest anomaly in the problem.
        max_score: its largest anomaly score (robust standard deviations).
        reason: why it ranks where it does, in words.
    """

    service_name: str
    symptomatic: bool
    anomalous_callers: list[str]
    anomalous_callees: list[str]
    depth: int
    first_anomaly_unix_nano: int
    max_score: float
    reason: str


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """Related anomalies as one incident.

    Attributes:
        problem_id: stable id (``prb_`` + 16 hex), derived from the earliest anomaly.
        status: ``open`` or ``resolved`` (see :data:`ProblemStatus`).
        start_unix_nano: start of the earliest anomaly.
        end_unix_nano: end of the latest anomaly.
        detected_unix_nano: when the first of its anomalies was raised.
        services: the services involved, most likely origin first.
        ranking: one :class:`ServiceRank` per service, in the order of ``services``.
        anomalies: the evidence, ordered by start time then series id.
        title: one line: the origin and its strongest anomaly.
        sample_trace_ids: traces that show it (filled by the server-side runner from the
            store; empty from :func:`group_problems`).
        sample_log_lines: log lines that show it (likewise).
    """

    problem_id: str
    status: ProblemStatus
    start_unix_nano: int
    end_unix_nano: int
    detected_unix_nano: int
    services: list[str]
    ranking: list[ServiceRank]
    anomalies: list[Anomaly]
    title: str
    sample_trace_ids: list[str] = msgspec.field(default_factory=list)
    sample_log_lines: list[str] = msgspec.field(default_factory=list)


def _group_key(anomaly: Anomaly) -> str:
    return anomaly.service_name if anomaly.service_name else f"\0series:{anomaly.series_id}"


def _adjacency(edges: Iterable[tuple[str, str]]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(callees_of, callers_of)`` without self-loops."""
    callees: dict[str, set[str]] = {}
    callers: dict[str, set[str]] = {}
    for caller, callee in edges:
        if caller == callee:
            continue
        callees.setdefault(caller, set()).add(callee)
        callers.setdefault(callee, set()).add(caller)
    return callees, callers


def group_problems(
    anomalies: Iterable[Anomaly],
    edges: Iterable[tuple[str, str]] = (),
    config: GroupingConfig | None = None,
) -> list[Problem]:
    """Group anomalies into problems and rank each problem's origins.

    Args:
        anomalies: the anomalies of one detection run, any order.
        edges: the service graph as ``(caller, callee)`` service-name pairs; duplicates and
            self-loops are ignored.
        config: grouping parameters; ``None`` uses the defaults.

    Returns:
        Problems ordered by start time (then id); each one's anomalies ordered by start time
        then series id.

    Raises:
        ValueError: ``config.join_gap_ns`` is negative.
    """
    cfg = config if config is not None else GroupingConfig()
    if cfg.join_gap_ns < 0:
        raise ValueError("GroupingConfig.join_gap_ns must not be negative")
    ordered = sorted(anomalies, key=lambda a: (a.start_unix_nano, a.series_id))
    edge_list = list(edges)
    callees, callers = _adjacency(edge_list)
    parent = list(range(len(ordered)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def related(a: Anomaly, b: Anomaly) -> bool:
        key_a, key_b = _group_key(a), _group_key(b)
        if key_a == key_b:
            return True
        return key_b in callees.get(key_a, ()) or key_b in callers.get(key_a, ())

    active: list[int] = []
    for i, anomaly in enumerate(ordered):
        active = [
            j
            for j in active
            if ordered[j].end_unix_nano + cfg.join_gap_ns >= anomaly.start_unix_nano
        ]
        for j in active:
            if related(anomaly, ordered[j]):
                parent[find(i)] = find(j)
        active.append(i)

    groups: dict[int, list[Anomaly]] = {}
    for i, anomaly in enumerate(ordered):
        groups.setdefault(find(i), []).append(anomaly)
    problems = [_build_problem(members, edge_list) for members in groups.values()]
    problems.sort(key=lambda p: (p.start_unix_nano, p.problem_id))
    return problems


def _build_problem(members: list[Anomaly], edges: Sequence[tuple[str, str]]) -> Problem:
    first = members[0]  # members arrive ordered by (start, series_id)
    digest = hashlib.blake2s(
        f"{first.series_id}\0{first.start_unix_nano}".encode(), digest_size=8
    ).hexdigest()
    ranking = rank_origins(members, edges)
    services = [rank.service_name for rank in ranking]
    return Problem(
        problem_id=f"prb_{digest}",
        status="open" if any(a.ongoing for a in members) else "resolved",
        start_unix_nano=first.start_unix_nano,
        end_unix_nano=max(a.end_unix_nano for a in members),
        detected_unix_nano=min(a.detected_unix_nano for a in members),
        services=services,
        ranking=ranking,
        anomalies=members,
        title=_title(members, services),
    )


def rank_origins(
    anomalies: Sequence[Anomaly], edges: Iterable[tuple[str, str]] = ()
) -> list[ServiceRank]:
    """Rank the services of one problem's anomalies, most likely origin first.

    Rules in the module docstring. Anomalies without a service are not ranked.

    Args:
        anomalies: the problem's anomalies.
        edges: the service graph as ``(caller, callee)`` pairs.

    Returns:
        One :class:`ServiceRank` per service with an anomaly, best first.
    """
    callees, callers = _adjacency(edges)
    by_service: dict[str, list[Anomaly]] = {}
    for anomaly in anomalies:
        if anomaly.service_name:
            by_service.setdefault(anomaly.service_name, []).append(anomaly)
    symptomatic = {
        service
        for service, found in by_service.items()
        if any(a.signal != "traffic" for a in found)
    }
    depth = _depths(symptomatic, callers)

    ranks: list[ServiceRank] = []
    for service, found in by_service.items():
        bad_callers = sorted(callers.get(service, set()) & symptomatic)
        bad_callees = sorted(callees.get(service, set()) & symptomatic)
        is_symptomatic = service in symptomatic
        ranks.append(
            ServiceRank(
                service_name=service,
                symptomatic=is_symptomatic,
                anomalous_callers=bad_callers,
                anomalous_callees=bad_callees,
                depth=depth.get(service, 0),
                first_anomaly_unix_nano=min(a.start_unix_nano for a in found),
                max_score=max(a.score for a in found),
                reason=_reason(is_symptomatic, bad_callers, bad_callees),
            )
        )
    ranks.sort(
        key=lambda r: (
            not r.symptomatic,
            bool(r.anomalous_callees),
            -len(r.anomalous_callers),
            -r.depth,
            r.first_anomaly_unix_nano,
            -r.max_score,
            r.service_name,
        )
    )
    return ranks


def _depths(nodes: set[str], callers: dict[str, set[str]]) -> dict[str, int]:
    """Longest path (in edges) to each node within ``nodes``; cycles are cut by a bound."""
    depth = dict.fromkeys(nodes, 0)
    for _ in range(len(nodes)):  # Bellman-Ford-style relaxation, at most |nodes| rounds
        changed = False
        for node in nodes:
            for caller in callers.get(node, ()):
                if caller in nodes and depth[caller] + 1 > depth[node]:
                    depth[node] = min(depth[caller] + 1, len(nodes))
                    changed = True
        if not changed:
            break
    return depth


def _reason(symptomatic: bool, bad_callers: list[str], bad_callees: list[str]) -> str:
    if not symptomatic:
        return "only its traffic changed, usually a consequence of its callers' trouble"
    if bad_callees:
        return (
            f"anomalous, but so is its callee {_names(bad_callees)}: the fault may be further down"
        )
    if bad_callers:
        return (
            f"deepest anomalous service: its caller {_names(bad_callers)} "
            "is anomalous too and none of its callees is"
        )
    return "anomalous; no caller or callee of it is anomalous in this problem"


def _names(services: list[str]) -> str:
    shown = ", ".join(services[:3])
    return shown if len(services) <= 3 else f"{shown} and {len(services) - 3} more"


def describe_anomaly(anomaly: Anomaly) -> str:
    """One line for an anomaly: series, direction, baseline and observed value with unit.

    Example: ``"http.server.request.duration.p99 up: 0.38 -> 3.5 s (score 41.2)"``.
    """
    unit = f" {anomaly.unit}" if anomaly.unit else ""
    return (
        f"{anomaly.name} {anomaly.direction}: {anomaly.baseline:.4g} -> "
        f"{anomaly.observed:.4g}{unit} (score {anomaly.score:.1f})"
    )


def _title(members: list[Anomaly], services: list[str]) -> str:
    if services:
        origin = services[0]
        own = [a for a in members if a.service_name == origin]
        strongest = max(own, key=lambda a: (a.signal != "traffic", a.score))
        others = len(services) - 1
        more = f" (+{others} more service{'s' if others != 1 else ''})" if others else ""
        return f"{origin}: {describe_anomaly(strongest)}{more}"
    strongest = max(members, key=lambda a: a.score)
    return describe_anomaly(strongest)
