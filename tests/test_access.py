"""The application's call gate (:mod:`coremetry.access`): role first, then a token bucket per
identity.

The bucket math runs on trio's clock, driven by ``autojump_clock`` (nothing here depends on
wall-clock speed); the gate is exercised through a real :class:`~coremetry.mcp.Server` carrying
the fixture entries, so the JSON-RPC codes, messages and ``data`` are what a client sees.
"""

import json
from typing import Final, cast

import pytest
import trio
import trio.testing

from coremetry.access import RateLimiter, make_call_gate, retry_after_ms
from coremetry.config import load_config
from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import (
    CallContext,
    Caller,
    Connection,
    Denied,
    GateCall,
    Resource,
    Server,
    codes,
    role_satisfies,
)

JsonObj = dict[str, object]
REVISION: Final = "2025-11-25"


# ---- helpers -----------------------------------------------------------------------------------


class Client:
    """One connection to a server, speaking JSON-RPC through ``Server.handle``."""

    def __init__(self, server: Server, subject: str, role: str) -> None:
        self.server = server
        self.conn = Connection(
            caller=Caller(subject=subject, role=role, kind="jwt"), transport="test"
        )
        self._next_id = 0

    async def request(self, method: str, params: JsonObj) -> JsonObj:
        self._next_id += 1
        data = json.dumps(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        ).encode()
        with trio.fail_after(30):
            reply = await self.server.handle(data, self.conn)
        assert reply is not None
        message = json.loads(reply.body)
        assert isinstance(message, dict)
        assert message["id"] == self._next_id
        return cast(JsonObj, message)

    async def initialize(self) -> "Client":
        message = await self.request(
            "initialize",
            {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "t"}},
        )
        assert "result" in message, message
        return self

    async def call(self, name: str, arguments: JsonObj | None = None) -> JsonObj:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})


def error_of(message: JsonObj) -> JsonObj:
    error = message.get("error")
    assert isinstance(error, dict), f"expected a JSON-RPC error, got {message!r}"
    return cast(JsonObj, error)


def is_ok(message: JsonObj) -> bool:
    result = message.get("result")
    return isinstance(result, dict) and not result.get("isError", False)


async def _editor_note(uri: str, ctx: CallContext) -> str:
    return "{}"


def gated_server(limiter: RateLimiter | None) -> Server:
    server = Server("coremetry-test", "0")
    register_fixture(server)
    server.register_resource(Resource("test://editors", "editors", _editor_note, min_role="editor"))
    server.set_call_gate(make_call_gate(limiter))
    return server


# ---- the token bucket ----------------------------------------------------------------------------


