"""Fixtures of the ClickHouse backend's tests: the HTTP stand-in on chDB.

These tests need the ``clickhouse-test`` extra (``clickhouse-connect`` and chDB, the
in-process ClickHouse engine). Without it this directory is not collected: the ``clickhouse``
nox session installs it and runs them (``.ci/run`` runs that session).
"""

import importlib.util
from collections.abc import Iterator

import pytest

if (
    importlib.util.find_spec("chdb") is None
    or importlib.util.find_spec("clickhouse_connect") is None
):
    collect_ignore_glob = ["test_*.py"]
else:
    from ._chdb_http import ChdbHttpServer, serve_chdb_http
    from ._support import ENGINE

    @pytest.fixture(scope="session")
    def chdb_http() -> Iterator[ChdbHttpServer]:
        """The ClickHouse HTTP stand-in on loopback, over the session's chDB engine."""
        with serve_chdb_http(ENGINE) as server:
            yield server
