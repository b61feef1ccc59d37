"""After a statement fails part way through its result, the next read answers exactly.

chDB 4.4 keeps the output a failed statement had produced on its connection and returns it
ahead of the next statement's own result (the CI flake of ``test_*_conforms[cancellation]``:
a read cut by its time limit, then ``services()`` decoding garbage — ``MemoryError`` — or
counting another read's block too — 1,032 spans of 516). The failure here is made certain, not
timed: ``throwIf`` raises at a fixed row, after many blocks of output. Both paths: the embedded
engine (the store's own clients) and the HTTP stand-in (whose handle is the one reused).
"""

from typing import Final

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from coremetry.store import TelemetryBatch
from coremetry.store.testing._dataset import make_dataset

from ._chdb_http import ChdbHttpServer
from ._support import ENGINE, open_fresh_store

FAILING: Final = (
    "SELECT number, toString(number) AS text, throwIf(number = 150000) AS fail FROM numbers(200000)"
)
"""A read that outputs 150 blocks of rows (``max_block_size`` 1,000), then raises (code 395)."""


@pytest.mark.parametrize("path", ["chdb", "http"])
async def test_a_read_failing_mid_result_leaves_the_next_answers_exact(
    path: str, chdb_http: ChdbHttpServer
) -> None:
    url = ENGINE if path == "chdb" else chdb_http.url
    data = make_dataset()
    async with open_fresh_store(url) as store:
        await store.write(TelemetryBatch(spans=data.spans))
        alone = await store.services(data.window, limit=1000)
        assert sum(s.span_count for s in alone.items) == len(data.spans)
        for _ in range(3):
            with pytest.raises(DatabaseError, match="throwIf"):
                await store.runtime.query(FAILING, {}, settings={"max_block_size": 1000})
            assert await store.services(data.window, limit=1000) == alone
            stats = await store.statistics()
            assert stats.span_count == len(data.spans)
