"""HTTP endpoints of the built-in OAuth authorization server, and its sign-in page (issue 18).

Routes (below the server's base, :class:`~coremetry.auth.oauth_resource.PublicUrls`):

- ``GET /oauth/authorize``: validates the authorization request (client, exact redirect URI,
  ``response_type=code``, PKCE ``S256``, ``resource``) and shows the **sign-in and consent
  page**: which client asks, where it will send the user back, what access it gets, a user name
  and password form and *Allow* / *Deny*. Server-rendered HTML, no script, ``frame-ancestors
  'none'``. An invalid request whose redirect URI is not validated yet gets a 400 page here and
  is never redirected (no open redirect); one with a validated redirect URI is sent back there
  with ``error=…`` (RFC 6749 §4.1.2.1).
- ``POST /oauth/authorize``: the form. CSRF: the form carries a random token that must equal
  the ``coremetry_oauth_csrf`` cookie set with the page (``HttpOnly``, ``SameSite=Strict``,
  path ``/oauth``); a mismatch is 403 and nothing is issued. The password is checked by the
  existing :class:`~coremetry.auth.LoginService` (same throttling: 429 when throttled; a wrong
  password, an unknown or a disabled user re-shows the page with one message and 401). Then
  302 to the client's redirect URI with ``code`` and ``state``.
- ``POST /oauth/token``: ``authorization_code`` (with ``code_verifier``) and ``refresh_token``
  grants (form-encoded), JSON answers with ``Cache-Control: no-store``.
- ``POST /oauth/register``: dynamic client registration (JSON), at most
  ``auth.oauth.registration_rate_per_hour`` per source address per hour (429 with
  ``Retry-After`` above) and ``auth.oauth.max_clients`` in all.
- ``POST /oauth/revoke``: RFC 7009; always 200 for a well-formed request.

Authlib runs in worker threads (it and the stores are synchronous).
"""

import html
import logging
import math
import secrets
from collections import deque
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qsl, quote, urlsplit

import msgspec
import trio
from authlib.oauth2.rfc6749 import OAuth2Error
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

from coremetry.auth.login import LoginService
from coremetry.auth.oauth_resource import SCOPE_ROLES, PublicUrls, role_for_scopes
from coremetry.auth.oauth_server import (
    AUTHORIZE_PATH,
    REGISTER_PATH,
    REVOKE_PATH,
    TOKEN_PATH,
    Grantee,
    OAuthClient,
    OAuthJsonRequest,
    OAuthRequest,
    OAuthServer,
    RequestContext,
    invalid_target,
)
from coremetry.auth.principal import LoginFailed, LoginThrottled
from coremetry.config import OAuthConfig
from coremetry.http_edge import (
    BodyTooLarge,
    ClientGone,
    Headers,
    HttpPolicy,
    admit,
    is_json_content_type,
    read_body,
    send_response,
)

_log: Final = logging.getLogger(__name__)

CSRF_COOKIE: Final = "coremetry_oauth_csrf"
"""The cookie the sign-in form's CSRF token must match."""

OAUTH_PATHS: Final = (AUTHORIZE_PATH, TOKEN_PATH, REGISTER_PATH, REVOKE_PATH)
"""Every path this module serves."""

MAX_FORM_BYTES: Final = 64 * 1024
"""Largest form or registration body, in bytes."""

_ENCODER: Final = msgspec.json.Encoder()
_NO_STORE: Final = [(b"cache-control", b"no-store"), (b"pragma", b"no-cache")]
_PAGE_HEADERS: Final = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: with no-referrer a browser posts the form with
    # "Origin: null", which the Origin policy refuses.
    (b"referrer-policy", b"same-origin"),
    *_NO_STORE,
]
_HTML: Final = b"text/html; charset=utf-8"
_ROLE_WORDS: Final = {
    "viewer": "read your telemetry (viewer)",
    "editor": "read and change your telemetry (editor)",
    "admin": "administer this Coremetry server (admin)",
}


