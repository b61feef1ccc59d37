"""Protocol edges of the observability entries on one real server (issue 17, "Protocol edges").

Telemetry is posted as OTLP JSON to a live :func:`coremetry.server.serve` (real security, the
embedded store), then read with the official ``mcp`` SDK client (every message validated
against the MCP schema):

- ``completion/complete`` counts every match before it cuts to 100: with 200 matching trace
  ids it answers ``total: 200, hasMore: true`` and 100 values;
- ``coremetry://logs/api%2Fgateway`` matches the ``coremetry://logs/{service}`` template and
  reads the logs of the service ``api/gateway`` (the value decoded once, RFC 6570 §3.2.2); a
  ``#fragment`` is no part of the value.
"""

import json
import time
from pathlib import Path
from typing import Final

import trio
from mcp import types

from ._client import mcp_client
from .test_live_ingest import LIMIT_S, post, resource, span_json, traces_body
from .test_live_ingest import live_server as live_ingest_server

S: Final = 1_000_000_000


async def test_completion_counts_every_match_then_shows_100(tmp_path: Path) -> None:
    now = time.time_ns()
    spans = [
        span_json(t, t, f"GET /item/{t}", now - 60 * S + t, now - 30 * S) for t in range(1, 201)
    ]
    with trio.fail_after(LIMIT_S):
        async with live_ingest_server(tmp_path) as live:
            await post(live, "/v1/traces", traces_body([(resource("shop"), spans)]))
            async with mcp_client(live.mcp_url, live.token) as client:
                everything = await client.complete(
                    types.ResourceTemplateReference(uri="coremetry://trace/{trace_id}"),
                    {"name": "trace_id", "value": ""},
                )
                some = await client.complete(
                    types.PromptReference(name="explain_trace"),
                    {"name": "trace_id", "value": "0" * 30},
                )
    completion = everything.completion
    assert completion.total == 200
    assert completion.has_more is True
    assert len(completion.values) == 100
    assert len(set(completion.values)) == 100
    # ids 1..0xc8 have 30 leading zeros: all 200 match, the first 100 are shown, sorted.
    assert some.completion.total == 200
    assert some.completion.has_more is True
    assert some.completion.values == sorted(some.completion.values)
    assert len(some.completion.values) == 100


def logs_body(service: str, body: str, at: int) -> bytes:
    record = {"timeUnixNano": str(at), "severityNumber": 9, "body": {"stringValue": body}}
    return json.dumps(
        {"resourceLogs": [{"resource": resource(service), "scopeLogs": [{"logRecords": [record]}]}]}
    ).encode()


async def test_a_percent_encoded_slash_in_a_template_value_is_decoded_once(
    tmp_path: Path,
) -> None:
    now = time.time_ns()
    with trio.fail_after(LIMIT_S):
        async with live_ingest_server(tmp_path) as live:
            await post(live, "/v1/logs", logs_body("api/gateway", "routed /orders", now - S))
            await post(live, "/v1/logs", logs_body("api", "not this one", now - S))
            async with mcp_client(live.mcp_url, live.token) as client:
                read = await client.read_resource("coremetry://logs/api%2Fgateway")
                with_fragment = await client.read_resource("coremetry://logs/api%2Fgateway#top")
    for result in (read, with_fragment):
        (item,) = result.contents
        assert isinstance(item, types.TextResourceContents)
        assert "routed /orders" in item.text
        assert "not this one" not in item.text
