"""The stdio transport: newline-delimited JSON-RPC on stdin/stdout (MCP ``basic/transports``).

- One JSON-RPC message per line, UTF-8; our messages never contain a raw line break: msgspec
  escapes CR/LF inside strings and :func:`~coremetry.mcp.wire.line_safe` escapes U+0085,
  U+2028 and U+2029, which some line splitters (Python's ``str.splitlines``) also break on.
- Nothing but MCP messages is written to stdout; logs go to stderr.
- Requests are served concurrently (see :func:`coremetry.mcp.serve_connection`), so
  ``notifications/cancelled`` reaches a running call. When stdin closes, in-flight calls are
  allowed to finish (bounded by their deadlines), their answers are written, and the function
  returns: the process then exits cleanly.
- On ``stop`` (SIGINT/SIGTERM in ``coremetry stdio``) the session drains
  (:mod:`coremetry.transports.drain`): every call in flight is answered — its result if it
  finishes within ``grace_s``, else the retryable shutdown error (``backend_unavailable`` for
  ``tools/call``, a JSON-RPC ``-32603`` with ``retryable: true`` otherwise); stdin is still
  read meanwhile, so a request sent during the drain is answered with the JSON-RPC
  shutting-down error and a ``notifications/cancelled`` still reaches its call. Once no call is
  in flight the function returns (the process exits 0).
- A line longer than ``max_line_bytes`` is answered with a ``-32700`` parse error (id ``null``)
  and skipped; the connection stays usable.
"""

import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final

import trio

from coremetry.mcp import Connection, Server, codes, serve_connection
from coremetry.mcp.wire import ENCODER, ErrorObject, ErrorResponse, line_safe
from coremetry.roles import Caller

from .drain import Drain

log = logging.getLogger("coremetry.stdio")

MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""Default cap on one inbound line, in bytes (16 MiB)."""

_READ_CHUNK_BYTES: Final = 65536


async def _lines(
    stream: trio.abc.ReceiveStream,
    max_line_bytes: int,
    too_long: Callable[[], Awaitable[None]],
) -> AsyncGenerator[bytes, None]:
    buffer = bytearray()
    skipping = False
    while True:
        chunk = await stream.receive_some(_READ_CHUNK_BYTES)
        if not chunk:
            break
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                if not skipping:
                    buffer += chunk[start:]
                    if len(buffer) > max_line_bytes:
                        buffer.clear()
                        skipping = True
                        await too_long()
                break
            if skipping:
                skipping = False
            else:
                buffer += chunk[start:newline]
                if len(buffer) > max_line_bytes:
                    await too_long()
                else:
                    yield bytes(buffer)
                buffer.clear()
            start = newline + 1
    if buffer and not skipping:
        yield bytes(buffer)


async def serve_stdio(
    server: Server,
    *,
    caller: Caller,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    stop: trio.Event | None = None,
    grace_s: float = 5.0,
    still_valid: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Serve one MCP session on a pair of byte streams until the input ends.

    Args:
        server: the dispatcher.
        caller: the identity every call of this session runs as.
        stdin: where messages come from (default: the process's fd 0).
        stdout: where answers go (default: the process's fd 1).
        max_line_bytes: the longest accepted line, in bytes.
        stop: when set (e.g. on SIGINT/SIGTERM), drain (module docstring) and return once
            every call in flight is answered.
        grace_s: after ``stop``, how long in-flight calls may take to finish, in seconds; those
            still running then are answered with the retryable shutdown error.
        still_valid: checked before each message; when it answers False (the session's
            credential was revoked or expired) reading stops and every call in flight is
            cancelled at once.

    Blocks until ``stdin`` reaches end-of-file (or ``stop`` is set) and every in-flight call
    has been answered. A broken ``stdout`` (the client went away) cancels the in-flight calls and
    returns.
    """
    owned: list[trio.lowlevel.FdStream] = []
    if stdin is None:
        fd_in = trio.lowlevel.FdStream(os.dup(0))
        owned.append(fd_in)
        stdin = fd_in
    if stdout is None:
        fd_out = trio.lowlevel.FdStream(os.dup(1))
        owned.append(fd_out)
        stdout = fd_out
    out_send, out_recv = trio.open_memory_channel[bytes](256)
    output = stdout

    async def writer() -> None:
        async with out_recv:
            async for message in out_recv:
                await output.send_all(line_safe(message) + b"\n")

    async def send(message: bytes) -> None:
        await out_send.send(message)

    too_long_error = ENCODER.encode(
        ErrorResponse(
            id=None,
            error=ErrorObject(
                code=codes.PARSE_ERROR,
                message=f"Parse error: line longer than {max_line_bytes} bytes",
            ),
        )
    )

    async def report_too_long() -> None:
        await send(too_long_error)

    conn = Connection(caller=caller, transport="stdio", send=send)
    # Lines flow reader -> channel -> serve_connection, so that the session can end (drained)
    # while the reader still waits for input.
    line_send, line_recv = trio.open_memory_channel[bytes](0)
    calls = trio.CancelScope()
    drain = Drain()
    source = stdin

    reading = trio.CancelScope()

    async def reader() -> None:
        with reading:
            async with line_send:
                lines = _lines(source, max_line_bytes, report_too_long)
                try:
                    async for line in lines:
                        if still_valid is not None and not await still_valid():
                            log.error("the session's credential is no longer valid; stopping")
                            calls.deadline = trio.current_time()  # cancel calls in flight
                            return
                        await line_send.send(line)
                finally:
                    await lines.aclose()

    watching = trio.CancelScope()

    async def on_stop(stop_event: trio.Event) -> None:
        with watching:
            await stop_event.wait()
            log.info("stopping: answering the calls in flight (up to %s s)", grace_s)
            drain.begin(grace_s)
            await drain.run()  # cuts off, at the deadline, the calls still running

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            nursery.start_soon(reader)
            if stop is not None:
                nursery.start_soon(on_stop, stop)
            # Tasks (task-augmented tools/call) run beside the session and end with it.
            async with server.tasks_running():
                with calls:
                    await serve_connection(server, conn, line_recv, drain_on_eof=True, drain=drain)
            reading.cancel()
            watching.cancel()
            # serve_connection has drained every call; let the writer flush and stop.
            await out_send.aclose()
            nursery.cancel_scope.deadline = trio.current_time() + grace_s
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        conn.cancel_all()
    finally:
        for stream in owned:
            await stream.aclose()
