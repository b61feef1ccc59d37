"""Legacy HTTP+SSE (2024-11-05): ``GET /api/mcp/sse`` + ``POST /api/mcp/messages?sessionId=…``.

``shared/reference/mcp-spec.md`` §2 "2024-11-05: HTTP+SSE"; ``shared/reference/field-failures.md``
B01 and B03.

- ``GET /api/mcp/sse`` opens a session. Origin (403), Host (421), ``Accept`` (406) and the
  ``Authenticate`` hook (401) are checked first; beyond ``max_sessions`` open sessions, or once
  the server is shutting down, the answer is 503 with ``Retry-After``. The response is
  ``text/event-stream`` with ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no``, no
  ``Content-Length`` and no timeout. The first event is ``endpoint``; its data is the
  root-relative URI to POST to, ``<prefix>/api/mcp/messages?sessionId=<id>``, where the prefix
  is a sane ``X-Forwarded-Prefix`` or else ``http.root_path`` (never an absolute URI naming the
  bind address). The session id is ``secrets.token_urlsafe(24)``. Answers and notifications follow
  as ``message`` events; ``: ping`` comments keep an idle stream alive.
- ``POST /api/mcp/messages?sessionId=<id>`` carries one client message. A missing or empty
  ``sessionId`` is 400; an unknown or ended session, or one opened by another identity, is 404
  (the same answer, so a session's existence is not revealed); the body must be JSON (415) and
  within ``max_body_bytes`` (413); an empty body is 400. Otherwise the body is queued on the
  session and the answer is ``202 Accepted``; the JSON-RPC reply rides that session's stream
  only.
- ``OPTIONS`` on either path is a CORS preflight; other methods get 405 with ``Allow``.

Each session is a nursery owned by its ``GET`` handler, which returns only when the session ends:
``serve_connection`` runs in it, fed by a small memory channel, next to a task that watches for
``http.disconnect`` and a timer task (keep-alive comments, idle timeout). The
session ends when the client closes the stream, when no POST arrived for ``session_idle_s``, or
when the server shuts down. Ending is synchronous and complete: the session leaves the table
(later POSTs get 404), its channel closes (a POST racing the end gets 404, never 202 then
silence), and its cancel scope is cancelled, so every in-flight call observes ``trio.Cancelled``
at its next checkpoint and nothing more is written to the stream. On idle timeout the stream is
ended cleanly; after a disconnect nothing is sent.

Shutdown (:mod:`coremetry.transports.drain`): once the server's drain has begun, a session
answers every call in flight as ``message`` events — its result if it finishes within
``http.graceful_shutdown_s``, else the retryable shutdown error — and its stream ends cleanly
as soon as it has no call in flight (at once for an idle session). A POST carrying a request
during the drain gets 503 with ``Retry-After`` and the JSON-RPC shutting-down error as its body;
the same error also goes to the session's stream (when it is still open), so the request is
answered where the client waits for it. A POST carrying a notification or a client response
is still taken (202), so a ``notifications/cancelled`` still reaches a running call; one for a
session that has already ended gets 503 too (not 404: the client should come back later).

Per-session state is kept small (a ``__slots__`` record, a 16-slot channel, three tasks), because
an idle session costs memory for as long as a client keeps its stream open.
"""

import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import parse_qs

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

from coremetry.http_edge import (
    SSE_HEADERS,
    Authenticate,
    BodyTooLarge,
    ClientGone,
    Headers,
    HttpPolicy,
    accepts,
    admit,
    anonymous,
    is_json_content_type,
    jsonrpc_error_body,
    public_prefix,
    read_body,
    send_response,
    sse_event,
    unauthorized_message,
)
from coremetry.mcp import Connection, Server, codes, serve_connection
from coremetry.mcp.wire import JsonObject
from coremetry.roles import Caller

from .drain import RETRY_AFTER_S as DRAIN_RETRY_AFTER_S
from .drain import SHUTDOWN_MESSAGE, Drain

