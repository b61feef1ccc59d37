"""The call observer (one record per gated call, whatever its outcome) and the audit log
(:mod:`coremetry.audit`: batched writes, ``tail``, retention, no arguments stored, the admin-only
``coremetry://audit/recent`` resource).

Observer tests drive every outcome class through the fixture entries on a real
:class:`~coremetry.mcp.Server` (time under ``autojump_clock``); audit log tests use a real SQLite
file in ``tmp_path`` and bound every wait with ``trio.fail_after``. Nothing asserts on timings.
"""

import hashlib
import json
import logging
import os
import re
import sqlite3
import sys
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, cast

import msgspec
import pytest
import trio
import trio.testing

from coremetry.access import RateLimiter, make_call_gate
from coremetry.audit import (
    DB_FILENAME,
    NANOS_PER_DAY,
    RECENT_LIMIT,
    RECENT_URI,
    AuditEntry,
    AuditLog,
    register_audit_resource,
)
from coremetry.config import load_config
from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import (
    CALL_OUTCOMES,
    Caller,
    CallRecord,
    Connection,
    PendingCall,
    Reply,
    Server,
)
from coremetry.mcp.observe import LAZY_DIGEST_MAX_BYTES, CallArguments

JsonObj = dict[str, object]
REVISION: Final = "2025-11-25"
SECRET: Final = "s3cr3t-Hunter2-cmk_not-a-real-token"
ARGUMENTS: Final = b'{"text":"hi"}'
"""The raw arguments of the records the audit log tests build."""


# ---- helpers -----------------------------------------------------------------------------------


class Client:
    """One connection to a server, speaking JSON-RPC through ``Server.receive``/``handle``."""

    def __init__(self, server: Server, subject: str, role: str, transport: str = "test") -> None:
        self.server = server
        self.conn = Connection(
            caller=Caller(subject=subject, role=role, kind="service_token", token_name="ci"),
            transport=transport,
        )
        self.next_id = 0

    def build(self, method: str, params: JsonObj, request_id: int | None = None) -> bytes:
        if request_id is None:
            self.next_id += 1
            request_id = self.next_id
        return json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        ).encode()

    async def send(self, data: bytes) -> JsonObj | None:
        with trio.fail_after(30):
            reply = await self.server.handle(data, self.conn)
        if reply is None:
            return None
        message = json.loads(reply.body)
        assert isinstance(message, dict)
        return cast(JsonObj, message)

    async def request(self, method: str, params: JsonObj) -> JsonObj:
        message = await self.send(self.build(method, params))
        assert message is not None
        return message

    async def initialize(self) -> "Client":
        message = await self.request(
            "initialize",
            {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "t"}},
        )
        assert "result" in message, message
        return self

    async def call(self, name: str, arguments: JsonObj | None = None) -> JsonObj:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def observed_server(
    records: list[CallRecord], limiter: RateLimiter | None = None
) -> tuple[Server, RateLimiter]:
    server = Server("coremetry-test", "0")
    register_fixture(server)
    limiter = limiter or RateLimiter(per_second=0.001, burst=1000)
    server.set_call_gate(make_call_gate(limiter))
    server.set_call_observer(records.append)
    return server, limiter


def record(
    *,
    started_at_unix_nano: int,
    sub: str = "alice",
    name: str = "echo",
    outcome: str = "ok",
) -> CallRecord:
    return msgspec.convert(
        {
            "kind": "tool",
            "name": name,
            "caller": {
                "subject": sub,
                "role": "viewer",
                "kind": "service_token",
                "token_name": "ci",
            },
            "transport": "http",
            "outcome": outcome,
            "duration_ms": 1.5,
            "arguments": CallArguments(ARGUMENTS),
            "started_at_unix_nano": started_at_unix_nano,
            "request_id": 1,
        },
        CallRecord,
    )


# ---- the call observer ---------------------------------------------------------------------------


