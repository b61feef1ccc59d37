"""Helpers shared by the demo tests: the upstream data, read with the csv module.

The upstream Nezha CSVs are carried in ``tests/data/nezha/`` gzip-compressed (``NAME.csv.gz``);
the helpers name each by its upstream path (``.../13_15_trace.csv``, as the demo manifest's
``source`` does) and :func:`rows` reads the compressed copy.
"""

import csv
import gzip
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from conftest import DATA

NEZHA: Final = DATA / "nezha"
ZIPKIN: Final = DATA / "zipkin"
DAY: Final = "2023-01-30"


def rows(path: Path) -> list[dict[str, str]]:
    """The rows of the upstream CSV ``path`` (read from its copy ``path.gz``)."""
    with gzip.open(path.with_name(path.name + ".gz"), "rt", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _csvs(folder: Path) -> list[Path]:
    return sorted(p.with_name(p.name.removesuffix(".gz")) for p in folder.glob("*.csv.gz"))


def trace_csvs() -> list[Path]:
    return _csvs(NEZHA / "construct_data" / DAY / "trace") + _csvs(
        NEZHA / "rca_data" / DAY / "trace"
    )


def log_csvs() -> list[Path]:
    return _csvs(NEZHA / "rca_data" / DAY / "log")


def metric_csvs() -> list[Path]:
    return _csvs(NEZHA / "rca_data" / DAY / "metric")


def parse_timestamp_ns(text: str) -> int:
    """``2023-01-30T13:14:54.707`` (UTC, with or without ``Z``) -> unix ns."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())
    return seconds * 10**9 + int((fraction + "0" * 9)[:9])


def log_time_ns(row: dict[str, str]) -> int:
    """A Nezha log row's event time: ``TimeUnixNano``, or ``Timestamp`` when that is corrupt."""
    raw = int(row["TimeUnixNano"])
    return raw if raw >= 0 else parse_timestamp_ns(row["Timestamp"])
