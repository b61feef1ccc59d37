"""The one typed configuration of a Coremetry server.

Sources, later ones winning (``shared/DESIGN.md``; issue "HTTP server"):

1. the defaults written here;
2. a TOML file (``--config FILE``), sections and keys exactly as the Structs below — an unknown
   section or key is an error that names it;
3. environment variables ``COREMETRY_<SECTION>_<KEY>`` (e.g. ``COREMETRY_HTTP_PORT=9000``,
   ``COREMETRY_SSE_KEEPALIVE_INTERVAL_S=5``); list values are comma-separated;
4. command-line flags (``--host``, ``--port``, ``--data-dir``).

Every limit carries its unit in its name (``_s`` seconds, ``_ms`` milliseconds, ``_bytes``).
``coremetry config show`` prints the effective configuration as TOML with secrets redacted.
"""

import math
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec


class ConfigError(Exception):
    """Raised by :func:`load_config` when a file, variable or flag is invalid; names the key."""


class HttpConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The HTTP listener and request limits."""

    host: str = "127.0.0.1"
    """Address to bind. Loopback by default; the Host allow-list applies when loopback."""
    port: int = 8080
    """TCP port; 0 picks a free one (the chosen port is printed)."""
    root_path: str = ""
    """Path prefix the server is mounted under behind a proxy (e.g. ``/coremetry``); the
    ``X-Forwarded-Prefix`` header overrides it per request."""
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    """Origins allowed besides loopback ones (``http://localhost:*`` etc. are always allowed).
    A request whose ``Origin`` is present and not allowed gets 403."""
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    """Host header values allowed besides loopback names (DNS-rebinding protection); each may
    end in ``:*`` for any port."""
    max_body_bytes: int = 4 * 1024 * 1024
    """Largest accepted request body, in bytes (413 above)."""
    graceful_shutdown_s: float = 5.0
    """On SIGINT/SIGTERM: how long in-flight calls may take to finish, in seconds."""
    keep_alive_timeout_s: float = 75.0
    """How long an idle HTTP/1.1 connection is kept open for the client's next request, in
    seconds. Above the idle time clients keep pooled connections (httpx 5 s, Node's fetch 4 s,
    aiohttp 15 s) and proxies' upstream idle timeouts (60 s is common), so the client closes
    an idle connection first: a request sent on a connection the server closes at that moment
    fails without an answer (the keep-alive race), which clients do not retry for a POST."""
    public_url: str = ""
    """The URL clients reach the server at (``https://coremetry.example.com[/prefix]``), used
    in the OAuth discovery documents and as the OAuth resource and issuer; empty: derived per
    request from ``Host``, ``X-Forwarded-Proto`` and the prefix."""


class McpConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Protocol-level limits."""

    max_budget_s: float = 60.0
    """Server maximum for any call's deadline, in seconds."""
    page_size: int = 100
    """Items per page of the list methods."""
    list_ttl_ms: int = 60_000
    """``ttlMs`` on 2026-07-28 list results, in milliseconds."""
    read_ttl_ms: int = 0
    """``ttlMs`` on 2026-07-28 ``resources/read`` results, in milliseconds."""
    output_budget_bytes: int = 16 * 1024
    """Largest tool, resource or prompt result, in bytes of JSON (lists beyond it are cut and
    return a cursor); at least 1024."""
    task_max_budget_s: float = 600.0
    """Deadline of a call running as a task (MCP tasks), in seconds; larger than
    ``max_budget_s``."""
    task_ttl_ms: int = 3_600_000
    """How long a task and its result are kept from its creation, at most, in milliseconds."""
    task_poll_interval_ms: int = 1000
    """Polling interval suggested to task clients, in milliseconds."""
    task_result_budget_bytes: int = 8 * 1024 * 1024
    """Bytes of finished task results kept per identity (the oldest go first)."""


class SseConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The legacy HTTP+SSE transport (2024-11-05) and SSE answers."""

    keepalive_interval_s: float = 15.0
    """Interval of ``: ping`` comment lines on idle SSE streams, in seconds."""
    max_sessions: int = 10_000
    """Concurrent legacy SSE sessions (503 above)."""
    session_idle_s: float = 3600.0
    """A legacy SSE session with no POST for this long is closed, in seconds."""


class WebSocketConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The WebSocket transport."""

    max_message_bytes: int = 4 * 1024 * 1024
    """Largest accepted text frame, in bytes (close code 1009 above)."""
    max_connections: int = 10_000
    """Concurrent WebSocket connections (refused above)."""


class RateLimitConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The call gate's rate limit: a token bucket per identity (``sub``).

    See :mod:`coremetry.access`. Env: ``COREMETRY_RATE_LIMIT_PER_SECOND``, ``..._BURST``.
    """

    per_second: float = 20.0
    """Sustained calls per second per identity (the bucket's refill rate)."""
    burst: int = 40
    """Calls an identity with a full bucket may make at once (the bucket's size)."""
    per_kind: bool = False
    """False: tools, resources and prompts share one budget per identity. True: each kind has
    its own bucket with the same ``per_second`` and ``burst``."""
    max_identities: int = 10_000
    """Identities whose buckets are kept in memory; beyond this the least recently seen one is
    evicted (it starts again with a full bucket)."""


class AuditConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The audit log of gated calls (table ``audit_log`` in ``<data_dir>/coremetry.db``)."""

    retention_days: int = 30
    """Records older than this many days are deleted by the writer; 0 keeps them forever."""
    queue_size: int = 10_000
    """Records waiting for the writer; when full, new records are dropped, counted and
    warned about (a call is never slowed down by the audit log)."""


def default_max_calls_per_identity() -> int:
    """Half the CPU cores this process may run on (``os.sched_getaffinity``), 1 or 2.

    A store call of a heavy tool keeps a core busy (SQLite scans in a worker thread), so with
    as many calls as cores one identity would leave the event loop, which serves every other
    client, and the other identities' queries without a core: on a 2-core machine the default
    is 1, from 4 cores 2 (``store.max_calls_per_identity``).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(2, cores // 2))


class StoreConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The telemetry store (embedded SQLite in ``<data_dir>/telemetry.db`` by default)."""

    backend: str = "sqlite"
    """``sqlite`` (embedded, the default) or ``clickhouse`` (the ``[clickhouse]`` section; needs
    the ``clickhouse`` extra). Problems, users, tokens and the audit log stay in the data dir
    either way."""
    retention_days: float = 7.0
    """Spans, logs and metric points older than this many days are deleted by a background
    task; 0 keeps everything."""
    retention_interval_s: float = 300.0
    """How often the retention task runs, in seconds."""
    query_threads: int = 4
    """Worker threads that may run store queries at once (a trio ``CapacityLimiter``)."""
    max_calls_per_identity: int = msgspec.field(
        default_factory=lambda: default_max_calls_per_identity()
    )
    """Store calls the tools, resources and prompts of one identity (``caller.subject``) may
    run at once; more wait their turn, within their deadline. Below ``max_calls`` so another
    identity always finds a slot. Default: :func:`default_max_calls_per_identity` (half the CPU
    cores, 1 or 2), so that one identity's scans never occupy every core."""
    max_calls: int = 4
    """Store calls of tools, resources and prompts that may run at once, all identities
    together; waiting identities take turns for the next free slot. Admitted calls beyond
    ``query_threads`` wait for a thread in arrival order."""


class ClickHouseConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ClickHouse backend (``store.backend = "clickhouse"``).

    It reads and writes the OpenTelemetry Collector ClickHouse exporter's tables, named as in
    the exporter's configuration.
    """

    url: str = "http://localhost:8123"
    """The server's HTTP interface (``http://`` or ``https://``), or ``chdb:///path`` for an
    embedded chDB engine. No password in it: use ``password`` or ``password_file``."""
    username: str = ""
    """The ClickHouse user (empty: the server's default user)."""
    password: str = ""
    """Its password; set it with ``COREMETRY_CLICKHOUSE_PASSWORD`` or in the file, never on
    the command line (``config show`` redacts it)."""
    password_file: str = ""
    """A file holding the password (its first line), instead of ``password``."""
    database: str = "default"
    """The exporter's ``database``."""
    traces_table_name: str = "otel_traces"
    """The exporter's ``traces_table_name``."""
    logs_table_name: str = "otel_logs"
    """The exporter's ``logs_table_name``."""
    metrics_table_name: str = "otel_metrics"
    """The exporter's ``metrics_table_name`` (tables ``<name>_gauge``, ``_sum``, ``_histogram``)."""
    connect_timeout_s: float = 10.0
    """How long to wait for a connection, in seconds."""
    create_tables: bool = False
    """Create the exporter's tables when they are missing (a node that runs on ClickHouse
    without a Collector); otherwise the startup check names what is missing."""


class IngestConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/logs``, ``/v1/metrics``)."""

    enabled: bool = True
    """Serve the OTLP/HTTP receiver on the main listener."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Largest accepted OTLP request body, in bytes, after gzip decompression (413 above)."""
    min_role: str = "editor"
    """Lowest role allowed to write telemetry (viewer, editor or admin)."""
    max_future_skew_s: float = 3600.0
    """Records dated more than this many seconds after this server's clock (a sender's clock
    running ahead) are rejected items, reported in OTLP ``partial_success`` and the import
    summary, never stored."""


class DetectionConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The problem detector's background task in ``coremetry serve``.

    See :mod:`coremetry.detection.service`. Env: ``COREMETRY_DETECTION_ENABLED=false`` etc.
    """

    enabled: bool = True
    """Run the detector every ``interval_s`` and keep its problems in
    ``<data_dir>/problems.json`` (what ``list_problems`` and ``get_problem`` read)."""
    interval_s: float = 60.0
    """Seconds between runs; the first run is one interval after the server starts."""
    window_s: float = 6 * 3600.0
    """How much telemetry each run judges, in seconds back from now (its series' history)."""
    catch_up_s: float = 24 * 3600.0
    """The first run judges this much instead (at least ``window_s``), in seconds."""
    step_s: float = 60.0
    """Bucket width of the judged series, in seconds."""
    lag_s: float = 30.0
    """Data newer than this many seconds is left to the next run (exporters send in batches:
    the last seconds are not all stored yet)."""
    max_log_records: int = 20_000
    """WARN-and-worse log records read per run for new-template mining (0: none)."""


class OidcConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An external OpenID Connect identity provider whose access tokens are accepted.

    See :mod:`coremetry.auth.oidc`. Env: ``COREMETRY_AUTH_OIDC_ISSUER`` etc.
    """

    issuer: str = ""
    """The provider's issuer URL, exactly as its tokens' ``iss`` and its discovery document
    say (``https://``; ``http://`` only on a loopback host). Empty: off."""
    audience: str = ""
    """The ``aud`` a token must carry: this server's MCP endpoint URL as clients reach it
    (e.g. ``https://coremetry.example.com/api/mcp``). Empty: the bound address's
    ``http://HOST:PORT<root_path>/api/mcp`` (allowed only on a loopback bind)."""
    role_claim: str = "coremetry_role"
    """The claim holding the caller's role; a dotted path reaches into objects
    (``realm_access.roles``). Its value is a string or a list of strings."""
    role_map: dict[str, str] = msgspec.field(default_factory=dict)
    """Claim values to roles (``{"coremetry-admins" = "admin"}``); empty: the values must be
    role names (viewer, editor, admin) themselves."""
    default_role: str = ""
    """The role of a token whose claim names no known role; empty: such a token is refused."""
    jwks_uri: str = ""
    """Where the provider's signing keys are; empty: the ``jwks_uri`` of its discovery
    document (``<issuer>/.well-known/openid-configuration``)."""
    jwks_cache_s: float = 300.0
    """How long fetched signing keys are used before they are fetched again, in seconds (a
    token with an unknown key id refetches sooner, at most every 30 s)."""


class OAuthConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The built-in OAuth 2.1 authorization server (``[auth.oauth]``; issue 18)."""

    enabled: bool = True
    """Serve the authorization server (sign-in page, ``/oauth/token``, registration) and the
    discovery documents; off: only service tokens and login JWTs."""
    access_token_ttl_s: float = 600.0
    """Lifetime of an OAuth access token, in seconds (at most 3600)."""
    refresh_token_ttl_s: float = 30 * 86400.0
    """Lifetime of a refresh-token family since the grant, in seconds."""
    code_ttl_s: float = 60.0
    """Lifetime of an authorization code, in seconds."""
    registration_rate_per_hour: int = 20
    """Dynamic client registrations allowed per source address per hour."""
    max_clients: int = 10_000
    """Most registered clients kept (registration answers 429 above)."""


class AuthConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Ways to authenticate besides service tokens and password logins."""

    oauth: OAuthConfig = msgspec.field(default_factory=OAuthConfig)
    """The built-in OAuth 2.1 authorization server (``[auth.oauth]``)."""
    oidc: OidcConfig = msgspec.field(default_factory=OidcConfig)
    """An external OpenID Connect identity provider (``[auth.oidc]``)."""


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole configuration; see the module docstring for how it is assembled."""

    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    mcp: McpConfig = msgspec.field(default_factory=McpConfig)
    sse: SseConfig = msgspec.field(default_factory=SseConfig)
    websocket: WebSocketConfig = msgspec.field(default_factory=WebSocketConfig)
    rate_limit: RateLimitConfig = msgspec.field(default_factory=RateLimitConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    clickhouse: ClickHouseConfig = msgspec.field(default_factory=ClickHouseConfig)
    ingest: IngestConfig = msgspec.field(default_factory=IngestConfig)
    detection: DetectionConfig = msgspec.field(default_factory=DetectionConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    data_dir: str = "~/.local/share/coremetry"
    """Where the embedded store and secrets live."""


SECRET_KEYS: Final = frozenset[str]({"clickhouse.password"})
"""Dotted keys whose values ``config show`` redacts."""

ENV_PREFIX: Final = "COREMETRY_"

SECRET_ENV_VARS: Final = frozenset(
    ENV_PREFIX + key.upper().replace(".", "_") for key in SECRET_KEYS
)
"""The ``COREMETRY_<SECTION>_<KEY>`` variables of :data:`SECRET_KEYS` (never printed)."""


def _section_fields(config: type[msgspec.Struct]) -> Mapping[str, type[msgspec.Struct] | None]:
    fields: dict[str, type[msgspec.Struct] | None] = {}
    for info in msgspec.structs.fields(config):
        kind = info.type
        fields[info.encode_name] = (
            kind if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else None
        )
    return fields


def _env_overrides(environ: Mapping[str, str]) -> dict[str, object]:
    """Map ``COREMETRY_<SECTION>_<KEY>`` variables onto the nested config dict."""
    overrides: dict[str, object] = {}
    sections = _section_fields(Config)
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        matched = False
        for section, struct in sections.items():
            if struct is None:
                if rest == section:
                    overrides[section] = value
                    matched = True
                continue
            prefix = section + "_"
            if rest.startswith(prefix):
                key = rest[len(prefix) :]
                fields = {f.encode_name: f.type for f in msgspec.structs.fields(struct)}
                section_target = overrides.setdefault(section, {})
                assert isinstance(section_target, dict)
                key, keys, target, where = _nested_key(key, fields, section_target, section)
                if key not in keys:
                    raise ConfigError(f"{name}: unknown key {key!r} in section [{where}]")
                target[key] = _env_value(name, value, keys[key])
                matched = True
                break
        if not matched and rest not in ("token", "shared"):
            raise ConfigError(f"{name}: no such configuration key")
    return overrides


def _nested_key(
    key: str, keys: Mapping[str, object], target: dict[str, object], where: str
) -> tuple[str, Mapping[str, object], dict[str, object], str]:
    """Descend into a sub-table (``[auth.oidc]``) when ``key`` starts with its name and ``_``."""
    for sub, kind in keys.items():
        if (
            key.startswith(sub + "_")
            and isinstance(kind, type)
            and issubclass(kind, msgspec.Struct)
        ):
            inner = target.setdefault(sub, {})
            assert isinstance(inner, dict)
            fields = {f.encode_name: f.type for f in msgspec.structs.fields(kind)}
            return _nested_key(key[len(sub) + 1 :], fields, inner, f"{where}.{sub}")
    return key, keys, target, where


def _env_value(name: str, value: str, kind: object) -> object:
    """A variable's text as the key's type wants it: lists comma-separated, tables ``k=v,…``."""
    if kind == list[str]:
        return value.split(",")
    if kind == dict[str, str]:
        table: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            key, sep, mapped = item.partition("=")
            if not sep:
                raise ConfigError(f"{name}: expected key=value pairs separated by commas")
            table[key.strip()] = mapped.strip()
        return table
    return value


def _merge(base: dict[str, object], top: Mapping[str, object]) -> dict[str, object]:
    merged = dict(base)
    for key, value in top.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged[key] = _merge(current, value)
        else:
            merged[key] = value
    return merged


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Assemble the effective configuration.

    Args:
        path: a TOML file, or ``None`` for defaults only.
        environ: the environment to read ``COREMETRY_*`` variables from (default
            ``os.environ``).
        overrides: command-line values as a nested dict (``{"http": {"port": 0}}``).

    Returns:
        The validated :class:`Config`.

    Raises:
        ConfigError: unreadable file, invalid TOML, an unknown section or key, or a value of
            the wrong type; the message names the key (e.g. "Expected `int`, got `str` - at
            `$.http.port`").
    """
    data: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                f"cannot read config file {os.fspath(path)!r}: {exc.strerror}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {os.fspath(path)!r} is not valid TOML: {exc}") from None
    data = _merge(data, _env_overrides(os.environ if environ is None else environ))
    if overrides:
        data = _merge(data, overrides)
    try:
        config = msgspec.convert(data, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    _check(config)
    return config


def _check(config: Config) -> None:
    checks: list[tuple[bool, str]] = [
        (0 <= config.http.port <= 65535, "http.port must be between 0 and 65535"),
        (config.http.max_body_bytes > 0, "http.max_body_bytes must be positive"),
        (config.http.graceful_shutdown_s >= 0, "http.graceful_shutdown_s must not be negative"),
        (config.http.keep_alive_timeout_s > 0, "http.keep_alive_timeout_s must be positive"),
        (config.mcp.max_budget_s > 0, "mcp.max_budget_s must be positive"),
        (config.mcp.page_size > 0, "mcp.page_size must be positive"),
        (config.mcp.output_budget_bytes >= 1024, "mcp.output_budget_bytes must be at least 1024"),
        (config.mcp.list_ttl_ms >= 0, "mcp.list_ttl_ms must not be negative"),
        (config.mcp.read_ttl_ms >= 0, "mcp.read_ttl_ms must not be negative"),
        (
            config.mcp.task_max_budget_s > config.mcp.max_budget_s,
            "mcp.task_max_budget_s must be larger than mcp.max_budget_s",
        ),
        (config.mcp.task_ttl_ms > 0, "mcp.task_ttl_ms must be positive"),
        (config.mcp.task_poll_interval_ms > 0, "mcp.task_poll_interval_ms must be positive"),
        (config.mcp.task_result_budget_bytes > 0, "mcp.task_result_budget_bytes must be positive"),
        (config.sse.keepalive_interval_s > 0, "sse.keepalive_interval_s must be positive"),
        (config.sse.max_sessions > 0, "sse.max_sessions must be positive"),
        (config.sse.session_idle_s > 0, "sse.session_idle_s must be positive"),
        (config.websocket.max_message_bytes > 0, "websocket.max_message_bytes must be positive"),
        (config.websocket.max_connections > 0, "websocket.max_connections must be positive"),
        (config.rate_limit.per_second > 0, "rate_limit.per_second must be positive"),
        (config.rate_limit.burst >= 1, "rate_limit.burst must be at least 1"),
        (config.rate_limit.max_identities >= 1, "rate_limit.max_identities must be at least 1"),
        (config.audit.retention_days >= 0, "audit.retention_days must not be negative"),
        (config.audit.queue_size >= 1, "audit.queue_size must be at least 1"),
        (config.store.retention_days >= 0, "store.retention_days must not be negative"),
        (config.store.retention_interval_s > 0, "store.retention_interval_s must be positive"),
        (config.store.query_threads >= 1, "store.query_threads must be at least 1"),
        (
            config.store.max_calls_per_identity >= 1,
            "store.max_calls_per_identity must be at least 1",
        ),
        (
            config.store.max_calls >= config.store.max_calls_per_identity,
            "store.max_calls must be at least store.max_calls_per_identity",
        ),
        (
            config.store.backend in ("sqlite", "clickhouse"),
            "store.backend must be sqlite or clickhouse",
        ),
        (config.clickhouse.connect_timeout_s > 0, "clickhouse.connect_timeout_s must be positive"),
        (
            config.clickhouse.url.startswith(("http://", "https://", "chdb:")),
            "clickhouse.url must start with http://, https:// or chdb:",
        ),
        (
            "@" not in config.clickhouse.url.split("//", 1)[-1].split("/", 1)[0]
            or ":" not in config.clickhouse.url.split("//", 1)[-1].split("@", 1)[0],
            "clickhouse.url must not carry a password: use clickhouse.password_file or "
            "COREMETRY_CLICKHOUSE_PASSWORD",
        ),
        (config.ingest.max_body_bytes > 0, "ingest.max_body_bytes must be positive"),
        (config.ingest.max_future_skew_s >= 0, "ingest.max_future_skew_s must not be negative"),
        (
            config.ingest.min_role in ("viewer", "editor", "admin"),
            "ingest.min_role must be viewer, editor or admin",
        ),
        (config.detection.interval_s > 0, "detection.interval_s must be positive"),
        (config.detection.step_s >= 1, "detection.step_s must be at least 1"),
        (
            config.detection.window_s >= 10 * config.detection.step_s,
            "detection.window_s must be at least 10 steps (detection.step_s)",
        ),
        (config.detection.catch_up_s >= 0, "detection.catch_up_s must not be negative"),
        (config.detection.lag_s >= 0, "detection.lag_s must not be negative"),
        (config.detection.max_log_records >= 0, "detection.max_log_records must not be negative"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"invalid configuration: {message}")
    sections: dict[str, msgspec.Struct] = {
        "http": config.http,
        "mcp": config.mcp,
        "sse": config.sse,
        "websocket": config.websocket,
        "rate_limit": config.rate_limit,
        "audit": config.audit,
        "store": config.store,
        "clickhouse": config.clickhouse,
        "ingest": config.ingest,
        "detection": config.detection,
    }
    sections["auth.oauth"] = config.auth.oauth
    _check_oauth(config)
    for name, section in sections.items():
        for info in msgspec.structs.fields(section):
            value = getattr(section, info.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(
                    f"invalid configuration: {name}.{info.name} must be a finite number, "
                    f"got {value}"
                )
    for key in ("database", "traces_table_name", "logs_table_name", "metrics_table_name"):
        name = getattr(config.clickhouse, key)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,100}", name) is None:
            raise ConfigError(
                f"invalid configuration: clickhouse.{key} must be a plain ClickHouse identifier "
                f"(letters, digits, _), got {name!r}"
            )
    if config.http.root_path and not config.http.root_path.startswith("/"):
        raise ConfigError("invalid configuration: http.root_path must start with '/'")
    _check_oidc(config)


_ROLE_NAMES: Final = ("viewer", "editor", "admin")


def _is_loopback_host(host: str) -> bool:
    host = host.lower().removeprefix("[").removesuffix("]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _is_loopback_url(url: str) -> bool:
    return _is_loopback_host(urllib.parse.urlsplit(url).hostname or "")


def _check_oidc(config: Config) -> None:
    oidc = config.auth.oidc

    def fail(message: str) -> None:
        raise ConfigError(f"invalid configuration: auth.oidc.{message}")

    if not (math.isfinite(oidc.jwks_cache_s) and oidc.jwks_cache_s > 0):
        fail(f"jwks_cache_s must be a positive number of seconds, got {oidc.jwks_cache_s}")
    for claim_value, role in oidc.role_map.items():
        if role not in _ROLE_NAMES:
            fail(f"role_map[{claim_value!r}] must be viewer, editor or admin, got {role!r}")
    if oidc.default_role not in ("", *_ROLE_NAMES):
        fail(f"default_role must be empty, viewer, editor or admin, got {oidc.default_role!r}")
    if not oidc.issuer:
        return
    for key in ("issuer", "jwks_uri", "audience"):
        url: str = getattr(oidc, key)
        if not url:
            continue
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            fail(f"{key} must be an https:// URL, got {url!r}")
        if key != "audience" and parts.scheme == "http" and not _is_loopback_url(url):
            fail(f"{key} must use https:// (http:// only on a loopback host), got {url!r}")
        if key == "issuer" and (parts.query or parts.fragment):
            fail(
                f"issuer must have no query or fragment (OpenID Connect Discovery §3), got {url!r}"
            )
    if not oidc.role_claim or any(not part for part in oidc.role_claim.split(".")):
        fail(
            f"role_claim must name a claim (a dotted path for nested ones), got {oidc.role_claim!r}"
        )
    if not oidc.audience and not config.http.public_url and not _is_loopback_host(config.http.host):
        fail(
            "audience must be set (or http.public_url) when http.host is not a loopback address:"
            " the URL clients reach the MCP endpoint at, e.g."
            " https://coremetry.example.com/api/mcp"
        )


def _check_oauth(config: Config) -> None:
    oauth = config.auth.oauth
    checks: list[tuple[bool, str]] = [
        (
            0 < oauth.access_token_ttl_s <= 3600,
            "auth.oauth.access_token_ttl_s must be positive and at most 3600",
        ),
        (oauth.refresh_token_ttl_s > 0, "auth.oauth.refresh_token_ttl_s must be positive"),
        (0 < oauth.code_ttl_s <= 600, "auth.oauth.code_ttl_s must be positive and at most 600"),
        (
            oauth.registration_rate_per_hour >= 1,
            "auth.oauth.registration_rate_per_hour must be at least 1",
        ),
        (oauth.max_clients >= 1, "auth.oauth.max_clients must be at least 1"),
    ]
    public_url = config.http.public_url
    if public_url:
        scheme, _, rest = public_url.partition("://")
        checks.append(
            (
                scheme in ("http", "https")
                and bool(rest)
                and not rest.startswith("/")
                and not any(c in public_url for c in "?#\\ ")
                and "@" not in rest.split("/", 1)[0],
                "http.public_url must be an http(s) URL without query, fragment or user",
            )
        )
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"invalid configuration: {message}")


def render_config(config: Config) -> str:
    """Render the configuration as TOML, with the keys in :data:`SECRET_KEYS` redacted."""
    lines: list[str] = []
    builtins = msgspec.to_builtins(config)
    assert isinstance(builtins, dict)
    scalars = {k: v for k, v in builtins.items() if not isinstance(v, dict)}
    for key, value in scalars.items():
        lines.append(f"{key} = {_toml_value(key, value)}")
    for section, values in builtins.items():
        if isinstance(values, dict):
            _render_table(lines, section, values)
    return "\n".join(lines) + "\n"


def _render_table(lines: list[str], dotted: str, values: dict[str, object]) -> None:
    """Append ``[dotted]`` and its keys; sub-tables (``[auth.oidc]``) follow as their own."""
    lines.append("")
    lines.append(f"[{dotted}]")
    for key, value in values.items():
        if not isinstance(value, dict):
            lines.append(f"{_toml_key(key)} = {_toml_value(f'{dotted}.{key}', value)}")
    for key, value in values.items():
        if isinstance(value, dict):
            _render_table(lines, f"{dotted}.{_toml_key(key)}", value)


def _toml_key(key: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_-]+", key):
        return key
    return msgspec.json.encode(key).decode()


def _toml_value(dotted: str, value: object) -> str:
    if dotted in SECRET_KEYS:
        return '"<redacted>"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value("", v) for v in value) + "]"
    return msgspec.json.encode(str(value)).decode()
