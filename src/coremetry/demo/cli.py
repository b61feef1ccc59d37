"""``coremetry demo load`` and the demo step of ``coremetry serve --demo``.

``coremetry demo load [--data-dir DIR] [--config FILE] [--force] [--store sqlite|clickhouse]
[--clickhouse-url URL]`` loads the shipped demo into the configured telemetry store,
``<data_dir>/telemetry.db`` or ClickHouse (``store.backend``, or ``--store``; see
:mod:`coremetry.demo.loader` for the time shift and idempotency), then prints a summary on
stdout: which store, per dataset what was stored, its time span after the shift, and where the
shifted fault list is. Loading a data dir that already holds the demo does nothing and says so.
Exit status 0 on success (also when already loaded), 1 when loading failed (the message names
the cause), 2 on a usage or configuration error.

``coremetry serve --demo`` runs the same load first (nothing when the data dir already holds the
demo), prints the summary on stderr, then serves.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import trio

from coremetry.config import Config
from coremetry.demo.loader import DatasetLoad, DemoAlreadyLoaded, DemoError, LoadResult, load_demo
from coremetry.demo.manifest import DataFile, Dataset
from coremetry.store.errors import StoreError
from coremetry.store.open import open_telemetry_store, store_location

__all__ = [
    "add_demo_parser",
    "data_dir_of",
    "describe_load",
    "describe_refusal",
    "load_demo_for_config",
    "prepare_serve_demo",
    "run_demo",
]


def add_demo_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``demo load`` to the ``coremetry`` command's subcommands.

    Returns:
        The ``demo load`` parser (``coremetry.cli`` adds the store options to it).
    """
    demo = sub.add_parser("demo", help="the shipped demo dataset")
    actions = demo.add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    load = actions.add_parser(
        "load",
        help="load the demo (Nezha TrainTicket day + SmartThings traces), shifted to end now",
        description="Load the shipped demo telemetry into the configured telemetry store "
        "(<data_dir>/telemetry.db, or ClickHouse when store.backend = clickhouse), every "
        "timestamp shifted by one constant per dataset so that its last event is now.",
    )
    load.add_argument(
        "--data-dir",
        help="the data dir: the embedded store (telemetry.db, unless --store clickhouse), the "
        "demo's state and fault list (default from the config)",
    )
    load.add_argument("--config", help="a TOML configuration file")
    load.add_argument(
        "--force",
        action="store_true",
        help="load again so the data ends now (only when the store holds nothing but the demo)",
    )
    return load


