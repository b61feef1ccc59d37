"""The typed configuration: defaults, TOML, environment overrides, flags, errors naming keys."""

import os
import tomllib
from pathlib import Path

import pytest

from coremetry.config import Config, ConfigError, load_config, render_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "coremetry.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_loopback_and_documented_limits() -> None:
    config = load_config(environ={})
    assert config.http.host == "127.0.0.1"
    assert config.http.port == 8080
    assert config.sse.keepalive_interval_s == 15.0
    assert config.mcp.max_budget_s == 60.0


def test_toml_file_sets_values(tmp_path: Path) -> None:
    path = write(tmp_path, '[http]\nport = 9001\nallowed_origins = ["https://app.example"]\n')
    config = load_config(path, environ={})
    assert config.http.port == 9001
    assert config.http.allowed_origins == ["https://app.example"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[htp]\nport = 1\n", "htp"),
        ("[http]\nprot = 1\n", "prot"),
        ("bogus = 1\n", "bogus"),
    ],
    ids=["unknown-section", "unknown-key", "unknown-top-level"],
)
def test_unknown_keys_are_errors_that_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(write(tmp_path, text), environ={})


def test_wrong_type_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$\.http\.port"):
        load_config(write(tmp_path, '[http]\nport = "eighty"\n'), environ={})


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[http\n"), environ={})


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml", environ={})


def test_environment_overrides_file_and_flags_override_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[http]\nport = 9001\n[sse]\nkeepalive_interval_s = 30.0\n")
    env = {
        "COREMETRY_HTTP_PORT": "9002",
        "COREMETRY_SSE_KEEPALIVE_INTERVAL_S": "5",
        "COREMETRY_HTTP_ALLOWED_HOSTS": "a.example,b.example:*",
        "COREMETRY_DATA_DIR": "/tmp/x",
        "PATH": "/usr/bin",
    }
    config = load_config(path, environ=env)
    assert config.http.port == 9002
    assert config.sse.keepalive_interval_s == 5.0
    assert config.http.allowed_hosts == ["a.example", "b.example:*"]
    assert config.data_dir == "/tmp/x"
    flagged = load_config(path, environ=env, overrides={"http": {"port": 0}})
    assert flagged.http.port == 0
    assert flagged.sse.keepalive_interval_s == 5.0


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("COREMETRY_HTTP_PROT", "1", "PROT"),
        ("COREMETRY_NOPE", "1", "NOPE"),
        ("COREMETRY_HTTP_PORT", "eighty", r"\$\.http\.port"),
    ],
)
def test_bad_environment_variables_are_named(name: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={name: value})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"http": {"port": 70000}}, "http.port"),
        ({"http": {"max_body_bytes": 0}}, "http.max_body_bytes"),
        ({"mcp": {"max_budget_s": 0}}, "mcp.max_budget_s"),
        ({"sse": {"keepalive_interval_s": -1}}, "sse.keepalive_interval_s"),
        ({"http": {"root_path": "no-slash"}}, "root_path"),
        ({"ingest": {"max_future_skew_s": -1}}, "ingest.max_future_skew_s"),
    ],
)
def test_out_of_range_values_are_refused(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides=overrides)


def test_render_round_trips_as_toml() -> None:
    config = load_config(environ={}, overrides={"http": {"allowed_origins": ["https://x.example"]}})
    text = render_config(config)
    parsed = tomllib.loads(text)
    assert parsed["http"]["allowed_origins"] == ["https://x.example"]
    assert parsed["http"]["port"] == 8080
    assert isinstance(load_config(environ={}), Config)


@pytest.mark.parametrize("value", ["inf", "-inf"])
def test_non_finite_numbers_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"mcp\.max_budget_s"):
        load_config(environ={"COREMETRY_MCP_MAX_BUDGET_S": value})


def test_ingest_future_skew_default_and_environment() -> None:
    assert load_config(environ={}).ingest.max_future_skew_s == 3600.0
    tightened = load_config(environ={"COREMETRY_INGEST_MAX_FUTURE_SKEW_S": "30"})
    assert tightened.ingest.max_future_skew_s == 30.0


