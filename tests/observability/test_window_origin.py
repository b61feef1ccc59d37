"""One origin per window: ``list_problems``, ``get_problem``, ``triage_brief`` and
``get_service``'s ``likely_origin`` name the same service for the same incident.

A synthetic incident in a real embedded store: ``frontend`` calls ``checkout``, which calls
``payment``; ``search`` (also called by ``frontend``) is slow all the time. For fifteen
minutes ``payment`` turns slow. ``coremetry detect``'s run stores its problems; the four tools
are then asked about the incident's window, as a client asks them (``tools/call`` and
``prompts/get`` on the in-process server), and must agree.
"""

import json
import random
from pathlib import Path
from typing import Final

import msgspec
from conftest import check_emitted

from coremetry.detection import Anomaly, Problem, ServiceRank
from coremetry.detection.problem_store import PROBLEMS_FILE, save_problems
from coremetry.detection.runner import detect_in_store
from coremetry.mcp import Connection, Server
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability.ranges import rfc3339
from coremetry.observability.window_origin import leading_problem, problem_origin
from coremetry.server import build_mcp_server
from coremetry.store import Span, SpanKind, TelemetryBatch, TimeRange
from coremetry.store.sqlite import open_sqlite_store

from ._client import embedded_json

MINUTE: Final = 60 * 1_000_000_000
MS: Final = 1_000_000
T0: Final = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z
MINUTES: Final = 200
FAULT: Final = range(180, 195)


def telemetry(seed: int = 7) -> TelemetryBatch:
    """Ten requests a minute through frontend -> checkout -> payment and frontend -> search."""
    rng = random.Random(seed)
    spans: list[Span] = []
    for minute in range(MINUTES):
        slow = minute in FAULT
        for request in range(10):
            start = T0 + minute * MINUTE + request * 6_000 * MS
            trace_id = f"{minute + 1:016x}{request + 1:016x}"
            prefix = f"{minute:08x}{request:04x}"
            pay = (400.0 if slow else 15.0) * rng.uniform(0.8, 1.25) * MS
            search = 250.0 * rng.uniform(0.8, 1.25) * MS  # always slow: not a cause
            checkout_end = start + 2 * MS + int(pay + 10 * MS)
            search_start = checkout_end + 1 * MS
            end = search_start + int(search) + 2 * MS
            rows = [
                ("0001", None, "frontend", "GET /buy", start, end),
                ("0002", "0001", "checkout", "POST /checkout", start + 2 * MS, checkout_end),
                ("0003", "0002", "payment", "POST /pay", start + 5 * MS, start + 5 * MS + int(pay)),
                ("0004", "0001", "search", "GET /search", search_start, search_start + int(search)),
            ]
            for suffix, parent, service, name, begin, finish in rows:
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=prefix + suffix,
                        parent_span_id=prefix + parent if parent else "",
                        service_name=service,
                        name=name,
                        kind=SpanKind.SERVER,
                        start_time_unix_nano=begin,
                        end_time_unix_nano=finish,
                    )
                )
    return TelemetryBatch(spans=spans)


async def exchange(server: Server, method: str, params: dict[str, object]) -> dict[str, object]:
    """One request as a client sends it; the reply message, checked against the schema."""
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = await server.handle(
        msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
    )
    assert reply is not None
    message = json.loads(reply.body)
    assert isinstance(message, dict)
    check_emitted(message, LATEST_HANDSHAKE, method)
    return message


async def ask(server: Server, method: str, params: dict[str, object]) -> dict[str, object]:
    """One request as a client sends it; the result object (an error fails the test)."""
    message = await exchange(server, method, params)
    result = message["result"]
    assert isinstance(result, dict)
    assert not result.get("isError"), result
    return result


def content(result: dict[str, object]) -> dict[str, object]:
    body = result["structuredContent"]
    assert isinstance(body, dict)
    return body


