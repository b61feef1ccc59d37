"""The identity-provider verifier (:mod:`coremetry.auth.oidc`): keys, checks, roles, routing.

The provider side here is a static key set and discovery document served over loopback HTTP
by :class:`KeyServer` (Python's ``http.server``), so key rotation and fetch counts can be
controlled; the test against a real provider is ``tests/node/test_oidc_provider.py``.
"""

import http.server
import json
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Final

import jwt
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coremetry.auth import (
    SESSION_COOKIE,
    Authenticator,
    ExpiredToken,
    IdentityStore,
    InvalidToken,
    JwtIssuer,
    OidcVerifier,
)
from coremetry.auth.oidc import UNKNOWN_KID_COOLDOWN_S, fetch_discovery
from coremetry.config import load_config

from ._support import headers

AUDIENCE: Final = "http://127.0.0.1:8080/api/mcp"
ROLE_MAP: Final = {"ops": "admin", "devs": "editor", "everyone": "viewer"}


class KeyServer:
    """Serves ``/.well-known/openid-configuration`` and ``/jwks`` on loopback; counts requests."""

    def __init__(self) -> None:
        self.keys: list[dict[str, object]] = []
        self.issuer_override: str | None = None
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                body: dict[str, object]
                if self.path == "/.well-known/openid-configuration":
                    body = {
                        "issuer": server.issuer_override or server.issuer,
                        "jwks_uri": f"{server.issuer}/jwks",
                    }
                elif self.path == "/jwks":
                    body = {"keys": server.keys}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join()


class Signer:
    """A private key and its public JWK."""

    def __init__(self, kid: str, kind: str = "rsa") -> None:
        self.kid = kid
        if kind == "rsa":
            self.key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = rsa.generate_private_key(
                public_exponent=65537, key_size=2048
            )
            self.alg = "RS256"
        else:
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.alg = "ES256"
        jwk = json.loads(
            jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(self.key.public_key())
        )
        self.jwk: dict[str, object] = {**jwk, "kid": kid, "use": "sig", "alg": self.alg}

    def sign(self, payload: Mapping[str, object], **header: object) -> str:
        return jwt.encode(
            dict(payload), self.key, algorithm=self.alg, headers={"kid": self.kid, **header}
        )


@pytest.fixture
def provider() -> Iterator[KeyServer]:
    server = KeyServer()
    try:
        yield server
    finally:
        server.close()


def claims(provider: KeyServer, **changes: object) -> dict[str, object]:
    now = int(time.time())
    payload: dict[str, object] = {
        "iss": provider.issuer,
        "aud": AUDIENCE,
        "sub": "u-123",
        "iat": now,
        "exp": now + 300,
        "client_id": "cli-app",
        "groups": ["devs"],
    }
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not None}


def subject(provider: KeyServer) -> str:
    """The identity a token of ``provider`` for ``u-123`` gets."""
    return f"oidc:{provider.issuer}#u-123"


def verifier(
    provider: KeyServer,
    *,
    audience: str = AUDIENCE,
    jwks_uri: str = "",
    unknown_kid_cooldown_s: float = UNKNOWN_KID_COOLDOWN_S,
    jwks_cache_s: float = 300.0,
) -> OidcVerifier:
    """A verifier of ``provider``'s tokens: role from ``groups`` through :data:`ROLE_MAP`."""
    return OidcVerifier(
        issuer=provider.issuer,
        audience=audience,
        role_claim="groups",
        role_map=ROLE_MAP,
        jwks_uri=jwks_uri,
        unknown_kid_cooldown_s=unknown_kid_cooldown_s,
        jwks_cache_s=jwks_cache_s,
    )


async def test_a_good_token_gives_a_namespaced_identity(provider: KeyServer) -> None:
    rsa_key, ec_key = Signer("r1"), Signer("e1", "ec")
    provider.keys = [rsa_key.jwk, ec_key.jwk]
    oidc = verifier(provider)
    payload = claims(provider)
    for signer in (rsa_key, ec_key):
        verified = await oidc.verify(signer.sign(payload))
        assert verified.sub == f"oidc:{provider.issuer}#u-123"
        assert verified.role == "editor"
        assert verified.kind == "oidc"
        assert verified.token_name == "cli-app"
        assert verified.expires_at == payload["exp"]
        assert verified.issued_at == payload["iat"]
    # Discovery once, the key set once: both tokens used the cache.
    assert provider.requests == ["/.well-known/openid-configuration", "/jwks"]