def test_rate_limit_and_audit_defaults() -> None:
    config = load_config(environ={})
    assert (config.rate_limit.per_second, config.rate_limit.burst) == (20.0, 40)
    assert config.rate_limit.per_kind is False
    assert config.audit.retention_days == 30


def test_section_names_with_an_underscore_map_from_the_environment(tmp_path: Path) -> None:
    # ``rate_limit`` contains the separator: COREMETRY_RATE_LIMIT_PER_SECOND is section
    # ``rate_limit``, key ``per_second`` (not section ``rate``, key ``limit_per_second``).
    toml = "[rate_limit]\nper_second = 1.0\nburst = 2\n[audit]\nretention_days = 9\n"
    path = write(tmp_path, toml)
    env = {
        "COREMETRY_RATE_LIMIT_PER_SECOND": "2.5",
        "COREMETRY_RATE_LIMIT_BURST": "7",
        "COREMETRY_RATE_LIMIT_PER_KIND": "true",
        "COREMETRY_AUDIT_RETENTION_DAYS": "0",
    }
    config = load_config(path, environ=env)
    assert (config.rate_limit.per_second, config.rate_limit.burst) == (2.5, 7)
    assert config.rate_limit.per_kind is True
    assert config.audit.retention_days == 0
    with pytest.raises(ConfigError, match="'per_minute' in section \\[rate_limit\\]"):
        load_config(environ={"COREMETRY_RATE_LIMIT_PER_MINUTE": "1"})
    parsed = tomllib.loads(render_config(config))
    assert parsed["rate_limit"]["burst"] == 7


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"rate_limit": {"per_second": 0}}, "rate_limit.per_second"),
        ({"rate_limit": {"burst": 0}}, "rate_limit.burst"),
        ({"rate_limit": {"per_second": float("nan")}}, "rate_limit.per_second"),
        ({"audit": {"retention_days": -1}}, "audit.retention_days"),
        ({"audit": {"queue_size": 0}}, "audit.queue_size"),
    ],
)
def test_rate_limit_and_audit_ranges(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides=overrides)


def test_store_admission_defaults_and_environment() -> None:
    # The defaults keep one identity below every query thread: another always finds a slot.
    config = load_config(environ={})
    cores = len(os.sched_getaffinity(0))
    expected = 1 if cores < 4 else 2  # half the cores, 1 or 2
    assert (config.store.max_calls_per_identity, config.store.max_calls) == (expected, 4)
    assert config.store.max_calls_per_identity < config.store.max_calls
    assert config.store.max_calls_per_identity < config.store.query_threads
    env = {"COREMETRY_STORE_MAX_CALLS_PER_IDENTITY": "3", "COREMETRY_STORE_MAX_CALLS": "12"}
    tuned = load_config(environ=env)
    assert (tuned.store.max_calls_per_identity, tuned.store.max_calls) == (3, 12)
    assert tomllib.loads(render_config(tuned))["store"]["max_calls"] == 12


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"store": {"max_calls_per_identity": 0}}, r"store\.max_calls_per_identity"),
        (
            {"store": {"max_calls_per_identity": 5, "max_calls": 4}},
            r"store\.max_calls must be at least store\.max_calls_per_identity",
        ),
        ({"store": {"max_calls": "many"}}, r"store\.max_calls"),
    ],
)
def test_store_admission_ranges(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides=overrides)


def test_task_defaults_and_environment() -> None:
    config = load_config(environ={})
    assert config.mcp.task_max_budget_s == 600.0
    assert config.mcp.task_max_budget_s > config.mcp.max_budget_s
    assert config.mcp.task_ttl_ms == 3_600_000
    assert config.mcp.task_result_budget_bytes == 8 * 1024 * 1024
    env = load_config(environ={"COREMETRY_MCP_TASK_MAX_BUDGET_S": "1800"})
    assert env.mcp.task_max_budget_s == 1800.0


