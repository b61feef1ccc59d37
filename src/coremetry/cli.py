"""The ``coremetry`` command.

Subcommands:

- ``coremetry serve [--host H] [--port P] [--data-dir DIR] [--config FILE] [--fixture]
  [--store sqlite|clickhouse] [--clickhouse-url URL]`` — the HTTP server (Streamable HTTP,
  legacy SSE, WebSocket, ``/healthz``). Once bound, prints ``data dir DIR (telemetry store:
  WHERE)`` then ``listening on http://HOST:PORT`` to stderr (``--fixture``: the second line
  only); SIGINT/SIGTERM drain gracefully.
- ``coremetry stdio [--fixture] [--max-budget-s S]`` — MCP on stdin/stdout (for clients that
  launch a local process, e.g. Claude Desktop); the identity comes from the token in
  ``COREMETRY_TOKEN`` (a ``cmk_`` service token or a session JWT), and it refuses to start
  without a valid one. Logs go to stderr.
- ``coremetry user add NAME --role R [--password-stdin]`` / ``user list`` /
  ``user disable|enable|delete NAME`` / ``user passwd NAME [--password-stdin]`` — login users;
  disable, delete and passwd end the user's sessions at once, in every process.
- ``coremetry token create --name N --role R [--expires-in 30d]`` (prints the token alone on
  stdout, once; ``--replace`` revokes the token of that name first) / ``token list`` /
  ``token revoke NAME`` (frees the name) — service tokens.
- Every ``user``/``token`` change is written to the audit log (``call_kind`` ``admin``).
- ``coremetry audit tail [-n N] [--sub SUB]`` — the newest audit records, oldest first.
- ``coremetry ingest FILE… [--format …]`` — import telemetry files into the configured
  telemetry store (:mod:`coremetry.ingest.cli`).
- ``coremetry demo load [--data-dir DIR] [--force]`` — load the shipped demo telemetry, shifted
  so that it ends now (:mod:`coremetry.demo`); ``serve --demo`` does it first, then serves.
- ``coremetry detect [--range 12h] [--end now|latest|T] [--json]`` — find problems in the stored
  telemetry and keep them in ``<data_dir>/problems.json`` (:mod:`coremetry.detection.cli`).
- ``coremetry tools [--catalog compact|full] [--pretty]`` — the tool catalog and its size in
  bytes (:mod:`coremetry.observability.cli`).
- ``coremetry config show [--config FILE]`` — the effective configuration, secrets redacted.
- ``coremetry conformance-fixture [--port P]`` — the official conformance suite's fixture on
  loopback only, without authentication (a test fixture; never part of ``serve``).
- ``coremetry --version``.

Every command that opens the telemetry store (``serve``, ``stdio``, ``ingest``, ``demo load``,
``detect``) takes ``--store sqlite|clickhouse`` and ``--clickhouse-url URL``, overriding
``store.backend`` and ``clickhouse.url``: ``sqlite`` is ``<data_dir>/telemetry.db``.

Exit status: 0 on a clean end, 1 on a runtime error (e.g. the port is taken), 2 on a usage or
configuration error.
"""

import argparse
import gc
import getpass
import logging
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import msgspec
import trio

