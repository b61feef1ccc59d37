"""``coremetry serve`` names the data dir it uses, driven through the real CLI."""

import os
import re
import shlex
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


def serve_env(**changes: str) -> dict[str, str]:
    """This process's environment without ``COREMETRY_*``, detection off, plus ``changes``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DETECTION_ENABLED"] = "false"
    env.update(changes)
    return env


async def test_serve_names_the_data_dir_given_with_data_dir(tmp_path: Path) -> None:
    env = serve_env(HOME=str(tmp_path / "home"))
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
    env = serve_env(COREMETRY_DATA_DIR=str(tmp_path / "from-env"))
    with trio.fail_after(LIMIT_S):
        lines, _ = await start_lines(["serve", "--port", "0"], env)
    data_dir = tmp_path / "from-env"
    assert lines[0] == f"data dir {data_dir} (telemetry store: {data_dir / 'telemetry.db'})"
    assert LISTENING.fullmatch(lines[1]), lines


async def test_a_later_start_says_how_to_make_a_token(tmp_path: Path) -> None:
    # The first start of a data dir prints its admin token (stdout) once; a later start — or
    # a fresh clone run against a data dir used before — says how to make another, and the
    # command it names works on that data dir.
    env = serve_env(COREMETRY_DATA_DIR=str(tmp_path / "used before"))
    with trio.fail_after(LIMIT_S):
        first, _ = await start_lines(["serve", "--port", "0"], env)
        later, _ = await start_lines(["serve", "--port", "0"], env)
    data_dir = tmp_path / "used before"
    assert len(first) == 2, first
    assert later[0] == first[0]
    assert later[1] == (
        "this data dir already has service tokens (its admin token was printed on its first "
        f"start); make another with: coremetry token create --data-dir '{data_dir}' "
        "--name <name> --role admin"
    )
    assert LISTENING.fullmatch(later[2]), later
    command = later[1].split("make another with: ", 1)[1].replace("<name>", "second")
    with trio.fail_after(LIMIT_S):
        created = await trio.run_process(
            [sys.executable, "-m", *shlex.split(command)], env=env, capture_stdout=True
        )
    assert created.stdout.decode().strip().startswith("cmk_"), created.stdout
