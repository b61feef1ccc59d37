"""The embedded store's RED roll-ups beyond the conformance suite.

Day buckets (the suite keeps its data within a day), the build of the roll-ups when a
version-3 database is opened, the sketches of a version-4 database re-encoded on open, the
window plan, and that the roll-up reads use their keys.
"""

import itertools
import random
import sqlite3
import time
from pathlib import Path

import pytest

from coremetry.store import Span, TelemetryBatch, TimeRange, open_sqlite_store
from coremetry.store._sketch import LatencySketch, encode_msgpack
from coremetry.store.errors import StoreUnavailable
from coremetry.store.sqlite import SCHEMA_VERSION, _rollups
from coremetry.store.sqlite._rollups import WIDTHS, plan, widened
from coremetry.store.sqlite._runtime import ReadContext, connect
from coremetry.store.testing._checks_rollups import _compare, _compare_logs, _logs, _spans

# Every test with the roll-ups written at once, a tail beside them, and every span in the tail.
pytestmark = pytest.mark.usefixtures("rollup_tail")

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def _days_of_spans() -> tuple[int, list[Span]]:
    base = (time.time_ns() // DAY - 5) * DAY + 3 * HOUR + 11 * SECOND
    return base, list(_spans(base, random.Random(5), hours=80, traces=500))


def _days_and_window() -> tuple[list[Span], TimeRange]:
    """:func:`_days_of_spans`' spans and a window over all of them."""
    base, spans = _days_of_spans()
    return spans, TimeRange(start_unix_nano=base - HOUR, end_unix_nano=base + 81 * HOUR)


async def test_windows_of_whole_days_agree_with_the_raw_spans(tmp_path: Path) -> None:
    base, spans = _days_of_spans()
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        day = base - base % DAY
        windows = {
            "two whole days": TimeRange(start_unix_nano=day + DAY, end_unix_nano=day + 3 * DAY),
            "days, hours and minutes": TimeRange(
                start_unix_nano=base + 5 * HOUR + 17 * MINUTE + 3,
                end_unix_nano=base + 70 * HOUR + 9 * MINUTE + 5 * SECOND,
            ),
        }
        for what, window in windows.items():
            assert any(width == 86400 for width, _, _ in plan(*_bounds(window))[1])
            await _compare(store, spans, window, what)


_KEYS = {
    "red_services": "width, bucket, resource_id",
    "red_operations": "width, bucket, resource_id, name",
    "red_edges": "width, bucket, caller, callee",
}


async def test_one_services_rows_over_decades_are_read_as_ranges(tmp_path: Path) -> None:
    # A window of 90 years lists more buckets than SQLite takes parameters: read as ranges.
    base, spans = _days_of_spans()
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        week = TimeRange(start_unix_nano=base - HOUR, end_unix_nano=base + 81 * HOUR)
        decades = TimeRange(start_unix_nano=MINUTE, end_unix_nano=base + 90 * 365 * DAY)
        for name in ("gateway", "orders"):
            assert await store.operations(name, decades, limit=100) == await store.operations(
                name, week, limit=100
            )
            found = await store.services(decades, limit=10, service_name=name)
            assert [s.request_count for s in found.items] == [
                s.request_count
                for s in (await store.services(week, limit=10)).items
                if s.service_name == name
            ]


def _bounds(window: TimeRange) -> tuple[int, int]:
    return window.start_unix_nano, window.end_unix_nano


async def test_a_version_3_database_gets_its_rollups_built_on_open(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.db"
    spans, window = _days_and_window()
    logs = _logs(spans)
    async with open_sqlite_store(path, retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans, logs=logs))
    # Make it the database version 3 wrote: no roll-up tables.
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table in (
            "red_services",
            "red_operations",
            "red_edges",
            "edge_pending",
            "red_logs",
            "rollup_days",
            "rollup_mark",
        ):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("PRAGMA user_version = 3")
    finally:
        conn.close()
    async with open_sqlite_store(path, retention_days=0) as store:
        await _compare(store, spans, window, "the migrated store")
        await _compare_logs(store, logs, window, "the migrated store")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # Children whose parent was never stored wait for it (and are no edge meanwhile).
        orphans = conn.execute("SELECT count(*) FROM edge_pending").fetchone()[0]
        assert orphans == sum(1 for s in spans if s.name == "orphan")
    finally:
        conn.close()


async def test_a_version_4_database_gets_its_sketches_reencoded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.db"
    spans, window = _days_and_window()
    async with open_sqlite_store(path, retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        await store.resolve_pending()  # the tail rolled up: every span in the roll-up rows
        before = await store.services(window, limit=100)
    # Make it the database version 4 wrote: sketches in MessagePack.
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table in ("red_services", "red_operations", "red_edges"):
            rows = []
            keys = _KEYS[table]
            for *key, blob in conn.execute(f"SELECT {keys}, sketch FROM {table}").fetchall():
                old = encode_msgpack(LatencySketch.decode(blob))
                where = " AND ".join(f"{column} = ?" for column in keys.split(", "))
                conn.execute(f"UPDATE {table} SET sketch = ? WHERE {where}", (old, *key))
                rows.append(key)
            assert rows, table
        conn.execute("DROP TABLE rollup_days")  # version 6's
        conn.execute("DROP TABLE rollup_mark")  # version 7's
        conn.execute("PRAGMA user_version = 4")
    finally:
        conn.close()
    async with open_sqlite_store(path, retention_days=0) as store:
        assert await store.services(window, limit=100) == before
        await _compare(store, spans, window, "the re-encoded store")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 1),
        (17 * SECOND, 51 * SECOND),
        (MINUTE, 2 * MINUTE),
        (59 * SECOND, 61 * SECOND),
        (3 * HOUR + 7, 9 * DAY + 5 * HOUR + 3 * MINUTE + 1),
        (DAY, 8 * DAY),
        (DAY - MINUTE, 8 * DAY + MINUTE),
    ],
)
def test_the_plan_covers_the_window_once(start: int, end: int) -> None:
    raw, rolled = plan(start, end)
    pieces = sorted([*raw, *((low, high) for _, low, high in rolled)])
    assert pieces[0][0] == start
    assert pieces[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    for width, low, high in rolled:
        assert width in WIDTHS
        assert low % (width * SECOND) == 0
        assert high % (width * SECOND) == 0
    assert all(high - low < MINUTE for low, high in raw)


def test_a_week_is_read_as_few_rows_as_an_hour() -> None:
    def rows(start: int, end: int) -> int:
        return sum((high - low) // (width * SECOND) for width, low, high in plan(start, end)[1])

    start = 1_700_000_000 * SECOND + 123_456_789  # not aligned to anything
    hour = rows(start, start + HOUR)
    week = rows(start, start + 7 * DAY)
    assert hour <= 60
    # 6 days + up to 2 x 23 hours + up to 2 x 59 minutes.
    assert week <= 6 + 46 + 118


async def test_a_window_ending_after_the_data_is_read_as_whole_days_at_its_end(
    tmp_path: Path,
) -> None:
    # "The last week" ends after the newest span: its end is read as the current day's rows
    # (not 23 hour rows + 59 minute rows + a raw minute per group), with the same answer; an
    # end just before a span stays where it is, or moves only as far as the span allows.
    _, spans = _days_of_spans()
    starts = sorted(s.start_time_unix_nano for s in spans)
    oldest, newest = starts[0], starts[-1]
    middle = starts[len(starts) // 2]
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        week = TimeRange(start_unix_nano=newest + 1 - 7 * DAY, end_unix_nano=newest + 1)
        await _compare(store, spans, week, "a week ending after the newest span")
    conn = connect(tmp_path / "t.db", reader=True)
    try:

        def widen(start: int, end: int) -> tuple[int, int]:
            window = TimeRange(start_unix_nano=start, end_unix_nano=end)
            found = ReadContext(conn).run(lambda ctx: widened(ctx, window))
            return found.start_unix_nano, found.end_unix_nano

        next_day = newest - newest % DAY + DAY
        start = newest + 1 - 7 * DAY  # days before the oldest span
        assert widen(start, newest + 1) == (start - start % DAY, next_day)
        assert widen(oldest, oldest + HOUR)[0] == oldest - oldest % DAY
        # A span starts at ``middle``: an end there stays; one just before it moves at most
        # to it; a start just after it stays.
        assert widen(middle - HOUR, middle)[1] == middle
        assert middle - 1 <= widen(middle - HOUR, middle - 1)[1] <= middle
        assert widen(middle + 1, middle + HOUR)[0] == middle + 1
    finally:
        conn.close()


async def test_rollup_reads_use_their_keys(tmp_path: Path) -> None:
    base, spans = _days_of_spans()
    window = TimeRange(start_unix_nano=base + 7, end_unix_nano=base + 50 * HOUR + 7)
    async with open_sqlite_store(tmp_path / "t.db", query_threads=1, retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans))
        await store.statistics()
        statements: list[str] = []
        store._readers[0].set_trace_callback(statements.append)
        await store.services(window, limit=10)
        await store.operations("orders", window, limit=10)
        await store.service_edges(window, limit=10, service_name="orders")
        await store.deploys(window, limit=10)
        store._readers[0].set_trace_callback(None)
    conn = sqlite3.connect(tmp_path / "t.db")
    try:
        for sql in statements:
            if "red_" not in sql:
                continue
            lines = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            assert not [line for line in lines if line.startswith("SCAN x")], (sql, lines)
    finally:
        conn.close()


async def test_the_deferred_pass_moves_waiting_children_into_the_rollups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Children written before their parents wait in edge_pending; the answers count them at
    # once, and the same answers stand after the pass rolled them up (only orphans wait then).
    monkeypatch.setattr(_rollups, "ROLL_EVERY", 50)  # each write rolled up before the next
    spans, window = _days_and_window()
    newest_first = sorted(spans, key=lambda s: -s.start_time_unix_nano)
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        for i in range(0, len(newest_first), 50):
            await store.write(TelemetryBatch(spans=newest_first[i : i + 50][::-1]))
        waiting_before = _pending(tmp_path / "t.db")
        await _compare(store, spans, window, "before the pass")
        await store.resolve_pending()
        await _compare(store, spans, window, "after the pass")
    orphans = sum(1 for s in spans if s.name == "orphan")
    assert waiting_before > orphans
    assert _pending(tmp_path / "t.db") == orphans


def _pending(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM edge_pending").fetchone()[0])
    finally:
        conn.close()


async def test_retention_up_to_the_largest_time_empties_the_rollups(tmp_path: Path) -> None:
    spans, window = _days_and_window()
    async with open_sqlite_store(tmp_path / "t.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans, logs=_logs(spans)))
        await store.delete_before(2**63 - 1)
        await _compare(store, [], window, "an emptied store")
        await _compare_logs(store, [], window, "an emptied store")


def _mark_and_top(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT span_id, (SELECT coalesce(max(id), 0) FROM spans) FROM rollup_mark"
        ).fetchone()
        return int(row[0]), int(row[1])
    finally:
        conn.close()


async def test_a_tail_left_by_a_stopped_writer_is_read_raw_then_rolled_up(tmp_path: Path) -> None:
    # A writer keeps the roll-ups of its newest spans in memory; stopped before it wrote them,
    # it leaves them above the mark: the next store answers from them raw, its pass rolls
    # them up, and the answers never change.
    path = tmp_path / "t.db"
    spans, window = _days_and_window()
    rolled = 0  # where the mark should be: a write rolls up a tail of ROLL_EVERY spans or more
    async with open_sqlite_store(path, retention_days=0) as store:
        for i in range(0, len(spans), 500):
            await store.write(TelemetryBatch(spans=spans[i : i + 500]))
            top = min(i + 500, len(spans))
            if top - rolled >= _rollups.ROLL_EVERY:
                rolled = top
    assert _mark_and_top(path) == (rolled, len(spans))
    async with open_sqlite_store(path, retention_days=0) as store:
        await _compare(store, spans, window, "a tail left by the last writer")
        assert (await store.statistics()).span_count == len(spans)
        await store.resolve_pending()
        assert _mark_and_top(path) == (len(spans), len(spans))
        await _compare(store, spans, window, "after the pass")
        assert (await store.statistics()).span_count == len(spans)


async def test_two_writers_on_one_database_keep_the_rollups_exact(tmp_path: Path) -> None:
    # Two stores open on one file (as `coremetry ingest` beside a server): each write checks,
    # in its transaction, whether the other stored spans or rolled up the tail meanwhile, so
    # no span is rolled up twice or lost, whichever writer rolls up.
    path = tmp_path / "t.db"
    spans, window = _days_and_window()
    async with (
        open_sqlite_store(path, retention_days=0) as first,
        open_sqlite_store(path, retention_days=0) as second,
    ):
        for n, i in enumerate(range(0, len(spans), 300)):
            writer = (first, second)[n % 3 % 2]  # first, second, first, first, second, ...
            await writer.write(TelemetryBatch(spans=spans[i : i + 300]))
            if n % 5 == 4:
                await (second, first)[n % 2].resolve_pending()
            if n % 4 == 3:
                # A batch written again, partly new: the new rows are read back.
                again = spans[i : i + 400]
                await writer.write(TelemetryBatch(spans=again))
        for store in (first, second):
            await _compare(store, spans, window, "two writers")
        await first.resolve_pending()
        await second.resolve_pending()
        for store in (first, second):
            await _compare(store, spans, window, "two writers, tail rolled up")
            assert (await store.statistics()).span_count == len(spans)


async def test_a_failed_write_leaves_the_rollups_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write that fails after its spans were summed in memory rolls back; the memory goes
    # with it, and the spans earlier writes committed are read back from the table instead.
    path = tmp_path / "t.db"
    spans, window = _days_and_window()
    third = len(spans) // 3
    logs = _logs(spans)
    real_apply_logs = _rollups.apply_logs

    def failing(conn: sqlite3.Connection, last_id: int) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    async with open_sqlite_store(path, retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans[:third]))
        monkeypatch.setattr(_rollups, "apply_logs", failing)
        with pytest.raises(StoreUnavailable):
            await store.write(TelemetryBatch(spans=spans[third : 2 * third], logs=logs[:5]))
        monkeypatch.setattr(_rollups, "apply_logs", real_apply_logs)
        # Other spans take the row ids the failed write's had in memory.
        await store.write(TelemetryBatch(spans=spans[2 * third :]))
        await store.write(TelemetryBatch(spans=spans[third : 2 * third]))
        await _compare(store, spans, window, "after a failed write")
        await store.resolve_pending()
        await _compare(store, spans, window, "after a failed write, tail rolled up")
        assert (await store.statistics()).span_count == len(spans)


async def test_retention_by_another_writer_under_a_tail_in_memory_keeps_the_rollups_exact(
    tmp_path: Path,
) -> None:
    # A writer (`coremetry ingest`) holds its newest spans' roll-ups in memory while another
    # (the server) runs retention: that pass rolls those spans up, deletes them all (they are
    # old) and moves the mark back down, to where the first writer's memory began. The first
    # writer must not write its memory then (the spans are gone) nor let its next rows, which
    # take the deleted rows' ids, fall below the mark (fresh-user finding).
    path = tmp_path / "t.db"
    spans, window = _days_and_window()
    ordered = sorted(spans, key=lambda s: s.start_time_unix_nano)
    cutoff = ordered[len(ordered) // 3].start_time_unix_nano
    old = [s for s in ordered if s.start_time_unix_nano < cutoff]
    kept = [s for s in ordered if s.start_time_unix_nano >= cutoff]
    async with (
        open_sqlite_store(path, retention_days=0) as importer,
        open_sqlite_store(path, retention_days=0) as server,
    ):
        await importer.write(TelemetryBatch(spans=old))
        deleted = await server.delete_before(cutoff)
        assert deleted.spans_deleted == len(old)
        for i in range(0, len(kept), 300):
            await importer.write(TelemetryBatch(spans=kept[i : i + 300]))
        for store in (importer, server):
            await _compare(store, kept, window, "retention under another writer's tail")
            assert (await store.statistics()).span_count == len(kept)
        await importer.resolve_pending()
        await server.resolve_pending()
        await _compare(server, kept, window, "the same, tail rolled up")
        assert (await server.statistics()).span_count == len(kept)


async def test_a_version_7_database_gets_the_marks_epoch_on_open(tmp_path: Path) -> None:
    # Version 7 kept the mark without its epoch; opening adds it, and the tail it left is
    # still read raw, then rolled up.
    path = tmp_path / "t.db"
    spans, window = _days_and_window()
    async with open_sqlite_store(path, retention_days=0) as store:
        await store.write(TelemetryBatch(spans=spans[: len(spans) // 2]))
        await store.resolve_pending()
        await store.write(TelemetryBatch(spans=spans[len(spans) // 2 :]))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("ALTER TABLE rollup_mark DROP COLUMN epoch")
        conn.execute("PRAGMA user_version = 7")
    finally:
        conn.close()
    async with open_sqlite_store(path, retention_days=0) as store:
        await _compare(store, spans, window, "the migrated store")
        await store.resolve_pending()
        await _compare(store, spans, window, "the migrated store, tail rolled up")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        mark, top, epoch = conn.execute(
            "SELECT span_id, (SELECT max(id) FROM spans), epoch FROM rollup_mark"
        ).fetchone()
        assert (mark, isinstance(epoch, int)) == (top, True)
    finally:
        conn.close()
