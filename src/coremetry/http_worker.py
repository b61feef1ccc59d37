"""hypercorn's trio worker, with every connection contained: one client cannot end the server.

:func:`serve_http` is ``hypercorn.trio.serve`` (its ``worker_serve``: lifespan, bind, accept,
graceful drain within ``graceful_timeout``) with two differences, both about failures:

1. **Each connection runs in :func:`~coremetry.supervision.contained`.** In hypercorn a
   connection's task (``TCPServer.run``: the reader, and the protocol code it drives) runs in
   the server's own nursery, so any exception raised there — a protocol bug, an h11
   ``LocalProtocolError`` after a client pipelined bytes behind an upgrade request, the race
   below — ends ``serve`` and the process with it. Here it is logged with an incident id and
   only that connection closes.
2. **The close/send race of ``TCPServer`` is defused** (:class:`ContainedTCPServer`).
   ``TCPServer._close`` calls ``stream.send_eof()`` without holding ``send_lock``, and trio's
   ``SocketStream.send_eof`` checkpoints while it holds the stream's send-conflict detector.
   When one task closes the connection (the ASGI app returned: ``StreamClosed`` -> ``Closed``)
   while another writes (the reader answering the client's WebSocket close frame, a pong, an
   error response), the writer's ``send_all`` raises ``trio.BusyResourceError: another task is
   currently sending data on this SocketStream``, which hypercorn does not expect there. The
   connection is closing at that moment, so the write is dropped and the protocol told the
   connection is closed — what hypercorn already does when the peer is gone
   (``BrokenResourceError``). Found as issue 13, item 1 (a WebSocket refused after its upgrade,
   opened and closed in a loop); ``tests/transports/test_http_worker.py`` keeps a minimal
   reproduction against hypercorn's own class.

3. **Idle connections: the client's pool closes them first; a request head must be quick.**
   hypercorn closes a connection after ``keep_alive_timeout`` without a request *head*,
   counting from its open or its last answer: one timer for both the keep-alive idle time and
   the slow-header (slowloris) cut-off. Here the keep-alive idle time between requests is
   ``http.keep_alive_timeout_s`` (75 s by default: above client pools' idle expiry, so a
   request never leaves on a connection the server is closing), while a new connection, and
   a request whose first bytes have arrived, get :data:`REQUEST_HEAD_TIMEOUT_S` to deliver a
   complete head. Before closing an idle connection the socket is checked for bytes the
   reader has not taken yet (a busy event loop): a request that arrived is served, not reset.

Also, the ASGI app runs inside :func:`~coremetry.supervision.contained` (hypercorn would log
"Error in ASGI Framework" through its error log, which :func:`coremetry.server.hypercorn_config`
turns off), so an exception in a handler is logged with an incident id; hypercorn then answers
500 (HTTP, nothing sent yet) or closes the socket (1011 for an accepted WebSocket).

Only plain TCP binds are served (no TLS, no QUIC): Coremetry terminates TLS in front of it.
"""

import gc
import logging
import math
import re
import select
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Final

import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import (
    ASGIFramework,
    ASGIReceiveCallable,
    ASGISendCallable,
    ConnectionState,
    LifespanState,
    Scope,
)
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr

from coremetry.supervision import contained

log: Final = logging.getLogger("coremetry.http")

REQUEST_HEAD_TIMEOUT_S: Final = 5.0
"""How long a new connection, or a request whose first bytes have arrived, has to deliver a
complete request head (request line and headers), in seconds; then the connection is closed
(hypercorn's own keep-alive default, which used to bound both)."""


GC_YOUNG_THRESHOLD: Final = 10_000
"""Allocations of container objects (net of deallocations) that start a collection of the
youngest generation, once the server runs (CPython's default is 700)."""


def tune_garbage_collector() -> None:
    """Make CPython's cyclic garbage collector cheap for a long-running server.

    Called once the app is built, before the first request: a full collection, then
    ``gc.freeze()`` moves every object alive then (modules, the registries, the config: some
    275,000 objects) to the permanent generation, which later collections no longer traverse;
    and the youngest generation is collected after :data:`GC_YOUNG_THRESHOLD` net allocations
    instead of 700. A request allocates a few hundred container objects that reference
    counting frees, so at 700 the collector ran every two or three requests and, with the
    older generations it triggers, took about half of the CPU of a ``tools/call`` in the app
    (124 µs per call, 71 µs after this; ``bench/http_echo.py`` README section). Garbage cycles
    are still collected, a little later; objects frozen here are still freed by reference
    counting. Sources: the ``gc`` module documentation (``gc.freeze``, ``gc.set_threshold``).
    """
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)


