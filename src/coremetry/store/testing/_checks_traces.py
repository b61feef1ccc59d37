"""The store conformance suite: the behaviour every :class:`TelemetryStore` backend must have.

Modelled on ``trio.testing.check_two_way_stream``: a backend's tests call
:func:`check_store_conformance` with a factory of *empty* stores, or parametrise over
:data:`CONFORMANCE_CHECKS` so that a failure names the check::

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.name)
    async def test_conformance(check: ConformanceCheck, tmp_path: Path) -> None:
        await check.run(lambda: open_sqlite_store(tmp_path / "t.db", retention_days=0))

The suite uses only the :class:`~coremetry.store.TelemetryStore` protocol, so the embedded
SQLite backend and the ClickHouse backend run it unchanged. Every check opens its own store
(one ``make_store()`` each, sometimes more), writes a dataset built from a fixed seed and
placed in the last few hours (so that a default retention window keeps it), and compares each
query's answer with what a plain Python reference computes from the same records — expected
values are never hard-coded. Failures raise :class:`ConformanceError` (an ``AssertionError``)
whose message says what differed.

What is covered: write (counts, idempotency of spans/logs/points, all-or-nothing on a bad
record), every query's results and order, paging through every item with cursors without
loss or duplicates, limits and totals, ``QueryRejected`` naming the field for bad input (limit,
range, cursor, ids, full-text syntax, regex, step, aggregation), the bucketed RED and log
counts, non-ASCII and odd service names, clock skew (a child starting before its parent),
NaN/±Inf metric values, retention (``delete_before``), ``StoreClosed`` after ``aclose``, and
cancellation leaving the store usable.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Final, Protocol, TypeVar, cast

import msgspec
import trio

from coremetry.store.errors import QueryRejected, StoreClosed, StoreError
from coremetry.store.interface import (
    MAX_LIMIT,
    Aggregation,
    LabelMatcher,
    LogQuery,
    MetricQuery,
    MetricSeries,
    Page,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    TraceSummary,
)
from coremetry.store.model import (
    Attributes,
    AttributeValue,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
    TelemetryBatch,
)

__all__ = [
    "CONFORMANCE_CHECKS",
    "ConformanceCheck",
    "ConformanceError",
    "MakeStore",
    "check_store_conformance",
]

T = TypeVar("T")
N = TypeVar("N", int, float)

MakeStore = Callable[[], AbstractAsyncContextManager[TelemetryStore]]
"""Opens a new, empty store and closes it on exit (e.g. ``lambda: open_sqlite_store(p)``)."""

SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE


class ConformanceError(AssertionError):
    """Raised by a conformance check when the store under test behaves differently."""


class ConformanceCheck(msgspec.Struct, frozen=True):
    """One named check of the suite: ``await check.run(make_store)``."""

    name: str
    run: Callable[[MakeStore], Awaitable[None]]


# -- small assertion helpers (no pytest: this module ships with the package) ----------------


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _equal(actual: object, expected: object, what: str) -> None:
    if actual != expected:
        raise ConformanceError(f"{what}: expected {expected!r}, got {actual!r}")


def _close(actual: float | None, expected: float | None, what: str) -> None:
    if actual is None or expected is None:
        _equal(actual, expected, what)
        return
    if not math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9):
        raise ConformanceError(f"{what}: expected {expected!r}, got {actual!r}")


async def _rejected(call: Awaitable[object], field: str, what: str) -> QueryRejected:
    try:
        await call
    except QueryRejected as exc:
        _equal(exc.field, field, f"{what}: QueryRejected.field")
        _expect(field in str(exc), f"{what}: the message should name {field!r}: {exc}")
        return exc
    raise ConformanceError(f"{what}: expected QueryRejected({field!r}), but the call succeeded")


def _nearest_rank(values: Sequence[N], p: int) -> N | None:
    """Nearest-rank percentile: the value at rank ceil(n * p / 100) of the sorted values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[(len(ordered) * p + 99) // 100 - 1]


class _Fetch(Protocol[T]):
    def __call__(self, *, cursor: str | None) -> Awaitable[Page[T]]: ...


async def _all_pages(fetch: _Fetch[T], what: str, max_pages: int = 10_000) -> list[T]:
    items: list[T] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = await fetch(cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        _expect(bool(page.items), f"{what}: a page with a next_cursor must not be empty")
        cursor = page.next_cursor
    raise ConformanceError(f"{what}: more than {max_pages} pages (a cursor loop?)")


# -- the dataset ----------------------------------------------------------------------------


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


def _dataset(seed: int = 7) -> _Dataset:
    rng = random.Random(seed)
    base = _base_time()
    spans = _traces(base, rng)
    return _Dataset(base=base, spans=spans, logs=_logs(base, spans, rng), metrics=[])


# -- reference computations -----------------------------------------------------------------


def _in_range(t: int, time_range: TimeRange) -> bool:
    return time_range.start_unix_nano <= t < time_range.end_unix_nano


def _is_entry(span: Span) -> bool:
    return span.kind in (SpanKind.SERVER, SpanKind.CONSUMER) or not span.parent_span_id


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _contains_phrase(body: str, phrase: str, *, prefix: bool = False) -> bool:
    words = _tokens(body)
    wanted = _tokens(phrase)
    for i in range(len(words) - len(wanted) + 1):
        window = words[i : i + len(wanted)]
        if window[:-1] == wanted[:-1] and (
            window[-1].startswith(wanted[-1]) if prefix else window[-1] == wanted[-1]
        ):
            return True
    return False


def _text(value: AttributeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


# -- checks: writing ------------------------------------------------------------------------


async def check_write_and_statistics(make_store: MakeStore) -> None:
    """An empty store, one batch written, counts and time extent as written."""
    data = _dataset()
    async with make_store() as store:
        empty = await store.statistics()
        _equal(
            (empty.span_count, empty.log_count, empty.metric_point_count),
            (0, 0, 0),
            "statistics() of an empty store",
        )
        _equal((empty.oldest_unix_nano, empty.newest_unix_nano), (None, None), "empty extent")
        points = _gauge_points(data.base)
        result = await store.write(TelemetryBatch(spans=data.spans, logs=data.logs, metrics=points))
        _equal(result.spans_written, len(data.spans), "spans_written")
        _equal(result.logs_written, len(data.logs), "logs_written")
        _equal(result.metric_points_written, len(points), "metric_points_written")
        _equal(
            (result.spans_duplicate, result.logs_duplicate, result.metric_points_duplicate),
            (0, 0, 0),
            "duplicates on a first write",
        )
        _equal(result.outside_retention, 0, "outside_retention of recent records")
        stats = await store.statistics()
        _equal(stats.span_count, len(data.spans), "statistics().span_count")
        _equal(stats.log_count, len(data.logs), "statistics().log_count")
        _equal(stats.metric_point_count, len(points), "statistics().metric_point_count")
        times = (
            [s.start_time_unix_nano for s in data.spans]
            + [r.time_unix_nano for r in data.logs]
            + [p.time_unix_nano for p in points]
        )
        _equal(stats.oldest_unix_nano, min(times), "statistics().oldest_unix_nano")
        _equal(stats.newest_unix_nano, max(times), "statistics().newest_unix_nano")
        empty_write = await store.write(TelemetryBatch())
        _equal(empty_write.spans_written + empty_write.logs_written, 0, "an empty batch")


async def check_write_idempotent(make_store: MakeStore) -> None:
    """The same records written again (or twice in one batch) are stored once."""
    data = _dataset()
    points = _gauge_points(data.base)
    batch = TelemetryBatch(spans=data.spans, logs=data.logs, metrics=points)
    async with make_store() as store:
        await store.write(batch)
        again = await store.write(batch)
        _equal(again.spans_written, 0, "spans_written on a repeated write")
        _equal(again.spans_duplicate, len(data.spans), "spans_duplicate on a repeated write")
        _equal(again.logs_written, 0, "logs_written on a repeated write")
        _equal(again.logs_duplicate, len(data.logs), "logs_duplicate")
        _equal(again.metric_points_written, 0, "metric_points_written on a repeated write")
        _equal(again.metric_points_duplicate, len(points), "metric_points_duplicate")
        # Within one batch, and a log record differing in one field only is another record.
        log = data.logs[0]
        variant = msgspec.structs.replace(log, attributes={**log.attributes, "thread.id": 99})
        mixed = await store.write(
            TelemetryBatch(spans=[data.spans[0], data.spans[0]], logs=[variant, variant, log])
        )
        _equal((mixed.spans_written, mixed.spans_duplicate), (0, 2), "spans within a batch")
        _equal((mixed.logs_written, mixed.logs_duplicate), (1, 2), "log variant within a batch")
        stats = await store.statistics()
        _equal(stats.span_count, len(data.spans), "span_count after repeated writes")
        _equal(stats.log_count, len(data.logs) + 1, "log_count after repeated writes")
        _equal(stats.metric_point_count, len(points), "metric_point_count after repeats")
        # Attribute order does not make a log record (or a series) new.
        reordered = msgspec.structs.replace(
            log, attributes=dict(reversed(list(log.attributes.items())))
        )
        again_log = await store.write(TelemetryBatch(logs=[reordered]))
        _equal(again_log.logs_duplicate, 1, "a log record with its attributes reordered")


async def check_write_all_or_nothing(make_store: MakeStore) -> None:
    """A batch with one bad record is refused whole, naming the record's field."""
    data = _dataset()
    good = data.spans[:5]
    bad_cases: list[tuple[TelemetryBatch, str]] = [
        (
            TelemetryBatch(
                spans=[*good, msgspec.structs.replace(good[0], trace_id="not-hex", span_id="ab")]
            ),
            "spans[5].trace_id",
        ),
        (
            TelemetryBatch(
                spans=good,
                logs=[msgspec.structs.replace(data.logs[0], span_id="xyz")],
            ),
            "logs[0].span_id",
        ),
        (
            TelemetryBatch(
                logs=data.logs[:3],
                metrics=[
                    MetricPoint(
                        name="bad.histogram",
                        type="histogram",
                        time_unix_nano=data.base,
                        histogram=HistogramValue(count=1, bucket_counts=[1], explicit_bounds=[1.0]),
                    )
                ],
            ),
            "metrics[0].histogram.bucket_counts",
        ),
        (
            TelemetryBatch(
                spans=[*good, msgspec.structs.replace(good[1], start_time_unix_nano=2**64)]
            ),
            "spans[5].start_time_unix_nano",
        ),
    ]
    async with make_store() as store:
        for batch, field in bad_cases:
            try:
                await store.write(batch)
            except QueryRejected as exc:
                _equal(exc.field, field, "the field named by a refused write")
            else:
                raise ConformanceError(f"a batch with a bad {field} was accepted")
            stats = await store.statistics()
            _equal(
                (stats.span_count, stats.log_count, stats.metric_point_count),
                (0, 0, 0),
                f"records stored from a refused batch (bad {field})",
            )
        ok = await store.write(TelemetryBatch(spans=good))
        _equal(ok.spans_written, len(good), "a good batch after refused ones")


# -- checks: traces -------------------------------------------------------------------------


async def check_get_trace(make_store: MakeStore) -> None:
    """A trace's spans come back whole, in start order, pageable, with the right total."""
    data = _dataset()
    big = _big_trace(data.base)
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=[*data.spans, *big]))
        by_trace: dict[str, list[Span]] = defaultdict(list)
        for span in data.spans:
            by_trace[span.trace_id].append(span)
        for trace_id, spans in list(by_trace.items())[:6]:
            page = await store.get_trace(trace_id, limit=MAX_LIMIT)
            expected = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
            _equal(page.items, expected, f"get_trace({trace_id}) spans, round-tripped")
            _equal(page.total, len(spans), "get_trace total")
            _equal(page.next_cursor, None, "get_trace next_cursor on the only page")
            upper = await store.get_trace(trace_id.upper(), limit=1)
            _equal(upper.items[:1], expected[:1], "get_trace with an upper-case trace id")
        expected_big = sorted(big, key=lambda s: (s.start_time_unix_nano, s.span_id))
        trace_id = big[0].trace_id
        for limit in (1, 7, 100):
            paged = await _all_pages(
                partial(store.get_trace, trace_id, limit=limit),
                f"get_trace pages of {limit}",
            )
            _equal(
                [s.span_id for s in paged],
                [s.span_id for s in expected_big],
                f"get_trace paged by {limit}: every span once, in order",
            )
        first = await store.get_trace(trace_id, limit=10)
        _equal(first.total, len(big), "get_trace total of a paged trace")
        unknown = await store.get_trace("0123456789abcdef0123456789abcdef", limit=10)
        _equal((unknown.items, unknown.total), ([], 0), "get_trace of an unknown trace")
        await _rejected(store.get_trace("xyz", limit=10), "trace_id", "get_trace('xyz')")
        await _rejected(store.get_trace("", limit=10), "trace_id", "get_trace('')")
        await _rejected(store.get_trace("ab" * 17, limit=10), "trace_id", "a 34-char trace id")


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


def _expected_summary(spans: list[Span]) -> TraceSummary:
    roots = sorted(
        (s for s in spans if not s.parent_span_id),
        key=lambda s: (s.start_time_unix_nano, s.span_id),
    )
    root = roots[0] if roots else min(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    start = min(s.start_time_unix_nano for s in spans)
    end = max(s.end_time_unix_nano for s in spans)
    return TraceSummary(
        trace_id=spans[0].trace_id,
        root_service_name=root.service_name,
        root_name=root.name,
        root_missing=not roots,
        start_time_unix_nano=start,
        duration_ns=max(0, end - start),
        span_count=len(spans),
        error_count=sum(1 for s in spans if s.status_code == StatusCode.ERROR),
        services=sorted({s.service_name for s in spans}),
    )


def _expected_traces(spans: list[Span], query: TraceQuery) -> list[TraceSummary]:
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)

    def matches(span: Span) -> bool:
        if not _in_range(span.start_time_unix_nano, query.time_range):
            return False
        if query.service_name is not None and span.service_name != query.service_name:
            return False
        if query.operation is not None and span.name != query.operation:
            return False
        if query.min_duration_ns is not None and span.duration_ns < query.min_duration_ns:
            return False
        if query.status == "error" and span.status_code != StatusCode.ERROR:
            return False
        if query.status == "ok" and span.status_code == StatusCode.ERROR:
            return False
        for key, value in query.attributes.items():
            found = [
                _text(v)
                for attrs in (span.attributes, span.resource_attributes)
                for k, v in attrs.items()
                if k == key
            ]
            if value not in found:
                return False
        return True

    summaries = [
        _expected_summary(trace_spans)
        for trace_spans in by_trace.values()
        if any(matches(s) for s in trace_spans)
    ]
    summaries.sort(key=lambda t: t.trace_id)
    summaries.sort(key=lambda t: t.start_time_unix_nano, reverse=True)
    return summaries


async def check_search_traces(make_store: MakeStore) -> None:
    """Every filter alone and together (on one span), newest first, paged, summarised."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        window = data.window
        half = TimeRange(
            start_unix_nano=data.base + 20 * MINUTE, end_unix_nano=data.base + 60 * MINUTE
        )
        queries = [
            TraceQuery(time_range=window),
            TraceQuery(time_range=half),
            TraceQuery(time_range=window, service_name="payments"),
            TraceQuery(time_range=window, service_name=ODD_SERVICES[1]),
            TraceQuery(time_range=window, operation="GET /cart"),
            TraceQuery(time_range=window, min_duration_ns=200_000_000),
            TraceQuery(time_range=window, status="error"),
            TraceQuery(time_range=window, status="ok", service_name="payments"),
            TraceQuery(time_range=window, attributes={"http.response.status_code": "500"}),
            TraceQuery(time_range=window, attributes={"user.premium": "true"}),
            TraceQuery(time_range=window, attributes={"service.version": "1.1.0"}),
            TraceQuery(time_range=window, attributes={"odd.key with spaces": "välue ✓"}),
            # Conditions must hold on *one* span: the checkout server span is never CLIENT
            # "POST checkout", so this matches nothing although each part matches something.
            TraceQuery(time_range=window, service_name="checkout", operation="POST checkout"),
            TraceQuery(
                time_range=window,
                service_name="frontend",
                status="error",
                min_duration_ns=100_000_000,
                attributes={"http.route": "/checkout"},
            ),
            TraceQuery(time_range=window, service_name="no-such-service"),
        ]
        for query in queries:
            expected = _expected_traces(data.spans, query)
            page = await store.search_traces(query, limit=MAX_LIMIT)
            _equal(page.items, expected, f"search_traces({query})")
            _expect(page.total in (None, len(expected)), f"search_traces total for {query}")
            paged = await _all_pages(
                partial(store.search_traces, query, limit=5),
                f"search_traces pages for {query}",
            )
            _equal(paged, expected, f"search_traces paged by 5 for {query}")
        _expect(bool(_expected_traces(data.spans, queries[-2])), "the dataset has a combined match")
        await _rejected(
            store.search_traces(TraceQuery(time_range=window), limit=5, cursor="%%%"),
            "cursor",
            "search_traces with a garbage cursor",
        )


async def check_clock_skew(make_store: MakeStore) -> None:
    """A child that starts before its parent (skewed host clocks) is kept and summarised."""
    base = _base_time()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = Span(
        trace_id=trace_id,
        span_id="00f067aa0ba902b7",
        service_name="gateway",
        name="GET /api",
        kind=SpanKind.SERVER,
        start_time_unix_nano=base + 10 * SECOND,
        end_time_unix_nano=base + 11 * SECOND,
    )
    child = Span(
        trace_id=trace_id,
        span_id="00f067aa0ba902b8",
        parent_span_id=parent.span_id,
        service_name="backend",
        name="handle",
        kind=SpanKind.SERVER,
        start_time_unix_nano=base + 9 * SECOND,  # before its parent
        end_time_unix_nano=base + 9 * SECOND + 300_000_000,
    )
    orphan = Span(  # its parent was never received: the root is missing
        trace_id="5bf92f3577b34da6a3ce929d0e0e4737",
        span_id="10f067aa0ba902b7",
        parent_span_id="20f067aa0ba902b7",
        service_name="backend",
        name="late",
        kind=SpanKind.INTERNAL,
        start_time_unix_nano=base + 20 * SECOND,
        end_time_unix_nano=base + 19 * SECOND,  # ends before it starts: duration clamps to 0
    )
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=[parent, child, orphan]))
        page = await store.get_trace(trace_id, limit=10)
        _equal([s.span_id for s in page.items], [child.span_id, parent.span_id], "skewed order")
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + MINUTE)
        found = await store.search_traces(TraceQuery(time_range=window), limit=10)
        _equal(
            found.items,
            [_expected_summary([orphan]), _expected_summary([parent, child])],
            "summaries of a skewed trace and of a trace without its root",
        )
        edges = await store.service_edges(window, limit=10)
        _equal(
            [(e.caller, e.callee, e.call_count) for e in edges],
            [("gateway", "backend", 1)],
            "the edge of a skewed call",
        )
        ops = await store.operations("backend", window, limit=10)
        late = [o for o in ops.items if o.name == "late"]
        _equal(late[0].p50_duration_ns if late else None, 0, "a negative duration clamps to 0")


# -- checks: services, operations, edges, deploys --------------------------------------------


async def check_services(make_store: MakeStore) -> None:
    """RED per service from entry spans, ordered by requests; ranges; limits; odd names."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        ranges = [
            data.window,
            TimeRange(start_unix_nano=data.base + 30 * MINUTE, end_unix_nano=data.base + HOUR),
        ]
        for time_range in ranges:
            by_service: dict[str, list[Span]] = defaultdict(list)
            for span in data.spans:
                if _in_range(span.start_time_unix_nano, time_range):
                    by_service[span.service_name].append(span)
            expected = []
            for name, spans in by_service.items():
                entries = [s for s in spans if _is_entry(s)]
                durations = [s.duration_ns for s in entries]
                expected.append(
                    (
                        name,
                        len(spans),
                        len(entries),
                        sum(1 for s in entries if s.status_code == StatusCode.ERROR),
                        _nearest_rank(durations, 50),
                        _nearest_rank(durations, 95),
                        _nearest_rank(durations, 99),
                        max(s.start_time_unix_nano for s in spans),
                        sorted({s.service_version for s in spans} - {""}),
                    )
                )
            expected.sort(key=lambda e: (-e[2], e[0]))
            page = await store.services(time_range, limit=MAX_LIMIT)
            actual = [
                (
                    s.service_name,
                    s.span_count,
                    s.request_count,
                    s.error_count,
                    s.p50_duration_ns,
                    s.p95_duration_ns,
                    s.p99_duration_ns,
                    s.last_seen_unix_nano,
                    s.versions,
                )
                for s in page.items
            ]
            _equal(actual, expected, f"services({time_range})")
            _equal(page.total, len(expected), "services total")
            limited = await store.services(time_range, limit=2)
            _equal([s.service_name for s in limited.items], [e[0] for e in expected[:2]], "limit")
            _equal(limited.total, len(expected), "services total with a limit")
        listed = await store.services(data.window, limit=MAX_LIMIT)
        for odd in ODD_SERVICES:
            _expect(
                any(s.service_name == odd for s in listed.items),
                f"services() should list the service named {odd!r}",
            )
        nothing = await store.services(TimeRange(start_unix_nano=1, end_unix_nano=2), limit=10)
        _equal((nothing.items, nothing.total), ([], 0), "services of an empty range")


