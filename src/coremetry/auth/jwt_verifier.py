"""Session JWTs: issuing them at login and verifying them on every request.

This is the only module that calls :func:`jwt.decode` for session JWTs (the other caller,
:mod:`coremetry.auth.oidc`, verifies an external identity provider's access tokens with that
provider's published keys). Its rules follow RFC 7519 (JWT) and the best current practice of
RFC 8725:

- **One algorithm**, HS256 (HMAC-SHA-256, RFC 7518 §3.2), passed to pyjwt as the only allowed
  one. The ``alg`` header is never trusted to choose: ``none`` (RFC 8725 §2.1, §3.2), and RS*/ES*
  or any other algorithm are refused, so a public key can never be used as an HMAC secret
  ("key confusion", RFC 8725 §2.1).
- **Required claims**: ``exp``, ``iat``, ``iss``, ``aud`` and ``sub`` (pyjwt's ``require``), plus
  our own ``role``. ``iss`` and ``aud`` must equal the configured values (RFC 8725 §3.8, §3.9);
  ``aud`` must be a single string. ``nbf`` and ``iat`` in the future are refused.
- **Leeway**: :attr:`JwtIssuer.leeway_s` seconds of clock skew are tolerated on ``exp``, ``nbf``
  and ``iat`` (RFC 7519 §4.1.4 "some small leeway").
- **The secret**: 32 random bytes (RFC 7518 §3.2 asks for a key at least as long as the hash
  output), kept in ``<data_dir>/jwt.secret`` with mode 0600; see :func:`load_or_create_secret`.
  Deleting the file and restarting rotates it, which ends every session.
- **Size**: a token over :data:`MAX_TOKEN_CHARS` characters, or not made of three base64url
  segments, is refused before parsing.

Tokens carry ``sub``, ``role``, ``gen`` (the user's session generation: the authenticator refuses
the token once the user is disabled, deleted or changes password), ``iat``, ``nbf``, ``exp``,
``iss``, ``aud`` and a random ``jti``.
The role is read from the token, so a role change reaches an existing session when it expires
(at most ``ttl_s`` later).

Verification is pure CPU (an HMAC over under 8 KiB), a few microseconds: callers run it inline.

OAuth access tokens of the built-in authorization server (:class:`AccessTokens`, issue 18) are
JWTs signed with the same secret and algorithm, told apart by their ``typ: at+jwt`` header
(RFC 9068) and an ``aud`` that is this server's URL (never ``coremetry``), so neither kind passes
as the other.
"""

import contextlib
import logging
import math
import os
import re
import secrets
import time
from pathlib import Path
from typing import Final

import jwt
import msgspec

from coremetry.roles import ROLES

from .principal import Claims, ExpiredToken, InvalidToken

_log: Final = logging.getLogger(__name__)

ALGORITHM: Final = "HS256"
"""The one JWS algorithm issued and accepted."""

SECRET_FILENAME: Final = "jwt.secret"
"""The signing secret's file inside the data dir."""

SECRET_BYTES: Final = 32
"""Length of a generated secret, and the minimum accepted, in bytes."""

MAX_TOKEN_CHARS: Final = 8192
"""Longest token looked at, in characters; longer ones are refused unparsed."""

REQUIRED_CLAIMS: Final[tuple[str, ...]] = ("exp", "iat", "iss", "aud", "sub")
"""Registered claims a token must carry (``role`` is checked separately)."""

_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class _Payload(msgspec.Struct, kw_only=True):
    """The claims we read back, after pyjwt checked signature, time, issuer and audience."""

    sub: str
    role: str
    iat: int
    exp: int
    gen: int = 0  # absent in JWTs issued before account lifecycle existed


