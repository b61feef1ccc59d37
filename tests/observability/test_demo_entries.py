"""Resources, templates, prompts, completion and roles on ``coremetry serve --demo``.

Every entry is read-only with the viewer floor: each role (a service token made with
``coremetry token create``) sees and may use all of them. Prompts embed the data they are about;
a missing required argument is ``-32602`` naming it. Completion suggests real service names,
trace ids and metric names from the demo.
"""

import json
import re
from typing import Final

import pytest
import trio
from mcp import MCPError, types

from ._client import embedded_json, mcp_client, prompt_text, structured
from .conftest import DemoServer

LIMIT_S: Final = 300.0
TRAVEL: Final = "ts-travel-service"
GATEWAY: Final = "ts-gateway-service"
TOOLS: Final = {
    "list_services",
    "get_service",
    "get_service_map",
    "search_traces",
    "get_trace",
    "search_logs",
    "list_metrics",
    "query_metric",
    "list_deploys",
    "compare_deploys",
    "list_problems",
    "get_problem",
    "list_anomalies",
}
TEMPLATES: Final = {
    "coremetry://service/{name}",
    "coremetry://trace/{trace_id}",
    "coremetry://logs/{service}",
    "coremetry://metric/{name}",
    "coremetry://problem/{id}",
}
PROMPTS: Final = {
    "explain_trace",
    "suggest_runbook",
    "compare_deploys",
    "investigate_service",
    "triage_brief",
}
TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")


def json_text(read: types.ReadResourceResult) -> dict[str, object]:
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.mime_type == "application/json"
    decoded = json.loads(contents.text)
    assert isinstance(decoded, dict)
    return decoded


@pytest.mark.parametrize("role", ["viewer", "editor", "admin"])
async def test_every_role_sees_and_uses_every_entry(demo_server: DemoServer, role: str) -> None:
    token = demo_server.token(role) if role != "admin" else demo_server.admin_token
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, token) as client:
            tools = (await client.list_tools()).tools
            resources = (await client.list_resources()).resources
            templates = (await client.list_resource_templates()).resource_templates
            prompts = (await client.list_prompts()).prompts
            listed = await client.call_tool("list_services", {"range": "24h", "limit": 3})
            problems = json_text(await client.read_resource("coremetry://problems"))
            brief = await client.get_prompt("triage_brief", {"range": "1h"})
    by_name = {t.name: t for t in tools}
    assert set(by_name) >= TOOLS
    for name in TOOLS:
        tool = by_name[name]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.description is not None
        assert len(tool.description.encode()) <= 1500
    assert {str(r.uri) for r in resources} >= {"coremetry://services", "coremetry://problems"}
    assert {t.uri_template for t in templates} >= TEMPLATES
    assert {p.name for p in prompts} >= PROMPTS
    assert structured(listed)["services"]
    # Empty with a note until `coremetry detect` has run (tests/observability/test_problems.py).
    assert isinstance(problems["problems"], list)
    assert problems["problems"] or "No problem detection has run" in str(problems["note"])
    assert prompt_text(brief)


