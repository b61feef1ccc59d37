"""The ``coremetry`` command.

Subcommands:

- ``coremetry serve [--host H] [--port P] [--data-dir DIR] [--config FILE] [--fixture]`` — the
  HTTP server (Streamable HTTP, legacy SSE, WebSocket, ``/healthz``). Prints ``listening on
  http://HOST:PORT`` to stderr once bound; SIGINT/SIGTERM drain gracefully.
- ``coremetry stdio [--fixture] [--role ROLE] [--max-budget-s S]`` — MCP on stdin/stdout (for
  clients that launch a local process, e.g. Claude Desktop). Logs go to stderr.
- ``coremetry config show [--config FILE]`` — the effective configuration, secrets redacted.
- ``coremetry conformance-fixture [--port P]`` — the official conformance suite's fixture on
  loopback only, without authentication (a test fixture; never part of ``serve``).
- ``coremetry --version``.

Exit status: 0 on a clean end, 1 on a runtime error (e.g. the port is taken), 2 on a usage or
configuration error.
"""

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

import trio

from coremetry import __version__
from coremetry.config import Config, ConfigError, load_config, render_config
from coremetry.mcp import ROLES, Caller, Server


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coremetry",
        description="Coremetry MCP: investigate telemetry over the Model Context Protocol.",
    )
    parser.add_argument("--version", action="version", version=f"coremetry {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve MCP over HTTP (Streamable HTTP, SSE, WebSocket)")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port; 0 picks a free one (default 8080)")
    serve.add_argument("--data-dir", help="where the store and secrets live")
    serve.add_argument("--config", help="a TOML configuration file")
    serve.add_argument("--fixture", action="store_true", help="also serve the test fixture entries")
    _log_level_option(serve)

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
        default=None,
        help="server maximum for any call's deadline, in seconds (default: 60)",
    )
    stdio.add_argument("--config", help="a TOML configuration file")
    _log_level_option(stdio)

    config = sub.add_parser("config", help="inspect the configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    show = config_sub.add_parser("show", help="print the effective configuration (TOML)")
    show.add_argument("--config", help="a TOML configuration file")

    fixture = sub.add_parser(
        "conformance-fixture",
        help="serve the official conformance suite's fixture on loopback (tests only)",
    )
    fixture.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    fixture.add_argument("--port", type=int, default=0, help="TCP port (default: any free one)")
    _log_level_option(fixture)
    return parser


def _log_level_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default: WARNING)",
    )


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _load(args: argparse.Namespace) -> Config:
    overrides: dict[str, object] = {}
    http: dict[str, object] = {}
    if getattr(args, "host", None) is not None:
        http["host"] = args.host
    if getattr(args, "port", None) is not None:
        http["port"] = args.port
    if http:
        overrides["http"] = http
    if getattr(args, "data_dir", None) is not None:
        overrides["data_dir"] = args.data_dir
    if getattr(args, "max_budget_s", None) is not None:
        overrides["mcp"] = {"max_budget_s": args.max_budget_s}
    return load_config(getattr(args, "config", None), overrides=overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``coremetry`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit status.
    """
    args = _parser().parse_args(argv)
    try:
        config = _load(args)
    except ConfigError as exc:
        print(f"coremetry: {exc}", file=sys.stderr)
        return 2
    if args.command == "config":
        sys.stdout.write(render_config(config))
        return 0
    _setup_logging(str(args.log_level))
    from coremetry.server import build_mcp_server, serve

    mcp = build_mcp_server(
        fixture=bool(getattr(args, "fixture", False)),
        max_budget_s=config.mcp.max_budget_s,
        page_size=config.mcp.page_size,
        list_ttl_ms=config.mcp.list_ttl_ms,
        read_ttl_ms=config.mcp.read_ttl_ms,
    )
    try:
        if args.command == "stdio":
            caller = Caller(subject="local", role=str(args.role), kind="local")
            trio.run(_stdio, mcp, caller, config.http.graceful_shutdown_s)
            return 0
        if args.command == "conformance-fixture":
            return _conformance_fixture(args)
        _tune_gc()
        trio.run(lambda: serve(config, mcp, install_signal_handlers=True))
        return 0
    except BaseException as exc:  # mapped to exit codes below, re-raised otherwise
        # trio reports errors from inside nurseries as (nested) exception groups.
        leaf = _single_leaf(exc)
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        if isinstance(leaf, OSError):
            print(f"coremetry: {leaf.strerror or leaf}", file=sys.stderr)
            return 1
        raise


def _tune_gc() -> None:
    """Collect less often in a long-running server.

    With thousands of SSE sessions held the server tracks ~700k objects, and a full collection
    (0.4-0.5 s) cost 20-25% of its CPU during a burst (``bench/sse_sessions.py``). Freezing the
    start-up objects and raising the first threshold cut that to almost nothing, memory unchanged.
    """
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def _single_leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (else ``exc`` itself)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _stdio(mcp: Server, caller: Caller, grace_s: float) -> None:
    """Serve stdio; SIGINT/SIGTERM stop reading and let calls in flight answer first."""
    from coremetry.server import watch_signals
    from coremetry.transports.stdio import serve_stdio

    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals, stop)
        await serve_stdio(mcp, caller=caller, stop=stop, grace_s=grace_s)
        nursery.cancel_scope.cancel()


def _conformance_fixture(args: argparse.Namespace) -> int:
    from coremetry.server import serve
    from coremetry.testing.conformance import build_conformance_server
    from coremetry.transports._http import is_loopback_host

    host = str(args.host)
    if not is_loopback_host(host):
        print("coremetry: the conformance fixture only binds loopback addresses", file=sys.stderr)
        return 2
    config = load_config(overrides={"http": {"host": host, "port": int(args.port)}})
    trio.run(lambda: serve(config, build_conformance_server(), install_signal_handlers=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
