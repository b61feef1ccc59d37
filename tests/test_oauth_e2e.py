"""OAuth end to end (issue 18): discovery, the built-in authorization server, attacks.

Every test runs a real server (``serve_with_store`` with ``open_security`` on a fresh data dir,
as ``coremetry serve`` runs it; :func:`test_auth_e2e.live_server`) on loopback and talks HTTP
to it.
"""

import base64
import hashlib
import html
import json
import re
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
from test_auth_e2e import PASSWORD, Live, live_server

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
            await live.security.audit.wait_flushed()
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


# ---- attacks: each refused with the right status, and nothing issued ---------------------------


def pkce() -> tuple[str, str]:
    """A fresh ``(code_verifier, S256 code_challenge)`` pair (RFC 7636 §4.1-4.2)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Flow:
    """A client of the authorization server, driven by hand (httpx, one cookie jar)."""

    def __init__(self, client: httpx.AsyncClient, base: str) -> None:
        self.client = client
        self.base = base
        self.client_id = ""
        self.verifier, self.challenge = pkce()

    async def register(self, redirect_uris: list[str] | None = None) -> httpx.Response:
        """POST /oauth/register; keeps the client_id of a success."""
        response = await self.client.post(
            "/oauth/register",
            json={"client_name": "attack test", "redirect_uris": redirect_uris or [CALLBACK]},
        )
        if response.status_code == 201:
            self.client_id = str(as_object(response.json())["client_id"])
        return response

    def params(self, **changes: str | None) -> dict[str, str]:
        """A valid authorization request, with ``changes`` (``None`` drops a parameter)."""
        params: dict[str, str | None] = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": CALLBACK,
            "state": "st-1",
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            "resource": self.base + MCP,
            "scope": "mcp:read mcp:write mcp:admin",
            **changes,
        }
        return {k: v for k, v in params.items() if v is not None}

    async def page(self, **changes: str | None) -> httpx.Response:
        """GET /oauth/authorize."""
        return await self.client.get("/oauth/authorize", params=self.params(**changes))

    async def sign_in(
        self, username: str, password: str = PASSWORD, decision: str = "allow", **changes: str
    ) -> httpx.Response:
        """Open the page and submit the form; the answer to the POST."""
        page = await self.page(**changes)
        assert page.status_code == 200, page.text
        return await self.client.post(
            "/oauth/authorize",
            data={
                **hidden_fields(page.text),
                "username": username,
                "password": password,
                "decision": decision,
            },
        )

    async def code(self, username: str) -> str:
        """A fresh authorization code for ``username``."""
        answer = await self.sign_in(username)
        assert answer.status_code == 302, answer.text
        params = query_of(answer.headers["location"])
        assert params["state"] == "st-1"
        return params["code"]

    async def exchange(self, code: str, **changes: str | None) -> httpx.Response:
        """POST /oauth/token with the authorization code."""
        form: dict[str, str | None] = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": self.client_id,
            "redirect_uri": CALLBACK,
            "code_verifier": self.verifier,
            "resource": self.base + MCP,
            **changes,
        }
        return await self.client.post(
            "/oauth/token", data={k: v for k, v in form.items() if v is not None}
        )

    async def refresh(self, refresh_token: str) -> httpx.Response:
        """POST /oauth/token with a refresh token."""
        return await self.client.post(
            "/oauth/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
                "client_id": self.client_id,
            },
        )

    async def tokens(self, username: str) -> dict[str, object]:
        """Sign in and exchange the code: the token response."""
        answer = await self.exchange(await self.code(username))
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        return dict(as_object(answer.json()))

    async def mcp_status(self, access_token: str, host: str | None = None) -> int:
        """The status of ``tools/list`` with ``access_token``."""
        headers = {
            "authorization": f"Bearer {access_token}",
            "accept": BOTH,
            "mcp-protocol-version": "2025-11-25",
        }
        if host is not None:
            headers["host"] = host
        response = await self.client.post(MCP, json=request(1, "tools/list", {}), headers=headers)
        return response.status_code


def no_code(response: httpx.Response) -> dict[str, str]:
    """The redirect's error parameters, asserting nothing was issued."""
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(CALLBACK + "?")
    params = query_of(location)
    assert "code" not in params
    return params


def not_redirected(response: httpx.Response) -> None:
    """A refusal shown on our own page: no redirect anywhere, nothing issued."""
    assert response.status_code == 400, response.text
    assert "location" not in response.headers
    assert response.headers["content-type"].startswith("text/html")


def refused_grant(response: httpx.Response, error: str = "invalid_grant") -> None:
    """A token request refused with ``error`` and no token in the answer."""
    assert response.status_code == 400, response.text
    body = as_object(response.json())
    assert body["error"] == error
    assert "access_token" not in body


