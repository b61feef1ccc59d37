"""Telemetry sent over OTLP/HTTP, then investigated with the SDK client, on one real server.

Each test runs :func:`coremetry.server.serve` (hypercorn, real security, the embedded store on a
fresh data dir, the production registry over it), posts OTLP JSON to ``/v1/traces``,
``/v1/logs`` and ``/v1/metrics`` with httpx, and calls the tools and resources with the official
``mcp`` SDK client (every message validated against the MCP schema):

- a span name of 30,000 characters is cut with a marker, and neither ``search_traces`` nor
  ``get_trace`` stalls on it (every page shows something, no cursor comes back twice);
- one span dated in the future (stored before ingest refused such records, or inside the
  tolerance) does not drag the resources' "last 24 h of data" window past now;
- each windowed tool's schema states the default window the tool then uses;
- ``list_deploys`` pages with a cursor.
"""

import json
import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import trio
from mcp import types

from coremetry.config import load_config
from coremetry.server import build_mcp_server, open_security, serve
from coremetry.store import Span, TelemetryBatch, TelemetryStore
from coremetry.store.open import open_telemetry_store

from ._client import mcp_client, structured

LIMIT_S: Final = 120.0
BUDGET: Final = 16 * 1024
S: Final = 1_000_000_000
LONG_NAME: Final = "GET /search?q=" + "q" * 30_000


@dataclass
class Live:
    base: str
    token: str
    store: TelemetryStore

    @property
    def mcp_url(self) -> str:
        return self.base + "/api/mcp"


@asynccontextmanager
async def live_server(tmp_path: Path) -> AsyncIterator[Live]:
    """``serve`` with real security, the embedded store and the tools over it."""
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 2.0},
            "data_dir": str(tmp_path / "data"),
            "store": {"retention_days": 0},
            "rate_limit": {"per_second": 1000.0, "burst": 1000},
            "detection": {"enabled": False},
        },
    )
    security = open_security(config)
    try:
        token = security.store.create_token("live-admin", "admin", None)[0]
        async with open_telemetry_store(config) as store, trio.open_nursery() as nursery:
            stop = trio.Event()
            base: str = await nursery.start(
                partial(
                    serve,
                    config,
                    build_mcp_server(store=store),
                    announce=False,
                    shutdown=stop,
                    security=security,
                    store=store,
                )
            )
            try:
                yield Live(base, token, store)
            finally:
                stop.set()
    finally:
        security.close()


def span_json(
    trace: int, span: int, name: str, start: int, end: int, parent: int | None = None
) -> dict[str, object]:
    row: dict[str, object] = {
        "traceId": f"{trace:032x}",
        "spanId": f"{span:016x}",
        "name": name,
        "kind": 2,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
    }
    if parent is not None:
        row["parentSpanId"] = f"{parent:016x}"
    return row


def resource(service: str, version: str | None = None) -> dict[str, object]:
    attributes = [{"key": "service.name", "value": {"stringValue": service}}]
    if version is not None:
        attributes.append({"key": "service.version", "value": {"stringValue": version}})
    return {"attributes": attributes}


def traces_body(groups: Sequence[tuple[dict[str, object], list[dict[str, object]]]]) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {"resource": res, "scopeSpans": [{"spans": spans}]} for res, spans in groups
            ]
        }
    ).encode()


async def post(live: Live, path: str, body: bytes) -> None:
    async with httpx.AsyncClient(base_url=live.base) as http:
        response = await http.post(
            path,
            content=body,
            headers={"authorization": f"Bearer {live.token}", "content-type": "application/json"},
        )
    assert response.status_code == 200, response.text
    assert response.json() == {}, "everything accepted"


def objects(value: object) -> list[dict[str, object]]:
    assert isinstance(value, list)
    assert all(isinstance(item, dict) for item in value)
    return value


def text_size(result: types.CallToolResult) -> int:
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    return len(item.text.encode())


