"""Legacy HTTP+SSE (2024-11-05) at scale: memory per idle session, burst rate, latency under load.

Run: ``python bench/sse_sessions.py [--sessions 100,1000,5000] [--burst-sessions 3000]
[--websocket-sessions 3000] [--json PATH]`` (needs ``taskset`` and two CPU cores; see
``bench/README.md``).

Two identical servers (``python -m coremetry conformance-fixture --port 0``: the whole app with
the fixture entries, loopback only, without authentication, as ``http_echo.py`` uses;
keep-alive comments every 600 s) are started pinned to one core (``taskset -c 0``): the server
under test and a *reference* that never holds a session. This process, pinned to the other
core, is the client.
It speaks HTTP/1.1 by hand on raw trio sockets, the lightest client there is: one socket per
session for ``GET /api/mcp/sse`` (chunked ``text/event-stream``: the ``endpoint`` event, then
``message`` events) and a small keep-alive pool of sockets per server for the ``POST``s to the
session URIs. A session counts as open once it did ``initialize`` (its reply read from the
stream) and ``notifications/initialized``. The figures, all from the same run:

- **(b1)** server RSS per idle session: ``(VmRSS_n - VmRSS_0) / n`` in KiB for each ``n`` in
  ``--sessions``, where ``VmRSS_0`` is read after start-up and a warm-up, with no session open.
- **(b2)** a burst of one ``tools/call echo`` on every one of ``--burst-sessions`` open sessions
  (POSTed over the pool): from the first POST to the last reply read off the streams, as
  answered per second (best of ``--burst-repeat``).
- **(b3)** ``tools/call echo`` latency, POST to the reply on the stream, sequential calls on a
  fresh session while ``n`` sessions are held, against the same calls on a fresh session of the
  reference server (no session held), the two interleaved call by call so that noise on the
  machine hits both alike. The same probe with nothing held anywhere (an A/A row) shows the
  method's own bias.
- **(ws)** the same over WebSocket sessions (``GET /api/mcp/ws``, subprotocol ``mcp``), on a
  fresh server started once the SSE servers are stopped: KiB per idle session at
  ``--websocket-sessions`` (default 3000; 0 skips it), a sequential p50 beside them, and the
  burst (one ``tools/call echo`` text frame written on every socket; first write to last reply,
  best of ``--burst-repeat``). RFC 6455 framing by hand on raw trio sockets as well. Printed
  beside the SSE figures; informational, no target.

Every reply is checked: a JSON-RPC 2.0 result for its id, ``protocolVersion`` 2024-11-05 for
``initialize``, for ``echo`` one text content equal to the text sent (unique per session and
call, so a reply on the wrong stream is caught); every POST must be answered 202. Any other
outcome prints ``ERROR`` and makes the script exit 1. The target lines are informational.
"""

import argparse
import base64
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, Final, Generic, Protocol, TypeVar

import msgspec
import trio
from msgspec import UNSET, Raw, Struct, UnsetType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, non_negative, positive

PROTOCOL_VERSION: Final = "2024-11-05"
SSE_PATH: Final = b"/api/mcp/sse"
MESSAGES_PREFIX: Final = b"/api/mcp/messages?sessionId="

TARGET_KIB_PER_SESSION: Final = 40.0
SDK_KIB_PER_SESSION: Final = "113-128"
TARGET_BURST_PER_S: Final = 1200.0
SDK_BURST_PER_S: Final = 610.0
LATENCY_TOLERANCE: Final = 1.10
"""p50 with sessions held counts as "no worse" up to this ratio (run-to-run noise)."""

CONTENDED_CPU_PCT: Final = 90.0
"""A burst during which the server got less of its core than this was contended."""

DEFAULT_SESSIONS: Final = "100,1000,5000"
DEFAULT_BURST_SESSIONS: Final = 3000
DEFAULT_MAX_SESSIONS: Final = 10_000
"""The server's ``[sse] max_sessions`` default; raised through the environment when needed."""

RECV_SIZE: Final = 65536
STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
REPLY_TIMEOUT_S: Final = 30.0
"""Longest wait for one reply on a stream (or one POST answer) before it counts as missing."""
PHASE_TIMEOUT_S: Final = 300.0
STALE_AFTER_S: Final = 3.0
"""A pooled POST socket idle this long is replaced (hypercorn closes idle ones after 5 s)."""

_LISTENING: Final = re.compile(r"listening on http://(\[[^\]]+\]|[^\s:/]+):(\d+)")


# -- correctness -----------------------------------------------------------------------------


class Problems:
    """Correctness failures: any makes the script exit 1 (the first few are kept)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []
        self.notices = 0

    def add(self, text: str) -> None:
        """Record one failure."""
        self.count += 1
        if len(self.first) < 10:
            self.first.append(text)


class _Abort(Exception):
    """A phase failed (the problem is recorded); skip the remaining phases."""


class _StreamError(Exception):
    """The server answered something other than what the protocol says."""


class _Envelope(Struct):
    jsonrpc: str
    id: int | str | None = None
    method: str | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class _Content(Struct):
    type: str
    text: str | None = None


class _CallResult(Struct):
    content: list[_Content]
    is_error: bool = msgspec.field(default=False, name="isError")


class _ServerInfo(Struct):
    name: str


class _InitResult(Struct):
    protocol_version: str = msgspec.field(name="protocolVersion")
    server_info: _ServerInfo = msgspec.field(name="serverInfo")


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)
_CALL_RESULT: Final = msgspec.json.Decoder(_CallResult)
_INIT_RESULT: Final = msgspec.json.Decoder(_InitResult)


class _EchoArgs(Struct):
    text: str


class _CallParams(Struct):
    name: str
    arguments: _EchoArgs


class _CallRequest(Struct):
    id: int
    params: _CallParams
    jsonrpc: str = "2.0"
    method: str = "tools/call"


_ENCODER: Final = msgspec.json.Encoder()

INITIALIZE: Final = msgspec.json.encode(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "sse-sessions-bench", "version": "0"},
        },
    }
)
INITIALIZED: Final = msgspec.json.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})


# -- HTTP/1.1 by hand ------------------------------------------------------------------------


def parse_head(head: bytes) -> tuple[int, dict[bytes, bytes]]:
    """Status code and lower-cased headers of a response head (without the blank line)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise _StreamError(f"bad status line {lines[0][:100]!r}")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def read_head(stream: trio.SocketStream, what: str) -> tuple[int, dict[bytes, bytes], bytes]:
    """Read a response head off ``stream``: status, headers (:func:`parse_head`), what follows.

    Raises ``_StreamError`` when the stream closes before the blank line (``what`` names the
    head in the message).
    """
    buf = bytearray()
    while (end := buf.find(b"\r\n\r\n")) < 0:
        data = await stream.receive_some(RECV_SIZE)
        if not data:
            raise _StreamError(f"stream closed before {what}")
        buf += data
    status, headers = parse_head(bytes(buf[:end]))
    return status, headers, bytes(buf[end + 4 :])


async def connect(host: str, port: int) -> trio.SocketStream:
    """A TCP connection to the server (a bare socket: no resolver, no happy eyeballs)."""
    family = trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET
    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)  # sets TCP_NODELAY


