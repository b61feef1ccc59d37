"""The OAuth rules that are ours (issue 18): redirect URIs, scopes to roles, access tokens."""

import time

import jwt
import pytest

from coremetry.auth import ExpiredToken, InvalidToken, JwtIssuer
from coremetry.auth.jwt_verifier import AccessTokens
from coremetry.auth.oauth_resource import role_for_scopes, scopes_for_role
from coremetry.auth.oauth_server import acceptable_redirect_uri, redirect_uri_matches

from ._support import OTHER_SECRET, SECRET

RESOURCE = "http://127.0.0.1:8080/api/mcp"
AUDIENCES = frozenset({"http://127.0.0.1:8080", RESOURCE})


@pytest.mark.parametrize(
    ("registered", "presented", "matches"),
    [
        ("https://app.example/cb", "https://app.example/cb", True),
        ("https://app.example/cb", "https://app.example/cb/", False),
        ("https://app.example/cb", "https://app.example/cb?x=1", False),
        ("https://app.example:443/cb", "https://app.example:8443/cb", False),  # not loopback
        ("http://127.0.0.1:1234/cb", "http://127.0.0.1:5678/cb", True),  # RFC 8252 §7.3
        ("http://[::1]:1234/cb", "http://[::1]/cb", True),
        ("http://localhost:1/cb", "http://localhost:2/cb", True),
        ("http://127.0.0.1:1234/cb", "http://127.0.0.1:1234/other", False),
        ("http://127.0.0.1:1234/cb", "http://localhost:1234/cb", False),  # another host
        ("http://127.0.0.1/cb", "http://user@127.0.0.1:9/cb", False),
        ("com.example.app:/cb", "com.example.app:/cb", True),
    ],
)
def test_redirect_uris_match_exactly_except_loopback_ports(
    registered: str, presented: str, matches: bool
) -> None:
    assert redirect_uri_matches(registered, presented) is matches


@pytest.mark.parametrize(
    ("uri", "acceptable"),
    [
        ("https://app.example/cb", True),
        ("http://127.0.0.1:9/cb", True),
        ("http://localhost/cb", True),
        ("com.example.app:/oauth", True),
        ("cursor://anysphere.cursor-mcp/oauth/callback", True),
        ("http://app.example/cb", False),  # plain http off loopback
        ("https://app.example/cb#frag", False),
        ("javascript:alert(1)", False),
        ("data:text/html,x", False),
        ("file:///etc/passwd", False),
        ("/relative", False),
    ],
)
def test_registrable_redirect_uris(uri: str, acceptable: bool) -> None:
    assert acceptable_redirect_uri(uri) is acceptable


@pytest.mark.parametrize(
    ("scopes", "user_role", "role"),
    [
        (["mcp:read", "mcp:write", "mcp:admin"], "viewer", "viewer"),
        (["mcp:read", "mcp:write", "mcp:admin"], "editor", "editor"),
        (["mcp:read"], "admin", "viewer"),
        (["mcp:admin"], "editor", "editor"),  # never more than the user's role
        (["offline_access"], "admin", "viewer"),
        ([], "admin", "viewer"),
    ],
)
def test_scopes_map_to_roles_capped_at_the_users(
    scopes: list[str], user_role: str, role: str
) -> None:
    assert role_for_scopes(scopes, user_role) == role


def test_a_role_carries_every_scope_up_to_it() -> None:
    assert scopes_for_role("viewer") == ["mcp:read"]
    assert scopes_for_role("admin") == ["mcp:read", "mcp:write", "mcp:admin"]


def _issue(tokens: AccessTokens, audience: str = RESOURCE) -> str:
    return tokens.issue(
        issuer="http://127.0.0.1:8080",
        audience=audience,
        sub="alice",
        role="editor",
        generation=7,
        scope="mcp:read mcp:write",
        client_id="client-1",
    )


def test_access_tokens_verify_for_this_resource_only() -> None:
    tokens = AccessTokens(SECRET, ttl_s=600)
    token = _issue(tokens)
    claims = tokens.verify(token, AUDIENCES)
    assert (claims.sub, claims.role, claims.kind) == ("alice", "editor", "oauth")
    assert (claims.token_name, claims.generation) == ("client-1", 7)
    assert AccessTokens.is_access_token(token)
    with pytest.raises(InvalidToken) as foreign:
        tokens.verify(_issue(tokens, "https://other.example/api/mcp"), AUDIENCES)
    assert "another resource" in foreign.value.reason
    with pytest.raises(InvalidToken):
        AccessTokens(OTHER_SECRET).verify(token, AUDIENCES)


def test_access_tokens_and_login_jwts_never_pass_as_each_other() -> None:
    tokens = AccessTokens(SECRET)
    issuer = JwtIssuer(SECRET)
    login = issuer.issue(issuer.session_claims("alice", "admin"))
    assert not AccessTokens.is_access_token(login)
    with pytest.raises(InvalidToken):
        tokens.verify(login, AUDIENCES)
    with pytest.raises(InvalidToken):
        issuer.verify(_issue(tokens))


def test_expired_and_forged_access_tokens_are_refused() -> None:
    tokens = AccessTokens(SECRET, leeway_s=0)
    past = int(time.time()) - 3600
    payload = {
        "iss": "http://127.0.0.1:8080",
        "aud": RESOURCE,
        "sub": "alice",
        "role": "admin",
        "gen": 1,
        "client_id": "c",
        "iat": past,
        "exp": past + 60,
    }
    expired = jwt.encode(payload, SECRET, algorithm="HS256", headers={"typ": "at+jwt"})
    with pytest.raises(ExpiredToken):
        tokens.verify(expired, AUDIENCES)
    fresh = {**payload, "iat": int(time.time()), "exp": int(time.time()) + 60}
    unsigned = jwt.encode(fresh, "", algorithm="none", headers={"typ": "at+jwt"})
    with pytest.raises(InvalidToken):
        tokens.verify(unsigned, AUDIENCES)
    wrong_role = jwt.encode(
        {**fresh, "role": "root"}, SECRET, algorithm="HS256", headers={"typ": "at+jwt"}
    )
    with pytest.raises(InvalidToken) as refused:
        tokens.verify(wrong_role, AUDIENCES)
    assert "unknown role" in refused.value.reason
