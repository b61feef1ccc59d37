"""Load the shipped demo data into a telemetry store, shifted so that it ends "now".

What is loaded
==============

Every dataset of :mod:`coremetry.demo.manifest` (the Nezha TrainTicket day as OTLP JSON, and two
SmartThings Zipkin traces), decoded by the same decoders ``coremetry ingest`` and the OTLP
receiver use, and written with :meth:`TelemetryStore.write` one file per transaction.

The time shift
==============

Each dataset is moved in time by one constant, ``shift_ns = now - last_event``, added to every
timestamp it holds (span start/end and event times, log record and observed times, metric point
and start times, fault times). ``last_event`` is the dataset's latest event time: the maximum of
its span end times, log record times and metric point times, recorded in the manifest by
``scripts/convert_nezha.py`` (for Nezha, the last metric scrape, 2023-01-30T23:59:55.103392955Z;
for each Zipkin trace, the end of its latest-ending span). So after a load the newest record of
every dataset is at the moment the load began, and the relative spacing inside a dataset —
durations, gaps, the order of spans, logs, metric points and faults — is exactly as recorded.
The Nezha day then covers the 12 h 21 min before "now", well inside the default 7-day retention.
The two Zipkin traces are separate captures (2018), each shifted on its own so it too ends "now".

Files in the data dir
=====================

``<data_dir>/demo/state.json``
    ``{"state": "loading" | "loaded", "started_unix_nano", "shifts": {dataset: shift_ns},
    "store_counts": {...}}`` — written *before* the first record (state ``loading``, with the
    shifts) and rewritten when the load has finished (``loaded``, with the store's counts).
``<data_dir>/demo/faults.json``
    The Nezha injected faults, shifted like the data: ``{"dataset", "shift_ns", "faults": [
    {"time_unix_nano", "original_time_unix_nano", "service.name", "k8s.pod.name", "type",
    "inject_time"}]}``, sorted by time — the ground truth a problem detector can be scored on.

Idempotency
===========

Loading is idempotent: the store keeps one copy of a record, and the shift is fixed once per data
dir. A data dir whose state is ``loaded`` is left alone (:attr:`LoadResult.status`
``already_loaded``) — unless its store is empty (retention removed the demo after 7 days, or the
database was deleted): then the demo is loaded again, ending at the new "now" (``reloaded``). A
load that was interrupted (state ``loading``) resumes with the shifts it recorded, so records
already written are recognised as duplicates and nothing is doubled.

``force=True`` reloads with a new shift so the data ends "now" again. The old copy must be
deleted first and the store cannot tell demo records from others, so this is done only when the
store can hold nothing but the demo: none of its counts exceeds those recorded after the last
load (retention may have removed part of it) and nothing in it is newer than that load's "now".
Otherwise it raises :class:`DemoAlreadyLoaded`, saying what else the store holds; where to load
a second copy instead depends on the backend, so the caller advises
(:func:`coremetry.demo.cli.describe_refusal`).
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import msgspec
import trio

from coremetry.demo.manifest import DataFile, Dataset, Manifest, read_data_file, read_manifest
from coremetry.ingest import Decoded, ImportOptions, IngestError, decode_file
from coremetry.store.interface import StoreStatistics, TelemetryStore, WriteResult
from coremetry.store.model import LogRecord, MetricPoint, Span, StatusCode, TelemetryBatch

__all__ = [
    "DEMO_DIR",
    "DatasetLoad",
    "DemoAlreadyLoaded",
    "DemoDataBroken",
    "DemoError",
    "DemoState",
    "FAULTS_FILE",
    "LoadResult",
    "STATE_FILE",
    "StoreCounts",
    "decode_data_file",
    "demo_state",
    "load_demo",
    "shift_batch",
]

DEMO_DIR: Final = "demo"
"""Folder in the data dir holding the demo's state and shifted faults."""

STATE_FILE: Final = "state.json"
"""``<data_dir>/demo/state.json``: whether (and with which shifts) the demo was loaded."""

FAULTS_FILE: Final = "faults.json"
"""``<data_dir>/demo/faults.json``: the injected faults, shifted like the data."""

_DELETE_EVERYTHING: Final = 2**63 - 1
"""A cutoff after every representable time: ``delete_before`` of it empties the store."""


class DemoError(Exception):
    """Root of the demo loader's exceptions; never raised itself."""


