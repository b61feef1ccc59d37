"""The detector as the server's background task: problems that open and close once across runs.

The synthetic system of ``test_runner`` (``frontend`` calling ``checkout``, checkout slow for
fifteen minutes) is judged minute after minute as the server's task does, and then through a
real ``coremetry serve`` (``serve_with_store``) whose problem tools are called over HTTP.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import httpx
import msgspec
import pytest
import trio

from coremetry.config import DetectionConfig, load_config
from coremetry.demo.loader import shift_batch
from coremetry.detection import Anomaly, Problem
from coremetry.detection.problem_store import PROBLEMS_FILE, load_problems, merge_live
from coremetry.detection.runner import TraceCache
from coremetry.detection.service import run_once
from coremetry.server import build_mcp_server, serve_with_store
from coremetry.store import TimeRange
from coremetry.store.sqlite import open_sqlite_store

from .test_runner import FAULT, MINUTE, MINUTES, T0, telemetry

LIMIT_S = 120


def anomaly(series_id: str, start: int, end: int) -> Anomaly:
    return Anomaly(
        series_id=series_id,
        name=series_id,
        direction="up",
        start_unix_nano=T0 + start * MINUTE,
        detected_unix_nano=T0 + (start + 1) * MINUTE,
        end_unix_nano=T0 + end * MINUTE,
        baseline=1.0,
        observed=5.0,
        score=9.0,
        points=end - start,
    )


def problem(problem_id: str, status: str, *anomalies: Anomaly) -> Problem:
    return msgspec.convert(
        {
            "problem_id": problem_id,
            "status": status,
            "start_unix_nano": min(a.start_unix_nano for a in anomalies),
            "end_unix_nano": max(a.end_unix_nano for a in anomalies),
            "detected_unix_nano": min(a.detected_unix_nano for a in anomalies),
            "services": [],
            "ranking": [],
            "anomalies": [msgspec.to_builtins(a) for a in anomalies],
            "title": problem_id,
        },
        Problem,
    )


def test_live_merge_keeps_identity_and_closes_once(tmp_path: Path) -> None:
    path = tmp_path / PROBLEMS_FILE
    merge_live(path, [problem("prb_a", "open", anomaly("s1", 10, 12))])
    # The next run cut other buckets: another id, but the same anomaly (overlapping): the
    # stored id stays, with the first detection time; it is still open.
    [kept] = merge_live(path, [problem("prb_b", "open", anomaly("s1", 11, 13))])
    assert (kept.problem_id, kept.status) == ("prb_a", "open")
    assert kept.detected_unix_nano == T0 + 11 * MINUTE
    assert kept.end_unix_nano == T0 + 13 * MINUTE
    # Closed by the run: resolved. A later run showing it open again does not reopen it.
    merge_live(path, [problem("prb_a", "resolved", anomaly("s1", 10, 14))])
    [again] = merge_live(path, [problem("prb_a", "open", anomaly("s1", 10, 15))])
    assert (again.problem_id, again.status) == ("prb_a", "resolved")
    # A new incident of another series is a new problem; an open problem no run shows any
    # more is resolved as it stands, never dropped.
    merge_live(path, [problem("prb_c", "open", anomaly("s2", 30, 31))])
    stored = merge_live(path, [])
    assert [(p.problem_id, p.status) for p in stored] == [
        ("prb_c", "resolved"),
        ("prb_a", "resolved"),
    ]
    assert load_problems(path) == stored


async def test_minute_after_minute_one_problem_opens_and_closes_once(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(telemetry())
        config = DetectionConfig()
        cache: TraceCache = {}
        history: dict[str, list[str]] = {}
        first_seen: dict[str, int] = {}
        for minute in range(FAULT.start - 5, MINUTES + 1):
            end = T0 + minute * MINUTE
            judged = TimeRange(start_unix_nano=end - 6 * 60 * MINUTE, end_unix_nano=end)
            await run_once(store, tmp_path, config, judged, cache)
            for stored in load_problems(tmp_path / PROBLEMS_FILE):
                history.setdefault(stored.problem_id, []).append(stored.status)
                first_seen.setdefault(stored.problem_id, minute)
    assert len(history) == 1, history
    [(problem_id, statuses)] = history.items()
    assert FAULT.start <= first_seen[problem_id] <= FAULT.start + 3  # raised within 3 minutes
    opened = statuses.index("resolved")
    assert set(statuses[:opened]) == {"open"}
    assert set(statuses[opened:]) == {"resolved"}  # closed once, never reopened
    assert opened >= FAULT.stop - FAULT.start - 3  # open while the fault lasted
    [final] = load_problems(tmp_path / PROBLEMS_FILE)
    assert final.services[0] == "checkout"


async def test_coremetry_serve_runs_the_detector_in_the_background(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # The synthetic four hours, ending now (the task judges the last hours of real time).
    now = time.time_ns() // MINUTE * MINUTE
    batch = shift_batch(telemetry(), now - (T0 + MINUTES * MINUTE))
    async with open_sqlite_store(data_dir / "telemetry.db", retention_days=0) as store:
        await store.write(batch)
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "data_dir": str(data_dir),
            "store": {"retention_days": 0},
            "detection": {"interval_s": 0.5, "lag_s": 0},
        },
    )
    stop = trio.Event()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            base: str = await nursery.start(
                partial(
                    serve_with_store,
                    config,
                    lambda store: build_mcp_server(
                        store=store, problems_path=data_dir / PROBLEMS_FILE
                    ),
                    announce=False,
                    shutdown=stop,
                )
            )
            async with httpx.AsyncClient(base_url=base, timeout=LIMIT_S) as client:
                while True:
                    listed = await client.post(
                        "/api/tools/list_problems", json={"range": "24h", "limit": 10}
                    )
                    assert listed.status_code == 200, listed.text
                    body = listed.json()
                    if body["detection_available"]:
                        break
                    await trio.sleep(0.2)
            stop.set()
    [row] = body["problems"]
    assert row["origin"] == "checkout"
    assert row["status"] == "resolved"
    [stored] = load_problems(data_dir / PROBLEMS_FILE)
    assert stored.problem_id == row["problem_id"]
    assert stored.sample_trace_ids  # the run looked up slow checkout requests


async def test_detection_can_be_switched_off(tmp_path: Path) -> None:
    config = load_config(
        environ={"COREMETRY_DETECTION_ENABLED": "false", "COREMETRY_DETECTION_INTERVAL_S": "0.1"},
        overrides={"http": {"port": 0}, "data_dir": str(tmp_path)},
    )
    assert config.detection.enabled is False
    stop = trio.Event()
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_with_store,
                    config,
                    lambda store: build_mcp_server(store=store),
                    announce=False,
                    shutdown=stop,
                )
            )
            await trio.sleep(0.5)  # five intervals of a detector that must not run
            stop.set()
    assert not (tmp_path / PROBLEMS_FILE).exists()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("interval_s", 0, "detection.interval_s must be positive"),
        ("window_s", 60, "detection.window_s must be at least 10 steps"),
        ("lag_s", -1, "detection.lag_s must not be negative"),
    ],
)
def test_bad_detection_settings_are_named(key: str, value: float, message: str) -> None:
    from coremetry.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(environ={}, overrides={"detection": {key: value}})
