"""Checks of bad arguments (every query names the field it refuses) and of odd service names."""

from __future__ import annotations

from coremetry.store.interface import MAX_LIMIT, LogQuery, TimeRange, TraceQuery
from coremetry.store.model import TelemetryBatch

from ._dataset import ODD_SERVICES, _gauge_points, make_dataset
from ._support import MakeStore, _equal, _every_query, _expect, _rejected


async def check_bad_arguments(make_store: MakeStore) -> None:
    """limit, time_range and cursor errors name their field on every query."""
    data = make_dataset()
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
    data = make_dataset()
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
