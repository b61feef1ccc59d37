"""``get_problem`` always answers the problem, whatever its size.

A problem of 30 services and 90 anomalies (larger than the 16 KiB output budget as a whole)
answers its origin ranking first and its strongest anomalies, with totals and shown counts and a
cursor over the rest — never a bare ``{"truncated": true, "note": ...}``; ``service`` narrows it
to one service. A small problem answers whole. Called as a client calls it (``tools/call`` on
the in-process server, the configured budget applied).
"""

import json
from pathlib import Path
from typing import Final

import msgspec
import pytest
from conftest import check_emitted
from jsonschema import Draft202012Validator

from coremetry.detection import Anomaly, Problem, ServiceRank
from coremetry.detection.problem_store import PROBLEMS_FILE, merge_live
from coremetry.mcp import Connection
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability.results import GetProblemResult, output_schema
from coremetry.server import build_mcp_server
from coremetry.store.sqlite import open_sqlite_store

BUDGET: Final = 16 * 1024
T0: Final = 1_767_225_600 * 1_000_000_000
MINUTE: Final = 60 * 1_000_000_000
GET_PROBLEM_SCHEMA: Final = output_schema(GetProblemResult)


class RankRow(msgspec.Struct):
    service: str
    role: str
    reason: str = ""
    evidence: list[str] = []
    evidence_total: int = 0
    sample_trace_ids: list[str] | None = None
    sample_log_lines: list[str] | None = None
    samples_note: str | None = None


class AnomalyRow(msgspec.Struct):
    service: str | None
    series: str
    score: float
    start: str
    labels: dict[str, str] = {}


class Page(msgspec.Struct):
    """What a client reads in ``get_problem``'s structured content."""

    problem_id: str
    origin: str | None
    truncated: bool
    service_count: int
    anomaly_count: int
    anomalies_shown: int
    anomalies: list[AnomalyRow]
    origin_reason: str = ""
    ranking: list[RankRow] | None = None
    ranking_total: int | None = None
    ranking_shown: int | None = None
    candidate_samples: str | None = None
    services: list[str] | None = None
    anomalies_offset: int = 0
    cursor: str | None = None
    sample_trace_ids: list[str] = []
    sample_log_lines: list[str] = []
    service: str | None = None
    position: int | None = None


class Failure(msgspec.Struct):
    error: str
    detail: str = ""
    hint: str = ""


class Reply(msgspec.Struct):
    structuredContent: msgspec.Raw
    isError: bool = False


class Envelope(msgspec.Struct):
    result: Reply


async def call(
    data_dir: Path, arguments: dict[str, object], budget: int = BUDGET
) -> tuple[Reply, int]:
    """``get_problem``'s result and the size of its text block, in bytes."""
    async with open_sqlite_store(data_dir / "telemetry.db", retention_days=0) as store:
        server = build_mcp_server(
            store=store, problems_path=data_dir / PROBLEMS_FILE, output_budget_bytes=budget
        )
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_problem", "arguments": arguments},
        }
        reply = await server.handle(
            msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
        )
    assert reply is not None
    message = json.loads(reply.body)
    check_emitted(message, LATEST_HANDSHAKE, "tools/call")
    # Whatever the budget cut, the answer is a shape the tool's outputSchema declares.
    Draft202012Validator(GET_PROBLEM_SCHEMA).validate(message["result"]["structuredContent"])
    text = message["result"]["content"][0]["text"]
    assert isinstance(text, str)
    return msgspec.json.decode(reply.body, type=Envelope).result, len(text.encode())


def page_of(reply: Reply) -> Page:
    assert reply.isError is False, bytes(reply.structuredContent)
    return msgspec.json.decode(reply.structuredContent, type=Page)


def failure_of(reply: Reply) -> Failure:
    assert reply.isError is True
    return msgspec.json.decode(reply.structuredContent, type=Failure)


def service_name(index: int) -> str:
    return f"ts-service-number-{index:02d}"


