"""get_trace on the ClickHouse backend with and without the exporter's trace-id lookup table.

``python bench/clickhouse_trace_lookup.py DIR [--repeat 40]`` opens the ClickHouse store of a
``bench/clickhouse_queries.py gen`` (or ``replicate``) directory and times the span reads of
``get_trace`` two ways on the same data, in the same process, calls interleaved (ABAB, the
order swapped every call, so load changes hit both alike):

- ``by id``: the read by ``TraceId`` alone (the ``TraceId`` bloom filter over every granule),
  as the backend read traces before it used the lookup table;
- ``lookup``: the backend's read now, the trace's ``min(Start)``/``max(End)`` from
  ``otel_traces_trace_id_ts`` folded into the span read's time condition (partition and
  primary-key pruning before the bloom filter).

The calls are ``clickhouse_queries.py run``'s three ``get_trace`` rows (an unknown id: the
fixed cost; the manifest's big traces, limit 2000; its first 20 sampled traces, limit 1000).
It prints p50/p99 ms of each and the ratio lookup p50 / by-id p50, the tables' size (parts,
partitions, granules), and checks both reads return the same pages. The directory needs the
lookup table: ``gen`` creates it (``create_tables``) and the exporter's view fills it, on
``replicate``'s copies too.
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import Final, cast

import msgspec
import trio

from coremetry.store.clickhouse import open_clickhouse_store
from coremetry.store.clickhouse._queries import Reader

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clickhouse_queries as cq  # the data directory layout, manifest and percentiles

UNKNOWN: Final = "0123456789abcdef0123456789abcdef"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def run(args: argparse.Namespace) -> None:
    directory = Path(args.dir)
    manifest = msgspec.json.decode(
        await trio.Path(directory / "telemetry.db.json").read_bytes(), type=cq.Manifest
    )
    async with open_clickhouse_store(cq.clickhouse_options(directory)) as store:
        tables = store.options.tables
        if store._reader.trace_lookup is None:
            raise SystemExit(f"{directory} has no trace-id lookup table: gen it again")
        readers = {
            "by id": Reader(tables, store.runtime),
            "lookup": Reader(tables, store.runtime, trace_lookup=True),
        }
        size = await store.runtime.query(
            "SELECT count(), uniqExact(partition), sum(rows), sum(marks) FROM system.parts "
            "WHERE active AND database = {database:String} AND table = {table:String}",
            {"database": tables.database, "table": tables.table("traces")},
        )
        parts, partitions, rows, granules = cast("tuple[int, int, int, int]", size[0])
        print(
            f"{tables.qualified('traces')}: {rows:,} spans, {partitions} partitions, "
            f"{parts} parts, {granules:,} granules; load {_load()}"
        )
        cases = {
            "get_trace, unknown id": [(UNKNOWN, 10)],
            "get_trace, big trace": [(t, 2000) for t in manifest.big_traces],
            "get_trace, sampled trace": [(t, 1000) for t in manifest.sample_traces[:20]],
        }
        rng = random.Random(7)
        print(f"{'query':28} {'by id p50 / p99 ms':>20} {'lookup p50 / p99 ms':>21} {'ratio':>6}")
        for label, calls in cases.items():
            for trace_id, limit in calls[:2]:
                pages = [await r.get_trace(trace_id, limit, None) for r in readers.values()]
                if pages[0] != pages[1]:
                    raise SystemExit(f"{label}: the two reads differ on {trace_id}")
            samples: dict[str, list[float]] = {name: [] for name in readers}
            order = list(readers)
            for i in range(args.repeat):
                trace_id, limit = calls[rng.randrange(len(calls))] if i else calls[0]
                for name in order if i % 2 == 0 else order[::-1]:
                    start = time.perf_counter()
                    await readers[name].get_trace(trace_id, limit, None)
                    samples[name].append((time.perf_counter() - start) * 1000)
            by_id, lookup = samples["by id"], samples["lookup"]
            print(
                f"{label:28} {cq.pct(by_id, 50):9.1f} / {cq.pct(by_id, 99):8.1f} "
                f"{cq.pct(lookup, 50):10.1f} / {cq.pct(lookup, 99):8.1f} "
                f"{cq.pct(lookup, 50) / cq.pct(by_id, 50):5.2f}x"
            )
        print(f"load {_load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--repeat", type=int, default=40, help="timed calls per query and read")
    trio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