class ContainedApp:
    """hypercorn's ``AppWrapper`` around an ASGI app, logging what the app raises.

    An ``Exception`` escaping the app is logged (ERROR, incident id) and swallowed; hypercorn
    then finishes the exchange as for any app that returned early (500, or a 1011 close).
    Cancellation propagates.
    """

    def __init__(self, app: ASGIFramework) -> None:
        self.app = app

    async def __call__(
        self,
        scope: Scope,
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        sync_spawn: object,
        call_soon: object,
    ) -> None:
        """Run the app for one ASGI scope (``sync_spawn``/``call_soon`` are for WSGI; unused)."""
        if scope["type"] == "lifespan":  # hypercorn's Lifespan handles (and logs) its failures
            await self.app(scope, receive, send)
            return
        what = f"{scope['type']} {scope.get('path', '')}".rstrip()
        with contained(f"ASGI app ({what})", log):
            await self.app(scope, receive, send)


_BARE_STATUS_LINE: Final = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) \r\n")
"""An HTTP/1.1 status line without a reason phrase, as h11 writes it for hypercorn."""


def _length_declared(head: bytes) -> bool:
    r"""Whether ``head`` is a whole final (2xx-5xx) response head with a ``Content-Length``.

    ASGI header names are lower case (ASGI HTTP spec, "Response Start"), and h11 writes them as
    given, so the header is matched as ``\r\ncontent-length:``.
    """
    return head.endswith(b"\r\n\r\n") and head[9:10] != b"1" and b"\r\ncontent-length:" in head


def with_reason_phrase(data: bytes) -> bytes:
    r"""Give an HTTP/1.1 response head written by h11 its standard reason phrase.

    hypercorn builds ``h11.Response`` without ``reason`` (ASGI has none), so every status line
    is ``HTTP/1.1 401 \r\n``; clients that report the reason (the OpenTelemetry exporters log
    ``reason: unknown``) show nothing. ``data`` is one write of the protocol: h11 writes a
    response head (status line, headers and the blank line) as one chunk, which is what is
    matched; anything else (body chunks, a head that already has a phrase, HTTP/2) is returned
    unchanged. The phrase is RFC 9110 §15's (``Unauthorized``, ``Payload Too Large`` ...).
    """
    found = _BARE_STATUS_LINE.match(data)
    if found is None or b"\r\n\r\n" not in data:
        return data
    try:
        phrase = HTTPStatus(int(found.group(1))).phrase
    except ValueError:  # a status code without a registered phrase
        return data
    return b"HTTP/1.1 %s %s\r\n" % (found.group(1), phrase.encode()) + data[found.end() :]


class IdleSweeper:
    """Closes a worker's connections whose idle period or request head has run out.

    One task for every connection of a worker (:func:`serve_http` runs it), where hypercorn
    gives each connection an idle task and starts a new one on every answer (a lock, a task
    through ``nursery.start``, the old one cancelled: several scheduler round trips per
    request). Here a connection between requests is a deadline and an entry in a set — a
    held SSE or WebSocket connection costs no task at all — and an answer moves a float.

    The task sleeps until the earliest deadline it was told of (:meth:`moved`: a deadline
    moved earlier wakes it sooner; one moved later is found when it wakes), then lets every
    connection decide (:meth:`ContainedTCPServer.expire`). Once the server is shutting down
    (``context.terminated``) every idle connection is closed at once, and each busy one as
    soon as its answer is complete.
    """

    def __init__(self, context: WorkerContext) -> None:
        self._context = context
        self._connections: set[ContainedTCPServer] = set()
        self._wake_at = math.inf
        self._scope: trio.CancelScope | None = None

    def add(self, connection: "ContainedTCPServer") -> None:
        """Watch ``connection`` (from its start until :meth:`discard`)."""
        self._connections.add(connection)
        self.moved(connection.deadline)

    def discard(self, connection: "ContainedTCPServer") -> None:
        """Stop watching ``connection`` (it ended, or is being closed)."""
        self._connections.discard(connection)

    def moved(self, deadline: float) -> None:
        """A connection's deadline is now ``deadline`` (trio clock, s): wake up by then."""
        if deadline < self._wake_at:
            self._wake_at = deadline
            if self._scope is not None:
                self._scope.deadline = deadline

    async def run(self) -> None:
        """Sweep until cancelled (:func:`serve_http` cancels it once its connections ended)."""
        while True:
            terminated = self._context.terminated
            with trio.CancelScope(deadline=self._wake_at) as scope:
                self._scope = scope
                try:
                    if terminated.is_set():
                        await trio.sleep_forever()  # until a busy connection becomes idle
                    else:
                        await terminated.wait()
                finally:
                    self._scope = None
            now = trio.current_time()
            closing = terminated.is_set()
            self._wake_at = math.inf
            for connection in list(self._connections):
                connection.expire(now, closing=closing)
            self._wake_at = min(
                (connection.deadline for connection in self._connections), default=math.inf
            )