async def test_the_four_tools_name_the_same_origin(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(telemetry())
        judged = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + MINUTES * MINUTE)
        run = await detect_in_store(store, judged)
        assert run.problems, "the synthetic incident opens a problem"
        save_problems(tmp_path / PROBLEMS_FILE, run.time_range, run.problems)
        server = build_mcp_server(store=store, problems_path=tmp_path / PROBLEMS_FILE)
        window = {
            "start": rfc3339(T0 + (FAULT.start - 5) * MINUTE),
            "end": rfc3339(T0 + MINUTES * MINUTE),
        }
        listed = content(
            await ask(server, "tools/call", {"name": "list_problems", "arguments": window})
        )
        rows = listed["problems"]
        assert isinstance(rows, list)
        assert rows
        problem_id = rows[0]["problem_id"]
        got = content(
            await ask(
                server,
                "tools/call",
                {"name": "get_problem", "arguments": {"problem_id": problem_id}},
            )
        )
        ranking = got["ranking"]
        assert isinstance(ranking, list)
        service = content(
            await ask(
                server,
                "tools/call",
                {"name": "get_service", "arguments": {"service": "frontend", **window}},
            )
        )["likely_origin"]
        brief = await ask(
            server, "prompts/get", {"name": "triage_brief", "arguments": {"range": "30m"}}
        )
    messages = brief["messages"]
    assert isinstance(messages, list)
    text = messages[0]["content"]["text"]
    triage = embedded_json(text)["likely_origin"]
    assert isinstance(service, dict)
    assert isinstance(triage, dict)
    origins = {
        "list_problems": rows[0]["origin"],
        "get_problem": got["origin"],
        "get_problem ranking": ranking[0]["service"],
        "get_service likely_origin": service["service"],
        "triage_brief likely_origin": triage["service"],
    }
    assert set(origins.values()) == {"payment"}, origins
    # The window's answer says where it comes from, and why the first beats the second.
    for answer in (service, triage):
        assert answer["source"] == "problem"
        assert answer["problem_id"] == problem_id
        assert "payment is the likely origin" in str(answer["summary"])
        rows_shown = answer["ranking"]
        assert isinstance(rows_shown, list)
        assert rows_shown[0]["service"] == "payment"
        assert "Ahead of " in str(rows_shown[0]["reason"])
    assert "payment is the likely origin" in text.split("Data (JSON)")[0]


def stored(problem_id: str, start_minute: int, services: list[str], series: int) -> Problem:
    """A stored problem of ``series`` distinct latency series, ranked as ``services``."""
    anomalies = [
        Anomaly(
            series_id=f"spans/{services[0]}/s{k}",
            name=f"s{k}",
            labels={},
            service_name=services[0],
            unit="s",
            signal="latency",
            side="server",
            direction="up",
            start_unix_nano=T0 + start_minute * MINUTE,
            detected_unix_nano=T0 + (start_minute + 1) * MINUTE,
            end_unix_nano=T0 + (start_minute + 4) * MINUTE,
            ongoing=False,
            baseline=0.1,
            observed=1.0,
            score=9.0,
            points=4,
        )
        for k in range(series)
    ]
    ranking = [
        ServiceRank(
            service_name=name,
            symptomatic=True,
            anomalous_callers=[],
            anomalous_callees=[],
            depth=0,
            first_anomaly_unix_nano=T0 + start_minute * MINUTE,
            max_score=9.0,
            reason="anomalous",
        )
        for name in services
    ]
    return Problem(
        problem_id=problem_id,
        status="resolved",
        start_unix_nano=T0 + start_minute * MINUTE,
        end_unix_nano=T0 + (start_minute + 4) * MINUTE,
        detected_unix_nano=T0 + (start_minute + 1) * MINUTE,
        services=services,
        ranking=ranking,
        anomalies=anomalies,
        title=services[0],
    )


def test_the_leading_problem_agrees_with_the_traces_holds_the_slowest_then_is_largest() -> None:
    early = stored("prb_a", 10, ["a", "b"], series=5)
    late = stored("prb_b", 13, ["b", "c"], series=2)
    far = stored("prb_c", 40, ["d"], series=9)
    focus = TimeRange(start_unix_nano=T0 + 8 * MINUTE, end_unix_nano=T0 + 20 * MINUTE)
    problems = [early, late, far]
    # No slow trace to place: the largest incident overlapping the focus; far is outside it.
    assert leading_problem(problems, focus) == early
    # The slowest trace ran in the later problem (after the earlier one ended): it leads.
    assert leading_problem(problems, focus, slowest_start_unix_nano=T0 + 16 * MINUTE) == late
    # A problem naming the origin the window's traces name leads: two analyses agree.
    assert leading_problem(problems, focus, trace_origin="b") == late
    assert (
        leading_problem(problems, focus, slowest_start_unix_nano=T0 + 16 * MINUTE, trace_origin="a")
        == early
    )
    # Asked about one service: only problems involving it.
    assert leading_problem(problems, focus, service="c") == late
    assert leading_problem(problems, focus, service="d") is None
    assert problem_origin(late) == "b"
    assert problem_origin(msgspec.structs.replace(late, services=[], ranking=[])) is None


