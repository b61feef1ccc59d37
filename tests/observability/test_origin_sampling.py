"""likely_origin reads its trace samples from the end of the window, and says which part.

A week-long window whose service has one request a minute over its last 1,000 minutes: the
newest traces must be the window's newest (as a search over the whole week finds them), read
from a part of the week near its end, and ``get_service`` must name that part in
``likely_origin.sampled``.
"""

import json
from pathlib import Path
from typing import Final

import msgspec

from coremetry.mcp import Connection
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability.origin import MIN_SAMPLE_NS, newest_traces
from coremetry.observability.ranges import rfc3339
from coremetry.server import build_mcp_server
from coremetry.store import Span, SpanKind, TelemetryBatch, TimeRange, TraceQuery
from coremetry.store.sqlite import open_sqlite_store

MINUTE: Final = 60 * 1_000_000_000
WEEK: Final = 7 * 24 * 60 * MINUTE
END: Final = 1_800_000_000 * 1_000_000_000
REQUESTS: Final = 1000
"""One request a minute over the window's last 1,000 minutes."""


def request(i: int) -> list[Span]:
    """A SERVER span of ``shop`` calling ``stock``; every tenth request is slow (900 ms)."""
    start = END - (REQUESTS - i) * MINUTE
    took = 900_000_000 if i % 10 == 0 else 20_000_000
    trace = f"{i + 1:032x}"
    return [
        Span(
            trace_id=trace,
            span_id=f"{2 * i + 1:016x}",
            service_name="shop",
            name="GET /cart",
            kind=SpanKind.SERVER,
            start_time_unix_nano=start,
            end_time_unix_nano=start + took,
        ),
        Span(
            trace_id=trace,
            span_id=f"{2 * i + 2:016x}",
            parent_span_id=f"{2 * i + 1:016x}",
            service_name="stock",
            name="GET /stock",
            kind=SpanKind.SERVER,
            start_time_unix_nano=start + 1_000_000,
            end_time_unix_nano=start + took - 1_000_000,
        ),
    ]


async def test_newest_traces_are_the_windows_newest_read_from_its_end(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=[s for i in range(REQUESTS) for s in request(i)]))
        week = TimeRange(start_unix_nano=END - WEEK, end_unix_nano=END)
        query = TraceQuery(time_range=week, service_name="shop")
        whole = await store.search_traces(query, limit=20)
        # The week's average rate: 1,000 requests over 10,080 minutes, a tenth of the last hours'.
        found, part = await newest_traces(store, query, 20, REQUESTS / WEEK)
        assert [t.trace_id for t in found] == [t.trace_id for t in whole.items]
        assert part.end_unix_nano == END
        assert END - WEEK < part.start_unix_nano <= END - 20 * MINUTE, "not the whole week"
        # A rate far above the real one: the part grows until it holds the 200 newest.
        newest = await store.search_traces(query, limit=200)
        found, part = await newest_traces(store, query, 200, 1000 * REQUESTS / WEEK)
        assert [t.trace_id for t in found] == [t.trace_id for t in newest.items]
        assert 200 * MINUTE <= part.end_unix_nano - part.start_unix_nano < REQUESTS * MINUTE
        # More than the window holds: every trace, after reading the whole window.
        found, part = await newest_traces(store, query, 2 * REQUESTS, REQUESTS / WEEK)
        assert len(found) == REQUESTS
        assert part == week
        # No rate known: the whole window at once.
        found, part = await newest_traces(store, query, 5, 0.0)
        assert part == week
        assert len(found) == 5
        # A high rate still reads at least a minute.
        found, part = await newest_traces(store, query, 1, 1.0)
        assert part.end_unix_nano - part.start_unix_nano == MIN_SAMPLE_NS
        assert len(found) == 1


async def test_get_service_names_the_part_of_the_window_it_sampled(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(TelemetryBatch(spans=[s for i in range(REQUESTS) for s in request(i)]))
        server = build_mcp_server(store=store)
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "get_service",
                "arguments": {
                    "service": "shop",
                    "start": rfc3339(END - WEEK),
                    "end": rfc3339(END),
                },
            },
        }
        reply = await server.handle(
            msgspec.json.encode(body), Connection(protocol_version=LATEST_HANDSHAKE)
        )
        assert reply is not None
        answer = json.loads(reply.body)["result"]["structuredContent"]
        origin = answer["likely_origin"]
        (group,) = origin["sampled"]
        assert group["service"] == "shop"
        newest, slow = group["searches"]
        assert newest["end"] == slow["end"] == rfc3339(END)
        assert answer["window"]["start"] < newest["start"], "a recent part, not the week"
        assert newest["traces"] == 200
        # When the sample's traces began: inside the part read, ending at its newest.
        assert newest["start"] <= newest["traces_from"] < newest["traces_to"] <= newest["end"]
        assert slow["traces"] == 20
        assert "p95" in slow["what"]
        # The slow requests (every tenth) are the slow traces it read.
        assert origin["traces_analysed"]["slow"] == 20
        assert all(t["duration_ms"] == 900.0 for t in origin["slow_traces"])
