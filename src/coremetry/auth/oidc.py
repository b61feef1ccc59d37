"""Access tokens from an external OpenID Connect identity provider (issue 18).

Teams that already run an identity provider (Keycloak, Auth0, Okta, Entra ID, Dex, ...)
configure its issuer under ``[auth.oidc]`` (:class:`coremetry.config.OidcConfig`); a client
then sends the provider's JWT access token as ``Authorization: Bearer <token>`` and is the
caller the token names, with the role its configured claim gives. The
:class:`~coremetry.auth.Authenticator` hands a Bearer JWT to :class:`OidcVerifier` when its
(unverified) ``iss`` is the configured issuer; everything below is then checked, and any
failure is a 401 like every other refused credential.

Keys (OpenID Connect Discovery 1.0 §4, RFC 7517):

- The discovery document ``<issuer>/.well-known/openid-configuration`` is fetched on the first
  such token (not at start: a provider that is down then does not stop the server), its
  ``issuer`` must equal the configured one exactly (Discovery §4.3), and its ``jwks_uri`` is
  used unless ``jwks_uri`` is configured. A failed fetch is retried on a later token, at most
  every :data:`DISCOVERY_RETRY_S` seconds.
- The key set is fetched and cached by pyjwt's :class:`jwt.PyJWKClient` (in a worker thread,
  :data:`FETCH_TIMEOUT_S` per request, no redirects) for ``jwks_cache_s`` seconds. A token
  whose ``kid`` is not in the cached set refetches it (a rotated key), but at most every
  :data:`UNKNOWN_KID_COOLDOWN_S` seconds: a stream of made-up ``kid`` values cannot turn into
  a stream of requests to the provider. When a fetch fails, the set fetched last stays in
  use (past ``jwks_cache_s`` if need be) and the next attempt waits :data:`DISCOVERY_RETRY_S`
  seconds, so a provider that is down costs each token no timeout.

Checks (RFC 7519, RFC 8725, RFC 9068; pyjwt does the cryptography):

- The signature, with the key of the header's ``kid`` (required), in one of
  :data:`ALGORITHMS` (RSA and ECDSA; ``none`` and every HMAC algorithm are refused, so a
  public key can never serve as an HMAC secret). The algorithm must be the key's own: the
  JWK's ``alg``, or RS256 for an RSA key and ES256 for a P-256 key that has none.
- ``iss`` equal to the configured issuer; ``aud`` equal to (or, for a list, containing) the
  configured audience — this server's MCP URL, so a token issued for another service is
  refused (RFC 8707, RFC 8725 §3.9); ``exp`` required, and ``exp``/``nbf``/``iat`` with
  :data:`LEEWAY_S` seconds of clock skew; ``sub`` required.
- The role: the ``role_claim`` value (a dotted path reaches into objects, e.g.
  ``realm_access.roles``), a string (split at spaces, so a ``scope``-style claim works) or a
  list of strings. Without ``role_map`` the values must be role names; with it, only mapped
  values count. The most privileged role found wins; none found gives ``default_role``, or
  refuses the token when that is empty.

Identity: ``sub`` becomes ``oidc:<issuer>#<sub>``. A local user name never holds ``:``, and a
service token's identity is ``token:<name>``, so a provider's subject can never be taken for
a local user or token (and two providers' subjects never collide). ``kind`` is ``"oidc"`` and
``token_name`` the client the token was issued to (``client_id`` or ``azp``), so the audit log
shows both. The provider decides who is disabled: a token stays valid until its ``exp``.
"""

import logging
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Final

import jwt
import msgspec
import trio

from coremetry.config import Config
from coremetry.roles import ROLES, role_rank

from .principal import Claims, ExpiredToken, InvalidToken

_log: Final = logging.getLogger(__name__)

ALGORITHMS: Final[tuple[str, ...]] = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
)
"""The JWS algorithms accepted (asymmetric only: no ``none``, no ``HS*``)."""

LEEWAY_S: Final = 30.0
"""Tolerated clock skew on ``exp``, ``nbf`` and ``iat``, in seconds."""

FETCH_TIMEOUT_S: Final = 5.0
"""Timeout of each request to the provider (discovery, key set), in seconds."""

