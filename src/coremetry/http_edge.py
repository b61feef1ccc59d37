r"""The HTTP edge every route shares (MCP transports, REST, OTLP): headers, policy, bodies, SSE.

Policy (``shared/reference/mcp-spec.md`` §2; ``shared/reference/field-failures.md`` B03, B13,
B15):

- ``Origin`` present and not allowed -> 403 (2025-11-25 ``basic/transports`` "Security
  Warning"). Loopback origins (``http(s)://localhost|127.0.0.1|[::1]`` on any port) are allowed,
  plus the configured list. A request without ``Origin`` (not a browser) is served.
- ``Host`` checked against an allow-list when the server is bound to loopback (DNS-rebinding
  protection) -> 421 Misdirected Request when it is not in the list.
- Bodies are capped (413), media types compared case-insensitively with parameters ignored
  (RFC 9110 §8.3.1).
- A response sent before the request body was read (a refusal: 401, 403, 413, 415, …) first
  reads the rest of the body and drops it (:class:`UnreadBody`), so the connection stays usable
  for the client's next request; when the rest is too large or too slow, the response says
  ``Connection: close`` instead, so no client sends a request on a connection being closed.
- SSE ``data:`` lines never contain a raw CR/LF, U+0085, U+2028 or U+2029: those are escaped in
  the JSON text (``\\u2028``), so no client's line splitter can break an event.
"""

import functools
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, Protocol

import trio
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGIReceiveEvent,
    ASGISendCallable,
    ASGISendEvent,
    HTTPScope,
)

from coremetry.mcp import ANONYMOUS_VIEWER, codes, wire
from coremetry.roles import Caller

JSON_TYPE: Final = b"application/json"
SSE_TYPE: Final = b"text/event-stream"

_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


class Headers:
    """Request headers from an ASGI scope: names lower-cased, values decoded as Latin-1.

    Repeated headers are joined with ``", "`` (RFC 9110 §5.3).
    """

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        values: dict[str, str] = {}
        for name, value in raw:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            values[key] = f"{values[key]}, {text}" if key in values else text
        self._values = values

    def get(self, name: str, default: str | None = None) -> str | None:
        """The header's value, or ``default`` when absent."""
        return self._values.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._values