def big_problem(services: int = 30, per_service: int = 3) -> Problem:
    """A call chain of services, each with ``per_service`` anomalies and 5 evidence lines."""
    anomalies = [
        Anomaly(
            series_id=f"metric/http.server.request.duration{{service.name={service_name(s)},q={k}}}",
            name="http.server.request.duration",
            labels={"service.name": service_name(s), "quantile": f"0.{k + 5}"},
            service_name=service_name(s),
            unit="s",
            signal="latency",
            side="server",
            direction="up",
            start_unix_nano=T0 + (s + k) * MINUTE,
            detected_unix_nano=T0 + (s + k + 1) * MINUTE,
            end_unix_nano=T0 + (s + k + 10) * MINUTE,
            baseline=0.02,
            observed=0.4 + s / 100,
            score=float(10 + (s * 7 + k * 13) % 97),  # not in start order
            points=10,
        )
        for s in range(services)
        for k in range(per_service)
    ]
    anomalies.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    ranking = [
        ServiceRank(
            service_name=service_name(s),
            symptomatic=True,
            anomalous_callers=[service_name(s - 1)] if s else [],
            anomalous_callees=[service_name(s + 1)] if s + 1 < services else [],
            depth=s,
            first_anomaly_unix_nano=T0 + s * MINUTE,
            max_score=50.0 - s,
            reason=f"unwell, but so is its callee {service_name(s + 1)}: the fault may be "
            "further down the call chain of this long synthetic problem",
            role="own_cause" if s == 0 else "symptomatic",
            evidence=[
                f"http.server.request.duration.p{90 + e}: 0.02 usually, 0.4 at peak "
                f"(server latency, z {40 - e}.0) of {service_name(s)} in the evidence window"
                for e in range(5)
            ],
        )
        for s in range(services)
    ]
    return Problem(
        problem_id="prb_00000000000b16b1",
        status="resolved",
        start_unix_nano=anomalies[0].start_unix_nano,
        end_unix_nano=max(a.end_unix_nano for a in anomalies),
        detected_unix_nano=anomalies[0].detected_unix_nano,
        services=[r.service_name for r in ranking],
        ranking=ranking,
        anomalies=anomalies,
        title=f"{service_name(0)}: http.server.request.duration up (+{services - 1} more services)",
        sample_trace_ids=[f"{i:032x}" for i in range(1, 4)],
        sample_log_lines=[
            f"2026-01-01T00:0{i}:00Z ERROR timeout calling the database" for i in range(3)
        ],
    )


@pytest.fixture
def stored(tmp_path: Path) -> Problem:
    problem = big_problem()
    small = big_problem(services=2, per_service=2)
    small = msgspec.structs.replace(small, problem_id="prb_0000000000005a11")
    merge_live(tmp_path / PROBLEMS_FILE, [problem, small])
    return problem


async def test_a_problem_of_30_services_answers_origin_and_strongest_evidence(
    tmp_path: Path, stored: Problem
) -> None:
    # As one object the problem is far larger than the budget.
    assert len(msgspec.json.encode(stored)) > 2 * BUDGET
    reply, size = await call(tmp_path, {"problem_id": stored.problem_id})
    body = page_of(reply)
    assert size <= BUDGET
    assert body.problem_id == stored.problem_id
    assert body.origin == service_name(0)
    assert body.origin_reason
    assert body.truncated is True
    # The ranking: origin first, in the detector's order, with its total and shown count.
    assert body.ranking is not None
    assert len(body.ranking) >= 10
    assert [r.service for r in body.ranking] == [service_name(s) for s in range(len(body.ranking))]
    assert body.ranking_total == 30
    assert body.ranking_shown == len(body.ranking)
    assert len(body.ranking[0].evidence) == body.ranking[0].evidence_total == 5
    assert body.service_count == 30
    assert body.services == stored.services  # every name, for service=
    # The anomalies: strongest first, a count of all, how many are shown, a cursor for more.
    scores = [a.score for a in body.anomalies]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == max(a.score for a in stored.anomalies)
    assert body.anomaly_count == 90
    assert body.anomalies_shown == len(body.anomalies) == 10
    assert body.cursor is not None
    assert body.sample_trace_ids == stored.sample_trace_ids

    # The cursor continues the anomalies where the page stopped, none twice, none lost,
    # weaker and weaker.
    seen = [(a.series, a.labels["quantile"], a.start, a.score) for a in body.anomalies]
    cursor: str | None = body.cursor
    while cursor is not None:
        reply, size = await call(tmp_path, {"problem_id": stored.problem_id, "cursor": cursor})
        page = page_of(reply)
        assert size <= BUDGET
        assert page.anomalies_offset == len(seen)
        assert page.ranking is None  # shown on the first page
        seen += [(a.series, a.labels["quantile"], a.start, a.score) for a in page.anomalies]
        cursor = page.cursor
    assert len(seen) == len(set(seen)) == 90
    assert [score for *_, score in seen] == sorted(
        (a.score for a in stored.anomalies), reverse=True
    )


