"""The ClickHouse backend's RED roll-ups: made with the tables, read when there, raw otherwise.

``clickhouse.create_tables`` on a new database creates ``otel_traces_red_1m`` and the
materialized view that fills it; ``services``/``operations``/``deploys`` then read it (their
percentiles from its latency sketches, within 1 %). Tables made without it (an exporter's own,
or an older Coremetry's) are read raw, exactly, and pass the same conformance checks.
"""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import msgspec
import pytest
import trio

from coremetry.store import Span, SpanKind, StatusCode, TelemetryBatch, TelemetryStore, TimeRange
from coremetry.store.clickhouse import ClickHouseStore, exporter_ddl, open_clickhouse_store
from coremetry.store.clickhouse._queries import EDGE_SETTLE_NS
from coremetry.store.clickhouse._schema import ttl_interval
from coremetry.store.testing import CONFORMANCE_CHECKS, ConformanceCheck

from ._support import ENGINE, fresh_options, open_fresh_store

SECOND = 1_000_000_000
RED_CHECKS = [
    c
    for c in CONFORMANCE_CHECKS
    if c.name in ("services", "operations", "deploys", "service_edges", "rollups_match_raw")
]


def _spans(now: int) -> list[Span]:
    return [
        Span(
            trace_id=f"{i + 1:032x}",
            span_id=f"{i + 1:016x}",
            service_name="api",
            name="GET /",
            kind=SpanKind.SERVER,
            start_time_unix_nano=now - i * SECOND,
            end_time_unix_nano=now - i * SECOND + (i + 1) * 1_000_000,
        )
        for i in range(100)
    ]


async def test_create_tables_makes_the_rollups_and_the_red_tools_read_them() -> None:
    now = time.time_ns()
    window = TimeRange(start_unix_nano=now - 3600 * SECOND, end_unix_nano=now + SECOND)
    async with open_fresh_store(ENGINE) as store:
        assert store.rollups
        await store.write(TelemetryBatch(spans=_spans(now)))
        rows = await store.runtime.query(
            f"SELECT sum(Spans) FROM {store.options.tables.qualified('red_1m')}", {}
        )
        page = await store.services(window, limit=10)
    assert rows == [(100,)]
    (api,) = page.items
    assert (api.request_count, api.percentile_relative_error) == (100, 0.01)
    # Durations 1..100 ms: nearest-rank p50 is 50 ms, p99 99 ms (within 1 %).
    assert api.p50_duration_ns is not None
    assert api.p99_duration_ns is not None
    assert abs(api.p50_duration_ns - 50_000_000) <= 500_000
    assert abs(api.p99_duration_ns - 99_000_000) <= 990_000


@asynccontextmanager
async def _store_without_rollups() -> AsyncIterator[TelemetryStore]:
    options = fresh_options(ENGINE, create_tables=False)
    async with open_fresh_store(ENGINE) as admin:
        for statement in exporter_ddl(options.tables):
            await admin.runtime.command(statement, {})
        async with open_clickhouse_store(options) as store:
            assert not store.rollups
            yield store
        await admin.runtime.command(f"DROP DATABASE `{options.tables.database}`", {})


async def test_without_rollups_percentiles_are_exact() -> None:
    now = time.time_ns()
    window = TimeRange(start_unix_nano=now - 3600 * SECOND, end_unix_nano=now + SECOND)
    async with _store_without_rollups() as store:
        await store.write(TelemetryBatch(spans=_spans(now)))
        (api,) = (await store.services(window, limit=10)).items
    assert (api.p50_duration_ns, api.p99_duration_ns) == (50_000_000, 99_000_000)
    assert api.percentile_relative_error == 0.0


@pytest.mark.parametrize("check", RED_CHECKS, ids=lambda check: check.name)
async def test_without_rollups_the_raw_reads_conform(check: ConformanceCheck) -> None:
    with trio.fail_after(300):
        await check.run(_store_without_rollups)


def _calls(at: int, count: int, first_trace: int = 1) -> tuple[list[Span], list[Span]]:
    """``count`` calls gateway -> orders at ``at`` (one per trace): (parents, children).

    Child ``i`` lasts ``i + 1`` ms; every fourth fails.
    """
    parents, children = [], []
    for i in range(count):
        trace = f"{first_trace + i:032x}"
        parents.append(
            Span(
                trace_id=trace,
                span_id=f"{2 * i + 1:016x}",
                service_name="gateway",
                name="GET /",
                kind=SpanKind.SERVER,
                start_time_unix_nano=at + i * SECOND,
                end_time_unix_nano=at + i * SECOND + 100_000_000,
            )
        )
        children.append(
            Span(
                trace_id=trace,
                span_id=f"{2 * i + 2:016x}",
                parent_span_id=f"{2 * i + 1:016x}",
                service_name="orders",
                name="create",
                kind=SpanKind.SERVER,
                start_time_unix_nano=at + i * SECOND + 1000,
                end_time_unix_nano=at + i * SECOND + 1000 + (i + 1) * 1_000_000,
                status_code=StatusCode.ERROR if i % 4 == 0 else StatusCode.UNSET,
            )
        )
    return parents, children


