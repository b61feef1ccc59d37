"""One identity's heavy calls against another's light ones, on a 1M-span store: fairness and RSS.

Run: ``python bench/fairness.py [--data-dir DIR] [--heavy 20] [--alone-calls 200]
[--after-s 30] [--json PATH]`` (see ``bench/README.md``).

The store is generated as ``bench/gen_telemetry.py`` does (1,000,000 spans, 200,000 log
records, six days ending now: inside the 7-day range the heavy calls ask for) into
``<data dir>/telemetry.db``, unless ``--data-dir`` names a data dir that already holds one (with
its ``telemetry.db.json`` manifest). ``coremetry serve --data-dir DIR`` then serves it, with a
configuration that leaves the admission limits at their defaults but lifts the rate limit (B's
loop would otherwise be refused, not slowed), keeps all data (``store.retention_days = 0``) and
turns the detector off (its runs would be a third, unmeasured load). Two service tokens: A and B.

1. B alone: ``--alone-calls`` light calls one after another, alternating
   ``search_logs(trace_id=…, range="7d")`` and ``get_trace(trace_id=…)`` over the manifest's
   sample traces. Their p50/p99 are the baseline.
2. Contended: A fires ``--heavy`` calls at once (in turn ``get_service(service=<busiest>,
   range="7d")``, ``get_service_map(range="7d")``, ``list_services(range="7d")`` and
   ``search_traces(range="7d", min_duration_ms=…)``), while B keeps making the same light calls
   one after another until every A call has answered. B's p50/p99 here against (1): the target
   is p99 ≤ 2x. A's outcomes: answered, ``timeout`` (with the hint it carried), other errors.
3. The server's RSS (``VmRSS`` of ``/proc/<pid>/status``, sampled every 0.1 s) before (2), at
   its peak during (2), and ``--after-s`` seconds after A's last answer (target: within 20 % of
   before). The peak is printed against the store's size on disk. Also split: ``RssAnon``
   (the process's own memory) and ``RssFile`` (mapped files: SQLite reads the store through
   ``mmap``, so the store pages it read show up in RSS as shared, reclaimable page cache).

Every call goes over Streamable HTTP (``POST /api/mcp``, 2025-11-25, JSON answers). Exit code 0
unless a call got a malformed answer or an HTTP error; the target lines are informational.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import positive

REPO: Final = Path(__file__).resolve().parents[1]
HANDSHAKE: Final = "2025-11-25"
CONFIG: Final = """
[rate_limit]
per_second = 100000
burst = 100000

[store]
retention_days = 0

[detection]
enabled = false
"""


@dataclass
class Answer:
    """One tool call's outcome: ``kind`` is ``ok``, a tool error's ``error`` value (``timeout``,
    …), or ``jsonrpc <code>``; ``hint`` the tool error's hint."""

    seconds: float
    kind: str
    hint: str = ""


@dataclass(frozen=True)
class Rss:
    """One reading of ``/proc/<pid>/status``, in bytes: ``total`` (``VmRSS``) = ``anon``
    (``RssAnon``: the heap, Python objects, SQLite's page caches) + ``file`` (``RssFile``:
    mapped files, here mostly the store's pages, which SQLite reads through ``mmap``: the
    kernel's page cache, shared and reclaimable) + ``RssShmem``."""

    total: int
    anon: int
    file: int


@dataclass
class RssSampler:
    """The RSS of one process, sampled while :meth:`run` runs."""

    pid: int
    samples: list[tuple[float, Rss]] = field(default_factory=list)

    def read(self) -> Rss:
        """The current RSS."""
        fields: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(rest.split()[0]) * 1024
        return Rss(fields["VmRSS"], fields["RssAnon"], fields["RssFile"])

    async def run(self, interval_s: float = 0.1) -> None:
        """Sample every ``interval_s`` until cancelled."""
        while True:
            self.samples.append((time.monotonic(), self.read()))
            await trio.sleep(interval_s)


