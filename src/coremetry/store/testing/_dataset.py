"""The data the checks write: a seeded microservice system (traces, logs) and metric points.

Everything is placed in the last few hours (so a default retention window keeps it) and
built from fixed seeds, so every run writes the same records relative to its base time.
"""

from __future__ import annotations

import random
import time
from typing import Final

import msgspec

from coremetry.store.interface import TimeRange
from coremetry.store.model import (
    Attributes,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

from ._support import HOUR, MINUTE, SECOND


def _base_time() -> int:
    """Three hours ago, on a whole minute: inside any retention window of a day or more."""
    return (time.time_ns() // MINUTE - 180) * MINUTE


def _hex(rng: random.Random, bits: int) -> str:
    return f"{rng.getrandbits(bits) | 1:0{bits // 4}x}"


ODD_SERVICES: Final = (
    "サービス-東京",
    "payments 'svc\"; DROP TABLE spans; --",
    "emoji-🚀-service",
    "with,comma and  spaces",
)
"""Service names a store must carry unchanged: non-ASCII, quotes, SQL, emoji, punctuation."""


class _Dataset(msgspec.Struct):
    base: int
    spans: list[Span]
    logs: list[LogRecord]
    metrics: list[MetricPoint]

    @property
    def window(self) -> TimeRange:
        return TimeRange(start_unix_nano=self.base - HOUR, end_unix_nano=self.base + 3 * HOUR)


def _traces(base: int, rng: random.Random) -> list[Span]:
    """A small microservice system: frontend -> checkout -> payments/inventory, and friends.

    Entry spans are SERVER spans and roots; CLIENT spans call into other services; some
    spans fail; two releases of ``frontend`` (``service.version``) and one of ``checkout``.
    """
    spans: list[Span] = []
    frontend_v1: Attributes = {"service.name": "frontend", "service.version": "1.0.0"}
    frontend_v2: Attributes = {"service.name": "frontend", "service.version": "1.1.0"}
    checkout_res: Attributes = {"service.name": "checkout", "service.version": "2.3"}
    for t in range(48):
        trace_id = _hex(rng, 128)
        start = base + t * 2 * MINUTE + rng.randrange(SECOND)
        total = rng.randrange(20, 400) * 1_000_000
        error = t % 7 == 3
        root_id = _hex(rng, 64)
        route = "GET /checkout" if t % 3 else "GET /cart"
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=root_id,
                service_name="frontend",
                name=route,
                kind=SpanKind.SERVER,
                start_time_unix_nano=start,
                end_time_unix_nano=start + total,
                status_code=StatusCode.ERROR if error else StatusCode.UNSET,
                status_message="upstream failed" if error else "",
                attributes={
                    "http.request.method": "GET",
                    "http.response.status_code": 500 if error else 200,
                    "http.route": route.split(" ")[1],
                    "user.premium": t % 2 == 0,
                },
                resource_attributes=frontend_v1 if t < 24 else frontend_v2,
                scope_name="opentelemetry.instrumentation.flask",
            )
        )
        client_id = _hex(rng, 64)
        call_start = start + 2_000_000
        call = total - 4_000_000
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=client_id,
                parent_span_id=root_id,
                service_name="frontend",
                name="POST checkout",
                kind=SpanKind.CLIENT,
                start_time_unix_nano=call_start,
                end_time_unix_nano=call_start + call,
                status_code=StatusCode.ERROR if error else StatusCode.UNSET,
                resource_attributes=frontend_v1 if t < 24 else frontend_v2,
            )
        )
        server_id = _hex(rng, 64)
        served = call - 1_000_000
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=server_id,
                parent_span_id=client_id,
                service_name="checkout",
                name="POST /checkout",
                kind=SpanKind.SERVER,
                start_time_unix_nano=call_start + 500_000,
                end_time_unix_nano=call_start + 500_000 + served,
                status_code=StatusCode.ERROR if error else StatusCode.OK,
                resource_attributes=checkout_res,
                events=[
                    SpanEvent(
                        time_unix_nano=call_start + 600_000,
                        name="exception" if error else "cart.loaded",
                        attributes={"exception.type": "Timeout"} if error else {"items": t % 5},
                    )
                ],
            )
        )
        for downstream, operation in (("payments", "Charge"), ("inventory", "Reserve")):
            if downstream == "payments" and t % 4 == 0:
                continue
            child_start = call_start + 700_000 + rng.randrange(1_000_000)
            child = rng.randrange(1, max(2, served // 1_000_000 - 2)) * 1_000_000
            fails = error and downstream == "payments"
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=_hex(rng, 64),
                    parent_span_id=server_id,
                    service_name=downstream,
                    name=operation,
                    kind=SpanKind.SERVER,
                    start_time_unix_nano=child_start,
                    end_time_unix_nano=child_start + child,
                    status_code=StatusCode.ERROR if fails else StatusCode.UNSET,
                    attributes={"rpc.system": "grpc", "rpc.method": operation},
                    resource_attributes={"service.name": downstream, "deployment": "prod"},
                )
            )
            if downstream == "inventory":
                # Busy inside, few requests: ranks high by spans, not by requests.
                for q in range(3):
                    spans.append(
                        Span(
                            trace_id=trace_id,
                            span_id=_hex(rng, 64),
                            parent_span_id=spans[-1 - q].span_id,
                            service_name=downstream,
                            name="SELECT stock",
                            kind=SpanKind.INTERNAL,
                            start_time_unix_nano=child_start + 10_000 * (q + 1),
                            end_time_unix_nano=child_start + 10_000 * (q + 1) + 5_000,
                            resource_attributes={"service.name": downstream},
                        )
                    )
        # Asynchronous work: checkout publishes, mailer consumes (a CONSUMER entry span).
        if t % 2:
            producer_id = _hex(rng, 64)
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=producer_id,
                    parent_span_id=server_id,
                    service_name="checkout",
                    name="orders publish",
                    kind=SpanKind.PRODUCER,
                    start_time_unix_nano=call_start + 850_000,
                    end_time_unix_nano=call_start + 950_000,
                    resource_attributes=checkout_res,
                )
            )
            consumed = call_start + served + rng.randrange(5, 50) * 1_000_000
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=_hex(rng, 64),
                    parent_span_id=producer_id,
                    service_name="mailer",
                    name="orders process",
                    kind=SpanKind.CONSUMER,
                    start_time_unix_nano=consumed,
                    end_time_unix_nano=consumed + rng.randrange(1, 30) * 1_000_000,
                    status_code=StatusCode.ERROR if t % 5 == 1 else StatusCode.UNSET,
                    resource_attributes={"service.name": "mailer", "service.version": "0.9"},
                )
            )
        # An internal span and an odd-named service now and then.
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=_hex(rng, 64),
                parent_span_id=server_id,
                service_name="checkout",
                name="compute-total",
                kind=SpanKind.INTERNAL,
                start_time_unix_nano=call_start + 800_000,
                end_time_unix_nano=call_start + 800_000 + rng.randrange(100_000, 900_000),
                resource_attributes=checkout_res,
            )
        )
        odd = ODD_SERVICES[t % len(ODD_SERVICES)]
        odd_start = call_start + 900_000
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=_hex(rng, 64),
                parent_span_id=server_id,
                service_name=odd,
                name=f"op {odd}",
                kind=SpanKind.SERVER,
                start_time_unix_nano=odd_start,
                end_time_unix_nano=odd_start + rng.randrange(1, 50) * 100_000,
                attributes={"odd.key with spaces": "välue ✓"},
            )
        )
    return spans