class DemoAlreadyLoaded(DemoError):
    """Raised by :func:`load_demo` with ``force=True`` when the store holds more than the demo."""


class DemoDataBroken(DemoError):
    """Raised by :func:`load_demo` when a shipped file does not decode (a packaging bug)."""


class StoreCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What the store held right after a finished load (from ``statistics()``)."""

    span_count: int
    log_count: int
    metric_point_count: int

    @classmethod
    def of(cls, stats: StoreStatistics) -> StoreCounts:
        """The counts of a :class:`StoreStatistics`."""
        return cls(
            span_count=stats.span_count,
            log_count=stats.log_count,
            metric_point_count=stats.metric_point_count,
        )


class DemoState(msgspec.Struct, kw_only=True):
    """``<data_dir>/demo/state.json``.

    Attributes:
        state: ``loading`` while a load runs (or after it was interrupted), ``loaded`` after.
        started_unix_nano: when the load began ("now" of the shift), unix ns.
        shifts: dataset name -> the constant added to its timestamps, in ns.
        store_counts: the store's counts after the load finished (``None`` while loading).
    """

    state: Literal["loading", "loaded"]
    started_unix_nano: int
    shifts: dict[str, int]
    store_counts: StoreCounts | None = None


class DatasetLoad(msgspec.Struct, kw_only=True):
    """What loading one dataset did.

    Attributes:
        name / title / license: from the manifest.
        shift_ns: the constant added to its timestamps (ns).
        first_unix_nano / last_unix_nano: its earliest and latest event time after the shift
            (span start or end, log time, point time).
        spans / error_spans / logs / metric_points: records decoded from its files.
        written / duplicate: records the store stored anew / already had.
        rejected: items the decoders left out (0 for the shipped data), with reasons.
        notes: adjustments the decoders made, message -> count.
        outside_retention: records older than the store's retention window.
        faults: how many faults were written to ``faults.json`` (0 when it has none).
    """

    name: str
    title: str
    license: str
    shift_ns: int
    first_unix_nano: int | None = None
    last_unix_nano: int | None = None
    spans: int = 0
    error_spans: int = 0
    logs: int = 0
    metric_points: int = 0
    written: int = 0
    duplicate: int = 0
    rejected: dict[str, int] = msgspec.field(default_factory=dict)
    notes: dict[str, int] = msgspec.field(default_factory=dict)
    outside_retention: int = 0
    faults: int = 0


class LoadResult(msgspec.Struct, kw_only=True):
    """What :func:`load_demo` did.

    Attributes:
        status: ``loaded`` (first load), ``resumed`` (an interrupted load finished),
            ``reloaded`` (``force``, or the store was found empty: loaded again ending now) or
            ``already_loaded`` (nothing done).
        state: the data dir's demo state after the call.
        datasets: per dataset, what was loaded (empty when ``already_loaded``).
        faults_path: ``<data_dir>/demo/faults.json``.
    """

    status: Literal["loaded", "resumed", "reloaded", "already_loaded"]
    state: DemoState
    datasets: list[DatasetLoad]
    faults_path: Path


def _demo_dir(data_dir: Path) -> Path:
    return data_dir / DEMO_DIR


def demo_state(data_dir: Path) -> DemoState | None:
    """The demo state recorded in ``data_dir`` (``None`` when the demo was never loaded).

    Raises:
        DemoError: the state file exists but cannot be read as a state (names the path).
    """
    path = _demo_dir(data_dir) / STATE_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=DemoState)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as exc:
        raise DemoError(f"{path}: cannot read the demo state ({exc})") from None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _save_state(data_dir: Path, state: DemoState) -> None:
    _write_atomically(
        _demo_dir(data_dir) / STATE_FILE, msgspec.json.format(msgspec.json.encode(state))
    )


# --- decoding and shifting ------------------------------------------------------------------


def decode_data_file(data_file: DataFile) -> Decoded:
    """Decode one shipped file with the ingest decoder for its format (blocking; CPU-bound).

    The same decoders as ``coremetry ingest`` (:func:`coremetry.ingest.decode_file`).

    Raises:
        DemoDataBroken: the file is missing or does not decode.
    """
    try:
        data = gzip.decompress(read_data_file(data_file.path))
        return decode_file(data, data_file.format, ImportOptions())
    except (OSError, EOFError, IngestError) as exc:
        raise DemoDataBroken(f"shipped demo file {data_file.path}: {exc}") from None


def _shift_span(span: Span, shift_ns: int) -> Span:
    events = [
        msgspec.structs.replace(event, time_unix_nano=event.time_unix_nano + shift_ns)
        for event in span.events
    ]
    return msgspec.structs.replace(
        span,
        start_time_unix_nano=span.start_time_unix_nano + shift_ns,
        end_time_unix_nano=span.end_time_unix_nano + shift_ns,
        events=events,
    )


def _shift_log(record: LogRecord, shift_ns: int) -> LogRecord:
    observed = record.observed_time_unix_nano
    return msgspec.structs.replace(
        record,
        time_unix_nano=record.time_unix_nano + shift_ns,
        observed_time_unix_nano=observed + shift_ns if observed else 0,
    )


def _shift_point(point: MetricPoint, shift_ns: int) -> MetricPoint:
    start = point.start_time_unix_nano
    return msgspec.structs.replace(
        point,
        time_unix_nano=point.time_unix_nano + shift_ns,
        start_time_unix_nano=start + shift_ns if start else 0,
    )


def shift_batch(batch: TelemetryBatch, shift_ns: int) -> TelemetryBatch:
    """A copy of ``batch`` with every timestamp moved by ``shift_ns`` nanoseconds.

    Span start/end and event times, log record times and (when set) observed times, metric point
    times and (when set) start times all move by the same constant; ``0`` ("unset") stays 0.
    """
    return TelemetryBatch(
        spans=[_shift_span(span, shift_ns) for span in batch.spans],
        logs=[_shift_log(record, shift_ns) for record in batch.logs],
        metrics=[_shift_point(point, shift_ns) for point in batch.metrics],
    )


def _event_times(batch: TelemetryBatch) -> list[int]:
    times = [span.end_time_unix_nano for span in batch.spans]
    times += [span.start_time_unix_nano for span in batch.spans]
    times += [event.time_unix_nano for span in batch.spans for event in span.events]
    times += [record.time_unix_nano for record in batch.logs]
    times += [point.time_unix_nano for point in batch.metrics]
    return times


def _decode_shifted(data_file: DataFile, shift_ns: int) -> tuple[Decoded, TelemetryBatch]:
    decoded = decode_data_file(data_file)
    return decoded, shift_batch(decoded.batch, shift_ns)


# --- loading --------------------------------------------------------------------------------


def _add_write(load: DatasetLoad, result: WriteResult) -> None:
    load.written += result.spans_written + result.logs_written + result.metric_points_written
    load.duplicate += (
        result.spans_duplicate + result.logs_duplicate + result.metric_points_duplicate
    )
    load.outside_retention += result.outside_retention


def _add_decoded(load: DatasetLoad, decoded: Decoded, batch: TelemetryBatch) -> None:
    load.spans += len(batch.spans)
    load.error_spans += sum(span.status_code == StatusCode.ERROR for span in batch.spans)
    load.logs += len(batch.logs)
    load.metric_points += len(batch.metrics)
    for (signal, reason), count in decoded.rejection_counts().items():
        key = f"{signal}: {reason}"
        load.rejected[key] = load.rejected.get(key, 0) + count
    for message, count in decoded.notes.items():
        load.notes[message] = load.notes.get(message, 0) + count
    times = _event_times(batch)
    if times:
        low, high = min(times), max(times)
        load.first_unix_nano = (
            low if load.first_unix_nano is None else min(load.first_unix_nano, low)
        )
        load.last_unix_nano = (
            high if load.last_unix_nano is None else max(load.last_unix_nano, high)
        )


def _write_faults(data_dir: Path, dataset: Dataset, shift_ns: int) -> int:
    raw = json.loads(read_data_file(dataset.faults))
    faults = []
    for fault in raw["faults"]:
        original = int(fault["time_unix_nano"])
        faults.append(
            {**fault, "time_unix_nano": original + shift_ns, "original_time_unix_nano": original}
        )
    document = {"dataset": dataset.name, "shift_ns": shift_ns, "faults": faults}
    _write_atomically(
        _demo_dir(data_dir) / FAULTS_FILE,
        json.dumps(document, indent=2, sort_keys=True).encode() + b"\n",
    )
    return len(faults)


async def _load_dataset(
    store: TelemetryStore,
    data_dir: Path,
    dataset: Dataset,
    shift_ns: int,
    on_file: Callable[[Dataset, DataFile], None] | None,
) -> DatasetLoad:
    load = DatasetLoad(
        name=dataset.name, title=dataset.title, license=dataset.license, shift_ns=shift_ns
    )
    for data_file in dataset.files:
        if on_file is not None:
            on_file(dataset, data_file)
        decoded, batch = await trio.to_thread.run_sync(_decode_shifted, data_file, shift_ns)
        _add_decoded(load, decoded, batch)
        _add_write(load, await store.write(batch))
    if dataset.faults:
        load.faults = _write_faults(data_dir, dataset, shift_ns)
    return load


def _is_empty(stats: StoreStatistics) -> bool:
    return stats.span_count == stats.log_count == stats.metric_point_count == 0


def _store_holds_only_the_demo(stats: StoreStatistics, state: DemoState) -> bool:
    """Whether every record in the store can be one the last demo load wrote."""
    if _is_empty(stats):
        return True
    loaded = state.store_counts
    return (
        loaded is not None
        and stats.span_count <= loaded.span_count
        and stats.log_count <= loaded.log_count
        and stats.metric_point_count <= loaded.metric_point_count
        and (stats.newest_unix_nano or 0) <= state.started_unix_nano
    )


async def load_demo(
    store: TelemetryStore,
    data_dir: Path,
    *,
    force: bool = False,
    now_unix_nano: int | None = None,
    manifest: Manifest | None = None,
    on_file: Callable[[Dataset, DataFile], None] | None = None,
) -> LoadResult:
    """Load the shipped demo into ``store``, shifted to end "now" (see the module docstring).

    Blocks for a few seconds (decoding runs in worker threads, writes through the store).

    Args:
        store: where to write (the data dir's telemetry store).
        data_dir: where the demo's state and shifted faults live (``<data_dir>/demo/``).
        force: reload even when loaded, with a new shift (only when the store can hold
            nothing but the demo; see "Idempotency").
        now_unix_nano: the instant the last events move to (default: the current time).
        manifest: the datasets to load (default: the shipped manifest).
        on_file: called before each file is loaded (for progress output).

    Returns:
        What was done, per dataset.

    Raises:
        DemoAlreadyLoaded: ``force`` while the store holds records besides the demo.
        DemoDataBroken: a shipped file is missing or does not decode.
        DemoError: the demo state file cannot be read.
        StoreError: the store failed (what was written stays; loading again resumes).

    Cancellation: files already written stay written and the state stays ``loading``; the next
    call resumes with the same shifts.
    """
    manifest = manifest if manifest is not None else read_manifest()
    state = demo_state(data_dir)
    status: Literal["loaded", "resumed", "reloaded"] = "loaded"
    if state is not None and state.state == "loaded" and not force:
        if not _is_empty(await store.statistics()):
            return LoadResult(
                status="already_loaded",
                state=state,
                datasets=[],
                faults_path=_demo_dir(data_dir) / FAULTS_FILE,
            )
        force = True  # emptied (by retention, or a deleted database): load it again, ending now
    now = now_unix_nano if now_unix_nano is not None else time.time_ns()
    if state is not None and state.state == "loaded":
        stats = await store.statistics()
        if not _store_holds_only_the_demo(stats, state):
            raise DemoAlreadyLoaded(
                "the store holds other telemetry besides the demo "
                f"({stats.span_count} spans, {stats.log_count} log records, "
                f"{stats.metric_point_count} metric points), which a reload would delete "
                "with it"
            )
        await store.delete_before(_DELETE_EVERYTHING)
        state = None
        status = "reloaded"
    if state is None or any(d.name not in state.shifts for d in manifest.datasets):
        shifts = {d.name: now - d.last_event_unix_nano for d in manifest.datasets}
        state = DemoState(state="loading", started_unix_nano=now, shifts=shifts)
        _save_state(data_dir, state)
    else:
        status = "resumed"
    loads = [
        await _load_dataset(store, data_dir, dataset, state.shifts[dataset.name], on_file)
        for dataset in manifest.datasets
    ]
    state.state = "loaded"
    state.store_counts = StoreCounts.of(await store.statistics())
    _save_state(data_dir, state)
    return LoadResult(
        status=status, state=state, datasets=loads, faults_path=_demo_dir(data_dir) / FAULTS_FILE
    )
