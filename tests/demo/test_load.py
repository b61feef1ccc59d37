"""Loading the demo into the embedded store: every record, shifted to end now, once.

These tests load the shipped package data through the real ingest decoders into a real
SQLite store in a temporary data dir, and read it back through the store's own queries.
"""

import gzip
import json
import shutil
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Final

import pytest
import trio

from coremetry.demo import DemoAlreadyLoaded, LoadResult, demo_state, load_demo, read_manifest
from coremetry.demo.loader import FAULTS_FILE, decode_data_file
from coremetry.demo.manifest import DataFile, Dataset, read_data_file
from coremetry.store import LogQuery, Span, StoreStatistics, TelemetryBatch, TimeRange
from coremetry.store.sqlite import open_sqlite_store

from ._support import NEZHA, log_time_ns, rows, trace_csvs

NEZHA_NAME: Final = "nezha-trainticket-2023-01-30"
DAY_NS: Final = 86_400 * 10**9
LIMIT_S: Final = 120


def test_the_decoders_keep_every_record_and_find_the_recorded_last_event() -> None:
    for dataset in read_manifest().datasets:
        last = 0
        for data_file in dataset.files:
            decoded = decode_data_file(data_file)
            assert decoded.rejected == []
            batch = decoded.batch
            if data_file.format == "otlp-json":
                counts = (data_file.spans, data_file.log_records, data_file.metric_points)
                assert (len(batch.spans), len(batch.logs), len(batch.metrics)) == counts
            else:  # every Zipkin record with a timestamp is one span (fragments merge)
                original = json.loads(gzip.decompress(read_data_file(data_file.path)))
                assert len(batch.spans) == sum("timestamp" in record for record in original)
            times = [s.end_time_unix_nano for s in batch.spans]
            times += [e.time_unix_nano for s in batch.spans for e in s.events]
            times += [r.time_unix_nano for r in batch.logs]
            times += [p.time_unix_nano for p in batch.metrics]
            last = max([last, *times])
        assert last == dataset.last_event_unix_nano, dataset.name


@cache
def expected_counts() -> tuple[int, int, int]:
    """Spans, log records and metric points the shipped files decode to."""
    spans = logs = points = 0
    for dataset in read_manifest().datasets:
        for data_file in dataset.files:
            batch = decode_data_file(data_file).batch
            spans, logs, points = (
                spans + len(batch.spans),
                logs + len(batch.logs),
                points + len(batch.metrics),
            )
    return spans, logs, points


def counts(stats: StoreStatistics) -> tuple[int, int, int]:
    return stats.span_count, stats.log_count, stats.metric_point_count


def nezha_extent() -> tuple[int, int]:
    """Earliest span start and latest metric time of the Nezha CSVs (unix ns)."""
    first = min(int(row["StartTimeUnixNano"]) for path in trace_csvs() for row in rows(path))
    (dataset,) = [d for d in read_manifest().datasets if d.name == NEZHA_NAME]
    return first, dataset.last_event_unix_nano


async def load_into(
    data_dir: Path,
    *,
    force: bool = False,
    now_unix_nano: int | None = None,
    on_file: Callable[[Dataset, DataFile], None] | None = None,
) -> tuple[LoadResult, StoreStatistics]:
    with trio.fail_after(LIMIT_S):
        async with open_sqlite_store(data_dir / "telemetry.db") as store:
            result = await load_demo(
                store, data_dir, force=force, now_unix_nano=now_unix_nano, on_file=on_file
            )
            return result, await store.statistics()


@pytest.fixture(scope="session")
def loaded_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LoadResult]:
    """One data dir with the demo loaded (copied by the tests that only read it)."""
    data_dir = tmp_path_factory.mktemp("demo-template")
    result, _ = trio.run(load_into, data_dir)
    return data_dir, result


@pytest.fixture
def loaded(loaded_template: tuple[Path, LoadResult], tmp_path: Path) -> tuple[Path, LoadResult]:
    template, result = loaded_template
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    return data_dir, result


