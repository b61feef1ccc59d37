"""Setting the ClickHouse backend up, as an operator meets it: configuration, the startup check,
credentials, errors, rows the Collector wrote, and telemetry arriving through ingest and OTLP.
"""

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import msgspec
import pytest
import trio
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from coremetry.cli import main
from coremetry.config import ConfigError, load_config, render_config
from coremetry.mcp import classify_tool_error, merge_error_classes
from coremetry.observability.registration import STORE_ERROR_CLASSES
from coremetry.server import build_mcp_server, serve
from coremetry.store import (
    LogQuery,
    QueryRejected,
    SpanKind,
    StatusCode,
    StoreSchemaError,
    StoreTimeout,
    StoreUnavailable,
    TelemetryStore,
    TimeRange,
    TraceQuery,
)
from coremetry.store.clickhouse import exporter_ddl, open_clickhouse_store
from coremetry.store.clickhouse._runtime import map_error
from coremetry.store.open import clickhouse_options

from ._chdb_http import ChdbHttpServer
from ._support import ENGINE, fresh_options, open_fresh_store

LIMIT_S: Final = 120.0
OTLP_DIR: Final = Path(__file__).parents[2] / "data" / "opentelemetry-proto"
HOUR: Final = 3600 * 1_000_000_000


def test_config_selects_clickhouse_and_keeps_the_password_out_of_sight(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("from-a-file\n", encoding="utf-8")
    environ = {
        "COREMETRY_STORE_BACKEND": "clickhouse",
        "COREMETRY_CLICKHOUSE_URL": "https://ch.example:8443",
        "COREMETRY_CLICKHOUSE_USERNAME": "coremetry",
        "COREMETRY_CLICKHOUSE_PASSWORD": "s3cret",
        "COREMETRY_CLICKHOUSE_DATABASE": "otel",
        "COREMETRY_CLICKHOUSE_TRACES_TABLE_NAME": "spans_v2",
    }
    config = load_config(environ=environ)
    options = clickhouse_options(config)
    assert (options.url, options.username, options.password) == (
        "https://ch.example:8443",
        "coremetry",
        "s3cret",
    )
    assert options.tables.database == "otel"
    assert options.tables.qualified("traces") == "`otel`.`spans_v2`"
    assert options.tables.qualified("gauge") == "`otel`.`otel_metrics_gauge`"
    shown = render_config(config)
    assert "s3cret" not in shown
    assert 'password = "<redacted>"' in shown
    from_file = load_config(
        environ={**environ, "COREMETRY_CLICKHOUSE_PASSWORD_FILE": str(secret_file)}
    )
    assert clickhouse_options(from_file).password == "from-a-file"


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"COREMETRY_STORE_BACKEND": "postgres"}, "store.backend"),
        ({"COREMETRY_CLICKHOUSE_URL": "http://user:pw@ch:8123"}, "clickhouse.url"),
        ({"COREMETRY_CLICKHOUSE_URL": "tcp://ch:9000"}, "clickhouse.url"),
    ],
)
def test_bad_clickhouse_settings_are_refused_naming_the_key(
    environ: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(environ=environ)


async def test_a_table_name_that_is_not_an_identifier_is_refused() -> None:
    environ = {"COREMETRY_CLICKHOUSE_LOGS_TABLE_NAME": "logs; DROP TABLE x"}
    with pytest.raises(ConfigError, match=r"clickhouse\.logs_table_name"):
        load_config(environ=environ)
    # The store checks the names it is given too, before any connection.
    options = fresh_options(ENGINE)
    bad = msgspec.structs.replace(
        options, tables=msgspec.structs.replace(options.tables, logs="logs; DROP TABLE x")
    )
    with pytest.raises(ValueError, match=r"clickhouse\.logs_table_name"):
        async with open_clickhouse_store(bad):
            pass


def test_serve_with_an_unreachable_clickhouse_says_so(tmp_path: Path) -> None:
    status = main(
        [
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
            "--store",
            "clickhouse",
            "--clickhouse-url",
            "http://127.0.0.1:9",
        ]
    )
    assert status == 1


def test_the_password_never_goes_on_the_command_line(tmp_path: Path) -> None:
    status = main(
        [
            "serve",
            "--data-dir",
            str(tmp_path),
            "--store",
            "clickhouse",
            "--clickhouse-url",
            "http://admin:hunter2@127.0.0.1:9",
        ]
    )
    assert status == 2


async def test_the_startup_check_names_every_missing_table_and_column() -> None:
    options = fresh_options(ENGINE, create_tables=False)
    database = options.tables.database
    async with open_fresh_store(ENGINE) as admin:
        names = msgspec.structs.replace(options.tables)
        statements = exporter_ddl(names)
        await admin.runtime.command(statements[0], {})  # the database
        await admin.runtime.command(statements[1], {})  # traces
        await admin.runtime.command(statements[3], {})  # gauge
        await admin.runtime.command(
            f"ALTER TABLE `{database}`.`otel_traces` DROP COLUMN StatusMessage", {}
        )
        with pytest.raises(StoreSchemaError) as refused:
            async with open_clickhouse_store(options):
                pass
        created = msgspec.structs.replace(options, create_tables=True)
        with pytest.raises(StoreSchemaError):  # a missing column is not created over data
            async with open_clickhouse_store(created):
                pass
        await admin.runtime.command(f"DROP DATABASE `{database}`", {})
        async with open_clickhouse_store(created) as store:
            stats = await store.statistics()
    message = str(refused.value)
    assert f"column {database}.otel_traces.StatusMessage (String) is missing" in message
    assert f"table {database}.otel_logs is missing" in message
    assert f"table {database}.otel_metrics_sum is missing" in message
    assert f"table {database}.otel_metrics_histogram is missing" in message
    assert "otel_metrics_gauge" not in message
    assert (stats.span_count, stats.log_count, stats.metric_point_count) == (0, 0, 0)


def test_clickhouse_errors_become_the_store_errors_and_tool_classes() -> None:
    classes = merge_error_classes(STORE_ERROR_CLASSES)
    where = "http://ch:8123"
    timeout = map_error(DatabaseError("Code: 159. DB::Exception: Timeout", code=159), where)
    memory = map_error(DatabaseError("Code: 241. DB::Exception: Memory", code=241), where)
    schema = map_error(DatabaseError("Code: 60. DB::Exception: no table", code=60), where)
    refused = map_error(OperationalError("Error executing HTTP request"), where)
    regexp = map_error(DatabaseError("Code: 427. bad regexp", code=427), where)
    ours = DatabaseError("Code: 62. DB::Exception: Syntax error", code=62)
    assert isinstance(timeout, StoreTimeout)
    assert isinstance(memory, StoreUnavailable)
    assert not isinstance(memory, StoreTimeout)
    assert isinstance(schema, StoreSchemaError)
    assert isinstance(refused, StoreUnavailable)
    assert isinstance(regexp, QueryRejected)
    assert regexp.field == "matchers"
    assert map_error(ours, where) is ours  # our own SQL bug: internal, never hidden
    assert classify_tool_error(timeout, classes).error == "timeout"
    assert classify_tool_error(memory, classes).error == "backend_unavailable"
    assert classify_tool_error(refused, classes).error == "backend_unavailable"
    internal = classify_tool_error(schema, classes)
    assert internal.error == "internal"
    assert "[clickhouse] table names" in internal.detail
    assert classify_tool_error(ours, classes).error == "internal"
    assert "Syntax" not in classify_tool_error(ours, classes).detail


async def test_rows_the_collector_wrote_are_read() -> None:
    """Rows as the exporter inserts them: pdata kind/status texts, all-text attributes."""
    start = 1_700_000_000_000_000_000
    async with open_fresh_store(ENGINE) as store:
        traces = store.options.tables.qualified("traces")
        logs = store.options.tables.qualified("logs")
        await store.runtime.command(
            f"""
            INSERT INTO {traces} (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, SpanKind,
                ServiceName, ResourceAttributes, SpanAttributes, Duration, StatusCode)
            VALUES
                (fromUnixTimestamp64Nano({{start:Int64}}), {{trace:String}}, 'aaaaaaaaaaaaaaa1',
                 '', 'GET /', 'Server', 'edge', map('service.name', 'edge'),
                 map('http.response.status_code', '500'), 5000000, 'Error'),
                (fromUnixTimestamp64Nano({{start:Int64}} + 1000), {{trace:String}},
                 'aaaaaaaaaaaaaaa2', 'aaaaaaaaaaaaaaa1', 'SELECT', 'SPAN_KIND_CLIENT', 'db',
                 map(), map(), 1000000, 'STATUS_CODE_UNSET')
            """,
            {"start": start, "trace": "f" * 32},
        )
        await store.runtime.command(
            f"""
            INSERT INTO {logs} (Timestamp, SeverityText, SeverityNumber, ServiceName, Body,
                LogAttributes)
            VALUES (fromUnixTimestamp64Nano({{start:Int64}}), 'ERROR', 17, 'edge',
                    'upstream timed out', map('thread.id', '7'))
            """,
            {"start": start},
        )
        trace = await store.get_trace("F" * 32, limit=10)
        window = TimeRange(start_unix_nano=start - HOUR, end_unix_nano=start + HOUR)
        services = await store.services(window, limit=10)
        found = await store.search_traces(
            TraceQuery(time_range=window, attributes={"http.response.status_code": "500"}),
            limit=10,
        )
        records = await store.search_logs(LogQuery(time_range=window, text="timed"), limit=10)
    root, child = trace.items
    assert (root.kind, root.status_code) == (SpanKind.SERVER, StatusCode.ERROR)
    assert (child.kind, child.status_code) == (SpanKind.CLIENT, StatusCode.UNSET)
    assert root.attributes == {"http.response.status_code": "500"}  # text: the exporter's
    assert root.end_time_unix_nano - root.start_time_unix_nano == 5_000_000
    edge = next(s for s in services.items if s.service_name == "edge")
    assert (edge.request_count, edge.error_count) == (1, 1)
    assert [t.trace_id for t in found.items] == ["f" * 32]
    assert [(r.body, r.attributes, r.observed_time_unix_nano) for r in records.items] == [
        ("upstream timed out", {"thread.id": "7"}, 0)
    ]


def _counts(document: object) -> tuple[int, int]:
    assert isinstance(document, dict)
    spans = sum(
        len(scope.get("spans", []))
        for resource in document.get("resourceSpans", [])
        for scope in resource.get("scopeSpans", [])
    )
    logs = sum(
        len(scope.get("logRecords", []))
        for resource in document.get("resourceLogs", [])
        for scope in resource.get("scopeLogs", [])
    )
    return spans, logs


@asynccontextmanager
async def _receiver(store: TelemetryStore) -> AsyncIterator[str]:
    config = load_config(
        environ={}, overrides={"http": {"port": 0}, "ingest": {"min_role": "viewer"}}
    )
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        base: str = await nursery.start(
            partial(
                serve,
                config,
                build_mcp_server(),
                announce=False,
                shutdown=stop,
                store=store,
            )
        )
        yield base
        stop.set()


async def test_otlp_http_and_coremetry_ingest_write_through_clickhouse(
    chdb_http: ChdbHttpServer, tmp_path: Path
) -> None:
    trace_file, logs_file = OTLP_DIR / "trace.json", OTLP_DIR / "logs.json"
    spans, _ = _counts(json.loads(trace_file.read_text(encoding="utf-8")))
    _, logs = _counts(json.loads(logs_file.read_text(encoding="utf-8")))
    assert spans > 0
    assert logs > 0
    with trio.fail_after(LIMIT_S):
        async with open_fresh_store(chdb_http.url) as store:
            async with _receiver(store) as base, httpx.AsyncClient() as client:
                sent = await client.post(
                    base + "/v1/traces",
                    content=trace_file.read_bytes(),
                    headers={"content-type": "application/json"},
                )
            received = await store.statistics()
            # The same file again through `coremetry ingest`, another process on the same
            # tables: every span is already there.
            env = {
                **os.environ,
                "COREMETRY_DATA_DIR": str(tmp_path),
                "COREMETRY_STORE_BACKEND": "clickhouse",
                "COREMETRY_CLICKHOUSE_URL": chdb_http.url,
                "COREMETRY_CLICKHOUSE_DATABASE": store.options.tables.database,
            }
            done = await trio.run_process(
                [sys.executable, "-m", "coremetry", "ingest", str(trace_file), str(logs_file)],
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                start_new_session=True,
            )
            after = await store.statistics()
    assert sent.status_code == 200, sent.text
    assert received.span_count == spans
    assert done.returncode == 0, done.stderr.decode()
    assert (after.span_count, after.log_count) == (spans, logs)
