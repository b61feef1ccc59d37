"""Critical-path time per service over many traces: whose time grew in the slow ones.

A slow callee makes every caller slow (the caller's latency *includes* the callee's), so the
service with the highest raw latency is usually the front door, not the cause. Summing each
trace's critical path (:mod:`.trace_analysis`) by the service it is attributed to — the
service doing the work, or, for a span waiting on a call into another service, that callee
(network and queueing are the callee's latency as its callers see it) — and comparing slow
traces with typical ones shows whose share grew: the likely origin.

:class:`CriticalPathTally` accumulates traces (optionally scoped to one service and its
downstream); :func:`critical_path_excess` compares a slow tally with a typical one. All times
are nanoseconds; means are per trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .trace_analysis import SpanNode, TraceAnalysis

__all__ = ["CriticalPathTally", "ServiceExcess", "critical_path_excess"]


@dataclass
class CriticalPathTally:
    """Critical-path nanoseconds per service over a set of traces.

    Attributes:
        traces: traces added.
        duration_ns: their summed durations.
        own: per service, critical-path time in its own spans.
        waiting: per service, critical-path time its callers spent waiting on calls into it.
    """

    traces: int = 0
    duration_ns: int = 0
    own: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)

    def add(self, analysis: TraceAnalysis, scope: str | None = None) -> None:
        """Add one analysed trace.

        Args:
            analysis: the trace (:func:`~coremetry.analysis.analyse_trace`).
            scope: count only segments inside this service's subtrees or attributed to it
                ("the service and its downstream"); ``None`` counts every segment.
        """
        self.traces += 1
        self.duration_ns += analysis.duration_ns
        inside = _scope_nodes(analysis, scope)
        for segment in analysis.critical_path:
            target = segment.attributed_service
            if scope is not None and target != scope and segment.node not in inside:
                continue
            bucket = self.waiting if segment.waiting else self.own
            bucket[target] = bucket.get(target, 0) + segment.duration_ns

    def mean_ns(self, service: str) -> tuple[float, float]:
        """``(own, waiting)`` critical-path nanoseconds of ``service`` per trace."""
        if self.traces == 0:
            return 0.0, 0.0
        return (
            self.own.get(service, 0) / self.traces,
            self.waiting.get(service, 0) / self.traces,
        )

    def services(self) -> set[str]:
        """Every service with critical-path time."""
        return set(self.own) | set(self.waiting)


def _scope_nodes(analysis: TraceAnalysis, scope: str | None) -> set[SpanNode]:
    """Nodes of ``scope`` and everything below them (nodes are in depth-first order)."""
    if scope is None:
        return set()
    inside: set[SpanNode] = set()
    for node in analysis.nodes:
        if node.service == scope or (node.parent is not None and node.parent in inside):
            inside.add(node)
    return inside


@dataclass(frozen=True)
class ServiceExcess:
    """How much one service's critical-path time grew from typical to slow traces.

    Attributes:
        service_name: the service.
        excess_ns: mean per slow trace minus mean per typical trace (own plus waiting).
        slow_ns: its mean critical-path time per slow trace.
        typical_ns: its mean per typical trace.
        own_ns: the part of ``slow_ns`` in its own spans.
        waiting_ns: the part of ``slow_ns`` its callers spent waiting on it.
    """

    service_name: str
    excess_ns: float
    slow_ns: float
    typical_ns: float
    own_ns: float
    waiting_ns: float


def critical_path_excess(
    slow: CriticalPathTally, typical: CriticalPathTally
) -> list[ServiceExcess]:
    """Per service, the growth of its critical-path time from typical to slow traces.

    Returns:
        One :class:`ServiceExcess` per service seen in either tally, largest excess first
        (ties by name).
    """
    found: list[ServiceExcess] = []
    for name in sorted(slow.services() | typical.services()):
        slow_own, slow_wait = slow.mean_ns(name)
        typical_own, typical_wait = typical.mean_ns(name)
        found.append(
            ServiceExcess(
                service_name=name,
                excess_ns=(slow_own + slow_wait) - (typical_own + typical_wait),
                slow_ns=slow_own + slow_wait,
                typical_ns=typical_own + typical_wait,
                own_ns=slow_own,
                waiting_ns=slow_wait,
            )
        )
    found.sort(key=lambda e: (-e.excess_ns, e.service_name))
    return found
