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

**10,000,000 spans and logs in minutes: ``--copies N``.** Writing through the store runs at
~4,700 spans/s here (10M: ~40 min per store), so the 10M run builds its rows *inside chDB*:
``gen DIR --spans 1000000 --logs 1000000 --no-sqlite --copies 10`` writes the 1M seed through
the real ClickHouse write path as above, then ``replicate`` adds ``N - 1`` copies of it;
``replicate DIR --copies N`` does the second step alone on an existing ClickHouse-only seed
directory (``DIR/chdb`` and ``DIR/telemetry.db.json``, e.g. a copy of a 1M ``gen --no-sqlite``
run). For each table (``otel_traces``, ``otel_logs``) it runs one statement,
``INSERT INTO t (every column) SELECT … FROM t CROSS JOIN numbers(1, N - 1)``, reading the seed
once (the ``SELECT`` sees the parts that existed when it started, so copies are never copied),
with ``max_threads = 1`` (one core). Copy ``k`` (1 … N-1) of a row is the row with:

- every time shifted by ``k * --shift-s`` seconds (default 37 s: span ``Timestamp`` and event
  times, log ``Timestamp``/``TimestampTime``), so the copies keep the seed's day shape (busier
  by day, the three fault windows) at N times the rate, and the day ends ``(N-1) * 37`` s later;
- trace ids re-derived as ``lower(hex(sipHash128(TraceId, k)))`` (32 hex digits) and span,
  parent span and link ids as ``lower(hex(reinterpretAsFixedString(sipHash64(SpanId, k))))``
  (16 hex digits; empty ids stay empty): each copy is a new trace with the same tree, and each
  copied log record points at the copied span;
- everything else as in the seed: services, operations, kinds, statuses, durations, attributes,
  resources, log bodies and severities (so the text vocabulary does not grow with the copies).

Copy 0 is the seed itself, so the manifest's big and sampled trace ids still name traces of
1,168 and typical sizes; the manifest's counts and end time are updated. Metric points are not
copied (the issue's 10M is spans and logs; metrics stay the seed's 201,600 points). The embedded
store is not built at 10M (writing it takes ~40 min here); ``--copies`` needs ``--no-sqlite``,
and ``replicate`` refuses a directory holding ``telemetry.db``, so ``run`` never compares
stores holding different data.
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

import clickhouse_connect
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
    if args.copies > 1 and not args.no_sqlite:
        raise SystemExit("--copies needs --no-sqlite (the embedded store would hold the seed only)")
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
            nezha=args.nezha,
        )
    )
    if args.copies > 1:
        await replicate(args)


TRACE_ID: Final = "if({col} = '', '', lower(hex(sipHash128({col}, k))))"
SPAN_ID: Final = "if({col} = '', '', lower(hex(reinterpretAsFixedString(sipHash64({col}, k)))))"
SHIFT: Final = "addSeconds({col}, k * {shift_s})"
REPLACED: Final = {
    "otel_traces": {
        "Timestamp": SHIFT.format(col="Timestamp", shift_s="{shift_s}"),
        "TraceId": TRACE_ID.format(col="TraceId"),
        "SpanId": SPAN_ID.format(col="SpanId"),
        "ParentSpanId": SPAN_ID.format(col="ParentSpanId"),
        "Events.Timestamp": "arrayMap(x -> "
        + SHIFT.format(col="x", shift_s="{shift_s}")
        + ", `Events.Timestamp`)",
        "Links.TraceId": "arrayMap(x -> " + TRACE_ID.format(col="x") + ", `Links.TraceId`)",
        "Links.SpanId": "arrayMap(x -> " + SPAN_ID.format(col="x") + ", `Links.SpanId`)",
    },
    "otel_logs": {
        "Timestamp": SHIFT.format(col="Timestamp", shift_s="{shift_s}"),
        "TimestampTime": SHIFT.format(col="TimestampTime", shift_s="{shift_s}"),
        "TraceId": TRACE_ID.format(col="TraceId"),
        "SpanId": SPAN_ID.format(col="SpanId"),
    },
}


def replicate_sql(table: str, columns: Sequence[str], copies: int, shift_s: int) -> str:
    """The ``INSERT … SELECT`` adding copies 1 … ``copies - 1`` of ``otel.<table>`` to itself.

    ``columns`` are the table's columns in order (nested ones as ``Events.Timestamp``); the
    ones in ``REPLACED[table]`` get their expression (``k`` is the copy number), the others are
    copied as they are.
    """
    replaced = REPLACED[table]
    exprs = [replaced[c].format(shift_s=shift_s) if c in replaced else f"t.`{c}`" for c in columns]
    return (
        f"INSERT INTO otel.{table} ({', '.join(f'`{c}`' for c in columns)})\n"
        f"SELECT {', '.join(exprs)}\n"
        f"FROM otel.{table} AS t CROSS JOIN (SELECT number AS k FROM numbers(1, {copies - 1})) AS c"
    )


