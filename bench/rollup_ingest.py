"""What the RED roll-ups cost OTLP ingest, measured paired: two stores, one request at a time.

Run: ``python bench/rollup_ingest.py [--spans 100000] [--batch 512] [--rounds 3] [--cpu 0]``.

Issue 15's line: whatever is maintained at ingest must keep OTLP protobuf ingest at >= 0.8x
the spans/s without it. Medians of whole runs swing +-0.1 on a shared VM (a busy second
lands on one arm), so this bench pairs the two arms request by request. In one process
pinned to one core, the corpus of ``otlp_ingest.py`` (SmartThings trace shapes, requests of
<= ``--batch`` spans of one service) is ingested into two fresh embedded stores side by side:
**with** roll-ups (the store as it is) and **without** (``TailRollup.written`` and
``_rollups.apply_logs`` replaced by no-ops for that store's calls: it then writes what the
schema-3 store wrote, plus one ``SELECT max(id)`` per batch). Each request is decoded and written
into one store, then decoded and written into the other, the order swapped every request,
so a busy moment of the machine falls on both arms alike. The roll-ups' deferred pass
(``resolve_pending``: it rolls up the tail and the waiting children) is run by the bench on
the store with roll-ups every ``PENDING_PASS_S`` seconds of that arm's time, as the store's
background task runs it, and at the end; its time is counted in that arm (the stores' own
background task is put off for the run). ``--rounds`` repeats the whole thing on fresh
stores; ``--interleaved`` sends the services' requests in turn instead of service by service.

Prints, per round and over all rounds: seconds of decode + write per arm (wall and CPU), the
deferred pass, spans/s, the ratio with/without for OTLP ingest (decode + write + pass, the
target's line, PASS/FAIL against 0.8x) and for the store write alone; the database size per
million spans of each arm. Then what the tail costs a read (:func:`tail_reads`). Exit 0
either way; 1 when a store does not hold the corpus's span count.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import otlp_ingest  # the corpus

from coremetry.ingest.otlp import decode_traces_protobuf
from coremetry.store import TimeRange
from coremetry.store.sqlite import _rollups, _store, open_sqlite_store
from coremetry.store.sqlite._store import SqliteStore

TARGET: Final = 0.8
PASS_EVERY_S: Final = _store.PENDING_PASS_S
"""Seconds of the with-arm's time between two runs of the deferred pass on its store: the
store's background task runs it every :data:`~coremetry.store.sqlite._store.PENDING_PASS_S`."""


@dataclass
class Arm:
    """One arm's accumulated seconds (wall and this thread's + the writer thread's CPU)."""

    label: str
    decode_s: float = 0.0
    write_s: float = 0.0
    write_cpu_s: float = 0.0
    pass_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.decode_s + self.write_s + self.pass_s


def _off() -> Callable[[], None]:
    """Replace the roll-up maintenance with no-ops; returns the undo."""
    saved = (_rollups.TailRollup.written, _rollups.apply_logs)

    def nothing(*args: object) -> None:
        return None

    _rollups.TailRollup.written = nothing  # type: ignore[method-assign,assignment]  # "without"
    _rollups.apply_logs = nothing  # type: ignore[assignment]  # the bench's "without" arm

    def undo() -> None:
        _rollups.TailRollup.written, _rollups.apply_logs = saved  # type: ignore[method-assign]

    return undo


async def _request(store: SqliteStore, body: bytes, arm: Arm, rollups: bool) -> None:
    """Decode ``body`` and write it into ``store``, timing both into ``arm``."""
    undo = None if rollups else _off()
    try:
        started = time.perf_counter()
        batch = decode_traces_protobuf(body).batch
        decoded = time.perf_counter()
        cpu = time.process_time()
        await store.write(batch)
        arm.write_cpu_s += time.process_time() - cpu
        arm.write_s += time.perf_counter() - decoded
        arm.decode_s += decoded - started
    finally:
        if undo is not None:
            undo()


async def run_round(corpus: otlp_ingest.Corpus, directory: Path) -> tuple[Arm, Arm, int, int]:
    """One paired run on fresh stores: (with, without, size with, size without) (bytes)."""
    on, off = Arm("with roll-ups"), Arm("without")
    # The stores' own deferred pass (every few seconds) would land in either arm: the bench
    # runs it itself on the store with roll-ups, and never on the other.
    _store.PENDING_PASS_S = 3600.0  # type: ignore[misc]  # the bench's own cadence instead
    async with (
        open_sqlite_store(directory / "on.db", retention_days=0) as store_on,
        open_sqlite_store(directory / "off.db", retention_days=0) as store_off,
    ):
        assert isinstance(store_on, SqliteStore)
        assert isinstance(store_off, SqliteStore)
        next_pass = PASS_EVERY_S
        for i, body in enumerate(corpus.bodies):
            order = ((store_on, on, True), (store_off, off, False))
            for store, arm, rollups in order if i % 2 == 0 else order[::-1]:
                await _request(store, body, arm, rollups)
            if on.total_s >= next_pass or i + 1 == len(corpus.bodies):
                next_pass = on.total_s + PASS_EVERY_S
                started = time.perf_counter()
                await store_on.resolve_pending()
                on.pass_s += time.perf_counter() - started
        # Roll-ups on: the count from the roll-ups and from the raw spans must agree.
        stats = await store_on.statistics()
        if stats.span_count != corpus.spans:
            raise otlp_ingest.BenchError(
                f"the store with roll-ups holds {stats.span_count} spans, expected {corpus.spans}"
            )
        size_on = stats.size_bytes or 0
        size_off = (await store_off.statistics()).size_bytes or 0
    return on, off, size_on, size_off


