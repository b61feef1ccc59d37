"""The stdio transport: newline-delimited JSON-RPC on stdin/stdout (MCP ``basic/transports``).

- One JSON-RPC message per line, UTF-8; our messages never contain a raw newline (msgspec
  escapes newlines inside strings).
- Nothing but MCP messages is written to stdout; logs go to stderr.
- Requests are served concurrently (see :func:`coremetry.mcp.serve_connection`), so
  ``notifications/cancelled`` reaches a running call. When stdin closes, in-flight calls are
  allowed to finish (bounded by their deadlines), their answers are written, and the function
  returns: the process then exits cleanly.
- A line longer than ``max_line_bytes`` is answered with a ``-32700`` parse error (id ``null``)
  and skipped; the connection stays usable.
"""

import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final

import trio

from coremetry.mcp import Caller, Connection, Server, codes, serve_connection
from coremetry.mcp.wire import ENCODER, ErrorObject, ErrorResponse

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
) -> None:
    """Serve one MCP session on a pair of byte streams until the input ends.

    Args:
        server: the dispatcher.
        caller: the identity every call of this session runs as.
        stdin: where messages come from (default: the process's fd 0).
        stdout: where answers go (default: the process's fd 1).
        max_line_bytes: the longest accepted line, in bytes.

    Blocks until ``stdin`` reaches end-of-file and every in-flight call has answered. A broken
    ``stdout`` (the client went away) cancels the in-flight calls and returns.
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
                await output.send_all(message + b"\n")

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
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            lines = _lines(stdin, max_line_bytes, report_too_long)
            try:
                await serve_connection(server, conn, lines, drain_on_eof=True)
            finally:
                await lines.aclose()
            # serve_connection has drained every call; let the writer flush and stop.
            await out_send.aclose()
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        conn.cancel_all()
    finally:
        for stream in owned:
            await stream.aclose()
