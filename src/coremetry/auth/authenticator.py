"""Resolve the caller of an HTTP request or WebSocket handshake from its headers.

:class:`Authenticator` is what the HTTP transports call (their ``Authenticate`` hook): headers in,
:class:`~coremetry.roles.Caller` out, or an :class:`~coremetry.auth.AuthError` that the transport
turns into ``401`` with ``WWW-Authenticate: Bearer realm="coremetry"`` (plus
``error="invalid_token"`` when :attr:`~coremetry.auth.AuthError.token_sent` is true).

Accepted credentials (``shared/DESIGN.md`` §5), first match wins:

1. ``Authorization: Bearer <token>`` (RFC 6750 §2.1). The scheme is case-insensitive (RFC 9110
   §11.1) and surrounding or repeated whitespace is tolerated. ``<token>`` is a session JWT, or a
   service token when it starts with ``cmk_``, or — when ``[auth.oidc]`` names an issuer — an
   access token of that identity provider, recognised by its ``iss``
   (:class:`~coremetry.auth.oidc.OidcVerifier`; cached like a service token). It must be an
   RFC 6750 ``b64token``.
2. The session cookie :data:`SESSION_COOKIE`, holding a JWT (never a service token).

Refused:

- ``Authorization`` with another scheme (``Basic ...``) or a bare token with no scheme:
  :class:`~coremetry.auth.MissingCredentials` with ``token_sent`` false (RFC 6750 §3.1: an
  unsupported method gets a challenge without an error code).
- ``Bearer`` with nothing after it, with two tokens (two ``Authorization`` headers arrive
  joined by a comma), or with characters outside ``b64token``:
  :class:`~coremetry.auth.InvalidToken`.
- Tokens in the query string (RFC 6750 §2.3 allows them but warns they leak into logs and
  histories): this class only ever sees headers, so such a token is simply absent. Transports
  must not copy query parameters into headers.
- Every token the verifiers refuse (``alg: none``, other algorithms, tampered, expired, not yet
  valid, wrong issuer or audience, unknown role, unknown, revoked or expired service token).

Service-token cache: a verified service token is remembered for :attr:`Authenticator.cache_ttl_s`
(5 s by default) so a busy client does not cost a thread hop and a database read per request.
The cache is keyed on the ``Authorization`` header's value exactly as presented (only values
that parsed as ``Bearer cmk_…`` and verified are ever stored), so a hit is one dict lookup: no
parsing, no hashing (~1 µs in all, against ~4.7 µs when every hit also parsed the header,
hashed the token with SHA-256 and ``stat``-ed the revocation marker). Revocation still takes
effect immediately, in every process: each hit compares the store's
:meth:`~coremetry.auth.IdentityStore.revocation_stamp` (the data dir's revocation marker,
re-read at most every 5 ms; a revocation anywhere returns only once every process has re-read
it) with the one taken before the entry was verified, and any revocation anywhere since then
turns the hit into a miss, which reads the database. Expiry (``expires_at``) and the cache
lifetime are checked on every hit too. ``cache_ttl_s=0`` turns the cache off. The cache holds
at most ``cache_max_entries`` header values (the oldest goes first); like the request headers
themselves, they stay in memory only.

Session JWTs end early too: a JWT is accepted only while its user exists, is not disabled and
still has the session generation the JWT carries (claim ``gen``; a disable, a deletion or a
password change replaces it). The user's current generation is read from the store
(:meth:`~coremetry.auth.IdentityStore.session_generation`) and cached per user name the same way
as service tokens: for ``cache_ttl_s`` at most, and only while the store's revocation stamp is
unchanged — every account change signals it like a token revocation, in any process (the CLI
included), so the JWT is refused on the very next request.

Logging: refusals are logged with their ``reason`` (DEBUG when nothing was presented, INFO
otherwise); a token, a cookie or a header value is never logged.
"""

import logging
import re
import time
from collections.abc import Callable
from typing import Final, Literal, Protocol

import msgspec
import trio

from coremetry.roles import Caller

from .identity_store import TOKEN_PREFIX, IdentityStore, RevocationStamp
from .jwt_verifier import JwtIssuer
from .oidc import OidcVerifier
from .principal import AuthError, Claims, InvalidToken, MissingCredentials, RevokedToken

_log: Final = logging.getLogger(__name__)

SESSION_COOKIE: Final = "coremetry_session"
"""Name of the cookie that carries a browser's session JWT."""

DEFAULT_CACHE_TTL_S: Final = 5.0
"""How long a verified service token is served from memory, in seconds."""

DEFAULT_CACHE_MAX_ENTRIES: Final = 1024
"""Most service tokens remembered at once (the oldest entry goes first)."""

# RFC 6750 §2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/-]+=*")
# RFC 6265 §4.2.1: cookie pairs are separated by ";"; Headers joins repeated Cookie headers (as
# HTTP/2 sends them) with ",", which never occurs in a cookie value either (cookie-octet).
_COOKIE_SEPARATOR: Final = re.compile(r"[;,]")

