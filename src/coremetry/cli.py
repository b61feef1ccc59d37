"""The ``coremetry`` command.

Subcommands:

- ``coremetry stdio [--fixture] [--role ROLE] [--max-budget-s S]`` — serve MCP on stdin/stdout
  (for clients that launch a local process, e.g. Claude Desktop). Logs go to stderr.
- ``coremetry --version``.

Exit status: 0 on a clean end (stdin closed), 2 on a usage error.
"""

import argparse
import logging
import sys
from collections.abc import Sequence

import trio

from coremetry import __version__
from coremetry.mcp import ROLES, Caller


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coremetry",
        description="Coremetry MCP: investigate telemetry over the Model Context Protocol.",
    )
    parser.add_argument("--version", action="version", version=f"coremetry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    stdio = sub.add_parser("stdio", help="serve MCP as newline-delimited JSON-RPC on stdin/stdout")
    stdio.add_argument(
        "--fixture",
        action="store_true",
        help="also serve the test fixture tools, resources and prompts",
    )
    stdio.add_argument(
        "--role",
        choices=ROLES,
        default="viewer",
        help="the role the local caller is given (default: viewer)",
    )
    stdio.add_argument(
        "--max-budget-s",
        type=float,
        default=60.0,
        help="server maximum for any call's deadline, in seconds (default: 60)",
    )
    stdio.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default: WARNING)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``coremetry`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit status.
    """
    args = _parser().parse_args(argv)
    if args.command == "stdio":
        logging.basicConfig(
            stream=sys.stderr,
            level=str(args.log_level),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        from coremetry.server import build_mcp_server
        from coremetry.transports.stdio import serve_stdio

        server = build_mcp_server(fixture=bool(args.fixture), max_budget_s=float(args.max_budget_s))
        caller = Caller(subject="local", role=str(args.role), kind="local")
        try:
            trio.run(lambda: serve_stdio(server, caller=caller))
        except KeyboardInterrupt:
            return 130
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":
    sys.exit(main())
