"""The shipped demo files hold exactly the records of the upstream Nezha CSVs and Zipkin files.

Counts and identities are computed here from ``tests/data`` with the ``csv``/``json``
modules, independently of the converter, and compared with the shipped gzip'd OTLP JSON (read
with this file's own minimal msgspec Structs of the OTLP JSON mapping).
"""

import gzip
import json
import math
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Final, TypeVar

import msgspec
from conftest import REPO

from coremetry.demo.manifest import DataFile, Dataset, read_data_file, read_manifest
from coremetry.store.model import SpanKind, StatusCode

from ._support import (
    DAY,
    NEZHA,
    ZIPKIN,
    log_csvs,
    metric_csvs,
    parse_timestamp_ns,
    rows,
    trace_csvs,
)

METRIC_KEYS: Final = {"Time", "TimeStamp", "PodName", "ServiceName"}
T = TypeVar("T")


class AnyValue(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    string_value: str | None = None


class KeyValue(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    key: str
    value: AnyValue


class Resource(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    attributes: list[KeyValue] = []

    def get(self, key: str) -> str | None:
        return next((a.value.string_value for a in self.attributes if a.key == key), None)


class Status(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    code: int = 0
    message: str = ""


class Span(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    trace_id: str
    span_id: str
    name: str
    kind: int
    start_time_unix_nano: str
    end_time_unix_nano: str
    parent_span_id: str = ""
    status: Status = Status()


class ScopeSpans(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    spans: list[Span]


class ResourceSpans(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource: Resource
    scope_spans: list[ScopeSpans]


class Traces(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource_spans: list[ResourceSpans]

    def spans(self) -> list[tuple[Resource, Span]]:
        return [
            (r.resource, s) for r in self.resource_spans for ss in r.scope_spans for s in ss.spans
        ]


class LogRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    time_unix_nano: str
    observed_time_unix_nano: str
    body: AnyValue
    severity_number: int = 0
    severity_text: str = ""
    trace_id: str = ""
    span_id: str = ""


class ScopeLogs(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    log_records: list[LogRecord]


class ResourceLogs(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource: Resource
    scope_logs: list[ScopeLogs]


class Logs(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource_logs: list[ResourceLogs]

    def records(self) -> list[LogRecord]:
        return [x for r in self.resource_logs for s in r.scope_logs for x in s.log_records]


class NumberDataPoint(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    time_unix_nano: str
    as_double: float | str
    attributes: list[KeyValue] = []


class Gauge(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    data_points: list[NumberDataPoint]


class Metric(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str
    unit: str
    description: str
    gauge: Gauge


class ScopeMetrics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    metrics: list[Metric]


class ResourceMetrics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource: Resource
    scope_metrics: list[ScopeMetrics]


class Metrics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    resource_metrics: list[ResourceMetrics]

    def metrics(self) -> list[Metric]:
        return [m for r in self.resource_metrics for s in r.scope_metrics for m in s.metrics]


def nezha() -> Dataset:
    (dataset,) = [d for d in read_manifest().datasets if d.name.startswith("nezha")]
    return dataset


def shipped(data_file: DataFile, kind: type[T]) -> T:
    return msgspec.json.decode(gzip.decompress(read_data_file(data_file.path)), type=kind)


def file_for(source: Path) -> DataFile:
    relative = str(source.relative_to(NEZHA))
    (found,) = [f for f in nezha().files if f.source == relative]
    return found


@cache
def error_log_spans() -> frozenset[tuple[str, str]]:
    """(trace, span) of every log row whose Java line has level ERROR, from the CSVs."""
    found = set()
    for path in log_csvs():
        for row in rows(path):
            line = json.loads(row["Log"])["log"]
            if line.split()[1] == "ERROR":
                found.add((row["TraceID"], row["SpanID"]))
    return frozenset(found)


def test_every_upstream_csv_is_shipped_once() -> None:
    sources = sorted(f.source for f in nezha().files)
    expected = sorted(str(p.relative_to(NEZHA)) for p in trace_csvs() + log_csvs() + metric_csvs())
    assert sources == expected
    assert len(expected) == 21


def test_spans_are_exactly_the_csv_rows() -> None:
    total = 0
    for path in trace_csvs():
        csv_rows = rows(path)
        data_file = file_for(path)
        spans = [span for _, span in shipped(data_file, Traces).spans()]
        assert data_file.spans == len(csv_rows) == len(spans)
        parent = {"root": ""}
        want = Counter(
            (
                r["TraceID"],
                r["SpanID"],
                parent.get(r["ParentID"], r["ParentID"]),
                r["OperationName"],
                int(r["StartTimeUnixNano"]),
                int(r["EndTimeUnixNano"]),
            )
            for r in csv_rows
        )
        got = Counter(
            (
                s.trace_id,
                s.span_id,
                s.parent_span_id,
                s.name,
                int(s.start_time_unix_nano),
                int(s.end_time_unix_nano),
            )
            for s in spans
        )
        assert got == want
        total += len(csv_rows)
    assert total == 21669  # the data README's per-file span counts, summed


def test_span_services_come_from_the_pod_name() -> None:
    path = NEZHA / "rca_data" / DAY / "trace" / "13_15_trace.csv"
    pods = {(r["TraceID"], r["SpanID"]): r["PodName"] for r in rows(path)}
    spans = shipped(file_for(path), Traces).spans()
    assert len(spans) == len(pods)
    for resource, span in spans:
        pod = pods[(span.trace_id, span.span_id)]
        assert resource.get("k8s.pod.name") == pod
        assert resource.get("service.name") == pod.rsplit("-", 2)[0]  # ts-travel-service
        assert resource.get("k8s.replicaset.name") == pod.rsplit("-", 1)[0]


def test_error_status_only_from_the_spans_own_error_logs() -> None:
    errors = error_log_spans()
    assert len(errors) == 87  # every ERROR line is on a different span
    marked = set()
    for path in trace_csvs():
        for _, span in shipped(file_for(path), Traces).spans():
            if span.status.code == StatusCode.ERROR:
                assert span.status.message
                marked.add((span.trace_id, span.span_id))
            else:
                assert span.status == Status()
    assert marked == errors
    assert sum(f.error_spans for f in nezha().files) == len(errors)


def test_span_kind_is_derived_from_the_tree() -> None:
    spans = [
        (resource.get("service.name"), span)
        for path in trace_csvs()
        for resource, span in shipped(file_for(path), Traces).spans()
    ]
    service_of = {(s.trace_id, s.span_id): service for service, s in spans}
    callers = {
        (s.trace_id, s.parent_span_id)
        for service, s in spans
        if s.parent_span_id and service_of[(s.trace_id, s.parent_span_id)] != service
    }
    kinds: Counter[SpanKind] = Counter()
    for service, span in spans:
        key = (span.trace_id, span.span_id)
        entered = (
            not span.parent_span_id or service_of[(span.trace_id, span.parent_span_id)] != service
        )
        want = (
            SpanKind.SERVER if entered else SpanKind.CLIENT if key in callers else SpanKind.INTERNAL
        )
        assert span.kind == want, key
        kinds[want] += 1
    assert set(kinds) == {SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL}


def test_log_records_are_exactly_the_csv_rows_with_repaired_times() -> None:
    total = corrupt = 0
    for path in log_csvs():
        csv_rows = rows(path)
        data_file = file_for(path)
        records = shipped(data_file, Logs).records()
        assert data_file.log_records == len(csv_rows) == len(records)
        want: Counter[tuple[str, str, int, str]] = Counter()
        file_corrupt = 0
        for r in csv_rows:
            raw = int(r["TimeUnixNano"])
            if raw < 0:  # the year-1754 rows: Timestamp is used instead
                file_corrupt += 1
                raw = parse_timestamp_ns(r["Timestamp"])
            level = json.loads(r["Log"])["log"].split()[1]
            want[(r["TraceID"], r["SpanID"], raw, level)] += 1
        got = Counter(
            (x.trace_id, x.span_id, int(x.time_unix_nano), x.severity_text) for x in records
        )
        assert got == want
        assert data_file.corrupt_time_rows == file_corrupt
        total += len(csv_rows)
        corrupt += file_corrupt
    assert (total, corrupt) == (2169, 42)  # the data README: 24 + 18 corrupt rows


def test_log_severity_follows_the_otel_scale() -> None:
    numbers = {"INFO": 9, "WARN": 13, "ERROR": 17}
    seen: Counter[str] = Counter()
    for path in log_csvs():
        for record in shipped(file_for(path), Logs).records():
            assert record.severity_number == numbers[record.severity_text]
            body = record.body.string_value
            assert body is not None
            assert body.split()[0] not in numbers  # the level left the body
            assert f"SpanID: {record.span_id}" in body
            seen[record.severity_text] += 1
    assert seen == {"INFO": 1982, "WARN": 100, "ERROR": 87}


def test_metric_points_are_exactly_the_csv_cells() -> None:
    total = 0
    for path in metric_csvs():
        csv_rows = rows(path)
        data_file = file_for(path)
        points = [p for m in shipped(data_file, Metrics).metrics() for p in m.gauge.data_points]
        cells = [
            (int(r["TimeStamp"]), value)
            for r in csv_rows
            for key, value in r.items()
            if key not in METRIC_KEYS and value.strip()
        ]
        assert data_file.metric_points == len(cells) == len(points)
        assert Counter(int(p.time_unix_nano) // 10**9 for p in points) == Counter(
            second for second, _ in cells
        )
        nan_cells = sum(math.isnan(float(value)) for _, value in cells)
        assert sum(p.as_double == "NaN" for p in points) == nan_cells
        total += len(cells)
    assert total == 10 * 741 * 19 + 741 * 5  # 10 pods x 19 value columns, front_service x 5


def test_memory_is_in_bytes_and_cpu_in_cores() -> None:
    path = NEZHA / "rca_data" / DAY / "metric" / "ts-travel-service-64469b5b48-5rjvb_metric.csv"
    first = rows(path)[0]
    by_name = {m.name: m for m in shipped(file_for(path), Metrics).metrics()}
    memory, cpu = by_name["k8s.pod.memory.usage"], by_name["k8s.pod.cpu.usage"]
    assert (memory.unit, cpu.unit) == ("By", "{cpu}")
    assert memory.gauge.data_points[0].as_double == float(first["MemoryUsage(Mi)"]) * 2**20
    assert cpu.gauge.data_points[0].as_double == float(first["CpuUsage(m)"]) / 1000


def test_faults_are_the_upstream_list_in_unix_nanoseconds() -> None:
    upstream = json.loads((NEZHA / "rca_data" / DAY / f"{DAY}-fault_list.json").read_text())
    want = sorted(
        (int(f["inject_timestamp"]) * 10**9, f["inject_pod"], f["inject_type"])
        for hour in upstream.values()
        for f in hour
    )
    shipped_faults = json.loads(read_data_file(nezha().faults))["faults"]
    got = [(f["time_unix_nano"], f["k8s.pod.name"], f["type"]) for f in shipped_faults]
    assert got == want
    assert nezha().fault_count == len(want) == 17


def test_smartthings_traces_are_shipped_unchanged() -> None:
    zipkin = [d for d in read_manifest().datasets if d.files[0].format == "zipkin"]
    names = sorted(d.files[0].source.rsplit("/", 1)[1] for d in zipkin)
    assert names == ["smartthings-mobile-web-install.json", "smartthings-oauth-authorization.json"]
    for dataset in zipkin:
        (data_file,) = dataset.files
        original = (ZIPKIN / data_file.source.rsplit("/", 1)[1]).read_bytes()
        assert gzip.decompress(read_data_file(data_file.path)) == original
        assert data_file.zipkin_spans == len(json.loads(original))


def test_the_converter_reproduces_the_shipped_files(tmp_path: Path) -> None:
    out = tmp_path / "data"
    script = REPO / "scripts" / "convert_nezha.py"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--nezha",
            str(NEZHA),
            "--zipkin",
            str(ZIPKIN),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    assert "spans 21669" in done.stdout
    shipped_root = REPO / "src" / "coremetry" / "demo" / "data"
    made = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert made == sorted(
        p.relative_to(shipped_root) for p in shipped_root.rglob("*") if p.is_file()
    )
    for relative in made:  # gzip'd files compared by content: zlib builds may pack differently
        fresh, kept = (out / relative).read_bytes(), (shipped_root / relative).read_bytes()
        if relative.suffix == ".gz":
            fresh, kept = gzip.decompress(fresh), gzip.decompress(kept)
        assert fresh == kept, relative
