"""Trace tree, self time, clock skew and critical path on real traces.

The SmartThings trace is a real production capture (957 spans once the decoder merged Zipkin's
fragments, 16 services, long user think-time gaps); ``skew.json`` is Zipkin's clock-skew
example. Properties are checked against independent computations (a sweep over interval
boundaries, the tree re-derived from parent ids), not against the module's own helpers.
"""

import itertools
import random
from collections import defaultdict

import msgspec
import pytest

from coremetry.analysis.trace_analysis import PathSegment, SpanNode, analyse_trace
from coremetry.store import Span, SpanKind

from ._support import SKEW, SMARTTHINGS, spans_of


def covered_by_sweep(low: int, high: int, intervals: list[tuple[int, int]]) -> int:
    """Length of [low, high) covered by the intervals: an independent +1/-1 event sweep."""
    events: list[tuple[int, int]] = []
    for start, end in intervals:
        start, end = max(low, start), min(high, end)
        if end > start:
            events += [(start, 1), (end, -1)]
    events.sort()
    total, active, previous = 0, 0, low
    for at, change in events:
        if active > 0:
            total += at - previous
        active += change
        previous = at
    return total


def check_path_tiles_root(
    nodes: list[SpanNode], analysis_root: SpanNode, path: list[PathSegment]
) -> None:
    assert path[0].start_ns == analysis_root.start_ns
    assert path[-1].end_ns == analysis_root.end_ns
    for before, after in itertools.pairwise(path):
        assert before.end_ns == after.start_ns, "segments are contiguous"
    for segment in path:
        assert segment.end_ns > segment.start_ns
        node = segment.node
        assert node.start_ns <= segment.start_ns
        assert segment.end_ns <= node.end_ns
        ancestor = node
        while ancestor.parent is not None:
            ancestor = ancestor.parent
        assert ancestor is analysis_root, "every path span descends from the main root"


def test_skew_example_server_is_shifted_into_its_client() -> None:
    spans = spans_of(SKEW)
    analysis = analyse_trace(spans)
    by_name = {(n.service, n.span.kind): n for n in analysis.nodes}
    client = by_name[("servicea", SpanKind.CLIENT)]
    server = by_name[("serviceb", SpanKind.SERVER)]
    root = analysis.root
    assert root.service == "servicea"
    assert root.span.kind == SpanKind.SERVER
    # As stored, the server half starts before the client sent the request (skew).
    assert server.span.start_time_unix_nano < client.span.start_time_unix_nano
    assert analysis.skew_adjusted == 1
    assert client.start_ns <= server.start_ns
    assert server.end_ns <= client.end_ns
    assert server.duration_ns == server.span.duration_ns, "a shift keeps the duration"
    # Centred: the client's extra time is split evenly between request and response.
    assert abs((server.start_ns - client.start_ns) - (client.end_ns - server.end_ns)) <= 1
    # Its async child moved with it (same host clock).
    child = next(n for n in analysis.nodes if n.span.name == "async")
    assert child.skew_shift_ns == server.skew_shift_ns != 0
    # Self times: the client only waited on the network (94.539 - 93.577 ms).
    assert client.self_time_ns == client.span.duration_ns - server.span.duration_ns == 962_000
    assert root.self_time_ns == root.span.duration_ns - client.span.duration_ns
    check_path_tiles_root(analysis.nodes, root, analysis.critical_path)
    assert sum(s.duration_ns for s in analysis.critical_path) == root.duration_ns
    # serviceb's async child (65 ms) holds most of the path, the server span the rest of its
    # own time; the client's time is waiting on serviceb.
    on_path = analysis.critical_time_by_span()
    assert max(on_path, key=lambda n: on_path[n]) is child
    assert on_path[child] == child.duration_ns == 65_000_000
    assert on_path[server] == server.self_time_ns
    waiting = [s for s in analysis.critical_path if s.node is client]
    assert waiting
    assert all(s.attributed_service == "serviceb" for s in waiting)


def test_smartthings_tree_matches_parent_ids() -> None:
    spans = spans_of(SMARTTHINGS)
    assert len(spans) == 957
    analysis = analyse_trace(spans)
    assert len(analysis.nodes) == len(spans)
    assert len({id(n) for n in analysis.nodes}) == len(spans), "each span once"
    ids = {s.span_id for s in spans}
    children: defaultdict[str, list[str]] = defaultdict(list)
    for span in spans:
        children[span.parent_span_id].append(span.span_id)
    for node in analysis.nodes:
        expected = sorted(children[node.span.span_id])
        assert sorted(c.span.span_id for c in node.children) == expected
        if node.parent is None:
            assert node.depth == 0
            assert not node.span.parent_span_id or node.span.parent_span_id not in ids
        else:
            assert node.depth == node.parent.depth + 1
    # Depth-first order: every span comes after its parent, and a subtree is contiguous.
    position = {id(n): i for i, n in enumerate(analysis.nodes)}
    for node in analysis.nodes:
        if node.parent is not None:
            assert position[id(node)] > position[id(node.parent)]
    assert analysis.root.parent is None
    assert analysis.root.duration_ns == max(r.duration_ns for r in analysis.roots)
    # The capture spans five minutes of a user clicking through an install flow that hangs
    # below a 37 ms login request's zero-length redirect span.
    assert analysis.end_ns - analysis.start_ns > 300 * 1_000_000_000
    assert analysis.root.duration_ns < 1_000_000_000
    assert analysis.async_tail_spans > 900