class JwtIssuer:
    """Issues and verifies session JWTs with one HMAC secret.

    Args:
        secret: the HMAC key, at least :data:`SECRET_BYTES` bytes.
        issuer: the ``iss`` written and required.
        audience: the ``aud`` written and required.
        ttl_s: session lifetime, in seconds (rounded up to whole seconds).
        leeway_s: tolerated clock skew when checking ``exp``, ``nbf`` and ``iat``, in seconds.

    Raises:
        ValueError: a short secret, a non-positive ``ttl_s`` or a negative ``leeway_s``.
    """

    def __init__(
        self,
        secret: bytes,
        *,
        issuer: str = "coremetry",
        audience: str = "coremetry",
        ttl_s: float = 3600,
        leeway_s: float = 30,
    ) -> None:
        if len(secret) < SECRET_BYTES:
            raise ValueError(f"the JWT secret must be at least {SECRET_BYTES} bytes")
        if not (math.isfinite(ttl_s) and ttl_s > 0):
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s}")
        if not (math.isfinite(leeway_s) and leeway_s >= 0):
            raise ValueError(f"leeway_s must be a non-negative number of seconds, got {leeway_s}")
        self._secret = secret
        self.issuer: Final = issuer
        """The ``iss`` claim written and required."""
        self.audience: Final = audience
        """The ``aud`` claim written and required."""
        self.ttl_s: Final = ttl_s
        """Session lifetime, in seconds."""
        self.leeway_s: Final = leeway_s
        """Tolerated clock skew, in seconds."""

    def __repr__(self) -> str:
        # Never the secret.
        return f"JwtIssuer(issuer={self.issuer!r}, audience={self.audience!r}, ttl_s={self.ttl_s})"

    def session_claims(self, sub: str, role: str, generation: int = 0) -> Claims:
        """The claims of a new session for ``sub``: issued now, expiring after ``ttl_s``.

        Args:
            sub: the user name.
            role: the user's role.
            generation: the user's session generation (written as the ``gen`` claim).

        Returns:
            ``Claims(kind="jwt", token_name="", issued_at=now, expires_at=now + ttl_s,
            generation=generation)``.
        """
        now = int(time.time())
        return Claims(
            sub=sub,
            role=role,
            issued_at=now,
            expires_at=now + math.ceil(self.ttl_s),
            kind="jwt",
            generation=generation,
        )

    def issue(self, claims: Claims) -> str:
        """Sign a JWT for ``claims`` (pure CPU, microseconds).

        ``iat`` and ``nbf`` are ``claims.issued_at``; ``exp`` is ``claims.expires_at``, or
        ``issued_at + ttl_s`` when that is ``None``; ``jti`` is 16 random bytes.

        Returns:
            The compact JWS (``header.payload.signature``).

        Raises:
            ValueError: ``claims.kind`` is not ``"jwt"``, the role is unknown, or ``sub`` is
                empty.
        """
        if claims.kind != "jwt":
            raise ValueError(f"cannot issue a JWT for a {claims.kind} identity")
        if claims.role not in ROLES:
            raise ValueError(f"unknown role {claims.role!r}")
        if not claims.sub:
            raise ValueError("a JWT needs a subject")
        expires_at = claims.expires_at
        if expires_at is None:
            expires_at = claims.issued_at + math.ceil(self.ttl_s)
        payload: dict[str, object] = {
            "sub": claims.sub,
            "role": claims.role,
            "gen": claims.generation,
            "iat": claims.issued_at,
            "nbf": claims.issued_at,
            "exp": expires_at,
            "iss": self.issuer,
            "aud": self.audience,
            "jti": secrets.token_urlsafe(16),
        }
        return jwt.encode(payload, self._secret, algorithm=ALGORITHM)

    def verify(self, token: str) -> Claims:
        """Verify a session JWT (pure CPU, microseconds).

        Args:
            token: the compact JWS from a Bearer header or the session cookie.

        Returns:
            ``Claims(kind="jwt", sub=…, role=…, issued_at=iat, expires_at=exp,
            generation=gen)``. Only the signature and times are checked here; whether the user
            still exists, is enabled and has that generation is the authenticator's check.

        Raises:
            ExpiredToken: ``exp`` is more than ``leeway_s`` in the past.
            InvalidToken: anything else wrong: not a compact JWS or too long, another algorithm
                than HS256 (``none``, RS256, ...), a bad signature, ``nbf``/``iat`` in the
                future, wrong ``iss`` or ``aud``, a missing or mistyped claim, an unknown role.
                ``reason`` says which; it never contains the token.
        """
        if len(token) > MAX_TOKEN_CHARS or not _COMPACT_JWS.fullmatch(token):
            raise InvalidToken("not a compact JWS of acceptable size")
        try:
            decoded = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": list(REQUIRED_CLAIMS), "strict_aud": True},
            )
        except jwt.ExpiredSignatureError:
            raise ExpiredToken("JWT expired") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"JWT refused: {type(exc).__name__}: {exc}") from None
        try:
            payload = msgspec.convert(decoded, _Payload)
        except msgspec.ValidationError as exc:
            raise InvalidToken(f"JWT claims malformed: {exc}") from None
        if not payload.sub:
            raise InvalidToken("JWT has an empty sub")
        if payload.role not in ROLES:
            raise InvalidToken(f"JWT names an unknown role {payload.role[:40]!r}")
        return Claims(
            sub=payload.sub,
            role=payload.role,
            issued_at=payload.iat,
            expires_at=payload.exp,
            kind="jwt",
            generation=payload.gen,
        )


def load_or_create_secret(data_dir: str | os.PathLike[str]) -> bytes:
    """Read the JWT signing secret of a data dir, creating it on first use. Blocks (file I/O).

    On first use, writes :data:`SECRET_BYTES` random bytes to ``<data_dir>/jwt.secret`` with mode
    0600 (the data dir is created with mode 0700 if missing). Creation is atomic and first
    writer wins: concurrent first starts all end up with the same secret, and a reader never
    sees a partly written file. A secret readable by group or others is used but logged as a
    warning.

    Returns:
        The secret.

    Raises:
        ValueError: the existing file holds fewer than :data:`SECRET_BYTES` bytes (delete it to
            make a new one; that ends every session).
        OSError: the file cannot be read or created.
    """
    directory = Path(data_dir).expanduser()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / SECRET_FILENAME
    if not path.exists():
        _create_secret(directory, path)
    secret = path.read_bytes()
    if len(secret) < SECRET_BYTES:
        raise ValueError(
            f"{path} holds {len(secret)} bytes, fewer than {SECRET_BYTES}; delete it to "
            "create a new secret (this ends every session)"
        )
    if path.stat().st_mode & 0o077:
        _log.warning("%s is readable by group or others; restrict it to mode 0600", path)
    return secret