CredentialSource = Literal["authorization", "cookie"]
"""Where a credential was found."""


class HeaderSource(Protocol):
    """Anything with a header lookup by lower-case name (the transports' ``Headers``)."""

    def get(self, name: str, /) -> str | None:
        """The header's value (repeated headers joined by ``", "``), or ``None`` if absent."""
        ...


def extract_credential(headers: HeaderSource) -> tuple[str, CredentialSource]:
    """Find the bearer credential in request headers (see the module docstring for the rules).

    Returns:
        ``(token, source)``; the token is not verified yet.

    Raises:
        MissingCredentials: no credential, or an ``Authorization`` scheme other than Bearer
            (``token_sent`` false).
        InvalidToken: a malformed Bearer value, several different session cookies, or a
            service token in the cookie (``token_sent`` true).
    """
    authorization = headers.get("authorization")
    if authorization is not None and authorization.strip():
        parts = authorization.split()
        if parts[0].lower() != "bearer":
            # Never put parts[0] in the reason: for a bare token it *is* the token.
            raise MissingCredentials("Authorization header without the Bearer scheme")
        if len(parts) != 2:
            raise InvalidToken("Bearer credentials missing or not a single token")
        token = parts[1]
        if not _B64TOKEN.fullmatch(token):
            raise InvalidToken("Bearer token has characters outside RFC 6750 b64token")
        return token, "authorization"
    cookie_header = headers.get("cookie")
    if cookie_header is not None:
        found: set[str] = set()
        for pair in _COOKIE_SEPARATOR.split(cookie_header):
            name, sep, value = pair.partition("=")
            value = value.strip().removeprefix('"').removesuffix('"')
            if sep and name.strip() == SESSION_COOKIE and value:
                found.add(value)
        if len(found) > 1:
            raise InvalidToken(f"{len(found)} different {SESSION_COOKIE} cookies")
        if found:
            token = found.pop()
            if token.startswith(TOKEN_PREFIX):
                raise InvalidToken("a service token in the session cookie")
            return token, "cookie"
    raise MissingCredentials("no Authorization header and no session cookie")


class AccessTokenCheck(Protocol):
    """Verifies OAuth access tokens of the built-in authorization server (issue 18)."""

    def __call__(self, token: str, headers: HeaderSource) -> Claims | None:
        """The verified claims of an OAuth access token for this request's resource.

        ``None`` when ``token`` is not an OAuth access token at all.

        Raises:
            AuthError: an OAuth access token, refused (expired, for another resource, ...).
        """
        ...


class _CacheEntry(msgspec.Struct, frozen=True):
    claims: Claims
    caller: Caller  # claims.to_caller(), built once
    stale_at: float  # trio clock, seconds: when the entry was cached + cache_ttl_s
    stamp: RevocationStamp  # taken before the token was verified


class _SessionEntry(msgspec.Struct, frozen=True):
    generation: int | None  # the user's current one; None: unknown or disabled user
    stale_at: float  # trio clock, seconds
    stamp: RevocationStamp  # taken before the store was read


