"""The ClickHouse backend's RED roll-ups: made with the tables, read when there, raw otherwise.

``clickhouse.create_tables`` on a new database creates ``otel_traces_red_1m`` and the
materialized view that fills it; ``services``/``operations``/``deploys`` then read it (their
percentiles from its latency sketches, within 1 %). Tables made without it (an exporter's own,
or an older Coremetry's) are read raw, exactly, and pass the same conformance checks.
"""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from coremetry.store import Span, SpanKind, TelemetryBatch, TelemetryStore, TimeRange
from coremetry.store.clickhouse import exporter_ddl, open_clickhouse_store
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
