"""The drain on Streamable HTTP, end to end: every call in flight is answered before the exit.

The real server (``serve``) runs on ``127.0.0.1:0``; its ``shutdown`` event is what SIGTERM and
SIGINT set (``watch_signals``). Tools registered here block until the test releases them (or
forever), so which call ends before the drain's deadline is decided by the test, not by timing.
"""

import json
from functools import partial
from typing import Final

import httpx
import pytest
import trio
from conftest import check_emitted

from coremetry.config import load_config
from coremetry.conformance_fixture.fixture import NoArgs
from coremetry.mcp import CallContext, Resource, Server, Tool
from coremetry.server import build_mcp_server, serve

LIMIT_S: Final = 60.0
"""Generous bound of the test: a hang fails, a slow machine does not."""

STATELESS: Final = "2026-07-28"


class Blocking:
    """``finishes_when_released`` (a tool), ``never_finishes`` (a tool) and ``test://never``
    (a resource), each recording that it started."""

    def __init__(self) -> None:
        self.started: dict[str, trio.Event] = {
            name: trio.Event() for name in ("released", "tool", "resource")
        }
        self.release = trio.Event()

    async def finishes_when_released(self, args: NoArgs, ctx: CallContext) -> str:
        self.started["released"].set()
        await self.release.wait()
        return "finished in time"

    async def never_finishes(self, args: NoArgs, ctx: CallContext) -> str:
        self.started["tool"].set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def never_read(self, uri: str, ctx: CallContext) -> str:
        self.started["resource"].set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def server(self) -> Server:
        mcp = build_mcp_server(fixture=True)
        mcp.register_tool(
            Tool(
                "finishes_when_released",
                "Blocks until released.",
                NoArgs,
                self.finishes_when_released,
            )
        )
        mcp.register_tool(Tool("never_finishes", "Blocks forever.", NoArgs, self.never_finishes))
        mcp.register_resource(Resource("test://never", "never", self.never_read))
        return mcp


def request(
    revision: str, request_id: int, method: str, params: dict[str, object]
) -> tuple[dict[str, object], dict[str, str]]:
    """A request at ``revision`` and the headers a conforming client sends with it."""
    headers = {
        "accept": "application/json",
        "content-type": "application/json",
        "mcp-protocol-version": revision,
    }
    params = dict(params)
    if revision == STATELESS:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        }
        headers["mcp-method"] = method
        name = params.get("uri", params.get("name"))
        assert isinstance(name, str)
        headers["mcp-name"] = name
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return body, headers


def tool_call(
    revision: str, request_id: int, name: str
) -> tuple[dict[str, object], dict[str, str]]:
    return request(revision, request_id, "tools/call", {"name": name, "arguments": {}})


@pytest.mark.parametrize("revision", ["2025-11-25", STATELESS])
async def test_every_call_in_flight_is_answered_and_new_requests_get_503(revision: str) -> None:
    blocking = Blocking()
    config = load_config(
        environ={}, overrides={"http": {"port": 0, "graceful_shutdown_s": 1.0}, "mcp": {}}
    )
    stop = trio.Event()
    answers: dict[str, httpx.Response] = {}
    late: httpx.Response | None = None
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as server_nursery:
            base: str = await server_nursery.start(
                partial(serve, config, blocking.server(), announce=False, shutdown=stop)
            )
            url = f"{base}/api/mcp"
            async with httpx.AsyncClient(timeout=LIMIT_S) as client:

                async def post(key: str, message: tuple[dict[str, object], dict[str, str]]) -> None:
                    body, headers = message
                    answers[key] = await client.post(url, json=body, headers=headers)

                async with trio.open_nursery() as calls:
                    released = tool_call(revision, 1, "finishes_when_released")
                    calls.start_soon(post, "released", released)
                    calls.start_soon(post, "tool", tool_call(revision, 2, "never_finishes"))
                    read = request(revision, 3, "resources/read", {"uri": "test://never"})
                    calls.start_soon(post, "resource", read)
                    for started in blocking.started.values():
                        await started.wait()
                    stop.set()  # what SIGTERM does
                    # A new request once the drain has begun: 503 with Retry-After. (The first
                    # attempts may still be served: the drain begins when serve() sees the stop.)
                    for _ in range(200):
                        body, headers = tool_call(revision, 4, "echo")
                        late = await client.post(url, json=body, headers=headers)
                        if late.status_code == 503:
                            break
                        await trio.sleep(0.01)
                    blocking.release.set()  # this call finishes within the grace period
        # serve() has returned: the process would exit now.

    assert late is not None
    assert late.status_code == 503
    assert late.headers["retry-after"] == "5"
    refusal = late.json()["error"]
    assert "shutting down" in refusal["message"]
    assert refusal["data"]["retryable"] is True

    finished = answers["released"]
    assert finished.status_code == 200
    assert finished.json()["result"]["content"][0]["text"] == "finished in time"
    check_emitted(finished.json(), revision, "tools/call")

    cut_tool = answers["tool"].json()
    check_emitted(cut_tool, revision, "tools/call")
    assert answers["tool"].status_code == 200
    assert cut_tool["id"] == 2
    result = cut_tool["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "backend_unavailable"
    assert result["structuredContent"]["retryable"] is True
    assert "shutting down" in json.loads(result["content"][0]["text"])["detail"]

    cut_read = answers["resource"].json()
    check_emitted(cut_read, revision, "resources/read")
    assert cut_read["id"] == 3
    assert cut_read["error"]["data"]["retryable"] is True
    assert "shutting down" in cut_read["error"]["message"]
