"""One trace as a tree: self time, clock-skew adjustment, the critical path and who it waits on.

Pure functions over the spans of one trace (:class:`~coremetry.store.Span`, any order); no I/O.
Work is linear in the number of spans (plus a sort of each span's children), iterative
everywhere (no recursion: a 10,000-deep chain of spans is fine).

**Tree.** Spans are linked by ``parent_span_id``. A span whose parent is absent (a root, or an
orphan whose parent was not stored) starts a tree; the *main root* is the longest of them (ties:
the earliest). Spans in a parent cycle (corrupt data) are cut loose at the first revisit and
become roots. Children are ordered by start time.

**Clock skew.** Spans from different hosts carry different clocks. A child in another service
that *starts before* its parent (a server cannot receive a request before its client sent it) is
shifted, with its whole subtree, so that it sits centred in its parent — splitting the network
time evenly — or starts with it when it is the longer of the two: Zipkin's
``CorrectForClockSkew`` rule (``openzipkin/zipkin``,
``zipkin/src/main/java/zipkin2/internal/CorrectForClockSkew.java``). Not shifted: asynchronous
pairs (the child a CONSUMER, the parent a PRODUCER), parents without a duration (Zipkin spans
recorded without one), and children that only *end* after their parent (a client that gave up
early looks the same as skew). Those keep their times and are clamped to the parent's interval
where intervals are combined below. ``skew_adjusted`` counts shifted spans.

**Self time** of a span: its duration minus the union of its children's intervals clamped to the
span's own interval; never negative (in nanoseconds). A span that is not itself a call into
another service also loses the time a *sibling* call into another service overlaps it: such a
sibling is work the span delegated but that instrumentation parented beside it (Spring Cloud
Gateway's ``FilteringWebHandler.handle`` sits beside the ``HTTP POST`` it issues, both under
the server span), so the wrapper did not do that work itself. The cost: a span running truly in
parallel with a sibling's remote call shows less self time than it had (issue 21: without
this, the gateway's self time was the whole trace while its critical-path time was 2 ms).
:func:`self_intervals` gives the stretches; ``SpanNode.self_time_ns`` their total.

**Critical path**: the chain of work that determined the root's end, by the usual backward walk
(Jaeger's critical-path algorithm, ``jaegertracing/jaeger-ui``,
``packages/jaeger-ui/src/components/TracePage/CriticalPath/index.tsx``): start at the root's end;
among the children clamped to the span, take the one that ends last at or before the current
point (a child still running at that point counts up to it), walk into it, continue from its
start; the span's own time between children is on the path. The result is a list of
:class:`PathSegment` in time order that tile the root's interval.

**Waiting on a callee.** A segment of a span that is a call into another service — kind CLIENT
or PRODUCER with a child in another service, or an INTERNAL/UNSPECIFIED span all of whose
children are in other services — is time the caller spent waiting outside the callee's own
spans: network transfer and the callee's queueing. :attr:`PathSegment.attributed_service`
names that callee, so a delay injected on a callee's network shows against the callee, not
against the caller whose client span happens to hold the time.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from coremetry.store import Span, SpanKind, StatusCode

__all__ = [
    "PathSegment",
    "SpanNode",
    "TraceAnalysis",
    "analyse_trace",
    "interval_union_ns",
    "self_intervals",
]

_CALL_KINDS: Final = frozenset({SpanKind.CLIENT, SpanKind.PRODUCER})
_PLAIN_KINDS: Final = frozenset({SpanKind.INTERNAL, SpanKind.UNSPECIFIED})


@dataclass(eq=False)
class SpanNode:
    """One span in the tree, with skew-adjusted times.

    Attributes:
        span: the stored span.
        parent: the parent node, ``None`` for a root or an orphan.
        children: child nodes ordered by adjusted start.
        depth: 0 for a root.
        start_ns: adjusted start, unix nanoseconds.
        end_ns: adjusted end, unix nanoseconds (``>= start_ns``).
        skew_shift_ns: how far the span was shifted for clock skew (0 when not).
        self_time_ns: the total of :func:`self_intervals` (duration minus the children's
            clamped intervals and, unless the span is a call, minus overlapping sibling calls).
        orphan: the span names a parent that is not in the trace.
        child_calls: merged ``(start_ns, end_ns)`` intervals of the children that are calls
            into another service (what :func:`self_intervals` takes from their siblings).
    """

    span: Span
    parent: "SpanNode | None" = None
    children: list["SpanNode"] = field(default_factory=list)
    depth: int = 0
    start_ns: int = 0
    end_ns: int = 0
    skew_shift_ns: int = 0
    self_time_ns: int = 0
    orphan: bool = False
    child_calls: list[tuple[int, int]] = field(default_factory=list)
    _callee: str | None = field(default=None, init=False, repr=False)
    _callee_known: bool = field(default=False, init=False, repr=False)

    @property
    def duration_ns(self) -> int:
        """Adjusted end minus adjusted start (the stored duration), nanoseconds."""
        return self.end_ns - self.start_ns

    @property
    def service(self) -> str:
        """The span's ``service.name``."""
        return self.span.service_name

    @property
    def is_error(self) -> bool:
        """The span's status is ERROR."""
        return self.span.status_code == StatusCode.ERROR

    def callee(self) -> str | None:
        """The service this span waits on when it is a call into another service, else None.

        See "Waiting on a callee" in the module docstring; with several remote children the
        longest one names the callee. Computed once, on first use: :func:`analyse_trace` asks
        only after the clock-skew adjustment (which moves children, and so may change the
        longest), and the analysis asks again for every sibling of every span.
        """
        if not self._callee_known:
            self._callee = self._find_callee()
            self._callee_known = True
        return self._callee

    def _find_callee(self) -> str | None:
        remote = [c for c in self.children if c.service != self.service]
        if not remote:
            return None
        kind = self.span.kind
        if kind in _CALL_KINDS or (kind in _PLAIN_KINDS and len(remote) == len(self.children)):
            return max(remote, key=lambda c: c.duration_ns).service
        return None


