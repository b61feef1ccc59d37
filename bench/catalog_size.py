"""Catalog size: the compact tool catalog against the full one, per tool and in total.

A model pays for the tool catalog in context on every turn. ``coremetry tools --catalog full`` is
what ``tools/list`` serves (long descriptions, documented schemas); ``--catalog compact`` is the
chat-style catalog (one-line descriptions, bare schemas). This script prints both sizes per tool
and in total, the compact/full ratio (target <= 40%), and the largest full description (target
<= 1,500 bytes), and exits 1 when a target is missed. Sizes are bytes of compact JSON (UTF-8),
the baseline being the full catalog of the same run.

Usage::

    python bench/catalog_size.py [--json PATH]
"""

import argparse
import sys
from pathlib import Path
from typing import Final

import msgspec

from coremetry.observability.catalog import TOOLS, catalog, catalog_bytes

MAX_RATIO: Final = 0.40
MAX_DESCRIPTION_BYTES: Final = 1500


class ToolRow(msgspec.Struct, frozen=True):
    name: str
    full_bytes: int
    compact_bytes: int
    description_bytes: int
    short_description_bytes: int
    schema_bytes: int


class Report(msgspec.Struct, frozen=True):
    tools: list[ToolRow]
    full_bytes: int
    compact_bytes: int
    ratio: float
    max_description_bytes: int
    max_description_tool: str
    passed: bool


def measure() -> Report:
    full_entries = {str(e["name"]): e for e in catalog("full")}
    compact_entries = {str(e["name"]): e for e in catalog("compact")}
    rows = [
        ToolRow(
            name=spec.name,
            full_bytes=len(msgspec.json.encode(full_entries[spec.name])),
            compact_bytes=len(msgspec.json.encode(compact_entries[spec.name])),
            description_bytes=len(spec.description.encode()),
            short_description_bytes=len(spec.short_description.encode()),
            schema_bytes=len(msgspec.json.encode(full_entries[spec.name]["inputSchema"])),
        )
        for spec in TOOLS
    ]
    full = len(catalog_bytes("full"))
    compact = len(catalog_bytes("compact"))
    largest = max(rows, key=lambda r: r.description_bytes)
    ratio = compact / full
    return Report(
        tools=rows,
        full_bytes=full,
        compact_bytes=compact,
        ratio=ratio,
        max_description_bytes=largest.description_bytes,
        max_description_tool=largest.name,
        passed=ratio <= MAX_RATIO and largest.description_bytes <= MAX_DESCRIPTION_BYTES,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    report = measure()
    print(f"{'tool':<18}{'full B':>8}{'compact B':>11}{'ratio':>8}{'descr B':>9}{'schema B':>10}")
    for row in report.tools:
        print(
            f"{row.name:<18}{row.full_bytes:>8}{row.compact_bytes:>11}"
            f"{row.compact_bytes / row.full_bytes:>8.0%}{row.description_bytes:>9}"
            f"{row.schema_bytes:>10}"
        )
    print(f"{'catalog':<18}{report.full_bytes:>8}{report.compact_bytes:>11}{report.ratio:>8.1%}")
    print(
        f"compact / full: {report.ratio:.1%} (target <= {MAX_RATIO:.0%}): "
        f"{'PASS' if report.ratio <= MAX_RATIO else 'FAIL'}"
    )
    print(
        f"largest description: {report.max_description_bytes} B ({report.max_description_tool}; "
        f"target <= {MAX_DESCRIPTION_BYTES} B): "
        f"{'PASS' if report.max_description_bytes <= MAX_DESCRIPTION_BYTES else 'FAIL'}"
    )
    if args.json is not None:
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
