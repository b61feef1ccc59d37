"""``get_trace`` through the exporter's trace-id lookup table (``otel_traces_trace_id_ts``).

The lookup gives a trace's time bounds, whole seconds; the spans are then read within them.
These tests show the bounds are what the read uses, that they lose no span at their edges
(sub-second starts, a trace across midnight, a span after 2106), that our own writes fill the
lookup as the exporter's view does, and that a trace the lookup does not know, or a store
without a lookup table, reads every span all the same.
"""

import logging
from typing import Final, cast

import msgspec
import pytest

from coremetry.store import Span, SpanKind, TelemetryBatch
from coremetry.store.clickhouse import ClickHouseStore, exporter_ddl, open_clickhouse_store
from coremetry.store.clickhouse._schema import LOOKUP_MAX_S

from ._support import ENGINE, fresh_options, open_fresh_store

SECOND: Final = 1_000_000_000
MIDNIGHT: Final = 1_767_225_600 * SECOND
"""2026-01-01 00:00:00 UTC: a partition boundary of the traces table (by day)."""
TRACE: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER: Final = "00f067aa0ba902b7a3ce929d0e0e4736"


def _span(trace_id: str, n: int, start: int, *, parent: str = "") -> Span:
    return Span(
        trace_id=trace_id,
        span_id=f"{n:016x}",
        parent_span_id=parent,
        service_name=f"svc-{n % 3}",
        name=f"op-{n % 4}",
        kind=SpanKind.SERVER if not parent else SpanKind.CLIENT,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000,
    )


def _edge_trace() -> list[Span]:
    """A trace across midnight, its last span 1 ns before a whole second (``End`` truncates)."""
    first = MIDNIGHT - 5 * SECOND - 1
    root = _span(TRACE, 1, first)
    spans = [root]
    spans += [_span(TRACE, n, first + n * 700_000_000, parent=root.span_id) for n in range(2, 14)]
    spans.append(_span(TRACE, 14, MIDNIGHT + 8 * SECOND - 1, parent=root.span_id))
    return spans


def _neighbours() -> list[Span]:
    """Another trace's spans at the same seconds, so the time filter alone would not do."""
    return [_span(OTHER, 100 + n, MIDNIGHT - 5 * SECOND + n * SECOND) for n in range(14)]


async def _lookup_rows(store: ClickHouseStore, trace_id: str) -> list[tuple[int, int]]:
    table = store.options.tables.qualified("trace_id_ts")
    rows = await store.runtime.query(
        f"SELECT toUnixTimestamp(Start), toUnixTimestamp(End) FROM {table} "
        "WHERE TraceId = {trace_id:String} ORDER BY Start",
        {"trace_id": trace_id},
    )
    return [cast("tuple[int, int]", tuple(row)) for row in rows]


async def _replace_lookup(store: ClickHouseStore, trace_id: str, bounds: list[int]) -> None:
    """The trace's lookup rows replaced by ``bounds`` (``[start_s, end_s]`` or nothing)."""
    table = store.options.tables.qualified("trace_id_ts")
    await store.runtime.command(
        f"DELETE FROM {table} WHERE TraceId = {{trace_id:String}}", {"trace_id": trace_id}
    )
    if bounds:
        await store.runtime.command(
            f"INSERT INTO {table} (TraceId, Start, End) VALUES "
            "({trace_id:String}, toDateTime({start:UInt32}), toDateTime({end:UInt32}))",
            {"trace_id": trace_id, "start": bounds[0], "end": bounds[1]},
        )


def _ids(spans: list[Span]) -> list[str]:
    ordered = sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    return [s.span_id for s in ordered]


