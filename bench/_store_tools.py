"""The RED tools over 1 h / 24 h / 7 d through MCP, a process per (tool, window): p50, memory.

Used by ``bench/store_queries.py`` (issue 15's "store at scale" and issue 13's "memory bounded
by the answer"); run alone as ``python bench/_store_tools.py DB [--repeat 5]``.

Each (tool, window) runs in a fresh process (``python bench/_store_tools.py DB --worker TOOL
WINDOW``): it opens the store (``open_sqlite_store``, retention off), registers every
Coremetry tool on an in-process :class:`~coremetry.mcp.Server` with the clock pinned at the
store's newest data, does the MCP handshake, makes one warm-up ``tools/call`` and then
``--repeat`` timed ones (``time.perf_counter`` around ``await server.handle(body)``, the
JSON-RPC body in, the answer's bytes out; ``time.process_time`` beside it: the CPU of every
thread of the process, the store's worker threads included, steadier than the wall time on a
shared machine). It reports the samples, the process's heap
(``RssAnon``: resident memory that is not a mapped file, so not the store's memory-mapped
pages) before the calls and its peak during them (sampled every 2 ms), and the peak RSS
(``ru_maxrss``, which also counts the mapped pages of the database file read), so each peak
belongs to that query alone. A tool answer that is an error is reported as ``ERROR``.

Windows: ``list_services``, ``get_service`` (the busiest service) and ``get_service_map`` over
``range`` ``1h``/``24h``/``7d`` ending at the newest data; ``compare_deploys`` over a window of
that length centred on the latest version change of a service that has one (so each side has
data). Targets (issue 15): 24 h p50 <= 150 ms, 7 d p50 <= 500 ms, 7 d / 1 h <= 3.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

SECOND: Final = 1_000_000_000
HOUR: Final = 3600 * SECOND
WINDOWS: Final = {"1h": HOUR, "24h": 24 * HOUR, "7d": 7 * 24 * HOUR}
TOOLS: Final = ("list_services", "get_service", "get_service_map", "compare_deploys")
TARGET_24H_MS: Final = 150.0
TARGET_7D_MS: Final = 500.0
TARGET_RATIO: Final = 3.0


def _rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


class _AnonPeak:
    """Samples ``RssAnon`` (heap: not the store file's memory-mapped pages) every 2 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss_kib("RssAnon"))

    def __enter__(self) -> _AnonPeak:
        self.peak = _rss_kib("RssAnon")
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _rfc3339(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // SECOND))


async def worker(db: Path, tool: str, window: str, repeat: int) -> dict[str, object]:
    """Time ``tool`` over ``window`` ``repeat`` times in this process (see the docstring)."""
    from _mcp_common import handshake_connection

    from coremetry.mcp import Caller, Server
    from coremetry.observability.registration import register_observability
    from coremetry.store import TimeRange, open_sqlite_store

    async with open_sqlite_store(db, retention_days=0) as store:
        stats = await store.statistics()
        assert stats.newest_unix_nano is not None
        end = stats.newest_unix_nano + 1
        length = WINDOWS[window]
        server = Server("coremetry-bench", "0")
        register_observability(server, store, clock=lambda: end)
        conn = await handshake_connection(
            server, Caller(subject="bench", role="viewer"), "2025-06-18", 1
        )
        everything = TimeRange(start_unix_nano=end - WINDOWS["7d"], end_unix_nano=end)
        busiest = (await store.services(everything, limit=1)).items[0].service_name
        arguments: dict[str, object] = {"range": window}
        if tool == "get_service":
            arguments["service"] = busiest
        elif tool == "compare_deploys":
            deploys = await store.deploys(everything, limit=1000)
            by_service: dict[str, list[int]] = {}
            for d in deploys:
                by_service.setdefault(d.service_name, []).append(d.first_seen_unix_nano)
            service, firsts = max(
                ((s, f) for s, f in by_service.items() if len(f) > 1), key=lambda i: max(i[1])
            )
            change = max(firsts)
            start = max(end - WINDOWS["7d"], change - length // 2)
            arguments = {
                "service": service,
                "start": _rfc3339(start),
                "end": _rfc3339(min(end, start + length)),
            }
        body: dict[str, object] = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        samples: list[float] = []
        cpu: list[float] = []
        anon_before = _rss_kib("RssAnon")
        result: dict[str, object] = {}
        size = 0
        with _AnonPeak() as sampler:
            for i in range(repeat + 1):
                body["id"] = 10 + i
                request = msgspec.json.encode(body)
                started = time.perf_counter()
                cpu_started = time.process_time()
                reply = await server.handle(request, conn)
                elapsed = (time.perf_counter() - started) * 1000
                cpu_elapsed = (time.process_time() - cpu_started) * 1000
                if reply is None:
                    raise SystemExit(f"{tool} {arguments}: no answer")
                size = len(reply.body)
                answer = json.loads(reply.body)
                result = answer.get("result", {})
                if "error" in answer or result.get("isError"):
                    raise SystemExit(f"{tool} {arguments}: {reply.body[:400]!r}")
                if i:
                    samples.append(elapsed)
                    cpu.append(cpu_elapsed)
        structured = result.get("structuredContent")
        error = (
            structured.get("percentile_relative_error") if isinstance(structured, dict) else None
        )
        return {
            "tool": tool,
            "window": window,
            "arguments": arguments,
            "samples_ms": samples,
            "cpu_ms": cpu,
            "anon_before_kib": anon_before,
            "anon_peak_kib": sampler.peak,
            "rss_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "percentile_relative_error": error,
            "answer_bytes": size,
        }


def run_all(db: Path, repeat: int, python: str = sys.executable) -> list[dict[str, object]]:
    """Every (tool, window) in its own process; returns the workers' reports."""
    reports = []
    for tool in TOOLS:
        for window in WINDOWS:
            out = subprocess.run(
                [python, __file__, str(db), "--worker", tool, window, "--repeat", str(repeat)],
                check=False,
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                problem = (out.stderr.strip().splitlines() or ["no output"])[-1]
                failed: dict[str, object] = {"tool": tool, "window": window, "error": problem}
                reports.append(failed)
                continue
            reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return reports


def print_report(reports: list[dict[str, object]]) -> bool:
    """The table and its PASS/FAIL lines; returns whether every target passed."""
    p50: dict[tuple[str, str], float] = {}
    cpu_p50: dict[tuple[str, str], float] = {}
    header = (
        f"{'tool':18} {'window':>6} {'p50 ms':>9} {'min ms':>9} {'CPU p50':>8} "
        f"{'peak heap MiB':>14} {'+ over idle':>12} {'peak RSS MiB':>13} {'answer B':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in reports:
        key = (str(r["tool"]), str(r["window"]))
        if "error" in r:
            p50[key] = math.inf
            print(f"{key[0]:18} {key[1]:>6} ERROR {r['error']}")
            continue
        samples = [float(s) for s in r["samples_ms"]]  # type: ignore[attr-defined]  # JSON list
        p50[key] = statistics.median(samples)
        heap = int(str(r["anon_peak_kib"])) / 1024
        growth = heap - int(str(r["anon_before_kib"])) / 1024
        rss = int(str(r["rss_peak_kib"])) / 1024
        cpu_samples = [float(s) for s in r.get("cpu_ms", [math.nan])]  # type: ignore[attr-defined]  # JSON list
        cpu = cpu_p50[key] = statistics.median(cpu_samples)
        print(
            f"{key[0]:18} {key[1]:>6} {p50[key]:9.1f} {min(samples):9.1f} {cpu:8.1f} "
            f"{heap:14.0f} {growth:12.0f} {rss:13.0f} {r['answer_bytes']!s:>9}"
        )
    errors = sorted(
        {e for r in reports if isinstance(e := r.get("percentile_relative_error"), float)}
    )
    print(f"percentile_relative_error stated in the answers: {errors or 'none'}")
    ok = True
    for tool in TOOLS:
        ratio = p50[(tool, "7d")] / p50[(tool, "1h")]
        for label, passed in (
            (
                f"24 h p50 {p50[(tool, '24h')]:.0f} ms <= {TARGET_24H_MS:g} ms",
                p50[(tool, "24h")] <= TARGET_24H_MS,
            ),
            (
                f"7 d p50 {p50[(tool, '7d')]:.0f} ms <= {TARGET_7D_MS:g} ms",
                p50[(tool, "7d")] <= TARGET_7D_MS,
            ),
            (f"7 d / 1 h {ratio:.1f}x <= {TARGET_RATIO:g}x", ratio <= TARGET_RATIO),
        ):
            ok &= passed
            print(f"{tool:18} {label:36} {'PASS' if passed else 'FAIL'}")
    cpu_ratios = [
        f"{tool} {cpu_p50[(tool, '7d')] / cpu_p50[(tool, '1h')]:.1f}x"
        for tool in TOOLS
        if cpu_p50.get((tool, "1h"), 0) > 0 and (tool, "7d") in cpu_p50
    ]
    print(f"CPU p50 7 d / 1 h (not a target): {', '.join(cpu_ratios) or 'none'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("db", help="a store made by bench/gen_telemetry.py")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per (tool, window)")
    parser.add_argument("--json", help="also write the reports as JSON")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "WINDOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        report = trio.run(worker, Path(args.db), args.worker[0], args.worker[1], args.repeat)
        print(json.dumps(report))
        return
    reports = run_all(Path(args.db), args.repeat)
    print_report(reports)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
