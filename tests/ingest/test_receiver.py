"""The OTLP/HTTP receiver end to end: a real server on loopback, real clients.

Every test runs :func:`coremetry.server.serve` (hypercorn's trio worker, the ASGI app, real
security over a temporary data dir) with the embedded store open on that data dir, as
``coremetry serve`` does, and talks to ``/v1/traces``, ``/v1/logs`` and ``/v1/metrics`` over
real sockets:

- raw httpx requests pin every status rule of the OTLP/HTTP spec and of our policy (200 with
  the Export*ServiceResponse in the request's encoding, ``partial_success``, 400/401/403/405/
  413/415/503 with a ``google.rpc.Status`` body) and check that a refused request wrote
  nothing (the store's statistics are unchanged);
- the official OpenTelemetry Python SDK's OTLP/HTTP exporters export spans, logs and metrics,
  and the records are read back from the store as soon as the export returns.

Each test is bounded by ``trio.fail_after`` (a hang guard, not a speed assertion).
"""

import gzip
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio
from google.rpc import status_pb2  # type: ignore[import-untyped]  # googleapis-common-protos ships no py.typed
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

from coremetry.config import Config, load_config
from coremetry.server import Security, build_mcp_server, open_security, serve
from coremetry.store import (
    LogQuery,
    MetricQuery,
    SpanKind,
    StatusCode,
    StoreStatistics,
    TelemetryStore,
    TimeRange,
)
from coremetry.store.open import open_telemetry_store

from ._support import OTLP_DIR, otlp_counts

LIMIT_S: Final = 60.0
"""Hang guard of every test."""

ROLES: Final = ("viewer", "editor", "admin")
CHALLENGE: Final = 'Bearer realm="coremetry"'
INVALID_TOKEN_CHALLENGE: Final = 'Bearer realm="coremetry", error="invalid_token"'
PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
ALL_TIME: Final = TimeRange(start_unix_nano=1, end_unix_nano=2**63 - 1)
MAX_BODY: Final = 256 * 1024


@dataclass
class Live:
    base: str
    store: TelemetryStore
    tokens: dict[str, str]
    config: Config

    def headers(self, role: str = "editor", content_type: str = JSON) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[role]}", "content-type": content_type}


@asynccontextmanager
async def live_server(
    tmp_path: Path, *, ingest: Mapping[str, object] | None = None
) -> AsyncIterator[Live]:
    """``serve`` with real security and the embedded store on a fresh data dir."""
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 2.0},
            "data_dir": str(tmp_path / "data"),
            "store": {"retention_days": 0},
            "ingest": {"max_body_bytes": MAX_BODY, **(ingest or {})},
            "rate_limit": {"per_second": 1000.0, "burst": 1000},
        },
    )
    security: Security = open_security(config)
    try:
        tokens = {
            role: security.store.create_token(f"otlp-{role}", role, None)[0] for role in ROLES
        }
        async with open_telemetry_store(config) as store, trio.open_nursery() as nursery:
            stop = trio.Event()
            base: str = await nursery.start(
                partial(
                    serve,
                    config,
                    build_mcp_server(),
                    announce=False,
                    shutdown=stop,
                    security=security,
                    store=store,
                )
            )
            try:
                yield Live(base, store, tokens, config)
            finally:
                stop.set()
    finally:
        security.close()


def status_of(response: httpx.Response) -> tuple[int, str]:
    """The ``google.rpc.Status`` of an error answer, decoded in the answer's encoding."""
    content_type = response.headers["content-type"]
    if content_type == PROTOBUF:
        status = status_pb2.Status.FromString(response.content)
        return int(status.code), str(status.message)
    assert content_type == JSON, content_type
    body = response.json()
    assert isinstance(body, dict)
    return int(body.get("code", 0)), str(body.get("message", ""))