def _json_error(error: str, description: str) -> bytes:
    return _ENCODER.encode({"error": error, "error_description": description})


class RegistrationRate:
    """At most ``per_hour`` registrations per source address in any hour (a sliding window).

    Keeps at most ``max_sources`` addresses (the oldest forgotten first).
    """

    def __init__(self, per_hour: int, *, max_sources: int = 10_000) -> None:
        self._per_hour = per_hour
        self._max_sources = max_sources
        self._seen: dict[str, deque[float]] = {}

    def admit(self, source: str, now: float) -> float | None:
        """Count one registration from ``source``.

        Returns:
            ``None`` when admitted, else the seconds until one would be.
        """
        window = self._seen.get(source)
        if window is None:
            if len(self._seen) >= self._max_sources:
                del self._seen[next(iter(self._seen))]
            window = self._seen[source] = deque()
        while window and now - window[0] >= 3600.0:
            window.popleft()
        if len(window) >= self._per_hour:
            return 3600.0 - (now - window[0])
        window.append(now)
        return None


class OAuthEndpoints:
    """The ASGI handler of :data:`OAUTH_PATHS` (see the module docstring).

    Args:
        server: the authorization server.
        login: checks passwords, with the login throttling.
        policy: Origin/Host rules (admission of the JSON endpoints).
        urls: the public URLs.
        config: ``[auth.oauth]``.
    """

    def __init__(
        self,
        server: OAuthServer,
        login: LoginService,
        policy: HttpPolicy,
        urls: PublicUrls,
        config: OAuthConfig,
    ) -> None:
        self.server = server
        self.login = login
        self.policy = policy
        self.urls = urls
        self.config = config
        self.registrations = RegistrationRate(config.registration_rate_per_hour)

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one request on one of :data:`OAUTH_PATHS`."""
        path = scope["path"]
        headers = Headers(scope["headers"])
        if path == AUTHORIZE_PATH:
            await self._authorize(scope, receive, send, headers)
            return
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="POST",
            allow=b"POST, OPTIONS",
            error_body=lambda message: _json_error("invalid_request", message),
        )
        if cors is None:
            return
        try:
            body = await read_body(receive, MAX_FORM_BYTES)
        except BodyTooLarge:
            await send_response(send, 413, _json_error("invalid_request", "body too large"))
            return
        except ClientGone:
            return
        context = self._context(scope, headers)
        if path == REGISTER_PATH:
            await self._register(send, headers, body, context, cors)
            return
        form = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        try:
            request = OAuthRequest(
                "POST", self._uri(scope, headers), _plain(headers), [], form, context
            )
        except OAuth2Error as error:  # plain http on a non-loopback host (OAuth 2.1 §1.5)
            await _send_oauth(send, *error(), cors)
            return
        if path == TOKEN_PATH:
            status, payload, extra = await trio.to_thread.run_sync(
                self.server.create_token_response, request
            )
        else:
            status, payload, extra = await trio.to_thread.run_sync(
                self.server.create_endpoint_response, "revocation", request
            )
        await _send_oauth(send, status, payload, extra, cors)

    # -- helpers -------------------------------------------------------------------------------

    def _context(self, scope: HTTPScope, headers: Headers) -> RequestContext:
        client = scope.get("client")
        return RequestContext(
            issuer=self.urls.issuer(headers),
            audiences=self.urls.audiences(headers),
            default_resource=self.urls.resource(headers),
            source=client[0] if client else "unknown",
        )

    def _uri(self, scope: HTTPScope, headers: Headers) -> str:
        query = scope["query_string"].decode("latin-1")
        uri = self.urls.base(headers) + scope["path"]
        return f"{uri}?{query}" if query else uri

    async def _register(
        self,
        send: ASGISendCallable,
        headers: Headers,
        body: bytes,
        context: RequestContext,
        cors: list[tuple[bytes, bytes]],
    ) -> None:
        retry = self.registrations.admit(context.source, trio.current_time())
        if retry is not None:
            _log.info("client registration from %s refused: rate", context.source)
            await send_response(
                send,
                429,
                _json_error("too_many_requests", "too many client registrations; retry later"),
                headers=[(b"retry-after", str(max(1, math.ceil(retry))).encode()), *cors],
            )
            return
        if not is_json_content_type(headers.get("content-type")):
            await send_response(
                send,
                400,
                _json_error("invalid_client_metadata", "send the client metadata as JSON"),
                headers=cors,
            )
            return
        try:
            data = msgspec.json.decode(body)
        except msgspec.DecodeError:
            data = None
        if not isinstance(data, dict):
            await send_response(
                send,
                400,
                _json_error("invalid_client_metadata", "the body must be a JSON object"),
                headers=cors,
            )
            return
        count = await trio.to_thread.run_sync(self.server.store.client_count)
        if count >= self.config.max_clients:
            await send_response(
                send,
                429,
                _json_error("too_many_requests", "this server holds as many clients as allowed"),
                headers=[(b"retry-after", b"3600"), *cors],
            )
            return
        request = OAuthJsonRequest(
            self.urls.base(headers) + REGISTER_PATH, _plain(headers), data, context
        )
        status, payload, extra = await trio.to_thread.run_sync(
            self.server.create_endpoint_response, "client_registration", request
        )
        if isinstance(payload, dict):
            payload = {k: v for k, v in payload.items() if v is not None}
            payload.pop("client_secret_expires_at", None)
            if status == 201:
                payload["token_endpoint_auth_method"] = "none"  # public clients only
        await _send_oauth(send, status, payload, extra, cors)

    # -- the authorization endpoint -----------------------------------------------------------

    async def _authorize(
        self,
        scope: HTTPScope,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        headers: Headers,
    ) -> None:
        # The sign-in form posts from our own page: its Origin is this server's own (allowed
        # even when not in http.allowed_origins); any other goes through the usual policy.
        base = urlsplit(self.urls.base(headers))
        own = f"{base.scheme}://{base.netloc}"
        origin = (headers.get("origin") or "").strip().rstrip("/").lower()
        refused = self.policy.refusal(headers)
        if refused is not None and not (refused[0] == 403 and origin == own):
            await _page(send, refused[0], _message_page("Refused", refused[1]))
            return
        context = self._context(scope, headers)
        if scope["method"] in ("GET", "HEAD"):
            query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            await self._show(send, scope, headers, query, context, error="", status=200)
            return
        if scope["method"] != "POST":
            await _page(
                send,
                405,
                _message_page("Method not allowed", "Use GET or POST."),
                [(b"allow", b"GET, POST")],
            )
            return
        try:
            body = await read_body(receive, MAX_FORM_BYTES)
        except BodyTooLarge:
            await _page(send, 413, _message_page("Too large", "The form is too large."))
            return
        except ClientGone:
            return
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        cookie = _cookie(headers, CSRF_COOKIE)
        sent = form.get("csrf", "")
        if not cookie or not sent or not secrets.compare_digest(cookie, sent):
            _log.info("OAuth sign-in form from %s refused: CSRF token mismatch", context.source)
            await _page(
                send,
                403,
                _message_page(
                    "Sign-in refused",
                    "The form could not be verified (it is stale or came from another site). "
                    "Start the sign-in again from your application.",
                ),
            )
            return
        query = parse_qsl(form.get("authorization_request", ""), keep_blank_values=True)
        try:
            request = OAuthRequest(
                "GET", self._uri_of(headers, query), _plain(headers), query, [], context
            )
            grant = await trio.to_thread.run_sync(self.server.get_consent_grant, request)
            resource = _validated_resource(request, context)
        except OAuth2Error as error:
            await self._error(send, error)
            return
        client = request.client
        assert isinstance(client, OAuthClient)
        if form.get("decision") != "allow":
            await trio.to_thread.run_sync(
                self.server.record,
                "deny",
                form.get("username", "")[:100],
                "viewer",
                client.client_id,
                False,
            )
            answer = await trio.to_thread.run_sync(
                lambda: self.server.create_authorization_response(request, None, grant)
            )
            await _send_oauth(send, *answer, [])
            return
        username = form.get("username", "")
        client_key = context.source
        try:
            _token, claims = await self.login.login(
                username, form.get("password", ""), client_key=client_key
            )
        except LoginThrottled as exc:
            retry = str(max(1, math.ceil(exc.retry_after_s))).encode()
            await _page(
                send,
                429,
                _message_page("Too many attempts", "Too many failed sign-ins; wait and retry."),
                [(b"retry-after", retry)],
            )
            return
        except LoginFailed:
            await self._show(
                send,
                scope,
                headers,
                query,
                context,
                error="Wrong user name or password.",
                status=401,
            )
            return
        role = role_for_scopes((request.scope or "").split(), claims.role)
        grantee = Grantee(
            user=claims.sub,
            role=role,
            generation=claims.generation,
            resource=resource,
            issuer=context.issuer,
        )
        answer = await trio.to_thread.run_sync(
            lambda: self.server.create_authorization_response(request, grantee, grant)
        )
        await trio.to_thread.run_sync(
            self.server.record, "authorize", claims.sub, role, client.client_id, answer[0] == 302
        )
        await _send_oauth(send, *answer, [])

    def _uri_of(self, headers: Headers, query: list[tuple[str, str]]) -> str:
        return self.urls.base(headers) + AUTHORIZE_PATH

    async def _show(
        self,
        send: ASGISendCallable,
        scope: HTTPScope,
        headers: Headers,
        query: list[tuple[str, str]],
        context: RequestContext,
        *,
        error: str,
        status: int,
    ) -> None:
        try:
            request = OAuthRequest(
                "GET", self._uri_of(headers, query), _plain(headers), query, [], context
            )
            await trio.to_thread.run_sync(self.server.get_consent_grant, request)
            _validated_resource(request, context)
        except OAuth2Error as failure:
            await self._error(send, failure)
            return
        client = request.client
        assert isinstance(client, OAuthClient)
        csrf = secrets.token_urlsafe(32)
        prefix = urlsplit(self.urls.base(headers)).path
        secure = "; Secure" if self.urls.base(headers).startswith("https://") else ""
        cookie = (
            f"{CSRF_COOKIE}={csrf}; HttpOnly; SameSite=Strict; Path={prefix}/oauth; "
            f"Max-Age=900{secure}"
        )
        requested = (request.scope or "").split()
        body = _sign_in_page(
            client=client,
            redirect_uri=dict(query).get("redirect_uri", ""),
            requested=requested,
            raw_request="&".join(f"{_quote(k)}={_quote(v)}" for k, v in query),
            csrf=csrf,
            action=self.urls.base(headers) + AUTHORIZE_PATH,
            error=error,
        )
        await _page(send, status, body, [(b"set-cookie", cookie.encode("latin-1"))])

    async def _error(self, send: ASGISendCallable, error: OAuth2Error) -> None:
        if error.redirect_uri:
            # Validated against the client's registration: the error goes back to it.
            status, body, extra = error()
            await _send_oauth(send, status, body, extra, [])
            return
        await _page(
            send,
            400,
            _message_page(
                "This sign-in request is not valid",
                f"{error.error}: {error.description or ''}. Nothing was sent to the application.",
            ),
        )


def _validated_resource(request: OAuthRequest, context: RequestContext) -> str:
    """The request's RFC 8707 resource, checked (errors redirect: the redirect URI is valid)."""
    payload = request.payload
    values = payload.datalist.get("resource", []) if payload is not None else []
    redirect = payload.redirect_uri if payload is not None else None
    state = payload.state if payload is not None else None
    if len(values) > 1 or (values and values[0] not in context.audiences):
        error = invalid_target("the resource is not served by this server")
        error.redirect_uri = redirect
        error.state = state
        raise error
    return values[0] if values else context.default_resource


