"""Issue 17 "Schemas": every tool declares an ``outputSchema`` and its results conform to it.

On ``coremetry serve --demo`` (the real Nezha TrainTicket day, with ``coremetry detect``'s
problems),
through the official ``mcp`` SDK client, every tool is called with arguments that succeed (and
with a small ``limit``, so pages carry a cursor) and with arguments that fail; each
``structuredContent`` is validated (JSON Schema 2020-12) against the tool's ``outputSchema`` as
served by ``tools/list``, and, more narrowly, a success against the result branch and a failure
against the tool-error branch. The budget's minimal object (:class:`~.results.Cut`) is checked
in process. ``outputSchema`` is served from 2025-06-18 only.
"""

import json
from pathlib import Path
from typing import Final

import msgspec
import trio
from conftest import check_emitted
from jsonschema import Draft202012Validator
from mcp import types

from coremetry.mcp import Connection
from coremetry.observability import TOOL_NAMES, TOOLS
from coremetry.observability.budget import CursorState, Shaped, Trimmable, encode_cursor, fit
from coremetry.observability.results import ListServicesResult, output_schema
from coremetry.server import build_mcp_server
from coremetry.store.sqlite import open_sqlite_store

from ._client import mcp_client
from .conftest import DemoServer, coremetry

LIMIT_S: Final = 300.0
TRAVEL: Final = "ts-travel-service"
RESULT_NAMES: Final = {spec.name: spec.output.__name__ for spec in TOOLS}
JsonObject = dict[str, object]


def branch(schema: JsonObject, name: str) -> Draft202012Validator:
    """A validator of one ``$defs`` entry of an output schema (with its references)."""
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]})


def check(schema: JsonObject, result: types.CallToolResult, name: str) -> JsonObject:
    """Validate a result's structuredContent against the whole schema and its branch."""
    content = result.structured_content
    assert isinstance(content, dict), result
    Draft202012Validator(schema).validate(content)
    branch(schema, "ToolError" if result.is_error else RESULT_NAMES[name]).validate(content)
    return content


async def test_every_tool_answers_what_its_output_schema_says(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        # The detector's problems, as `coremetry detect` stores them (as test_problems does).
        await trio.run_process(
            [*coremetry(), "detect", "--range", "24h", "--end", "latest"],
            env=demo_server.env,
            capture_stdout=True,
            capture_stderr=True,
            start_new_session=True,
        )
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            listed = await client.list_tools()
            schemas = {t.name: t.output_schema for t in listed.tools if t.name in TOOL_NAMES}
            assert list(schemas) == list(TOOL_NAMES)
            for name, schema in schemas.items():
                assert isinstance(schema, dict), name
                Draft202012Validator.check_schema(schema)
                assert schema["type"] == "object"

            async def call(name: str, args: JsonObject, *, error: bool = False) -> JsonObject:
                result = await client.call_tool(name, args)
                assert result.is_error is error, (name, args, result.content)
                schema = schemas[name]
                assert isinstance(schema, dict)
                return check(schema, result, name)

            day = {"range": "24h"}
            services = await call("list_services", {**day, "limit": 2})
            assert services["cursor"]
            await call("get_service", {**day, "service": TRAVEL})
            await call("get_service_map", {**day, "limit": 3})
            traces = await call("search_traces", {**day, "service": TRAVEL, "limit": 3})
            found = traces["traces"]
            assert isinstance(found, list)
            assert found
            trace_id = found[0]["trace_id"]
            page = await call("get_trace", {"trace_id": trace_id, "limit": 2})
            await call("get_trace", {"trace_id": trace_id, "limit": 2, "cursor": page["cursor"]})
            await call("search_logs", {**day, "service": TRAVEL, "min_severity": "ERROR"})
            await call("search_logs", {"trace_id": trace_id})
            await call("list_metrics", {**day, "limit": 5})
            metric = {"name": "http.server.request.duration", "service": TRAVEL, **day}
            await call("query_metric", {**metric, "labels": [{"key": "quantile", "value": "0.99"}]})
            await call("query_metric", {**metric, "step": "1m", "limit": 1})
            await call("list_deploys", {"range": "7d"})
            problems = await call("list_problems", {"range": "7d"})
            rows = problems["problems"]
            assert isinstance(rows, list)
            assert rows, "the demo carries detected problems"
            problem = await call("get_problem", {"problem_id": rows[0]["problem_id"]})
            origin = problem["origin"]
            await call("get_problem", {"problem_id": rows[0]["problem_id"], "service": str(origin)})
            await call("list_anomalies", {"range": "7d", "limit": 3})
            # An empty window: note and data_extent.
            await call("search_traces", {"start": "2001-01-01T00:00:00Z", "range": "1h"})
            # Failures: the tool-error object, one of the declared shapes.
            await call("get_trace", {"trace_id": "0" * 31 + "1"}, error=True)
            await call("query_metric", {"name": "no.such.metric", **day}, error=True)
            await call("get_service", {"service": "no-such-service", **day}, error=True)
            await call("compare_deploys", {"service": TRAVEL, "to_version": "v0"}, error=True)
            await call("get_problem", {"problem_id": "no-such-problem"}, error=True)
            await call("list_services", {"limit": 0}, error=True)


def test_the_budget_minimal_object_is_a_declared_shape() -> None:
    schema = output_schema(ListServicesResult)
    rows = [{"service": f"s{i}", "versions": ["v" * 900] * 40} for i in range(3)]
    cursor = encode_cursor(CursorState(tool="list_services", query="q", offset=1))
    body: JsonObject = {"window": {"start": "a", "end": "b"}, "services": rows, "truncated": False}
    cut = fit(Shaped(body, [Trimmable(("services",), lambda kept: {"cursor": cursor})]), 1024)
    assert cut["truncated"] is True
    Draft202012Validator(schema).validate(cut)


async def test_output_schemas_are_served_from_2025_06_18_only(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        server = build_mcp_server(store=store, page_size=1000)
        for revision, served in (("2025-03-26", False), ("2025-06-18", True), ("2025-11-25", True)):
            request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            reply = await server.handle(
                msgspec.json.encode(request), Connection(protocol_version=revision)
            )
            assert reply is not None
            message = json.loads(reply.body)
            check_emitted(message, revision, "tools/list")
            tools = [t for t in message["result"]["tools"] if t["name"] in TOOL_NAMES]
            assert len(tools) == len(TOOL_NAMES)
            assert all(("outputSchema" in t) is served for t in tools), revision
