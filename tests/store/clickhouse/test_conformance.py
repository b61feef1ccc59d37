"""The store conformance suite against the ClickHouse backend on a real ClickHouse engine.

Two paths, one test per check and path, so that a failure names the behaviour and the path:

- ``chdb``: the backend's SQL on chDB in this process (``chdb://`` through ``clickhouse-connect``);
- ``http``: ``clickhouse-connect``'s HTTP client against the loopback stand-in that runs the
  received SQL on chDB (:mod:`._chdb_http`): parameters, settings, formats, errors and inserts
  cross a real HTTP connection.

The tables are the exporter's (its DDL, :func:`coremetry.store.clickhouse.exporter_ddl`).
"""

import pytest
import trio

from coremetry.store.testing import CONFORMANCE_CHECKS, ConformanceCheck

from ._chdb_http import ChdbHttpServer
from ._support import ENGINE, store_factory


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda check: check.name)
async def test_chdb_conforms(check: ConformanceCheck) -> None:
    with trio.fail_after(300):
        await check.run(store_factory(ENGINE))


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda check: check.name)
async def test_http_conforms(check: ConformanceCheck, chdb_http: ChdbHttpServer) -> None:
    with trio.fail_after(300):
        await check.run(store_factory(chdb_http.url))
