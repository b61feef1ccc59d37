"""File import: read a file (``.gz`` too), detect its format, decode, write in chunks, summarise.

What ``coremetry ingest`` runs for each file. Guarantees:

- **Nothing silent.** The summary counts items read, written, already stored (duplicates),
  rejected (with reasons and locations; records dated more than ``ingest.max_future_skew_s``
  ahead of this machine's clock among them) and adjusted (notes), and how many are older than
  the store's retention window (stored now, deleted by the next retention pass).
- **Idempotent.** Records are written through :meth:`TelemetryStore.write`, which keeps one
  copy per identity, so importing a file again writes nothing new (Prometheus scrapes are the
  exception unless ``--timestamp`` pins the scrape time: each import is then a new scrape).
- **Chunked.** Records are written :data:`CHUNK_RECORDS` at a time, each chunk one
  transaction; a failing write stops that file, and what was written stays (importing again
  completes it).
- **Safe with a running server.** The embedded store is in WAL mode: a ``coremetry serve`` on
  the same data dir keeps serving while the import writes.
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.ingest.decoded import Decoded, Signal
from coremetry.ingest.errors import IngestError
from coremetry.ingest.formats import FileFormat, ImportOptions, decode_file, detect_format
from coremetry.store.errors import StoreError
from coremetry.store.interface import TelemetryStore, WriteResult
from coremetry.store.model import TelemetryBatch

__all__ = ["CHUNK_RECORDS", "FileSummary", "import_file", "read_input"]

CHUNK_RECORDS: Final = 5_000
"""Records per ``store.write`` (one transaction each)."""

_GZIP_MAGIC: Final = b"\x1f\x8b"


class FileSummary(msgspec.Struct, kw_only=True):
    """What importing one file did.

    Attributes:
        path: the file as given.
        format: the format used (detected or given); ``None`` when it could not be told.
        decoded: the decoder's result (its batch is emptied once written, to free memory):
            ``read`` counts, ``rejected`` items, ``notes``.
        written: records newly stored, by signal.
        duplicates: records already stored (same identity), by signal.
        outside_retention: records older than the retention window (stored, and deleted by
            the next retention pass).
        error: why the file was not (fully) imported, ``None`` when it was.
    """

    path: str
    format: FileFormat | None = None
    decoded: Decoded = msgspec.field(default_factory=Decoded)
    written: dict[Signal, int] = msgspec.field(default_factory=dict)
    duplicates: dict[Signal, int] = msgspec.field(default_factory=dict)
    outside_retention: int = 0
    error: str | None = None

    def add(self, result: WriteResult) -> None:
        """Count one chunk's write result."""
        rows: tuple[tuple[Signal, int, int], ...] = (
            ("span", result.spans_written, result.spans_duplicate),
            ("log", result.logs_written, result.logs_duplicate),
            ("metric_point", result.metric_points_written, result.metric_points_duplicate),
        )
        for signal, written, duplicate in rows:
            self.written[signal] = self.written.get(signal, 0) + written
            self.duplicates[signal] = self.duplicates.get(signal, 0) + duplicate
        self.outside_retention += result.outside_retention


def read_input(path: Path) -> bytes:
    """A file's content, gunzipped when it is gzip (by magic bytes, whatever its name).

    Blocking. Raises:
        OSError: the file cannot be read.
        IngestError: the file looks like gzip but does not decompress.
    """
    data = path.read_bytes()
    if data.startswith(_GZIP_MAGIC):
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise IngestError(f"not valid gzip: {exc}") from None
    return data


def _chunks(batch: TelemetryBatch, size: int) -> Iterator[TelemetryBatch]:
    for start in range(0, len(batch.spans), size):
        yield TelemetryBatch(spans=batch.spans[start : start + size])
    for start in range(0, len(batch.logs), size):
        yield TelemetryBatch(logs=batch.logs[start : start + size])
    for start in range(0, len(batch.metrics), size):
        yield TelemetryBatch(metrics=batch.metrics[start : start + size])


def _default_metric_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv", ".txt"):
        name = name.removesuffix(suffix)
    return name


async def import_file(
    store: TelemetryStore,
    path: Path,
    *,
    fmt: FileFormat | None = None,
    options: ImportOptions | None = None,
    on_decoded: Callable[[int], None] | None = None,
    on_written: Callable[[int], None] | None = None,
    chunk_records: int = CHUNK_RECORDS,
    max_future_skew_s: float | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> FileSummary:
    """Import one file into ``store``; never raises for a bad file (see ``error``).

    Reading and decoding run on a worker thread; each chunk is one ``store.write``.

    Args:
        store: where to write.
        path: the file (``.gz`` or gzip content is decompressed).
        fmt: the format; ``None`` detects it from the content.
        options: the format options (CSV metric name defaults to the file's name).
        on_decoded: called once with the number of records about to be written.
        on_written: called after each chunk with its record count (a progress bar).
        chunk_records: records per write.
        max_future_skew_s: reject records dated more than this many seconds after ``clock``
            (config ``ingest.max_future_skew_s``); ``None`` keeps every time.
        clock: this machine's clock in unix nanoseconds (tests pin it).

    Returns:
        The file's summary.

    Raises:
        trio.Cancelled: cancelled; whole chunks written so far stay written.
    """
    summary = FileSummary(path=str(path), format=fmt)
    opts = options or ImportOptions()
    if not opts.metric_name:
        opts = msgspec.structs.replace(opts, metric_name=_default_metric_name(path))

    def load() -> tuple[FileFormat, Decoded]:
        data = read_input(path)
        chosen = fmt if fmt is not None else detect_format(data)
        summary.format = chosen
        return chosen, decode_file(data, chosen, opts)

    try:
        _, decoded = await trio.to_thread.run_sync(load)
    except OSError as exc:
        summary.error = f"cannot read: {exc.strerror or exc}"
        return summary
    except IngestError as exc:
        summary.error = str(exc)
        return summary
    if max_future_skew_s is not None:
        decoded.refuse_future(clock(), round(max_future_skew_s * 1e9))
    summary.decoded = decoded
    batch = decoded.batch
    if on_decoded is not None:
        on_decoded(len(batch))
    try:
        for chunk in _chunks(batch, chunk_records):
            summary.add(await store.write(chunk))
            if on_written is not None:
                on_written(len(chunk))
    except StoreError as exc:
        summary.error = f"the store refused a write: {exc}"
    decoded.batch = TelemetryBatch()
    return summary
