"""Stateless Streamable HTTP at ``POST /api/mcp``: one POST carries one message, one answer.

Both eras on one endpoint (``shared/reference/mcp-spec.md`` §2; 2025-11-25 and 2026-07-28
``basic/transports``):

- An ``initialize`` (or a request without per-request ``_meta``) is served in the handshake era;
  ``MCP-Protocol-Version`` names the negotiated revision (absent -> 2025-03-26; a value we do not
  know -> 400). JSON-RPC batches are accepted only at 2025-03-26.
- A request whose ``params._meta`` names a protocol version is served statelessly (2026-07-28):
  ``MCP-Protocol-Version`` must equal it, ``Mcp-Method`` must equal ``method`` and ``Mcp-Name``
  must equal ``params.name`` (``tools/call``, ``prompts/get``) or ``params.uri``
  (``resources/read``); a mismatch is HTTP 400 + ``-32020``. Header values may be
  ``=?base64?…?=`` encoded. Unknown methods (and those the revision removed: ``ping``,
  ``initialize``…) are HTTP 404 + ``-32601`` whatever their params, ``_meta`` missing or
  undecodable included; bad params of a known method keep their status (the core decides).
- No ``Mcp-Session-Id`` is minted or required. ``GET``/``DELETE``/``PUT`` -> 405 with ``Allow``.
- Notifications and client responses -> 202 with an empty body.
- The answer is ``application/json``, or ``text/event-stream`` when the client accepts it and
  the call sends notifications (progress, log messages, server requests) before its result —
  the stream then ends after the result. A client that only accepts ``text/event-stream`` always
  gets a stream.
- Closing the response (client disconnect) cancels the call: its cancel scope ends, no more
  work is done, nothing more is written. (That is the 2026-07-28 cancellation; it is also what
  the SDK client does there.) A handshake-era ``notifications/cancelled`` comes on a POST of
  its own, which shares no session with the call's POST: it is accepted (202) and cannot reach
  the call, which ends at its deadline or when its POST is closed. Matching it by request id
  alone is deliberately not done: without sessions, two clients of one principal (or any two
  anonymous clients) reuse the same small ids, and one would cancel the other's call.
- When the server starts draining, ``Server.end_subscriptions()`` makes every
  ``subscriptions/listen`` call answer ``SubscriptionsListenResult``, which ends its stream
  cleanly (they have no natural end). Every other call may finish within
  ``http.graceful_shutdown_s``; one still running then is cancelled and answered with a
  retryable shutdown error, and new requests get 503 with ``Retry-After``
  (:mod:`coremetry.transports.drain`).
"""

import base64
import binascii
import logging
import math
from collections import deque
from typing import Final

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope
from msgspec import UNSET, UnsetType

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
    read_body,
    send_response,
    sse_event,
    unauthorized_message,
)
from coremetry.mcp import (
    Connection,
    PendingBatch,
    PendingCall,
    Reply,
    Server,
    codes,
    versions,
)
from coremetry.mcp.wire import JsonObject, RequestId
from coremetry.supervision import contained

from .drain import RETRY_AFTER_S as DRAIN_RETRY_AFTER_S
from .drain import SHUTDOWN_MESSAGE, Drain

ALLOWED_METHODS: Final = b"POST, OPTIONS"

log: Final = logging.getLogger("coremetry.transports.streamable_http")


class _PeekMeta(msgspec.Struct):
    protocol_version: str | UnsetType = msgspec.field(
        default=UNSET, name="io.modelcontextprotocol/protocolVersion"
    )


class _PeekParams(msgspec.Struct):
    name: object = None
    uri: object = None
    task_id: object = msgspec.field(default=None, name="taskId")
    arguments: msgspec.Raw = msgspec.Raw(b"null")  # decoded only for x-mcp-header tools
    meta: _PeekMeta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class _Peek(msgspec.Struct):
    """What the transport needs from the body before the core handles it (header checks)."""

    id: object = None
    method: object = None
    params: _PeekParams | UnsetType = UNSET

    @property
    def request_id(self) -> RequestId | None:
        """The request's id when it is a valid JSON-RPC id (string or integer), else ``None``."""
        value = self.id
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    @property
    def meta_version(self) -> str | None:
        """The ``_meta`` protocol version (``io.modelcontextprotocol/protocolVersion``), if any."""
        params = self.params
        if isinstance(params, UnsetType) or isinstance(params.meta, UnsetType):
            return None
        version = params.meta.protocol_version
        return None if isinstance(version, UnsetType) else version


