"""Dispatch cost per MCP request through ``coremetry.mcp.Server.handle``.

Run: ``python bench/dispatch_cost.py [--calls N] [--repeat R] [--json PATH]``.

Each case times N sequential ``await server.handle(request, conn)`` calls on pre-encoded request
bytes (best of R repeats, ``time.perf_counter_ns``, after a warm-up) and reports microseconds per
call plus the ratio to the *floor*: a bare msgspec decode of the same tools/call request into
small Structs, an await of a trivial async function and a msgspec encode of a canned response,
measured in the same run with the same loop. Speed is judged by that ratio, never by a timed
assertion in a test. See ``bench/README.md``.

Every reply is checked: it must be byte-identical to a reference reply of the same case that was
decoded and found to be a result (no ``error``, ``isError`` absent or false). Any other reply
makes the script exit 1. The speed target line is informational (exit 0 either way).
"""

import argparse
import gc
import json
import platform
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import trio
from msgspec import Struct

from coremetry.mcp import Caller, Connection, GateCall, Server, Tool, role_gate
from coremetry.mcp.wire import CallToolResult, ResultResponse, TextContent

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import non_negative, positive, reply_problem
from _mcp_common import EchoArgs, echo, handshake_connection

TARGET_US: Final = 25.0
"""Informational target for case (1), handshake-era tools/call, in µs per call."""

HANDSHAKE_VERSION: Final = "2025-11-25"
STATELESS_VERSION: Final = "2026-07-28"
REQUEST_ID: Final = 7
ECHO_TEXT: Final = "hello, coremetry"
DEFAULT_CALLS: Final = 20_000
DEFAULT_REPEAT: Final = 5
DEFAULT_YIELD_EVERY: Final = 100
"""Checkpoint to the trio scheduler every this many calls, as a transport reading from a socket
would. Without it trio never prunes its deadline heap (each tools/call registers a deadline), so
the heap keeps one stale entry and one dead CancelScope per call and memory grows (~200 B/call)."""

BENCH_CALLER: Final = Caller(subject="bench", role="viewer")


# -- the tool under test ---------------------------------------------------------------------


async def open_gate(call: GateCall) -> None:
    """A custom gate that allows everything (to show what an awaited gate costs)."""
    return None


# -- the floor -------------------------------------------------------------------------------


class _FloorParams(Struct, kw_only=True):
    name: str
    arguments: EchoArgs


class _FloorRequest(Struct, kw_only=True):
    jsonrpc: str
    id: int | str
    method: str
    params: _FloorParams


_FLOOR_DECODER: Final = msgspec.json.Decoder(_FloorRequest)
_FLOOR_ENCODER: Final = msgspec.json.Encoder()
_CANNED: Final = ResultResponse(
    id=REQUEST_ID, result=CallToolResult(content=[TextContent(text=ECHO_TEXT)])
)


async def _floor_handler(text: str) -> str:
    return text


async def floor_call(data: bytes) -> bytes:
    """What any dispatcher on msgspec + trio pays at least: decode, await, encode."""
    request = _FLOOR_DECODER.decode(data)
    await _floor_handler(request.params.arguments.text)
    return _FLOOR_ENCODER.encode(_CANNED)


async def floor_scoped_call(data: bytes) -> bytes:
    """The floor plus one deadlined trio cancel scope: the least a cancellable call costs."""
    with trio.CancelScope(deadline=trio.current_time() + 30.0):
        request = _FLOOR_DECODER.decode(data)
        await _floor_handler(request.params.arguments.text)
    return _FLOOR_ENCODER.encode(_CANNED)


# -- cases -----------------------------------------------------------------------------------

CallFn = Callable[[], Awaitable[bytes | None]]


@dataclass
class Case:
    """One timed case: a zero-argument call returning the reply body.

    ``is_reply`` is False for the gate-alone rows, which return a marker, not a JSON-RPC reply.
    """

    key: str
    label: str
    call: CallFn
    is_reply: bool = True
    expected: bytes = b""
    runs_ns: list[int] = field(default_factory=list)
    bad: int = 0
    first_problem: str | None = None

    def us_per_call(self, calls: int) -> float:
        """Best run, in µs per call (0.0 when it never ran)."""
        return min(self.runs_ns) / calls / 1000.0 if self.runs_ns else 0.0

    def median_us(self, calls: int) -> float:
        """Median run, in µs per call (0.0 when it never ran)."""
        runs = sorted(self.runs_ns)
        return runs[len(runs) // 2] / calls / 1000.0 if runs else 0.0


def _request(method: str, params: dict[str, object]) -> bytes:
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": REQUEST_ID, "method": method, "params": params}
    )


