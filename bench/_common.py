"""Scaffolding shared by the bench scripts: argument types, the echo tool, reply checks, /proc.

Nothing here is timed on its own; each script keeps what it measures. Imported the way the
scripts import their siblings (``sys.path.insert(0, <bench dir>)`` then ``import _common``).
"""

import argparse
import os
from pathlib import Path
from typing import Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from coremetry.mcp import CallContext, Caller, Connection, Server

# -- command-line argument types -------------------------------------------------------------


def positive(text: str) -> int:
    """``argparse`` type: an integer > 0.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not positive (``ValueError`` when not an int).
    """
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def non_negative(text: str) -> int:
    """``argparse`` type: an integer >= 0.

    Raises:
        argparse.ArgumentTypeError: ``text`` is negative (``ValueError`` when not an int).
    """
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


# -- the tool under test ---------------------------------------------------------------------


class EchoArgs(Struct, kw_only=True):
    """Arguments of the benchmark's ``echo`` tool."""

    text: str


async def echo(args: EchoArgs, ctx: CallContext) -> str:
    """Return the text unchanged (the cheapest possible handler)."""
    return args.text


# -- reply checking --------------------------------------------------------------------------


class _ResultCheck(Struct):
    is_error: bool = msgspec.field(default=False, name="isError")


class _ReplyCheck(Struct):
    jsonrpc: str
    id: int | str | None = None
    result: _ResultCheck | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


def reply_problem(body: bytes | None, request_id: int) -> str | None:
    """Why ``body`` is not a successful JSON-RPC result reply to ``request_id``.

    Args:
        body: The reply's JSON bytes, ``None`` when there was no reply.
        request_id: The id the reply must carry.

    Returns:
        ``None`` for a result reply (``isError`` not true) with that id; else what is wrong,
        quoting the first 200 bytes.
    """
    if body is None:
        return "no reply"
    try:
        reply = msgspec.json.decode(body, type=_ReplyCheck)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"undecodable reply ({exc}): {body[:200]!r}"
    if not isinstance(reply.error, UnsetType):
        return f"error reply: {body[:200]!r}"
    if isinstance(reply.result, UnsetType):
        return f"reply without result: {body[:200]!r}"
    if reply.result.is_error:
        return f"tool error result: {body[:200]!r}"
    if reply.id != request_id:
        return f"reply id {reply.id!r} != {request_id}: {body[:200]!r}"
    return None


async def handshake_connection(
    server: Server, caller: Caller, version: str, request_id: int
) -> Connection:
    """A connection that did ``initialize`` at ``version`` and ``notifications/initialized``.

    Raises:
        RuntimeError: The server refused the handshake, answered the notification, or left
            the connection uninitialized or at another version.
    """
    conn = Connection(caller=caller, transport="bench")
    init = msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
    )
    reply = await server.handle(init, conn)
    problem = reply_problem(None if reply is None else reply.body, request_id)
    if problem is not None:
        raise RuntimeError(f"initialize failed: {problem}")
    initialized = msgspec.json.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
    if await server.handle(initialized, conn) is not None:
        raise RuntimeError("notifications/initialized was answered")
    if conn.protocol_version != version or not conn.initialized:
        raise RuntimeError(f"connection not initialized at {version}")
    return conn


# -- /proc -----------------------------------------------------------------------------------


_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far, in seconds (0 if gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return 0.0
    fields = text.rpartition(")")[2].split()
    # After "pid (comm)": state is fields[0], utime is field 14 of the line -> fields[11].
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
