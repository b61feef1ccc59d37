"""Gate + audit (+ authentication) overhead per ``tools/call``, server-side, in one process.

Run: ``python bench/auth_overhead.py [--calls N] [--repeat R] [--flush-every K] [--json PATH]``.

Issue 4's benchmark line: the production call gate (role, then the per-identity rate limiter)
plus the audit observer must add less than 15 % to a trivial call's server-side cost. **That
cost is (E)**: what the server spends on one ``tools/call`` request — the ``/api/mcp``
Streamable HTTP handler's header checks, auth hook, body read, dispatch and response, called
in-process with a canned ASGI scope (no hypercorn, no socket). The headline PASS/FAIL lines
are (F) and (G) against (E); the same ratios against the bare dispatcher (A), which leaves out
the handler, are printed as a stricter reference, also with PASS/FAIL.

Under one ``trio.run`` this script builds the production :class:`coremetry.server.Security`
with ``open_security(config)`` in a temporary data dir (rate budget large enough never to
refuse), creates one viewer service token, and times N sequential ``tools/call echo`` calls per
case (best of R repeats, interleaved case by case, ``time.perf_counter_ns``, after a warm-up):

- (A) the bare dispatcher: default ``role_gate``, no observer. Baseline of (B)-(D).
- (B) A + the production gate ``make_call_gate(RateLimiter)``.
- (C) B + the audit observer ``AuditLog.observe``, with ``AuditLog.run_writer`` running (the
  production ``Security.install``). Every ``--flush-every`` calls (1000) the clock stops and the
  script waits for ``wait_flushed()``, so the queue (10,000 records) never fills: a busy loop
  starves the writer's worker thread of the GIL (see ``bench/README.md``). Drops are counted
  and reported; the "to disk" and "cpu" columns include the writing.
- (D) C + ``Authenticator.__call__(headers)`` per call with the service token as
  ``Authorization: Bearer`` (the cache-hit path after the first call).
- (E) one ``POST /api/mcp`` through ``StreamableHttp`` over A's server, with an auth hook that
  returns the benchmark's caller without reading the headers (as ``anonymous`` does, and as
  stdio has its local caller). **The baseline of the headline.**
- (F) E over C's server (production gate + audit observer): gate + audit, no authentication.
- (G) F with ``security.authenticator`` as the hook: gate + audit + service-token auth.

plus reference rows (each component alone, the authenticator with its cache off), and the cold
cost of the first authentication of a token (cache miss: a worker-thread hop and a database
read).

Every reply is checked (byte-identical to a reference reply that decoded as a successful
result); a wrong reply makes the script exit 1. The PASS/FAIL lines are informational (exit 0
either way). Speed is judged by ratios to baselines measured in the same run; see
``bench/README.md`` for the figures and their spread.
"""

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import trio
from hypercorn.typing import (
    ASGIReceiveEvent,
    ASGISendEvent,
    ConnectionState,
    HTTPScope,
)

from coremetry.access import make_call_gate
from coremetry.auth import Authenticator
from coremetry.config import Config, RateLimitConfig
from coremetry.http_edge import Authenticate, Headers, HttpPolicy
from coremetry.mcp import Caller, Connection, GateCall, Server, Tool, role_gate
from coremetry.server import Security, open_security
from coremetry.transports.streamable_http import StreamableHttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import non_negative, positive, reply_problem
from _mcp_common import EchoArgs, echo, handshake_connection

TARGET_PCT: Final = 15.0
"""Issue 4: gate + audit may add at most this much to a trivial call's server-side cost."""

HANDSHAKE_VERSION: Final = "2025-11-25"
REQUEST_ID: Final = 7
ECHO_TEXT: Final = "hello, coremetry"
TOKEN_NAME: Final = "bench"
DEFAULT_CALLS: Final = 20_000
DEFAULT_REPEAT: Final = 5
DEFAULT_YIELD_EVERY: Final = 100
"""Checkpoint to the trio scheduler every this many calls (as a transport reading a socket
would; it also lets the audit writer run). See ``bench/README.md`` (dispatch_cost)."""
DEFAULT_COLD_SAMPLES: Final = 30
DEFAULT_FLUSH_EVERY: Final = 1000
"""Audited cases wait for the audit writer every this many calls, with the clock stopped (see
``_time_once``); at most the audit queue's size (10,000 by default)."""
HTTP_CASES: Final = frozenset({"E", "EA", "F", "G"})
"""The cases timed through the Streamable HTTP handler; their baseline is (E)."""
NO_CACHE_DIVISOR: Final = 10
"""The cache-off reference row does ``calls // 10`` calls per run (each one hops to a thread)."""
UNLIMITED_RATE: Final = RateLimitConfig(per_second=1e12, burst=1_000_000_000)
"""A rate budget the benchmark can never exhaust (the limiter still does all its work)."""