def test_oauth_section_defaults_file_and_render(tmp_path: Path) -> None:
    """Issue 18: ``[auth.oauth]`` and ``http.public_url``, read from TOML and rendered back."""
    defaults = load_config(environ={})
    assert defaults.auth.oauth.enabled is True
    assert defaults.auth.oauth.access_token_ttl_s <= 600
    assert defaults.http.public_url == ""
    path = write(
        tmp_path,
        '[http]\npublic_url = "https://cm.example/x"\n'
        "[auth.oauth]\nenabled = false\naccess_token_ttl_s = 120\n"
        "registration_rate_per_hour = 3\n",
    )
    config = load_config(path, environ={})
    assert (config.auth.oauth.enabled, config.auth.oauth.access_token_ttl_s) == (False, 120.0)
    assert config.auth.oauth.registration_rate_per_hour == 3
    parsed = tomllib.loads(render_config(config))
    assert parsed["auth"]["oauth"]["access_token_ttl_s"] == 120.0
    assert parsed["http"]["public_url"] == "https://cm.example/x"
    with pytest.raises(ConfigError, match=r"nope.*auth\.oauth"):
        load_config(write(tmp_path, "[auth.oauth]\nnope = 1\n"), environ={})


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        # A task's deadline must be longer than a direct call's, or tasks would buy nothing.
        ({"mcp": {"task_max_budget_s": 60}}, "mcp.task_max_budget_s must be larger"),
        ({"mcp": {"max_budget_s": 900}}, "mcp.task_max_budget_s must be larger"),
        ({"mcp": {"task_ttl_ms": 0}}, "mcp.task_ttl_ms"),
        ({"mcp": {"task_poll_interval_ms": 0}}, "mcp.task_poll_interval_ms"),
        ({"mcp": {"task_result_budget_bytes": 0}}, "mcp.task_result_budget_bytes"),
    ],
)
def test_task_ranges(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides=overrides)


# -- [auth.oidc]: an external identity provider (issue 18) ------------------------------------


def test_oidc_is_off_by_default_and_set_from_a_file(tmp_path: Path) -> None:
    assert load_config(environ={}).auth.oidc.issuer == ""
    config = load_config(
        write(
            tmp_path,
            '[auth.oidc]\nissuer = "https://idp.example.com/realms/ops"\n'
            'audience = "https://coremetry.example.com/api/mcp"\n'
            'role_claim = "realm_access.roles"\n'
            '[auth.oidc.role_map]\n"Coremetry Admins" = "admin"\nreaders = "viewer"\n',
        ),
        environ={},
    )
    oidc = config.auth.oidc
    assert oidc.issuer == "https://idp.example.com/realms/ops"
    assert oidc.role_claim == "realm_access.roles"
    assert oidc.role_map == {"Coremetry Admins": "admin", "readers": "viewer"}
    assert oidc.jwks_cache_s == 300.0
    # config show renders the nested tables as TOML that reads back the same.
    parsed = tomllib.loads(render_config(config))
    assert parsed["auth"]["oidc"]["role_map"] == {"Coremetry Admins": "admin", "readers": "viewer"}
    assert parsed["auth"]["oidc"]["issuer"] == oidc.issuer


def test_oidc_from_the_environment() -> None:
    config = load_config(
        environ={
            "COREMETRY_AUTH_OIDC_ISSUER": "https://idp.example.com",
            "COREMETRY_AUTH_OIDC_ROLE_MAP": "ops=admin, devs=editor",
            "COREMETRY_AUTH_OIDC_DEFAULT_ROLE": "viewer",
            "COREMETRY_AUTH_OIDC_JWKS_CACHE_S": "60",
        }
    )
    oidc = config.auth.oidc
    assert oidc.issuer == "https://idp.example.com"
    assert oidc.role_map == {"ops": "admin", "devs": "editor"}
    assert oidc.default_role == "viewer"
    assert oidc.jwks_cache_s == 60.0


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"COREMETRY_AUTH_OIDC_ISSUR": "x"}, r"unknown key 'issur' in section \[auth.oidc\]"),
        (
            {"COREMETRY_AUTH_OIDC_ROLE_MAP": "ops"},
            "COREMETRY_AUTH_OIDC_ROLE_MAP: expected key=value",
        ),
    ],
)
def test_bad_oidc_environment_variables_are_named(environ: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ=environ)


