"""The REST face of the tools: ``POST /api/tools/<name>`` and ``GET /api/tools``.

REST parity by construction (issue "Every call authenticated and gated"): a REST call is turned
into the very ``tools/call`` the MCP endpoint would run — same registry, same gate (role, then
rate), same deadline, same audit — and only the answer's shape differs. REST conventions apply:

==============================  ===========================================================
MCP answer                      REST answer
==============================  ===========================================================
result                          200, the ``structuredContent`` (else ``{"content": [...]}``)
``isError``, ``bad_args``       400, the tool-error object
``isError``, ``not_found``      404
``isError``, ``timeout``        504
``isError``, ``backend_…``      503
``isError``, ``internal``       500
``-32001`` (role)               403
``-32000`` (rate)               429 with ``Retry-After`` (seconds, rounded up)
``-32602`` unknown tool         404
other ``-32602``                400
==============================  ===========================================================

The request body is the tool's arguments as a JSON object (empty body = ``{}``).
"""

import logging
import math
import time
from collections.abc import Callable
from typing import Final

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

from coremetry.audit import AuditLog
from coremetry.auth import (
    SESSION_COOKIE,
    IdentityStore,
    LoginFailed,
    LoginService,
    LoginThrottled,
    TicketBook,
    TicketLimit,
    UnknownName,
)
from coremetry.http_edge import (
    AUTH_CHALLENGE,
    Authenticate,
    BodyTooLarge,
    ClientGone,
    Headers,
    HttpPolicy,
    admit,
    anonymous,
    is_json_content_type,
    public_prefix,
    read_body,
    send_response,
    unauthorized_message,
)
from coremetry.mcp import Connection, PendingBatch, PendingCall, Server, codes, versions
from coremetry.mcp.wire import JsonObject
from coremetry.roles import Caller, role_satisfies

_log: Final = logging.getLogger(__name__)

TOOLS_PATH: Final = "/api/tools"
"""``GET`` lists the caller's tools; ``POST {TOOLS_PATH}/<name>`` calls one."""

_STATUS_BY_CLASS: Final = {
    "bad_args": 400,
    "not_found": 404,
    "timeout": 504,
    "backend_unavailable": 503,
    "internal": 500,
}

_ENCODER: Final = msgspec.json.Encoder()


class _Answer(msgspec.Struct):
    result: JsonObject | None = None
    error: JsonObject | None = None


_DECODER: Final = msgspec.json.Decoder(_Answer)


def _error(message: str) -> bytes:
    return _ENCODER.encode({"error": "bad_request", "detail": message})