class ChunkedSse:
    """Incremental decoder: chunked transfer coding, then SSE events (``(event, data)``)."""

    __slots__ = ("_body", "_need", "_raw", "finished")

    def __init__(self) -> None:
        self._raw = bytearray()
        self._body = bytearray()
        self._need = -1  # -1: expecting a chunk-size line; else bytes of chunk data to take
        self.finished = False

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """Take bytes off the socket; return the events completed by them."""
        raw = self._raw
        raw += data
        while not self.finished:
            if self._need < 0:
                end = raw.find(b"\r\n")
                if end < 0:
                    break
                try:
                    size = int(bytes(raw[:end]).split(b";", 1)[0], 16)
                except ValueError:
                    raise _StreamError(f"bad chunk size line {bytes(raw[:end][:40])!r}") from None
                del raw[: end + 2]
                if size == 0:
                    self.finished = True
                    break
                self._need = size
            else:
                if len(raw) < self._need + 2:
                    break
                if raw[self._need : self._need + 2] != b"\r\n":
                    raise _StreamError("chunk not followed by CRLF")
                self._body += raw[: self._need]
                del raw[: self._need + 2]
                self._need = -1
        return self._events()

    def _events(self) -> list[tuple[bytes, bytes]]:
        body = self._body
        events: list[tuple[bytes, bytes]] = []
        while (end := body.find(b"\n\n")) >= 0:
            block = bytes(body[:end])
            del body[: end + 2]
            event = b"message"
            data: list[bytes] = []
            for line in block.split(b"\n"):
                line = line.rstrip(b"\r")
                if not line or line.startswith(b":"):
                    continue  # a comment (": ping")
                name, _, value = line.partition(b":")
                value = value.removeprefix(b" ")
                if name == b"event":
                    event = value
                elif name == b"data":
                    data.append(value)
            if data:
                events.append((event, b"\n".join(data)))
        return events


class _StaleConnection(Exception):
    """A reused keep-alive socket was closed before any byte of the answer came back."""


class _PostConnection:
    __slots__ = ("_host_header", "last_used", "stream", "uses")

    def __init__(self, stream: trio.SocketStream, host_header: bytes) -> None:
        self.stream = stream
        self._host_header = host_header
        self.uses = 0
        self.last_used = time.monotonic()

    async def request(self, target: bytes, body: bytes) -> tuple[int, bool, bytes]:
        """POST ``body`` to ``target``; ``(status, server closes, response body)``."""
        await self.stream.send_all(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (target, self._host_header, len(body), body)
        )
        buf = bytearray()
        while (end := buf.find(b"\r\n\r\n")) < 0:
            data = await self.stream.receive_some(RECV_SIZE)
            if not data:
                if not buf and self.uses:
                    raise _StaleConnection
                raise _StreamError("connection closed before the response head")
            buf += data
        status, headers = parse_head(bytes(buf[:end]))
        del buf[: end + 4]
        length = headers.get(b"content-length")
        if length is None or not length.isdigit():
            raise _StreamError(f"POST answer {status} without a Content-Length")
        while len(buf) < int(length):
            data = await self.stream.receive_some(RECV_SIZE)
            if not data:
                raise _StreamError("connection closed inside the response body")
            buf += data
        self.uses += 1
        self.last_used = time.monotonic()
        return status, headers.get(b"connection", b"").lower() == b"close", bytes(buf)


