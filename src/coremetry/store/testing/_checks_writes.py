"""Checks of writing and of the store's life.

Counts, idempotency, all-or-nothing, retention, closing, cancellation and concurrency.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import trio

from coremetry.store.errors import QueryRejected, StoreClosed
from coremetry.store.interface import MAX_LIMIT, LogQuery
from coremetry.store.model import HistogramValue, LogRecord, MetricPoint, TelemetryBatch

from ._dataset import _gauge_points, make_dataset
from ._reference import _log_key
from ._support import MINUTE, ConformanceError, MakeStore, _equal, _every_query, _expect


async def check_write_and_statistics(make_store: MakeStore) -> None:
    """An empty store, one batch written, counts and time extent as written."""
    data = make_dataset()
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
    data = make_dataset()
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
    data = make_dataset()
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


async def check_retention(make_store: MakeStore) -> None:
    """delete_before removes exactly what is older than the cutoff, of every kind."""
    data = make_dataset()
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
        _equal(
            stats.log_count,
            sum(1 for r in data.logs if r.time_unix_nano >= cutoff),
            "log records kept",
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
    data = make_dataset()
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
    data = make_dataset()
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
    data = make_dataset()
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