async def test_our_writes_fill_the_lookup_and_no_span_is_lost_at_its_edges() -> None:
    spans = _edge_trace()
    async with open_fresh_store(ENGINE) as store:
        # Two batches: the view writes a row per insert block, the read takes min and max.
        await store.write(TelemetryBatch(spans=[*spans[:7], *_neighbours()]))
        await store.write(TelemetryBatch(spans=spans[7:]))
        rows = await _lookup_rows(store, TRACE)
        page = await store.get_trace(TRACE, limit=100)
        paged = [await store.get_trace(TRACE, limit=5)]
        while paged[-1].next_cursor is not None:
            cursor = paged[-1].next_cursor
            paged.append(await store.get_trace(TRACE, limit=5, cursor=cursor))
    first_s = (MIDNIGHT - 5 * SECOND - 1) // SECOND
    assert rows == [
        (first_s, spans[6].start_time_unix_nano // SECOND),
        (spans[7].start_time_unix_nano // SECOND, MIDNIGHT // SECOND + 7),
    ]
    assert [s.span_id for s in page.items] == _ids(spans)
    assert page.items == sorted(spans, key=lambda s: (s.start_time_unix_nano, s.span_id))
    assert page.total == len(spans)
    assert [s.span_id for p in paged for s in p.items] == _ids(spans)
    assert [p.total for p in paged] == [len(spans)] * len(paged)


async def test_the_read_is_bounded_by_the_lookup_and_falls_back_without_a_row() -> None:
    spans = _edge_trace()
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=[*spans, *_neighbours()]))
        # A lookup row that says the trace ends before midnight: the read believes it (so the
        # bounds are what it uses), and the span after midnight is not read.
        await _replace_lookup(
            store, TRACE, [(MIDNIGHT - 6 * SECOND) // SECOND, MIDNIGHT // SECOND - 1]
        )
        bounded = await store.get_trace(TRACE, limit=100)
        # No row (a trace written past the view): every span, by TraceId alone.
        await _replace_lookup(store, TRACE, [])
        unbounded = await store.get_trace(TRACE, limit=100)
        first = await store.get_trace(TRACE, limit=3)
        rest = await store.get_trace(TRACE, limit=100, cursor=first.next_cursor)
    before_midnight = [s for s in spans if s.start_time_unix_nano < MIDNIGHT]
    assert [s.span_id for s in bounded.items] == _ids(before_midnight)
    assert bounded.total == len(before_midnight)
    assert [s.span_id for s in unbounded.items] == _ids(spans)
    assert unbounded.total == len(spans)
    assert [s.span_id for s in [*first.items, *rest.items]] == _ids(spans)
    assert rest.total == len(spans)


async def test_several_traces_are_read_within_their_bounds_or_by_id_when_one_lacks_a_row() -> None:
    """``get_traces`` bounds its one read by the union of the traces' lookup rows; an id the
    lookup does not know makes it read by the ids alone, so no span of any trace is lost."""
    spans = _edge_trace()
    other = _neighbours()
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=[*spans, *other]))
        whole = await store.get_traces([TRACE, OTHER], limit=100)
        # Both rows say the traces end before midnight: the read believes the union of them.
        before = [(MIDNIGHT - 6 * SECOND) // SECOND, MIDNIGHT // SECOND - 1]
        await _replace_lookup(store, TRACE, before)
        await _replace_lookup(store, OTHER, before)
        bounded = await store.get_traces([TRACE, OTHER], limit=100)
        await _replace_lookup(store, OTHER, [])  # one id without a row: by the ids alone
        by_id = await store.get_traces([TRACE, OTHER], limit=100)
    assert [[s.span_id for s in page.items] for page in whole] == [_ids(spans), _ids(other)]
    assert [page.total for page in whole] == [len(spans), len(other)]
    early = [[s for s in trace if s.start_time_unix_nano < MIDNIGHT] for trace in (spans, other)]
    assert [[s.span_id for s in page.items] for page in bounded] == [_ids(t) for t in early]
    assert [[s.span_id for s in page.items] for page in by_id] == [_ids(spans), _ids(other)]


async def test_a_span_after_2106_is_found() -> None:
    """``DateTime`` ends in 2106: our view stores a later time as its largest value."""
    late = (LOOKUP_MAX_S + 86_400 * 365) * SECOND
    spans = [_span(TRACE, 1, MIDNIGHT), _span(TRACE, 2, late, parent=f"{1:016x}")]
    alone = [_span(OTHER, 3, late + SECOND)]
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=[*spans, *alone]))
        rows = await _lookup_rows(store, TRACE)
        both = await store.get_trace(TRACE, limit=10)
        only_late = await store.get_trace(OTHER, limit=10)
    assert rows == [(MIDNIGHT // SECOND, LOOKUP_MAX_S)]
    assert [s.span_id for s in both.items] == _ids(spans)
    assert [s.start_time_unix_nano for s in only_late.items] == [late + SECOND]


async def test_without_a_lookup_table_the_store_says_so_and_reads_every_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tables of an exporter version with no lookup: logged at startup, traces read whole."""
    options = fresh_options(ENGINE, create_tables=False)
    spans = _edge_trace()
    lookup = f"{options.tables.database}.otel_traces_trace_id_ts"
    async with open_fresh_store(ENGINE) as admin:
        for statement in exporter_ddl(options.tables, trace_lookup=False):
            await admin.runtime.command(statement, {})
        with caplog.at_level(logging.INFO, logger="coremetry.store.clickhouse"):
            async with open_clickhouse_store(options) as store:
                await store.write(TelemetryBatch(spans=[*spans, *_neighbours()]))
                page = await store.get_trace(TRACE, limit=100)
        # create_tables over an existing traces table (logs dropped) adds no view: it would
        # see new inserts only, and give a trace that straddles it bounds missing old spans.
        # Only the edge roll-up's tables are added (filled from stored spans when read).
        await admin.runtime.command(f"DROP TABLE `{options.tables.database}`.`otel_logs`", {})
        created = msgspec.structs.replace(options, create_tables=True)
        async with open_clickhouse_store(created) as store:
            tables = await store.runtime.query(
                "SELECT name FROM system.tables WHERE database = {database:String} "
                "AND name LIKE 'otel_traces_%'",
                {"database": options.tables.database},
            )
        await admin.runtime.command(f"DROP DATABASE `{options.tables.database}`", {})
    assert [s.span_id for s in page.items] == _ids(spans)
    assert page.total == len(spans)
    assert f"table {lookup} is missing" in caplog.text
    assert sorted(tables) == [("otel_traces_edges_1m",), ("otel_traces_edges_1m_done",)]
