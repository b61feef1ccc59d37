"""An external identity provider end to end (issue 18): real tokens from a real provider.

The provider is panva's ``oidc-provider`` from npm (``oidc_provider.mjs``: client credentials
grant, RFC 8707 resource indicators, RFC 9068 JWT access tokens, roles in Keycloak's
``realm_access.roles`` shape). The server is :func:`coremetry.server.serve` with real security
and ``[auth.oidc]`` naming that provider, ``audience`` left to its default (the bound MCP URL).
Tokens are obtained over HTTP from the provider's token endpoint, as a client would, and sent
to the MCP endpoint (Streamable HTTP), the REST API and the WebSocket ticket endpoint.

Refused, each with 401 and the Bearer challenge: a token for another resource (audience), a
token of another provider (issuer), an expired token and one not yet valid (the provider's
clock moved by its test hook, so nothing waits), a token re-signed with a key the provider does
not publish (unknown ``kid``), a tampered signature, a tampered payload (role raised), the
HS256 "key confusion" forgery with the provider's public key, and a token whose role claim
names no Coremetry role. An accepted token is audited under ``oidc:<issuer>#<sub>``.
"""

import base64
import hmac
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from hashlib import sha256
from pathlib import Path
from typing import Final

import httpx
import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from test_auth_e2e import EXPIRED_CHALLENGE, INVALID_TOKEN_CHALLENGE, http_mcp, result_of, text_of

from coremetry.audit import AuditEntry
from coremetry.config import load_config
from coremetry.mcp import codes
from coremetry.rest import TOOLS_PATH, WS_TICKET_PATH
from coremetry.server import Security, build_mcp_server, open_security, serve

from .conftest import NodeEnv

LIMIT_S: Final = 60.0
"""Hang guard of every test."""

ROLE_MAP: Final = {"coremetry-viewers": "viewer", "coremetry-admins": "admin"}


@dataclass
class Live:
    base: str
    security: Security
    issuer: str

    @property
    def resource(self) -> str:
        return f"{self.base}/api/mcp"


@asynccontextmanager
async def live_server(tmp_path: Path, issuer: str) -> AsyncIterator[Live]:
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "data_dir": str(tmp_path / "data"),
            "auth": {
                "oidc": {
                    "issuer": issuer,
                    "role_claim": "realm_access.roles",
                    "role_map": ROLE_MAP,
                }
            },
        },
    )
    security = open_security(config)
    try:
        stop = trio.Event()
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
            try:
                yield Live(base, security, issuer)
            finally:
                stop.set()
    finally:
        security.close()