@asynccontextmanager
async def oauth_server(tmp_path: Path) -> AsyncIterator[tuple[Live, Flow]]:
    """A live server with users ``vera`` (viewer) and ``ada`` (admin), and a registered client."""
    async with (
        live_server(tmp_path, users=[("vera", "viewer"), ("ada", "admin")]) as live,
        httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client,
    ):
        flow = Flow(client, live.base)
        assert (await flow.register()).status_code == 201
        yield live, flow


async def test_pkce_is_required_and_only_s256(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (_live, flow):
            missing = await flow.page(code_challenge=None, code_challenge_method=None)
            plain = await flow.page(code_challenge_method="plain")
            no_method = await flow.page(code_challenge_method=None)
    for answer in (missing, plain, no_method):
        assert no_code(answer)["error"] == "invalid_request"
        assert no_code(answer)["state"] == "st-1"


async def test_a_wrong_verifier_or_a_reused_code_gets_nothing(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            code = await flow.code("vera")
            wrong = await flow.exchange(code, code_verifier=pkce()[0])
            first = await flow.exchange(code)
            again = await flow.exchange(code)
            refresh = str(as_object(first.json())["refresh_token"])
            after_reuse = await flow.refresh(refresh)
            rows = await trio.to_thread.run_sync(lambda: live.security.audit.tail(50))
    refused_grant(wrong)
    assert first.status_code == 200
    refused_grant(again)
    refused_grant(after_reuse)  # the code's second use revoked what its first use started
    reuse = [row for row in rows if row.name.startswith("oauth code-reuse ")]
    assert [(row.sub, row.outcome) for row in reuse] == [("vera", "denied")]


async def test_redirect_uris_match_exactly_but_loopback_ports_may_vary(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (_live, flow):
            evil = await flow.page(redirect_uri="https://evil.example/callback")
            other_path = await flow.page(redirect_uri="http://127.0.0.1:9/other")
            other_port = await flow.page(redirect_uri="http://127.0.0.1:5555/callback")
            code = await flow.code("vera")
            changed = await flow.exchange(code, redirect_uri="http://127.0.0.1:9/other")
    not_redirected(evil)
    not_redirected(other_path)
    assert other_port.status_code == 200  # RFC 8252 §7.3
    refused_grant(changed)


async def test_open_redirect_attempts_are_never_redirected(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (_live, flow):
            unknown = await flow.page(client_id="no-such-client")
            no_client = await flow.page(client_id=None)
            javascript = await flow.register(["javascript:alert(1)"])
            plain_http = await flow.register(["http://evil.example/cb"])
            fragment = await flow.register(["https://app.example/cb#x"])
    not_redirected(unknown)
    not_redirected(no_client)
    for refused in (javascript, plain_http, fragment):
        assert refused.status_code == 400, refused.text
        assert "client_id" not in as_object(refused.json())


async def test_tokens_are_only_for_this_resource(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            foreign = await flow.page(resource="https://other.example/api/mcp")
            code = await flow.code("vera")
            retargeted = await flow.exchange(code, resource="https://other.example/api/mcp")
            tokens = await flow.tokens("vera")
            access = str(tokens["access_token"])
            here = await flow.mcp_status(access)
            port = live.base.rsplit(":", 1)[1]
            elsewhere = await flow.mcp_status(access, host=f"localhost:{port}")
    assert no_code(foreign)["error"] == "invalid_target"
    refused_grant(retargeted, "invalid_target")
    assert here == 200
    assert elsewhere == 401  # the same token at another resource identifier: refused


async def test_refresh_tokens_rotate_and_reuse_revokes_the_family(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            tokens = await flow.tokens("ada")
            first = str(tokens["refresh_token"])
            rotated = await flow.refresh(first)
            second = str(as_object(rotated.json())["refresh_token"])
            replayed = await flow.refresh(first)
            after = await flow.refresh(second)
            rows = await trio.to_thread.run_sync(lambda: live.security.audit.tail(50))
    assert rotated.status_code == 200
    assert second != first
    assert as_object(rotated.json())["scope"] == "mcp:read mcp:write mcp:admin"
    refused_grant(replayed)
    refused_grant(after)  # the whole family went with the reuse
    assert any(row.name.startswith("oauth refresh-reuse ") for row in rows)
    assert any(row.name.startswith("oauth refresh ") for row in rows)


async def test_the_consent_form_is_csrf_protected(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            page = await flow.page()
            fields = hidden_fields(page.text)
            form = {**fields, "username": "vera", "password": PASSWORD, "decision": "allow"}
            forged = await flow.client.post(
                "/oauth/authorize", data={**form, "csrf": secrets.token_urlsafe(32)}
            )
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as other:
                cross_site = await other.post("/oauth/authorize", data=form)
    for refused in (forged, cross_site):
        assert refused.status_code == 403, refused.text
        assert "location" not in refused.headers


async def test_registration_floods_are_rate_limited(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (_live, flow):
            answers = [await flow.register() for _ in range(20)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:19] == [201] * 19  # the fixture registered the 20th allowed
    assert statuses[19:] == [429]
    assert int(answers[19].headers["retry-after"]) > 0


async def test_a_disabled_user_loses_its_grants(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            tokens = await flow.tokens("vera")
            access = str(tokens["access_token"])
            before = await flow.mcp_status(access)
            await trio.to_thread.run_sync(live.security.store.disable_user, "vera")
            after = await flow.mcp_status(access)
            refreshed = await flow.refresh(str(tokens["refresh_token"]))
            sign_in = await flow.sign_in("vera")
    assert before == 200
    assert after == 401
    refused_grant(refreshed)
    assert sign_in.status_code == 401
    assert "location" not in sign_in.headers


async def test_deny_and_revocation(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with oauth_server(tmp_path) as (live, flow):
            denied = await flow.sign_in("vera", decision="deny")
            tokens = await flow.tokens("vera")
            revoked = await flow.client.post(
                "/oauth/revoke",
                data={"token": str(tokens["refresh_token"]), "client_id": flow.client_id},
            )
            refreshed = await flow.refresh(str(tokens["refresh_token"]))
            rows = await trio.to_thread.run_sync(lambda: live.security.audit.tail(50))
    assert no_code(denied)["error"] == "access_denied"
    assert revoked.status_code == 200
    refused_grant(refreshed)
    assert any(row.name.startswith("oauth revoke ") for row in rows)


# ---- client ID metadata documents (MCP 2025-11-25) ---------------------------------------------


@contextmanager
def documents_served(documents: dict[str, bytes]) -> Iterator[str]:
    """Serve ``documents`` (path -> JSON body) on loopback in a thread; yield the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body or b"{}")

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_a_client_id_metadata_document_stands_for_registration(tmp_path: Path) -> None:
    """A client whose ``client_id`` is the URL of its metadata document needs no registration."""
    documents: dict[str, bytes] = {}
    with documents_served(documents) as origin, trio.fail_after(LIMIT_S):
        good = f"{origin}/client.json"
        liar = f"{origin}/liar.json"
        documents["/client.json"] = json.dumps(
            {"client_id": good, "client_name": "Document Client", "redirect_uris": [CALLBACK]}
        ).encode()
        documents["/liar.json"] = json.dumps(
            {"client_id": good, "client_name": "Liar", "redirect_uris": [CALLBACK]}
        ).encode()
        async with oauth_server(tmp_path) as (live, flow):
            metadata = as_object(
                (await flow.client.get("/.well-known/oauth-authorization-server")).json()
            )
            flow.client_id = good
            page = await flow.page()
            tokens = await flow.tokens("vera")
            status = await flow.mcp_status(str(tokens["access_token"]))
            flow.client_id = liar
            lying = await flow.page()
            flow.client_id = f"{origin}/missing.json"
            missing = await flow.page()
    assert metadata["client_id_metadata_document_supported"] is True
    assert metadata["issuer"] == live.base
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert "Document Client" in page.text
    assert status == 200
    not_redirected(lying)  # the document must name itself
    not_redirected(missing)


async def test_with_oauth_off_there_is_no_discovery_and_no_sign_in(tmp_path: Path) -> None:
    """``auth.oauth.enabled = false``: service tokens and login JWTs only, as before issue 18."""
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, config_overrides={"auth": {"oauth": {"enabled": False}}}) as live,
            httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client,
        ):
            refused = await client.post(
                MCP, json=request(1, "tools/list", {}), headers={"accept": BOTH}
            )
            prm = await client.get(PRM + MCP)
            metadata = await client.get("/.well-known/oauth-authorization-server")
            authorize = await client.get("/oauth/authorize")
            token = await client.post("/oauth/token", data={"grant_type": "x"})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Bearer realm="coremetry"'
    for absent in (prm, metadata, authorize, token):
        assert absent.status_code == 404, absent.text
        assert absent.headers["content-type"] == "application/json"


async def test_with_an_identity_provider_the_metadata_points_at_it(tmp_path: Path) -> None:
    """``[auth.oidc]`` set: clients are sent to the team's provider, not our sign-in page.

    The provider is never contacted here (discovery happens at a provider token's first use).
    """
    provider = "https://idp.example.com/realms/ops"
    oidc = {"issuer": provider, "audience": "https://cm.example.com/api/mcp"}
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, config_overrides={"auth": {"oidc": oidc}}) as live,
            httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client,
        ):
            refused = await client.post(
                MCP, json=request(1, "tools/list", {}), headers={"accept": BOTH}
            )
            prm = await client.get(PRM + MCP)
    assert refused.status_code == 401
    assert f'resource_metadata="{live.base}{PRM}{MCP}"' in refused.headers["www-authenticate"]
    assert as_object(prm.json())["authorization_servers"] == [provider]