class PostPool:
    """A few keep-alive sockets shared by every POST (a free one is taken, or waited for)."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self._host = host
        self._port = port
        self._host_header = f"{host}:{port}".encode()
        self._send, self._recv = trio.open_memory_channel[_PostConnection | None](size)
        for _ in range(size):
            self._send.send_nowait(None)
        self.connects = 0

    async def post(self, target: bytes, body: bytes) -> tuple[int, bytes]:
        """POST on a pooled socket (reconnecting when needed); ``(status, response body)``."""
        conn = await self._recv.receive()
        try:
            if conn is not None and time.monotonic() - conn.last_used > STALE_AFTER_S:
                await trio.aclose_forcefully(conn.stream)
                conn = None
            for attempt in range(2):
                if conn is None:
                    conn = _PostConnection(await connect(self._host, self._port), self._host_header)
                    self.connects += 1
                try:
                    status, closes, answer = await conn.request(target, body)
                except _StaleConnection:
                    await trio.aclose_forcefully(conn.stream)
                    conn = None
                    if attempt:
                        raise _StreamError("two pooled sockets closed in a row") from None
                    continue
                if closes:
                    await trio.aclose_forcefully(conn.stream)
                    conn = None
                return status, answer
            raise AssertionError("unreachable")
        except BaseException:
            if conn is not None:
                await trio.aclose_forcefully(conn.stream)
                conn = None
            raise
        finally:
            self._send.send_nowait(conn)

    async def aclose(self) -> None:
        """Close every pooled socket."""
        while True:
            try:
                conn = self._recv.receive_nowait()
            except trio.WouldBlock:
                return
            if conn is not None:
                await trio.aclose_forcefully(conn.stream)


# -- sessions --------------------------------------------------------------------------------


class Tracker:
    """Counts the replies of a burst and keeps the time of the last one."""

    __slots__ = ("all_done", "last", "remaining")

    def __init__(self, expected: int) -> None:
        self.remaining = expected
        self.last = 0.0
        self.all_done = trio.Event()
        if expected == 0:
            self.all_done.set()

    def hit(self, when: float) -> None:
        """One reply arrived at ``when`` (``time.perf_counter``)."""
        self.last = max(self.last, when)
        self.remaining -= 1
        if self.remaining == 0:
            self.all_done.set()


class Pending:
    """A request waiting for its reply on the stream.

    ``expect``: for ``echo`` the text the reply must carry, for ``initialize`` the protocol
    version it must negotiate.
    """

    __slots__ = ("done", "expect", "kind", "received_at", "tracker")

    def __init__(self, kind: str, expect: str, tracker: Tracker | None) -> None:
        self.kind = kind
        self.expect = expect
        self.tracker = tracker
        self.done = trio.Event()
        self.received_at = 0.0


_DecoderT = TypeVar("_DecoderT")


class _Address(Protocol):
    """Where a server listens (both transports' endpoints have it)."""

    host: str
    port: int


_EndpointT = TypeVar("_EndpointT", bound=_Address)


class BaseSession(Generic[_EndpointT, _DecoderT]):
    """What every client session shares, whatever its transport.

    The requests in flight (``pending``, by JSON-RPC id), the ids, the problems, the reader task
    (:meth:`run`: connect, :meth:`_open`, then :meth:`_receive` until closed) and the checks of
    each reply (:meth:`_on_reply`). A transport supplies the handshake, the reading loop, how a
    message goes on the wire (:meth:`wire`, :meth:`send`) and its ``initialize`` request.
    """

    __slots__ = (
        "_next_id",
        "closing",
        "endpoint",
        "finished",
        "index",
        "pending",
        "problems",
        "scope",
    )

    label: ClassVar[str] = "session"
    """How problems name the session (``"<label> <index>: ..."``)."""
    text_prefix: ClassVar[str] = "s"
    """Start of each echoed text (``<prefix><index>-<id>``): a reply on the wrong session shows."""
    protocol_version: ClassVar[str] = PROTOCOL_VERSION
    initialize_body: ClassVar[bytes] = INITIALIZE

    def __init__(self, index: int, endpoint: _EndpointT, problems: Problems) -> None:
        self.index = index
        self.endpoint = endpoint
        self.problems = problems
        self.pending: dict[int, Pending] = {}
        self.scope = trio.CancelScope()
        self.closing = False
        self.finished = trio.Event()
        self._next_id = 1

    def wire(self, body: bytes) -> bytes:
        """A JSON-RPC message as :meth:`send` writes it."""
        return body

    async def send(self, wire: bytes, what: str) -> None:
        """Deliver one message made by :meth:`wire`; a failure is recorded and aborts the run."""
        raise NotImplementedError

    async def _open(self, stream: trio.SocketStream, host: str, port: int) -> _DecoderT:
        raise NotImplementedError

    async def _receive(self, stream: trio.SocketStream, decoder: _DecoderT) -> None:
        """Read replies until the server ends the stream (raises when it breaks)."""
        raise NotImplementedError

    def _attach(self, stream: trio.SocketStream | None) -> None:
        """The stream once open (``None`` once closed), for a transport that writes on it."""

    def expect(self, kind: str, tracker: Tracker | None = None) -> tuple[Pending, bytes]:
        """A new request of ``kind`` ("initialize" or "echo"): its waiter and wire bytes."""
        if kind == "initialize":
            pending = Pending(kind, self.protocol_version, tracker)
            self.pending[0] = pending
            return pending, self.wire(self.initialize_body)
        request_id = self._next_id
        self._next_id += 1
        text = f"{self.text_prefix}{self.index}-{request_id}"
        pending = Pending(kind, text, tracker)
        self.pending[request_id] = pending
        body = _ENCODER.encode(
            _CallRequest(id=request_id, params=_CallParams("echo", _EchoArgs(text)))
        )
        return pending, self.wire(body)

    def close(self) -> None:
        """Stop reading and drop the stream (the server sees the client go)."""
        self.closing = True
        self.scope.cancel()

    def fail(self, text: str) -> None:
        """Record a problem of this session."""
        self.problems.add(f"{self.label} {self.index}: {text}")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect and open the stream, report ready, then read replies until closed.

        Raises (before ``task_status.started``): OSError, trio.BrokenResourceError or
        _StreamError when the stream cannot be opened.
        """
        host, port = self.endpoint.host, self.endpoint.port
        try:
            with self.scope:
                stream = await connect(host, port)
                try:
                    decoder = await self._open(stream, host, port)
                    self._attach(stream)
                    task_status.started()
                    try:
                        await self._receive(stream, decoder)
                    except (OSError, trio.BrokenResourceError, _StreamError) as exc:
                        self.fail(f"stream broke: {exc!r}")
                    else:
                        if not self.closing:
                            self.fail("the server ended the stream")
                finally:
                    self._attach(None)
                    await trio.aclose_forcefully(stream)
        finally:
            self.finished.set()

    def _on_reply(self, data: bytes, now: float) -> None:
        """One JSON-RPC message off the stream: match it to its request and check it."""
        try:
            envelope = _ENVELOPE.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.fail(f"undecodable message ({exc}): {data[:200]!r}")
            return
        if not isinstance(envelope.method, UnsetType):
            self.problems.notices += 1  # a server notification or request: not a reply
            return
        pending = self.pending.pop(envelope.id, None) if isinstance(envelope.id, int) else None
        if pending is None:
            self.fail(f"reply for no request: {data[:200]!r}")
            return
        problem = _reply_problem(envelope, pending)
        if problem is not None:
            self.fail(f"{problem}: {data[:200]!r}")
        pending.received_at = now
        pending.done.set()
        if pending.tracker is not None:
            pending.tracker.hit(now)

    async def reply(self, pending: Pending, what: str) -> None:
        """Wait for the reply to ``pending``; none within the timeout is recorded and aborts."""
        with trio.move_on_after(REPLY_TIMEOUT_S):
            await pending.done.wait()
            return
        self.fail(f"no reply to {what} within {REPLY_TIMEOUT_S} s")
        raise _Abort

    async def initialize(self) -> None:
        """``initialize`` (its reply read) and ``notifications/initialized``."""
        pending, wire = self.expect("initialize")
        await self.send(wire, "initialize")
        await self.reply(pending, "initialize")
        await self.send(self.wire(INITIALIZED), "notifications/initialized")

    async def timed_call(self) -> float:
        """One echo call; milliseconds from the send to its reply read off the stream."""
        pending, wire = self.expect("echo")
        start = time.perf_counter()
        await self.send(wire, "tools/call")
        await self.reply(pending, "tools/call")
        return (pending.received_at - start) * 1000.0


class Session(BaseSession["Endpoint", ChunkedSse]):
    """One HTTP+SSE session: its stream (``GET``, read by :meth:`run`); requests are POSTed."""

    __slots__ = ("target",)

    def __init__(self, index: int, endpoint: "Endpoint", problems: Problems) -> None:
        super().__init__(index, endpoint, problems)
        self.target = b""

    async def send(self, wire: bytes, what: str) -> None:
        """POST one message to the session over the pool; anything but 202 is a failure."""
        try:
            with trio.fail_after(REPLY_TIMEOUT_S):
                status, answer = await self.endpoint.pool.post(self.target, wire)
        except trio.TooSlowError:
            self.fail(f"POST {what}: no answer")
            raise _Abort from None
        except (OSError, trio.BrokenResourceError, _StreamError) as exc:
            self.fail(f"POST {what}: {exc!r}")
            raise _Abort from None
        if status != 202:
            self.fail(f"POST {what}: {status} {answer[:200]!r}")
            raise _Abort

    async def _open(self, stream: trio.SocketStream, host: str, port: int) -> ChunkedSse:
        await stream.send_all(
            b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n\r\n"
            % (SSE_PATH, host.encode(), port)
        )
        status, headers, rest = await read_head(stream, "the response head")
        content_type = headers.get(b"content-type", b"")
        if status != 200 or not content_type.startswith(b"text/event-stream"):
            raise _StreamError(f"GET {SSE_PATH.decode()}: {status} {content_type.decode()}")
        if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
            raise _StreamError("the event stream is not chunked")
        decoder = ChunkedSse()
        events = decoder.feed(rest)
        while not events:
            if decoder.finished:
                raise _StreamError("stream ended before the endpoint event")
            data = await stream.receive_some(RECV_SIZE)
            if not data:
                raise _StreamError("stream closed before the endpoint event")
            events = decoder.feed(data)
        event, uri = events[0]
        if event != b"endpoint" or not uri.startswith(MESSAGES_PREFIX):
            raise _StreamError(f"first event is {event!r} {uri[:100]!r}, not the endpoint")
        self.target = uri
        now = time.perf_counter()
        for event, data in events[1:]:
            self._on_event(event, data, now)
        return decoder

    async def _receive(self, stream: trio.SocketStream, decoder: ChunkedSse) -> None:
        receive = stream.receive_some
        perf_counter = time.perf_counter
        while not decoder.finished:
            data = await receive(RECV_SIZE)
            if not data:
                break
            now = perf_counter()
            for event, payload in decoder.feed(data):
                self._on_event(event, payload, now)

    def _on_event(self, event: bytes, data: bytes, now: float) -> None:
        if event != b"message":
            self.fail(f"unexpected event {event!r}")
            return
        self._on_reply(data, now)


def _reply_problem(envelope: _Envelope, pending: Pending) -> str | None:
    """Why a reply is not the right result for its request (``None`` when it is)."""
    if envelope.jsonrpc != "2.0":
        return "not JSON-RPC 2.0"
    if not isinstance(envelope.error, UnsetType):
        return "error reply"
    if isinstance(envelope.result, UnsetType):
        return "reply without result"
    try:
        if pending.kind == "initialize":
            init = _INIT_RESULT.decode(envelope.result)
            if init.protocol_version != pending.expect:
                return f"negotiated {init.protocol_version}, not {pending.expect}"
            return None
        result = _CALL_RESULT.decode(envelope.result)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"malformed result ({exc})"
    if result.is_error:
        return "tool error result"
    if [(c.type, c.text) for c in result.content] != [("text", pending.expect)]:
        return f"content is not the echoed text {pending.expect!r}"
    return None


# -- the bench context -----------------------------------------------------------------------


@dataclass
class Endpoint:
    """A running server as the client sees it."""

    host: str
    port: int
    pid: int
    pool: PostPool
    pool_size: int


@dataclass
class Context:
    """Everything the phases share."""

    main: Endpoint
    ref: Endpoint
    """An identical server that never holds sessions: the latency reference."""
    held_nursery: trio.Nursery
    problems: Problems
    open_concurrency: int
    settle_s: float
    next_index: int = 0
    held: list[Session] = field(default_factory=list)


class _AnySession(Protocol):
    """What the shared phases use of a session (:class:`BaseSession`, either transport)."""

    finished: trio.Event

    def close(self) -> None:
        """See :meth:`BaseSession.close`."""

    def fail(self, text: str) -> None:
        """See :meth:`BaseSession.fail`."""

    def expect(self, kind: str, tracker: Tracker | None = None) -> tuple[Pending, bytes]:
        """See :meth:`BaseSession.expect`."""

    async def initialize(self) -> None:
        """See :meth:`BaseSession.initialize`."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """See :meth:`BaseSession.run`."""


_SessionT = TypeVar("_SessionT", bound=_AnySession)


async def open_many(
    make: Callable[[], _SessionT],
    count: int,
    concurrency: int,
    nursery: trio.Nursery,
    problems: Problems,
) -> list[_SessionT]:
    """Open and initialize ``count`` sessions made by ``make``, at most ``concurrency`` at a time.

    Each session's reader runs in ``nursery`` (it outlives this call). Raises ``_Abort`` when
    any problem was recorded; ``trio.TooSlowError`` after ``PHASE_TIMEOUT_S``.
    """
    limiter = trio.CapacityLimiter(concurrency)
    opened: list[_SessionT] = []

    async def open_one(session: _SessionT) -> None:
        async with limiter:
            if problems.count:
                return
            try:
                await nursery.start(session.run)
                await session.initialize()
            except _Abort:
                session.close()
                return
            except (OSError, trio.BrokenResourceError, _StreamError) as exc:
                session.fail(f"could not open: {exc!r}")
                session.close()
                return
            opened.append(session)

    with trio.fail_after(PHASE_TIMEOUT_S):
        async with trio.open_nursery() as opening:
            for _ in range(count):
                opening.start_soon(open_one, make())
    if problems.count:
        raise _Abort
    return opened


async def open_sessions(
    ctx: Context, count: int, endpoint: Endpoint | None = None
) -> list[Session]:
    """Open and initialize ``count`` sessions on ``endpoint`` (default: the server under test),
    at most ``open_concurrency`` at a time."""
    target = ctx.main if endpoint is None else endpoint

    def make() -> Session:
        ctx.next_index += 1
        return Session(ctx.next_index - 1, target, ctx.problems)

    return await open_many(make, count, ctx.open_concurrency, ctx.held_nursery, ctx.problems)


async def close_sessions(sessions: Sequence[_AnySession]) -> None:
    """Close the sessions' streams (or sockets) and wait until their readers are done."""
    for session in sessions:
        session.close()
    for session in sessions:
        await session.finished.wait()


@dataclass
class Latency:
    """Sequential ``tools/call echo`` round trips on one fresh session, in milliseconds."""

    calls: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    samples_ms: list[float] = field(repr=False)


async def probe_latency(
    ctx: Context, calls: int, warmup: int, block: int
) -> tuple[Latency, Latency]:
    """Sequential echo calls on a fresh session of each server, interleaved in blocks.

    Returns ``(server under test, reference)``; each gets ``calls`` timed calls after ``warmup``
    untimed ones, in alternating blocks of ``block`` (the order flips every block), so noise on
    the machine hits both alike.
    """
    main = (await open_sessions(ctx, 1))[0]
    ref = (await open_sessions(ctx, 1, ctx.ref))[0]
    samples: dict[Session, list[float]] = {main: [], ref: []}
    try:
        for session in (main, ref):
            for _ in range(warmup):
                await session.timed_call()
        done = 0
        while done < calls:
            size = min(block, calls - done)
            order = (main, ref) if (done // block) % 2 == 0 else (ref, main)
            for session in order:
                for _ in range(size):
                    samples[session].append(await session.timed_call())
            done += size
    finally:
        await close_sessions([main, ref])
    return _latency(samples[main]), _latency(samples[ref])


def _latency(samples: list[float]) -> Latency:
    ordered = sorted(samples)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return Latency(len(samples), statistics.median(ordered), pct(0.90), pct(0.99), ordered)


# -- server ----------------------------------------------------------------------------------


@dataclass
class RunningServer:
    """The started server."""

    process: trio.Process
    log_path: Path
    host: str = ""
    port: int = 0

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's stderr."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def rss_kib(pid: int) -> int:
    """``VmRSS`` of a process, in KiB (0 when unknown)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def self_cpu_seconds() -> float:
    """This process's user + system CPU time so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def start_server(argv: list[str], env: dict[str, str], log_path: Path) -> RunningServer:
    """Start a server (stdout and stderr to ``log_path``); wait for ``listening on http://…``."""
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
        )
    server = RunningServer(process, log_path)
    with trio.move_on_after(STARTUP_TIMEOUT_S):
        while True:
            text = await trio.Path(log_path).read_text(encoding="utf-8", errors="replace")
            match = _LISTENING.search(text)
            if match is not None:
                server.host = match[1].strip("[]")
                server.port = int(match[2])
                return server
            if process.returncode is not None or process.poll() is not None:
                break
            await trio.sleep(0.05)
    await stop_server(server)
    raise RuntimeError(f"the server did not start ({' '.join(argv)}):\n{server.log_tail()}")


async def stop_server(server: RunningServer) -> int | None:
    """SIGTERM (a graceful drain), then SIGKILL after a grace period; the exit status."""
    process = server.process
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_TIMEOUT_S):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode


