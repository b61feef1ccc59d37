"""RED figures and log counts over any window equal the raw records' (percentiles within error).

A backend may answer ``services``, ``operations``, ``service_edges`` and ``deploys`` from
pre-aggregated roll-ups (per-minute buckets, latency sketches); this check holds every count,
time and percentile of those answers to the same figure computed from the raw spans, over
windows aligned to minutes and hours and not aligned at all, shorter than a minute and as long
as the data, ending after the newest span or just before or after one, with children written
before their parents, spans written twice, and after a retention pass whose cutoff falls inside
a minute.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Sequence

from coremetry.store.interface import MAX_LIMIT, TelemetryStore, TimeRange
from coremetry.store.model import (
    Attributes,
    LogRecord,
    Span,
    SpanKind,
    StatusCode,
    TelemetryBatch,
)

from ._reference import _in_range, _is_entry, _nearest_rank
from ._support import HOUR, MINUTE, SECOND, MakeStore, _equal, _equal_red

_SERVICES = ("gateway", "orders", "stock", "ledger")


def _spans(base: int, rng: random.Random, *, hours: int = 20, traces: int = 900) -> list[Span]:
    """Traces over ``hours`` hours: gateway (SERVER root) -> orders (SERVER) -> stock / ledger.

    Durations log-normal from about a microsecond to seconds (some zero); 3 % errors;
    ``orders`` changes version halfway.
    """
    spans: list[Span] = []
    resources: dict[str, list[Attributes]] = {
        name: [{"service.name": name, "service.version": f"{name}-1"}] for name in _SERVICES
    }
    resources["orders"].append({"service.name": "orders", "service.version": "orders-2"})
    for t in range(traces):
        trace = f"{rng.getrandbits(128) | 1:032x}"
        start = base + rng.randrange(hours * HOUR)

        def span(
            service: str,
            name: str,
            kind: SpanKind,
            parent: str,
            at: int,
            *,
            trace: str = trace,
            t: int = t,
        ) -> str:
            span_id = f"{rng.getrandbits(64) | 1:016x}"
            duration = 0 if rng.random() < 0.02 else int(rng.lognormvariate(15, 2.5))
            version = resources[service][
                1 if len(resources[service]) > 1 and t >= traces // 2 else 0
            ]
            spans.append(
                Span(
                    trace_id=trace,
                    span_id=span_id,
                    parent_span_id=parent,
                    service_name=service,
                    name=name,
                    kind=kind,
                    start_time_unix_nano=at,
                    end_time_unix_nano=at + duration,
                    status_code=StatusCode.ERROR if rng.random() < 0.03 else StatusCode.OK,
                    resource_attributes=version,
                )
            )
            return span_id

        root = span("gateway", rng.choice(("GET /a", "GET /b")), SpanKind.SERVER, "", start)
        call = span("gateway", "POST orders", SpanKind.CLIENT, root, start + 1000)
        served = span("orders", "create", SpanKind.SERVER, call, start + 2000)
        for i in range(rng.randrange(0, 4)):
            callee = rng.choice(("stock", "ledger"))
            span(callee, f"{callee}.op{i % 2}", SpanKind.INTERNAL, served, start + 3000 + i)
        if t % 10 == 0:
            # A child that skews before its parent, across a minute boundary.
            span("ledger", "early", SpanKind.SERVER, served, start - MINUTE)
        if t % 25 == 0:
            # A child whose parent is never stored: never an edge.
            span("stock", "orphan", SpanKind.SERVER, f"{rng.getrandbits(64) | 1:016x}", start)
    return spans


def _expected_services(spans: Sequence[Span], window: TimeRange) -> list[tuple[object, ...]]:
    by_service: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if _in_range(s.start_time_unix_nano, window):
            by_service[s.service_name].append(s)
    rows: list[tuple[object, ...]] = []
    for name, group in by_service.items():
        entries = [s for s in group if _is_entry(s)]
        durations = [s.duration_ns for s in entries]
        rows.append(
            (
                name,
                len(group),
                len(entries),
                sum(1 for s in entries if s.status_code == StatusCode.ERROR),
                _nearest_rank(durations, 50),
                _nearest_rank(durations, 95),
                _nearest_rank(durations, 99),
                max(s.start_time_unix_nano for s in group),
                sorted({s.service_version for s in group} - {""}),
            )
        )
    rows.sort(key=lambda r: (-int(str(r[2])), str(r[0])))
    return rows


def _red(name: object, group: list[Span]) -> tuple[object, ...]:
    durations = [s.duration_ns for s in group]
    return (
        name,
        len(group),
        sum(1 for s in group if s.status_code == StatusCode.ERROR),
        _nearest_rank(durations, 50),
        _nearest_rank(durations, 95),
        _nearest_rank(durations, 99),
    )


def _expected_operations(
    spans: Sequence[Span], window: TimeRange, service: str
) -> list[tuple[object, ...]]:
    by_name: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.service_name == service and _in_range(s.start_time_unix_nano, window):
            by_name[s.name].append(s)
    rows = [_red(name, group) for name, group in by_name.items()]
    rows.sort(key=lambda r: (-int(str(r[1])), str(r[0])))
    return rows


def _expected_edges(
    spans: Sequence[Span], window: TimeRange, service: str | None
) -> list[tuple[object, ...]]:
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    calls: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for s in spans:
        parent = by_id.get((s.trace_id, s.parent_span_id))
        if (
            parent is not None
            and parent.service_name != s.service_name
            and _in_range(s.start_time_unix_nano, window)
            and (service is None or service in (parent.service_name, s.service_name))
        ):
            calls[(parent.service_name, s.service_name)].append(s)
    rows = [(caller, *_red(callee, group)) for (caller, callee), group in calls.items()]
    rows.sort(key=lambda r: (-int(str(r[2])), str(r[0]), str(r[1])))
    return rows


def _expected_deploys(spans: Sequence[Span], window: TimeRange) -> list[tuple[object, ...]]:
    seen: dict[tuple[str, str], list[int]] = defaultdict(list)
    for s in spans:
        if s.service_version and _in_range(s.start_time_unix_nano, window):
            seen[(s.service_name, s.service_version)].append(s.start_time_unix_nano)
    rows = [(n, v, min(t), max(t), len(t)) for (n, v), t in seen.items()]
    rows.sort(key=lambda r: (-r[2], r[0], r[1]))
    return [tuple(r) for r in rows]


def _logs(spans: Sequence[Span]) -> list[LogRecord]:
    """A log record for every third span, at its start, INFO/WARN/ERROR/FATAL in turn."""
    return [
        LogRecord(
            time_unix_nano=s.start_time_unix_nano + i,
            service_name=s.service_name,
            severity_number=(9, 13, 17, 21)[i % 4],
            body=f"record {i}",
            resource_attributes=s.resource_attributes,
        )
        for i, s in enumerate(spans[::3])
    ]


async def _compare_logs(
    store: TelemetryStore, logs: Sequence[LogRecord], window: TimeRange, what: str
) -> None:
    length = window.end_unix_nano - window.start_unix_nano
    for step in (length, 7 * MINUTE, HOUR + 1):
        counts: dict[str, dict[int, list[int]]] = defaultdict(dict)
        for r in logs:
            if _in_range(r.time_unix_nano, window):
                bucket = (r.time_unix_nano - window.start_unix_nano) // step
                at = window.start_unix_nano + bucket * step
                found = counts[r.service_name].setdefault(at, [0, 0, 0])
                found[0] += 1
                found[1] += 13 <= r.severity_number <= 16
                found[2] += r.severity_number >= 17
        series = await store.log_counts(window, step_ns=step, limit=MAX_LIMIT)
        _equal(
            [
                (
                    s.service_name,
                    [
                        (p.bucket_start_unix_nano, p.records, p.warn_records, p.error_records)
                        for p in s.points
                    ],
                )
                for s in series
            ],
            [
                (name, [(at, *values) for at, values in sorted(buckets.items())])
                for name, buckets in sorted(counts.items())
            ],
            f"log_counts(step={step}) over {what}",
        )


async def _compare(
    store: TelemetryStore, spans: Sequence[Span], window: TimeRange, what: str
) -> None:
    page = await store.services(window, limit=MAX_LIMIT)
    _equal_red(
        [
            (
                s.service_name,
                s.span_count,
                s.request_count,
                s.error_count,
                s.p50_duration_ns,
                s.p95_duration_ns,
                s.p99_duration_ns,
                s.last_seen_unix_nano,
                s.versions,
            )
            for s in page.items
        ],
        _expected_services(spans, window),
        (4, 5, 6),
        [s.percentile_relative_error for s in page.items],
        f"services over {what}",
    )
    for summary in page.items:
        alone = await store.services(window, limit=1, service_name=summary.service_name)
        _equal(
            (alone.items, alone.total),
            ([summary], 1),
            f"services(service_name={summary.service_name!r}) over {what}",
        )
    for service in ("gateway", "orders", "ledger"):
        ops = await store.operations(service, window, limit=MAX_LIMIT)
        _equal_red(
            [
                (
                    o.name,
                    o.span_count,
                    o.error_count,
                    o.p50_duration_ns,
                    o.p95_duration_ns,
                    o.p99_duration_ns,
                )
                for o in ops.items
            ],
            _expected_operations(spans, window, service),
            (3, 4, 5),
            [o.percentile_relative_error for o in ops.items],
            f"operations({service!r}) over {what}",
        )
    for one in (None, "orders"):
        edges = await store.service_edges(window, limit=MAX_LIMIT, service_name=one)
        _equal_red(
            [
                (
                    e.caller,
                    e.callee,
                    e.call_count,
                    e.error_count,
                    e.p50_duration_ns,
                    e.p95_duration_ns,
                    e.p99_duration_ns,
                )
                for e in edges
            ],
            _expected_edges(spans, window, one),
            (4, 5, 6),
            [e.percentile_relative_error for e in edges],
            f"service_edges(service_name={one!r}) over {what}",
        )
    deploys = await store.deploys(window, limit=MAX_LIMIT)
    _equal(
        [
            (d.service_name, d.version, d.first_seen_unix_nano, d.last_seen_unix_nano, d.span_count)
            for d in deploys
        ],
        _expected_deploys(spans, window),
        f"deploys over {what}",
    )


async def check_rollups_match_raw(make_store: MakeStore) -> None:
    """services/operations/edges/deploys over any window agree with the raw spans."""
    rng = random.Random(15)
    base = (time.time_ns() // HOUR - 22) * HOUR + 7 * MINUTE + 13 * SECOND
    spans = _spans(base, rng)
    logs = _logs(spans)
    # Written newest trace first and each batch reversed: children usually before parents,
    # often in an earlier batch; every 7th batch is written twice, the second time with some of
    # the next batch's spans (duplicates count once; a batch partly new).
    order = sorted(spans, key=lambda s: -s.start_time_unix_nano)
    batches = [order[i : i + 97][::-1] for i in range(0, len(order), 97)]
    async with make_store() as store:
        for index, batch in enumerate(batches):
            await store.write(TelemetryBatch(spans=batch, logs=logs[index :: len(batches)]))
            if index % 7 == 0:
                # Again, with the next batch's first spans: that batch is then partly new.
                ahead = batches[index + 1][:10] if index + 1 < len(batches) else []
                await store.write(
                    TelemetryBatch(spans=batch + ahead, logs=logs[index :: len(batches)])
                )
        first = base - 2 * MINUTE
        end = base + 21 * HOUR
        windows = {
            "all of it": TimeRange(start_unix_nano=first, end_unix_nano=end),
            "whole hours": TimeRange(
                start_unix_nano=base - base % HOUR + 2 * HOUR,
                end_unix_nano=base - base % HOUR + 9 * HOUR,
            ),
            "whole minutes": TimeRange(
                start_unix_nano=base - base % MINUTE + 5 * MINUTE,
                end_unix_nano=base - base % MINUTE + 185 * MINUTE,
            ),
            "under a minute": TimeRange(
                start_unix_nano=base + 3 * HOUR + 17 * SECOND,
                end_unix_nano=base + 3 * HOUR + 51 * SECOND,
            ),
        }
        for i in range(4):
            low = first + rng.randrange(18 * HOUR)
            windows[f"unaligned window {i}"] = TimeRange(
                start_unix_nano=low, end_unix_nano=low + rng.randrange(MINUTE, 10 * HOUR)
            )
        # Ends beside the data: a window ending after the newest span (as "the last N hours"
        # does) or starting before the oldest may be read across the empty stretch; one ending
        # just before or just after a span, in that span's minute, may not.
        starts = sorted(s.start_time_unix_nano for s in spans)
        oldest, newest = starts[0], starts[-1]
        windows["ending after the newest span"] = TimeRange(
            start_unix_nano=newest - 5 * HOUR - 17 * SECOND, end_unix_nano=newest + 1
        )
        windows["starting at the oldest span"] = TimeRange(
            start_unix_nano=oldest, end_unix_nano=oldest + 3 * HOUR + 7 * SECOND
        )
        windows["ending at the newest span"] = TimeRange(
            start_unix_nano=newest - 2 * HOUR, end_unix_nano=newest
        )
        middle = starts[len(starts) // 2]
        windows["ending just after a span"] = TimeRange(
            start_unix_nano=middle - 26 * HOUR, end_unix_nano=middle + 1
        )
        windows["starting just after a span"] = TimeRange(
            start_unix_nano=middle + 1, end_unix_nano=middle + 30 * HOUR
        )
        for what, window in windows.items():
            await _compare(store, spans, window, what)
            await _compare_logs(store, logs, window, what)
        # Retention inside a minute: what is left agrees again.
        cutoff = base + 7 * HOUR + 29 * MINUTE + 31 * SECOND + 7
        await store.delete_before(cutoff)
        left = [s for s in spans if s.start_time_unix_nano >= cutoff]
        await _compare_logs(
            store,
            [r for r in logs if r.time_unix_nano >= cutoff],
            TimeRange(start_unix_nano=first, end_unix_nano=end),
            "all of it after retention",
        )
        await _compare(
            store,
            left,
            TimeRange(start_unix_nano=first, end_unix_nano=end),
            "all of it after retention",
        )
        await _compare(
            store,
            left,
            TimeRange(start_unix_nano=cutoff - HOUR, end_unix_nano=cutoff + 2 * HOUR + 3),
            "the cutoff's hours after retention",
        )
