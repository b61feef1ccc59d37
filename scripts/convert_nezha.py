#!/usr/bin/env python3
"""Build the shipped demo data: the Nezha TrainTicket day as OTLP JSON, two Zipkin traces.

Run from the repository root (it reads the copies of the upstream files in ``tests/data/``,
where each CSV is stored gzip-compressed as ``NAME.csv.gz``, and rewrites
``src/coremetry/demo/data/``)::

    python scripts/convert_nezha.py [--nezha DIR] [--zipkin DIR] [--out DIR]

Any day of the published dataset (e.g. ``tests/data/nezha-full``) converts on its own, into
``OUT/nezha/`` and a ``manifest.json`` listing its files (used by ``bench/detect_score.py``)::

    python scripts/convert_nezha.py --nezha DIR --day [YYYY-MM-DD] --out DIR

Torn log rows are counted (``torn_rows`` in the manifest) and skipped; a metric file whose
``Time`` and ``TimeStamp`` columns disagree keeps ``Time`` and says so (a ``note`` in the
manifest and a line on stderr).

The output is deterministic (sorted keys, gzip with ``mtime=0``): running it again on the same
input gives byte-identical files, and ``tests/demo/test_conversion.py`` checks that the shipped
files are exactly what this script makes from the CSVs.

Sources
=======

- **Nezha** (MIT), https://github.com/IntelligentDDS/Nezha at commit
  ``d8140101fdb4e7dfb60d3ef9f64706f382b68470``: the TrainTicket day 2023-01-30 — the fault-free
  baseline minute ``construct_data/2023-01-30`` (trace 11:39) and ``rca_data/2023-01-30``
  (traces 13:06-13:08 and 13:15-13:17, logs 13:15-13:17, per-pod metrics and
  ``front_service.csv`` for the whole day, and the injected-fault list).
- **Zipkin** (Apache-2.0), https://github.com/openzipkin/zipkin at commit
  ``878ce2a1fad54ca941d17fdcf2e1d924b148eb1f``, ``zipkin-lens/testdata/``: the two SmartThings
  production traces, shipped unchanged (Zipkin v2 JSON), only gzip'd.

Each source's ``LICENSE`` is copied next to its data; ``NOTICE`` at the repository root names
them all.

Output layout (``src/coremetry/demo/data/``)
=============================================

``manifest.json``
    Every shipped file with its format (``otlp-json`` / ``zipkin``), signal, the record count
    the script wrote, its source path, and per dataset the time of its *last event* (see below).
``nezha/traces/<date>_<HH>_<MM>.json.gz``
    One OTLP ``ExportTraceServiceRequest`` per Nezha ``trace/HH_MM_trace.csv``.
``nezha/logs/<date>_<HH>_<MM>.json.gz``
    One ``ExportLogsServiceRequest`` per ``log/HH_MM_log.csv``.
``nezha/metrics/<pod or front_service>.json.gz``
    One ``ExportMetricsServiceRequest`` per ``metric/*.csv``.
``nezha/faults.json``
    The injected faults (see "Faults").
``nezha/LICENSE``, ``zipkin/LICENSE``, ``zipkin/README.md``
    The sources' licence texts, and Zipkin's own description of the SmartThings traces.
``zipkin/smartthings-*.json.gz``
    The original Zipkin files, gzip'd.

The OTLP JSON follows the protobuf JSON mapping
(https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding): lowerCamelCase field names,
trace/span ids as lowercase hex, 64-bit integers (times in unix nanoseconds) as decimal strings,
enums as integers, doubles as JSON numbers and ``"NaN"`` for NaN.

Mapping: resources
==================

Every Nezha row names a Kubernetes pod (``PodName``), e.g.
``ts-travel-service-64469b5b48-5rjvb``. Its resource carries:

- ``service.name``: the pod name less its ReplicaSet hash and pod suffix
  (``ts-travel-service``), which is the Deployment's name in TrainTicket;
- ``k8s.pod.name``: the pod name; ``k8s.replicaset.name``: the name less the pod suffix
  (``ts-travel-service-64469b5b48``); ``k8s.deployment.name``: as ``service.name``;
- ``k8s.node.name``: the ``Node`` column of the pod's log rows where the pod has any (Nezha
  records the node by its IP address, kept as given); pods without log rows have no node name.

A pod name that does not have the ``<deployment>-<hash>-<suffix>`` shape becomes the
``service.name`` as it is, with only ``k8s.pod.name``. ``front_service.csv`` is a service-level
view Nezha names ``Frontend`` (its ``ServiceName`` column): its resource is
``service.name=Frontend`` only. The instrumentation scope of everything converted is
``coremetry.demo.nezha`` (the original instrumentation is not recorded in the CSVs).

Mapping: traces (``trace/*.csv``)
=================================

``TraceID``/``SpanID`` -> ``traceId``/``spanId``; ``ParentID`` -> ``parentSpanId`` (none when
``root``); ``OperationName`` -> ``name``; ``StartTimeUnixNano``/``EndTimeUnixNano`` as they are
(``Duration``, in µs, is their difference and is not repeated).

- **Kind is derived from the tree** (Nezha has no kind column): ``SERVER`` for a root span or a
  span whose parent belongs to another service (it received the call); otherwise ``CLIENT`` for
  a span with a child in another service (it made the call); otherwise ``INTERNAL``. Database
  and other calls to uninstrumented peers therefore stay ``INTERNAL``.
- **Status is derived from the logs** (Nezha has no status column): a span is ``ERROR`` when a
  log row with the same trace and span id has level ``ERROR``; the status message is that log
  line's message (the earliest such line, less its time and level, at most 1024 characters).
  Every other span's status is unset. Logs exist only for 13:15-13:17, so spans of the other
  minutes are never marked ERROR even when slow.

Mapping: logs (``log/*.csv``)
=============================

The ``Log`` column is the Docker JSON line ``{"log": ..., "stream": ..., "time": ...}``; its
``log`` is a Java (logback) line ``HH:MM:SS.mmm LEVEL logger#line TraceID: … SpanID: … message``
in the cluster's local time (UTC+8).

- ``timeUnixNano``: ``TimeUnixNano``; when that is corrupt (not a time on or after
  1970 — Nezha has rows with ``-6795364578871345152``, i.e. year 1754) the ``Timestamp``
  column is parsed instead (RFC 3339, UTC when it has no zone). The script counts those rows
  and records the count in the manifest (42 on this day).
- ``observedTimeUnixNano``: the Docker line's ``time`` (when the container runtime captured it).
- ``severityText``: the Java level as printed (``INFO``, ``WARN``, ``ERROR``...);
  ``severityNumber`` on the OTel scale (TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17, FATAL 21;
  https://opentelemetry.io/docs/specs/otel/logs/data-model/#field-severitynumber). A line with
  no recognisable level keeps severity 0 and its whole text as the body.
- ``body``: the Java line less its leading local time and level and its trailing newline (the
  time and level are carried by the fields above; the rest — logger, ids, message — is kept).
- ``traceId``/``spanId``: the ``TraceID``/``SpanID`` columns.
- attributes: ``log.iostream`` (Docker's ``stream``); resource ``k8s.container.name`` from the
  ``Container`` column besides the pod's resource attributes.

Mapping: metrics (``metric/*.csv``)
===================================

One row per pod per minute. Its time is the ``Time`` column (a Go ``time.String()``, nanosecond
precision; the monotonic-clock suffix ``m=+…`` is dropped; it agrees with the ``TimeStamp``
column's seconds). Every non-empty value cell is one gauge data point (Nezha's values are
already per-window rates, ratios and percentiles, never running totals, so none is an OTel
sum). NaN cells stay NaN. Units are UCUM, values converted to the unit given:

=========================== ===================================== ============= ==================
column                      metric (point attributes)             unit          value
=========================== ===================================== ============= ==================
CpuUsage(m)                 k8s.pod.cpu.usage                     {cpu} (cores) millicores / 1000
CpuUsageRate(%)             k8s.pod.cpu_limit_utilization         1             percent / 100
MemoryUsage(Mi)             k8s.pod.memory.usage                  By            MiB * 1048576
MemoryUsageRate(%)          k8s.pod.memory_limit_utilization      1             percent / 100
SyscallRead                 k8s.pod.syscalls (syscall.type=read)  {syscall}     as is
SyscallWrite                k8s.pod.syscalls (syscall.type=write) {syscall}     as is
NetworkReceiveBytes         k8s.pod.network.io.rate               By/s          as is
                            (network.io.direction=receive)
NetworkTransmitBytes        k8s.pod.network.io.rate               By/s          as is
                            (network.io.direction=transmit)
Pod{Client,Server}LatencyPQ http.{client,server}.request.duration s             as is
                            (quantile=0.9 / 0.95 / 0.99)
PodWorkload(Ops)            http.server.request.rate              {request}/s   as is
PodSuccessRate(%)           http.server.request.success_ratio     1             percent / 100
NodeCpuUsageRate(%)         k8s.node.cpu.utilization              1             percent / 100
NodeMemoryUsageRate(%)      k8s.node.memory.utilization           1             percent / 100
NodeNetworkReceiveBytes     k8s.node.network.io.rate              By/s          as is
                            (network.io.direction=receive)
front: SuccessRate(%)       http.server.request.success_ratio     1             percent / 100
front: LatencyPQ(s)         http.server.request.duration          s             as is
                            (quantile=0.5 / 0.9 / 0.95 / 0.99)
=========================== ===================================== ============= ==================

Readings we made, stated in each metric's description: the CPU and memory percentages are
relative to the pod's limit (on this day 100 % is 500 m CPU and 2000 Mi memory); network
figures are per-second rates; syscalls are counts over the one-minute window; latency
percentiles are per-window quantiles, shipped as one gauge per quantile with a ``quantile``
attribute (as Prometheus summaries do) rather than as OTel histograms, which they are not;
the ``k8s.node.*`` columns describe the node the pod runs on. ``PodSuccessRate(%)`` and the
front ``SuccessRate(%)`` are 0 in every row of this day — Nezha recorded no value there; they
are kept (the descriptions say so) so that the shipped points are exactly the CSV's.

Faults (``nezha/faults.json``)
==============================

``{"faults": [...]}``, sorted by time, one entry per injected fault of
``<date>-fault_list.json``: ``time_unix_nano`` (the fault's time, unix ns: see below),
``service.name`` and ``k8s.pod.name`` (from ``inject_pod``), ``type`` (``inject_type``:
``network_delay``, ``cpu_contention``), the original ``inject_time`` text, and
``recorded_time``, the kept time as RFC 3339 (UTC). For any day (``--day``) the time comes
from ``inject_time`` (read as UTC): on other days of the dataset ``inject_timestamp`` is hours
off and repeated across entries. An entry whose other field disagrees carries a ``note``
saying what it said. The shipped demo (2023-01-30) keeps ``inject_timestamp``
because there, for four faults the two disagree by one minute, and the traces follow the timestamp
(the 13:14:43 network delay on ts-travel-service shows in spans from 13:14:54 — the gateway's
calls into travel wait a second before travel's spans start — a minute before ``inject_time``
says 13:15:43; likewise ts-basic-service at 12:07:12 and 12:14:56, ts-preserve-service at
13:29:52). Those four entries carry a ``note`` saying so, so the file does not contradict
itself.

Last event
==========

A dataset's *last event* is its latest event time: the maximum over its span end times, log
record times and metric point times. For Nezha it is the last metric scrape,
2023-01-30T23:59:55.103392955Z; for each Zipkin trace, the end of its latest-ending span.
``coremetry demo load`` shifts each dataset by one constant so that this instant is "now".
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal, TypeAlias

Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None
"""A JSON value as this script builds it."""

REPO: Final = Path(__file__).resolve().parent.parent
DEFAULT_NEZHA: Final = REPO / "tests" / "data" / "nezha"
DEFAULT_ZIPKIN: Final = REPO / "tests" / "data" / "zipkin"
DEFAULT_OUT: Final = REPO / "src" / "coremetry" / "demo" / "data"

DATE: Final = "2023-01-30"
NEZHA_COMMIT: Final = "d8140101fdb4e7dfb60d3ef9f64706f382b68470"
ZIPKIN_COMMIT: Final = "878ce2a1fad54ca941d17fdcf2e1d924b148eb1f"
ZIPKIN_FILES: Final = (
    "smartthings-mobile-web-install.json",
    "smartthings-oauth-authorization.json",
)
SCOPE: Final[Json] = {"name": "coremetry.demo.nezha"}
"""Instrumentation scope of every converted record."""

MAX_STATUS_MESSAGE: Final = 1024
"""Longest span status message taken from an ERROR log line, in characters."""

SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_SERVER: Final = 2
SPAN_KIND_CLIENT: Final = 3
STATUS_CODE_ERROR: Final = 2

SEVERITY_NUMBER: Final[Mapping[str, int]] = {
    "TRACE": 1,
    "DEBUG": 5,
    "INFO": 9,
    "WARN": 13,
    "WARNING": 13,
    "ERROR": 17,
    "FATAL": 21,
}
"""Java/logback level -> OTel severity number (the lowest of each range)."""

_POD = re.compile(r"^(?P<replicaset>(?P<deployment>.+)-[0-9a-z]{5,10})-[0-9a-z]{5}$")
_JAVA_LINE = re.compile(r"^\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+(?P<level>[A-Z]+)\s+(?P<rest>.*)$", re.S)
_GO_TIME = re.compile(
    r"^(?P<second>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d{1,9}))? \+0000 UTC"
    r"(?: m=[+-]\d+(?:\.\d+)?)?$"
)
_RFC3339 = re.compile(
    r"^(?P<second>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d{1,9}))?(?P<zone>Z)?$"
)

NEZHA_LICENSE_NOTE: Final = "MIT"
ZIPKIN_LICENSE_NOTE: Final = "Apache-2.0"


class ConversionError(Exception):
    """Raised by the converter when an input row cannot be converted; names file and row."""


# --- small helpers --------------------------------------------------------------------------


def _seconds_and_fraction_ns(second: str, fraction: str | None, fmt: str) -> int:
    whole = datetime.strptime(second, fmt).replace(tzinfo=UTC)
    nanos = int(((fraction or "") + "000000000")[:9])
    return int(whole.timestamp()) * 1_000_000_000 + nanos


def parse_go_time_ns(text: str) -> int:
    """Nezha's metric ``Time`` column (Go ``time.String()``, UTC) -> unix nanoseconds.

    Raises:
        ValueError: not of the form ``2023-01-30 11:39:54.620460388 +0000 UTC m=+1.79``.
    """
    match = _GO_TIME.match(text.strip())
    if match is None:
        raise ValueError(f"Time {text!r} is not a Go UTC time string")
    return _seconds_and_fraction_ns(match["second"], match["fraction"], "%Y-%m-%d %H:%M:%S")


def parse_rfc3339_ns(text: str) -> int:
    """``2023-01-30T13:15:43.651197703Z`` (or without ``Z``, read as UTC) -> unix nanoseconds.

    Raises:
        ValueError: not an RFC 3339 UTC time with up to nanosecond precision.
    """
    match = _RFC3339.match(text.strip())
    if match is None:
        raise ValueError(f"timestamp {text!r} is not RFC 3339 UTC")
    return _seconds_and_fraction_ns(match["second"], match["fraction"], "%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class Pod:
    """What a Kubernetes pod name tells: its service and ReplicaSet."""

    name: str
    service: str
    replicaset: str | None

    @classmethod
    def parse(cls, pod_name: str) -> Pod:
        """``ts-travel-service-64469b5b48-5rjvb`` -> service ``ts-travel-service``."""
        match = _POD.match(pod_name)
        if match is None:
            return cls(pod_name, pod_name, None)
        return cls(pod_name, match["deployment"], match["replicaset"])

    def resource(self, nodes: Mapping[str, str], extra: Mapping[str, str] = {}) -> Json:
        """The OTLP ``Resource`` of this pod (``nodes``: pod name -> node name)."""
        attrs: dict[str, str] = {"service.name": self.service, "k8s.pod.name": self.name}
        if self.replicaset is not None:
            attrs["k8s.replicaset.name"] = self.replicaset
            attrs["k8s.deployment.name"] = self.service
        if self.name in nodes:
            attrs["k8s.node.name"] = nodes[self.name]
        attrs.update(extra)
        return {"attributes": _attributes(attrs)}


def _any_value(value: str | int | float) -> Json:
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"doubleValue": _double(value)}


def _attributes(attrs: Mapping[str, str | int | float]) -> Json:
    return [{"key": key, "value": _any_value(value)} for key, value in attrs.items()]


def _double(value: float) -> Json:
    """A double in the protobuf JSON mapping: a number, or ``"NaN"``/``"Infinity"``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of the upstream CSV ``path``, read from ``path`` or its gzip copy ``path.gz``."""
    packed = path.with_name(path.name + ".gz")
    if not path.exists() and packed.exists():
        with gzip.open(packed, "rt", newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _minute_key(path: Path) -> str:
    """``.../2023-01-30/trace/13_15_trace.csv`` -> ``2023-01-30_13_15``."""
    hour, minute = path.name.split("_")[:2]
    return f"{path.parent.parent.name}_{hour}_{minute}"


def _write_gzip_json(path: Path, document: Json) -> int:
    """Write ``document`` as compact, key-sorted JSON, gzip'd with ``mtime=0``; return bytes."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def _write_json(path: Path, document: Json) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n")