async def test_one_record_per_gated_call_for_every_outcome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    records: list[CallRecord] = []
    server, limiter = observed_server(records)
    alice = await Client(server, "alice", "viewer").initialize()
    mallory = await Client(server, "mallory", "viewer").initialize()
    while limiter.try_acquire("mallory", "tool") is None:
        pass  # mallory's budget is spent
    assert records == [], "initialize is not a gated call"

    async def expect(outcome: str, call: Awaitable[object]) -> CallRecord:
        before = len(records)
        await call
        assert len(records) == before + 1, records[before:]
        assert records[-1].outcome == outcome, records[-1]
        return records[-1]

    ok = await expect("ok", alice.call("echo", {"text": "hi"}))
    assert ok.kind == "tool"
    assert ok.name == "echo"
    assert ok.caller == alice.conn.caller
    assert ok.transport == "test"
    assert ok.request_id == alice.next_id
    assert ok.arguments_sha256 == sha256(json.dumps({"text": "hi"}))
    assert ok.started_at_unix_nano > 0
    assert ok.duration_ms >= 0.0

    for kind in ("timeout", "backend_unavailable", "bad_args", "not_found", "internal"):
        failed = await expect(kind, alice.call("fail", {"kind": kind}))
        assert failed.name == "fail"
    await expect("bad_args", alice.call("echo", {"text": 5}))
    await expect("timeout", alice.call("sleep_ms", {"ms": 3000}))
    denied = await expect("denied", alice.call("admin_only"))
    assert denied.arguments_sha256 == sha256(b"{}")
    await expect("rate_limited", mallory.call("echo", {"text": "x"}))
    unknown_tool = await expect("not_found", alice.call("no_such_tool"))
    assert (unknown_tool.kind, unknown_tool.name, unknown_tool.duration_ms) == (
        "tool",
        "no_such_tool",
        0.0,
    )
    undecodable = await expect("bad_args", alice.request("tools/call", {"name": 5}))
    assert undecodable.name == ""

    info = await expect("ok", alice.request("resources/read", {"uri": "fixture://info"}))
    assert (info.kind, info.name, info.arguments_sha256) == (
        "resource",
        "fixture://info",
        sha256("fixture://info"),
    )
    templated = await expect("ok", alice.request("resources/read", {"uri": "fixture://echo/abc"}))
    assert templated.name == "fixture://echo/{text}"  # the variables are arguments
    assert templated.arguments_sha256 == sha256("fixture://echo/abc")
    missing = await expect("not_found", alice.request("resources/read", {"uri": "nowhere://x"}))
    assert (missing.kind, missing.name) == ("resource", "nowhere://x")

    prompt_args = {"style": "pirate", "name": "ada"}
    prompt = await expect(
        "ok", alice.request("prompts/get", {"name": "greet", "arguments": prompt_args})
    )
    assert (prompt.kind, prompt.name) == ("prompt", "greet")
    canonical = json.dumps(prompt_args, sort_keys=True, separators=(",", ":"))
    assert prompt.arguments_sha256 == sha256(canonical)
    await expect("bad_args", alice.request("prompts/get", {"name": "greet"}))
    await expect("not_found", alice.request("prompts/get", {"name": "nope"}))

    # a client cancel: no answer, one "cancelled" record
    pending = server.receive(
        alice.build("tools/call", {"name": "sleep_ms", "arguments": {"ms": 1000}}), alice.conn
    )
    assert isinstance(pending, PendingCall)
    before = len(records)
    answers: list[Reply | None] = []

    async def run(call: PendingCall) -> None:
        answers.append(await call.run())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, pending)
        await trio.sleep(0.05)
        cancel: JsonObj = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": alice.next_id},
        }
        assert server.receive(json.dumps(cancel).encode(), alice.conn) is None
    assert answers == [None]
    assert [r.outcome for r in records[before:]] == ["cancelled"]

    # torn down from outside (the connection's nursery is cancelled): "cancelled" too
    pending = server.receive(
        alice.build("tools/call", {"name": "sleep_ms", "arguments": {"ms": 1000}}), alice.conn
    )
    assert isinstance(pending, PendingCall)
    before = len(records)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, pending)
        await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert [r.outcome for r in records[before:]] == ["cancelled"]

    seen = {r.outcome for r in records}
    assert seen == set(CALL_OUTCOMES), set(CALL_OUTCOMES) - seen


async def test_nothing_recorded_for_ungated_methods() -> None:
    records: list[CallRecord] = []
    server, _ = observed_server(records)
    alice = await Client(server, "alice", "viewer").initialize()
    ungated: list[tuple[str, JsonObj]] = [
        ("ping", {}),
        ("tools/list", {}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("prompts/list", {}),
        ("logging/setLevel", {"level": "info"}),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "a"},
            },
        ),
        ("no/such/method", {}),
    ]
    for method, params in ungated:
        await alice.request(method, params)
    # a tools/call sent as a notification is never answered, hence not a call
    notification = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}}
    assert await alice.send(json.dumps(notification).encode()) is None
    assert records == []