SSE_PATH: Final = "/api/mcp/sse"
"""Where a client opens a session (``GET``)."""
MESSAGES_PATH: Final = "/api/mcp/messages"
"""Where a client POSTs its messages, with ``?sessionId=<id>``."""

SSE_METHODS: Final = b"GET, OPTIONS"
MESSAGES_METHODS: Final = b"POST, OPTIONS"

INBOX_SIZE: Final = 16
"""Messages a session buffers between POSTs and its dispatcher (a full inbox makes POSTs wait)."""

_PING: Final = b": ping\n\n"

_DRAIN_RETRY_AFTER: Final = (b"retry-after", str(DRAIN_RETRY_AFTER_S).encode())

HttpHandler = Callable[[HTTPScope, ASGIReceiveCallable, ASGISendCallable], Awaitable[None]]


class _Session:
    """One open SSE stream: its identity, inbox, connection and lifetime."""

    __slots__ = (
        "_asgi_send",
        "_lock",
        "caller",
        "client_gone",
        "conn",
        "ended",
        "idle_deadline",
        "inbox",
        "inbox_recv",
        "scope",
        "session_id",
    )

    def __init__(self, caller: Caller, asgi_send: ASGISendCallable, idle_deadline: float) -> None:
        self.session_id = secrets.token_urlsafe(24)
        self.caller = caller
        self.inbox, self.inbox_recv = trio.open_memory_channel[bytes](INBOX_SIZE)
        self.conn = Connection(caller=caller, transport="sse", send=self.send_message)
        self.scope = trio.CancelScope()
        self.idle_deadline = idle_deadline
        self.ended = False
        self.client_gone = False
        self._asgi_send = asgi_send
        self._lock = trio.Lock()

    async def send_message(self, message: bytes) -> None:
        """Write one JSON-RPC message as an SSE ``message`` event (serialised by a lock).

        Raises:
            trio.ClosedResourceError: the session has ended.
        """
        await self._write(sse_event(message))

    async def ping(self) -> None:
        """Write a ``: ping`` comment (ignored by SSE parsers; keeps proxies from idling out)."""
        await self._write(_PING)

    async def _write(self, chunk: bytes) -> None:
        async with self._lock:
            if self.ended:
                raise trio.ClosedResourceError("the SSE session has ended")
            await self._asgi_send({"type": "http.response.body", "body": chunk, "more_body": True})