# --- logs -----------------------------------------------------------------------------------


@dataclass
class LogLine:
    """One converted Nezha log row (before grouping by resource)."""

    pod: Pod
    node: str
    container: str
    record: dict[str, Json]
    level: str
    message: str
    trace_id: str
    span_id: str
    time_unix_nano: int


@dataclass
class LogFile:
    """The converted rows of one ``log/*.csv``."""

    source: Path
    lines: list[LogLine]
    corrupt_times: int
    torn_rows: int = 0


def _log_time_ns(row: Mapping[str, str], where: str) -> tuple[int, bool]:
    """The row's event time, and whether ``TimeUnixNano`` was corrupt (``Timestamp`` used)."""
    try:
        raw = int(row["TimeUnixNano"])
    except ValueError:
        raw = -1
    if raw >= 0:
        return raw, False
    try:
        return parse_rfc3339_ns(row["Timestamp"]), True
    except ValueError as exc:
        raise ConversionError(f"{where}: TimeUnixNano is corrupt and {exc}") from None


def convert_log_file(path: Path) -> LogFile:
    """Read one Nezha ``log/*.csv`` into OTLP log records (see the module docstring).

    A *torn* row — its ``Log`` not a Docker JSON line, a column missing, or no usable time
    (upstream files of some days hold rows cut short or run into the next) — is counted in
    :attr:`LogFile.torn_rows` and skipped.
    """
    lines: list[LogLine] = []
    corrupt = 0
    torn = 0
    for number, row in enumerate(_read_csv(path), start=2):
        where = f"{path}:{number}"
        try:
            docker = json.loads(row["Log"])
            text = str(docker["log"])
            stream = str(docker.get("stream", ""))
            observed = parse_rfc3339_ns(str(docker["time"]))
            time_ns, was_corrupt = _log_time_ns(row, where)
            pod_name, node, container = row["PodName"], row["Node"], row["Container"]
            trace_id, span_id = row["TraceID"].lower(), row["SpanID"].lower()
        except (ValueError, KeyError, TypeError, AttributeError, ConversionError):
            # A torn row (cut short or run into the next one upstream): counted, skipped.
            torn += 1
            continue
        corrupt += was_corrupt
        text = text.rstrip("\n")
        match = _JAVA_LINE.match(text)
        level = match["level"] if match is not None else ""
        severity = SEVERITY_NUMBER.get(level, 0)
        body = match["rest"] if match is not None and severity else text
        if not severity:
            level = ""
        record: dict[str, Json] = {
            "timeUnixNano": str(time_ns),
            "observedTimeUnixNano": str(observed),
            "body": {"stringValue": body},
            "traceId": trace_id,
            "spanId": span_id,
        }
        if severity:
            record["severityNumber"] = severity
            record["severityText"] = level
        if stream:
            record["attributes"] = _attributes({"log.iostream": stream})
        lines.append(
            LogLine(
                pod=Pod.parse(pod_name),
                node=node.strip(),
                container=container,
                record=record,
                level=level,
                message=body,
                trace_id=trace_id,
                span_id=span_id,
                time_unix_nano=time_ns,
            )
        )
    return LogFile(path, lines, corrupt, torn)