async def test_resources_hold_the_tools_views(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            services = json_text(await client.read_resource("coremetry://services"))
            gateway = json_text(await client.read_resource(f"coremetry://service/{GATEWAY}"))
            logs = json_text(await client.read_resource(f"coremetry://logs/{TRAVEL}"))
            metric = json_text(
                await client.read_resource("coremetry://metric/http.server.request.duration")
            )
            records = logs["records"]
            assert isinstance(records, list)
            trace_id = next(
                str(r["trace_id"]) for r in records if isinstance(r, dict) and "trace_id" in r
            )
            trace = json_text(await client.read_resource(f"coremetry://trace/{trace_id}"))
            with pytest.raises(MCPError) as missing:
                await client.read_resource("coremetry://problem/prb_0000000000000000")
            with pytest.raises(MCPError) as unknown_service:
                await client.read_resource("coremetry://service/ts-nope-service")
    # The anchored window (24 h up to the newest record) holds the whole Nezha day.
    rows = services["services"]
    assert isinstance(rows, list)
    assert {GATEWAY, TRAVEL} <= {r["service"] for r in rows if isinstance(r, dict)}
    origin = gateway["likely_origin"]
    assert isinstance(origin, dict)
    assert origin["service"] == TRAVEL
    assert all(isinstance(r, dict) and r["service"] == TRAVEL for r in records)
    assert trace["trace_id"] == trace_id
    trace_services = trace["services"]
    assert isinstance(trace_services, list)
    assert TRAVEL in {s["service"] for s in trace_services if isinstance(s, dict)}
    series = metric["series"]
    assert isinstance(series, list)
    assert series
    assert metric["unit"] == "s"
    assert missing.value.code == -32002
    assert unknown_service.value.code == -32002


async def test_prompts_embed_the_data_and_name_missing_arguments(
    demo_server: DemoServer,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            with pytest.raises(MCPError) as no_trace:
                await client.get_prompt("explain_trace", {})
            with pytest.raises(MCPError) as no_subject:
                await client.get_prompt("suggest_runbook", {})
            no_versions = await client.get_prompt("compare_deploys", {"service": TRAVEL})
            investigate = await client.get_prompt("investigate_service", {"service": GATEWAY})
            runbook = await client.get_prompt("suggest_runbook", {"service": TRAVEL})
            slow = structured(
                await client.call_tool(
                    "search_traces",
                    {"service": TRAVEL, "min_duration_ms": 2000, "range": "24h", "limit": 1},
                )
            )
            traces = slow["traces"]
            assert isinstance(traces, list)
            trace_id = str(traces[0]["trace_id"])
            explained = await client.get_prompt("explain_trace", {"trace_id": trace_id})
    assert no_trace.value.code == -32602
    assert "trace_id" in no_trace.value.message
    assert no_subject.value.code == -32602
    assert "problem_id or service" in no_subject.value.message
    # No shipped dataset carries service.version: the prompt says there is nothing to compare
    # (and why) instead of failing, with the versions seen (none) as its data.
    no_versions_text = prompt_text(no_versions)
    assert "no version change to compare" in no_versions_text
    assert "0 version(s)" in no_versions_text
    assert embedded_json(no_versions_text)["deploys"] == []
    data = embedded_json(prompt_text(investigate))
    overview = data["service"]
    assert isinstance(overview, dict)
    origin = overview["likely_origin"]
    assert isinstance(origin, dict)
    assert origin["service"] == TRAVEL
    assert data["slow_traces"]
    runbook_text = prompt_text(runbook)
    assert "runbook" in runbook_text.split("Data (JSON)")[0]
    assert embedded_json(runbook_text)["error_logs"]
    explained_data = embedded_json(prompt_text(explained))
    assert explained_data["trace_id"] == trace_id
    assert explained_data["dominant_span"]


async def test_completion_suggests_real_names(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            services = await client.complete(
                types.PromptReference(name="investigate_service"),
                {"name": "service", "value": "ts-trav"},
            )
            traces = await client.complete(
                types.PromptReference(name="explain_trace"),
                {"name": "trace_id", "value": ""},
            )
            by_template = await client.complete(
                types.ResourceTemplateReference(uri="coremetry://service/{name}"),
                {"name": "name", "value": "gate"},
            )
            metrics = await client.complete(
                types.ResourceTemplateReference(uri="coremetry://metric/{name}"),
                {"name": "name", "value": "http.server"},
            )
    assert services.completion.values == [TRAVEL, "ts-travel2-service"]
    assert traces.completion.values
    assert all(TRACE_ID.fullmatch(v) for v in traces.completion.values)
    assert by_template.completion.values == [GATEWAY]
    assert "http.server.request.duration" in metrics.completion.values
    assert all(v.startswith("http.server") for v in metrics.completion.values)