async def check_operations(make_store: MakeStore) -> None:
    """RED per operation over all of a service's spans; unknown service: empty."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        for service in ("frontend", "checkout", ODD_SERVICES[0], ODD_SERVICES[1]):
            by_name: dict[str, list[Span]] = defaultdict(list)
            for span in data.spans:
                if span.service_name == service and _in_range(
                    span.start_time_unix_nano, data.window
                ):
                    by_name[span.name].append(span)
            expected = sorted(
                (
                    (
                        name,
                        len(spans),
                        sum(1 for s in spans if s.status_code == StatusCode.ERROR),
                        _nearest_rank([s.duration_ns for s in spans], 50),
                        _nearest_rank([s.duration_ns for s in spans], 95),
                        _nearest_rank([s.duration_ns for s in spans], 99),
                    )
                    for name, spans in by_name.items()
                ),
                key=lambda e: (-e[1], e[0]),
            )
            page = await store.operations(service, data.window, limit=MAX_LIMIT)
            _equal(
                [
                    (
                        o.name,
                        o.span_count,
                        o.error_count,
                        o.p50_duration_ns,
                        o.p95_duration_ns,
                        o.p99_duration_ns,
                    )
                    for o in page.items
                ],
                expected,
                f"operations({service!r})",
            )
            _expect(all(o.service_name == service for o in page.items), "operation service")
            _equal(page.total, len(expected), f"operations({service!r}) total")
        unknown = await store.operations("no-such-service", data.window, limit=10)
        _equal((unknown.items, unknown.total), ([], 0), "operations of an unknown service")


async def check_service_edges(make_store: MakeStore) -> None:
    """Edges from parent/child spans across services, counted on the callee side."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        by_id = {(s.trace_id, s.span_id): s for s in data.spans}
        calls: dict[tuple[str, str], list[Span]] = defaultdict(list)
        for span in data.spans:
            parent = by_id.get((span.trace_id, span.parent_span_id))
            if (
                parent is not None
                and parent.service_name != span.service_name
                and _in_range(span.start_time_unix_nano, data.window)
            ):
                calls[(parent.service_name, span.service_name)].append(span)

        def expected_for(
            service: str | None,
        ) -> list[tuple[str, str, int, int, int | None, int | None, int | None]]:
            rows = [
                (
                    caller,
                    callee,
                    len(spans),
                    sum(1 for s in spans if s.status_code == StatusCode.ERROR),
                    _nearest_rank([s.duration_ns for s in spans], 50),
                    _nearest_rank([s.duration_ns for s in spans], 95),
                    _nearest_rank([s.duration_ns for s in spans], 99),
                )
                for (caller, callee), spans in calls.items()
                if service is None or service in (caller, callee)
            ]
            rows.sort(key=lambda r: (-r[2], r[0], r[1]))
            return rows

        for service in (None, "checkout", "payments", ODD_SERVICES[0]):
            edges = await store.service_edges(data.window, limit=MAX_LIMIT, service_name=service)
            _equal(
                [
                    (
                        e.caller,
                        e.callee,
                        e.call_count,
                        e.error_count,
                        e.p50_duration_ns,
                        e.p95_duration_ns,
                        e.p99_duration_ns,
                    )
                    for e in edges
                ],
                expected_for(service),
                f"service_edges(service_name={service!r})",
            )
        top = await store.service_edges(data.window, limit=1)
        _equal(len(top), 1, "service_edges limit=1")


