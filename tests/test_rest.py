"""The tools over REST: the same registry and gate as MCP, REST status codes."""

import json
from functools import partial

import httpx
import pytest
import trio

from coremetry.config import load_config
from coremetry.server import build_mcp_server, serve

LIMIT_S = 30


async def start(nursery: trio.Nursery) -> str:
    config = load_config(environ={}, overrides={"http": {"port": 0}})
    url: str = await nursery.start(
        partial(serve, config, build_mcp_server(fixture=True), announce=False)
    )
    return url


@pytest.mark.parametrize(
    ("tool", "arguments", "status", "error"),
    [
        ("echo", {"text": "hi"}, 200, None),
        ("echo", {"text": 1}, 400, "bad_args"),
        ("echo", {}, 400, "bad_args"),
        ("fail", {"kind": "not_found"}, 404, "not_found"),
        ("fail", {"kind": "timeout"}, 504, "timeout"),
        ("fail", {"kind": "backend_unavailable"}, 503, "backend_unavailable"),
        ("fail", {"kind": "internal"}, 500, "internal"),
        ("sleep_ms", {"ms": 5000}, 504, "timeout"),
    ],
)
async def test_tool_outcomes_map_to_rest_statuses(
    nursery: trio.Nursery, tool: str, arguments: dict[str, object], status: int, error: str | None
) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{url}/api/tools/{tool}", json=arguments)
    assert response.status_code == status
    body = response.json()
    if error is None:
        assert body == {"content": [{"type": "text", "text": "hi"}]}
    else:
        assert body["error"] == error
        assert list(body) == ["error", "retryable", "hint", "detail"]


async def test_refusals_use_rest_codes(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx.AsyncClient() as client:
            forbidden = await client.post(f"{url}/api/tools/admin_only", json={})
            unknown = await client.post(f"{url}/api/tools/no_such_tool", json={})
            not_json = await client.post(
                f"{url}/api/tools/echo",
                content=b"[1]",
                headers={"content-type": "application/json"},
            )
            wrong_type = await client.post(
                f"{url}/api/tools/echo", content=b"{}", headers={"content-type": "text/plain"}
            )
            get_call = await client.get(f"{url}/api/tools/echo")
    assert forbidden.status_code == 403
    assert "admin" in forbidden.json()["detail"]
    assert unknown.status_code == 404
    assert not_json.status_code == 400
    assert wrong_type.status_code == 415
    assert get_call.status_code == 405
    assert "POST" in get_call.headers["allow"]


async def test_listing_shows_what_the_caller_may_call(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{url}/api/tools")
    assert response.status_code == 200
    names = {tool["name"] for tool in response.json()["tools"]}
    assert {"echo", "sleep_ms", "fail"} <= names
    assert "admin_only" not in names  # the anonymous caller is a viewer


async def test_mcp_and_rest_agree_on_every_fixture_tool(nursery: trio.Nursery) -> None:
    """Parity: for each tool, REST allows exactly when MCP answers a result."""
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx.AsyncClient() as client:
            server = build_mcp_server(fixture=True)
            for tool in server.tools():
                arguments: dict[str, object] = {"text": "x"} if tool.name == "echo" else {}
                rest = await client.post(f"{url}/api/tools/{tool.name}", json=arguments)
                mcp = await client.post(
                    f"{url}/api/mcp",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": tool.name, "arguments": arguments},
                    },
                    headers={"accept": "application/json", "mcp-protocol-version": "2025-11-25"},
                )
                answer = json.loads(mcp.content)
                mcp_allowed = "result" in answer
                rest_allowed = rest.status_code not in (401, 403, 429)
                assert mcp_allowed == rest_allowed, (tool.name, rest.status_code, answer)


async def test_deeply_nested_bodies_are_clean_400s(nursery: trio.Nursery) -> None:
    deep = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + b"[" * 5000 + b"]" * 5000
    deep += b"}}"
    with trio.fail_after(LIMIT_S):
        url = await start(nursery)
        async with httpx.AsyncClient() as client:
            mcp = await client.post(
                f"{url}/api/mcp", content=deep, headers={"content-type": "application/json"}
            )
            rest = await client.post(
                f"{url}/api/tools/echo",
                content=b'{"text":' + b"[" * 5000 + b"]" * 5000 + b"}",
                headers={"content-type": "application/json"},
            )
    assert mcp.status_code == 400
    assert mcp.json()["error"]["code"] == -32700
    assert rest.status_code == 400
    assert "recursion" not in rest.text
