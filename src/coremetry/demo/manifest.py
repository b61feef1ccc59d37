"""The shipped demo data's manifest: which files, in which format, and each dataset's last event.

``coremetry/demo/data/manifest.json`` is written by ``scripts/convert_nezha.py`` (see its module
docstring for every mapping decision) and read here. It lists, per dataset, the files to load
with their format (``otlp-json`` or ``zipkin``), the record counts the converter wrote, the
dataset's licence file, and its *last event*: the latest event time in the dataset (span end,
log record time or metric point time), the instant ``coremetry demo load`` moves to "now".
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Final, Literal, TypeAlias

import msgspec

__all__ = [
    "DATA_PACKAGE",
    "DataFile",
    "Dataset",
    "FileFormat",
    "Manifest",
    "data_root",
    "read_data_file",
    "read_manifest",
]

DATA_PACKAGE: Final = "coremetry.demo"
"""The package whose ``data/`` folder holds the demo files."""

FileFormat: TypeAlias = Literal["otlp-json", "zipkin"]
"""``otlp-json``: an OTLP/HTTP JSON export request (gzip'd); ``zipkin``: Zipkin v2 JSON."""


class DataFile(msgspec.Struct, frozen=True, kw_only=True):
    """One shipped file.

    Attributes:
        path: relative to the data folder, ``/``-separated.
        format: how to decode it.
        signal: ``traces``, ``logs`` or ``metrics``.
        source: the upstream file it was made from.
        spans / log_records / metric_points / zipkin_spans: what the converter wrote (the
            counts a test checks against the upstream CSVs), ``0`` when not that signal.
    """

    path: str
    format: FileFormat
    signal: Literal["traces", "logs", "metrics"]
    source: str
    spans: int = 0
    error_spans: int = 0
    log_records: int = 0
    corrupt_time_rows: int = 0
    metric_points: int = 0
    zipkin_spans: int = 0


class Dataset(msgspec.Struct, frozen=True, kw_only=True):
    """One dataset: files that belong together in time (one constant shift for all of them).

    Attributes:
        name: a stable identifier (``nezha-trainticket-2023-01-30``).
        title: one line for people.
        source: upstream repository URL; ``commit``: the upstream commit copied.
        license: the SPDX licence id; ``license_file``: the licence text's path.
        last_event_unix_nano: the dataset's latest event time (unix ns), as recorded.
        faults: path of the fault list (``faults.json``), ``""`` when it has none.
        fault_count: how many faults it lists.
    """

    name: str
    title: str
    source: str
    commit: str
    license: str
    license_file: str
    last_event_unix_nano: int
    last_event: str
    files: list[DataFile]
    faults: str = ""
    fault_count: int = 0


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """``manifest.json``."""

    format: int
    description: str
    datasets: list[Dataset]


def data_root() -> Traversable:
    """The shipped data folder (inside the installed package)."""
    return files(DATA_PACKAGE) / "data"


def read_manifest() -> Manifest:
    """Read and check the shipped manifest.

    Raises:
        FileNotFoundError: the package was installed without its data files.
        msgspec.ValidationError: the manifest does not have the documented shape.
    """
    return msgspec.json.decode((data_root() / "manifest.json").read_bytes(), type=Manifest)


def read_data_file(path: str) -> bytes:
    """The bytes of one shipped file (``path`` as in :class:`DataFile`), still gzip'd."""
    node = data_root()
    for part in path.split("/"):
        node = node / part
    return node.read_bytes()