async def check_deploys(make_store: MakeStore) -> None:
    """Distinct service.version per service, latest first seen first; no version: absent."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        for service in (None, "frontend", "payments"):
            seen: dict[tuple[str, str], list[int]] = defaultdict(list)
            for span in data.spans:
                if span.service_version and (service is None or span.service_name == service):
                    seen[(span.service_name, span.service_version)].append(
                        span.start_time_unix_nano
                    )
            expected = sorted(
                (
                    (name, version, min(times), max(times), len(times))
                    for (name, version), times in seen.items()
                ),
                key=lambda d: (-d[2], d[0], d[1]),
            )
            found = await store.deploys(data.window, limit=MAX_LIMIT, service_name=service)
            _equal(
                [
                    (
                        d.service_name,
                        d.version,
                        d.first_seen_unix_nano,
                        d.last_seen_unix_nano,
                        d.span_count,
                    )
                    for d in found
                ],
                expected,
                f"deploys(service_name={service!r})",
            )
        one = await store.deploys(data.window, limit=1)
        _equal(len(one), 1, "deploys limit=1")


# -- checks: logs ---------------------------------------------------------------------------


def _expected_logs(
    logs: list[LogRecord],
    time_range: TimeRange,
    *,
    service: str | None = None,
    min_severity: int | None = None,
    trace_id: str | None = None,
) -> list[LogRecord]:
    return [
        r
        for r in logs
        if _in_range(r.time_unix_nano, time_range)
        and (service is None or r.service_name == service)
        and (min_severity is None or r.severity_number >= min_severity)
        and (trace_id is None or r.trace_id == trace_id)
    ]


def _log_key(record: LogRecord) -> tuple[object, ...]:
    return (record.time_unix_nano, record.body, record.service_name, record.span_id)


async def check_search_logs_filters(make_store: MakeStore) -> None:
    """Without text: newest first, every filter, pages without loss or repeats."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(logs=data.logs))
        trace_id = next(r.trace_id for r in data.logs if r.trace_id)
        cases: list[tuple[LogQuery, list[LogRecord]]] = [
            (LogQuery(time_range=data.window), _expected_logs(data.logs, data.window)),
            (
                LogQuery(time_range=data.window, service_name=ODD_SERVICES[2]),
                _expected_logs(data.logs, data.window, service=ODD_SERVICES[2]),
            ),
            (
                LogQuery(time_range=data.window, min_severity_number=17),
                _expected_logs(data.logs, data.window, min_severity=17),
            ),
            (
                LogQuery(time_range=data.window, trace_id=trace_id),
                _expected_logs(data.logs, data.window, trace_id=trace_id),
            ),
            (
                LogQuery(
                    time_range=TimeRange(
                        start_unix_nano=data.base + 10 * MINUTE,
                        end_unix_nano=data.base + 20 * MINUTE,
                    ),
                    service_name="checkout",
                    min_severity_number=9,
                ),
                _expected_logs(
                    data.logs,
                    TimeRange(
                        start_unix_nano=data.base + 10 * MINUTE,
                        end_unix_nano=data.base + 20 * MINUTE,
                    ),
                    service="checkout",
                    min_severity=9,
                ),
            ),
        ]
        for query, expected in cases:
            _expect(bool(expected), f"the dataset has logs for {query}")
            page = await store.search_logs(query, limit=MAX_LIMIT)
            _equal(
                sorted(map(_log_key, page.items)),
                sorted(map(_log_key, expected)),
                f"search_logs({query}) records",
            )
            times = [r.time_unix_nano for r in page.items]
            _equal(times, sorted(times, reverse=True), f"search_logs({query}): newest first")
            for limit in (1, 4):
                paged = await _all_pages(
                    partial(store.search_logs, query, limit=limit),
                    f"search_logs pages of {limit}",
                )
                _equal(paged, page.items, f"search_logs({query}) paged by {limit}")
        # Records come back whole.
        record = data.logs[4]
        found = await store.search_logs(
            LogQuery(
                time_range=TimeRange(
                    start_unix_nano=record.time_unix_nano,
                    end_unix_nano=record.time_unix_nano + 1,
                ),
                service_name=record.service_name,
            ),
            limit=10,
        )
        _equal(found.items, [record], "a log record round-tripped")