UNKNOWN_KID_COOLDOWN_S: Final = 30.0
"""Least time between two key-set refetches caused by an unknown ``kid``, in seconds."""

DISCOVERY_RETRY_S: Final = 5.0
"""Least time between two attempts to fetch the discovery document, or the key set after a
failed fetch, in seconds."""

MAX_DOCUMENT_BYTES: Final = 1024 * 1024
"""Largest discovery document read, in bytes."""

MAX_TOKEN_CHARS: Final = 16384
"""Longest access token looked at, in characters."""

MAX_SUBJECT_CHARS: Final = 255
"""Longest ``sub`` accepted (OpenID Connect Core §2 caps it at 255 ASCII characters)."""

SUBJECT_PREFIX: Final = "oidc:"
"""Start of every identity from a provider's token: ``oidc:<issuer>#<sub>``."""

REQUIRED_CLAIMS: Final[tuple[str, ...]] = ("exp", "iss", "aud", "sub")

_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class _Discovery(msgspec.Struct):
    """The fields of an OpenID Provider's metadata we use (Discovery §3)."""

    issuer: str
    jwks_uri: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None


class _KeySetClient(jwt.PyJWKClient):
    """pyjwt's key-set client, kinder to a provider that is down.

    After a failed fetch, no request is made for ``retry_after_failure_s`` seconds (so tokens
    arriving meanwhile do not each wait for a timeout, one after another under the client's
    lock), and the key set fetched last is used even past its lifespan until a fetch succeeds
    again (tokens still need their own valid ``exp``).
    """

    def __init__(
        self,
        uri: str,
        *,
        lifespan_s: float,
        timeout_s: float,
        cooldown_s: float,
        retry_after_failure_s: float,
    ) -> None:
        super().__init__(
            uri,
            cache_keys=False,
            cache_jwk_set=True,
            lifespan=lifespan_s,
            timeout=timeout_s,
            cooldown_duration=cooldown_s,
            headers={"accept": "application/json"},
        )
        self._retry_after_failure_s = retry_after_failure_s
        self._retry_at = -math.inf

    def fetch_data(self) -> object:
        """Fetch the key set, unless the last fetch failed less than the back-off ago."""
        now = time.monotonic()
        if now < self._retry_at:
            raise jwt.PyJWKClientConnectionError("the last fetch failed; not retried yet")
        try:
            return super().fetch_data()
        except jwt.PyJWKClientConnectionError:
            self._retry_at = now + self._retry_after_failure_s
            raise

    def get_jwk_set(self, refresh: bool = False) -> jwt.PyJWKSet:
        """The key set; the last one fetched when a new fetch fails."""
        try:
            return super().get_jwk_set(refresh)
        except jwt.PyJWKClientConnectionError as exc:
            held = self.jwk_set_cache.jwk_set_with_timestamp if self.jwk_set_cache else None
            if held is None:
                raise
            _log.warning(
                "cannot refresh the signing keys at %s, using the last ones: %s", self.uri, exc
            )
            return held.get_jwk_set()


