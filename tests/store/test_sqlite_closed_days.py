"""The embedded store's cache of merged past days (``_rollups.ClosedDays``, issue 15).

A read of whole past days takes their merged rows from the cache; the answers must be the
ones the day rows give (``cache=None``), and a write into a cached day (a late span, the
deferred pass, retention), by this process or another, must change the next answer.
"""

import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from coremetry.store import Span, SpanKind, TelemetryBatch, TimeRange, open_sqlite_store
from coremetry.store.interface import (
    DeployRecord,
    OperationSummary,
    Page,
    ServiceEdge,
    ServiceSummary,
)
from coremetry.store.sqlite import SqliteStore
from coremetry.store.sqlite._rollups import (
    ClosedDays,
    deploys,
    operations,
    service_edges,
    services,
    touch_all_days,
    touch_days,
)
from coremetry.store.sqlite._runtime import SqlParam
from coremetry.store.testing._checks_rollups import _compare, _spans

# Every test with the roll-ups written at once, a tail beside them, and every span in the tail.
pytestmark = pytest.mark.usefixtures("rollup_tail")

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MAX = 1000
Answers = tuple[
    Page[ServiceSummary],
    Page[ServiceSummary],
    list[ServiceEdge],
    list[ServiceEdge],
    list[DeployRecord],
    list[DeployRecord],
    Page[OperationSummary],
]


def _today() -> int:
    return time.time_ns() // DAY * DAY


async def _answers(store: SqliteStore, window: TimeRange, *, cached: bool) -> Answers:
    """Every read the cache serves, with the store's cache or without one."""
    cache = store._closed_days if cached else None
    return (
        await store._read(lambda ctx: services(ctx, window, MAX, None, cache)),
        await store._read(lambda ctx: services(ctx, window, MAX, "orders", cache)),
        await store._read(lambda ctx: service_edges(ctx, window, MAX, None, cache)),
        await store._read(lambda ctx: service_edges(ctx, window, MAX, "stock", cache)),
        await store._read(lambda ctx: deploys(ctx, window, MAX, None, cache)),
        await store._read(lambda ctx: deploys(ctx, window, MAX, "orders", cache)),
        await store._read(lambda ctx: operations(ctx, "orders", window, MAX, cache)),
    )


async def _same_as_uncached(store: SqliteStore, window: TimeRange) -> Answers:
    expected = await _answers(store, window, cached=False)
    assert await _answers(store, window, cached=True) == expected
    return expected


def _past_spans() -> tuple[int, list[Span]]:
    base = _today() - 5 * DAY + 3 * HOUR + 11 * SECOND
    return base, list(_spans(base, random.Random(7), hours=80, traces=400))


def _span(
    trace: str, span_id: str, parent: str, service: str, at: int, *, version: str = "v1"
) -> Span:
    return Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent,
        service_name=service,
        name="late",
        kind=SpanKind.SERVER,
        start_time_unix_nano=at,
        end_time_unix_nano=at + 1_000_000,
        resource_attributes={"service.name": service, "service.version": version},
    )


def _last_week() -> TimeRange:
    now = time.time_ns()
    return TimeRange(start_unix_nano=now - 7 * DAY, end_unix_nano=now)


def _late_trace(number: int) -> list[Span]:
    """A trace of four days ago (a cached past day): a new version of orders calling stock."""
    at = _today() - 4 * DAY + 5 * HOUR
    trace = f"{number:032x}"
    return [
        _span(trace, f"{1:016x}", "", "orders", at, version="orders-9"),
        _span(trace, f"{2:016x}", f"{1:016x}", "stock", at + 10),
    ]


def _counts_the_late_trace(before: Answers, after: Answers) -> None:
    """``after`` has :func:`_late_trace`'s version and call, ``before`` does not."""
    assert after != before
    orders = [s for s in after[0].items if s.service_name == "orders"]
    assert "orders-9" in orders[0].versions
    edges = {(e.caller, e.callee): e.call_count for e in after[2]}
    edges_before = {(e.caller, e.callee): e.call_count for e in before[2]}
    assert edges[("orders", "stock")] == edges_before[("orders", "stock")] + 1


async def test_merged_past_days_answer_as_their_day_rows(tmp_path: Path) -> None:
    base, spans = _past_spans()
    now = time.time_ns()
    windows = {
        "the last 7 days": TimeRange(start_unix_nano=now - 7 * DAY, end_unix_nano=now),
        "three whole days": TimeRange(
            start_unix_nano=_today() - 5 * DAY, end_unix_nano=_today() - 2 * DAY
        ),
        "days, hours and minutes": TimeRange(
            start_unix_nano=base + 5 * HOUR + 17 * MINUTE + 3,
            end_unix_nano=base + 70 * HOUR + 9 * MINUTE + 5 * SECOND,
        ),
    }
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        cache = store._closed_days
        for what, window in windows.items():
            first = await _same_as_uncached(store, window)  # fills the cache
            hits = cache.hits
            assert await _answers(store, window, cached=True) == first, what
            assert cache.hits == hits + 7, f"{what}: served from the cache"
            await _compare(store, spans, window, what)