@dataclass(frozen=True)
class PathSegment:
    """A stretch of the critical path during which ``node`` itself was the bottleneck.

    Attributes:
        node: the span doing (or waiting for) the work.
        start_ns: segment start, adjusted unix nanoseconds.
        end_ns: segment end, adjusted unix nanoseconds.
        attributed_service: ``node``'s service, or the callee it was waiting on (module
            docstring, "Waiting on a callee").
    """

    node: SpanNode
    start_ns: int
    end_ns: int
    attributed_service: str

    @property
    def duration_ns(self) -> int:
        """Segment length in nanoseconds."""
        return self.end_ns - self.start_ns

    @property
    def waiting(self) -> bool:
        """The segment is time waiting on another service's call."""
        return self.attributed_service != self.node.service


@dataclass
class TraceAnalysis:
    """The analysed trace.

    Attributes:
        nodes: every span in depth-first order (children by start time), roots in start order
            with the main root first.
        root: the main root.
        roots: every root and orphan, main root first.
        critical_path: segments of the main root's critical path in time order.
        skew_adjusted: how many spans were shifted for clock skew.
        cycles_broken: spans cut loose from a parent cycle.
    """

    nodes: list[SpanNode]
    root: SpanNode
    roots: list[SpanNode]
    critical_path: list[PathSegment]
    skew_adjusted: int = 0
    cycles_broken: int = 0

    @property
    def start_ns(self) -> int:
        """Earliest adjusted start of any span, unix nanoseconds."""
        return min(n.start_ns for n in self.nodes)

    @property
    def end_ns(self) -> int:
        """Latest adjusted end of any span, unix nanoseconds."""
        return max(n.end_ns for n in self.nodes)

    @property
    def duration_ns(self) -> int:
        """The main root's duration, nanoseconds (the trace's latency as its caller saw it)."""
        return self.root.duration_ns

    @property
    def async_tail_spans(self) -> int:
        """Spans of the main root's tree that end after the root ended (off the path)."""
        end = self.root.end_ns
        count = 0
        for index, node in enumerate(self.nodes):  # the main root's tree comes first
            if index and node.depth == 0:
                break
            count += node.end_ns > end
        return count

    def critical_time_by_span(self) -> dict[SpanNode, int]:
        """Nanoseconds each span spends on the critical path (spans off the path absent)."""
        totals: dict[SpanNode, int] = {}
        for segment in self.critical_path:
            totals[segment.node] = totals.get(segment.node, 0) + segment.duration_ns
        return totals

    def critical_time_by_service(self) -> dict[str, tuple[int, int]]:
        """Per attributed service: ``(own_ns, waiting_ns)`` on the critical path.

        ``own_ns`` is time in the service's own spans; ``waiting_ns`` is time callers spent
        waiting on calls to it outside its spans (network, queueing).
        """
        totals: dict[str, tuple[int, int]] = {}
        for segment in self.critical_path:
            own, waiting = totals.get(segment.attributed_service, (0, 0))
            if segment.waiting:
                waiting += segment.duration_ns
            else:
                own += segment.duration_ns
            totals[segment.attributed_service] = (own, waiting)
        return totals


