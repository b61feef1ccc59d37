"""Containment helpers (:mod:`coremetry.supervision`): failures are logged, never fatal, and
cancellation always gets through."""

import itertools
import logging
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from coremetry.config import load_config
from coremetry.detection import service as detection_service
from coremetry.mcp import Server
from coremetry.server import build_mcp_server, serve_with_store
from coremetry.store import TelemetryStore
from coremetry.supervision import contained, supervise


def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "failed (incident" in r.getMessage()]


def test_an_exception_is_logged_with_an_incident_id_and_swallowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with contained("the unit of work") as incident:
        raise ValueError("boom")
    assert incident.id is not None
    assert len(incident.id) == 8
    [logged] = failures(caplog)
    assert logged.levelno == logging.ERROR
    assert logged.getMessage() == f"the unit of work failed (incident {incident.id})"
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], ValueError)


def test_a_block_that_succeeds_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with contained("quiet") as incident:
        pass
    assert incident.id is None
    assert caplog.records == []


def test_keyboard_interrupt_is_never_contained(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(KeyboardInterrupt), contained("interrupted"):
        raise KeyboardInterrupt
    assert failures(caplog) == []


async def test_cancellation_passes_through(caplog: pytest.LogCaptureFixture) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        with contained("cancelled"):
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert failures(caplog) == []


async def test_a_group_is_split_failures_logged_and_cancellation_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A nursery whose child failed while the block was being cancelled: the failure is logged,
    the cancellation still reaches its scope."""
    with trio.CancelScope() as scope, contained("a nursery"):
        async with trio.open_nursery() as nursery:

            async def fail_when_cancelled() -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    raise RuntimeError("cleanup failed")

            nursery.start_soon(fail_when_cancelled)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    [logged] = failures(caplog)
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], RuntimeError)


async def test_supervise_restarts_a_failed_task_until_it_returns(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[float] = []

    async def flaky() -> None:
        runs.append(trio.current_time())
        if len(runs) < 3:
            raise OSError(f"run {len(runs)} failed")

    await supervise("the flaky task", flaky, restart_after_s=7)
    assert [later - earlier for earlier, later in itertools.pairwise(runs)] == [7, 7]
    assert len(failures(caplog)) == 2
    restarts = [r for r in caplog.records if "restarting in 7 s" in r.getMessage()]
    assert len(restarts) == 2


async def test_supervise_is_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    async def forever() -> None:
        await trio.sleep_forever()

    with trio.move_on_after(100) as scope:
        await supervise("forever", forever)
    assert scope.cancelled_caught


async def test_a_bug_in_the_detector_is_logged_and_the_server_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve_with_store`` supervises the detector: a run that raises is logged, restarted
    after an interval, and the server answers throughout."""
    calls = 0
    failed_twice = trio.Event()

    async def broken_run_once(*args: object) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            failed_twice.set()  # restarted after the first failure
        raise RuntimeError("a bug in detection")

    monkeypatch.setattr(detection_service, "run_once", broken_run_once)
    config = load_config(
        environ={},
        overrides={
            "data_dir": str(tmp_path),
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "detection": {"enabled": True, "interval_s": 0.05},
        },
    )
    stop = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            url: str = await nursery.start(
                partial(serve_with_store, config, build, announce=False, shutdown=stop)
            )
            await failed_twice.wait()
            async with httpx.AsyncClient() as client:
                response = await client.get(f"{url}/healthz")
            assert response.status_code == 200
            stop.set()
    logged = [r for r in failures(caplog) if r.getMessage().startswith("problem detection")]
    assert logged, caplog.text
    assert logged[0].exc_info is not None
    assert isinstance(logged[0].exc_info[1], RuntimeError)


def build(store: TelemetryStore) -> Server:
    return build_mcp_server(store=store)