class RestTools:
    """ASGI handler for ``/api/tools`` and ``/api/tools/<name>``.

    Args:
        server: the dispatcher whose registry and gate the calls go through.
        policy: Origin/Host/body-size rules (the same as the MCP transports).
        authenticate: resolves the caller (the same hook as the MCP transports).
    """

    def __init__(
        self, server: Server, policy: HttpPolicy, *, authenticate: Authenticate = anonymous
    ) -> None:
        self.server = server
        self.policy = policy
        self.authenticate = authenticate

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of this handler's routes."""
        return path == TOOLS_PATH or path.startswith(TOOLS_PATH + "/")

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one REST request (see the module docstring)."""
        headers = Headers(scope["headers"])
        path = scope["path"]
        listing = path == TOOLS_PATH
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="GET" if listing else "POST",
            allow=b"GET, OPTIONS" if listing else b"POST, OPTIONS",
            error_body=_error,
        )
        if cors is None:
            return
        try:
            caller = await self.authenticate(headers)
        except Exception as exc:  # the auth layer's reason is never sent
            await send_response(
                send,
                401,
                _ENCODER.encode({"error": "unauthorized", "detail": unauthorized_message(exc)}),
                headers=[self.policy.challenge(exc, headers), *cors],
            )
            return
        conn = Connection(caller=caller, transport="rest", protocol_version=versions.V2025_11_25)
        if path == TOOLS_PATH:
            await self._list(conn, send, cors)
            return
        name = path[len(TOOLS_PATH) + 1 :]
        await self._call(name, headers, conn, receive, send, cors)

    async def _list(
        self, conn: Connection, send: ASGISendCallable, cors: list[tuple[bytes, bytes]]
    ) -> None:
        tools: list[object] = []
        cursor: str | None = None
        while True:
            params: JsonObject = {} if cursor is None else {"cursor": cursor}
            message = _ENCODER.encode(
                {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": params}
            )
            reply = await self.server.handle(message, conn)
            answer = _DECODER.decode(reply.body) if reply is not None else _Answer()
            result = answer.result or {}
            page = result.get("tools")
            if isinstance(page, list):
                tools.extend(page)
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str):
                break
            cursor = next_cursor
        await send_response(send, 200, _ENCODER.encode({"tools": tools}), headers=cors)

    async def _call(
        self,
        name: str,
        headers: Headers,
        conn: Connection,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        cors: list[tuple[bytes, bytes]],
    ) -> None:
        if not name or "/" in name:
            await send_response(send, 404, _error(f"no tool at {TOOLS_PATH}/{name}"), headers=cors)
            return
        try:
            body = await read_body(receive, self.policy.max_body_bytes)
        except BodyTooLarge:
            await send_response(
                send,
                413,
                _error(
                    f"the body exceeds {self.policy.max_body_bytes} bytes (http.max_body_bytes)"
                ),
                headers=cors,
            )
            return
        except ClientGone:
            return
        if body.strip() and not is_json_content_type(headers.get("content-type")):
            await send_response(
                send, 415, _error("send the arguments as application/json"), headers=cors
            )
            return
        try:
            arguments = msgspec.json.decode(body or b"{}", type=JsonObject)
        except RecursionError:
            await send_response(send, 400, _error("the body is nested too deeply"), headers=cors)
            return
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await send_response(
                send, 400, _error(f"the body must be a JSON object: {exc}"), headers=cors
            )
            return
        message = _ENCODER.encode(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
        outcome = self.server.receive(message, conn)
        if isinstance(outcome, PendingCall | PendingBatch):
            reply = await outcome.run()
        else:
            reply = outcome
        if reply is None:
            return  # cancelled: the client went away
        status, payload, extra = _rest_answer(_DECODER.decode(reply.body))
        await send_response(send, status, payload, headers=[*extra, *cors])


def _rest_answer(answer: _Answer) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Map a JSON-RPC answer of ``tools/call`` to (status, body, extra headers)."""
    if answer.error is not None:
        code = answer.error.get("code")
        data = answer.error.get("data")
        body = _ENCODER.encode(
            {"error": "refused", "code": code, "detail": answer.error.get("message", "")}
        )
        if code == codes.FORBIDDEN:
            return 403, body, []
        if code == codes.RATE_LIMITED:
            retry_ms = data.get("retry_after_ms") if isinstance(data, dict) else None
            extra: list[tuple[bytes, bytes]] = []
            if isinstance(retry_ms, int | float):
                extra.append((b"retry-after", str(max(1, math.ceil(retry_ms / 1000))).encode()))
            return 429, body, extra
        if code == codes.INVALID_PARAMS:
            unknown = isinstance(answer.error.get("message"), str) and str(
                answer.error.get("message")
            ).startswith("Unknown tool")
            return (404 if unknown else 400), body, []
        return 500, body, []
    result = answer.result or {}
    structured = result.get("structuredContent")
    if result.get("isError") is True:
        kind = structured.get("error") if isinstance(structured, dict) else None
        status = _STATUS_BY_CLASS.get(kind if isinstance(kind, str) else "", 500)
        return status, _ENCODER.encode(structured if structured is not None else result), []
    if structured is not None:
        return 200, _ENCODER.encode(structured), []
    return 200, _ENCODER.encode({"content": result.get("content", [])}), []


LOGIN_PATH: Final = "/api/auth/login"
"""``POST {"username": …, "password": …}`` -> a session JWT (JSON and an HttpOnly cookie)."""


class _LoginRequest(msgspec.Struct, forbid_unknown_fields=True):
    username: str
    password: str


_LOGIN_DECODER: Final = msgspec.json.Decoder(_LoginRequest)