async def server_log(server: RunningServer) -> list[str]:
    """What the server wrote to stdout and stderr, but the ``listening on`` line."""
    text = await trio.Path(server.log_path).read_text(errors="replace")
    return [line for line in text.splitlines() if not _LISTENING.search(line)]


# -- phases ----------------------------------------------------------------------------------


@dataclass
class Probe:
    """One latency probe: the server under test and the reference, interleaved."""

    ours: Latency
    ref: Latency

    @property
    def ratio(self) -> float:
        """p50 on the server under test over p50 on the reference."""
        return self.ours.p50_ms / self.ref.p50_ms


@dataclass
class Stage:
    """``held`` idle sessions: what opening them took, the server's RSS, latency beside them."""

    held: int
    open_s: float
    rss_kib: int
    kib_per_session: float
    probe: Probe


@dataclass
class BurstRun:
    """One burst: one ``tools/call echo`` POSTed on every held session."""

    sessions: int
    seconds: float
    answered_per_s: float
    posts_s: float
    server_cpu_pct: float
    server_cpu_us_per_call: float
    client_cpu_pct: float


@dataclass
class Results:
    """Every figure of a run."""

    rss0_kib: int = 0
    before: Probe | None = None
    stages: list[Stage] = field(default_factory=list)
    burst_rss_before_kib: int = 0
    burst_rss_after_kib: int = 0
    bursts: list[BurstRun] = field(default_factory=list)
    rss_closed_kib: int = 0
    after: Probe | None = None
    pool_connects: int = 0
    server_exit: int | None = None
    server_log: list[str] = field(default_factory=list)
    websocket: "WsResults | None" = None
    """The WebSocket part (``None``: skipped with ``--websocket-sessions 0``)."""
    websocket_server_exit: int | None = None


@dataclass(frozen=True)
class Options:
    """The command line, parsed."""

    sessions: tuple[int, ...]
    burst_sessions: int
    burst_repeat: int
    latency_calls: int
    latency_warmup: int
    latency_block: int
    post_connections: int
    open_concurrency: int
    settle_s: float
    keepalive_s: float
    server_cpu: int
    client_cpu: int
    command: tuple[str, ...]
    websocket_sessions: int = DEFAULT_BURST_SESSIONS