_PEEK: Final = msgspec.json.Decoder(_Peek)


def _peek(body: bytes) -> _Peek | None:
    """Decode what the header checks need; ``None`` when the body is not a JSON-RPC object.

    An undecodable body is left to the core, which answers it with the right JSON-RPC error.
    """
    try:
        return _PEEK.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


_NAME_PARAM: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # The tasks extension (SEP-2663 "Routing Headers"): Mcp-Name carries params.taskId.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


def decode_header_value(value: str) -> str | None:
    """Decode an MCP header value; ``=?base64?<b64>?=`` carries UTF-8 (2026-07-28).

    Returns:
        The decoded text, or ``None`` when the base64 form is malformed.
    """
    value = value.strip()
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
    return value


class StreamableHttp:
    """The ASGI handler of ``/api/mcp`` (stateless Streamable HTTP, both eras).

    Args:
        server: the dispatcher.
        policy: Origin/Host/body-size rules.
        authenticate: resolves the caller from the request headers.
        keepalive_interval_s: SSE comment interval on answers that stream, in seconds.
        drain: the server's drain (:mod:`coremetry.transports.drain`): once it has begun, new
            requests get 503 and calls still running at its deadline get a shutdown answer.
    """

    def __init__(
        self,
        server: Server,
        policy: HttpPolicy,
        *,
        authenticate: Authenticate = anonymous,
        keepalive_interval_s: float = 15.0,
        drain: Drain | None = None,
    ) -> None:
        self.server = server
        self.policy = policy
        self.authenticate = authenticate
        self.keepalive_interval_s = keepalive_interval_s
        self.drain = drain if drain is not None else Drain()
        self._supervisor = _Supervisor()

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Serve one HTTP request (see the module docstring for the rules)."""
        headers = Headers(scope["headers"])
        cors = await admit(
            scope,
            send,
            headers,
            self.policy,
            method="POST",
            allow=ALLOWED_METHODS,
            not_allowed=f"Method {scope['method']} not allowed: this endpoint is stateless; "
            "POST one JSON-RPC message per request",
        )
        if cors is None:
            return
        if self.drain.started.is_set():
            await send_response(
                send,
                503,
                jsonrpc_error_body(
                    codes.INTERNAL_ERROR,
                    f"Service Unavailable: {SHUTDOWN_MESSAGE}",
                    {"retryable": True, "retry_after_ms": DRAIN_RETRY_AFTER_S * 1000},
                ),
                headers=[(b"retry-after", str(DRAIN_RETRY_AFTER_S).encode()), *cors],
            )
            return
        await self._post(headers, receive, send, cors)

    async def _post(
        self,
        headers: Headers,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        cors: list[tuple[bytes, bytes]],
    ) -> None:
        async def refuse(
            status: int, code: int, message: str, data: JsonObject | None = None
        ) -> None:
            await send_response(send, status, jsonrpc_error_body(code, message, data), headers=cors)

        if not is_json_content_type(headers.get("content-type")):
            await refuse(
                415,
                codes.INVALID_REQUEST,
                "Unsupported Media Type: send the JSON-RPC message as application/json",
            )
            return
        accept = headers.get("accept")
        if accept is not None and not accept.strip():
            accept = None  # a blank Accept is an absent one (RFC 9110 §12.5.1)
        json_ok = accepts(accept, "application/json")
        # No Accept: the client never said it reads SSE, so it gets plain JSON answers.
        sse_ok = accept is not None and accepts(accept, "text/event-stream")
        if not json_ok and not sse_ok:
            await refuse(
                406,
                codes.INVALID_REQUEST,
                "Not Acceptable: accept application/json and/or text/event-stream",
            )
            return
        try:
            caller = await self.authenticate(headers)
        except Exception as refusal:  # the auth layer's reason is logged there, never sent
            # RFC 9110 §11.6.1: a 401 carries WWW-Authenticate (DESIGN.md §4).
            await send_response(
                send,
                401,
                jsonrpc_error_body(codes.INVALID_REQUEST, unauthorized_message(refusal)),
                headers=[self.policy.challenge(refusal, headers), *cors],
            )
            return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.policy.max_body_bytes:
            await refuse(
                413,
                codes.INVALID_REQUEST,
                f"Payload Too Large: the body exceeds {self.policy.max_body_bytes} bytes "
                "(http.max_body_bytes)",
            )
            return
        try:
            body = await read_body(receive, self.policy.max_body_bytes)
        except BodyTooLarge:
            await refuse(
                413,
                codes.INVALID_REQUEST,
                f"Payload Too Large: the body exceeds {self.policy.max_body_bytes} bytes "
                "(http.max_body_bytes)",
            )
            return
        except ClientGone:
            return

        peek = _peek(body)
        request_id = peek.request_id if peek is not None else None
        header_version = headers.get("mcp-protocol-version")
        if header_version is not None:
            header_version = header_version.strip()
        # A 2026-07-28 request whose headers disagree with its body is a mismatch first (the
        # client disagrees with itself), whatever the header says; only then is the header's
        # revision judged on its own.
        mismatch = _header_mismatch(headers, peek, header_version) or _param_mismatch(
            headers, peek, self.server
        )
        if mismatch is not None:
            await send_response(
                send,
                400,
                jsonrpc_error_body(codes.HEADER_MISMATCH, mismatch, request_id=request_id),
                headers=cors,
            )
            return
        if header_version is not None and header_version not in versions.ALL_VERSIONS:
            await send_response(
                send,
                400,
                jsonrpc_error_body(
                    codes.UNSUPPORTED_PROTOCOL_VERSION,
                    f"Unsupported MCP-Protocol-Version: {header_version}",
                    {"supported": list(versions.ALL_VERSIONS), "requested": header_version},
                    request_id=request_id,
                ),
                headers=cors,
            )
            return

        stream = _ResponseStream(send, cors, self.keepalive_interval_s)
        conn = Connection(
            caller=caller,
            transport="http",
            send=stream.send_message if sse_ok else None,
            protocol_version=header_version or versions.DEFAULT_WITHOUT_HEADER,
        )
        outcome = self.server.receive(body, conn)
        if isinstance(outcome, PendingCall | PendingBatch):
            pending = outcome
            drain = self.drain
            drain.track(pending)
            try:
                outcome = await _run_until_disconnect(pending, receive, stream, self._supervisor)
            finally:
                drain.untrack(pending)
            if stream.closed:
                return
            if outcome is None and drain.was_cut(pending):
                outcome = Reply(drain.cut_reply(body, conn))
        if outcome is None:
            if stream.started:
                await stream.finish(None)
            else:
                await send_response(send, 202, headers=cors, content_type=None)
            return
        if stream.started or (not json_ok and outcome.http_status == 200):
            await stream.finish(outcome.body)
            return
        await send_response(send, outcome.http_status, outcome.body, headers=cors)


def _header_mismatch(
    headers: Headers, peek: _Peek | None, header_version: str | None
) -> str | None:
    """The 2026-07-28 header/body consistency rules; a message when they are broken.

    Only requests (and notifications) whose ``_meta`` names a protocol version are checked; a
    body the transport cannot peek into is left to the core.
    """
    if peek is None:
        return None
    meta_version = peek.meta_version
    if meta_version is None or isinstance(peek.params, UnsetType):
        return None
    params = peek.params
    if header_version is None:
        return "Header mismatch: MCP-Protocol-Version is required for a 2026-07-28 request"
    if header_version != meta_version:
        return (
            f"Header mismatch: MCP-Protocol-Version {header_version!r} differs from "
            f"_meta protocolVersion {meta_version!r}"
        )
    if not isinstance(peek.method, str):
        return None
    method_header = headers.get("mcp-method")
    if method_header is None:
        return "Header mismatch: Mcp-Method is required"
    if decode_header_value(method_header) != peek.method:
        return f"Header mismatch: Mcp-Method {method_header!r} differs from method {peek.method!r}"
    key = _NAME_PARAM.get(peek.method)
    if key is not None:
        expected = {"name": params.name, "uri": params.uri, "taskId": params.task_id}[key]
        name_header = headers.get("mcp-name")
        if not isinstance(expected, str):
            return None  # the core rejects the params themselves
        if name_header is None:
            return f"Header mismatch: Mcp-Name is required for {peek.method}"
        if decode_header_value(name_header) != expected:
            return f"Header mismatch: Mcp-Name differs from params.{key}"
    return None


def _param_mismatch(headers: Headers, peek: _Peek | None, server: Server) -> str | None:
    """SEP-2243 custom headers of a 2026-07-28 ``tools/call``; a message when they are broken.

    A tool whose input schema marks arguments with ``x-mcp-header`` gets each such argument
    present in the body in the header ``Mcp-Param-<name>`` too (``=?base64?…?=`` decoded),
    with the same value (a number or boolean as its JSON text). A missing, undecodable or
    different header is a mismatch, and so is a header for an argument the body leaves out.
    """
    if peek is None or peek.method != "tools/call" or isinstance(peek.params, UnsetType):
        return None
    params = peek.params
    if peek.meta_version is None or not isinstance(params.name, str):
        return None
    wanted = server.param_headers(params.name)
    if not wanted:
        return None
    try:
        arguments = msgspec.json.decode(params.arguments)
    except msgspec.DecodeError:
        return None  # the core rejects the params themselves
    if not isinstance(arguments, dict):
        arguments = {}
    for argument, suffix in wanted.items():
        raw_header = headers.get(f"mcp-param-{suffix.lower()}")
        if argument not in arguments:
            if raw_header is not None:
                return f"Header mismatch: Mcp-Param-{suffix} is set but arguments.{argument} is not"
            continue
        if raw_header is None:
            return f"Header mismatch: Mcp-Param-{suffix} is required (arguments.{argument})"
        decoded = decode_header_value(raw_header)
        if decoded is None:
            return f"Header mismatch: Mcp-Param-{suffix} is not valid =?base64?...?= text"
        value = arguments[argument]
        expected = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        if decoded != expected:
            return f"Header mismatch: Mcp-Param-{suffix} differs from arguments.{argument}"
    return None


class _ResponseStream:
    """Starts an SSE response lazily, on the first notification a call sends."""

    def __init__(
        self, send: ASGISendCallable, cors: list[tuple[bytes, bytes]], keepalive_s: float
    ) -> None:
        self._send = send
        self._cors = cors
        self._lock = trio.Lock()
        self.keepalive_s = keepalive_s
        self.started = False
        self.closed = False

    async def _start(self) -> None:
        if not self.started:
            self.started = True
            await self._send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [*SSE_HEADERS, *self._cors],
                    "trailers": False,
                }
            )

    async def send_message(self, message: bytes) -> None:
        """Send one JSON-RPC message as an SSE ``message`` event (starting the stream)."""
        async with self._lock:
            if self.closed:
                raise trio.ClosedResourceError("the response has ended")
            await self._start()
            await self._send(
                {"type": "http.response.body", "body": sse_event(message), "more_body": True}
            )

    async def keepalive(self) -> None:
        """Send ``: ping`` comments while the stream is open and idle."""
        while True:
            await trio.sleep(self.keepalive_s)
            async with self._lock:
                if self.started and not self.closed:
                    await self._send(
                        {"type": "http.response.body", "body": b": ping\n\n", "more_body": True}
                    )

    async def finish(self, last: bytes | None) -> None:
        """Send the final message (if any) and end the stream."""
        async with self._lock:
            await self._start()
            body = sse_event(last) if last is not None else b""
            self.closed = True
            await self._send({"type": "http.response.body", "body": body, "more_body": False})


class _Call:
    """What a watcher needs of one call in flight: the call, its ``receive`` and its stream."""

    __slots__ = ("pending", "receive", "stream")

    def __init__(
        self,
        pending: PendingCall | PendingBatch,
        receive: ASGIReceiveCallable,
        stream: _ResponseStream,
    ) -> None:
        self.pending = pending
        self.receive = receive
        self.stream = stream


class _Watched:
    """One call in flight, as the :class:`_Supervisor` sees it.

    The supervisor's queue keeps an entry until its grace has passed, answered or not: at
    thousands of calls a second that is thousands of entries. An answered entry drops its
    :class:`_Call` (the call, its context and closures), so the queue holds only small
    husks; the cyclic garbage collector, which traverses every container that outlives a
    collection, would otherwise walk a second's worth of finished calls again and again.
    """

    __slots__ = ("call", "due", "scope")

    def __init__(self, call: _Call, due: float) -> None:
        self.call: _Call | None = call
        self.due = due
        self.scope: trio.CancelScope | None = None
        """The watcher's scope, made when a watcher is spawned (most calls never get one)."""

    def watch(self) -> trio.CancelScope:
        """The scope a watcher runs in (cancelled by :meth:`finish`)."""
        self.scope = trio.CancelScope()
        return self.scope

    def finish(self) -> None:
        """The call answered: stop watching it (and its keep-alive); let go of the call."""
        self.call = None
        if self.scope is not None:
            self.scope.cancel()


