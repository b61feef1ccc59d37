"""Soak: mixed calls at a steady concurrency over every transport, for minutes, on the demo.

Run: ``python bench/soak.py [--minutes 30] [--slice-minutes 5] [--concurrency 32]
[--json PATH]`` (see ``bench/README.md``).

``coremetry serve --demo`` in a temporary data dir (the shipped demo telemetry loaded first;
the detector on, as in any ``serve``; the rate limit lifted, since 32 callers of one token
would otherwise be refused rather than served) and ``coremetry stdio`` on the same data dir,
both with one viewer service token. ``--concurrency`` workers, spread round-robin over five
transports — Streamable HTTP 2025-11-25 (``MCP-Protocol-Version`` header), Streamable HTTP
2026-07-28 (per-request ``_meta``, ``Mcp-Method``/``Mcp-Name``), legacy HTTP+SSE (a session per
worker), WebSocket (a socket per worker) and stdio (the workers share the one process, answers
matched by id) — each make one call after another for ``--minutes``, in turn from a mix of
tools (``list_services``, ``get_service``, ``search_traces``, ``search_logs``, ``get_trace``,
``list_problems``), ``resources/read`` (``coremetry://services``, ``coremetry://server``),
``prompts/get`` (``suggest_runbook``, ``explain_trace``) and the lists (``tools/list``,
``resources/list``, ``prompts/list``).

Errors: a JSON-RPC error, a tool result with ``isError``, an HTTP status other than 200/202, a
lost connection or an answer missing after 120 s (target 0). Per ``--slice-minutes`` slice:
calls, errors, p50 and p99 latency (all transports together, and p99 per transport). RSS of
the ``serve`` process (``VmRSS`` of ``/proc/<pid>/status``) at the end of each slice; growth from
the end of the first slice to the end of the last (target < 5 %): the first slice is the
warm-up (caches, the detector's first runs, the demo's pages in memory). Exit code 0; the target
lines are informational.
"""

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeAlias

import httpx
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import positive

REPO: Final = Path(__file__).resolve().parents[1]
HANDSHAKE: Final = "2025-11-25"
STATELESS: Final = "2026-07-28"
TRANSPORTS: Final = ("http-2025-11-25", "http-2026-07-28", "sse", "websocket", "stdio")
ANSWER_LIMIT_S: Final = 120.0
CONFIG: Final = """
[rate_limit]
per_second = 100000
burst = 100000
"""
TRACE_ID: Final = re.compile(r"\b[0-9a-f]{32}\b")

JsonObject: TypeAlias = dict[str, object]
Call: TypeAlias = tuple[str, JsonObject]
Send: TypeAlias = Callable[[bytes], Awaitable[None]]
"""Writes one message on a connection."""
Opener: TypeAlias = Callable[[trio.Nursery, "Multiplexed"], Awaitable[Send]]
"""Opens a session (its reader in the nursery, answers to the multiplexer); its ``Send``."""


def call_mix(traces: list[str]) -> list[Call]:
    """The calls the workers make in turn (method, params)."""
    service = "ts-travel-service"
    trace = traces[0] if traces else "0" * 32

    def tool(name: str, arguments: JsonObject) -> Call:
        return "tools/call", {"name": name, "arguments": arguments}

    mix: list[Call] = [
        tool("list_services", {"range": "24h"}),
        tool("get_service", {"service": service, "range": "24h"}),
        tool("search_traces", {"range": "24h", "service": service, "limit": 10}),
        tool("search_logs", {"range": "24h", "min_severity": "WARN", "limit": 20}),
        tool("list_problems", {}),
        ("resources/read", {"uri": "coremetry://services"}),
        ("resources/read", {"uri": "coremetry://server"}),
        ("prompts/get", {"name": "suggest_runbook", "arguments": {"service": service}}),
        ("tools/list", {}),
        ("resources/list", {}),
        ("prompts/list", {}),
    ]
    for t in traces[:5]:
        mix.append(tool("get_trace", {"trace_id": t, "limit": 50}))
        mix.append(tool("search_logs", {"trace_id": t, "range": "24h"}))
    mix.append(("prompts/get", {"name": "explain_trace", "arguments": {"trace_id": trace}}))
    return mix