async def test_service_narrows_to_one_services_evidence(tmp_path: Path, stored: Problem) -> None:
    target = service_name(17)
    reply, size = await call(tmp_path, {"problem_id": stored.problem_id, "service": target})
    body = page_of(reply)
    assert size <= BUDGET
    assert (body.service, body.position) == (target, 18)
    assert body.origin == service_name(0)  # still says where the problem starts
    assert body.ranking is not None
    [rank] = body.ranking
    assert rank.service == target
    assert len(rank.evidence) == 5
    assert body.anomaly_count == body.anomalies_shown == 3
    assert {a.service for a in body.anomalies} == {target}
    assert body.truncated is False
    # A service that is not the problem's: not_found, naming the problem's services.
    reply, _ = await call(tmp_path, {"problem_id": stored.problem_id, "service": "ts-nope"})
    failed = failure_of(reply)
    assert failed.error == "not_found"
    assert "ts-nope" in failed.detail
    assert service_name(0) in failed.hint


async def test_a_small_problem_answers_whole(tmp_path: Path, stored: Problem) -> None:
    reply, _ = await call(tmp_path, {"problem_id": "prb_0000000000005a11"})
    body = page_of(reply)
    assert body.truncated is False
    assert body.ranking_total == body.ranking_shown == 2
    assert body.anomaly_count == body.anomalies_shown == len(body.anomalies) == 4
    assert body.cursor is None
    assert len(body.sample_log_lines) == 3
    assert body.services == [service_name(0), service_name(1)]


async def test_a_small_problem_states_why_its_first_service_beats_the_second_in_full(
    tmp_path: Path,
) -> None:
    # The detector's reasons name the rule that put the first service ahead of the second
    # with the figures compared: several hundred characters, which a small answer shows whole.
    small = big_problem(services=2, per_service=2)
    why = (
        "own cause: a resource at its limit (container.cpu.utilization 0.98 of its limit "
        "at peak against 0.31 usually, z 41.2), its error rate up from 0.2 % to 37 % over "
        "the same minutes, and 27 ERROR log records (0 usually). Ahead of "
        f"{service_name(1)}: a stronger kind of evidence (a resource at its limit over a "
        "latency rise that its callers share), first anomalous 2 minutes earlier, and no "
        "anomalous callee of its own to pass the blame to."
    )
    assert 400 < len(why) < 700
    first = msgspec.structs.replace(small.ranking[0], reason=why)
    small = msgspec.structs.replace(
        small, problem_id="prb_000000000000a1a1", ranking=[first, small.ranking[1]]
    )
    merge_live(tmp_path / PROBLEMS_FILE, [small])
    reply, _ = await call(tmp_path, {"problem_id": small.problem_id})
    body = page_of(reply)
    assert body.truncated is False
    assert body.origin_reason == why
    assert body.ranking is not None
    assert body.ranking[0].reason == why


@pytest.mark.parametrize("budget", [2048, 4096, 8192])
async def test_a_small_budget_still_answers_the_origin(
    tmp_path: Path, stored: Problem, budget: int
) -> None:
    reply, size = await call(tmp_path, {"problem_id": stored.problem_id}, budget=budget)
    body = page_of(reply)
    assert size <= budget
    assert body.origin == service_name(0)
    assert body.origin_reason
    assert body.truncated is True
    assert body.ranking is not None
    assert len(body.ranking) == body.ranking_shown
    assert body.ranking[0].service == service_name(0)  # a cut row keeps whom it is about
    assert len(body.anomalies) == body.anomalies_shown >= 1
    assert body.anomalies[0].score == max(a.score for a in stored.anomalies)
    assert (body.anomaly_count, body.ranking_total) == (90, 30)
    assert body.cursor is not None


async def test_a_bad_cursor_is_named(tmp_path: Path, stored: Problem) -> None:
    reply, _ = await call(tmp_path, {"problem_id": stored.problem_id, "cursor": "cm1.garbage"})
    failed = failure_of(reply)
    assert failed.error == "bad_args"
    assert "cursor" in failed.detail


