"""Ingest: decode telemetry from the formats people have into the store's records.

- :mod:`~coremetry.ingest.otlp` -- OTLP Export*ServiceRequest, protobuf and JSON (the OTLP/HTTP
  receiver's decoders, and OTLP JSON files);
- :mod:`~coremetry.ingest.zipkin`, :mod:`~coremetry.ingest.jaeger`,
  :mod:`~coremetry.ingest.prometheus`, :mod:`~coremetry.ingest.csv_series` -- file formats;
- :mod:`~coremetry.ingest.formats` -- format detection and one entry point for files.

Every decoder returns a :class:`Decoded`: a :class:`~coremetry.store.TelemetryBatch`, the items
it rejected (with reasons and locations) and notes about items it adjusted -- never a silent
loss. Input that cannot be decoded at all raises :class:`MalformedInput`. Wire types (OTLP's
JSON mapping) live in ``_otlp_json``; this package imports the store's model, never the
protocol core.
"""

from .decoded import Decoded as Decoded
from .decoded import Rejected as Rejected
from .decoded import Signal as Signal
from .errors import IngestError as IngestError
from .errors import MalformedInput as MalformedInput
from .errors import UnknownFormat as UnknownFormat
from .formats import FORMATS as FORMATS
from .formats import FileFormat as FileFormat
from .formats import ImportOptions as ImportOptions
from .formats import decode_file as decode_file
from .formats import detect_format as detect_format

__all__ = [
    "Decoded",
    "FORMATS",
    "FileFormat",
    "ImportOptions",
    "IngestError",
    "MalformedInput",
    "Rejected",
    "Signal",
    "UnknownFormat",
    "decode_file",
    "detect_format",
]