# -- the tool under test ---------------------------------------------------------------------


def _server() -> Server:
    server = Server("coremetry-bench", "0")
    server.register_tool(
        Tool("echo", "Return the given text unchanged (benchmark tool).", EchoArgs, echo)
    )
    return server


def _request(method: str, params: dict[str, object]) -> bytes:
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": REQUEST_ID, "method": method, "params": params}
    )


TOOLS_CALL: Final = _request("tools/call", {"name": "echo", "arguments": {"text": ECHO_TEXT}})


# -- the rig: servers, security, connections -------------------------------------------------


@dataclass
class Rig:
    """Everything the cases share: the production security objects and the servers."""

    security: Security
    token: str
    headers: Headers
    raw_headers: list[tuple[bytes, bytes]]
    caller: Caller
    bare: Server
    gated: Server
    secured: Server
    first_auth_ns: int


def open_rig(data_dir: Path) -> tuple[Security, str]:
    """Open the production security in ``data_dir`` and create a viewer service token (blocks)."""
    config = Config(data_dir=str(data_dir), rate_limit=UNLIMITED_RATE)
    security = open_security(config)
    token, _info = security.store.create_token(TOKEN_NAME, "viewer", None)
    return security, token


def _raw_headers(token: str) -> list[tuple[bytes, bytes]]:
    """What a Streamable HTTP client sends with each POST (Bearer token included)."""
    return [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", HANDSHAKE_VERSION.encode()),
        (b"authorization", f"Bearer {token}".encode()),
        (b"content-length", str(len(TOOLS_CALL)).encode()),
    ]


async def build_rig(security: Security, token: str) -> Rig:
    """The three servers of the cases; the caller is the token's, as the transport would see."""
    raw = _raw_headers(token)
    headers = Headers(raw)
    # One authentication up front: A, B and C run as the very same Caller as D. It is the
    # process's first service-token verification (trio starts its worker thread; the store
    # records last_used_at, a write done at most once a minute per token): timed on its own.
    start = time.perf_counter_ns()
    caller = await security.authenticator(headers)
    first_auth_ns = time.perf_counter_ns() - start
    bare = _server()
    gated = _server()
    gated.set_call_gate(make_call_gate(security.limiter))
    secured = _server()
    security.install(secured)  # production: make_call_gate(limiter) + AuditLog.observe
    return Rig(security, token, headers, raw, caller, bare, gated, secured, first_auth_ns)


# -- cases -----------------------------------------------------------------------------------

CallFn = Callable[[], Awaitable[bytes | None]]


@dataclass
class Case:
    """One timed case: a zero-argument call returning the reply body.

    ``audited``: the case's calls are audited, so each run is followed by ``wait_flushed()``
    (timed separately: the "to disk" column). ``is_reply`` is False for the component rows,
    which return a marker, not a JSON-RPC reply. ``divisor``: the case does N // divisor calls
    per run (``calls``, set by :func:`run_cases`).
    """

    key: str
    label: str
    call: CallFn
    audited: bool = False
    is_reply: bool = True
    divisor: int = 1
    calls: int = 0
    expected: bytes = b""
    runs_ns: list[int] = field(default_factory=list)
    flushed_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    dropped: int = 0
    bad: int = 0
    first_problem: str | None = None

    def best_us(self, runs: list[int]) -> float:
        """Best of ``runs``, in µs per call (0.0 when it never ran)."""
        return min(runs) / self.calls / 1000.0 if runs else 0.0

    def us_per_call(self) -> float:
        """Best wall-clock run, in µs per call."""
        return self.best_us(self.runs_ns)

    def median_us(self) -> float:
        """Median wall-clock run, in µs per call."""
        return statistics.median(self.runs_ns) / self.calls / 1000.0 if self.runs_ns else 0.0


def _handle_call(server: Server, conn: Connection) -> CallFn:
    async def call() -> bytes | None:
        reply = await server.handle(TOOLS_CALL, conn)
        return None if reply is None else reply.body

    return call


