"""SEP-2243 custom headers and the tasks routing header on 2026-07-28 Streamable HTTP.

A tool whose input schema marks an argument with ``x-mcp-header`` (the conformance fixture's
``test_header_param``: ``region`` -> ``Mcp-Param-Region``) must get that argument in the header
too, literally or as ``=?base64?…?=``; the tasks extension's ``tasks/get``/``update``/``cancel``
carry ``params.taskId`` in ``Mcp-Name``. Anything else is HTTP 400 with ``-32020``.
"""

import base64
import json
from functools import partial
from typing import Final

import httpx2
import pytest
import trio
from _wire_support import as_object
from conftest import check_emitted

from coremetry.config import load_config
from coremetry.conformance_fixture.conformance import build_conformance_server
from coremetry.server import serve

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

LIMIT_S: Final = 30.0
STATELESS: Final = "2026-07-28"
META: Final = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientCapabilities": {},
}

JsonObject = dict[str, object]


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


async def call_region(
    url: str, arguments: JsonObject, region_header: str | None
) -> tuple[int, JsonObject]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": STATELESS,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "test_header_param",
    }
    if region_header is not None:
        headers["Mcp-Param-Region"] = region_header
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "test_header_param", "arguments": arguments, "_meta": META},
    }
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(LIMIT_S)) as http:
        response = await http.post(url, json=body, headers=headers)
    answer = as_object(json.loads(response.content))
    check_emitted(answer, STATELESS, "tools/call" if "result" in answer else None)
    return response.status_code, answer


async def start(nursery: trio.Nursery) -> str:
    config = load_config(environ={}, overrides={"http": {"port": 0}})
    base: str = await nursery.start(
        partial(serve, config, build_conformance_server(), announce=False, shutdown=trio.Event())
    )
    return base + "/api/mcp"


@pytest.mark.parametrize(
    ("region", "header"),
    [
        ("Hello", "Hello"),
        ("Hello", b64("Hello")),
        ("héllo wörld", b64("héllo wörld")),
        ("SGVsbG8=", "SGVsbG8="),  # no =?base64? wrapper: literal
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # no ?= suffix: literal
    ],
    ids=["literal", "base64", "base64-utf8", "unwrapped", "unterminated"],
)
async def test_matching_param_header_is_accepted(
    nursery: trio.Nursery, region: str, header: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        status, answer = await call_region(url, {"region": region}, header)
    assert status == 200
    content = as_object(answer["result"])["content"]
    assert content == [{"type": "text", "text": f"Region: {region}"}]


@pytest.mark.parametrize(
    ("arguments", "header", "says"),
    [
        ({"region": "Hello"}, None, "Mcp-Param-Region is required"),
        ({"region": "Hello"}, "=?base64?SGVsbG8?=", "not valid"),  # bad padding
        ({"region": "Hello"}, "=?base64?SGVs!!!bG8=?=", "not valid"),  # not the alphabet
        ({"region": "Hello"}, "Bye", "differs from arguments.region"),
        ({}, "Hello", "arguments.region is not"),
    ],
    ids=["missing", "bad-padding", "bad-characters", "different", "header-without-argument"],
)
async def test_missing_or_wrong_param_header_is_400_header_mismatch(
    nursery: trio.Nursery, arguments: JsonObject, header: str | None, says: str
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        status, answer = await call_region(url, arguments, header)
    error = as_object(answer["error"])
    assert status == 400
    assert error["code"] == -32020
    assert says in str(error["message"])
    assert answer["id"] == 3


async def test_tasks_methods_carry_the_task_id_in_mcp_name(nursery: trio.Nursery) -> None:
    meta = {
        **META,
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    }

    async def tasks_get(http: httpx2.AsyncClient, task_id: str, name: str | None) -> int:
        headers = {"MCP-Protocol-Version": STATELESS, "Mcp-Method": "tasks/get"}
        if name is not None:
            headers["Mcp-Name"] = name
        body = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tasks/get",
            "params": {"taskId": task_id, "_meta": meta},
        }
        response = await http.post(url, json=body, headers=headers)
        return response.status_code

    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(LIMIT_S)) as http:
            created = await http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": meta},
                },
                headers={
                    "MCP-Protocol-Version": STATELESS,
                    "Mcp-Method": "tools/call",
                    "Mcp-Name": "slow_compute",
                },
            )
            task_id = str(as_object(as_object(json.loads(created.content))["result"])["taskId"])
            statuses = [
                await tasks_get(http, task_id, task_id),
                await tasks_get(http, task_id, None),
                await tasks_get(http, task_id, "another-task"),
            ]
    assert statuses == [200, 400, 400]