async def token_from(
    issuer: str,
    client_id: str,
    resource: str,
    *,
    clock_offset_s: int = 0,
) -> str:
    """An access token from the provider's token endpoint (client credentials, RFC 8707)."""
    async with httpx.AsyncClient(timeout=LIMIT_S) as client:
        discovery = (await client.get(f"{issuer}/.well-known/openid-configuration")).json()
        response = await client.post(
            discovery["token_endpoint"],
            data={"grant_type": "client_credentials", "scope": "mcp", "resource": resource},
            auth=(client_id, f"secret-{client_id}"),
            headers={"x-test-clock-offset-s": str(clock_offset_s)} if clock_offset_s else {},
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_type"] == "Bearer"
    token = body["access_token"]
    assert isinstance(token, str)
    return token


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def rest_status(live: Live, headers: Mapping[str, str]) -> tuple[int, str]:
    """``GET /api/tools``: the status and ``WWW-Authenticate`` (``""`` when absent)."""
    async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
        response = await client.get(TOOLS_PATH, headers=dict(headers))
    return response.status_code, response.headers.get("www-authenticate", "")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_json(value: object) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def parts_of(token: str) -> tuple[dict[str, object], dict[str, object], str]:
    """A token's header and payload (unverified) and its signature segment."""
    return (
        jwt.get_unverified_header(token),
        jwt.decode(token, options={"verify_signature": False}),
        token.rsplit(".", 1)[1],
    )


async def test_provider_tokens_authenticate_with_the_mapped_role(
    tmp_path: Path, oidc_issuer: str
) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path, oidc_issuer) as live:
            viewer = await token_from(oidc_issuer, "coremetry-viewer", live.resource)
            admin = await token_from(oidc_issuer, "coremetry-admin", live.resource)
            assert jwt.get_unverified_header(admin)["alg"] == "ES256"
            assert jwt.get_unverified_header(viewer)["alg"] == "RS256"
            for token, client_id, role in (
                (viewer, "coremetry-viewer", "viewer"),
                (admin, "coremetry-admin", "admin"),
            ):
                async with http_mcp(live.base, bearer(token), "stateless") as channel:
                    read = await channel.call(1, "resources/read", {"uri": "coremetry://server"})
                    caller = json.loads(text_of(result_of(read)))["caller"]
                    # The provider's subject, in a namespace of its own: never a local user.
                    assert caller == {"subject": f"oidc:{oidc_issuer}#{client_id}", "role": role}
                    echo = await channel.call(
                        2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
                    )
                    assert text_of(result_of(echo)) == "hi"
                    admin_only = await channel.call(
                        3, "tools/call", {"name": "admin_only", "arguments": {}}
                    )
                    if role == "admin":
                        assert "error" not in admin_only
                    else:
                        error = admin_only["error"]
                        assert isinstance(error, dict)
                        assert error["code"] == codes.FORBIDDEN
            # Every usual entry point takes it: REST, and minting a WebSocket ticket.
            assert (await rest_status(live, bearer(viewer)))[0] == 200
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                minted = await client.post(WS_TICKET_PATH, headers=bearer(viewer))
            assert minted.status_code == 200
            await live.security.audit.wait_flushed()
            rows: list[AuditEntry] = await trio.to_thread.run_sync(
                lambda: live.security.audit.tail(50)
            )
            echo_rows = {(row.sub, row.kind, row.token_name) for row in rows if row.name == "echo"}
            assert echo_rows == {
                (f"oidc:{oidc_issuer}#coremetry-viewer", "oidc", "coremetry-viewer"),
                (f"oidc:{oidc_issuer}#coremetry-admin", "oidc", "coremetry-admin"),
            }


