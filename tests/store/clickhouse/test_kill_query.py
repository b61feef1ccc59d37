"""A tool call cancelled mid-query stops the query on the server (``KILL QUERY``), end to end.

The real server (``serve`` on loopback, Streamable HTTP) reads a ClickHouse store over
``clickhouse-connect``'s HTTP client; the ClickHouse HTTP stand-in (:mod:`._chdb_http`) holds
the ``list_services`` statement, standing for a long scan, until it is killed or its
``max_execution_time`` has passed. Each test asserts what a user (and an operator) would see:
the tool's answer and the server's process list — never timings.
"""

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Final

import httpx
import trio

from coremetry.config import load_config
from coremetry.server import build_mcp_server, serve
from coremetry.store import TelemetryBatch
from coremetry.store.clickhouse import ClickHouseStore
from coremetry.store.testing._dataset import make_dataset

from ._chdb_http import ChdbHttpServer, Running
from ._support import open_fresh_store

LIMIT_S: Final = 60.0
HEADERS: Final = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}


def is_services_query(sql: str) -> bool:
    """The services() statement list_services runs (held by the stand-in in these tests)."""
    return "AS request_count" in sql


def call(budget_ms: int | None = None) -> bytes:
    params: dict[str, object] = {"name": "list_services", "arguments": {"range": "24h"}}
    if budget_ms is not None:
        params["_meta"] = {"coremetry/timeout_ms": budget_ms}
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    ).encode()


def tool_error(response: httpx.Response) -> dict[str, object]:
    result = response.json()["result"]
    assert result["isError"] is True, result
    payload = json.loads(result["content"][0]["text"])
    assert isinstance(payload, dict)
    return payload


@asynccontextmanager
async def served_store(chdb_http: ChdbHttpServer) -> AsyncIterator[tuple[str, ClickHouseStore]]:
    """A ClickHouse store over HTTP with the conformance dataset, served on loopback."""
    async with open_fresh_store(chdb_http.url) as store, trio.open_nursery() as nursery:
        await store.write(TelemetryBatch(spans=make_dataset().spans))
        config = load_config(environ={}, overrides={"http": {"port": 0}})
        stop = trio.Event()
        base: str = await nursery.start(
            partial(serve, config, build_mcp_server(store=store), announce=False, shutdown=stop)
        )
        try:
            yield base + "/api/mcp", store
        finally:
            chdb_http.hold = None
            stop.set()


async def wait_for(condition: Callable[[], bool]) -> None:
    # The stand-in's threads change what is polled here; they cannot set a trio.Event.
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.01)


def only_held(chdb_http: ChdbHttpServer, before: int) -> Running:
    held = chdb_http.held[before:]
    assert len(held) == 1, [h.sql[:80] for h in held]
    return held[0]


async def test_a_budget_overrun_kills_the_query_and_answers_timeout(
    chdb_http: ChdbHttpServer,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            served_store(chdb_http) as (url, store),
            httpx.AsyncClient(timeout=LIMIT_S) as client,
        ):
            before = len(chdb_http.held)
            chdb_http.overshoot_s = 30.0  # the server would stop it much later
            chdb_http.hold = is_services_query
            answer = await client.post(url, content=call(budget_ms=1000), headers=HEADERS)
            held = only_held(chdb_http, before)
            await wait_for(lambda: held.query_id in chdb_http.kills)
            chdb_http.hold = None
            after = await client.post(url, content=call(), headers=HEADERS)
    payload = tool_error(answer)
    assert payload["error"] == "timeout"
    assert payload["retryable"] is True
    # The statement carried the call's remaining budget as its own limit, and was killed.
    assert held.max_execution_time is not None
    assert 0 < held.max_execution_time <= 1.0
    assert held.killed.is_set()
    assert held.query_id in store.runtime.kills
    # The store still answers.
    assert after.json()["result"].get("isError", False) is False
    assert "services" in after.json()["result"]["structuredContent"]


async def test_a_client_that_goes_away_kills_the_query(chdb_http: ChdbHttpServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with served_store(chdb_http) as (url, store):
            before = len(chdb_http.held)
            chdb_http.overshoot_s = 30.0
            chdb_http.held_event.clear()
            chdb_http.hold = is_services_query

            async def ask() -> None:
                async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                    await client.post(url, content=call(), headers=HEADERS)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await wait_for(lambda: len(chdb_http.held) > before)
                # The client disconnects: no budget is involved, only the closed connection.
                nursery.cancel_scope.cancel()
            held = only_held(chdb_http, before)
            await wait_for(lambda: held.query_id in chdb_http.kills)
    assert held.killed.is_set()
    assert held.query_id in store.runtime.kills


async def test_the_server_stopping_first_is_a_timeout_too(chdb_http: ChdbHttpServer) -> None:
    with trio.fail_after(LIMIT_S):
        async with (
            served_store(chdb_http) as (url, store),
            httpx.AsyncClient(timeout=LIMIT_S) as client,
        ):
            before = len(chdb_http.held)
            # The server gives up half a second before the budget (TIMEOUT_EXCEEDED, 159).
            chdb_http.overshoot_s = -0.5
            chdb_http.hold = is_services_query
            answer = await client.post(url, content=call(budget_ms=2000), headers=HEADERS)
            held = only_held(chdb_http, before)
    payload = tool_error(answer)
    assert payload["error"] == "timeout"
    assert held.query_id not in chdb_http.kills
    assert held.query_id not in store.runtime.kills


async def test_a_task_cancelled_mid_query_kills_the_query(chdb_http: ChdbHttpServer) -> None:
    """``list_services`` run as an MCP task (2025-11-25 ``params.task``), then ``tasks/cancel``:
    the task ends cancelled and its statement is killed on the ClickHouse server."""

    def rpc(request_id: int, method: str, params: dict[str, object]) -> bytes:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        return json.dumps(message).encode()

    with trio.fail_after(LIMIT_S):
        async with (
            served_store(chdb_http) as (url, store),
            httpx.AsyncClient(timeout=LIMIT_S) as client,
        ):
            before = len(chdb_http.held)
            chdb_http.overshoot_s = 30.0
            chdb_http.hold = is_services_query
            task: dict[str, object] = {
                "name": "list_services",
                "arguments": {"range": "24h"},
                "task": {},
            }
            created = await client.post(url, content=rpc(1, "tools/call", task), headers=HEADERS)
            task_id = created.json()["result"]["task"]["taskId"]
            await wait_for(lambda: len(chdb_http.held) > before)
            held = only_held(chdb_http, before)
            cancelled = await client.post(
                url, content=rpc(2, "tasks/cancel", {"taskId": task_id}), headers=HEADERS
            )
            await wait_for(lambda: held.query_id in chdb_http.kills)
            status = await client.post(
                url, content=rpc(3, "tasks/get", {"taskId": task_id}), headers=HEADERS
            )
    assert cancelled.json()["result"]["status"] == "cancelled"
    assert status.json()["result"]["status"] == "cancelled"
    assert held.killed.is_set()
    assert held.query_id in store.runtime.kills