def _host_name(authority: str) -> str:
    """``"localhost:8080"`` -> ``"localhost"``; ``"[::1]:80"`` -> ``"[::1]"``."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        end = authority.find("]")
        return authority[: end + 1] if end >= 0 else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def is_loopback_host(host: str) -> bool:
    """Whether a bind address or host name is loopback (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


_HOST_VERDICTS_MAX: Final = 256
"""Distinct ``Host`` values whose verdict :meth:`HttpPolicy.host_allowed` remembers."""


class HttpPolicy:
    """Origin and Host rules plus the body cap, shared by every HTTP transport.

    Args:
        bind_host: the address the server listens on (decides whether Host is checked).
        allowed_origins: extra allowed origins (exact ``scheme://host[:port]``, or with ``:*``
            for any port).
        allowed_hosts: extra allowed Host values (``name`` or ``name:port``, ``name:*``).
        max_body_bytes: the largest request body, in bytes.
        root_path: the prefix under which clients reach the server (behind a proxy).
    """

    def __init__(
        self,
        *,
        bind_host: str = "127.0.0.1",
        allowed_origins: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        max_body_bytes: int = 4 * 1024 * 1024,
        root_path: str = "",
    ) -> None:
        self.check_host = is_loopback_host(bind_host) or bool(list(allowed_hosts))
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.max_body_bytes = max_body_bytes
        self.root_path = root_path.rstrip("/")
        self._host_verdicts: dict[str, bool] = {}
        self.resource_metadata: Callable[[Headers], str] | None = None
        """The absolute URL of this server's OAuth protected-resource metadata (RFC 9728) for a
        request, when OAuth discovery is offered (set at assembly); every 401 names it."""

    def challenge(self, refusal: BaseException, headers: "Headers") -> tuple[bytes, bytes]:
        """The ``WWW-Authenticate`` header of a 401 for ``refusal`` on this request.

        :func:`challenge_for`, plus ``resource_metadata="<abs url>"`` (RFC 9728 §5.1; MCP
        2025-06-18 Authorization) when :attr:`resource_metadata` is set.
        """
        if self.resource_metadata is None:
            return challenge_for(refusal)
        return challenge_for(refusal, self.resource_metadata(headers))

    def origin_allowed(self, origin: str) -> bool:
        """Whether a present ``Origin`` header is allowed."""
        origin = origin.strip().rstrip("/").lower()
        if origin in self.allowed_origins:
            return True
        scheme, sep, authority = origin.partition("://")
        if not sep or scheme not in ("http", "https"):
            return False
        if f"{scheme}://{_host_name(authority)}:*" in self.allowed_origins:
            return True
        return _host_name(authority) in _LOOPBACK_NAMES

    def refusal(self, headers: "Headers") -> tuple[int, str] | None:
        """The one admission decision every HTTP transport applies before anything else.

        Returns:
            ``(403, message)`` for a present, disallowed ``Origin``; ``(421, message)`` for a
            ``Host`` outside the allow-list; ``None`` when the request may proceed.
        """
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return 403, f"Origin not allowed: {origin}"
        host = headers.get("host")
        if not self.host_allowed(host):
            return 421, f"Host not allowed: {host or ''}"
        return None

    def host_allowed(self, host: str | None) -> bool:
        """Whether the ``Host`` header is acceptable (always true when not checking)."""
        if not self.check_host:
            return True
        if host is None:
            return False
        verdict = self._host_verdicts.get(host)
        if verdict is None:
            # One verdict per distinct Host value (a server sees few); bounded, so a client
            # sending a new Host on every request cannot grow it.
            if len(self._host_verdicts) >= _HOST_VERDICTS_MAX:
                self._host_verdicts.clear()
            verdict = self._host_verdicts[host] = self._judge_host(host)
        return verdict

    def _judge_host(self, host: str) -> bool:
        host = host.strip().lower()
        name = _host_name(host)
        return (
            name in _LOOPBACK_NAMES
            or host in self.allowed_hosts
            or name in self.allowed_hosts
            or f"{name}:*" in self.allowed_hosts
        )


Authenticate = Callable[[Headers], Awaitable[Caller]]
"""Resolves the caller of an HTTP request or WebSocket handshake (the auth layer plugs in
here); raising refuses it with 401 and :data:`AUTH_CHALLENGE`, without leaking the reason."""


async def anonymous(headers: Headers) -> Caller:
    """The authenticator used until the auth layer is configured: everyone is a viewer."""
    return ANONYMOUS_VIEWER


AUTH_CHALLENGE: Final = (b"www-authenticate", b'Bearer realm="coremetry"')
"""The ``WWW-Authenticate`` header every 401 carries (RFC 9110 §11.6.1; DESIGN.md §4)."""

INVALID_TOKEN_CHALLENGE: Final = (
    b"www-authenticate",
    b'Bearer realm="coremetry", error="invalid_token"',
)
"""The challenge when a credential was presented but refused (RFC 6750 §3.1)."""


EXPIRED_TOKEN_CHALLENGE: Final = (
    b"www-authenticate",
    b'Bearer realm="coremetry", error="invalid_token", '
    b'error_description="The access token expired"',
)
"""The challenge when the credential presented has expired (RFC 6750 §3, §3.1)."""

HOW_TO_AUTHENTICATE: Final = (
    "send Authorization: Bearer <token>, with a service token or the session JWT that "
    "POST /api/auth/login returns for a user name and password"
)
"""How a client authenticates, in every 401's message (DESIGN.md §4)."""


def _is_expired(refusal: BaseException) -> bool:
    return bool(getattr(refusal, "expired", False))


def challenge_for(
    refusal: BaseException, resource_metadata: str | None = None
) -> tuple[bytes, bytes]:
    r"""The ``WWW-Authenticate`` header for an :data:`Authenticate` refusal.

    An exception with a true ``token_sent`` attribute (the auth layer's errors carry one) means
    a credential was presented and failed: ``error="invalid_token"`` is added, with an
    ``error_description`` when its true ``expired`` attribute says it expired. With
    ``resource_metadata`` (an absolute URL; ``"`` and ``\`` are dropped), the challenge ends with
    ``resource_metadata="<url>"`` (RFC 9728 §5.1). No ``scope`` is named: a client then asks for
    every scope the metadata lists, and the grant is capped at its user's role (MCP 2025-11-25
    Authorization, scope selection).
    """
    if resource_metadata is not None:
        base, value = challenge_for(refusal)
        safe = resource_metadata.replace("\\", "").replace('"', "")
        return base, value + f', resource_metadata="{safe}"'.encode("latin-1")
    if _is_expired(refusal):
        return EXPIRED_TOKEN_CHALLENGE
    return INVALID_TOKEN_CHALLENGE if getattr(refusal, "token_sent", False) else AUTH_CHALLENGE


def unauthorized_message(refusal: BaseException) -> str:
    """The text of a 401 for an :data:`Authenticate` refusal: what failed and how to authenticate.

    ``"Unauthorized: the credential has expired; ..."`` when the refusal's ``expired``
    attribute is true, ``"Unauthorized: the credential was refused; ..."`` when a credential
    was presented (``token_sent``), else ``"Unauthorized: ..."``; each ends with
    :data:`HOW_TO_AUTHENTICATE`. The auth layer's detailed reason is never included.
    """
    if _is_expired(refusal):
        return f"Unauthorized: the credential has expired; {HOW_TO_AUTHENTICATE}"
    if getattr(refusal, "token_sent", False):
        return f"Unauthorized: the credential was refused; {HOW_TO_AUTHENTICATE}"
    return f"Unauthorized: {HOW_TO_AUTHENTICATE}"


def media_types(header: str | None) -> list[tuple[str, float]]:
    """Parse an ``Accept``-style header into ``(type, q)`` pairs, lower-cased."""
    if not header:
        return []
    return list(_media_types(header))


@functools.lru_cache(maxsize=256)
def _media_types(header: str) -> tuple[tuple[str, float], ...]:
    # Clients send the same few Accept values on every request: parse each once (bounded).
    parsed: list[tuple[str, float]] = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces[0]:
            continue
        q = 1.0
        for param in pieces[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        parsed.append((pieces[0].lower(), q))
    return tuple(parsed)


def accepts(header: str | None, media_type: str) -> bool:
    """Whether an ``Accept`` header admits ``media_type`` (absent Accept admits everything)."""
    if header is None or not header.strip():
        return True
    major = media_type.split("/", 1)[0]
    for kind, q in _media_types(header):
        if q > 0 and kind in (media_type, f"{major}/*", "*/*"):
            return True
    return False


def is_json_content_type(header: str | None) -> bool:
    """Whether ``Content-Type`` is ``application/json`` (any case, any parameters)."""
    if header is None:
        return False
    return header.split(";", 1)[0].strip().lower() == "application/json"


class BodyTooLarge(Exception):
    """Raised by :func:`read_body` when the body exceeds the cap."""


class ClientGone(Exception):
    """Raised by :func:`read_body` when the client disconnected before the body ended."""


async def read_body(receive: ASGIReceiveCallable, limit_bytes: int) -> bytes:
    """Read an HTTP request body through ASGI ``receive``.

    Raises:
        BodyTooLarge: more than ``limit_bytes`` bytes arrived.
        ClientGone: the client disconnected first.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise ClientGone
        if event["type"] != "http.request":
            continue
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit_bytes:
            raise BodyTooLarge
        chunks.append(chunk)
        if not event.get("more_body", False):
            return b"".join(chunks)


UNREAD_BODY_MAX_BYTES: Final = 16 * 1024 * 1024
"""The most bytes of an unread request body :class:`UnreadBody` reads and drops before a
response; beyond it the response says ``Connection: close``."""
UNREAD_BODY_MAX_S: Final = 5.0
"""The longest :class:`UnreadBody` waits for the rest of an unread body, in seconds."""
BODY_STALL_S: Final = 30.0
"""The longest a request body may pause between two of its pieces, in seconds: a client that
sends a request head and then stops mid-body (a slow-body attack, or a client gone silent)
gets ``408 Request Timeout`` with ``Connection: close`` and its connection is freed."""


class UnreadBody:
    """One HTTP exchange's ASGI ``receive``/``send``, finishing the request body before a response.

    hypercorn (h11) closes the connection after a response when the request body has not been
    read to its end — what every refusal sent before reading the body (413 on a declared
    ``Content-Length`` over the cap, 401, 403, 415, …) leaves — and does so without
    ``Connection: close``: a client that reads the answer and reuses the connection at once
    (httpx's pool does) sends its next request into the close and gets "Server disconnected
    without sending a response" or a reset, with no answer (issue 13: ``bench/fuzz.py`` and
    ``bench/soak.py``). So when the handler starts its response before the body has ended,
    :meth:`send` first reads the rest and drops it — at most :data:`UNREAD_BODY_MAX_BYTES`
    bytes and :data:`UNREAD_BODY_MAX_S` seconds — and the connection is kept alive as after
    any answered request. A body declared larger than that, or not over in time, gets its
    response with ``Connection: close`` (RFC 9112 §9.6): the client then opens a new
    connection for its next request. A disconnect seen while reading is handed to the handler
    by its next :meth:`receive`.

    Args:
        scope: the request's ASGI scope (its ``content-length``, if any, is read).
        receive: hypercorn's ``receive``.
        send: hypercorn's ``send``.
    """

    __slots__ = (
        "_declared",
        "_disconnected",
        "_ended",
        "_receive",
        "_receive_nowait",
        "_received",
        "_send",
        "_started",
    )

    def __init__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        self._receive = receive
        self._receive_nowait = _nowait_of(receive)
        self._received = 0
        self._send = send
        self._ended = False
        self._disconnected = False
        self._started = False
        self._declared: int | None = None
        for name, value in scope["headers"]:  # only Content-Length: no Headers dict per request
            if name.lower() == b"content-length":
                self._declared = int(value) if value.isdigit() else None

    async def receive(self) -> ASGIReceiveEvent:
        """The next ASGI event of the request (``http.disconnect`` for good once one was seen).

        While the body has not ended, a pause longer than :data:`BODY_STALL_S` answers the
        request ``408 Request Timeout`` with ``Connection: close`` (unless a response has
        begun) and hands the handler ``http.disconnect``: it stops as for a client gone.
        """
        if self._disconnected:
            return {"type": "http.disconnect"}
        if self._ended:
            event = await self._receive()
        else:
            ready = self._body_event_ready()
            if ready is not None:
                self._note(ready)
                return ready
            if self._declared is not None and self._received >= self._declared:
                # Every declared byte is in: only the end-of-body event is still to come (or a
                # disconnect), queued by hypercorn as soon as h11 has parsed the last byte.
                event = await self._receive()
                self._note(event)
                return event
            with trio.move_on_after(BODY_STALL_S) as waited:
                event = await self._receive()
            if waited.cancelled_caught:
                self._disconnected = True
                if not self._started:
                    self._started = True
                    await send_response(
                        self._send,
                        408,
                        f"Request Timeout: no part of the request body arrived for "
                        f"{BODY_STALL_S:g} s\n".encode(),
                        content_type=b"text/plain; charset=utf-8",
                        headers=[(b"connection", b"close")],
                    )
                return {"type": "http.disconnect"}
        self._note(event)
        return event

    async def send(self, message: ASGISendEvent) -> None:
        """Send ``message``; before a response starts, finish the request body (class docstring)."""
        if message["type"] == "http.response.start":
            self._started = True
        if (
            message["type"] == "http.response.start"
            and not (self._ended or self._disconnected)
            and not await self._finish_body()
        ):
            message = {
                "type": "http.response.start",
                "status": message["status"],
                "headers": [*message["headers"], (b"connection", b"close")],
                "trailers": message.get("trailers", False),
            }
        await self._send(message)

    def _body_event_ready(self) -> ASGIReceiveEvent | None:
        """The next event if it already waits in hypercorn's queue, else ``None``.

        A body that came with its head (nearly every JSON-RPC POST) is read without the stall
        timer's cancel scope, which cost ~15 % of a ``tools/call``'s CPU in the app
        (``bench/http_echo.py`` README section); only a body still in flight is timed.
        """
        if self._receive_nowait is None:
            return None
        try:
            return self._receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return None

    def _note(self, event: ASGIReceiveEvent) -> int:
        if event["type"] == "http.disconnect":
            self._disconnected = True
        elif event["type"] == "http.request":
            if not event.get("more_body", False):
                self._ended = True
            size = len(event.get("body", b""))
            self._received += size
            return size
        return 0

    async def _finish_body(self) -> bool:
        """Read and drop the rest of the body; whether the connection can be kept."""
        if self._declared is not None and self._declared > UNREAD_BODY_MAX_BYTES:
            return False
        dropped = 0
        with trio.move_on_after(UNREAD_BODY_MAX_S):
            while not self._ended and not self._disconnected and dropped <= UNREAD_BODY_MAX_BYTES:
                dropped += self._note(await self._receive())
        return self._ended or self._disconnected


def _nowait_of(receive: ASGIReceiveCallable) -> Callable[[], ASGIReceiveEvent] | None:
    """``receive``'s non-blocking twin, when ``receive`` is a trio memory channel's ``receive``.

    hypercorn's trio worker hands each request's app the bound ``receive`` of a
    ``trio.MemoryReceiveChannel`` (``hypercorn/trio/task_group.py``, ``spawn_app``); its
    ``receive_nowait`` returns a queued event or raises ``trio.WouldBlock``. Any other
    ``receive`` (another server, a test) gets ``None``: every read is then timed.
    """
    owner: object = getattr(receive, "__self__", None)
    if isinstance(owner, trio.MemoryReceiveChannel) and getattr(receive, "__name__", "") == (
        "receive"
    ):
        nowait: Callable[[], ASGIReceiveEvent] = owner.receive_nowait
        return nowait
    return None


def jsonrpc_error_body(
    code: int,
    message: str,
    data: wire.JsonObject | None = None,
    *,
    request_id: wire.RequestId | None = None,
) -> bytes:
    """A JSON-RPC error object for HTTP-level refusals.

    Args:
        code: the JSON-RPC error code.
        message: the error message.
        data: optional ``error.data``.
        request_id: the refused request's id when it could be read (JSON-RPC 2.0 §5: an error
            carries the request's id; ``null`` only when it could not be determined).
    """
    error = wire.ErrorObject(code=code, message=message)
    if data is not None:
        error.data = data
    return wire.ENCODER.encode(wire.ErrorResponse(id=request_id, error=error))


async def send_response(
    send: ASGISendCallable,
    status: int,
    body: bytes = b"",
    *,
    content_type: bytes | None = JSON_TYPE,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send a complete response (status, headers, one body chunk)."""
    out: list[tuple[bytes, bytes]] = list(headers)
    if content_type is not None and body:
        out.append((b"content-type", content_type))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out, "trailers": False})
    await send({"type": "http.response.body", "body": body, "more_body": False})


