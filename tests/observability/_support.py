"""Shared helpers of the observability tests: real data through the real ingest path."""

from functools import cache
from pathlib import Path
from typing import Final

from conftest import DATA

from coremetry.ingest import ImportOptions, decode_file, detect_format
from coremetry.store import Span, TelemetryBatch

ZIPKIN: Final = DATA / "zipkin"
SMARTTHINGS: Final = ZIPKIN / "smartthings-mobile-web-install.json"
"""The real 1,041-Zipkin-span SmartThings trace (957 spans once fragments are merged)."""
SKEW: Final = ZIPKIN / "skew.json"
"""Zipkin's clock-skew example: the server half starts 62 ms before its client."""


@cache
def decode(path: Path) -> TelemetryBatch:
    """A ``tests/data`` file decoded by the real ingest decoders (format detected)."""
    data = path.read_bytes()
    return decode_file(data, detect_format(data), ImportOptions()).batch


def spans_of(path: Path) -> list[Span]:
    """The spans of a one-trace file."""
    return list(decode(path).spans)
