"""The store conformance suite (coremetry.store.testing) against the embedded SQLite store.

One test per check, so that a failure names the behaviour that broke.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from coremetry.store import TelemetryStore, open_sqlite_store
from coremetry.store.testing import CONFORMANCE_CHECKS, ConformanceCheck

# Each check with the roll-ups written at once, a tail beside them, and every span in the tail.
pytestmark = pytest.mark.usefixtures("rollup_tail")


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda check: check.name)
async def test_sqlite_store_conforms(check: ConformanceCheck, tmp_path: Path) -> None:
    opened: list[Path] = []

    @asynccontextmanager
    async def make_store() -> AsyncIterator[TelemetryStore]:
        path = tmp_path / f"telemetry-{len(opened)}.db"
        opened.append(path)
        async with open_sqlite_store(path, retention_days=0, query_threads=2) as store:
            yield store

    with trio.fail_after(120):
        await check.run(make_store)
