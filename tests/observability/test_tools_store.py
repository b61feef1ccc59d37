"""The tools over a real SQLite store filled by the real ingest path with real Zipkin traces.

Each test writes shared-data files (decoded by :mod:`coremetry.ingest`) into a fresh embedded
store, builds the production registry over it (:func:`coremetry.server.build_mcp_server`) and
calls the tools through the dispatcher, validating every answer against the MCP schema.
"""

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import msgspec
from conftest import check_emitted
from jsonschema import Draft202012Validator

from coremetry.mcp import Connection, Server
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability.ranges import rfc3339
from coremetry.observability.results import GetServiceResult, output_schema
from coremetry.server import build_mcp_server
from coremetry.store import MetricPoint, SpanKind, TelemetryBatch
from coremetry.store.sqlite import open_sqlite_store

from ._support import SKEW, ZIPKIN, decode

OAUTH: Final = ZIPKIN / "smartthings-oauth-authorization.json"
"""Real SmartThings OAuth flow: 175 spans, HTTP 401s in ``auth`` and ``stlogin``."""


@asynccontextmanager
async def tools_over(tmp_path: Path, files: Sequence[Path]) -> AsyncIterator[Server]:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        for path in files:
            await store.write(decode(path))
        yield build_mcp_server(store=store, output_budget_bytes=4096)


async def call(server: Server, name: str, arguments: dict[str, object]) -> dict[str, object]:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    reply = await server.handle(
        msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
    )
    assert reply is not None
    message = json.loads(reply.body)
    check_emitted(message, LATEST_HANDSHAKE, "tools/call")
    result = message["result"]
    text = result["content"][0]["text"]
    assert len(text.encode()) <= 4096, "the configured budget holds"
    body = json.loads(text)
    assert isinstance(body, dict)
    assert result.get("isError", False) is ("error" in body and "retryable" in body)
    return body


def number(value: object) -> float:
    assert isinstance(value, int | float), value
    return float(value)


def window_of(path: Path) -> dict[str, object]:
    """A window around every span of a file (Zipkin timestamps are microseconds)."""
    spans = decode(path).spans
    start = min(s.start_time_unix_nano for s in spans) - 1_000_000_000
    end = max(s.end_time_unix_nano for s in spans) + 1_000_000_000
    return {"start": rfc3339(start), "end": rfc3339(end)}


async def test_failing_spans_are_found_and_shown(tmp_path: Path) -> None:
    async with tools_over(tmp_path, [OAUTH]) as server:
        found = await call(server, "search_traces", {"status": "error", **window_of(OAUTH)})
        traces = found["traces"]
        assert isinstance(traces, list)
        (trace,) = traces
        detail = await call(server, "get_trace", {"trace_id": trace["trace_id"]})
        services = await call(server, "list_services", window_of(OAUTH))
    assert trace["error_count"] == 2
    errors = detail["error_spans"]
    assert isinstance(errors, list)
    assert sorted(e["service"] for e in errors) == ["auth", "stlogin"]
    assert detail["span_count"] == 175
    assert detail["truncated"] is True, "175 spans do not fit 4 KiB"
    assert isinstance(detail["cursor"], str)
    rows = services["services"]
    assert isinstance(rows, list)
    failing = {r["service"]: r for r in rows if r["error_count"]}
    assert set(failing) <= {"auth", "stlogin"}
    assert failing
    assert all(0 < r["error_rate"] <= 1 for r in failing.values())


async def test_clock_skew_is_corrected_and_said(tmp_path: Path) -> None:
    async with tools_over(tmp_path, [SKEW]) as server:
        found = await call(server, "search_traces", window_of(SKEW))
        traces = found["traces"]
        assert isinstance(traces, list)
        (trace,) = traces
        detail = await call(server, "get_trace", {"trace_id": trace["trace_id"]})
    notes = detail["notes"]
    assert isinstance(notes, list)
    assert any("clock skew" in str(n) for n in notes)
    rows = detail["spans"]
    assert isinstance(rows, list)
    spans = {f"{s['name']}/{s['service']}": s for s in rows if isinstance(s, dict)}
    server_span = spans["post/serviceb"]
    client_span = spans["post/servicea"]
    assert number(server_span["skew_shift_ms"]) > 0
    assert number(server_span["start_offset_ms"]) >= number(client_span["start_offset_ms"])
    assert client_span["self_time_ms"] == 0.962  # 94.539 ms - 93.577 ms, as Zipkin recorded
    assert client_span["critical_path_ms"] == 0.962
    path = detail["critical_path"]
    assert isinstance(path, list)
    assert any(p.get("waiting_on") == "serviceb" for p in path)