def _create_secret(directory: Path, path: Path) -> None:
    # Write a complete temporary file, then link it into place: link() fails if the name exists,
    # so the first writer wins and nobody reads a half-written secret.
    temporary = directory / f".{SECRET_FILENAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_bytes(SECRET_BYTES))
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):  # another process was first: use theirs
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


ACCESS_TOKEN_TYPE: Final = "at+jwt"
"""The JWT ``typ`` header of an OAuth access token (RFC 9068 §2.1)."""


class AccessTokens:
    """Signs and verifies OAuth access tokens (see the module docstring for the claims).

    Args:
        secret: the data dir's JWT secret (:func:`~coremetry.auth.load_or_create_secret`).
        ttl_s: access-token lifetime, in seconds.
        leeway_s: tolerated clock skew, in seconds.
    """

    def __init__(self, secret: bytes, *, ttl_s: float = 600.0, leeway_s: float = 30.0) -> None:
        self._secret = secret
        self.ttl_s: Final = ttl_s
        """Lifetime of a new access token, in seconds."""
        self._leeway_s = leeway_s

    def __repr__(self) -> str:
        return f"AccessTokens(ttl_s={self.ttl_s})"

    @staticmethod
    def is_access_token(token: str) -> bool:
        """Whether ``token`` looks like one of our access tokens (``typ: at+jwt``), unverified."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return False
        return header.get("typ") == ACCESS_TOKEN_TYPE

    def issue(
        self,
        *,
        issuer: str,
        audience: str,
        sub: str,
        role: str,
        generation: int,
        scope: str,
        client_id: str,
    ) -> str:
        """Sign an access token issued now, expiring after :attr:`ttl_s`."""
        now = int(time.time())
        payload: dict[str, object] = {
            "iss": issuer,
            "aud": audience,
            "sub": sub,
            "role": role,
            "gen": generation,
            "scope": scope,
            "client_id": client_id,
            "iat": now,
            "nbf": now,
            "exp": now + math.ceil(self.ttl_s),
            "jti": secrets.token_urlsafe(16),
        }
        return jwt.encode(
            payload, self._secret, algorithm=ALGORITHM, headers={"typ": ACCESS_TOKEN_TYPE}
        )

    def verify(self, token: str, audiences: frozenset[str]) -> Claims:
        """Verify an access token presented to this server.

        Args:
            token: the compact JWS.
            audiences: this server's resource identifiers for the request
                (:meth:`~coremetry.auth.oauth_resource.PublicUrls.audiences`).

        Returns:
            ``Claims(kind="oauth", sub=user, role=…, token_name=client_id, generation=gen)``;
            whether the user still has that generation is the authenticator's check.

        Raises:
            ExpiredToken: past ``exp``.
            InvalidToken: anything else: another algorithm, a bad signature, not an access
                token, an ``aud`` that is not this resource (a token for another service is
                never accepted), an ``iss`` that is not this server, bad claims.
        """
        try:
            header = jwt.get_unverified_header(token)
            if header.get("typ") != ACCESS_TOKEN_TYPE:
                raise InvalidToken("not an OAuth access token")
            decoded = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                leeway=self._leeway_s,
                options={
                    "require": ["exp", "iat", "iss", "aud", "sub"],
                    "verify_aud": False,
                },
            )
        except jwt.ExpiredSignatureError:
            raise ExpiredToken("OAuth access token expired") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"OAuth access token refused: {type(exc).__name__}") from None
        try:
            claims = msgspec.convert(decoded, _AccessPayload)
        except msgspec.ValidationError as exc:
            raise InvalidToken(f"OAuth access token claims malformed: {exc}") from None
        if claims.aud not in audiences:
            raise InvalidToken(f"OAuth access token for another resource {claims.aud[:100]!r}")
        if claims.iss not in audiences:
            raise InvalidToken(f"OAuth access token from another issuer {claims.iss[:100]!r}")
        if not claims.sub or claims.role not in ROLES:
            raise InvalidToken("OAuth access token with an empty sub or an unknown role")
        return Claims(
            sub=claims.sub,
            role=claims.role,
            token_name=claims.client_id[:200],
            issued_at=claims.iat,
            expires_at=claims.exp,
            kind="oauth",
            generation=claims.gen,
        )


class _AccessPayload(msgspec.Struct, kw_only=True):
    iss: str
    aud: str
    sub: str
    role: str
    gen: int
    client_id: str
    iat: int
    exp: int