async def test_stateless_calls_and_batches_are_recorded_once_each() -> None:
    records: list[CallRecord] = []
    server, _ = observed_server(records)
    client = Client(server, "alice", "viewer")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    message = await client.request(
        "tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": meta}
    )
    assert "result" in message
    missing = await client.request("resources/read", {"uri": "nowhere://y", "_meta": meta})
    assert "error" in missing
    assert [(r.kind, r.outcome) for r in records] == [("tool", "ok"), ("resource", "not_found")]


async def test_a_failing_observer_never_breaks_the_call(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("coremetry-test", "0")
    register_fixture(server)

    def boom(record: CallRecord) -> None:
        raise RuntimeError("observer bug")

    server.set_call_observer(boom)
    alice = await Client(server, "alice", "viewer").initialize()
    with caplog.at_level(logging.ERROR, logger="coremetry.mcp"):
        answer = await alice.call("echo", {"text": "still answered"})
        unknown = await alice.call("nope")
    result = answer["result"]
    assert isinstance(result, dict)
    assert result["content"] == [{"type": "text", "text": "still answered"}]
    assert "error" in unknown
    failures = [r for r in caplog.records if "call observer failed" in r.getMessage()]
    assert len(failures) == 2


async def test_removing_the_observer() -> None:
    records: list[CallRecord] = []
    server, _ = observed_server(records)
    alice = await Client(server, "alice", "viewer").initialize()
    await alice.call("echo", {"text": "a"})
    server.set_call_observer(None)
    await alice.call("echo", {"text": "b"})
    await alice.call("nope")
    assert len(records) == 1


# ---- the audit log -------------------------------------------------------------------------------


async def test_writes_and_tail_newest_first(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "data" / DB_FILENAME, batch_size=3)
    now = time.time_ns()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(10):
                audit.observe(record(started_at_unix_nano=now + i, sub=("alice", "bob")[i % 2]))
            await audit.aclose()
    stats = audit.statistics()
    assert (stats.written_total, stats.dropped_total, stats.queued) == (10, 0, 0)

    entries = audit.tail()
    assert [e.at_unix_nano for e in entries] == [now + i for i in reversed(range(10))]
    newest = entries[0]
    assert newest == AuditEntry(
        at_unix_nano=now + 9,
        sub="bob",
        token_name="ci",
        kind="service_token",
        role="viewer",
        transport="http",
        call_kind="tool",
        name="echo",
        arguments_sha256=sha256(ARGUMENTS),
        outcome="ok",
        duration_ms=1.5,
        source="mcp",
    )
    assert [e.at_unix_nano for e in audit.tail(3)] == [now + 9, now + 8, now + 7]
    # It names callers and digests their arguments: private to the server's user.
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "data" / DB_FILENAME).stat().st_mode & 0o777 == 0o600
    alice = audit.tail(50, sub="alice")
    assert [e.at_unix_nano for e in alice] == [now + 8, now + 6, now + 4, now + 2, now]
    assert audit.tail(0) == []
    assert audit.tail(5, sub="nobody") == []


async def test_cli_tail_prints_the_newest_records_oldest_first(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    audit = AuditLog(data_dir / DB_FILENAME, batch_size=3)
    now = time.time_ns()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(5):
                audit.observe(record(started_at_unix_nano=now + i, sub="alice"))
            await audit.aclose()
        done = await trio.run_process(
            [sys.executable, "-m", "coremetry", "audit", "tail", "-n", "3"],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "COREMETRY_DATA_DIR": str(data_dir)},
            check=False,
            start_new_session=True,
        )
    assert done.returncode == 0, done.stderr
    times = [json.loads(line)["at_unix_nano"] for line in done.stdout.decode().splitlines()]
    assert times == [now + 2, now + 3, now + 4]  # the 3 newest, the newest last (as tail)


async def test_tail_of_a_missing_database_is_empty(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "absent" / DB_FILENAME)
    assert audit.tail() == []
    assert not (tmp_path / "absent").exists()


async def test_table_lives_beside_other_tables(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    other = sqlite3.connect(path)
    with other:
        other.execute("CREATE TABLE users (name TEXT)")
        other.execute("INSERT INTO users VALUES ('ada')")
    other.close()
    audit = AuditLog(path)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            audit.observe(record(started_at_unix_nano=time.time_ns()))
            await audit.aclose()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]
        assert conn.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(audit_log)")}
        assert {"audit_log_at", "audit_log_sub_at"} <= indexes
    finally:
        conn.close()