def trace_request(*, spans: int = 3, start_ns: int = 1_700_000_000_000_000_000) -> bytes:
    """A protobuf ExportTraceServiceRequest: a root span and its children, one an error."""
    trace_id = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    root_id = bytes.fromhex("b7ad6b7169203331")
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="checkout"))
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "tests.ingest"
    for i in range(spans):
        span = scope_spans.spans.add()
        span.trace_id = trace_id
        span.span_id = root_id if i == 0 else (0x1000 + i).to_bytes(8, "big")
        if i:
            span.parent_span_id = root_id
        span.name = "GET /cart" if i == 0 else f"step {i}"
        span.kind = trace_pb2.Span.SPAN_KIND_SERVER if i == 0 else trace_pb2.Span.SPAN_KIND_INTERNAL
        span.start_time_unix_nano = start_ns + i * 1_000_000
        span.end_time_unix_nano = start_ns + (i + 5) * 1_000_000
        span.attributes.append(KeyValue(key="step", value=AnyValue(int_value=i)))
        if i == spans - 1 and i:
            span.status.code = trace_pb2.Status.STATUS_CODE_ERROR
            span.status.message = "card declined"
    return request.SerializeToString()


async def stats(live: Live) -> StoreStatistics:
    return await live.store.statistics()


# ---- accepted requests ---------------------------------------------------------------------------


async def test_protobuf_spans_are_stored_and_answered_in_protobuf(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces", content=trace_request(), headers=live.headers(content_type=PROTOBUF)
            )
            assert response.status_code == 200
            assert response.headers["content-type"] == PROTOBUF
            answer = ExportTraceServiceResponse.FromString(response.content)
            assert not answer.HasField("partial_success")  # full success leaves it unset
            page = await live.store.get_trace("0af7651916cd43dd8448eb211c80319c", limit=10)
            assert page.total == 3
            by_name = {span.name: span for span in page.items}
            assert by_name["GET /cart"].kind is SpanKind.SERVER
            assert by_name["GET /cart"].service_name == "checkout"
            assert by_name["step 2"].parent_span_id == "b7ad6b7169203331"
            assert by_name["step 2"].status_code is StatusCode.ERROR
            assert by_name["step 2"].status_message == "card declined"
            assert by_name["step 1"].attributes == {"step": 1}


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/traces", "trace.json"),
        ("/v1/logs", "logs.json"),
        ("/v1/logs", "events.json"),
        ("/v1/metrics", "metrics.json"),
    ],
)
async def test_json_bodies_from_the_spec_examples(tmp_path: Path, path: str, name: str) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            body = (OTLP_DIR / name).read_bytes()
            response = await client.post(path, content=body, headers=live.headers())
            assert response.status_code == 200
            assert response.headers["content-type"] == JSON
            assert response.json() == {}
            expected = otlp_counts(OTLP_DIR / name)
            after = await stats(live)
            assert (after.span_count, after.log_count, after.metric_point_count) == (
                expected["span"],
                expected["log"],
                expected["metric_point"],
            )


async def test_gzip_bodies_are_accepted(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            headers = live.headers(content_type=PROTOBUF) | {"content-encoding": "gzip"}
            response = await client.post(
                "/v1/traces", content=gzip.compress(trace_request()), headers=headers
            )
            assert response.status_code == 200
            assert (await stats(live)).span_count == 3


async def test_partial_success_in_json(tmp_path: Path) -> None:
    records = [
        {"timeUnixNano": "1700000000000000000", "body": {"stringValue": "kept"}},
        {"timeUnixNano": "-6795364578871345152", "body": {"stringValue": "no usable time"}},
    ]
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post("/v1/logs", content=body, headers=live.headers())
            assert response.status_code == 200
            partial_success = response.json()["partialSuccess"]
            assert partial_success["rejectedLogRecords"] == "1"  # int64 as a string (JSON mapping)
            assert "log record has no usable time" in partial_success["errorMessage"]
            assert "resourceLogs[0].scopeLogs[0].logRecords[1]" in partial_success["errorMessage"]
            page = await live.store.search_logs(LogQuery(time_range=ALL_TIME), limit=10)
            assert [record.body for record in page.items] == ["kept"]


async def test_partial_success_in_protobuf(tmp_path: Path) -> None:
    request = ExportTraceServiceRequest.FromString(trace_request())
    request.resource_spans[0].scope_spans[0].spans[1].start_time_unix_nano = 0
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces",
                content=request.SerializeToString(),
                headers=live.headers(content_type=PROTOBUF),
            )
            assert response.status_code == 200
            answer = ExportTraceServiceResponse.FromString(response.content)
            assert answer.partial_success.rejected_spans == 1
            assert "span start time is missing" in answer.partial_success.error_message
            assert (await stats(live)).span_count == 2