async def measure_burst(
    sessions: Sequence[_SessionT],
    pid: int,
    problems: Problems,
    send_all: Callable[[list[tuple[_SessionT, bytes]]], Awaitable[None]],
) -> BurstRun:
    """One echo call on every session (written by ``send_all``); time until the last reply.

    The calls are encoded before the clock starts; ``pid`` is the server whose CPU time is
    read. Raises ``_Abort`` when a send failed or a reply did not come within
    ``REPLY_TIMEOUT_S``.
    """
    tracker = Tracker(len(sessions))
    calls = [(session, session.expect("echo", tracker)[1]) for session in sessions]
    await trio.lowlevel.checkpoint()
    server_cpu0, client_cpu0 = cpu_seconds(pid), self_cpu_seconds()
    start = time.perf_counter()
    await send_all(calls)
    sent = time.perf_counter()
    if problems.count:
        raise _Abort
    with trio.move_on_after(REPLY_TIMEOUT_S):
        await tracker.all_done.wait()
    if tracker.remaining:
        problems.add(f"burst: {tracker.remaining} of {len(sessions)} replies never came")
        raise _Abort
    window = time.perf_counter() - start
    server_cpu = cpu_seconds(pid) - server_cpu0
    client_cpu = self_cpu_seconds() - client_cpu0
    seconds = tracker.last - start
    return BurstRun(
        sessions=len(sessions),
        seconds=seconds,
        answered_per_s=len(sessions) / seconds,
        posts_s=sent - start,
        server_cpu_pct=100.0 * server_cpu / window,
        server_cpu_us_per_call=1e6 * server_cpu / len(sessions),
        client_cpu_pct=100.0 * client_cpu / window,
    )


async def repeat_bursts(
    repeat: int, what: str, sessions: int, one: Callable[[], Awaitable[BurstRun]]
) -> list[BurstRun]:
    """``repeat`` bursts made by ``one``, half a second apart (``what`` names them in progress)."""
    runs: list[BurstRun] = []
    for i in range(repeat):
        _progress(f"{what} {i + 1}/{repeat} on {sessions} sessions")
        runs.append(await one())
        await trio.sleep(0.5)
    return runs


async def burst(ctx: Context, sessions: list[Session]) -> BurstRun:
    """POST one echo call on every session over the pool; time until the last reply is read."""

    async def post_all(calls: list[tuple[Session, bytes]]) -> None:
        work: Iterator[tuple[Session, bytes]] = iter(calls)

        async def worker() -> None:
            for session, body in work:  # shared: each call is taken by exactly one worker
                try:
                    await session.send(body, "tools/call")
                except _Abort:
                    return

        async with trio.open_nursery() as nursery:
            for _ in range(ctx.main.pool_size):
                nursery.start_soon(worker)

    return await measure_burst(sessions, ctx.main.pid, ctx.problems, post_all)


async def settle_rss(pid: int, settle_s: float) -> int:
    """A server's RSS once it had ``settle_s`` to finish whatever the last step started."""
    await trio.sleep(settle_s)
    return rss_kib(pid)


async def run_phases(ctx: Context, opts: Options, results: Results) -> None:
    """Warm-up, the stages, the bursts, then everything closed (see the module docstring)."""
    say = _progress

    async def probe() -> Probe:
        ours, ref = await probe_latency(
            ctx, opts.latency_calls, opts.latency_warmup, opts.latency_block
        )
        return Probe(ours, ref)

    say(
        f"server under test: pid {ctx.main.pid}, port {ctx.main.port}; "
        f"reference: pid {ctx.ref.pid}, port {ctx.ref.port}"
    )
    say("warm-up")
    await probe_latency(ctx, 100, 0, 50)  # first-use allocations, imports, caches
    say("latency with no session held")
    results.before = await probe()
    results.rss0_kib = await settle_rss(ctx.main.pid, ctx.settle_s)
    for n in opts.sessions:
        say(f"opening sessions up to {n}")
        start = time.perf_counter()
        ctx.held += await open_sessions(ctx, n - len(ctx.held))
        open_s = time.perf_counter() - start
        rss = await settle_rss(ctx.main.pid, ctx.settle_s)
        say(f"latency with {n} sessions held")
        stage_probe = await probe()
        results.stages.append(Stage(n, open_s, rss, (rss - results.rss0_kib) / n, stage_probe))
    if opts.burst_sessions:
        n = opts.burst_sessions
        if len(ctx.held) > n:
            say(f"closing sessions down to {n}")
            extra = ctx.held[n:]
            del ctx.held[n:]
            await close_sessions(extra)
        elif len(ctx.held) < n:
            say(f"opening sessions up to {n}")
            ctx.held += await open_sessions(ctx, n - len(ctx.held))
        results.burst_rss_before_kib = await settle_rss(ctx.main.pid, ctx.settle_s)
        held = ctx.held
        results.bursts += await repeat_bursts(
            opts.burst_repeat, "burst", n, lambda: burst(ctx, held)
        )
        results.burst_rss_after_kib = await settle_rss(ctx.main.pid, ctx.settle_s)
    say("closing every session")
    held, ctx.held = ctx.held, []
    await close_sessions(held)
    results.rss_closed_kib = await settle_rss(ctx.main.pid, ctx.settle_s)
    say("latency with no session held, again")
    results.after = await probe()


async def run_guarded(
    phases: Awaitable[None], readers: trio.Nursery, problems: Problems, what: str
) -> None:
    """Await ``phases``, then cancel the session readers in ``readers``.

    An ``_Abort`` ends the phases (its problem is already recorded); a phase over
    ``PHASE_TIMEOUT_S`` is recorded as one (``what`` names it).
    """
    try:
        await phases
    except _Abort:
        pass
    except trio.TooSlowError:
        problems.add(f"{what} took longer than {PHASE_TIMEOUT_S:.0f} s")
    finally:
        readers.cancel_scope.cancel()


def _progress(text: str) -> None:
    print(f"  ... {text}", file=sys.stderr, flush=True)


async def bench(opts: Options, argv: list[str], env: dict[str, str]) -> tuple[Results, Problems]:
    """Start the server under test and the reference, run every phase, stop both."""
    results = Results()
    problems = Problems()
    with tempfile.TemporaryDirectory(prefix="sse-sessions-") as tmp:
        main_server = await start_server(argv, env, Path(tmp, "main.stderr"))
        try:
            ref_server = await start_server(argv, env, Path(tmp, "ref.stderr"))
        except BaseException:
            await stop_server(main_server)
            raise
        endpoints = [
            Endpoint(
                server.host,
                server.port,
                server.process.pid,
                PostPool(server.host, server.port, opts.post_connections),
                opts.post_connections,
            )
            for server in (main_server, ref_server)
        ]
        try:
            async with trio.open_nursery() as held_nursery:
                ctx = Context(
                    main=endpoints[0],
                    ref=endpoints[1],
                    held_nursery=held_nursery,
                    problems=problems,
                    open_concurrency=opts.open_concurrency,
                    settle_s=opts.settle_s,
                )
                await run_guarded(run_phases(ctx, opts, results), held_nursery, problems, "a phase")
        finally:
            results.pool_connects = endpoints[0].pool.connects
            for endpoint in endpoints:
                await endpoint.pool.aclose()
            results.server_exit = await stop_server(main_server)
            await stop_server(ref_server)
            for server in (main_server, ref_server):
                results.server_log += await server_log(server)
    if opts.websocket_sessions and not problems.count:
        # After the SSE servers are gone: a fresh server alone on its core.
        ws_results, results.websocket_server_exit, log = await bench_websocket(
            opts, argv, env, problems
        )
        results.websocket = ws_results
        results.server_log += log
    return results, problems


# -- WebSocket sessions ----------------------------------------------------------------------
#
# The same burst over the WebSocket transport (``GET /api/mcp/ws``, subprotocol ``mcp``): one
# socket per session that carries both the requests and the replies, spoken by hand like the
# SSE side (RFC 6455 framing on raw trio sockets, no client library), on a fresh server.

WS_PATH: Final = b"/api/mcp/ws"
WS_PROTOCOL_VERSION: Final = "2025-11-25"
"""The revision WebSocket sessions negotiate (the latest with an ``initialize`` handshake)."""
_WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_OP_CONTINUATION: Final = 0x0
_OP_TEXT: Final = 0x1
_OP_CLOSE: Final = 0x8
_OP_PING: Final = 0x9
_OP_PONG: Final = 0xA


