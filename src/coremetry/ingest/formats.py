"""File formats ``coremetry ingest`` reads: detection from content and one decode entry point.

Detection (``--format auto``) looks at the first 64 KiB of the (decompressed) content:

- JSON holding ``"resourceSpans"``, ``"resourceLogs"`` or ``"resourceMetrics"`` -> ``otlp-json``;
- JSON holding ``"traceID"`` and ``"spanID"`` (Jaeger's capitalisation) -> ``jaeger``;
- a JSON array holding ``"traceId"`` -> ``zipkin``;
- text whose first meaningful line is ``# HELP``/``# TYPE`` or a sample line
  (``name{labels} value``) -> ``prometheus``;
- text whose first line has a comma and a ``timestamp``/``time`` column, or starts with a
  parseable timestamp -> ``csv``.

Anything else raises :class:`~coremetry.ingest.UnknownFormat`, which says to pass ``--format``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal, TypeAlias, get_args

import msgspec

from coremetry.ingest._convert import ItemRejected
from coremetry.ingest.csv_series import decode_csv_series, parse_timestamp
from coremetry.ingest.decoded import Decoded
from coremetry.ingest.errors import UnknownFormat
from coremetry.ingest.jaeger import decode_jaeger
from coremetry.ingest.otlp import decode_otlp_json_document
from coremetry.ingest.prometheus import decode_prometheus
from coremetry.ingest.zipkin import decode_zipkin
from coremetry.store.model import UNKNOWN_SERVICE

__all__ = ["FORMATS", "FileFormat", "ImportOptions", "decode_file", "detect_format"]

FileFormat: TypeAlias = Literal["otlp-json", "zipkin", "jaeger", "prometheus", "csv"]
"""A format ``coremetry ingest --format`` names."""

FORMATS: Final[tuple[FileFormat, ...]] = get_args(FileFormat)
"""Every :data:`FileFormat`, in ``--help`` order."""

_HEAD: Final = 64 * 1024
_PROM_SAMPLE: Final = re.compile(
    rb"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?[ \t]+"
    rb"([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|NaN|[-+]?Inf)([ \t]+-?[0-9]+)?$"
)


class ImportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Options of the formats that need them (the ``coremetry ingest`` flags).

    Attributes:
        scrape_unix_nano: Prometheus: the scrape's time, unix nanoseconds (``--timestamp``;
            the importer passes the import's start time when not given).
        service_name: Prometheus and CSV: ``service_name`` of the points (Prometheus samples
            with a ``job`` label use it instead).
        metric_name: CSV: the metric's name (``--metric-name``; default: the file's name
            without its extensions).
        labels: CSV: the points' attributes (``--label k=v``).
        unit: CSV: the metric's unit (``--unit``).
    """

    scrape_unix_nano: int = 0
    service_name: str = UNKNOWN_SERVICE
    metric_name: str = ""
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    unit: str = ""


def detect_format(data: bytes) -> FileFormat:
    """Tell a file's format from its content (see the module docstring).

    Raises:
        UnknownFormat: no rule matched.
    """
    head = data[:_HEAD].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith((b"{", b"[")):
        if re.search(rb'"resource(Spans|Logs|Metrics)"', head):
            return "otlp-json"
        if b'"traceID"' in head and b'"spanID"' in head:
            return "jaeger"
        if head.startswith(b"[") and b'"traceId"' in head:
            return "zipkin"
        raise UnknownFormat(
            "JSON that is neither OTLP JSON, Zipkin v2 nor Jaeger JSON: pass --format"
        )
    lines = [line.strip() for line in head.split(b"\n")]
    meaningful = [line for line in lines if line and not line.startswith(b"#")]
    if any(line.startswith((b"# HELP ", b"# TYPE ")) for line in lines[:50]):
        return "prometheus"
    if (
        meaningful
        and _PROM_SAMPLE.match(meaningful[0])
        and b"," not in meaningful[0].split(b"}")[-1]
    ):
        return "prometheus"
    if meaningful and b"," in meaningful[0]:
        first = meaningful[0].decode("utf-8", "replace").lower().split(",")
        if any(cell.strip() in ("timestamp", "time", "ts") for cell in first):
            return "csv"
        try:
            parse_timestamp(first[0])
        except ItemRejected:
            pass
        else:
            return "csv"
    raise UnknownFormat("the content matches none of the formats: pass --format")


def decode_file(data: bytes, fmt: FileFormat, options: ImportOptions) -> Decoded:
    """Decode a whole file's content in the given format (blocking, CPU-bound).

    Raises:
        MalformedInput: the content is not valid in that format (the message says where).
    """
    if fmt == "otlp-json":
        return decode_otlp_json_document(data)
    if fmt == "zipkin":
        return decode_zipkin(data)
    if fmt == "jaeger":
        return decode_jaeger(data)
    if fmt == "prometheus":
        return decode_prometheus(
            data, scrape_unix_nano=options.scrape_unix_nano, service_name=options.service_name
        )
    return decode_csv_series(
        data,
        metric_name=options.metric_name,
        labels=options.labels,
        unit=options.unit,
        service_name=options.service_name,
    )
