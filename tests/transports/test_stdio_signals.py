"""SIGINT/SIGTERM on ``coremetry stdio``: stop reading, answer the calls in flight, exit 0."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import stdio_identity

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
}
SLOW = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "sleep_ms", "arguments": {"ms": 800}},
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_drains_in_flight_calls_and_exits_cleanly(signum: int, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coremetry", "stdio", "--fixture"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**stdio_identity(tmp_path / "data"), "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    first = json.loads(proc.stdout.readline())  # the server is up and serving
    assert first["id"] == 1
    proc.stdin.write((json.dumps(SLOW) + "\n").encode())
    proc.stdin.flush()
    # A plain sync test (no trio loop to block). Let the call start; the drain must wait for
    # it however long the pause is.
    time.sleep(0.2)  # noqa: TID251
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)  # stdin stays open: the signal alone ends it
    answers = [json.loads(line) for line in out.decode().splitlines()]
    assert [a["id"] for a in answers] == [2]
    assert answers[0]["result"]["content"][0]["text"] == "slept 800 ms"
    assert proc.returncode == 0
    assert b"Traceback" not in err
