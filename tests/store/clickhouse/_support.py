"""Opening ClickHouse stores on fresh databases of the one in-process chDB engine.

chDB allows one engine per process: every store gets a database of its own on it, created
with the exporter's DDL (``create_tables``) and dropped when the store closes.
"""

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final

import clickhouse_connect
import msgspec
import trio

from coremetry.store import TelemetryStore
from coremetry.store.clickhouse import (
    ClickHouseOptions,
    ClickHouseStore,
    TableNames,
    open_clickhouse_store,
)

ENGINE: Final = "chdb://memory"
"""The test session's chDB engine (in memory)."""

_databases = itertools.count()


def fresh_options(url: str, **changes: int | str | bool | float) -> ClickHouseOptions:
    """Options for a new database on ``url`` (tables created on open)."""
    options = ClickHouseOptions(
        url=url,
        tables=TableNames(database=f"coremetry_test_{next(_databases)}"),
        create_tables=True,
        query_threads=2,
    )
    return msgspec.structs.replace(options, **changes) if changes else options


@asynccontextmanager
async def open_fresh_store(
    url: str, **changes: int | str | bool | float
) -> AsyncIterator[ClickHouseStore]:
    """A store on a new database at ``url``; the database is dropped afterwards."""
    options = fresh_options(url, **changes)
    drop = f"DROP DATABASE IF EXISTS `{options.tables.database}`"
    async with open_clickhouse_store(options) as store:
        yield store
        if not store._closed:
            await store.runtime.command(drop, {})
            return
    client = await trio.to_thread.run_sync(lambda: clickhouse_connect.get_client(dsn=url))
    try:
        await trio.to_thread.run_sync(client.command, drop)
    finally:
        client.close()


def store_factory(url: str) -> Callable[[], AbstractAsyncContextManager[TelemetryStore]]:
    """A conformance-suite ``make_store`` for ``url``."""

    @asynccontextmanager
    async def make_store() -> AsyncIterator[TelemetryStore]:
        async with open_fresh_store(url) as store:
            yield store

    return make_store