def logs_request(log_file: LogFile, nodes: Mapping[str, str]) -> Json:
    """One ``ExportLogsServiceRequest``: a ``ResourceLogs`` per (pod, container), CSV order."""
    groups: dict[tuple[str, str], tuple[Pod, list[Json]]] = {}
    for line in log_file.lines:
        key = (line.pod.name, line.container)
        groups.setdefault(key, (line.pod, []))[1].append(line.record)
    resource_logs: list[Json] = []
    for (_, container), (pod, records) in groups.items():
        extra = {"k8s.container.name": container} if container else {}
        resource_logs.append(
            {
                "resource": pod.resource(nodes, extra),
                "scopeLogs": [{"scope": SCOPE, "logRecords": records}],
            }
        )
    return {"resourceLogs": resource_logs}


# --- traces ---------------------------------------------------------------------------------


@dataclass
class SpanRow:
    """One Nezha span row, parsed."""

    trace_id: str
    span_id: str
    parent_id: str
    pod: Pod
    name: str
    start: int
    end: int


@dataclass
class TraceFile:
    """The parsed rows of one ``trace/*.csv``."""

    source: Path
    spans: list[SpanRow]


def read_trace_file(path: Path) -> TraceFile:
    """Parse one Nezha ``trace/*.csv``.

    Raises:
        ConversionError: a row with a non-integer time.
    """
    spans: list[SpanRow] = []
    for number, row in enumerate(_read_csv(path), start=2):
        try:
            start, end = int(row["StartTimeUnixNano"]), int(row["EndTimeUnixNano"])
        except ValueError:
            raise ConversionError(f"{path}:{number}: span times are not integers") from None
        parent = row["ParentID"].strip().lower()
        spans.append(
            SpanRow(
                trace_id=row["TraceID"].strip().lower(),
                span_id=row["SpanID"].strip().lower(),
                parent_id="" if parent == "root" else parent,
                pod=Pod.parse(row["PodName"]),
                name=row["OperationName"],
                start=start,
                end=end,
            )
        )
    return TraceFile(path, spans)


