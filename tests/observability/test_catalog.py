"""The tool catalog: what ``coremetry tools`` prints is what ``tools/list`` serves, and its size.

The server is the production registry over a real (empty) SQLite store; ``tools/list`` is asked
through the dispatcher and its answer validated against the MCP schema.
"""

import json
import subprocess
from pathlib import Path
from typing import Final

import msgspec
from conftest import check_emitted

from coremetry.mcp import Connection
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability import TOOL_NAMES, TOOLS
from coremetry.observability.catalog import catalog, catalog_bytes
from coremetry.server import build_mcp_server
from coremetry.store.sqlite import open_sqlite_store

from .conftest import coremetry

MAX_COMPACT_SHARE: Final = 0.40
"""Issue 6: the compact catalog is at most 40% of the full one."""
DESCRIPTIONS: Final = {spec.name: spec.description for spec in TOOLS}
SHORT_DESCRIPTIONS: Final = {spec.name: spec.short_description for spec in TOOLS}


async def served_tools(tmp_path: Path) -> list[dict[str, object]]:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        server = build_mcp_server(store=store, page_size=1000)
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        conn = Connection(protocol_version=LATEST_HANDSHAKE)
        reply = await server.handle(msgspec.json.encode(request), conn)
    assert reply is not None
    message = json.loads(reply.body)
    check_emitted(message, LATEST_HANDSHAKE, "tools/list")
    tools = message["result"]["tools"]
    assert isinstance(tools, list)
    return [t for t in tools if t["name"] in TOOL_NAMES]


async def test_full_catalog_is_what_tools_list_serves(tmp_path: Path) -> None:
    served = await served_tools(tmp_path)
    full = catalog("full")
    assert [t["name"] for t in served] == [t["name"] for t in full] == list(TOOL_NAMES)
    for entry, tool in zip(full, served, strict=True):
        assert tool == json.loads(msgspec.json.encode(entry)), tool["name"]


def test_compact_catalog_is_small_and_still_callable() -> None:
    full, compact = catalog_bytes("full"), catalog_bytes("compact")
    assert len(compact) <= MAX_COMPACT_SHARE * len(full)
    for entry in catalog("compact"):
        name = str(entry["name"])
        assert entry["description"] == SHORT_DESCRIPTIONS[name]
        schema = json.dumps(entry["inputSchema"])
        assert '"description"' not in schema
    # Required arguments survive the compaction, so a call can still be formed.
    compact_by_name = {str(e["name"]): e for e in catalog("compact")}
    search = compact_by_name["get_trace"]["inputSchema"]
    assert isinstance(search, dict)
    assert search["required"] == ["trace_id"]


def test_every_description_fits_and_names_a_next_step() -> None:
    for name in TOOL_NAMES:
        description = DESCRIPTIONS[name]
        assert len(description.encode()) <= 1500, name
        assert len(SHORT_DESCRIPTIONS[name]) <= 100, name
        assert "Next:" in description or "instead" in description, name


def test_tools_command_prints_the_catalog_and_its_size() -> None:
    for kind in ("compact", "full"):
        done = subprocess.run(
            [*coremetry(), "tools", "--catalog", kind],
            capture_output=True,
            check=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        printed = done.stdout.rstrip(b"\n")
        assert printed == catalog_bytes(kind)
        assert done.stderr.decode() == (
            f"catalog: {kind}, {len(TOOL_NAMES)} tools, {len(printed)} bytes\n"
        )