async def test_checks_refuse_what_must_not_pass(provider: KeyServer) -> None:
    signer = Signer("r1")
    provider.keys = [signer.jwk]
    oidc = verifier(provider)
    now = int(time.time())
    refused = {
        "wrong audience": signer.sign(claims(provider, aud="https://other.example/api/mcp")),
        "wrong issuer": signer.sign(claims(provider, iss="https://idp.example.com")),
        "no exp": signer.sign(claims(provider, exp=None)),
        "no sub": signer.sign(claims(provider, sub=None)),
        "future iat": signer.sign(claims(provider, iat=now + 3600)),
        "future nbf": signer.sign(claims(provider, nbf=now + 3600)),
        "no role": signer.sign(claims(provider, groups=["strangers"])),
        "no kid": jwt.encode(claims(provider), signer.key, algorithm="RS256"),
        "HS256": jwt.encode(claims(provider), "x" * 32, algorithm="HS256", headers={"kid": "r1"}),
        "long sub": signer.sign(claims(provider, sub="x" * 256)),
    }
    for token in refused.values():
        with pytest.raises(InvalidToken):
            await oidc.verify(token)
    with pytest.raises(ExpiredToken):
        await oidc.verify(signer.sign(claims(provider, iat=now - 600, exp=now - 60)))
    # Within the leeway an expiry is tolerated (clock skew).
    assert (await oidc.verify(signer.sign(claims(provider, exp=now - 5)))).sub == subject(provider)


async def test_an_unknown_kid_refetches_the_key_set_at_most_once_per_cooldown(
    provider: KeyServer,
) -> None:
    old, new = Signer("old"), Signer("new")
    provider.keys = [old.jwk]
    slow = verifier(provider)  # the default cooldown (30 s)
    assert (await slow.verify(old.sign(claims(provider)))).sub == subject(provider)
    provider.keys = [old.jwk, new.jwk]  # the provider rotates
    for _ in range(5):
        with pytest.raises(InvalidToken):
            await slow.verify(new.sign(claims(provider)))
    assert provider.requests.count("/jwks") == 1  # made-up kids cost the provider nothing
    provider.requests.clear()
    fresh = verifier(provider, unknown_kid_cooldown_s=0)
    provider.keys = [old.jwk]
    assert (await fresh.verify(old.sign(claims(provider)))).sub == subject(provider)
    provider.keys = [old.jwk, new.jwk]
    rotated = await fresh.verify(new.sign(claims(provider)))  # the rotated key is picked up
    assert rotated.sub == subject(provider)
    assert provider.requests.count("/jwks") == 2


async def test_keys_fetched_last_stay_in_use_while_the_provider_is_down(
    provider: KeyServer,
) -> None:
    signer, unknown = Signer("r1"), Signer("r2")
    provider.keys = [signer.jwk]
    oidc = verifier(provider, jwks_cache_s=0.001, unknown_kid_cooldown_s=0)
    assert (await oidc.verify(signer.sign(claims(provider)))).sub == subject(provider)
    provider.close()  # the provider goes away; the cached set is past its lifespan by now
    await trio.sleep(0.01)
    assert (await oidc.verify(signer.sign(claims(provider)))).sub == subject(provider)
    with pytest.raises(InvalidToken):
        await oidc.verify(unknown.sign(claims(provider)))


async def test_discovery_must_name_the_configured_issuer(provider: KeyServer) -> None:
    signer = Signer("r1")
    provider.keys = [signer.jwk]
    provider.issuer_override = "https://impostor.example.com"
    with pytest.raises(ValueError, match=r"names the issuer 'https://impostor\.example\.com'"):
        fetch_discovery(provider.issuer)
    provider.requests.clear()
    oidc = verifier(provider)
    with pytest.raises(InvalidToken) as refused:
        await oidc.verify(signer.sign(claims(provider)))
    assert "discovery failed" in refused.value.reason
    # A failed discovery is not retried on every token.
    with pytest.raises(InvalidToken) as again:
        await oidc.verify(signer.sign(claims(provider)))
    assert "not retried yet" in again.value.reason
    assert provider.requests == ["/.well-known/openid-configuration"]
    # A configured jwks_uri needs no discovery at all.
    provider.requests.clear()
    direct = verifier(provider, jwks_uri=f"{provider.issuer}/jwks")
    assert (await direct.verify(signer.sign(claims(provider)))).sub == subject(provider)
    assert provider.requests == ["/jwks"]


