"""Self time when instrumentation parents a call beside the span that made it (issue 21).

Spring Cloud Gateway records ``FilteringWebHandler.handle`` and the ``HTTP POST`` it issues as
siblings under the server span ``/*`` (the Nezha traces, 2023-01-30). Counting the handler's
whole interval as its own work made the gateway's self time the whole trace while its
critical-path time was 2 ms. The trace below has that shape, with the times (ms) of the Nezha
trace ``fa2dc015…`` at 13:14:54, where the call waits a second on the delayed network.
"""

from coremetry.analysis import analyse_trace, interval_union_ns, self_intervals
from coremetry.observability.self_time import service_intervals
from coremetry.store import Span, SpanKind

MS = 1_000_000
T0 = 1_675_084_494_168 * MS


def span(
    span_id: str, parent: str, service: str, name: str, kind: SpanKind, start: float, end: float
) -> Span:
    return Span(
        trace_id="fa2dc0153b97ce4a6ea88e2a1d301545",
        span_id=span_id,
        parent_span_id=parent,
        service_name=service,
        name=name,
        kind=kind,
        start_time_unix_nano=T0 + round(start * MS),
        end_time_unix_nano=T0 + round(end * MS),
    )


GATEWAY, TRAVEL = "ts-gateway-service", "ts-travel-service"
SPANS = [
    span("a" * 16, "", GATEWAY, "/*", SpanKind.SERVER, 0.0, 2058.1),
    span("b" * 16, "a" * 16, GATEWAY, "FilteringWebHandler.handle", SpanKind.INTERNAL, 0.8, 2057.7),
    span("c" * 16, "a" * 16, GATEWAY, "HTTP POST", SpanKind.CLIENT, 1.8, 2057.9),
    span(
        "d" * 16, "c" * 16, TRAVEL, "/api/v1/travelservice/trips/left", SpanKind.SERVER, 1011, 1053
    ),
    span("e" * 16, "d" * 16, TRAVEL, "TripRepository.findAll", SpanKind.INTERNAL, 1014.7, 1021.6),
]


def test_a_wrapper_beside_the_call_it_made_has_only_its_own_time() -> None:
    analysis = analyse_trace(SPANS)
    nodes = {n.span.name: n for n in analysis.nodes}
    handler = nodes["FilteringWebHandler.handle"]
    # Its sibling HTTP POST covers it from 1.8 ms on: only 0.8 .. 1.8 ms is its own.
    assert handler.self_time_ns == 1 * MS
    assert self_intervals(handler) == [(T0 + 800_000, T0 + 1_800_000)]
    # The call itself keeps its wait outside travel's spans (its self time as Jaeger shows it).
    post = nodes["HTTP POST"]
    assert post.self_time_ns == round((2057.9 - 1.8) * MS) - 42 * MS
    # The server span's children cover it but for 0.8 ms at the start and 0.2 ms at the end.
    assert nodes["/*"].self_time_ns == 1 * MS
    # Travel's spans: plain duration minus children (no sibling calls).
    assert nodes["/api/v1/travelservice/trips/left"].self_time_ns == round((42 - 6.9) * MS)


def test_the_gateway_self_time_is_small_and_its_wait_is_shown_apart() -> None:
    analysis = analyse_trace(SPANS)
    own, wait = service_intervals(analysis.nodes, self_intervals)
    gateway_own = interval_union_ns(own[GATEWAY])
    gateway_wait = interval_union_ns(wait[GATEWAY])
    # Own work: 0 .. 1.8 ms (server, then handler) and the server's last 0.2 ms.
    assert gateway_own == 2 * MS
    assert gateway_wait == round((2057.9 - 1.8 - 42) * MS)
    # In line with the critical path: the gateway's own path time is its self time, and the
    # call's wait counts for travel there.
    critical = analysis.critical_time_by_service()
    assert critical[GATEWAY] == (gateway_own, 0)
    assert critical[TRAVEL][1] == gateway_wait
    assert gateway_own + gateway_wait + 42 * MS == analysis.duration_ns


def test_parallel_plain_spans_keep_their_time() -> None:
    # Two parallel database calls (no callee service) under one span: neither loses time.
    spans = [
        span("a" * 16, "", TRAVEL, "handler", SpanKind.SERVER, 0, 100),
        span("b" * 16, "a" * 16, TRAVEL, "SELECT a", SpanKind.CLIENT, 10, 60),
        span("c" * 16, "a" * 16, TRAVEL, "SELECT b", SpanKind.CLIENT, 20, 90),
    ]
    nodes = {n.span.name: n for n in analyse_trace(spans).nodes}
    assert nodes["SELECT a"].self_time_ns == 50 * MS
    assert nodes["SELECT b"].self_time_ns == 70 * MS
    assert nodes["handler"].self_time_ns == 20 * MS
