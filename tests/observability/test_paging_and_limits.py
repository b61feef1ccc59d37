"""What a hostile fresh user tried on ``coremetry serve --demo``, end to end with the SDK client.

- a page always makes progress: a metric series too long for the budget comes back shrunk (its
  points downsampled, said in ``points_note``) instead of an empty page with the same cursor;
- ``query_metric`` buckets start at multiples of the step in unix time, a step giving too many
  buckets is widened (and said), an unknown ``group_by`` key is ``bad_args`` naming the keys;
- numbers past any sane value and times outside 64-bit nanoseconds are ``bad_args`` naming the
  argument (never ``internal`` / REST 500); a tampered cursor is ``bad_args`` on ``cursor``;
- ``get_trace`` says when it lists only part of the critical path, and per-service self time
  never exceeds the trace's duration; ``get_service_map`` has a total;
- a whole ``prompts/get`` result (the text as the JSON string it travels as) fits the budget.
"""

import base64
import json
from datetime import datetime
from typing import Final

import httpx
import pytest
import trio
from mcp import types

from ._client import failure, mcp_client, structured
from .conftest import DemoServer
from .test_output_budget import smartthings_trace_id, text_of

LIMIT_S: Final = 600.0
BUDGET: Final = 16 * 1024
TRAVEL: Final = "ts-travel-service"
METRIC: Final = "http.server.request.duration"
P99_OF_TRAVEL: Final[dict[str, object]] = {
    "name": METRIC,
    "service": TRAVEL,
    "labels": {"quantile": "0.99"},
}


def objects(value: object) -> list[dict[str, object]]:
    """A JSON list of objects from a result."""
    assert isinstance(value, list)
    assert all(isinstance(item, dict) for item in value)
    return value


def unix_s(text: object) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


async def test_a_series_too_long_for_the_budget_is_downsampled_not_dropped(
    demo_server: DemoServer,
) -> None:
    # The finding, as reported: 12 h at 1 m is one series of ~740 buckets, ~28 KB of points.
    arguments = {**P99_OF_TRAVEL, "step": "1m", "range": "12h"}
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            result = await client.call_tool("query_metric", arguments)
    assert len(text_of(result).encode()) <= BUDGET
    body = structured(result)
    (series,) = objects(body["series"])
    points = series["points"]
    assert isinstance(points, list)
    assert 0 < int(str(series["points_shown"])) == len(points) < int(str(series["point_count"]))
    assert 'pass step="' in str(series["points_note"])
    assert body["truncated"] is True
    assert "cursor" not in body, "one series: nothing to continue to"
    # Statistics still cover every bucket: the max is among the values, whatever was sampled.
    assert max(float(v) for _t, v in points if v is not None) <= float(str(series["max"]))


async def test_paging_series_always_moves_on(demo_server: DemoServer) -> None:
    base: dict[str, object] = {
        "name": METRIC,
        "range": "12h",
        "step": "1m",
        "group_by": ["service.name"],
        "labels": {"quantile": "0.99"},
        "limit": 100,
    }
    seen: list[str] = []
    cursors: list[str] = []
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            arguments = dict(base)
            while True:
                result = await client.call_tool("query_metric", arguments)
                assert len(text_of(result).encode()) <= BUDGET
                page = structured(result)
                rows = objects(page["series"])
                assert rows, "every page shows at least one series"
                seen.extend(json.dumps(r["labels"], sort_keys=True) for r in rows)
                cursor = page.get("cursor")
                if cursor is None:
                    break
                assert isinstance(cursor, str)
                assert cursor not in cursors, "a cursor is never handed out twice"
                assert cursor != arguments.get("cursor")
                cursors.append(cursor)
                arguments = {**base, "cursor": cursor}
            listed = await client.call_tool("list_metrics", {"range": "12h", "prefix": METRIC})
    assert len(seen) == len(set(seen))
    metric = next(m for m in objects(structured(listed)["metrics"]) if m["name"] == METRIC)
    assert len(seen) <= int(str(metric["series_count"]))
    assert len(cursors) >= 1, "the series do not fit one page"