def span_kinds(spans: Iterable[SpanRow]) -> dict[tuple[str, str], int]:
    """Derive each span's kind from the tree (module docstring, "Mapping: traces").

    Returns:
        ``(trace_id, span_id)`` -> OTLP ``SpanKind`` value.
    """
    service: dict[tuple[str, str], str] = {}
    all_spans = list(spans)
    for span in all_spans:
        service[(span.trace_id, span.span_id)] = span.pod.service
    calls_out: set[tuple[str, str]] = set()
    kinds: dict[tuple[str, str], int] = {}
    for span in all_spans:
        parent_service = service.get((span.trace_id, span.parent_id))
        if not span.parent_id or (
            parent_service is not None and parent_service != span.pod.service
        ):
            kinds[(span.trace_id, span.span_id)] = SPAN_KIND_SERVER
            if parent_service is not None:
                calls_out.add((span.trace_id, span.parent_id))
    for key in service:
        if key not in kinds:
            kinds[key] = SPAN_KIND_CLIENT if key in calls_out else SPAN_KIND_INTERNAL
    return kinds


def error_statuses(log_files: Iterable[LogFile]) -> dict[tuple[str, str], str]:
    """``(trace_id, span_id)`` -> the message of that span's earliest ERROR log line."""
    earliest: dict[tuple[str, str], tuple[int, str]] = {}
    for log_file in log_files:
        for line in log_file.lines:
            if line.level != "ERROR" or not line.span_id:
                continue
            key = (line.trace_id, line.span_id)
            if key not in earliest or line.time_unix_nano < earliest[key][0]:
                earliest[key] = (line.time_unix_nano, line.message[:MAX_STATUS_MESSAGE])
    return {key: message for key, (_, message) in earliest.items()}