async def check_search_logs_text(make_store: MakeStore) -> None:
    """Words (all), phrases, prefixes, case; BM25 puts the best match first; paging."""
    data = _dataset()
    extra = [
        LogRecord(
            time_unix_nano=data.base + 5 * SECOND,
            severity_number=17,
            body="deadline deadline deadline",
            service_name="frontend",
        ),
        LogRecord(
            time_unix_nano=data.base + 6 * SECOND,
            severity_number=17,
            body="a very long message that mentions the deadline only once among many other "
            "words about carts, orders, payments, users, sessions and warehouses",
            service_name="frontend",
        ),
        LogRecord(
            time_unix_nano=data.base + 7 * SECOND,
            severity_number=9,
            body='query was "body:foo AND (bar OR NEAR(x y))" from the search box',
            service_name="frontend",
        ),
    ]
    logs = [*data.logs, *extra]
    async with make_store() as store:
        await store.write(TelemetryBatch(logs=logs))
        window = data.window

        def expect(predicate: Callable[[str], bool]) -> list[LogRecord]:
            return [r for r in logs if _in_range(r.time_unix_nano, window) and predicate(r.body)]

        cases: list[tuple[str, list[LogRecord]]] = [
            ("timeout", expect(lambda b: "timeout" in _tokens(b))),
            ("ORDER not", expect(lambda b: {"order", "not"} <= set(_tokens(b)))),
            ('"card expired"', expect(lambda b: _contains_phrase(b, "card expired"))),
            ('"expired card"', expect(lambda b: _contains_phrase(b, "expired card"))),
            ("retry*", expect(lambda b: any(t.startswith("retry") for t in _tokens(b)))),
            ('"cache mi"*', expect(lambda b: _contains_phrase(b, "cache mi", prefix=True))),
            ("inventory-db", expect(lambda b: _contains_phrase(b, "inventory-db"))),
            ("zürich", expect(lambda b: "zürich" in _tokens(b))),
            ('"body:foo AND (bar"', expect(lambda b: _contains_phrase(b, "body foo and bar"))),
            ("nosuchwordanywhere", []),
        ]
        for text, expected in cases:
            # Two cases must find nothing: word order matters in a phrase; unknown words.
            _expect(
                bool(expected) != (text in ('"expired card"', "nosuchwordanywhere")),
                f"the dataset has (or, for the two negative cases, lacks) {text!r}",
            )
            page = await store.search_logs(LogQuery(time_range=window, text=text), limit=MAX_LIMIT)
            _equal(
                sorted(map(_log_key, page.items)),
                sorted(map(_log_key, expected)),
                f"search_logs(text={text!r})",
            )
            paged = await _all_pages(
                partial(store.search_logs, LogQuery(time_range=window, text=text), limit=3),
                f"search_logs(text={text!r}) pages",
            )
            _equal(paged, page.items, f"search_logs(text={text!r}) paged by 3")
        ranked = await store.search_logs(LogQuery(time_range=window, text="deadline"), limit=10)
        _equal(
            [r.body for r in ranked.items],
            [extra[0].body, extra[1].body],
            "BM25: the record dense in the word ranks first",
        )
        combined = await store.search_logs(
            LogQuery(
                time_range=window, text="order", service_name="checkout", min_severity_number=9
            ),
            limit=MAX_LIMIT,
        )
        _equal(
            sorted(map(_log_key, combined.items)),
            sorted(
                map(
                    _log_key,
                    [
                        r
                        for r in _expected_logs(logs, window, service="checkout", min_severity=9)
                        if "order" in _tokens(r.body)
                    ],
                )
            ),
            "text with service and severity filters",
        )
        for bad in (
            "foo AND bar",
            "foo OR bar",
            "NOT foo",
            "NEAR(foo bar)",
            '"unbalanced',
            "body:foo",
            "(foo)",
            "^foo",
            "-foo",
            "fo*o",
            "",
            "   ",
            "***",
            # No letter or digit: nothing any tokenizer indexes ("_" separates words), so
            # "no word to search for" rather than a search that can only find nothing.
            "_",
            '"_"*',
            '"__" ---',
        ):
            await _rejected(
                store.search_logs(LogQuery(time_range=window, text=bad), limit=10),
                "text",
                f"search_logs(text={bad!r})",
            )
        await _rejected(
            store.search_logs(LogQuery(time_range=window, trace_id="nope"), limit=10),
            "trace_id",
            "search_logs with a bad trace_id",
        )