def sampled(problem: Problem, candidates: int = 3) -> Problem:
    """``problem`` as the runner leaves it: its first services with samples of their own."""
    ranking = [
        msgspec.structs.replace(
            rank,
            sample_trace_ids=[f"{index + 1:02x}{k:030x}" for k in range(3)],
            sample_log_lines=[
                f"2026-01-01T00:0{k}:00Z ERROR {rank.service_name} timed out calling the "
                f"database after {k + 5} s " + "x" * 200
                for k in range(3)
            ],
            samples_note="traces: 3 slow against the same requests before; log lines: its "
            "WARN and worse in the window",
        )
        if index < candidates
        else rank
        for index, rank in enumerate(problem.ranking)
    ]
    return msgspec.structs.replace(
        problem,
        ranking=ranking,
        sample_trace_ids=ranking[0].sample_trace_ids,
        sample_log_lines=ranking[0].sample_log_lines,
    )


async def test_the_first_candidates_show_samples_of_their_own(tmp_path: Path) -> None:
    problem = sampled(big_problem(services=6, per_service=1))
    merge_live(tmp_path / PROBLEMS_FILE, [problem])
    reply, size = await call(tmp_path, {"problem_id": problem.problem_id})
    body = page_of(reply)
    assert size <= BUDGET
    assert body.truncated is False
    assert body.ranking is not None
    for index, row in enumerate(body.ranking[:3]):
        rank = problem.ranking[index]
        assert row.sample_trace_ids == rank.sample_trace_ids
        assert row.sample_log_lines == rank.sample_log_lines
        assert row.samples_note == rank.samples_note
    for row in body.ranking[3:]:  # not sampled: nothing made up, and the cut said
        assert (row.sample_trace_ids, row.sample_log_lines, row.samples_note) == (None,) * 3
    assert body.candidate_samples is not None
    assert body.candidate_samples.startswith("the first 3 of the 6 ranked services carry")
    assert body.sample_trace_ids == problem.ranking[0].sample_trace_ids
    # Asked about one sampled service: its own samples, no note about the others.
    reply, _ = await call(tmp_path, {"problem_id": problem.problem_id, "service": service_name(1)})
    focused = page_of(reply)
    assert focused.ranking is not None
    [row] = focused.ranking
    assert row.sample_trace_ids == problem.ranking[1].sample_trace_ids
    assert focused.candidate_samples is None


async def test_a_tight_budget_cuts_candidates_log_lines_before_their_rows(tmp_path: Path) -> None:
    problem = sampled(big_problem(services=6, per_service=1))
    merge_live(tmp_path / PROBLEMS_FILE, [problem])
    full, full_size = await call(tmp_path, {"problem_id": problem.problem_id})
    budget = full_size - 1500  # the problem's own log lines and some candidates' must go
    reply, size = await call(tmp_path, {"problem_id": problem.problem_id}, budget=budget)
    body = page_of(reply)
    assert size <= budget
    assert body.truncated is True
    assert body.sample_log_lines == []
    assert body.ranking is not None
    assert body.ranking_shown == body.ranking_total == 6  # every row still there
    # The last sampled candidate loses its log lines first; trace ids and notes stay.
    assert body.ranking[2].sample_log_lines == []
    assert body.ranking[0].sample_log_lines == problem.ranking[0].sample_log_lines
    assert all(row.sample_trace_ids for row in body.ranking[:3])
    assert page_of(full).ranking is not None


async def test_a_long_reason_keeps_why_the_first_beats_the_second(tmp_path: Path) -> None:
    small = big_problem(services=2, per_service=2)
    why = f"Ahead of {service_name(1)}: its trouble began first (120 s earlier)"
    reason = "own cause: " + "its own saturation, errors and logs; " * 40 + "and more. " + why
    assert len(reason) > 1000
    first = msgspec.structs.replace(small.ranking[0], reason=reason)
    small = msgspec.structs.replace(small, ranking=[first, small.ranking[1]])
    merge_live(tmp_path / PROBLEMS_FILE, [small])
    reply, _ = await call(tmp_path, {"problem_id": small.problem_id})
    body = page_of(reply)
    assert body.ranking is not None
    for shown in (body.origin_reason, body.ranking[0].reason):
        assert shown.startswith("own cause: its own saturation")
        assert shown.endswith(f". {why}")
        assert "…(+" in shown  # the head was cut, and says how much
        assert len(shown) <= 700
