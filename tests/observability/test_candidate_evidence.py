"""Issue 16 on the demo: one origin per window, and every ranked candidate with its own evidence.

``coremetry detect`` stores the demo day's problems (the Nezha TrainTicket fault day, shifted
to end now); a client then asks, through the official ``mcp`` SDK client, what a model asks:
``triage_brief`` and ``get_service`` over the same window, ``list_problems`` over it and
``get_problem`` on the problem they name. All four must name the same origin, each say why it
beats the second service, and ``get_problem``'s first candidates must each carry samples of
their own: trace ids of traces that pass through that service (checked with ``get_trace``)
and log lines that are that service's (checked with ``search_logs``).

Every message is validated against the MCP schema and each tool's ``outputSchema`` by the
client helper (:mod:`._client`). Each test is bounded by ``trio.fail_after`` (a hang guard);
nothing asserts on timings.
"""

from datetime import UTC, datetime
from typing import Final

import trio

from ._client import embedded_json, mcp_client, obj, objs, prompt_text, structured
from .conftest import DemoServer, coremetry

LIMIT_S: Final = 600.0
GATEWAY: Final = "ts-gateway-service"
RANGE: Final = "24h"
SAMPLED: Final = 3
"""Candidates the detector samples by default (``DetectionOptions.sample_candidates``)."""


def second_of(line: str) -> tuple[str, str]:
    """A sample log line's ``(RFC 3339 second, body)``: ``"<time> <severity> <body>"``."""
    moment, _severity, body = line.split(" ", 2)
    return moment, body


async def test_four_tools_name_one_origin_and_each_candidate_has_its_own_samples(
    demo_server: DemoServer,
) -> None:
    # The demo server is shared by the session: its problems file is put back as it was
    # (other tests read the demo without stored problems).
    problems_file = demo_server.data_dir / "problems.json"
    kept = problems_file.read_bytes() if problems_file.exists() else None
    try:
        await check_the_four_tools(demo_server)
    finally:
        if kept is None:
            problems_file.unlink(missing_ok=True)
        else:
            problems_file.write_bytes(kept)