# -- checks: metrics ------------------------------------------------------------------------

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


def _series_key(point: MetricPoint) -> tuple[str, tuple[tuple[str, str], ...]]:
    return point.service_name, tuple(sorted((k, _text(v)) for k, v in point.attributes.items()))


def _labels(point: MetricPoint) -> dict[str, str]:
    return {
        **{k: _text(v) for k, v in point.attributes.items()},
        "service.name": point.service_name,
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _reference_quantile(q: float, bounds: list[float], counts: list[int]) -> float | None:
    """Prometheus histogram_quantile over one histogram (bounds ascending, last +Inf)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if seen + count >= rank and count > 0:
            upper = bounds[i]
            if math.isinf(upper):
                return bounds[i - 1] if i > 0 else None
            lower = bounds[i - 1] if i > 0 else (0.0 if upper > 0 else upper)
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return bounds[-2] if len(bounds) > 1 else None


def _matches(labels: dict[str, str], matchers: Sequence[LabelMatcher]) -> bool:
    for m in matchers:
        value = labels.get(m.label, "")
        if m.op == "=" and value != m.value:
            return False
        if m.op == "!=" and value == m.value:
            return False
        if m.op == "=~" and re.fullmatch(m.value, value) is None:
            return False
        if m.op == "!~" and re.fullmatch(m.value, value) is not None:
            return False
    return True


def _expected_series(points: list[MetricPoint], query: MetricQuery) -> list[MetricSeries]:
    """The reference implementation of metric_series (see the interface's Aggregation)."""
    start, end, step = (
        query.time_range.start_unix_nano,
        query.time_range.end_unix_nano,
        query.step_ns,
    )
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[MetricPoint]] = defaultdict(list)
    for p in points:
        if p.name == query.name and (query.service_name in (None, p.service_name)):
            series[_series_key(p)].append(p)
    selected = {
        key: sorted(ps, key=lambda p: p.time_unix_nano)
        for key, ps in series.items()
        if _matches(_labels(ps[0]), query.matchers)
        and any(_in_range(p.time_unix_nano, query.time_range) for p in ps)
    }
    groups: dict[tuple[tuple[str, str], ...], list[list[MetricPoint]]] = defaultdict(list)
    for ps in selected.values():
        labels = _labels(ps[0])
        if query.group_by is not None:
            labels = {k: labels.get(k, "") for k in query.group_by if labels.get(k, "")}
        groups[tuple(sorted(labels.items()))].append(ps)
    result: list[MetricSeries] = []
    for label_items in sorted(groups):
        members = groups[label_items]
        buckets: dict[int, list[float]] = defaultdict(list)
        stamped: dict[int, list[tuple[int, float]]] = defaultdict(list)
        hist: dict[int, dict[float, int]] = defaultdict(lambda: defaultdict(int))
        for ps in members:
            inside = [p for p in ps if _in_range(p.time_unix_nano, query.time_range)]
            if query.aggregation == "rate":
                for b, rate in _reference_rates(ps, start, end, step).items():
                    buckets[b].append(rate)
                continue
            if ps[0].type == "histogram":
                for b, counts in _reference_histograms(ps, start, end, step).items():
                    for bound, count in counts.items():
                        hist[b][bound] += count
                continue
            for p in inside:
                v = _finite(p.value)
                if v is not None:
                    b = (p.time_unix_nano - start) // step
                    buckets[b].append(v)
                    stamped[b].append((p.time_unix_nano, v))
        values: list[tuple[int, float]] = []
        agg = query.aggregation
        if hist:
            for b in sorted(hist):
                ordered = sorted(hist[b])
                q = _reference_quantile(int(agg[1:]) / 100, ordered, [hist[b][x] for x in ordered])
                if q is not None:
                    values.append((start + b * step, q))
        for b in sorted(buckets):
            vs = buckets[b]
            if agg == "rate":
                value = sum(vs)
            elif agg == "avg":
                value = sum(vs) / len(vs)
            elif agg == "min":
                value = min(vs)
            elif agg == "max":
                value = max(vs)
            elif agg == "sum":
                value = sum(vs)
            elif agg == "count":
                value = float(len(vs))
            elif agg == "last":
                value = max(stamped[b], key=lambda tv: tv[0])[1]
            else:
                found = _nearest_rank(vs, int(agg[1:]))
                assert found is not None
                value = float(found)
            values.append((start + b * step, value))
        first = members[0][0]
        result.append(
            MetricSeries(
                name=query.name,
                type=first.type,
                unit=first.unit,
                labels=dict(label_items),
                points=values,
            )
        )
    return result


def _reference_rates(ps: list[MetricPoint], start: int, end: int, step: int) -> dict[int, float]:
    finite = [p for p in ps if _finite(p.value) is not None and p.time_unix_nano < end]
    rates: dict[int, float] = {}
    if finite and finite[0].temporality == "delta":
        sums: dict[int, float] = defaultdict(float)
        for p in finite:
            if p.time_unix_nano >= start:
                assert p.value is not None
                sums[(p.time_unix_nano - start) // step] += p.value
        for b, total in sums.items():
            width = min(start + (b + 1) * step, end) - (start + b * step)
            rates[b] = total * SECOND / width
        return rates
    increase: dict[int, float] = defaultdict(float)
    elapsed: dict[int, int] = defaultdict(int)
    for prev, point in itertools.pairwise(finite):
        if point.time_unix_nano < start:
            continue
        assert prev.value is not None
        assert point.value is not None
        reset = (point.is_monotonic and point.value < prev.value) or (
            point.start_time_unix_nano > 0
            and prev.start_time_unix_nano > 0
            and point.start_time_unix_nano != prev.start_time_unix_nano
        )
        b = (point.time_unix_nano - start) // step
        increase[b] += point.value if reset else point.value - prev.value
        elapsed[b] += point.time_unix_nano - prev.time_unix_nano
    return {b: increase[b] * SECOND / elapsed[b] for b in increase if elapsed[b] > 0}


def _reference_histograms(
    ps: list[MetricPoint], start: int, end: int, step: int
) -> dict[int, dict[float, int]]:
    out: dict[int, dict[float, int]] = defaultdict(lambda: defaultdict(int))

    def add(b: int, h: HistogramValue, prev: HistogramValue | None) -> None:
        bounds = [*h.explicit_bounds, _INF]
        whole = prev is None or h.count < prev.count
        for i, count in enumerate(h.bucket_counts):
            before = 0 if whole or prev is None else prev.bucket_counts[i]
            out[b][bounds[i]] += count - before

    if ps[0].temporality == "delta":
        for p in ps:
            if _in_range(p.time_unix_nano, TimeRange(start_unix_nano=start, end_unix_nano=end)):
                assert p.histogram is not None
                add((p.time_unix_nano - start) // step, p.histogram, None)
        return out
    last_of: dict[int, MetricPoint] = {}
    before = [p for p in ps if p.time_unix_nano < start]
    for p in ps:
        if start <= p.time_unix_nano < end:
            last_of[(p.time_unix_nano - start) // step] = p
    prev = before[-1].histogram if before else None
    for b in sorted(last_of):
        h = last_of[b].histogram
        assert h is not None
        add(b, h, prev)
        prev = h
    return out


def _same_series(actual: list[MetricSeries], expected: list[MetricSeries], what: str) -> None:
    actual = [s for s in actual if s.points]
    expected = [s for s in expected if s.points]
    _equal([s.labels for s in actual], [s.labels for s in expected], f"{what}: series labels")
    for a, e in zip(actual, expected, strict=True):
        _equal((a.name, a.type, a.unit), (e.name, e.type, e.unit), f"{what}: series metadata")
        _equal([t for t, _ in a.points], [t for t, _ in e.points], f"{what} {e.labels}: buckets")
        for (t, av), (_, ev) in zip(a.points, e.points, strict=True):
            _close(av, ev, f"{what} {e.labels} at bucket {t}")


async def check_metric_names(make_store: MakeStore) -> None:
    """Every metric with a point in range: type, unit, label keys, series count, prefix."""
    base = _base_time()
    points = [*_gauge_points(base), *_counter_points(base), *_histogram_points(base)]
    async with make_store() as store:
        await store.write(TelemetryBatch(metrics=points))
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + 3 * HOUR)
        for prefix in (None, "http.", "zzz"):
            expected: dict[str, list[MetricPoint]] = defaultdict(list)
            for p in points:
                if _in_range(p.time_unix_nano, window) and (
                    prefix is None or p.name.startswith(prefix)
                ):
                    expected[p.name].append(p)
            page = await store.metric_names(window, limit=MAX_LIMIT, prefix=prefix)
            _equal(
                [
                    (d.name, d.type, d.unit, d.label_keys, d.series_count, d.last_seen_unix_nano)
                    for d in page.items
                ],
                [
                    (
                        name,
                        ps[0].type,
                        ps[0].unit,
                        sorted({"service.name", *(k for p in ps for k in p.attributes)}),
                        len({_series_key(p) for p in ps}),
                        max(p.time_unix_nano for p in ps),
                    )
                    for name, ps in sorted(expected.items())
                ],
                f"metric_names(prefix={prefix!r})",
            )
            _equal(page.total, len(expected), "metric_names total")
        gauge = (await store.metric_names(window, limit=1)).items[0]
        _equal(gauge.description, "CPU use of the container", "metric description")
        late = TimeRange(start_unix_nano=base + 25 * MINUTE, end_unix_nano=base + HOUR)
        _equal(
            [d.name for d in (await store.metric_names(late, limit=10)).items],
            sorted({p.name for p in points if _in_range(p.time_unix_nano, late)}),
            "metric_names of a later range",
        )


async def check_metric_series(make_store: MakeStore) -> None:
    """Aggregations per bucket, matchers, grouping, rate, percentiles, NaN/Inf skipped."""
    base = _base_time()
    points = [*_gauge_points(base), *_counter_points(base), *_histogram_points(base)]
    async with make_store() as store:
        await store.write(TelemetryBatch(metrics=points))
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + 30 * MINUTE)
        inner = TimeRange(
            start_unix_nano=base + 7 * MINUTE + 3 * SECOND, end_unix_nano=base + 23 * MINUTE
        )
        cpu = "container.cpu.utilization"
        queries: list[MetricQuery] = []
        aggregations: tuple[Aggregation, ...] = (
            "avg",
            "min",
            "max",
            "sum",
            "count",
            "last",
            "p50",
            "p90",
            "p99",
        )
        for aggregation in aggregations:
            queries.append(
                MetricQuery(name=cpu, time_range=window, step_ns=MINUTE, aggregation=aggregation)
            )
        matcher_sets = [
            [LabelMatcher(label="k8s.pod.name", value="pod-a")],
            [LabelMatcher(label="k8s.pod.name", op="!=", value="pod-a")],
            [LabelMatcher(label="k8s.pod.name", op="=~", value="pod-[ab]")],
            [LabelMatcher(label="k8s.pod.name", op="!~", value="pod-(a|c)")],
            [LabelMatcher(label="zone", value="")],  # missing label counts as ""
            [LabelMatcher(label="zone", op="!=", value="")],
            [LabelMatcher(label="service.name", value="frontend")],
        ]
        for matchers in matcher_sets:
            queries.append(
                MetricQuery(name=cpu, time_range=inner, step_ns=2 * MINUTE, matchers=matchers)
            )
        queries += [
            MetricQuery(
                name=cpu,
                time_range=window,
                step_ns=5 * MINUTE,
                aggregation="max",
                group_by=["zone"],
            ),
            MetricQuery(
                name=cpu, time_range=window, step_ns=5 * MINUTE, aggregation="sum", group_by=[]
            ),
            MetricQuery(
                name=cpu,
                time_range=window,
                step_ns=5 * MINUTE,
                aggregation="avg",
                service_name="checkout",
            ),
            MetricQuery(name=cpu, time_range=inner, step_ns=7 * SECOND, aggregation="count"),
            MetricQuery(
                name="http.server.request.count",
                time_range=window,
                step_ns=MINUTE,
                aggregation="rate",
            ),
            MetricQuery(
                name="http.server.request.count",
                time_range=inner,
                step_ns=3 * MINUTE,
                aggregation="rate",
                group_by=[],
            ),
            MetricQuery(
                name="http.server.request.count",
                time_range=window,
                step_ns=MINUTE,
                aggregation="last",
            ),
            MetricQuery(
                name="jobs.processed", time_range=window, step_ns=2 * MINUTE, aggregation="rate"
            ),
            MetricQuery(name="jobs.processed", time_range=inner, step_ns=MINUTE, aggregation="sum"),
            MetricQuery(
                name="jobs.processed", time_range=inner, step_ns=MINUTE, aggregation="rate"
            ),  # the last bucket is cut short by the range
            MetricQuery(
                name="http.server.request.duration",
                time_range=window,
                step_ns=2 * MINUTE,
                aggregation="p95",
            ),
            MetricQuery(
                name="http.server.request.duration",
                time_range=inner,
                step_ns=5 * MINUTE,
                aggregation="p50",
                group_by=[],
            ),
            MetricQuery(
                name="rpc.server.duration", time_range=window, step_ns=2 * MINUTE, aggregation="p90"
            ),
            MetricQuery(
                name="rpc.server.duration", time_range=inner, step_ns=4 * MINUTE, aggregation="p99"
            ),
        ]
        for query in queries:
            expected = _expected_series(points, query)
            _expect(any(s.points for s in expected), f"the dataset answers {query}")
            actual = await store.metric_series(query, limit=MAX_LIMIT)
            _same_series(
                actual,
                expected,
                f"metric_series({query.name}, {query.aggregation}, "
                f"matchers={query.matchers}, group_by={query.group_by})",
            )
        limited = await store.metric_series(
            MetricQuery(name=cpu, time_range=window, step_ns=MINUTE), limit=2
        )
        _equal(len(limited), 2, "metric_series limit=2")
        _equal(
            [s.labels for s in limited],
            [
                s.labels
                for s in _expected_series(
                    points, MetricQuery(name=cpu, time_range=window, step_ns=MINUTE)
                )[:2]
            ],
            "metric_series limit keeps the first series by labels",
        )
        unknown = await store.metric_series(
            MetricQuery(name="no.such.metric", time_range=window, step_ns=MINUTE), limit=10
        )
        _equal(unknown, [], "metric_series of an unknown metric")
        rejected: list[tuple[MetricQuery, str]] = [
            (
                MetricQuery(name=cpu, time_range=window, step_ns=MINUTE, aggregation="rate"),
                "aggregation",
            ),
            (
                MetricQuery(
                    name="http.server.request.count",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation="p95",
                ),
                "aggregation",
            ),
            (
                MetricQuery(
                    name="http.server.request.duration",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation="avg",
                ),
                "aggregation",
            ),
            (MetricQuery(name="", time_range=window, step_ns=MINUTE), "name"),
            # A caller ignoring the types: refused, not a search for a name that cannot exist.
            (MetricQuery(name=cast(str, 42), time_range=window, step_ns=MINUTE), "name"),
            (MetricQuery(name=cpu, time_range=window, step_ns=0), "step_ns"),
            (MetricQuery(name=cpu, time_range=window, step_ns=-5), "step_ns"),
            (MetricQuery(name=cpu, time_range=window, step_ns=1), "step_ns"),
            (
                MetricQuery(
                    name=cpu,
                    time_range=window,
                    step_ns=MINUTE,
                    matchers=[LabelMatcher(label="k8s.pod.name", op="=~", value="(")],
                ),
                "matchers[0].value",
            ),
        ]
        for query, field in rejected:
            await _rejected(store.metric_series(query, limit=10), field, f"metric_series {query}")


# -- checks: arguments, names, retention, closing, cancellation, concurrency ------------------


def _every_query(
    store: TelemetryStore, time_range: TimeRange, limit: int, cursor: str | None = None
) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    return [
        ("services", lambda: store.services(time_range, limit=limit)),
        ("operations", lambda: store.operations("frontend", time_range, limit=limit)),
        ("get_trace", lambda: store.get_trace("ab" * 16, limit=limit, cursor=cursor)),
        (
            "search_traces",
            lambda: store.search_traces(
                TraceQuery(time_range=time_range), limit=limit, cursor=cursor
            ),
        ),
        (
            "search_logs",
            lambda: store.search_logs(LogQuery(time_range=time_range), limit=limit, cursor=cursor),
        ),
        (
            "search_logs(text)",
            lambda: store.search_logs(
                LogQuery(time_range=time_range, text="order"), limit=limit, cursor=cursor
            ),
        ),
        ("metric_names", lambda: store.metric_names(time_range, limit=limit)),
        (
            "metric_series",
            lambda: store.metric_series(
                MetricQuery(name="container.cpu.utilization", time_range=time_range, step_ns=HOUR),
                limit=limit,
            ),
        ),
        ("service_edges", lambda: store.service_edges(time_range, limit=limit)),
        ("deploys", lambda: store.deploys(time_range, limit=limit)),
        (
            "service_red_series",
            lambda: store.service_red_series(time_range, step_ns=10 * MINUTE, limit=limit),
        ),
        ("log_counts", lambda: store.log_counts(time_range, step_ns=10 * MINUTE, limit=limit)),
    ]


async def check_bucketed_series(make_store: MakeStore) -> None:
    """service_red_series and log_counts: services() and counted logs per bucket; steps."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans, logs=data.logs))
        window = data.window
        for step in (7 * MINUTE, HOUR, 4 * HOUR):
            red: dict[str, dict[int, list[Span]]] = defaultdict(lambda: defaultdict(list))
            for span in data.spans:
                if _in_range(span.start_time_unix_nano, window) and _is_entry(span):
                    bucket = (span.start_time_unix_nano - window.start_unix_nano) // step
                    red[span.service_name][window.start_unix_nano + bucket * step].append(span)
            expected_red = [
                (
                    name,
                    [
                        (
                            start,
                            len(spans),
                            sum(1 for s in spans if s.status_code == StatusCode.ERROR),
                            _nearest_rank([s.duration_ns for s in spans], 50),
                            _nearest_rank([s.duration_ns for s in spans], 95),
                            _nearest_rank([s.duration_ns for s in spans], 99),
                        )
                        for start, spans in sorted(buckets.items())
                    ],
                )
                for name, buckets in sorted(red.items())
            ]
            series = await store.service_red_series(window, step_ns=step, limit=MAX_LIMIT)
            actual_red = [
                (
                    one.service_name,
                    [
                        (
                            p.bucket_start_unix_nano,
                            p.request_count,
                            p.error_count,
                            p.p50_duration_ns,
                            p.p95_duration_ns,
                            p.p99_duration_ns,
                        )
                        for p in one.points
                    ],
                )
                for one in series
            ]
            _equal(actual_red, expected_red, f"service_red_series(step={step})")
            # One bucket's RED is services() over that bucket.
            name, points = expected_red[0]
            start = points[0][0]
            bucket_range = TimeRange(start_unix_nano=start, end_unix_nano=start + step)
            summary = next(
                s
                for s in (await store.services(bucket_range, limit=MAX_LIMIT)).items
                if s.service_name == name
            )
            _equal(
                (summary.request_count, summary.p95_duration_ns),
                (points[0][1], points[0][4]),
                "service_red_series against services() over the bucket",
            )
            limited = await store.service_red_series(window, step_ns=step, limit=2)
            _equal(
                [s.service_name for s in limited],
                [e[0] for e in expected_red[:2]],
                "service_red_series limit",
            )

            counts: dict[str, dict[int, list[int]]] = defaultdict(dict)
            for record in data.logs:
                if _in_range(record.time_unix_nano, window):
                    bucket = (record.time_unix_nano - window.start_unix_nano) // step
                    row = counts[record.service_name].setdefault(
                        window.start_unix_nano + bucket * step, [0, 0, 0]
                    )
                    row[0] += 1
                    row[1] += 13 <= record.severity_number <= 16
                    row[2] += record.severity_number >= 17
            expected_logs = [
                (name, [(start, *row) for start, row in sorted(buckets.items())])
                for name, buckets in sorted(counts.items())
            ]
            logs = await store.log_counts(window, step_ns=step, limit=MAX_LIMIT)
            actual_logs = [
                (
                    one.service_name,
                    [
                        (p.bucket_start_unix_nano, p.records, p.warn_records, p.error_records)
                        for p in one.points
                    ],
                )
                for one in logs
            ]
            _equal(actual_logs, expected_logs, f"log_counts(step={step})")
        empty = TimeRange(start_unix_nano=1, end_unix_nano=2)
        _equal(await store.service_red_series(empty, step_ns=1, limit=5), [], "empty range")
        _equal(await store.log_counts(empty, step_ns=1, limit=5), [], "empty range (logs)")
        for bad_step in (0, -MINUTE, 1):
            await _rejected(
                store.service_red_series(window, step_ns=bad_step, limit=5),
                "step_ns",
                f"service_red_series(step_ns={bad_step})",
            )
            await _rejected(
                store.log_counts(window, step_ns=bad_step, limit=5),
                "step_ns",
                f"log_counts(step_ns={bad_step})",
            )


async def check_bad_arguments(make_store: MakeStore) -> None:
    """limit, time_range and cursor errors name their field on every query."""
    data = _dataset()
    async with make_store() as store:
        await store.write(
            TelemetryBatch(spans=data.spans, logs=data.logs, metrics=_gauge_points(data.base))
        )
        window = data.window
        for limit in (0, -1, MAX_LIMIT + 1):
            for name, call in _every_query(store, window, limit):
                await _rejected(call(), "limit", f"{name}(limit={limit})")
        inverted = TimeRange(
            start_unix_nano=window.end_unix_nano, end_unix_nano=window.start_unix_nano
        )
        empty = TimeRange(start_unix_nano=data.base, end_unix_nano=data.base)
        for bad_range in (inverted, empty):
            for name, call in _every_query(store, bad_range, 10):
                if name in ("get_trace",):
                    continue
                await _rejected(call(), "time_range", f"{name}({bad_range})")
        garbage = ["not a cursor", "", "eyJ9", "W10", "x" * 5000, "WyJhIiwgWzFdXQ"]
        for cursor in garbage:
            for name, call in _every_query(store, window, 10, cursor):
                if name in ("get_trace", "search_traces", "search_logs", "search_logs(text)"):
                    await _rejected(call(), "cursor", f"{name}(cursor={cursor[:20]!r})")
        # A real cursor, passed to another query (or another method), is refused.
        trace_id = data.spans[0].trace_id
        first = await store.get_trace(trace_id, limit=1)
        other_trace = next(s.trace_id for s in data.spans if s.trace_id != trace_id)
        assert first.next_cursor is not None
        await _rejected(
            store.get_trace(other_trace, limit=1, cursor=first.next_cursor),
            "cursor",
            "a get_trace cursor for another trace",
        )
        await _rejected(
            store.search_logs(LogQuery(time_range=window), limit=1, cursor=first.next_cursor),
            "cursor",
            "a get_trace cursor passed to search_logs",
        )
        logs_page = await store.search_logs(LogQuery(time_range=window), limit=2)
        assert logs_page.next_cursor is not None
        await _rejected(
            store.search_logs(
                LogQuery(time_range=window, service_name="checkout"),
                limit=2,
                cursor=logs_page.next_cursor,
            ),
            "cursor",
            "a search_logs cursor for another filter",
        )
        # The same query with another limit may continue.
        more = await store.search_logs(
            LogQuery(time_range=window), limit=5, cursor=logs_page.next_cursor
        )
        _expect(bool(more.items), "a cursor continues with another page size")
        # Nothing was written by all that.
        stats = await store.statistics()
        _equal(stats.span_count, len(data.spans), "spans after refused queries")


async def check_odd_service_names(make_store: MakeStore) -> None:
    """Non-ASCII, quoted, SQL-looking and emoji service names round-trip everywhere."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans, logs=data.logs))
        names = {s.service_name for s in (await store.services(data.window, limit=100)).items}
        for odd in ODD_SERVICES:
            _expect(odd in names, f"services() lists {odd!r}")
            ops = await store.operations(odd, data.window, limit=10)
            _equal([o.name for o in ops.items], [f"op {odd}"], f"operations({odd!r})")
            traces = await store.search_traces(
                TraceQuery(time_range=data.window, service_name=odd), limit=100
            )
            _expect(
                all(odd in t.services for t in traces.items) and bool(traces.items),
                f"search_traces(service_name={odd!r})",
            )
            logs = await store.search_logs(
                LogQuery(time_range=data.window, service_name=odd), limit=100
            )
            _expect(
                bool(logs.items) and all(r.service_name == odd for r in logs.items),
                f"search_logs(service_name={odd!r})",
            )
            edges = await store.service_edges(data.window, limit=100, service_name=odd)
            _equal([(e.caller, e.callee) for e in edges], [("checkout", odd)], f"edges {odd!r}")
        stats = await store.statistics()
        _equal(stats.span_count, len(data.spans), "nothing dropped by the SQL-looking name")


async def check_nan_and_infinity(make_store: MakeStore) -> None:
    """NaN and ±Inf points are stored (counted, idempotent) and skipped by aggregations."""
    base = _base_time()
    special = [
        MetricPoint(
            name="queue.depth",
            type="gauge",
            time_unix_nano=base + i * SECOND,
            value=v,
            attributes={"queue": "q1"},
        )
        for i, v in enumerate([1.0, _NAN, _INF, 3.0, -_INF, _NAN])
    ]
    all_bad = [
        MetricPoint(
            name="queue.depth",
            type="gauge",
            time_unix_nano=base + i * SECOND,
            value=v,
            attributes={"queue": "q2"},
        )
        for i, v in enumerate([_NAN, _INF])
    ]
    async with make_store() as store:
        result = await store.write(TelemetryBatch(metrics=[*special, *all_bad]))
        _equal(result.metric_points_written, 8, "NaN/Inf points are stored")
        again = await store.write(TelemetryBatch(metrics=special))
        _equal(again.metric_points_duplicate, 6, "NaN/Inf points are idempotent")
        _equal((await store.statistics()).metric_point_count, 8, "NaN/Inf points counted")
        window = TimeRange(start_unix_nano=base, end_unix_nano=base + MINUTE)
        cases: tuple[tuple[Aggregation, float], ...] = (
            ("avg", 2.0),
            ("min", 1.0),
            ("max", 3.0),
            ("sum", 4.0),
            ("count", 2.0),
            ("last", 3.0),
            ("p50", 1.0),
        )
        for aggregation, expected in cases:
            series = await store.metric_series(
                MetricQuery(
                    name="queue.depth",
                    time_range=window,
                    step_ns=MINUTE,
                    aggregation=aggregation,
                    matchers=[LabelMatcher(label="queue", value="q1")],
                ),
                limit=10,
            )
            _equal([s.points for s in series], [[(base, expected)]], f"{aggregation} skips NaN/Inf")
        only_bad = await store.metric_series(
            MetricQuery(
                name="queue.depth",
                time_range=window,
                step_ns=MINUTE,
                matchers=[LabelMatcher(label="queue", value="q2")],
            ),
            limit=10,
        )
        _equal([s.points for s in only_bad if s.points], [], "a bucket of NaN/Inf only is empty")
        names = await store.metric_names(window, limit=10)
        _equal([d.series_count for d in names.items], [2], "NaN-only series still listed")


async def check_retention(make_store: MakeStore) -> None:
    """delete_before removes exactly what is older than the cutoff, of every kind."""
    data = _dataset()
    points = _gauge_points(data.base)
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans, logs=data.logs, metrics=points))
        cutoff = data.base + 40 * MINUTE
        result = await store.delete_before(cutoff)
        _equal(
            result.spans_deleted,
            sum(1 for s in data.spans if s.start_time_unix_nano < cutoff),
            "spans_deleted",
        )
        _equal(
            result.logs_deleted,
            sum(1 for r in data.logs if r.time_unix_nano < cutoff),
            "logs_deleted",
        )
        _equal(
            result.metric_points_deleted,
            sum(1 for p in points if p.time_unix_nano < cutoff),
            "metric_points_deleted",
        )
        stats = await store.statistics()
        _equal(
            stats.span_count,
            sum(1 for s in data.spans if s.start_time_unix_nano >= cutoff),
            "spans kept",
        )
        _expect(
            stats.oldest_unix_nano is not None and stats.oldest_unix_nano >= cutoff,
            "nothing older than the cutoff remains",
        )
        logs = await store.search_logs(LogQuery(time_range=data.window), limit=MAX_LIMIT)
        _expect(all(r.time_unix_nano >= cutoff for r in logs.items), "old logs are gone")
        hits = await store.search_logs(
            LogQuery(time_range=data.window, text="order"), limit=MAX_LIMIT
        )
        _expect(all(r.time_unix_nano >= cutoff for r in hits.items), "old logs left the index")
        again = await store.delete_before(cutoff)
        _equal(
            (again.spans_deleted, again.logs_deleted, again.metric_points_deleted),
            (0, 0, 0),
            "a second pass deletes nothing",
        )
        rewritten = await store.write(TelemetryBatch(spans=data.spans))
        _equal(rewritten.spans_written, result.spans_deleted, "deleted spans can be re-imported")


