"""``tools/call echo`` over Streamable HTTP: throughput, latency and RSS against two references.

Run: ``python bench/http_echo.py [--duration S] [--connections 1,16,64] [--json PATH]``
(needs ``wrk`` and ``taskset`` on PATH and two CPU cores; see ``bench/README.md``).

Three servers are started, each pinned to one core (``taskset -c 0``), and loaded by ``wrk`` on
the other core (``taskset -c 1 wrk -t1 -cN --latency -s <lua>``), all in the same run:

- **floor**: ``bench/http_floor_server.py``, a bare ASGI callable on hypercorn's trio worker with
  Coremetry's hypercorn settings: read the body, msgspec-decode it, answer a canned result. The
  least any server on this stack pays; every ``x floor`` ratio divides by its req/s.
- **coremetry**: ``python -m coremetry conformance-fixture`` (the full app: Streamable HTTP
  transport, header checks, dispatcher, ``echo`` from the test fixture; no auth).
- **mcp SDK**: ``bench/http_sdk_server.py``, the official ``mcp`` SDK's ``MCPServer`` with an
  ``echo`` tool, stateless + JSON responses, on hypercorn's asyncio worker (``--sdk-servers``
  adds or swaps in uvicorn). Every ``p99/SDK`` ratio divides by the first SDK server's p99.

Two request eras, the same bytes for every server:

- **handshake** (2025-11-25): ``MCP-Protocol-Version: 2025-11-25`` header, no ``_meta``.
- **stateless** (2026-07-28): ``_meta`` with protocolVersion and clientCapabilities, and the
  ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers.

Before timing, every server must answer each era's request with HTTP 200 and the expected
result (id, the echoed text, ``resultType: complete`` in the stateless era); otherwise the
script exits 1 (an SDK that refuses the stateless era is reported as unsupported instead).
Any non-2xx reply under load also exits 1. The target lines are informational.
"""

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Final

import h11
import msgspec
import trio
from msgspec import UNSET, Raw, Struct, UnsetType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, positive
from http_secured_server import make_token

BENCH_DIR: Final = Path(__file__).resolve().parent
MCP_PATH: Final = "/api/mcp"
HOST: Final = "127.0.0.1"
ECHO_TEXT: Final = "hello, coremetry"
REQUEST_ID: Final = 7
HANDSHAKE_VERSION: Final = "2025-11-25"
STATELESS_VERSION: Final = "2026-07-28"

TARGET_FLOOR_RATIO: Final = 0.9
"""Ours must reach at least this fraction of the floor's req/s (at the target concurrencies)."""
TARGET_SECURED_RATIO: Final = 0.8
"""Ours with auth + gate + audit (``--secured``) must reach this fraction of the floor's req/s."""
TARGET_FLOOR_CONCURRENCY: Final = (16, 64)
TARGET_SDK_P99_RATIO: Final = 0.6
"""Our p99 must be at most this fraction of the SDK's (at the target concurrency)."""
TARGET_SDK_CONCURRENCY: Final = 64

CONTENDED_CPU_PCT: Final = 90.0
"""A saturated point (c > 1) whose server got less of its core than this was contended."""

STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
REQUEST_TIMEOUT_S: Final = 10.0


# -- the requests ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Era:
    """One request shape: the body and the headers every server gets."""

    key: str
    label: str
    body: bytes
    headers: tuple[tuple[str, str], ...]


COMMON_HEADERS: Final = (
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
)


def _call_body(meta: dict[str, object] | None) -> bytes:
    params: dict[str, object] = {"name": "echo", "arguments": {"text": ECHO_TEXT}}
    if meta is not None:
        params["_meta"] = meta
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": REQUEST_ID, "method": "tools/call", "params": params}
    )