_BODIES: Final = (
    "Order {n} not found for user {u}",
    "Payment declined: card expired for order {n}",
    "Connection timeout after 3000 ms to inventory-db",
    "Cache miss for key cart:{u}",
    "Reserved {n} items in warehouse Zürich",
    "GET /checkout completed in {n} ms",
    "Retrying request {n} (attempt 2 of 3)",
)


def _logs(base: int, spans: list[Span], rng: random.Random) -> list[LogRecord]:
    logs: list[LogRecord] = []
    services = ["frontend", "checkout", "payments", "inventory", *ODD_SERVICES]
    severities = [
        (5, "DEBUG"),
        (9, "INFO"),
        (9, "INFO"),
        (13, "WARN"),
        (17, "ERROR"),
        (21, "FATAL"),
    ]
    linked = [s for s in spans if s.kind == SpanKind.SERVER]
    for i in range(260):
        number, text = severities[i % len(severities)]
        template = _BODIES[i % len(_BODIES)]
        body = template.format(n=rng.randrange(1000), u=rng.randrange(50))
        # Some records share a timestamp: pages must still neither lose nor repeat them.
        at = base + (i // 3) * 20 * SECOND + (0 if i % 3 else 7)
        span = linked[i % len(linked)] if i % 2 == 0 else None
        logs.append(
            LogRecord(
                time_unix_nano=at,
                observed_time_unix_nano=at + 1_000,
                severity_number=number,
                severity_text=text,
                body=body,
                service_name=services[i % len(services)],
                trace_id=span.trace_id if span is not None else "",
                span_id=span.span_id if span is not None else "",
                attributes={"log.iostream": "stdout", "thread.id": i % 4},
                resource_attributes={"service.name": services[i % len(services)]},
            )
        )
    return logs


def make_dataset(seed: int = 7) -> _Dataset:
    """The traces and logs most checks write, from ``seed``, based three hours ago.

    Metric points come from the ``_*_points`` builders, which each metric check writes itself.
    """
    rng = random.Random(seed)
    base = _base_time()
    spans = _traces(base, rng)
    return _Dataset(base=base, spans=spans, logs=_logs(base, spans, rng), metrics=[])


def _big_trace(base: int) -> list[Span]:
    """250 spans in one trace, many starting at the same nanosecond (ties by span id)."""
    rng = random.Random(99)
    trace_id = _hex(rng, 128)
    root = _hex(rng, 64)
    spans = [
        Span(
            trace_id=trace_id,
            span_id=root,
            service_name="batch",
            name="run",
            kind=SpanKind.SERVER,
            start_time_unix_nano=base + HOUR,
            end_time_unix_nano=base + HOUR + 10 * SECOND,
        )
    ]
    for i in range(249):
        start = base + HOUR + (i // 10) * 1_000_000
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=_hex(rng, 64),
                parent_span_id=root,
                service_name="batch",
                name=f"step {i % 13}",
                kind=SpanKind.INTERNAL,
                start_time_unix_nano=start,
                end_time_unix_nano=start + 500_000,
                links=[SpanLink(trace_id=trace_id, span_id=root, attributes={"i": i})]
                if i % 50 == 0
                else [],
            )
        )
    return spans


