"""Trace comparison against a fault-free reference (:mod:`coremetry.detection.spectrum`)."""

from __future__ import annotations

import pytest

from coremetry.analysis import analyse_trace
from coremetry.detection.spectrum import (
    TraceProfile,
    binomial_tail,
    compare_to_reference,
    kind_error_rates,
    profile_trace,
    slow_by_summary,
)
from coremetry.store import Span, SpanKind, StatusCode

MS = 1_000_000
T0 = 1_767_225_600 * 1_000_000_000


def trace_span(
    number: int,
    sid: int,
    parent: int,
    service: str,
    kind: SpanKind,
    at: float,
    ms: float,
    *,
    error_in: str = "",
) -> Span:
    """Span ``sid`` of trace ``number`` (parent ``parent``, 0 for the root), ``at`` ms after the
    trace's start and ``ms`` long; its status ERROR when ``service`` is ``error_in``."""
    start = T0 + number * 1_000 * MS
    return Span(
        trace_id=f"{number + 1:032x}",
        span_id=f"{sid:016x}",
        parent_span_id=f"{parent:016x}" if parent else "",
        service_name=service,
        name=f"{service} op",
        kind=kind,
        start_time_unix_nano=start + int(at * MS),
        end_time_unix_nano=start + int((at + ms) * MS),
        status_code=StatusCode.ERROR if service == error_in else StatusCode.UNSET,
    )


def profile(
    number: int,
    *,
    slow_db_ms: float = 0.0,
    gateway_ms: float = 50.0,
    error_in: str = "",
) -> TraceProfile:
    """gateway -> orders -> db-proxy; the gateway always spends ``gateway_ms`` of its own."""
    db_ms = 5.0 + slow_db_ms
    orders_ms = 10.0 + db_ms
    total_ms = gateway_ms + orders_ms

    def span(sid: int, parent: int, service: str, kind: SpanKind, at: float, ms: float) -> Span:
        return trace_span(number, sid, parent, service, kind, at, ms, error_in=error_in)

    spans = [
        span(1, 0, "gateway", SpanKind.SERVER, 0.0, total_ms),
        span(2, 1, "gateway", SpanKind.CLIENT, gateway_ms, orders_ms),
        span(3, 2, "orders", SpanKind.SERVER, gateway_ms, orders_ms),
        span(4, 3, "orders", SpanKind.CLIENT, gateway_ms + 10.0, db_ms),
        span(5, 4, "db-proxy", SpanKind.SERVER, gateway_ms + 10.0, db_ms),
    ]
    return profile_trace(analyse_trace(spans))


def test_profile_attributes_critical_path_and_error_origin() -> None:
    one = profile(1, error_in="db-proxy")
    # a failing caller above a failing callee: the callee originated the error
    both = profile_trace(
        analyse_trace(
            [
                Span(
                    trace_id="ab" * 16,
                    span_id="1" * 16,
                    service_name="gateway",
                    name="GET /",
                    kind=SpanKind.SERVER,
                    start_time_unix_nano=T0,
                    end_time_unix_nano=T0 + 10 * MS,
                    status_code=StatusCode.ERROR,
                ),
                Span(
                    trace_id="ab" * 16,
                    span_id="2" * 16,
                    parent_span_id="1" * 16,
                    service_name="orders",
                    name="GET /orders",
                    kind=SpanKind.SERVER,
                    start_time_unix_nano=T0 + 1 * MS,
                    end_time_unix_nano=T0 + 9 * MS,
                    status_code=StatusCode.ERROR,
                ),
            ]
        )
    )
    assert both.error_origins == ["orders"]
    assert one.kind == "gateway gateway op"
    assert one.duration_ns == 65 * MS  # 50 gateway + 10 orders + 5 db-proxy
    assert one.critical_ns["gateway"] == 50 * MS
    assert sum(one.critical_ns.values()) == one.duration_ns
    assert one.error_origins == ["db-proxy"]


def test_an_always_slow_service_is_not_blamed_a_slowed_callee_is() -> None:
    # The gateway is the slowest part of every request, before and during the problem;
    # the database proxy went from 5 ms to 205 ms.
    reference = [profile(i, gateway_ms=500.0) for i in range(10)]
    window = [profile(100 + i, gateway_ms=500.0, slow_db_ms=200.0) for i in range(10)]
    result = compare_to_reference(window, reference)
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "db-proxy"
    assert origin.excess_ms == pytest.approx(200.0)
    assert origin.reference_ms == pytest.approx(5.0)
    assert result.gap_ms == pytest.approx(200.0)
    assert "gateway" not in [c.service_name for c in result.candidates]
    assert "205.0 ms per request vs 5.0 ms before" in origin.describe()


def test_errors_decide_when_requests_are_not_slower() -> None:
    reference = [profile(i) for i in range(20)]
    window = [profile(100 + i, error_in="orders" if i % 2 else "") for i in range(10)]
    result = compare_to_reference(window, reference)
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "orders"
    assert origin.error_share == pytest.approx(0.5)
    assert origin.reference_error_share == 0.0