class LoginEndpoint:
    """ASGI handler of ``POST /api/auth/login`` (DESIGN.md §5).

    Success: 200 ``{"token", "token_type": "Bearer", "sub", "role", "expires_at"}`` (unix
    seconds) and ``Set-Cookie: coremetry_session=…; HttpOnly; SameSite=Strict; Path=/`` (plus
    ``Secure`` over HTTPS) for browsers. A wrong password and an unknown user get the same 401;
    repeated failures are slowed down and, past the wait the service accepts, refused with 429
    and ``Retry-After``. The password is never logged or echoed.

    Args:
        login: the login service (checks passwords, throttles, issues JWTs).
        policy: Origin/Host/body-size rules (a login from a refused Origin is 403).
    """

    def __init__(self, login: LoginService, policy: HttpPolicy) -> None:
        self.login = login
        self.policy = policy

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one login request."""
        headers = Headers(scope["headers"])
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="POST",
            allow=b"POST, OPTIONS",
            error_body=_error,
            not_allowed="POST your credentials",
        )
        if cors is None:
            return
        if not is_json_content_type(headers.get("content-type")):
            await send_response(send, 415, _error("send application/json"), headers=cors)
            return
        cap = min(self.policy.max_body_bytes, 64 * 1024)
        try:
            body = await read_body(receive, cap)
            request = _LOGIN_DECODER.decode(body)
        except BodyTooLarge:
            too_large = _error(f"the body exceeds {cap} bytes (a login body is at most 64 KiB)")
            await send_response(send, 413, too_large, headers=cors)
            return
        except ClientGone:
            return
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            await send_response(
                send,
                400,
                _error(f"expected {{'username': str, 'password': str}}: {exc}"),
                headers=cors,
            )
            return
        client = scope.get("client")
        client_key = client[0] if client else "unknown"
        try:
            token, claims = await self.login.login(
                request.username, request.password, client_key=client_key
            )
        except LoginThrottled as exc:
            retry = str(max(1, math.ceil(exc.retry_after_s))).encode()
            await send_response(
                send,
                429,
                _ENCODER.encode({"error": "too many failed logins; retry later"}),
                headers=[(b"retry-after", retry), *cors],
            )
            return
        except LoginFailed:
            await send_response(
                send,
                401,
                _ENCODER.encode({"error": "invalid username or password"}),
                headers=[AUTH_CHALLENGE, *cors],
            )
            return
        max_age = max(0, (claims.expires_at or 0) - int(time.time()))
        cookie = f"{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}"
        if scope["scheme"] == "https":
            cookie += "; Secure"
        payload = {
            "token": token,
            "token_type": "Bearer",
            "sub": claims.sub,
            "role": claims.role,
            "expires_at": claims.expires_at,
        }
        await send_response(
            send,
            200,
            _ENCODER.encode(payload),
            headers=[(b"set-cookie", cookie.encode()), (b"cache-control", b"no-store"), *cors],
        )


ADMIN_USERS_PATH: Final = "/api/admin/users"
"""Admin-only account management: ``POST {ADMIN_USERS_PATH}/<name>/disable`` (``/enable``,
``/password``) and ``DELETE {ADMIN_USERS_PATH}/<name>``."""

_ADMIN_ACTIONS: Final = {
    "disable": "user disable",
    "enable": "user enable",
    "password": "user passwd",
}


class _PasswordRequest(msgspec.Struct, forbid_unknown_fields=True):
    password: str


_PASSWORD_DECODER: Final = msgspec.json.Decoder(_PasswordRequest)


class _AdminRefusal(Exception):
    """An admin request refused with ``status`` and a JSON body; ``outcome`` is audited."""

    def __init__(self, status: int, error: str, detail: str, outcome: str) -> None:
        super().__init__(detail)
        self.status = status
        self.body = _ENCODER.encode({"error": error, "detail": detail})
        self.outcome = outcome


class AdminUsers:
    """ASGI handler of the admin account routes (the REST side of ``coremetry user …``).

    ==============================================  ===========================================
    request                                         effect
    ==============================================  ===========================================
    ``POST /api/admin/users/<name>/disable``        no login; the user's sessions end at once
    ``POST /api/admin/users/<name>/enable``         login works again (old sessions stay ended)
    ``POST /api/admin/users/<name>/password``       body ``{"password": "…"}`` (8 characters to
                                                    1024 bytes); the user's sessions end at once
    ``DELETE /api/admin/users/<name>``              the user is gone; its sessions end at once
    ==============================================  ===========================================

    Answers are JSON: 200 with the user (``name``, ``role``, ``disabled``, ``disabled_at``;
    ``{"name", "deleted": true}`` for a delete, ``{"name", "password_changed": true}``), 401 with
    the Bearer challenge without valid credentials, 403 ``forbidden`` for a caller whose role is
    not ``admin``, 404 ``not_found`` naming the user, 400 ``bad_request`` naming the field of a
    bad body, 415 for a body that is not ``application/json``, 405 with ``Allow`` for another
    method. "At once" holds across processes: every server sharing the data dir refuses the
    user's JWTs from the next request on. Every request of an authenticated caller, allowed or
    refused, writes one audit row (:meth:`~coremetry.audit.AuditLog.record_admin`, transport
    ``rest``) before the answer (when that write fails, the error is logged and the change
    stands); the password is never logged, audited or echoed.

    Args:
        store: the identity store (called through ``trio.to_thread``).
        audit: where the admin actions are recorded.
        policy: Origin/Host/body-size rules (the same as the other endpoints).
        authenticate: resolves the caller (the same hook as the MCP transports).
    """

    def __init__(
        self,
        store: IdentityStore,
        audit: AuditLog,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
    ) -> None:
        self.store = store
        self.audit = audit
        self.policy = policy
        self.authenticate = authenticate

    def matches(self, path: str) -> bool:
        """Whether ``path`` is under :data:`ADMIN_USERS_PATH`."""
        return path == ADMIN_USERS_PATH or path.startswith(ADMIN_USERS_PATH + "/")

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one admin request (see the class docstring)."""
        headers = Headers(scope["headers"])
        parts = scope["path"][len(ADMIN_USERS_PATH) + 1 :].split("/")
        name = parts[0]
        if len(parts) == 1 and name:
            action, method = "user delete", "DELETE"
        elif len(parts) == 2 and name and parts[1] in _ADMIN_ACTIONS:
            action, method = _ADMIN_ACTIONS[parts[1]], "POST"
        else:
            await send_response(send, 404, _error(f"no admin route at {scope['path']}"))
            return
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method=method,
            allow=f"{method}, OPTIONS".encode(),
            error_body=_error,
        )
        if cors is None:
            return
        try:
            caller = await self.authenticate(headers)
        except Exception as exc:  # the auth layer's reason is never sent
            await send_response(
                send,
                401,
                _ENCODER.encode({"error": "unauthorized"}),
                headers=[self.policy.challenge(exc, headers), *cors],
            )
            return
        try:
            status, payload = await self._act(caller, action, name, headers, receive)
            outcome = "ok"
        except _AdminRefusal as refusal:
            status, payload, outcome = refusal.status, refusal.body, refusal.outcome
        except ClientGone:
            return
        try:
            await trio.to_thread.run_sync(
                lambda: self.audit.record_admin(
                    caller, transport="rest", action=action, target=name[:128], outcome=outcome
                )
            )
        except Exception as exc:  # sqlite3.Error and the like: the change itself stands
            _log.error(
                "could not audit %s %r by %r (outcome %s): %s",
                action,
                name[:128],
                caller.subject,
                outcome,
                exc,
            )
        await send_response(send, status, payload, headers=[(b"cache-control", b"no-store"), *cors])

    async def _act(
        self,
        caller: Caller,
        action: str,
        name: str,
        headers: Headers,
        receive: ASGIReceiveCallable,
    ) -> tuple[int, bytes]:
        if not role_satisfies(caller.role, "admin"):
            raise _AdminRefusal(403, "forbidden", "managing users needs the admin role", "denied")
        change: Callable[[], object]
        if action == "user passwd":
            password = await self._password(headers, receive)
            change = lambda: self.store.set_password(name, password)  # noqa: E731
        elif action == "user disable":
            change = lambda: self.store.disable_user(name)  # noqa: E731
        elif action == "user enable":
            change = lambda: self.store.enable_user(name)  # noqa: E731
        else:
            change = lambda: self.store.delete_user(name)  # noqa: E731
        try:
            result = await trio.to_thread.run_sync(change)
        except UnknownName as exc:
            raise _AdminRefusal(404, "not_found", str(exc), "not_found") from None
        except ValueError as exc:
            raise _AdminRefusal(400, "bad_request", f"password: {exc}", "bad_args") from None
        if action == "user delete":
            return 200, _ENCODER.encode({"name": name, "deleted": True})
        if action == "user passwd":
            return 200, _ENCODER.encode({"name": name, "password_changed": True})
        return 200, _ENCODER.encode(result)

    async def _password(self, headers: Headers, receive: ASGIReceiveCallable) -> str:
        if not is_json_content_type(headers.get("content-type")):
            raise _AdminRefusal(415, "bad_request", "send application/json", "bad_args")
        cap = min(self.policy.max_body_bytes, 64 * 1024)
        try:
            body = await read_body(receive, cap)
            return _PASSWORD_DECODER.decode(body).password
        except BodyTooLarge:
            message = f"the body exceeds {cap} bytes (a password body is at most 64 KiB)"
            raise _AdminRefusal(413, "bad_request", message, "bad_args") from None
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise _AdminRefusal(
                400, "bad_request", f"expected {{'password': str}}: {exc}", "bad_args"
            ) from None


