"""Ours with the whole security path, for ``bench/http_echo.py --secured``.

Run: ``python bench/http_secured_server.py --data-dir D --port P`` (``D`` holds the identity
store with the service token the bench created, :func:`make_token`).

The conformance fixture's dispatcher (``echo(text)``) served the way ``coremetry serve`` serves
its catalog: :func:`coremetry.server.open_security` on the data dir (identity store, JWT
secret, rate limiter, audit log) installed on the dispatcher, so every request is
authenticated (``Authorization: Bearer cmk_...``), every call passes the gate (role, then the
rate limiter) and is written to the audit log by its writer thread. The rate limit is raised
far above the load (a refusal would be a 429, not the path being measured); the limiter still
takes its token on every call.
"""

import argparse
import sys
from pathlib import Path
from typing import Final

import trio

from coremetry.auth.identity_store import open_identity_store
from coremetry.config import load_config
from coremetry.conformance_fixture.conformance import build_conformance_server
from coremetry.server import open_security, serve

TOKEN_NAME: Final = "http-bench"
RATE_PER_SECOND: Final = 1_000_000.0
"""The rate limit of the bench identity: far above any load wrk makes on one core."""


def make_token(data_dir: Path) -> str:
    """Create the data dir's identity store and a viewer service token; return its secret."""
    data_dir.mkdir(parents=True, exist_ok=True)
    store = open_identity_store(data_dir)
    try:
        secret, _ = store.create_token(TOKEN_NAME, "viewer", None, replace=True)
    finally:
        store.close()
    return secret


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve until killed (SIGTERM drains, as ``coremetry serve``)."""
    parser = argparse.ArgumentParser(description="Ours with auth + gate + audit (benchmark).")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    config = load_config(
        overrides={
            "data_dir": str(args.data_dir),
            "http": {"host": "127.0.0.1", "port": int(args.port)},
            "rate_limit": {"per_second": RATE_PER_SECOND, "burst": int(RATE_PER_SECOND)},
        }
    )
    security = open_security(config)
    server = build_conformance_server()
    trio.run(lambda: serve(config, server, security=security, install_signal_handlers=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