CORS_ALLOW_HEADERS: Final = (
    b"authorization, content-type, accept, mcp-protocol-version, mcp-session-id, "
    b"last-event-id, mcp-method, mcp-name"
)
CORS_EXPOSE_HEADERS: Final = b"www-authenticate, mcp-protocol-version, retry-after"


def cors_headers(origin: str | None, policy: HttpPolicy) -> list[tuple[bytes, bytes]]:
    """CORS response headers for an allowed ``Origin`` (none for absent or refused ones)."""
    if origin is None or not policy.origin_allowed(origin):
        return []
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", CORS_EXPOSE_HEADERS),
        (b"vary", b"origin"),
    ]


async def send_preflight(
    send: ASGISendCallable, headers: Headers, policy: HttpPolicy, methods: bytes
) -> None:
    """Answer a CORS preflight (``OPTIONS``) without authentication.

    Allowed origin -> 204 with the allow headers; refused origin -> 403 without any
    ``Access-Control-*`` header; no ``Origin`` -> 204 with ``Allow``.
    """
    origin = headers.get("origin")
    if origin is not None and not policy.origin_allowed(origin):
        await send_response(send, 403, jsonrpc_error_body(-32600, f"Origin not allowed: {origin}"))
        return
    extra = [*cors_headers(origin, policy), (b"allow", methods)]
    if origin is not None:
        extra += [
            (b"access-control-allow-methods", methods),
            (b"access-control-allow-headers", CORS_ALLOW_HEADERS),
            (b"access-control-max-age", b"600"),
        ]
    await send_response(send, 204, headers=extra)


