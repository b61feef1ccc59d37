"""Run a command with Coremetry configured for ClickHouse behind the HTTP stand-in.

``python -m tests.store.clickhouse.with_clickhouse -- pytest tests/observability/...`` starts
the ClickHouse HTTP stand-in (:mod:`_chdb_http`, chDB in this process) on loopback, then runs
the command with ``COREMETRY_STORE_BACKEND=clickhouse``, ``COREMETRY_CLICKHOUSE_URL`` pointing
at it and ``COREMETRY_CLICKHOUSE_CREATE_TABLES=true`` (the exporter's tables are created on
first open), and exits with the command's status. Every ``coremetry`` process the command
starts (``serve --demo``, ``detect``, ``token``) then reads and writes the same ClickHouse
tables over HTTP, as processes sharing a real server would: the end-to-end tests run
unchanged with the ClickHouse backend behind them (the ``clickhouse`` nox session).
"""

import os
import subprocess
import sys

from ._chdb_http import serve_chdb_http


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print(
            "usage: python -m tests.store.clickhouse.with_clickhouse -- COMMAND [ARG...]",
            file=sys.stderr,
        )
        return 2
    with serve_chdb_http() as server:
        env = {
            **os.environ,
            "COREMETRY_STORE_BACKEND": "clickhouse",
            "COREMETRY_CLICKHOUSE_URL": server.url,
            "COREMETRY_CLICKHOUSE_CREATE_TABLES": "true",
        }
        print(f"ClickHouse HTTP stand-in (chDB) on {server.url}", file=sys.stderr, flush=True)
        done = subprocess.run(
            command, env=env, check=False, stdin=subprocess.DEVNULL, start_new_session=True
        )
        print(f"{len(server.statements)} statements run on chDB", file=sys.stderr, flush=True)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