def _authenticated_call(
    server: Server, conn: Connection, authenticate: Authenticator, headers: Headers
) -> CallFn:
    async def call() -> bytes | None:
        # What a transport does per request: resolve the caller, hand it to the core.
        conn.caller = await authenticate(headers)
        reply = await server.handle(TOOLS_CALL, conn)
        return None if reply is None else reply.body

    return call


def _gate_call(gate: Callable[[GateCall], Awaitable[None]], caller: Caller) -> CallFn:
    async def call() -> bytes:
        # Built per call, as Server._pass_gate does.
        await gate(
            GateCall(kind="tool", name="echo", min_role="", caller=caller, transport="bench")
        )
        return b"allowed"

    return call


def _auth_alone(authenticate: Authenticator, headers: Headers) -> CallFn:
    async def call() -> bytes:
        caller = await authenticate(headers)
        return caller.subject.encode()

    return call


def _fixed_caller(caller: Caller) -> Authenticate:
    """A transport auth hook that returns ``caller`` without reading the headers.

    What ``anonymous`` does (and what stdio does with its local caller), but as the same
    Caller every other case runs as.
    """

    async def authenticate(headers: Headers) -> Caller:
        return caller

    return authenticate


def http_scope(raw_headers: list[tuple[bytes, bytes]]) -> HTTPScope:
    """The ASGI scope of ``POST /api/mcp`` from a loopback client."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/mcp",
        "raw_path": b"/api/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": ConnectionState({}),
        "extensions": {},
    }


def _asgi_call(handler: StreamableHttp, raw_headers: list[tuple[bytes, bytes]]) -> CallFn:
    """One POST through the Streamable HTTP ASGI handler, in-process (no socket, no hypercorn).

    The scope and the request event are built once: hypercorn builds them per request whatever
    the app does, so they belong to neither side of the comparison.
    """
    scope = http_scope(raw_headers)
    event: ASGIReceiveEvent = {"type": "http.request", "body": TOOLS_CALL, "more_body": False}
    status = [0]
    chunks: list[bytes] = []

    async def receive() -> ASGIReceiveEvent:
        return event

    async def send(message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message["body"])

    async def call() -> bytes | None:
        chunks.clear()
        await handler(scope, receive, send)
        body = b"".join(chunks)
        return body if status[0] == 200 else b"HTTP %d: " % status[0] + body

    return call


async def build_cases(rig: Rig) -> list[Case]:
    """The timed cases, in table order (the first is the baseline)."""
    security = rig.security
    store, issuer = security.store, security.issuer
    no_cache = Authenticator(store, issuer, cache_ttl_s=0)
    conn_a = await handshake_connection(rig.bare, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    conn_b = await handshake_connection(rig.gated, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    conn_c = await handshake_connection(rig.secured, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    conn_d = await handshake_connection(rig.secured, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    conn_nc = await handshake_connection(rig.secured, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    policy = HttpPolicy()
    fixed = _fixed_caller(rig.caller)
    http_bare = StreamableHttp(rig.bare, policy, authenticate=fixed)
    http_audited = StreamableHttp(rig.secured, policy, authenticate=fixed)
    http_secured = StreamableHttp(rig.secured, policy, authenticate=security.authenticator)
    http_authed = StreamableHttp(rig.bare, policy, authenticate=security.authenticator)
    return [
        Case("A", "(A) bare dispatcher: role_gate, no observer", _handle_call(rig.bare, conn_a)),
        Case("B", "(B) A + production gate (role + rate)", _handle_call(rig.gated, conn_b)),
        Case(
            "C",
            "(C) B + audit observer, writer running",
            _handle_call(rig.secured, conn_c),
            audited=True,
        ),
        Case(
            "D",
            "(D) C + Authenticator, service token (hit)",
            _authenticated_call(rig.secured, conn_d, security.authenticator, rig.headers),
            audited=True,
        ),
        Case(
            "D_nocache",
            "ref: D with the token cache off (ttl 0)",
            _authenticated_call(rig.secured, conn_nc, no_cache, rig.headers),
            audited=True,
            divisor=NO_CACHE_DIVISOR,
        ),
        Case(
            "gate_role",
            "ref: gate alone, default role_gate",
            _gate_call(role_gate, rig.caller),
            is_reply=False,
        ),
        Case(
            "gate_prod",
            "ref: gate alone, production (role + rate)",
            _gate_call(make_call_gate(security.limiter), rig.caller),
            is_reply=False,
        ),
        Case(
            "auth_hit",
            "ref: Authenticator alone, cache hit",
            _auth_alone(security.authenticator, rig.headers),
            is_reply=False,
        ),
        Case(
            "E",
            "(E) HTTP handler in-process, A's server",
            _asgi_call(http_bare, rig.raw_headers),
        ),
        Case(
            "EA",
            "(E') E + Authenticator, no gate or audit",
            _asgi_call(http_authed, rig.raw_headers),
        ),
        Case(
            "F",
            "(F) E + gate + audit (C's server)",
            _asgi_call(http_audited, rig.raw_headers),
            audited=True,
        ),
        Case(
            "G",
            "(G) F + Authenticator, service token (hit)",
            _asgi_call(http_secured, rig.raw_headers),
            audited=True,
        ),
    ]


@dataclass(frozen=True)
class Settings:
    """The command line's choices."""

    calls: int = DEFAULT_CALLS
    repeat: int = DEFAULT_REPEAT
    yield_every: int = DEFAULT_YIELD_EVERY
    flush_every: int = DEFAULT_FLUSH_EVERY
    cold_samples: int = DEFAULT_COLD_SAMPLES