def _stateless_meta() -> dict[str, object]:
    return {
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }


def _server(*, gate: bool = False) -> Server:
    server = Server("coremetry-bench", "0")
    server.register_tool(
        Tool("echo", "Return the given text unchanged (benchmark tool).", EchoArgs, echo)
    )
    if gate:
        server.set_call_gate(open_gate)
    return server


def _handle_call(server: Server, data: bytes, conn: Connection) -> CallFn:
    async def call() -> bytes | None:
        reply = await server.handle(data, conn)
        return None if reply is None else reply.body

    return call


def _gate_call(gate: Callable[[GateCall], Awaitable[None]]) -> CallFn:
    async def call() -> bytes:
        # Built per call, as Server._pass_gate does.
        await gate(
            GateCall(kind="tool", name="echo", min_role="", caller=BENCH_CALLER, transport="bench")
        )
        return b"allowed"

    return call


async def build_cases() -> list[Case]:
    """Set up servers, connections and pre-encoded requests for every case (table order)."""
    tools_call = _request("tools/call", {"name": "echo", "arguments": {"text": ECHO_TEXT}})
    stateless_call = _request(
        "tools/call",
        {"name": "echo", "arguments": {"text": ECHO_TEXT}, "_meta": _stateless_meta()},
    )
    tools_list = _request("tools/list", {})
    ping = _request("ping", {})

    server = _server()
    gated = _server(gate=True)
    conn = await handshake_connection(server, BENCH_CALLER, HANDSHAKE_VERSION, REQUEST_ID)
    gated_conn = await handshake_connection(gated, BENCH_CALLER, HANDSHAKE_VERSION, REQUEST_ID)
    stateless_conn = Connection(caller=BENCH_CALLER, transport="bench")

    async def floor() -> bytes:
        return await floor_call(tools_call)

    async def floor_scoped() -> bytes:
        return await floor_scoped_call(tools_call)

    return [
        Case(
            "handshake_call",
            "(1) tools/call, handshake 2025-11-25",
            _handle_call(server, tools_call, conn),
        ),
        Case(
            "stateless_call",
            "(2) tools/call, stateless 2026-07-28 (_meta)",
            _handle_call(server, stateless_call, stateless_conn),
        ),
        Case("tools_list", "(3) tools/list, handshake", _handle_call(server, tools_list, conn)),
        Case("ping", "(4) ping, handshake", _handle_call(server, ping, conn)),
        Case("floor", "(5) FLOOR: decode + await + encode", floor),
        Case(
            "gated_call",
            "(6) tools/call, custom async gate",
            _handle_call(gated, tools_call, gated_conn),
        ),
        Case("floor_scoped", "ref: floor + 1 deadlined trio.CancelScope", floor_scoped),
        Case("gate_role", "ref: gate alone, default role_gate", _gate_call(role_gate), False),
        Case("gate_custom", "ref: gate alone, custom async gate", _gate_call(open_gate), False),
    ]


# -- timing ----------------------------------------------------------------------------------


def _record_bad(case: Case, body: bytes | None, count: int = 1) -> None:
    case.bad += count
    if case.first_problem is None:
        problem = reply_problem(body, REQUEST_ID) if case.is_reply else None
        case.first_problem = problem or f"reply differs from the reference: {body!r:.200}"


async def _warm_up(case: Case, calls: int) -> None:
    body = await case.call()
    problem = reply_problem(body, REQUEST_ID) if case.is_reply else None
    if problem is not None or body is None:
        case.bad += 1
        case.first_problem = problem or "no reply"
        return
    case.expected = body
    for _ in range(calls):
        again = await case.call()
        if again != body:
            _record_bad(case, again)


async def _time_once(case: Case, calls: int, yield_every: int) -> int:
    call = case.call
    expected = case.expected
    checkpoint = trio.lowlevel.checkpoint
    every = yield_every if yield_every > 0 else calls + 1
    bad = 0
    last_bad: bytes | None = None
    await checkpoint()
    gc.collect()
    start = time.perf_counter_ns()
    for i in range(1, calls + 1):
        body = await call()
        if body != expected:
            bad += 1
            last_bad = body
        if i % every == 0:
            await checkpoint()
    elapsed = time.perf_counter_ns() - start
    if bad:
        _record_bad(case, last_bad, bad)
    return elapsed