def test_smartthings_self_time_is_duration_minus_children_union() -> None:
    analysis = analyse_trace(spans_of(SMARTTHINGS))
    checked = 0
    for node in analysis.nodes:
        intervals = [(c.start_ns, c.end_ns) for c in node.children]
        expected = node.duration_ns - covered_by_sweep(node.start_ns, node.end_ns, intervals)
        assert node.self_time_ns == max(0, expected), node.span.name
        assert 0 <= node.self_time_ns <= node.duration_ns
        checked += bool(node.children)
    assert checked > 100, "the trace has many parents with children"
    overlapping = [
        n
        for n in analysis.nodes
        if sum(c.duration_ns for c in n.children) > n.duration_ns and n.children
    ]
    assert overlapping, "concurrent children exist: a plain sum would go negative"


def test_smartthings_critical_path_tiles_the_root() -> None:
    analysis = analyse_trace(spans_of(SMARTTHINGS))
    path = analysis.critical_path
    check_path_tiles_root(analysis.nodes, analysis.root, path)
    assert sum(s.duration_ns for s in path) == analysis.root.duration_ns
    # Each span's path time never exceeds its own self time plus what its children cannot
    # account for: at most its duration.
    for node, time_ns in analysis.critical_time_by_span().items():
        assert 0 < time_ns <= node.duration_ns
    # Attribution sums to the same total.
    assert (
        sum(own + wait for own, wait in analysis.critical_time_by_service().values())
        == analysis.root.duration_ns
    )


def test_critical_path_takes_the_last_finishing_child() -> None:
    # Under each path span, the child the walk entered first is the one that ends last among
    # those that start before the point the walk had reached.
    analysis = analyse_trace(spans_of(SMARTTHINGS))
    path = analysis.critical_path
    nodes_on_path = {s.node for s in path}
    for node in nodes_on_path:
        kids = [c for c in node.children if c.end_ns > node.start_ns and c.start_ns < node.end_ns]
        if not kids:
            continue
        last = max(min(c.end_ns, node.end_ns) for c in kids)
        entered = [c for c in kids if c in nodes_on_path]
        assert entered, f"{node.span.name}: a span with children hands the path to one"
        assert max(min(c.end_ns, node.end_ns) for c in entered) == last


def test_order_of_input_does_not_matter() -> None:
    spans = spans_of(SMARTTHINGS)
    shuffled = list(spans)
    random.Random(7).shuffle(shuffled)
    first, second = analyse_trace(spans), analyse_trace(shuffled)
    assert [n.span.span_id for n in first.nodes] == [n.span.span_id for n in second.nodes]
    assert [(s.node.span.span_id, s.start_ns, s.end_ns) for s in first.critical_path] == [
        (s.node.span.span_id, s.start_ns, s.end_ns) for s in second.critical_path
    ]


def test_orphans_and_parent_cycles_become_roots() -> None:
    spans = spans_of(SKEW)
    root = next(s for s in spans if not s.parent_span_id)
    child = next(s for s in spans if s.parent_span_id == root.span_id)
    # Corrupt ids: the root names its own descendant as parent (a cycle), and one span's parent
    # is missing altogether.
    looped = msgspec.structs.replace(root, parent_span_id=child.span_id)
    orphan = msgspec.structs.replace(child, span_id="00000000000000ff", parent_span_id="ab" * 8)
    analysis = analyse_trace([*(s for s in spans if s is not root), looped, orphan])
    assert analysis.cycles_broken == 1
    assert len(analysis.nodes) == len(spans) + 1
    assert any(n.orphan and n.span.span_id == "00000000000000ff" for n in analysis.roots)
    check_path_tiles_root(analysis.nodes, analysis.root, analysis.critical_path)


def test_a_ten_thousand_deep_chain_needs_no_recursion() -> None:
    base = 1_700_000_000_000_000_000
    chain = [
        Span(
            trace_id="ab" * 16,
            span_id=f"{i + 1:016x}",
            parent_span_id=f"{i:016x}" if i else "",
            service_name=f"svc-{i % 3}",
            name=f"op-{i}",
            start_time_unix_nano=base + i * 1000,
            end_time_unix_nano=base + 20_000_000 - i * 1000,
        )
        for i in range(10_000)
    ]
    analysis = analyse_trace(chain)
    assert analysis.nodes[-1].depth == 9_999
    assert sum(s.duration_ns for s in analysis.critical_path) == analysis.root.duration_ns


def test_empty_trace_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one span"):
        analyse_trace([])
