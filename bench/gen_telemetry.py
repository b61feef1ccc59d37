"""Generate a benchmark telemetry store shaped like the Nezha TrainTicket data.

Run: ``python bench/gen_telemetry.py OUT.db [--spans 1000000] [--logs 1000000] [--hours 24]``
(``--days 7`` instead of ``--hours``; ``--nezha DIR`` for another copy of the Nezha data;
``--seed``; ``--big-traces 20``). The size is ``--spans`` and ``--logs`` (e.g. ``--spans
5000000 --logs 5000000 --days 7``: issue 15's store at scale); metric points keep the demo's
density whatever the size (per pod every 60 s, per service every 30/60 s, over the range).

Not uniform noise: every trace is a replay of a *real* Nezha trace (``tests/data/nezha``:
339 traces, 21,669 spans of the TrainTicket microservices): its tree, services, operation
names and each span's offset and duration, scaled by one log-normal factor per trace (so the
duration distribution keeps its shape and its long tail) with a little per-span jitter, under
fresh ids and a start time drawn over the last ``--hours`` hours (busier by day than by night).
On top of the real shapes, what Nezha does not record:

- span kinds: roots and spans whose parent is in another service are SERVER, ``HTTP GET/POST``
  and SQL operations are CLIENT, the rest INTERNAL; a few attributes of the matching OTel
  semantic conventions (``http.route``, ``http.request.method``, ``db.system``, ...);
- resource attributes (``service.name``, ``service.version``, ``k8s.pod.name``, ...), with a
  deploy (new version, new pod) of four services a third and two thirds of the way through;
- errors: 1 % of traces fail at a random span, the error propagating to its ancestors, and
  three 10-minute fault windows in which one service fails 30 % of its spans and is 4x slower
  (as the injected network delays of the Nezha day);
- ``--big-traces`` traces of at least 1,000 spans (a gateway root over five replayed large
  traces), for ``get_trace`` of a big trace.

Records are written in time order (trace starts are drawn, sorted, then replayed), as an
OTLP receiver gets them, so that the rows of one hour sit together on disk as they would.

Log records are the Nezha TrainTicket log lines (``tests/data/nezha/.../log``: 2,169 lines,
INFO/WARN/ERROR) of the same service, with their UUIDs, numbers and dates replaced by fresh
ones so the vocabulary grows as in real logs, attached to generated spans of that service
(trace and span ids set, time inside the span); ERROR spans prefer WARN/ERROR lines.

Metric points: per pod ``container.cpu.usage`` (%) and ``container.memory.usage`` (MiB) every
60 s replaying the Nezha per-pod metric rows, a cumulative ``http.server.request.count``
counter per service every 30 s, and a delta ``http.server.request.duration`` histogram (ms)
per service every 60 s.

Writes go through ``open_sqlite_store`` (the real write path) in batches of ``--batch``
records. A manifest ``OUT.db.json`` records the counts, the time range, the ids of the big
traces and a few sample ids for ``bench/store_queries.py``.
"""

import argparse
import bisect
import csv
import gzip
import json
import math
import random
import re
import sys
import time
import uuid
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.store import (
    Attributes,
    HistogramValue,
    LogRecord,
    MetricPoint,
    Span,
    SpanKind,
    StatusCode,
    TelemetryBatch,
    open_sqlite_store,
)

SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE
REPO: Final = Path(__file__).resolve().parent.parent
NEZHA: Final = REPO / "tests" / "data" / "nezha"
"""The Nezha TrainTicket minutes the demo ships, carried in the repository (``--nezha``)."""
POD_SUFFIX: Final = re.compile(r"-[0-9a-f]{8,10}-[0-9a-z]{5}$")
LEVELS: Final = {"DEBUG": 5, "INFO": 9, "WARN": 13, "ERROR": 17}
HISTOGRAM_BOUNDS: Final = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0]


