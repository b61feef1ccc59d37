"""Store admission per identity, through the real dispatcher and the production registry.

The store is a test double whose ``services`` read blocks, for the identities told to hold,
until the test releases them; every other read answers at once (an empty store). Calls go
through :func:`coremetry.server.build_mcp_server` and ``Server.handle`` with a connection per
caller, so the admission point is the one every tool, resource and prompt passes. Order is
asserted, never wall time (a deadline expiring while waiting runs on trio's autojump clock).
The last test does the same end to end: ``serve`` (hypercorn, real security) with the limits
from the configuration, two service tokens, Streamable HTTP.
"""

import json
from functools import partial
from pathlib import Path
from typing import Final, cast

import httpx
import msgspec
import pytest
import trio
import trio.testing

from coremetry.config import load_config
from coremetry.mcp import Caller, Connection, Server, current_call_context
from coremetry.mcp.versions import LATEST_HANDSHAKE, V2026_07_28
from coremetry.observability.admission import (
    IDENTITY_BUSY_HINT,
    SERVER_BUSY_HINT,
    StoreAdmission,
)
from coremetry.server import build_mcp_server, open_security, serve
from coremetry.store import (
    MetricDescriptor,
    Page,
    ServiceSummary,
    StoreStatistics,
    TelemetryStore,
    TimeRange,
)
from coremetry.store.interface import LogCountSeries

JsonObject = dict[str, object]
WINDOW: Final = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}


class HoldingStore:
    """The reads the tools under test make: ``services`` (held per identity), ``statistics``,
    and the (empty) log and metric reads ``list_services`` makes to list every signal's services.

    Attributes:
        held: identities whose ``services`` reads wait for :attr:`release`.
        started: the identity of each ``services`` read, in the order they reached the store.
        running: ``services`` reads inside the store now.
    """

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.release = trio.Event()
        self.started: list[str] = []
        self.running = 0
        self._arrived = trio.Event()

    async def wait_started(self, count: int) -> None:
        """Wait until ``count`` ``services`` reads have reached the store."""
        while len(self.started) < count:
            await self._arrived.wait()

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        ctx = current_call_context()
        assert ctx is not None, "a tool's store read runs inside its call"
        identity = ctx.caller.subject
        self.started.append(identity)
        self._arrived.set()
        self._arrived = trio.Event()
        self.running += 1
        try:
            if identity in self.held:
                await self.release.wait()
            return Page(items=[], total=0)
        finally:
            self.running -= 1

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        await trio.lowlevel.checkpoint()
        return []

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        await trio.lowlevel.checkpoint()
        return Page(items=[], total=0)

    async def statistics(self) -> StoreStatistics:
        await trio.lowlevel.checkpoint()
        return StoreStatistics(
            span_count=0,
            log_count=0,
            metric_point_count=0,
            oldest_unix_nano=None,
            newest_unix_nano=None,
        )


def build(store: HoldingStore, *, per_identity: int, total: int) -> Server:
    # The double implements only the reads list_services makes (the test asserts it is enough).
    return build_mcp_server(
        store=cast(TelemetryStore, store),
        max_store_calls_per_identity=per_identity,
        max_store_calls=total,
    )


async def list_services(server: Server, who: str, *, timeout_ms: int | None = None) -> JsonObject:
    """``tools/call list_services`` as ``who``; the tool's JSON body (an error or a result)."""
    params: JsonObject = {"name": "list_services", "arguments": WINDOW}
    if timeout_ms is not None:
        params["_meta"] = {"coremetry/timeout_ms": timeout_ms}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    conn = Connection(caller=Caller(subject=who, role="viewer"), protocol_version=LATEST_HANDSHAKE)
    reply = await server.handle(msgspec.json.encode(request), conn)
    assert reply is not None
    result = json.loads(reply.body)["result"]
    body = json.loads(result["content"][0]["text"])
    assert isinstance(body, dict)
    assert result.get("isError", False) is ("error" in body)
    return body


async def test_one_identity_at_its_share_does_not_delay_another() -> None:
    config = load_config(
        environ={"COREMETRY_STORE_MAX_CALLS_PER_IDENTITY": "2", "COREMETRY_STORE_MAX_CALLS": "3"}
    )
    store = HoldingStore(held={"alice"})
    server = build(
        store,
        per_identity=config.store.max_calls_per_identity,
        total=config.store.max_calls,
    )
    alice: list[JsonObject] = []
    bob: list[JsonObject] = []

    async def as_alice() -> None:
        alice.append(await list_services(server, "alice"))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(as_alice)
        await trio.testing.wait_all_tasks_blocked()
        # Alice's share is 2: two of her reads are in the store, two wait for admission.
        assert store.started == ["alice", "alice"]
        bob.append(await list_services(server, "bob"))
        # Bob was served while all of Alice's calls were still open.
        assert "error" not in bob[0], bob
        assert alice == []
        assert store.started == ["alice", "alice", "bob"]
        store.release.set()
    assert len(alice) == 4
    assert all("error" not in body for body in alice), alice
    assert store.started == ["alice", "alice", "bob", "alice", "alice"]


