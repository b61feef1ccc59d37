"""Assembly of the ASGI application (the only module that touches quart-trio).

Routing, by path:

- ``/api/mcp`` and ``/api/mcp/`` — Streamable HTTP (:mod:`coremetry.transports.streamable_http`),
  served by a lean ASGI handler in front of Quart: per-request Quart machinery (request
  context, response objects, timeouts) is not on the MCP hot path, while every route shares
  the same policy and authentication hook. (The benchmarks in ``bench/`` measure the choice.)
- ``/api/mcp/sse`` + ``/api/mcp/messages`` — legacy HTTP+SSE (2024-11-05).
- ``/api/mcp/ws`` — WebSocket (subprotocol ``mcp``).
- ``/api/mcp/ws-ticket`` — ``POST`` mints a single-use ticket for ``/api/mcp/ws?ticket=…``
  (:class:`coremetry.rest.WsTicketEndpoint`), when a ticket book is given.
- ``/api/auth/login`` — a session JWT for a user name and password (:mod:`coremetry.rest`).
- ``/api/tools`` and ``/api/tools/<name>`` — the tools over REST, through the same gate
  (:mod:`coremetry.rest`).
- ``/api/admin/users/<name>[/disable|/enable|/password]`` — admin-only account management
  (:class:`coremetry.rest.AdminUsers`), when an identity store and an audit log are given.
- ``/v1/traces``, ``/v1/logs``, ``/v1/metrics`` — the OTLP/HTTP receiver
  (:mod:`coremetry.ingest.receiver`), when a store is given and ``ingest.enabled``; any other
  ``/v1/*`` path then gets the receiver's JSON (or protobuf) 404, not an HTML page.
- ``/oauth/authorize|token|register|revoke`` — the built-in OAuth authorization server
  (:mod:`coremetry.oauth_http`), when given one.
- ``/.well-known/*`` — the OAuth discovery documents (RFC 9728 protected-resource metadata,
  RFC 8414 authorization-server metadata) or a JSON 404 (:mod:`coremetry.well_known`).
- everything else — the QuartTrio app: ``GET /healthz`` (unauthenticated, no data); any
  other path or method answers JSON ``{"error": "not_found" | "method_not_allowed" | ...,
  "detail": ...}`` with its status, never Quart's HTML page (clients probing
  ``/.well-known/oauth-protected-resource``, ``/.well-known/oauth-authorization-server`` or
  ``/register`` after a 401 parse the answer as JSON).
"""

from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGISendCallable,
    HTTPScope,
    Scope,
    WebsocketScope,
)
from quart import Response
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from coremetry import __version__
from coremetry.audit import AuditLog
from coremetry.auth import IdentityStore, LoginService, TicketBook
from coremetry.auth.oauth_resource import PublicUrls, discovery_offered
from coremetry.auth.oauth_server import OAuthServer, authorization_server_metadata
from coremetry.config import Config
from coremetry.http_edge import Authenticate, Headers, HttpPolicy, UnreadBody, anonymous
from coremetry.ingest.receiver import OTLP_PATHS, OtlpReceiver
from coremetry.mcp import Server
from coremetry.oauth_http import OAUTH_PATHS, OAuthEndpoints
from coremetry.rest import (
    LOGIN_PATH,
    WS_TICKET_PATH,
    AdminUsers,
    LoginEndpoint,
    RestTools,
    WsTicketEndpoint,
)
from coremetry.store import TelemetryStore
from coremetry.transports.drain import Drain
from coremetry.transports.sse import LegacySse
from coremetry.transports.streamable_http import StreamableHttp
from coremetry.transports.websocket import WebSocketTransport
from coremetry.well_known import AsMetadata, WellKnown