async def check_closed(make_store: MakeStore) -> None:
    """After aclose every call raises StoreClosed; aclose is idempotent."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans[:3]))
        await store.aclose()
        await store.aclose()
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            *_every_query(store, data.window, 10),
            ("write", lambda: store.write(TelemetryBatch(spans=data.spans[3:5]))),
            ("statistics", store.statistics),
            ("delete_before", lambda: store.delete_before(0)),
        ]
        for name, call in calls:
            try:
                await call()
            except StoreClosed:
                continue
            raise ConformanceError(f"{name} after aclose() did not raise StoreClosed")


async def check_cancellation(make_store: MakeStore) -> None:
    """Cancelled reads and writes leave the store usable and every write whole or absent."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        for delay in (0.0, 0.0001, 0.001, 0.005):
            for name, call in _every_query(store, data.window, MAX_LIMIT):
                with trio.move_on_after(delay):
                    await call()
                # The store still answers, and answers right.
                page = await store.services(data.window, limit=MAX_LIMIT)
                _equal(
                    sum(s.span_count for s in page.items),
                    len(data.spans),
                    f"services() after cancelling {name} after {delay} s",
                )
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.statistics()
        logs = data.logs
        for i, delay in enumerate((0.0, 0.0005, 0.002, 0.01)):
            chunk = logs[i * 50 : (i + 1) * 50]
            with trio.move_on_after(delay):
                await store.write(TelemetryBatch(logs=chunk))
            stored = await store.search_logs(LogQuery(time_range=data.window), limit=MAX_LIMIT)
            keys = {_log_key(r) for r in stored.items}
            present = [_log_key(r) in keys for r in chunk]
            _expect(
                all(present) or not any(present),
                f"a write cancelled after {delay} s is stored whole or not at all",
            )


