"""The drain, end to end: every call in flight is answered before the exit.

Streamable HTTP, legacy HTTP+SSE and WebSocket, each on the real server (``serve``, on
``127.0.0.1:0``); its ``shutdown`` event is what SIGTERM and SIGINT set (``watch_signals``).
(stdio, in a real subprocess with a real signal: ``test_stdio_signals.py``.) Tools registered
here block until the test releases them (or forever), so which call ends before the drain's
deadline is decided by the test, not by timing. Every message the server emits is validated
against the official schema of the revision in use.
"""

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Final

import httpx
import pytest
import trio
from _wire_support import SseReader
from conftest import check_emitted
from trio_websocket import CloseReason, ConnectionClosed, WebSocketConnection, wrap_client_stream

from coremetry.config import load_config
from coremetry.conformance_fixture.fixture import NoArgs
from coremetry.mcp import CallContext, Resource, Server, Tool
from coremetry.server import build_mcp_server, serve

JsonObject = dict[str, object]

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
    # The hint is the drain's, not the backend's (the telemetry did not fail).
    assert result["structuredContent"]["hint"].startswith("The server is shutting down")

    cut_read = answers["resource"].json()
    check_emitted(cut_read, revision, "resources/read")
    assert cut_read["id"] == 3
    assert cut_read["error"]["data"]["retryable"] is True
    assert "shutting down" in cut_read["error"]["message"]


# ---- the session transports: legacy HTTP+SSE and WebSocket ----------------------------------

SSE_REVISION: Final = "2024-11-05"
WS_REVISION: Final = "2025-11-25"
CALLS: Final[Mapping[int, tuple[str, JsonObject]]] = {
    1: ("tools/call", {"name": "finishes_when_released", "arguments": {}}),
    2: ("tools/call", {"name": "never_finishes", "arguments": {}}),
    3: ("resources/read", {"uri": "test://never"}),
}
"""The three calls in flight when the drain begins, by request id."""


def rpc(request_id: int, method: str, params: JsonObject | None = None) -> JsonObject:
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize(revision: str) -> JsonObject:
    client: JsonObject = {"name": "drain-test", "version": "0"}
    params: JsonObject = {"protocolVersion": revision, "capabilities": {}, "clientInfo": client}
    return rpc(0, "initialize", params)


INITIALIZED: Final[JsonObject] = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def check_answers(answers: Mapping[object, JsonObject], revision: str, refused_id: int) -> None:
    """The calls in flight got their own answers; the request sent during the drain its refusal.

    Every answer has already been validated against the schema by the reader.
    """
    assert answers[1]["result"] == {"content": [{"type": "text", "text": "finished in time"}]}
    cut_tool = answers[2]["result"]
    assert isinstance(cut_tool, dict)
    assert cut_tool["isError"] is True
    content = cut_tool["content"]
    assert isinstance(content, list)
    detail = json.loads(content[0]["text"])
    assert detail["error"] == "backend_unavailable"
    assert detail["retryable"] is True
    assert "shutting down" in detail["detail"]
    for key in (3, refused_id):  # a cut resources/read, and the request sent during the drain
        error = answers[key]["error"]
        assert isinstance(error, dict)
        assert error["code"] == -32603
        assert "shutting down" in error["message"]
        assert error["data"] == {"retryable": True, "retry_after_ms": 5000}


