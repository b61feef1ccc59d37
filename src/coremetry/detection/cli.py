"""``coremetry detect``: run the problem detector over a range of stored telemetry, on demand.

``coremetry detect [--range 12h] [--end now|latest|RFC3339] [--step 60s] [--json] [--no-save]
[--data-dir DIR] [--config FILE] [--store sqlite|clickhouse] [--clickhouse-url URL]`` opens the
configured telemetry store (:func:`coremetry.store.open.open_telemetry_store`:
``<data_dir>/telemetry.db`` by default, or ClickHouse with ``store.backend = clickhouse``),
judges the range ``[end - range, end)`` (:func:`coremetry.detection.runner.detect_in_store`),
prints a first line naming the range and the store (``<start> .. <end> in <store>: N series
...``), then one line per problem (id, status, start, end, services with the most likely origin
first, title) or, with ``--json``, only the problems as JSON, and merges them into
``<data_dir>/problems.json`` (:mod:`coremetry.detection.problem_store`) unless ``--no-save``;
saved problems are printed under the ids the file keeps them by (an incident stored before, by
this command or by ``serve``, keeps its earlier id), the ids ``get_problem`` answers.
``--end latest`` ends the range with the bucket holding the newest stored record (for imported,
older data); other ends are moved down onto the bucket grid
(:func:`~coremetry.detection.runner.aligned_range`). Exit
status 0 on success (with or without problems), 1 when the store or the problems file failed
(one line names the store or the file, and the cause), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.config import Config
from coremetry.detection.problem_store import PROBLEMS_FILE, ProblemFileError, save_run
from coremetry.detection.runner import DetectionOptions, DetectionRun, detect_in_store, grid_floor
from coremetry.store import StoreError, TimeRange
from coremetry.store.open import open_telemetry_store, store_location

__all__ = ["add_detect_parser", "parse_duration_ns", "run_detect"]

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_NS: Final = 1_000_000_000


def parse_duration_ns(text: str, field: str) -> int:
    """``90s``, ``15m``, ``12h``, ``7d`` (or a sum such as ``1h30m``) in nanoseconds.

    Raises:
        ValueError: not such a duration, or zero (the message names ``field``).
    """
    compact = text.strip().lower()
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{field}: expected a duration such as 90s, 15m, 12h or 7d, got {text!r}")
    total = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if total <= 0:
        raise ValueError(f"{field}: must be longer than zero, got {text!r}")
    return int(total * _NS)


def _parse_end(text: str) -> int | None:
    """Unix ns for ``now`` or an RFC 3339 time; ``None`` for ``latest``."""
    lowered = text.strip().lower()
    if lowered == "latest":
        return None
    if lowered == "now":
        return time.time_ns()
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--end: expected now, latest or an RFC 3339 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * _NS)


def add_detect_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add ``detect`` to the ``coremetry`` command's subcommands.

    Returns:
        The ``detect`` parser (``coremetry.cli`` adds the store options to it).
    """
    detect = sub.add_parser(
        "detect",
        help="find problems (anomalies grouped over the service graph) in stored telemetry",
        description="Judge every per-service RED series (from spans) and metric series over "
        "[end - range, end) and group the anomalies into problems, most likely origin first.",
    )
    detect.add_argument("--range", default="12h", help="how far back from --end (default 12h)")
    detect.add_argument(
        "--end", default="now", help="now (default), latest (the newest stored record) or RFC 3339"
    )
    detect.add_argument("--step", default="60s", help="series bucket width (default 60s)")
    detect.add_argument("--json", action="store_true", help="print the problems as JSON")
    detect.add_argument("--no-save", action="store_true", help="do not update problems.json")
    detect.add_argument(
        "--data-dir",
        help="the data dir: problems.json, and the store (telemetry.db) unless --store "
        "clickhouse (default from the config)",
    )
    detect.add_argument("--config", help="a TOML configuration file")
    return detect


def _utc(unix_nano: int) -> str:
    return datetime.fromtimestamp(unix_nano // _NS, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _detect(config: Config, span_ns: int, end_ns: int | None, step_ns: int) -> DetectionRun:
    # The configured store (store.backend), as every command opens it.
    async with open_telemetry_store(config) as store:
        if end_ns is None:
            newest = (await store.statistics()).newest_unix_nano
            newest = newest if newest is not None else time.time_ns()
            # The range ends with the bucket that holds the newest record (ranges are moved
            # down onto the bucket grid: a range ending just after it would leave it out).
            end_ns = grid_floor(newest, step_ns) + step_ns
        judged = TimeRange(start_unix_nano=end_ns - span_ns, end_unix_nano=end_ns)
        return await detect_in_store(store, judged, DetectionOptions(step_ns=step_ns))


def run_detect(args: argparse.Namespace, config: Config) -> int:
    """Run ``coremetry detect`` with parsed arguments; return the exit status."""
    try:
        span_ns = parse_duration_ns(str(args.range), "--range")
        step_ns = parse_duration_ns(str(args.step), "--step")
        end_ns = _parse_end(str(args.end))
    except ValueError as exc:
        print(f"coremetry detect: {exc}", file=sys.stderr)
        return 2
    location = store_location(config)
    try:
        run = trio.run(_detect, config, span_ns, end_ns, step_ns)
    except (StoreError, ValueError) as exc:
        print(f"coremetry detect: telemetry store {location}: {exc}", file=sys.stderr)
        return 1
    problems = run.problems
    if not args.no_save:
        path = Path(config.data_dir).expanduser() / PROBLEMS_FILE
        try:
            # With ClickHouse nothing else may have made the data dir yet (the embedded store
            # does); private, as the identity store makes it.
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # The problems under the ids the file keeps them by (an incident stored before
            # keeps its earlier id): the ids get_problem answers.
            problems = save_run(path, run.time_range, run.problems)[1]
        except (ProblemFileError, OSError) as exc:
            print(f"coremetry detect: saving problems: {exc}", file=sys.stderr)
            return 1
    if args.json:
        sys.stdout.write(msgspec.json.encode(problems).decode() + "\n")
        return 0
    out = sys.stdout
    out.write(
        f"{_utc(run.time_range.start_unix_nano)} .. {_utc(run.time_range.end_unix_nano)} "
        f"in {location}: "
        f"{run.series_count} series ({run.point_count} points, step {run.step_ns // _NS} s), "
        f"{len(run.anomalies)} anomalies, {len(problems)} problems\n"
    )
    for problem in problems:
        services = ", ".join(problem.services[:3]) or "-"
        if len(problem.services) > 3:
            services += f" +{len(problem.services) - 3}"
        out.write(
            f"{problem.problem_id}  {problem.status:8}  {_utc(problem.start_unix_nano)}  "
            f"{_utc(problem.end_unix_nano)}  [{services}]  {problem.title}\n"
        )
    return 0
