"""``coremetry demo load`` and ``coremetry serve --demo`` as a user runs them: processes, with
the tools asked over HTTP on loopback."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import httpx
import msgspec
import trio

from coremetry.config import load_config
from coremetry.demo import DemoAlreadyLoaded, DemoState, LoadResult, demo_state
from coremetry.demo.cli import describe_load, describe_refusal
from coremetry.store import Span, TelemetryBatch
from coremetry.store.sqlite import open_sqlite_store

from ._support import rows, trace_csvs

LIMIT_S: Final = 120.0
"""Hang guard: a hang fails, a slow machine does not."""

LISTENING: Final = re.compile(r"listening on (http://127\.0\.0\.1:\d+)\n")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "coremetry", *args]


def env_without_coremetry() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = tempfile.mkdtemp(prefix="coremetry-test-")  # never the user's
    return env


async def run(*args: str) -> tuple[int, str, str]:
    done = await trio.run_process(
        command(*args),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env_without_coremetry(),
        start_new_session=True,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_demo_load_prints_what_it_stored_and_is_idempotent(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with trio.fail_after(LIMIT_S):
        status, out, err = await run("demo", "load", "--data-dir", str(data_dir))
        assert status == 0, err
        assert f"loaded the demo into {data_dir / 'telemetry.db'}" in out
        assert "21669 spans (87 with status ERROR), 2169 log records, 144495 metric points" in out
        assert "(12 h 21 min)" in out  # the Nezha day, ending now
        assert f"17 injected faults (shifted alike) in {data_dir / 'demo' / 'faults.json'}" in out
        assert "smartthings-mobile-web-install (Apache-2.0)" in out
        assert "loading nezha-trainticket-2023-01-30 (21 files)..." in err

        again_status, again, _ = await run("demo", "load", "--data-dir", str(data_dir))
        assert again_status == 0
        assert "the demo is already in" in again
        assert "nothing to do" in again
        async with open_sqlite_store(data_dir / "telemetry.db") as store:
            stats = await store.statistics()
    assert (stats.log_count, stats.metric_point_count) == (2169, 144495)


async def test_demo_load_names_a_bad_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with trio.fail_after(LIMIT_S):
        status, out, err = await run("demo", "load", "--data-dir", str(blocker / "data"))
    assert status == 1
    assert out == ""
    assert err.startswith("coremetry: demo load failed:")
    assert str(blocker) in err


async def test_serve_demo_loads_then_serves(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    want_services = {
        row["PodName"].rsplit("-", 2)[0] for path in trace_csvs() for row in rows(path)
    }
    with trio.fail_after(LIMIT_S):
        created, token, err = await run(
            "token", "create", "--name", "t", "--role", "viewer", "--data-dir", str(data_dir)
        )
        assert created == 0, err
        process = await trio.lowlevel.open_process(
            command("serve", "--demo", "--port", "0", "--data-dir", str(data_dir)),
            stderr=subprocess.PIPE,
            env=env_without_coremetry(),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert process.stderr is not None
        try:
            stderr = bytearray()
            while (match := LISTENING.search(stderr.decode())) is None:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server exited early: {bytes(stderr)!r}"
                stderr.extend(chunk)
            text = stderr.decode()
            assert text.index("loaded the demo into") < text.index("listening on")
            state = demo_state(data_dir)
            assert state is not None
            assert state.state == "loaded"
            async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                health = await client.get(match.group(1) + "/healthz")
                assert health.status_code == 200
                listed = await client.post(
                    match.group(1) + "/api/tools/list_services",
                    json={"range": "24h", "limit": 100},
                    headers={"authorization": f"Bearer {token.strip()}"},
                )
            assert listed.status_code == 200, listed.text
            services = {entry["service"] for entry in listed.json()["services"]}
            assert want_services <= services  # every TrainTicket service of the CSVs
            async with open_sqlite_store(data_dir / "telemetry.db") as store:
                stats = await store.statistics()  # a second reader while the server runs
            assert stats.newest_unix_nano == state.started_unix_nano
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
    assert process.returncode == 0


def test_demo_messages_name_the_configured_store(tmp_path: Path) -> None:
    state = DemoState(state="loaded", started_unix_nano=1_800_000_000 * 10**9, shifts={})
    loaded = LoadResult(
        status="loaded", state=state, datasets=[], faults_path=tmp_path / "demo" / "faults.json"
    )
    again = LoadResult(status="already_loaded", state=state, datasets=[], faults_path=Path())
    embedded = load_config(environ={}, overrides={"data_dir": str(tmp_path)})
    clickhouse = load_config(
        environ={},
        overrides={
            "data_dir": str(tmp_path),
            "store": {"backend": "clickhouse"},
            "clickhouse": {"url": "http://ch.example:8123", "database": "otel"},
        },
    )
    assert describe_load(loaded, embedded)[0].startswith(
        f"loaded the demo into {tmp_path / 'telemetry.db'}; "
    )
    for result, opening in ((loaded, "loaded the demo into"), (again, "the demo is already in")):
        lines = describe_load(result, clickhouse)
        assert lines[0].startswith(
            f"{opening} ClickHouse at http://ch.example:8123 (database otel)"
        )
        assert not any("telemetry.db" in line for line in lines)


def test_already_loaded_advice_fits_the_backend(tmp_path: Path) -> None:
    state = DemoState(state="loaded", started_unix_nano=1_800_000_000 * 10**9, shifts={})
    again = LoadResult(status="already_loaded", state=state, datasets=[], faults_path=Path())
    embedded = load_config(environ={}, overrides={"data_dir": str(tmp_path)})
    clickhouse = load_config(
        environ={}, overrides={"data_dir": str(tmp_path), "store": {"backend": "clickhouse"}}
    )
    # the embedded store lives in the data dir: another one starts empty
    assert describe_load(again, embedded)[1].endswith("; a fresh --data-dir always works.")
    # ClickHouse data is in the database: a fresh data dir would load a second copy into it
    advice = describe_load(again, clickhouse)[1]
    assert "--data-dir" not in advice
    assert advice.endswith(
        "; an empty ClickHouse database (clickhouse.database, or another server with "
        "--clickhouse-url) always works."
    )


async def test_force_refusal_advises_a_fresh_data_dir_with_the_embedded_store(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    mine = Span(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        name="mine",
        service_name="my-service",
        start_time_unix_nano=time.time_ns(),
        end_time_unix_nano=time.time_ns() + 1000,
    )
    with trio.fail_after(LIMIT_S):
        status, _, err = await run("demo", "load", "--data-dir", str(data_dir))
        assert status == 0, err
        async with open_sqlite_store(data_dir / "telemetry.db") as store:
            await store.write(TelemetryBatch(spans=[mine]))
            before = await store.statistics()
        status, out, err = await run("demo", "load", "--force", "--data-dir", str(data_dir))
        async with open_sqlite_store(data_dir / "telemetry.db") as store:
            after = await store.statistics()
    assert status == 1
    assert out == ""
    assert err.splitlines()[-1] == (
        "coremetry: demo load failed: the store holds other telemetry besides the demo "
        f"({before.span_count} spans, {before.log_count} log records, "
        f"{before.metric_point_count} metric points), which a reload would delete with it; "
        "load the demo into a fresh --data-dir instead"
    )
    # nothing was deleted (the file's size may move as SQLite checkpoints)
    assert msgspec.structs.replace(after, size_bytes=0) == msgspec.structs.replace(
        before, size_bytes=0
    )


def test_force_refusal_advice_fits_the_backend(tmp_path: Path) -> None:
    refused = DemoAlreadyLoaded("the store holds other telemetry besides the demo (1 spans)")
    embedded = load_config(environ={}, overrides={"data_dir": str(tmp_path)})
    clickhouse = load_config(
        environ={}, overrides={"data_dir": str(tmp_path), "store": {"backend": "clickhouse"}}
    )
    assert describe_refusal(refused, embedded) == (
        "coremetry: demo load failed: the store holds other telemetry besides the demo "
        "(1 spans); load the demo into a fresh --data-dir instead"
    )
    # ClickHouse data is in the database: a fresh data dir would load a second copy into it
    advice = describe_refusal(refused, clickhouse)
    assert "--data-dir" not in advice
    assert "data dir" not in advice
    assert advice.endswith(
        "; load the demo into an empty ClickHouse database (clickhouse.database, or another "
        "server with --clickhouse-url) instead"
    )