def traces_request(
    trace_file: TraceFile,
    kinds: Mapping[tuple[str, str], int],
    errors: Mapping[tuple[str, str], str],
    nodes: Mapping[str, str],
) -> Json:
    """One ``ExportTraceServiceRequest``: a ``ResourceSpans`` per pod, spans in CSV order."""
    groups: dict[str, tuple[Pod, list[Json]]] = {}
    for row in trace_file.spans:
        key = (row.trace_id, row.span_id)
        span: dict[str, Json] = {
            "traceId": row.trace_id,
            "spanId": row.span_id,
            "name": row.name,
            "kind": kinds[key],
            "startTimeUnixNano": str(row.start),
            "endTimeUnixNano": str(row.end),
        }
        if row.parent_id:
            span["parentSpanId"] = row.parent_id
        if key in errors:
            span["status"] = {"code": STATUS_CODE_ERROR, "message": errors[key]}
        groups.setdefault(row.pod.name, (row.pod, []))[1].append(span)
    return {
        "resourceSpans": [
            {"resource": pod.resource(nodes), "scopeSpans": [{"scope": SCOPE, "spans": spans}]}
            for pod, spans in groups.values()
        ]
    }


# --- metrics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """How one metric CSV column becomes gauge points."""

    metric: str
    unit: str
    description: str
    multiply: float = 1.0
    divide: float = 1.0
    attributes: tuple[tuple[str, str], ...] = ()


_LIMIT = "relative to the pod's limit (on this day 100 % = 500 m CPU / 2000 Mi memory)"
_PERCENTILE = (
    "per one-minute window, as Nezha computed it (Istio); one gauge per quantile, not a histogram"
)
_NEVER_RECORDED = "Nezha recorded 0 in every row of this day: not a measurement"

POD_COLUMNS: Final[Mapping[str, Column]] = {
    "CpuUsage(m)": Column(
        "k8s.pod.cpu.usage",
        "{cpu}",
        "CPU used by the pod, in cores (Nezha CpuUsage(m) in millicores / 1000)",
        divide=1000.0,
    ),
    "CpuUsageRate(%)": Column(
        "k8s.pod.cpu_limit_utilization",
        "1",
        f"CPU use as a ratio {_LIMIT} (Nezha CpuUsageRate(%) / 100)",
        divide=100.0,
    ),
    "MemoryUsage(Mi)": Column(
        "k8s.pod.memory.usage",
        "By",
        "Memory used by the pod, in bytes (Nezha MemoryUsage(Mi) * 1048576)",
        multiply=1048576.0,
    ),
    "MemoryUsageRate(%)": Column(
        "k8s.pod.memory_limit_utilization",
        "1",
        f"Memory use as a ratio {_LIMIT} (Nezha MemoryUsageRate(%) / 100)",
        divide=100.0,
    ),
    "SyscallRead": Column(
        "k8s.pod.syscalls",
        "{syscall}",
        "System calls made by the pod over the one-minute window (Nezha SyscallRead/Write)",
        attributes=(("syscall.type", "read"),),
    ),
    "SyscallWrite": Column(
        "k8s.pod.syscalls",
        "{syscall}",
        "System calls made by the pod over the one-minute window (Nezha SyscallRead/Write)",
        attributes=(("syscall.type", "write"),),
    ),
    "NetworkReceiveBytes": Column(
        "k8s.pod.network.io.rate",
        "By/s",
        "Bytes per second the pod received / transmitted (Nezha NetworkReceive/TransmitBytes)",
        attributes=(("network.io.direction", "receive"),),
    ),
    "NetworkTransmitBytes": Column(
        "k8s.pod.network.io.rate",
        "By/s",
        "Bytes per second the pod received / transmitted (Nezha NetworkReceive/TransmitBytes)",
        attributes=(("network.io.direction", "transmit"),),
    ),
    **{
        f"Pod{side}LatencyP{q}(s)": Column(
            f"http.{side.lower()}.request.duration",
            "s",
            f"Latency of the requests the pod {verb}, quantile {_PERCENTILE} "
            f"(Nezha Pod{side}LatencyP90/P95/P99(s))",
            attributes=(("quantile", quantile),),
        )
        for side, verb in (("Client", "made"), ("Server", "served"))
        for q, quantile in (("90", "0.9"), ("95", "0.95"), ("99", "0.99"))
    },
    "PodWorkload(Ops)": Column(
        "http.server.request.rate",
        "{request}/s",
        "Requests per second the pod served (Nezha PodWorkload(Ops))",
    ),
    "PodSuccessRate(%)": Column(
        "http.server.request.success_ratio",
        "1",
        f"Share of successful requests (Nezha PodSuccessRate(%) / 100); {_NEVER_RECORDED}",
        divide=100.0,
    ),
    "NodeCpuUsageRate(%)": Column(
        "k8s.node.cpu.utilization",
        "1",
        "CPU use of the node the pod runs on, as a ratio (Nezha NodeCpuUsageRate(%) / 100)",
        divide=100.0,
    ),
    "NodeMemoryUsageRate(%)": Column(
        "k8s.node.memory.utilization",
        "1",
        "Memory use of the node the pod runs on, as a ratio (Nezha NodeMemoryUsageRate(%) / 100)",
        divide=100.0,
    ),
    "NodeNetworkReceiveBytes": Column(
        "k8s.node.network.io.rate",
        "By/s",
        "Bytes per second received by the node the pod runs on (Nezha NodeNetworkReceiveBytes)",
        attributes=(("network.io.direction", "receive"),),
    ),
}
"""The per-pod metric CSV's value columns (all but ``Time``, ``TimeStamp``, ``PodName``)."""