async def _edge_tables(store: ClickHouseStore) -> tuple[int, int]:
    """(calls in the edge roll-up, rolled minutes marked)."""
    tables = store.options.tables
    (calls,) = await store.runtime.query(
        f"SELECT sum(Calls) FROM {tables.qualified('edges_1m')} FINAL", {}
    )
    (marks,) = await store.runtime.query(
        f"SELECT count() FROM {tables.qualified('edges_1m_done')} FINAL", {}
    )
    return cast(int, calls[0]), cast(int, marks[0])


async def test_service_edges_rolls_settled_minutes_up_once_and_reads_them() -> None:
    now = time.time_ns()
    at = now - 3 * 3600 * SECOND
    at -= at % (60 * SECOND)
    parents, children = _calls(at, 100)
    window = TimeRange(start_unix_nano=at - 600 * SECOND, end_unix_nano=now)
    async with open_fresh_store(ENGINE) as store:
        assert store.edge_rollups
        # Children first, their parents in a later insert: the call is still one edge.
        await store.write(TelemetryBatch(spans=children))
        await store.write(TelemetryBatch(spans=parents))
        assert await _edge_tables(store) == (0, 0)
        (edge,) = await store.service_edges(window, limit=10)
        rolled = await _edge_tables(store)
        after = time.time_ns()
        (again,) = await store.service_edges(window, limit=10)
        assert await _edge_tables(store) == rolled  # rolled once, read since
    assert (edge.caller, edge.callee, edge.call_count, edge.error_count) == (
        "gateway",
        "orders",
        100,
        25,
    )
    assert again == edge
    # Every settled whole minute of the window from the oldest span on is marked (not the 10
    # minutes before it: nothing is stored there); the 100 calls are rolled up.
    first = at // (60 * SECOND)
    settled = [(t - EDGE_SETTLE_NS) // (60 * SECOND) - first for t in (now, after)]
    assert rolled[0] == 100
    assert settled[0] <= rolled[1] <= settled[1]
    # Child durations 1..100 ms: percentiles from the sketch, within its 1 %.
    assert edge.percentile_relative_error == 0.01
    assert edge.p50_duration_ns is not None
    assert abs(edge.p50_duration_ns - 50_000_000) <= 500_000


async def test_a_window_of_days_is_rolled_up_a_day_at_a_time() -> None:
    now = time.time_ns()
    old_parents, old_children = _calls(now - 40 * 3600 * SECOND, 30)
    parents, children = _calls(now - 3 * 3600 * SECOND, 20, first_trace=1000)
    window = TimeRange(start_unix_nano=now - 48 * 3600 * SECOND, end_unix_nano=now)
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=old_parents + old_children + parents + children))
        (edge,) = await store.service_edges(window, limit=10)
        calls, marks = await _edge_tables(store)
    assert (edge.call_count, edge.error_count) == (50, 8 + 5)
    # From the old calls' day (at least 39 hours ago) to an hour ago: several statements.
    assert calls == 50
    assert 39 * 60 <= marks <= 47 * 60 + 1


async def test_a_window_of_years_rolls_up_only_the_stored_days() -> None:
    now = time.time_ns()
    parents, children = _calls(now - 3 * 3600 * SECOND, 20)
    window = TimeRange(start_unix_nano=now - 10 * 365 * 86400 * SECOND, end_unix_nano=now)
    async with open_fresh_store(ENGINE) as store:
        assert await store.service_edges(window, limit=10) == []  # nothing stored
        assert await _edge_tables(store) == (0, 0)
        await store.write(TelemetryBatch(spans=parents + children))
        (edge,) = await store.service_edges(window, limit=10)
        calls, marks = await _edge_tables(store)
    assert (edge.call_count, edge.error_count, calls) == (20, 5, 20)
    # From the calls' day (it began at most 27 hours ago) to an hour ago: not ten years.
    assert 2 * 60 <= marks <= 26 * 60


async def test_recent_minutes_are_read_raw_and_not_rolled_up() -> None:
    now = time.time_ns()
    parents, children = _calls(now - 300 * SECOND, 10)
    window = TimeRange(start_unix_nano=now - 600 * SECOND, end_unix_nano=now)
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=parents + children))
        (edge,) = await store.service_edges(window, limit=10)
        assert await _edge_tables(store) == (0, 0)
    assert (edge.call_count, edge.error_count) == (10, 3)