def ws_frame(payload: bytes, opcode: int = _OP_TEXT) -> bytes:
    """One final client frame (masked with a random key, as RFC 6455 §5.3 requires)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0xFE)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0xFF)) + n.to_bytes(8, "big")
    key = os.urandom(4)
    mask = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return head + key + (int.from_bytes(payload, "big") ^ mask).to_bytes(n, "big")


class WsFrames:
    """Incremental decoder of server frames (unmasked): ``(opcode, payload)`` of whole messages."""

    __slots__ = ("_kind", "_parts", "_raw")

    def __init__(self, initial: bytes = b"") -> None:
        self._raw = bytearray(initial)
        self._parts: list[bytes] = []
        self._kind = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Take bytes off the socket; return the messages (and control frames) they complete."""
        raw = self._raw
        raw += data
        out: list[tuple[int, bytes]] = []
        while len(raw) >= 2:
            first, second = raw[0], raw[1]
            if second & 0x80:
                raise _StreamError("the server sent a masked frame")
            n = second & 0x7F
            at = 2
            if n == 126:
                if len(raw) < 4:
                    break
                n, at = int.from_bytes(raw[2:4], "big"), 4
            elif n == 127:
                if len(raw) < 10:
                    break
                n, at = int.from_bytes(raw[2:10], "big"), 10
            if len(raw) < at + n:
                break
            payload = bytes(raw[at : at + n])
            del raw[: at + n]
            opcode, final = first & 0x0F, bool(first & 0x80)
            if opcode >= 0x8:  # control frames are never fragmented
                out.append((opcode, payload))
                continue
            if opcode != _OP_CONTINUATION:
                self._kind = opcode
            self._parts.append(payload)
            if final:
                out.append((self._kind, b"".join(self._parts)))
                self._parts = []
        return out


_WS_INITIALIZE: Final = msgspec.json.encode(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": WS_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "sse-sessions-bench", "version": "0"},
        },
    }
)


@dataclass
class WsEndpoint:
    """The WebSocket server as the client sees it."""

    host: str
    port: int
    pid: int


class WsSession(BaseSession[WsEndpoint, WsFrames]):
    """One client session over its own WebSocket: requests go out on it, replies come back."""

    __slots__ = ("stream",)

    label: ClassVar[str] = "ws session"
    text_prefix: ClassVar[str] = "w"
    protocol_version: ClassVar[str] = WS_PROTOCOL_VERSION
    initialize_body: ClassVar[bytes] = _WS_INITIALIZE

    def __init__(self, index: int, endpoint: WsEndpoint, problems: Problems) -> None:
        super().__init__(index, endpoint, problems)
        self.stream: trio.SocketStream | None = None

    def wire(self, body: bytes) -> bytes:
        """One masked text frame carrying ``body``."""
        return ws_frame(body)

    def _attach(self, stream: trio.SocketStream | None) -> None:
        self.stream = stream

    async def send(self, wire: bytes, what: str) -> None:
        """Write one frame (one sender at a time per session: the caller sees to it).

        A failure is recorded and aborts the run.
        """
        try:
            with trio.fail_after(REPLY_TIMEOUT_S):
                if self.stream is None:
                    raise _StreamError("the socket is not open")
                await self.stream.send_all(wire)
        except trio.TooSlowError:
            self.fail(f"{what}: could not write")
            raise _Abort from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, _StreamError) as exc:
            self.fail(f"{what}: {exc!r}")
            raise _Abort from None

    async def _open(self, stream: trio.SocketStream, host: str, port: int) -> WsFrames:
        key = base64.b64encode(os.urandom(16))
        await stream.send_all(
            b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Protocol: mcp\r\n\r\n" % (WS_PATH, host.encode(), port, key)
        )
        status, headers, rest = await read_head(stream, "the handshake answer")
        accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
        if status != 101 or headers.get(b"sec-websocket-accept") != accept:
            raise _StreamError(f"GET {WS_PATH.decode()}: {status}, not a WebSocket upgrade")
        if headers.get(b"sec-websocket-protocol") != b"mcp":
            raise _StreamError("the upgrade did not select the mcp subprotocol")
        return WsFrames(rest)

    async def _receive(self, stream: trio.SocketStream, decoder: WsFrames) -> None:
        receive = stream.receive_some
        perf_counter = time.perf_counter
        data = b""
        while True:
            now = perf_counter()
            for opcode, payload in decoder.feed(data):
                if opcode == _OP_TEXT:
                    self._on_reply(payload, now)
                elif opcode == _OP_CLOSE:
                    code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                    raise _StreamError(f"server closed ({code})")
                elif opcode not in (_OP_PING, _OP_PONG):
                    self.fail(f"frame opcode {opcode}")
            data = await receive(RECV_SIZE)
            if not data:
                return


@dataclass
class WsResults:
    """The WebSocket part's figures (a fresh server; see ``bench/README.md``)."""

    rss0_kib: int = 0
    held: int = 0
    open_s: float = 0.0
    rss_kib: int = 0
    kib_per_session: float = 0.0
    latency: Latency | None = None
    bursts: list[BurstRun] = field(default_factory=list)
    rss_closed_kib: int = 0


class _Ws:
    """What the WebSocket phases share."""

    def __init__(self, endpoint: WsEndpoint, nursery: trio.Nursery, problems: Problems) -> None:
        self.endpoint = endpoint
        self.nursery = nursery
        self.problems = problems
        self.next_index = 0

    async def open(self, count: int, concurrency: int) -> list[WsSession]:
        """Open and initialize ``count`` sessions, at most ``concurrency`` at a time."""

        def make() -> WsSession:
            self.next_index += 1
            return WsSession(self.next_index - 1, self.endpoint, self.problems)

        return await open_many(make, count, concurrency, self.nursery, self.problems)

    async def latency(self, calls: int, warmup: int) -> Latency:
        """Sequential echo calls on a fresh session: frame written to reply read, in ms."""
        session = (await self.open(1, 1))[0]
        samples: list[float] = []
        try:
            for i in range(warmup + calls):
                took = await session.timed_call()
                if i >= warmup:
                    samples.append(took)
        finally:
            await close_sessions([session])
        return _latency(samples)

    async def burst(self, sessions: list[WsSession]) -> BurstRun:
        """One echo call written on every session; time until the last reply is read."""

        async def write_all(calls: list[tuple[WsSession, bytes]]) -> None:
            for session, frame in calls:  # one writer per socket: never two sends on one session
                await session.send(frame, "tools/call")

        return await measure_burst(sessions, self.endpoint.pid, self.problems, write_all)


async def run_websocket(ws: _Ws, opts: Options, results: WsResults) -> None:
    """Warm-up, ``VmRSS_0``, ``--websocket-sessions`` held, a latency probe, the bursts."""
    say = _progress
    pid = ws.endpoint.pid
    say(f"WebSocket server: pid {pid}, port {ws.endpoint.port}; warm-up")
    await ws.latency(100, 0)
    results.rss0_kib = await settle_rss(pid, opts.settle_s)
    n = opts.websocket_sessions
    say(f"opening {n} WebSocket sessions")
    start = time.perf_counter()
    held = await ws.open(n, opts.open_concurrency)
    results.held = n
    results.open_s = time.perf_counter() - start
    results.rss_kib = await settle_rss(pid, opts.settle_s)
    results.kib_per_session = (results.rss_kib - results.rss0_kib) / n
    say(f"latency with {n} WebSocket sessions held")
    results.latency = await ws.latency(opts.latency_calls, opts.latency_warmup)
    results.bursts += await repeat_bursts(
        opts.burst_repeat, "WebSocket burst", n, lambda: ws.burst(held)
    )
    say("closing every WebSocket session")
    await close_sessions(held)
    results.rss_closed_kib = await settle_rss(pid, opts.settle_s)