def replicate_blocking(directory: Path, copies: int, shift_s: int) -> dict[str, int]:
    """Runs the copies in chDB (blocking); returns the row count of each table after."""
    client = clickhouse_connect.get_client(dsn=f"chdb://{(directory / 'chdb').resolve()}")
    settings = {"max_threads": 1, "max_insert_threads": 1, "max_block_size": 8192}
    counts: dict[str, int] = {}
    for table in REPLACED:
        columns = [
            str(row[0])
            for row in client.query(
                "SELECT name FROM system.columns WHERE database = 'otel' AND table = {t:String} "
                "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS') ORDER BY position",
                parameters={"t": table},
            ).result_rows
        ]
        missing = set(REPLACED[table]) - set(columns)
        if missing:
            raise SystemExit(f"otel.{table} has no column {sorted(missing)}: not the exporter's")
        start = time.perf_counter()
        client.command(replicate_sql(table, columns, copies, shift_s), settings=settings)
        counts[table] = int(str(client.command(f"SELECT count() FROM otel.{table}")))
        print(
            f"otel.{table}: {counts[table]:,} rows after {copies - 1} copies "
            f"in {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )
    client.close()
    return counts


async def replicate(args: argparse.Namespace) -> None:
    """The ``replicate`` step: copies the seed in ``DIR/chdb`` and updates the manifest."""
    directory = Path(args.dir)
    manifest_path = trio.Path(directory / "telemetry.db.json")
    if args.copies < 2:
        raise SystemExit(f"--copies must be at least 2, not {args.copies}")
    if await trio.Path(directory / "telemetry.db").exists():
        raise SystemExit(
            f"{directory / 'telemetry.db'} exists: the embedded store would keep the seed only; "
            "replicate a --no-sqlite directory"
        )
    if not await manifest_path.exists() or not await trio.Path(directory / "chdb").exists():
        raise SystemExit(f"{directory} has no chdb/ and telemetry.db.json: run gen first")
    manifest = json.loads(await manifest_path.read_text())
    if manifest.get("copies", 1) != 1:
        raise SystemExit(f"{directory} is already replicated ({manifest['copies']} copies)")
    start = time.perf_counter()
    counts = await trio.to_thread.run_sync(replicate_blocking, directory, args.copies, args.shift_s)
    manifest.update(
        spans=counts["otel_traces"],
        logs=counts["otel_logs"],
        end_unix_nano=manifest["end_unix_nano"] + (args.copies - 1) * args.shift_s * SECOND,
        copies=args.copies,
        shift_s=args.shift_s,
        replicated_in_s=round(time.perf_counter() - start, 1),
    )
    await manifest_path.write_text(json.dumps(manifest, indent=1))
    print(
        f"{counts['otel_traces']:,} spans, {counts['otel_logs']:,} log records in "
        f"{directory / 'chdb'} ({args.copies} copies) in {manifest['replicated_in_s']} s",
        file=sys.stderr,
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
        "service_edges, 24 h": [partial(store.service_edges, day, limit=100)],
        "deploys, 24 h": [partial(store.deploys, day, limit=100)],
        "metric_series, cpu avg per pod, 24 h, 5 min": [
            partial(
                store.metric_series,
                MetricQuery(
                    name="container.cpu.usage",
                    time_range=day,
                    step_ns=300 * SECOND,
                    aggregation="avg",
                ),
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
    gen.add_argument("--nezha", default=str(gen_telemetry.NEZHA))
    gen.add_argument("--no-sqlite", action="store_true", help="write the ClickHouse store only")
    rep = sub.add_parser("replicate", help="copy a ClickHouse-only seed N times inside chDB")
    rep.add_argument("dir")
    for p in (gen, rep):
        p.add_argument(
            "--copies",
            type=int,
            default=1 if p is gen else 10,
            help="rows end up N times the seed (copies built by INSERT ... SELECT in chDB)",
        )
        p.add_argument("--shift-s", type=int, default=37, help="seconds between copies")
    timing = sub.add_parser("run", help="time the queries on both stores")
    timing.add_argument("dir")
    timing.add_argument("--repeat", type=int, default=20, help="timed calls per query")
    timing.add_argument("--json", help="also write the figures as JSON")
    args = parser.parse_args()
    steps = {"gen": generate, "replicate": replicate, "run": run}
    trio.run(steps[args.step], args)


if __name__ == "__main__":
    main()