async def test_retention_deletes_the_edge_rollup_with_its_spans() -> None:
    now = time.time_ns()
    at = now - 4 * 3600 * SECOND
    at -= at % (60 * SECOND)
    parents, children = _calls(at, 120)  # two minutes of calls
    window = TimeRange(start_unix_nano=at - 60 * SECOND, end_unix_nano=now)
    async with open_fresh_store(ENGINE) as store:
        await store.write(TelemetryBatch(spans=parents + children))
        await store.service_edges(window, limit=10)
        assert (await _edge_tables(store))[0] == 120
        # Cutoff inside the second minute: the first minute goes, the second is rolled again.
        await store.delete_before(at + 90 * SECOND + 500)
        (edge,) = await store.service_edges(window, limit=10)
        assert (await _edge_tables(store))[0] == 29
        await store.delete_before(now)
        assert await store.service_edges(window, limit=10) == []
        assert (await _edge_tables(store))[0] == 0
    # Calls 91..119 are left: call 90's parent started before the cutoff, its child after.
    assert (edge.call_count, edge.error_count) == (29, 7)


async def test_without_the_edge_tables_service_edges_is_raw_and_exact() -> None:
    now = time.time_ns()
    parents, children = _calls(now - 3 * 3600 * SECOND, 100)
    window = TimeRange(start_unix_nano=now - 4 * 3600 * SECOND, end_unix_nano=now)
    async with _store_without_rollups() as store:
        assert not cast(ClickHouseStore, store).edge_rollups
        await store.write(TelemetryBatch(spans=parents + children))
        (edge,) = await store.service_edges(window, limit=10)
    assert (edge.p50_duration_ns, edge.percentile_relative_error) == (50_000_000, 0.0)


# ---- the roll-ups follow the traces table's TTL ---------------------------------------------


@pytest.mark.parametrize(
    ("engine_full", "interval"),
    [
        (
            "MergeTree PARTITION BY toDate(Timestamp) ORDER BY (ServiceName, SpanName) "
            "TTL toDateTime(Timestamp) + toIntervalDay(3) SETTINGS index_granularity = 8192, "
            "ttl_only_drop_parts = 1",
            "toIntervalDay(3)",
        ),
        (
            "MergeTree ORDER BY x TTL toDateTime(Timestamp) + toIntervalHour(72)",
            "toIntervalHour(72)",
        ),
        (
            "ReplacingMergeTree(RolledAt) ORDER BY Minute TTL Minute + toIntervalSecond(600) "
            "SETTINGS index_granularity = 8192",
            "toIntervalSecond(600)",
        ),
        ("MergeTree ORDER BY x SETTINGS index_granularity = 8192", None),
        ("MergeTree ORDER BY x TTL toDateTime(Timestamp) + toIntervalDay(3) WHERE x = 1", None),
        ("MergeTree ORDER BY x TTL toDateTime(Timestamp) + toIntervalDay(3) TO DISK 'cold'", None),
        ("MergeTree ORDER BY x TTL toDateTime(Other) + toIntervalDay(3)", None),
        ("MergeTree ORDER BY x TTL toDateTime(Timestamp) + toIntervalDay(3); DROP TABLE y", None),
    ],
)
def test_ttl_interval_follows_only_the_plain_exporter_form(
    engine_full: str, interval: str | None
) -> None:
    assert ttl_interval(engine_full) == interval


async def _engines(store: ClickHouseStore) -> dict[str, str]:
    rows = await store.runtime.query(
        "SELECT name, engine_full FROM system.tables WHERE database = {database:String}",
        {"database": store.options.tables.database},
    )
    return {cast(str, name): cast(str, engine) for name, engine in rows}


async def test_create_tables_gives_the_rollups_the_traces_tables_ttl(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_fresh_store(ENGINE) as admin:
        tables = admin.options.tables
        await admin.runtime.command(
            f"ALTER TABLE {tables.qualified('traces')} MODIFY TTL "
            "toDateTime(Timestamp) + INTERVAL 3 DAY",
            {},
        )
        rollups = [tables.table(kind) for kind in ("red_1m", "edges_1m", "edges_1m_done")]
        before = await _engines(admin)
        assert all(ttl_interval(before[name]) is None for name in rollups)
        # Without create_tables the store touches no table: it says what to run.
        reading = msgspec.structs.replace(admin.options, create_tables=False)
        with caplog.at_level("WARNING", logger="coremetry.store.clickhouse"):
            async with open_clickhouse_store(reading):
                pass
        assert "MODIFY TTL Minute + toIntervalDay(3)" in caplog.text
        untouched = await _engines(admin)
        assert all(ttl_interval(untouched[name]) is None for name in rollups)
        # With it, every roll-up gets the traces table's interval on its Minute.
        async with open_clickhouse_store(admin.options):
            pass
        after = await _engines(admin)
    assert {name: ttl_interval(after[name]) for name in rollups} == dict.fromkeys(
        rollups, "toIntervalDay(3)"
    )
    assert all(" TTL Minute + toIntervalDay(3)" in after[name] for name in rollups)
