"""Checks of the trace queries.

get_trace, search_traces, clock skew, services, operations, service edges and deploys.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

from coremetry.store.interface import MAX_LIMIT, MAX_TRACES_PER_READ, TimeRange, TraceQuery
from coremetry.store.model import Span, SpanKind, StatusCode, TelemetryBatch

from ._dataset import ODD_SERVICES, _base_time, _big_trace, make_dataset
from ._reference import _expected_summary, _expected_traces, _in_range, _is_entry, _nearest_rank
from ._support import (
    HOUR,
    MINUTE,
    SECOND,
    MakeStore,
    _all_pages,
    _equal,
    _equal_red,
    _expect,
    _rejected,
)


async def check_get_trace(make_store: MakeStore) -> None:
    """A trace's spans come back whole, in start order, pageable, with the right total.

    ``get_traces`` answers for several ids what ``get_trace`` answers for each.
    """
    data = make_dataset()
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
        # Several traces at once: each page as get_trace gives it, in the order asked.
        asked = [*list(by_trace)[:3], trace_id, "0123456789abcdef0123456789abcdef"]
        asked += [asked[0].upper()]
        for limit in (MAX_LIMIT, 7):
            pages = await store.get_traces(asked, limit=limit)
            alone = [await store.get_trace(one, limit=limit) for one in asked]
            _equal(
                [(p.items, p.total, p.next_cursor) for p in pages],
                [(p.items, p.total, p.next_cursor) for p in alone],
                f"get_traces of {len(asked)} ids, limit {limit}: get_trace's page of each",
            )
        rest = await store.get_traces([trace_id], limit=10)
        more = rest[0].next_cursor
        _expect(more is not None, "get_traces gives a cursor into a longer trace")
        if more is not None:
            page = await store.get_trace(trace_id, limit=10, cursor=more)
            _equal(page.items, expected_big[10:20], "get_trace goes on from get_traces' cursor")
        _equal(await store.get_traces([], limit=10), [], "get_traces of no id")
        await _rejected(store.get_traces(["xyz"], limit=10), "trace_ids", "get_traces(['xyz'])")
        await _rejected(
            store.get_traces([trace_id] * (MAX_TRACES_PER_READ + 1), limit=10),
            "trace_ids",
            "get_traces of too many ids",
        )
        await _rejected(store.get_traces([trace_id], limit=0), "limit", "get_traces limit 0")


async def check_search_traces(make_store: MakeStore) -> None:
    """Every filter alone and together (on one span), newest first, paged, summarised."""
    data = make_dataset()
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
    # Several roots (a client that re-used its trace id): named by the earliest root by start
    # then span id, after a child that starts before all of them; a tie on start goes to the
    # smaller span id.
    roots = [
        Span(
            trace_id="6bf92f3577b34da6a3ce929d0e0e4738",
            span_id=span_id,
            parent_span_id=parent_id,
            service_name=service,
            name=name,
            kind=SpanKind.SERVER,
            start_time_unix_nano=base + at * SECOND,
            end_time_unix_nano=base + (at + 2) * SECOND,
        )
        for span_id, parent_id, service, name, at in (
            ("0000000000000001", "", "retry", "third", 93),
            ("00000000000000a2", "", "retry", "second", 92),
            ("00000000000000a1", "", "retry", "first", 92),
            ("00000000000000b1", "00000000000000a2", "backend", "child", 91),
        )
    ]
    async with make_store() as store:
        await store.write(TelemetryBatch(spans=[parent, child, orphan, *roots]))
        found = await store.search_traces(
            TraceQuery(
                time_range=TimeRange(
                    start_unix_nano=base + 90 * SECOND, end_unix_nano=base + 99 * SECOND
                )
            ),
            limit=10,
        )
        _equal(found.items, [_expected_summary(roots)], "the summary of a trace with 3 roots")
        _equal(found.items[0].root_name if found.items else None, "first", "its earliest root")
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


async def check_services(make_store: MakeStore) -> None:
    """RED per service from entry spans, ordered by requests; ranges; limits; odd names.

    ``service_name`` gives each service's summary alone, as the whole list has it.
    """
    data = make_dataset()
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
            _equal_red(
                actual,
                expected,
                (4, 5, 6),
                [s.percentile_relative_error for s in page.items],
                f"services({time_range})",
            )
            _equal(page.total, len(expected), "services total")
            for summary in page.items:
                alone = await store.services(
                    time_range, limit=MAX_LIMIT, service_name=summary.service_name
                )
                _equal(
                    (alone.items, alone.total),
                    ([summary], 1),
                    f"services({time_range}, service_name={summary.service_name!r})",
                )
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
        unknown = await store.services(data.window, limit=10, service_name="no-such-service")
        _equal((unknown.items, unknown.total), ([], 0), "services of an unknown service_name")


async def check_operations(make_store: MakeStore) -> None:
    """RED per operation over all of a service's spans; unknown service: empty."""
    data = make_dataset()
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
            _equal_red(
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
                (3, 4, 5),
                [o.percentile_relative_error for o in page.items],
                f"operations({service!r})",
            )
            _expect(all(o.service_name == service for o in page.items), "operation service")
            _equal(page.total, len(expected), f"operations({service!r}) total")
        unknown = await store.operations("no-such-service", data.window, limit=10)
        _equal((unknown.items, unknown.total), ([], 0), "operations of an unknown service")


async def check_service_edges(make_store: MakeStore) -> None:
    """Edges from parent/child spans across services, counted on the callee side."""
    data = make_dataset()
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
            _equal_red(
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
                (4, 5, 6),
                [e.percentile_relative_error for e in edges],
                f"service_edges(service_name={service!r})",
            )
        top = await store.service_edges(data.window, limit=1)
        _equal(len(top), 1, "service_edges limit=1")


async def check_deploys(make_store: MakeStore) -> None:
    """Distinct service.version per service, latest first seen first; no version: absent."""
    data = make_dataset()
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
