"""The demo server every end-to-end test of this package talks to.

``coremetry serve --demo --port 0`` runs once per session as a subprocess on a fresh data dir: it
prints the first-start admin token on stdout, loads the shipped demo (the Nezha day and the
SmartThings traces, shifted to end now) and announces ``listening on http://127.0.0.1:PORT``
on stderr. Tests connect with the official ``mcp`` SDK client (:mod:`._client`).
"""

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import pytest

COREMETRY_SCRIPT: Final = Path(sys.executable).with_name("coremetry")
START_LIMIT_S: Final = 600.0
"""Hang guard for the demo load and bind (a slow shared machine takes tens of seconds)."""
_TOKEN: Final = re.compile(r"^\s+(cmk_[A-Za-z0-9_-]+)\s*$")
_LISTENING: Final = re.compile(r"^listening on (http://127\.0\.0\.1:\d+)\s*$")


@dataclass(frozen=True)
class DemoServer:
    """A running ``coremetry serve --demo``.

    Attributes:
        base: ``http://127.0.0.1:PORT``.
        admin_token: the token minted on first start.
        data_dir: the server's data dir.
        env: the environment the server runs with (for more ``coremetry`` commands).
    """

    base: str
    admin_token: str
    data_dir: Path
    env: dict[str, str]

    @property
    def mcp_url(self) -> str:
        return self.base + "/api/mcp"

    def faults(self, service: str) -> list[tuple[str, int]]:
        """``(type, time_unix_nano)`` of the demo's injected faults on ``service``, shifted."""
        document = json.loads((self.data_dir / "demo" / "faults.json").read_text())
        return [
            (str(f["type"]), int(f["time_unix_nano"]))
            for f in document["faults"]
            if f["service.name"] == service
        ]

    def token(self, role: str) -> str:
        """A fresh service token of ``role``, created with ``coremetry token create``."""
        done = subprocess.run(
            [*coremetry(), "token", "create", "--name", f"obs-{role}", "--role", role],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return done.stdout.strip()


def coremetry() -> list[str]:
    if COREMETRY_SCRIPT.exists():
        return [str(COREMETRY_SCRIPT)]
    return [sys.executable, "-m", "coremetry"]


def _pump(stream: IO[str], name: str, lines: "queue.Queue[tuple[str, str]]") -> None:
    for line in stream:
        lines.put((name, line))
    lines.put((name, ""))


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    data_dir = tmp_path_factory.mktemp("demo-data")
    # A clean configuration, except the store backend: the ClickHouse nox session runs these
    # tests with COREMETRY_STORE_BACKEND=clickhouse and COREMETRY_CLICKHOUSE_* set.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COREMETRY_")
        or k == "COREMETRY_STORE_BACKEND"
        or k.startswith("COREMETRY_CLICKHOUSE_")
    }
    env["COREMETRY_DATA_DIR"] = str(data_dir)
    # The tests page through whole traces and logs quickly: well under any real rate limit.
    env["COREMETRY_RATE_LIMIT_PER_SECOND"] = "1000"
    env["COREMETRY_RATE_LIMIT_BURST"] = "1000"
    # The problems these tests read are the ones `coremetry detect` stores; the server's own
    # detector (every minute) would merge its runs into the same file while they read it.
    env["COREMETRY_DETECTION_ENABLED"] = "false"
    process = subprocess.Popen(
        [*coremetry(), "serve", "--demo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    pumps = [
        threading.Thread(target=_pump, args=(process.stdout, "out", lines), daemon=True),
        threading.Thread(target=_pump, args=(process.stderr, "err", lines), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    token = base = None
    seen: list[str] = []
    try:
        while token is None or base is None:
            name, line = lines.get(timeout=START_LIMIT_S)
            assert line, f"coremetry serve --demo exited early: {''.join(seen)}"
            seen.append(line)
            if name == "out" and (match := _TOKEN.match(line)):
                token = match.group(1)
            if name == "err" and (match := _LISTENING.match(line)):
                base = match.group(1)
        yield DemoServer(base=base, admin_token=token, data_dir=data_dir, env=env)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
        for pump in pumps:
            pump.join(timeout=10)
        process.stdout.close()
        process.stderr.close()