def is_error(message: JsonObject) -> str | None:
    """What is wrong with an answer (``None`` for a good result)."""
    if "error" in message:
        return f"JSON-RPC error {message['error']}"
    result = message.get("result")
    if not isinstance(result, dict):
        return f"no result: {str(message)[:200]}"
    if result.get("isError"):
        return f"tool error {str(result.get('content'))[:300]}"
    return None


def request(request_id: str, method: str, params: JsonObject, stateless: bool) -> bytes:
    """A JSON-RPC request (2026-07-28: with the per-request ``_meta``)."""
    if stateless:
        params = {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
            },
        }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(body).encode()


class Multiplexed:
    """Answers of one connection matched to their requests by id."""

    def __init__(self) -> None:
        self.waiting: dict[str, trio.MemorySendChannel[JsonObject]] = {}

    async def deliver(self, message: JsonObject) -> None:
        """Hand an answer to whoever waits for its id (notifications are dropped)."""
        channel = self.waiting.pop(str(message.get("id")), None)
        if channel is not None and "method" not in message:
            await channel.send(message)

    async def exchange(self, request_id: str, send: Send, body: bytes) -> JsonObject:
        """Register ``request_id``, ``send(body)``, wait for the answer."""
        sender, receiver = trio.open_memory_channel[JsonObject](1)
        self.waiting[request_id] = sender
        await send(body)
        with trio.fail_after(ANSWER_LIMIT_S):
            return await receiver.receive()


@dataclass
class Stats:
    """Per slice: latencies per transport, errors."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class Soak:
    """The run's state: where to call, the token, the slices."""

    def __init__(self, base: str, token: str, slice_s: float, started: float) -> None:
        self.base = base
        self.token = token
        self.slice_s = slice_s
        self.started = started
        self.slices: list[Stats] = []
        self.counter = itertools.count()

    def stats(self) -> Stats:
        """The current slice's stats."""
        index = int((time.monotonic() - self.started) // self.slice_s)
        while len(self.slices) <= index:
            self.slices.append(Stats())
        return self.slices[index]

    def record(self, transport: str, seconds: float, problem: str | None) -> None:
        """One call's outcome."""
        stats = self.stats()
        stats.latencies.setdefault(transport, []).append(seconds)
        if problem is not None:
            stats.errors.append(f"[{transport}] {problem}")

    def next_id(self) -> str:
        """A unique request id."""
        return f"soak-{next(self.counter)}"


async def http_worker(
    soak: Soak, client: httpx.AsyncClient, era: str, mix: list[Call], offset: int, end: float
) -> None:
    """Streamable HTTP calls, one after another, until ``end``."""
    transport = f"http-{era}"
    stateless = era == STATELESS
    for method, params in itertools.islice(itertools.cycle(mix), offset, None):
        if time.monotonic() >= end:
            return
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "authorization": f"Bearer {soak.token}",
            "mcp-protocol-version": era,
        }
        if stateless:
            headers["mcp-method"] = method
            name = params.get("uri") if method == "resources/read" else params.get("name")
            if isinstance(name, str):
                headers["mcp-name"] = name
        started = time.perf_counter()
        try:
            response = await client.post(
                soak.base + "/api/mcp",
                content=request(soak.next_id(), method, params, stateless),
                headers=headers,
            )
            seconds = time.perf_counter() - started
            if response.status_code != 200:
                problem: str | None = f"HTTP {response.status_code}: {response.text[:200]}"
            else:
                text = response.text
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    text = [x for x in text.splitlines() if x.startswith("data:")][-1][5:]
                problem = is_error(json.loads(text))
        except (httpx.HTTPError, ValueError, IndexError) as exc:
            seconds, problem = time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
        soak.record(transport, seconds, f"{method} {params}: {problem}" if problem else None)