async def test_the_audience_defaults_to_the_bound_mcp_url(provider: KeyServer) -> None:
    signer = Signer("r1")
    provider.keys = [signer.jwk]
    oidc = verifier(provider, audience="")
    with pytest.raises(InvalidToken, match="invalid token"):
        await oidc.verify(signer.sign(claims(provider)))
    oidc.set_default_audience(AUDIENCE)
    assert (await oidc.verify(signer.sign(claims(provider)))).sub == subject(provider)
    configured = verifier(provider, audience="https://coremetry.example.com/api/mcp")
    configured.set_default_audience(AUDIENCE)  # a configured audience stays
    assert configured.audience == "https://coremetry.example.com/api/mcp"


@pytest.mark.parametrize(
    ("claim", "role_map", "default_role", "value", "role"),
    [
        ("coremetry_role", {}, "", "editor", "editor"),
        ("coremetry_role", {}, "", "root", ""),
        ("coremetry_role", {}, "viewer", "root", "viewer"),
        ("coremetry_role", {}, "viewer", None, "viewer"),
        ("roles", {}, "", ["viewer", "admin", "x"], "admin"),
        ("scope", {}, "", "openid admin email", "admin"),
        ("groups", ROLE_MAP, "", ["everyone", "ops"], "admin"),
        ("groups", ROLE_MAP, "", ["admin"], ""),  # with a map, only mapped values count
        ("realm_access.roles", ROLE_MAP, "", ["devs"], "editor"),
        ("realm_access.roles", ROLE_MAP, "", {"devs": True}, ""),
        ("coremetry_role", {}, "", 3, ""),
    ],
)
def test_the_role_comes_from_the_configured_claim(
    claim: str, role_map: dict[str, str], default_role: str, value: object, role: str
) -> None:
    oidc = OidcVerifier(
        issuer="https://idp.example.com",
        audience=AUDIENCE,
        role_claim=claim,
        role_map=role_map,
        default_role=default_role,
    )
    token_claims: dict[str, object] = {"sub": "u"}
    if value is not None:
        outer, _, inner = claim.partition(".")
        token_claims[outer] = {inner: value} if inner else value
    assert oidc.role_of(token_claims) == role


def test_from_config_reads_auth_oidc() -> None:
    assert OidcVerifier.from_config(load_config(environ={})) is None
    config = load_config(
        environ={},
        overrides={
            "auth": {"oidc": {"issuer": "https://idp.example.com", "default_role": "viewer"}}
        },
    )
    oidc = OidcVerifier.from_config(config)
    assert oidc is not None
    assert oidc.issuer == "https://idp.example.com"
    assert oidc.audience == ""
    assert oidc.default_role == "viewer"
    with pytest.raises(ValueError, match="not a role"):
        OidcVerifier(issuer="https://i", audience="", role_claim="r", role_map={"x": "root"})


async def test_the_authenticator_routes_provider_tokens_by_issuer(
    provider: KeyServer, store: IdentityStore, issuer: JwtIssuer
) -> None:
    signer = Signer("r1")
    provider.keys = [signer.jwk]
    authenticator = Authenticator(store, issuer, oidc=verifier(provider))
    token = signer.sign(claims(provider))
    caller = await authenticator(headers(("authorization", f"Bearer {token}")))
    assert caller.subject == f"oidc:{provider.issuer}#u-123"
    assert caller.kind == "oidc"
    assert caller.role == "editor"
    # Served from the cache on the next request: no further fetch.
    assert await authenticator(headers(("authorization", f"Bearer {token}"))) == caller
    assert provider.requests.count("/jwks") == 1
    # Never from the session cookie.
    with pytest.raises(InvalidToken):
        await authenticator(headers(("cookie", f"{SESSION_COOKIE}={token}")))
    # A local user's session JWT still goes to the session verifier.
    store.add_user("carol", "viewer", "a long enough password")
    session = issuer.issue(
        issuer.session_claims("carol", "viewer", store.session_generation("carol") or 0)
    )
    assert (await authenticator(headers(("authorization", f"Bearer {session}")))).subject == "carol"
