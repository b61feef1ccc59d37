"""The WebSocket transport at ``GET /api/mcp/ws``: one MCP session per socket.

A lean ASGI websocket handler (no Quart on the path), with the same policy and authentication
hook as every HTTP transport.

Handshake (before anything is upgraded, in this order):

- ``Origin`` present and not allowed -> HTTP 403; ``Host`` not allowed -> HTTP 421 (the rules of
  :class:`~coremetry.http_edge.HttpPolicy`); the ``Authenticate`` hook raising -> HTTP 401
  with ``WWW-Authenticate: Bearer``; the server draining, or ``max_connections`` sockets already
  open -> HTTP 503 with ``Retry-After``.
- Clients that cannot send headers (browsers, the TypeScript SDK's
  ``WebSocketClientTransport``) present a single-use ticket instead: ``?ticket=<ticket>``
  from ``POST /api/mcp/ws-ticket`` (:mod:`coremetry.auth.ws_ticket`). The ticket stands for
  the credential that minted it, which is authenticated again here; an unknown, reused or
  expired ticket (or a repeated ``ticket`` parameter) -> HTTP 401 with a message saying so.
  The ticket is never logged.
- Refusals are real HTTP responses with a JSON-RPC error body (``id: null``), sent through the
  ASGI ``websocket.http.response`` extension, which hypercorn implements. Without the extension
  the handler falls back to ``websocket.close`` before accept, which hypercorn would turn into a
  bare 403 whatever the reason.
- The client must offer the ``mcp`` subprotocol (``Sec-WebSocket-Protocol: mcp``); we accept
  with ``mcp``. A client that does not offer it (none, or only others) — but passed every check
  above — is refused during the handshake with HTTP 400 and a JSON-RPC error body that says
  what to send. (Earlier versions upgraded such a socket and closed it at once with 1002; a
  client's close frame crossing that close raced hypercorn's own close of the connection and
  ended the process, issue 13 — see :mod:`coremetry.http_worker`. A browser script sees only a
  failed handshake, not the 400 or its body.) No refused caller is ever upgraded.

Session:

- One JSON-RPC message (or 2025-03-26 batch) per TEXT frame; every answer and notification is
  one text frame, written under a lock. Requests are served concurrently by
  :func:`coremetry.mcp.serve_connection` in a nursery owned by the handler, so
  ``notifications/cancelled`` reaches a running call and pipelined requests are answered as
  they complete, each with its own id. A frame that is not JSON gets ``-32700`` (id ``null``)
  and the socket stays usable.
- The client closing the socket (or vanishing) cancels every in-flight call — handlers see
  ``trio.Cancelled`` — and nothing more is sent.

Close codes (RFC 6455 §7.4.1), each with a short reason:

====== =====================================================================================
1000   normal: the client closed; hypercorn echoes its close frame
1001   going away: the server is shutting down. The close comes after the drain
       (:mod:`coremetry.transports.drain`): every call in flight on the socket is answered
       first — its result if it finishes within ``http.graceful_shutdown_s``, else the
       retryable shutdown error — and a request sent during the drain is answered with the
       JSON-RPC shutting-down error (``-32603``, ``retryable: true``)
1002   protocol error: not sent today (a missing ``mcp`` subprotocol is refused with 400)
1003   unsupported data: a binary frame
1008   policy violation: not sent today; every policy refusal happens before the upgrade
1009   message too big: a frame larger than ``websocket.max_message_bytes`` (UTF-8 bytes).
       hypercorn enforces its own ``websocket_max_message_size`` first (set to the same value
       by :func:`coremetry.server.hypercorn_config`, counting characters of text frames) and
       closes with 1009 without a reason; frames that pass it but exceed the byte cap (non-ASCII
       text) are closed here with a reason
1011   internal error: a bug in this handler (logged with an incident id)
====== =====================================================================================
"""

import logging
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, WebsocketScope

from coremetry.http_edge import (
    Authenticate,
    Headers,
    HttpPolicy,
    anonymous,
    jsonrpc_error_body,
    unauthorized_message,
)
from coremetry.mcp import Connection, Server, codes, serve_connection

from .drain import Drain

log = logging.getLogger("coremetry.transports.websocket")

SUBPROTOCOL: Final = "mcp"
"""The ``Sec-WebSocket-Protocol`` value a client must offer."""

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_UNSUPPORTED_DATA: Final = 1003
CLOSE_POLICY_VIOLATION: Final = 1008
CLOSE_MESSAGE_TOO_BIG: Final = 1009
CLOSE_INTERNAL_ERROR: Final = 1011

RETRY_AFTER_S: Final = 5
"""``Retry-After`` of a 503 refusal (server draining or at its connection cap), in seconds."""

_HTTP_RESPONSE_EXTENSION: Final = "websocket.http.response"
_MAX_REASON_BYTES: Final = 123
"""A close frame's payload is at most 125 bytes, two of which are the code (RFC 6455 §5.5)."""


