"""Adding a tool is one ``ToolSpec``: it is then served by ``tools/list``, REST and the catalog.

A throwaway tool is declared once, below, and appended to the production list of specs; the
same list goes to the catalog and to the registration, and nothing else names the tool.
"""

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Final

import httpx
import msgspec
import trio

from coremetry.config import load_config
from coremetry.mcp import CallContext, Connection, Server
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability import TOOLS, ObservabilityTools, Shaped, ToolSpec
from coremetry.observability import register_observability as register
from coremetry.observability.catalog import catalog
from coremetry.observability.results import Result
from coremetry.server import build_mcp_server, serve
from coremetry.store.sqlite import open_sqlite_store

LIMIT_S: Final = 30


class EchoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``throwaway_echo``."""

    text: Annotated[str, msgspec.Meta(min_length=1, description="What to echo back.")]


async def echo(tools: ObservabilityTools, args: EchoArgs, ctx: CallContext) -> Shaped:
    """Echo the text, and whether the handlers' store is empty."""
    stats = await tools.store.statistics()
    return Shaped(
        {"echo": args.text, "empty_store": stats.newest_unix_nano is None, "truncated": False}
    )


class EchoResult(Result, kw_only=True):
    """The throwaway tool's result."""

    echo: str
    empty_store: bool


THROWAWAY: Final = ToolSpec(
    name="throwaway_echo",
    args=EchoArgs,
    output=EchoResult,
    handler=echo,
    description="Echo text back, and say whether the store is empty. Next: nothing.",
    short_description="Echo text.",
)
SPECS: Final = (*TOOLS, THROWAWAY)


async def list_tools(server: Server) -> list[dict[str, object]]:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    reply = await server.handle(
        msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
    )
    assert reply is not None
    tools = json.loads(reply.body)["result"]["tools"]
    assert isinstance(tools, list)
    return tools


async def test_one_spec_is_served_by_tools_list_rest_and_the_catalog(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    full = {str(e["name"]): e for e in catalog("full", SPECS)}
    compact = {str(e["name"]): e for e in catalog("compact", SPECS)}
    assert compact["throwaway_echo"]["description"] == "Echo text."
    assert "throwaway_echo" not in {str(e["name"]) for e in catalog("full")}
    config = load_config(environ={}, overrides={"http": {"port": 0}})
    with trio.fail_after(LIMIT_S):
        async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
            server = build_mcp_server(page_size=1000)
            register(server, store, specs=SPECS)
            served = {str(t["name"]): t for t in await list_tools(server)}
            assert list(served) == [spec.name for spec in SPECS]
            assert served["throwaway_echo"] == json.loads(
                msgspec.json.encode(full["throwaway_echo"])
            )
            assert served["throwaway_echo"]["title"] == "Throwaway echo"
            assert served["throwaway_echo"]["annotations"] == {
                "readOnlyHint": True,
                "openWorldHint": False,
            }
            url: str = await nursery.start(partial(serve, config, server, announce=False))
            async with httpx.AsyncClient() as client:
                listed = await client.get(f"{url}/api/tools")
                called = await client.post(f"{url}/api/tools/throwaway_echo", json={"text": "hi"})
                refused = await client.post(f"{url}/api/tools/throwaway_echo", json={"text": ""})
    assert listed.status_code == 200
    assert {t["name"] for t in listed.json()["tools"]} >= set(served)
    assert called.status_code == 200
    assert called.json() == {"echo": "hi", "empty_store": True, "truncated": False}
    assert refused.status_code == 400
    assert refused.json()["error"] == "bad_args"
    assert "text" in refused.json()["detail"]
