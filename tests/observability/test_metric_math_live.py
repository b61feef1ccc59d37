"""Metric math checked end to end: the OpenTelemetry SDK exports known values, query_metric reads.

The SDK (``MeterProvider`` with its default explicit buckets ``0, 5, 10, 25, 50, 75, 100, 250,
500, ...``) records known values and its OTLP/HTTP exporter posts them to a live
:func:`coremetry.server.serve` (real security, the embedded store); the official ``mcp`` SDK
client then calls ``query_metric`` (every message validated against the MCP schema). Issue 17:

- percentiles interpolate inside the bucket clamped to the exported min and max — values 0.05,
  0.2 and 1.5 s give p50 0.775 s (not 2.5) and p99 1.4855 s (not 4.95); 100/200/300 ms give p99
  298.5 ms (not 492.5) — and each point carries the bucket ``[lower, upper]`` it rests in;
- a histogram's default aggregation works (p95, echoed), and its count, sum and mean can be read;
- ``sum`` over a cumulative counter at 5 exported twice is 5 (its increase), not 10; a
  counter's default aggregation is ``rate``.
"""

import math
from collections.abc import Sequence
from pathlib import Path

import trio

from ._client import mcp_client, structured
from .test_live_ingest import LIMIT_S
from .test_live_ingest import live_server as live_ingest_server

JsonObject = dict[str, object]


def export_known_values(base: str, token: str) -> list[str]:
    """Record known values with the OTel SDK and export them over OTLP/HTTP (blocking).

    The counter is collected and exported twice without changing (a cumulative 5 both times).
    """
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create({"service.name": "math-shop"}), metric_readers=[reader]
    )
    meter = provider.get_meter("tests.metric_math")
    seconds = meter.create_histogram("shop.checkout.duration", unit="s")
    millis = meter.create_histogram("shop.db.duration", unit="ms")
    orders = meter.create_counter("shop.orders", unit="{order}")
    for value in (0.05, 0.2, 1.5):
        seconds.record(value)
    for value in (100.0, 200.0, 300.0):
        millis.record(value)
    orders.add(5)
    exporter = OTLPMetricExporter(
        endpoint=f"{base}/v1/metrics", headers={"authorization": f"Bearer {token}"}
    )
    results = []
    for _ in range(2):
        data = reader.get_metrics_data()
        assert data is not None
        results.append(exporter.export(data).name)
    provider.shutdown()
    return results


def rows(body: JsonObject) -> list[JsonObject]:
    series = body["series"]
    assert isinstance(series, list)
    return [row for row in series if isinstance(row, dict)]


def points(body: JsonObject) -> list[Sequence[object]]:
    (row,) = rows(body)
    found = row["points"]
    assert isinstance(found, list)
    return [p for p in found if isinstance(p, list)]


def only_point(body: JsonObject) -> Sequence[object]:
    (point,) = points(body)
    return point


def close(actual: object, expected: float) -> bool:
    # query_metric rounds values to 6 decimals
    return isinstance(actual, int | float) and math.isclose(
        actual, expected, rel_tol=1e-9, abs_tol=1e-6
    )


async def test_query_metric_reads_the_sdk_exports_right(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_ingest_server(tmp_path) as live:
            results = await trio.to_thread.run_sync(export_known_values, live.base, live.token)
            assert results == ["SUCCESS", "SUCCESS"]
            answers: dict[tuple[str, str | None], JsonObject] = {}
            async with mcp_client(live.mcp_url, live.token) as client:
                for name, aggregation in [
                    ("shop.checkout.duration", "p50"),
                    ("shop.checkout.duration", "p99"),
                    ("shop.checkout.duration", None),
                    ("shop.checkout.duration", "count"),
                    ("shop.checkout.duration", "sum"),
                    ("shop.checkout.duration", "avg"),
                    ("shop.db.duration", "p99"),
                    ("shop.db.duration", "p50"),
                    ("shop.orders", "sum"),
                    ("shop.orders", "increase"),
                    ("shop.orders", None),
                ]:
                    arguments: JsonObject = {"name": name, "range": "15m", "step": "1d"}
                    if aggregation is not None:
                        arguments["aggregation"] = aggregation
                    answers[name, aggregation] = structured(
                        await client.call_tool("query_metric", arguments)
                    )

    def answer(name: str, aggregation: str | None) -> JsonObject:
        return answers[name, aggregation]

    p50 = only_point(answer("shop.checkout.duration", "p50"))
    assert close(p50[1], 0.05 + 1.45 * 0.5), p50  # not 2.5
    assert close(p50[2], 0.05)
    assert close(p50[3], 1.5), "the bucket (0, 5] clamped to the exported min and max"
    p99 = only_point(answer("shop.checkout.duration", "p99"))
    assert close(p99[1], 0.05 + 1.45 * 0.99), p99  # not 4.95
    percentile = answer("shop.checkout.duration", "p99")
    assert "interpolated inside the one histogram bucket" in str(percentile["note"])
    assert "lower, upper" in str(percentile["points_format"])

    default = answer("shop.checkout.duration", None)
    assert default["aggregation"] == "p95"
    assert close(only_point(default)[1], 0.05 + 1.45 * 0.95)
    count = answer("shop.checkout.duration", "count")
    assert count["aggregation"] == "count"
    assert only_point(count)[1:] == [3]
    assert close(only_point(answer("shop.checkout.duration", "sum"))[1], 1.75)
    assert close(only_point(answer("shop.checkout.duration", "avg"))[1], 1.75 / 3)
    assert "note" not in count, "no percentile, no note on buckets"

    db_p99 = only_point(answer("shop.db.duration", "p99"))
    assert close(db_p99[1], 250 + 50 * 0.97), db_p99  # not 492.5
    assert (db_p99[2], db_p99[3]) == (250, 300)
    db_p50 = only_point(answer("shop.db.duration", "p50"))
    assert close(db_p50[1], 175)

    for aggregation in ("sum", "increase"):
        grown = answer("shop.orders", aggregation)
        assert grown["aggregation"] == aggregation
        total = sum(float(str(p[1])) for p in points(grown))
        assert total == 5, f"a counter at 5 exported twice grew by 5, not 10: {grown}"
    assert answer("shop.orders", None)["aggregation"] == "rate"