@pytest.mark.parametrize(
    ("oidc", "match"),
    [
        ({"issuer": "http://idp.example.com"}, r"auth\.oidc\.issuer must use https://"),
        ({"issuer": "idp.example.com"}, r"auth\.oidc\.issuer must be an https:// URL"),
        ({"issuer": "https://idp.example.com/#x"}, r"auth\.oidc\.issuer must have no query"),
        (
            {"issuer": "https://idp.example.com", "jwks_uri": "http://keys.example.com/jwks"},
            r"auth\.oidc\.jwks_uri must use https://",
        ),
        ({"role_map": {"ops": "root"}}, r"auth\.oidc\.role_map\['ops'\] must be viewer"),
        ({"default_role": "owner"}, r"auth\.oidc\.default_role must be empty"),
        ({"jwks_cache_s": 0}, r"auth\.oidc\.jwks_cache_s must be a positive"),
        ({"issuer": "https://idp.example.com", "role_claim": "a..b"}, r"auth\.oidc\.role_claim"),
        ({"unknown": 1}, r"unknown"),
    ],
)
def test_bad_oidc_settings_are_refused_naming_the_key(oidc: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides={"auth": {"oidc": oidc}})


def test_oidc_audience_is_required_off_loopback() -> None:
    issuer = {"issuer": "https://idp.example.com"}
    with pytest.raises(ConfigError, match=r"auth\.oidc\.audience must be set"):
        load_config(environ={}, overrides={"http": {"host": "0.0.0.0"}, "auth": {"oidc": issuer}})
    config = load_config(
        environ={},
        overrides={
            "http": {"host": "0.0.0.0"},
            "auth": {"oidc": {**issuer, "audience": "https://coremetry.example.com/api/mcp"}},
        },
    )
    assert config.auth.oidc.audience == "https://coremetry.example.com/api/mcp"
    # On loopback the bound address is the default (the server fills it in once bound).
    assert load_config(environ={}, overrides={"auth": {"oidc": issuer}}).auth.oidc.audience == ""
    # Behind a proxy, http.public_url names the resource: the audience defaults to its MCP URL.
    public = {"host": "0.0.0.0", "public_url": "https://cm.example.com"}
    config = load_config(environ={}, overrides={"http": public, "auth": {"oidc": issuer}})
    assert config.auth.oidc.audience == ""  # filled in by the server: <public_url>/api/mcp


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"auth": {"oauth": {"access_token_ttl_s": 7200}}}, "auth.oauth.access_token_ttl_s"),
        ({"auth": {"oauth": {"access_token_ttl_s": 0}}}, "auth.oauth.access_token_ttl_s"),
        ({"auth": {"oauth": {"refresh_token_ttl_s": -1}}}, "auth.oauth.refresh_token_ttl_s"),
        ({"auth": {"oauth": {"code_ttl_s": 3600}}}, "auth.oauth.code_ttl_s"),
        ({"auth": {"oauth": {"registration_rate_per_hour": 0}}}, "registration_rate_per_hour"),
        ({"http": {"public_url": "ftp://x.example"}}, "http.public_url"),
        ({"http": {"public_url": "https://u:p@x.example"}}, "http.public_url"),
        ({"http": {"public_url": "https://x.example/?q=1"}}, "http.public_url"),
    ],
)
def test_oauth_values_out_of_range_are_refused(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(environ={}, overrides=overrides)


def test_keep_alive_timeout_default_environment_and_range() -> None:
    # Above client pools' idle expiry (httpx 5 s): the client closes an idle connection first.
    assert load_config(environ={}).http.keep_alive_timeout_s == 75.0
    env = {"COREMETRY_HTTP_KEEP_ALIVE_TIMEOUT_S": "120"}
    assert load_config(environ=env).http.keep_alive_timeout_s == 120.0
    with pytest.raises(ConfigError, match=r"http\.keep_alive_timeout_s"):
        load_config(environ={}, overrides={"http": {"keep_alive_timeout_s": 0}})