async def bench_websocket(
    opts: Options, argv: list[str], env: dict[str, str], problems: Problems
) -> tuple[WsResults, int | None, list[str]]:
    """Start a fresh server, run the WebSocket phases, stop it: figures, exit status, log."""
    results = WsResults()
    with tempfile.TemporaryDirectory(prefix="ws-sessions-") as tmp:
        server = await start_server(argv, env, Path(tmp, "ws.stderr"))
        try:
            endpoint = WsEndpoint(server.host, server.port, server.process.pid)
            async with trio.open_nursery() as nursery:
                await run_guarded(
                    run_websocket(_Ws(endpoint, nursery, problems), opts, results),
                    nursery,
                    problems,
                    "a WebSocket phase",
                )
        finally:
            exit_status = await stop_server(server)
            log = await server_log(server)
    return results, exit_status, log


# -- output ----------------------------------------------------------------------------------


def print_bursts(runs: list[BurstRun], sent_column: str) -> None:
    """The table of burst runs (``sent_column``: the heading of the seconds spent sending)."""
    head = (
        f"{'run':>4} {'seconds':>8} {'answered/s':>11} {sent_column:>8} {'srv cpu %':>10}"
        f" {'srv µs/call':>12} {'client cpu %':>13}"
    )
    print(head)
    print("-" * len(head))
    for i, run in enumerate(runs, 1):
        mark = "  *" if run.server_cpu_pct < CONTENDED_CPU_PCT else ""
        print(
            f"{i:>4} {run.seconds:8.3f} {run.answered_per_s:11.0f} {run.posts_s:8.3f}"
            f" {run.server_cpu_pct:10.0f} {run.server_cpu_us_per_call:12.0f}"
            f" {run.client_cpu_pct:13.0f}{mark}"
        )


def report(opts: Options, results: Results, problems: Problems) -> int:
    """Print the tables and the target lines; return the exit code."""
    mib = 1024.0
    print(
        f"coremetry legacy HTTP+SSE sessions: server `{' '.join(opts.command)} --port 0` on "
        f"cpu {opts.server_cpu}, client on cpu {opts.client_cpu} "
        f"(python {platform.python_version()}, trio {trio.__version__}, "
        f"msgspec {msgspec.__version__})"
    )
    print(
        f"server RSS after start-up and warm-up, no session open: {results.rss0_kib / mib:.1f} MiB"
    )
    print()
    print(
        "(b1) server memory per idle session; (b3) tools/call echo latency, POST to reply on the "
        f"stream, {opts.latency_calls} sequential calls on a fresh session beside them, "
        f"interleaved in blocks of {opts.latency_block} with the same on the reference server "
        "(identical, never holds a session)"
    )
    head = (
        f"{'held':>6} {'open s':>7} {'opened/s':>9} {'RSS MiB':>8} {'+MiB':>7} {'KiB/sess':>9}"
        f" {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'ref p50':>8} {'p50/ref':>8}"
    )
    print(head)
    print("-" * len(head))

    def probe_cols(probe: Probe) -> str:
        ours = probe.ours
        return (
            f" {ours.p50_ms:7.3f} {ours.p90_ms:7.3f} {ours.p99_ms:7.3f} {probe.ref.p50_ms:8.3f}"
            f" {probe.ratio:7.2f}x"
        )

    if results.before is not None:
        print(
            f"{'0':>6} {'-':>7} {'-':>9} {results.rss0_kib / mib:8.1f} {'-':>7} {'-':>9}"
            + probe_cols(results.before)
            + "  (A/A: both idle)"
        )
    previous = 0
    for stage in results.stages:
        added = stage.held - previous
        previous = stage.held
        print(
            f"{stage.held:>6} {stage.open_s:7.2f} {added / stage.open_s:9.0f}"
            f" {stage.rss_kib / mib:8.1f} {(stage.rss_kib - results.rss0_kib) / mib:7.1f}"
            f" {stage.kib_per_session:9.1f}" + probe_cols(stage.probe)
        )
    if results.after is not None:
        print(
            f"{'0':>6} {'-':>7} {'-':>9} {results.rss_closed_kib / mib:8.1f}"
            f" {(results.rss_closed_kib - results.rss0_kib) / mib:7.1f} {'-':>9}"
            + probe_cols(results.after)
            + "  (all closed)"
        )
    if results.bursts:
        n = results.bursts[0].sessions
        print()
        print(
            f"(b2) burst: one tools/call echo POSTed on each of {n} open sessions over "
            f"{opts.post_connections} keep-alive sockets; first POST to last reply on the streams"
        )
        print_bursts(results.bursts, "POSTs s")
        if any(run.server_cpu_pct < CONTENDED_CPU_PCT for run in results.bursts):
            print(
                f"* the server had under {CONTENDED_CPU_PCT:.0f} % of its core: something else "
                "ran there (or the client could not keep up); that run's rate is low"
            )
        print(
            f"server RSS with {n} sessions held: {results.burst_rss_before_kib / mib:.1f} MiB "
            f"before the bursts, {results.burst_rss_after_kib / mib:.1f} MiB after"
        )
    ws = results.websocket
    if ws is not None and ws.held:
        print()
        print(
            f"(ws) the same over WebSocket sessions (GET {WS_PATH.decode()}, subprotocol mcp, "
            f"{WS_PROTOCOL_VERSION}) on a fresh server: RSS {ws.rss0_kib / mib:.1f} MiB after "
            f"warm-up, {ws.rss_kib / mib:.1f} MiB with {ws.held} idle sessions "
            f"(opened in {ws.open_s:.2f} s), {ws.rss_closed_kib / mib:.1f} MiB once all closed"
        )
        if ws.latency is not None:
            lat = ws.latency
            print(
                f"     tools/call echo, {lat.calls} sequential calls on a fresh session beside "
                f"them, frame written to reply read: p50 {lat.p50_ms:.3f} ms, "
                f"p90 {lat.p90_ms:.3f} ms, p99 {lat.p99_ms:.3f} ms"
            )
        if ws.bursts:
            print(
                f"     burst: one tools/call echo written on each of {ws.held} sockets; "
                "first frame written to last reply read"
            )
            print_bursts(ws.bursts, "sends s")
    print(
        f"client: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / mib:.1f} MiB, "
        f"{results.pool_connects} POST sockets opened to the server under test; its exit "
        f"status {results.server_exit}"
        + (
            f"; the WebSocket server's {results.websocket_server_exit}"
            if results.websocket is not None
            else ""
        )
    )
    if problems.notices:
        print(f"note: {problems.notices} server notifications/requests were seen (not replies)")
    if results.server_log:
        print(f"note: the servers wrote {len(results.server_log)} lines to stderr; the first:")
        for line in results.server_log[:10]:
            print(f"  | {line}")
    print()
    for stage in results.stages:
        verdict = "PASS" if stage.kib_per_session <= TARGET_KIB_PER_SESSION else "FAIL"
        print(
            f"(b1) server RSS per idle session, n={stage.held}: {stage.kib_per_session:.1f} KiB "
            f"(target <= {TARGET_KIB_PER_SESSION:.0f}; SDK {SDK_KIB_PER_SESSION}): {verdict}"
        )
    if results.bursts:
        best = max(results.bursts, key=lambda r: r.answered_per_s)
        verdict = "PASS" if best.answered_per_s >= TARGET_BURST_PER_S else "FAIL"
        print(
            f"(b2) burst at n={best.sessions}: {best.answered_per_s:.0f} answered/s, best of "
            f"{len(results.bursts)} (target >= {TARGET_BURST_PER_S:.0f}; SDK ~"
            f"{SDK_BURST_PER_S:.0f}): {verdict}"
        )
    if ws is not None and ws.held:
        sse_kib = (
            f"SSE {results.stages[-1].kib_per_session:.1f} KiB at n={results.stages[-1].held}"
            if results.stages
            else "no SSE figure"
        )
        print(
            f"(ws) server RSS per idle WebSocket session, n={ws.held}: "
            f"{ws.kib_per_session:.1f} KiB ({sse_kib}): informational"
        )
        if ws.bursts:
            ws_best = max(ws.bursts, key=lambda r: r.answered_per_s)
            sse_rate = (
                f"SSE {max(r.answered_per_s for r in results.bursts):.0f}/s"
                if results.bursts
                else "no SSE burst"
            )
            print(
                f"(ws) burst at n={ws_best.sessions} over WebSocket: "
                f"{ws_best.answered_per_s:.0f} answered/s, best of {len(ws.bursts)} "
                f"({sse_rate}): informational"
            )
    for stage in results.stages:
        ratio = stage.probe.ratio
        verdict = "PASS" if ratio <= LATENCY_TOLERANCE else "FAIL"
        print(
            f"(b3) p50 beside n={stage.held} held: {stage.probe.ours.p50_ms:.3f} ms vs "
            f"{stage.probe.ref.p50_ms:.3f} ms with none = {ratio:.2f}x (target: no worse, "
            f"<= {LATENCY_TOLERANCE:.2f}x for noise): {verdict}"
        )
    if problems.count:
        for text in problems.first:
            print(f"ERROR: {text}", file=sys.stderr)
        print(f"ERROR: {problems.count} correctness failures", file=sys.stderr)
        return 1
    return 0