def test_no_origin_without_a_change() -> None:
    reference = [profile(i) for i in range(10)]
    window = [profile(100 + i) for i in range(10)]
    assert compare_to_reference(window, reference).origin() is None


def test_request_kinds_need_enough_reference_traces() -> None:
    reference = [profile(i) for i in range(2)]
    window = [profile(100 + i, slow_db_ms=200.0) for i in range(5)]
    result = compare_to_reference(window, reference, min_reference=3)
    assert result.compared == 0
    assert result.origin() is None
    with pytest.raises(ValueError, match="min_reference"):
        compare_to_reference(window, reference, min_reference=0)


def test_a_reference_holding_an_earlier_incident_still_describes_the_usual_request() -> None:
    # Medians: 3 of 11 reference traces from an earlier slowdown of the same service do not
    # hide this one.
    reference = [profile(i, slow_db_ms=200.0 if i < 3 else 0.0) for i in range(11)]
    window = [profile(100 + i, slow_db_ms=200.0) for i in range(6)]
    origin = compare_to_reference(window, reference).origin()
    assert origin is not None
    assert origin.service_name == "db-proxy"


def test_a_slight_slowdown_is_not_a_slow_trace() -> None:
    # 2 ms on a 65 ms request (3 %): within the usual, so no trace is slow and nothing is
    # blamed for latency; the comparison still says how many traces it compared.
    reference = [profile(i, slow_db_ms=0.5 * (i % 3)) for i in range(12)]
    window = [profile(100 + i, slow_db_ms=2.0) for i in range(8)]
    result = compare_to_reference(window, reference)
    assert result.compared == 8
    assert result.slow == 0
    assert result.origin() is None


def test_an_error_excess_counts_only_when_chance_does_not_explain_it() -> None:
    reference = [profile(i) for i in range(40)]
    # 3 of 30 requests erring at orders, none of 40 before: what a service that errs now and
    # then shows by chance (binomial tail about 0.03 at the Laplace rate 1/42).
    sporadic = [profile(100 + i, error_in="orders" if i < 3 else "") for i in range(30)]
    # 9 of 30: no chance explains it.
    failing = [profile(200 + i, error_in="orders" if i < 9 else "") for i in range(30)]
    assert compare_to_reference(sporadic, reference).origin() is None
    assert compare_to_reference(sporadic, reference, error_alpha=1.0).origin() is not None
    named = compare_to_reference(failing, reference).origin()
    assert named is not None
    assert named.service_name == "orders"
    assert named.error_share == pytest.approx(0.3)


def test_binomial_tail() -> None:
    assert binomial_tail(0, 10, 0.5) == 1.0
    assert binomial_tail(11, 10, 0.5) == 0.0
    assert binomial_tail(10, 10, 0.5) == pytest.approx(0.5**10)
    assert binomial_tail(1, 3, 0.5) == pytest.approx(1 - 0.125)
    with pytest.raises(ValueError, match="rate"):
        binomial_tail(1, 3, 1.5)


def test_a_request_kind_that_usually_fails_now_and_then_names_nobody() -> None:
    reference = [profile(i) for i in range(40)]  # the few traces read: none failed
    window = [profile(100 + i, error_in="orders" if i < 5 else "") for i in range(30)]
    kind = window[0].kind
    # Against the traces read alone, 5 of 30 is no chance (tail ~0.004): orders is named.
    assert compare_to_reference(window, reference).origin() is not None
    # Every trace summary of the reference hour says this kind fails in a fifth of requests
    # (business errors): 5 of 30 is what it always does.
    usual = kind_error_rates([(kind, i % 5 == 0) for i in range(500)])
    assert usual[kind] == pytest.approx(101 / 502)
    assert compare_to_reference(window, reference, kind_error_rates=usual).origin() is None
    # A kind that never failed and now fails is still named.
    never = kind_error_rates([(kind, False) for _ in range(500)])
    named = compare_to_reference(window, reference, kind_error_rates=never).origin()
    assert named is not None
    assert named.service_name == "orders"


