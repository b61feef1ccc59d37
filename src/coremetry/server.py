"""Assembly of the server process: the MCP registry, the ASGI app, hypercorn, shutdown.

``serve()`` runs hypercorn's trio worker (:mod:`coremetry.http_worker`: every connection
contained) inside our own nursery (``shared/STYLE.md`` habit 18), reports the bound address
through ``task_status`` and prints ``listening on http://HOST:PORT`` to stderr once the socket
is bound. SIGINT/SIGTERM (or the ``shutdown`` event) drain gracefully
(:mod:`coremetry.transports.drain`): new requests get 503 with ``Retry-After`` (on an open
SSE session or WebSocket, the JSON-RPC shutting-down error) while the calls in flight on every
transport get ``http.graceful_shutdown_s`` to finish — those still running then are answered
with a retryable shutdown error — and each session ends once its calls are answered; once no
call is in flight the listener closes; hypercorn then gives the connections still open
``graceful_shutdown_s`` more before cancelling them and closing their sockets.
"""

import shlex
import shutil
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec
import trio
from hypercorn.config import Config as HypercornConfig

from coremetry import __version__
from coremetry.access import RateLimiter, make_call_gate
from coremetry.app import CoremetryApp
from coremetry.audit import AuditLog, register_audit_resource
from coremetry.auth import (
    Authenticator,
    IdentityStore,
    JwtIssuer,
    LoginService,
    OidcVerifier,
    TicketBook,
    load_or_create_secret,
    open_identity_store,
)
from coremetry.auth.oauth_resource import PublicUrls
from coremetry.auth.oauth_server import AccessTokenChecker, AccessTokens, OAuthServer
from coremetry.auth.oauth_store import OAuthStore
from coremetry.config import Config
from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.detection.service import serve_detection
from coremetry.http_worker import serve_http
from coremetry.mcp import CallContext, Resource, Server, versions
from coremetry.observability import STORE_ERROR_CLASSES, register_observability
from coremetry.observability.admission import DEFAULT_MAX_CALLS, DEFAULT_MAX_CALLS_PER_IDENTITY
from coremetry.store import TelemetryStore
from coremetry.store.open import open_telemetry_store, store_location
from coremetry.supervision import supervise

INSTRUCTIONS = (
    "Coremetry exposes a system's telemetry (traces, logs, metrics, detected problems, deploys). "
    "Start from summaries, then drill down; every tool is read-only. Errors come as JSON with "
    "error, retryable, hint and detail: follow the hint."
)

DRAIN_ANSWER_MARGIN_S = 1.0
"""After the drain's deadline, how long the answers of cut-off calls get to be written before
the listener closes, in seconds."""

Register = Callable[[Server], None]
"""Adds entries to a server's registries."""


