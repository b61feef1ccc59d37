"""Reference server for ``bench/http_echo.py``: the official ``mcp`` SDK serving ``echo``.

Run: ``python bench/http_sdk_server.py --port P [--server hypercorn|uvicorn]``.

The SDK's high-level ``MCPServer`` (``mcp.server.mcpserver``) with one tool, ``echo(text)``
(unstructured output: the reply carries the text content only, as ours does), served by its
``streamable_http_app(stateless_http=True, json_response=True)`` Starlette app at ``/api/mcp``:
no sessions, one JSON reply per POST. Requests whose ``MCP-Protocol-Version`` header is not a
handshake-era revision (e.g. 2026-07-28) go to the SDK's per-request (modern) entry.

``--server hypercorn`` (default) serves the app with hypercorn's asyncio worker and the same
hypercorn settings as Coremetry (``coremetry.server.hypercorn_config``: access log off), so the
HTTP layer is the same as ours and only the MCP stack and the event loop differ.
``--server uvicorn`` serves it the way the SDK's own ``MCPServer.run("streamable-http")`` does
(uvicorn, here with the access log off). The SDK's log level is WARNING (no per-request log
line), as ours.
"""

import argparse
import sys
from typing import cast

from hypercorn.typing import Framework
from mcp.server.mcpserver import MCPServer

from coremetry.config import load_config
from coremetry.server import hypercorn_config

PATH = "/api/mcp"


def echo(text: str) -> str:
    """Return the given text unchanged (benchmark tool)."""
    return text


def build_app() -> Framework:
    """The SDK's stateless, JSON-response Streamable HTTP app with the echo tool."""
    server = MCPServer("sdk-bench", version="0", log_level="WARNING")
    server.add_tool(echo, name="echo", structured_output=False)
    app = server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True, host="127.0.0.1"
    )
    # Starlette's ASGI signature uses its own (looser) scope types; it is an ASGI 3 app.
    return cast(Framework, app)


def serve_hypercorn(app: Framework, host: str, port: int) -> None:
    """Serve on hypercorn's asyncio worker with Coremetry's hypercorn settings."""
    # The SDK runs on asyncio: this reference server is the one place in bench/ that uses it.
    import asyncio  # noqa: TID251

    from hypercorn.asyncio import serve

    config = load_config(overrides={"http": {"host": host, "port": port}})
    asyncio.run(serve(app, hypercorn_config(config)))


def serve_uvicorn(app: Framework, host: str, port: int) -> None:
    """Serve on uvicorn (the SDK's own choice), access log off."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve until killed."""
    parser = argparse.ArgumentParser(description="mcp SDK echo server (benchmark reference).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=["hypercorn", "uvicorn"], default="hypercorn")
    args = parser.parse_args(argv)
    host: str = args.host
    port: int = args.port
    app = build_app()
    try:
        if args.server == "uvicorn":
            serve_uvicorn(app, host, port)
        else:
            serve_hypercorn(app, host, port)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
