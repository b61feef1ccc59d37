"""``current_call_context`` and ``CallContext.waiting``: what a layer under a handler relies on.

A handler's callees (the store admission) find the call's context without being passed it,
also in tasks the handler starts; a wait marked with ``ctx.waiting`` that the deadline ends is
answered ``timeout`` with that wait's detail and hint; a wait that ends in time leaves the
generic deadline answer alone.
"""

import json

import msgspec
import trio
import trio.testing

from coremetry.mcp import CallContext, Caller, Connection, Server, Tool, current_call_context
from coremetry.mcp.versions import LATEST_HANDSHAKE

JsonObject = dict[str, object]


class WaitArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``wait``: mark a wait for ``marked_ms`` (ending in time or not), then sleep ``then_ms``."""

    marked_ms: int
    then_ms: int = 0


def server_with_wait_tool(seen: list[CallContext | None]) -> Server:
    async def wait(args: WaitArgs, ctx: CallContext) -> str:
        seen.append(current_call_context())
        async with trio.open_nursery() as nursery:
            # A child task sees the same call context (trio copies context variables).
            nursery.start_soon(lambda: _record(seen))
        with ctx.waiting("a slot of the thing", "come back later"):
            await trio.sleep(args.marked_ms / 1000)
        await trio.sleep(args.then_ms / 1000)
        return "done"

    server = Server("t", "0")
    server.register_tool(Tool("wait", "Wait.", WaitArgs, wait, read_budget_s=1.0))
    return server


async def _record(seen: list[CallContext | None]) -> None:
    seen.append(current_call_context())


def error_body(result: JsonObject) -> JsonObject:
    """The tool-error object of an ``isError`` result."""
    assert result["isError"] is True
    content = result["content"]
    assert isinstance(content, list)
    body = json.loads(content[0]["text"])
    assert isinstance(body, dict)
    return body


async def call(server: Server, arguments: JsonObject) -> JsonObject:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "wait", "arguments": arguments},
    }
    conn = Connection(
        caller=Caller(subject="ana", role="viewer"), protocol_version=LATEST_HANDSHAKE
    )
    reply = await server.handle(msgspec.json.encode(request), conn)
    assert reply is not None
    result = json.loads(reply.body)["result"]
    assert isinstance(result, dict)
    return result


async def test_the_context_is_current_in_the_handler_and_its_tasks_only() -> None:
    seen: list[CallContext | None] = []
    result = await call(server_with_wait_tool(seen), {"marked_ms": 0})
    assert result["content"] == [{"type": "text", "text": "done"}]
    assert len(seen) == 2
    assert seen[0] is not None
    assert seen[0] is seen[1]
    assert seen[0].caller.subject == "ana"
    assert current_call_context() is None


async def test_a_wait_ended_by_the_deadline_answers_with_its_hint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = await call(server_with_wait_tool([]), {"marked_ms": 5000})
    body = error_body(result)
    assert body["error"] == "timeout"
    assert body["hint"] == "come back later"
    assert body["detail"] == (
        "the call's deadline (1000 ms) expired while it waited: a slot of the thing"
    )


async def test_a_wait_that_ended_in_time_leaves_the_generic_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = await call(server_with_wait_tool([]), {"marked_ms": 10, "then_ms": 5000})
    body = error_body(result)
    assert body["error"] == "timeout"
    assert body["detail"] == "the call did not finish within its deadline (1000 ms)"
    assert body["hint"] != "come back later"


def server_with_closing_tool(ended: list[str]) -> Server:
    async def wait(args: WaitArgs, ctx: CallContext) -> str:
        ctx.at_close(lambda: ended.append("first"))
        ctx.at_close(lambda: ended.append("second"))
        await trio.sleep(args.then_ms / 1000)
        assert ended == []  # not before the call ends
        return "done"

    server = Server("t", "0")
    server.register_tool(Tool("wait", "Wait.", WaitArgs, wait, read_budget_s=1.0))
    return server


async def test_at_close_callbacks_run_once_when_the_call_ends() -> None:
    ended: list[str] = []
    result = await call(server_with_closing_tool(ended), {"marked_ms": 0})
    assert result.get("isError", False) is False
    assert ended == ["first", "second"]


async def test_at_close_callbacks_run_when_the_deadline_ends_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ended: list[str] = []
    result = await call(server_with_closing_tool(ended), {"marked_ms": 0, "then_ms": 5000})
    assert error_body(result)["error"] == "timeout"
    assert ended == ["first", "second"]