async def test_the_last_event_is_now_and_spacing_is_kept(tmp_path: Path) -> None:
    before = time.time_ns()
    result, stats = await load_into(tmp_path)
    after = time.time_ns()
    now = result.state.started_unix_nano
    assert before <= now <= after
    assert result.status == "loaded"
    assert counts(stats) == expected_counts()
    for dataset in result.datasets:
        assert dataset.last_unix_nano == now, dataset.name  # each dataset ends now
        assert dataset.rejected == {}
        assert dataset.duplicate == 0
    assert stats.newest_unix_nano == now
    first, last = nezha_extent()
    shift = result.state.shifts[NEZHA_NAME]
    assert shift == now - last
    assert stats.oldest_unix_nano == first + shift  # the oldest record: a Nezha span
    assert stats.newest_unix_nano - stats.oldest_unix_nano == last - first  # ~12 h 21 min


async def test_spans_and_logs_keep_their_relative_times(loaded: tuple[Path, LoadResult]) -> None:
    data_dir, result = loaded
    shift = result.state.shifts[NEZHA_NAME]
    span_rows = rows(NEZHA / "rca_data/2023-01-30/trace/13_15_trace.csv")
    trace_id = span_rows[0]["TraceID"]
    logs = [
        r for r in rows(NEZHA / "rca_data/2023-01-30/log/13_15_log.csv") if r["TraceID"] == trace_id
    ]
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        spans = (await store.get_trace(trace_id, limit=1000)).items
        everything = TimeRange(start_unix_nano=0, end_unix_nano=2**62)
        records = (
            await store.search_logs(LogQuery(time_range=everything, trace_id=trace_id), limit=1000)
        ).items
    want_spans = {
        r["SpanID"]: (int(r["StartTimeUnixNano"]) + shift, int(r["EndTimeUnixNano"]) + shift)
        for r in span_rows
        if r["TraceID"] == trace_id
    }
    assert {s.span_id: (s.start_time_unix_nano, s.end_time_unix_nano) for s in spans} == want_spans
    assert any(int(r["TimeUnixNano"]) < 0 for r in logs)  # a corrupt-time row among them
    assert sorted(r.time_unix_nano for r in records) == sorted(log_time_ns(r) + shift for r in logs)


async def test_the_default_retention_keeps_the_whole_demo(loaded: tuple[Path, LoadResult]) -> None:
    data_dir, result = loaded
    assert all(dataset.outside_retention == 0 for dataset in result.datasets)
    async with open_sqlite_store(data_dir / "telemetry.db", retention_days=7.0) as store:
        before = await store.statistics()
        dropped = await store.delete_before(result.state.started_unix_nano - 7 * DAY_NS)
        assert (dropped.spans_deleted, dropped.logs_deleted, dropped.metric_points_deleted) == (
            0,
            0,
            0,
        )
        assert counts(await store.statistics()) == counts(before) == expected_counts()


async def test_a_short_retention_says_what_it_will_drop(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0.25) as store:
            result = await load_demo(store, tmp_path)
    (nezha,) = [d for d in result.datasets if d.name == NEZHA_NAME]
    # The Nezha traces and logs are 10.7-12.3 h before the last event: all older than 6 h.
    assert nezha.outside_retention > nezha.spans + nezha.logs


async def test_loading_twice_does_nothing(loaded: tuple[Path, LoadResult]) -> None:
    data_dir, first = loaded
    result, stats = await load_into(data_dir)
    assert result.status == "already_loaded"
    assert result.datasets == []
    assert result.state.shifts == first.state.shifts
    assert counts(stats) == expected_counts()


