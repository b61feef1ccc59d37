"""Assembly of the server process: the MCP registry, the ASGI app, hypercorn, shutdown.

``serve()`` runs hypercorn's trio worker inside our own nursery (``shared/STYLE.md`` habit 18),
reports the bound address through ``task_status`` and prints ``listening on http://HOST:PORT``
to stderr once the socket is bound. SIGINT/SIGTERM (or the ``shutdown`` event) drain gracefully:
the listener stops accepting, long-lived streams end, in-flight calls get
``http.graceful_shutdown_s`` to finish, then everything still running is cancelled.
"""

import signal
import sys
from collections.abc import Callable
from functools import partial

import msgspec
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from coremetry import __version__
from coremetry.config import Config
from coremetry.mcp import CallContext, Resource, Server, versions

INSTRUCTIONS = (
    "Coremetry exposes a system's telemetry (traces, logs, metrics, detected problems, deploys). "
    "Start from summaries, then drill down; every tool is read-only. Errors come as JSON with "
    "error, retryable, hint and detail: follow the hint."
)

Register = Callable[[Server], None]
"""Adds entries to a server's registries."""


def build_mcp_server(
    *,
    fixture: bool = False,
    max_budget_s: float = 60.0,
    page_size: int = 100,
    list_ttl_ms: int = 60_000,
    read_ttl_ms: int = 0,
) -> Server:
    """Build the dispatcher with the production registry.

    Args:
        fixture: also register the test fixture entries (:mod:`coremetry.testing.fixture`).
        max_budget_s: the server maximum for any call's deadline, in seconds.
        page_size: items per page of the list methods.
        list_ttl_ms: ``ttlMs`` of 2026-07-28 list results, in milliseconds.
        read_ttl_ms: ``ttlMs`` of 2026-07-28 ``resources/read`` results, in milliseconds.

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
        from coremetry.testing.fixture import register_fixture

        register_fixture(server)
    return server


def hypercorn_config(config: Config) -> HypercornConfig:
    """Translate our configuration into hypercorn's (bind, limits, graceful drain)."""
    hc = HypercornConfig()
    host = config.http.host
    hc.bind = [f"[{host}]:{config.http.port}" if ":" in host else f"{host}:{config.http.port}"]
    hc.accesslog = None
    hc.errorlog = None
    hc.graceful_timeout = config.http.graceful_shutdown_s
    hc.websocket_max_message_size = config.websocket.max_message_bytes
    return hc


async def serve(
    config: Config,
    mcp: Server,
    *,
    announce: bool = True,
    shutdown: trio.Event | None = None,
    install_signal_handlers: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the app until ``shutdown`` is set (or SIGINT/SIGTERM when handlers are installed).

    Args:
        config: the effective configuration.
        mcp: the dispatcher to serve.
        announce: print ``listening on http://HOST:PORT`` to stderr once bound.
        shutdown: an event that starts the graceful drain when set.
        install_signal_handlers: drain on SIGINT/SIGTERM (the CLI sets this).
        task_status: receives the bound base URL (``http://127.0.0.1:PORT``).

    Raises:
        OSError: the address cannot be bound.
    """
    from coremetry.app import CoremetryApp

    app = CoremetryApp(config, mcp)
    stop = shutdown if shutdown is not None else trio.Event()

    async def trigger() -> None:
        await stop.wait()
        app.shutting_down.set()
        mcp.end_subscriptions()

    async with trio.open_nursery() as nursery:
        if install_signal_handlers:
            nursery.start_soon(watch_signals, stop)
        binds: list[str] = await nursery.start(
            partial(hypercorn_serve, app, hypercorn_config(config), shutdown_trigger=trigger)
        )
        url = binds[0]
        if announce:
            print(f"listening on {url}", file=sys.stderr, flush=True)
        task_status.started(url)
        await stop.wait()
        app.shutting_down.set()
        mcp.end_subscriptions()
        # hypercorn drains within graceful_timeout and then returns; stop the signal watcher.
        nursery.cancel_scope.deadline = trio.current_time() + config.http.graceful_shutdown_s + 5


async def watch_signals(stop: trio.Event) -> None:
    """Set ``stop`` on the first SIGINT or SIGTERM (then stop watching).

    While this runs, trio receives those signals instead of Python raising KeyboardInterrupt,
    so the process drains and exits cleanly.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            return