async def test_empty_window_points_at_the_stored_data(tmp_path: Path) -> None:
    async with tools_over(tmp_path, [OAUTH]) as server:
        empty = await call(server, "search_traces", {})
        logs = await call(server, "search_logs", {"range": "15m"})
    window = window_of(OAUTH)
    assert empty["traces"] == []
    extent = empty["data_extent"]
    assert isinstance(extent, dict)
    shown = [str(window["start"]), str(extent["start"]), str(extent["end"]), str(window["end"])]
    assert shown == sorted(shown), "the extent lies inside the files' span of time"
    assert "retry with start/end" in str(empty["note"])
    assert logs["records"] == []
    assert "data_extent" in logs


async def test_an_empty_answer_over_all_the_data_says_to_loosen_the_filters(
    tmp_path: Path,
) -> None:
    """A window that holds every stored record: moving it cannot help (fresh-user run)."""
    async with tools_over(tmp_path, [OAUTH]) as server:
        window = window_of(OAUTH)  # the files' span of time: the stored extent lies inside
        wide = {"start": window["start"], "end": window["end"]}
        none = await call(server, "search_traces", {**wide, "min_duration_ms": 10**9})
        some = await call(server, "search_traces", {**wide})
        deploys = await call(server, "list_deploys", {**wide})
    assert none.get("traces") == [], none
    note = str(none["note"])
    assert "the window already covers all of it" in note
    assert "retry with start/end" not in note
    # The note names the argument the call set, not arguments search_traces does not take.
    assert "loosen them (min_duration_ms)" in note, note
    assert some["traces"] != [], "the stored traces lie inside the window"
    # The files carry no service.version: nothing to loosen, and the note says so.
    assert deploys.get("deploys") == [], deploys
    deploy_note = str(deploys["note"])
    assert "the window already covers all of it" in deploy_note
    assert "loosen" not in deploy_note, deploy_note


def versioned(path: Path, version: str) -> TelemetryBatch:
    """A real trace file's spans with ``service.version`` set on every resource.

    No shipped dataset carries versions, so a deploy is staged from two real captures of the
    same services, days apart: each file becomes one version.
    """
    spans = [
        msgspec.structs.replace(
            span, resource_attributes={**span.resource_attributes, "service.version": version}
        )
        for span in decode(path).spans
    ]
    return TelemetryBatch(spans=spans)


def entry_spans(path: Path, service: str) -> int:
    """Spans of ``service`` that are requests it served (SERVER/CONSUMER kind, or roots)."""
    return sum(
        1
        for s in decode(path).spans
        if s.service_name == service
        and (s.kind in (SpanKind.SERVER, SpanKind.CONSUMER) or not s.parent_span_id)
    )


async def test_compare_deploys_puts_two_versions_side_by_side(tmp_path: Path) -> None:
    install = ZIPKIN / "smartthings-mobile-web-install.json"
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(versioned(OAUTH, "1.0"))
        await store.write(versioned(install, "2.0"))
        server = build_mcp_server(store=store)
        window = {"start": window_of(OAUTH)["start"], "end": window_of(install)["end"]}
        deploys = await call(server, "list_deploys", {"service": "auth", **window})
        compared = await call(server, "compare_deploys", {"service": "auth", **window})
        unknown = await call(
            server, "compare_deploys", {"service": "auth", "to_version": "9.9", **window}
        )
    rows = deploys["deploys"]
    assert isinstance(rows, list)
    assert [(r["service"], r["version"]) for r in rows] == [("auth", "2.0"), ("auth", "1.0")]
    assert compared["from_version"] == "1.0"
    assert compared["to_version"] == "2.0"
    for side, path in (("before", OAUTH), ("after", install)):
        half = compared[side]
        assert isinstance(half, dict)
        assert half["red"]["request_count"] == entry_spans(path, "auth")
    change = compared["change"]
    assert isinstance(change, dict)
    assert set(change) >= {"error_rate_delta", "p95_ms_delta"}
    assert unknown["error"] == "not_found"
    assert str(unknown["detail"]).startswith("to_version:")


