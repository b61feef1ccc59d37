"""OAuth end to end (issue 18): discovery, the built-in authorization server, attacks.

Every test runs a real server (``serve_with_store`` with ``open_security`` on a fresh data dir,
as ``coremetry serve`` runs it; :func:`test_auth_e2e.live_server`) on loopback and talks HTTP
to it.
"""

from pathlib import Path
from typing import Final

import httpx
import trio
from _wire_support import as_object, request
from test_auth_e2e import live_server

LIMIT_S: Final = 60.0
"""Hang guard of every test."""

PRM: Final = "/.well-known/oauth-protected-resource"
MCP: Final = "/api/mcp"
BOTH: Final = "application/json, text/event-stream"


async def test_a_401_names_the_protected_resource_metadata_which_names_the_issuer(
    tmp_path: Path,
) -> None:
    """MCP 2025-06-18/2025-11-25 Authorization: 401 -> resource_metadata -> PRM -> issuer."""
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path) as live,
            httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client,
        ):
            refused = await client.post(
                MCP,
                json=request(1, "tools/list", {}),
                headers={"accept": BOTH, "authorization": "Bearer not-a-token"},
            )
            suffixed = await client.get(PRM + MCP)
            root = await client.get(PRM)
            unknown = await client.get("/.well-known/no-such-document")
            rest = await client.get("/api/tools")
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert challenge == (
        'Bearer realm="coremetry", error="invalid_token", '
        f'resource_metadata="{live.base}{PRM}{MCP}", scope="mcp:read"'
    )
    assert rest.status_code == 401
    assert f'resource_metadata="{live.base}{PRM}{MCP}"' in rest.headers["www-authenticate"]
    assert suffixed.status_code == 200
    assert suffixed.headers["content-type"] == "application/json"
    document = as_object(suffixed.json())
    assert document["resource"] == live.base + MCP
    assert document["authorization_servers"] == [live.base]
    assert document["scopes_supported"] == ["mcp:read", "mcp:write", "mcp:admin"]
    assert as_object(root.json())["resource"] == live.base
    assert (unknown.status_code, unknown.headers["content-type"]) == (404, "application/json")
    assert as_object(unknown.json())["error"] == "not_found"


async def test_urls_follow_the_host_and_the_proxy_prefix(tmp_path: Path) -> None:
    """Absolute URLs come from the Host the client used and X-Forwarded-Prefix/-Proto."""
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path) as live,
            httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client,
        ):
            port = live.base.rsplit(":", 1)[1]
            proxied = await client.get(
                PRM + MCP,
                headers={
                    "host": f"localhost:{port}",
                    "x-forwarded-prefix": "/cm",
                    "x-forwarded-proto": "https",
                },
            )
    assert as_object(proxied.json())["resource"] == f"https://localhost:{port}/cm{MCP}"
