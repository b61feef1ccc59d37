"""Critical-path time per service over many traces: whose time grew in the slow ones.

A slow callee makes every caller slow (the caller's latency *includes* the callee's), so the
service with the highest raw latency is usually the front door, not the cause. Summing each
trace's critical path (:mod:`.trace_analysis`) by the service it is attributed to — the
service doing the work, or, for a span waiting on a call into another service, that callee
(network and queueing are the callee's latency as its callers see it) — and comparing slow
traces with typical ones shows whose share grew: the likely origin.

:class:`CriticalPathTally` accumulates traces (optionally scoped to one service and its
downstream), analysed (:meth:`~CriticalPathTally.add`) or straight from their spans
(:meth:`~CriticalPathTally.add_spans`: the same tally for a fraction of the work);
:func:`critical_path_excess` compares a slow tally with a typical one. All times are
nanoseconds; means are per trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from coremetry.store import Span, SpanKind

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

    def add_spans(self, spans: Sequence[Span], scope: str | None = None) -> None:
        """Add one trace from its spans: the same as ``add(analyse_trace(spans), scope)``.

        Cheaper (about a third of the time, and no object per span): only what the tally
        needs is computed — the main root's tree is linked, adjusted for clock skew and walked
        for its critical path by the same rules as :func:`~coremetry.analysis.analyse_trace`
        (module docstring of :mod:`.trace_analysis`), without self times, sibling calls, the
        depth-first node list or the other roots' trees. Nothing is kept of the trace.

        Args:
            spans: the spans of one trace, any order, at least one.
            scope: as for :meth:`add`.

        Raises:
            ValueError: ``spans`` is empty.
        """
        if not spans:
            raise ValueError("a trace needs at least one span")
        duration, segments = _critical_segments(spans, scope)
        self.traces += 1
        self.duration_ns += duration
        for target, waiting, inside, length in segments:
            if scope is not None and target != scope and not inside:
                continue
            bucket = self.waiting if waiting else self.own
            bucket[target] = bucket.get(target, 0) + length

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


_CALL_KINDS: Final = frozenset({SpanKind.CLIENT, SpanKind.PRODUCER})
_PLAIN_KINDS: Final = frozenset({SpanKind.INTERNAL, SpanKind.UNSPECIFIED})


def _critical_segments(
    spans: Sequence[Span], scope: str | None
) -> tuple[int, list[tuple[str, bool, bool, int]]]:
    """The main root's duration and its critical path's segments, unmerged, in no order.

    Each segment is ``(attributed service, waiting, inside scope, nanoseconds)``. The rules
    of :func:`~coremetry.analysis.analyse_trace`, over span indexes instead of
    :class:`SpanNode` objects, and only for the main root's tree: every tie is broken as
    there (children by adjusted start, span id, then position in ``spans``; the main root
    the longest, then earliest, then first). ``inside`` is "the span or an ancestor belongs
    to ``scope``" (always false without a scope).
    """
    count = len(spans)
    by_id: dict[str, int] = {}
    for index, span in enumerate(spans):
        by_id.setdefault(span.span_id, index)
    parent = [-1] * count
    for index, span in enumerate(spans):
        if span.parent_span_id:
            found = by_id.get(span.parent_span_id, -1)
            if found != index:
                parent[index] = found
    # Parent cycles (corrupt data): cut at the first revisit, as _link does.
    state = [0] * count  # 1 = on the current walk, 2 = known to reach a root
    for index in range(count):
        walk: list[int] = []
        current = index
        while current != -1 and state[current] == 0:
            state[current] = 1
            walk.append(current)
            current = parent[current]
        if current != -1 and state[current] == 1:
            parent[current] = -1
        for visited in walk:
            state[visited] = 2
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    for index in range(count):
        above = parent[index]
        if above == -1:
            roots.append(index)
        else:
            kids = children.get(above)
            if kids is None:
                children[above] = [index]
            else:
                kids.append(index)
    durations = [span.duration_ns for span in spans]
    main = min(roots, key=lambda r: (-durations[r], spans[r].start_time_unix_nano))
    # Clock skew over the main root's tree (_adjust_skew); ``start`` holds adjusted starts.
    start: dict[int, int] = {}
    inside: dict[int, bool] = {}
    stack: list[tuple[int, int, bool]] = [(main, 0, False)]
    while stack:
        index, shift, within = stack.pop()
        span = spans[index]
        at = span.start_time_unix_nano + shift
        above = parent[index]
        if above != -1:
            parent_span = spans[above]
            parent_start = start[above]
            if (
                durations[above] > 0
                and span.service_name != parent_span.service_name
                and span.kind != SpanKind.CONSUMER
                and parent_span.kind != SpanKind.PRODUCER
                and at < parent_start
            ):
                spare = durations[above] - durations[index]
                target = parent_start + spare // 2 if spare >= 0 else parent_start
                shift += target - at
                at = target
        start[index] = at
        within = within or (scope is not None and span.service_name == scope)
        inside[index] = within
        for child in children.get(index, ()):
            stack.append((child, shift, within))
    callees: dict[int, str | None] = {}

    def callee(index: int) -> str | None:
        # SpanNode.callee: the longest remote child (first in start order) of a call.
        if index in callees:
            return callees[index]
        kids = children.get(index, [])
        service = spans[index].service_name
        remote = sorted(
            (c for c in kids if spans[c].service_name != service),
            key=lambda c: (start[c], spans[c].span_id),
        )
        found: str | None = None
        kind = spans[index].kind
        if remote and (kind in _CALL_KINDS or (kind in _PLAIN_KINDS and len(remote) == len(kids))):
            found = spans[max(remote, key=lambda c: durations[c])].service_name
        callees[index] = found
        return found

    segments: list[tuple[str, bool, bool, int]] = []

    def emit(index: int, low: int, high: int) -> None:
        if high > low:
            service = spans[index].service_name
            target = callee(index) or service
            segments.append((target, target != service, inside[index], high - low))

    def frame(index: int, low: int, point: int) -> list[int]:
        # _frame's order: latest end first, then start, span id and position.
        kids = sorted(
            children.get(index, ()),
            key=lambda c: (-(start[c] + durations[c]), start[c], spans[c].span_id),
        )
        return [index, low, point, 0, *kids]

    # The backward walk (_critical_path); a frame is [node, low, point, next kid, *kids].
    frames = [frame(main, start[main], start[main] + durations[main])]
    while frames:
        top = frames[-1]
        node, low = top[0], top[1]
        pushed = False
        while 4 + top[3] < len(top) and top[2] > low:
            child = top[4 + top[3]]
            top[3] += 1
            child_start = max(start[child], low)
            child_end = min(start[child] + durations[child], top[2])
            if child_end <= child_start:
                continue
            emit(node, child_end, top[2])
            top[2] = child_start
            frames.append(frame(child, child_start, child_end))
            pushed = True
            break
        if not pushed:
            emit(node, low, top[2])
            frames.pop()
    return durations[main], segments


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