async def test_service_self_time_counts_parallel_spans_once(tmp_path: Path) -> None:
    # Zipkin's Kafka example: servicea's spans run in parallel, so the sum of their self
    # times (757 ms) is longer than the whole trace (649 ms); the union is not.
    kafka = ZIPKIN / "messaging-kafka.json"
    async with tools_over(tmp_path, [kafka]) as server:
        found = await call(server, "search_traces", window_of(kafka))
        traces = found["traces"]
        assert isinstance(traces, list)
        details = [
            await call(server, "get_trace", {"trace_id": t["trace_id"], "limit": 1}) for t in traces
        ]
    summed = {
        span.service_name: 0 for span in decode(kafka).spans
    }  # every service of the file appears in some trace's services
    for detail in details:
        duration = number(detail["duration_ms"])
        rows = detail["services"]
        assert isinstance(rows, list)
        for row in rows:
            assert 0 <= number(row["self_time_ms"]) <= duration, (row, duration)
            summed[str(row["service"])] += 1
    assert all(summed.values())


async def test_red_tools_state_the_percentile_error(tmp_path: Path) -> None:
    # The embedded store reads percentiles from per-minute latency sketches (1 % relative
    # error); each RED tool says so beside its p50_ms..p99_ms.
    install = ZIPKIN / "smartthings-mobile-web-install.json"
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(versioned(OAUTH, "1.0"))
        await store.write(versioned(install, "2.0"))
        server = build_mcp_server(store=store, output_budget_bytes=4096)
        window = {"start": window_of(OAUTH)["start"], "end": window_of(install)["end"]}
        answers = [
            await call(server, "list_services", window),
            await call(server, "get_service", {"service": "auth", **window}),
            await call(server, "get_service_map", window),
            await call(server, "compare_deploys", {"service": "auth", **window}),
        ]
    assert [a.get("percentile_relative_error") for a in answers] == [0.01] * 4


async def test_get_service_without_spans_in_the_window_answers_with_its_metrics(
    tmp_path: Path,
) -> None:
    spans = decode(OAUTH).spans
    first = min(s.start_time_unix_nano for s in spans)
    # Metrics of a service no span names, a minute before the traces; then the traces' window.
    quiet = {
        "start": rfc3339(first - 120 * 1_000_000_000),
        "end": rfc3339(first - 30 * 1_000_000_000),
    }
    points = [
        MetricPoint(
            name="process.cpu.utilization",
            type="gauge",
            service_name=name,
            time_unix_nano=first - 60 * 1_000_000_000 + k * 1_000_000_000,
            value=0.5,
        )
        for name in ("auth", "metrics-only")
        for k in range(3)
    ]
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(decode(OAUTH))
        await store.write(TelemetryBatch(metrics=points))
        server = build_mcp_server(store=store, output_budget_bytes=4096)
        auth = await call(server, "get_service", {"service": "auth", **quiet})
        only = await call(server, "get_service", {"service": "metrics-only", **quiet})
        nothing = await call(server, "get_service", {"service": "auth", **window_of(OAUTH)})
        unknown = await call(server, "get_service", {"service": "no-such-service", **quiet})
    schema = output_schema(GetServiceResult)
    for answer in (auth, only):
        # Not not_found: what exists in the window, and why RED and likely_origin are absent.
        Draft202012Validator(schema).validate(answer)
        assert answer["metrics"] == ["process.cpu.utilization"]
        assert answer["metrics_total"] == 1
        assert "red" not in answer
        assert "likely_origin" not in answer
        assert "no spans" in str(answer["note"])
        assert "likely_origin" in str(answer["note"])
    # With spans in the window: the usual answer.
    Draft202012Validator(schema).validate(nothing)
    assert number(as_row(nothing["red"])["span_count"]) > 0
    assert "likely_origin" in nothing
    # Neither spans nor metrics: still not_found.
    assert unknown["error"] == "not_found"


def as_row(value: object) -> dict[str, object]:
    assert isinstance(value, dict), value
    return value
