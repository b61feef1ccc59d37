"""``coremetry ingest FILE…``: import telemetry files into the configured telemetry store.

::

    coremetry ingest FILE... [--format auto|otlp-json|zipkin|jaeger|prometheus|csv]
                     [--data-dir DIR] [--config FILE]
                     [--store sqlite|clickhouse] [--clickhouse-url URL]
                     [--metric-name NAME] [--label KEY=VALUE]... [--unit UNIT]   (CSV)
                     [--service-name NAME]                                      (CSV, Prometheus)
                     [--timestamp TIME]                                         (Prometheus)
                     [--quiet]

Each file is read (``.gz`` too), its format detected unless ``--format`` names it, decoded,
and written to the configured telemetry store (``<data_dir>/telemetry.db`` by default, or
ClickHouse with ``store.backend = clickhouse`` or ``--store clickhouse``) in chunks (see
:mod:`coremetry.ingest.importer`). Unless ``--quiet``, stderr names that store first
(``importing into <data_dir>/telemetry.db`` or ``importing into ClickHouse at <url> (database
<name>)``) and shows a progress bar for large inputs when it is a terminal. One summary per file
goes to stdout: records read, written, already stored, rejected (with reasons and where),
adjusted, and how many are older than the retention window. Works while ``coremetry serve``
runs on the same store.

Exit status: 0 when every file was imported (rejected items do not fail a file), 1 when a file
could not be read, decoded or written (the others are still imported), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Final, Never, TextIO

import trio

from coremetry.config import Config
from coremetry.ingest._convert import ItemRejected
from coremetry.ingest.csv_series import parse_timestamp
from coremetry.ingest.decoded import Signal
from coremetry.ingest.formats import FORMATS, FileFormat, ImportOptions
from coremetry.ingest.importer import FileSummary, import_file
from coremetry.store.errors import StoreError
from coremetry.store.model import UNKNOWN_SERVICE
from coremetry.store.open import open_telemetry_store, store_location

if TYPE_CHECKING:  # tqdm is imported when a bar is shown (a large input on a terminal)
    from tqdm import tqdm


__all__ = ["add_ingest_parser", "run_ingest"]

PROGRESS_MIN_RECORDS: Final = 20_000
"""Inputs with fewer records than this get no progress bar (they take well under a second)."""

_SIGNAL_WORDS: Final[dict[str, str]] = {
    "span": "spans",
    "log": "log records",
    "metric_point": "metric points",
}


def add_ingest_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``ingest`` subcommand to ``coremetry``'s parser.

    Returns:
        The ``ingest`` parser (``coremetry.cli`` adds the store options to it).
    """
    ingest = sub.add_parser(
        "ingest",
        help="import telemetry files (OTLP JSON, Zipkin, Jaeger, Prometheus, CSV) into the store",
        description="Import telemetry files into the configured telemetry store "
        "(<data_dir>/telemetry.db by default, or ClickHouse with store.backend = clickhouse), "
        "also while the server runs. Importing a file twice writes nothing new.",
    )
    ingest.add_argument("files", nargs="+", metavar="FILE", help="files to import (.gz too)")
    ingest.add_argument(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        help="the files' format (default: detected from each file's content)",
    )
    ingest.add_argument(
        "--data-dir",
        help="the data dir: its telemetry.db is the store written, unless --store clickhouse "
        "(default from the config)",
    )
    ingest.add_argument("--config", help="a TOML configuration file")
    ingest.add_argument(
        "--metric-name", help="CSV: the series' metric name (default: the file's name)"
    )
    ingest.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CSV: a label of the series (repeatable)",
    )
    ingest.add_argument("--unit", default="", help="CSV: the metric's unit (e.g. %%, By, s)")
    ingest.add_argument(
        "--service-name",
        help="CSV and Prometheus: the points' service.name (default: unknown_service; "
        "Prometheus samples with a job label use it)",
    )
    ingest.add_argument(
        "--timestamp",
        help="Prometheus: the scrape's time (ISO 8601 or unix time; default: now); "
        "pin it to make re-imports idempotent",
    )
    ingest.add_argument(
        "--quiet", action="store_true", help="no progress bar, no store line on stderr"
    )
    return ingest


