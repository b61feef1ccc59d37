"""The detector as a background task of ``coremetry serve``: every minute, over the last hours.

:func:`serve_detection` runs beside the server (``coremetry.server.serve_with_store`` starts it
when ``detection.enabled``; settings in the ``[detection]`` section,
:class:`coremetry.config.DetectionConfig`). Every ``interval_s`` seconds, the first time one
interval after start, it judges ``[end - window_s, end)`` of the store
(:func:`~coremetry.detection.runner.detect_in_store`; the first run judges ``catch_up_s``
instead, so a server started on existing telemetry sees its last day) and merges the problems
into ``<data_dir>/problems.json`` (:func:`~coremetry.detection.problem_store.merge_live`), where
``list_problems``, ``get_problem``, ``list_anomalies`` and the problem resources read them.

``end`` is the run's time less ``lag_s`` (exporters send in batches), moved down onto the
epoch grid of ``step_s`` (:func:`~coremetry.detection.runner.aligned_range`): every run,
of this process or of one restarted later, cuts the same buckets, so the same data gives the
same anomalies and problem ids (a grid taken from the process's start moved with every restart
and stored each episode again under a new id). Hysteresis: each anomaly's (the detector's
``z_close``), each problem's (it stays open while a symptom may still join it), and the file's
(a problem keeps its id across runs and restarts, and closes once) — so a problem opens and
closes once across runs.

Failures do not stop the server: a store error or an unwritable problems file is logged as a
warning and the next run tries again; a closed store ends the task. Cancellation (the server
shutting down) stops a run at its next store query, abandons its worker thread, and never
leaves a half-written file (the file is replaced atomically, by a thread that is not
abandoned).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

from coremetry.config import DetectionConfig
from coremetry.store import StoreClosed, StoreError, TelemetryStore, TimeRange

from .problem_store import PROBLEMS_FILE, ProblemFileError, merge_live
from .problems import Problem
from .runner import DetectionOptions, TraceCache, detect_in_store, grid_floor

__all__ = ["run_once", "serve_detection"]

log = logging.getLogger(__name__)

_NS_PER_S: Final = 1_000_000_000


def _options(config: DetectionConfig) -> DetectionOptions:
    return DetectionOptions(
        step_ns=int(config.step_s * _NS_PER_S), max_log_records=config.max_log_records
    )


def _save(data_dir: str | Path, problems: list[Problem]) -> int:
    return len(merge_live(Path(data_dir).expanduser() / PROBLEMS_FILE, problems))


async def run_once(
    store: TelemetryStore,
    data_dir: str | Path,
    config: DetectionConfig,
    judged: TimeRange,
    trace_cache: TraceCache,
) -> int:
    """One run of the task: detect over ``judged``, merge into ``problems.json``.

    Returns:
        How many problems the file holds afterwards.

    Raises:
        StoreError: as :func:`~coremetry.detection.runner.detect_in_store`.
        ProblemFileError, OSError: the problems file cannot be read or written.
    """
    run = await detect_in_store(store, judged, _options(config), trace_cache=trace_cache)
    for key in [k for k in trace_cache if k[0] not in {p.problem_id for p in run.problems}]:
        del trace_cache[key]
    return await trio.to_thread.run_sync(_save, data_dir, run.problems)


async def serve_detection(
    store: TelemetryStore,
    data_dir: str | Path,
    config: DetectionConfig,
    *,
    clock: Callable[[], int] = time.time_ns,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the detector every ``config.interval_s`` until cancelled (module docstring).

    Args:
        store: the telemetry store the server serves.
        data_dir: where ``problems.json`` lives (``~`` expanded; the server creates it).
        config: the ``[detection]`` section.
        clock: the current time in unix ns (tests pass their own).
        task_status: started at once (before the first run).
    """
    step = int(config.step_s * _NS_PER_S)
    lag = int(config.lag_s * _NS_PER_S)
    first = True
    cache: TraceCache = {}
    task_status.started()
    while True:
        await trio.sleep(config.interval_s)
        end = grid_floor(clock() - lag, step)
        span_s = max(config.window_s, config.catch_up_s) if first else config.window_s
        judged = TimeRange(start_unix_nano=end - int(span_s * _NS_PER_S), end_unix_nano=end)
        started = time.perf_counter()
        try:
            kept = await run_once(store, data_dir, config, judged, cache)
        except StoreClosed:
            return
        except StoreError as exc:
            log.warning("problem detection failed (the next run tries again): %s", exc)
            continue
        except (ProblemFileError, OSError) as exc:
            log.warning("problem detection could not save its problems: %s", exc)
            continue
        first = False
        log.info(
            "problem detection: judged %.0f s of telemetry in %.1f s; %d problems stored",
            span_s,
            time.perf_counter() - started,
            kept,
        )