async def test_buckets_line_up_on_the_step_and_too_fine_steps_are_widened(
    demo_server: DemoServer,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            auto = structured(
                await client.call_tool("query_metric", {**P99_OF_TRAVEL, "range": "24h"})
            )
            fine = structured(
                await client.call_tool(
                    "query_metric", {**P99_OF_TRAVEL, "range": "24h", "step": "1m"}
                )
            )
    for body in (auto, fine):
        step = float(str(body["step_s"]))
        window = body["window"]
        assert isinstance(window, dict)
        assert unix_s(window["start"]) % step == 0
        for series in objects(body["series"]):
            points = series["points"]
            assert isinstance(points, list)
            for at, _value in points:
                assert unix_s(at) % step == 0, (at, step)
    # 24 h at 1 m is 1,441 buckets (over the 1,000 allowed): the step is widened and said.
    assert fine["step_s"] == 120.0
    assert "step: '1m' gives 1441 buckets" in str(fine["note"])
    assert 'step "2m" was used instead' in str(fine["note"])


async def test_an_unknown_group_by_key_is_refused_with_the_known_keys(
    demo_server: DemoServer,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            result = await client.call_tool(
                "query_metric", {"name": METRIC, "range": "24h", "group_by": ["pod"]}
            )
    error = failure(result)
    assert error["error"] == "bad_args"
    detail = str(error["detail"])
    assert detail.startswith("group_by: 'pod' is not a label key of http.server.request.duration")
    assert "its label keys: quantile, service.name" in detail


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("search_traces", {"min_duration_ms": 1e308}, "min_duration_ms"),
        ("search_traces", {"min_duration_ms": 9.3e12}, "min_duration_ms"),
        ("search_traces", {"min_duration_ms": 1e20}, "min_duration_ms"),
        ("search_traces", {"start": "9999-01-01T00:00:00Z"}, "start"),
        ("list_services", {"end": "0001-01-01T00:00:00Z", "range": "1h"}, "end"),
        ("search_logs", {"start": "1960-01-01T00:00:00Z", "end": "1961-01-01T00:00:00Z"}, "start"),
        ("query_metric", {"name": METRIC, "step": "9999999w"}, "step"),
    ],
)
async def test_numbers_and_times_past_any_sane_value_are_bad_args(
    demo_server: DemoServer, tool: str, arguments: dict[str, object], field: str
) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            result = await client.call_tool(tool, arguments)
        async with httpx.AsyncClient(base_url=demo_server.base) as http:
            rest = await http.post(
                f"/api/tools/{tool}",
                json=arguments,
                headers={"authorization": f"Bearer {demo_server.admin_token}"},
            )
    error = failure(result)
    assert error["error"] == "bad_args"
    assert field in str(error["detail"]).split(":", 1)[0] or f"$.{field}" in str(error["detail"])
    assert rest.status_code == 400, rest.text
    assert rest.json()["error"] == "bad_args"


def tampered(cursor: str, **changes: object) -> str:
    raw = cursor.removeprefix("cm1.")
    state = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    state.update(changes)
    encoded = base64.urlsafe_b64encode(json.dumps(state).encode()).decode().rstrip("=")
    return "cm1." + encoded


async def test_a_tampered_cursor_is_bad_args_on_cursor(demo_server: DemoServer) -> None:
    arguments: dict[str, object] = {"range": "24h", "limit": 5}
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            first = structured(await client.call_tool("search_traces", arguments))
            cursor = str(first["cursor"])
            results = [
                await client.call_tool(
                    "search_traces", {**arguments, "cursor": tampered(cursor, **change)}
                )
                for change in (
                    {"offset": 10**9},
                    {"offset": -1},
                    {"start_unix_nano": 2**64},
                    {"end_unix_nano": 1},
                    {"store_cursor": "garbage"},
                )
            ]
    for result in results:
        error = failure(result)
        assert error["error"] == "bad_args"
        assert str(error["detail"]).startswith("cursor:"), error["detail"]


async def test_get_trace_says_what_it_leaves_out_and_self_time_fits_the_trace(
    demo_server: DemoServer,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            body = structured(
                await client.call_tool(
                    "get_trace", {"trace_id": smartthings_trace_id(), "limit": 1}
                )
            )
    path = body["critical_path"]
    assert isinstance(path, list)
    total = int(str(body["critical_path_span_count"]))
    assert total > len(path), "the SmartThings trace's path is longer than the list"
    assert body["critical_path_omitted"] == total - len(path)
    notes = body["notes"]
    assert isinstance(notes, list)
    assert any("critical_path_omitted" in str(note) for note in notes)
    duration = float(str(body["duration_ms"]))
    for row in objects(body["services"]):
        assert 0 <= float(str(row["self_time_ms"])) <= duration, row


async def test_the_service_map_has_a_total_and_pages_to_it(demo_server: DemoServer) -> None:
    edges: list[tuple[str, str]] = []
    arguments: dict[str, object] = {"range": "24h", "limit": 25}
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            first = structured(await client.call_tool("get_service_map", arguments))
            page = first
            while True:
                edges.extend((str(e["caller"]), str(e["callee"])) for e in objects(page["edges"]))
                if "cursor" not in page:
                    break
                page = structured(
                    await client.call_tool(
                        "get_service_map", {**arguments, "cursor": page["cursor"]}
                    )
                )
    assert first["total"] == len(edges) == len(set(edges))
    assert len(edges) > 25


async def test_whole_prompt_results_fit_the_budget(demo_server: DemoServer) -> None:
    prompts: list[tuple[str, dict[str, str]]] = [
        ("explain_trace", {"trace_id": smartthings_trace_id()}),
        ("suggest_runbook", {"service": TRAVEL}),
        ("investigate_service", {"service": "ts-gateway-service", "range": "400d"}),
        ("triage_brief", {"range": "400d"}),
        ("compare_deploys", {"service": TRAVEL}),
    ]
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            results = [await client.get_prompt(name, arguments) for name, arguments in prompts]
    for (name, _arguments), result in zip(prompts, results, strict=True):
        assert isinstance(result, types.GetPromptResult)
        sent = json.dumps(
            result.model_dump(mode="json", by_alias=True, exclude_none=True),
            separators=(",", ":"),
            ensure_ascii=False,
        )
        assert len(sent.encode()) <= BUDGET, (name, len(sent.encode()))