# ---- refused requests: nothing written -----------------------------------------------------------


async def test_authentication_and_role(tmp_path: Path) -> None:
    body = trace_request()
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces", content=body, headers={"content-type": PROTOBUF}
            )
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == CHALLENGE
            assert status_of(response)[0] == 16  # UNAUTHENTICATED, in protobuf
            response = await client.post(
                "/v1/traces",
                content=body,
                headers={"content-type": PROTOBUF, "authorization": "Bearer cmk_not_a_token"},
            )
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == INVALID_TOKEN_CHALLENGE
            response = await client.post(
                "/v1/traces", content=body, headers=live.headers("viewer", PROTOBUF)
            )
            assert response.status_code == 403
            assert "editor" in status_of(response)[1]
            assert (await stats(live)).span_count == 0
            for role in ("editor", "admin"):
                response = await client.post(
                    "/v1/traces", content=body, headers=live.headers(role, PROTOBUF)
                )
                assert response.status_code == 200, role
            assert (await stats(live)).span_count == 3  # the second export was a duplicate


async def test_min_role_is_configurable(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, ingest={"min_role": "admin"}) as live,
            httpx.AsyncClient(base_url=live.base) as client,
        ):
            body = trace_request()
            response = await client.post(
                "/v1/traces", content=body, headers=live.headers("editor", PROTOBUF)
            )
            assert response.status_code == 403
            response = await client.post(
                "/v1/traces", content=body, headers=live.headers("admin", PROTOBUF)
            )
            assert response.status_code == 200


async def test_unsupported_types_and_encodings(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces", content=b"spans", headers=live.headers(content_type="text/plain")
            )
            assert response.status_code == 415
            assert response.headers["content-type"] == JSON
            assert PROTOBUF in status_of(response)[1]
            response = await client.post(
                "/v1/traces",
                content=trace_request(),
                headers=live.headers(content_type=PROTOBUF) | {"content-encoding": "br"},
            )
            assert response.status_code == 415
            assert "Content-Encoding br" in status_of(response)[1]
            response = await client.get("/v1/traces", headers=live.headers())
            assert response.status_code == 405
            assert response.headers["allow"] == "POST, OPTIONS"
            response = await client.post(
                "/v1/traces",
                content=trace_request(),
                headers=live.headers(content_type=PROTOBUF) | {"origin": "https://evil.example"},
            )
            assert response.status_code == 403
            assert (await stats(live)).span_count == 0


async def test_body_cap_and_gzip_bomb(tmp_path: Path) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < MAX_BODY
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces",
                content=b"\0" * (MAX_BODY + 1),
                headers=live.headers(content_type=PROTOBUF),
            )
            assert response.status_code == 413
            assert str(MAX_BODY) in status_of(response)[1]
            response = await client.post(
                "/v1/traces",
                content=bomb,
                headers=live.headers(content_type=PROTOBUF) | {"content-encoding": "gzip"},
            )
            assert response.status_code == 413
            assert (await stats(live)).span_count == 0


@pytest.mark.parametrize(
    ("content_type", "encoding", "body", "needle"),
    [
        (PROTOBUF, None, b"\xff\xff\xff\xff", "not a protobuf ExportTraceServiceRequest"),
        (JSON, None, b'{"resourceSpans": 5}', "Expected `array`, got `int` - at `$.resourceSpans`"),
        (JSON, None, b"{not json", "the body is not JSON"),
        (JSON, "gzip", b"not gzip at all", "not valid gzip"),
    ],
)
async def test_malformed_bodies_are_400_and_write_nothing(
    tmp_path: Path, content_type: str, encoding: str | None, body: bytes, needle: str
) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            headers = live.headers(content_type=content_type)
            if encoding is not None:
                headers["content-encoding"] = encoding
            response = await client.post("/v1/traces", content=body, headers=headers)
            assert response.status_code == 400
            assert response.headers["content-type"] == content_type
            code, message = status_of(response)
            assert code == 3  # INVALID_ARGUMENT
            assert needle in message
            assert (await stats(live)).span_count == 0


