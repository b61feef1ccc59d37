import base64
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest

from coremetry.auth import (
    Claims,
    ExpiredToken,
    InvalidToken,
    JwtIssuer,
    load_or_create_secret,
)
from coremetry.auth.jwt_verifier import MAX_TOKEN_CHARS, SECRET_FILENAME

from ._support import OTHER_SECRET, SECRET, forge, good_payload

HS256 = {"alg": "HS256", "typ": "JWT"}


def _segment(token: str, index: int) -> dict[str, object]:
    part = token.split(".")[index]
    decoded = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    assert isinstance(decoded, dict)
    return decoded


def test_issue_then_verify(issuer: JwtIssuer) -> None:
    claims = issuer.session_claims("alice", "editor")
    assert claims.kind == "jwt"
    assert claims.expires_at == claims.issued_at + 3600
    token = issuer.issue(claims)
    assert issuer.verify(token) == claims


def test_issued_token_carries_the_registered_claims(issuer: JwtIssuer) -> None:
    claims = issuer.session_claims("alice", "admin")
    token = issuer.issue(claims)
    assert _segment(token, 0)["alg"] == "HS256"
    payload = _segment(token, 1)
    assert {k: payload[k] for k in ("sub", "role", "iat", "nbf", "exp", "iss", "aud")} == {
        "sub": "alice",
        "role": "admin",
        "iat": claims.issued_at,
        "nbf": claims.issued_at,
        "exp": claims.expires_at,
        "iss": "coremetry",
        "aud": "coremetry",
    }
    assert isinstance(payload["jti"], str)
    assert payload["jti"] != _segment(issuer.issue(claims), 1)["jti"]


def test_expiry_defaults_to_the_ttl(issuer: JwtIssuer) -> None:
    claims = Claims(sub="bob", role="viewer", kind="jwt", issued_at=1_900_000_000, expires_at=None)
    assert _segment(issuer.issue(claims), 1)["exp"] == 1_900_000_000 + 3600


@pytest.mark.parametrize(
    "claims",
    [
        Claims(sub="t", role="viewer", kind="service_token", issued_at=0, expires_at=None),
        Claims(sub="t", role="root", kind="jwt", issued_at=0, expires_at=None),
        Claims(sub="", role="viewer", kind="jwt", issued_at=0, expires_at=None),
    ],
)
def test_issue_refuses_bad_claims(issuer: JwtIssuer, claims: Claims) -> None:
    with pytest.raises(ValueError, match=r"JWT|role|subject"):
        issuer.issue(claims)


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        JwtIssuer(b"x" * 31)


@pytest.mark.parametrize(("ttl_s", "leeway_s"), [(0, 30), (-1, 30), (3600, -1), (float("nan"), 0)])
def test_bad_durations(ttl_s: float, leeway_s: float) -> None:
    with pytest.raises(ValueError, match="_s must be"):
        JwtIssuer(SECRET, ttl_s=ttl_s, leeway_s=leeway_s)


def test_repr_hides_the_secret(issuer: JwtIssuer) -> None:
    assert repr(SECRET) not in repr(issuer)
    assert SECRET.hex() not in repr(issuer)


def test_leeway_accepts_small_skew(issuer: JwtIssuer) -> None:
    assert issuer.leeway_s == 30
    token = forge(HS256, good_payload(exp=_now() - 10), key=SECRET)
    assert issuer.verify(token).sub == "alice"


# -- the attack set: every one of these must be refused -----------------------------------------


def _rs256_token() -> str:
    """A real RS256 token when ``cryptography`` is importable, else one crafted by hand."""
    try:
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:  # pragma: no cover - depends on the environment
        return forge({"alg": "RS256", "typ": "JWT"}, good_payload(), signature=os.urandom(256))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(good_payload(), key, algorithm="RS256")