def _plain(headers: Headers) -> Mapping[str, str]:
    found: dict[str, str] = {}
    for name in ("content-type", "authorization", "host"):
        value = headers.get(name)
        if value is not None:
            found[name] = value
    return found


def _cookie(headers: Headers, name: str) -> str:
    raw = headers.get("cookie") or ""
    values = set()
    for pair in raw.replace(",", ";").split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name and value:
            values.add(value)
    return values.pop() if len(values) == 1 else ""


def _quote(text: str) -> str:
    return quote(text, safe="")


async def _send_oauth(
    send: ASGISendCallable,
    status: int,
    body: object,
    extra: list[tuple[str, str]],
    cors: list[tuple[bytes, bytes]],
) -> None:
    out = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra]
    dropped = (b"content-type", b"cache-control", b"pragma")  # ours are added once
    out = [pair for pair in out if pair[0] not in dropped] + _NO_STORE + cors
    if status == 302:
        await send_response(send, 302, b"", content_type=None, headers=out)
        return
    if isinstance(body, bytes):
        payload = body
    elif isinstance(body, str):
        payload = body.encode()
    else:
        payload = _ENCODER.encode(body)
    await send_response(send, status, payload, headers=out)


async def _page(
    send: ASGISendCallable,
    status: int,
    body: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send_response(
        send, status, body.encode(), content_type=_HTML, headers=[*_PAGE_HEADERS, *(extra or [])]
    )


_STYLE: Final = (
    "body{font-family:system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem;"
    "color:#222}h1{font-size:1.3rem}label{display:block;margin:.8rem 0 .2rem}"
    "input[type=text],input[type=password]{width:100%;padding:.4rem;box-sizing:border-box}"
    ".buttons{margin-top:1.2rem;display:flex;gap:.6rem}.error{color:#a00;font-weight:600}"
    "code{word-break:break-all}"
)


def _message_page(title: str, text: str) -> str:
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p></body></html>"
    )


