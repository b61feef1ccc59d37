"""The MCP Inspector CLI connects to Coremetry after OAuth (issue 18 acceptance).

Needs the Inspector (``@modelcontextprotocol/inspector`` 2.x) and Node 22 from npm:
``tests/browser/install-inspector.sh`` installs them and prints ``INSPECTOR_BIN`` and
``NODE_BIN_DIR``, which ``nox -s browser`` passes in (the file name keeps it out of the default
test run). The CLI meets a 401, discovers the server, registers, listens on its loopback
callback and prints the authorization URL (it asks for a terminal: its stderr is a
pseudo-terminal here); the test plays the user (the sign-in form submitted over HTTP, as
``test_oauth_e2e.Browser`` does), the browser's redirect is delivered to the CLI's callback, and
the CLI lists the tools and calls one with the token it got.
"""

import contextlib
import json
import os
import pty
import re
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import Final

import httpx
import trio
from test_auth_e2e import PASSWORD, live_server
from test_oauth_e2e import hidden_fields

LIMIT_S: Final = 60.0
"""Hang guard (never a timed assertion)."""

_URL: Final = re.compile(rb"http://[^\s\x1b\x07]+/oauth/authorize\?[^\s\x1b\x07]+")


def inspector(base: str, home: Path, callback_port: int, *method: str) -> tuple[object, str]:
    """Run the Inspector CLI against ``base``; sign in when it asks. Blocks.

    The CLI writes its result to a file (``--output``); the test waits for that result, then
    ends the CLI (it keeps running after printing, holding its connection).

    Returns:
        ``(the result as JSON, what the CLI wrote on its terminal)``; the result is ``None``
        when none came within the hang guard.
    """
    env = {
        **os.environ,
        "PATH": f"{os.environ['NODE_BIN_DIR']}:{os.environ['PATH']}",
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
    }
    output = home / "result.json"
    home.mkdir(parents=True, exist_ok=True)
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [
            os.environ["INSPECTOR_BIN"],
            "--cli",
            f"{base}/api/mcp",
            "--callback-url",
            f"http://127.0.0.1:{callback_port}/oauth/callback",
            "--output",
            str(output),
            *method,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    terminal = b""
    result: object = None
    signed_in = False
    give_up = time.monotonic() + LIMIT_S  # a hang guard, not an assertion
    try:
        while result is None and time.monotonic() < give_up:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):  # the CLI closed its terminal
                    terminal += os.read(master, 65536)
            found = _URL.search(terminal)
            if found and not signed_in:
                sign_in(found.group().decode())
                signed_in = True
            result = _read_result(output)
            if result is None and process.poll() is not None:
                result = _read_result(output)
                break
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
        os.close(master)
    return result, terminal.decode(errors="replace")


def _read_result(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not written (completely) yet


def sign_in(url: str) -> None:
    """The user: the sign-in page, the form, then the redirect back to the CLI's listener."""
    with httpx.Client(timeout=LIMIT_S) as client:
        page = client.get(url)
        assert page.status_code == 200, page.text
        answer = client.post(
            url.split("?", 1)[0],
            data={
                **hidden_fields(page.text),
                "username": "ivy",
                "password": PASSWORD,
                "decision": "allow",
            },
        )
        assert answer.status_code == 302, answer.text
        delivered = client.get(answer.headers["location"])
        assert delivered.status_code < 400, delivered.text


def free_port() -> int:
    """A loopback port nobody listens on (for the CLI's callback listener)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_the_inspector_cli_connects_after_oauth(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S * 3):
        async with live_server(tmp_path, users=[("ivy", "editor")]) as live:
            listed, listed_terminal = await trio.to_thread.run_sync(
                inspector, live.base, tmp_path / "home", free_port(), "--method", "tools/list"
            )
            called, called_terminal = await trio.to_thread.run_sync(
                inspector,
                live.base,
                tmp_path / "home2",
                free_port(),
                "--method",
                "tools/call",
                "--tool-name",
                "echo",
                "--tool-arg",
                "text=inspected",
            )
    assert isinstance(listed, dict), listed_terminal
    assert "Authorization complete." in listed_terminal
    tools = {tool["name"] for tool in listed["tools"]}
    assert "echo" in tools
    assert "admin_only" not in tools  # ivy is an editor
    assert isinstance(called, dict), called_terminal
    assert "inspected" in json.dumps(called)
