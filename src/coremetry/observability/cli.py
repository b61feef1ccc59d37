"""``coremetry tools --catalog compact|full``: print the tool catalog and its size in bytes.

The catalog (:mod:`.catalog`) goes to stdout as JSON — one line, exactly the bytes measured,
or indented with ``--pretty`` — and ``catalog: <kind>, <n> tools, <bytes> bytes`` to stderr, so
``coremetry tools --catalog compact > catalog.json`` captures the catalog alone. No store or
data dir is opened.
"""

import argparse
import sys
from typing import TextIO

import msgspec

from .catalog import TOOLS, CatalogKind, catalog, catalog_bytes

__all__ = ["add_tools_parser", "run_tools"]


def add_tools_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add the ``tools`` subcommand to the ``coremetry`` parser."""
    tools = sub.add_parser("tools", help="print the tool catalog (compact or full) and its size")
    tools.add_argument(
        "--catalog",
        choices=("compact", "full"),
        default="full",
        help="compact: names, one-line descriptions, bare schemas; full: what tools/list "
        "serves (default)",
    )
    tools.add_argument("--pretty", action="store_true", help="indent the JSON")


def run_tools(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run ``coremetry tools``; returns the exit status (0)."""
    kind: CatalogKind = "compact" if args.catalog == "compact" else "full"
    data = catalog_bytes(kind)
    if args.pretty:
        out.write(msgspec.json.format(msgspec.json.encode(catalog(kind)), indent=2).decode())
    else:
        out.write(data.decode())
    out.write("\n")
    out.flush()
    print(f"catalog: {kind}, {len(TOOLS)} tools, {len(data)} bytes", file=err)
    return 0