async def check_the_four_tools(demo_server: DemoServer) -> None:
    """The test's body: detect, ask the four tools, check their answers."""
    with trio.fail_after(LIMIT_S):
        done = await trio.run_process(
            [*coremetry(), "detect", "--range", RANGE, "--end", "latest"],
            env=demo_server.env,
            capture_stdout=True,
            capture_stderr=True,
            start_new_session=True,
        )
        assert done.returncode == 0, done.stderr
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:
            brief = await client.get_prompt("triage_brief", {"range": RANGE})
            brief_data = embedded_json(prompt_text(brief))
            triage = obj(brief_data["likely_origin"])
            default_brief = embedded_json(prompt_text(await client.get_prompt("triage_brief", {})))
            service = obj(
                structured(
                    await client.call_tool("get_service", {"service": GATEWAY, "range": RANGE})
                )["likely_origin"]
            )
            listed = structured(
                await client.call_tool("list_problems", {"range": RANGE, "limit": 200})
            )
            problem_id = str(triage["problem_id"])
            problem = structured(await client.call_tool("get_problem", {"problem_id": problem_id}))
            ranking = objs(problem["ranking"])
            traces: dict[str, list[list[str]]] = {}
            logs: dict[str, list[list[str]]] = {}
            for row in ranking[:SAMPLED]:
                name = str(row["service"])
                for trace_id in objs_or_strings(row["sample_trace_ids"]):
                    trace = structured(await client.call_tool("get_trace", {"trace_id": trace_id}))
                    traces.setdefault(name, []).append(
                        [str(s["service"]) for s in objs(trace["services"])]
                    )
                for line in objs_or_strings(row["sample_log_lines"]):
                    moment, _body = second_of(line)
                    end = datetime.fromisoformat(moment).timestamp() + 1
                    found = structured(
                        await client.call_tool(
                            "search_logs",
                            {
                                "service": name,
                                "start": moment,
                                "end": datetime.fromtimestamp(end, tz=UTC).strftime(
                                    "%Y-%m-%dT%H:%M:%SZ"
                                ),
                                "limit": 200,
                            },
                        )
                    )
                    logs.setdefault(name, []).append(
                        [str(r["body"]) for r in objs(found["records"])]
                    )

    # The window's origin comes from a stored problem, and every tool names the same one.
    assert triage["source"] == "problem", triage
    origin = str(triage["service"])
    rows = {str(r["problem_id"]): r for r in objs(listed["problems"])}
    assert problem_id in rows
    origins = {
        "triage_brief likely_origin": origin,
        "get_service likely_origin": service["service"],
        "list_problems origin": rows[problem_id]["origin"],
        "get_problem origin": problem["origin"],
        "get_problem ranking[0]": ranking[0]["service"],
    }
    assert set(origins.values()) == {origin}, origins
    assert service["problem_id"] == problem_id

    # The brief keeps the problems a reader needs within its budget, with stored problems:
    # the one its likely origin cites first, compact rows, how many there are and how to list
    # them all; and the service rows the origin stands on (the origin, the gateway whose raw
    # latency is highest because it waits on it). Its default window is the same 24 h.
    for data in (brief_data, default_brief):
        kept = objs(data["problems"])
        assert kept, data.get("omitted")
        assert kept[0]["problem_id"] == problem_id, kept[0]
        assert kept[0]["origin"] == origin
        assert all("sample_trace_ids" not in row for row in kept)
        assert data["problems_total"] == listed["total"]
        assert int(str(listed["total"])) > 1
        assert set(str(r["problem_id"]) for r in kept) <= set(rows)
        omitted = data.get("omitted")
        left_out = obj(omitted).get("problems", 0) if omitted is not None else 0
        assert len(kept) + int(str(left_out)) <= int(str(listed["total"]))
        if len(kept) < int(str(listed["total"])):
            assert "list_problems(start=" in str(data["problems_more"])
        names = {str(s["service"]) for s in objs(data["services"])}
        assert {origin, GATEWAY} <= names, names
        assert obj(data["likely_origin"])["service"] == origin
        assert any(s["service"] == origin for s in objs(data["metric_shifts"]))
    window = obj(default_brief["window"])
    assert f"list_problems(start={window['start']}, end={window['end']})" in str(
        default_brief["problems_more"]
    )

    # Why the first beats the second: said by the problem and by both window answers.
    assert len(ranking) >= 2
    ahead = f"Ahead of {ranking[1]['service']}: "
    assert ahead in str(ranking[0]["reason"])
    assert ahead in str(problem["origin_reason"])
    assert ahead in str(rows[problem_id]["origin_reason"])
    for answer in (triage, service):
        assert ahead in str(objs(answer["ranking"])[0]["reason"]), answer

    # The first candidates each carry their own samples, said how they were chosen.
    sampled = ranking[:SAMPLED]
    assert len(sampled) == min(SAMPLED, len(ranking))
    for row in sampled:
        assert str(row["samples_note"]).startswith("traces: "), row
        assert "; log lines: " in str(row["samples_note"]), row
    for row in ranking[SAMPLED:]:
        assert "samples_note" not in row
    if len(ranking) > SAMPLED:
        assert "the first 3 of the" in str(problem["candidate_samples"])
    # The problem's own samples (kept for older clients) are its origin's.
    assert problem["sample_trace_ids"] == ranking[0]["sample_trace_ids"]
    assert problem["sample_log_lines"] == ranking[0]["sample_log_lines"]
    # The origin's traces exist in the demo's window; every sample trace passes through the
    # candidate it was given for.
    assert traces.get(origin), ranking[0]
    for name, services in traces.items():
        for members in services:
            assert name in members, (name, members)
    # Every sample log line is one of that service's records at that second.
    for row in sampled:
        name = str(row["service"])
        for line, bodies in zip(
            objs_or_strings(row["sample_log_lines"]), logs.get(name, []), strict=True
        ):
            _moment, body = second_of(line)
            assert any(b.startswith(body[:200]) for b in bodies), (name, line)


def objs_or_strings(value: object) -> list[str]:
    """A list of strings from a JSON value (a failed shape fails the test)."""
    assert isinstance(value, list), value
    assert all(isinstance(v, str) for v in value), value
    return [str(v) for v in value]