class LegacySse:
    """The ASGI handlers of the legacy HTTP+SSE transport (see the module docstring).

    Args:
        server: the dispatcher.
        policy: Origin/Host/body-size rules and the root path.
        authenticate: resolves the caller from the request headers.
        drain: the server's drain (:mod:`coremetry.transports.drain`): once it has begun, new
            sessions and requests get 503 and each session answers its calls in flight, then
            ends.
        keepalive_interval_s: interval of ``: ping`` comments on each stream, in seconds.
        max_sessions: the most sessions open at once (503 beyond).
        session_idle_s: a session with no POST for this long ends, in seconds.

    Attributes:
        sessions: the open sessions by id (a session leaves it the moment it ends).
    """

    def __init__(
        self,
        server: Server,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
        drain: Drain | None = None,
        keepalive_interval_s: float = 15.0,
        max_sessions: int = 10_000,
        session_idle_s: float = 3600.0,
    ) -> None:
        self.server = server
        self.policy = policy
        self.authenticate = authenticate
        self.drain = drain if drain is not None else Drain()
        self.keepalive_interval_s = keepalive_interval_s
        self.max_sessions = max_sessions
        self.session_idle_s = session_idle_s
        self.sessions: dict[str, _Session] = {}

    def routes(self) -> dict[str, HttpHandler]:
        """The paths this transport serves, with their handlers (for the app's router)."""
        return {SSE_PATH: self.open_stream, MESSAGES_PATH: self.post_message}

    # -- shared checks --------------------------------------------------------------------------

    async def _admit(
        self, scope: HTTPScope, send: ASGISendCallable, headers: Headers, method: str, allow: bytes
    ) -> list[tuple[bytes, bytes]] | None:
        """Origin, Host, preflight and method checks (:func:`~coremetry.http_edge.admit`)."""
        return await admit(scope, send, headers, self.policy, method=method, allow=allow)

    async def _caller(
        self, headers: Headers, send: ASGISendCallable, cors: list[tuple[bytes, bytes]]
    ) -> Caller | None:
        try:
            return await self.authenticate(headers)
        except Exception as refusal:  # the auth layer's reason is logged there, never sent
            await send_response(
                send,
                401,
                jsonrpc_error_body(codes.INVALID_REQUEST, unauthorized_message(refusal)),
                headers=[self.policy.challenge(refusal, headers), *cors],
            )
            return None

    # -- GET /api/mcp/sse -----------------------------------------------------------------------

    async def open_stream(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one SSE session; returns when the session has ended."""
        headers = Headers(scope["headers"])
        cors = await self._admit(scope, send, headers, "GET", SSE_METHODS)
        if cors is None:
            return

        async def refuse(
            status: int, code: int, message: str, extra: list[tuple[bytes, bytes]] | None = None
        ) -> None:
            await send_response(
                send, status, jsonrpc_error_body(code, message), headers=[*(extra or []), *cors]
            )

        if not accepts(headers.get("accept"), "text/event-stream"):
            await refuse(406, codes.INVALID_REQUEST, "Not Acceptable: accept text/event-stream")
            return
        caller = await self._caller(headers, send, cors)
        if caller is None:
            return
        if self.drain.started.is_set():
            await _refuse_draining_response(send, cors, None)
            return
        if len(self.sessions) >= self.max_sessions:
            await refuse(
                503,
                codes.RATE_LIMITED,
                f"Service Unavailable: {self.max_sessions} SSE sessions are open; retry later",
                [(b"retry-after", b"1")],
            )
            return
        session = _Session(caller, send, trio.current_time() + self.session_idle_s)
        self.sessions[session.session_id] = session  # no await since the cap check
        endpoint = f"{public_prefix(headers, self.policy)}{MESSAGES_PATH}?sessionId="
        try:
            with session.scope:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [*SSE_HEADERS, *cors],
                        "trailers": False,
                    }
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": sse_event((endpoint + session.session_id).encode(), b"endpoint"),
                        "more_body": True,
                    }
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_disconnect, session, receive)
                    nursery.start_soon(self._timers, session)
                    await serve_connection(
                        self.server,
                        session.conn,
                        session.inbox_recv,
                        drain_on_eof=False,
                        drain=self.drain,
                    )
                    nursery.cancel_scope.cancel()
                if self.drain.started.is_set():
                    await self._refuse_queued(session)
        finally:
            self._end(session)
            session.inbox_recv.close()
        if not session.client_gone:
            # Idle timeout or drained: end the stream cleanly (the chunked terminator).
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _refuse_queued(self, session: _Session) -> None:
        """Answer the requests still queued when a drained session ends.

        They were taken before the drain began and not yet routed: each gets the shutting-down
        error on the stream.
        """
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            while not session.ended:  # a session that ended otherwise writes nothing more
                try:
                    data = session.inbox_recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    return
                refused = self.drain.refusal(data, session.conn)
                if refused is not None:
                    await session.send_message(refused)

    def _end(self, session: _Session) -> None:
        """End a session at once: unlist it, close its inbox, cancel everything it runs."""
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        session.ended = True
        session.inbox.close()
        session.conn.cancel_all()
        session.scope.cancel()

    async def _watch_disconnect(self, session: _Session, receive: ASGIReceiveCallable) -> None:
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                session.client_gone = True
                self._end(session)
                return

    async def _timers(self, session: _Session) -> None:
        """Keep-alive comments and the idle timeout, in one task.

        (The drain ends a session by ending its ``serve_connection``.)
        """
        next_ping = trio.current_time() + self.keepalive_interval_s
        while True:
            await trio.sleep_until(min(next_ping, session.idle_deadline))
            now = trio.current_time()
            if now >= session.idle_deadline:
                self._end(session)
                return
            if now >= next_ping:
                await session.ping()
                next_ping = now + self.keepalive_interval_s

    # -- POST /api/mcp/messages -----------------------------------------------------------------

    async def _refuse_draining(
        self,
        send: ASGISendCallable,
        cors: list[tuple[bytes, bytes]],
        refused: bytes | None,
        session: _Session | None = None,
    ) -> None:
        """Answer a POST during the drain: 503 + ``Retry-After``.

        The JSON-RPC shutting-down error (``refused``) goes to the session's stream too, where
        the client awaits the answer; when the stream has ended the 503 is the only answer.
        """
        if refused is not None and session is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                await session.send_message(refused)
        await _refuse_draining_response(send, cors, refused)

    async def post_message(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Queue one client message on its session; answer 202, or say why not."""
        headers = Headers(scope["headers"])
        cors = await self._admit(scope, send, headers, "POST", MESSAGES_METHODS)
        if cors is None:
            return

        async def refuse(
            status: int, code: int, message: str, data: JsonObject | None = None
        ) -> None:
            await send_response(send, status, jsonrpc_error_body(code, message, data), headers=cors)

        session_id = _session_id(scope["query_string"])
        if session_id is None:
            await refuse(
                400,
                codes.INVALID_REQUEST,
                "Bad Request: sessionId is required; POST to the URI of the endpoint event",
            )
            return
        if not is_json_content_type(headers.get("content-type")):
            await refuse(
                415,
                codes.INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
            return
        caller = await self._caller(headers, send, cors)
        if caller is None:
            return
        draining = self.drain.started.is_set()
        session = self.sessions.get(session_id)
        if draining and (session is None or session.ended):
            await self._refuse_draining(send, cors, None)
            return
        if session is None or session.ended or session.caller != caller:
            await refuse(
                404,
                codes.INVALID_REQUEST,
                f"Session not found: open a new stream with GET {SSE_PATH}",
            )
            return
        too_large = (
            f"Payload Too Large: the body exceeds {self.policy.max_body_bytes} bytes "
            "(http.max_body_bytes)"
        )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.policy.max_body_bytes:
            await refuse(413, codes.INVALID_REQUEST, too_large)
            return
        try:
            body = await read_body(receive, self.policy.max_body_bytes)
        except BodyTooLarge:
            await refuse(413, codes.INVALID_REQUEST, too_large)
            return
        except ClientGone:
            return
        if not body.strip():
            await refuse(400, codes.PARSE_ERROR, "Parse error: the body is empty")
            return
        if self.drain.started.is_set():
            refused = self.drain.refusal(body, session.conn)
            if refused is not None:
                await self._refuse_draining(send, cors, refused, session)
                return
        try:
            await session.inbox.send(body)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            # The session ended while this POST was on its way: the message is not taken.
            if self.drain.started.is_set():
                await self._refuse_draining(send, cors, self.drain.refusal(body, session.conn))
                return
            await refuse(
                404,
                codes.INVALID_REQUEST,
                f"Session not found: open a new stream with GET {SSE_PATH}",
            )
            return
        session.idle_deadline = trio.current_time() + self.session_idle_s
        await send_response(
            send, 202, b"Accepted", content_type=b"text/plain; charset=utf-8", headers=cors
        )


async def _refuse_draining_response(
    send: ASGISendCallable, cors: list[tuple[bytes, bytes]], body: bytes | None
) -> None:
    """503 + ``Retry-After`` with ``body`` (default: the shutting-down error, ``id: null``)."""
    await send_response(
        send,
        503,
        body
        if body is not None
        else jsonrpc_error_body(
            codes.INTERNAL_ERROR,
            f"Service Unavailable: {SHUTDOWN_MESSAGE}",
            {"retryable": True, "retry_after_ms": DRAIN_RETRY_AFTER_S * 1000},
        ),
        headers=[_DRAIN_RETRY_AFTER, *cors],
    )


def _session_id(query_string: bytes) -> str | None:
    """The one non-empty ``sessionId`` of a query string, else ``None``."""
    values = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("sessionId", [])
    if len(values) != 1 or not values[0]:
        return None
    return values[0]