async def test_a_call_waiting_past_its_deadline_answers_timeout_with_the_identity_hint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HoldingStore(held={"alice"})
    server = build(store, per_identity=1, total=2)
    async with trio.open_nursery() as nursery:
        first: list[JsonObject] = []

        async def hold() -> None:
            first.append(await list_services(server, "alice"))

        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        assert store.started == ["alice"]
        waited = await list_services(server, "alice", timeout_ms=500)
        assert waited["error"] == "timeout"
        assert waited["retryable"] is True
        assert waited["hint"] == IDENTITY_BUSY_HINT
        assert (
            "this identity already runs 1 store call at once, its limit "
            "(store.max_calls_per_identity)" in str(waited["detail"])
        )
        assert "500 ms" in str(waited["detail"])
        # The expired call never reached the store, and the held one is still fine.
        assert store.started == ["alice"]
        store.release.set()
    assert "error" not in first[0], first
    # Its slot was not leaked: Alice is served again at once.
    store.held.clear()
    assert "error" not in await list_services(server, "alice")


async def test_a_call_waiting_on_the_global_cap_says_the_server_is_busy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HoldingStore(held={"alice", "bob"})
    server = build(store, per_identity=1, total=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(list_services, server, "alice")
        nursery.start_soon(list_services, server, "bob")
        await trio.testing.wait_all_tasks_blocked()
        waited = await list_services(server, "carol", timeout_ms=300)
        assert waited["error"] == "timeout"
        assert waited["hint"] == SERVER_BUSY_HINT
        assert "2 store calls of other clients running, the limit for all (store.max_calls)" in str(
            waited["detail"]
        )
        store.release.set()
    assert sorted(store.started) == ["alice", "bob"]


async def test_resources_and_prompts_pass_the_same_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # coremetry://services reads the store through the same admission point as the tools.
    store = HoldingStore(held={"alice"})
    server = build(store, per_identity=1, total=2)
    conn = Connection(
        caller=Caller(subject="alice", role="viewer"), protocol_version=LATEST_HANDSHAKE
    )
    request = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "resources/read",
        "params": {"uri": "coremetry://services", "_meta": {"coremetry/timeout_ms": 400}},
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(list_services, server, "alice")
        await trio.testing.wait_all_tasks_blocked()
        reply = await server.handle(msgspec.json.encode(request), conn)
        assert reply is not None
        error = json.loads(reply.body)["error"]
        assert error["data"]["error"] == "timeout"
        assert error["data"]["hint"] == IDENTITY_BUSY_HINT
        store.release.set()


async def test_waiting_identities_take_turns() -> None:
    admission = StoreAdmission(max_calls_per_identity=3, max_calls=3)
    order: list[str] = []
    identities = ("a", "a", "a", "a", "a", "b", "c")
    gates = [trio.Event() for _ in identities]

    async def read(identity: str, gate: trio.Event) -> None:
        async with admission.slot(identity):
            order.append(identity)
            await gate.wait()

    async with trio.open_nursery() as nursery:
        for identity, gate in zip(identities, gates, strict=True):
            nursery.start_soon(read, identity, gate)
            await trio.testing.wait_all_tasks_blocked()
        assert order == ["a", "a", "a"]
        assert (admission.waiting("a"), admission.waiting("b"), admission.waiting("c")) == (2, 1, 1)
        for gate in gates:
            # One slot frees at a time; see who is served next.
            gate.set()
            await trio.testing.wait_all_tasks_blocked()
    # a's fourth call first (a was the first identity waiting), then b and c before a's fifth:
    # identities take turns, they are not served in arrival order.
    assert order == ["a", "a", "a", "a", "b", "c", "a"]
    assert admission.running_total == 0


async def test_a_cancelled_waiter_leaves_no_trace() -> None:
    admission = StoreAdmission(max_calls_per_identity=1, max_calls=1)
    gate = trio.Event()

    async def hold() -> None:
        async with admission.slot("a"):
            await gate.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(0) as scope:
            async with admission.slot("b"):
                pytest.fail("admitted beyond the global cap")
        assert scope.cancelled_caught
        assert (admission.waiting("b"), admission.running("a"), admission.running_total) == (
            0,
            1,
            1,
        )
        gate.set()
    assert admission.running_total == 0


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_calls_per_identity must be at least 1"):
        StoreAdmission(max_calls_per_identity=0, max_calls=4)
    with pytest.raises(ValueError, match=r"max_calls \(1\) must be at least"):
        StoreAdmission(max_calls_per_identity=2, max_calls=1)


# ---- end to end: a real server over Streamable HTTP, two service tokens ----------------------


def _messages(response: httpx.Response) -> list[JsonObject]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        found: list[JsonObject] = []
        for block in response.text.split("\n\n"):
            data = "".join(
                line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")
            )
            if data:
                found.append(json.loads(data))
        return found
    decoded = json.loads(response.content)
    assert isinstance(decoded, dict)
    return [decoded]


async def http_list_services(
    client: httpx.AsyncClient, base: str, token: str, *, timeout_ms: int | None = None
) -> JsonObject:
    """``list_services`` over ``POST /api/mcp`` (2026-07-28, no session); the tool's body."""
    meta: JsonObject = {
        "io.modelcontextprotocol/protocolVersion": V2026_07_28,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    if timeout_ms is not None:
        meta["coremetry/timeout_ms"] = timeout_ms
    params = {"name": "list_services", "arguments": WINDOW, "_meta": meta}
    response = await client.post(
        base + "/api/mcp",
        json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params},
        headers={
            "authorization": f"Bearer {token}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": V2026_07_28,
            "mcp-method": "tools/call",
            "mcp-name": "list_services",
        },
    )
    assert response.status_code == 200, response.text
    (message,) = [m for m in _messages(response) if "result" in m or "error" in m]
    result = message["result"]
    assert isinstance(result, dict)
    body = json.loads(result["content"][0]["text"])
    assert isinstance(body, dict)
    return body


async def test_end_to_end_over_http_one_token_cannot_starve_another(tmp_path: Path) -> None:
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "data_dir": str(tmp_path / "data"),
            "rate_limit": {"per_second": 1000.0, "burst": 1000},
            "detection": {"enabled": False},
            "store": {"max_calls_per_identity": 1, "max_calls": 2},
        },
    )
    security = open_security(config)
    store = HoldingStore(held={"token:alice"})
    try:
        alice = security.store.create_token("alice", "viewer", None)[0]
        bob = security.store.create_token("bob", "viewer", None)[0]
        server = build(
            store,
            per_identity=config.store.max_calls_per_identity,
            total=config.store.max_calls,
        )
        async with trio.open_nursery() as nursery, httpx.AsyncClient(timeout=60) as client:
            stop = trio.Event()
            base: str = await nursery.start(
                partial(serve, config, server, announce=False, shutdown=stop, security=security)
            )
            held: list[JsonObject] = []
            held_done = trio.Event()

            async def hold() -> None:
                held.append(await http_list_services(client, base, alice))
                held_done.set()

            nursery.start_soon(hold)
            await store.wait_started(1)
            # Alice's second call waits for her only slot until its deadline: timeout + hint.
            waited = await http_list_services(client, base, alice, timeout_ms=200)
            assert waited["error"] == "timeout"
            assert waited["hint"] == IDENTITY_BUSY_HINT
            # Bob's call is served while Alice's first is still held in the store.
            served = await http_list_services(client, base, bob)
            assert "error" not in served, served
            assert held == []
            assert store.started == ["token:alice", "token:bob"]
            store.release.set()
            await held_done.wait()
            assert "error" not in held[0], held
            stop.set()
    finally:
        security.close()