from coremetry import __version__
from coremetry.audit import AuditLog
from coremetry.auth import (
    TOKEN_PREFIX,
    AuthError,
    IdentityStore,
    RevokedToken,
    UnknownName,
    open_identity_store,
)
from coremetry.config import (
    ENV_PREFIX,
    SECRET_ENV_VARS,
    Config,
    ConfigError,
    load_config,
    render_config,
)
from coremetry.conformance_fixture.conformance import build_conformance_server
from coremetry.demo.cli import add_demo_parser, prepare_serve_demo, run_demo
from coremetry.detection.cli import add_detect_parser, run_detect
from coremetry.detection.problem_store import PROBLEMS_FILE
from coremetry.http_edge import is_loopback_host
from coremetry.ingest.cli import add_ingest_parser, run_ingest
from coremetry.mcp import Server
from coremetry.mcp.tasks import TASKS_FILE
from coremetry.observability.cli import add_tools_parser, run_tools
from coremetry.roles import ROLES, Caller
from coremetry.server import (
    Security,
    StdioLaunch,
    build_mcp_server,
    open_security,
    serve,
    serve_with_store,
    watch_signals,
)
from coremetry.store import TelemetryStore
from coremetry.store.errors import StoreError
from coremetry.store.open import open_telemetry_store
from coremetry.transports.stdio import serve_stdio


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
    serve.add_argument(
        "--demo",
        action="store_true",
        help="first load the shipped demo telemetry into the data dir (unless it is there)",
    )
    _store_options(serve)
    _log_level_option(serve)

    stdio = sub.add_parser("stdio", help="serve MCP as newline-delimited JSON-RPC on stdin/stdout")
    stdio.add_argument(
        "--fixture",
        action="store_true",
        help="also serve the test fixture tools, resources and prompts",
    )
    stdio.add_argument(
        "--data-dir",
        help="the data dir: the telemetry store (telemetry.db, unless --store clickhouse), "
        "the identity store and the problems (default from the config)",
    )
    stdio.add_argument(
        "--max-budget-s",
        type=float,
        default=None,
        help="server maximum for any call's deadline, in seconds (default: 60)",
    )
    stdio.add_argument("--config", help="a TOML configuration file")
    _store_options(stdio)
    _log_level_option(stdio)

    _store_options(add_ingest_parser(sub))

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="a TOML configuration file")
    common.add_argument("--data-dir", help="where the identity store lives")
    user = sub.add_parser("user", help="manage login users")
    user_sub = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    user_add = user_sub.add_parser(
        "add", help="add a user (password from a prompt or stdin)", parents=[common]
    )
    user_add.add_argument("name")
    user_add.add_argument("--role", choices=ROLES, required=True)
    user_add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin (8 characters to 1024 bytes)",
    )
    user_sub.add_parser("list", help="list users (never their passwords)", parents=[common])
    for action, text in (
        ("disable", "disable a user: no login, its sessions end at once"),
        ("enable", "let a disabled user log in again"),
        ("delete", "delete a user; its sessions end at once"),
    ):
        user_sub.add_parser(action, help=text, parents=[common]).add_argument("name")
    user_passwd = user_sub.add_parser(
        "passwd",
        help="set a user's password (from a prompt or stdin); its sessions end at once",
        parents=[common],
    )
    user_passwd.add_argument("name")
    user_passwd.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin (8 characters to 1024 bytes)",
    )
    token = sub.add_parser("token", help="manage service tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    token_create = token_sub.add_parser(
        "create", help="create a token; printed once on stdout", parents=[common]
    )
    token_create.add_argument("--name", required=True)
    token_create.add_argument("--role", choices=ROLES, required=True)
    token_create.add_argument(
        "--replace",
        action="store_true",
        help="revoke the token of that name, if any, and create the new one (a rotation)",
    )
    token_create.add_argument(
        EXPIRES_IN,
        type=_expires_in_s,
        help="lifetime such as 30d, 12h, 90m or 3600s (default: no expiry)",
    )
    token_sub.add_parser("list", help="list tokens (never the tokens themselves)", parents=[common])
    token_revoke = token_sub.add_parser(
        "revoke", help="revoke a token at once (its name may then be reused)", parents=[common]
    )
    token_revoke.add_argument("name")
    audit = sub.add_parser("audit", help="read the audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    audit_tail = audit_sub.add_parser(
        "tail", help="the newest records, oldest first (the newest last, as tail)", parents=[common]
    )
    audit_tail.add_argument("-n", type=int, default=50, help="how many (default 50)")
    audit_tail.add_argument("--sub", help="only this identity")

    _store_options(add_demo_parser(sub))
    _store_options(add_detect_parser(sub))
    add_tools_parser(sub)

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


