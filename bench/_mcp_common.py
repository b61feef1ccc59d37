"""Scaffolding shared by the in-process dispatch benches: the echo tool and the handshake.

Nothing here is timed. Imported like ``_common`` (``sys.path.insert(0, <bench dir>)``).
"""

import msgspec
from _common import reply_problem
from msgspec import Struct

from coremetry.mcp import CallContext, Caller, Connection, Server

# -- the tool under test ---------------------------------------------------------------------


class EchoArgs(Struct, kw_only=True):
    """Arguments of the benchmark's ``echo`` tool."""

    text: str


async def echo(args: EchoArgs, ctx: CallContext) -> str:
    """Return the text unchanged (the cheapest possible handler)."""
    return args.text


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