async def test_a_late_span_into_a_cached_day_changes_the_next_answer(tmp_path: Path) -> None:
    _, spans = _past_spans()
    week = _last_week()
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        before = await _same_as_uncached(store, week)
        await _answers(store, week, cached=True)  # served from the cache
        await store.write(TelemetryBatch(spans=_late_trace(7)))  # OTLP delivers it late
        after = await _same_as_uncached(store, week)
    _counts_the_late_trace(before, after)


async def test_retention_changes_the_next_answer_over_cached_days(tmp_path: Path) -> None:
    _, spans = _past_spans()
    week = _last_week()
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        before = await _same_as_uncached(store, week)
        await store.delete_before(_today() - 3 * DAY + 7 * HOUR)
        after = await _same_as_uncached(store, week)
        kept = [s for s in spans if s.start_time_unix_nano >= _today() - 3 * DAY + 7 * HOUR]
        await _compare(store, kept, week, "the week after retention")
    assert after != before


async def test_the_deferred_pass_into_a_cached_day_changes_no_answer(tmp_path: Path) -> None:
    # A child of a past day waits for its parent (stored later, on the day before the
    # window): the answers count it from edge_pending, then the pass moves it into the day's
    # roll-up rows, which the cache holds merged.
    day = _today() - 3 * DAY
    window = TimeRange(start_unix_nano=day, end_unix_nano=day + 2 * DAY)
    trace = f"{9:032x}"
    child = _span(trace, f"{2:016x}", f"{1:016x}", "stock", day + HOUR)
    parent = _span(trace, f"{1:016x}", "", "orders", day - HOUR)
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=[child]))
        empty = await _same_as_uncached(store, window)
        await store.write(TelemetryBatch(spans=[parent]))
        waiting = await _same_as_uncached(store, window)
        await store.resolve_pending()
        rolled = await _same_as_uncached(store, window)
    assert empty[2] == []
    assert [(e.caller, e.callee, e.call_count) for e in waiting[2]] == [("orders", "stock", 1)]
    assert rolled == waiting


def _filler(value: str, calls: list[str]) -> Callable[[], list[tuple[SqlParam, ...]]]:
    def fill() -> list[tuple[SqlParam, ...]]:
        calls.append(value)
        return [(value,)]

    return fill


def _touch(path: Path, days: list[int] | None) -> None:
    """Another connection (another process, for SQLite) commits a change to ``days`` (all
    days' rows when ``None``, as retention does), bumping their generations as writers do."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        if days is None:
            touch_all_days(conn)
        else:
            touch_days(conn, days)
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_an_entry_serves_only_while_its_days_generations_are_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    days = ((86400, 0, 2 * DAY),)
    calls: list[str] = []
    async with open_sqlite_store(path, retention_days=0) as store:
        cache = ClosedDays(entries=2)

        async def rows(value: str) -> list[tuple[SqlParam, ...]]:
            return await store._read(lambda ctx: cache.rows("k", days, ctx, _filler(value, calls)))

        assert await rows("a") == [("a",)]
        assert await rows("b") == [("a",)]  # served
        _touch(path, [DAY])  # a write to the second day, from another connection
        assert await rows("c") == [("c",)]
        assert await rows("d") == [("c",)]
        _touch(path, [5 * DAY])  # another day: the entry stays
        assert await rows("e") == [("c",)]
        _touch(path, None)  # retention: any day
        assert await rows("f") == [("f",)]
    assert calls == ["a", "c", "f"]


async def test_the_cache_keeps_at_most_its_entries(tmp_path: Path) -> None:
    cache = ClosedDays(entries=2)
    calls: list[str] = []
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:

        async def rows(part: tuple[tuple[int, int, int], ...], value: str) -> None:
            await store._read(lambda ctx: cache.rows("k", part, ctx, _filler(value, calls)))

        for low in range(4):
            await rows(((86400, low * DAY, (low + 1) * DAY),), str(low))
        assert len(cache) == 2
        # The least recently used went first: day 0 is computed again, day 3 is served.
        await rows(((86400, 0, DAY),), "again")
        await rows(((86400, 3 * DAY, 4 * DAY),), "never")
    assert calls == ["0", "1", "2", "3", "again"]


async def test_a_late_span_written_by_another_process_changes_the_next_answer(
    tmp_path: Path,
) -> None:
    """``coremetry ingest`` writes into the store while the server runs (README): a second
    store on the same file (its own connections and writer, as another process has) stores a
    span of a cached past day; the server's store answers with it at once."""
    _, spans = _past_spans()
    week = _last_week()
    path = tmp_path / "t.db"
    async with open_sqlite_store(path, retention_days=0) as server:
        await server.write(TelemetryBatch(spans=spans))
        before = await _same_as_uncached(server, week)
        assert await _answers(server, week, cached=True) == before  # served from the cache
        async with open_sqlite_store(path, retention_days=0) as other:
            await other.write(TelemetryBatch(spans=_late_trace(8)))
        after = await _same_as_uncached(server, week)
    _counts_the_late_trace(before, after)