def fan_out(number: int, *, late_calls_ms: float = 0.0, late_cache_ms: float = 0.0) -> TraceProfile:
    """gateway -> orders -> {db-proxy, cache}, one call after the other.

    ``late_calls_ms``: each of orders' two calls waits that much longer before its callee's
    span starts (orders starved of CPU sends and reads every call late);
    ``late_cache_ms``: only the call into the cache waits longer (the cache's network).
    """
    db_call = 5.0 + late_calls_ms
    cache_call = 5.0 + late_calls_ms + late_cache_ms
    orders_ms = 10.0 + db_call + cache_call
    total_ms = 20.0 + orders_ms

    def span(sid: int, parent: int, service: str, kind: SpanKind, at: float, ms: float) -> Span:
        return trace_span(number, sid, parent, service, kind, at, ms)

    first = 20.0 + 10.0
    second = first + db_call
    spans = [
        span(1, 0, "gateway", SpanKind.SERVER, 0.0, total_ms),
        span(2, 1, "gateway", SpanKind.CLIENT, 20.0, orders_ms),
        span(3, 2, "orders", SpanKind.SERVER, 20.0, orders_ms),
        span(4, 3, "orders", SpanKind.CLIENT, first, db_call),
        # the callee's own span: 5 ms, at the end of the call (the wait came before it)
        span(5, 4, "db-proxy", SpanKind.SERVER, first + db_call - 5.0, 5.0),
        span(6, 3, "orders", SpanKind.CLIENT, second, cache_call),
        span(7, 6, "cache", SpanKind.SERVER, second + cache_call - 5.0, 5.0),
    ]
    return profile_trace(analyse_trace(spans))


def test_profile_keeps_each_callers_wait_per_callee() -> None:
    one = fan_out(1, late_calls_ms=40.0)
    assert one.waits_ns["orders"]["db-proxy"] == pytest.approx(40.0 * MS, rel=0.01)
    assert one.waits_ns["orders"]["cache"] == pytest.approx(40.0 * MS, rel=0.01)
    # the wait is still counted for the callee in its critical-path time
    assert one.critical_ns["cache"] == pytest.approx(45.0 * MS, rel=0.01)


def test_a_caller_late_on_every_call_is_blamed_not_its_callees() -> None:
    # orders' CPU contention: both of its calls wait 100 ms longer; neither callee changed.
    reference = [fan_out(i) for i in range(10)]
    window = [fan_out(100 + i, late_calls_ms=100.0) for i in range(10)]
    result = compare_to_reference(window, reference)
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "orders"
    assert result.waiting_callers == ["orders"]
    assert origin.excess_ms == pytest.approx(200.0, rel=0.01)
    assert origin.late_callees == ["cache", "db-proxy"]
    assert "counting its longer waits on cache, db-proxy" in origin.describe()
    # without the per-edge reading each callee would explain half the slowdown
    shares = {c.service_name: c.score for c in result.candidates}
    assert shares.get("cache", 0.0) < 0.05
    assert shares.get("db-proxy", 0.0) < 0.05


def test_one_slow_callee_keeps_its_wait_and_a_slower_one_keeps_the_rest() -> None:
    # Only the cache's network is slow: one edge grew, so the wait stays the cache's.
    reference = [fan_out(i) for i in range(10)]
    window = [fan_out(100 + i, late_cache_ms=150.0) for i in range(10)]
    result = compare_to_reference(window, reference)
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "cache"
    assert result.waiting_callers == []
    # Both edges grew, the cache's by far more: the common 50 ms per call go to orders,
    # the cache keeps its own 300 ms and stays the origin.
    window = [fan_out(200 + i, late_calls_ms=50.0, late_cache_ms=300.0) for i in range(10)]
    result = compare_to_reference(window, reference)
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "cache"
    assert origin.excess_ms == pytest.approx(300.0, rel=0.02)
    assert result.waiting_callers == ["orders"]


def test_slow_by_summary_judges_each_kind_against_its_reference() -> None:
    reference = [("GET /a", 100 * MS + i * MS) for i in range(20)]
    reference += [("GET /b", 1_000 * MS + i * MS) for i in range(20)]
    reference += [("GET /rare", 10 * MS), ("GET /rare", 11 * MS)]
    window = [
        ("GET /a", 105 * MS),  # usual
        ("GET /a", 400 * MS),  # slow for /a
        ("GET /b", 400 * MS),  # fast for /b
        ("GET /b", 2_000 * MS),  # slow for /b
        ("GET /rare", 500 * MS),  # too few reference traces to judge
        ("GET /new", 900 * MS),  # never seen
    ]
    assert slow_by_summary(window, reference) == [1, 3]
    assert slow_by_summary(window, reference, min_reference=2) == [1, 3, 4]
    with pytest.raises(ValueError, match="min_reference"):
        slow_by_summary(window, reference, min_reference=0)


def test_slow_traces_read_besides_the_even_sample_decide_the_latency() -> None:
    # The even sample of the window holds no slow trace (the fault slows few requests);
    # the slow ones picked from the summaries show the db proxy, and do not count for errors.
    reference = [profile(i) for i in range(10)]
    even = [profile(100 + i) for i in range(20)]
    slow = [profile(200 + i, slow_db_ms=300.0, error_in="orders") for i in range(4)]
    assert compare_to_reference(even, reference).origin() is None
    result = compare_to_reference(even, reference, slow_sample=[*slow, even[0]])
    origin = result.origin()
    assert origin is not None
    assert origin.service_name == "db-proxy"
    assert result.slow == 4
    assert result.traces == 20
    assert all(c.error_share == 0.0 for c in result.candidates)