class Events(SseReader):
    """The blocks of one SSE response (httpx), read as they arrive."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(SSE_REVISION)
        self._chunks = response.aiter_bytes()

    async def next_chunk(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None


async def read_answers(
    events: Events, answers: dict[object, JsonObject], methods: Mapping[int, str]
) -> None:
    """Every ``message`` event until the stream ends, validated, by id (comments skipped)."""
    while (item := await events.next_item()) is not None:
        if item.event is None:
            continue
        assert item.event == "message", item
        message = json.loads(item.data)
        check_emitted(message, SSE_REVISION, methods.get(message.get("id")))
        answers[message["id"]] = message


async def test_legacy_sse_answers_calls_in_flight_as_events_then_ends_the_stream() -> None:
    blocking = Blocking()
    config = load_config(
        environ={}, overrides={"http": {"port": 0, "graceful_shutdown_s": 1.0}, "mcp": {}}
    )
    stop = trio.Event()
    methods = {key: method for key, (method, _params) in CALLS.items()}
    answers: dict[object, JsonObject] = {}
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as server_nursery:
            base: str = await server_nursery.start(
                partial(serve, config, blocking.server(), announce=False, shutdown=stop)
            )
            accept = {"accept": "text/event-stream"}
            async with (
                httpx.AsyncClient(base_url=base, timeout=LIMIT_S) as client,
                client.stream("GET", "/api/mcp/sse", headers=accept) as response,
            ):
                assert response.status_code == 200
                events = Events(response)
                first = await events.next_item()
                assert first is not None
                assert first.event == "endpoint"
                endpoint = first.data
                assert (await client.post(endpoint, json=initialize(SSE_REVISION))).is_success
                init = await events.next_message("initialize")
                assert init["id"] == 0
                assert (await client.post(endpoint, json=INITIALIZED)).status_code == 202
                for key, (method, params) in CALLS.items():
                    assert (await client.post(endpoint, json=rpc(key, method, params))).is_success
                for started in blocking.started.values():
                    await started.wait()
                stop.set()  # what SIGTERM does
                # A request once the drain has begun: 503 + Retry-After (the first pings may
                # still be taken: the drain begins when serve() sees the stop).
                refused: httpx.Response | None = None
                for attempt in range(10, 1000):
                    methods[attempt] = "ping"
                    refused = await client.post(endpoint, json=rpc(attempt, "ping"))
                    if refused.status_code == 503:
                        break
                    await trio.sleep(0.01)
                assert refused is not None
                # A notification is still taken during the drain (a cancel still reaches its
                # call); and a new session is refused.
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": 999},
                }
                taken = await client.post(endpoint, json=cancel)
                new_session = await client.get("/api/mcp/sse", headers=accept)
                blocking.release.set()  # this call finishes within the grace period
                await read_answers(events, answers, methods)  # returns when the stream ends
        # serve() has returned: the process would exit now.

    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    body = refused.json()
    check_emitted(body, SSE_REVISION)
    assert body["id"] == attempt
    assert taken.status_code == 202
    assert new_session.status_code == 503
    assert new_session.headers["retry-after"] == "5"
    check_answers(answers, SSE_REVISION, refused_id=attempt)


@asynccontextmanager
async def websocket(base: str) -> AsyncIterator[WebSocketConnection]:
    """A socket to ``/api/mcp/ws`` offering ``mcp``, over a TCP stream the test owns (see
    ``test_websocket.connect``: trio-websocket leaves a server-closed stream open)."""
    host_port = base.removeprefix("http://")
    host, port = host_port.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, host_port, "/api/mcp/ws", subprotocols=["mcp"]
        )
        try:
            yield ws
        finally:
            await ws.aclose()
            await stream.aclose()


async def next_frame(ws: WebSocketConnection, methods: Mapping[int, str]) -> JsonObject:
    """The next frame, decoded and validated against the schema."""
    frame = await ws.get_message()
    assert isinstance(frame, str)
    message: JsonObject = json.loads(frame)
    request_id = message.get("id")
    check_emitted(
        message, WS_REVISION, methods.get(request_id) if isinstance(request_id, int) else None
    )
    return message


async def test_websocket_answers_calls_in_flight_then_closes_1001() -> None:
    blocking = Blocking()
    config = load_config(
        environ={}, overrides={"http": {"port": 0, "graceful_shutdown_s": 1.0}, "mcp": {}}
    )
    stop = trio.Event()
    methods = {0: "initialize", **{key: method for key, (method, _params) in CALLS.items()}}
    answers: dict[object, JsonObject] = {}
    refused_id = -1
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as server_nursery:
            base: str = await server_nursery.start(
                partial(serve, config, blocking.server(), announce=False, shutdown=stop)
            )
            async with websocket(base) as ws:

                async def send(message: JsonObject) -> None:
                    await ws.send_message(json.dumps(message))

                await send(initialize(WS_REVISION))
                assert (await next_frame(ws, methods))["id"] == 0
                await send(INITIALIZED)
                for key, (method, params) in CALLS.items():
                    await send(rpc(key, method, params))
                for started in blocking.started.values():
                    await started.wait()
                stop.set()  # what SIGTERM does
                # A request on the open socket once the drain has begun gets the JSON-RPC
                # shutting-down error (the first pings may still be answered).
                for attempt in range(10, 1000):
                    methods[attempt] = "ping"
                    await send(rpc(attempt, "ping"))
                    answer = await next_frame(ws, methods)
                    while answer["id"] != attempt:  # a cut call's answer (a slow machine)
                        answers[answer["id"]] = answer
                        answer = await next_frame(ws, methods)
                    if "error" in answer:
                        answers[attempt] = answer
                        refused_id = attempt
                        break
                    await trio.sleep(0.01)
                blocking.release.set()  # this call finishes within the grace period
                reason: CloseReason | None = None
                while reason is None:
                    try:
                        message = await next_frame(ws, methods)
                    except ConnectionClosed as closed:
                        reason = closed.reason
                        continue
                    answers[message["id"]] = message
        # serve() has returned: the process would exit now.

    assert reason is not None
    assert (reason.code, reason.reason) == (1001, "server shutting down")
    check_answers(answers, WS_REVISION, refused_id=refused_id)


async def test_a_cancel_during_the_drain_reaches_its_call_and_the_socket_closes() -> None:
    # A grace longer than the test's own bound: only the client's cancel can end the call in
    # time, and a cancelled call is not answered (MCP cancellation), so the socket closes
    # with nothing but the refusal of the ping sent during the drain.
    blocking = Blocking()
    config = load_config(
        environ={}, overrides={"http": {"port": 0, "graceful_shutdown_s": 600.0}, "mcp": {}}
    )
    stop = trio.Event()
    methods = {0: "initialize", 2: "tools/call"}
    seen: list[JsonObject] = []
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as server_nursery:
            base: str = await server_nursery.start(
                partial(serve, config, blocking.server(), announce=False, shutdown=stop)
            )
            async with websocket(base) as ws:

                async def send(message: JsonObject) -> None:
                    await ws.send_message(json.dumps(message))

                await send(initialize(WS_REVISION))
                assert (await next_frame(ws, methods))["id"] == 0
                await send(INITIALIZED)
                method, params = CALLS[2]
                await send(rpc(2, method, params))
                await blocking.started["tool"].wait()
                stop.set()
                for attempt in range(10, 1000):  # until the drain has begun
                    methods[attempt] = "ping"
                    await send(rpc(attempt, "ping"))
                    answer = await next_frame(ws, methods)
                    if "error" in answer:
                        break
                    await trio.sleep(0.01)
                await send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": 2, "reason": "client gave up"},
                    }
                )
                reason: CloseReason | None = None
                while reason is None:
                    try:
                        seen.append(await next_frame(ws, methods))
                    except ConnectionClosed as closed:
                        reason = closed.reason

    assert seen == []
    assert reason is not None
    assert reason.code == 1001