async def test_a_huge_span_name_is_cut_and_never_stalls_paging(tmp_path: Path) -> None:
    now = time.time_ns()
    big_trace = [span_json(1, 1, "GET /search", now - 60 * S, now - 30 * S)]
    for i in range(2, 26):
        name = LONG_NAME if i == 7 else f"query shard {i}"
        start = now - 60 * S + i * S
        big_trace.append(span_json(1, i, name, start, start + S // 2, parent=1))
    singles = [
        span_json(
            t, 100 + t, LONG_NAME if t == 4 else f"GET /item/{t}", now - t * S, now - t * S + S
        )
        for t in range(2, 8)
    ]
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            await post(live, "/v1/traces", traces_body([(resource("search"), big_trace + singles)]))
            async with mcp_client(live.mcp_url, live.token) as client:
                found: list[dict[str, object]] = []
                arguments: dict[str, object] = {"service": "search", "range": "15m", "limit": 100}
                cursors: set[str] = set()
                while True:
                    result = await client.call_tool("search_traces", arguments)
                    assert text_size(result) <= BUDGET
                    page = structured(result)
                    rows = objects(page["traces"])
                    assert rows, "every page shows at least one trace"
                    found.extend(rows)
                    if "cursor" not in page:
                        break
                    cursor = str(page["cursor"])
                    assert cursor not in cursors
                    cursors.add(cursor)
                    arguments = {
                        "service": "search",
                        "range": "15m",
                        "limit": 100,
                        "cursor": cursor,
                    }
                spans: list[dict[str, object]] = []
                trace_arguments: dict[str, object] = {"trace_id": f"{1:032x}", "limit": 1000}
                while True:
                    result = await client.call_tool("get_trace", trace_arguments)
                    assert text_size(result) <= BUDGET
                    page = structured(result)
                    rows = objects(page["spans"])
                    assert rows, "every page shows at least one span"
                    spans.extend(rows)
                    if "cursor" not in page:
                        break
                    trace_arguments = {**trace_arguments, "cursor": page["cursor"]}
    assert sorted(str(t["trace_id"]) for t in found) == sorted(
        [f"{1:032x}", *(f"{t:032x}" for t in range(2, 8))]
    ), "every trace of the window, once"
    long_root = next(t for t in found if str(t["root_name"]).startswith("GET /search?q="))
    assert str(long_root["root_name"]).endswith(" bytes)")
    assert len(str(long_root["root_name"])) <= 256
    assert sorted(int(str(s["span_id"]), 16) for s in spans) == list(range(1, 26))
    long_span = next(s for s in spans if str(s["name"]).startswith("GET /search?q="))
    name = str(long_span["name"])
    kept = name.split("…(+")[0]
    assert name.endswith(f"…(+{len(LONG_NAME.encode()) - len(kept.encode())} bytes)"), name[-40:]
    assert LONG_NAME.startswith(kept)


def at_most_now(text: object, now_ns: int) -> bool:
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return moment.timestamp() * S <= now_ns + S


async def test_a_future_span_does_not_take_over_the_resource_windows(tmp_path: Path) -> None:
    now = time.time_ns()
    spans = [span_json(9, 1, "GET /now", now - 120 * S, now - 119 * S)]
    future = Span(
        trace_id=f"{10:032x}",
        span_id=f"{1:016x}",
        service_name="clock-ahead",
        name="GET /tomorrow",
        start_time_unix_nano=now + 2 * 86_400 * S,
        end_time_unix_nano=now + 2 * 86_400 * S + S,
    )
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            await post(live, "/v1/traces", traces_body([(resource("present"), spans)]))
            await live.store.write(TelemetryBatch(spans=[future]))
            async with mcp_client(live.mcp_url, live.token) as client:
                read = await client.read_resource("coremetry://services")
                prompt = await client.get_prompt("triage_brief", {})
            checked = time.time_ns()
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    body = json.loads(contents.text)
    assert at_most_now(body["window"]["end"], checked), body["window"]
    assert [row["service"] for row in body["services"]] == ["present"]
    message = prompt.messages[0].content
    assert isinstance(message, types.TextContent)
    data = json.loads(
        message.text[message.text.index("```json\n") + 8 : message.text.rindex("\n```")]
    )
    assert at_most_now(data["window"]["end"], checked)


_DEFAULT: Final = re.compile(r'Default "([0-9]+)([smhdw])"\.')
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def seconds_between(window: object) -> float:
    assert isinstance(window, dict)
    start = datetime.fromisoformat(str(window["start"]).replace("Z", "+00:00"))
    end = datetime.fromisoformat(str(window["end"]).replace("Z", "+00:00"))
    return (end - start).total_seconds()


async def test_each_schema_states_the_default_window_the_tool_uses(tmp_path: Path) -> None:
    now = time.time_ns()
    groups = [
        (
            resource("cart", "1.0"),
            [span_json(20, 1, "POST /cart", now - 3 * 3600 * S, now - 3 * 3600 * S + S)],
        ),
        (resource("cart", "2.0"), [span_json(21, 1, "POST /cart", now - 600 * S, now - 599 * S)]),
    ]
    metric = {
        "resourceMetrics": [
            {
                "resource": resource("cart"),
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "cart.queue.depth",
                                "gauge": {
                                    "dataPoints": [
                                        {"timeUnixNano": str(now - 60 * S), "asInt": "3"}
                                    ]
                                },
                            }
                        ]
                    }
                ],
            }
        ]
    }
    minimal: dict[str, dict[str, object]] = {
        "get_service": {"service": "cart"},
        "compare_deploys": {"service": "cart"},
        "query_metric": {"name": "cart.queue.depth"},
    }
    checked: list[str] = []
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            await post(live, "/v1/traces", traces_body(groups))
            await post(live, "/v1/metrics", json.dumps(metric).encode())
            async with mcp_client(live.mcp_url, live.token) as client:
                for tool in (await client.list_tools()).tools:
                    schema = tool.input_schema["properties"].get("range")
                    if schema is None:
                        continue
                    match = _DEFAULT.search(str(schema["description"]))
                    assert match, (tool.name, schema)
                    stated = int(match.group(1)) * _UNIT_S[match.group(2)]
                    assert f"default {match.group(1)}{match.group(2)}" in (tool.description or "")
                    body = structured(await client.call_tool(tool.name, minimal.get(tool.name, {})))
                    length = seconds_between(body["window"])
                    if tool.name == "query_metric":
                        # The start moves back to a bucket edge: at most one step more.
                        assert stated <= length < stated + float(str(body["step_s"]))
                    else:
                        assert length == stated, (tool.name, length, stated)
                    checked.append(tool.name)
    assert {"list_deploys", "compare_deploys", "list_problems", "list_anomalies"} <= set(checked)
    assert len(checked) == 11


async def test_list_deploys_pages_with_a_cursor(tmp_path: Path) -> None:
    now = time.time_ns()
    groups = [
        (
            resource(service, version),
            [span_json(30 + i, 1, "op", now - (9 - i) * 60 * S, now - (9 - i) * 60 * S + S)],
        )
        for i, (service, version) in enumerate(
            [("cart", "1.0"), ("cart", "2.0"), ("pay", "1.0"), ("pay", "2.0")]
        )
    ]
    seen: list[tuple[str, str]] = []
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            await post(live, "/v1/traces", traces_body(groups))
            async with mcp_client(live.mcp_url, live.token) as client:
                arguments: dict[str, object] = {"limit": 1}
                while True:
                    page = structured(await client.call_tool("list_deploys", arguments))
                    rows = objects(page["deploys"])
                    assert len(rows) == 1
                    seen.extend((str(r["service"]), str(r["version"])) for r in rows)
                    if "cursor" not in page:
                        assert page["truncated"] is False
                        break
                    assert page["truncated"] is True
                    arguments = {"limit": 1, "cursor": page["cursor"]}
    assert sorted(seen) == [("cart", "1.0"), ("cart", "2.0"), ("pay", "1.0"), ("pay", "2.0")]