def _labels(pairs: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--label {pair!r}: use KEY=VALUE")
        labels[key.strip()] = value
    return labels


def run_ingest(args: argparse.Namespace, config: Config, out: TextIO | None = None) -> int:
    """Run ``coremetry ingest`` (blocking: runs its own trio loop).

    Returns:
        The exit status (see the module docstring).
    """
    stream = out if out is not None else sys.stdout
    try:
        labels = _labels(list(args.label))
        scrape = time.time_ns()
        if args.timestamp is not None:
            try:
                scrape = parse_timestamp(str(args.timestamp))
            except ItemRejected as exc:
                raise ValueError(f"--timestamp {args.timestamp!r}: {exc.reason}") from None
    except ValueError as exc:
        print(f"coremetry: {exc}", file=sys.stderr)
        return 2
    options = ImportOptions(
        scrape_unix_nano=scrape,
        service_name=args.service_name or UNKNOWN_SERVICE,
        metric_name=args.metric_name or "",
        labels=labels,
        unit=str(args.unit),
    )
    fmt: FileFormat | None = None if args.format == "auto" else args.format
    paths = [Path(name) for name in args.files]
    return trio.run(_ingest, config, paths, fmt, options, bool(args.quiet), stream)


async def _ingest(
    config: Config,
    paths: list[Path],
    fmt: FileFormat | None,
    options: ImportOptions,
    quiet: bool,
    out: TextIO,
) -> int:

    status = 0
    location = store_location(config)
    async with AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(open_telemetry_store(config))
        except (StoreError, ValueError) as exc:
            print(f"coremetry: cannot open the store {location}: {exc}", file=sys.stderr)
            return 1
        if not quiet:
            print(f"importing into {location}", file=sys.stderr, flush=True)
        for path in paths:
            progress = _Progress(path.name, enabled=not quiet)
            try:
                summary = await import_file(
                    store,
                    path,
                    fmt=fmt,
                    options=options,
                    on_decoded=progress.start,
                    on_written=progress.advance,
                    max_future_skew_s=config.ingest.max_future_skew_s,
                )
            finally:
                progress.close()
            for line in describe(summary, config.store.retention_days):
                print(line, file=out)
            out.flush()
            if summary.error is not None:
                status = 1
    return status


class _Progress:
    """A tqdm bar on stderr for one file, shown only for large inputs on a terminal."""

    def __init__(self, name: str, *, enabled: bool) -> None:
        self.name = name
        self.enabled = enabled
        self.bar: tqdm[Never] | None = None

    def start(self, total: int) -> None:
        if self.enabled and total >= PROGRESS_MIN_RECORDS:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                unit=" records",
                desc=self.name,
                file=sys.stderr,
                disable=None,  # off when stderr is not a terminal
                leave=False,
            )

    def advance(self, count: int) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _counts(counts: Mapping[Signal, int]) -> str:
    parts = [f"{n} {_SIGNAL_WORDS[k]}" for k, n in counts.items() if n]
    return ", ".join(parts) if parts else "nothing"


def describe(summary: FileSummary, retention_days: float) -> list[str]:
    """The summary lines of one file (what ``coremetry ingest`` prints)."""
    head = f"{summary.path}" + (f" ({summary.format})" if summary.format else "")
    if summary.error is not None and not summary.decoded.read:
        return [f"{head}: not imported: {summary.error}"]
    decoded = summary.decoded
    duplicates = sum(summary.duplicates.values())
    lines = [
        f"{head}: read {_counts(decoded.read)}; wrote {_counts(summary.written)}; "
        f"{duplicates} already stored; {len(decoded.rejected)} rejected"
    ]
    for (signal, reason), count in decoded.rejection_counts().items():
        places = [r.where for r in decoded.rejected if r.reason == reason and r.where][:3]
        at = f" (e.g. {', '.join(places)})" if places else ""
        lines.append(f"  rejected {count} {_SIGNAL_WORDS[signal]}: {reason}{at}")
    for message, count in decoded.notes.items():
        lines.append(f"  note ({count}): {message}")
    if summary.outside_retention:
        lines.append(
            f"  {summary.outside_retention} records are older than the retention window "
            f"({retention_days:g} days): stored now, deleted by the next retention pass "
            "(set store.retention_days = 0 to keep everything)"
        )
    if summary.error is not None:
        lines.append(f"  stopped: {summary.error}")
    return lines