def _allowed_url(url: str) -> bool:
    """https://, or http:// on a loopback host (for a provider on the same machine)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    return bool(host) and (parts.scheme == "https" or (parts.scheme == "http" and loopback))


def fetch_discovery(issuer: str, *, timeout_s: float = FETCH_TIMEOUT_S) -> str:
    """Fetch ``<issuer>/.well-known/openid-configuration`` and return its ``jwks_uri``.

    Blocking (network I/O): call it from a worker thread.

    Raises:
        ValueError: the document cannot be fetched or read, names another issuer, or its
            ``jwks_uri`` is not https (http only on a loopback host). The message says which.
    """
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    opener = urllib.request.build_opener(_NoRedirect())
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read(MAX_DOCUMENT_BYTES + 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ValueError(f"cannot fetch {url}: {exc}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = msgspec.json.decode(body, type=_Discovery)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"{url} is not OpenID Provider metadata: {exc}") from None
    if document.issuer != issuer:
        raise ValueError(
            f"{url} names the issuer {document.issuer!r}, not {issuer!r} (Discovery §4.3)"
        )
    if not _allowed_url(document.jwks_uri):
        raise ValueError(f"{url} names a jwks_uri that is not https: {document.jwks_uri!r}")
    return document.jwks_uri


class OidcVerifier:
    """Verifies access tokens of one OpenID Connect provider (see the module docstring).

    Args:
        issuer: the provider's issuer URL, exactly as in its tokens.
        audience: the ``aud`` required (this server's MCP URL); ``""`` until
            :meth:`set_default_audience` is called (every token is refused until then).
        role_claim: the claim holding the role; dots separate the names of nested objects.
        role_map: claim values to role names; empty: the values are role names.
        default_role: the role when the claim names none; ``""`` refuses such tokens.
        jwks_uri: the key set's URL; ``""`` takes it from the discovery document.
        jwks_cache_s: how long a fetched key set is used, in seconds.
        leeway_s: tolerated clock skew, in seconds.
        fetch_timeout_s: timeout of each request to the provider, in seconds.
        unknown_kid_cooldown_s: least time between refetches for an unknown ``kid``.

    Raises:
        ValueError: an empty issuer or role claim, or a role (mapped or default) that is not
            one of :data:`coremetry.roles.ROLES`.
    """

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        role_claim: str,
        role_map: Mapping[str, str] | None = None,
        default_role: str = "",
        jwks_uri: str = "",
        jwks_cache_s: float = 300.0,
        leeway_s: float = LEEWAY_S,
        fetch_timeout_s: float = FETCH_TIMEOUT_S,
        unknown_kid_cooldown_s: float = UNKNOWN_KID_COOLDOWN_S,
    ) -> None:
        if not issuer:
            raise ValueError("an OIDC verifier needs an issuer")
        if not role_claim:
            raise ValueError("an OIDC verifier needs a role claim")
        mapping = dict(role_map or {})
        for value, role in mapping.items():
            if role not in ROLES:
                raise ValueError(f"role_map[{value!r}] is not a role: {role!r}")
        if default_role and default_role not in ROLES:
            raise ValueError(f"default_role is not a role: {default_role!r}")
        self.issuer: Final = issuer
        """The ``iss`` required."""
        self.audience = audience
        """The ``aud`` required (``""``: not known yet; every token is refused)."""
        self.role_claim: Final = role_claim
        self._path: Final = tuple(role_claim.split("."))
        self._role_map: Final = mapping
        self.default_role: Final = default_role
        self._jwks_uri = jwks_uri
        self._jwks_cache_s = jwks_cache_s
        self._leeway_s = leeway_s
        self._timeout_s = fetch_timeout_s
        self._cooldown_s = unknown_kid_cooldown_s
        self._client: jwt.PyJWKClient | None = None
        self._lock = trio.Lock()
        self._discovery_retry_at = -math.inf

    @classmethod
    def from_config(cls, config: Config) -> "OidcVerifier | None":
        """The verifier ``[auth.oidc]`` describes, or ``None`` when no issuer is set."""
        oidc = config.auth.oidc
        if not oidc.issuer:
            return None
        return cls(
            issuer=oidc.issuer,
            audience=oidc.audience,
            role_claim=oidc.role_claim,
            role_map=oidc.role_map,
            default_role=oidc.default_role,
            jwks_uri=oidc.jwks_uri,
            jwks_cache_s=oidc.jwks_cache_s,
        )

    def __repr__(self) -> str:
        return f"OidcVerifier(issuer={self.issuer!r}, audience={self.audience!r})"

    def set_default_audience(self, mcp_url: str) -> None:
        """Require ``aud`` = ``mcp_url`` unless an audience was configured.

        :func:`coremetry.server.serve` calls it once bound, with the bound address's MCP URL.
        """
        if not self.audience:
            self.audience = mcp_url

    def issued(self, token: str) -> bool:
        """Whether ``token`` claims to come from this provider (its unverified ``iss``).

        Only routes the token: :meth:`verify` checks everything. Never raises.
        """
        if len(token) > MAX_TOKEN_CHARS or not _COMPACT_JWS.fullmatch(token):
            return False
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return False
        return claims.get("iss") == self.issuer

    async def verify(self, token: str) -> Claims:
        """Verify an access token of this provider.

        The signing key comes from the cached key set; a fetch (discovery, key set) runs in a
        worker thread, bounded by the fetch timeout.

        Returns:
            ``Claims(kind="oidc", sub="oidc:<issuer>#<sub>", role=…, token_name=<client>,
            issued_at=iat (0 without), expires_at=exp)``.

        Raises:
            ExpiredToken: ``exp`` is more than the leeway in the past.
            InvalidToken: anything else (module docstring); ``reason`` says what, never the
                token.
        """
        if not self.audience:
            raise InvalidToken("OIDC token refused: no audience is configured yet")
        if len(token) > MAX_TOKEN_CHARS or not _COMPACT_JWS.fullmatch(token):
            raise InvalidToken("OIDC token is not a compact JWS of acceptable size")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"OIDC token header unreadable: {exc}") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise InvalidToken(f"OIDC token algorithm {str(alg)[:20]!r} is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("OIDC token without a kid")
        client = await self._key_client()
        try:
            key = await trio.to_thread.run_sync(client.get_signing_key, kid)
        except jwt.PyJWKClientConnectionError as exc:
            _log.warning("cannot fetch the signing keys of %s: %s", self.issuer, exc)
            raise InvalidToken("OIDC signing keys unavailable") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"OIDC token key {kid[:80]!r} unknown: {exc}") from None
        try:
            decoded = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self._leeway_s,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.ExpiredSignatureError:
            raise ExpiredToken("OIDC token expired") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"OIDC token refused: {type(exc).__name__}: {exc}") from None
        return self._claims(decoded)

    def role_of(self, claims: Mapping[str, object]) -> str:
        """The role a verified token's claims give (module docstring), or ``""`` for none."""
        value: object = claims
        for name in self._path:
            value = value.get(name) if isinstance(value, Mapping) else None
        values: Sequence[object]
        if isinstance(value, str):
            values = value.split()
        elif isinstance(value, list):
            values = value
        else:
            values = ()
        found = [
            self._role_map.get(item) if self._role_map else item
            for item in values
            if isinstance(item, str)
        ]
        roles = [role for role in found if role in ROLES]
        if not roles:
            return self.default_role
        return max(roles, key=role_rank)

    def _claims(self, decoded: Mapping[str, object]) -> Claims:
        sub = decoded.get("sub")
        if not isinstance(sub, str) or not sub or len(sub) > MAX_SUBJECT_CHARS:
            raise InvalidToken("OIDC token sub missing, not a string or too long")
        role = self.role_of(decoded)
        if not role:
            raise InvalidToken(
                f"OIDC token of {sub[:80]!r} has no known role in claim {self.role_claim!r}"
            )
        exp = decoded.get("exp")
        iat = decoded.get("iat")
        client = decoded.get("client_id", decoded.get("azp", ""))
        return Claims(
            sub=f"{SUBJECT_PREFIX}{self.issuer}#{sub}",
            role=role,
            token_name=client[:200] if isinstance(client, str) else "",
            issued_at=int(iat) if isinstance(iat, int | float) else 0,
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            kind="oidc",
        )

    async def _key_client(self) -> jwt.PyJWKClient:
        """The key-set client, after discovery on first use (one fetch at a time)."""
        if self._client is not None:
            return self._client
        async with self._lock:
            return await self._discover()

    async def _discover(self) -> jwt.PyJWKClient:
        if self._client is None:
            jwks_uri = self._jwks_uri
            if not jwks_uri:
                if time.monotonic() < self._discovery_retry_at:
                    raise InvalidToken("OIDC discovery failed recently; not retried yet")
                try:
                    jwks_uri = await trio.to_thread.run_sync(
                        lambda: fetch_discovery(self.issuer, timeout_s=self._timeout_s)
                    )
                except ValueError as exc:
                    self._discovery_retry_at = time.monotonic() + DISCOVERY_RETRY_S
                    _log.warning("OIDC discovery failed: %s", exc)
                    raise InvalidToken(f"OIDC discovery failed: {exc}") from None
            self._client = _KeySetClient(
                jwks_uri,
                lifespan_s=self._jwks_cache_s,
                timeout_s=self._timeout_s,
                cooldown_s=self._cooldown_s,
                retry_after_failure_s=DISCOVERY_RETRY_S,
            )
        return self._client