class _Supervisor:
    """One long-lived task that watches the calls still running after ``grace_s``.

    A dropped response must cancel its call, and an SSE answer needs keep-alive comments; both
    take a task. Spawning and cancelling two tasks per request cost more CPU than the rest of a
    ``tools/call`` (``bench/http_echo.py``: 0.63-0.69x of the floor's req/s), while almost every
    call answers within milliseconds. So a request only registers itself; this supervisor (a
    trio system task, started on first use in each trio run) spawns a watcher for those still
    running after ``grace_s``. A disconnect during the first ``grace_s`` of a call is noticed
    when the grace ends — the call is cancelled then; nothing is written to a closed response.

    The grace is counted in wall time, and under load a call that costs a millisecond of CPU
    waits its turn behind every other request on the core: at 64 concurrent keep-alive clients
    on one core a quick call spends 50-90 ms in the run queue. A grace of 20 ms then spawned a
    watcher for nearly every call — the cost this supervisor exists to avoid (1,253 against
    840 µs of CPU per request, ``bench/http_echo.py``, c=64). One second is past the queueing
    of any load the server can answer; a client gone sooner stops its call when the second ends.
    """

    def __init__(self, grace_s: float = 1.0) -> None:
        self.grace_s = grace_s
        self._queue: deque[_Watched] = deque()
        self._wakeup = trio.Event()
        self._root: trio.lowlevel.Task | None = None

    def register(self, entry: _Watched) -> None:
        """Queue a call for watching (starts the supervisor task if this run has none)."""
        root = trio.lowlevel.current_root_task()
        if self._root is not root:
            self._root = root
            self._queue.clear()
            self._wakeup = trio.Event()
            trio.lowlevel.spawn_system_task(self._run, name="coremetry.http.supervisor")
        self._queue.append(entry)
        self._wakeup.set()

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                if not self._queue:
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
                    continue
                entry = self._queue[0]
                call = entry.call
                if call is None:
                    self._queue.popleft()
                    continue
                delay = entry.due - trio.current_time()
                if delay > 0:
                    await trio.sleep(delay)
                    continue
                self._queue.popleft()
                nursery.start_soon(_watch_contained, entry.watch(), call)