def build_mcp_server(
    *,
    fixture: bool = False,
    max_budget_s: float = 60.0,
    page_size: int = 100,
    list_ttl_ms: int = 60_000,
    read_ttl_ms: int = 0,
    store: TelemetryStore | None = None,
    output_budget_bytes: int = 16 * 1024,
    problems_path: Path | None = None,
    max_store_calls_per_identity: int = DEFAULT_MAX_CALLS_PER_IDENTITY,
    max_store_calls: int = DEFAULT_MAX_CALLS,
    task_max_budget_s: float = 600.0,
    task_ttl_ms: int = 3_600_000,
    task_poll_interval_ms: int = 1000,
    task_result_budget_bytes: int = 8 * 1024 * 1024,
    task_store_path: Path | None = None,
) -> Server:
    """Build the dispatcher with the production registry.

    Args:
        fixture: also register the test fixture entries
            (:mod:`coremetry.conformance_fixture.fixture`).
        max_budget_s: the server maximum for any call's deadline, in seconds.
        page_size: items per page of the list methods.
        list_ttl_ms: ``ttlMs`` of 2026-07-28 list results, in milliseconds.
        read_ttl_ms: ``ttlMs`` of 2026-07-28 ``resources/read`` results, in milliseconds.
        store: the telemetry store the observability tools read (none: no telemetry tools).
        output_budget_bytes: the largest tool, resource or prompt result, in bytes of JSON.
        problems_path: the detector's problems file (``<data_dir>/problems.json``) the problem
            tools read; ``None``: they say no detection has run.
        max_store_calls_per_identity: store calls one identity may run at once
            (``store.max_calls_per_identity``, :mod:`coremetry.observability.admission`).
        max_store_calls: store calls all identities may run at once (``store.max_calls``).
        task_max_budget_s: the deadline of a call running as a task, in seconds.
        task_ttl_ms: how long a task is kept from its creation, at most, in ms.
        task_poll_interval_ms: the polling interval suggested to task clients, in ms.
        task_result_budget_bytes: bytes of finished task results kept per identity.
        task_store_path: the tasks file (``<data_dir>/tasks.json``); ``None``: memory only.

    Returns:
        A ready :class:`~coremetry.mcp.Server`.
    """
    server = Server(
        "coremetry",
        __version__,
        title="Coremetry MCP",
        instructions=INSTRUCTIONS,
        max_budget_s=max_budget_s,
        page_size=page_size,
        list_ttl_ms=list_ttl_ms,
        read_ttl_ms=read_ttl_ms,
        # The store's exceptions as tool errors: handed in here, not registered process-wide.
        error_classes=STORE_ERROR_CLASSES,
        task_max_budget_s=task_max_budget_s,
        task_ttl_ms=task_ttl_ms,
        task_poll_interval_ms=task_poll_interval_ms,
        task_result_budget_bytes=task_result_budget_bytes,
        task_store_path=task_store_path,
    )

    async def server_info(uri: str, ctx: CallContext) -> str:
        # Counts are what this caller's role can see, never entries hidden from it.
        return msgspec.json.encode(
            {
                "name": "coremetry",
                "version": __version__,
                "protocol_versions": list(versions.ALL_VERSIONS),
                "protocol_version_in_use": ctx.protocol_version,
                "caller": {"subject": ctx.caller.subject, "role": ctx.caller.role},
                **server.visible_counts(ctx.caller.role),
            }
        ).decode()

    server.register_resource(
        Resource(
            "coremetry://server",
            "server",
            server_info,
            title="Coremetry server",
            description="What this server is: version, protocol revisions, how many tools, "
            "resources and prompts the caller can use, and the identity it is seen as.",
        )
    )
    if fixture:
        register_fixture(server)
    if store is not None:
        register_observability(
            server,
            store,
            budget_bytes=output_budget_bytes,
            problems_path=problems_path,
            max_calls_per_identity=max_store_calls_per_identity,
            max_calls=max_store_calls,
        )
    return server


def data_dir_line(config: Config) -> str:
    """``data dir <dir> (telemetry store: <where>)``: what ``coremetry serve`` says at start.

    ``<dir>`` is ``config.data_dir`` with ``~`` expanded and made absolute; ``<where>`` is
    :func:`store_location`.
    """
    data_dir = Path(config.data_dir).expanduser().absolute()
    return f"data dir {data_dir} (telemetry store: {store_location(config)})"


def tokens_hint(config: Config) -> str:
    """What ``serve`` says when the data dir already had its admin token (not a first start).

    The first start of a data dir prints its admin token once (:func:`first_start_message`);
    a later start, or a fresh clone run against a data dir used before, would otherwise print
    no way in. The line names the command that makes another token for this data dir.
    """
    data_dir = shlex.quote(str(Path(config.data_dir).expanduser().absolute()))
    return (
        "this data dir already has service tokens (its admin token was printed on its first "
        f"start); make another with: coremetry token create --data-dir {data_dir} "
        "--name <name> --role admin"
    )


def _preface(config: Config, security: "Security | None", first_admin_token: str | None) -> str:
    if security is None or first_admin_token is not None:
        return data_dir_line(config)
    return f"{data_dir_line(config)}\n{tokens_hint(config)}"


class Security:
    """Authentication, the call gate and the audit log of a production server.

    Built by :func:`open_security` from the data dir; :func:`serve` plugs it in: the
    authenticator behind every HTTP transport and the REST API, ``POST /api/auth/login``, the
    role-then-rate gate, and one audit record per gated call. Without it, :func:`serve` treats
    every caller as an anonymous viewer (tests, the conformance fixture).
    """

    def __init__(
        self,
        *,
        store: IdentityStore,
        issuer: JwtIssuer,
        authenticator: Authenticator,
        login: LoginService,
        limiter: RateLimiter,
        audit: AuditLog,
        output_budget_bytes: int = 16 * 1024,
        tickets: TicketBook | None = None,
        oauth: OAuthServer | None = None,
    ) -> None:
        self.oauth = oauth
        """The built-in OAuth authorization server (``auth.oauth.enabled``), or ``None``."""
        self.store = store
        self.issuer = issuer
        self.authenticator = authenticator
        self.login = login
        self.limiter = limiter
        self.audit = audit
        self.output_budget_bytes = output_budget_bytes
        self.tickets = tickets if tickets is not None else TicketBook()
        """Single-use WebSocket tickets (``POST /api/mcp/ws-ticket``)."""

    def install(self, mcp: Server) -> None:
        """Plug the gate, the audit observer and the admin audit resource into ``mcp``."""
        mcp.set_call_gate(make_call_gate(self.limiter))
        mcp.set_call_observer(self.audit.observe)
        register_audit_resource(mcp, self.audit, budget_bytes=self.output_budget_bytes)

    def close(self) -> None:
        """Close the identity and OAuth stores (the audit log is closed by :func:`serve`)."""
        if self.oauth is not None:
            self.oauth.store.close()
        self.store.close()