WS_TICKET_PATH: Final = "/api/mcp/ws-ticket"
"""``POST`` (authenticated) -> a single-use ticket for ``/api/mcp/ws?ticket=…``."""

WS_PATH: Final = "/api/mcp/ws"
"""The WebSocket endpoint a ticket opens."""


class WsTicketEndpoint:
    """ASGI handler of ``POST /api/mcp/ws-ticket``: a single-use WebSocket ticket (issue 18).

    The caller authenticates the usual way (Bearer service token, session JWT, an external
    identity provider's access token, or the session cookie); the answer is 200 with
    ``Cache-Control: no-store`` and ``{"ticket", "expires_in", "url"}``: the ticket, its
    lifetime in seconds, and the WebSocket URL with the ticket in its query (``ws://`` or
    ``wss://`` after the request's scheme, the request's ``Host`` and public path prefix).
    The ticket opens exactly one socket, as the caller, within ``expires_in`` seconds
    (:mod:`coremetry.auth.ws_ticket`). No body is needed (any body is ignored).

    Refusals: 401 with the Bearer challenge without valid credentials; 429 with
    ``Retry-After`` when the caller holds too many unused tickets; 403/421 for a refused
    Origin/Host; 405 for another method. Every mint is audited (one
    :meth:`~coremetry.audit.AuditLog.record_admin` row: action ``ws-ticket``, target
    ``mint``, transport ``rest``, outcome ``ok`` or ``denied``); the ticket itself is never
    logged or audited.

    Args:
        tickets: the ticket book the WebSocket endpoint redeems from.
        policy: Origin/Host/body-size rules (the same as the other endpoints).
        authenticate: resolves the caller (the same hook as the MCP transports).
        audit: where mints are recorded (``None``: not recorded).
    """

    def __init__(
        self,
        tickets: TicketBook,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
        audit: AuditLog | None = None,
    ) -> None:
        self.tickets = tickets
        self.policy = policy
        self.authenticate = authenticate
        self.audit = audit

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one mint request (see the class docstring)."""
        headers = Headers(scope["headers"])
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="POST",
            allow=b"POST, OPTIONS",
            error_body=_error,
            not_allowed="POST (authenticated) to mint a WebSocket ticket",
        )
        if cors is None:
            return
        try:
            caller = await self.authenticate(headers)
        except Exception as exc:  # the auth layer's reason is never sent
            await send_response(
                send,
                401,
                _ENCODER.encode({"error": "unauthorized", "detail": unauthorized_message(exc)}),
                headers=[self.policy.challenge(exc, headers), *cors],
            )
            return
        try:
            ticket = self.tickets.mint(caller.subject, headers)
        except TicketLimit as limit:
            await self._audit(caller, "denied")
            retry = str(max(1, math.ceil(limit.retry_after_s))).encode()
            await send_response(
                send,
                429,
                _ENCODER.encode(
                    {
                        "error": "too_many_tickets",
                        "detail": "too many unused WebSocket tickets; use or let them expire",
                    }
                ),
                headers=[(b"retry-after", retry), *cors],
            )
            return
        await self._audit(caller, "ok")
        scheme = "wss" if scope["scheme"] in ("https", "wss") else "ws"
        host = headers.get("host") or "localhost"
        prefix = public_prefix(headers, self.policy)
        url = f"{scheme}://{host}{prefix}{WS_PATH}?ticket={ticket.value}"
        payload = {"ticket": ticket.value, "expires_in": ticket.expires_in_s, "url": url}
        await send_response(
            send,
            200,
            _ENCODER.encode(payload),
            headers=[(b"cache-control", b"no-store"), *cors],
        )

    async def _audit(self, caller: Caller, outcome: str) -> None:
        audit = self.audit
        if audit is None:
            return
        try:
            await trio.to_thread.run_sync(
                lambda: audit.record_admin(
                    caller, transport="rest", action="ws-ticket", target="mint", outcome=outcome
                )
            )
        except Exception as exc:  # sqlite3.Error and the like: the ticket stands
            _log.error("could not audit a WebSocket ticket of %r: %s", caller.subject, exc)


__all__ = [
    "ADMIN_USERS_PATH",
    "LOGIN_PATH",
    "TOOLS_PATH",
    "WS_PATH",
    "WS_TICKET_PATH",
    "AdminUsers",
    "LoginEndpoint",
    "RestTools",
    "WsTicketEndpoint",
]