FRONT_COLUMNS: Final[Mapping[str, Column]] = {
    "SuccessRate(%)": Column(
        "http.server.request.success_ratio",
        "1",
        f"Share of successful requests (Nezha SuccessRate(%) / 100); {_NEVER_RECORDED}",
        divide=100.0,
    ),
    **{
        f"LatencyP{p}(s)": Column(
            "http.server.request.duration",
            "s",
            f"Latency of the requests the frontend served, quantile {_PERCENTILE} "
            "(Nezha LatencyP50/P90/P95/P99(s))",
            attributes=(("quantile", quantile),),
        )
        for p, quantile in (("50", "0.5"), ("90", "0.9"), ("95", "0.95"), ("99", "0.99"))
    },
}
"""``front_service.csv``'s value columns (all but ``Time``, ``TimeStamp``, ``ServiceName``)."""

METRIC_KEY_COLUMNS: Final = frozenset({"Time", "TimeStamp", "PodName", "ServiceName"})


@dataclass
class MetricFile:
    """One converted ``metric/*.csv``: its request, point count and latest point time."""

    source: Path
    request: Json
    points: int
    last_unix_nano: int
    first_unix_nano: int
    time_disagreements: int = 0


def _parse_value(text: str, where: str) -> float | None:
    stripped = text.strip()
    if not stripped:
        return None
    try:
        return float(stripped)
    except ValueError:
        raise ConversionError(f"{where}: {text!r} is not a number") from None


def convert_metric_file(path: Path, nodes: Mapping[str, str]) -> MetricFile:
    """Read one Nezha ``metric/*.csv`` into an ``ExportMetricsServiceRequest``.

    Each row's time is its ``Time`` column. Rows whose ``TimeStamp`` (unix seconds) disagrees
    with it are counted in :attr:`MetricFile.time_disagreements` (on some days the two
    columns disagree throughout; ``Time`` is the one that lines up with the traces and logs).

    Raises:
        ConversionError: an unknown column, a bad ``Time``, a non-numeric value, or rows of
            more than one pod.
    """
    rows = _read_csv(path)
    if not rows:
        raise ConversionError(f"{path}: no rows")
    front = "ServiceName" in rows[0]
    columns = FRONT_COLUMNS if front else POD_COLUMNS
    unknown = set(rows[0]) - set(columns) - METRIC_KEY_COLUMNS
    if unknown:
        raise ConversionError(f"{path}: unknown columns {sorted(unknown)}")
    identity = rows[0]["ServiceName" if front else "PodName"]
    data_points: dict[str, list[Json]] = {}
    points = 0
    disagreements = 0
    first = last = None
    for number, row in enumerate(rows, start=2):
        where = f"{path}:{number}"
        if row["ServiceName" if front else "PodName"] != identity:
            raise ConversionError(f"{where}: rows of more than one pod or service in one file")
        try:
            time_ns = parse_go_time_ns(row["Time"])
        except ValueError as exc:
            raise ConversionError(f"{where}: {exc}") from None
        try:
            stamp = int(row["TimeStamp"])
        except ValueError:
            stamp = None
        if stamp is None or time_ns // 1_000_000_000 != stamp:
            disagreements += 1  # Time is kept (module docstring); the count is reported
        first = time_ns if first is None else min(first, time_ns)
        last = time_ns if last is None else max(last, time_ns)
        for column_name, column in columns.items():
            cell = row.get(column_name)
            if cell is None:  # a column this day's files do not have
                continue
            value = _parse_value(cell, f"{where} {column_name}")
            if value is None:
                continue
            point: dict[str, Json] = {
                "timeUnixNano": str(time_ns),
                "asDouble": _double(value * column.multiply / column.divide),
            }
            if column.attributes:
                point["attributes"] = _attributes(dict(column.attributes))
            data_points.setdefault(column_name, []).append(point)
            points += 1
    by_metric: dict[str, dict[str, Json]] = {}
    merged: dict[str, list[Json]] = {}
    for column_name, column in columns.items():
        if column_name not in data_points:
            continue
        by_metric.setdefault(
            column.metric,
            {"name": column.metric, "unit": column.unit, "description": column.description},
        )
        merged.setdefault(column.metric, []).extend(data_points[column_name])
    metrics: list[Json] = [
        {**meta, "gauge": {"dataPoints": merged[name]}} for name, meta in by_metric.items()
    ]
    if front:
        resource: Json = {"attributes": _attributes({"service.name": identity})}
    else:
        resource = Pod.parse(identity).resource(nodes)
    request: Json = {
        "resourceMetrics": [
            {"resource": resource, "scopeMetrics": [{"scope": SCOPE, "metrics": metrics}]}
        ]
    }
    if first is None or last is None:
        raise ConversionError(f"{path}: no rows")
    return MetricFile(path, request, points, last, first, disagreements)


# --- faults ---------------------------------------------------------------------------------


FaultClock: TypeAlias = Literal["inject_time", "inject_timestamp"]
"""Which upstream field gives a fault's time (module docstring, "Faults")."""