def open_security(config: Config) -> Security:
    """Open the identity store, JWT secret, rate limiter and audit log under ``data_dir``.

    Blocking (creates files; the CLI calls it before the event loop starts).

    Raises:
        OSError: the data dir cannot be created or read.
    """
    data_dir = Path(config.data_dir).expanduser()
    store = open_identity_store(data_dir)
    secret = load_or_create_secret(data_dir)
    issuer = JwtIssuer(secret)
    audit = AuditLog.from_config(config)
    oauth: OAuthServer | None = None
    checker: AccessTokenChecker | None = None
    if config.auth.oauth.enabled:
        # Issue 18: the built-in authorization server; its access tokens share the JWT secret.
        tokens = AccessTokens(secret, ttl_s=config.auth.oauth.access_token_ttl_s)
        oauth = OAuthServer(
            OAuthStore(data_dir),
            store,
            tokens,
            audit=audit,
            code_ttl_s=config.auth.oauth.code_ttl_s,
            refresh_ttl_s=config.auth.oauth.refresh_token_ttl_s,
        )
        checker = AccessTokenChecker(tokens, PublicUrls.from_config(config))
    return Security(
        store=store,
        issuer=issuer,
        authenticator=Authenticator(
            store, issuer, oidc=OidcVerifier.from_config(config), access_tokens=checker
        ),
        login=LoginService(store, issuer),
        limiter=RateLimiter.from_config(config.rate_limit),
        audit=audit,
        output_budget_bytes=config.mcp.output_budget_bytes,
        oauth=oauth,
    )


class StdioLaunch(msgspec.Struct, frozen=True, kw_only=True):
    """How a client must launch ``coremetry stdio`` to run with this server's configuration.

    The stdio server opens the same data dir and store, and runs retention on it, with its
    own configuration: the entry printed for Claude Desktop carries the server's (a default
    retention of 7 days in the stdio process would delete what ``serve`` keeps).

    Attributes:
        args: the arguments after the ``coremetry`` command (``stdio`` first, then the
            server's ``--config`` and store options as given).
        env: the ``COREMETRY_*`` variables the server ran with (not the token, not the data
            dir: :func:`first_start_message` sets both; not the secrets).
        withheld: the secret variables the server ran with, left out of ``env`` (printed by
            name, so the output that shows the entry, often a log, holds no password).
    """

    args: tuple[str, ...] = ("stdio",)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    withheld: tuple[str, ...] = ()


def coremetry_command() -> list[str]:
    """The ``coremetry`` command by its absolute path, for a client that launches it.

    Claude Desktop does not search a virtualenv, and the venv may not be activated: the
    console script beside this Python interpreter first, else the one on ``PATH``, else
    this interpreter with ``-m coremetry``.
    """
    beside = Path(sys.executable).parent / "coremetry"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("coremetry")
    return [found] if found else [sys.executable, "-m", "coremetry"]