class WebSocketTransport:
    """The ASGI handler of ``/api/mcp/ws`` (see the module docstring for the rules).

    Args:
        server: the dispatcher.
        policy: Origin/Host rules shared with the HTTP transports.
        authenticate: resolves the caller from the handshake headers; raising refuses (401).
        drain: the server's drain (:mod:`coremetry.transports.drain`): once it has begun, the
            handshake is refused with 503, and each socket answers its calls in flight then
            closes with 1001.
        max_message_bytes: the largest accepted text frame, in UTF-8 bytes (1009 above).
        max_connections: concurrent sockets; the handshake is refused with 503 above.
        redeem_ticket: turns the ``ticket`` query parameter into the credential headers it
            stands for (:meth:`coremetry.auth.TicketBook.redeem`), raising to refuse it (401).
            ``None``: the parameter is ignored and only headers authenticate.

    Attributes:
        active: the number of sockets currently serving a session.
    """

    def __init__(
        self,
        server: Server,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
        drain: Drain | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
        max_connections: int = 10_000,
        redeem_ticket: Callable[[str], Iterable[tuple[bytes, bytes]]] | None = None,
    ) -> None:
        self.server = server
        self.policy = policy
        self.authenticate = authenticate
        self.drain = drain if drain is not None else Drain()
        self.max_message_bytes = max_message_bytes
        self.max_connections = max_connections
        self.redeem_ticket = redeem_ticket
        self.active = 0

    async def __call__(
        self, scope: WebsocketScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one WebSocket connection, from the handshake to the close."""
        event = await receive()
        if event["type"] != "websocket.connect":
            return  # the client went away before the handshake reached us
        headers = Headers(scope["headers"])
        refused = self.policy.refusal(headers)
        if refused is not None:
            await _deny(scope, send, *refused)
            return
        credentials = headers
        ticket = _query_ticket(scope) if self.redeem_ticket is not None else None
        if ticket is not None and self.redeem_ticket is not None:
            try:
                credentials = Headers(self.redeem_ticket(ticket))
            except Exception as refusal:  # its reason goes to the log, never the ticket
                log.info("WebSocket ticket refused: %s", getattr(refusal, "reason", refusal))
                await _deny(
                    scope,
                    send,
                    401,
                    _ticket_message(refusal),
                    [self.policy.challenge(refusal, headers)],
                )
                return
        try:
            caller = await self.authenticate(credentials)
        except Exception as refusal:  # the auth layer's reason is logged there, never sent
            await _deny(
                scope,
                send,
                401,
                unauthorized_message(refusal),
                [self.policy.challenge(refusal, headers)],
            )
            return
        retry = [(b"retry-after", str(RETRY_AFTER_S).encode())]
        if self.drain.started.is_set():
            await _deny(scope, send, 503, "Service Unavailable: the server is shutting down", retry)
            return
        if self.active >= self.max_connections:
            await _deny(
                scope,
                send,
                503,
                f"Service Unavailable: {self.max_connections} WebSocket connections are open",
                retry,
            )
            return
        if SUBPROTOCOL not in scope["subprotocols"]:
            await _deny(
                scope,
                send,
                400,
                f"Bad Request: the WebSocket subprotocol {SUBPROTOCOL!r} is required "
                f"(send Sec-WebSocket-Protocol: {SUBPROTOCOL})",
            )
            return
        self.active += 1
        try:
            await send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL, "headers": []})
            socket = _Socket(send)
            conn = Connection(caller=caller, transport="ws", send=socket.send_text)

            async def still_valid() -> bool:
                # A socket outlives its handshake: re-check the credential on every message, so
                # a revoked token or an expired JWT stops working at once (the authenticator
                # caches verified tokens and checks revocation in memory, so this is cheap).
                try:
                    again = await self.authenticate(credentials)
                except Exception:
                    return False
                return again.subject == caller.subject and again.role == caller.role

            frames = _Frames(receive, socket, self.max_message_bytes, still_valid)
            await self._serve(conn, frames, socket)
        finally:
            self.active -= 1

    async def _serve(self, conn: Connection, frames: "_Frames", socket: "_Socket") -> None:
        """Run the session until the client leaves, a frame breaks the rules or we shut down.

        During the drain ``serve_connection`` answers every call in flight and returns once
        none is left; the socket then closes with 1001 (unless another close came first).
        """
        try:
            # skip_blank=False: an empty text frame is a message that is not JSON (-32700),
            # never silence the client would wait on (found by the fuzzer, bench/fuzz.py).
            await serve_connection(
                self.server, conn, frames, drain_on_eof=False, drain=self.drain, skip_blank=False
            )
            if self.drain.started.is_set():
                socket.begin_close(CLOSE_GOING_AWAY, "server shutting down")
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            conn.cancel_all()  # a write met a closed socket: the session is over either way
        except* Exception as group:
            incident = secrets.token_hex(4)
            log.error("WebSocket session failed (incident %s)", incident, exc_info=group)
            conn.cancel_all()
            socket.begin_close(CLOSE_INTERNAL_ERROR, f"internal error (incident {incident})")
        # Every task of the session has ended: nothing can write concurrently with the close.
        await socket.finish()


class _Socket:
    """The write side of one accepted socket: text frames under a lock, then exactly one close.

    Once a close is decided (:meth:`begin_close`) or the peer is gone (:meth:`peer_gone`),
    :meth:`send_text` raises ``trio.ClosedResourceError`` and nothing more is written but the
    close frame itself (:meth:`finish`).
    """

    def __init__(self, send: ASGISendCallable) -> None:
        self._send = send
        self._lock = trio.Lock()
        self._close: tuple[int, str] | None = None
        self._gone = False

    @property
    def open(self) -> bool:
        """Whether messages may still be written."""
        return self._close is None and not self._gone

    async def send_text(self, message: bytes) -> None:
        """Write one encoded JSON-RPC message as one text frame.

        Raises:
            trio.ClosedResourceError: the socket is closing or the client has left.
        """
        async with self._lock:
            if not self.open:
                raise trio.ClosedResourceError("the WebSocket is closed")
            await self._send({"type": "websocket.send", "bytes": None, "text": message.decode()})

    def begin_close(self, code: int, reason: str) -> None:
        """Decide the close code and reason (the first decision wins); stops further writes."""
        if self._close is None:
            self._close = (code, reason)

    def peer_gone(self) -> None:
        """Record that the client closed or vanished: no frame at all may follow."""
        self._gone = True

    async def finish(self) -> None:
        """Send the close frame decided earlier (1000 if none), unless the client is gone."""
        if self._gone:
            return
        self._gone = True
        code, reason = self._close if self._close is not None else (CLOSE_NORMAL, "")
        async with self._lock:
            await self._send({"type": "websocket.close", "code": code, "reason": reason})


class _Frames:
    """The client's text frames as UTF-8 bytes, one JSON-RPC message each.

    Ends on the client's close (or disconnect), on a binary frame (close 1003), on a frame
    above the byte cap (close 1009), and when the handshake's credential no longer verifies —
    revoked, expired, or its role changed (close 1008; the session's calls are cancelled).
    """

    def __init__(
        self,
        receive: ASGIReceiveCallable,
        socket: _Socket,
        max_bytes: int,
        still_valid: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self._receive = receive
        self._socket = socket
        self._max_bytes = max_bytes
        self._still_valid = still_valid

    def __aiter__(self) -> "_Frames":
        return self

    async def __anext__(self) -> bytes:
        while self._socket.open:
            event = await self._receive()
            if event["type"] == "websocket.disconnect":
                self._socket.peer_gone()
                break
            if event["type"] != "websocket.receive":
                continue
            text = event.get("text")
            if text is None:
                self._socket.begin_close(
                    CLOSE_UNSUPPORTED_DATA, "binary frames are not supported; send JSON as text"
                )
                break
            # A str has at least as many UTF-8 bytes as characters: skip encoding a huge one.
            data = None if len(text) > self._max_bytes else text.encode()
            if data is None or len(data) > self._max_bytes:
                self._socket.begin_close(
                    CLOSE_MESSAGE_TOO_BIG, f"message larger than {self._max_bytes} bytes"
                )
                break
            if self._still_valid is not None and not await self._still_valid():
                self._socket.begin_close(CLOSE_POLICY_VIOLATION, "credentials no longer valid")
                break
            return data
        raise StopAsyncIteration


TICKET_PARAMETER: Final = "ticket"
"""The query parameter that carries a single-use ticket (``/api/mcp/ws?ticket=…``)."""


def _query_ticket(scope: WebsocketScope) -> str | None:
    """The ``ticket`` query parameter, ``""`` when repeated or empty, ``None`` when absent."""
    query = scope.get("query_string", b"").decode("latin-1")
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get(TICKET_PARAMETER)
    if values is None:
        return None
    return values[0] if len(values) == 1 else ""


def _ticket_message(refusal: BaseException) -> str:
    state = "expired" if getattr(refusal, "expired", False) else "unknown or already used"
    return (
        f"Unauthorized: the WebSocket ticket is {state}; a ticket works once, for a short "
        "time: mint a new one with POST /api/mcp/ws-ticket just before connecting"
    )


async def _deny(
    scope: WebsocketScope,
    send: ASGISendCallable,
    status: int,
    message: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Refuse the handshake with an HTTP response (or a pre-accept close without the extension)."""
    extensions = scope.get("extensions") or {}
    if _HTTP_RESPONSE_EXTENSION not in extensions:
        reason = message.encode()[:_MAX_REASON_BYTES].decode(errors="ignore")
        await send({"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION, "reason": reason})
        return
    body = jsonrpc_error_body(codes.INVALID_REQUEST, message)
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [
                *headers,
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