async def test_provider_tokens_that_must_not_pass_get_401(
    tmp_path: Path, oidc_issuer: str, other_issuer: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coremetry.auth")
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path, oidc_issuer) as live:
            good = await token_from(oidc_issuer, "coremetry-viewer", live.resource)
            assert await rest_status(live, bearer(good)) == (200, "")
            header, payload, signature = parts_of(good)
            head, body, _ = good.split(".")

            # Re-signed with a key the provider does not publish (a forger's own key).
            forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            unknown_kid = jwt.encode(
                payload, forger, algorithm="RS256", headers={"kid": "forged-1", "typ": "at+jwt"}
            )
            same_kid = jwt.encode(
                payload, forger, algorithm="RS256", headers={"kid": header["kid"]}
            )
            # The classic key confusion: HS256 with the provider's public key as the secret.
            async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                jwks = (await client.get(f"{oidc_issuer}/jwks")).json()
            rsa_jwk = next(key for key in jwks["keys"] if key["kid"] == header["kid"])
            public_pem = jwt.PyJWK(rsa_jwk).key.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            confused_head = b64url_json({"alg": "HS256", "typ": "at+jwt", "kid": header["kid"]})
            confused_input = f"{confused_head}.{body}".encode()
            confused = (
                f"{confused_head}.{body}."
                f"{b64url(hmac.new(public_pem, confused_input, sha256).digest())}"
            )
            none_alg = f"{b64url_json({'alg': 'none', 'kid': header['kid']})}.{body}."
            raised = dict(payload, realm_access={"roles": ["coremetry-admins"]})
            flipped = signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")

            refused = {
                "another resource's token": await token_from(
                    oidc_issuer, "coremetry-viewer", "http://127.0.0.1:1/api/mcp"
                ),
                "another provider's token": await token_from(
                    other_issuer, "coremetry-viewer", live.resource
                ),
                "expired": await token_from(
                    oidc_issuer, "coremetry-viewer", live.resource, clock_offset_s=-3600
                ),
                "not yet valid": await token_from(
                    oidc_issuer, "coremetry-viewer", live.resource, clock_offset_s=3600
                ),
                "no Coremetry role": await token_from(
                    oidc_issuer, "coremetry-norole", live.resource
                ),
                "unknown kid": unknown_kid,
                "the provider's kid, another key": same_kid,
                "tampered signature": f"{head}.{body}.{flipped}",
                "tampered payload": f"{head}.{b64url_json(raised)}.{signature}",
                "HS256 with the public key": confused,
                "alg none": none_alg,
            }
            # Each refused for its own reason (the server's log says which; clients never see it).
            why = {
                "another resource's token": "Audience doesn't match",
                # Not our provider's iss; its RFC 9068 ``typ: at+jwt`` routes it to the built-in
                # server's access-token check, whose key and algorithm it fails.
                "another provider's token": "OAuth access token refused",
                "expired": "OIDC token expired",
                "not yet valid": "not yet valid",
                "no Coremetry role": "no known role in claim 'realm_access.roles'",
                "unknown kid": "key 'forged-1' unknown",
                "the provider's kid, another key": "Signature verification failed",
                "tampered signature": "Signature verification failed",
                "tampered payload": "Signature verification failed",
                "HS256 with the public key": "algorithm 'HS256' is not accepted",
                "alg none": "not a compact JWS",
            }
            answers: dict[str, tuple[int, str]] = {}
            reasons: dict[str, str] = {}
            for name, token in refused.items():
                caplog.clear()
                answers[name] = await rest_status(live, bearer(token))
                logged = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
                reasons[name] = next((line for line in logged if why[name] in line), str(logged))
            # Every 401 also names the protected-resource metadata (RFC 9728 §5.1).
            metadata = (
                f', resource_metadata="{live.base}/.well-known/oauth-protected-resource/api/mcp"'
            )
            expected = {name: (401, INVALID_TOKEN_CHALLENGE + metadata) for name in refused}
            expected["expired"] = (401, EXPIRED_CHALLENGE + metadata)
            assert answers == expected
            assert {name: why[name] in reason for name, reason in reasons.items()} == dict.fromkeys(
                refused, True
            ), reasons
            # A provider's token is a Bearer credential only, never a session cookie.
            cookie = {"cookie": f"coremetry_session={good}"}
            assert (await rest_status(live, cookie))[0] == 401
            # And the good token still works after all that (nothing was poisoned).
            assert await rest_status(live, bearer(good)) == (200, "")


async def test_a_stock_websocket_client_gets_in_with_a_provider_token(
    tmp_path: Path, oidc_issuer: str, node_env: NodeEnv
) -> None:
    """The provider's token mints a ticket; the TypeScript SDK's WebSocket client uses it."""
    with trio.fail_after(2 * LIMIT_S):
        async with live_server(tmp_path, oidc_issuer) as live:
            token = await token_from(oidc_issuer, "coremetry-admin", live.resource)
            env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
            env["COREMETRY_TOKEN"] = token
            result = await trio.run_process(
                node_env.command("ws_ticket_client.mjs", live.base),
                cwd=node_env.directory,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    session, reuse = (json.loads(line) for line in result.stdout.decode().splitlines())
    assert session["server"]["caller"] == {
        "subject": f"oidc:{oidc_issuer}#coremetry-admin",
        "role": "admin",
    }
    assert session["echo"] == "hello over a ticket"
    assert reuse == {"reuse": "refused"}