class Authenticator:
    """The HTTP transports' ``Authenticate`` hook: headers to :class:`~coremetry.roles.Caller`.

    Args:
        store: verifies service tokens (called through ``trio.to_thread``).
        issuer: verifies session JWTs (inline; pure CPU).
        cache_ttl_s: how long a verified service token is served from memory, in seconds; ``0``
            disables the cache. Revocations bypass it at once (module docstring).
        cache_max_entries: most service tokens (and, separately, user names) remembered at once.
        clock: wall clock in unix seconds, for expiry checks on cache hits (tests inject one).
        oidc: verifies access tokens of an external identity provider (``None``: not accepted).
        access_tokens: verifies OAuth access tokens (sent as ``Authorization: Bearer``, never
            in the cookie); they end like session JWTs when their user's generation changes.
    """

    def __init__(
        self,
        store: IdentityStore,
        issuer: JwtIssuer,
        *,
        cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
        cache_max_entries: int = DEFAULT_CACHE_MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
        oidc: OidcVerifier | None = None,
        access_tokens: AccessTokenCheck | None = None,
    ) -> None:
        self._store = store
        self._access_tokens = access_tokens
        self._issuer = issuer
        self.cache_ttl_s: Final = cache_ttl_s
        """Service-token cache lifetime, in seconds (``0``: no cache)."""
        self._cache_max_entries = cache_max_entries
        self._clock = clock
        self.oidc: Final = oidc
        """The external identity provider's verifier, if one is configured."""
        # Keyed on the Authorization header's value as presented (module docstring).
        self._cache: dict[str, _CacheEntry] = {}
        # Keyed on the user name (a JWT's sub): its current session generation.
        self._sessions: dict[str, _SessionEntry] = {}

    async def __call__(self, headers: HeaderSource) -> Caller:
        """Authenticate a request; see :meth:`authenticate`.

        Returns:
            The caller (``subject``, ``role``, ``kind``, ``token_name`` from the claims).

        Raises:
            AuthError: as :meth:`authenticate`.
        """
        authorization = headers.get("authorization")
        if authorization is not None:
            entry = self._cached(authorization)
            if entry is not None:
                return entry.caller
        return (await self._authenticate(headers, authorization)).to_caller()

    async def authenticate(self, headers: HeaderSource) -> Claims:
        """Authenticate a request from its headers.

        A JWT is verified inline (microseconds). A service token is served from the cache or
        verified in a worker thread (a database read); cancellation waits for that read, which
        is short, and leaves nothing behind.

        Returns:
            The verified claims.

        Raises:
            MissingCredentials: nothing usable was presented (``token_sent`` false).
            InvalidToken: a malformed, tampered, foreign or unknown token.
            ExpiredToken: an expired JWT or service token.
            RevokedToken: a revoked service token, or a JWT of a disabled or deleted user or
                from before its password changed.
        """
        authorization = headers.get("authorization")
        if authorization is not None:
            entry = self._cached(authorization)
            if entry is not None:
                return entry.claims
        return await self._authenticate(headers, authorization)

    def _cached(self, authorization: str) -> _CacheEntry | None:
        # The hit path: one dict lookup, the revocation stamp, two clocks. A stale entry is
        # dropped here and the caller verifies the token again.
        entry = self._cache.get(authorization)
        if entry is None:
            return None
        expires_at = entry.claims.expires_at
        if (
            entry.stamp == self._store.revocation_stamp()
            and trio.current_time() < entry.stale_at
            and (expires_at is None or self._clock() < expires_at)
        ):
            return entry
        self._cache.pop(authorization, None)
        return None

    async def _authenticate(self, headers: HeaderSource, authorization: str | None) -> Claims:
        try:
            token, source = extract_credential(headers)
            if token.startswith(TOKEN_PREFIX):
                # extract_credential refuses a service token anywhere but in Authorization.
                key = authorization if source == "authorization" else None
                return await self._verify_service_token(token, key)
            if self.oidc is not None and source == "authorization" and self.oidc.issued(token):
                return await self._verify_oidc(self.oidc, token, authorization)
            oauth = (
                self._access_tokens(token, headers)
                if self._access_tokens is not None and source == "authorization"
                else None
            )
            claims = oauth if oauth is not None else self._issuer.verify(token)
            await self._check_session(claims)
            return claims
        except AuthError as refusal:
            level = logging.INFO if refusal.token_sent else logging.DEBUG
            _log.log(
                level, "authentication refused (%s): %s", type(refusal).__name__, refusal.reason
            )
            raise

    async def _check_session(self, claims: Claims) -> None:
        """Refuse a JWT whose user is gone or disabled, or whose generation is not current."""
        entry = self._sessions.get(claims.sub)
        if entry is None or not (
            entry.stamp == self._store.revocation_stamp() and trio.current_time() < entry.stale_at
        ):
            # Taken before reading: an account change that lands while we read makes it stale.
            stamp = self._store.revocation_stamp()
            now = trio.current_time()
            generation = await trio.to_thread.run_sync(self._store.session_generation, claims.sub)
            entry = _SessionEntry(generation, now + self.cache_ttl_s, stamp)
            if self.cache_ttl_s > 0:
                if claims.sub not in self._sessions and len(self._sessions) >= (
                    self._cache_max_entries
                ):
                    del self._sessions[next(iter(self._sessions))]
                self._sessions[claims.sub] = entry
        if entry.generation is None:
            raise RevokedToken(f"JWT of user {claims.sub!r}, who is disabled or deleted")
        if entry.generation != claims.generation:
            raise RevokedToken(f"JWT of user {claims.sub!r} from before an account change")

    async def _verify_oidc(self, oidc: OidcVerifier, token: str, cache_key: str | None) -> Claims:
        # Cached like a service token: a hit skips the signature and the key lookup; the
        # entry ends at the token's exp at the latest (checked on every hit).
        stamp = self._store.revocation_stamp()
        now = trio.current_time()
        claims = await oidc.verify(token)
        self._remember(cache_key, claims, now, stamp)
        return claims

    def _remember(
        self, cache_key: str | None, claims: Claims, now: float, stamp: RevocationStamp
    ) -> None:
        if self.cache_ttl_s > 0 and cache_key is not None:
            if len(self._cache) >= self._cache_max_entries:
                del self._cache[next(iter(self._cache))]
            self._cache[cache_key] = _CacheEntry(
                claims, claims.to_caller(), now + self.cache_ttl_s, stamp
            )

    async def _verify_service_token(self, token: str, cache_key: str | None) -> Claims:
        # Taken before verifying: a revocation that lands while we read makes this entry stale.
        stamp = self._store.revocation_stamp()
        now = trio.current_time()
        claims = await trio.to_thread.run_sync(self._store.verify_token, token)
        self._remember(cache_key, claims, now, stamp)
        return claims