def convert_faults(path: Path, clock: FaultClock = "inject_time") -> list[Json]:
    """The fault list as ``faults.json`` entries, sorted by time (module docstring, "Faults").

    Args:
        path: the upstream ``<date>-fault_list.json``.
        clock: the field the kept time comes from; the other one is recorded in a ``note``
            when it disagrees (``inject_time`` is read as UTC, ``YYYY-MM-DD HH:MM:SS``).

    Raises:
        ConversionError: an entry without the four upstream fields, or whose ``clock`` field
            is not a time.
    """
    raw = json.loads(path.read_text())
    faults: list[tuple[int, str, Json]] = []
    for hour, entries in sorted(raw.items()):
        for index, entry in enumerate(entries):
            where = f"{path}: hour {hour} entry {index}"
            try:
                pod = Pod.parse(str(entry["inject_pod"]))
                kind = str(entry["inject_type"])
                text = str(entry["inject_time"])
                stamp_text = str(entry.get("inject_timestamp", ""))
            except (KeyError, TypeError, AttributeError) as exc:
                raise ConversionError(f"{where}: {exc}") from None
            try:
                by_text: int | None = int(
                    datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
                )
            except ValueError:
                by_text = None
            try:
                by_stamp: int | None = int(stamp_text)
            except ValueError:
                by_stamp = None
            seconds = by_text if clock == "inject_time" else by_stamp
            if seconds is None:
                raise ConversionError(f"{where}: {clock} is not a time")
            recorded = datetime.fromtimestamp(seconds, tz=UTC)
            entry_json: dict[str, Json] = {
                "time_unix_nano": seconds * 1_000_000_000,
                "service.name": pod.service,
                "k8s.pod.name": pod.name,
                "type": kind,
                "inject_time": text,
                "recorded_time": recorded.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            other = by_stamp if clock == "inject_time" else by_text
            if other != seconds:
                shown = (
                    "missing"
                    if other is None
                    else datetime.fromtimestamp(other, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
                )
                if clock == "inject_time":
                    entry_json["note"] = (
                        f"upstream inject_timestamp says {shown}; the time kept here is "
                        f"inject_time's, {recorded:%H:%M:%S}"
                    )
                else:
                    entry_json["note"] = (
                        f"upstream inject_time says {text[11:]}, but the traces show the fault "
                        f"from {recorded:%H:%M:%S} (inject_timestamp), the time kept here"
                    )
            faults.append((seconds, pod.name, entry_json))
    return [entry for _, _, entry in sorted(faults, key=lambda item: (item[0], item[1]))]


def find_date(nezha: Path) -> str:
    """The one day (``YYYY-MM-DD``) under ``nezha/rca_data/``.

    Raises:
        ConversionError: none, or several (name one with ``--date``).
    """
    days = sorted(p.name for p in (nezha / "rca_data").glob("????-??-??") if p.is_dir())
    if len(days) != 1:
        raise ConversionError(
            f"{nezha}/rca_data: {len(days)} days ({days}); choose one with --day YYYY-MM-DD"
        )
    return days[0]


# --- the whole build ------------------------------------------------------------------------


@dataclass
class Manifest:
    """``manifest.json`` as it is built."""

    datasets: list[dict[str, Json]] = field(default_factory=list)

    def to_json(self) -> Json:
        """The manifest document."""
        return {
            "format": 1,
            "description": "Coremetry demo data; built by scripts/convert_nezha.py",
            "datasets": list(self.datasets),
        }


def _rfc3339(unix_nano: int) -> str:
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


def _files(folder: Path, pattern: str) -> list[Path]:
    """The upstream files matching ``pattern``, by their upstream names.

    A ``NAME.csv.gz`` copy is listed as ``NAME.csv``: the manifest records the upstream path.
    """
    packed = {p.with_name(p.name.removesuffix(".gz")) for p in folder.glob(pattern + ".gz")}
    found = sorted({*folder.glob(pattern), *packed})
    if not found:
        raise ConversionError(f"{folder}: no {pattern} files")
    return found


def build_nezha(
    nezha: Path, out: Path, *, date: str = DATE, fault_clock: FaultClock = "inject_time"
) -> dict[str, Json]:
    """Convert one Nezha day into ``out/nezha/`` and return its manifest entry.

    Args:
        nezha: the dataset folder (``construct_data/<date>``, ``rca_data/<date>``).
        out: the output folder.
        date: the day (``YYYY-MM-DD``); its ``construct_data`` folder is optional.
        fault_clock: where the faults' times come from (:func:`convert_faults`).

    Raises:
        ConversionError: a file or row that cannot be converted (names it).
    """
    construct = nezha / "construct_data" / date
    rca = nezha / "rca_data" / date
    trace_paths = (
        _files(construct / "trace", "*_trace.csv") if (construct / "trace").is_dir() else []
    ) + _files(rca / "trace", "*_trace.csv")
    log_paths = _files(rca / "log", "*_log.csv")
    metric_paths = _files(rca / "metric", "*.csv")

    log_files = [convert_log_file(path) for path in log_paths]
    nodes: dict[str, str] = {}
    for log_file in log_files:
        for line in log_file.lines:
            if line.node:
                nodes.setdefault(line.pod.name, line.node)
    trace_files = [read_trace_file(path) for path in trace_paths]
    kinds = span_kinds(span for trace_file in trace_files for span in trace_file.spans)
    errors = error_statuses(log_files)

    target = out / "nezha"
    files: list[Json] = []
    last = 0
    for trace_file in trace_files:
        name = f"nezha/traces/{_minute_key(trace_file.source)}.json.gz"
        _write_gzip_json(out / name, traces_request(trace_file, kinds, errors, nodes))
        error_count = sum((s.trace_id, s.span_id) in errors for s in trace_file.spans)
        last = max([last, *(s.end for s in trace_file.spans)])
        files.append(
            {
                "path": name,
                "format": "otlp-json",
                "signal": "traces",
                "source": str(trace_file.source.relative_to(nezha)),
                "spans": len(trace_file.spans),
                "error_spans": error_count,
            }
        )
    for log_file in log_files:
        name = f"nezha/logs/{_minute_key(log_file.source)}.json.gz"
        _write_gzip_json(out / name, logs_request(log_file, nodes))
        last = max([last, *(line.time_unix_nano for line in log_file.lines)])
        files.append(
            {
                "path": name,
                "format": "otlp-json",
                "signal": "logs",
                "source": str(log_file.source.relative_to(nezha)),
                "log_records": len(log_file.lines),
                "corrupt_time_rows": log_file.corrupt_times,
                **({"torn_rows": log_file.torn_rows} if log_file.torn_rows else {}),
            }
        )
    for path in metric_paths:
        metric_file = convert_metric_file(path, nodes)
        stem = path.stem.removesuffix("_metric")
        name = f"nezha/metrics/{stem}.json.gz"
        _write_gzip_json(out / name, metric_file.request)
        last = max(last, metric_file.last_unix_nano)
        files.append(
            {
                "path": name,
                "format": "otlp-json",
                "signal": "metrics",
                "source": str(path.relative_to(nezha)),
                "metric_points": metric_file.points,
                **(
                    {
                        "note": f"Time and TimeStamp disagree in {metric_file.time_disagreements} "
                        "rows; Time is kept"
                    }
                    if metric_file.time_disagreements
                    else {}
                ),
            }
        )
        if metric_file.time_disagreements:
            print(
                f"convert_nezha: {path}: Time and TimeStamp disagree in "
                f"{metric_file.time_disagreements} rows; Time is kept",
                file=sys.stderr,
            )
    faults = convert_faults(rca / f"{date}-fault_list.json", fault_clock)
    _write_json(target / "faults.json", {"faults": faults})
    shutil.copyfile(nezha / "LICENSE", target / "LICENSE")
    return {
        "name": f"nezha-trainticket-{date}",
        "title": f"TrainTicket on Kubernetes with injected faults (Nezha, {date})",
        "source": "https://github.com/IntelligentDDS/Nezha",
        "commit": NEZHA_COMMIT,
        "license": NEZHA_LICENSE_NOTE,
        "license_file": "nezha/LICENSE",
        "faults": "nezha/faults.json",
        "fault_count": len(faults),
        "last_event_unix_nano": last,
        "last_event": _rfc3339(last),
        "files": files,
    }


def _zipkin_last_event_ns(spans: Sequence[Mapping[str, object]]) -> int:
    """Latest span end (``timestamp + duration``, µs) or annotation time, in nanoseconds."""
    last = 0
    for span in spans:
        timestamp = span.get("timestamp")
        if isinstance(timestamp, int):
            duration = span.get("duration")
            last = max(last, timestamp + (duration if isinstance(duration, int) else 0))
        annotations = span.get("annotations")
        if isinstance(annotations, list):
            for annotation in annotations:
                if isinstance(annotation, dict) and isinstance(annotation.get("timestamp"), int):
                    last = max(last, int(annotation["timestamp"]))
    return last * 1000


def build_zipkin(zipkin: Path, out: Path) -> list[dict[str, Json]]:
    """Copy the SmartThings traces gzip'd into ``out/zipkin/``; one manifest entry each.

    Raises:
        ConversionError: a file that is not a JSON list of Zipkin v2 spans.
    """
    target = out / "zipkin"
    target.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Json]] = []
    for name in ZIPKIN_FILES:
        raw = (zipkin / name).read_bytes()
        spans = json.loads(raw)
        if not isinstance(spans, list) or not all(isinstance(s, dict) for s in spans):
            raise ConversionError(f"{zipkin / name}: not a JSON list of Zipkin spans")
        path = f"zipkin/{name}.gz"
        (out / path).write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
        last = _zipkin_last_event_ns(spans)
        entries.append(
            {
                "name": name.removesuffix(".json"),
                "title": f"SmartThings production trace {name.removesuffix('.json')} (Zipkin)",
                "source": "https://github.com/openzipkin/zipkin/tree/"
                f"{ZIPKIN_COMMIT}/zipkin-lens/testdata",
                "commit": ZIPKIN_COMMIT,
                "license": ZIPKIN_LICENSE_NOTE,
                "license_file": "zipkin/LICENSE",
                "last_event_unix_nano": last,
                "last_event": _rfc3339(last),
                "files": [
                    {
                        "path": path,
                        "format": "zipkin",
                        "signal": "traces",
                        "source": f"zipkin-lens/testdata/{name}",
                        "zipkin_spans": len(spans),
                    }
                ],
            }
        )
    shutil.copyfile(zipkin / "LICENSE", target / "LICENSE")
    shutil.copyfile(zipkin / "README.md", target / "README.md")
    return entries