async def test_an_interrupted_load_resumes_without_duplicates(tmp_path: Path) -> None:
    loaded_files = 0

    class Interrupted(Exception):
        pass

    def stop_after_five(dataset: Dataset, data_file: DataFile) -> None:
        nonlocal loaded_files
        loaded_files += 1
        if loaded_files > 5:
            raise Interrupted

    with pytest.raises(Interrupted):
        await load_into(tmp_path, on_file=stop_after_five)
    interrupted = demo_state(tmp_path)
    assert interrupted is not None
    assert interrupted.state == "loading"
    result, stats = await load_into(tmp_path)
    assert result.status == "resumed"
    assert result.state.shifts == interrupted.shifts  # the same shift: records match
    assert sum(dataset.duplicate for dataset in result.datasets) > 0  # the first five files
    assert counts(stats) == expected_counts()


async def test_force_reloads_to_end_at_the_new_now(tmp_path: Path) -> None:
    start = time.time_ns() - DAY_NS
    first, _ = await load_into(tmp_path, now_unix_nano=start)
    result, stats = await load_into(tmp_path, force=True, now_unix_nano=start + 3600 * 10**9)
    assert result.status == "reloaded"
    assert stats.newest_unix_nano == start + 3600 * 10**9
    for name, shift in result.state.shifts.items():
        assert shift == first.state.shifts[name] + 3600 * 10**9
    assert counts(stats) == expected_counts()  # the old copy is gone, not doubled


async def test_a_store_emptied_by_retention_gets_the_demo_again(
    loaded: tuple[Path, LoadResult],
) -> None:
    data_dir, first = loaded
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        await store.delete_before(first.state.started_unix_nano + 1)  # all of it aged out
    later = first.state.started_unix_nano + 8 * DAY_NS
    result, stats = await load_into(data_dir, now_unix_nano=later)
    assert result.status == "reloaded"
    assert stats.newest_unix_nano == later
    assert counts(stats) == expected_counts()


async def test_force_after_retention_removed_part_of_the_demo(
    loaded: tuple[Path, LoadResult],
) -> None:
    data_dir, first = loaded
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        pruned = await store.delete_before(first.state.started_unix_nano - DAY_NS // 4)
    assert pruned.spans_deleted > 0  # the Nezha traces are 10.7-12.3 h old
    later = first.state.started_unix_nano + DAY_NS
    result, stats = await load_into(data_dir, force=True, now_unix_nano=later)
    assert result.status == "reloaded"
    assert counts(stats) == expected_counts()


async def test_force_refuses_when_the_store_holds_other_telemetry(
    loaded: tuple[Path, LoadResult],
) -> None:
    data_dir, _ = loaded
    mine = Span(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        name="mine",
        service_name="my-service",
        start_time_unix_nano=time.time_ns(),
        end_time_unix_nano=time.time_ns() + 1000,
    )
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        await store.write(TelemetryBatch(spans=[mine]))
        with pytest.raises(DemoAlreadyLoaded, match="besides the demo") as refused:
            await load_demo(store, data_dir, force=True)
        stats = await store.statistics()
    assert stats.span_count == expected_counts()[0] + 1  # nothing was deleted
    # what else is there; where to load instead depends on the backend: the CLI advises
    assert f"({expected_counts()[0] + 1} spans," in str(refused.value)
    assert "data dir" not in str(refused.value)


async def test_faults_are_shifted_like_the_data(loaded: tuple[Path, LoadResult]) -> None:
    data_dir, result = loaded
    shift = result.state.shifts[NEZHA_NAME]
    document = json.loads((data_dir / "demo" / FAULTS_FILE).read_text())
    assert document["shift_ns"] == shift
    upstream = json.loads((NEZHA / "rca_data/2023-01-30/2023-01-30-fault_list.json").read_text())
    want = sorted(
        (int(f["inject_timestamp"]) * 10**9 + shift, f["inject_pod"], f["inject_type"])
        for hour in upstream.values()
        for f in hour
    )
    got = [(f["time_unix_nano"], f["k8s.pod.name"], f["type"]) for f in document["faults"]]
    assert got == want
    (nezha,) = [d for d in result.datasets if d.name == NEZHA_NAME]
    assert nezha.faults == 17
    assert nezha.first_unix_nano is not None
    assert all(nezha.first_unix_nano < t < result.state.started_unix_nano for t, _, _ in got)