HttpHandler = Callable[[HTTPScope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]
WebsocketHandler = Callable[
    [WebsocketScope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]
]

MCP_PATHS: Final = ("/api/mcp", "/api/mcp/")


class CoremetryApp:
    """The ASGI callable hypercorn serves.

    Args:
        config: the effective configuration.
        mcp: the dispatcher every MCP transport feeds.
        authenticate: resolves callers (default: everyone is an anonymous viewer).
        login: serves ``POST /api/auth/login`` when given.
        store: the telemetry store the OTLP/HTTP receiver writes into (none: no receiver).
        identities: with ``audit``, serves the admin account routes over this identity store.
        audit: where the admin account routes record what they do.
        tickets: serves ``POST /api/mcp/ws-ticket`` and lets ``/api/mcp/ws?ticket=…`` redeem
            its tickets, when given (mints are audited when ``audit`` is given too).
        oauth: with ``login``, serves the built-in OAuth authorization server
            (``/oauth/authorize``, ``/oauth/token``, ``/oauth/register``, ``/oauth/revoke``) and
            its RFC 8414 metadata.

    Attributes:
        shutting_down: set when the server starts draining (for code that waits on the stop;
            the MCP transports follow ``drain``).
        drain: the drain every MCP transport shares (:mod:`coremetry.transports.drain`),
            begun by :func:`coremetry.server.serve` on stop.
    """

    def __init__(
        self,
        config: Config,
        mcp: Server,
        *,
        authenticate: Authenticate = anonymous,
        login: LoginService | None = None,
        store: TelemetryStore | None = None,
        identities: IdentityStore | None = None,
        audit: AuditLog | None = None,
        tickets: TicketBook | None = None,
        oauth: OAuthServer | None = None,
    ) -> None:
        self.config = config
        self.mcp = mcp
        self.authenticate = authenticate
        self.shutting_down = trio.Event()
        self.drain = Drain()
        self.policy = HttpPolicy(
            bind_host=config.http.host,
            allowed_origins=config.http.allowed_origins,
            allowed_hosts=config.http.allowed_hosts,
            max_body_bytes=config.http.max_body_bytes,
            root_path=config.http.root_path,
        )
        self.http_routes: dict[str, HttpHandler] = {}
        self.otlp_not_found: HttpHandler | None = None
        self.websocket_routes: dict[str, WebsocketHandler] = {}
        streamable = StreamableHttp(
            mcp,
            self.policy,
            authenticate=authenticate,
            keepalive_interval_s=config.sse.keepalive_interval_s,
            drain=self.drain,
        )
        for path in MCP_PATHS:
            self.http_routes[path] = streamable
        self.legacy_sse = LegacySse(
            mcp,
            self.policy,
            authenticate=authenticate,
            drain=self.drain,
            keepalive_interval_s=config.sse.keepalive_interval_s,
            max_sessions=config.sse.max_sessions,
            session_idle_s=config.sse.session_idle_s,
        )
        self.http_routes.update(self.legacy_sse.routes())
        self.websocket_routes["/api/mcp/ws"] = WebSocketTransport(
            mcp,
            self.policy,
            authenticate=authenticate,
            drain=self.drain,
            max_message_bytes=config.websocket.max_message_bytes,
            max_connections=config.websocket.max_connections,
            redeem_ticket=tickets.redeem if tickets is not None else None,
        )
        if tickets is not None:
            self.http_routes[WS_TICKET_PATH] = WsTicketEndpoint(
                tickets, self.policy, authenticate=authenticate, audit=audit
            )
        self.rest = RestTools(mcp, self.policy, authenticate=authenticate)
        if login is not None:
            self.http_routes[LOGIN_PATH] = LoginEndpoint(login, self.policy)
        self.admin_users: AdminUsers | None = None
        if identities is not None and audit is not None:
            self.admin_users = AdminUsers(identities, audit, self.policy, authenticate=authenticate)
        if store is not None and config.ingest.enabled:
            receiver = OtlpReceiver(
                store,
                self.policy,
                authenticate=authenticate,
                min_role=config.ingest.min_role,
                max_body_bytes=config.ingest.max_body_bytes,
                max_future_skew_s=config.ingest.max_future_skew_s,
            )
            for path in OTLP_PATHS:
                self.http_routes[path] = receiver
            self.otlp_not_found = receiver.not_found
        self.urls = PublicUrls.from_config(config)
        if authenticate is not anonymous and discovery_offered(config):
            # Every 401 names the protected-resource metadata (RFC 9728 §5.1).
            self.policy.resource_metadata = self.urls.resource_metadata
        as_metadata: AsMetadata | None = None
        if oauth is not None and login is not None and authenticate is not anonymous:
            # Issue 18: the built-in authorization server (sign-in page, token, registration).
            endpoints = OAuthEndpoints(oauth, login, self.policy, self.urls, config.auth.oauth)
            for path in OAUTH_PATHS:
                self.http_routes[path] = endpoints
            urls = self.urls

            def as_metadata(headers: Headers) -> dict[str, object]:
                return authorization_server_metadata(urls.issuer(headers))

        self.well_known = WellKnown(
            config if authenticate is not anonymous else _without_discovery(config),
            self.urls,
            as_metadata,
        )
        self.quart = _quart_app()

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Route one ASGI connection (see the module docstring)."""
        if scope["type"] == "http":
            # Our handlers answer refusals before reading the body: finish it first, so the
            # connection stays usable (http_edge.UnreadBody). Quart reads its bodies itself.
            unread = UnreadBody(scope, receive, send)
            handler = self.http_routes.get(scope["path"])
            if handler is not None:
                await handler(scope, unread.receive, unread.send)
                return
            if self.otlp_not_found is not None and scope["path"].startswith("/v1/"):
                await self.otlp_not_found(scope, unread.receive, unread.send)
                return
            if WellKnown.matches(scope["path"]):
                await self.well_known(scope, unread.receive, unread.send)
                return
            if self.rest.matches(scope["path"]):
                await self.rest(scope, unread.receive, unread.send)
                return
            if self.admin_users is not None and self.admin_users.matches(scope["path"]):
                await self.admin_users(scope, unread.receive, unread.send)
                return
        elif scope["type"] == "websocket":
            ws_handler = self.websocket_routes.get(scope["path"])
            if ws_handler is not None:
                await ws_handler(scope, receive, send)
                return
        await self.quart(scope, receive, send)


def _without_discovery(config: Config) -> Config:
    # An unauthenticated server (tests, fixtures) offers no OAuth discovery: nothing to sign in to.
    oauth = msgspec.structs.replace(config.auth.oauth, enabled=False)
    return msgspec.structs.replace(config, auth=msgspec.structs.replace(config.auth, oauth=oauth))


def _quart_app() -> QuartTrio:
    app = QuartTrio("coremetry")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(
            f'{{"status":"ok","version":"{__version__}"}}', content_type="application/json"
        )

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        return json_error_response(error)

    return app


def json_error_response(error: HTTPException) -> Response:
    """A Quart/werkzeug HTTP error as JSON: ``{"error": <snake_case name>, "detail": <text>}``.

    The status and any headers the error carries (``Allow`` on a 405) are kept. A 404 names
    the path's absence; the OAuth discovery paths are among those that answer it until the
    server implements them.
    """
    status = error.code or 500
    name = (error.name or "error").lower().replace(" ", "_")
    if status == 404:
        detail = "no such path on this server (the MCP endpoint is /api/mcp)"
    else:
        detail = error.description or error.name or "error"
    response = Response(
        _JSON.encode({"error": name, "detail": detail}),
        status=status,
        content_type="application/json",
    )
    for key, value in error.get_headers():
        if key.lower() not in ("content-type", "content-length"):
            response.headers[key] = value
    return response


_JSON: Final = msgspec.json.Encoder()