# -- timing ----------------------------------------------------------------------------------


def _record_bad(case: Case, body: bytes | None, count: int = 1) -> None:
    case.bad += count
    if case.first_problem is None:
        problem = reply_problem(body, REQUEST_ID) if case.is_reply else None
        case.first_problem = problem or f"reply differs from the reference: {body!r:.200}"


async def _warm_up(case: Case, calls: int, security: Security) -> None:
    body = await case.call()
    problem = reply_problem(body, REQUEST_ID) if case.is_reply else None
    if problem is not None or body is None:
        case.bad += 1
        case.first_problem = problem or "no reply"
        return
    case.expected = body
    for i in range(1, calls + 1):
        again = await case.call()
        if again != body:
            _record_bad(case, again)
        if i % DEFAULT_YIELD_EVERY == 0:
            await trio.lowlevel.checkpoint()
    if case.audited:
        await security.audit.wait_flushed()


async def _time_once(case: Case, yield_every: int, flush_every: int, security: Security) -> None:
    """One timed run of ``case.calls`` calls, in segments of ``flush_every`` calls.

    The clock stops between segments; there an audited case waits for ``wait_flushed()`` (timed
    on its own: the "to disk" figure), so the audit queue never holds more than one segment's
    records and nothing is dropped. CPU time (all threads, the audit writer's included) runs
    from the first call to the last flush.
    """
    call = case.call
    expected = case.expected
    checkpoint = trio.lowlevel.checkpoint
    audit = security.audit
    dropped_before = audit.statistics().dropped_total
    bad = 0
    last_bad: bytes | None = None
    elapsed = 0
    flushing = 0
    left = case.calls
    await checkpoint()
    gc.collect()
    cpu_start = time.process_time_ns()
    while left > 0:
        segment = min(left, flush_every)
        left -= segment
        every = yield_every if yield_every > 0 else segment + 1
        start = time.perf_counter_ns()
        for i in range(1, segment + 1):
            body = await call()
            if body != expected:
                bad += 1
                last_bad = body
            if i % every == 0:
                await checkpoint()
        stop = time.perf_counter_ns()
        elapsed += stop - start
        if case.audited:
            await audit.wait_flushed()
            flushing += time.perf_counter_ns() - stop
    cpu = time.process_time_ns() - cpu_start
    case.runs_ns.append(elapsed)
    case.flushed_ns.append(elapsed + flushing)
    case.cpu_ns.append(cpu)
    case.dropped += audit.statistics().dropped_total - dropped_before
    if bad:
        _record_bad(case, last_bad, bad)