def first_start_message(
    token: str, url: str, data_dir: str, launch: StdioLaunch | None = None
) -> str:
    """The lines printed once, when ``serve`` minted the first admin token.

    Args:
        token: the admin service token (``cmk_...``).
        url: the base URL the server listens on (``http://host:port``).
        data_dir: the data dir (``~`` allowed): printed absolute, since the stdio server
            Claude Desktop launches must open the same one (the token is valid only there).
        launch: how ``serve`` was configured (:class:`StdioLaunch`; ``None``: defaults).
    """
    mcp_url = f"{url}/api/mcp"
    launch = launch if launch is not None else StdioLaunch()
    command, *leading = coremetry_command()
    desktop = {
        "mcpServers": {
            "coremetry": {
                "command": command,
                "args": [*leading, *launch.args],
                "env": {
                    **launch.env,
                    "COREMETRY_DATA_DIR": str(Path(data_dir).expanduser().resolve()),
                    "COREMETRY_TOKEN": token,
                },
            }
        }
    }
    return (
        "Coremetry created an admin service token for this data dir. It is shown only once;\n"
        "store it now (create more with `coremetry token create`):\n\n"
        f"  {token}\n\n"
        "Claude Code:\n"
        f"  claude mcp add --transport http coremetry {mcp_url} "
        f'--header "Authorization: Bearer {token}"\n\n'
        "Claude Desktop (claude_desktop_config.json), through the stdio server:\n"
        f"  {msgspec.json.encode(desktop).decode()}\n"
        + (
            f"  (left out of its env, secrets: {', '.join(launch.withheld)}; add them there "
            "if the stdio server needs them)\n"
            if launch.withheld
            else ""
        )
    )


def hypercorn_config(config: Config) -> HypercornConfig:
    """Translate our configuration into hypercorn's (bind, limits, keep-alive, graceful drain).

    ``keep_alive_timeout`` is ``http.keep_alive_timeout_s`` (hypercorn's own default, 5 s, is
    the idle expiry of httpx's connection pool too: a POST leaving on a pooled connection just
    as the server closed it met "Server disconnected without sending a response").
    """
    hc = HypercornConfig()
    host = config.http.host
    hc.bind = [f"[{host}]:{config.http.port}" if ":" in host else f"{host}:{config.http.port}"]
    hc.accesslog = None
    hc.errorlog = None
    hc.graceful_timeout = config.http.graceful_shutdown_s
    hc.keep_alive_timeout = config.http.keep_alive_timeout_s
    hc.websocket_max_message_size = config.websocket.max_message_bytes
    return hc