def _report(title: str, on: Arm, off: Arm, spans: int) -> float:
    """Print one block of figures; returns the OTLP ingest ratio (with / without, spans/s)."""
    ratio = off.total_s / on.total_s
    write_ratio = off.write_s / (on.write_s + on.pass_s)
    cpu_ratio = (off.decode_s + off.write_cpu_s) / (on.decode_s + on.write_cpu_s + on.pass_s)
    print(f"{title}:")
    for arm in (off, on):
        print(
            f"  {arm.label:14} decode {arm.decode_s:6.2f} s + write {arm.write_s:6.2f} s"
            f" (CPU {arm.write_cpu_s:6.2f} s) + deferred pass {arm.pass_s:5.2f} s"
            f" = {spans / arm.total_s:8,.0f} spans/s"
        )
    print(
        f"  with / without: OTLP ingest {ratio:.3f}x, store write alone {write_ratio:.3f}x, "
        f"ingest by CPU time {cpu_ratio:.3f}x"
    )
    return ratio


async def tail_reads(corpus: otlp_ingest.Corpus, directory: Path) -> None:
    """What the tail costs a read: three reads with the whole corpus in the tail, then none.

    The corpus is written with the tail unbounded (``ROLL_EVERY`` raised for the run), the
    reads timed (best of 5), the tail rolled up (``resolve_pending``) and the reads timed
    again; printed per 1,000 tail spans and for a full tail of ``ROLL_EVERY`` spans.
    """
    saved = _rollups.ROLL_EVERY
    _rollups.ROLL_EVERY = 1 << 62  # type: ignore[misc]  # every span stays in the tail
    try:
        async with open_sqlite_store(directory / "tail.db", retention_days=0) as store:
            for body in corpus.bodies:
                await store.write(decode_traces_protobuf(body).batch)
            stats = await store.statistics()
            assert stats.oldest_unix_nano is not None
            assert stats.newest_unix_nano is not None
            window = TimeRange(
                start_unix_nano=stats.oldest_unix_nano - 3_600_000_000_000,
                end_unix_nano=stats.newest_unix_nano + 1,
            )
            busiest = (await store.services(window, limit=1)).items[0].service_name
            reads: dict[str, Callable[[], Awaitable[object]]] = {
                "services": lambda: store.services(window, limit=100),
                "operations": lambda: store.operations(busiest, window, limit=100),
                "service_edges": lambda: store.service_edges(window, limit=100),
            }
            timed: dict[str, list[float]] = {name: [] for name in reads}
            for label in ("tail", "rolled"):
                if label == "rolled":
                    await store.resolve_pending()
                for name, read in reads.items():
                    best = float("inf")
                    for _ in range(5):
                        started = time.perf_counter()
                        await read()
                        best = min(best, time.perf_counter() - started)
                    timed[name].append(best)
    finally:
        _rollups.ROLL_EVERY = saved  # type: ignore[misc]  # restored
    print(f"reads over the corpus's hour, {corpus.spans:,} spans in the tail / rolled up:")
    for name, (tail, rolled) in timed.items():
        per = (tail - rolled) / corpus.spans * 1000
        print(
            f"  {name:14} {tail * 1e3:7.1f} ms / {rolled * 1e3:6.1f} ms: {per * 1e3:.2f} ms "
            f"per 1,000 tail spans, {per * saved / 1000 * 1e3:.0f} ms for a full tail of "
            f"{saved:,} (ROLL_EVERY)"
        )


async def main_async(args: argparse.Namespace) -> int:
    corpus = otlp_ingest.build_corpus(args.spans, args.batch, interleaved=args.interleaved)
    print(
        f"corpus: {corpus.spans:,} spans in {len(corpus.bodies)} requests of <= {args.batch} "
        f"spans, {corpus.services} services (SmartThings trace shapes)"
    )
    total_on, total_off = Arm("with roll-ups"), Arm("without")
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="rollup-ingest-") as tmp:
            try:
                on, off, size_on, size_off = await run_round(corpus, Path(tmp))
            except otlp_ingest.BenchError as exc:
                print(f"ERROR: {exc}", file=sys.stderr)
                return 1
        _report(f"round {n + 1}", on, off, corpus.spans)
        print(
            f"  database: {size_on / 2**20 * 1e6 / corpus.spans:,.0f} MiB per million spans "
            f"with roll-ups, {size_off / 2**20 * 1e6 / corpus.spans:,.0f} without"
        )
        for total, arm in ((total_on, on), (total_off, off)):
            total.decode_s += arm.decode_s
            total.write_s += arm.write_s
            total.write_cpu_s += arm.write_cpu_s
            total.pass_s += arm.pass_s
    ratio = _report(f"all {args.rounds} rounds", total_on, total_off, corpus.spans * args.rounds)
    with tempfile.TemporaryDirectory(prefix="rollup-tail-") as tmp:
        await tail_reads(corpus, Path(tmp))
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    print(f"OTLP ingest with roll-ups / without: {ratio:.2f}x (target >= {TARGET}x): {verdict}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--spans", type=int, default=100_000, help="spans per round")
    parser.add_argument("--batch", type=int, default=512, help="spans per request")
    parser.add_argument("--rounds", type=int, default=3, help="paired runs on fresh stores")
    parser.add_argument("--cpu", type=int, default=0, help="the core to pin to")
    parser.add_argument("--interleaved", action="store_true", help="services' requests in turn")
    args = parser.parse_args()
    started = time.perf_counter()
    print(otlp_ingest.pin(args.cpu))
    # The garbage collector tuned as `coremetry serve` tunes it (cli._tune_gc).
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    code = trio.run(main_async, args)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