def _stdio_launch(args: argparse.Namespace) -> StdioLaunch:
    """How ``serve`` was configured, for the stdio server a client launches beside it.

    Its ``--config`` (absolute), its store options, and the ``COREMETRY_*`` variables it runs
    with (the data dir and the token are set by :func:`~coremetry.server.first_start_message`)
    but the secrets (:data:`~coremetry.config.SECRET_ENV_VARS`), which are named, not printed.
    """
    launch = ["stdio"]
    if args.config:
        launch += ["--config", str(Path(args.config).expanduser().resolve())]
    if args.store:
        launch += ["--store", str(args.store)]
    if args.clickhouse_url:
        launch += ["--clickhouse-url", str(args.clickhouse_url)]
    ours = {
        name: value
        for name, value in os.environ.items()
        if name.startswith(ENV_PREFIX) and name not in ("COREMETRY_TOKEN", "COREMETRY_DATA_DIR")
    }
    return StdioLaunch(
        args=tuple(launch),
        env={name: value for name, value in ours.items() if name not in SECRET_ENV_VARS},
        withheld=tuple(sorted(name for name in ours if name in SECRET_ENV_VARS)),
    )


def _store_options(parser: argparse.ArgumentParser) -> None:
    """``--store`` / ``--clickhouse-url`` of every command that opens the telemetry store."""
    parser.add_argument(
        "--store",
        choices=("sqlite", "clickhouse"),
        help="telemetry store backend (default: store.backend, sqlite)",
    )
    parser.add_argument(
        "--clickhouse-url",
        help="ClickHouse HTTP interface, e.g. http://host:8123 (no password: put it in "
        "COREMETRY_CLICKHOUSE_PASSWORD or clickhouse.password_file)",
    )


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
    if getattr(args, "store", None) is not None:
        overrides["store"] = {"backend": args.store}
    if getattr(args, "clickhouse_url", None) is not None:
        overrides["clickhouse"] = {"url": args.clickhouse_url}
    return load_config(getattr(args, "config", None), overrides=overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``coremetry`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit status.
    """
    args = _parser().parse_args(_attach_dash_values(sys.argv[1:] if argv is None else argv))
    try:
        config = _load(args)
    except ConfigError as exc:
        print(f"coremetry: {exc}", file=sys.stderr)
        return 2
    if args.command == "config":
        sys.stdout.write(render_config(config))
        return 0
    if args.command == "ingest":
        return run_ingest(args, config)
    if args.command in ("user", "token", "audit"):
        return _admin(args, config)
    if args.command == "demo":
        return run_demo(args, config)
    if args.command == "detect":
        return run_detect(args, config)
    if args.command == "tools":
        return run_tools(args)
    if args.command == "serve" and args.demo and (status := prepare_serve_demo(config)):
        return status
    _setup_logging(str(args.log_level))

    build_mcp = partial(
        build_mcp_server,
        fixture=bool(getattr(args, "fixture", False)),
        max_budget_s=config.mcp.max_budget_s,
        page_size=config.mcp.page_size,
        list_ttl_ms=config.mcp.list_ttl_ms,
        read_ttl_ms=config.mcp.read_ttl_ms,
        output_budget_bytes=config.mcp.output_budget_bytes,
        problems_path=Path(config.data_dir).expanduser() / PROBLEMS_FILE,
        max_store_calls_per_identity=config.store.max_calls_per_identity,
        max_store_calls=config.store.max_calls,
        task_max_budget_s=config.mcp.task_max_budget_s,
        task_ttl_ms=config.mcp.task_ttl_ms,
        task_poll_interval_ms=config.mcp.task_poll_interval_ms,
        task_result_budget_bytes=config.mcp.task_result_budget_bytes,
        task_store_path=Path(config.data_dir).expanduser() / TASKS_FILE,
    )
    try:
        if args.command == "stdio":
            return _run_stdio(lambda store: build_mcp(store=store), config)
        if args.command == "conformance-fixture":
            return _conformance_fixture(args)
        security = open_security(config)
        first = security.store.create_first_admin_token()
        _tune_gc()
        try:
            # The telemetry store is opened inside the loop, around the server
            # (serve_with_store): the OTLP receiver writes into it, the tools read it.
            trio.run(
                lambda: serve_with_store(
                    config,
                    lambda store: build_mcp(store=store),
                    install_signal_handlers=True,
                    security=security,
                    first_admin_token=first[0] if first is not None else None,
                    stdio_launch=_stdio_launch(args),
                    # --fixture: stderr stays exactly the "listening on" line.
                    name_data_dir=not getattr(args, "fixture", False),
                )
            )
        finally:
            security.close()
        return 0
    except BaseException as exc:  # mapped to exit codes below, re-raised otherwise
        # trio reports errors from inside nurseries as (nested) exception groups.
        leaf = _single_leaf(exc)
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        if isinstance(leaf, OSError):
            where = f" ({leaf.filename})" if leaf.filename else ""
            print(f"coremetry: {leaf.strerror or leaf}{where}", file=sys.stderr)
            return 1
        if isinstance(leaf, StoreError):
            print(f"coremetry: telemetry store: {leaf}", file=sys.stderr)
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


def _run_stdio(build_mcp: Callable[[TelemetryStore], Server], config: Config) -> int:
    """Serve stdio as the identity in ``COREMETRY_TOKEN``; refuse to start without one.

    The telemetry store is opened inside the loop (as for ``serve``), so the tools read it.
    """
    token = os.environ.get("COREMETRY_TOKEN", "").strip()
    if not token:
        print(
            "coremetry: set COREMETRY_TOKEN to a service token "
            "(create one with: coremetry token create --name NAME --role viewer)",
            file=sys.stderr,
        )
        return 2
    security = open_security(config)
    try:
        try:
            if token.startswith(TOKEN_PREFIX):
                claims = security.store.verify_token(token)
            else:
                claims = security.issuer.verify(token)
                if security.store.session_generation(claims.sub) != claims.generation:
                    raise RevokedToken(f"JWT of user {claims.sub!r} ended by an account change")
        except AuthError:
            print("coremetry: COREMETRY_TOKEN is not a valid token", file=sys.stderr)
            return 2
        still_valid_at_end = trio.run(
            _stdio, build_mcp, claims.to_caller(), security, token, config
        )
        if not still_valid_at_end:
            print(
                "coremetry: COREMETRY_TOKEN is no longer valid (revoked or expired); the session"
                " ended",
                file=sys.stderr,
            )
            return 2
        return 0
    finally:
        security.close()


async def _stdio(
    build_mcp: Callable[[TelemetryStore], Server],
    caller: Caller,
    security: Security,
    token: str,
    config: Config,
) -> bool:
    """Serve stdio; SIGINT/SIGTERM stop reading and let calls in flight answer first.

    The token is verified again before each message (the authenticator caches and checks
    revocation in memory), so a revoked token or an expired JWT ends the session at once.

    Returns:
        ``False`` when the session ended because the token stopped being valid (the CLI then
        exits with status 2, as when it refuses to start), else ``True``.
    """
    headers = {"authorization": f"Bearer {token}"}

    ended_invalid = False

    async def still_valid() -> bool:
        nonlocal ended_invalid
        try:
            again = await security.authenticator(_HeaderMap(headers))
        except Exception:
            ended_invalid = True
            return False
        valid = again.subject == caller.subject and again.role == caller.role
        ended_invalid = not valid
        return valid

    stop = trio.Event()
    grace_s = config.http.graceful_shutdown_s
    async with open_telemetry_store(config) as store, trio.open_nursery() as nursery:
        mcp = build_mcp(store)
        security.install(mcp)
        nursery.start_soon(watch_signals, stop)
        await nursery.start(security.audit.run_writer)
        await serve_stdio(mcp, caller=caller, stop=stop, grace_s=grace_s, still_valid=still_valid)
        with trio.CancelScope(shield=True):
            await security.audit.aclose()
        nursery.cancel_scope.cancel()
    return not ended_invalid


class _HeaderMap:
    """Headers for the authenticator from a plain mapping (lower-case names)."""

    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def get(self, name: str, /) -> str | None:
        """The header's value, or ``None``."""
        return self._values.get(name)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_DURATION_S = 100 * 365 * 86400.0


def parse_duration_s(text: str) -> float:
    """``"30d"`` -> 2592000.0 seconds (units s, m, h, d).

    Raises:
        ValueError: not a number followed by one of the units, not positive (``-5m``, ``0s``),
            or more than 100 years.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None or not float(match.group(1)):
        if match is None and not text.strip().startswith("-"):
            raise ValueError(f"invalid duration {text!r}: use e.g. 30d, 12h, 90m or 3600s")
        raise ValueError(
            f"invalid duration {text!r}: must be a positive duration like 30d, 12h, 90m or 3600s"
        )
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds > _MAX_DURATION_S:
        raise ValueError(f"invalid duration {text!r}: must be at most 100 years")
    return seconds


EXPIRES_IN = "--expires-in"
"""``token create``'s lifetime option."""

_DASH_VALUE = re.compile(r"-[\d.]")


def _expires_in_s(text: str) -> float:
    """``--expires-in``'s argparse type: the lifetime in seconds (argparse names the option).

    Raises:
        argparse.ArgumentTypeError: not a positive duration of at most 100 years.
    """
    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _attach_dash_values(argv: Sequence[str]) -> list[str]:
    """``--expires-in -5m`` -> ``--expires-in=-5m``, so both spellings give the same error.

    argparse takes a separate value that starts with ``-`` and is not a plain negative number
    (``-5m``) for an option, and fails with "expected one argument" instead of saying what is
    wrong with the value. Joined with ``=``, the value reaches the option's type, whose error
    names ``--expires-in``. Only values that start like a number (``-5m``, ``-.5h``) are joined;
    the option may be abbreviated (``--exp``) as argparse allows. Stops at ``--``.
    """
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        is_option = len(arg) > len("--e") and EXPIRES_IN.startswith(arg)
        if is_option and i + 1 < len(args) and _DASH_VALUE.match(args[i + 1]):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _when(unix_s: int | None) -> str:
    if unix_s is None:
        return "-"
    try:
        return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"@{unix_s}"  # beyond what datetime can show: the raw unix seconds


def _admin(args: argparse.Namespace, config: Config) -> int:
    """``coremetry user|token|audit …``: administration against the data dir."""
    data_dir = Path(config.data_dir).expanduser()
    try:
        if args.command == "audit":
            entries = AuditLog.from_config(config).tail(int(args.n), sub=args.sub)
            for entry in reversed(entries):  # tail() is newest first; print as `tail` does
                sys.stdout.write(msgspec.json.encode(entry).decode() + "\n")
            sys.stdout.flush()
            return 0
        return _admin_store(args, data_dir, AuditLog.from_config(config))
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = exc.filename or data_dir
        print(f"coremetry: cannot use data dir {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _stdin_is_a_terminal() -> bool:
    """Whether stdin is an interactive terminal (a prompt may then wait for a person)."""
    return sys.stdin is not None and sys.stdin.isatty()


def _local_actor() -> Caller:
    """Who runs an admin command, for the audit log: the operating-system user."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        who = f"uid{os.getuid()}"
    return Caller(subject=f"local:{who}", role="admin", kind="local")


def _read_password(args: argparse.Namespace, command: str) -> str | int:
    """The new password of ``user add|passwd``: from stdin, or a prompt on a terminal only.

    Returns:
        The password, or the exit status when none could be read (never prompts when stdin is
        not a terminal).
    """
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    if not _stdin_is_a_terminal():
        # getpass would ask on /dev/tty even so, and wait for a person who may not be there
        # (a script, CI, a test run from a terminal): never prompt then.
        print(
            "coremetry: no terminal to ask for the password on: pipe it in with"
            " --password-stdin (e.g. printf '%s\\n' \"$PASSWORD\" | coremetry user"
            f" {command} --password-stdin)",
            file=sys.stderr,
        )
        return 2
    try:
        return getpass.getpass(f"password for {args.name}: ")
    except EOFError:
        print("\ncoremetry: no password given (use --password-stdin to pipe one)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C at the prompt: one line, no traceback (getpass restored echo).
        print("\ncoremetry: interrupted", file=sys.stderr)
        return 130


def _admin_store(args: argparse.Namespace, data_dir: Path, audit: AuditLog) -> int:
    """``coremetry user|token …`` against the identity store; every change is audited."""
    with open_identity_store(data_dir) as store:
        if args.command == "user" and args.user_command == "list":
            for user in store.list_users():
                state = "\tdisabled" if user.disabled else ""
                print(f"{user.name}\t{user.role}\tcreated {_when(user.created_at)}{state}")
            return 0
        if args.command == "token" and args.token_command == "list":
            now = int(time.time())
            for info in store.list_tokens():
                expired = info.expires_at is not None and info.expires_at <= now
                state = "revoked" if info.revoked else "expired" if expired else "active"
                print(
                    f"{info.name}\t{info.role}\t{state}\tcreated {_when(info.created_at)}"
                    f"\texpires {_when(info.expires_at)}\tlast used {_when(info.last_used_at)}"
                )
            return 0
        action = (
            f"{args.command} {args.user_command if args.command == 'user' else args.token_command}"
        )
        if action == "token create" and args.replace:
            action = "token replace"
        password = ""
        if action in ("user add", "user passwd"):
            command = (
                f"add {args.name} --role {args.role}"
                if action == "user add"
                else f"passwd {args.name}"
            )
            read = _read_password(args, command)
            if isinstance(read, int):
                return read
            password = read
        outcome, status = "ok", 0
        try:
            _admin_change(store, action, args, password)
        except UnknownName as exc:
            print(f"coremetry: {exc}", file=sys.stderr)
            outcome, status = "not_found", 1
        except ValueError as exc:
            print(f"coremetry: {exc}", file=sys.stderr)
            outcome, status = "bad_args", 2
        try:
            audit.record_admin(
                _local_actor(),
                transport="cli",
                action=action,
                target=str(args.name),
                outcome=outcome,
            )
        except sqlite3.Error as exc:
            print(
                f"coremetry: {action} {args.name}: could not write the audit log: {exc}",
                file=sys.stderr,
            )
            return status or 1
    return status


def _admin_change(
    store: IdentityStore, action: str, args: argparse.Namespace, password: str
) -> None:
    """Apply one ``user``/``token`` change and say what was done (the token alone on stdout).

    Raises:
        UnknownName: no such user or token.
        ValueError: a bad name, role, password or lifetime, or a name already taken.
    """
    name = str(args.name)
    if action == "user add":
        store.add_user(name, str(args.role), password)
        print(f"added user {name} ({args.role})", file=sys.stderr)
    elif action == "user passwd":
        store.set_password(name, password)
        print(f"changed the password of user {name}; its sessions have ended", file=sys.stderr)
    elif action == "user disable":
        store.disable_user(name)
        print(f"disabled user {name}; its sessions have ended", file=sys.stderr)
    elif action == "user enable":
        store.enable_user(name)
        print(f"enabled user {name}", file=sys.stderr)
    elif action == "user delete":
        store.delete_user(name)
        print(f"deleted user {name}; its sessions have ended", file=sys.stderr)
    elif action in ("token create", "token replace"):
        expires: float | None = args.expires_in  # seconds, from _expires_in_s
        secret, _info = store.create_token(name, str(args.role), expires, replace=args.replace)
        sys.stdout.write(secret + "\n")
    else:
        store.revoke_token(name)
        print(f"revoked token {name}", file=sys.stderr)


def _conformance_fixture(args: argparse.Namespace) -> int:

    host = str(args.host)
    if not is_loopback_host(host):
        print("coremetry: the conformance fixture only binds loopback addresses", file=sys.stderr)
        return 2
    config = load_config(overrides={"http": {"host": host, "port": int(args.port)}})
    trio.run(lambda: serve(config, build_conformance_server(), install_signal_handlers=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