def _sign_in_page(
    *,
    client: OAuthClient,
    redirect_uri: str,
    requested: list[str],
    raw_request: str,
    csrf: str,
    action: str,
    error: str,
) -> str:
    wanted = "viewer"
    for scope in requested:
        role = SCOPE_ROLES.get(scope)
        if role is not None and list(SCOPE_ROLES.values()).index(role) > list(
            SCOPE_ROLES.values()
        ).index(wanted):
            wanted = role
    target = urlsplit(redirect_uri)
    where = f"{target.scheme}://{target.netloc}" if target.netloc else redirect_uri
    error_html = f"<p class=error role=alert>{html.escape(error)}</p>" if error else ""
    e = html.escape
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>Sign in to Coremetry</title><style>{_STYLE}</style></head><body>"
        "<h1>Sign in to Coremetry</h1>"
        f"<p><strong>{e(client.name)}</strong> asks to {e(_ROLE_WORDS[wanted])}.</p>"
        f"<p>It will be sent back to <code>{e(where)}</code>. Allow only if you started this "
        "from that application. Its access is never more than your own role.</p>"
        f"{error_html}"
        f"<form method=post action='{e(action)}'>"
        f"<input type=hidden name=authorization_request value='{e(raw_request)}'>"
        f"<input type=hidden name=csrf value='{e(csrf)}'>"
        "<label for=username>User name</label>"
        "<input type=text id=username name=username autocomplete=username autofocus required>"
        "<label for=password>Password</label>"
        "<input type=password id=password name=password autocomplete=current-password>"
        "<div class=buttons><button type=submit name=decision value=allow id=allow>Allow"
        "</button><button type=submit name=decision value=deny id=deny formnovalidate>Deny"
        "</button></div></form></body></html>"
    )
