"""The tools' store queries on the ClickHouse backend (chDB) beside the embedded store.

Two steps (from the repository root, venv with the ``clickhouse-test`` extra active):

``python bench/clickhouse_queries.py gen DIR [--spans 10000000] [--logs 10000000] [--no-sqlite]``
generates the data of ``bench/gen_telemetry.py`` (real Nezha trace shapes, log lines, metrics;
see its docstring) once and writes every batch through the real write path of *both* stores:
the ClickHouse store on an on-disk chDB engine (``chdb:///DIR/chdb``, the exporter's tables
created by ``create_tables``) and, unless ``--no-sqlite``, the embedded store
(``DIR/telemetry.db``) — the same records in both.

``python bench/clickhouse_queries.py run DIR [--repeat 20] [--json PATH]`` opens both and
times the reads the tools make (``services``, ``operations``, ``get_trace``, ``search_traces``,
``search_logs`` with and without text, ``service_edges``, ``deploys``, ``metric_series``,
``service_red_series``, ``log_counts``), each ``await store.<query>(...)`` alone with
``time.perf_counter`` around it, ``--repeat`` calls over varying arguments after a warm-up;
it prints p50/p99 per query and backend and the ratio ClickHouse p50 / SQLite p50 (measured in
the same run, on the same data). The baseline row ``floor`` is ``statistics()``-free: the
cheapest call of each backend (``get_trace`` of an unknown trace id), so each backend's fixed
cost per call is visible.
"""

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.store import (
    LogQuery,
    MetricQuery,
    TelemetryBatch,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    WriteResult,
    open_sqlite_store,
)
from coremetry.store.clickhouse import ClickHouseOptions, TableNames, open_clickhouse_store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_telemetry  # the generator of bench/store_queries.py (same data shapes)

SECOND: Final = 1_000_000_000
HOUR: Final = 3600 * SECOND
TEXT_QUERIES: Final = ("error", "timeout", '"order not found"', "pay*")


def clickhouse_options(directory: Path) -> ClickHouseOptions:
    return ClickHouseOptions(
        url=f"chdb://{(directory / 'chdb').resolve()}",
        tables=TableNames(database="otel"),
        create_tables=True,
    )


class Tee:
    """Writes every batch to each store (``gen_telemetry`` sees one store)."""

    def __init__(self, stores: Sequence[TelemetryStore]) -> None:
        self.stores = stores

    async def write(self, batch: TelemetryBatch) -> WriteResult:
        results = [await store.write(batch) for store in self.stores]
        return results[0]

    async def get_trace(self, trace_id: str, *, limit: int) -> object:
        return await self.stores[0].get_trace(trace_id, limit=limit)

    async def statistics(self) -> object:
        return await self.stores[0].statistics()


async def generate(args: argparse.Namespace) -> None:
    directory = Path(args.dir)
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    out = directory / "telemetry.db"

    @asynccontextmanager
    async def open_both(_path: Path, *, retention_days: float) -> AsyncIterator[Tee]:
        async with AsyncExitStack() as stack:
            stores: list[TelemetryStore] = [
                await stack.enter_async_context(
                    open_clickhouse_store(clickhouse_options(directory))
                )
            ]
            if not args.no_sqlite:
                stores.append(
                    await stack.enter_async_context(
                        open_sqlite_store(out, retention_days=retention_days)
                    )
                )
            yield Tee(stores)

    # gen_telemetry writes through open_sqlite_store: give it both stores instead.
    # (its module global, replaced for this process: the tee has what generate() calls).
    gen_telemetry.__dict__["open_sqlite_store"] = open_both
    await gen_telemetry.generate(
        argparse.Namespace(
            out=str(out),
            spans=args.spans,
            logs=args.logs,
            hours=args.hours,
            big_traces=args.big_traces,
            batch=args.batch,
            seed=args.seed,
            shared=args.shared,
        )
    )


class Manifest(msgspec.Struct):
    spans: int
    logs: int
    start_unix_nano: int
    end_unix_nano: int
    big_traces: list[str]
    sample_traces: list[str]
    services: list[str]


async def timed(calls: Sequence[Callable[[], Awaitable[object]]], repeat: int) -> list[float]:
    for call in calls[:2]:
        await call()
    samples: list[float] = []
    for i in range(repeat):
        start = time.perf_counter()
        await calls[i % len(calls)]()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def pct(samples: list[float], p: int) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]


