"""Query latency, write throughput and size of the embedded SQLite store on a 1M-span store.

Run: ``python bench/gen_telemetry.py /tmp/bench/telemetry.db`` once (about 4 minutes), then
``python bench/store_queries.py /tmp/bench/telemetry.db [--repeat 30] [--json PATH]``.

Every figure is the latency of one ``await store.<query>(...)`` through the public
:class:`~coremetry.store.TelemetryStore` methods of an open ``SqliteStore`` (worker thread,
read transaction, SQL, records built), ``time.perf_counter`` around the ``await``, after a
warm-up, each query repeated ``--repeat`` times over varying arguments (different traces,
hours, words) and reported as p50/p95. Two baselines measured in the same run:

- ``floor``: ``SELECT * FROM spans WHERE id = ?`` by primary key through the same read path
  (worker thread + read transaction + one statement): the least any store call costs. Every
  ``x floor`` ratio divides by its p50.
- ``raw``: the same SELECT on a plain ``sqlite3`` connection in this thread (no trio, no
  thread hop), for reference.

Targets (issue 5), informational (exit 0 either way): ``get_trace`` of a 1,000-span trace
p50 <= 5 ms; full-text log search p50 <= 20 ms; ``services()`` (per-service RED) over one hour
<= 150 ms. Also printed: ``search_traces``, ``service_edges``, ``metric_series`` and others,
``write`` throughput in spans/s (and log records/s) for batches of 1,000 into a copy of the
store, and the database size per million spans and per million log records (from SQLite's
``dbstat``).
"""

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.store import (
    LabelMatcher,
    LogQuery,
    MetricQuery,
    Span,
    TelemetryBatch,
    TimeRange,
    TraceQuery,
    open_sqlite_store,
)
from coremetry.store.sqlite import SqliteStore
from coremetry.store.sqlite._runtime import ReadContext
from coremetry.store.sqlite._text import fts_query

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _store_tools  # the RED tools over 1 h / 24 h / 7 d, a process each
import gen_telemetry  # the generator's replay gives realistic write batches

SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

TEXT_QUERIES: Final = (
    "Order not found",  # words, common in the TrainTicket logs
    '"Get Order By ID Fail"',  # phrase
    "seat*",  # prefix
    "Z1234",  # a train number
    '"left ticket info is empty"',
    "Cancel Order",
    "Calculate distance",
    "verification code",
)
"""Texts searched, in turn (real words and phrases of the Nezha TrainTicket logs)."""


