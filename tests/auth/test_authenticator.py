import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from coremetry.auth import (
    SESSION_COOKIE,
    Authenticator,
    Claims,
    ExpiredToken,
    IdentityStore,
    InvalidToken,
    JwtIssuer,
    MissingCredentials,
    RevokedToken,
    extract_credential,
    open_identity_store,
)
from coremetry.auth.principal import AuthError
from coremetry.http_edge import (
    AUTH_CHALLENGE,
    EXPIRED_TOKEN_CHALLENGE,
    INVALID_TOKEN_CHALLENGE,
    Authenticate,
    challenge_for,
)
from coremetry.mcp import Caller

from ._support import CHEAP_PARAMS, OTHER_SECRET, SECRET, FakeClock, forge, good_payload, headers

T = "abc.def.ghi"

# -- header parsing -----------------------------------------------------------------------------

ACCEPTED: list[tuple[str, list[tuple[str, str]], str]] = [
    ("bearer", [("authorization", f"Bearer {T}")], "authorization"),
    ("lower-case-scheme", [("authorization", f"bearer {T}")], "authorization"),
    ("upper-case-scheme", [("authorization", f"BEARER {T}")], "authorization"),
    ("mixed-case-scheme", [("authorization", f"bEaReR {T}")], "authorization"),
    ("extra-spaces", [("authorization", f"  Bearer    {T}   ")], "authorization"),
    ("tab", [("authorization", f"Bearer\t{T}")], "authorization"),
    ("cookie", [("cookie", f"{SESSION_COOKIE}={T}")], "cookie"),
    ("cookie-among-others", [("cookie", f"a=1; {SESSION_COOKIE}={T}; b=2")], "cookie"),
    ("cookie-quoted", [("cookie", f'{SESSION_COOKIE}="{T}"')], "cookie"),
    (
        "cookie-split-over-headers",
        [("cookie", "a=1"), ("cookie", f"{SESSION_COOKIE}={T}")],
        "cookie",
    ),
    ("cookie-repeated-same", [("cookie", f"{SESSION_COOKIE}={T}; {SESSION_COOKIE}={T}")], "cookie"),
    (
        "header-wins-over-cookie",
        [("authorization", f"Bearer {T}"), ("cookie", f"{SESSION_COOKIE}=other.jwt.value")],
        "authorization",
    ),
]


@pytest.mark.parametrize(
    ("pairs", "source"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED]
)
def test_credentials_found(pairs: list[tuple[str, str]], source: str) -> None:
    assert extract_credential(headers(*pairs)) == (T, source)


MISSING: list[tuple[str, list[tuple[str, str]]]] = [
    ("nothing", []),
    ("empty-authorization", [("authorization", "")]),
    ("blank-authorization", [("authorization", "   ")]),
    ("basic", [("authorization", "Basic dXNlcjpwYXNzd29yZA==")]),
    ("bare-jwt", [("authorization", T)]),
    ("bare-service-token", [("authorization", "cmk_" + "A" * 43)]),
    ("digest", [("authorization", 'Digest username="a"')]),
    ("bearer-as-part-of-a-word", [("authorization", f"Bearerx {T}")]),
    ("other-cookies-only", [("cookie", "a=1; b=2")]),
    ("empty-session-cookie", [("cookie", f"{SESSION_COOKIE}=")]),
    ("token-in-another-header", [("x-api-key", T)]),
]