@dataclass
class TemplateSpan:
    index: int
    parent: int  # -1 for the root
    service: str
    pod: str
    operation: str
    offset_ns: int  # start minus the trace's start
    duration_ns: int


@dataclass
class Template:
    spans: list[TemplateSpan]


def service_of(pod: str) -> str:
    return POD_SUFFIX.sub("", pod)


def load_templates(nezha: Path) -> list[Template]:
    rows: list[dict[str, str]] = []
    for path in sorted(nezha.glob("*/2023-01-30/trace/*.csv.gz")):
        with gzip.open(path, "rt", newline="") as f:
            rows.extend(csv.DictReader(f))
    by_trace: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_trace[row["TraceID"]].append(row)
    templates: list[Template] = []
    for trace_rows in by_trace.values():
        trace_rows.sort(key=lambda r: int(r["StartTimeUnixNano"]))
        start = int(trace_rows[0]["StartTimeUnixNano"])
        index = {r["SpanID"]: i for i, r in enumerate(trace_rows)}
        spans = [
            TemplateSpan(
                index=i,
                parent=index.get(r["ParentID"], -1),
                service=service_of(r["PodName"]),
                pod=r["PodName"],
                operation=r["OperationName"],
                offset_ns=int(r["StartTimeUnixNano"]) - start,
                duration_ns=max(1000, int(r["EndTimeUnixNano"]) - int(r["StartTimeUnixNano"])),
            )
            for i, r in enumerate(trace_rows)
        ]
        templates.append(Template(spans=spans))
    return templates


def load_log_lines(nezha: Path) -> dict[str, list[tuple[str, str]]]:
    """Per service: (level, message) of each Nezha log line (time, ids stripped)."""
    lines: dict[str, list[tuple[str, str]]] = defaultdict(list)
    pattern = re.compile(
        r"^\S+\s+(?P<level>[A-Z]+)\s+(?P<logger>\S+)\s+TraceID: \S+ SpanID: \S+ (?P<msg>.*)$", re.S
    )
    for path in sorted(nezha.glob("rca_data/2023-01-30/log/*.csv.gz")):
        with gzip.open(path, "rt", newline="") as f:
            for row in csv.DictReader(f):
                text = json.loads(row["Log"])["log"].strip()
                match = pattern.match(text)
                if match is None:
                    continue
                level = match["level"]
                lines[service_of(row["PodName"])].append(
                    (level, f"{level} {match['logger']} {match['msg']}")
                )
    return lines


def load_pod_metrics(nezha: Path) -> dict[str, list[tuple[float, float]]]:
    """Per pod: (cpu %, memory MiB) of each Nezha metric row."""
    out: dict[str, list[tuple[float, float]]] = {}
    for path in sorted(nezha.glob("rca_data/2023-01-30/metric/ts-*_metric.csv.gz")):
        with gzip.open(path, "rt", newline="") as f:
            rows = list(csv.DictReader(f))
        out[service_of(rows[0]["PodName"])] = [
            (float(r["CpuUsageRate(%)"]), float(r["MemoryUsage(Mi)"])) for r in rows
        ]
    return out


UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NUMBER: Final = re.compile(r"(?<![A-Za-z])\d{2,}")


def refresh(message: str, rng: random.Random) -> str:
    """The message with fresh UUIDs and numbers (same shape, new values)."""
    message = UUID.sub(lambda _: str(uuid.UUID(int=rng.getrandbits(128), version=4)), message)
    return NUMBER.sub(
        lambda m: str(rng.randrange(10 ** (len(m.group()) - 1), 10 ** len(m.group()))), message
    )