async def test_burst_then_refill_with_exact_waits(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(per_second=10.0, burst=3)
    assert [limiter.try_acquire("alice") for _ in range(3)] == [None, None, None]
    wait = limiter.try_acquire("alice")
    assert wait == pytest.approx(0.1)
    assert wait is not None
    assert retry_after_ms(wait) == 100
    await trio.sleep(0.05)
    half = limiter.try_acquire("alice")
    assert half is not None
    assert retry_after_ms(half) == 50
    await trio.sleep(0.05)
    assert limiter.try_acquire("alice") is None  # exactly one token is back
    again = limiter.try_acquire("alice")
    assert again is not None
    assert retry_after_ms(again) == 100


async def test_an_idle_bucket_never_holds_more_than_burst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(per_second=5.0, burst=4)
    await trio.sleep(3600)
    assert limiter.try_acquire("alice") is None  # a new identity starts full
    await trio.sleep(3600)
    allowed = [limiter.try_acquire("alice") is None for _ in range(10)]
    assert allowed == [True] * 4 + [False] * 6


async def test_refused_calls_take_no_token(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(per_second=1.0, burst=1)
    assert limiter.try_acquire("alice") is None
    for _ in range(5):
        assert limiter.try_acquire("alice") == pytest.approx(1.0)
    await trio.sleep(1.0)
    assert limiter.try_acquire("alice") is None
    stats = limiter.statistics()
    assert (stats.allowed_total, stats.refused_total) == (2, 5)


async def test_identities_are_isolated(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(per_second=1.0, burst=2)
    assert limiter.try_acquire("alice") is None
    assert limiter.try_acquire("alice") is None
    assert limiter.try_acquire("alice") is not None
    assert limiter.try_acquire("bob") is None
    assert limiter.try_acquire("bob") is None
    assert limiter.try_acquire("bob") is not None


async def test_one_budget_for_all_kinds_unless_per_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = RateLimiter(per_second=1.0, burst=2)
    assert shared.try_acquire("alice", "tool") is None
    assert shared.try_acquire("alice", "resource") is None
    assert shared.try_acquire("alice", "prompt") is not None

    separate = RateLimiter(per_second=1.0, burst=1, per_kind=True)
    assert separate.try_acquire("alice", "tool") is None
    assert separate.try_acquire("alice", "tool") is not None
    assert separate.try_acquire("alice", "resource") is None
    assert separate.try_acquire("alice", "prompt") is None
    assert separate.try_acquire("alice", "prompt") is not None


async def test_memory_is_bounded_lru(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(per_second=1.0, burst=2, max_identities=3)
    for i in range(10):
        assert limiter.try_acquire(f"user-{i}") is None
        assert limiter.statistics().buckets <= 3
    stats = limiter.statistics()
    assert stats.buckets == 3
    assert stats.evicted_active == 7  # all were still refilling: the oldest went first
    # the most recent identities kept their state (one token used of two) ...
    assert limiter.try_acquire("user-9") is None
    assert limiter.try_acquire("user-9") is not None
    # ... an evicted one starts again with a full bucket
    assert limiter.try_acquire("user-0") is None
    assert limiter.try_acquire("user-0") is None


async def test_refilled_buckets_are_evicted_first_and_losslessly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(per_second=1.0, burst=1, max_identities=100)
    for i in range(50):
        assert limiter.try_acquire(f"idle-{i}") is None
    await trio.sleep(2.0)  # every bucket is full again
    assert limiter.try_acquire("newcomer") is None
    stats = limiter.statistics()
    assert stats.buckets == 1
    assert (stats.evicted_idle, stats.evicted_active) == (50, 0)


async def test_a_recently_used_identity_is_not_evicted_before_older_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(per_second=0.001, burst=2, max_identities=2)
    assert limiter.try_acquire("alice") is None
    assert limiter.try_acquire("bob") is None
    assert limiter.try_acquire("alice") is None  # alice is now the most recent
    assert limiter.try_acquire("carol") is None  # evicts bob, the least recently seen
    assert limiter.try_acquire("alice") is not None  # alice kept her (empty) bucket


async def test_recency_counts_the_first_use_after_each_new_identity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The documented approximation: between two new identities a bucket moves to the recent
    # end on its first use only, so bob's later use does not overtake alice's earlier one.
    limiter = RateLimiter(per_second=0.001, burst=3, max_identities=2)
    assert limiter.try_acquire("alice") is None
    assert limiter.try_acquire("bob") is None
    assert limiter.try_acquire("alice") is None  # first use since bob arrived: moves
    assert limiter.try_acquire("bob") is None  # bob already used since then: stays put
    assert limiter.try_acquire("carol") is None  # evicts bob (exact LRU would evict alice)
    assert limiter.statistics().evicted_active == 1
    assert limiter.try_acquire("alice") is None  # alice kept her bucket: 1 token left ...
    assert limiter.try_acquire("alice") is not None  # ... now none
    assert limiter.try_acquire("bob") is None  # bob starts again with a full bucket


async def test_per_kind_buckets_are_evicted_like_identities(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(per_second=0.001, burst=1, per_kind=True, max_identities=2)
    assert limiter.try_acquire("alice", "tool") is None
    assert limiter.try_acquire("alice", "resource") is None
    assert limiter.try_acquire("alice", "prompt") is None  # evicts alice's tool bucket
    stats = limiter.statistics()
    assert (stats.buckets, stats.evicted_active) == (2, 1)
    assert limiter.try_acquire("alice", "resource") is not None
    assert limiter.try_acquire("alice", "tool") is None  # a fresh bucket again


@pytest.mark.parametrize("have", ["", "viewer", "editor", "admin", "Admin", "root", "viewer "])
@pytest.mark.parametrize("need", ["", "viewer", "editor", "admin", "owner"])
async def test_the_gate_answers_the_role_question_like_role_satisfies(have: str, need: str) -> None:
    gate = make_call_gate(None)
    call = GateCall(
        kind="tool", name="t", min_role=need, caller=Caller(subject="s", role=have), transport=""
    )
    if role_satisfies(have, need):
        await gate(call)
    else:
        with pytest.raises(Denied):
            await gate(call)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"per_second": 0.0, "burst": 1}, "per_second"),
        ({"per_second": -1.0, "burst": 1}, "per_second"),
        ({"per_second": float("inf"), "burst": 1}, "per_second"),
        ({"per_second": 1.0, "burst": 0}, "burst"),
        ({"per_second": 1.0, "burst": 1, "max_identities": 0}, "max_identities"),
    ],
)
def test_invalid_limits_are_refused(kwargs: dict[str, float], match: str) -> None:
    per_second = kwargs["per_second"]
    burst = int(kwargs["burst"])
    max_identities = int(kwargs.get("max_identities", 10))
    with pytest.raises(ValueError, match=match):
        RateLimiter(per_second, burst, max_identities=max_identities)


@pytest.mark.parametrize(
    ("wait_s", "expected_ms"),
    [(0.05, 50), (0.1, 100), (0.0501, 51), (1e-12, 1), (0.0, 1), (2.5, 2500), (1 / 3, 334)],
)
def test_retry_after_ms_rounds_up_to_whole_milliseconds(wait_s: float, expected_ms: int) -> None:
    assert retry_after_ms(wait_s) == expected_ms


def test_limiter_from_config() -> None:
    config = load_config(
        environ={
            "COREMETRY_RATE_LIMIT_PER_SECOND": "2.5",
            "COREMETRY_RATE_LIMIT_BURST": "7",
            "COREMETRY_RATE_LIMIT_PER_KIND": "true",
        }
    )
    limiter = RateLimiter.from_config(config.rate_limit)
    assert (limiter.per_second, limiter.burst, limiter.per_kind) == (2.5, 7, True)


# ---- the gate through a real Server ------------------------------------------------------------


async def test_role_denial_is_32001_naming_the_role() -> None:
    server = gated_server(RateLimiter(per_second=100.0, burst=100))
    viewer = await Client(server, "alice", "viewer").initialize()
    error = error_of(await viewer.call("admin_only"))
    assert error["code"] == codes.FORBIDDEN == -32001
    assert (
        error["message"] == "tool 'admin_only' requires role admin; caller 'alice' has role viewer"
    )
    assert error["data"] == {"required_role": "admin"}

    admin = await Client(server, "root", "admin").initialize()
    assert is_ok(await admin.call("admin_only"))


@pytest.mark.parametrize(
    ("role", "allowed"), [("viewer", False), ("editor", True), ("admin", True), ("", False)]
)
async def test_resource_role_gate(role: str, allowed: bool) -> None:
    server = gated_server(None)
    client = await Client(server, "someone", role).initialize()
    message = await client.request("resources/read", {"uri": "test://editors"})
    if allowed:
        assert "result" in message, message
    else:
        error = error_of(message)
        assert error["code"] == -32001
        assert "requires role editor" in str(error["message"])


async def test_denied_calls_spend_no_rate_budget(autojump_clock: trio.testing.MockClock) -> None:
    server = gated_server(RateLimiter(per_second=1.0, burst=2))
    viewer = await Client(server, "alice", "viewer").initialize()
    for _ in range(10):
        assert error_of(await viewer.call("admin_only"))["code"] == -32001
    assert is_ok(await viewer.call("echo", {"text": "a"}))
    assert is_ok(await viewer.call("echo", {"text": "b"}))
    assert error_of(await viewer.call("echo", {"text": "c"}))["code"] == -32000


async def test_burst_of_n_plus_5_refuses_exactly_5(autojump_clock: trio.testing.MockClock) -> None:
    burst = 10
    server = gated_server(RateLimiter(per_second=2.0, burst=burst))
    alice = await Client(server, "alice", "viewer").initialize()
    bob = await Client(server, "bob", "viewer").initialize()

    answers = [await alice.call("echo", {"text": str(i)}) for i in range(burst + 5)]
    assert all(is_ok(m) for m in answers[:burst])
    refused = [error_of(m) for m in answers[burst:]]
    assert len(refused) == 5
    for error in refused:
        assert error["code"] == codes.RATE_LIMITED == -32000
        assert error["data"] == {"retry_after_ms": 500}
        assert error["message"] == "rate limit exceeded for 'alice': retry in 500 ms"

    # another identity in the same instant is unaffected
    assert all([is_ok(await bob.call("echo", {"text": "b"})) for _ in range(burst)])

    # after the advertised wait, alice's calls succeed again (one token per wait)
    await trio.sleep(500 / 1000)
    assert is_ok(await alice.call("echo", {"text": "again"}))
    assert error_of(await alice.call("echo", {"text": "too soon"}))["code"] == -32000
    await trio.sleep(5.0)
    assert all([is_ok(await alice.call("echo", {"text": "x"})) for _ in range(burst)])


async def test_rate_limit_covers_resources_and_prompts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = gated_server(RateLimiter(per_second=1.0, burst=2))
    alice = await Client(server, "alice", "viewer").initialize()
    assert "result" in await alice.request("resources/read", {"uri": "fixture://info"})
    assert "result" in await alice.request(
        "prompts/get", {"name": "greet", "arguments": {"name": "ada"}}
    )
    refused = error_of(await alice.request("resources/read", {"uri": "fixture://echo/x"}))
    assert refused["code"] == -32000
    assert refused["data"] == {"retry_after_ms": 1000}
    refused = error_of(
        await alice.request("prompts/get", {"name": "greet", "arguments": {"name": "ada"}})
    )
    assert refused["code"] == -32000


async def test_lists_and_ping_are_not_rate_limited(autojump_clock: trio.testing.MockClock) -> None:
    server = gated_server(RateLimiter(per_second=1.0, burst=1))
    alice = await Client(server, "alice", "viewer").initialize()
    assert is_ok(await alice.call("echo", {"text": "a"}))
    for method in ("tools/list", "resources/list", "prompts/list", "ping"):
        for _ in range(5):
            assert "result" in await alice.request(method, {}), method


async def test_role_only_gate_without_a_limiter() -> None:
    server = gated_server(None)
    alice = await Client(server, "alice", "viewer").initialize()
    assert all([is_ok(await alice.call("echo", {"text": "x"})) for _ in range(200)])
    assert error_of(await alice.call("admin_only"))["code"] == -32001