class Client:
    """``tools/call`` over Streamable HTTP with one identity's token."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "mcp-protocol-version": HANDSHAKE,
            "authorization": f"Bearer {token}",
        }
        self.n = 0

    async def call(self, tool: str, arguments: dict[str, object]) -> Answer:
        """Call ``tool``; the answer's kind and the time it took."""
        self.n += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.n,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        started = time.perf_counter()
        response = await self.http.post(self.url, json=body, headers=self.headers)
        seconds = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"{tool}: HTTP {response.status_code} {response.text[:300]}")
        answer = response.json()
        if "error" in answer:
            return Answer(seconds, f"jsonrpc {answer['error'].get('code')}")
        result = answer["result"]
        if result.get("isError"):
            payload = json.loads(result["content"][0]["text"])
            return Answer(seconds, str(payload.get("error")), str(payload.get("hint", "")))
        return Answer(seconds, "ok")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def prepare(data_dir: Path) -> dict[str, object]:
    """Generate the store unless the data dir has one; return its manifest."""
    db = data_dir / "telemetry.db"
    manifest = Path(f"{db}.json")
    if not db.exists() or not manifest.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        print(f"generating a 1M-span store in {db} (a few minutes)...", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "gen_telemetry.py"),
                str(db),
                "--spans",
                "1000000",
                "--logs",
                "200000",
                "--hours",
                "144",
            ],
            check=True,
        )
    loaded: dict[str, object] = json.loads(manifest.read_text())
    return loaded


def make_tokens(data_dir: Path) -> tuple[str, str]:
    """Two new viewer service tokens (A, B) in the data dir's identity store."""
    from coremetry.auth import open_identity_store

    with open_identity_store(data_dir) as store:
        suffix = len(store.list_tokens())
        token_a, _ = store.create_token(f"fairness-a-{suffix}", "viewer", None)
        token_b, _ = store.create_token(f"fairness-b-{suffix}", "viewer", None)
    return token_a, token_b


async def busiest_service(client: Client) -> str:
    """The service with the most requests over the last 24 h (``list_services``)."""
    body = {
        "jsonrpc": "2.0",
        "id": "busiest",
        "method": "tools/call",
        "params": {"name": "list_services", "arguments": {"range": "24h", "limit": 500}},
    }
    response = await client.http.post(client.url, json=body, headers=client.headers)
    result = response.json()["result"]
    rows = result.get("structuredContent", {}).get("services")
    if result.get("isError") or not isinstance(rows, list):
        raise RuntimeError(f"list_services answered {str(result)[:500]}")
    best = max(
        (row for row in rows if isinstance(row, dict)),
        key=lambda row: row.get("request_count") or 0,
    )
    return str(best["service"])


def heavy_calls(service: str, n: int) -> list[tuple[str, dict[str, object]]]:
    """A's ``n`` heavy calls, in turn over four tools, all over 7 days."""
    kinds: list[tuple[str, dict[str, object]]] = [
        ("get_service", {"service": service, "range": "7d"}),
        ("get_service_map", {"range": "7d"}),
        ("list_services", {"range": "7d"}),
        ("search_traces", {"range": "7d", "min_duration_ms": 1, "limit": 100}),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


async def light_loop(
    client: Client, traces: list[str], out: list[float], stop: trio.Event, limit: int | None
) -> None:
    """B's light calls one after another until ``stop`` (or ``limit`` calls)."""
    i = 0
    while not stop.is_set() and (limit is None or i < limit):
        trace = traces[i % len(traces)]
        if i % 2 == 0:
            answer = await client.call("search_logs", {"trace_id": trace, "range": "7d"})
        else:
            answer = await client.call("get_trace", {"trace_id": trace})
        if answer.kind != "ok":
            raise RuntimeError(f"a light call answered {answer.kind}: {answer.hint}")
        out.append(answer.seconds)
        i += 1


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="coremetry-fairness-") as tmp:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp) / "data"
        manifest = prepare(data_dir)
        store_bytes = (data_dir / "telemetry.db").stat().st_size
        token_a, token_b = make_tokens(data_dir)
        config = Path(tmp) / "fairness.toml"
        config.write_text(CONFIG)
        stderr_path = Path(tmp) / "serve-stderr.log"
        with stderr_path.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                [
                    sys.executable,
                    "-m",
                    "coremetry",
                    "serve",
                    "--port",
                    "0",
                    "--data-dir",
                    str(data_dir),
                    "--config",
                    str(config),
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env={**os.environ, "COREMETRY_DATA_DIR": str(data_dir)},
                cwd=REPO,
            )
        try:
            base = ""
            with trio.fail_after(120):
                while not base:
                    await trio.sleep(0.1)
                    if process.poll() is not None:
                        raise RuntimeError(stderr_path.read_text())
                    for line in stderr_path.read_text().splitlines():
                        if "listening on " in line:
                            base = line.split("listening on ", 1)[1].strip()
            return await measure(args, base, process.pid, token_a, token_b, manifest, store_bytes)
        finally:
            process.terminate()
            with trio.move_on_after(20):
                await process.wait()
            if process.poll() is None:
                process.kill()