def _utc(unix_nano: int) -> str:
    return datetime.fromtimestamp(unix_nano / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _span_text(nanos: int) -> str:
    minutes = round(nanos / 60e9)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _dataset_lines(load: DatasetLoad) -> list[str]:
    counts = []
    if load.spans:
        counts.append(f"{load.spans} spans ({load.error_spans} with status ERROR)")
    if load.logs:
        counts.append(f"{load.logs} log records")
    if load.metric_points:
        counts.append(f"{load.metric_points} metric points")
    lines = [f"  {load.name} ({load.license}): {', '.join(counts)}"]
    if load.first_unix_nano is not None and load.last_unix_nano is not None:
        lines.append(
            f"    {_utc(load.first_unix_nano)} .. {_utc(load.last_unix_nano)} "
            f"({_span_text(load.last_unix_nano - load.first_unix_nano)}); "
            f"shifted by {load.shift_ns / 86_400e9:+.2f} days"
        )
    if load.duplicate:
        lines.append(f"    {load.duplicate} already stored (not duplicated)")
    for reason, count in sorted(load.rejected.items()):
        lines.append(f"    rejected {count}: {reason}")
    for message, count in sorted(load.notes.items()):
        lines.append(f"    note {count}: {message}")
    if load.outside_retention:
        lines.append(
            f"    {load.outside_retention} records are older than store.retention_days and "
            "will be removed by the next retention pass"
        )
    return lines


def describe_load(result: LoadResult, config: Config) -> list[str]:
    """The summary lines ``coremetry demo load`` prints for ``result``.

    Args:
        result: what :func:`~coremetry.demo.loader.load_demo` did.
        config: the configuration it loaded with; the store is named as
            :func:`coremetry.store.open.store_location` names it, and the advice when the demo is
            already loaded fits the backend (the data is in the data dir for the embedded
            store, in the database for ClickHouse).
    """
    store = store_location(config)
    if result.status == "already_loaded":
        return [
            f"the demo is already in {store} (loaded {_utc(result.state.started_unix_nano)}, "
            "when its last event was 'now'); nothing to do.",
            "  `coremetry demo load --force` loads it again to end now (only when the store "
            f"holds nothing else); {_fresh_store(config)} always works.",
        ]
    verb = {"loaded": "loaded", "resumed": "finished loading", "reloaded": "reloaded"}[
        result.status
    ]
    lines = [
        f"{verb} the demo into {store}; each dataset shifted so its last event is "
        f"{_utc(result.state.started_unix_nano)} (now), spacing kept:"
    ]
    for load in result.datasets:
        lines += _dataset_lines(load)
        if load.faults:
            lines.append(
                f"    {load.faults} injected faults (shifted alike) in {result.faults_path}"
            )
    return lines


def _fresh_store(config: Config) -> str:
    """Where a second copy of the demo can always be loaded, for ``config``'s backend."""
    if config.store.backend == "clickhouse":
        # A fresh data dir would load a second, differently shifted copy into the same
        # database; an empty database is loaded into (the state sees the store empty).
        return (
            "an empty ClickHouse database (clickhouse.database, or another server with "
            "--clickhouse-url)"
        )
    return "a fresh --data-dir"


def describe_refusal(exc: DemoAlreadyLoaded, config: Config) -> str:
    """The message of ``coremetry demo load --force`` refusing to reload.

    Args:
        exc: the loader's refusal (what else the store holds).
        config: the configuration it loaded with: the advice fits the backend — a fresh data
            dir for the embedded store (the data is in it), an empty database for ClickHouse
            (the data is in the database: a fresh data dir would load a second copy into it).

    Returns:
        One line, ``coremetry: demo load failed: …``, without a trailing newline.
    """
    return f"coremetry: demo load failed: {exc}; load the demo into {_fresh_store(config)} instead"


async def load_demo_for_config(
    config: Config, *, force: bool = False, progress: TextIO | None = None
) -> LoadResult:
    """Open the telemetry store ``config`` selects (``store.backend``) and load the demo into it.

    Args:
        config: the effective configuration (``data_dir`` and the ``store`` section).
        force: see :func:`coremetry.demo.loader.load_demo`.
        progress: where to write one line per dataset as it starts (``None``: silent).

    Raises:
        DemoError: see :func:`~coremetry.demo.loader.load_demo`.
        StoreError: the store cannot be opened or written.
        ValueError: a store setting out of range (names it).
    """
    data_dir = data_dir_of(config)

    def on_file(dataset: Dataset, data_file: DataFile) -> None:
        if progress is not None and data_file is dataset.files[0]:
            print(
                f"loading {dataset.name} ({len(dataset.files)} file"
                f"{'s' if len(dataset.files) > 1 else ''})...",
                file=progress,
                flush=True,
            )

    # The configured store (store.backend): the embedded one, or ClickHouse.
    async with open_telemetry_store(config) as store:
        return await load_demo(store, data_dir, force=force, on_file=on_file)


def data_dir_of(config: Config) -> Path:
    """The configured data dir, ``~`` expanded."""
    return Path(config.data_dir).expanduser()


def _load_and_describe(config: Config, *, force: bool, out: TextIO) -> int:
    """Load the demo as ``config`` says, print the summary on ``out``; the exit status."""
    try:
        result = trio.run(lambda: load_demo_for_config(config, force=force, progress=sys.stderr))
    except DemoAlreadyLoaded as exc:
        print(describe_refusal(exc, config), file=sys.stderr)
        return 1
    except (DemoError, StoreError, OSError) as exc:
        print(f"coremetry: demo load failed: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"coremetry: {exc}", file=sys.stderr)
        return 2
    out.write("".join(line + "\n" for line in describe_load(result, config)))
    out.flush()
    return 0


def run_demo(args: argparse.Namespace, config: Config) -> int:
    """Run ``coremetry demo load``: the summary on stdout; returns the exit status."""
    return _load_and_describe(config, force=bool(args.force), out=sys.stdout)


def prepare_serve_demo(config: Config) -> int:
    """``coremetry serve --demo``'s first step: load the demo unless loaded, summary on stderr.

    Returns:
        0 when the demo is in the data dir's store (loaded now or before), else the exit
        status to stop with (1: loading failed, 2: a configuration error).
    """
    return _load_and_describe(config, force=False, out=sys.stderr)