async def run_cases(calls: int, repeat: int, yield_every: int) -> list[Case]:
    """Warm up, then time every case ``repeat`` times, interleaved (the best run counts)."""
    cases = await build_cases()
    warm = max(200, min(calls // 10, 5000))
    for case in cases:
        await _warm_up(case, warm)
    for _ in range(repeat):
        for case in cases:
            if case.expected:
                case.runs_ns.append(await _time_once(case, calls, yield_every))
    return cases


# -- output ----------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def report(cases: list[Case], calls: int, repeat: int, rss_imports_mib: float) -> int:
    """Print the table and the target line; return the exit code."""
    by_key = {c.key: c for c in cases}
    floor_us = by_key["floor"].us_per_call(calls)
    print(
        f"coremetry dispatch cost: {calls} sequential calls per run, best of {repeat} "
        f"(python {platform.python_version()}, msgspec {msgspec.__version__}, "
        f"trio {trio.__version__})"
    )
    print(f"{'case':<48} {'µs/call':>8} {'median':>8} {'x floor':>8}")
    print("-" * 75)
    for case in cases:
        if not case.runs_ns:
            print(f"{case.label:<48} {'n/a':>8}")
            continue
        us = case.us_per_call(calls)
        ratio = f"{us / floor_us:7.1f}x" if floor_us > 0 else "    n/a"
        print(f"{case.label:<48} {us:>8.2f} {case.median_us(calls):>8.2f} {ratio:>8}")
    handshake = by_key["handshake_call"].us_per_call(calls)
    gated = by_key["gated_call"].us_per_call(calls)
    print("-" * 75)
    if handshake > 0 and gated > 0:
        print(
            f"(6) - (1), custom async gate vs default role_gate: {gated - handshake:+.2f} µs/call"
        )
    print(f"peak RSS: {peak_rss_mib():.1f} MiB (after imports: {rss_imports_mib:.1f} MiB)")
    failed = False
    for case in cases:
        if case.bad or case.first_problem is not None:
            failed = True
            print(
                f"ERROR: {case.label}: {case.bad} bad replies; first: {case.first_problem}",
                file=sys.stderr,
            )
    verdict = "PASS" if 0 < handshake < TARGET_US else "FAIL"
    figure = f"{handshake:.1f}" if handshake > 0 else "n/a"
    print(f"dispatch tools/call: {figure} µs/call (target < {TARGET_US:.0f} µs): {verdict}")
    return 1 if failed else 0


def write_json(path: Path, cases: list[Case], calls: int, repeat: int, yield_every: int) -> None:
    """Write the figures as JSON (µs/call, ratio to the floor, raw runs)."""
    floor_us = next(c for c in cases if c.key == "floor").us_per_call(calls)
    doc: dict[str, object] = {
        "calls": calls,
        "repeat": repeat,
        "yield_every": yield_every,
        "python": platform.python_version(),
        "msgspec": msgspec.__version__,
        "trio": trio.__version__,
        "peak_rss_mib": round(peak_rss_mib(), 2),
        "target_us": TARGET_US,
        "cases": {
            c.key: {
                "label": c.label,
                "us_per_call": round(c.us_per_call(calls), 3),
                "median_us_per_call": round(c.median_us(calls), 3),
                "ratio_to_floor": (
                    round(c.us_per_call(calls) / floor_us, 2) if floor_us > 0 else None
                ),
                "runs_ns": c.runs_ns,
                "bad_replies": c.bad,
            }
            for c in cases
        },
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark under trio, print the report."""
    parser = argparse.ArgumentParser(
        description="Dispatch cost per MCP request through coremetry.mcp.Server.handle."
    )
    parser.add_argument("--calls", type=positive, default=DEFAULT_CALLS, help="calls per timed run")
    parser.add_argument(
        "--repeat", type=positive, default=DEFAULT_REPEAT, help="timed runs per case"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--yield-every",
        type=non_negative,
        default=DEFAULT_YIELD_EVERY,
        help="checkpoint to the trio scheduler every K calls (0: never; see bench/README.md)",
    )
    args = parser.parse_args(argv)
    calls: int = args.calls
    repeat: int = args.repeat
    json_path: Path | None = args.json
    yield_every: int = args.yield_every
    rss_imports = peak_rss_mib()
    cases = trio.run(run_cases, calls, repeat, yield_every)
    code = report(cases, calls, repeat, rss_imports)
    if json_path is not None:
        write_json(json_path, cases, calls, repeat, yield_every)
    return code


if __name__ == "__main__":
    sys.exit(main())
