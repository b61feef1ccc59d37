"""Helpers shared by the demo tests: the upstream data, read with the csv module."""

import csv
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from conftest import SHARED

NEZHA: Final = SHARED / "data" / "nezha"
ZIPKIN: Final = SHARED / "data" / "zipkin"
DAY: Final = "2023-01-30"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def trace_csvs() -> list[Path]:
    return sorted((NEZHA / "construct_data" / DAY / "trace").glob("*.csv")) + sorted(
        (NEZHA / "rca_data" / DAY / "trace").glob("*.csv")
    )


def log_csvs() -> list[Path]:
    return sorted((NEZHA / "rca_data" / DAY / "log").glob("*.csv"))


def metric_csvs() -> list[Path]:
    return sorted((NEZHA / "rca_data" / DAY / "metric").glob("*.csv"))


def parse_timestamp_ns(text: str) -> int:
    """``2023-01-30T13:14:54.707`` (UTC, with or without ``Z``) -> unix ns."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())
    return seconds * 10**9 + int((fraction + "0" * 9)[:9])


def log_time_ns(row: dict[str, str]) -> int:
    """A Nezha log row's event time: ``TimeUnixNano``, or ``Timestamp`` when that is corrupt."""
    raw = int(row["TimeUnixNano"])
    return raw if raw >= 0 else parse_timestamp_ns(row["Timestamp"])
