"""Every read's time limit is accepted beside ``readonly = 1``, whatever the budget left.

ClickHouse refused ``SETTINGS readonly = 1, max_execution_time = 268.4`` with ``164 READONLY``
(the value does not survive its round trip through microseconds): reads failed at random with
``StoreUnavailable`` (``test_*_conforms[rollups_match_raw]``, ``operations()``), about one
whole-millisecond budget in a hundred. Trio's clock stands still here (``mock_clock``), so the
budget left when the statement is built is exactly the one given: budgets that were refused.
"""

from typing import Final

import pytest
import trio
from trio.testing import MockClock

from coremetry.store import TelemetryBatch
from coremetry.store.clickhouse._runtime import TIME_LIMIT_STEPS, time_limit_s
from coremetry.store.testing._dataset import make_dataset

from ._chdb_http import ChdbHttpServer
from ._support import ENGINE, open_fresh_store

REFUSED_BEFORE: Final = (64.948, 128.48, 256.4, 268.4)
"""Budgets (s) whose whole-millisecond ``max_execution_time`` ClickHouse refused."""


@pytest.mark.parametrize("path", ["chdb", "http"])
async def test_reads_answer_under_budgets_that_were_refused(
    path: str, chdb_http: ChdbHttpServer, mock_clock: MockClock
) -> None:
    url = ENGINE if path == "chdb" else chdb_http.url
    data = make_dataset()
    async with open_fresh_store(url) as store:
        await store.write(TelemetryBatch(spans=data.spans))
        alone = await store.services(data.window, limit=1000)
        for budget in REFUSED_BEFORE:
            with trio.fail_after(budget):
                page = await store.services(data.window, limit=1000)
                operations = await store.operations("checkout", data.window, limit=1000)
            assert page == alone, budget
            assert operations.items, budget


def test_the_time_limit_is_the_budget_rounded_up_to_a_step() -> None:
    assert time_limit_s(268.4) == 268.40625
    assert time_limit_s(1.0) == 1.0
    assert time_limit_s(0.0) == 1 / TIME_LIMIT_STEPS
    assert time_limit_s(-3.0) == 1 / TIME_LIMIT_STEPS
    assert all(
        ms / 1000 <= time_limit_s(ms / 1000) < ms / 1000 + 1 / TIME_LIMIT_STEPS
        for ms in range(1, 20_000)
    )
