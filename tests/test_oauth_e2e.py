"""OAuth end to end (issue 18): discovery, the built-in authorization server, attacks.

Every test runs a real server (``serve_with_store`` with ``open_security`` on a fresh data dir,
as ``coremetry serve`` runs it; :func:`test_auth_e2e.live_server`) on loopback and talks HTTP
to it.
"""

import html
import re
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlsplit

import httpx
import httpx2
import pytest
import trio
from _wire_support import as_object, request
from mcp import Client, MCPError
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.types import TextContent
from pydantic import AnyUrl
from test_auth_e2e import PASSWORD, live_server

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
        f'resource_metadata="{live.base}{PRM}{MCP}"'
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


# ---- the built-in authorization server -------------------------------------------------------

CALLBACK: Final = "http://127.0.0.1:9/callback"
"""The clients' redirect URI (never contacted: the 302 to it is read, not followed)."""

_HIDDEN: Final = re.compile(r"<input type=hidden name=(\w+) value='([^']*)'>")


def hidden_fields(page: str) -> dict[str, str]:
    """The sign-in form's hidden fields (HTML-unescaped)."""
    return {name: html.unescape(value) for name, value in _HIDDEN.findall(page)}


def query_of(location: str) -> dict[str, str]:
    """The query parameters of a redirect's ``Location``."""
    return dict(parse_qsl(urlsplit(location).query))


class Browser:
    """The user's browser, driven by httpx: opens the sign-in page and submits the form."""

    def __init__(self, username: str, password: str = PASSWORD, decision: str = "allow") -> None:
        self.username = username
        self.password = password
        self.decision = decision
        self.location = ""

    async def visit(self, url: str) -> None:
        """The SDK's redirect handler: sign in on ``url``; keep the redirect back."""
        async with httpx.AsyncClient(timeout=LIMIT_S) as client:
            page = await client.get(url)
            assert page.status_code == 200, page.text
            assert page.headers["content-type"].startswith("text/html")
            fields = hidden_fields(page.text)
            answer = await client.post(
                url.split("?", 1)[0],
                data={
                    **fields,
                    "username": self.username,
                    "password": self.password,
                    "decision": self.decision,
                },
            )
        assert answer.status_code == 302, answer.text
        self.location = answer.headers["location"]

    async def callback(self) -> AuthorizationCodeResult:
        """The SDK's callback handler: the code and state the redirect carried."""
        params = query_of(self.location)
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"))


class MemoryStorage:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_the_sdk_oauth_client_signs_in_and_calls_tools(tmp_path: Path) -> None:
    """Issue 18 acceptance: the ``mcp`` SDK's OAuth provider, from a 401 to a tool result."""
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path, users=[("erin", "editor")]) as live:
            browser = Browser("erin")
            storage = MemoryStorage()
            provider = OAuthClientProvider(
                server_url=live.base + MCP,
                client_metadata=OAuthClientMetadata(
                    client_name="SDK e2e",
                    redirect_uris=[AnyUrl(CALLBACK)],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"],
                ),
                storage=storage,
                redirect_handler=browser.visit,
                callback_handler=browser.callback,
            )
            async with httpx2.AsyncClient(auth=provider, timeout=LIMIT_S) as http:
                transport = streamable_http_client(live.base + MCP, http_client=http)
                async with Client(transport) as client:
                    tools = await client.list_tools()
                    echoed = await client.call_tool("echo", {"text": "via oauth"})
                    with pytest.raises(MCPError, match="requires role admin"):
                        await client.call_tool("admin_only", {})
            rows = await trio.to_thread.run_sync(lambda: live.security.audit.tail(50))
    assert "echo" in {tool.name for tool in tools.tools}
    assert "admin_only" not in {tool.name for tool in tools.tools}  # an editor's view
    assert [c.text for c in echoed.content if isinstance(c, TextContent)] == ["via oauth"]
    tokens = storage.tokens
    assert tokens is not None
    assert tokens.scope == "mcp:read mcp:write"  # asked for all three, capped at editor
    assert tokens.refresh_token
    assert 0 < (tokens.expires_in or 0) <= 600
    names = [row.name for row in rows]
    assert any(name.startswith("oauth authorize ") for name in names)
    assert any(name.startswith("oauth grant ") for name in names)
    calls = [row for row in rows if row.name == "echo"]
    assert calls
    assert (calls[0].sub, calls[0].kind) == ("erin", "oauth")
