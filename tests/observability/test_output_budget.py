"""The output budget end to end: the widest arguments never get past 16 KiB, and cut lists page.

On ``coremetry serve --demo`` (default ``mcp.output_budget_bytes``, 16 KiB), every tool, resource
and prompt is called with the widest arguments it accepts (400-day windows, the largest limits,
the real 957-span SmartThings trace): each answer's JSON fits the budget, and where the data
does not fit, the result says ``truncated`` and its ``cursor`` pages through the rest — no
record twice, none lost.
"""

import json
from typing import Final

import trio
from mcp import types

from coremetry.store import normalize_trace_id

from ._client import mcp_client, prompt_text, structured
from ._support import SMARTTHINGS
from .conftest import DemoServer

LIMIT_S: Final = 600.0
BUDGET: Final = 16 * 1024
WIDE: Final = "400d"
TRAVEL: Final = "ts-travel-service"
GATEWAY: Final = "ts-gateway-service"
METRIC: Final = "http.server.request.duration"


def smartthings_trace_id() -> str:
    spans = json.loads(SMARTTHINGS.read_text())
    return normalize_trace_id(str(spans[0]["traceId"]))


def text_of(result: types.CallToolResult) -> str:
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    return item.text


WIDEST: Final[list[tuple[str, dict[str, object]]]] = [
    ("list_services", {"range": WIDE, "limit": 500}),
    ("get_service", {"service": GATEWAY, "range": WIDE}),
    ("get_service", {"service": TRAVEL, "range": WIDE}),
    ("get_service_map", {"range": WIDE, "limit": 1000}),
    ("search_traces", {"range": WIDE, "limit": 100}),
    ("get_trace", {"trace_id": smartthings_trace_id(), "limit": 1000}),
    ("search_logs", {"range": WIDE, "limit": 200}),
    ("list_metrics", {"range": WIDE, "limit": 1000}),
    ("query_metric", {"name": METRIC, "range": "24h", "step": "2m", "limit": 100}),
    ("query_metric", {"name": METRIC, "range": WIDE, "limit": 100, "group_by": []}),
    ("list_deploys", {"range": WIDE, "limit": 500}),
    ("compare_deploys", {"service": TRAVEL, "range": WIDE}),
    ("list_problems", {"range": WIDE, "limit": 200}),
    ("get_problem", {"problem_id": "p-1"}),
    ("list_anomalies", {"range": WIDE, "limit": 200}),
]
"""Every tool with the widest arguments it accepts (a tool missing here fails the test)."""

MUST_TRUNCATE: Final = {"search_traces", "get_trace", "search_logs", "query_metric"}
"""Tools whose widest answer on the demo data cannot fit in 16 KiB."""


async def test_every_tool_stays_within_the_budget(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == {name for name, _args in WIDEST}
            truncated: set[str] = set()
            for name, arguments in WIDEST:
                result = await client.call_tool(name, arguments)
                text = text_of(result)
                assert len(text.encode()) <= BUDGET, (name, len(text.encode()))
                if result.is_error:
                    continue
                body = structured(result)
                if body.get("truncated") is True:
                    truncated.add(name)
                    # A cut list either continues (cursor) or says how much it left out.
                    omitted = body.get("omitted")
                    assert isinstance(body.get("cursor"), str) or (
                        isinstance(omitted, dict) and omitted
                    ), name
    assert truncated >= MUST_TRUNCATE


async def test_a_thousand_span_trace_pages_through_every_span_once(
    demo_server: DemoServer,
) -> None:
    trace_id = smartthings_trace_id()
    seen: list[str] = []
    depths: dict[str, int] = {}
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            arguments: dict[str, object] = {"trace_id": trace_id, "limit": 1000}
            pages = 0
            first_cursor: object = None
            while True:
                result = await client.call_tool("get_trace", arguments)
                assert len(text_of(result).encode()) <= BUDGET
                page = structured(result)
                pages += 1
                assert page["span_count"] == 957
                assert page["spans_offset"] == len(seen)
                spans = page["spans"]
                assert isinstance(spans, list)
                assert spans, "every page makes progress"
                for span in spans:
                    assert isinstance(span, dict)
                    seen.append(str(span["span_id"]))
                    depths[str(span["span_id"])] = int(span["depth"])
                    parent = span.get("parent_span_id")
                    if parent is not None and not span.get("orphan"):
                        assert depths[str(parent)] == int(span["depth"]) - 1, "parents first"
                if page["truncated"] is False:
                    assert "cursor" not in page
                    break
                first_cursor = first_cursor or page["cursor"]
                arguments = {"trace_id": trace_id, "limit": 1000, "cursor": page["cursor"]}
            # A cursor used with other arguments is refused, never served as another page.
            other = await client.call_tool(
                "get_trace", {"trace_id": trace_id, "limit": 999, "cursor": first_cursor}
            )
    assert len(seen) == len(set(seen)) == 957
    assert pages > 3
    assert other.is_error is True
    assert json.loads(text_of(other))["error"] == "bad_args"


async def test_search_logs_pages_through_every_record(demo_server: DemoServer) -> None:
    records: list[tuple[object, ...]] = []
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            arguments: dict[str, object] = {"range": WIDE, "limit": 200}
            while True:
                result = await client.call_tool("search_logs", arguments)
                assert len(text_of(result).encode()) <= BUDGET
                page = structured(result)
                rows = page["records"]
                assert isinstance(rows, list)
                assert rows
                for row in rows:
                    assert isinstance(row, dict)
                    records.append((row["time"], row["service"], row.get("span_id"), row["body"]))
                if page["truncated"] is False:
                    break
                arguments = {"range": WIDE, "limit": 200, "cursor": page["cursor"]}
    # The demo's 2,169 Nezha log records (306 + 694 + 1,169 by minute file), each once.
    assert len(records) == 2169
    assert len(set(records)) == len(records)
    times = [str(r[0]) for r in records]
    assert times == sorted(times, reverse=True), "newest first across pages"


async def test_resources_and_prompts_stay_within_the_budget(demo_server: DemoServer) -> None:
    trace_id = smartthings_trace_id()
    uris = [
        "coremetry://services",
        "coremetry://problems",
        f"coremetry://service/{GATEWAY}",
        f"coremetry://trace/{trace_id}",
        f"coremetry://logs/{TRAVEL}",
        f"coremetry://metric/{METRIC}",
    ]
    prompts: list[tuple[str, dict[str, str]]] = [
        ("explain_trace", {"trace_id": trace_id}),
        ("suggest_runbook", {"service": TRAVEL}),
        ("investigate_service", {"service": GATEWAY, "range": "400d"}),
        ("triage_brief", {"range": "400d"}),
    ]
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            for uri in uris:
                read = await client.read_resource(uri)
                (contents,) = read.contents
                assert isinstance(contents, types.TextResourceContents)
                assert contents.mime_type == "application/json"
                assert len(contents.text.encode()) <= BUDGET, uri
                json.loads(contents.text)
            truncated_trace = json.loads(
                next(
                    c.text
                    for c in (await client.read_resource(uris[3])).contents
                    if isinstance(c, types.TextResourceContents)
                )
            )
            for name, arguments in prompts:
                text = prompt_text(await client.get_prompt(name, arguments))
                assert len(text.encode()) <= BUDGET, name
    assert truncated_trace["truncated"] is True
    assert truncated_trace["span_count"] == 957
