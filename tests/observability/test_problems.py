"""Problems and anomalies: what the detector stored, listed for a model — or an honest note.

Without a detection run the problem tools list nothing and say why (a fresh store, in process).
On the demo server, ``coremetry detect`` (the detector's own command, on the server's data dir)
stores problems; the tools then list exactly those, in the window asked, each readable in full.
"""

import json
from pathlib import Path
from typing import Final

import msgspec
import trio
from conftest import check_emitted
from mcp import types

from coremetry.mcp import Connection
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.server import build_mcp_server
from coremetry.store.sqlite import open_sqlite_store

from ._client import failure, mcp_client, structured
from .conftest import DemoServer, coremetry

LIMIT_S: Final = 600.0
BUDGET: Final = 16 * 1024


async def call(tmp_path: Path, name: str, arguments: dict[str, object]) -> dict[str, object]:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        server = build_mcp_server(store=store, problems_path=tmp_path / "problems.json")
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        reply = await server.handle(
            msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
        )
    assert reply is not None
    message = json.loads(reply.body)
    check_emitted(message, LATEST_HANDSHAKE, "tools/call")
    result = message["result"]
    assert isinstance(result, dict)
    return result


async def test_without_a_detection_run_the_tools_say_so(tmp_path: Path) -> None:
    listed = await call(tmp_path, "list_problems", {})
    anomalies = await call(tmp_path, "list_anomalies", {"range": "7d"})
    missing = await call(tmp_path, "get_problem", {"problem_id": "prb_0123456789abcdef"})
    for result in (listed, anomalies):
        body = result["structuredContent"]
        assert isinstance(body, dict)
        assert body["detection_available"] is False
        assert body["total"] == 0
        assert "No problem detection has run" in str(body["note"])
        assert "not evidence that all is well" in str(body["note"])
    assert missing["isError"] is True
    error = missing["structuredContent"]
    assert isinstance(error, dict)
    assert error["error"] == "not_found"
    assert "list_services" in str(error["hint"])


async def test_problems_stored_by_the_detector_are_listed(demo_server: DemoServer) -> None:
    with trio.fail_after(LIMIT_S):
        await trio.run_process(
            [*coremetry(), "detect", "--range", "24h", "--end", "latest"],
            env=demo_server.env,
            capture_stdout=True,
            capture_stderr=True,
            start_new_session=True,
        )
        stored = json.loads((demo_server.data_dir / "problems.json").read_text())["problems"]
        assert stored, "the detector finds problems in the Nezha day"
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            listed = await client.call_tool("list_problems", {"range": "24h", "limit": 200})
            body = structured(listed)
            rows = body["problems"]
            assert isinstance(rows, list)
            first = rows[0]
            assert isinstance(first, dict)
            detail = structured(
                await client.call_tool("get_problem", {"problem_id": first["problem_id"]})
            )
            origin = str(first["origin"])
            by_service = structured(
                await client.call_tool(
                    "list_anomalies", {"service": origin, "range": "24h", "limit": 200}
                )
            )
            unknown = failure(
                await client.call_tool("get_problem", {"problem_id": "prb_0000000000000000"})
            )
            resource = await client.read_resource(f"coremetry://problem/{first['problem_id']}")
            completion = await client.complete(
                types.ResourceTemplateReference(uri="coremetry://problem/{id}"),
                {"name": "id", "value": "prb_"},
            )
    assert len(listed.content[0].text.encode()) <= BUDGET  # type: ignore[union-attr]  # a TextContent, checked by structured()
    assert body["detection_available"] is True
    # Exactly the stored problems (all of the demo day is in the 24 h window), newest first.
    assert [r["problem_id"] for r in rows if isinstance(r, dict)] == [
        p["problem_id"] for p in stored
    ][: len(rows)]
    assert body["total"] == len(stored)
    assert all(str(r["problem_id"]).startswith("prb_") for r in rows if isinstance(r, dict))
    stored_first = stored[0]
    assert detail["problem_id"] == stored_first["problem_id"]
    assert detail["services"] == stored_first["services"]
    anomalies = detail["anomalies"]
    assert isinstance(anomalies, list)
    assert len(anomalies) == len(stored_first["anomalies"])
    ranking = detail["ranking"]
    assert isinstance(ranking, list)
    assert [r["service"] for r in ranking if isinstance(r, dict)] == stored_first["services"]
    found = by_service["anomalies"]
    assert isinstance(found, list)
    assert found
    assert all(isinstance(a, dict) and a["service"] == origin for a in found)
    assert unknown["error"] == "not_found"
    assert "list_problems" in str(unknown["hint"])
    (contents,) = resource.contents
    assert isinstance(contents, types.TextResourceContents)
    assert json.loads(contents.text)["problem_id"] == first["problem_id"]
    assert set(completion.completion.values) <= {p["problem_id"] for p in stored}
    assert completion.completion.values


async def page_through(
    tmp_path: Path, tool: str, key: str, arguments: dict[str, object]
) -> tuple[list[dict[str, object]], int]:
    """Every row of a paged problem tool, following cursors; and the first page's total."""
    rows: list[dict[str, object]] = []
    total = -1
    cursors: set[str] = set()
    page_arguments = dict(arguments)
    while True:
        body = (await call(tmp_path, tool, page_arguments))["structuredContent"]
        assert isinstance(body, dict)
        total = int(body["total"]) if total < 0 else total
        found = body[key]
        assert isinstance(found, list)
        assert found, "every page shows something"
        rows.extend(found)
        if "cursor" not in body:
            assert body["truncated"] is False
            return rows, total
        assert body["truncated"] is True
        cursor = str(body["cursor"])
        assert cursor not in cursors
        cursors.add(cursor)
        page_arguments = {**arguments, "cursor": cursor}


async def test_problems_and_anomalies_page_with_cursors(
    demo_server: DemoServer, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT_S):
        await trio.run_process(
            [*coremetry(), "detect", "--range", "24h", "--end", "latest"],
            env=demo_server.env,
            capture_stdout=True,
            capture_stderr=True,
            start_new_session=True,
        )
    # A snapshot of what the detector stored, read by the tools in process (the demo server's
    # own detection may rewrite its file meanwhile).
    snapshot = (demo_server.data_dir / "problems.json").read_bytes()
    (tmp_path / "problems.json").write_bytes(snapshot)
    stored = json.loads(snapshot)["problems"]
    assert len(stored) > 1
    problems, total = await page_through(
        tmp_path, "list_problems", "problems", {"range": "24h", "limit": 1}
    )
    anomalies, anomaly_total = await page_through(
        tmp_path, "list_anomalies", "anomalies", {"range": "24h", "limit": 2}
    )
    # The same rows, in the same order, as pages cut by the byte budget rather than the limit.
    wide, _total = await page_through(
        tmp_path, "list_anomalies", "anomalies", {"range": "24h", "limit": 200}
    )
    assert [p["problem_id"] for p in problems] == [p["problem_id"] for p in stored]
    assert total == len(stored)
    assert len(anomalies) == anomaly_total == sum(len(p["anomalies"]) for p in stored)
    assert anomalies == wide
