"""End-to-end tests of the ``coremetry`` command as a process: ``serve``, ``config show``, and
the ``conformance-fixture`` loopback guard.

``coremetry serve --port 0 --fixture`` runs as a subprocess: it announces exactly one line on
stderr, serves ``/healthz`` and ``/api/mcp``, and on SIGTERM drains in-flight calls (their
answers still arrive) before exiting 0. The configuration commands check the TOML rendering,
environment overrides and the error for an unknown key (exit status 2, the key named).

Every test is bounded by ``trio.fail_after`` (a hang guard); nothing asserts on timings.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio
from conftest import check_emitted, stdio_identity

from coremetry import __version__
from coremetry.config import Config, load_config, render_config

LIMIT_S: Final = 30.0
"""Hang guard of every test: a hang fails, a slow machine does not."""

ANNOUNCE: Final = re.compile(r"listening on (http://127\.0\.0\.1:(\d+))\n")
COREMETRY_SCRIPT: Final = Path(sys.executable).with_name("coremetry")


def command(*args: str) -> list[str]:
    """The ``coremetry`` console script (as installed), else ``python -m coremetry``."""
    if COREMETRY_SCRIPT.exists():
        return [str(COREMETRY_SCRIPT), *args]
    return [sys.executable, "-m", "coremetry", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without ``COREMETRY_*`` variables, plus ``extra``.

    ``COREMETRY_DATA_DIR`` points at a fresh temporary directory unless ``extra`` sets it, so no
    test ever touches the user's own data dir.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = tempfile.mkdtemp(prefix="coremetry-test-")
    env.update(extra)
    return env


async def run(args: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``coremetry`` to completion; return (status, stdout, stderr)."""
    done = await trio.run_process(
        command(*args),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=clean_env() if env is None else dict(env),
        start_new_session=True,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def parse_sse(body: bytes) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    for block in body.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:"):
                decoded = json.loads(line[5:])
                assert isinstance(decoded, dict)
                messages.append(decoded)
    return messages


# ---- serve ---------------------------------------------------------------------------------


async def test_serve_announces_serves_and_drains_on_sigterm(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        identity = stdio_identity(tmp_path / "data", "viewer")  # a token exists: no first start
        process = await trio.lowlevel.open_process(
            command("serve", "--port", "0", "--fixture"),
            stderr=subprocess.PIPE,
            env=clean_env(COREMETRY_DATA_DIR=identity["COREMETRY_DATA_DIR"]),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert process.stderr is not None
        try:
            stderr = bytearray()
            while b"\n" not in stderr:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server exited early: {bytes(stderr)!r}"
                stderr.extend(chunk)
            match = ANNOUNCE.fullmatch(stderr.decode())
            assert match is not None, bytes(stderr)  # exactly one line, nothing before it
            base = match.group(1)
            assert 0 < int(match.group(2)) < 65536

            async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                health = await client.get(base + "/healthz")
                assert health.status_code == 200
                assert health.headers["content-type"].startswith("application/json")
                assert health.json() == {"status": "ok", "version": __version__}

                call = {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "method": "tools/call",
                    "params": {
                        "name": "sleep_ms",
                        "arguments": {"ms": 300},
                        "_meta": {"progressToken": "drain"},
                    },
                }
                headers = {
                    "content-type": "application/json",
                    "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": "2025-11-25",
                    "authorization": f"Bearer {identity['COREMETRY_TOKEN']}",
                }
                body = bytearray()
                async with client.stream(
                    "POST", base + "/api/mcp", json=call, headers=headers
                ) as response:
                    assert response.headers["content-type"] == "text/event-stream"
                    async for chunk in response.aiter_raw():
                        if not body:  # the call is in flight: its first progress arrived
                            process.send_signal(signal.SIGTERM)
                        body.extend(chunk)
            status = await process.wait()
            while chunk := await process.stderr.receive_some(4096):
                stderr.extend(chunk)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    messages = parse_sse(bytes(body))
    for message in messages:
        check_emitted(message, "2025-11-25", "tools/call" if "result" in message else None)
    final = messages[-1]
    assert final["id"] == 7
    assert final["result"] == {"content": [{"type": "text", "text": "slept 300 ms"}]}
    assert all(m.get("method") == "notifications/progress" for m in messages[:-1])
    assert status == 0
    assert ANNOUNCE.fullmatch(stderr.decode()), bytes(stderr)  # nothing else, ever


async def test_serve_refuses_a_port_in_use() -> None:
    with trio.fail_after(LIMIT_S):
        listener = trio.socket.socket()
        with listener:
            await listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            status, stdout, stderr = await run(["serve", "--port", str(port)])
    assert status == 1
    assert stdout == ""
    assert stderr.startswith("coremetry: ")
    assert "Traceback" not in stderr


# ---- config --------------------------------------------------------------------------------


async def test_config_show_prints_the_effective_configuration_as_toml() -> None:
    with trio.fail_after(LIMIT_S):
        env = clean_env()
        status, stdout, stderr = await run(["config", "show"], env)
    assert (status, stderr) == (0, "")
    shown = tomllib.loads(stdout)
    defaults = Config()
    assert shown["data_dir"] == env["COREMETRY_DATA_DIR"]
    assert shown["http"] == {
        "host": defaults.http.host,
        "port": defaults.http.port,
        "root_path": defaults.http.root_path,
        "allowed_origins": defaults.http.allowed_origins,
        "allowed_hosts": defaults.http.allowed_hosts,
        "max_body_bytes": defaults.http.max_body_bytes,
        "graceful_shutdown_s": defaults.http.graceful_shutdown_s,
        "keep_alive_timeout_s": defaults.http.keep_alive_timeout_s,
        "public_url": defaults.http.public_url,
    }
    assert set(shown) >= {"http", "mcp", "sse", "websocket", "data_dir"}
    assert stdout == render_config(
        load_config(environ={"COREMETRY_DATA_DIR": env["COREMETRY_DATA_DIR"]})
    )


async def test_config_show_applies_environment_and_file(tmp_path: Path) -> None:
    path = tmp_path / "coremetry.toml"
    path.write_text('[http]\nhost = "127.0.0.1"\nallowed_origins = ["https://a.example"]\n')
    with trio.fail_after(LIMIT_S):
        status, stdout, stderr = await run(
            ["config", "show", "--config", str(path)],
            env=clean_env(COREMETRY_HTTP_PORT="9999", COREMETRY_SSE_KEEPALIVE_INTERVAL_S="2.5"),
        )
    assert (status, stderr) == (0, "")
    shown = tomllib.loads(stdout)
    assert shown["http"]["port"] == 9999
    assert shown["http"]["allowed_origins"] == ["https://a.example"]
    assert shown["sse"]["keepalive_interval_s"] == 2.5


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[http]\nbogus_key = 1\n", "bogus_key"),
        ("[nosuchsection]\nport = 1\n", "nosuchsection"),
        ("unknown_top = true\n", "unknown_top"),
        ('[http]\nport = "eighty"\n', "http.port"),
    ],
    ids=["key", "section", "top-level", "type"],
)
@pytest.mark.parametrize("subcommand", [("serve",), ("config", "show")])
async def test_invalid_config_file_exits_2_naming_the_key(
    tmp_path: Path, toml: str, named: str, subcommand: tuple[str, ...]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with trio.fail_after(LIMIT_S):
        status, stdout, stderr = await run([*subcommand, "--config", str(path)])
    assert status == 2
    assert stdout == ""
    assert named in stderr
    assert "Traceback" not in stderr


async def test_unknown_environment_key_exits_2() -> None:
    with trio.fail_after(LIMIT_S):
        status, _, stderr = await run(
            ["config", "show"], env=clean_env(COREMETRY_HTTP_NO_SUCH_KEY="1")
        )
    assert status == 2
    assert "COREMETRY_HTTP_NO_SUCH_KEY" in stderr


# ---- conformance fixture -------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.com"])
async def test_conformance_fixture_refuses_non_loopback_hosts(host: str) -> None:
    with trio.fail_after(LIMIT_S):
        status, stdout, stderr = await run(["conformance-fixture", "--host", host])
    assert status == 2
    assert stdout == ""
    assert "loopback" in stderr