ERAS: Final = (
    Era(
        "handshake",
        f"handshake {HANDSHAKE_VERSION} (MCP-Protocol-Version header, no _meta)",
        _call_body(None),
        (*COMMON_HEADERS, ("MCP-Protocol-Version", HANDSHAKE_VERSION)),
    ),
    Era(
        "stateless",
        f"stateless {STATELESS_VERSION} (_meta + MCP-Protocol-Version/Mcp-Method/Mcp-Name)",
        _call_body(
            {
                "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        ),
        (
            *COMMON_HEADERS,
            ("MCP-Protocol-Version", STATELESS_VERSION),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "echo"),
        ),
    ),
)


def lua_script(era: Era, extra_headers: tuple[tuple[str, str], ...] = ()) -> str:
    """The wrk script: a fixed POST (built once by wrk, no per-request Lua)."""
    body = era.body.decode()
    if "]==]" in body:
        raise ValueError("the body cannot be a Lua long string")
    lines = ['wrk.method = "POST"', f"wrk.body = [==[{body}]==]"]
    lines += [
        f'wrk.headers["{name}"] = "{value}"' for name, value in (*era.headers, *extra_headers)
    ]
    return "\n".join(lines) + "\n"


# -- the servers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server (the port is appended to ``argv``)."""

    key: str
    label: str
    argv: tuple[str, ...]
    kind: str  # "floor", "ours", "secured" or "sdk"
    headers: tuple[tuple[str, str], ...] = ()
    """Headers this server needs on every request besides the era's (the bearer token)."""


def server_specs(
    sdk_servers: list[str],
    ours_command: list[str] | None = None,
    secured: tuple[Path, str] | None = None,
) -> list[ServerSpec]:
    """Floor, ours, ours secured (with ``secured``), then the SDK on each requested HTTP server
    (the first SDK server is the p99 reference).

    ``ours_command`` replaces the command that starts ours (the port is appended to it);
    ``secured`` is ``(data dir, service token)`` for ``http_secured_server.py``.
    """
    python = sys.executable
    specs = [
        ServerSpec(
            "floor",
            "floor (bare ASGI, hypercorn-trio)",
            (python, str(BENCH_DIR / "http_floor_server.py"), "--port"),
            "floor",
        ),
        ServerSpec(
            "coremetry",
            "coremetry (hypercorn-trio)" if ours_command is None else "coremetry (--ours-command)",
            (python, "-m", "coremetry", "conformance-fixture", "--port")
            if ours_command is None
            else tuple(ours_command),
            "ours",
        ),
    ]
    if secured is not None:
        data_dir, token = secured
        specs.append(
            ServerSpec(
                "secured",
                "coremetry + token, gate, audit",
                (
                    python,
                    str(BENCH_DIR / "http_secured_server.py"),
                    "--data-dir",
                    str(data_dir),
                    "--port",
                ),
                "secured",
                (("Authorization", f"Bearer {token}"),),
            )
        )
    for name in sdk_servers:
        worker = "hypercorn-asyncio" if name == "hypercorn" else name
        specs.append(
            ServerSpec(
                f"sdk-{name}",
                f"mcp SDK {version('mcp')} ({worker})",
                (python, str(BENCH_DIR / "http_sdk_server.py"), "--server", name, "--port"),
                "sdk",
            )
        )
    return specs


@dataclass
class RunningServer:
    """A started server process."""

    spec: ServerSpec
    port: int
    process: trio.Process
    log_path: Path
    unsupported: dict[str, str] = field(default_factory=dict)
    """era key -> why the server does not serve that era (SDK only)."""

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's stderr."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A TCP port that was free a moment ago on the loopback address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mib(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of a process, in MiB (0.0 when unknown)."""
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return 0.0, 0.0
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in values:
            values[key] = int(rest.split()[0]) / 1024.0
    return values["VmRSS"], values["VmHWM"]


# -- one HTTP request (correctness checks) ---------------------------------------------------


@dataclass
class HttpReply:
    """A complete HTTP response."""

    status: int
    content_type: str
    body: bytes


async def http_post(
    port: int, era: Era, extra_headers: tuple[tuple[str, str], ...] = ()
) -> HttpReply:
    """POST the era's request on a fresh connection and read the whole reply (h11).

    Raises:
        OSError: the connection failed (e.g. refused: the server is not listening yet).
        trio.TooSlowError: no complete reply within ``REQUEST_TIMEOUT_S``.
    """
    with trio.fail_after(REQUEST_TIMEOUT_S):
        return await _http_post(port, era, extra_headers)


async def _http_post(port: int, era: Era, extra_headers: tuple[tuple[str, str], ...]) -> HttpReply:
    stream = await trio.open_tcp_stream(HOST, port)
    async with stream:
        conn = h11.Connection(our_role=h11.CLIENT)
        headers = [
            ("Host", f"{HOST}:{port}"),
            ("Content-Length", str(len(era.body))),
            ("Connection", "close"),
            *era.headers,
            *extra_headers,
        ]
        out = conn.send(h11.Request(method="POST", target=MCP_PATH, headers=headers)) or b""
        out += conn.send(h11.Data(data=era.body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(out)
        status = 0
        content_type = ""
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    if name == b"content-type":
                        content_type = value.decode("latin-1")
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return HttpReply(status, content_type, b"".join(chunks))


class _Content(Struct):
    type: str
    text: str | None = None


class _Result(Struct):
    content: list[_Content]
    is_error: bool = msgspec.field(default=False, name="isError")
    result_type: str | UnsetType = msgspec.field(default=UNSET, name="resultType")


class _Reply(Struct):
    jsonrpc: str
    id: int | str | None = None
    result: _Result | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


def reply_problem(reply: HttpReply, era: Era) -> str | None:
    """Why ``reply`` is not the expected echo result (``None`` when it is)."""
    head = f"HTTP {reply.status}, {reply.content_type or 'no content-type'}: {reply.body[:300]!r}"
    if reply.status != 200:
        return f"status {reply.status} ({head})"
    if reply.content_type.split(";")[0].strip().lower() != "application/json":
        return f"not application/json ({head})"
    try:
        decoded = msgspec.json.decode(reply.body, type=_Reply)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"undecodable reply: {exc} ({head})"
    if not isinstance(decoded.error, UnsetType):
        return f"error reply ({head})"
    if isinstance(decoded.result, UnsetType):
        return f"no result ({head})"
    if decoded.id != REQUEST_ID:
        return f"id {decoded.id!r} != {REQUEST_ID} ({head})"
    result = decoded.result
    if result.is_error:
        return f"tool error ({head})"
    if [(c.type, c.text) for c in result.content] != [("text", ECHO_TEXT)]:
        return f"unexpected content ({head})"
    if era.key == "stateless" and result.result_type != "complete":
        return f"stateless result without resultType 'complete' ({head})"
    return None


async def wait_ready(server: RunningServer, era: Era) -> HttpReply:
    """Retry the first request until the server accepts connections (or fail)."""
    deadline = trio.current_time() + STARTUP_TIMEOUT_S
    while True:
        if server.process.returncode is not None:
            raise RuntimeError(
                f"{server.spec.label} exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            return await http_post(server.port, era, server.spec.headers)
        except trio.TooSlowError:
            raise RuntimeError(
                f"{server.spec.label} did not answer within {REQUEST_TIMEOUT_S:.0f} s:\n"
                f"{server.log_tail()}"
            ) from None
        except OSError:
            if trio.current_time() > deadline:
                raise RuntimeError(
                    f"{server.spec.label} did not accept connections on port {server.port} "
                    f"within {STARTUP_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
                ) from None
            await trio.sleep(0.1)


# -- wrk -------------------------------------------------------------------------------------


@dataclass
class WrkResult:
    """What one wrk run reports."""

    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: str


_UNIT_MS: Final = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_PERCENTILE: Final = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.M)
_RPS: Final = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
_REQUESTS: Final = re.compile(r"^\s*(\d+) requests in", re.M)
_NON_2XX: Final = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS: Final = re.compile(r"Socket errors:\s+(.*)$", re.M)


def parse_wrk(output: str) -> WrkResult:
    """Parse ``wrk --latency`` output (raises ValueError when a figure is missing)."""
    percentiles = {m[1]: float(m[2]) * _UNIT_MS[m[3]] for m in _PERCENTILE.finditer(output)}
    rps = _RPS.search(output)
    requests = _REQUESTS.search(output)
    if rps is None or requests is None or "50" not in percentiles or "99" not in percentiles:
        raise ValueError(f"unexpected wrk output:\n{output}")
    non_2xx = _NON_2XX.search(output)
    socket_errors = _SOCKET_ERRORS.search(output)
    return WrkResult(
        requests=int(requests[1]),
        rps=float(rps[1]),
        p50_ms=percentiles["50"],
        p99_ms=percentiles["99"],
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=socket_errors[1].strip() if socket_errors else "",
    )


@dataclass(frozen=True)
class LoadSettings:
    """How wrk is run."""

    client_cpu: str
    duration_s: float
    timeout_s: float


async def run_wrk(
    load: LoadSettings, port: int, script: Path, connections: int, duration_s: float
) -> WrkResult:
    """One wrk run pinned to the client core."""
    argv = [
        "taskset",
        "-c",
        load.client_cpu,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={max(1, round(load.timeout_s))}s",
        "--latency",
        "-s",
        str(script),
        f"http://{HOST}:{port}{MCP_PATH}",
    ]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited with {done.returncode}: {done.stderr.decode()}\n{output}")
    return parse_wrk(output)


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Point:
    """One measured (server, era, concurrency) point: the best of the repeats by req/s."""

    server: str
    era: str
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    rss_mib: float
    peak_rss_mib: float
    cpu_pct: float
    """Server CPU time over wall time during the run (100 = the whole pinned core)."""
    cpu_us_per_req: float
    """Server CPU time per request, in µs: robust to other load on the core."""
    requests: int
    non_2xx: int
    socket_errors: str
    runs_rps: list[float] = field(default_factory=list)


@dataclass
class Settings:
    """Everything the command line decides."""

    duration_s: float
    warmup_s: float
    connections: list[int]
    repeat: int
    server_cpu: str
    client_cpu: str
    sdk_servers: list[str]
    json_path: Path | None
    ours_command: list[str] | None = None
    secured: bool = False
    """Also run ours with auth + gate + audit (``http_secured_server.py``)."""


@dataclass
class Outcome:
    """The run's figures and failures."""

    points: list[Point] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    """"server/era" -> reason."""
    idle_rss_mib: dict[str, float] = field(default_factory=dict)


async def start_server(spec: ServerSpec, settings: Settings, log_dir: Path) -> RunningServer:
    """Start one server pinned to the server core (its stderr goes to a log file)."""
    port = free_port()
    log_path = log_dir / f"{spec.key}.log"
    argv = ["taskset", "-c", settings.server_cpu, *spec.argv, str(port)]
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    return RunningServer(spec, port, process, log_path)


async def stop_server(server: RunningServer) -> None:
    """SIGTERM (a graceful drain for ours), then SIGKILL after a grace period."""
    if server.process.returncode is not None:
        return
    server.process.terminate()
    with trio.move_on_after(STOP_TIMEOUT_S):
        await server.process.wait()
        return
    server.process.kill()
    await server.process.wait()


async def check_server(server: RunningServer, outcome: Outcome) -> None:
    """Each era's request must get the expected echo result (SDK: else 'unsupported')."""
    for era in ERAS:
        reply = await wait_ready(server, era)
        problem = reply_problem(reply, era)
        if problem is None:
            print(f"  ok: {server.spec.label}, {era.key}: {reply.body.decode()[:160]}")
            continue
        if server.spec.kind == "sdk" and era.key == "stateless":
            server.unsupported[era.key] = problem
            outcome.unsupported[f"{server.spec.key}/{era.key}"] = problem
            print(f"  UNSUPPORTED: {server.spec.label}, {era.key}: {problem}")
            continue
        outcome.errors.append(f"{server.spec.label}, {era.key}: {problem}")
        print(f"  ERROR: {server.spec.label}, {era.key}: {problem}", file=sys.stderr)


async def measure_point(
    server: RunningServer, era: Era, load: LoadSettings, script: Path, connections: int
) -> Point:
    """One wrk run against one server, with the server's CPU time and RSS around it."""
    pid = server.process.pid
    cpu_before = cpu_seconds(pid)
    started = trio.current_time()
    result = await run_wrk(load, server.port, script, connections, load.duration_s)
    wall = trio.current_time() - started
    cpu = cpu_seconds(pid) - cpu_before
    rss, peak = rss_mib(pid)
    return Point(
        server=server.spec.key,
        era=era.key,
        connections=connections,
        rps=result.rps,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        rss_mib=rss,
        peak_rss_mib=peak,
        cpu_pct=100.0 * cpu / wall if wall > 0 else 0.0,
        cpu_us_per_req=1e6 * cpu / result.requests if result.requests else 0.0,
        requests=result.requests,
        non_2xx=result.non_2xx,
        socket_errors=result.socket_errors,
        runs_rps=[result.rps],
    )


def _progress(point: Point) -> str:
    line = (
        f"  {point.server:<14} c={point.connections:<3} {point.rps:>9.0f} req/s  "
        f"p50 {point.p50_ms:6.2f} ms  p99 {point.p99_ms:7.2f} ms  RSS {point.rss_mib:5.1f} MiB  "
        f"cpu {point.cpu_pct:3.0f}%  {point.cpu_us_per_req:5.0f} µs/req"
    )
    if point.non_2xx:
        line += f"  non-2xx {point.non_2xx}"
    if point.socket_errors:
        line += f"  socket errors: {point.socket_errors}"
    return line


async def measure(
    servers: list[RunningServer],
    settings: Settings,
    scripts: dict[tuple[str, str], Path],
    outcome: Outcome,
) -> None:
    """Warm each server up per era, then time every point (servers interleaved, best of R)."""
    load = LoadSettings(
        settings.client_cpu, settings.duration_s, timeout_s=max(10.0, settings.duration_s)
    )
    for era in ERAS:
        active = [s for s in servers if era.key not in s.unsupported]
        print(f"era {era.key}: warm-up {settings.warmup_s:g} s per server at c=16")
        for server in active:
            if settings.warmup_s > 0:
                script = scripts[era.key, server.spec.key]
                await run_wrk(load, server.port, script, 16, settings.warmup_s)
        best: dict[tuple[str, int], Point] = {}
        for connections in settings.connections:
            for _ in range(settings.repeat):
                for server in active:
                    script = scripts[era.key, server.spec.key]
                    point = await measure_point(server, era, load, script, connections)
                    print(_progress(point))
                    if point.non_2xx:
                        outcome.errors.append(
                            f"{server.spec.label}, {era.key}, c={connections}: "
                            f"{point.non_2xx} non-2xx replies under load"
                        )
                    key = (server.spec.key, connections)
                    previous = best.get(key)
                    if previous is not None:
                        runs = [*previous.runs_rps, point.rps]
                        if previous.rps >= point.rps:
                            point = previous
                        point.runs_rps = runs
                    best[key] = point
        outcome.points.extend(best.values())


async def run(settings: Settings) -> Outcome:
    """Start the servers, check them, measure, re-check, stop them."""
    outcome = Outcome()
    with tempfile.TemporaryDirectory(prefix="coremetry-http-bench-") as tmp:
        tmp_dir = Path(tmp)
        secured: tuple[Path, str] | None = None
        if settings.secured:
            data_dir = tmp_dir / "secured-data"
            secured = (data_dir, make_token(data_dir))
        specs = server_specs(settings.sdk_servers, settings.ours_command, secured)
        scripts: dict[tuple[str, str], Path] = {}
        for era in ERAS:
            for spec in specs:
                path = tmp_dir / f"{era.key}-{spec.key}.lua"
                path.write_text(lua_script(era, spec.headers), encoding="utf-8")
                scripts[era.key, spec.key] = path
        servers: list[RunningServer] = []
        try:
            for spec in specs:
                servers.append(await start_server(spec, settings, tmp_dir))
            print("correctness (before timing):")
            for server in servers:
                await check_server(server, outcome)
                idle, _ = rss_mib(server.process.pid)
                outcome.idle_rss_mib[server.spec.key] = idle
            if not outcome.errors:
                await measure(servers, settings, scripts, outcome)
                print("correctness (after timing):")
                for server in servers:
                    await check_server(server, outcome)
        except RuntimeError as exc:
            outcome.errors.append(str(exc))
            print(f"ERROR: {exc}", file=sys.stderr)
        finally:
            with trio.CancelScope(shield=True):
                for server in servers:
                    await stop_server(server)
    return outcome


# -- report ----------------------------------------------------------------------------------


def contended(point: Point) -> bool:
    """Whether a saturated point's server had less than its whole core."""
    return point.connections > 1 and point.cpu_pct < CONTENDED_CPU_PCT


def _find(points: list[Point], server: str, era: str, connections: int) -> Point | None:
    for p in points:
        if p.server == server and p.era == era and p.connections == connections:
            return p
    return None


def _floor_verdict(point: Point | None, floor: Point | None, what: str, target: float) -> str:
    """One 'at least ``target`` x the floor's req/s' line, with the ratio by CPU per request."""
    if point is None or floor is None or floor.rps <= 0:
        return f"{what}: n/a (not measured)"
    ratio = point.rps / floor.rps
    verdict = "PASS" if ratio >= target else "FAIL"
    by_cpu = (
        f"; by CPU per request {floor.cpu_us_per_req / point.cpu_us_per_req:.2f}x"
        if point.cpu_us_per_req > 0
        else ""
    )
    return f"{what}: {ratio:.2f}x: {verdict}{by_cpu}"


def report(settings: Settings, outcome: Outcome) -> list[str]:
    """Print one table per era and the target lines; return the target verdicts."""
    specs = server_specs(
        settings.sdk_servers,
        settings.ours_command,
        (Path(), "") if settings.secured else None,
    )
    labels = {s.key: s.label for s in specs}
    sdk_ref = f"sdk-{settings.sdk_servers[0]}" if settings.sdk_servers else None
    width = max(len(label) for label in labels.values())
    for era in ERAS:
        print()
        print(f"era: {era.label}")
        print(
            f"{'server':<{width}} {'conc':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'RSS MiB':>8} {'x floor':>8} {'p99/SDK':>8} {'cpu %':>6} {'cpu µs/req':>10} "
            f"{'x floor cpu':>11}"
        )
        print("-" * (width + 92))
        for connections in settings.connections:
            floor = _find(outcome.points, "floor", era.key, connections)
            sdk = _find(outcome.points, sdk_ref, era.key, connections) if sdk_ref else None
            for spec in specs:
                reason = outcome.unsupported.get(f"{spec.key}/{era.key}")
                if reason is not None:
                    print(f"{spec.label:<{width}} {connections:>5}  unsupported: {reason[:80]}")
                    continue
                p = _find(outcome.points, spec.key, era.key, connections)
                if p is None:
                    continue
                x_floor = f"{p.rps / floor.rps:7.2f}x" if floor and floor.rps > 0 else "     n/a"
                x_sdk = f"{p.p99_ms / sdk.p99_ms:7.2f}x" if sdk and sdk.p99_ms > 0 else "     n/a"
                x_cpu = (
                    f"{floor.cpu_us_per_req / p.cpu_us_per_req:7.2f}x"
                    if floor and p.cpu_us_per_req > 0
                    else "     n/a"
                )
                flag = " *" if contended(p) else ""
                print(
                    f"{spec.label:<{width}} {connections:>5} {p.rps:>9.0f} {p.p50_ms:>8.2f} "
                    f"{p.p99_ms:>8.2f} {p.rss_mib:>8.1f} {x_floor:>8} {x_sdk:>8} "
                    f"{p.cpu_pct:>6.0f} {p.cpu_us_per_req:>10.0f} {x_cpu:>11}{flag}"
                )
    print()
    n_contended = sum(1 for p in outcome.points if contended(p))
    if n_contended:
        print(
            f"* {n_contended} point(s) where the server got < {CONTENDED_CPU_PCT:.0f}% of its "
            "core under load: other work ran on it; the req/s there is low. Rerun with "
            "--repeat 3 (best of 3) or on a quieter machine, and compare 'x floor cpu'."
        )
    idle = ", ".join(f"{k} {v:.1f}" for k, v in outcome.idle_rss_mib.items())
    print(f"idle RSS after start-up (MiB): {idle}")
    verdicts: list[str] = []
    floor_targets = [("coremetry", "coremetry", TARGET_FLOOR_RATIO)]
    if settings.secured:
        floor_targets.append(("secured", "coremetry + token, gate, audit", TARGET_SECURED_RATIO))
    for key, name, target in floor_targets:
        for era in ERAS:
            for connections in TARGET_FLOOR_CONCURRENCY:
                verdicts.append(
                    _floor_verdict(
                        _find(outcome.points, key, era.key, connections),
                        _find(outcome.points, "floor", era.key, connections),
                        f"target: {name} >= {target:.1f}x floor req/s, {era.key}, c={connections}",
                        target,
                    )
                )
    for era in ERAS:
        what = (
            f"target: coremetry p99 <= {TARGET_SDK_P99_RATIO:.1f}x SDK p99, "
            f"{era.key}, c={TARGET_SDK_CONCURRENCY}"
        )
        ours = _find(outcome.points, "coremetry", era.key, TARGET_SDK_CONCURRENCY)
        sdk = _find(outcome.points, sdk_ref, era.key, TARGET_SDK_CONCURRENCY) if sdk_ref else None
        if sdk_ref and f"{sdk_ref}/{era.key}" in outcome.unsupported:
            verdicts.append(f"{what}: n/a (the SDK does not serve this era)")
        elif ours is None or sdk is None or sdk.p99_ms <= 0:
            verdicts.append(f"{what}: n/a (not measured)")
        else:
            ratio = ours.p99_ms / sdk.p99_ms
            verdict = "PASS" if ratio <= TARGET_SDK_P99_RATIO else "FAIL"
            verdicts.append(
                f"{what}: {ours.p99_ms:.2f} / {sdk.p99_ms:.2f} ms = {ratio:.2f}x: {verdict}"
            )
    for line in verdicts:
        print(line)
    return verdicts


def _wrk_version() -> str:
    done = subprocess.run(["wrk", "--version"], capture_output=True, check=False)
    first = (done.stdout or done.stderr).decode(errors="replace").splitlines()
    return first[0] if first else "wrk ?"


def write_json(path: Path, settings: Settings, outcome: Outcome, verdicts: list[str]) -> None:
    """Write the settings, every point and the verdicts as JSON."""
    doc: dict[str, object] = {
        "settings": {
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "connections": settings.connections,
            "repeat": settings.repeat,
            "server_cpu": settings.server_cpu,
            "client_cpu": settings.client_cpu,
            "sdk_servers": settings.sdk_servers,
            "ours_command": settings.ours_command,
            "secured": settings.secured,
        },
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("hypercorn", "trio", "msgspec", "mcp")},
        "points": [asdict(p) for p in outcome.points],
        "idle_rss_mib": outcome.idle_rss_mib,
        "unsupported": outcome.unsupported,
        "errors": outcome.errors,
        "verdicts": verdicts,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


# -- command line ----------------------------------------------------------------------------


def _connections(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"connections must be positive: {text}")
    return values


def _sdk_servers(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    bad = [v for v in values if v not in ("hypercorn", "uvicorn")]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown SDK server(s): {', '.join(bad)}")
    return values


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def parse_args(argv: list[str] | None) -> Settings:
    """The command line as :class:`Settings`."""
    parser = argparse.ArgumentParser(
        description="tools/call echo over Streamable HTTP: ours vs a bare-ASGI floor and the "
        "mcp SDK (wrk, one core each)."
    )
    parser.add_argument(
        "--duration", type=_positive_float, default=5.0, help="seconds per point (default 5)"
    )
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="warm-up seconds per server and era (default 1)"
    )
    parser.add_argument(
        "--connections",
        type=_connections,
        default=[1, 16, 64],
        help="comma-separated concurrent connections (default 1,16,64)",
    )
    parser.add_argument(
        "--repeat", type=positive, default=1, help="runs per point; the best req/s counts"
    )
    parser.add_argument("--server-cpu", default="0", help="core for the servers (default 0)")
    parser.add_argument("--client-cpu", default="1", help="core for wrk (default 1)")
    parser.add_argument(
        "--sdk-servers",
        type=_sdk_servers,
        default=["hypercorn"],
        help="HTTP servers for the mcp SDK reference, comma-separated, the first is the p99 "
        "reference: hypercorn (asyncio worker, default), uvicorn",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--ours-command",
        default=None,
        help="start ours with this command instead (shell-quoted; the port is appended), e.g. "
        "to measure a patched build: --ours-command 'python my_server.py --port'",
    )
    parser.add_argument(
        "--secured",
        action="store_true",
        help="also run ours with a service token, the call gate and the audit log "
        "(bench/http_secured_server.py); its target is 0.8x the floor",
    )
    args = parser.parse_args(argv)
    return Settings(
        duration_s=args.duration,
        warmup_s=max(0.0, float(args.warmup)),
        connections=args.connections,
        repeat=args.repeat,
        server_cpu=str(args.server_cpu),
        client_cpu=str(args.client_cpu),
        sdk_servers=args.sdk_servers,
        json_path=args.json,
        ours_command=shlex.split(args.ours_command) if args.ours_command else None,
        secured=bool(args.secured),
    )


def main(argv: list[str] | None = None) -> int:
    """Check the tools, run the benchmark, print the report; 1 when a reply was wrong."""
    settings = parse_args(argv)
    missing = [tool for tool in ("wrk", "taskset") if shutil.which(tool) is None]
    if missing:
        print(
            f"ERROR: {' and '.join(missing)} not found on PATH "
            "(Debian: apt-get install -y wrk util-linux)",
            file=sys.stderr,
        )
        return 2
    print(
        f"coremetry HTTP echo: {settings.duration_s:g} s per point, "
        f"connections {','.join(map(str, settings.connections))}, "
        f"best of {settings.repeat}; servers on cpu {settings.server_cpu}, "
        f"wrk on cpu {settings.client_cpu}"
    )
    print(
        f"python {platform.python_version()}, hypercorn {version('hypercorn')}, "
        f"trio {trio.__version__}, msgspec {msgspec.__version__}, mcp {version('mcp')}, "
        f"{_wrk_version()}; {os.cpu_count()} cpus, load average "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    outcome = trio.run(run, settings)
    verdicts = report(settings, outcome)
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if settings.json_path is not None:
        write_json(settings.json_path, settings, outcome, verdicts)
    for error in outcome.errors:
        print(f"ERROR: {error}", file=sys.stderr)
    return 1 if outcome.errors else 0


if __name__ == "__main__":
    sys.exit(main())