async def serve(
    config: Config,
    mcp: Server,
    *,
    announce: bool = True,
    shutdown: trio.Event | None = None,
    install_signal_handlers: bool = False,
    security: Security | None = None,
    first_admin_token: str | None = None,
    stdio_launch: StdioLaunch | None = None,
    store: TelemetryStore | None = None,
    preface: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the app until ``shutdown`` is set (or SIGINT/SIGTERM when handlers are installed).

    Args:
        config: the effective configuration.
        mcp: the dispatcher to serve.
        announce: print ``listening on http://HOST:PORT`` to stderr once bound.
        shutdown: an event that starts the graceful drain when set.
        install_signal_handlers: drain on SIGINT/SIGTERM (the CLI sets this).
        security: authentication, gate and audit (:func:`open_security`); ``None`` serves
            every caller as an anonymous viewer — for tests and fixtures only.
        first_admin_token: a token minted for this first start, printed once to stdout with
            the lines to paste into Claude Code and Claude Desktop.
        stdio_launch: how this server was configured, for the Claude Desktop entry
            (:class:`StdioLaunch`; ``None``: the defaults).
        store: the telemetry store; with one, the OTLP/HTTP receiver (``/v1/traces``,
            ``/v1/logs``, ``/v1/metrics``) writes into it (unless ``ingest.enabled`` is off).
            The caller opens and closes it (:func:`open_telemetry_store`).
        preface: with ``announce``, a line printed to stderr just before ``listening on``, in
            the same write (a reader of the first chunk sees both); only once bound, so a
            refused bind prints nothing but the error.
        task_status: receives the bound base URL (``http://127.0.0.1:PORT``).

    Raises:
        OSError: the address cannot be bound.
    """
    if security is not None:
        security.install(mcp)
        app = CoremetryApp(
            config,
            mcp,
            authenticate=security.authenticator,
            login=security.login,
            store=store,
            identities=security.store,
            audit=security.audit,
            tickets=security.tickets,
            oauth=security.oauth,
        )
    else:
        app = CoremetryApp(config, mcp, store=store)
    stop = shutdown if shutdown is not None else trio.Event()
    grace_s = config.http.graceful_shutdown_s

    def begin_drain() -> None:
        app.drain.begin(grace_s)
        app.shutting_down.set()
        mcp.end_subscriptions()

    async def trigger() -> None:
        # hypercorn stops listening when this returns: keep the listener open while calls are
        # in flight, so new requests get 503 + Retry-After instead of a refused connection;
        # at the deadline the drain answers what still runs, then the listener closes.
        await stop.wait()
        begin_drain()
        with trio.move_on_at(app.drain.deadline + DRAIN_ANSWER_MARGIN_S):
            await app.drain.wait_idle()

    async with trio.open_nursery() as outer:
        # The audit writer outlives the server: records of calls that finish while hypercorn
        # drains are still written, then the writer flushes and stops.
        if security is not None:
            await outer.start(security.audit.run_writer)
        # Tasks (task-augmented tools/call) run in the server's own nursery: they outlive the
        # requests that created them and end (recorded failed) when the server stops.
        async with mcp.tasks_running(), trio.open_nursery() as nursery:
            if install_signal_handlers:
                nursery.start_soon(watch_signals, stop)
            nursery.start_soon(supervise, "drain", app.drain.run)
            binds: list[str] = await nursery.start(
                partial(serve_http, app, hypercorn_config(config), shutdown_trigger=trigger)
            )
            url = binds[0]
            if security is not None and security.authenticator.oidc is not None:
                # [auth.oidc] audience unset: tokens must name this server's MCP URL, as
                # http.public_url gives it (the resource the metadata names), else as bound.
                base = config.http.public_url.rstrip("/") or f"{url}{config.http.root_path}"
                security.authenticator.oidc.set_default_audience(f"{base}/api/mcp")
            if first_admin_token is not None:
                message = first_start_message(first_admin_token, url, config.data_dir, stdio_launch)
                print(message, flush=True)
            if announce:
                lead = f"{preface}\n" if preface is not None else ""
                sys.stderr.write(f"{lead}listening on {url}\n")
                sys.stderr.flush()
            task_status.started(url)
            await stop.wait()
            begin_drain()
            # The drain (grace_s + margin), then hypercorn's graceful_timeout for the
            # connections still open; nothing else may linger (the signal watcher, when the
            # stop came from elsewhere) past that bound.
            nursery.cancel_scope.deadline = (
                trio.current_time() + 2 * grace_s + DRAIN_ANSWER_MARGIN_S + 5
            )
        if security is not None:
            with trio.CancelScope(shield=True):
                await security.audit.aclose()


async def serve_with_store(
    config: Config,
    build_mcp: Callable[[TelemetryStore], Server],
    *,
    install_signal_handlers: bool = False,
    security: Security | None = None,
    first_admin_token: str | None = None,
    stdio_launch: StdioLaunch | None = None,
    shutdown: trio.Event | None = None,
    announce: bool = True,
    name_data_dir: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """:func:`serve` with the telemetry store open: what ``coremetry serve`` runs.

    Opens :func:`open_telemetry_store`, builds the dispatcher with ``build_mcp(store)`` (so the
    observability tools read the store), serves with the OTLP receiver writing into it, runs
    the problem detector beside it when ``detection.enabled``
    (:func:`coremetry.detection.service.serve_detection`, writing
    ``<data_dir>/problems.json``), and once the server has drained stops the detector and
    closes the store. With ``name_data_dir`` (and ``announce``), the line before ``listening
    on`` is ``data dir <dir> (telemetry store: <store_location(config)>)``, ``~`` expanded, so
    a user sees which data dir, and so which identities and telemetry, this start uses. The
    other arguments are :func:`serve`'s.

    Raises:
        StoreUnavailable: the store cannot be opened.
        OSError: the address cannot be bound.
    """
    async with open_telemetry_store(config) as store, trio.open_nursery() as nursery:
        if config.detection.enabled:
            # A bug in a detection run is logged and the detector starts again after an
            # interval; it never ends the server (issue 13: every task is supervised).
            nursery.start_soon(
                partial(
                    supervise,
                    "problem detection",
                    partial(serve_detection, store, config.data_dir, config.detection),
                    restart_after_s=config.detection.interval_s,
                )
            )
        try:
            await serve(
                config,
                build_mcp(store),
                announce=announce,
                shutdown=shutdown,
                install_signal_handlers=install_signal_handlers,
                security=security,
                first_admin_token=first_admin_token,
                stdio_launch=stdio_launch,
                store=store,
                preface=_preface(config, security, first_admin_token) if name_data_dir else None,
                task_status=task_status,
            )
        finally:
            nursery.cancel_scope.cancel()


async def watch_signals(stop: trio.Event) -> None:
    """Set ``stop`` on the first SIGINT or SIGTERM (then stop watching).

    While this runs, trio receives those signals instead of Python raising KeyboardInterrupt,
    so the process drains and exits cleanly.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            return
