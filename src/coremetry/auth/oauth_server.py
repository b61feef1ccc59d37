"""The built-in OAuth 2.1 authorization server, on Authlib's framework-agnostic core (issue 18).

What is Authlib's: request parsing rules, the authorization-code and refresh-token grants
(RFC 6749 §4.1, §6), PKCE (RFC 7636), client registration (RFC 7591), revocation (RFC 7009)
and their error responses. What is ours (this module): the wiring to our users, roles, audit log
and data dir, and the rules MCP (2025-06-18, 2025-11-25 Authorization) and OAuth 2.1 add:

- **Public clients only** (``token_endpoint_auth_method`` ``none``); every client proves
  possession with **PKCE ``S256``** — a request without ``code_challenge``, or with ``plain``
  or no method, is refused (:class:`_S256Only`).
- **Redirect URIs match exactly**, except that a loopback redirect (``http://127.0.0.1``,
  ``http://[::1]``, ``http://localhost``) may use any port (RFC 8252 §7.3). An error before the
  redirect URI is validated is never redirected (no open redirect): the HTTP layer shows it.
- **Audience**: the ``resource`` parameter (RFC 8707) must name this server (one of
  :meth:`~coremetry.auth.oauth_resource.PublicUrls.audiences`; default ``<base>/api/mcp``);
  the access token's ``aud`` is that resource, and a token request naming another resource
  than the code's is refused (``invalid_target``).
- **Access tokens** (:class:`AccessTokens`) are short-lived JWTs (RFC 9068 profile, header
  ``typ: at+jwt``), HS256 with the data dir's ``jwt.secret``, carrying ``sub`` (the user),
  ``role``, ``gen`` (the user's session generation: disabling, deleting or a password change
  ends them, as for login JWTs), ``scope``, ``client_id``, ``iss`` and ``aud``.
- **Scopes map to roles** (:data:`~coremetry.auth.oauth_resource.SCOPE_ROLES`), capped at the
  user's role at sign-in and again at every refresh.
- **Refresh tokens rotate**; each grant is a family (:mod:`coremetry.auth.oauth_store`).
  Presenting a spent refresh token revokes its family; a refresh for a user who is disabled,
  deleted or changed password since the grant revokes it too.
- **Audit**: every grant, refresh, reuse detection, revocation and denial is one audit row
  (``call_kind`` ``admin``, ``transport`` ``oauth``, ``name`` ``"oauth <action> <client_id>"``).
- **Client ID metadata documents** (2025-11-25): a ``client_id`` that is an ``https`` URL (or
  ``http`` on loopback, for local tools and tests) is fetched as the client's metadata
  (:data:`CIMD_MAX_BYTES`, :data:`CIMD_TIMEOUT_S`), must name itself as ``client_id`` and list
  ``redirect_uris``; it is cached for :data:`CIMD_CACHE_S`.

Everything here is synchronous (Authlib is): the HTTP layer (:mod:`coremetry.oauth_http`)
calls it in worker threads.
"""

import ipaddress
import logging
import math
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import ClassVar, Final
from urllib.parse import urlsplit

import msgspec
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeGrant,
    AuthorizationCodeMixin,
    AuthorizationServer,
    BaseGrant,
    ClientMixin,
    InvalidGrantError,
    InvalidRequestError,
    JsonPayload,
    JsonRequest,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
    RefreshTokenGrant,
    TokenMixin,
)
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge, create_s256_code_challenge

from coremetry.audit import AuditLog
from coremetry.http_edge import HeaderLookup
from coremetry.roles import Caller

from .identity_store import IdentityStore
from .jwt_verifier import AccessTokens
from .oauth_resource import (
    SCOPE_ROLES,
    PublicUrls,
    role_for_scopes,
    role_rank,
    scopes_for_role,
)
from .oauth_store import CodeRecord, Family, OAuthStore
from .principal import Claims

_log: Final = logging.getLogger(__name__)

AUTHORIZE_PATH: Final = "/oauth/authorize"
TOKEN_PATH: Final = "/oauth/token"
REGISTER_PATH: Final = "/oauth/register"
REVOKE_PATH: Final = "/oauth/revoke"