@pytest.mark.parametrize("pairs", [m[1] for m in MISSING], ids=[m[0] for m in MISSING])
def test_missing_credentials(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(MissingCredentials) as refused:
        extract_credential(headers(*pairs))
    assert refused.value.token_sent is False
    assert challenge_for(refused.value) == AUTH_CHALLENGE
    assert T not in refused.value.reason


INVALID: list[tuple[str, list[tuple[str, str]]]] = [
    ("bearer-without-token", [("authorization", "Bearer")]),
    ("bearer-with-spaces-only", [("authorization", "Bearer    ")]),
    ("two-tokens", [("authorization", f"Bearer {T} {T}")]),
    (
        "two-authorization-headers",
        [("authorization", f"Bearer {T}"), ("authorization", "Bearer x")],
    ),
    ("not-b64token", [("authorization", "Bearer abc%def")]),
    ("quoted-token", [("authorization", f'Bearer "{T}"')]),
    ("two-session-cookies", [("cookie", f"{SESSION_COOKIE}={T}; {SESSION_COOKIE}=x.y.z")]),
    ("service-token-in-cookie", [("cookie", f"{SESSION_COOKIE}=cmk_{'A' * 43}")]),
]


@pytest.mark.parametrize("pairs", [m[1] for m in INVALID], ids=[m[0] for m in INVALID])
def test_malformed_credentials(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(InvalidToken) as refused:
        extract_credential(headers(*pairs))
    assert refused.value.token_sent is True
    assert challenge_for(refused.value) == INVALID_TOKEN_CHALLENGE


# -- end to end ---------------------------------------------------------------------------------


def test_authenticator_fits_the_transport_hook(store: IdentityStore, issuer: JwtIssuer) -> None:
    hook: Authenticate = Authenticator(store, issuer)  # checked by mypy: no transport import
    assert callable(hook)


async def test_jwt_in_header_and_cookie(store: IdentityStore, issuer: JwtIssuer) -> None:
    authenticate = Authenticator(store, issuer)
    store.add_user("alice", "editor", "alice-password")
    generation = store.session_generation("alice")
    assert generation is not None
    token = issuer.issue(issuer.session_claims("alice", "editor", generation))
    expected = Caller(subject="alice", role="editor", kind="jwt", token_name="")
    assert await authenticate(headers(("authorization", f"Bearer {token}"))) == expected
    assert await authenticate(headers(("cookie", f"{SESSION_COOKIE}={token}"))) == expected


async def test_service_token(store: IdentityStore, issuer: JwtIssuer) -> None:
    token, _ = store.create_token("ci", "admin", None)
    caller = await Authenticator(store, issuer)(headers(("authorization", f"bearer  {token}")))
    assert caller == Caller(subject="token:ci", role="admin", kind="service_token", token_name="ci")


REFUSED_TOKENS: list[tuple[str, str, type[AuthError]]] = [
    ("garbage", "garbage", InvalidToken),
    ("other-secret", forge({"alg": "HS256"}, good_payload(), key=OTHER_SECRET), InvalidToken),
    ("alg-none", forge({"alg": "none"}, good_payload(), signature=b"x"), InvalidToken),
    (
        "expired",
        forge({"alg": "HS256"}, good_payload(exp=1_000_000_000), key=SECRET),
        ExpiredToken,
    ),
    ("unknown-service-token", "cmk_" + "B" * 43, InvalidToken),
    ("short-service-token", "cmk_abc", InvalidToken),
]


@pytest.mark.parametrize(
    ("token", "error"), [r[1:] for r in REFUSED_TOKENS], ids=[r[0] for r in REFUSED_TOKENS]
)
async def test_bad_tokens_are_refused_as_sent(
    store: IdentityStore, issuer: JwtIssuer, token: str, error: type[AuthError]
) -> None:
    with pytest.raises(error) as refused:
        await Authenticator(store, issuer)(headers(("authorization", f"Bearer {token}")))
    assert refused.value.token_sent is True
    expected = EXPIRED_TOKEN_CHALLENGE if error is ExpiredToken else INVALID_TOKEN_CHALLENGE
    assert challenge_for(refused.value) == expected
    assert token not in refused.value.reason
    assert token not in str(refused.value)


async def test_nothing_presented(store: IdentityStore, issuer: JwtIssuer) -> None:
    with pytest.raises(MissingCredentials) as refused:
        await Authenticator(store, issuer)(headers(("accept", "application/json")))
    assert refused.value.token_sent is False
    assert str(refused.value) == "authentication required"


async def test_basic_is_refused_without_error_code(store: IdentityStore, issuer: JwtIssuer) -> None:
    store.add_user("alice", "admin", "password")
    with pytest.raises(MissingCredentials):
        await Authenticator(store, issuer)(headers(("authorization", "Basic YWxpY2U6cGFzc3dvcmQ=")))


async def test_revocation_beats_the_cache(store: IdentityStore, issuer: JwtIssuer) -> None:
    authenticate = Authenticator(store, issuer)
    token, _ = store.create_token("ci", "viewer", None)
    request = headers(("authorization", f"Bearer {token}"))
    await authenticate(request)
    await authenticate(request)  # served from the cache
    await trio.to_thread.run_sync(store.revoke_token, "ci")
    with pytest.raises(RevokedToken):
        await authenticate(request)


async def test_revocation_from_another_process_beats_the_cache(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    authenticate = Authenticator(store, issuer)
    token, _ = store.create_token("ci", "viewer", None)
    request = headers(("authorization", f"Bearer {token}"))
    await authenticate(request)
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS) as cli:  # as the CLI would
        cli.revoke_token("ci")
    with pytest.raises(RevokedToken):
        await authenticate(request)


async def test_cache_saves_database_reads(
    store: IdentityStore,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    reads: list[str] = []
    real_verify = store.verify_token

    def counting_verify(token: str) -> Claims:
        reads.append(token)
        return real_verify(token)

    monkeypatch.setattr(store, "verify_token", counting_verify)
    token, _ = store.create_token("ci", "viewer", None)
    request = headers(("authorization", f"Bearer {token}"))
    authenticate = Authenticator(store, issuer, cache_ttl_s=5)
    for _ in range(3):
        await authenticate(request)
    assert len(reads) == 1
    await trio.sleep(5)
    await authenticate(request)
    assert len(reads) == 2
    uncached = Authenticator(store, issuer, cache_ttl_s=0)
    await uncached(request)
    await uncached(request)
    assert len(reads) == 4


async def test_cache_respects_expiry(
    store: IdentityStore, issuer: JwtIssuer, clock: FakeClock
) -> None:
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600, clock=clock)
    token, _ = store.create_token("short", "viewer", 60)
    request = headers(("authorization", f"Bearer {token}"))
    await authenticate(request)
    clock.advance(60)
    with pytest.raises(ExpiredToken):
        await authenticate(request)


async def test_cache_is_bounded(store: IdentityStore, issuer: JwtIssuer) -> None:
    authenticate = Authenticator(store, issuer, cache_max_entries=2)
    tokens = [store.create_token(f"t{i}", "viewer", None)[0] for i in range(5)]
    for token in tokens:
        await authenticate(headers(("authorization", f"Bearer {token}")))
    for token in tokens:  # evicted entries are verified again, not refused
        await authenticate(headers(("authorization", f"Bearer {token}")))


async def test_secrets_never_reach_the_log(
    store: IdentityStore, issuer: JwtIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="coremetry.auth")
    token, _ = store.create_token("ci", "viewer", None)
    store.revoke_token("ci")
    jwt_token = issuer.issue(issuer.session_claims("alice", "viewer"))
    authenticate = Authenticator(store, issuer)
    attempts = [
        f"Bearer {token}",
        f"Bearer {jwt_token}x",
        f"Basic {jwt_token}",
        jwt_token,
        f"Bearer {jwt_token} {token}",
    ]
    for value in attempts:
        with pytest.raises(AuthError):
            await authenticate(headers(("authorization", value)))
    assert "authentication refused" in caplog.text
    assert token not in caplog.text
    assert jwt_token not in caplog.text
    assert jwt_token.split(".")[2] not in caplog.text