def interval_union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by half-open intervals ``(start, end)``; empty ones ignored."""
    total = 0
    current_start: int | None = None
    current_end = 0
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        elif end > current_end:
            current_end = end
    if current_start is not None:
        total += current_end - current_start
    return total


def _gaps(low: int, high: int, covered: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of ``[low, high)`` no interval of ``covered`` covers (clamped first)."""
    gaps: list[tuple[int, int]] = []
    at = low
    for start, end in sorted((max(s, low), min(e, high)) for s, e in covered):
        if end <= start:
            continue
        if start > at:
            gaps.append((at, start))
        at = max(at, end)
    if high > at:
        gaps.append((at, high))
    return gaps


def _sibling_calls(parent: SpanNode) -> list[tuple[int, int]]:
    """The merged intervals of ``parent``'s children that are calls into another service."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((c.start_ns, c.end_ns) for c in parent.children if c.callee()):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged


def self_intervals(node: SpanNode) -> list[tuple[int, int]]:
    """The stretches of ``node``'s interval that are its own work (module docstring, "Self time").

    Args:
        node: a span of an analysed trace (:func:`analyse_trace` fills ``child_calls``).

    Returns:
        Disjoint ``(start_ns, end_ns)`` intervals in time order, adjusted unix nanoseconds.
    """
    covered = [(c.start_ns, c.end_ns) for c in node.children]
    if node.parent is not None and node.callee() is None:
        covered.extend(node.parent.child_calls)
    return _gaps(node.start_ns, node.end_ns, covered)


def _clamped(child: SpanNode, low: int, high: int) -> tuple[int, int]:
    return max(child.start_ns, low), min(child.end_ns, high)


def _link(spans: Sequence[Span]) -> tuple[list[SpanNode], int]:
    """Nodes with parents and children linked; returns the nodes and the cycles broken."""
    by_id: dict[str, SpanNode] = {}
    nodes: list[SpanNode] = []
    for span in spans:
        node = SpanNode(span=span, start_ns=span.start_time_unix_nano)
        node.end_ns = span.start_time_unix_nano + span.duration_ns
        nodes.append(node)
        by_id.setdefault(span.span_id, node)
    for node in nodes:
        parent_id = node.span.parent_span_id
        if not parent_id:
            continue
        parent = by_id.get(parent_id)
        if parent is None or parent is node:
            node.orphan = parent is None
            continue
        node.parent = parent
    # Break parent cycles: walk up from each node, marking; a revisit on the current walk cuts.
    broken = 0
    state: dict[SpanNode, int] = {}  # 1 = on the current walk, 2 = known to reach a root
    for node in nodes:
        walk: list[SpanNode] = []
        current: SpanNode | None = node
        while current is not None and state.get(current) is None:
            state[current] = 1
            walk.append(current)
            current = current.parent
        if current is not None and state.get(current) == 1:
            current.parent = None  # the cycle closes here: cut it loose
            broken += 1
        for visited in walk:
            state[visited] = 2
    for node in nodes:
        if node.parent is not None:
            node.parent.children.append(node)
    return nodes, broken


def _is_async(parent: SpanNode, child: SpanNode) -> bool:
    return child.span.kind == SpanKind.CONSUMER or parent.span.kind == SpanKind.PRODUCER


def _adjust_skew(roots: Sequence[SpanNode]) -> int:
    """Shift cross-service children that start before their parent (module docstring)."""
    shifted = 0
    stack: list[tuple[SpanNode, int]] = [(root, 0) for root in roots]
    while stack:
        node, shift = stack.pop()
        node.start_ns += shift
        node.end_ns += shift
        node.skew_shift_ns = shift
        parent = node.parent
        if (
            parent is not None
            and parent.duration_ns > 0
            and node.service != parent.service
            and not _is_async(parent, node)
            and node.start_ns < parent.start_ns
        ):
            spare = parent.duration_ns - node.duration_ns
            target = parent.start_ns + spare // 2 if spare >= 0 else parent.start_ns
            delta = target - node.start_ns
            node.start_ns += delta
            node.end_ns += delta
            node.skew_shift_ns += delta
            shift += delta
            shifted += 1
        stack.extend((child, shift) for child in node.children)
    return shifted


@dataclass
class _Frame:
    """One span being walked backwards: its lower bound, the current point, its children."""

    node: SpanNode
    low: int
    point: int
    kids: list[SpanNode]
    index: int = 0


def _frame(node: SpanNode, low: int, point: int) -> _Frame:
    # Latest end first (longest first on ties); clamping to a moving point keeps this order.
    kids = sorted(node.children, key=lambda c: (-c.end_ns, c.start_ns))
    return _Frame(node, low, point, kids)


def _critical_path(root: SpanNode) -> list[PathSegment]:
    """The backward walk from the root's end (module docstring), iteratively."""
    segments: list[PathSegment] = []

    def emit(node: SpanNode, start: int, end: int) -> None:
        if end > start:
            callee = node.callee()
            segments.append(PathSegment(node, start, end, callee or node.service))

    stack = [_frame(root, root.start_ns, root.end_ns)]
    while stack:
        top = stack[-1]
        child_frame: _Frame | None = None
        while top.index < len(top.kids) and top.point > top.low:
            child = top.kids[top.index]
            top.index += 1
            child_start, child_end = _clamped(child, top.low, top.point)
            if child_end <= child_start:
                continue
            emit(top.node, child_end, top.point)
            top.point = child_start
            child_frame = _frame(child, child_start, child_end)
            break
        if child_frame is not None:
            stack.append(child_frame)
            continue
        emit(top.node, top.low, top.point)
        stack.pop()
    segments.reverse()
    # Merge neighbours of the same span (a span resumed between two children).
    merged: list[PathSegment] = []
    for segment in segments:
        last = merged[-1] if merged else None
        if last is not None and last.node is segment.node and last.end_ns == segment.start_ns:
            merged[-1] = PathSegment(
                last.node, last.start_ns, segment.end_ns, last.attributed_service
            )
        else:
            merged.append(segment)
    return merged