CIMD_MAX_BYTES: Final = 64 * 1024
"""Largest client ID metadata document read, in bytes."""

CIMD_TIMEOUT_S: Final = 5.0
"""Longest a client ID metadata document fetch may take, in seconds."""

CIMD_CACHE_S: Final = 300.0
"""How long a fetched client ID metadata document is reused, in seconds."""

_LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "::1", "localhost"})


# ---- access tokens ---------------------------------------------------------------------------


class AccessTokenChecker:
    """The authenticator's OAuth hook: :class:`AccessTokens` against the request's resource.

    Args:
        tokens: verifies the signature and claims.
        urls: this server's resource identifiers for a request.
    """

    def __init__(self, tokens: AccessTokens, urls: PublicUrls) -> None:
        self._tokens = tokens
        self._urls = urls

    def __call__(self, token: str, headers: HeaderLookup) -> Claims | None:
        """Claims for an OAuth access token, ``None`` for any other token.

        Raises:
            ExpiredToken, InvalidToken: see :meth:`AccessTokens.verify`.
        """
        if not AccessTokens.is_access_token(token):
            return None
        return self._tokens.verify(token, self._urls.audiences(headers))


# ---- requests (the thin adapter Authlib's core asks a framework for) -------------------------


class RequestContext(msgspec.Struct, frozen=True, kw_only=True):
    """What the grants need to know of the HTTP request beside its parameters.

    Attributes:
        issuer: this server's issuer identifier for the request.
        audiences: this server's resource identifiers for the request.
        default_resource: the resource a request without ``resource`` gets (``<base>/api/mcp``).
        source: the client's address (registration rate and audit).
    """

    issuer: str
    audiences: frozenset[str]
    default_resource: str
    source: str


class _Payload(OAuth2Payload):
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._data = {key: value for key, value in pairs}
        datalist: dict[str, list[str]] = {}
        for key, value in pairs:
            datalist.setdefault(key, []).append(value)
        self._datalist = datalist

    @property
    def data(self) -> Mapping[str, str]:
        return self._data

    @property
    def datalist(self) -> Mapping[str, list[str]]:
        return self._datalist


class OAuthRequest(OAuth2Request):
    """An authorization or token request as Authlib sees it.

    Args:
        method: the HTTP method.
        uri: the absolute request URI (Authlib refuses plain ``http`` except on loopback).
        headers: the request headers.
        query: the query parameters, in order, repeats kept.
        form: the form parameters of a POST body, in order, repeats kept.
        context: see :class:`RequestContext`.
    """

    def __init__(
        self,
        method: str,
        uri: str,
        headers: Mapping[str, str],
        query: list[tuple[str, str]],
        form: list[tuple[str, str]],
        context: RequestContext,
    ) -> None:
        super().__init__(method, uri, headers=headers)
        self._query = dict(query)
        self._form = dict(form)
        self.payload = _Payload(query + form)
        self.context: Final = context

    @property
    def args(self) -> Mapping[str, str]:
        """The query parameters (the last of repeated ones)."""
        return self._query

    @property
    def form(self) -> Mapping[str, str]:
        """The form parameters (the last of repeated ones)."""
        return self._form


class _Json(JsonPayload):
    def __init__(self, data: Mapping[str, object]) -> None:
        self._data = data

    @property
    def data(self) -> Mapping[str, object]:
        return self._data


class OAuthJsonRequest(JsonRequest):
    """A registration request (JSON body) as Authlib sees it."""

    def __init__(
        self,
        uri: str,
        headers: Mapping[str, str],
        data: Mapping[str, object],
        context: RequestContext,
    ) -> None:
        super().__init__("POST", uri, headers)
        self.payload = _Json(data)
        self.context: Final = context


# ---- models ------------------------------------------------------------------------------------