_NAN: Final = float("nan")
_INF: Final = float("inf")


def _gauge_points(base: int) -> list[MetricPoint]:
    """CPU utilisation of three pods every 10 s for 30 min, with a NaN and a +Inf."""
    rng = random.Random(3)
    points: list[MetricPoint] = []
    for pod, service in (("pod-a", "checkout"), ("pod-b", "checkout"), ("pod-c", "frontend")):
        for i in range(180):
            value = rng.random() * 100
            if pod == "pod-a" and i == 17:
                value = _NAN
            if pod == "pod-a" and i == 42:
                value = _INF
            if pod == "pod-b" and i == 43:
                value = -_INF
            labels: Attributes = {"k8s.pod.name": pod, "k8s.node.name": f"node-{pod[-1]}"}
            if pod != "pod-c":
                labels["zone"] = "eu-1"
            points.append(
                MetricPoint(
                    name="container.cpu.utilization",
                    type="gauge",
                    unit="%",
                    description="CPU use of the container",
                    service_name=service,
                    time_unix_nano=base + i * 10 * SECOND,
                    value=value,
                    attributes=labels,
                )
            )
    return points


def _counter_points(base: int) -> list[MetricPoint]:
    """A cumulative monotonic counter per route every 15 s, one with a reset; a delta sum."""
    rng = random.Random(4)
    points: list[MetricPoint] = []
    for route in ("/cart", "/checkout"):
        total = 0.0
        start = base - HOUR
        for i in range(120):
            if route == "/cart" and i == 60:
                total = 0.0  # process restart: the counter starts again
                start = base + i * 15 * SECOND - SECOND
            total += rng.randrange(0, 40)
            points.append(
                MetricPoint(
                    name="http.server.request.count",
                    type="sum",
                    unit="{request}",
                    service_name="frontend",
                    time_unix_nano=base + i * 15 * SECOND,
                    start_time_unix_nano=start,
                    value=total,
                    attributes={"http.route": route},
                    is_monotonic=True,
                    temporality="cumulative",
                )
            )
    # No start times (as scraped from Prometheus): a reset shows only as a decrease.
    total = 0.0
    for i in range(80):
        total = 5.0 if i == 40 else total + rng.randrange(0, 9)
        points.append(
            MetricPoint(
                name="http.server.request.count",
                type="sum",
                unit="{request}",
                service_name="frontend",
                time_unix_nano=base + i * 20 * SECOND + 3 * SECOND,
                value=total,
                attributes={"http.route": "/login"},
                is_monotonic=True,
                temporality="cumulative",
            )
        )
    for i in range(60):
        points.append(
            MetricPoint(
                name="jobs.processed",
                type="sum",
                service_name="worker",
                time_unix_nano=base + i * 30 * SECOND,
                start_time_unix_nano=base + (i - 1) * 30 * SECOND,
                value=float(rng.randrange(0, 10)),
                is_monotonic=True,
                temporality="delta",
            )
        )
    return points


_BOUNDS: Final = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0]


def _histogram_points(base: int) -> list[MetricPoint]:
    """Request durations: a delta histogram per route every 20 s; a cumulative one."""
    rng = random.Random(5)
    points: list[MetricPoint] = []
    for route in ("/cart", "/checkout"):
        for i in range(60):
            counts = [rng.randrange(0, 20) for _ in range(len(_BOUNDS) + 1)]
            points.append(
                MetricPoint(
                    name="http.server.request.duration",
                    type="histogram",
                    unit="ms",
                    service_name="frontend",
                    time_unix_nano=base + i * 20 * SECOND,
                    histogram=HistogramValue(
                        count=sum(counts),
                        sum=float(sum(counts) * 20),
                        bucket_counts=counts,
                        explicit_bounds=list(_BOUNDS),
                    ),
                    attributes={"http.route": route},
                    temporality="delta",
                )
            )
    running = [0] * (len(_BOUNDS) + 1)
    for i in range(60):
        running = [c + rng.randrange(0, 5) for c in running]
        points.append(
            MetricPoint(
                name="rpc.server.duration",
                type="histogram",
                unit="ms",
                service_name="checkout",
                time_unix_nano=base + i * 20 * SECOND,
                start_time_unix_nano=base - MINUTE,
                histogram=HistogramValue(
                    count=sum(running), bucket_counts=list(running), explicit_bounds=list(_BOUNDS)
                ),
                temporality="cumulative",
            )
        )
    return points
