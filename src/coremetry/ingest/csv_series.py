"""CSV time series (``timestamp,value`` rows) to store gauge points.

The first row is a header naming a ``timestamp`` (or ``time``) column and a ``value`` column
(case-insensitive; other columns are ignored). Without such a header the first two columns
are taken as timestamp and value, and the first row is data.

Timestamps:

- ``YYYY-MM-DD HH:MM:SS[.ffffff]`` with no zone (the Numenta Anomaly Benchmark's format) and
  any other ISO 8601 text without a zone are **UTC**; ISO 8601 with ``Z`` or an offset is
  converted;
- a bare number is unix time, its unit guessed from its size: below 1e11 seconds (may have a
  fraction), below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds.

Every point is a ``gauge`` named by ``metric_name`` with ``labels`` as its attributes, ``unit``
and ``service_name`` as given. Values are floats as written; ``NaN``, ``inf`` and ``-inf`` are
kept. Rejected rows (with their line number): a timestamp that does not parse or falls outside
1970..2262, an empty or non-numeric value, too few columns, and a timestamp that repeats an
earlier row's (a series holds one value per time; the first row wins, and the reason names
it -- NAB's ``machine_temperature_system_failure.csv`` repeats an hour of times, 12 rows).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from coremetry.ingest._convert import ItemRejected, is_sane_time
from coremetry.ingest.decoded import Decoded
from coremetry.ingest.errors import MalformedInput
from coremetry.store.model import UNKNOWN_SERVICE, Attributes, MetricPoint

__all__ = ["decode_csv_series", "parse_timestamp"]

_NUMBER: Final = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?")
_TIME_NAMES: Final = ("timestamp", "time", "ts", "datetime", "date")
_VALUE_NAMES: Final = ("value", "val", "y")
REPEATED_TIME: Final = "timestamp repeats an earlier row's (one value per time: the first is kept)"


def parse_timestamp(text: str) -> int:
    """A CSV timestamp (see the module docstring) as unix nanoseconds.

    Raises:
        ItemRejected: the text is no timestamp this module reads, or outside 1970..2262.
    """
    raw = text.strip()
    if not raw:
        raise ItemRejected("timestamp is empty")
    if _NUMBER.fullmatch(raw):
        number = float(raw)
        magnitude = abs(number)
        if magnitude < 1e11:
            nanos = round(number * 1e9) if "." in raw or "e" in raw.lower() else int(raw) * 10**9
        elif magnitude < 1e14:
            nanos = int(float(raw) * 1e6) if "." in raw else int(raw) * 10**6
        elif magnitude < 1e17:
            nanos = int(float(raw) * 1e3) if "." in raw else int(raw) * 10**3
        else:
            nanos = int(float(raw)) if "." in raw or "e" in raw.lower() else int(raw)
    else:
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise ItemRejected(
                "timestamp does not parse (use YYYY-MM-DD HH:MM:SS, ISO 8601 or unix time)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        nanos = (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    if not is_sane_time(nanos):
        raise ItemRejected("timestamp is outside 1970..2262")
    return nanos


def _columns(header: list[str]) -> tuple[int, int] | None:
    names = [h.strip().lower() for h in header]
    time_col = next((names.index(n) for n in _TIME_NAMES if n in names), None)
    value_col = next((names.index(n) for n in _VALUE_NAMES if n in names), None)
    if time_col is None or value_col is None:
        return None
    return time_col, value_col


def decode_csv_series(
    data: bytes,
    *,
    metric_name: str,
    labels: Mapping[str, str] | None = None,
    unit: str = "",
    service_name: str = UNKNOWN_SERVICE,
) -> Decoded:
    """Decode a ``timestamp,value`` CSV into gauge points of one series.

    Args:
        data: the file's bytes (UTF-8, an optional BOM is skipped).
        metric_name: the points' metric name.
        labels: the points' attributes (``--label k=v``).
        unit: the metric's unit (UCUM, as OTel uses: ``%``, ``By``, ``s``).
        service_name: the points' ``service_name``.

    Returns:
        The points in file order and the rejected rows (``where`` is ``line N``).

    Raises:
        MalformedInput: not UTF-8 text, empty, or a header with no value column.
    """
    if not metric_name:
        raise MalformedInput("a CSV series needs a metric name (--metric-name)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MalformedInput(f"not UTF-8 text: {exc}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = iter(reader)
    first = next(rows, None)
    if first is None:
        raise MalformedInput("the CSV file is empty")
    columns = _columns(first)
    pending: list[tuple[int, list[str]]] = []
    if columns is None:
        try:
            parse_timestamp(first[0] if first else "")
        except ItemRejected:
            raise MalformedInput(
                f"line 1: the header {','.join(first)[:80]!r} names no timestamp and value "
                "columns (expected e.g. 'timestamp,value')"
            ) from None
        columns = (0, 1)
        pending.append((1, first))
    time_col, value_col = columns
    attributes: Attributes = dict(labels or {})
    out = Decoded()
    seen: dict[int, int] = {}

    def handle(line: int, row: list[str]) -> None:
        if not row or all(not cell.strip() for cell in row):
            return
        out.count_read("metric_point")
        try:
            if len(row) <= max(time_col, value_col):
                raise ItemRejected(f"row has too few columns (needs {max(columns) + 1})")
            time = parse_timestamp(row[time_col])
            raw_value = row[value_col].strip()
            if not raw_value:
                raise ItemRejected("value is empty")
            try:
                value = float(raw_value)
            except ValueError:
                raise ItemRejected("value is not a number") from None
            first_line = seen.get(time)
            if first_line is not None:
                out.reject(
                    "metric_point", REPEATED_TIME, f"line {line} (repeats line {first_line})"
                )
                return
            seen[time] = line
        except ItemRejected as exc:
            out.reject("metric_point", exc.reason, f"line {line}")
            return
        out.batch.metrics.append(
            MetricPoint(
                name=metric_name,
                type="gauge",
                time_unix_nano=time,
                unit=unit,
                service_name=service_name,
                attributes=attributes,
                value=value,
            )
        )

    for line, row in pending:
        handle(line, row)
    try:
        for row in rows:
            handle(reader.line_num, row)
    except csv.Error as exc:
        raise MalformedInput(f"line {reader.line_num}: not CSV: {exc}") from None
    return out