def write_json(path: Path, opts: Options, results: Results, problems: Problems) -> None:
    """Write every figure (latency samples left out) as JSON."""

    def latency(lat: Latency) -> dict[str, float]:
        return {
            "calls": lat.calls,
            "p50_ms": lat.p50_ms,
            "p90_ms": lat.p90_ms,
            "p99_ms": lat.p99_ms,
        }

    def probe(p: Probe | None) -> dict[str, object] | None:
        if p is None:
            return None
        return {"ours": latency(p.ours), "ref": latency(p.ref), "p50_ratio": p.ratio}

    doc: dict[str, object] = {
        "options": asdict(opts),
        "python": platform.python_version(),
        "trio": trio.__version__,
        "rss0_kib": results.rss0_kib,
        "before": probe(results.before),
        "stages": [
            {
                "held": s.held,
                "open_s": s.open_s,
                "rss_kib": s.rss_kib,
                "kib_per_session": s.kib_per_session,
                "latency": probe(s.probe),
            }
            for s in results.stages
        ],
        "burst_rss_before_kib": results.burst_rss_before_kib,
        "burst_rss_after_kib": results.burst_rss_after_kib,
        "bursts": [asdict(b) for b in results.bursts],
        "rss_closed_kib": results.rss_closed_kib,
        "after": probe(results.after),
        "websocket": None
        if results.websocket is None
        else {
            "held": results.websocket.held,
            "open_s": results.websocket.open_s,
            "rss0_kib": results.websocket.rss0_kib,
            "rss_kib": results.websocket.rss_kib,
            "kib_per_session": results.websocket.kib_per_session,
            "rss_closed_kib": results.websocket.rss_closed_kib,
            "latency": None
            if results.websocket.latency is None
            else latency(results.websocket.latency),
            "bursts": [asdict(b) for b in results.websocket.bursts],
        },
        "correctness_failures": problems.count,
        "first_failures": problems.first,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


# -- main ------------------------------------------------------------------------------------


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text}") from None
    if not values or values[0] <= 0:
        raise argparse.ArgumentTypeError(f"counts must be positive: {text}")
    return tuple(values)


def parse_options(argv: list[str] | None) -> tuple[Options, Path | None]:
    """The command line."""
    parser = argparse.ArgumentParser(
        description="Legacy HTTP+SSE sessions at scale: RSS per idle session, burst rate, "
        "latency beside held sessions."
    )
    parser.add_argument(
        "--sessions", type=_counts, default=_counts(DEFAULT_SESSIONS), help="e.g. 100,1000,5000"
    )
    parser.add_argument(
        "--burst-sessions",
        type=non_negative,
        default=DEFAULT_BURST_SESSIONS,
        help="sessions in the burst (0: no burst)",
    )
    parser.add_argument("--burst-repeat", type=positive, default=5, help="bursts (best counts)")
    parser.add_argument(
        "--websocket-sessions",
        type=non_negative,
        default=DEFAULT_BURST_SESSIONS,
        help="WebSocket sessions held and burst on a fresh server after the SSE part (0: skip)",
    )
    parser.add_argument(
        "--latency-calls", type=positive, default=500, help="sequential calls per latency probe"
    )
    parser.add_argument(
        "--latency-warmup", type=non_negative, default=30, help="untimed calls first"
    )
    parser.add_argument(
        "--latency-block",
        type=positive,
        default=1,
        help="calls per block when interleaving with the reference server",
    )
    parser.add_argument(
        "--post-connections", type=positive, default=16, help="keep-alive POST sockets"
    )
    parser.add_argument(
        "--open-concurrency", type=positive, default=64, help="sessions being opened at once"
    )
    parser.add_argument(
        "--settle-s", type=float, default=1.0, help="wait before each RSS reading (seconds)"
    )
    parser.add_argument(
        "--keepalive-s", type=float, default=600.0, help="the server's SSE keep-alive interval"
    )
    parser.add_argument("--server-cpu", type=non_negative, default=0)
    parser.add_argument("--client-cpu", type=non_negative, default=1)
    parser.add_argument(
        "--server-command",
        # Not `serve --fixture`: since authentication, serve refuses unauthenticated sessions.
        default=f"{sys.executable} -m coremetry conformance-fixture",
        help="how to start the server (shell-quoted; '--port 0' is appended)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    opts = Options(
        sessions=args.sessions,
        burst_sessions=args.burst_sessions,
        burst_repeat=args.burst_repeat,
        latency_calls=args.latency_calls,
        latency_warmup=args.latency_warmup,
        latency_block=args.latency_block,
        post_connections=args.post_connections,
        open_concurrency=args.open_concurrency,
        settle_s=args.settle_s,
        keepalive_s=args.keepalive_s,
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        command=tuple(shlex.split(args.server_command)),
        websocket_sessions=args.websocket_sessions,
    )
    json_path: Path | None = args.json
    return opts, json_path


def raise_fd_limit(needed: int) -> str | None:
    """Raise this process's open-file limit (the server inherits it); why not, if it can't."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            return f"needs {needed} open files, the hard limit is {hard} (raise it: ulimit -Hn)"
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, print the report."""
    opts, json_path = parse_options(argv)
    if shutil.which("taskset") is None:
        print("ERROR: taskset (util-linux) is not on PATH", file=sys.stderr)
        return 2
    cpus = os.sched_getaffinity(0)
    if opts.server_cpu not in cpus or opts.client_cpu not in cpus:
        print(
            f"ERROR: cpus {opts.server_cpu} and {opts.client_cpu} needed; have {cpus}",
            file=sys.stderr,
        )
        return 2
    most = max(max(opts.sessions), opts.burst_sessions, opts.websocket_sessions) + 1
    fd_problem = raise_fd_limit(most + 2 * opts.post_connections + opts.open_concurrency + 256)
    if fd_problem is not None:
        print(f"ERROR: {fd_problem}", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {opts.client_cpu})  # the server gets its own core from taskset
    env = dict(os.environ)
    env["COREMETRY_SSE_KEEPALIVE_INTERVAL_S"] = str(opts.keepalive_s)
    if most > DEFAULT_MAX_SESSIONS:
        env["COREMETRY_SSE_MAX_SESSIONS"] = str(most + 16)
        env["COREMETRY_WEBSOCKET_MAX_CONNECTIONS"] = str(most + 16)
    argv_server = ["taskset", "-c", str(opts.server_cpu), *opts.command, "--port", "0"]
    results, problems = trio.run(bench, opts, argv_server, env)
    code = report(opts, results, problems)
    if json_path is not None:
        write_json(json_path, opts, results, problems)
    return code


if __name__ == "__main__":
    sys.exit(main())