def _rs_public_key_as_hmac_secret() -> str:
    """Key confusion: an HS256 token whose HMAC key is an RSA public key in PEM form."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:  # pragma: no cover - depends on the environment
        pem = b"-----BEGIN PUBLIC KEY-----\n" + os.urandom(270) + b"\n-----END PUBLIC KEY-----\n"
    else:
        public = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
        pem = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return forge(HS256, good_payload(role="admin"), key=pem)


def _tampered_payload() -> str:
    header, _payload, signature = forge(HS256, good_payload(), key=SECRET).split(".")
    evil = forge(HS256, good_payload(role="admin"), key=SECRET).split(".")[1]
    return f"{header}.{evil}.{signature}"


def _tampered_signature() -> str:
    header, payload, signature = forge(HS256, good_payload(), key=SECRET).split(".")
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    return f"{header}.{payload}.{flipped}"


def _now() -> int:
    value = good_payload()["iat"]
    assert isinstance(value, int)
    return value


ATTACKS: list[tuple[str, str, Callable[[], str]]] = [
    ("alg-none-empty-signature", "compact JWS", lambda: forge({"alg": "none"}, good_payload())),
    (
        "alg-none-with-signature",
        "alg value is not allowed",
        lambda: forge({"alg": "none"}, good_payload(), key=SECRET),
    ),
    (
        "alg-None-capitalised",
        "alg value is not allowed",
        lambda: forge({"alg": "None"}, good_payload(), signature=b"x"),
    ),
    (
        "alg-missing",
        "Algorithm not specified",
        lambda: forge({"typ": "JWT"}, good_payload(), key=SECRET),
    ),
    (
        "hs256-other-secret",
        "Signature verification failed",
        lambda: forge(HS256, good_payload(), key=OTHER_SECRET),
    ),
    (
        "hs384-right-secret",
        "alg value is not allowed",
        lambda: forge({"alg": "HS384"}, good_payload(), key=SECRET, digest="sha384"),
    ),
    (
        "hs512-right-secret",
        "alg value is not allowed",
        lambda: forge({"alg": "HS512"}, good_payload(), key=SECRET, digest="sha512"),
    ),
    ("rs256", "alg value is not allowed", _rs256_token),
    (
        "es256-crafted",
        "alg value is not allowed",
        lambda: forge({"alg": "ES256"}, good_payload(), signature=os.urandom(64)),
    ),
    (
        "hs256-keyed-with-rsa-public-key",
        "Signature verification failed",
        _rs_public_key_as_hmac_secret,
    ),
    ("tampered-payload", "Signature verification failed", _tampered_payload),
    ("tampered-signature", "Signature verification failed", _tampered_signature),
    (
        "nbf-in-future",
        "not yet valid (nbf)",
        lambda: forge(HS256, good_payload(nbf=_now() + 120), key=SECRET),
    ),
    (
        "iat-in-future",
        "not yet valid (iat)",
        lambda: forge(HS256, good_payload(iat=_now() + 120, nbf=None), key=SECRET),
    ),
    (
        "wrong-iss",
        "Invalid issuer",
        lambda: forge(HS256, good_payload(iss="someone-else"), key=SECRET),
    ),
    (
        "wrong-aud",
        "Audience doesn't match",
        lambda: forge(HS256, good_payload(aud="someone-else"), key=SECRET),
    ),
    (
        "aud-list",
        "InvalidAudienceError",
        lambda: forge(HS256, good_payload(aud=["coremetry", "x"]), key=SECRET),
    ),
    ("missing-exp", 'missing the "exp"', lambda: forge(HS256, good_payload(exp=None), key=SECRET)),
    ("missing-iat", 'missing the "iat"', lambda: forge(HS256, good_payload(iat=None), key=SECRET)),
    ("missing-iss", 'missing the "iss"', lambda: forge(HS256, good_payload(iss=None), key=SECRET)),
    ("missing-aud", 'missing the "aud"', lambda: forge(HS256, good_payload(aud=None), key=SECRET)),
    ("missing-sub", 'missing the "sub"', lambda: forge(HS256, good_payload(sub=None), key=SECRET)),
    ("missing-role", "`role`", lambda: forge(HS256, good_payload(role=None), key=SECRET)),
    ("unknown-role", "unknown role", lambda: forge(HS256, good_payload(role="root"), key=SECRET)),
    ("role-not-a-string", "$.role", lambda: forge(HS256, good_payload(role=2), key=SECRET)),
    ("empty-sub", "empty sub", lambda: forge(HS256, good_payload(sub=""), key=SECRET)),
    (
        "sub-not-a-string",
        "Subject must be a string",
        lambda: forge(HS256, good_payload(sub=42), key=SECRET),
    ),
    (
        "exp-not-a-number",
        "(exp) must be an integer",
        lambda: forge(HS256, good_payload(exp="tomorrow"), key=SECRET),
    ),
    ("iat-float", "$.iat", lambda: forge(HS256, good_payload(iat=_now() + 0.5), key=SECRET)),
    ("payload-not-an-object", "payload", lambda: forge(HS256, ["sub", "alice"], key=SECRET)),
    ("header-not-an-object", "header", lambda: forge("HS256", good_payload(), key=SECRET)),
    (
        "crit-header",
        "critical extension",
        lambda: forge({**HS256, "crit": ["exp"]}, good_payload(), key=SECRET),
    ),
    (
        "too-long",
        "acceptable size",
        lambda: forge(HS256, good_payload(pad="x" * MAX_TOKEN_CHARS), key=SECRET),
    ),
    ("empty", "compact JWS", lambda: ""),
    ("one-segment", "compact JWS", lambda: "abc"),
    ("two-segments", "compact JWS", lambda: "abc.def"),
    ("four-segments", "compact JWS", lambda: "a.b.c.d"),
    ("dots", "compact JWS", lambda: "..."),
    ("spaces", "compact JWS", lambda: "a b.c d.e f"),
    ("non-ascii", "compact JWS", lambda: "é.é.é"),
    ("lone-surrogate", "compact JWS", lambda: "\ud800.a.b"),
    ("not-base64-json", "DecodeError", lambda: "eyJ.eyJ.c2ln"),
    ("service-token-shape", "compact JWS", lambda: "cmk_" + "A" * 43),
    ("huge-garbage", "acceptable size", lambda: "x" * 100_000),
]


@pytest.mark.parametrize(
    ("why", "make_token"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS]
)
def test_attacks_are_refused(issuer: JwtIssuer, why: str, make_token: Callable[[], str]) -> None:
    token = make_token()
    with pytest.raises(InvalidToken) as refused:
        issuer.verify(token)
    assert why in refused.value.reason  # refused for the reason the case is about
    assert refused.value.token_sent
    assert str(refused.value) == "invalid token"
    if len(token) > 10:
        assert token not in refused.value.reason


def test_expired_beyond_leeway_is_refused(issuer: JwtIssuer) -> None:
    now = _now()
    token = forge(HS256, good_payload(iat=now - 700, nbf=now - 700, exp=now - 31), key=SECRET)
    with pytest.raises(ExpiredToken) as refused:
        issuer.verify(token)
    assert refused.value.token_sent


def test_a_token_from_another_issuer_instance_is_refused() -> None:
    ours = JwtIssuer(SECRET)
    theirs = JwtIssuer(OTHER_SECRET)
    with pytest.raises(InvalidToken):
        ours.verify(theirs.issue(theirs.session_claims("alice", "admin")))
    other_audience = JwtIssuer(SECRET, audience="another-service")
    with pytest.raises(InvalidToken):
        ours.verify(other_audience.issue(other_audience.session_claims("alice", "admin")))


# -- the secret ---------------------------------------------------------------------------------


def test_secret_is_created_once_with_private_mode(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    secret = load_or_create_secret(data_dir)
    assert len(secret) == 32
    path = data_dir / SECRET_FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert load_or_create_secret(data_dir) == secret
    assert sorted(p.name for p in data_dir.iterdir()) == [SECRET_FILENAME]  # no temporary left
    assert load_or_create_secret(tmp_path / "elsewhere") != secret


def test_short_secret_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / SECRET_FILENAME).write_bytes(b"short")
    with pytest.raises(ValueError, match="fewer than 32"):
        load_or_create_secret(tmp_path)


def test_created_secret_signs_tokens(tmp_path: Path) -> None:
    issuer = JwtIssuer(load_or_create_secret(tmp_path))
    assert issuer.verify(issuer.issue(issuer.session_claims("a", "viewer"))).sub == "a"