async def ask_error(server: Server, method: str, params: dict[str, object]) -> dict[str, object]:
    """One request as a client sends it; the JSON-RPC error object (a result fails the test)."""
    message = await exchange(server, method, params)
    error = message.get("error")
    assert isinstance(error, dict), message
    return error


def brief_data(result: dict[str, object]) -> dict[str, object]:
    messages = result["messages"]
    assert isinstance(messages, list)
    data = embedded_json(messages[0]["content"]["text"])
    assert isinstance(data, dict)
    return data


async def test_triage_brief_over_a_window_keeps_the_cited_problem_among_many(
    tmp_path: Path,
) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(telemetry())
        judged = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + MINUTES * MINUTE)
        run = await detect_in_store(store, judged)
        assert run.problems, "the synthetic incident opens a problem"
        # Many more problems in the window, newer than the incident's, with long titles: the
        # brief cannot carry them all within its budget.
        noise = [
            msgspec.structs.replace(
                stored(f"prb_noise{k:02d}", 196, ["search", "frontend"], series=3),
                title="search latency up " + "x" * 400,
            )
            for k in range(40)
        ]
        save_problems(tmp_path / PROBLEMS_FILE, run.time_range, [*run.problems, *noise])
        server = build_mcp_server(store=store, problems_path=tmp_path / PROBLEMS_FILE)
        window = {
            "start": rfc3339(T0 + (FAULT.start - 5) * MINUTE),
            "end": rfc3339(T0 + MINUTES * MINUTE),
        }
        listed = content(
            await ask(
                server,
                "tools/call",
                {"name": "list_problems", "arguments": {**window, "limit": 200}},
            )
        )
        brief = brief_data(
            await ask(server, "prompts/get", {"name": "triage_brief", "arguments": window})
        )
        bad_start = await ask_error(
            server,
            "prompts/get",
            {"name": "triage_brief", "arguments": {"start": "yesterday", "end": window["end"]}},
        )
        inverted = await ask_error(
            server,
            "prompts/get",
            {"name": "triage_brief", "arguments": {"start": window["end"], "end": window["start"]}},
        )
        bogus = await ask_error(
            server, "prompts/get", {"name": "triage_brief", "arguments": {"bogus": "x"}}
        )
    # The window is the one given, as list_problems resolves it.
    assert brief["window"] == listed["window"]
    assert brief["window_anchor"] == "as given (start/end)"
    origin = brief["likely_origin"]
    assert isinstance(origin, dict)
    assert origin["service"] == "payment"
    assert origin["source"] == "problem"
    # The problem the origin cites leads the (compact) rows; the rest are counted and listed
    # by list_problems over the same window.
    rows = brief["problems"]
    assert isinstance(rows, list)
    assert rows[0]["problem_id"] == origin["problem_id"]
    assert rows[0]["origin"] == "payment"
    assert rows[0]["origin_reason"]
    assert all(len(str(r["title"])) <= 120 for r in rows)
    assert all("sample_trace_ids" not in r for r in rows)
    assert brief["problems_total"] == listed["total"] == len(run.problems) + 40
    assert len(rows) < len(run.problems) + 40
    shown = brief["window"]
    assert isinstance(shown, dict)
    assert f"list_problems(start={shown['start']}, end={shown['end']})" in str(
        brief["problems_more"]
    )
    # The likely origin's service row is kept.
    services = brief["services"]
    assert isinstance(services, list)
    assert services[0]["service"] == "payment"
    # Bad windows and unknown arguments: invalid params naming the argument.
    assert bad_start["code"] == -32602
    assert "start" in str(bad_start["message"])
    assert inverted["code"] == -32602
    assert "end" in str(inverted["message"])
    assert bogus["code"] == -32602
    assert "bogus" in str(bogus["message"])
    assert "range, start, end" in str(bogus["message"])