async def session_worker(
    soak: Soak,
    transport: str,
    open_session: Opener,
    mix: list[Call],
    offset: int,
    end: float,
) -> None:
    """Calls over one SSE session / WebSocket / the stdio process, one after another."""
    mux = Multiplexed()
    async with trio.open_nursery() as nursery:
        send = await open_session(nursery, mux)
        for method, params in itertools.islice(itertools.cycle(mix), offset, None):
            if time.monotonic() >= end:
                break
            request_id = soak.next_id()
            body = request(request_id, method, params, False)
            started = time.perf_counter()
            try:
                answer = await mux.exchange(request_id, send, body)
                problem = is_error(answer)
            except (trio.TooSlowError, httpx.HTTPError, ConnectionClosed, OSError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - started
            soak.record(transport, seconds, f"{method} {params}: {problem}" if problem else None)
        nursery.cancel_scope.cancel()


def sse_opener(soak: Soak, client: httpx.AsyncClient) -> Opener:
    """Opens a legacy SSE session; returns its ``send(body)``."""

    async def open_session(nursery: trio.Nursery, mux: Multiplexed) -> Send:
        async def read(task_status: trio.TaskStatus[str]) -> None:
            async with client.stream(
                "GET",
                soak.base + "/api/mcp/sse",
                headers={"accept": "text/event-stream", "authorization": f"Bearer {soak.token}"},
            ) as response:
                buffer, started = "", False
                async for chunk in response.aiter_text():
                    buffer += chunk.replace("\r\n", "\n")
                    while "\n\n" in buffer:
                        event, buffer = buffer.split("\n\n", 1)
                        lines = event.split("\n")
                        data = "\n".join(x[5:].lstrip() for x in lines if x.startswith("data:"))
                        if any(x.startswith("event: endpoint") for x in lines) and not started:
                            started = True
                            task_status.started(data)
                        elif data:
                            await mux.deliver(json.loads(data))

        endpoint = soak.base + await nursery.start(read)
        headers = {"content-type": "application/json", "authorization": f"Bearer {soak.token}"}

        async def send(body: bytes) -> None:
            response = await client.post(endpoint, content=body, headers=headers)
            if response.status_code != 202:
                raise OSError(f"SSE POST: HTTP {response.status_code} {response.text[:200]}")

        init_id = soak.next_id()
        init = request(
            init_id,
            "initialize",
            {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "soak", "version": "1"},
            },
            False,
        )
        await mux.exchange(init_id, send, init)
        await send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return send

    return open_session


def ws_opener(soak: Soak) -> Opener:
    """Opens a WebSocket; returns its ``send(body)``."""

    async def open_session(nursery: trio.Nursery, mux: Multiplexed) -> Send:
        ready: trio.Event = trio.Event()
        holder: list[WebSocketConnection] = []

        async def run() -> None:
            async with open_websocket_url(
                soak.base.replace("http://", "ws://") + "/api/mcp/ws",
                subprotocols=["mcp"],
                extra_headers=[(b"authorization", f"Bearer {soak.token}".encode())],
            ) as ws:
                holder.append(ws)
                ready.set()
                while True:
                    await mux.deliver(json.loads(await ws.get_message()))

        nursery.start_soon(run)
        await ready.wait()

        async def send(body: bytes) -> None:
            await holder[0].send_message(body.decode())

        return send

    return open_session