def is_loopback_redirect(uri: str) -> bool:
    """Whether ``uri`` is an ``http`` redirect to a loopback host (RFC 8252 §7.3)."""
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    if parts.scheme != "http":
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redirect_uri_matches(registered: str, candidate: str) -> bool:
    """Exact string match, or the same loopback redirect on another port (RFC 8252 §7.3)."""
    if registered == candidate:
        return True
    if not (is_loopback_redirect(registered) and is_loopback_redirect(candidate)):
        return False
    a, b = urlsplit(registered), urlsplit(candidate)
    return (a.scheme, a.hostname, a.path, a.query, a.fragment) == (
        b.scheme,
        b.hostname,
        b.path,
        b.query,
        b.fragment,
    ) and not (a.username or b.username or a.password or b.password)


def acceptable_redirect_uri(uri: str) -> bool:
    """Whether a client may register ``uri``.

    ``https``, ``http`` on loopback, or a private-use scheme of a native app
    (``com.example.app:/cb``, RFC 8252 §7.1); never ``javascript:``, ``data:``, ``file:`` or a
    fragment.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme or parts.fragment or "#" in uri:
        return False
    if scheme == "https":
        return bool(parts.hostname)
    if scheme == "http":
        return is_loopback_redirect(uri)
    return scheme not in ("javascript", "data", "file", "vbscript", "about", "blob") and (
        "." in scheme or scheme.isalnum()
    )


class OAuthClient(ClientMixin):
    """A public client: its ``client_id`` and registered (or fetched) metadata."""

    def __init__(self, client_id: str, metadata: Mapping[str, object]) -> None:
        self.client_id: Final = client_id
        uris = metadata.get("redirect_uris")
        self.redirect_uris: Final[list[str]] = (
            [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else []
        )
        name = metadata.get("client_name")
        self.name: Final = name if isinstance(name, str) and name else client_id

    def get_client_id(self) -> str:
        """The client identifier."""
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        """None: every authorization request must name its redirect URI."""
        return None  # the request must name its redirect URI

    def get_allowed_scope(self, scope: str | None) -> str:
        """The known scopes asked for.

        All of them when none is asked; ``mcp:read`` when only unknown ones are.
        """
        if not scope:
            return " ".join(SCOPE_ROLES)
        known = [s for s in scope.split() if s in SCOPE_ROLES]
        return " ".join(known) if known else "mcp:read"

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        """Exact match with a registered URI, loopback ports aside (RFC 8252 §7.3)."""
        return any(redirect_uri_matches(r, redirect_uri) for r in self.redirect_uris)

    def check_client_secret(self, client_secret: str) -> bool:
        """Always false: public clients have no secret."""
        return False

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        """Only ``none`` (public clients)."""
        return method == "none"

    def check_response_type(self, response_type: str) -> bool:
        """Only ``code``."""
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        """``authorization_code`` and ``refresh_token``."""
        return grant_type in ("authorization_code", "refresh_token")


class _Code(AuthorizationCodeMixin):
    def __init__(self, code: str, record: CodeRecord) -> None:
        self.code = code
        self.record = record
        self.code_challenge = record.challenge
        self.code_challenge_method = "S256"

    def get_redirect_uri(self) -> str:
        return self.record.redirect_uri

    def get_scope(self) -> str:
        return self.record.scope


class _Refresh(TokenMixin):
    def __init__(self, token: str, family: Family) -> None:
        self.token = token
        self.family = family

    def check_client(self, client: OAuthClient) -> bool:
        return self.family.client_id == client.client_id

    def get_scope(self) -> str:
        return self.family.scope

    def get_expires_in(self) -> int:
        return max(0, self.family.expires_at - int(time.time()))

    def is_expired(self) -> bool:
        return self.family.expires_at < int(time.time())

    def is_revoked(self) -> bool:
        return self.family.revoked_at is not None


class Grantee(msgspec.Struct, frozen=True, kw_only=True):
    """Who a grant is for, and what it gives: Authlib's "user" of a grant.

    Attributes:
        user: the user name.
        role: the role the grant gives (capped at the user's).
        generation: the user's session generation at the grant.
        resource: the access tokens' audience.
        issuer: this server's issuer identifier.
        family: the grant's refresh-token family (``""`` until the code is exchanged).
    """

    user: str
    role: str
    generation: int
    resource: str
    issuer: str
    family: str = ""


class OAuthError(OAuth2Error):
    """An OAuth error of our own rules (``invalid_target``, RFC 8707 §2)."""


def invalid_target(description: str) -> OAuthError:
    """RFC 8707 §2: the ``resource`` names something this server does not serve."""
    return OAuthError(description=description, status_code=400, error="invalid_target")


# ---- grants and endpoints ------------------------------------------------------------------


class _S256Only(CodeChallenge):
    """PKCE, ``S256`` only and always (OAuth 2.1 §4.1.1; MCP Authorization)."""

    DEFAULT_CODE_CHALLENGE_METHOD = "S256"
    SUPPORTED_CODE_CHALLENGE_METHOD: ClassVar[list[str]] = ["S256"]
    CODE_CHALLENGE_METHODS: ClassVar[dict[str, Callable[[str, str], bool]]] = {
        "S256": lambda verifier, challenge: secrets.compare_digest(
            create_s256_code_challenge(verifier), challenge
        )
    }

    def validate_code_challenge(self, grant: BaseGrant, redirect_uri: str) -> None:
        payload = grant.request.payload
        data = payload.data if payload is not None else {}
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge (method S256)")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256")
        super().validate_code_challenge(grant, redirect_uri)


def _context(request: OAuth2Request) -> RequestContext:
    assert isinstance(request, OAuthRequest)
    return request.context


def _resource_of(request: OAuth2Request, default: str) -> str:
    """The request's ``resource`` (one, of this server), or ``default`` without one."""
    payload = request.payload
    values = payload.datalist.get("resource", []) if payload is not None else []
    if len(values) > 1:
        raise invalid_target("one resource per request")
    if not values:
        return default
    if values[0] not in _context(request).audiences:
        raise invalid_target("the resource is not served by this authorization server")
    return values[0]


class OAuthServer(AuthorizationServer):
    """The authorization server: Authlib's, wired to our store, users and audit log.

    Args:
        store: clients, codes and grants.
        identities: the users (current role and session generation at every refresh).
        tokens: signs the access tokens.
        audit: where grants, refreshes and revocations are recorded (``None``: not recorded).
        code_ttl_s: lifetime of an authorization code, in seconds.
        refresh_ttl_s: lifetime of a grant (its refresh tokens), in seconds.
        fetch: reads a client ID metadata document (tests may inject one); default
            :func:`fetch_metadata_document`.
    """

    def __init__(
        self,
        store: OAuthStore,
        identities: IdentityStore,
        tokens: AccessTokens,
        *,
        audit: AuditLog | None = None,
        code_ttl_s: float = 60.0,
        refresh_ttl_s: float = 30 * 86400.0,
        fetch: Callable[[str], bytes] | None = None,
    ) -> None:
        super().__init__(scopes_supported=list(SCOPE_ROLES))
        self.store: Final = store
        self.identities: Final = identities
        self.tokens: Final = tokens
        self.audit: Final = audit
        self.code_ttl_s: Final = code_ttl_s
        self.refresh_ttl_s: Final = refresh_ttl_s
        self._fetch = fetch or fetch_metadata_document
        self._documents: dict[str, tuple[float, OAuthClient | None]] = {}
        self._documents_lock = threading.Lock()
        self.register_grant(_CodeGrant, [_S256Only(required=True)])
        self.register_grant(_RefreshGrant)
        self.register_endpoint(_Registration(self))
        self.register_endpoint(_Revocation(self))
        self.register_token_generator("default", self._generate)

    # Authlib's framework hooks: our requests are already its types; responses stay tuples.
    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        """Our requests are Authlib's already (:class:`OAuthRequest`)."""
        return request

    def create_json_request(self, request: JsonRequest) -> JsonRequest:
        """Our JSON requests are Authlib's already (:class:`OAuthJsonRequest`)."""
        return request

    def handle_response(
        self, status: int, body: object, headers: list[tuple[str, str]]
    ) -> tuple[int, object, list[tuple[str, str]]]:
        """Responses stay ``(status, body, headers)`` tuples for the HTTP layer."""
        return status, body, headers

    def send_signal(self, name: str, *args: object, **kwargs: object) -> None:
        """No signals (the audit log records what matters)."""
        return None

    def validate_requested_scope(self, scope: str | None) -> None:
        """Accept any scope string (see the comment)."""
        # Unknown scopes are dropped (OAuthClient.get_allowed_scope), not refused: clients add
        # their own (offline_access, ...), and the grant is capped at the user's role anyway.
        return None

    def query_client(self, client_id: str) -> OAuthClient | None:
        """A registered client, or a client ID metadata document fetched (and cached)."""
        if client_id.startswith(("https://", "http://")):
            return self._metadata_document_client(client_id)
        metadata = self.store.client(client_id)
        return OAuthClient(client_id, metadata) if metadata is not None else None

    def _metadata_document_client(self, url: str) -> OAuthClient | None:
        now = time.monotonic()
        with self._documents_lock:
            cached = self._documents.get(url)
            if cached is not None and now - cached[0] < CIMD_CACHE_S:
                return cached[1]
        client = self._load_document(url)
        with self._documents_lock:
            if len(self._documents) >= 1000:
                self._documents.clear()
            self._documents[url] = (now, client)
        return client

    def _load_document(self, url: str) -> OAuthClient | None:
        parts = urlsplit(url)
        if not (
            (parts.scheme == "https" or is_loopback_redirect(url))
            and parts.hostname
            and parts.path not in ("", "/")
            and not parts.fragment
            and not parts.username
        ):
            _log.info("client ID metadata document refused: not an https URL with a path")
            return None
        try:
            document = msgspec.json.decode(self._fetch(url))
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            _log.info("client ID metadata document %s unreadable: %s", url, exc)
            return None
        if not isinstance(document, dict) or document.get("client_id") != url:
            _log.info("client ID metadata document %s does not name itself", url)
            return None
        client = OAuthClient(url, document)
        if not client.redirect_uris or not all(
            acceptable_redirect_uri(u) for u in client.redirect_uris
        ):
            _log.info("client ID metadata document %s has unusable redirect_uris", url)
            return None
        return client

    def _generate(
        self,
        *,
        grant_type: str,
        client: OAuthClient,
        user: Grantee,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, object]:
        scopes = " ".join(scopes_for_role(user.role))
        token: dict[str, object] = {
            "token_type": "Bearer",
            "access_token": self.tokens.issue(
                issuer=user.issuer,
                audience=user.resource,
                sub=user.user,
                role=user.role,
                generation=user.generation,
                scope=scopes,
                client_id=client.client_id,
            ),
            "expires_in": math.ceil(self.tokens.ttl_s),
            "scope": scopes,
        }
        if include_refresh_token:
            token["refresh_token"] = secrets.token_urlsafe(32)
        return token

    def save_token(self, token: Mapping[str, object], request: OAuth2Request) -> None:
        """Store the new refresh token in its grant's family."""
        grantee = request.user
        assert isinstance(grantee, Grantee)
        refresh = token.get("refresh_token")
        if isinstance(refresh, str):
            self.store.add_refresh_token(refresh, grantee.family)

    def record(self, action: str, grantee_user: str, role: str, client_id: str, ok: bool) -> None:
        """Write one audit row for an OAuth event (never a token or a code)."""
        if self.audit is None:
            return
        actor = Caller(subject=grantee_user, role=role, kind="oauth", token_name=client_id[:200])
        try:
            self.audit.record_admin(
                actor,
                transport="oauth",
                action=f"oauth {action}",
                target=client_id[:200],
                outcome="ok" if ok else "denied",
            )
        except Exception:  # an audit failure must not break sign-in; it is logged
            _log.exception("could not audit OAuth %s of %r", action, grantee_user)

    def user_role(self, name: str) -> str | None:
        """The user's current role, or ``None`` when the user is gone or disabled."""
        for user in self.identities.list_users():
            if user.name == name:
                return None if user.disabled else user.role
        return None


class _CodeGrant(AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = ["none"]

    @property
    def _server(self) -> OAuthServer:
        server = self.server
        assert isinstance(server, OAuthServer)
        return server

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        grantee = request.user
        client = request.client
        payload = request.payload
        assert isinstance(grantee, Grantee)
        assert isinstance(client, OAuthClient)
        assert payload is not None
        self._server.store.save_code(
            code,
            CodeRecord(
                client_id=client.client_id,
                user=grantee.user,
                role=grantee.role,
                scope=" ".join(scopes_for_role(grantee.role)),
                redirect_uri=payload.redirect_uri or "",
                resource=grantee.resource,
                challenge=payload.data.get("code_challenge", ""),
                generation=grantee.generation,
                expires_at=int(time.time()) + math.ceil(self._server.code_ttl_s),
            ),
        )

    def query_authorization_code(self, code: str, client: OAuthClient) -> _Code | None:
        server = self._server

        def reused(user: str, role: str) -> None:  # the grant it started is revoked
            server.record("code-reuse", user, role, client.client_id, ok=False)

        record = server.store.peek_code(code, client.client_id, on_reuse=reused)
        return _Code(code, record) if record is not None else None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        return None  # spent in authenticate_user, before any token is made

    def authenticate_user(self, authorization_code: _Code) -> Grantee | None:
        server = self._server
        record = authorization_code.record
        resource = _resource_of(self.request, record.resource)
        if resource != record.resource:
            raise invalid_target("the resource differs from the authorization request's")
        family = secrets.token_urlsafe(16)
        if not server.store.spend_code(authorization_code.code, family):
            return None  # used meanwhile (a concurrent exchange won)
        if server.identities.session_generation(record.user) != record.generation:
            server.record("grant", record.user, record.role, record.client_id, ok=False)
            return None
        server.store.add_family(
            Family(
                family=family,
                client_id=record.client_id,
                user=record.user,
                role=record.role,
                scope=record.scope,
                resource=record.resource,
                generation=record.generation,
                expires_at=int(time.time()) + math.ceil(server.refresh_ttl_s),
                revoked_at=None,
            )
        )
        server.record("grant", record.user, record.role, record.client_id, ok=True)
        return Grantee(
            user=record.user,
            role=record.role,
            generation=record.generation,
            resource=record.resource,
            issuer=_context(self.request).issuer,
            family=family,
        )


class _RefreshGrant(RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = ["none"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    @property
    def _server(self) -> OAuthServer:
        server = self.server
        assert isinstance(server, OAuthServer)
        return server

    def authenticate_refresh_token(self, refresh_token: str) -> _Refresh | None:
        server = self._server
        outcome, family = server.store.find_refresh_token(refresh_token)
        if family is None:
            return None
        if outcome == "reused":
            _log.warning(
                "refresh token reuse for user %r, client %r: grant revoked",
                family.user,
                family.client_id,
            )
            server.record("refresh-reuse", family.user, family.role, family.client_id, ok=False)
            return None
        if outcome != "ok":
            return None
        return _Refresh(refresh_token, family)

    def authenticate_user(self, refresh_token: _Refresh) -> Grantee | None:
        server = self._server
        family = refresh_token.family
        resource = _resource_of(self.request, family.resource)
        if resource != family.resource:
            raise invalid_target("the resource differs from the grant's")
        if not server.store.spend_refresh_token(refresh_token.token):
            server.store.revoke_family(family.family)
            server.record("refresh-reuse", family.user, family.role, family.client_id, ok=False)
            raise InvalidGrantError("the refresh token was used already")
        current_role = server.user_role(family.user)
        generation = server.identities.session_generation(family.user)
        if current_role is None or generation != family.generation:
            # Disabled, deleted, or a password change since the grant: the grant ends.
            server.store.revoke_family(family.family)
            server.record("refresh", family.user, family.role, family.client_id, ok=False)
            raise InvalidGrantError("the grant ended with an account change")
        role = family.role if role_rank(family.role) <= role_rank(current_role) else current_role
        server.record("refresh", family.user, role, family.client_id, ok=True)
        return Grantee(
            user=family.user,
            role=role,
            generation=generation,
            resource=family.resource,
            issuer=_context(self.request).issuer,
            family=family.family,
        )

    def revoke_old_credential(self, refresh_token: _Refresh) -> None:
        return None  # spent in authenticate_user


class _Registration(ClientRegistrationEndpoint):
    def authenticate_token(self, request: OAuthJsonRequest) -> bool:
        return True  # open registration (RFC 7591 §3); the HTTP layer rate-limits it

    def get_server_metadata(self) -> dict[str, object]:
        return {
            "scopes_supported": list(SCOPE_ROLES),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["none"],
        }

    def generate_client_secret(self, request: OAuthJsonRequest) -> None:
        return None  # public clients only

    def save_client(
        self,
        client_info: Mapping[str, object],
        client_metadata: Mapping[str, object],
        request: OAuthJsonRequest,
    ) -> OAuthClient:
        uris = client_metadata.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            raise OAuthError(description="redirect_uris is required", error="invalid_redirect_uri")
        for uri in uris:
            if not isinstance(uri, str) or not acceptable_redirect_uri(uri):
                raise OAuthError(
                    description="each redirect URI must be https, http on loopback, or a "
                    "private-use scheme, without a fragment",
                    error="invalid_redirect_uri",
                )
        client_id = client_info.get("client_id")
        assert isinstance(client_id, str)
        metadata = {**client_metadata, "token_endpoint_auth_method": "none"}
        server = self.server
        assert isinstance(server, OAuthServer)
        server.store.add_client(client_id, metadata, request.context.source)
        return OAuthClient(client_id, metadata)


class _Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS: ClassVar[list[str]] = ["none"]

    def query_token(self, token_string: str, token_type_hint: str | None) -> _Refresh | None:
        server = self.server
        assert isinstance(server, OAuthServer)
        _outcome, family = server.store.find_refresh_token(token_string)
        return _Refresh(token_string, family) if family is not None else None

    def revoke_token(self, token: _Refresh, request: OAuth2Request) -> None:
        server = self.server
        assert isinstance(server, OAuthServer)
        family = token.family
        if server.store.revoke_family(family.family):
            server.record("revoke", family.user, family.role, family.client_id, ok=True)


def fetch_metadata_document(url: str) -> bytes:
    """GET a client ID metadata document.

    At most :data:`CIMD_MAX_BYTES`, within :data:`CIMD_TIMEOUT_S` per read; no redirects
    followed.

    Raises:
        OSError: the fetch failed, timed out, was redirected or the document is too large.
    """
    opener = urllib.request.build_opener(_NoRedirect())
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    with opener.open(request, timeout=CIMD_TIMEOUT_S) as response:
        if response.status != 200:
            raise OSError(f"HTTP {response.status}")
        body: bytes = response.read(CIMD_MAX_BYTES + 1)
    if len(body) > CIMD_MAX_BYTES:
        raise OSError(f"larger than {CIMD_MAX_BYTES} bytes")
    return body


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        raise OSError("client ID metadata documents are not followed through redirects")


def authorization_server_metadata(base: str) -> dict[str, object]:
    """The RFC 8414 §2 metadata of the built-in server whose issuer is ``base``."""
    return {
        "issuer": base,
        "authorization_endpoint": base + AUTHORIZE_PATH,
        "token_endpoint": base + TOKEN_PATH,
        "registration_endpoint": base + REGISTER_PATH,
        "revocation_endpoint": base + REVOKE_PATH,
        "scopes_supported": list(SCOPE_ROLES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": True,
    }


__all__ = [
    "AccessTokenChecker",
    "AccessTokens",
    "Grantee",
    "OAuthClient",
    "OAuthJsonRequest",
    "OAuthRequest",
    "OAuthServer",
    "RequestContext",
    "authorization_server_metadata",
    "role_for_scopes",
]