async def test_a_closed_store_answers_503_retryable(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            await live.store.aclose()
            response = await client.post(
                "/v1/traces", content=trace_request(), headers=live.headers(content_type=PROTOBUF)
            )
            assert response.status_code == 503  # OTLP: retryable
            assert response.headers["retry-after"] == "5"


async def test_receiver_can_be_disabled(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, ingest={"enabled": False}) as live,
            httpx.AsyncClient(base_url=live.base) as client,
        ):
            response = await client.post(
                "/v1/traces", content=trace_request(), headers=live.headers(content_type=PROTOBUF)
            )
            assert response.status_code == 404


# ---- the official OpenTelemetry SDK as the client ------------------------------------------------


class CollectedLogs(LogRecordExporter):
    """Keeps the SDK's finished log records (the SDK's in-memory exporter is untyped)."""

    def __init__(self) -> None:
        self.records: list[ReadableLogRecord] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.records.extend(batch)
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered."""
        return True


@dataclass
class Exported:
    trace_id: str
    results: dict[str, str]


def export_with_the_sdk(base: str, token: str) -> Exported:
    """Produce spans, logs and metrics with the OTel SDK and export them with its OTLP/HTTP
    exporters (blocking: runs on a worker thread, the server runs in the test's loop)."""
    from opentelemetry import trace
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    resource = Resource.create({"service.name": "sdk-shop", "service.version": "2.4.1"})
    headers = {"authorization": f"Bearer {token}"}
    spans_memory = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_memory))
    logs_memory = CollectedLogs()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs_memory))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])

    otel_logger = logger_provider.get_logger("tests.ingest")
    tracer = tracer_provider.get_tracer("tests.ingest")
    meter = meter_provider.get_meter("tests.ingest")
    orders = meter.create_counter("shop.orders", unit="{order}", description="orders placed")
    latency = meter.create_histogram("shop.checkout.duration", unit="s")
    with tracer.start_as_current_span("checkout", kind=trace.SpanKind.SERVER) as root:
        with tracer.start_as_current_span("charge card", attributes={"payment.amount": 12.5}):
            # emitted inside the span: the SDK puts the span's ids on the record
            otel_logger.emit(
                severity_number=SeverityNumber.WARN,
                severity_text="WARN",
                body="card issuer slow: 840 ms",
                attributes={"payment.issuer": "acme"},
            )
        orders.add(2, {"shop.region": "eu"})
        latency.record(0.84, {"shop.region": "eu"})
        latency.record(0.12, {"shop.region": "eu"})
        trace_id = format(root.get_span_context().trace_id, "032x")
    metrics = reader.get_metrics_data()
    assert metrics is not None

    results = {
        "spans": OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers)
        .export(spans_memory.get_finished_spans())
        .name,
        "logs": OTLPLogExporter(endpoint=f"{base}/v1/logs", headers=headers)
        .export(logs_memory.records)
        .name,
        "metrics": OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=headers)
        .export(metrics)
        .name,
    }
    tracer_provider.shutdown()
    logger_provider.shutdown()
    meter_provider.shutdown()
    return Exported(trace_id=trace_id, results=results)