async def run_cases(rig: Rig, settings: Settings) -> list[Case]:
    """Warm up, then time every case ``repeat`` times, interleaved (the best run counts)."""
    cases = await build_cases(rig)
    for case in cases:
        case.calls = max(1, settings.calls // case.divisor)
        await _warm_up(case, max(50, min(case.calls // 10, 5000)), rig.security)
    for _ in range(settings.repeat):
        for case in cases:
            if case.expected:
                await _time_once(case, settings.yield_every, settings.flush_every, rig.security)
    return cases


@dataclass
class ColdCost:
    """Authentications of the token by fresh Authenticators (empty cache), in ns."""

    auth_ns: list[int] = field(default_factory=list)
    call_ns: list[int] = field(default_factory=list)
    second_auth_ns: list[int] = field(default_factory=list)
    bad: int = 0


async def measure_cold(rig: Rig, samples: int) -> ColdCost:
    """Per sample: a fresh Authenticator's first call (cache miss), then one tools/call.

    A miss verifies the token in a worker thread (``IdentityStore.verify_token``: one indexed
    read). ``second_auth_ns`` is the same Authenticator's next call (a hit), for comparison.
    """
    security = rig.security
    conn = await handshake_connection(rig.secured, rig.caller, HANDSHAKE_VERSION, REQUEST_ID)
    cold = ColdCost()
    for _ in range(samples):
        fresh = Authenticator(security.store, security.issuer)
        await trio.lowlevel.checkpoint()
        start = time.perf_counter_ns()
        conn.caller = await fresh(rig.headers)
        authed = time.perf_counter_ns()
        reply = await rig.secured.handle(TOOLS_CALL, conn)
        done = time.perf_counter_ns()
        await fresh(rig.headers)
        again = time.perf_counter_ns() - done
        if reply_problem(None if reply is None else reply.body, REQUEST_ID) is not None:
            cold.bad += 1
        cold.auth_ns.append(authed - start)
        cold.call_ns.append(done - start)
        cold.second_auth_ns.append(again)
    await security.audit.wait_flushed()
    return cold


@dataclass
class Outcome:
    """Everything one run of the benchmark measured."""

    cases: list[Case]
    cold: ColdCost
    first_auth_ns: int
    written: int
    failed: int
    refused: int


async def run_all(security: Security, token: str, settings: Settings) -> Outcome:
    """Start the audit writer, measure everything, flush and close the audit log."""
    async with trio.open_nursery() as nursery:
        await nursery.start(security.audit.run_writer)
        rig = await build_rig(security, token)
        cold = await measure_cold(rig, settings.cold_samples)
        cases = await run_cases(rig, settings)
        await security.audit.aclose()
    stats = security.audit.statistics()
    return Outcome(
        cases,
        cold,
        rig.first_auth_ns,
        stats.written_total,
        stats.failed_total,
        security.limiter.statistics().refused_total,
    )


# -- output ----------------------------------------------------------------------------------


def _added(value: float, base: float) -> float | None:
    """Percent added by ``value`` over ``base`` (``None`` when either is missing)."""
    return (value / base - 1.0) * 100.0 if base > 0 and value > 0 else None


def _pct(value: float, base: float) -> str:
    added = _added(value, base)
    return f"{added:+.1f}%" if added is not None else "n/a"


def _verdict(label: str, value: float, base: float, unit: str = "µs/call") -> str:
    added = _added(value, base)
    if added is None:
        return f"{label}: n/a"
    verdict = "PASS" if added < TARGET_PCT else "FAIL"
    return (
        f"{label}: {value:.2f} vs {base:.2f} {unit} = {added:+.1f}% "
        f"(target < {TARGET_PCT:.0f}%): {verdict}"
    )


def _us(ns: float) -> float:
    return ns / 1000.0


def _print_table(cases: list[Case]) -> None:
    by_key = {c.key: c for c in cases}
    base, base_cpu = by_key["A"].us_per_call(), by_key["A"].best_us(by_key["A"].cpu_ns)
    http = by_key["E"]
    http_base, http_cpu = http.us_per_call(), http.best_us(http.cpu_ns)
    header = (
        f"{'case':<46} {'µs/call':>8} {'median':>8} {'vs base':>8} "
        f"{'to disk':>8} {'cpu µs':>8} {'cpu vs':>8} {'dropped':>7}"
    )
    print(header)
    print("-" * len(header))
    for case in cases:
        if not case.runs_ns:
            print(f"{case.label:<46} {'n/a':>8}")
            continue
        us, cpu = case.us_per_call(), case.best_us(case.cpu_ns)
        if not case.is_reply or case.key in ("A", "E"):
            vs = cpu_vs = "-"
        elif case.key in HTTP_CASES:
            vs, cpu_vs = _pct(us, http_base) + " E", _pct(cpu, http_cpu) + " E"
        else:
            vs, cpu_vs = _pct(us, base), _pct(cpu, base_cpu)
        flushed = f"{case.best_us(case.flushed_ns):.2f}" if case.audited else "-"
        dropped = f"{case.dropped:d}" if case.audited else "-"
        print(
            f"{case.label:<46} {us:>8.2f} {case.median_us():>8.2f} {vs:>8} "
            f"{flushed:>8} {cpu:>8.2f} {cpu_vs:>8} {dropped:>7}"
        )
    print("-" * len(header))


def report(outcome: Outcome, settings: Settings) -> int:
    """Print the tables and the target lines; return the exit code."""
    cases = outcome.cases
    by_key = {c.key: c for c in cases}
    print(
        f"coremetry gate + audit + auth overhead: {settings.calls} sequential tools/call echo "
        f"per run, best of {settings.repeat}; audited cases flushed every "
        f"{settings.flush_every} calls, clock stopped (python {platform.python_version()}, "
        f"msgspec {msgspec.__version__}, trio {trio.__version__})"
    )
    _print_table(cases)
    a, b, c, d, e, f, g = (by_key[k].us_per_call() for k in "ABCDEFG")
    cpu = {k: by_key[k].best_us(by_key[k].cpu_ns) for k in ("A", "C", "D", "E", "EA", "F", "G")}
    if a > 0:
        print(
            f"added per call, dispatcher: gate {b - a:+.2f} µs, audit {c - b:+.2f} µs, auth "
            f"{d - c:+.2f} µs; gate+audit {c - a:+.2f} µs, all three {d - a:+.2f} µs (by CPU "
            f"incl. the writer: {cpu['C'] - cpu['A']:+.2f} / {cpu['D'] - cpu['A']:+.2f} µs)"
        )
    if e > 0:
        print(
            f"added per call, HTTP handler: gate+audit {f - e:+.2f} µs without auth, "
            f"{g - by_key['EA'].us_per_call():+.2f} µs with auth; auth alone (E' - E) "
            f"{by_key['EA'].us_per_call() - e:+.2f} µs; all three {g - e:+.2f} µs (by CPU incl. "
            f"the writer: {cpu['F'] - cpu['E']:+.2f} / {cpu['G'] - cpu['EA']:+.2f} / "
            f"{cpu['G'] - cpu['E']:+.2f} µs)"
        )
    comp = {k: by_key[k].us_per_call() for k in ("gate_role", "gate_prod", "auth_hit")}
    print(
        f"components alone: role_gate {comp['gate_role']:.2f} µs, production gate "
        f"{comp['gate_prod']:.2f} µs, Authenticator hit {comp['auth_hit']:.2f} µs"
    )
    cold = outcome.cold
    if cold.auth_ns:
        print(
            f"cold token (fresh Authenticator, cache miss; {len(cold.auth_ns)} samples): "
            f"auth best {_us(min(cold.auth_ns)):.0f} µs, median "
            f"{_us(statistics.median(cold.auth_ns)):.0f} µs; auth + tools/call best "
            f"{_us(min(cold.call_ns)):.0f} µs, median {_us(statistics.median(cold.call_ns)):.0f} "
            f"µs; the next auth (hit) median {_us(statistics.median(cold.second_auth_ns)):.1f} µs"
        )
    print(
        f"first service-token verification in the process (worker thread start, last_used_at "
        f"write): {_us(outcome.first_auth_ns):.0f} µs"
    )
    print(
        f"audit: {outcome.written} records written, {sum(c.dropped for c in cases)} dropped "
        f"in timed runs, {outcome.failed} failed; rate limiter refused {outcome.refused}"
    )
    failed = False
    for case in cases:
        if case.bad or case.first_problem is not None:
            failed = True
            print(
                f"ERROR: {case.label}: {case.bad} bad replies; first: {case.first_problem}",
                file=sys.stderr,
            )
    if cold.bad:
        failed = True
        print(f"ERROR: {cold.bad} bad replies in the cold-token calls", file=sys.stderr)
    if outcome.refused:
        failed = True
        print(f"ERROR: the rate limiter refused {outcome.refused} calls", file=sys.stderr)
    print(
        "issue 4 target: gate + audit add < 15% to a trivial call's server-side cost, i.e. to "
        "(E), one tools/call through the /api/mcp handler"
    )
    ea = by_key["EA"].us_per_call()
    print(_verdict("HEADLINE gate + audit, without auth (F vs E)", f, e))
    print(_verdict("HEADLINE gate + audit, with auth (G vs E')", g, ea))
    print(_verdict("stricter: gate + audit + auth itself, vs no auth (G vs E)", g, e))
    print(_verdict("stricter reference, vs the bare dispatcher: gate + audit (C vs A)", c, a))
    print(_verdict("stricter reference, vs the bare dispatcher: + auth (D vs A)", d, a))
    for label, key, base in (
        ("F vs E", "F", "E"),
        ("G vs E'", "G", "EA"),
        ("G vs E", "G", "E"),
        ("C vs A", "C", "A"),
        ("D vs A", "D", "A"),
    ):
        print(
            _verdict(
                f"by CPU incl. the audit writer's thread ({label})", cpu[key], cpu[base], "cpu µs"
            )
            + " (informational)"
        )
    return 1 if failed else 0


def write_json(path: Path, outcome: Outcome, settings: Settings) -> None:
    """Write every figure and raw run as JSON."""
    cases = {c.key: c for c in outcome.cases}
    cold = outcome.cold

    def base_of(case: Case) -> Case:
        return cases["E"] if case.key in HTTP_CASES else cases["A"]

    doc: dict[str, object] = {
        "calls": settings.calls,
        "repeat": settings.repeat,
        "yield_every": settings.yield_every,
        "flush_every": settings.flush_every,
        "python": platform.python_version(),
        "msgspec": msgspec.__version__,
        "trio": trio.__version__,
        "target_pct": TARGET_PCT,
        "cases": {
            c.key: {
                "label": c.label,
                "calls": c.calls,
                "baseline": base_of(c).key,
                "us_per_call": round(c.us_per_call(), 3),
                "median_us_per_call": round(c.median_us(), 3),
                "added_pct": _added(c.us_per_call(), base_of(c).us_per_call()),
                "to_disk_us_per_call": round(c.best_us(c.flushed_ns), 3),
                "cpu_us_per_call": round(c.best_us(c.cpu_ns), 3),
                "cpu_added_pct": _added(c.best_us(c.cpu_ns), base_of(c).best_us(base_of(c).cpu_ns)),
                "dropped": c.dropped,
                "runs_ns": c.runs_ns,
                "flushed_ns": c.flushed_ns,
                "cpu_ns": c.cpu_ns,
                "bad_replies": c.bad,
            }
            for c in outcome.cases
        },
        "cold": {
            "first_auth_in_process_ns": outcome.first_auth_ns,
            "auth_ns": cold.auth_ns,
            "auth_and_call_ns": cold.call_ns,
            "next_auth_ns": cold.second_auth_ns,
        },
        "audit_written": outcome.written,
        "audit_failed": outcome.failed,
        "rate_refused": outcome.refused,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark under trio, print the report."""
    parser = argparse.ArgumentParser(
        description="Gate + audit (+ auth) overhead per tools/call, against the server-side cost "
        "of a trivial call (the HTTP handler in-process) and against the bare dispatcher."
    )
    parser.add_argument("--calls", type=positive, default=DEFAULT_CALLS, help="calls per timed run")
    parser.add_argument(
        "--repeat", type=positive, default=DEFAULT_REPEAT, help="timed runs per case"
    )
    parser.add_argument(
        "--flush-every",
        type=positive,
        default=DEFAULT_FLUSH_EVERY,
        help="audited cases wait for the audit writer every K calls, clock stopped",
    )
    parser.add_argument(
        "--cold-samples",
        type=positive,
        default=DEFAULT_COLD_SAMPLES,
        help="fresh authenticators timed for the cold (cache-miss) cost",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--yield-every",
        type=non_negative,
        default=DEFAULT_YIELD_EVERY,
        help="checkpoint to the trio scheduler every K calls (0: never; see bench/README.md)",
    )
    args = parser.parse_args(argv)
    settings = Settings(
        calls=args.calls,
        repeat=args.repeat,
        yield_every=args.yield_every,
        flush_every=args.flush_every,
        cold_samples=args.cold_samples,
    )
    queue_size = Config().audit.queue_size
    if settings.flush_every > queue_size:
        parser.error(f"--flush-every must be at most the audit queue size ({queue_size})")
    json_path: Path | None = args.json
    with tempfile.TemporaryDirectory(prefix="coremetry-bench-") as tmp:
        security, token = open_rig(Path(tmp))
        try:
            outcome = trio.run(run_all, security, token, settings)
        finally:
            security.close()
    code = report(outcome, settings)
    if json_path is not None:
        write_json(json_path, outcome, settings)
    return code


if __name__ == "__main__":
    sys.exit(main())