_SSE_UNSAFE: Final[Mapping[bytes, bytes]] = {
    "\u2028".encode(): b"\\u2028",
    "\u2029".encode(): b"\\u2029",
    "\u0085".encode(): b"\\u0085",
    b"\r": b"\\r",
    b"\n": b"\\n",
}


def sse_event(data: bytes, event: bytes = b"message") -> bytes:
    """Frame one JSON message as an SSE event whose ``data:`` is a single safe line.

    ``data`` is compact JSON (msgspec already escapes control characters inside strings); the
    escapes here only matter for U+0085/U+2028/U+2029, which msgspec writes raw and which some
    line splitters treat as line ends. Escaping them keeps the JSON identical in meaning.
    """
    for raw, escaped in _SSE_UNSAFE.items():
        if raw in data:
            data = data.replace(raw, escaped)
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


SSE_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-type", SSE_TYPE),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)


_PREFIX_CHARS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@%/"
)


class HeaderLookup(Protocol):
    """Anything with a header lookup by lower-case name (:class:`Headers`, the auth layer's)."""

    def get(self, name: str, /) -> str | None:
        """The header's value, or ``None`` if absent."""
        ...


def public_prefix(headers: HeaderLookup, policy: HttpPolicy) -> str:
    """The path prefix clients reach the server under, for URIs we announce to them.

    A sane ``X-Forwarded-Prefix`` (set by a reverse proxy) wins over ``policy.root_path``. Sane
    means: starts with ``/``, holds no ``//`` (a protocol-relative URI would name another
    host), and only RFC 3986 path characters (so no CR/LF, spaces, ``?``, ``#`` or a backslash).
    An insane value is ignored. The result never ends with ``/`` (``""`` for the root).
    """
    value = headers.get("x-forwarded-prefix")
    if value is not None:
        value = value.strip()
        if value.startswith("/") and "//" not in value and _PREFIX_CHARS.issuperset(value):
            return value.rstrip("/")
    return policy.root_path


