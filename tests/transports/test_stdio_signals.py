"""SIGINT/SIGTERM on ``coremetry stdio``: answer every call in flight, then exit 0.

Each test runs the real CLI in a subprocess and sends it a real signal. A call that finishes
within ``http.graceful_shutdown_s`` is answered with its result, one still running then with the
retryable shutdown error, and a request sent during the drain with the JSON-RPC shutting-down
error; every line the server writes is validated against the MCP schema.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
from conftest import check_emitted, stdio_identity

REVISION = "2025-11-25"

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


def start(tmp_path: Path, **env: str) -> subprocess.Popen[bytes]:
    """``coremetry stdio --fixture`` as a viewer, initialized (its answer read and checked)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coremetry", "stdio", "--fixture"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**stdio_identity(tmp_path / "data"), "PYTHONUNBUFFERED": "1", **env},
        start_new_session=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    send(proc, INIT)
    first = json.loads(proc.stdout.readline())
    check_emitted(first, REVISION, "initialize")
    send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def send(proc: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def read(stdout: IO[bytes], methods: dict[object, str]) -> dict[str, object]:
    """The next line the server wrote, validated (as the answer to its request's method)."""
    line = stdout.readline()
    assert line, "the server closed stdout"
    message: dict[str, object] = json.loads(line)
    method = methods.get(message.get("id")) if "method" not in message else None
    check_emitted(message, REVISION, method)
    return message


def sleep_call(request_id: int, ms: int) -> dict[str, object]:
    """``sleep_ms`` with a progress token: its progress notifications show it is running."""
    params = {"name": "sleep_ms", "arguments": {"ms": ms}, "_meta": {"progressToken": "p"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def finish(proc: subprocess.Popen[bytes], methods: dict[object, str]) -> list[dict[str, object]]:
    """Wait for the exit (stdin left open: the signal alone ends it); every line left, checked."""
    out, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()
    messages: list[dict[str, object]] = []
    for line in out.decode().splitlines():
        message = json.loads(line)
        method = methods.get(message.get("id")) if "method" not in message else None
        check_emitted(message, REVISION, method)
        messages.append(message)
    return messages


def test_a_call_running_past_the_grace_period_gets_the_retryable_shutdown_error(
    tmp_path: Path,
) -> None:
    # A grace of 0.2 s, a 1.9 s call (the fixture's sleep_ms budget is 2 s): the drain's
    # deadline cuts it off.
    proc = start(tmp_path, COREMETRY_HTTP_GRACEFUL_SHUTDOWN_S="0.2")
    assert proc.stdout is not None
    methods: dict[object, str] = {2: "tools/call"}
    send(proc, sleep_call(2, 1900))
    first = read(proc.stdout, methods)
    assert first["method"] == "notifications/progress"  # the call is running
    proc.send_signal(signal.SIGTERM)
    answers = [m for m in finish(proc, methods) if "id" in m]
    assert proc.returncode == 0
    assert [a["id"] for a in answers] == [2]
    result = answers[0]["result"]
    assert isinstance(result, dict)
    assert result["isError"] is True
    structured = result["structuredContent"]
    assert isinstance(structured, dict)
    assert structured["error"] == "backend_unavailable"
    assert structured["retryable"] is True
    assert "shutting down" in structured["detail"]


def test_a_request_during_the_drain_is_refused_while_the_call_in_flight_finishes(
    tmp_path: Path,
) -> None:
    proc = start(tmp_path)  # the default grace (5 s) outlasts the 1.5 s call
    assert proc.stdout is not None
    methods: dict[object, str] = {2: "tools/call"}
    send(proc, sleep_call(2, 1500))
    assert read(proc.stdout, methods)["method"] == "notifications/progress"
    proc.send_signal(signal.SIGINT)
    # Ping until one is refused: the first may still be answered (the signal is handled
    # asynchronously); every line read meanwhile is the call's progress or a ping's answer.
    refusal: dict[str, object] | None = None
    for request_id in range(10, 1000):
        methods[request_id] = "ping"
        send(proc, {"jsonrpc": "2.0", "id": request_id, "method": "ping"})
        answer = read(proc.stdout, methods)
        while answer.get("id") != request_id:
            assert answer.get("method") == "notifications/progress", answer
            answer = read(proc.stdout, methods)
        if "error" in answer:
            refusal = answer
            break
    assert refusal is not None
    error = refusal["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32603
    assert "shutting down" in error["message"]
    assert error["data"] == {"retryable": True, "retry_after_ms": 5000}
    answers = [m for m in finish(proc, methods) if "id" in m]
    assert proc.returncode == 0
    assert [a["id"] for a in answers] == [2]
    result = answers[0]["result"]
    assert isinstance(result, dict)
    assert result["content"] == [{"type": "text", "text": "slept 1500 ms"}]
