"""What a model can see (issue 17), end to end with the OpenTelemetry SDK.

The SDK exports spans, log records and metrics over OTLP/HTTP to a live
:func:`coremetry.server.serve` (real security, the embedded store); the official ``mcp`` SDK
client calls the tools (every message validated against the MCP schema):

- ``get_trace`` shows every attribute of a span, semantic-convention keys first (the current
  ``db.system.name`` as well as custom keys such as ``cart.total``, ``user.vip``, ``db.rows``),
  and its events (not only ``exception``); past 64 attributes the rest are counted in
  ``attributes_omitted``;
- ``search_logs`` returns log record attributes and filters by attribute equality;
- ``list_services`` lists services that sent only logs or only metrics, saying which signals.
"""

from pathlib import Path
from typing import Final

import trio

from ._client import mcp_client, structured
from .test_live_ingest import LIMIT_S
from .test_live_ingest import live_server as live_ingest_server

JsonObject = dict[str, object]

MANY: Final = 100
"""Custom attributes on one span: more than a span row shows (64)."""


def export_everything(base: str, token: str) -> str:
    """Export a trace, log records and a metric with the OTel SDK (blocking); the trace id."""
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

    headers = {"authorization": f"Bearer {token}"}
    tracing = TracerProvider(resource=Resource.create({"service.name": "cart"}))
    tracing.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers))
    )
    tracer = tracing.get_tracer("tests.visible")
    with tracer.start_as_current_span(
        "POST /checkout",
        attributes={
            "cart.total": 42.5,
            "user.vip": True,
            "http.request.method": "POST",
            "url.full": "http://shop/checkout",
        },
    ) as root:
        root.add_event("cart.validated", {"cart.items": 3})
        with tracer.start_as_current_span(
            "SELECT orders",
            attributes={
                "db.rows": 7,
                "db.system.name": "postgresql",
                "db.query.text": "SELECT * FROM orders",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "crowded", attributes={f"custom.{i:03d}": i for i in range(MANY)}
        ):
            pass
        trace_id = format(root.get_span_context().trace_id, "032x")
    tracing.shutdown()

    def send_logs(service: str, records: list[tuple[str, dict[str, str | int]]]) -> None:
        provider = LoggerProvider(resource=Resource.create({"service.name": service}))
        provider.add_log_record_processor(
            SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{base}/v1/logs", headers=headers))
        )
        logger = provider.get_logger("tests.visible")
        for body, attributes in records:
            logger.emit(
                severity_number=SeverityNumber.WARN,
                severity_text="WARN",
                body=body,
                attributes=attributes,
            )
        provider.shutdown()

    send_logs(
        "cart",
        [
            ("order placed", {"order.id": "o-1", "cart.items": 3}),
            ("order placed", {"order.id": "o-2", "cart.items": 1}),
        ],
    )
    send_logs("mailer", [("mail sent", {"order.id": "o-2"})])

    reader = InMemoryMetricReader()
    meters = MeterProvider(
        resource=Resource.create({"service.name": "ledger"}), metric_readers=[reader]
    )
    meters.get_meter("tests.visible").create_counter("ledger.entries").add(3)
    data = reader.get_metrics_data()
    assert data is not None
    exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=headers)
    assert exporter.export(data).name == "SUCCESS"
    meters.shutdown()
    return trace_id


def objects(value: object) -> list[JsonObject]:
    assert isinstance(value, list), value
    return [item for item in value if isinstance(item, dict)]


def span_named(trace: JsonObject, name: str) -> JsonObject:
    (span,) = [s for s in objects(trace["spans"]) if s.get("name") == name]
    return span


async def test_the_tools_show_what_the_sdk_sent(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_ingest_server(tmp_path) as live:
            trace_id = await trio.to_thread.run_sync(export_everything, live.base, live.token)
            async with mcp_client(live.mcp_url, live.token) as client:
                trace = structured(await client.call_tool("get_trace", {"trace_id": trace_id}))
                logs = structured(
                    await client.call_tool(
                        "search_logs",
                        {"range": "15m", "attributes": [{"key": "order.id", "value": "o-2"}]},
                    )
                )
                cart_logs = structured(
                    await client.call_tool(
                        "search_logs",
                        {
                            "range": "15m",
                            "attributes": [
                                {"key": "cart.items", "value": "3"},
                                {"key": "service.name", "value": "cart"},
                            ],
                        },
                    )
                )
                services = structured(await client.call_tool("list_services", {"range": "15m"}))

    # get_trace: every attribute, semantic-convention keys first, events too.
    root = span_named(trace, "POST /checkout")
    attributes = root["attributes"]
    assert isinstance(attributes, dict)
    assert list(attributes) == ["http.request.method", "url.full", "cart.total", "user.vip"]
    assert attributes["cart.total"] == 42.5
    assert attributes["user.vip"] is True
    (event,) = objects(root["events"])
    assert event["name"] == "cart.validated"
    assert event["attributes"] == {"cart.items": 3}
    db = span_named(trace, "SELECT orders")
    db_attributes = db["attributes"]
    assert isinstance(db_attributes, dict)
    assert list(db_attributes) == ["db.system.name", "db.query.text", "db.rows"]
    assert db_attributes["db.rows"] == 7
    crowded = span_named(trace, "crowded")
    shown = crowded["attributes"]
    assert isinstance(shown, dict)
    assert len(shown) + int(str(crowded["attributes_omitted"])) == MANY
    assert list(shown) == sorted(shown)
    assert "custom.000" in shown

    # search_logs: attributes shown, filtered by log and resource attribute equality.
    records = objects(logs["records"])
    assert sorted(str(r["service"]) for r in records) == ["cart", "mailer"]
    for record in records:
        record_attributes = record["attributes"]
        assert isinstance(record_attributes, dict)
        assert record_attributes["order.id"] == "o-2"
    (record,) = objects(cart_logs["records"])
    assert record["body"] == "order placed"
    assert isinstance(record["attributes"], dict)
    assert record["attributes"]["order.id"] == "o-1"

    # list_services: every signal's services, RED only where spans exist.
    rows = {str(row["service"]): row for row in objects(services["services"])}
    assert set(rows) == {"cart", "mailer", "ledger"}
    assert rows["cart"]["signals"] == ["traces", "logs"]
    assert rows["cart"]["log_count"] == 2
    assert "request_count" in rows["cart"]
    assert rows["mailer"]["signals"] == ["logs"]
    assert rows["mailer"]["log_count"] == 1
    assert "request_count" not in rows["mailer"]
    assert rows["ledger"]["signals"] == ["metrics"]
    assert rows["ledger"]["metric_count"] == 1
    assert services["total"] == 3