class Row:
    def __init__(self, name: str, samples: list[float], target_ms: float | None = None) -> None:
        self.name = name
        self.samples = samples
        self.target_ms = target_ms

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples)
        return ordered[max(0, (len(ordered) * 95 + 99) // 100 - 1)]


async def timed(
    calls: Sequence[Callable[[], Awaitable[object]]], repeat: int, warmup: int = 3
) -> list[float]:
    for call in calls[:warmup]:
        await call()
    samples: list[float] = []
    for i in range(repeat):
        call = calls[i % len(calls)]
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


class Manifest(msgspec.Struct):
    """What ``gen_telemetry.py`` wrote next to the store (``OUT.db.json``)."""

    spans: int
    logs: int
    start_unix_nano: int
    end_unix_nano: int
    hours: float
    big_traces: list[str]
    sample_traces: list[str]
    services: list[str]


def hours(manifest: Manifest, count: int) -> list[TimeRange]:
    """``count`` one-hour windows spread over the data (whole hours, newest included)."""
    end = manifest.end_unix_nano
    start = manifest.start_unix_nano
    total = (end - start) // HOUR
    picks = sorted({total - 1 - (k * total) // count for k in range(count)})
    return [
        TimeRange(start_unix_nano=start + h * HOUR, end_unix_nano=start + (h + 1) * HOUR)
        for h in picks
        if h >= 0
    ]


def sizes(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    finally:
        conn.close()
    return {str(name): int(size) for name, size in rows}


async def write_throughput(path: Path, repeat_batches: int) -> tuple[float, float]:
    """Spans/s and log records/s, batches of 1,000, into a copy of the store.

    The span rate includes one run of the roll-ups' deferred pass after the writes (what a
    write leaves to it, the store's background task does within seconds).
    """
    gen = gen_telemetry.Generator(
        argparse.Namespace(nezha=str(gen_telemetry.NEZHA), seed=42, hours=24.0)
    )
    spans: list[Span] = []
    while len(spans) < repeat_batches * 1000:
        spans.extend(gen.replay(gen.rng.choice(gen.templates), gen.draw_start()))
    spans = spans[: repeat_batches * 1000]
    logs = gen.logs_for(spans, 1.0)[: repeat_batches * 1000]
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(path, copy)
        async with open_sqlite_store(copy, retention_days=0) as store:
            start = time.perf_counter()
            for i in range(0, len(spans), 1000):
                await store.write(TelemetryBatch(spans=spans[i : i + 1000]))
            # The roll-ups' deferred pass counts with the writes: it writes what they left.
            assert isinstance(store, SqliteStore)
            await store.resolve_pending()
            span_rate = len(spans) / (time.perf_counter() - start)
            start = time.perf_counter()
            for i in range(0, len(logs), 1000):
                await store.write(TelemetryBatch(logs=logs[i : i + 1000]))
            log_rate = len(logs) / (time.perf_counter() - start)
    return span_rate, log_rate


async def run(args: argparse.Namespace) -> None:
    path = Path(args.db)
    if args.tools_only:
        tools_section(path, args.tools_repeat)
        return
    manifest = msgspec.json.decode(await trio.Path(f"{path}.json").read_bytes(), type=Manifest)
    rng = random.Random(3)
    repeat: int = args.repeat
    async with open_sqlite_store(path, retention_days=0) as store:
        stats = await store.statistics()
        max_id = stats.span_count

        def by_pk(ctx: ReadContext) -> object:
            return ctx.execute("SELECT * FROM spans WHERE id = ?", (rng.randrange(1, max_id),))

        counting = sqlite3.connect(path)
        matches = {
            q: int(
                counting.execute(
                    "SELECT count(*) FROM logs_fts WHERE logs_fts MATCH ?", (fts_query(q),)
                ).fetchone()[0]
            )
            for q in TEXT_QUERIES
        }
        counting.close()

        async def one_round() -> list[Row]:
            rows: list[Row] = []
            floor = Row(
                "floor: SELECT by primary key via the store",
                await timed([partial(store._read, by_pk)], repeat * 10),
            )
            raw_conn = sqlite3.connect(path)
            raw_samples = []
            for _ in range(repeat * 10):
                t0 = time.perf_counter()
                raw_conn.execute(
                    "SELECT * FROM spans WHERE id = ?", (rng.randrange(1, max_id),)
                ).fetchall()
                raw_samples.append((time.perf_counter() - t0) * 1000)
            raw_conn.close()
            raw = Row("raw: the same SELECT, plain sqlite3", raw_samples)

            big = list(manifest.big_traces)
            sample = list(manifest.sample_traces)
            last_hours = hours(manifest, 24)
            # The last 24 hours (the whole store when it covers less).
            day = TimeRange(
                start_unix_nano=max(manifest.start_unix_nano, manifest.end_unix_nano - 24 * HOUR),
                end_unix_nano=manifest.end_unix_nano,
            )
            big_sizes = [(await store.get_trace(t, limit=1)).total or 0 for t in big]
            rows.append(
                Row(
                    f"get_trace, {min(big_sizes):,}-{max(big_sizes):,} spans (whole trace)",
                    await timed([partial(store.get_trace, t, limit=2000) for t in big], repeat),
                    target_ms=5.0,
                )
            )
            rows.append(
                Row(
                    "get_trace, a typical trace (Nezha shapes)",
                    await timed([partial(store.get_trace, t, limit=2000) for t in sample], repeat),
                )
            )
            text_calls = [
                partial(store.search_logs, LogQuery(time_range=day, text=q), limit=100)
                for q in TEXT_QUERIES
            ]
            rows.append(
                Row(
                    "search_logs, full text, 24 h, limit 100",
                    await timed(text_calls, max(repeat, 2 * len(TEXT_QUERIES))),
                    target_ms=20.0,
                )
            )
            for q in TEXT_QUERIES:
                rows.append(
                    Row(
                        f"  24 h text {q} ({matches[q]:,} matches)",
                        await timed(
                            [
                                partial(
                                    store.search_logs, LogQuery(time_range=day, text=q), limit=100
                                )
                            ],
                            max(5, repeat // 4),
                            warmup=1,
                        ),
                    )
                )
            text_hour = [
                partial(store.search_logs, LogQuery(time_range=h, text=q), limit=100)
                for q, h in zip(TEXT_QUERIES * 3, last_hours, strict=False)
            ]
            rows.append(
                Row("search_logs, full text, 1 h, limit 100", await timed(text_hour, repeat))
            )
            rows.append(
                Row(
                    "search_logs, no text, service + severity, 1 h",
                    await timed(
                        [
                            partial(
                                store.search_logs,
                                LogQuery(time_range=h, service_name=s, min_severity_number=13),
                                limit=100,
                            )
                            for h, s in zip(last_hours, manifest.services, strict=False)
                        ],
                        repeat,
                    ),
                )
            )
            spans_per_hour = []
            for h in last_hours:
                page = await store.services(h, limit=100)
                spans_per_hour.append(sum(s.span_count for s in page.items))
            rows.append(
                Row(
                    f"services() over 1 h ({min(spans_per_hour):,}-{max(spans_per_hour):,} spans)",
                    await timed(
                        [partial(store.services, h, limit=100) for h in last_hours], repeat
                    ),
                    target_ms=150.0,
                )
            )
            rows.append(
                Row(
                    "operations(service) over 1 h",
                    await timed(
                        [
                            partial(store.operations, s, h, limit=100)
                            for h, s in zip(last_hours, manifest.services, strict=False)
                        ],
                        repeat,
                    ),
                )
            )
            rows.append(
                Row(
                    "search_traces, 1 h, no filter, limit 20",
                    await timed(
                        [
                            partial(store.search_traces, TraceQuery(time_range=h), limit=20)
                            for h in last_hours
                        ],
                        repeat,
                    ),
                )
            )
            rows.append(
                Row(
                    "search_traces, 1 h, service + min duration, limit 20",
                    await timed(
                        [
                            partial(
                                store.search_traces,
                                TraceQuery(
                                    time_range=h, service_name=s, min_duration_ns=50_000_000
                                ),
                                limit=20,
                            )
                            for h, s in zip(last_hours, manifest.services, strict=False)
                        ],
                        repeat,
                    ),
                )
            )
            rows.append(
                Row(
                    "search_traces, 24 h, errors + attribute, limit 20",
                    await timed(
                        [
                            partial(
                                store.search_traces,
                                TraceQuery(
                                    time_range=day,
                                    status="error",
                                    attributes={"http.response.status_code": "500"},
                                ),
                                limit=20,
                            )
                        ],
                        max(5, repeat // 3),
                    ),
                )
            )
            rows.append(
                Row(
                    "service_edges over 1 h",
                    await timed(
                        [partial(store.service_edges, h, limit=200) for h in last_hours], repeat
                    ),
                )
            )
            rows.append(
                Row(
                    "deploys over 24 h",
                    await timed([partial(store.deploys, day, limit=100)], max(5, repeat // 3)),
                )
            )
            rows.append(
                Row(
                    "metric_names over 24 h",
                    await timed([partial(store.metric_names, day, limit=100)], repeat),
                )
            )
            service = manifest.services[0]
            rows.append(
                Row(
                    "metric_series gauge avg, 24 h / 5 min, 1 service",
                    await timed(
                        [
                            partial(
                                store.metric_series,
                                MetricQuery(
                                    name="container.cpu.usage",
                                    time_range=day,
                                    step_ns=5 * MINUTE,
                                    aggregation="avg",
                                    service_name=service,
                                ),
                                limit=100,
                            )
                        ],
                        repeat,
                    ),
                )
            )
            rows.append(
                Row(
                    "metric_series gauge max by pod, 24 h / 5 min, all",
                    await timed(
                        [
                            partial(
                                store.metric_series,
                                MetricQuery(
                                    name="container.cpu.usage",
                                    time_range=day,
                                    step_ns=5 * MINUTE,
                                    aggregation="max",
                                ),
                                limit=100,
                            )
                        ],
                        max(5, repeat // 3),
                    ),
                )
            )
            rows.append(
                Row(
                    "metric_series counter rate, 6 h / 1 min, matcher",
                    await timed(
                        [
                            partial(
                                store.metric_series,
                                MetricQuery(
                                    name="http.server.request.count",
                                    time_range=TimeRange(
                                        start_unix_nano=day.end_unix_nano - 6 * HOUR,
                                        end_unix_nano=day.end_unix_nano,
                                    ),
                                    step_ns=MINUTE,
                                    aggregation="rate",
                                    matchers=[
                                        LabelMatcher(
                                            label="service.name", op="=~", value="ts-(order|seat).*"
                                        )
                                    ],
                                ),
                                limit=100,
                            )
                        ],
                        repeat,
                    ),
                )
            )
            rows.append(
                Row(
                    "metric_series histogram p95, 6 h / 5 min, grouped",
                    await timed(
                        [
                            partial(
                                store.metric_series,
                                MetricQuery(
                                    name="http.server.request.duration",
                                    time_range=TimeRange(
                                        start_unix_nano=day.end_unix_nano - 6 * HOUR,
                                        end_unix_nano=day.end_unix_nano,
                                    ),
                                    step_ns=5 * MINUTE,
                                    aggregation="p95",
                                    group_by=[],
                                ),
                                limit=100,
                            )
                        ],
                        max(5, repeat // 3),
                    ),
                )
            )
            rows.append(Row("statistics()", await timed([store.statistics], max(5, repeat // 3))))
            return [raw, floor, *rows]

        rounds = [await one_round() for _ in range(args.rounds)]
        # Per query, the round with the lowest p50 (the machine is shared: a busy moment
        # slows one round, not all of them).
        table = [min(versions, key=lambda row: row.p50) for versions in zip(*rounds, strict=True)]
        raw, floor, *rows = table

    print(
        f"store: {path} — {stats.span_count:,} spans, {stats.log_count:,} log records, "
        f"{stats.metric_point_count:,} metric points over {manifest.hours} h"
    )
    print()
    header = f"{'query':58} {'p50 ms':>8} {'p95 ms':>8} {'x floor':>8}  target"
    print(header)
    print("-" * len(header))
    for row in [raw, floor, *rows]:
        ratio = row.p50 / floor.p50
        target = ""
        if row.target_ms is not None:
            verdict = "PASS" if row.p50 <= row.target_ms else "FAIL"
            target = f"p50 <= {row.target_ms:g} ms: {verdict}"
        print(f"{row.name:58} {row.p50:8.2f} {row.p95:8.2f} {ratio:7.1f}x  {target}")

    span_rate, log_rate = await write_throughput(path, args.write_batches)
    print()
    print(
        f"write, batches of 1,000 into a copy of the store: {span_rate:,.0f} spans/s, "
        f"{log_rate:,.0f} log records/s"
    )
    size = sizes(path)
    span_tables = (
        "spans",
        "spans_identity",
        "spans_trace_start",
        "spans_start",
        "spans_resource_start",
        "spans_errors",
    )
    rollup_tables: tuple[str, ...] = ("red_services", "red_operations", "red_edges", "edge_pending")
    rollup_tables += tuple(k for k in size if k.startswith("sqlite_autoindex_red_"))
    log_tables = ("logs", "logs_identity", "logs_time", "logs_resource_time", "logs_trace")
    span_bytes = sum(size.get(t, 0) for t in span_tables)
    log_bytes = sum(size.get(t, 0) for t in log_tables)
    fts_bytes = sum(v for k, v in size.items() if k.startswith("logs_fts"))
    rollup_bytes = sum(size.get(t, 0) for t in rollup_tables)
    per = 1_000_000
    print(
        f"size: file {(await trio.Path(path).stat()).st_size / 2**20:,.0f} MiB "
        f"({(await trio.Path(path).stat()).st_size / stats.span_count * per / 2**20:,.0f} MiB "
        f"per million spans, everything); spans + indexes "
        f"{span_bytes / stats.span_count * per / 2**20:,.0f} MiB per million spans "
        f"(+ RED roll-ups {rollup_bytes / stats.span_count * per / 2**20:,.1f} MiB); "
        f"logs + indexes {log_bytes / stats.log_count * per / 2**20:,.0f} MiB "
        f"(+ full-text index {fts_bytes / stats.log_count * per / 2**20:,.0f} MiB) "
        f"per million log records"
    )
    print()
    reports = [] if args.skip_tools else tools_section(path, args.tools_repeat)
    if args.json:
        await trio.Path(args.json).write_text(
            json.dumps(
                {
                    "rows": [
                        {"name": r.name, "p50_ms": r.p50, "p95_ms": r.p95, "samples_ms": r.samples}
                        for r in [raw, floor, *rows]
                    ],
                    "write_spans_per_s": span_rate,
                    "write_logs_per_s": log_rate,
                    "sizes": size,
                    "tools": reports,
                },
                indent=1,
            )
        )


def tools_section(path: Path, repeat: int) -> list[dict[str, object]]:
    """The RED tools over 1 h / 24 h / 7 d with their targets (:mod:`_store_tools`)."""
    print(
        "RED tools through MCP (a process per tool and window; p50 of "
        f"{repeat} after a warm-up; heap = RssAnon, RSS includes the mapped store file):"
    )
    reports = _store_tools.run_all(path, repeat)
    _store_tools.print_report(reports)
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", help="a store made by bench/gen_telemetry.py")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per query")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best p50 counts")
    parser.add_argument("--write-batches", type=int, default=50, help="batches of 1,000 written")
    parser.add_argument("--json", help="also write every figure and sample as JSON")
    parser.add_argument("--tools-repeat", type=int, default=5, help="timed calls per RED tool")
    parser.add_argument("--tools-only", action="store_true", help="only the RED tools section")
    parser.add_argument("--skip-tools", action="store_true", help="no RED tools section")
    trio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