async def heavy_burst(url: str, token: str, service: str, n: int) -> list[Answer]:
    """A's ``n`` heavy calls at once (:func:`heavy_calls`), in this process; their answers."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    heavy: list[Answer] = []
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        a = Client(http, url, token)

        async def one_heavy(tool: str, arguments: dict[str, object]) -> None:
            heavy.append(await a.call(tool, arguments))

        async with trio.open_nursery() as burst:
            for tool, arguments in heavy_calls(service, n):
                burst.start_soon(one_heavy, tool, arguments)
    return heavy


async def burst_in_child(url: str, token: str, service: str, n: int) -> list[Answer]:
    """:func:`heavy_burst` in a child process (``--heavy-child``), so that parsing A's large
    answers never delays B's client, which shares no interpreter with it."""
    done = await trio.run_process(
        [sys.executable, __file__, "--heavy-child", url, service, "--heavy", str(n)],
        stdin=token.encode(),
        capture_stdout=True,
    )
    return [Answer(**row) for row in json.loads(done.stdout)]


async def measure(
    args: argparse.Namespace,
    base: str,
    pid: int,
    token_a: str,
    token_b: str,
    manifest: dict[str, object],
    store_bytes: int,
) -> int:
    url = base + "/api/mcp"
    raw_traces = manifest["sample_traces"]
    assert isinstance(raw_traces, list)
    traces = [str(t) for t in raw_traces][:50]
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    rounds: list[tuple[list[float], list[float], float]] = []
    heavy: list[Answer] = []
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        b = Client(http, url, token_b)
        service = await busiest_service(b)
        warm: list[float] = []
        await light_loop(b, traces, warm, trio.Event(), 20)
        rss = RssSampler(pid)
        before = rss.read()
        async with trio.open_nursery() as outer:
            outer.start_soon(rss.run)
            for _ in range(int(args.rounds)):
                alone: list[float] = []
                await light_loop(b, traces, alone, trio.Event(), int(args.alone_calls))
                contended: list[float] = []
                done = trio.Event()
                started = time.monotonic()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(light_loop, b, traces, contended, done, None)
                    heavy += await burst_in_child(url, token_a, service, int(args.heavy))
                    done.set()
                rounds.append((alone, contended, time.monotonic() - started))
            peak = max((sample for _, sample in rss.samples), key=lambda r: r.total)
            peak_anon = max(sample.anon for _, sample in rss.samples)
            await trio.sleep(float(args.after_s))
            after = rss.read()
            outer.cancel_scope.cancel()

    mib = 2**20
    print(
        f"store: {manifest['spans']:,} spans, {manifest['logs']:,} log records, "
        f"{store_bytes / mib:,.0f} MiB on disk; busiest service {service}"
    )
    ratios: list[float] = []
    for i, (alone, contended, burst_s) in enumerate(rounds, 1):
        alone_p99, cont_p99 = percentile(alone, 0.99), percentile(contended, 0.99)
        ratios.append(cont_p99 / alone_p99)
        print(
            f"round {i}: B alone {len(alone)} light calls, p50 "
            f"{percentile(alone, 0.5) * 1e3:.1f} ms, p99 {alone_p99 * 1e3:.1f} ms; "
            f"during A's burst ({burst_s:.1f} s) {len(contended)} calls, p50 "
            f"{percentile(contended, 0.5) * 1e3:.1f} ms, p99 {cont_p99 * 1e3:.1f} ms (max "
            f"{max(contended) * 1e3:.0f} ms); p99 ratio {ratios[-1]:.2f}x"
        )
    ratio = statistics.median(ratios)
    all_alone = [s for alone, _, _ in rounds for s in alone]
    all_contended = [s for _, contended, _ in rounds for s in contended]
    print(
        f"B alone, all rounds:     {len(all_alone)} calls, p50 "
        f"{percentile(all_alone, 0.5) * 1e3:.1f} ms, p99 {percentile(all_alone, 0.99) * 1e3:.1f} ms"
    )
    print(
        f"B contended, all rounds: {len(all_contended)} calls, p50 "
        f"{percentile(all_contended, 0.5) * 1e3:.1f} ms, p99 "
        f"{percentile(all_contended, 0.99) * 1e3:.1f} ms"
    )
    outcomes: dict[str, int] = {}
    for answer in heavy:
        outcomes[answer.kind] = outcomes.get(answer.kind, 0) + 1
    durations = sorted(answer.seconds for answer in heavy)
    print(
        f"A: {len(heavy)} heavy calls: "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        + f"; answered after {durations[0]:.1f}-{durations[-1]:.1f} s "
        f"(median {statistics.median(durations):.1f} s)"
    )
    hints = sorted({answer.hint for answer in heavy if answer.kind != "ok"})
    for hint in hints:
        print(f"  hint: {hint[:200]}")
    print(
        f"server RSS (VmRSS): before {before.total / mib:.0f} MiB, peak {peak.total / mib:.0f} "
        f"MiB (= {peak.total / store_bytes:.2f}x the store's {store_bytes / mib:,.0f} MiB), "
        f"{args.after_s:.0f} s after {after.total / mib:.0f} MiB "
        f"({(after.total - before.total) / before.total:+.0%})"
    )
    print(
        f"  of which anonymous (RssAnon): before {before.anon / mib:.0f} MiB, peak "
        f"{peak_anon / mib:.0f} MiB (= {peak_anon / store_bytes:.2f}x the store), after "
        f"{after.anon / mib:.0f} MiB ({(after.anon - before.anon) / before.anon:+.0%}); "
        f"file-backed (RssFile, the mmapped store): before {before.file / mib:.0f}, peak "
        f"{peak.file / mib:.0f}, after {after.file / mib:.0f} MiB"
    )
    print(
        f"B p99 contended / alone, median of {len(ratios)} rounds: {ratio:.2f}x (target <= 2x): "
        f"{'PASS' if ratio <= 2 else 'FAIL'}"
    )
    back = after.total <= before.total * 1.2
    back_anon = after.anon <= before.anon * 1.2
    print(f"RSS {args.after_s:.0f} s after within 20 % of before: {'PASS' if back else 'FAIL'}")
    print(
        f"anonymous RSS {args.after_s:.0f} s after within 20 % of before: "
        f"{'PASS' if back_anon else 'FAIL'}"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "rounds": [{"alone_s": a, "contended_s": c} for a, c, _ in rounds],
                    "heavy": [vars(h) for h in heavy],
                    "rss": {"before": vars(before), "peak": vars(peak), "after": vars(after)},
                    "rss_samples": [(t, vars(r)) for t, r in rss.samples],
                    "store_bytes": store_bytes,
                    "service": service,
                },
                indent=1,
            )
        )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", help="a data dir with telemetry.db (+ .json); else generated")
    parser.add_argument("--heavy", type=positive, default=20, help="A's calls at once (20)")
    parser.add_argument(
        "--alone-calls", type=positive, default=200, help="B's baseline calls (200)"
    )
    parser.add_argument("--after-s", type=float, default=30.0, help="RSS read this long after")
    parser.add_argument("--rounds", type=positive, default=3, help="alone/contended pairs (3)")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON")
    parser.add_argument(
        "--heavy-child", nargs=2, metavar=("URL", "SERVICE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.heavy_child:
        url, service = args.heavy_child
        token = sys.stdin.read().strip()
        answers = trio.run(heavy_burst, url, token, service, int(args.heavy))
        print(json.dumps([vars(answer) for answer in answers]))
        return
    sys.exit(trio.run(run, args))


if __name__ == "__main__":
    main()