async def check_concurrency(make_store: MakeStore) -> None:
    """Many tasks reading and writing at once get the answers they would get alone."""
    data = _dataset()
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=data.spans))
        alone = await store.services(data.window, limit=MAX_LIMIT)
        results: list[object] = []
        chunks = [data.logs[i : i + 20] for i in range(0, len(data.logs), 20)]

        async def reader() -> None:
            for _ in range(5):
                results.append(await store.services(data.window, limit=MAX_LIMIT))

        async def writer(chunk: list[LogRecord]) -> None:
            await store.write(TelemetryBatch(logs=chunk))

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(reader)
            for chunk in chunks:
                nursery.start_soon(writer, chunk)
        _expect(all(r == alone for r in results), "concurrent services() answers differ")
        _equal((await store.statistics()).log_count, len(data.logs), "concurrent writes")


CONFORMANCE_CHECKS: Final[tuple[ConformanceCheck, ...]] = tuple(
    ConformanceCheck(name=fn.__name__.removeprefix("check_"), run=fn)
    for fn in (
        check_write_and_statistics,
        check_write_idempotent,
        check_write_all_or_nothing,
        check_get_trace,
        check_search_traces,
        check_clock_skew,
        check_services,
        check_operations,
        check_service_edges,
        check_deploys,
        check_search_logs_filters,
        check_search_logs_text,
        check_metric_names,
        check_metric_series,
        check_bucketed_series,
        check_nan_and_infinity,
        check_bad_arguments,
        check_odd_service_names,
        check_retention,
        check_closed,
        check_cancellation,
        check_concurrency,
    )
)
"""Every check, in a sensible order; parametrise over it to get one test per check."""


async def check_store_conformance(make_store: MakeStore) -> None:
    """Run every check of :data:`CONFORMANCE_CHECKS` against stores from ``make_store``.

    Args:
        make_store: called once or more per check; each call must return an async context
            manager that opens a new, *empty* store and closes it on exit. A retention window
            of at least a day (or none) is assumed: the data are placed in the last few hours.

    Raises:
        ConformanceError: the first check that failed, its name in the message.
    """
    for check in CONFORMANCE_CHECKS:
        try:
            await check.run(make_store)
        except ConformanceError as exc:
            raise ConformanceError(f"{check.name}: {exc}") from exc
        except StoreError as exc:
            raise ConformanceError(f"{check.name}: unexpected {exc!r}") from exc
