"""Per-service self time of one trace: own work apart from time waiting on calls (issue 21).

``get_trace`` lists, per service, ``self_time_ms`` — the union of its spans' self intervals
(:func:`coremetry.analysis.self_intervals`: not covered by a child, nor, for a span that is not
a call, by a sibling call into another service) over its spans that are *not* calls into another
service — and ``call_wait_ms``, the same union over its spans that are such calls: the time its
calls spent outside the callee's spans (network, the callee's queueing), which the critical path
attributes to the callee. So a gateway that only forwards a request shows a few milliseconds of
self time and the forwarding wait as ``call_wait_ms``, in line with its ``critical_path_ms``.
"""

from collections.abc import Callable, Iterable

from coremetry.analysis import SpanNode
from coremetry.analysis import self_intervals as self_intervals

__all__ = ["self_intervals", "service_intervals"]

Intervals = dict[str, list[tuple[int, int]]]


def service_intervals(
    nodes: Iterable[SpanNode], intervals_of: Callable[[SpanNode], list[tuple[int, int]]]
) -> tuple[Intervals, Intervals]:
    """``(own, call_wait)``: per service, the self intervals of its spans, split by kind.

    Args:
        nodes: the spans of an analysed trace.
        intervals_of: a span's self intervals (adjusted unix ns).

    Returns:
        Per ``service.name``, the intervals of its spans that are not calls into another service
        (``own``) and of those that are (``call_wait``); overlapping intervals are not merged
        (take :func:`coremetry.analysis.interval_union_ns` of each list).
    """
    own: Intervals = {}
    wait: Intervals = {}
    for node in nodes:
        target = wait if node.callee() is not None else own
        target.setdefault(node.service, []).extend(intervals_of(node))
    return own, wait