def build(nezha: Path, zipkin: Path, out: Path) -> Json:
    """Rebuild ``out`` from scratch; return the manifest written to ``out/manifest.json``.

    Raises:
        ConversionError: an input that cannot be converted (names the file and row).
    """
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = Manifest()
    # The demo keeps inject_timestamp: on 2023-01-30 the traces follow it ("Faults").
    manifest.datasets.append(build_nezha(nezha, out, fault_clock="inject_timestamp"))
    manifest.datasets.extend(build_zipkin(zipkin, out))
    document = manifest.to_json()
    _write_json(out / "manifest.json", document)
    return document


def _summary(document: Json) -> Iterator[str]:
    assert isinstance(document, dict)
    datasets = document["datasets"]
    assert isinstance(datasets, list)
    for dataset in datasets:
        assert isinstance(dataset, dict)
        files = dataset["files"]
        assert isinstance(files, list)
        totals: dict[str, int] = {}
        for entry in files:
            assert isinstance(entry, dict)
            for key in (
                "spans",
                "error_spans",
                "log_records",
                "corrupt_time_rows",
                "metric_points",
                "zipkin_spans",
            ):
                value = entry.get(key)
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
        counts = ", ".join(f"{key} {value}" for key, value in totals.items())
        yield f"{dataset['name']}: {len(files)} files, {counts}; last event {dataset['last_event']}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the conversion; print a summary. Exit status 0, or 1 on a conversion error."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--nezha", type=Path, default=DEFAULT_NEZHA, help="the nezha/ folder")
    parser.add_argument("--zipkin", type=Path, default=DEFAULT_ZIPKIN, help="the zipkin/ folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (rebuilt)")
    parser.add_argument(
        "--day",
        nargs="?",
        const="",
        metavar="YYYY-MM-DD",
        help="convert only this Nezha day into OUT/nezha/ (any day of the published dataset; "
        "without a value: the one day under NEZHA/rca_data); no Zipkin, no manifest",
    )
    parser.add_argument(
        "--fault-clock",
        choices=["inject_time", "inject_timestamp"],
        default="inject_time",
        help="with --day: the field fault times come from (default inject_time)",
    )
    args = parser.parse_args(argv)
    if args.day is not None:
        try:
            day = args.day or find_date(args.nezha)
            if args.out.exists():
                shutil.rmtree(args.out)
            entry = build_nezha(args.nezha, args.out, date=day, fault_clock=args.fault_clock)
        except (ConversionError, OSError) as exc:
            print(f"convert_nezha: {exc}", file=sys.stderr)
            return 1
        _write_json(args.out / "manifest.json", {"format": 1, "datasets": [entry]})
        for line in _summary({"datasets": [entry]}):
            print(line)
        return 0
    try:
        document = build(args.nezha, args.zipkin, args.out)
    except (ConversionError, OSError) as exc:
        print(f"convert_nezha: {exc}", file=sys.stderr)
        return 1
    for line in _summary(document):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
