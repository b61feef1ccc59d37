"""Answers that contradicted themselves on the demo (issue 21), each checked on ``serve --demo``.

- ``get_service``'s latency evidence gave a "peak" at the start of a bucket of unstated width,
  minutes away from the peak a 1-minute ``query_metric`` shows, and a "peak" below the median.
- ``get_trace`` gave the gateway the whole trace as self time while its critical-path time was
  2 ms (its handler span sits beside the call it made).
- A misspelled service answered an empty list from ``search_traces`` but ``not_found`` from
  ``get_service``.

Calls go through the official ``mcp`` SDK client (:mod:`._client`); each test is bounded by
``trio.fail_after`` (a hang guard), nothing asserts on timings.
"""

from typing import Final

import trio

from ._client import failure, mcp_client, num, obj, objs, structured
from .conftest import DemoServer

LIMIT_S: Final = 300.0
TRAVEL: Final = "ts-travel-service"
GATEWAY: Final = "ts-gateway-service"

JsonObject = dict[str, object]


async def test_latency_peaks_are_buckets_the_metric_query_returns(demo_server: DemoServer) -> None:
    checked = 0
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            for service in (GATEWAY, TRAVEL):
                answer = structured(
                    await client.call_tool("get_service", {"service": service, "range": "24h"})
                )
                origin = obj(answer["likely_origin"])
                focus = obj(origin["focus"])
                rows = objs(obj(origin["evidence"])["latency_metrics"])
                assert rows, origin
                for row in rows:
                    # A peak is above the median, by construction, and its bucket is stated.
                    assert num(row["peak_in_focus"]) > num(row["median"]), row
                    assert num(row["peak_to_median"]) > 1, row
                    assert row["bucket_s"] == 60, row
                    assert row["median_bucket_s"] == 60, row
                    # The same query through query_metric: the peak is its largest bucket
                    # starting in the focus, labelled with the same start.
                    result = structured(
                        await client.call_tool(
                            "query_metric",
                            {
                                "name": row["metric"],
                                "service": origin["service"],
                                "aggregation": row["aggregation"],
                                "group_by": ["service.name"],
                                "step": "1m",
                                "start": focus["start"],
                                "end": focus["end"],
                            },
                        )
                    )
                    (series,) = objs(result["series"])
                    raw = series["points"]
                    assert isinstance(raw, list)
                    points = {str(p[0]): num(p[1]) for p in raw if isinstance(p, list)}
                    inside = {t: v for t, v in points.items() if t >= str(focus["start"])}
                    assert points[str(row["peak_bucket_start"])] == num(row["peak_in_focus"])
                    assert max(inside.values()) == num(row["peak_in_focus"])
                    assert str(row["peak_bucket_start"]) >= str(focus["start"])
                    checked += 1
    assert checked >= 2


async def test_the_gateway_self_time_is_its_own_work(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            found = structured(
                await client.call_tool(
                    "search_traces",
                    {"service": TRAVEL, "min_duration_ms": 1000, "range": "24h", "limit": 20},
                )
            )
            traces = [
                structured(await client.call_tool("get_trace", {"trace_id": t["trace_id"]}))
                for t in objs(found["traces"])
            ]
    assert traces
    for trace in traces:
        duration = num(trace["duration_ms"])
        rows = {str(s["service"]): s for s in objs(trace["services"])}
        gateway = rows[GATEWAY]
        # Issue 21 saw self_time_ms 1,087.56 = the whole trace, critical_path_ms ~2.
        assert num(gateway["self_time_ms"]) < 0.01 * duration, gateway
        assert num(gateway["self_time_ms"]) <= num(gateway["critical_path_ms"]) + 1, gateway
        assert num(gateway["self_time_ms"]) + num(gateway["call_wait_ms"]) <= duration, gateway
        for row in rows.values():
            assert 0 <= num(row["self_time_ms"]) <= duration, row
        # The handler span beside the call holds no more than a millisecond or two itself.
        handler = [s for s in objs(trace["spans"]) if s["name"] == "FilteringWebHandler.handle"]
        assert handler, "the Nezha gateway records its handler beside the call"
        assert all(num(s["self_time_ms"]) < 5 for s in handler), handler


async def test_a_misspelled_service_is_not_found_by_every_tool_alike(
    demo_server: DemoServer,
) -> None:
    wrong = "ts-travel-servic"
    calls: list[tuple[str, JsonObject]] = [
        ("get_service", {"service": wrong, "range": "24h"}),
        ("search_traces", {"service": wrong, "range": "24h"}),
        ("search_logs", {"service": wrong, "range": "24h"}),
        ("query_metric", {"name": "http.server.request.duration", "service": wrong}),
        ("list_deploys", {"service": wrong}),
        ("compare_deploys", {"service": wrong}),
        ("list_problems", {"service": wrong}),
        ("list_anomalies", {"service": wrong}),
    ]
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            errors = [failure(await client.call_tool(name, args)) for name, args in calls]
            # A stored service with nothing in the window is not an error: the empty answer
            # says where the data is.
            empty = structured(
                await client.call_tool("search_traces", {"service": TRAVEL, "range": "1h"})
            )
    for (name, _args), error in zip(calls, errors, strict=True):
        assert error["error"] == "not_found", (name, error)
        assert error == errors[0], (name, error)
    detail = str(errors[0]["detail"])
    assert detail.startswith("service: no stored telemetry has service.name 'ts-travel-servic'")
    assert "did you mean 'ts-travel-service'" in detail
    assert GATEWAY in detail or "Stored services (" in detail
    assert "list_services" in str(errors[0]["hint"])
    assert empty["traces"] == []
    assert "data_extent" in empty
    # ... and the newest trace it points to is that service's, not another system's.
    assert "the newest trace of ts-travel-service starts at" in str(empty["note"])
    assert str(empty["newest_trace_start"]) < str(obj(empty["window"])["start"])