def _jsonrpc_refusal(message: str) -> bytes:
    return jsonrpc_error_body(codes.INVALID_REQUEST, message)


async def admit(
    scope: HTTPScope,
    send: ASGISendCallable,
    headers: Headers,
    policy: HttpPolicy,
    *,
    method: str,
    allow: bytes,
    error_body: Callable[[str], bytes] = _jsonrpc_refusal,
    not_allowed: str | None = None,
) -> list[tuple[bytes, bytes]] | None:
    """The admission every HTTP endpoint applies first, in this order.

    1. :meth:`HttpPolicy.refusal` (403 Origin, 421 Host);
    2. ``OPTIONS`` -> the CORS preflight (:func:`send_preflight`), without authentication;
    3. any method but ``method`` -> 405 with ``Allow`` (RFC 9110 §15.5.6).

    Args:
        scope: the request's ASGI scope.
        send: ASGI ``send``.
        headers: the request's headers.
        policy: the Origin/Host rules.
        method: the one method the endpoint serves.
        allow: the ``Allow`` value (e.g. ``b"POST, OPTIONS"``).
        error_body: renders a refusal message as the endpoint's error body (JSON-RPC error
            objects by default; the REST endpoints use their own shape).
        not_allowed: the 405 message (default: names the method and ``allow``).

    Returns:
        The CORS headers for the answer when the request may proceed, or ``None`` when it has
        already been answered.
    """
    refused = policy.refusal(headers)
    if refused is not None:
        status, message = refused
        await send_response(send, status, error_body(message))
        return None
    if scope["method"] == "OPTIONS":
        await send_preflight(send, headers, policy, allow)
        return None
    cors = cors_headers(headers.get("origin"), policy)
    if scope["method"] != method:
        message = not_allowed or (
            f"Method {scope['method']} not allowed here (allowed: {allow.decode()})"
        )
        await send_response(send, 405, error_body(message), headers=[(b"allow", allow), *cors])
        return None
    return cors