def rss_of(pid: int) -> int:
    """``VmRSS`` of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def p(values: list[float], q: float) -> float:
    """Nearest-rank quantile ``q`` (0..1) of ``values`` in ms (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return 1e3 * ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def wait_listening(process: trio.Process, stderr_path: Path, limit_s: float) -> str:
    """The ``listening on`` URL ``coremetry serve`` prints."""
    with trio.fail_after(limit_s):
        while True:
            await trio.sleep(0.2)
            if process.poll() is not None:
                raise RuntimeError(await trio.Path(stderr_path).read_text())
            for line in (await trio.Path(stderr_path).read_text()).splitlines():
                if "listening on " in line:
                    return line.split("listening on ", 1)[1].strip()


async def run(args: argparse.Namespace) -> int:
    from coremetry.auth import open_identity_store

    with tempfile.TemporaryDirectory(prefix="coremetry-soak-") as tmp:
        data_dir = Path(tmp) / "data"
        with open_identity_store(data_dir) as store:
            token, _ = store.create_token("soak", "viewer", None)
        config = Path(tmp) / "soak.toml"
        config.write_text(CONFIG)
        env = {**os.environ, "COREMETRY_DATA_DIR": str(data_dir), "COREMETRY_TOKEN": token}
        stderr_path = Path(tmp) / "serve-stderr.log"
        with stderr_path.open("wb") as stderr:
            serve = await trio.lowlevel.open_process(
                [
                    sys.executable,
                    "-m",
                    "coremetry",
                    "serve",
                    "--demo",
                    "--port",
                    "0",
                    "--data-dir",
                    str(data_dir),
                    "--config",
                    str(config),
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                cwd=REPO,
            )
        stdio_stderr = (Path(tmp) / "stdio-stderr.log").open("wb")
        stdio: trio.Process | None = None
        try:
            base = await wait_listening(serve, stderr_path, 600)
            stdio = await trio.lowlevel.open_process(
                [sys.executable, "-m", "coremetry", "stdio", "--config", str(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stdio_stderr,
                env=env,
                cwd=REPO,
            )
            return await drive(args, base, token, serve, stdio)
        finally:
            for process in (stdio, serve):
                if process is not None and process.poll() is None:
                    process.terminate()
                    with trio.move_on_after(20):
                        await process.wait()
                    if process.poll() is None:
                        process.kill()
            stdio_stderr.close()


async def drive(
    args: argparse.Namespace, base: str, token: str, serve: trio.Process, stdio: trio.Process
) -> int:
    slice_s = float(args.slice_minutes) * 60
    duration_s = float(args.minutes) * 60
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(ANSWER_LIMIT_S), limits=limits) as client,
        trio.open_nursery() as nursery,
    ):
        # Trace ids for get_trace / search_logs / explain_trace, from the demo.
        found = await client.post(
            base + "/api/mcp",
            content=request(
                "traces",
                "tools/call",
                {"name": "search_traces", "arguments": {"range": "24h", "limit": 20}},
                False,
            ),
            headers={
                "content-type": "application/json",
                "accept": "application/json",
                "authorization": f"Bearer {token}",
                "mcp-protocol-version": HANDSHAKE,
            },
        )
        traces = sorted(set(TRACE_ID.findall(found.text)))
        mix = call_mix(traces)

        # stdio: one process, every stdio worker on it, answers matched by id.
        stdio_mux = Multiplexed()
        assert stdio.stdin is not None
        assert stdio.stdout is not None
        stdin, stdout = stdio.stdin, stdio.stdout
        stdin_lock = trio.Lock()

        async def stdio_read() -> None:
            buffer = b""
            async for chunk in stdout:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        await stdio_mux.deliver(json.loads(line))

        async def stdio_send(body: bytes) -> None:
            async with stdin_lock:
                await stdin.send_all(body + b"\n")

        nursery.start_soon(stdio_read)
        init = request(
            "stdio-init",
            "initialize",
            {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "soak", "version": "1"},
            },
            False,
        )
        await stdio_mux.exchange("stdio-init", stdio_send, init)
        await stdio_send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

        started = time.monotonic()
        soak = Soak(base, token, slice_s, started)
        rss: list[int] = []
        end = started + duration_s

        async def sample_rss() -> None:
            # trio's clock is not time.monotonic(): slice boundaries in its own terms.
            boundary = trio.current_time() + slice_s
            last = trio.current_time() + duration_s + 1
            while boundary <= last:
                await trio.sleep_until(boundary)
                rss.append(rss_of(serve.pid))
                index = len(rss) - 1
                stats = soak.slices[index] if index < len(soak.slices) else Stats()
                calls = sum(len(v) for v in stats.latencies.values())
                all_lat = [x for v in stats.latencies.values() for x in v]
                print(
                    f"  slice {len(rss)}: {calls} calls, {len(stats.errors)} errors, "
                    f"p50 {p(all_lat, 0.5):.0f} ms, p99 {p(all_lat, 0.99):.0f} ms, "
                    f"RSS {rss[-1] / 2**20:.0f} MiB",
                    flush=True,
                )
                boundary += slice_s

        print(
            f"soak: {args.concurrency} workers over {', '.join(TRANSPORTS)} for "
            f"{args.minutes:g} min ({args.slice_minutes:g}-min slices); "
            f"RSS at start {rss_of(serve.pid) / 2**20:.0f} MiB",
            flush=True,
        )
        async with trio.open_nursery() as workers:
            workers.start_soon(sample_rss)
            for i in range(int(args.concurrency)):
                transport = TRANSPORTS[i % len(TRANSPORTS)]
                offset = i * 3
                if transport.startswith("http-"):
                    era = transport.removeprefix("http-")
                    workers.start_soon(http_worker, soak, client, era, mix, offset, end)
                elif transport == "sse":
                    workers.start_soon(
                        session_worker, soak, transport, sse_opener(soak, client), mix, offset, end
                    )
                elif transport == "websocket":
                    workers.start_soon(
                        session_worker, soak, transport, ws_opener(soak), mix, offset, end
                    )
                else:
                    workers.start_soon(stdio_worker, soak, stdio_mux, stdio_send, mix, offset, end)
        nursery.cancel_scope.cancel()

    report(args, soak, rss, serve, stdio)
    return 0


async def stdio_worker(
    soak: Soak,
    mux: Multiplexed,
    send: Send,
    mix: list[Call],
    offset: int,
    end: float,
) -> None:
    """Calls over the shared stdio process, one after another."""
    for method, params in itertools.islice(itertools.cycle(mix), offset, None):
        if time.monotonic() >= end:
            return
        request_id = soak.next_id()
        body = request(request_id, method, params, False)
        started = time.perf_counter()
        try:
            answer = await mux.exchange(request_id, send, body)
            problem = is_error(answer)
        except (trio.TooSlowError, OSError, trio.BrokenResourceError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        soak.record("stdio", seconds, f"{method} {params}: {problem}" if problem else None)


def report(
    args: argparse.Namespace, soak: Soak, rss: list[int], serve: trio.Process, stdio: trio.Process
) -> None:
    """Print the slices, the errors, the RSS growth and the verdicts."""
    print()
    print("slice   calls  errors  p50 ms  p99 ms  " + "  ".join(f"{t:>15}" for t in TRANSPORTS))
    total_calls = total_errors = 0
    for i, stats in enumerate(soak.slices[: len(rss)] or soak.slices):
        everything = [x for v in stats.latencies.values() for x in v]
        total_calls += len(everything)
        total_errors += len(stats.errors)
        per = "  ".join(f"{p(stats.latencies.get(t, []), 0.99):>12.0f} ms" for t in TRANSPORTS)
        print(
            f"{i + 1:>5} {len(everything):>7} {len(stats.errors):>7} "
            f"{p(everything, 0.5):>7.0f} {p(everything, 0.99):>7.0f}  {per}"
        )
    errors = [e for s in soak.slices for e in s.errors]
    print(f"calls: {total_calls}; errors: {len(errors)}")
    for error in errors[:10]:
        print("  " + error[:400])
    exits = [name for name, proc in (("serve", serve), ("stdio", stdio)) if proc.poll() is not None]
    print(f"process exits during the run: {exits or 'none'}")
    if len(rss) >= 2:
        growth = (rss[-1] - rss[0]) / rss[0]
        print(
            f"serve RSS: end of slice 1 {rss[0] / 2**20:.1f} MiB, end of slice {len(rss)} "
            f"{rss[-1] / 2**20:.1f} MiB ({growth:+.1%}); by slice: "
            + ", ".join(f"{r / 2**20:.0f}" for r in rss)
        )
        print(f"RSS growth first slice -> last < 5 %: {'PASS' if growth < 0.05 else 'FAIL'}")
    print(f"errors = 0: {'PASS' if not errors and not exits else 'FAIL'}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "slices": [{"latencies": s.latencies, "errors": s.errors} for s in soak.slices],
                    "rss": rss,
                },
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="duration (default 30)")
    parser.add_argument(
        "--slice-minutes", type=float, default=5.0, help="length of a slice (default 5)"
    )
    parser.add_argument("--concurrency", type=positive, default=32, help="workers (default 32)")
    parser.add_argument("--json", type=Path, help="also write every latency as JSON")
    sys.exit(trio.run(run, parser.parse_args()))


if __name__ == "__main__":
    main()