def analyse_trace(spans: Sequence[Span]) -> TraceAnalysis:
    """Build the tree of one trace and compute self times and the critical path.

    Args:
        spans: the spans of one trace, any order, at least one. Duplicate span ids keep the
            first as the parent target.

    Returns:
        The analysis (see :class:`TraceAnalysis`).

    Raises:
        ValueError: ``spans`` is empty.
    """
    if not spans:
        raise ValueError("a trace needs at least one span")
    nodes, broken = _link(spans)
    roots = [n for n in nodes if n.parent is None]
    skewed = _adjust_skew(roots)
    for node in nodes:
        node.children.sort(key=lambda c: (c.start_ns, c.span.span_id))
    for node in nodes:
        node.child_calls = _sibling_calls(node)
    for node in nodes:
        node.self_time_ns = sum(end - start for start, end in self_intervals(node))
    roots.sort(key=lambda n: (-n.duration_ns, n.start_ns))
    main = roots[0]
    ordered_roots = [main, *sorted(roots[1:], key=lambda n: (n.start_ns, n.span.span_id))]
    ordered: list[SpanNode] = []
    stack = [(root, 0) for root in reversed(ordered_roots)]
    while stack:
        node, depth = stack.pop()
        node.depth = depth
        ordered.append(node)
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return TraceAnalysis(
        nodes=ordered,
        root=main,
        roots=ordered_roots,
        critical_path=_critical_path(main),
        skew_adjusted=skewed,
        cycles_broken=broken,
    )