async def test_the_opentelemetry_sdk_exports_spans_logs_and_metrics(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            exported = await trio.to_thread.run_sync(
                export_with_the_sdk, live.base, live.tokens["editor"]
            )
            assert exported.results == {"spans": "SUCCESS", "logs": "SUCCESS", "metrics": "SUCCESS"}
            # queryable at once: the export returned after the write committed
            page = await live.store.get_trace(exported.trace_id, limit=10)
            spans = {span.name: span for span in page.items}
            assert set(spans) == {"checkout", "charge card"}
            assert spans["checkout"].service_name == "sdk-shop"
            assert spans["checkout"].service_version == "2.4.1"
            assert spans["checkout"].kind is SpanKind.SERVER
            assert spans["charge card"].parent_span_id == spans["checkout"].span_id
            assert spans["charge card"].attributes["payment.amount"] == 12.5
            logs = await live.store.search_logs(
                LogQuery(time_range=ALL_TIME, trace_id=exported.trace_id), limit=10
            )
            (record,) = logs.items
            assert record.body == "card issuer slow: 840 ms"
            assert record.severity_text == "WARN"
            assert record.severity_number == 13
            assert record.span_id == spans["charge card"].span_id
            assert record.service_name == "sdk-shop"
            assert record.attributes == {"payment.issuer": "acme"}
            names = await live.store.metric_names(ALL_TIME, limit=10)
            described = {d.name: d for d in names.items}
            assert described["shop.orders"].type == "sum"
            assert described["shop.orders"].unit == "{order}"
            assert described["shop.checkout.duration"].type == "histogram"
            assert "shop.region" in described["shop.orders"].label_keys
            now = time.time_ns()
            hour = 3600 * 10**9
            window = TimeRange(start_unix_nano=now - hour, end_unix_nano=now + hour)
            (orders,) = await live.store.metric_series(
                MetricQuery(
                    name="shop.orders", time_range=window, step_ns=2 * hour, aggregation="last"
                ),
                limit=10,
            )
            assert [value for _, value in orders.points] == [2.0]


async def test_non_ascii_and_odd_names_survive_the_round_trip(tmp_path: Path) -> None:
    service = "支付服务/v2 ☕ (eu-west)"
    body = json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                    },
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": "00000000000000000000000000ABCDEF",
                                    "spanId": "00000000000000AB",
                                    "name": "GET /café/ünïcode",
                                    "startTimeUnixNano": "1700000000000000000",
                                    "endTimeUnixNano": "1700000000500000000",
                                    "attributes": [
                                        {
                                            "key": "ключ.é",
                                            "value": {"stringValue": "значение\u2028"},
                                        }
                                    ],
                                }
                            ]
                        }
                    ],
                }
            ]
        },
        ensure_ascii=False,
    ).encode()
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post("/v1/traces", content=body, headers=live.headers())
            assert response.status_code == 200
            (span,) = (await live.store.get_trace("abcdef".rjust(32, "0"), limit=10)).items
            assert span.service_name == service
            assert span.name == "GET /café/ünïcode"
            assert span.attributes == {"ключ.é": "значение\u2028"}
            services = await live.store.services(ALL_TIME, limit=10)
            assert [s.service_name for s in services.items] == [service]


# ---- times a sender's clock got wrong, wrong-signal bodies, unknown paths ----------------------


def json_spans(*spans: tuple[str, int, int]) -> bytes:
    """An OTLP JSON ExportTraceServiceRequest of ``(span id, start ns, end ns)`` spans."""
    rows = [
        {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": span_id,
            "name": f"span {span_id}",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end),
        }
        for span_id, start, end in spans
    ]
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "clocky"}}]}
    return json.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": rows}]}]}
    ).encode()