class ContainedTCPServer(TCPServer):
    """hypercorn's connection handler with its close/send race defused (module docstring).

    It also writes each HTTP/1.1 status line with its reason phrase (:func:`with_reason_phrase`)
    and times idle connections and request heads apart (module docstring, item 3) through the
    worker's :class:`IdleSweeper` (:attr:`sweeper`), where hypercorn starts a task per answer.
    """

    sweeper: IdleSweeper | None = None
    """The worker's idle sweeper, set before :meth:`run` (``None``: no idle timeouts)."""
    deadline = math.inf
    """When the current idle period or request head times out (trio clock, s); inf: a
    request is being served."""
    _fresh = True
    """No idle period has begun yet: the connection is new."""
    _arrived = False
    """Bytes arrived during the current idle period."""
    _idle = True
    """No request is being served: the connection waits for a complete request head."""
    _ended = False
    """The reader is done (the client closed, or the connection broke)."""

    async def _read_data(self) -> None:
        # hypercorn's TCPServer._read_data, noting arrivals for the idle sweeper.
        try:
            while True:
                try:
                    with trio.fail_after(self.config.read_timeout or math.inf):
                        data = await self.stream.receive_some(MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError):
                    break
                if self._idle and not self._arrived:
                    # A request has begun: its head gets REQUEST_HEAD_TIMEOUT_S from now.
                    self._arrived = True
                    self._set_deadline(trio.current_time() + REQUEST_HEAD_TIMEOUT_S)
                await self.protocol.handle(RawData(bytes(data)))
                if data == b"":
                    break
            await self.protocol.handle(Closed())
        finally:
            self._ended = True
            if self.sweeper is not None:
                self.sweeper.discard(self)

    def _set_deadline(self, deadline: float) -> None:
        self.deadline = deadline
        if self.sweeper is not None:
            self.sweeper.moved(deadline)

    def _idle_began(self) -> None:
        """An answer is complete (``Updated(idle=True)``), or the connection is new."""
        self._idle = True
        self._arrived = self._buffered()  # the next request's first bytes came with the answer
        fresh, self._fresh = self._fresh, False
        if self.context.terminated.is_set():
            self._set_deadline(-math.inf)  # shutting down: an idle connection closes now
            return
        idle_s = (
            REQUEST_HEAD_TIMEOUT_S if fresh or self._arrived else self.config.keep_alive_timeout
        )
        self._set_deadline(trio.current_time() + idle_s)

    def _idle_ended(self) -> None:
        """A request head is complete (``Updated(idle=False)``): no timer while it is served."""
        self._idle = False
        self.deadline = math.inf

    async def _idle_timeout(self) -> None:
        # Started once, by run() through hypercorn's idle task: the connection's first idle
        # period begins and the sweeper watches it from now on. protocol_send's Updated events
        # then move its deadline; hypercorn would restart this task on every answer.
        self._idle_began()
        if self.sweeper is not None:
            self.sweeper.add(self)

    def expire(self, now: float, *, closing: bool) -> None:
        """The sweeper's verdict on this connection at ``now`` (trio clock, s).

        An idle connection whose deadline has passed is closed — unless bytes of a request the
        reader has not taken yet wait in its socket (a busy event loop): that request then gets
        :data:`REQUEST_HEAD_TIMEOUT_S`. ``closing`` (the server is shutting down): every idle
        connection is closed. A connection serving a request is left alone.
        """
        if self._ended or not self._idle:
            return
        if not closing:
            if now < self.deadline:
                return
            if not self._arrived and self._readable():
                self._arrived = True
                self.deadline = now + REQUEST_HEAD_TIMEOUT_S
                return
        self.deadline = math.inf
        if self.sweeper is not None:
            self.sweeper.discard(self)
        self._task_group.spawn(self._close_idle)

    async def _close_idle(self) -> None:
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    def _buffered(self) -> bool:
        """Whether the HTTP/1.1 parser holds bytes of a next request (read, not yet parsed)."""
        protocol = self.protocol.protocol
        if not isinstance(protocol, H11Protocol):
            return False
        connection = protocol.connection
        return isinstance(connection, h11.Connection) and bool(connection.trailing_data[0])

    def _readable(self) -> bool:
        """Whether bytes (or the client's close) wait in the socket, not yet read."""
        try:
            ready, _, _ = select.select([self.stream.socket.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    _held: bytes | None = None
    """A response head with a ``Content-Length``, waiting to go out with its body."""

    async def protocol_send(self, event: Event) -> None:
        """Write ``event`` (see ``TCPServer``); a write racing the close is dropped.

        A response head whose length is declared (``Content-Length``) is held and written with
        the protocol's next bytes (its body) in one ``send_all``, and the empty write h11 makes
        for the end of such a body is skipped: a JSON answer is one write and one scheduler
        round trip instead of three. Any other event writes a held head first. ``Updated``
        events (a request head complete, an answer complete) move the idle deadline
        (:class:`IdleSweeper`).
        """
        if isinstance(event, RawData):
            data = event.data
            if data.startswith(b"HTTP/1.1 "):
                data = with_reason_phrase(data)
                if self._held is None and _length_declared(data):
                    self._held = data
                    return
            held = self._held
            if held is not None:
                self._held = None
                data = held + data
            elif not data:
                return  # h11 had nothing to write (the end of a Content-Length body)
            event = RawData(data=data, address=event.address)
        else:
            if self._held is not None:
                held, self._held = self._held, None
                await self._send(RawData(data=held))
            if isinstance(event, Updated):  # the idle deadline moves; no task starts
                if event.idle:
                    self._idle_began()
                else:
                    self._idle_ended()
                return
        await self._send(event)

    async def _send(self, event: Event) -> None:
        try:
            await super().protocol_send(event)
        except trio.BusyResourceError:
            # Another task is inside _close() -> send_eof(): the connection is closing, so the
            # bytes can no longer matter. Tell the protocol, as hypercorn does for a broken
            # stream.
            await self.protocol.handle(Closed())


async def serve_http(
    app: ASGIFramework,
    config: HypercornConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` until ``shutdown_trigger()`` returns, then drain.

    The same life cycle as ``hypercorn.trio.serve`` (module docstring): ASGI lifespan startup,
    bind and listen, report the bound URLs (``["http://127.0.0.1:PORT"]``) through
    ``task_status``, accept; when ``shutdown_trigger`` returns, stop accepting and give open
    connections ``config.graceful_timeout`` seconds before cancelling them; lifespan shutdown.

    Raises:
        OSError: an address cannot be bound.
        ValueError: the config asks for TLS or QUIC (not served by this worker).
    """
    if config.ssl_enabled:
        raise ValueError("coremetry serves plain HTTP; terminate TLS in front of it")
    config.set_statsd_logger_class(StatsdLogger)
    wrapped = ContainedApp(app)
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    sweeper = IdleSweeper(context)
    open_streams: set[trio.SocketStream] = set()
    none_open = trio.Event()

    async def handle_connection(stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        open_streams.add(stream)
        try:
            await serve_connection(stream, peer)
        finally:
            open_streams.discard(stream)
            if not open_streams:
                none_open.set()

    async def serve_connection(stream: trio.SocketStream, peer: str) -> None:
        with contained(f"HTTP connection from {peer}", log):
            # hypercorn types the stream as an SSLStream; it only uses what SocketStream has
            # (the AttributeError of the missing do_handshake selects the plain-TCP path).
            server = ContainedTCPServer(
                wrapped,
                config,
                context,
                ConnectionState(lifespan_state.copy()),
                stream,  # type: ignore[arg-type]
            )
            server.sweeper = sweeper
            await server.run()

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        tune_garbage_collector()
        lifespan_nursery.start_soon(sweeper.run)  # cancelled with the lifespan, at the end
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            listeners: list[trio.SocketListener] = []
            binds: list[str] = []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            task_status.started(binds)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(
                        partial(
                            trio.serve_listeners,
                            handle_connection,
                            listeners,
                            handler_nursery=server_nursery,
                        )
                    )
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors from None  # the group it came from is all noise
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
                if open_streams:
                    server_nursery.start_soon(_close_stuck_streams, open_streams, none_open)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _close_stuck_streams(open_streams: set[trio.SocketStream], none_open: trio.Event) -> None:
    """At the graceful deadline, close the sockets of connections that are still open.

    hypercorn writes with ``send_all`` inside a *shielded* cancel scope, so a client that
    stops reading (a full TCP window) blocks that write through any cancellation: the graceful
    deadline alone would wait for it forever, and the process would never exit. Closing the
    socket makes the blocked write fail (``ClosedResourceError``), which hypercorn handles as a
    closed connection. Runs in the server nursery: cancelled at its deadline, or returns when
    every connection has ended.
    """
    try:
        await none_open.wait()
    finally:
        for stream in list(open_streams):
            if stream.socket.fileno() != -1:
                log.warning("closing a connection still open at the graceful deadline")
                stream.socket.close()


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except (OSError, ValueError):
        return "a client that already left"
    return f"{host}:{port}"
