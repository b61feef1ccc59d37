"""What the RED roll-ups cost OTLP ingest: ``otlp_ingest.py``'s case (3) with and without them.

Run: ``python bench/rollup_ingest.py [--spans 100000] [--repeat 5] [--cpu 0]``.

Issue 15's line: whatever is maintained at ingest must keep OTLP protobuf ingest at >= 0.8x
the spans/s without it. In one process pinned to one core, the corpus of ``otlp_ingest.py``
(SmartThings trace shapes, requests of <= 512 spans of one service) is decoded and written
into a fresh embedded store, ``--repeat`` times each way, the two ways interleaved so that a
busy moment of a shared machine slows both (each run's CPU time is measured too, which
another process's load disturbs less than wall time): **with** roll-ups (the store as it is) and
**without** (``coremetry.store.sqlite._rollups.apply_written`` and ``apply_logs`` replaced by
no-ops for the run: the store then writes exactly what the schema-3 store wrote, plus one
``SELECT max(id)`` per batch). Prints best and median spans/s of each, the ratio of the
medians and a PASS/FAIL line (target >= 0.8x; exit 0 either way).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import otlp_ingest  # the corpus and case (3)

from coremetry.store.sqlite import _rollups

TARGET: Final = 0.8


async def _ingest(corpus: otlp_ingest.Corpus, directory: Path, *, check: bool) -> float:
    """``otlp_ingest.run_ingest``'s case (3), seconds; the span count checked when ``check``.

    Without roll-ups the count cannot be checked: ``statistics()`` reads it from the
    roll-ups' day rows (``run_ingest`` would raise on every run without them).
    """
    elapsed, _ = await otlp_ingest.run_ingest(corpus, directory, check=check)
    return elapsed


async def _one(corpus: otlp_ingest.Corpus, rollups: bool) -> tuple[float, float]:
    """One ingest of the corpus: (spans per wall second, spans per CPU second of the process)."""
    saved = (_rollups.apply_written, _rollups.apply_logs)
    if not rollups:
        _rollups.apply_written = lambda *args: None
        _rollups.apply_logs = lambda *args: None
    try:
        with tempfile.TemporaryDirectory() as directory:
            cpu = time.process_time()
            elapsed = await _ingest(corpus, Path(directory), check=rollups)
            cpu = time.process_time() - cpu
    finally:
        _rollups.apply_written, _rollups.apply_logs = saved
    return corpus.spans / elapsed, corpus.spans / cpu


async def main_async(args: argparse.Namespace) -> None:
    """Build the corpus, run both ways interleaved, print the figures and the verdict."""
    corpus = otlp_ingest.build_corpus(args.spans, args.batch)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu_rates: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.repeat):
        for rollups in (False, True) if i % 2 == 0 else (True, False):
            wall, cpu = await _one(corpus, rollups)
            rates[rollups].append(wall)
            cpu_rates[rollups].append(cpu)
            print(
                f"  run {i + 1}, roll-ups {'on ' if rollups else 'off'}: {wall:,.0f} spans/s "
                f"({cpu:,.0f} per CPU second)",
                file=sys.stderr,
            )
    for rollups in (False, True):
        label = "with roll-ups   " if rollups else "without roll-ups"
        print(
            f"{label}: best {max(rates[rollups]):,.0f} spans/s, "
            f"median {statistics.median(rates[rollups]):,.0f} spans/s; "
            f"median {statistics.median(cpu_rates[rollups]):,.0f} spans per CPU second"
        )
    ratio = statistics.median(rates[True]) / statistics.median(rates[False])
    cpu_ratio = statistics.median(cpu_rates[True]) / statistics.median(cpu_rates[False])
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    print(f"OTLP ingest with roll-ups / without: {ratio:.2f}x (target >= {TARGET}x): {verdict}")
    print(
        f"per CPU second (the process's, less sensitive to a shared machine): {cpu_ratio:.2f}x: "
        f"{'PASS' if cpu_ratio >= TARGET else 'FAIL'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--spans", type=int, default=100_000, help="spans per run")
    parser.add_argument("--batch", type=int, default=512, help="spans per request")
    parser.add_argument("--repeat", type=int, default=5, help="runs each way, interleaved")
    parser.add_argument("--cpu", type=int, default=0, help="the core to pin to")
    args = parser.parse_args()
    started = time.perf_counter()
    os.sched_setaffinity(0, {args.cpu})
    trio.run(main_async, args)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