async def test_retention_deletes_old_rows(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    now = time.time_ns()
    old = now - 40 * NANOS_PER_DAY
    keep_forever = AuditLog(path, retention_days=0)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(keep_forever.run_writer)
            keep_forever.observe(record(started_at_unix_nano=old, name="old"))
            keep_forever.observe(record(started_at_unix_nano=now, name="new"))
            await keep_forever.aclose()
    assert keep_forever.purge_expired() == 0
    assert [e.name for e in keep_forever.tail()] == ["new", "old"]

    # the writer enforces retention when it starts (then periodically)
    audit = AuditLog(path, retention_days=30)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            await audit.aclose()
    assert [e.name for e in audit.tail()] == ["new"]
    assert audit.statistics().purged_total == 1

    # and on demand, relative to a given time
    assert audit.purge_expired(now_unix_nano=now + 31 * NANOS_PER_DAY) == 1
    assert audit.tail() == []


async def test_retention_runs_periodically_in_the_writer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / DB_FILENAME
    audit = AuditLog(path, retention_days=1, retention_interval_s=60.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run_writer)
        audit.observe(record(started_at_unix_nano=time.time_ns() - 2 * NANOS_PER_DAY))
        await audit.wait_flushed()
        assert audit.statistics().written_total == 1
        assert audit.statistics().purged_total == 0
        # The writer wakes for retention at t=60 s (and finishes it before it sees the close).
        await trio.sleep(120.0)
        await audit.aclose()
    assert audit.statistics().purged_total == 1
    assert audit.tail() == []


async def test_a_full_queue_drops_and_warns_never_blocks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    audit = AuditLog(tmp_path / DB_FILENAME, queue_size=2)
    now = time.time_ns()
    with caplog.at_level(logging.WARNING, logger="coremetry.audit"):
        for i in range(5):
            audit.observe(record(started_at_unix_nano=now + i))  # no writer: nothing drains
    assert audit.statistics().dropped_total == 3
    warnings = [r for r in caplog.records if r.name == "coremetry.audit"]
    assert len(warnings) == 1
    assert "queue is full" in warnings[0].getMessage()
    with trio.fail_after(30):
        await audit.aclose()  # without a writer, aclose writes what is queued itself
    assert [e.at_unix_nano for e in audit.tail()] == [now + 1, now]
    audit.observe(record(started_at_unix_nano=now))  # after close: dropped, not raised
    assert audit.statistics().dropped_total == 4


async def test_a_large_batch_is_written_whole_in_queue_order(tmp_path: Path) -> None:
    # 100 records in one batch: three multi-row INSERTs of 32 and four single-row ones.
    audit = AuditLog(tmp_path / DB_FILENAME)
    for i in range(100):
        audit.observe(record(started_at_unix_nano=1 + i // 10, name=f"n{i}"))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            await audit.aclose()
    entries = audit.tail(200)
    # Newest start first, ties by insertion order reversed: exactly the queue order reversed.
    assert [e.name for e in entries] == [f"n{i}" for i in reversed(range(100))]
    assert {e.arguments_sha256 for e in entries} == {sha256(ARGUMENTS)}
    assert audit.statistics().written_total == 100


async def test_cancelled_writer_still_flushes_the_queue(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / DB_FILENAME)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(50):
                audit.observe(record(started_at_unix_nano=i + 1))
            nursery.cancel_scope.cancel()
    assert len(audit.tail(100)) == 50


async def test_the_writer_gathers_calls_into_one_batch_and_flushes_on_demand(
    tmp_path: Path,
) -> None:
    """Records arriving within ``gather_s`` wait for one transaction; ``wait_flushed`` (and the
    recent-calls resource, which awaits it) writes them at once, not ``gather_s`` later."""
    audit = AuditLog(tmp_path / DB_FILENAME, gather_s=30.0)
    with trio.fail_after(10):  # far below gather_s: a write that waited for it fails here
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(3):
                audit.observe(record(started_at_unix_nano=i + 1, name=f"n{i}"))
                await trio.sleep(0.05)
            assert audit.statistics().written_total == 0  # still gathering
            await audit.wait_flushed()
            assert [e.name for e in audit.tail()] == ["n2", "n1", "n0"]
            await audit.aclose()


async def test_a_full_batch_is_written_without_waiting_for_the_gather(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / DB_FILENAME, gather_s=30.0, batch_size=4)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(4):
                audit.observe(record(started_at_unix_nano=i + 1))
            # The writer offers no event for "written" short of wait_flushed (which ends the
            # gather itself): poll its counter.
            while audit.statistics().written_total < 4:  # noqa: ASYNC110
                await trio.sleep(0.01)
            audit.observe(record(started_at_unix_nano=9, name="late"))
            await audit.aclose()  # closing writes what is gathering at once
    assert audit.tail(1)[0].name == "late"
    assert audit.statistics().written_total == 5


def test_invalid_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retention_days"):
        AuditLog(tmp_path / DB_FILENAME, retention_days=-1)
    with pytest.raises(ValueError, match="queue_size"):
        AuditLog(tmp_path / DB_FILENAME, queue_size=0)
    with pytest.raises(ValueError, match="gather_s"):
        AuditLog(tmp_path / DB_FILENAME, gather_s=-1)


def test_from_config(tmp_path: Path) -> None:
    config = load_config(
        environ={
            "COREMETRY_DATA_DIR": str(tmp_path),
            "COREMETRY_AUDIT_RETENTION_DAYS": "7",
        }
    )
    audit = AuditLog.from_config(config)
    assert audit.path == tmp_path / DB_FILENAME
    assert audit.retention_days == 7


async def test_no_argument_ever_reaches_the_database(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / DB_FILENAME)
    server = Server("coremetry-test", "0")
    register_fixture(server)
    server.set_call_gate(make_call_gate(None))
    records: list[CallRecord] = []

    def observe(call: CallRecord) -> None:
        records.append(call)
        audit.observe(call)

    server.set_call_observer(observe)
    alice = await Client(server, "alice", "viewer").initialize()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            await alice.call("echo", {"text": SECRET})
            await alice.call("echo", {"text": 1, "password": SECRET})
            await alice.call("admin_only", {"token": SECRET})
            await alice.request("prompts/get", {"name": "greet", "arguments": {"name": SECRET}})
            await alice.request("resources/read", {"uri": f"fixture://echo/{SECRET}"})
            await alice.request("tools/call", {"name": 5, "arguments": {"x": SECRET}})
            await audit.aclose()
    assert len(audit.tail()) == len(records) == 6
    for call in records:
        assert SECRET not in repr(call)
        assert SECRET not in msgspec.json.encode(call, enc_hook=digest_only).decode()
    assert_not_in_files(tmp_path, SECRET.encode())


def digest_only(obj: object) -> str:
    """An ``enc_hook`` for JSON-encoding a CallRecord: its arguments as their digest."""
    if isinstance(obj, CallArguments):
        return obj.sha256()
    raise NotImplementedError(type(obj))


async def test_the_digest_is_computed_when_first_read_not_on_the_call_path() -> None:
    records: list[CallRecord] = []
    server, _ = observed_server(records)
    alice = await Client(server, "alice", "viewer").initialize()
    await alice.call("echo", {"text": SECRET})
    (small,) = records
    assert repr(small.arguments) == "CallArguments(<not digested yet>)"
    assert SECRET not in repr(small)
    expected = sha256(json.dumps({"text": SECRET}))
    assert small.arguments_sha256 == expected
    assert repr(small.arguments) == f"CallArguments({expected})"
    assert small.arguments_sha256 == expected  # kept

    # Larger arguments are digested when the call is set up: a queued record stays small.
    big: JsonObj = {"text": "x" * LAZY_DIGEST_MAX_BYTES}
    await alice.call("echo", big)
    assert repr(records[-1].arguments) == f"CallArguments({sha256(json.dumps(big))})"
    prompt_args = {"name": "y" * LAZY_DIGEST_MAX_BYTES, "style": "plain"}
    await alice.request("prompts/get", {"name": "greet", "arguments": prompt_args})
    canonical = json.dumps(prompt_args, sort_keys=True, separators=(",", ":"))
    assert repr(records[-1].arguments) == f"CallArguments({sha256(canonical)})"


def test_call_arguments_digest_from_several_threads_agree() -> None:
    for arguments in (CallArguments(b'{"a":1}'), CallArguments("x://y"), CallArguments({"b": "2"})):
        with ThreadPoolExecutor(max_workers=4) as pool:
            digests = set(pool.map(CallArguments.sha256, [arguments] * 8))
        assert len(digests) == 1
    assert CallArguments(b"{}").sha256() == sha256(b"{}")
    assert CallArguments({"b": "2", "a": "1"}).sha256() == sha256('{"a":"1","b":"2"}')


def assert_not_in_files(directory: Path, secret: bytes) -> None:
    files = [p for p in directory.iterdir() if p.name.startswith(DB_FILENAME)]
    assert files
    for path in files:
        assert secret not in path.read_bytes(), path.name


async def test_admin_resource_hidden_from_viewers_readable_by_admins(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / DB_FILENAME, gather_s=30.0)  # the read itself must flush
    server = Server("coremetry-test", "0")
    register_fixture(server)
    register_audit_resource(server, audit)
    server.set_call_gate(make_call_gate(None))
    server.set_call_observer(audit.observe)
    viewer = await Client(server, "alice", "viewer").initialize()
    editor = await Client(server, "ed", "editor").initialize()
    admin = await Client(server, "root", "admin").initialize()

    async def listed(client: Client) -> list[object]:
        result = (await client.request("resources/list", {}))["result"]
        assert isinstance(result, dict)
        resources = result["resources"]
        assert isinstance(resources, list)
        return [r["uri"] for r in resources if isinstance(r, dict)]

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            assert RECENT_URI not in await listed(viewer)
            assert RECENT_URI not in await listed(editor)
            assert RECENT_URI in await listed(admin)
            for client in (viewer, editor):
                error = (await client.request("resources/read", {"uri": RECENT_URI}))["error"]
                assert isinstance(error, dict)
                assert error["code"] == -32001
                assert "requires role admin" in str(error["message"])
            for i in range(RECENT_LIMIT + 5):
                await admin.call("echo", {"text": str(i)})
            message = await admin.request("resources/read", {"uri": RECENT_URI})
            await audit.aclose()

    result = message["result"]
    assert isinstance(result, dict)
    contents = result["contents"]
    assert isinstance(contents, list)
    assert contents[0]["uri"] == RECENT_URI
    assert contents[0]["mimeType"] == "application/json"
    text = contents[0]["text"]
    assert len(text.encode()) <= 16 * 1024  # the default output budget
    body = json.loads(text)
    entries = body["entries"]
    assert isinstance(entries, list)
    # 100 rows do not fit 16 KiB: the newest that fit, said so.
    assert 0 < len(entries) == body["shown"] < RECENT_LIMIT
    assert body["truncated"] is True
    assert "coremetry audit tail" in body["note"]
    times = [e["time"] for e in entries]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", t) for t in times)
    assert times == sorted(times, reverse=True)
    fields = set(msgspec.structs.asdict(audit.tail(1)[0])) - {"at_unix_nano"} | {"time"}
    assert set(entries[0]) == fields
    assert entries[0]["sub"] == "root"
    assert entries[0]["duration_ms"] == round(entries[0]["duration_ms"], 3)
    # the refused reads were audited too, and so was the admin's own read
    denied = [e for e in audit.tail(500) if e.outcome == "denied"]
    assert {(e.sub, e.call_kind, e.name) for e in denied} == {
        ("alice", "resource", RECENT_URI),
        ("ed", "resource", RECENT_URI),
    }
    assert audit.tail(1)[0].name == RECENT_URI
    assert audit.tail(1)[0].sub == "root"


class FirstBatchBreaks(AuditLog):
    """An audit log whose first batch meets a bug (not a database error) in the writer."""

    broken = False

    def _write(self, batch: Sequence[CallRecord]) -> None:
        if not self.broken:
            self.broken = True
            raise TypeError("a record that cannot be encoded")
        super()._write(batch)


async def test_a_bug_writing_one_batch_is_logged_and_the_writer_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    audit = FirstBatchBreaks(tmp_path / DB_FILENAME, batch_size=2)
    now = time.time_ns()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(audit.run_writer)
            for i in range(2):
                audit.observe(record(started_at_unix_nano=now + i))
            await audit.wait_flushed()
            for i in range(2, 5):
                audit.observe(record(started_at_unix_nano=now + i))
            await audit.aclose()
    stats = audit.statistics()
    assert (stats.written_total, stats.failed_total) == (3, 2)
    assert [e.at_unix_nano for e in audit.tail()] == [now + 4, now + 3, now + 2]
    failures = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