async def _watch_contained(scope: trio.CancelScope, call: _Call) -> None:
    """:func:`_watch`, contained: a failing watcher is logged and its call cancelled.

    The supervisor is a trio *system* task: an exception escaping one ends the whole run
    (``TrioInternalError``), i.e. the process. A watcher that fails can no longer see its
    client leave, so its call is cancelled; nothing else is touched.
    """
    with contained("Streamable HTTP call watcher", log) as incident:
        await _watch(scope, call)
    if incident.id is not None:
        call.stream.closed = True
        call.pending.cancel()


async def _watch(scope: trio.CancelScope, call: _Call) -> None:
    """Cancel the call when its client disconnects; keep its SSE answer alive meanwhile.

    ``scope`` is the entry's: cancelled when the call answers.
    """
    stream = call.stream
    with scope:
        async with trio.open_nursery() as nursery:
            if stream.keepalive_s > 0 and math.isfinite(stream.keepalive_s):
                nursery.start_soon(stream.keepalive)
            while True:
                event = await call.receive()
                if event["type"] == "http.disconnect":
                    stream.closed = True
                    call.pending.cancel()
                    nursery.cancel_scope.cancel()
                    return


async def _run_until_disconnect(
    pending: PendingCall | PendingBatch,
    receive: ASGIReceiveCallable,
    stream: _ResponseStream,
    supervisor: _Supervisor,
) -> Reply | None:
    """Run a call; a client disconnect cancels it and marks the stream closed.

    Args:
        pending: the call (or 2025-03-26 batch) to run.
        receive: the request's ASGI ``receive`` (watched for ``http.disconnect``).
        stream: the response stream the call's notifications go to.
        supervisor: spawns the watcher if the call runs past its grace period.

    Returns:
        The call's reply, or ``None`` when a disconnect cancelled it.
    """
    entry = _Watched(_Call(pending, receive, stream), trio.current_time() + supervisor.grace_s)
    supervisor.register(entry)
    try:
        return await pending.run()
    finally:
        entry.finish()
