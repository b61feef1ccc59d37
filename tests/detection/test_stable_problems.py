"""Stable problems: an incident keeps its id across detection runs and restarts.

Detection runs again and again over the same data — ``coremetry detect`` typed a minute later,
the server's task every minute, a server restarted at another second of the minute — and the
ids a client was given keep answering ``get_problem``; the file never holds the same incident
twice (no two stored problems share an anomalous episode: the same series anomalous at
overlapping times). On the synthetic system of ``test_runner`` and on the shipped demo (the
Nezha fault day).
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Final

import msgspec
import pytest
import trio

from coremetry.cli import main
from coremetry.config import DetectionConfig
from coremetry.demo.loader import load_demo
from coremetry.detection import Anomaly, Problem
from coremetry.detection.problem_store import (
    PROBLEMS_FILE,
    load_problems,
    merge_live,
    save_problems,
    shared_episodes,
)
from coremetry.detection.runner import (
    DetectionOptions,
    TraceCache,
    aligned_range,
    detect_in_store,
    grid_floor,
)
from coremetry.detection.service import run_once
from coremetry.mcp import Connection
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.server import build_mcp_server
from coremetry.store import TimeRange
from coremetry.store.sqlite import open_sqlite_store

from .test_runner import FAULT, MINUTE, MINUTES, T0, telemetry

S: Final = 1_000_000_000
DEMO_NOW: Final = 1_767_225_600 * S  # the demo ends here (a whole minute, as in test_nezha)


def overlapping_pairs(stored: list[Problem]) -> list[tuple[str, str]]:
    """Pairs of stored problems that share an anomalous episode (the same incident twice)."""
    return [
        (a.problem_id, b.problem_id)
        for a, b in itertools.combinations(stored, 2)
        if shared_episodes(a, b)
    ]


def known(stored: list[Problem]) -> set[str]:
    """Every id the stored problems answer to: their own and their aliases."""
    return {alias for p in stored for alias in [p.problem_id, *p.aliases]}


async def answers(data_dir: Path, problem_id: str) -> str:
    """The problem id ``get_problem`` shows for ``problem_id``, called as a client calls it."""
    async with open_sqlite_store(data_dir / "answers.db", retention_days=0) as store:
        server = build_mcp_server(store=store, problems_path=data_dir / PROBLEMS_FILE)
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_problem", "arguments": {"problem_id": problem_id}},
        }
        reply = await server.handle(
            msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
        )
    assert reply is not None
    result = json.loads(reply.body)["result"]
    assert result.get("isError") is not True, result
    shown = result["structuredContent"]["problem_id"]
    assert isinstance(shown, str)
    return shown


def test_the_grid_does_not_depend_on_when_a_run_starts() -> None:
    step = 60 * S
    length = 4 * 3600 * S
    offsets = (0, 7 * S, 29 * S + 999, 59 * S)
    ranges = [
        aligned_range(TimeRange(start_unix_nano=T0 + k, end_unix_nano=T0 + length + k), step)
        for k in offsets
    ]
    for k, judged in zip(offsets, ranges, strict=True):
        assert judged.start_unix_nano % step == step // 2  # half a step past a whole minute
        assert judged.end_unix_nano % step == step // 2
        assert T0 + length + k - step < judged.end_unix_nano <= T0 + length + k
    # Runs started anywhere in the same minute of the grid cut the very same buckets; one a
    # minute later cuts the same buckets, one more.
    assert len({(r.start_unix_nano, r.end_unix_nano) for r in ranges[:3]}) == 1
    assert ranges[3].start_unix_nano == ranges[0].start_unix_nano + step
    assert grid_floor(T0 + 31 * S, step) == T0 + 30 * S
    assert grid_floor(T0 + 29 * S, step) == T0 - 30 * S
    # A range shorter than a step still judges one bucket.
    tiny = aligned_range(TimeRange(start_unix_nano=T0 + S, end_unix_nano=T0 + 2 * S), step)
    assert tiny.end_unix_nano - tiny.start_unix_nano == step


@pytest.fixture
async def synthetic(tmp_path: Path) -> Path:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(telemetry())
    return tmp_path


async def test_coremetry_detect_again_keeps_the_id(synthetic: Path) -> None:
    path = synthetic / PROBLEMS_FILE
    seen: list[str] = []
    async with open_sqlite_store(synthetic / "telemetry.db", retention_days=0) as store:
        # As `coremetry detect --range 5h` typed at three moments: the ranges start and end
        # at other seconds, and the later ones reach past the data.
        for late in (0, 17 * S, 61 * S + 3 * S, 2 * MINUTE + 44 * S):
            end = T0 + MINUTES * MINUTE + late
            run = await detect_in_store(
                store, TimeRange(start_unix_nano=end - 5 * 60 * MINUTE, end_unix_nano=end)
            )
            stored = save_problems(path, run.time_range, run.problems)
            [problem] = stored
            seen.append(problem.problem_id)
    assert len(set(seen)) == 1, seen
    assert await answers(synthetic, seen[0]) == seen[0]


async def test_coremetry_detect_prints_the_ids_get_problem_answers(
    synthetic: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = synthetic / PROBLEMS_FILE
    async with open_sqlite_store(synthetic / "telemetry.db", retention_days=0) as store:
        run = await detect_in_store(
            store, TimeRange(start_unix_nano=T0, end_unix_nano=T0 + MINUTES * MINUTE)
        )
    [found] = run.problems
    # The server's task stored the incident first, under an id of its own (another range saw
    # another first anomaly).
    merge_live(path, [msgspec.structs.replace(found, problem_id="prb_00000000000000aa")])
    argv = ["detect", "--data-dir", str(synthetic), "--end", "latest", "--range", "5h"]
    assert await trio.to_thread.run_sync(main, argv) == 0
    [_, line] = capsys.readouterr().out.splitlines()
    assert line.startswith("prb_00000000000000aa ")
    assert await trio.to_thread.run_sync(main, [*argv, "--json"]) == 0
    printed = msgspec.json.decode(capsys.readouterr().out, type=list[Problem])
    assert [p.problem_id for p in printed] == ["prb_00000000000000aa"]
    assert await answers(synthetic, "prb_00000000000000aa") == "prb_00000000000000aa"
    assert [p.problem_id for p in load_problems(path)] == ["prb_00000000000000aa"]


async def test_restarts_and_runs_every_minute_keep_one_problem(synthetic: Path) -> None:
    config = DetectionConfig()
    given: set[str] = set()
    async with open_sqlite_store(synthetic / "telemetry.db", retention_days=0) as store:
        # Three "processes", each started at another second of the minute (a trace cache of its
        # own, a first run over catch_up_s), each running a few minutes over the fault's end.
        for process, second in enumerate((0, 23, 47)):
            cache: TraceCache = {}
            for minute in range(FAULT.start + 2 + process * 4, FAULT.start + 2 + process * 4 + 4):
                now = T0 + minute * MINUTE + second * S
                span = config.catch_up_s if minute == FAULT.start + 2 + process * 4 else 6 * 3600
                judged = TimeRange(start_unix_nano=now - int(span * S), end_unix_nano=now)
                await run_once(store, synthetic, config, judged, cache)
                stored = load_problems(synthetic / PROBLEMS_FILE)
                given |= {p.problem_id for p in stored}
                assert overlapping_pairs(stored) == []
    [final] = load_problems(synthetic / PROBLEMS_FILE)
    assert final.services[0] == "checkout"
    for problem_id in given:  # every id a client was given answers the same problem
        assert await answers(synthetic, problem_id) == final.problem_id


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("demo")

    async def load() -> None:
        async with open_sqlite_store(data_dir / "telemetry.db", retention_days=0) as store:
            await load_demo(store, data_dir, now_unix_nano=DEMO_NOW)

    trio.run(load)
    return data_dir


async def test_the_demo_detected_twice_and_after_restarts_keeps_its_ids(
    demo_dir: Path, tmp_path: Path
) -> None:
    # The demo's store, with a problems file of this test's own.
    data_dir = tmp_path
    (data_dir / "telemetry.db").symlink_to(demo_dir / "telemetry.db")
    path = data_dir / PROBLEMS_FILE
    config = DetectionConfig()
    options = DetectionOptions(trace_samples=0, samples=0)  # ids and matching only: faster
    async with open_sqlite_store(demo_dir / "telemetry.db", retention_days=0) as store:
        # coremetry detect, twice, 37 s apart.
        first_ids: list[str] = []
        for late in (1, 37 * S):
            end = DEMO_NOW + late
            run = await detect_in_store(
                store,
                TimeRange(start_unix_nano=end - int(config.catch_up_s * S), end_unix_nano=end),
                options,
            )
            stored = save_problems(path, run.time_range, run.problems)
            if not first_ids:
                first_ids = sorted(p.problem_id for p in stored)
                assert len(first_ids) >= 8  # the fault day has many problems (9 measured)
            assert sorted(p.problem_id for p in stored) == first_ids
            assert overlapping_pairs(stored) == []
        # The server's task, started three times at other seconds of the minute, each first
        # run over catch_up_s and the next over window_s.
        after_restart: list[list[str]] = []
        for second in (5, 31, 52):
            before = known(load_problems(path))
            for minute, span in ((3, config.catch_up_s), (4, config.window_s)):
                now = DEMO_NOW + minute * MINUTE + second * S
                judged = TimeRange(start_unix_nano=now - int(span * S), end_unix_nano=now)
                run = await detect_in_store(store, judged, options)
                stored = merge_live(path, run.problems)
                assert overlapping_pairs(stored) == [], (second, minute)
                if span == config.catch_up_s:
                    after_restart.append(sorted(p.problem_id for p in stored))
                    # Unchanged data: a restart gives no id out anew and loses none.
                    assert known(stored) == before
    # The first start stores exactly what `coremetry detect` stored.
    assert after_restart[0] == first_ids
    # Every id `coremetry detect` gave answers: the problem itself, or the problem a later
    # run (a 6 h window sees some incidents whole) merged it into, naming it an alias.
    final = load_problems(path)
    for problem_id in first_ids:
        shown = await answers(data_dir, problem_id)
        [holder] = [p for p in final if p.problem_id == shown]
        assert problem_id == shown or problem_id in holder.aliases


async def test_coremetry_detect_beside_the_server_loses_no_id(
    demo_dir: Path, tmp_path: Path
) -> None:
    # `coremetry serve --demo` runs its task (first run over catch_up_s, then window_s); a
    # user types `coremetry detect` (12 h: another history than either of the server's runs,
    # so other anomalies and groupings), then the server runs on. Every id a client was given
    # keeps answering: the incident itself, or the problem it was merged into.
    data_dir = tmp_path
    (data_dir / "telemetry.db").symlink_to(demo_dir / "telemetry.db")
    path = data_dir / PROBLEMS_FILE
    config = DetectionConfig()
    options = DetectionOptions(trace_samples=0, samples=0)
    given: set[str] = set()
    async with open_sqlite_store(demo_dir / "telemetry.db", retention_days=0) as store:

        async def serve_runs(minute: int, span_s: float) -> None:
            now = DEMO_NOW + minute * MINUTE + 5 * S
            judged = TimeRange(start_unix_nano=now - int(span_s * S), end_unix_nano=now)
            stored = merge_live(path, (await detect_in_store(store, judged, options)).problems)
            assert given <= known(stored), sorted(given - known(stored))
            assert overlapping_pairs(stored) == []
            given.update(p.problem_id for p in stored)

        await serve_runs(1, config.catch_up_s)
        await serve_runs(2, config.window_s)
        end = DEMO_NOW + 2 * MINUTE + 40 * S
        run = await detect_in_store(
            store, TimeRange(start_unix_nano=end - 12 * 3600 * S, end_unix_nano=end), options
        )
        stored = save_problems(path, run.time_range, run.problems)
        lost = sorted(given - known(stored))
        assert lost == [], f"{len(lost)} of {len(given)} ids lost by coremetry detect: {lost}"
        assert overlapping_pairs(stored) == []
        given.update(p.problem_id for p in stored)
        await serve_runs(3, config.window_s)
        await serve_runs(4, config.window_s)
    final = load_problems(path)
    for problem_id in sorted(given)[:: max(1, len(given) // 12)]:
        shown = await answers(data_dir, problem_id)
        [holder] = [p for p in final if p.problem_id == shown]
        assert problem_id == shown or problem_id in holder.aliases


def anomaly(series_id: str, start: int, end: int, service: str = "") -> Anomaly:
    return Anomaly(
        series_id=series_id,
        name=series_id,
        direction="up",
        start_unix_nano=T0 + start * MINUTE,
        detected_unix_nano=T0 + start * MINUTE,
        end_unix_nano=T0 + end * MINUTE,
        baseline=1.0,
        observed=5.0,
        score=9.0,
        points=end - start + 1,
        service_name=service,
    )


def problem(problem_id: str, *anomalies: Anomaly, services: tuple[str, ...] = ()) -> Problem:
    return msgspec.convert(
        {
            "problem_id": problem_id,
            "status": "resolved",
            "start_unix_nano": min(a.start_unix_nano for a in anomalies),
            "end_unix_nano": max(a.end_unix_nano for a in anomalies),
            "detected_unix_nano": min(a.detected_unix_nano for a in anomalies),
            "services": list(services),
            "ranking": [],
            "anomalies": [msgspec.to_builtins(a) for a in anomalies],
            "title": problem_id,
        },
        Problem,
    )


def test_coremetry_detect_and_the_server_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    # Two writers, as `coremetry detect` and the server's task are (threads here, processes
    # there: the lock is a file lock, held per open file), each merging problems of its own,
    # and a client reading all along: every problem either wrote is in the file at the end,
    # and every read finds a whole file.
    path = tmp_path / PROBLEMS_FILE
    judged = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + 1000 * MINUTE)
    rounds = 60
    failures: list[BaseException] = []
    done = threading.Event()

    def write(kind: str) -> None:
        try:
            for k in range(rounds):
                found = problem(f"prb_{kind}{k:03}", anomaly(f"{kind}{k}", 2 * k, 2 * k + 1))
                if kind == "live":
                    merge_live(path, [found])
                else:
                    save_problems(path, judged, [found])
        except BaseException as exc:
            failures.append(exc)

    def read() -> None:
        try:
            while not done.is_set():
                load_problems(path)
        except BaseException as exc:
            failures.append(exc)

    reader = threading.Thread(target=read)
    writers = [threading.Thread(target=write, args=(kind,)) for kind in ("live", "detect")]
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert failures == []
    stored = {p.problem_id for p in load_problems(path)}
    assert stored == {f"prb_{kind}{k:03}" for kind in ("live", "detect") for k in range(rounds)}
    assert sorted(f.name for f in tmp_path.iterdir()) == [PROBLEMS_FILE, PROBLEMS_FILE + ".lock"]


@pytest.mark.parametrize("live", [True, False])
async def test_two_stored_problems_one_run_sees_as_one_are_merged(
    tmp_path: Path, live: bool
) -> None:
    path = tmp_path / PROBLEMS_FILE
    judged = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + 60 * MINUTE)

    def save(problems: list[Problem]) -> list[Problem]:
        return merge_live(path, problems) if live else save_problems(path, judged, problems)

    save([problem("prb_a", anomaly("s1", 10, 14)), problem("prb_b", anomaly("s2", 16, 20))])
    # A later run sees one incident holding both episodes: one problem, under the first id,
    # and the second id still answers it.
    [merged] = save([problem("prb_c", anomaly("s1", 10, 14), anomaly("s2", 16, 20))])
    assert merged.problem_id == "prb_a"
    assert merged.aliases == ["prb_b"]
    assert await answers(tmp_path, "prb_b") == "prb_a"
    # A match is the strongest pair, not the first stored: two incidents of the same service
    # overlapping in time keep their own ids when judged again.
    path.unlink()
    save(
        [
            problem("prb_x", anomaly("s1", 10, 30, "svc"), services=("svc",)),
            problem("prb_y", anomaly("s3", 20, 25, "svc"), services=("svc",)),
        ]
    )
    again = save(
        [
            problem("prb_y2", anomaly("s3", 21, 25, "svc"), services=("svc",)),
            problem("prb_x2", anomaly("s1", 11, 31, "svc"), services=("svc",)),
        ]
    )
    assert {(p.problem_id, p.anomalies[0].series_id) for p in again} == {
        ("prb_x", "s1"),
        ("prb_y", "s3"),
    }