def queries(
    store: TelemetryStore, m: Manifest, rng: random.Random
) -> dict[str, list[Callable[[], Awaitable[object]]]]:
    end = m.end_unix_nano
    total_hours = max(1, (end - m.start_unix_nano) // HOUR)
    hours = [
        TimeRange(start_unix_nano=end - (h + 1) * HOUR, end_unix_nano=end - h * HOUR)
        for h in rng.sample(range(total_hours), min(6, total_hours))
    ]
    day = TimeRange(start_unix_nano=m.start_unix_nano, end_unix_nano=end)
    services = rng.sample(m.services, min(6, len(m.services)))
    return {
        "floor: get_trace of an unknown id": [
            partial(store.get_trace, "0123456789abcdef0123456789abcdef", limit=10)
        ],
        "services, 1 h": [partial(store.services, h, limit=100) for h in hours],
        "operations, one service, 1 h": [
            partial(store.operations, s, h, limit=100)
            for s, h in zip(services, hours, strict=False)
        ],
        "get_trace, big trace": [partial(store.get_trace, t, limit=2000) for t in m.big_traces],
        "get_trace, sampled trace": [
            partial(store.get_trace, t, limit=1000) for t in m.sample_traces[:20]
        ],
        "search_traces, errors, 1 h": [
            partial(store.search_traces, TraceQuery(time_range=h, status="error"), limit=20)
            for h in hours
        ],
        "search_traces, service + min duration, 1 h": [
            partial(
                store.search_traces,
                TraceQuery(time_range=h, service_name=s, min_duration_ns=100_000_000),
                limit=20,
            )
            for s, h in zip(services, hours, strict=False)
        ],
        "search_logs, newest, 1 h": [
            partial(store.search_logs, LogQuery(time_range=h), limit=100) for h in hours
        ],
        "search_logs, ERROR of one service, 24 h": [
            partial(
                store.search_logs,
                LogQuery(time_range=day, service_name=s, min_severity_number=17),
                limit=100,
            )
            for s in services
        ],
        "search_logs, full text, 24 h": [
            partial(store.search_logs, LogQuery(time_range=day, text=q), limit=100)
            for q in TEXT_QUERIES
        ],
        "service_edges, 1 h": [partial(store.service_edges, h, limit=100) for h in hours],
        "deploys, 24 h": [partial(store.deploys, day, limit=100)],
        "metric_series, cpu avg per pod, 24 h, 5 min": [
            partial(
                store.metric_series,
                MetricQuery(name="container.cpu.usage", time_range=day, step_ns=300 * SECOND),
                limit=100,
            )
        ],
        "metric_series, request rate, 24 h, 5 min": [
            partial(
                store.metric_series,
                MetricQuery(
                    name="http.server.request.count",
                    time_range=day,
                    step_ns=300 * SECOND,
                    aggregation="rate",
                ),
                limit=100,
            )
        ],
        "service_red_series, 24 h, 1 min": [
            partial(store.service_red_series, day, step_ns=60 * SECOND, limit=100)
        ],
        "log_counts, 24 h, 1 min": [partial(store.log_counts, day, step_ns=60 * SECOND, limit=100)],
    }


async def run(args: argparse.Namespace) -> None:
    directory = Path(args.dir)
    out = directory / "telemetry.db"
    manifest = msgspec.json.decode(await trio.Path(f"{out}.json").read_bytes(), type=Manifest)
    results: dict[str, dict[str, list[float]]] = {}
    async with AsyncExitStack() as stack:
        backends: dict[str, TelemetryStore] = {
            "clickhouse": await stack.enter_async_context(
                open_clickhouse_store(clickhouse_options(directory))
            )
        }
        if await trio.Path(out).exists():
            backends["sqlite"] = await stack.enter_async_context(
                open_sqlite_store(out, retention_days=0)
            )
        for name, store in backends.items():
            stats = await store.statistics()
            print(
                f"{name}: {stats.span_count:,} spans, {stats.log_count:,} log records, "
                f"{stats.metric_point_count:,} metric points, "
                f"{(stats.size_bytes or 0) / 2**20:,.0f} MiB",
                file=sys.stderr,
            )
            for label, calls in queries(store, manifest, random.Random(7)).items():
                results.setdefault(label, {})[name] = await timed(calls, args.repeat)
    print(f"{'query':48} {'ClickHouse p50/p99 ms':>22} {'SQLite p50/p99 ms':>20} {'CH/SQLite':>9}")
    for label, by_backend in results.items():
        ch = by_backend["clickhouse"]
        sq = by_backend.get("sqlite")
        ratio = f"{pct(ch, 50) / pct(sq, 50):8.2f}x" if sq else "      n/a"
        print(
            f"{label:48} {pct(ch, 50):10.1f} / {pct(ch, 99):9.1f} "
            f"{(f'{pct(sq, 50):8.1f} / {pct(sq, 99):9.1f}' if sq else 'n/a'):>20} {ratio}"
        )
    if args.json:
        await trio.Path(args.json).write_text(
            json.dumps(
                {
                    label: {
                        name: {
                            "p50_ms": pct(s, 50),
                            "p99_ms": pct(s, 99),
                            "mean_ms": statistics.fmean(s),
                        }
                        for name, s in by.items()
                    }
                    for label, by in results.items()
                },
                indent=1,
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    gen = sub.add_parser("gen", help="generate the data into both stores")
    gen.add_argument("dir")
    gen.add_argument("--spans", type=int, default=10_000_000)
    gen.add_argument("--logs", type=int, default=10_000_000)
    gen.add_argument("--hours", type=float, default=24.0)
    gen.add_argument("--big-traces", type=int, default=20)
    gen.add_argument("--batch", type=int, default=5000)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--shared", default=str(gen_telemetry.REPO.parent / "shared"))
    gen.add_argument("--no-sqlite", action="store_true", help="write the ClickHouse store only")
    timing = sub.add_parser("run", help="time the queries on both stores")
    timing.add_argument("dir")
    timing.add_argument("--repeat", type=int, default=20, help="timed calls per query")
    timing.add_argument("--json", help="also write the figures as JSON")
    args = parser.parse_args()
    trio.run(generate if args.step == "gen" else run, args)


if __name__ == "__main__":
    main()
