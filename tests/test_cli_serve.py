"""``coremetry serve`` names the data dir it uses, driven through the real CLI."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

import httpx
import trio

LIMIT_S: Final = 60.0
"""Hang guard: a hang fails, a slow machine does not."""

LISTENING: Final = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


async def start_lines(args: list[str], env: dict[str, str]) -> tuple[list[str], int]:
    """Start ``coremetry serve``, read stderr up to ``listening on``, stop it with SIGTERM.

    Returns:
        The stderr lines up to and including ``listening on``, and the HTTP status of
        ``/healthz`` asked while the server ran.
    """
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "coremetry", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stderr is not None
    try:
        stderr = bytearray()
        while (match := LISTENING.search(stderr.decode())) is None:
            chunk = await process.stderr.receive_some(4096)
            assert chunk, f"the server exited early: {bytes(stderr)!r}"
            stderr.extend(chunk)
        async with httpx.AsyncClient(timeout=LIMIT_S) as client:
            health = await client.get(match.group(1) + "/healthz")
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
    assert process.returncode == 0
    return stderr.decode().splitlines(), health.status_code


async def test_serve_names_the_data_dir_given_with_data_dir(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["HOME"] = str(tmp_path / "home")
    env["COREMETRY_DETECTION_ENABLED"] = "false"
    # "~" as a user would type it in a config file or quoted on the command line: the line
    # names the directory the server actually uses, expanded.
    with trio.fail_after(LIMIT_S):
        lines, health = await start_lines(["serve", "--port", "0", "--data-dir", "~/my data"], env)
    data_dir = tmp_path / "home" / "my data"
    assert lines[0] == f"data dir {data_dir} (telemetry store: {data_dir / 'telemetry.db'})"
    assert LISTENING.fullmatch(lines[1]), lines
    assert len(lines) == 2, lines
    assert health == 200
    assert (data_dir / "telemetry.db").is_file()  # the store is where the line says


async def test_serve_names_the_data_dir_from_the_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = str(tmp_path / "from-env")
    env["COREMETRY_DETECTION_ENABLED"] = "false"
    with trio.fail_after(LIMIT_S):
        lines, _ = await start_lines(["serve", "--port", "0"], env)
    data_dir = tmp_path / "from-env"
    assert lines[0] == f"data dir {data_dir} (telemetry store: {data_dir / 'telemetry.db'})"
    assert LISTENING.fullmatch(lines[1]), lines
