"""Shared helpers for the ingest tests: the real files in ``tests/data`` and the counts a
user would compute from them with plain ``json`` / ``csv`` parsing (never with our decoders)."""

import csv
import gzip
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from conftest import DATA

OTLP_DIR: Final = DATA / "opentelemetry-proto"
ZIPKIN_DIR: Final = DATA / "zipkin"
JAEGER_FILE: Final = DATA / "jaeger-ui" / "testTrace.json"
PROMETHEUS_FILE: Final = DATA / "node_exporter" / "e2e-output.txt"
NAB_DIR: Final = DATA / "nab"
NEZHA_LOGS: Final = DATA / "nezha" / "rca_data" / "2023-01-30" / "log"

JsonObject = dict[str, object]


def load_json(path: Path) -> object:
    return json.loads(path.read_text(encoding="utf-8"))


def as_object(value: object) -> JsonObject:
    assert isinstance(value, dict), value
    return {str(k): v for k, v in value.items()}


def as_list(value: object) -> list[object]:
    assert isinstance(value, list), value
    return list(value)


def otlp_files() -> list[Path]:
    return sorted(OTLP_DIR.glob("*.json"))


def zipkin_files() -> list[Path]:
    return sorted(ZIPKIN_DIR.glob("*.json"))


def nab_files() -> list[Path]:
    return sorted(NAB_DIR.glob("*/*.csv"))


def otlp_counts(path: Path) -> dict[str, int]:
    """Spans, log records and metric data points in an OTLP JSON file (one per data point)."""
    document = as_object(load_json(path))
    counts = {"span": 0, "log": 0, "metric_point": 0}
    for resource in as_list(document.get("resourceSpans", [])):
        for scope in as_list(as_object(resource).get("scopeSpans", [])):
            counts["span"] += len(as_list(as_object(scope).get("spans", [])))
    for resource in as_list(document.get("resourceLogs", [])):
        for scope in as_list(as_object(resource).get("scopeLogs", [])):
            counts["log"] += len(as_list(as_object(scope).get("logRecords", [])))
    for resource in as_list(document.get("resourceMetrics", [])):
        for scope in as_list(as_object(resource).get("scopeMetrics", [])):
            for metric in as_list(as_object(scope).get("metrics", [])):
                for kind in ("gauge", "sum", "histogram", "exponentialHistogram"):
                    data = as_object(metric).get(kind)
                    if data is not None:
                        counts["metric_point"] += len(as_list(as_object(data)["dataPoints"]))
    return counts


def zipkin_records(path: Path) -> list[JsonObject]:
    return [as_object(record) for record in as_list(load_json(path))]


def zipkin_endpoint_key(record: Mapping[str, object]) -> tuple[str, str, str, str, str]:
    endpoint = as_object(record.get("localEndpoint", {}))
    return (
        str(record["traceId"]),
        str(record["id"]),
        str(endpoint.get("serviceName", "")),
        str(endpoint.get("ipv4", endpoint.get("ipv6", ""))),
        str(endpoint.get("port", "")),
    )


def zipkin_expected_spans(path: Path) -> int:
    """Spans a Zipkin v2 file holds once fragments are merged, as Zipkin's UI does.

    A record with a ``timestamp`` is a span; a record without one is a fragment of the span
    reported with the same trace id, id and local endpoint (it adds tags or a name).
    """
    records = zipkin_records(path)
    timestamped = [r for r in records if "timestamp" in r]
    keys_with_time = {zipkin_endpoint_key(r) for r in timestamped}
    lonely_fragments = {
        zipkin_endpoint_key(r)
        for r in records
        if "timestamp" not in r and zipkin_endpoint_key(r) not in keys_with_time
    }
    assert not lonely_fragments, "these files have no fragment without its span"
    return len(timestamped)


def zipkin_error_spans(path: Path) -> int:
    return sum(
        1
        for r in zipkin_records(path)
        if "error" in as_object(r.get("tags", {})) and "timestamp" in r
    )


def jaeger_span_count(path: Path) -> int:
    data = as_object(load_json(path))["data"]
    traces = as_list(data) if isinstance(data, list) else [data]
    return sum(len(as_list(as_object(trace)["spans"])) for trace in traces)


def prometheus_sample_lines(path: Path) -> list[str]:
    """Sample lines of an exposition (lines end at ``\\n`` only, as the format says)."""
    text = path.read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip() and not line.startswith("#")]


def prometheus_expected_points(path: Path) -> int:
    """One point per sample, except a histogram: one per label set (its buckets, sum, count)."""
    text = path.read_text(encoding="utf-8")
    histograms = {
        m.group(1) for m in re.finditer(r"^# TYPE (\S+) histogram$", text, flags=re.MULTILINE)
    }
    points = 0
    histogram_sets: set[str] = set()
    for line in prometheus_sample_lines(path):
        name = re.split(r"[{\s]", line, maxsplit=1)[0]
        family = next(
            (h for h in histograms if name in (h + "_bucket", h + "_sum", h + "_count")), None
        )
        if family is None:
            points += 1
        elif name == family + "_count":
            histogram_sets.add(line.rsplit(" ", 1)[0])
    return points + len(histogram_sets)


def nab_rows(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        assert header == ["timestamp", "value"], header
        return [(row[0], row[1]) for row in reader]


def nab_expected_points(path: Path) -> int:
    """One point per distinct timestamp (a series holds one value per time)."""
    return len({timestamp for timestamp, _ in nab_rows(path)})


def nab_time_ns(text: str) -> int:
    """``2014-07-01 00:00:00`` read as UTC (NAB's timestamps carry no zone)."""
    moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 10**9


def nezha_log_rows(name: str) -> list[dict[str, str]]:
    """The rows of Nezha's ``log/<name>`` (carried gzip-compressed as ``<name>.gz``)."""
    with gzip.open(NEZHA_LOGS / f"{name}.gz", "rt", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def iso_ns(text: str) -> int:
    """``2023-01-30T13:14:54.707`` or ``...Z`` with up to 9 fraction digits -> unix ns (UTC)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = int(datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())
    return seconds * 10**9 + int((fraction + "0" * 9)[:9])