class RecordingStore(HoldingStore):
    """A :class:`HoldingStore` that records which call made each read, in order."""

    def __init__(self, held: set[str]) -> None:
        super().__init__(held)
        self.reads: list[int] = []

    def _record(self) -> None:
        ctx = current_call_context()
        assert ctx is not None
        self.reads.append(id(ctx))

    async def services(
        self, time_range: TimeRange, *, limit: int, service_name: str | None = None
    ) -> Page[ServiceSummary]:
        self._record()
        return await super().services(time_range, limit=limit, service_name=service_name)

    async def log_counts(
        self, time_range: TimeRange, *, step_ns: int, limit: int
    ) -> list[LogCountSeries]:
        self._record()
        return await super().log_counts(time_range, step_ns=step_ns, limit=limit)

    async def metric_names(
        self, time_range: TimeRange, *, limit: int, prefix: str | None = None
    ) -> Page[MetricDescriptor]:
        self._record()
        return await super().metric_names(time_range, limit=limit, prefix=prefix)

    async def statistics(self) -> StoreStatistics:
        self._record()
        return await super().statistics()


async def test_a_call_holds_its_slot_from_its_first_read_to_its_end() -> None:
    # One slot for alice: her second call reaches the store only once the first call has made
    # all its reads and ended. Were each read admitted on its own, the waiting call would take
    # the slot between the first call's reads, and both would end only when both were done.
    store = RecordingStore(held={"alice"})
    server = build(store, per_identity=1, total=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(list_services, server, "alice")
        await store.wait_started(1)
        nursery.start_soon(list_services, server, "alice")
        await trio.testing.wait_all_tasks_blocked()
        assert store.started == ["alice"]  # the second call waits for admission
        store.release.set()
    assert store.started == ["alice", "alice"]
    first = store.reads[0]
    assert store.reads.count(first) >= 2  # list_services makes several reads
    assert store.reads == sorted(store.reads, key=lambda call: call != first)  # no interleaving