async def test_records_dated_in_the_future_are_rejected_with_the_reason(tmp_path: Path) -> None:
    now = time.time_ns()
    second = 1_000_000_000
    body = json_spans(
        ("00000000000000a1", now - 2 * second, now - second),  # a moment ago
        ("00000000000000a2", now + 30 * second, now + 31 * second),  # inside the tolerance
        ("00000000000000a3", now + 2 * 3600 * second, now + 2 * 3600 * second + second),
    )
    future_log = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {"timeUnixNano": str(now), "body": {"stringValue": "now"}},
                            {
                                "timeUnixNano": str(now + 86_400 * second),
                                "body": {"stringValue": "tomorrow"},
                            },
                        ]
                    }
                ]
            }
        ]
    }
    with trio.fail_after(LIMIT_S):
        async with (
            live_server(tmp_path, ingest={"max_future_skew_s": 60}) as live,
            httpx.AsyncClient(base_url=live.base) as client,
        ):
            traces = await client.post("/v1/traces", content=body, headers=live.headers())
            logs = await client.post(
                "/v1/logs", content=json.dumps(future_log).encode(), headers=live.headers()
            )
            stored = await live.store.get_trace("5b8efff798038103d269b633813fc60c", limit=10)
            records = await live.store.search_logs(LogQuery(time_range=ALL_TIME), limit=10)
    assert traces.status_code == 200
    partial = traces.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "span end time is more than 60 s ahead of this server's clock" in partial["errorMessage"]
    assert "(ingest.max_future_skew_s)" in partial["errorMessage"]
    assert "span 00000000000000a3" in partial["errorMessage"], "the refused span is named"
    assert sorted(s.span_id for s in stored.items) == ["00000000000000a1", "00000000000000a2"]
    assert logs.status_code == 200
    assert logs.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    assert [r.body for r in records.items] == ["now"]


async def test_a_span_ending_before_it_starts_is_kept_with_duration_zero_and_said(
    tmp_path: Path,
) -> None:
    request = ExportTraceServiceRequest.FromString(trace_request())
    backwards = request.resource_spans[0].scope_spans[0].spans[1]
    start = backwards.start_time_unix_nano
    backwards.end_time_unix_nano = start - 5_000_000  # a clock stepped back 5 ms
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            response = await client.post(
                "/v1/traces",
                content=request.SerializeToString(),
                headers=live.headers(content_type=PROTOBUF),
            )
            page = await live.store.get_trace("0af7651916cd43dd8448eb211c80319c", limit=10)
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    # A warning in the spec's sense: nothing rejected, the message says what was adjusted.
    assert answer.HasField("partial_success")
    assert answer.partial_success.rejected_spans == 0
    assert "1 stored after adjusting: span end time before its start time" in (
        answer.partial_success.error_message
    )
    kept = {span.name: span for span in page.items}["step 1"]
    assert (kept.start_time_unix_nano, kept.end_time_unix_nano) == (start, start)
    assert kept.parent_span_id == "b7ad6b7169203331", "its place in the trace is kept"


async def test_a_json_body_of_another_signal_is_refused_naming_the_expected_key(
    tmp_path: Path,
) -> None:
    logs_body = (OTLP_DIR / "logs.json").read_bytes()
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            before = await stats(live)
            wrong = await client.post("/v1/metrics", content=logs_body, headers=live.headers())
            typo = await client.post(
                "/v1/traces", content=b'{"resource_spans": []}', headers=live.headers()
            )
            empty = await client.post("/v1/metrics", content=b"{}", headers=live.headers())
            after = await stats(live)
    assert wrong.status_code == 400
    code, message = status_of(wrong)
    assert code == 3
    assert "the body has no 'resourceMetrics'" in message
    assert "'resourceLogs' belongs in a request to /v1/logs" in message
    assert typo.status_code == 400
    assert "OTLP JSON keys are lowerCamelCase" in status_of(typo)[1]
    assert empty.status_code == 200, "an empty request is still a valid one"
    assert empty.json() == {}
    assert after == before, "nothing written"


async def test_unknown_otlp_paths_are_a_json_404(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live, httpx.AsyncClient(base_url=live.base) as client:
            profiles = await client.post("/v1/profiles", content=b"{}", headers=live.headers())
            protobuf = await client.post(
                "/v1/spans", content=b"", headers=live.headers(content_type=PROTOBUF)
            )
            elsewhere = await client.get("/not-otlp")
    assert profiles.status_code == 404
    assert profiles.headers["content-type"] == JSON
    code, message = status_of(profiles)
    assert code == 5  # google.rpc.Code NOT_FOUND
    assert message.startswith("/v1/profiles is not served")
    assert "/v1/traces, /v1/logs, /v1/metrics" in message
    assert protobuf.status_code == 404
    assert status_of(protobuf)[0] == 5, "answered in the request's encoding"
    assert elsewhere.status_code == 404, "other paths are not the receiver's"
