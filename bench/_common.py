"""Scaffolding shared by the bench scripts: argument types, the reply check, /proc readings.

Nothing here is timed; each script keeps what it measures. Imported the way the scripts import
their siblings (``sys.path.insert(0, <bench dir>)``, then ``from _common import ...``). Standard
library and msgspec only, so a client-side script's own RSS stays what it was; what needs the
coremetry server is in ``_mcp_common``.
"""

import argparse
import os
from pathlib import Path
from typing import Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

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