class Generator:
    def __init__(self, args: argparse.Namespace) -> None:
        nezha = Path(args.nezha)
        self.rng = random.Random(args.seed)
        self.templates = load_templates(nezha)
        self.log_lines = load_log_lines(nezha)
        self.pod_metrics = load_pod_metrics(nezha)
        self.hours = args.hours
        self.end = (time.time_ns() // MINUTE) * MINUTE
        self.start = self.end - int(args.hours * HOUR)
        services = sorted({s.service for t in self.templates for s in t.spans})
        self.services = services
        self.pods = {s.service: s.pod for t in self.templates for s in t.spans}
        # Deploys: four services get a new version (and pod) a third and two thirds in.
        deployed = self.rng.sample(services, 4)
        span = self.end - self.start
        self.deploys = {
            name: [self.start + span // 3 * (k + 1) for k in range(2)] for name in deployed
        }
        # Fault windows: (service, start, end).
        self.faults = [
            (self.rng.choice(services), w, w + 10 * MINUTE)
            for w in sorted(
                self.rng.randrange(self.start, self.end - 10 * MINUTE) for _ in range(3)
            )
        ]
        self.resources: dict[tuple[str, int], Attributes] = {}

    # -- traces ---------------------------------------------------------------------------

    def resource(self, service: str, at: int) -> Attributes:
        generation = bisect.bisect_right(self.deploys.get(service, []), at)
        key = (service, generation)
        found = self.resources.get(key)
        if found is None:
            pod = self.pods.get(service, service)
            if generation:
                pod = (
                    POD_SUFFIX.sub("", pod)
                    + f"-{self.rng.getrandbits(36):09x}-{self.rng.getrandbits(20):05x}"
                )
            found = {
                "service.name": service,
                "service.version": f"1.{generation}.{len(service) % 7}",
                "service.namespace": "train-ticket",
                "k8s.namespace.name": "train-ticket",
                "k8s.pod.name": pod,
                "host.name": f"node-{zlib.crc32(service.encode()) % 4}",
                "telemetry.sdk.language": "java",
                "telemetry.sdk.name": "opentelemetry",
                "telemetry.sdk.version": "1.22.0",
            }
            self.resources[key] = found
        return found

    def fault_at(self, service: str, at: int) -> bool:
        return any(s == service and a <= at < b for s, a, b in self.faults)

    def draw_start(self) -> int:
        # Busier by day: accept-reject on a daily sine.
        while True:
            t = self.rng.randrange(self.start, self.end)
            hour = (t // HOUR) % 24
            if self.rng.random() < 0.55 + 0.45 * math.sin(math.pi * (hour - 6) / 12) ** 2:
                return t

    def replay(self, template: Template, start: int) -> list[Span]:
        rng = self.rng
        trace_id = f"{rng.getrandbits(128):032x}"
        ids = [f"{rng.getrandbits(64) | 1:016x}" for _ in template.spans]
        scale = math.exp(rng.gauss(0.0, 0.35))
        slow = {s.service for s in template.spans if self.fault_at(s.service, start)}
        errors: set[int] = set()
        failing = [s.index for s in template.spans if s.service in slow and rng.random() < 0.3]
        if rng.random() < 0.01:
            failing.append(rng.randrange(len(template.spans)))
        for index in failing:  # an error propagates to every ancestor
            while index >= 0 and index not in errors:
                errors.add(index)
                index = template.spans[index].parent
        spans: list[Span] = []
        for s in template.spans:
            factor = scale * math.exp(rng.gauss(0.0, 0.1)) * (4.0 if s.service in slow else 1.0)
            begin = start + int(s.offset_ns * scale)
            duration = max(1000, int(s.duration_ns * factor))
            parent = template.spans[s.parent] if s.parent >= 0 else None
            kind, attributes = self.kind_and_attributes(s, parent, s.index in errors)
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=ids[s.index],
                    parent_span_id=ids[s.parent] if s.parent >= 0 else "",
                    service_name=s.service,
                    name=s.operation,
                    kind=kind,
                    start_time_unix_nano=begin,
                    end_time_unix_nano=begin + duration,
                    status_code=StatusCode.ERROR if s.index in errors else StatusCode.UNSET,
                    status_message="Internal Server Error" if s.index in errors else "",
                    attributes=attributes,
                    resource_attributes=self.resource(s.service, begin),
                    scope_name="io.opentelemetry.spring-webmvc-6.0",
                )
            )
        return spans

    def kind_and_attributes(
        self, s: TemplateSpan, parent: TemplateSpan | None, error: bool
    ) -> tuple[SpanKind, Attributes]:
        op = s.operation
        if op.startswith("HTTP "):
            return SpanKind.CLIENT, {
                "http.request.method": op.split()[1],
                "server.address": "gateway" if parent is None else s.service,
                "http.response.status_code": 500 if error else 200,
                "network.protocol.version": "1.1",
            }
        if op.split(" ")[0] in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            return SpanKind.CLIENT, {
                "db.system": "mysql",
                "db.operation.name": op.split(" ")[0],
                "db.collection.name": op.split(" ")[-1],
                "server.address": "mysql",
            }
        if parent is None or parent.service != s.service:
            attributes: Attributes = {"http.request.method": "POST" if "create" in op else "GET"}
            if op.startswith("/"):
                attributes["http.route"] = op
                attributes["url.scheme"] = "http"
            attributes["http.response.status_code"] = 500 if error else 200
            return SpanKind.SERVER, attributes
        return SpanKind.INTERNAL, {"code.function": op.split(".")[-1]} if "." in op else {}

    def big_trace(self, start: int) -> list[Span]:
        large: list[Template] = []
        for template in sorted(self.templates, key=lambda t: -len(t.spans)):
            if sum(len(t.spans) for t in large) >= 1000:
                break
            large.append(template)
        root_id = f"{self.rng.getrandbits(64) | 1:016x}"
        spans: list[Span] = []
        offset = 0
        for template in large:
            part = self.replay(template, start + 1_000_000 + offset)
            offset += max(s.end_time_unix_nano for s in part) - part[0].start_time_unix_nano
            spans.extend(part)
        trace_id = spans[0].trace_id
        total = offset + 2_000_000
        fixed = [
            msgspec.structs.replace(
                s, trace_id=trace_id, parent_span_id=s.parent_span_id or root_id
            )
            for s in spans
        ]
        root = Span(
            trace_id=trace_id,
            span_id=root_id,
            service_name="ts-ui-dashboard",
            name="POST /api/v1/batch/rebook",
            kind=SpanKind.SERVER,
            start_time_unix_nano=start,
            end_time_unix_nano=start + total,
            attributes={"http.route": "/api/v1/batch/rebook", "http.request.method": "POST"},
            resource_attributes=self.resource("ts-ui-dashboard", start),
        )
        return [root, *fixed]

    # -- logs -----------------------------------------------------------------------------

    def logs_for(self, spans: list[Span], per_span: float) -> list[LogRecord]:
        rng = self.rng
        out: list[LogRecord] = []
        for span in spans:
            lines = self.log_lines.get(span.service_name)
            if not lines:
                continue
            count = int(per_span) + (1 if rng.random() < per_span - int(per_span) else 0)
            for _ in range(count):
                if span.status_code == StatusCode.ERROR:
                    bad = [line for line in lines if line[0] != "INFO"] or lines
                    level, message = rng.choice(bad)
                else:
                    level, message = rng.choice(lines)
                at = span.start_time_unix_nano + rng.randrange(max(1, span.duration_ns))
                out.append(
                    LogRecord(
                        time_unix_nano=at,
                        observed_time_unix_nano=at + rng.randrange(1_000_000, 50_000_000),
                        severity_number=LEVELS.get(level, 9),
                        severity_text=level,
                        body=refresh(message, rng),
                        service_name=span.service_name,
                        trace_id=span.trace_id,
                        span_id=span.span_id,
                        attributes={
                            "log.iostream": "stdout",
                            "thread.name": f"http-nio-8080-exec-{rng.randrange(1, 11)}",
                        },
                        resource_attributes=span.resource_attributes,
                        scope_name="org.springframework",
                    )
                )
        return out

    # -- metrics --------------------------------------------------------------------------

    def metrics(self) -> Iterator[MetricPoint]:
        for service in self.services:
            rows = self.pod_metrics.get(service) or [(5.0, 400.0)]
            total = 0.0
            for k, t in enumerate(range(self.start, self.end, 30 * SECOND)):
                resource = self.resource(service, t)
                labels: Attributes = {"k8s.pod.name": str(resource["k8s.pod.name"])}
                if k % 2 == 0:
                    cpu, memory = rows[(k // 2) % len(rows)]
                    for name, unit, value in (
                        ("container.cpu.usage", "%", cpu),
                        ("container.memory.usage", "MiB", memory),
                    ):
                        yield MetricPoint(
                            name=name,
                            type="gauge",
                            unit=unit,
                            service_name=service,
                            time_unix_nano=t,
                            value=value,
                            attributes=labels,
                            resource_attributes=resource,
                        )
                    counts = [
                        self.rng.randrange(0, 30 if i < 5 else 4)
                        for i in range(len(HISTOGRAM_BOUNDS) + 1)
                    ]
                    yield MetricPoint(
                        name="http.server.request.duration",
                        type="histogram",
                        unit="ms",
                        service_name=service,
                        time_unix_nano=t,
                        start_time_unix_nano=t - MINUTE,
                        histogram=HistogramValue(
                            count=sum(counts),
                            sum=float(
                                sum(
                                    c * b
                                    for c, b in zip(
                                        counts, [*HISTOGRAM_BOUNDS, 8000.0], strict=True
                                    )
                                )
                            ),
                            bucket_counts=counts,
                            explicit_bounds=HISTOGRAM_BOUNDS,
                        ),
                        attributes={"http.route": "/api/v1"},
                        resource_attributes=resource,
                        temporality="delta",
                    )
                total += self.rng.randrange(0, 200)
                yield MetricPoint(
                    name="http.server.request.count",
                    type="sum",
                    unit="{request}",
                    service_name=service,
                    time_unix_nano=t,
                    start_time_unix_nano=self.start,
                    value=total,
                    attributes={"http.route": "/api/v1"},
                    resource_attributes=resource,
                    is_monotonic=True,
                    temporality="cumulative",
                )


async def generate(args: argparse.Namespace) -> None:
    out = Path(args.out)
    for suffix in ("", "-wal", "-shm", ".json"):
        await trio.Path(f"{out}{suffix}").unlink(missing_ok=True)
    gen = Generator(args)
    mean = sum(len(t.spans) for t in gen.templates) / len(gen.templates)
    loggable = sum(1 for t in gen.templates for s in t.spans if s.service in gen.log_lines)
    per_span = args.logs / max(1, args.spans * loggable / sum(len(t.spans) for t in gen.templates))
    print(
        f"templates: {len(gen.templates)} Nezha traces (mean {mean:.0f} spans), "
        f"{len(gen.services)} services, {sum(map(len, gen.log_lines.values()))} log lines; "
        f"{per_span:.2f} log records per span of a logging service",
        file=sys.stderr,
    )
    written = Counter[str]()
    big_ids: list[str] = []
    sample_traces: list[str] = []
    started = time.perf_counter()
    async with open_sqlite_store(out, retention_days=0) as store:

        async def flush(
            spans: list[Span], logs: list[LogRecord], points: list[MetricPoint]
        ) -> None:
            for i in range(0, max(len(spans), len(logs), len(points)), args.batch):
                result = await store.write(
                    TelemetryBatch(
                        spans=spans[i : i + args.batch],
                        logs=logs[i : i + args.batch],
                        metrics=points[i : i + args.batch],
                    )
                )
                written["spans"] += result.spans_written
                written["logs"] += result.logs_written
                written["points"] += result.metric_points_written

        # Written in time order, as a receiver gets them: trace starts are drawn first, sorted,
        # then each trace is replayed; the big traces take their turn at their own times.
        # Templates first (until their spans make the count), so the last hours get traffic.
        chosen: list[int] = []
        total = sum(len(gen.big_trace(gen.start)) for _ in range(min(1, args.big_traces)))
        total *= args.big_traces
        while total < args.spans:
            chosen.append(gen.rng.randrange(len(gen.templates)))
            total += len(gen.templates[chosen[-1]].spans)
        count = len(chosen)
        plan = [(gen.draw_start(), which) for which in chosen]
        plan += [
            (gen.start + (gen.end - gen.start) * (k + 1) // (args.big_traces + 1), -1)
            for k in range(args.big_traces)
        ]
        plan.sort()
        every = max(1, count // 200)
        spans_buffer: list[Span] = []
        for n, (at, which) in enumerate(plan):
            if written["spans"] + len(spans_buffer) >= args.spans:
                break
            if which < 0:
                spans = gen.big_trace(at)
                big_ids.append(spans[0].trace_id)
            else:
                spans = gen.replay(gen.templates[which], at)
                if n % every == 0:
                    sample_traces.append(spans[0].trace_id)
            spans_buffer.extend(spans[: args.spans - written["spans"] - len(spans_buffer)])
            if len(spans_buffer) >= 50_000:
                logs = gen.logs_for(spans_buffer, per_span)
                logs = logs[: max(0, args.logs - written["logs"])]
                await flush(spans_buffer, logs, [])
                spans_buffer = []
                rate = written["spans"] / (time.perf_counter() - started)
                print(
                    f"  {written['spans']:,} spans, {written['logs']:,} logs ({rate:,.0f} spans/s)",
                    file=sys.stderr,
                )
        logs = gen.logs_for(spans_buffer, per_span)[: max(0, args.logs - written["logs"])]
        await flush(spans_buffer, logs, [])
        # Top up the logs to the exact count from random spans of the sampled traces.
        while written["logs"] < args.logs:
            trace = (await store.get_trace(gen.rng.choice(sample_traces), limit=1000)).items
            extra = gen.logs_for(trace, per_span)[: args.logs - written["logs"]]
            await flush([], extra, [])
        # Streamed in chunks: a week of the demo's metric density is millions of points.
        points: list[MetricPoint] = []
        for point in gen.metrics():
            points.append(point)
            if len(points) >= 50_000:
                await flush([], [], points)
                points = []
        await flush([], [], points)
        stats = await store.statistics()
    elapsed = time.perf_counter() - started
    manifest = {
        "spans": stats.span_count,
        "logs": stats.log_count,
        "metric_points": stats.metric_point_count,
        "start_unix_nano": gen.start,
        "end_unix_nano": gen.end,
        "hours": args.hours,
        "big_traces": big_ids,
        "sample_traces": sample_traces,
        "services": gen.services,
        "faults": gen.faults,
        "seed": args.seed,
        "generated_in_s": round(elapsed, 1),
    }
    await trio.Path(f"{out}.json").write_text(json.dumps(manifest, indent=1))
    print(
        f"wrote {stats.span_count:,} spans, {stats.log_count:,} log records, "
        f"{stats.metric_point_count:,} metric points to {out} "
        f"({(stats.size_bytes or 0) / 2**20:,.0f} MiB) in {elapsed:,.0f} s",
        file=sys.stderr,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="the database file to create (replaced if present)")
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--logs", type=int, default=1_000_000)
    parser.add_argument("--hours", type=float, default=24.0, help="time range, ending now")
    parser.add_argument("--days", type=float, help="time range in days (overrides --hours)")
    parser.add_argument("--big-traces", type=int, default=20, help="traces of >= 1,000 spans")
    parser.add_argument("--batch", type=int, default=5000, help="records per write")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nezha", default=str(NEZHA), help="the Nezha data (CSVs gzip-compressed)")
    args = parser.parse_args()
    if args.days is not None:
        args.hours = args.days * 24
    trio.run(generate, args)


if __name__ == "__main__":
    main()
