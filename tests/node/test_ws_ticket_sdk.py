"""The MCP TypeScript SDK's ``WebSocketClientTransport`` connects with a ticket (issue 18).

``ws_ticket_client.mjs`` runs the SDK from npm under node: it mints a ticket with
``POST /api/mcp/ws-ticket`` (its service token in ``Authorization``), connects to the ``url``
the answer gives — the transport cannot send headers, only the ticket in the URL — lists the
tools, calls ``echo``, reads ``coremetry://server`` and closes; then it tries the same URL
again, which the server refuses (a ticket works once).
"""

import json
import os
from functools import partial
from pathlib import Path
from typing import Final

import trio

from coremetry.config import load_config
from coremetry.server import build_mcp_server, open_security, serve

from .conftest import NodeEnv

LIMIT_S: Final = 120.0
"""Hang guard (node starts cold on a busy machine)."""


async def test_the_typescript_sdk_connects_with_a_ticket(tmp_path: Path, node_env: NodeEnv) -> None:
    config = load_config(
        environ={},
        overrides={"http": {"port": 0, "graceful_shutdown_s": 1.0}, "data_dir": str(tmp_path)},
    )
    security = open_security(config)
    try:
        token, _ = security.store.create_token("ts-sdk", "editor", None)
        stop = trio.Event()
        with trio.fail_after(LIMIT_S):
            async with trio.open_nursery() as nursery:
                base: str = await nursery.start(
                    partial(
                        serve,
                        config,
                        build_mcp_server(fixture=True),
                        announce=False,
                        shutdown=stop,
                        security=security,
                    )
                )
                env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
                env["COREMETRY_TOKEN"] = token
                result = await trio.run_process(
                    node_env.command("ws_ticket_client.mjs", base),
                    cwd=node_env.directory,
                    env=env,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
                stop.set()
    finally:
        security.close()
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    lines = [json.loads(line) for line in result.stdout.decode().splitlines() if line.strip()]
    assert len(lines) == 2, lines
    session, reuse = lines
    assert "echo" in session["tools"]
    assert session["echo"] == "hello over a ticket"
    assert session["server"]["caller"] == {"subject": "token:ts-sdk", "role": "editor"}
    assert reuse == {"reuse": "refused"}
    assert token not in stderr
