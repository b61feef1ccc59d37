"""OTLP protobuf ingest throughput on one core: decode + ``store.write``, vs protobuf parse alone.

Run: ``python bench/otlp_ingest.py [--spans N] [--batch B] [--repeat R] [--cpu C] [--json PATH]``.

Issue 5's line: OTLP protobuf ingest >= 30,000 spans/s on one core. Under one ``trio.run``,
pinned to one core (``--cpu``, default 0; the store's worker thread shares it), this script
builds a corpus of ``ExportTraceServiceRequest`` bodies from a real trace's shapes -- the
SmartThings Zipkin trace shipped with the demo (957 spans, 16 services, real names, tags and
parent/child structure), copied with fresh trace and span ids until ``--spans`` spans, each
request one service's batch of up to ``--batch`` spans (what an SDK's batch processor sends) --
and times, best of ``--repeat`` runs, case by case:

- (1) **baseline**: ``ExportTraceServiceRequest.FromString(body)`` for every body -- the
  official protobuf parser (upb) alone, the least any Python OTLP receiver pays;
- (2) decode: :func:`coremetry.ingest.otlp.decode_traces_protobuf` (parse + store records);
- (3) **ingest**: (2) + ``await store.write(batch)`` per request into a fresh embedded store
  (SQLite, WAL, retention off) -- the headline, against the 30,000 spans/s target;
- (4) receiver: one ``POST /v1/traces`` per body through the receiver's ASGI handler
  (admission, authentication hook, body read, decode, write, the protobuf answer), in-process,
  no socket.

Every run checks its result: (3) and (4) must leave exactly the corpus's span count in the
store, (4) must answer 200 with no ``partial_success``; otherwise the script prints ``ERROR``
and exits 1. The PASS/FAIL line is informational (exit 0 either way). Compare the ``x
baseline`` ratios across machines, not the absolute figures; see ``bench/README.md``.
"""

import argparse
import gc
import gzip
import hashlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio
from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent, ConnectionState, HTTPScope
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

import coremetry.demo
from coremetry.http_edge import Headers, HttpPolicy
from coremetry.ingest.otlp import decode_traces_protobuf
from coremetry.ingest.receiver import OtlpReceiver
from coremetry.ingest.zipkin import decode_zipkin
from coremetry.mcp import Caller
from coremetry.store import Span
from coremetry.store.sqlite import open_sqlite_store

TARGET_SPANS_PER_S: Final = 30_000
SOURCE: Final = (
    Path(coremetry.demo.__file__).parent
    / "data"
    / "zipkin"
    / "smartthings-mobile-web-install.json.gz"
)
EDITOR: Final = Caller(subject="bench", role="editor", kind="service_token")


@dataclass
class Corpus:
    bodies: list[bytes]
    spans: int
    services: int
    attributes_per_span: float

    @property
    def size_bytes(self) -> int:
        return sum(len(body) for body in self.bodies)


def _id(seed: str, size: int) -> bytes:
    return hashlib.blake2b(seed.encode(), digest_size=size).digest()


def _value(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def build_corpus(total_spans: int, batch: int, *, interleaved: bool = False) -> Corpus:
    """Copies of the real trace, fresh ids per copy, grouped per service into requests.

    The requests come service by service (every request of the first service, then the
    next's: a child's parent in another service often comes tens of thousands of spans
    later), or ``interleaved``: one request of each service in turn, as concurrent
    exporters send them (a parent comes a few requests after its child).
    """
    template: list[Span] = decode_zipkin(gzip.decompress(SOURCE.read_bytes())).batch.spans
    by_service: dict[str, list[trace_pb2.Span]] = {}
    made = 0
    copy = 0
    while made < total_spans:
        for span in template:
            if made == total_spans:
                break
            out = trace_pb2.Span(
                trace_id=_id(f"{copy}/{span.trace_id}", 16),
                span_id=_id(f"{copy}/{span.span_id}", 8),
                parent_span_id=_id(f"{copy}/{span.parent_span_id}", 8)
                if span.parent_span_id
                else b"",
                name=span.name,
                kind=trace_pb2.Span.SpanKind.Value(f"SPAN_KIND_{span.kind.name}"),
                start_time_unix_nano=span.start_time_unix_nano + copy * 1_000_000,
                end_time_unix_nano=span.end_time_unix_nano + copy * 1_000_000,
                attributes=[KeyValue(key=k, value=_value(v)) for k, v in span.attributes.items()],
            )
            if span.status_code:
                out.status.code = trace_pb2.Status.StatusCode.Value(
                    f"STATUS_CODE_{span.status_code.name}"
                )
                out.status.message = span.status_message
            by_service.setdefault(span.service_name, []).append(out)
            made += 1
        copy += 1
    per_service: list[list[bytes]] = []
    for service, spans in sorted(by_service.items()):
        bodies: list[bytes] = []
        per_service.append(bodies)
        for start in range(0, len(spans), batch):
            request = ExportTraceServiceRequest()
            resource_spans = request.resource_spans.add()
            for key, value in (
                ("service.name", service),
                ("service.version", "2018.11.30"),
                ("host.name", f"{service}-7d9f8b6c5-x2k4q"),
                ("telemetry.sdk.language", "java"),
            ):
                resource_spans.resource.attributes.append(KeyValue(key=key, value=_value(value)))
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = "io.opentelemetry.zipkin"
            scope_spans.spans.extend(spans[start : start + batch])
            bodies.append(request.SerializeToString())
    if interleaved:
        longest = max(len(bodies) for bodies in per_service)
        bodies = [b[i] for i in range(longest) for b in per_service if i < len(b)]
    else:
        bodies = [body for service_bodies in per_service for body in service_bodies]
    attributes = sum(len(s.attributes) for s in template) / len(template)
    return Corpus(
        bodies=bodies, spans=made, services=len(by_service), attributes_per_span=attributes
    )


@dataclass
class Case:
    label: str
    runs_s: list[float] = field(default_factory=list)

    def best_rate(self, spans: int) -> float:
        return spans / min(self.runs_s)

    def median_rate(self, spans: int) -> float:
        ordered = sorted(self.runs_s)
        return spans / ordered[len(ordered) // 2]


class BenchError(Exception):
    """A wrong result: the script exits 1."""


def run_parse(corpus: Corpus) -> float:
    started = time.perf_counter()
    for body in corpus.bodies:
        ExportTraceServiceRequest.FromString(body)
    return time.perf_counter() - started


def run_decode(corpus: Corpus) -> float:
    started = time.perf_counter()
    spans = 0
    for body in corpus.bodies:
        spans += len(decode_traces_protobuf(body).batch.spans)
    elapsed = time.perf_counter() - started
    if spans != corpus.spans:
        raise BenchError(f"decode produced {spans} spans, expected {corpus.spans}")
    return elapsed


async def run_ingest(
    corpus: Corpus, directory: Path, *, check: bool = True
) -> tuple[float, int | None]:
    """Case (3): decode and ``store.write`` every body; (seconds, the store's size in bytes).

    Raises BenchError when ``check`` and the store does not hold every span of the corpus.
    """
    async with open_sqlite_store(directory / "telemetry.db", retention_days=0) as store:
        started = time.perf_counter()
        for body in corpus.bodies:
            await store.write(decode_traces_protobuf(body).batch)
        elapsed = time.perf_counter() - started
        stats = await store.statistics()
    if check and stats.span_count != corpus.spans:
        raise BenchError(f"the store holds {stats.span_count} spans, expected {corpus.spans}")
    return elapsed, stats.size_bytes


class _Answer:
    """One request's ASGI ``receive`` (the body at once) and what ``send`` got."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.status = 0
        self.sent: list[bytes] = []

    async def receive(self) -> ASGIReceiveEvent:
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, event: ASGISendEvent) -> None:
        if event["type"] == "http.response.start":
            self.status = event["status"]
        elif event["type"] == "http.response.body":
            self.sent.append(event.get("body", b""))


async def run_receiver(corpus: Corpus, directory: Path) -> float:
    async def editor(headers: Headers) -> Caller:
        return EDITOR

    async with open_sqlite_store(directory / "telemetry.db", retention_days=0) as store:
        receiver = OtlpReceiver(store, HttpPolicy(), authenticate=editor, max_body_bytes=64 << 20)
        scope: HTTPScope = {
            "type": "http",
            "asgi": {"spec_version": "2.3", "version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/traces",
            "raw_path": b"/v1/traces",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/x-protobuf"),
                (b"authorization", b"Bearer cmk_bench"),
            ],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8080),
            "extensions": {},
            "state": ConnectionState({}),
        }
        answers: list[_Answer] = []
        started = time.perf_counter()
        for body in corpus.bodies:
            answer = _Answer(body)
            await receiver(scope, answer.receive, answer.send)
            answers.append(answer)
        elapsed = time.perf_counter() - started
        stats = await store.statistics()
    for answer in answers:
        response = ExportTraceServiceResponse.FromString(b"".join(answer.sent))
        if answer.status != 200 or response.HasField("partial_success"):
            raise BenchError(f"the receiver answered {answer.status} {response}")
    if stats.span_count != corpus.spans:
        raise BenchError(f"the store holds {stats.span_count} spans, expected {corpus.spans}")
    return elapsed


def pin(cpu: int) -> str:
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:
            return f"not pinned ({exc})"
        return f"pinned to cpu {cpu}"
    return "not pinned (no sched_setaffinity)"


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    """Build the corpus, time every case, print the table; returns the figures."""
    corpus = build_corpus(args.spans, args.batch)
    rss_after_corpus = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"corpus: {corpus.spans:,} spans in {len(corpus.bodies)} requests of <= {args.batch} "
        f"spans, {corpus.services} services, {corpus.attributes_per_span:.1f} attributes/span, "
        f"{corpus.size_bytes / 2**20:.1f} MiB protobuf (SmartThings trace shapes)"
    )
    cases = [
        Case("(1) baseline: protobuf parse alone"),
        Case("(2) decode: parse + store records"),
        Case("(3) ingest: decode + store.write"),
        Case("(4) receiver: POST /v1/traces handler"),
    ]
    size_bytes: int | None = None
    run_decode(corpus)  # warm-up (imports, caches)
    for _ in range(args.repeat):
        cases[0].runs_s.append(run_parse(corpus))
        cases[1].runs_s.append(run_decode(corpus))
        with tempfile.TemporaryDirectory(prefix="otlp-bench-") as tmp:
            elapsed, size_bytes = await run_ingest(corpus, Path(tmp))
            cases[2].runs_s.append(elapsed)
        with tempfile.TemporaryDirectory(prefix="otlp-bench-") as tmp:
            cases[3].runs_s.append(await run_receiver(corpus, Path(tmp)))
    baseline = cases[0].best_rate(corpus.spans)
    print(f"{'case':40} {'spans/s':>10} {'median':>10} {'µs/span':>8} {'x baseline':>11}")
    for case in cases:
        best = case.best_rate(corpus.spans)
        print(
            f"{case.label:40} {best:10,.0f} {case.median_rate(corpus.spans):10,.0f} "
            f"{1e6 / best:8.2f} {baseline / best:10.1f}x"
        )
    decode_us = 1e6 / cases[1].best_rate(corpus.spans)
    ingest_us = 1e6 / cases[2].best_rate(corpus.spans)
    print(
        f"per span in (3): decode {decode_us:.1f} µs ({decode_us / ingest_us:.0%}), "
        f"store.write {ingest_us - decode_us:.1f} µs ({1 - decode_us / ingest_us:.0%})"
    )
    if size_bytes is not None:
        print(
            f"database after (3): {size_bytes / 2**20:.1f} MiB for {corpus.spans:,} spans = "
            f"{size_bytes / 2**20 * 1_000_000 / corpus.spans:.0f} MiB per million spans"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB (after building the corpus: {rss_after_corpus:.0f} MiB)")
    ingest = cases[2].best_rate(corpus.spans)
    verdict = "PASS" if ingest >= TARGET_SPANS_PER_S else "FAIL"
    print(f"OTLP protobuf ingest: {ingest:,.0f} spans/s on one core (target >= 30,000): {verdict}")
    return {
        "spans": corpus.spans,
        "requests": len(corpus.bodies),
        "cases": {
            c.label: {"runs_s": c.runs_s, "best_spans_per_s": c.best_rate(corpus.spans)}
            for c in cases
        },
        "database_bytes": size_bytes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--spans", type=int, default=100_000, help="spans per run (default 100000)")
    parser.add_argument("--batch", type=int, default=512, help="spans per request (default 512)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case (best counts)")
    parser.add_argument("--cpu", type=int, default=0, help="the core to pin to (default 0)")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args(argv)
    print(f"{platform.python_implementation()} {sys.version.split()[0]}, {pin(args.cpu)}")
    # The garbage collector tuned as `coremetry serve` tunes it (cli._tune_gc): the server's
    # ingest path runs with these thresholds.
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        results = trio.run(main_async, args)
    except BenchError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    if args.json:
        figures = {"machine": platform.platform(), "python": sys.version.split()[0], **results}
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
