"""RED roll-ups of the embedded store: kept at ingest, read by services/operations/edges/deploys.

Why: summing every span of a 7-day window for each ``list_services`` cost 40-200x an hour's
answer and memory grew with the rows read (issues 13 and 15). The roll-ups make the cost of
those reads grow with the answer (services x buckets), not with the spans.

**Tables** (schema version 4; the mark 7, :mod:`._schema`). Each row covers one *bucket*: ``width``
seconds (60, 3600 or 86400: a minute, an hour, a UTC day; :data:`WIDTHS`) starting at
``bucket`` (unix ns, a multiple of the width), by the span's *start* time as every query
filters:

- ``red_services``, per resource (a service + version + other resource attributes):
  ``span_count`` (all spans), ``first_start`` / ``last_start`` (span starts), and over its
  *entry spans* (kind SERVER/CONSUMER, or a root) ``request_count``, ``error_count`` (status
  ERROR), ``duration_sum`` and ``sketch`` (their durations);
- ``red_operations``, per resource and span name, over all its spans: ``span_count``,
  ``error_count``, ``duration_sum``, ``sketch``;
- ``red_edges``, per caller -> callee service (a child span whose parent span, same trace,
  belongs to another service; counted on the child's start): ``call_count``,
  ``error_count``, ``duration_sum``, ``sketch`` (the child spans' durations).

A ``sketch`` is a :class:`~coremetry.store._sketch.LatencySketch` (DDSketch bins, 1 %
relative accuracy), encoded (6-byte ``(key, count)`` records since schema 5). Every span
updates the rows of its minute, hour and day, so a window is read as whole days, hours and
minutes (:func:`plan`): a 7-day window is at most 6 days + 46 hours + 118 minutes of rows per
group, an hour at most 60 minute rows.

**Maintenance** (:class:`TailRollup`): the writer sums the spans it stores in memory and
writes the roll-up rows once per :data:`ROLL_EVERY` spans (in that write's transaction), or
when the store's deferred pass runs (every few seconds), moving the ``rollup_mark`` (schema
7: the largest span row id the roll-ups count) in the same transaction. The span rows above
the mark are the *tail*: every read adds them raw (:func:`_raw_pieces`), so answers are
exact at every moment while the writes stay cheap (upserting every width's rows for each
512-span request cost OTLP ingest about a quarter of its speed). Rows some other process
stored, or a failed write's memory, are read back from the table (:func:`roll_tail`); a
writer that stops leaves its tail to the next pass. Edges need the parent span's service. A
child whose parent is stored (earlier, or in the same tail) is rolled up at once (a parent
in the tail is found in memory, an older one by the unique ``(trace_id, span_id)`` index); a
child whose parent is not stored yet waits in ``edge_pending`` (trace id, parent span id,
child row id, child start). A **deferred pass** (:func:`resolve_pending`, the store's
background task every few seconds, in its own write transaction) rolls up the waiting
children whose parent has come since and drops them from ``edge_pending``: the write path
does not probe the pending children for every span it stores.
Reads stay equal to the raw parent/child join at every moment: :func:`service_edges` adds the
waiting children whose parent is stored now (few: those written since the last pass) to the
rolled-up calls. A child whose parent never comes is never an edge (as in the raw join) and
waits until retention drops it with its child.

**Reads** add up the roll-up rows of the window's whole buckets per group (counts in Python;
the sketches in bulk, :class:`~coremetry.store._sketch.SketchTable`: every row's encoded
sketch concatenated and summed per group and bin by numpy, since a week is thousands of
sketches of up to hundreds of bins — memory is the rows' sketches read, then the answer's
groups times the bins) and read the raw spans of the partial minutes at the window's two ends
(at most two minutes of spans), so every count is exact and every percentile within the
sketch's 1 % of the raw nearest-rank one (``percentile_relative_error`` on each result).
``services`` reads one service's rows only when given its name (``compare_deploys``).
Before planning, each end of the window moves out across any stretch that holds no span
(:func:`widened`: the window ending *now* is read as whole days at its end), which changes
no figure and reads far fewer rows. The whole hours and days of a window before today are
taken merged, one row per group, from the store's :class:`ClosedDays` (filled by the first
read of them, checked against the per-day generations every writer bumps in ``rollup_days``),
so a week costs about what an hour does.

**Retention** (:func:`drop_before`, :func:`rebuild_straddling`; the tail rolled up first): rows
whose bucket ends at or before the cutoff go with the spans; the bucket of each width that straddles
the cutoff is rebuilt from what is left (the minute from the raw spans, the hour from its minutes,
the day from its hours), so the roll-ups again agree with the raw spans. Between two chunks of one
retention pass the straddling buckets may still count deleted spans. One difference stays: a call
whose child starts after the cutoff but whose parent started before it keeps counting in the
roll-ups (the child is kept, its bucket is whole), while the raw join no longer finds the deleted
parent.

**Log counts** (``red_logs``): per bucket and resource, the log records and those at WARN
(severity 13-16) and ERROR or worse (17+), kept at ingest by three ``INSERT ... SELECT``
over the new log rows (:func:`apply_logs`); :func:`log_counts` reads them when its buckets are
made of whole minutes (one bucket over the window, or minute-aligned buckets), the raw records
of partial minutes beside them; other steps read the raw records.

**Migration**: :func:`build_rollups` rolls up the spans and logs an older database holds,
once, in the schema step's transaction (step 4, writing schema 4's sketch encoding);
:func:`reencode_sketches` (step 5) re-encodes the sketches as fixed-width records.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Final, TypeVar, cast

import msgspec
import numpy as np

from coremetry.store._sketch import (
    RELATIVE_ACCURACY,
    LatencySketch,
    SketchTable,
    bin_key,
    decode_msgpack,
    encode_msgpack,
    merge_encoded,
    merge_encoded_groups,
    reencode_msgpack,
)
from coremetry.store.interface import (
    DeployRecord,
    LogCountPoint,
    LogCountSeries,
    OperationSummary,
    Page,
    ServiceEdge,
    ServiceSummary,
    TimeRange,
)

from ._codec import SpanRow
from ._runtime import ReadContext, SqlParam

__all__ = [
    "CLOSED_DAYS_ENTRIES",
    "WIDTHS",
    "ClosedDays",
    "apply_logs",
    "apply_written",
    "build_rollups",
    "deploys",
    "drop_before",
    "drop_logs_before",
    "log_counts",
    "operations",
    "plan",
    "rebuild_straddling",
    "reencode_sketches",
    "register_functions",
    "resolve_pending",
    "service_edges",
    "services",
    "widened",
]

_NS: Final = 1_000_000_000
_MINUTE: Final = 60 * _NS
WIDTHS: Final = (60, 3600, 86400)
"""Bucket widths in seconds, finest first: a minute, an hour, a (UTC) day."""

_ERROR: Final = 2  # StatusCode.ERROR
_TIME_END: Final = 2**63 - 1
"""The largest SQLite integer: an open upper bound (stored times are below 2**63)."""
_JSON_IDS: Final = msgspec.json.Encoder().encode
_BUILD_CHUNK: Final = 100_000
"""Span rows rolled up per step of :func:`build_rollups`."""

# A span as the roll-ups see it: (start, resource_id, name, entry, error, duration).
Fact = tuple[int, int, str, bool, bool, int]
# A call: (caller service, callee service, child start, child duration, child error).
Call = tuple[str, str, int, int, bool]


class _Acc:
    """Running RED of one group in one bucket (``first``/``last``/``requests``: services)."""

    __slots__ = ("count", "dsum", "errors", "first", "last", "requests", "sketch")

    def __init__(self, first: int, last: int) -> None:
        self.count = 0
        self.requests = 0
        self.errors = 0
        self.dsum = 0
        self.first = first
        self.last = last
        self.sketch = LatencySketch()

    def merge(self, other: _Acc) -> None:
        self.count += other.count
        self.requests += other.requests
        self.errors += other.errors
        self.dsum += other.dsum
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.sketch.merge(other.sketch)


_Key = tuple[int | str, ...]


class _Batch:
    """Per-minute accumulators of one write (or one rebuild), by table."""

    def __init__(self) -> None:
        self.services: dict[tuple[int, int], _Acc] = {}
        self.operations: dict[tuple[int, int, str], _Acc] = {}
        self.edges: dict[tuple[int, str, str], _Acc] = {}

    def add_facts(self, facts: Iterable[Fact]) -> None:
        # The write path's hot loop: bins updated in place, the bin key computed once.
        services = self.services
        operations = self.operations
        key_of = bin_key
        for start, rid, name, entry, error, duration in facts:
            minute = start - start % _MINUTE
            key = key_of(duration)
            acc = services.get((minute, rid))
            if acc is None:
                acc = services[(minute, rid)] = _Acc(start, start)
            acc.count += 1
            if start < acc.first:
                acc.first = start
            elif start > acc.last:
                acc.last = start
            if entry:
                acc.requests += 1
                acc.errors += error
                acc.dsum += duration
                sketch = acc.sketch
                if key is None:
                    sketch.zeros += 1
                else:
                    sketch.bins[key] = sketch.bins.get(key, 0) + 1
            op = operations.get((minute, rid, name))
            if op is None:
                op = operations[(minute, rid, name)] = _Acc(start, start)
            op.count += 1
            op.errors += error
            op.dsum += duration
            sketch = op.sketch
            if key is None:
                sketch.zeros += 1
            else:
                sketch.bins[key] = sketch.bins.get(key, 0) + 1

    def days(self) -> set[int]:
        """The UTC days (their starts, unix ns) whose rows :meth:`write` changes."""
        minutes = {key[0] for key in self.services} | {key[0] for key in self.edges}
        return {minute - minute % _DAY for minute in minutes}

    def add_calls(self, calls: Iterable[Call]) -> None:
        edges = self.edges
        for caller, callee, start, duration, error in calls:
            minute = start - start % _MINUTE
            acc = edges.get((minute, caller, callee))
            if acc is None:
                acc = edges[(minute, caller, callee)] = _Acc(start, start)
            acc.count += 1
            acc.errors += error
            acc.dsum += duration
            acc.sketch.add_key(bin_key(duration))

    def write(
        self, conn: sqlite3.Connection, widths: Sequence[int] = WIDTHS, *, schema4: bool = False
    ) -> None:
        """Upsert the accumulators into every width's buckets (merging with stored rows).

        ``schema4``: sketches in schema 4's MessagePack encoding, merged by
        ``coremetry_sketch_merge_msgpack`` (the schema step to version 4 only).
        """
        upserts = _UPSERT_SCHEMA4 if schema4 else _UPSERT
        encode = encode_msgpack if schema4 else LatencySketch.encode
        for table, groups in (
            ("services", self.services),
            ("operations", self.operations),
            ("edges", self.edges),
        ):
            if not groups:
                continue
            rows: list[tuple[SqlParam, ...]] = []
            for width in widths:
                per = _coarsen(cast("dict[_Key, _Acc]", groups), width)
                rows += [_row(table, width, key, acc, encode) for key, acc in per.items()]
            conn.executemany(upserts[table], rows)


def _coarsen(groups: dict[_Key, _Acc], width: int) -> dict[_Key, _Acc]:
    """Minute accumulators merged into buckets of ``width`` seconds (keys' first item)."""
    if width == 60:
        return groups
    step = width * _NS
    merged: dict[_Key, _Acc] = {}
    for key, acc in groups.items():
        bucket = cast(int, key[0])
        coarse = (bucket - bucket % step, *key[1:])
        into = merged.get(coarse)
        if into is None:
            into = merged[coarse] = _Acc(acc.first, acc.last)
        into.merge(acc)
    return merged


def _row(
    table: str, width: int, key: _Key, acc: _Acc, encode: Callable[[LatencySketch], bytes]
) -> tuple[SqlParam, ...]:
    blob = encode(acc.sketch)
    if table == "services":
        return (
            width,
            *key,
            acc.count,
            acc.first,
            acc.last,
            acc.requests,
            acc.errors,
            acc.dsum,
            blob,
        )
    return (width, *key, acc.count, acc.errors, acc.dsum, blob)


_UPSERT: Final = {
    "services": (
        "INSERT INTO red_services (width, bucket, resource_id, span_count, first_start, "
        "last_start, request_count, error_count, duration_sum, sketch) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (width, bucket, resource_id) DO UPDATE SET "
        "span_count = span_count + excluded.span_count, "
        "first_start = min(first_start, excluded.first_start), "
        "last_start = max(last_start, excluded.last_start), "
        "request_count = request_count + excluded.request_count, "
        "error_count = error_count + excluded.error_count, "
        "duration_sum = duration_sum + excluded.duration_sum, "
        "sketch = coremetry_sketch_merge(sketch, excluded.sketch)"
    ),
    "operations": (
        "INSERT INTO red_operations (width, bucket, resource_id, name, span_count, error_count, "
        "duration_sum, sketch) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (width, bucket, resource_id, name) DO UPDATE SET "
        "span_count = span_count + excluded.span_count, "
        "error_count = error_count + excluded.error_count, "
        "duration_sum = duration_sum + excluded.duration_sum, "
        "sketch = coremetry_sketch_merge(sketch, excluded.sketch)"
    ),
    "edges": (
        "INSERT INTO red_edges (width, bucket, caller, callee, call_count, error_count, "
        "duration_sum, sketch) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (width, bucket, caller, callee) DO UPDATE SET "
        "call_count = call_count + excluded.call_count, "
        "error_count = error_count + excluded.error_count, "
        "duration_sum = duration_sum + excluded.duration_sum, "
        "sketch = coremetry_sketch_merge(sketch, excluded.sketch)"
    ),
}


_UPSERT_SCHEMA4: Final = {
    table: sql.replace("coremetry_sketch_merge(", "coremetry_sketch_merge_msgpack(")
    for table, sql in _UPSERT.items()
}
"""The upserts of :func:`build_rollups`: schema 4's sketch encoding and its merge."""


def _sketch_merge_msgpack(a: bytes, b: bytes) -> bytes:
    merged = decode_msgpack(a)
    merged.merge(decode_msgpack(b))
    return encode_msgpack(merged)


def _sketch_merge(a: bytes, b: bytes) -> bytes:
    return merge_encoded(a, b)


def register_functions(conn: sqlite3.Connection) -> None:
    """Give a writing connection the ``coremetry_sketch_merge(a, b)`` SQL function."""
    conn.create_function("coremetry_sketch_merge", 2, _sketch_merge, deterministic=True)


# -- maintenance at write time ----------------------------------------------------------------

_FACTS: Final = (
    "SELECT start_unix_nano, resource_id, name, "
    "kind IN (2, 5) OR parent_span_id IS NULL, status_code = 2, duration_ns FROM spans "
)
_CALLS_OF_NEW_CHILDREN: Final = (
    "SELECT p.service_name, c.service_name, c.start_unix_nano, c.duration_ns, c.status_code = 2 "
    "FROM spans c CROSS JOIN spans p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id "
    "WHERE c.id > ? AND c.parent_span_id IS NOT NULL AND p.service_name != c.service_name"
)
_NEW_CHILDREN: Final = (
    # Each new child with its parent's service (NULL: the parent is not stored), when that is
    # another service or none: the calls, and the children that wait.
    "SELECT p.service_name, c.service_name, c.start_unix_nano, c.duration_ns, "
    "c.status_code = 2, c.trace_id, c.parent_span_id, c.id "
    "FROM spans c LEFT JOIN spans p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id "
    "WHERE c.id > ? AND c.parent_span_id IS NOT NULL "
    "AND (p.service_name IS NULL OR p.service_name != c.service_name)"
)
_PEND_ORPHANS: Final = (
    "INSERT OR IGNORE INTO edge_pending (trace_id, parent_span_id, child_id, start_unix_nano) "
    "SELECT c.trace_id, c.parent_span_id, c.id, c.start_unix_nano FROM spans c "
    "WHERE c.id > ? AND c.parent_span_id IS NOT NULL AND NOT EXISTS "
    "(SELECT 1 FROM spans p WHERE p.trace_id = c.trace_id AND p.span_id = c.parent_span_id)"
)
_CHILDREN_OF_NEW_PARENTS: Final = (
    "SELECT q.trace_id, q.parent_span_id, s.service_name, c.service_name, c.start_unix_nano, "
    "c.duration_ns, c.status_code = 2 "
    "FROM spans s CROSS JOIN edge_pending q "
    "ON q.trace_id = s.trace_id AND q.parent_span_id = s.span_id "
    "CROSS JOIN spans c ON c.id = q.child_id WHERE s.id > ?"
)


_CHILDREN_OF_PENDING: Final = (
    # The same as _CHILDREN_OF_NEW_PARENTS, driven from the pending table.
    "SELECT q.trace_id, q.parent_span_id, s.service_name, c.service_name, c.start_unix_nano, "
    "c.duration_ns, c.status_code = 2 "
    "FROM edge_pending q CROSS JOIN spans s "
    "ON s.trace_id = q.trace_id AND s.span_id = q.parent_span_id "
    "CROSS JOIN spans c ON c.id = q.child_id"
)
_CHILDREN_BY_ID: Final = (
    "SELECT p.service_name, c.service_name, c.start_unix_nano, c.duration_ns, "
    "c.status_code = 2, c.trace_id, c.parent_span_id, c.id "
    "FROM spans c LEFT JOIN spans p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id "
    "WHERE c.id IN (SELECT value FROM json_each(?)) "
    "AND (p.service_name IS NULL OR p.service_name != c.service_name)"
)


def resolve_pending(conn: sqlite3.Connection, since_id: int | None) -> int:
    """The deferred pass: roll up the waiting children whose parent is stored now (blocking).

    Runs in its own write transaction (the caller's). ``since_id``: the largest span row id
    the previous pass saw (only parents above it can be new), or ``None`` to check every
    waiting child (at open, before a retention rebuild). The days whose edge rows it changes
    get a new generation (:func:`touch_days`). Returns the largest span row id now.
    """
    top = int(conn.execute("SELECT coalesce(max(id), 0) FROM spans").fetchone()[0])
    if since_id is not None and top <= since_id:
        return top  # no span stored since the last pass: no parent can have come
    waiting_count = int(conn.execute("SELECT count(*) FROM edge_pending").fetchone()[0])
    if waiting_count == 0:
        return top
    # From the waiting children (a probe each) or from the new spans (a probe each): fewer.
    by_pending = since_id is None or waiting_count <= top - since_id
    sql = _CHILDREN_OF_PENDING if by_pending else _CHILDREN_OF_NEW_PARENTS
    params: tuple[int, ...] = () if by_pending or since_id is None else (since_id,)
    waiting = cast(
        "list[tuple[bytes, bytes, str, str, int, int, bool]]",
        conn.execute(sql, params).fetchall(),
    )
    if waiting:
        batch = _Batch()
        batch.add_calls(row[2:] for row in waiting if row[2] != row[3])
        touch_days(conn, batch.days())
        conn.executemany(
            "DELETE FROM edge_pending WHERE trace_id = ? AND parent_span_id = ?",
            sorted({(row[0], row[1]) for row in waiting}),
        )
        batch.write(conn)
    return top


def apply_written(conn: sqlite3.Connection, low: int, high: int) -> None:
    """Roll up the span rows with ids in ``(low, high]``, read back (blocking; caller's txn).

    The UTC days whose roll-up rows change get a new generation in the same transaction
    (:func:`touch_days`). Children whose parent is not stored wait in ``edge_pending``.
    """
    batch = _Batch()
    batch.add_facts(
        cast(
            "list[Fact]",
            conn.execute(_FACTS + "WHERE id > ? AND id <= ?", (low, high)).fetchall(),
        )
    )
    children = cast(
        "list[tuple[str | None, str, int, int, bool, bytes, bytes, int]]",
        conn.execute(_NEW_CHILDREN + " AND c.id <= ?", (low, high)).fetchall(),
    )
    _add_children(conn, batch, [], children)


def _add_children(
    conn: sqlite3.Connection,
    batch: _Batch,
    calls: list[Call],
    children: list[tuple[str | None, str, int, int, bool, bytes, bytes, int]],
) -> None:
    """Write ``batch`` with ``calls`` and the calls of ``children`` (caller's transaction).

    Each child comes with its parent's service, or ``None``: the parent is not stored and
    the child waits in ``edge_pending``. The days the rows change get a new generation.
    """
    # Children waiting for a parent stored now are rolled up by the deferred pass
    # (:func:`resolve_pending`); reads count them meanwhile (:func:`service_edges`).
    calls += cast("list[Call]", [row[:5] for row in children if row[0] is not None])
    batch.add_calls(calls)
    orphans = [(row[5], row[6], row[7], row[2]) for row in children if row[0] is None]
    if orphans:
        conn.executemany(
            "INSERT OR IGNORE INTO edge_pending "
            "(trace_id, parent_span_id, child_id, start_unix_nano) VALUES (?, ?, ?, ?)",
            orphans,
        )
    batch.write(conn)
    touch_days(conn, batch.days())


ROLL_EVERY: Final = 32768
"""Spans the tail may hold before a write rolls it up in its own transaction (see
:class:`TailRollup`); the store's deferred pass rolls up the rest every few seconds."""

_MARK: Final = "SELECT span_id FROM rollup_mark"
_SET_MARK: Final = "UPDATE rollup_mark SET span_id = ?, epoch = epoch + 1"


def rolled_mark(conn: sqlite3.Connection) -> int:
    """The roll-ups' mark: the largest span row id they count; the rows above are the *tail*.

    Read in the caller's transaction (the roll-up rows and the mark are written together, so
    they always agree; reads take it with the newest row id: :func:`_tail_mark`).
    """
    return int(conn.execute(_MARK).fetchone()[0])


def _mark_epoch(conn: sqlite3.Connection) -> int:
    """The mark's epoch: bumped by every change of the mark, by any process (caller's txn)."""
    return int(conn.execute("SELECT epoch FROM rollup_mark").fetchone()[0])


def roll_tail(conn: sqlite3.Connection, top: int | None = None) -> int:
    """Roll up the spans above the mark, read back from the table (blocking; caller's txn).

    For a tail some other process wrote, or one left by a write that failed or a process that
    stopped (:class:`TailRollup` keeps its own writes' in memory). ``top``: the largest row
    id to roll up (``None``: every row). Returns the spans rolled up.
    """
    mark = rolled_mark(conn)
    if top is None:
        top = int(conn.execute("SELECT coalesce(max(id), 0) FROM spans").fetchone()[0])
    if top <= mark:
        return 0
    apply_written(conn, mark, top)
    conn.execute(_SET_MARK, (top,))
    return top - mark


# A child span waiting for its parent's service: (trace id, parent span id, row id, service,
# start, duration, error).
_Child = tuple[bytes, bytes, int, str, int, int, bool]


class TailRollup:
    """The roll-ups of the tail a writer wrote, kept in memory and written in bulk (blocking).

    Why: upserting every width's rows in each write's transaction cost OTLP ingest about a
    quarter of its speed (issue 15: a 512-span request touches the same minute, hour and day
    rows as the previous one, each upsert merging two sketches). Instead the spans a writer
    stores are *summed in memory* (:class:`_Batch`) and the roll-up rows written once per
    :data:`ROLL_EVERY` spans (:meth:`flush`, in that write's transaction, with the mark), or
    by the store's deferred pass every few seconds. Reads stay exact: the span rows above the
    mark, at most about :data:`ROLL_EVERY` plus a few seconds' worth, are read raw beside the
    roll-up rows (:func:`services` and the rest).

    Memory is only ever a copy of committed rows: ``base`` is the mark it started from,
    ``top`` the largest row id it holds (its rows are exactly ``(base, top]``). Each write
    checks, in its own transaction, that no other process moved the mark (it rolled these
    rows up itself: the memory is dropped) or stored spans since (its rows are read back
    after this memory is written), and a write that fails drops the memory (those rows,
    committed earlier, are then read back by :func:`roll_tail`). "Moved" is told by the
    mark's epoch, which every change of the mark bumps, not by its value: retention may
    delete the rows another process rolled up and move the mark back down to ``base``, after
    which new rows take the deleted rows' ids. A stopped process leaves its tail above the
    mark, rolled up by the next pass of any writer.

    Children are matched with their parents at :meth:`flush`: a parent in the tail is found
    in memory, an older one by the ``(trace_id, span_id)`` index, and a child whose parent is
    not stored waits in ``edge_pending`` (:func:`resolve_pending`).
    """

    def __init__(self) -> None:
        self._batch = _Batch()
        self._services: dict[tuple[bytes, bytes], str] = {}
        self._children: list[_Child] = []
        self._base: int | None = None
        self._top = 0
        self._epoch = 0

    def drop(self) -> None:
        """Forget the memory (a transaction failed, or another process rolled these rows up)."""
        self._batch = _Batch()
        self._services = {}
        self._children = []
        self._base = None

    def written(self, conn: sqlite3.Connection, last_id: int, rows: list[SpanRow] | None) -> None:
        """Take the span rows a write just stored (inside the write's transaction).

        Args:
            conn: the writer connection (:func:`register_functions` done).
            last_id: the largest span row id before the write: the new rows are above it.
            rows: the batch's rows when every one was stored, in insertion order (row ``i``
                has id ``last_id + 1 + i``); ``None`` when some were duplicates (the new rows
                are then read back and rolled up at once).
        """
        if self._base is not None:
            if _mark_epoch(conn) != self._epoch:
                self.drop()  # another process moved the mark: it rolled these rows up
            elif last_id != self._top:
                self.flush(conn)  # another process stored spans since: ours first
        if self._base is None:
            # A tail not in memory (another process's, or a failed write's), read back.
            roll_tail(conn, last_id)
        if rows is None:
            self.roll_up_all(conn)
            return
        if self._base is None:
            self._base = self._top = last_id
            self._epoch = _mark_epoch(conn)
        self._batch.add_facts(
            [(r[6], r[11], r[4], r[5] in (2, 5) or r[2] is None, r[9] == 2, r[8]) for r in rows]
        )
        services = self._services
        children = self._children
        for i, r in enumerate(rows):
            services[(r[0], r[1])] = r[3]
            if r[2] is not None:
                children.append((r[0], r[2], last_id + 1 + i, r[3], r[6], r[8], r[9] == 2))
        self._top = last_id + len(rows)
        if self._top - self._base >= ROLL_EVERY:
            self.flush(conn)

    def roll_up_all(self, conn: sqlite3.Connection) -> None:
        """Write the memory (:meth:`flush`), then roll up any other tail (:func:`roll_tail`)."""
        self.flush(conn)
        roll_tail(conn)

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write the memory's roll-up rows and move the mark to its top (caller's transaction).

        Nothing is written when the mark moved since the memory began (another process
        rolled these rows up, and retention may have deleted them since). The memory is
        empty afterwards, whether the transaction then commits or not.
        """
        if self._base is None:
            return
        batch, services, children, top = self._batch, self._services, self._children, self._top
        epoch = self._epoch
        self.drop()
        if _mark_epoch(conn) != epoch:
            return
        calls: list[Call] = []
        unresolved: list[int] = []
        for trace_id, parent, child_id, callee, start, duration, error in children:
            caller = services.get((trace_id, parent))
            if caller is None:
                unresolved.append(child_id)
            elif caller != callee:
                calls.append((caller, callee, start, duration, error))
        found: list[tuple[str | None, str, int, int, bool, bytes, bytes, int]] = []
        if unresolved:
            found = cast(
                "list[tuple[str | None, str, int, int, bool, bytes, bytes, int]]",
                conn.execute(_CHILDREN_BY_ID, (_JSON_IDS(unresolved).decode(),)).fetchall(),
            )
        _add_children(conn, batch, calls, found)
        conn.execute(_SET_MARK, (top,))


_LOG_ROLLUP: Final = (
    "INSERT INTO red_logs (width, bucket, resource_id, records, warn_records, error_records) "
    "SELECT ?, time_unix_nano - time_unix_nano % ?, resource_id, count(*), "
    "sum(severity_number BETWEEN 13 AND 16), sum(severity_number >= 17) "
    "FROM logs WHERE id > ? GROUP BY 2, 3 "
    "ON CONFLICT (width, bucket, resource_id) DO UPDATE SET "
    "records = records + excluded.records, "
    "warn_records = warn_records + excluded.warn_records, "
    "error_records = error_records + excluded.error_records"
)


def apply_logs(conn: sqlite3.Connection, last_id: int) -> None:
    """Count the log rows a write just stored (ids above ``last_id``) into ``red_logs``."""
    for width in WIDTHS:
        conn.execute(_LOG_ROLLUP, (width, width * _NS, last_id))


def build_rollups(conn: sqlite3.Connection) -> None:
    """Roll up every stored span (blocking; the schema step to version 4 runs it once).

    Chunks of :data:`_BUILD_CHUNK` span rows, so memory stays bounded whatever the store's
    size. Children whose parent is not stored go to ``edge_pending``. The sketches are
    written in schema 4's encoding (MessagePack), as that version's code reads them; the step
    to version 5 (:func:`reencode_sketches`) converts them, so every step leaves the database
    as its version describes it.
    """
    conn.create_function(
        "coremetry_sketch_merge_msgpack", 2, _sketch_merge_msgpack, deterministic=True
    )
    top = int(conn.execute("SELECT coalesce(max(id), 0) FROM spans").fetchone()[0])
    for low in range(0, top, _BUILD_CHUNK):
        high = low + _BUILD_CHUNK
        batch = _Batch()
        batch.add_facts(
            cast(
                "list[Fact]",
                conn.execute(_FACTS + "WHERE id > ? AND id <= ?", (low, high)).fetchall(),
            )
        )
        batch.add_calls(
            cast(
                "list[Call]",
                conn.execute(_CALLS_OF_NEW_CHILDREN + " AND c.id <= ?", (low, high)).fetchall(),
            )
        )
        conn.execute(_PEND_ORPHANS + " AND c.id <= ?", (low, high))
        batch.write(conn, schema4=True)
    apply_logs(conn, 0)


def reencode_sketches(conn: sqlite3.Connection) -> None:
    """Re-encode every stored sketch from schema 4's MessagePack to today's records (blocking).

    The schema step to version 5 runs it once, in its transaction: one ``UPDATE`` per roll-up
    table through the SQL function ``coremetry_sketch_from_msgpack``
    (:func:`~coremetry.store._sketch.reencode_msgpack`). Counts, keys and so every figure read
    are unchanged; only the bytes differ (fixed 6-byte records, read in bulk by
    :class:`~coremetry.store._sketch.SketchTable`).
    """
    conn.create_function("coremetry_sketch_from_msgpack", 1, reencode_msgpack, deterministic=True)
    for table in ("red_services", "red_operations", "red_edges"):
        conn.execute(f"UPDATE {table} SET sketch = coremetry_sketch_from_msgpack(sketch)")


# -- retention --------------------------------------------------------------------------------


def drop_before(conn: sqlite3.Connection, cutoff_unix_nano: int) -> None:
    """Delete roll-up rows whose bucket ends at or before the cutoff, and pending children.

    After the spans' delete, with the tail rolled up before it: the mark moves down to the
    largest row id left when the newest rows went (SQLite then reuses their ids, which must
    be above the mark to be read as the tail).
    """
    conn.execute(
        "UPDATE rollup_mark SET span_id = (SELECT coalesce(max(id), 0) FROM spans), "
        "epoch = epoch + 1 "
        "WHERE span_id > (SELECT coalesce(max(id), 0) FROM spans)"
    )
    touch_all_days(conn)
    for width in WIDTHS:
        limit = cutoff_unix_nano - width * _NS
        for table in ("red_services", "red_operations", "red_edges"):
            conn.execute(f"DELETE FROM {table} WHERE width = ? AND bucket <= ?", (width, limit))
    conn.execute("DELETE FROM edge_pending WHERE start_unix_nano < ?", (cutoff_unix_nano,))


def drop_logs_before(conn: sqlite3.Connection, cutoff_unix_nano: int) -> None:
    """Log counts: drop buckets ending by the cutoff, recount the straddling ones (idempotent).

    The minute from the records left in it, each coarser bucket from the finer rows inside.
    """
    for index, width in enumerate(WIDTHS):
        step = width * _NS
        conn.execute(
            "DELETE FROM red_logs WHERE width = ? AND bucket <= ?",
            (width, cutoff_unix_nano - step),
        )
        bucket = cutoff_unix_nano - cutoff_unix_nano % step
        if bucket == cutoff_unix_nano:
            continue
        conn.execute("DELETE FROM red_logs WHERE width = ? AND bucket = ?", (width, bucket))
        if index == 0:
            conn.execute(
                "INSERT INTO red_logs (width, bucket, resource_id, records, warn_records, "
                "error_records) SELECT ?, ?, resource_id, count(*), "
                "sum(severity_number BETWEEN 13 AND 16), sum(severity_number >= 17) FROM logs "
                "WHERE time_unix_nano >= ? AND time_unix_nano < ? GROUP BY resource_id",
                (width, bucket, bucket, min(bucket + step, _TIME_END)),
            )
        else:
            conn.execute(
                "INSERT INTO red_logs (width, bucket, resource_id, records, warn_records, "
                "error_records) SELECT ?, ?, resource_id, sum(records), sum(warn_records), "
                "sum(error_records) FROM red_logs "
                "WHERE width = ? AND bucket >= ? AND bucket < ? GROUP BY resource_id",
                (width, bucket, WIDTHS[index - 1], bucket, min(bucket + step, _TIME_END)),
            )


def rebuild_straddling(conn: sqlite3.Connection, cutoff_unix_nano: int) -> None:
    """Recompute the bucket of each width that holds the cutoff from what is left of it.

    The minute from the raw spans (at most a minute of them), each coarser bucket from the
    finer rows inside it. Idempotent.
    """
    touch_all_days(conn)
    for index, width in enumerate(WIDTHS):
        step = width * _NS
        bucket = cutoff_unix_nano - cutoff_unix_nano % step
        if bucket == cutoff_unix_nano:
            continue  # nothing straddles: drop_before took the buckets below
        batch = _Batch()
        if index == 0:
            low, high = bucket, min(bucket + step, _TIME_END)
            batch.add_facts(
                cast(
                    "list[Fact]",
                    conn.execute(
                        _FACTS + "WHERE start_unix_nano >= ? AND start_unix_nano < ?",
                        (low, high),
                    ).fetchall(),
                )
            )
            batch.add_calls(
                _raw_calls(
                    conn, ("(c.start_unix_nano >= ? AND c.start_unix_nano < ?)", [low, high]), None
                )
            )
        else:
            _load_rows(conn, batch, WIDTHS[index - 1], bucket, min(bucket + step, _TIME_END))
        for table in ("red_services", "red_operations", "red_edges"):
            conn.execute(f"DELETE FROM {table} WHERE width = ? AND bucket = ?", (width, bucket))
        batch.write(conn, (width,))


def _load_rows(conn: sqlite3.Connection, batch: _Batch, width: int, low: int, high: int) -> None:
    """Read the ``width`` rows in ``[low, high)`` into ``batch`` (its keys as minute keys)."""
    where = "WHERE width = ? AND bucket >= ? AND bucket < ?"
    for bucket, rid, count, first, last, requests, errors, dsum, blob in conn.execute(
        "SELECT bucket, resource_id, span_count, first_start, last_start, request_count, "
        f"error_count, duration_sum, sketch FROM red_services {where}",
        (width, low, high),
    ):
        acc = batch.services[(bucket, rid)] = _Acc(first, last)
        acc.count, acc.requests, acc.errors, acc.dsum = count, requests, errors, dsum
        acc.sketch.merge_encoded(blob)
    for bucket, rid, name, count, errors, dsum, blob in conn.execute(
        "SELECT bucket, resource_id, name, span_count, error_count, duration_sum, sketch "
        f"FROM red_operations {where}",
        (width, low, high),
    ):
        acc = batch.operations[(bucket, rid, name)] = _Acc(bucket, bucket)
        acc.count, acc.errors, acc.dsum = count, errors, dsum
        acc.sketch.merge_encoded(blob)
    for bucket, caller, callee, count, errors, dsum, blob in conn.execute(
        "SELECT bucket, caller, callee, call_count, error_count, duration_sum, sketch "
        f"FROM red_edges {where}",
        (width, low, high),
    ):
        acc = batch.edges[(bucket, caller, callee)] = _Acc(bucket, bucket)
        acc.count, acc.errors, acc.dsum = count, errors, dsum
        acc.sketch.merge_encoded(blob)


# -- reads ------------------------------------------------------------------------------------


def plan(start: int, end: int) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """Split ``[start, end)`` into raw partial minutes and whole roll-up buckets.

    Returns:
        ``(raw, rolled)``: ``raw`` the ``[low, high)`` ranges to read from the spans (the
        partial minutes at either end, or the whole window when it holds no whole minute);
        ``rolled`` the ``(width, first bucket, end)`` ranges of whole buckets, as few rows as
        the widths allow (days inside, then hours, then minutes at the ends).
    """
    first = -(-start // _MINUTE) * _MINUTE
    last = end - end % _MINUTE
    if first >= last:
        return [(start, end)], []
    raw = []
    if start < first:
        raw.append((start, first))
    if last < end:
        raw.append((last, end))
    rolled: list[tuple[int, int, int]] = []

    def cover(low: int, high: int, index: int) -> None:
        if low >= high:
            return
        width = WIDTHS[index]
        if index == 0:
            rolled.append((width, low, high))
            return
        step = width * _NS
        inner_low = -(-low // step) * step
        inner_high = high - high % step
        if inner_low < inner_high:
            cover(low, inner_low, index - 1)
            rolled.append((width, inner_low, inner_high))
            cover(inner_high, high, index - 1)
        else:
            cover(low, high, index - 1)

    cover(first, last, len(WIDTHS) - 1)
    return raw, rolled


def widened(ctx: ReadContext, time_range: TimeRange) -> TimeRange:
    """The window with each end moved out to the coarsest bucket boundary across no span.

    A roll-up row holds only the spans (for ``red_edges``: the child spans) that start in its
    bucket, so a window ``[start, end)`` reads exactly what ``[new_start, new_end)`` reads when
    no span starts in ``[new_start, start)`` nor in ``[end, new_end)``. Each end moves to the
    coarsest boundary of :data:`WIDTHS` (a day, else an hour, else a minute) that keeps that
    true, found by two probes of the ``spans_start`` index in the read's snapshot (the tail's
    spans included: they are read raw over the widened window). The usual window ends at *now*,
    after the newest span: its end is then read as the current day's rows, not as up to 23 hour
    rows + 59 minute rows + a raw minute per group (a week of ``service_edges``: 3,063 rows to
    ~800 on the 5 M store). Not for log counts (log times, not span starts). While a retention
    pass is between two chunks (see **Retention** above), a start moved back into the bucket
    that straddles the cutoff may count the spans just deleted, as any window over that bucket
    may then.
    """
    start, end = time_range.start_unix_nano, time_range.end_unix_nano
    ((before, after),) = ctx.execute(
        "SELECT (SELECT max(start_unix_nano) FROM spans WHERE start_unix_nano < ?), "
        "(SELECT min(start_unix_nano) FROM spans WHERE start_unix_nano >= ?)",
        (start, end),
    )
    new_start, new_end = start, end
    for width in reversed(WIDTHS):
        step = width * _NS
        low = start - start % step
        if before is None or cast(int, before) < low:
            new_start = low
            break
    for width in reversed(WIDTHS):
        step = width * _NS
        high = -(-end // step) * step
        if high <= _TIME_END and (after is None or high <= cast(int, after)):
            new_end = high
            break
    if (new_start, new_end) == (start, end):
        return time_range
    return TimeRange(start_unix_nano=new_start, end_unix_nano=new_end)


_DAY: Final = WIDTHS[-1] * _NS
CLOSED_DAYS_ENTRIES: Final = 64
"""Entries :class:`ClosedDays` keeps (least recently used first out)."""
ANY_DAY: Final = -1
"""The ``rollup_days`` row whose generation retention bumps: every day's rows may change."""

_Tag = tuple[tuple[int, int], ...]
_CachedRow = tuple[SqlParam, ...]
_Part = tuple[tuple[int, int, int], ...]
"""Whole-bucket ranges ``(width, first bucket, end)`` of a window (:func:`plan`'s)."""

_BUMP: Final = (
    "INSERT INTO rollup_days (day, generation) VALUES (?, 1) "
    "ON CONFLICT (day) DO UPDATE SET generation = generation + 1"
)


def touch_days(conn: sqlite3.Connection, days: Iterable[int]) -> None:
    """Bump the generation of ``days`` (UTC day starts, unix ns), in the caller's transaction.

    Every write that changes a day's roll-up rows calls it in the same transaction, in any
    process (:class:`TailRollup` and :func:`apply_written` for the server's writer and
    ``coremetry ingest`` alike, :func:`resolve_pending`), which is what :class:`ClosedDays`
    relies on.
    """
    conn.executemany(_BUMP, [(day,) for day in sorted(set(days))])


def touch_all_days(conn: sqlite3.Connection) -> None:
    """Bump :data:`ANY_DAY`'s generation (retention: any day's rows may change)."""
    conn.execute(_BUMP, (ANY_DAY,))


def _tag(ctx: ReadContext, low: int, high: int) -> _Tag:
    """The generations of the days in ``[low, high)`` and of :data:`ANY_DAY`, in ``ctx``.

    Read in the read's snapshot; a day never written has no row (the tuple leaves it out).
    """
    rows = ctx.execute(
        "SELECT day, generation FROM rollup_days "
        "WHERE day = ? OR (day >= ? AND day < ?) ORDER BY day",
        (ANY_DAY, low, high),
    )
    return tuple((cast(int, day), cast(int, generation)) for day, generation in rows)


class ClosedDays:
    """A cache of merged roll-up rows of whole past days, kept by the store process.

    Why: a week's read added up ~7 day rows per group (a week of edges: ~57,000 sketch records
    on the 5 M store, against ~100 for an hour), so its cost stayed a multiple of an hour's.
    Here the whole hours and days of a window that ended before today (UTC; not its minutes,
    :func:`_closed_part`) are read once per (read kind, those bucket ranges): their rows
    merged to **one row per group** (counts summed, first/last start, the sketches merged by
    :func:`~coremetry.store._sketch.merge_encoded_groups`: the same bins, so the same
    percentiles as the rows one by one); later reads of the same ranges take those rows and
    read only the rest of their window from SQLite. Kinds: ``services`` (every service's,
    also read by ``deploys``), ``services`` and ``operations`` of one service, ``edges``
    (filtered per service when asked). "Days" below are the UTC days the ranges touch.

    **Never stale, whoever writes: generations in the database.** The table ``rollup_days``
    holds a generation per day, bumped (:func:`touch_days`) in the very transaction that
    changes the day's roll-up rows, by every writer: the server's, ``coremetry ingest`` in
    another process while the server runs, the deferred pass; retention bumps the row of
    :data:`ANY_DAY` (:func:`touch_all_days`). A read takes the generations of its days from
    its own snapshot (``ReadContext``: one read transaction), beside the roll-up rows it
    reads. An entry is kept tagged with the generations of the snapshot its rows were merged
    from, and serves a later read only if that read's snapshot holds the same generations:
    then no commit changed those days' rows between the two snapshots, so the entry is what
    the later snapshot holds. The cost: one indexed read of at most ~9 rows per cached read,
    and an upsert per changed day per write.

    **Bounded memory**: at most :data:`CLOSED_DAYS_ENTRIES` entries (LRU); an entry is one row
    per group of its read kind (service versions, operations or edges), each one merged sketch
    of at most the sketch's bins (a few hundred 6-byte records): tens of KiB on the 5 M store.
    """

    def __init__(self, entries: int = CLOSED_DAYS_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._limit = entries
        self._entries: OrderedDict[tuple[str, _Part], tuple[_Tag, list[_CachedRow]]] = OrderedDict()
        self.hits = 0
        """Reads served from an entry (for benches and tests)."""
        self.fills = 0
        """Reads that computed the merged rows themselves."""

    def __len__(self) -> int:
        return len(self._entries)

    def rows(
        self,
        kind: str,
        part: _Part,
        ctx: ReadContext,
        fill: Callable[[], list[_CachedRow]],
    ) -> list[_CachedRow]:
        """The merged rows of ``kind`` over ``part``'s buckets: kept, or ``fill()``'s.

        ``part``: ``(width, first bucket, end)`` ranges of whole buckets (unix ns), as
        :func:`plan` gives; the entry depends on the generations of every day they touch, read
        in ``ctx`` (the read's snapshot, in which ``fill`` computes the rows; blocking).
        """
        low = min(first for _, first, _ in part)
        low -= low % _DAY
        high = max(end for _, _, end in part)
        key = (kind, part)
        mine = _tag(ctx, low, high)
        with self._lock:
            found = self._entries.get(key)
            if found is not None and found[0] == mine:
                self._entries.move_to_end(key)
                self.hits += 1
                return found[1]
        computed = fill()
        with self._lock:
            self.fills += 1
            self._entries[key] = (mine, computed)
            self._entries.move_to_end(key)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return computed


_SERVICE_ROWS: Final = (
    "SELECT r.service_name, r.version, x.span_count, x.first_start, x.last_start, "
    "x.request_count, x.error_count, x.sketch "
    "FROM red_services x JOIN resources r ON r.id = x.resource_id WHERE "
)
"""``red_services`` rows as :func:`services` reads them (a condition on ``x`` follows)."""
_OPERATION_ROWS: Final = (
    "SELECT x.name, x.span_count, x.error_count, x.sketch FROM red_operations x WHERE "
)
"""``red_operations`` rows as :func:`operations` reads them (a condition on ``x`` follows)."""
_EDGE_ROWS: Final = (
    "SELECT x.caller, x.callee, x.call_count, x.error_count, x.sketch FROM red_edges x WHERE "
)
"""``red_edges`` rows as :func:`service_edges` reads them (a condition on ``x`` follows)."""


def _closed_part(time_range: TimeRange) -> _Part | None:
    """The window's whole hours and days that ended before today (UTC) (``None``: none).

    Not its minutes: a window ending now reads a different minute every minute, and an
    hour's answer stays a read of SQLite rows.
    """
    today = time.time_ns() // _DAY * _DAY
    part = []
    for width, low, high in plan(time_range.start_unix_nano, time_range.end_unix_nano)[1]:
        if width >= WIDTHS[1] and low < min(high, today):
            part.append((width, low, min(high, today)))
    return tuple(part) or None


def _from_cache(
    cache: ClosedDays | None,
    ctx: ReadContext,
    time_range: TimeRange,
    kind: str,
    merge: Callable[[_Part], list[_CachedRow]],
) -> tuple[_Part | None, list[_CachedRow]]:
    """The window's closed part (:func:`_closed_part`) and its merged rows from ``cache``.

    ``(None, [])`` without a cache or a closed part: the read then plans the whole window.
    ``merge(part)`` computes the rows in ``ctx`` when the cache has none for them.
    """
    part = _closed_part(time_range) if cache is not None else None
    if cache is None or part is None:
        return None, []
    return part, cache.rows(kind, part, ctx, lambda: merge(part))


def _merged_services(ctx: ReadContext, part: _Part, service_name: str | None) -> list[_CachedRow]:
    """``red_services``' rows of ``part`` merged per (service, version); one service's if named.

    Rows as :func:`services` reads them: (name, version, span count, first start, last
    start, requests, errors, sketch).
    """
    each: tuple[str, list[SqlParam]] | None = None
    if service_name is not None:
        each = (_OF_SERVICE, [service_name])
    where, params = _rolled_sql(list(part), "x", each)
    rows = ctx.execute(f"{_SERVICE_ROWS}{where}", params)
    merged: dict[tuple[SqlParam, SqlParam], list[int]] = {}
    owners: list[int] = []
    for name, version, count, first, last, requests, errors, _ in rows:
        found = merged.get((name, version))
        if found is None:
            found = merged[(name, version)] = [len(merged), 0, cast(int, first), 0, 0, 0]
        found[1] += cast(int, count)
        found[2] = min(found[2], cast(int, first))
        found[3] = max(found[3], cast(int, last))
        found[4] += cast(int, requests)
        found[5] += cast(int, errors)
        owners.append(found[0])
    blobs = merge_encoded_groups(owners, [cast(bytes, row[7]) for row in rows], len(merged))
    return [
        (name, version, count, first, last, requests, errors, blobs[index])
        for (name, version), (index, count, first, last, requests, errors) in merged.items()
    ]


def _merged_counts(rows: list[tuple[SqlParam, ...]], width: int) -> list[_CachedRow]:
    """Rows ``(*key, count, errors, sketch)`` (``width`` key columns) merged per key."""
    merged: dict[tuple[SqlParam, ...], list[int]] = {}
    owners: list[int] = []
    for row in rows:
        key = row[:width]
        found = merged.get(key)
        if found is None:
            found = merged[key] = [len(merged), 0, 0]
        found[1] += cast(int, row[width])
        found[2] += cast(int, row[width + 1])
        owners.append(found[0])
    blobs = merge_encoded_groups(owners, [cast(bytes, row[-1]) for row in rows], len(merged))
    return [(*key, count, errors, blobs[index]) for key, (index, count, errors) in merged.items()]


def _merged_edges(ctx: ReadContext, part: _Part) -> list[_CachedRow]:
    """``red_edges``' rows of ``part`` merged per (caller, callee).

    Rows as :func:`service_edges` reads them: (caller, callee, calls, errors, sketch).
    """
    where, params = _rolled_sql(list(part), "x", None)
    return _merged_counts(ctx.execute(f"{_EDGE_ROWS}{where}", params), 2)


def _merged_operations(ctx: ReadContext, part: _Part, service_name: str) -> list[_CachedRow]:
    """One service's ``red_operations`` rows of ``part`` merged per span name.

    Rows as :func:`operations` reads them: (name, spans, errors, sketch).
    """
    where, params = _rolled_sql(list(part), "x", (_OF_SERVICE, [service_name]))
    return _merged_counts(ctx.execute(f"{_OPERATION_ROWS}{where}", params), 1)


_MAX_LISTED_BUCKETS: Final = 2000
"""Past this many buckets (a window of years), :func:`_ranges` gives ranges, not lists: SQLite
takes at most 32,766 parameters in a statement."""
_OF_SERVICE: Final = "x.resource_id IN (SELECT id FROM resources WHERE service_name = ?)"
"""A roll-up row (alias ``x``) of one service's resources, for :func:`_ranges`' ``each_bucket``."""


def _ranges(
    time_range: TimeRange,
    alias: str,
    start_column: str,
    *,
    each_bucket: tuple[str, list[SqlParam]] | None = None,
    skip: _Part | None = None,
) -> tuple[str | None, list[SqlParam], str | None, list[SqlParam]]:
    """SQL conditions (and parameters) for the roll-up rows and the raw spans of a window.

    ``skip``: whole-bucket ranges of the plan not to read (:class:`ClosedDays` has them).

    ``each_bucket``: a condition on the resource (and its parameters) for a read of one
    service's rows: the roll-up buckets are then listed one by one (``bucket IN (...)``, at
    most ~170 for any window: see :func:`plan`) with the condition inside each width's term,
    so that SQLite seeks each (width, bucket, resource) of the primary key instead of
    scanning every resource's rows of the window's buckets (a week's hour and day rows of
    ``red_operations`` are megabytes: 43 ms against 0.7 ms for one service on the 5 M store).
    """
    raw, rolled = plan(time_range.start_unix_nano, time_range.end_unix_nano)
    if skip is not None:
        rolled = _without(rolled, skip)
    return (*_rolled_sql(rolled, alias, each_bucket), *_raw_condition(raw, start_column))


def _rolled_sql(
    rolled: list[tuple[int, int, int]],
    alias: str,
    each_bucket: tuple[str, list[SqlParam]] | None,
) -> tuple[str | None, list[SqlParam]]:
    """The condition (and parameters) for the roll-up rows of ``rolled`` (see :func:`_ranges`)."""
    if (
        each_bucket is not None
        and sum((high - low) // (width * _NS) for width, low, high in rolled) > _MAX_LISTED_BUCKETS
    ):
        # Decades: the ranges, the resource condition inside each term all the same.
        also, also_params = each_bucket
        terms = " OR ".join(
            f"({alias}.width = ? AND {alias}.bucket >= ? AND {alias}.bucket < ? AND {also})"
            for _ in rolled
        )
        return f"({terms})", [v for r in rolled for v in (*r, *also_params)]
    if each_bucket is not None:
        also, also_params = each_bucket
        listed = [(width, list(range(low, high, width * _NS))) for width, low, high in rolled]
        rolled_sql = (
            " OR ".join(
                f"({alias}.width = ? AND {alias}.bucket IN ({', '.join('?' * len(buckets))}) "
                f"AND {also})"
                for _, buckets in listed
            )
            or None
        )
        return (
            f"({rolled_sql})" if rolled_sql else None,
            [v for width, buckets in listed for v in (width, *buckets, *also_params)],
        )
    rolled_sql = (
        " OR ".join(
            f"({alias}.width = ? AND {alias}.bucket >= ? AND {alias}.bucket < ?)" for _ in rolled
        )
        or None
    )
    return f"({rolled_sql})" if rolled_sql else None, [v for r in rolled for v in r]


def _without(rolled: list[tuple[int, int, int]], part: _Part) -> list[tuple[int, int, int]]:
    """``rolled`` (:func:`plan`'s ranges) without ``part``'s (each a piece of one of them)."""
    kept = []
    for width, low, high in rolled:
        pieces = [(low, high)]
        for cut_width, cut_low, cut_high in part:
            if cut_width == width:
                pieces = [
                    (a, b)
                    for piece_low, piece_high in pieces
                    for a, b in (
                        (piece_low, min(piece_high, cut_low)),
                        (max(piece_low, cut_high), piece_high),
                    )
                    if a < b
                ]
        kept += [(width, a, b) for a, b in pieces]
    return kept


def _raw_condition(
    raw: list[tuple[int, int]], start_column: str
) -> tuple[str | None, list[SqlParam]]:
    """The condition (and parameters) for the raw spans of ``raw``'s ranges (``None``: none)."""
    raw_sql = " OR ".join(f"({start_column} >= ? AND {start_column} < ?)" for _ in raw)
    return (f"({raw_sql})" if raw_sql else None, [v for r in raw for v in r])


def _tail_mark(ctx: ReadContext) -> int | None:
    """The roll-ups' mark when span rows lie above it (the tail), else ``None`` (one probe)."""
    ((mark, top),) = ctx.execute(
        "SELECT span_id, (SELECT coalesce(max(id), 0) FROM spans) FROM rollup_mark"
    )
    return cast(int, mark) if cast(int, top) > cast(int, mark) else None


def _raw_pieces(
    ctx: ReadContext,
    time_range: TimeRange,
    raw: str | None,
    raw_params: list[SqlParam],
    alias: str,
) -> list[tuple[str, list[SqlParam]]]:
    """Conditions on the span rows (alias ``alias``) a read adds to its roll-up rows, one each.

    The raw partial minutes (:func:`plan`) of the rows the roll-ups count, and every row of
    the tail (above :func:`rolled_mark`) that starts in the window: no span is in both, none in
    the roll-up rows read.
    """
    mark = _tail_mark(ctx)
    if mark is None:
        return [] if raw is None else [(raw, raw_params)]
    tail: tuple[str, list[SqlParam]] = (
        f"({alias}.id > ? AND {alias}.start_unix_nano >= ? AND {alias}.start_unix_nano < ?)",
        [mark, time_range.start_unix_nano, time_range.end_unix_nano],
    )
    if raw is None:
        return [tail]
    return [(f"({raw} AND {alias}.id <= ?)", [*raw_params, mark]), tail]


_K = TypeVar("_K")


class _Group:
    """A read-side group: counts added, versions collected, durations into the read's table.

    ``index`` is the group's row in the read's :class:`SketchTable` (shared by its groups).
    """

    __slots__ = ("count", "errors", "first", "index", "last", "requests", "table", "versions")

    def __init__(self, index: int, table: SketchTable) -> None:
        self.index = index
        self.table = table
        self.count = 0
        self.requests = 0
        self.errors = 0
        self.first: int | None = None
        self.last: int | None = None
        self.versions: set[str] = set()

    def seen(self, first: int, last: int) -> None:
        self.first = first if self.first is None else min(self.first, first)
        self.last = last if self.last is None else max(self.last, last)

    def add_one(self, error: int, duration_ns: int) -> None:
        """Add one raw span or call: counted, an error if ``error``, its duration sketched."""
        self.count += 1
        self.errors += error
        self.table.add(self.index, duration_ns)


class _Groups(dict[_K, _Group]):
    """A read's groups by key, created on first use, with their :class:`SketchTable`."""

    def __init__(self) -> None:
        super().__init__()
        self.table = SketchTable()

    def __missing__(self, key: _K) -> _Group:
        group = self[key] = _Group(len(self), self.table)
        return group

    def percentiles(self) -> list[tuple[int | None, int | None, int | None]]:
        """``(p50, p95, p99)`` per group, by :attr:`_Group.index`."""
        return self.table.percentiles(len(self))

    def add_rolled_rows(
        self,
        keys: Sequence[_K],
        counts: Sequence[int],
        errors: Sequence[int],
        blobs: Sequence[bytes],
    ) -> list[int]:
        """Add roll-up rows (column by column) to their groups; returns each row's group.

        The counts are summed per group by numpy and the sketches handed to the table in one
        call: a week is thousands of rows, each an update of Python objects otherwise.
        """
        index = [self[key].index for key in keys]
        for group, count, error in zip(
            self.values(), self.sums(index, counts), self.sums(index, errors), strict=True
        ):
            group.count += count
            group.errors += error
        self.table.add_encoded_many(index, blobs)
        return index

    def sums(self, index: Sequence[int], values: Sequence[int]) -> list[int]:
        """``values`` summed per group (``index[i]`` is the group of ``values[i]``)."""
        if not index:
            return [0] * len(self)
        found = np.bincount(
            np.array(index, dtype=np.int64),
            weights=np.array(values, dtype=np.float64),
            minlength=len(self),
        )
        return [int(v) for v in found.tolist()]


def _services_kind(service_name: str | None) -> str:
    """:class:`ClosedDays`' kind of the ``red_services`` rows of every service, or of one."""
    return "services" if service_name is None else f"services\0{service_name}"


def services(
    ctx: ReadContext,
    time_range: TimeRange,
    limit: int,
    service_name: str | None = None,
    cache: ClosedDays | None = None,
) -> Page[ServiceSummary]:
    """RED per service from the roll-ups (see :class:`ServiceSummary`); one if ``service_name``.

    ``cache``: the store's :class:`ClosedDays` (its generations are read in ``ctx``).
    """
    time_range = widened(ctx, time_range)
    part, cached = _from_cache(
        cache,
        ctx,
        time_range,
        _services_kind(service_name),
        lambda closed: _merged_services(ctx, closed, service_name),
    )
    only = ""
    only_params: list[SqlParam] = []
    each_bucket = None
    if service_name is not None:
        only = "AND r.service_name = ?"
        only_params = [service_name]
        each_bucket = (_OF_SERVICE, only_params)
    rolled, rolled_params, raw, raw_params = _ranges(
        time_range, "x", "s.start_unix_nano", each_bucket=each_bucket, skip=part
    )
    groups: _Groups[str] = _Groups()
    if rolled is not None or cached:
        rows = cached
        if rolled is not None:
            rows = cached + ctx.execute(_SERVICE_ROWS + rolled, rolled_params)
        if rows:
            names, versions, counts, firsts, lasts, requests, errors, blobs = zip(
                *rows, strict=True
            )
            index = groups.add_rolled_rows(
                cast("tuple[str, ...]", names),
                cast("tuple[int, ...]", counts),
                cast("tuple[int, ...]", errors),
                cast("tuple[bytes, ...]", blobs),
            )
            for group, added in zip(
                groups.values(), groups.sums(index, cast("tuple[int, ...]", requests)), strict=True
            ):
                group.requests += added
            owners = np.array(index, dtype=np.int64)
            low = np.full(len(groups), _TIME_END, dtype=np.int64)
            high = np.full(len(groups), -_TIME_END, dtype=np.int64)
            np.minimum.at(low, owners, np.array(firsts, dtype=np.int64))
            np.maximum.at(high, owners, np.array(lasts, dtype=np.int64))
            for group, first, last in zip(
                groups.values(), low.tolist(), high.tolist(), strict=True
            ):
                group.seen(first, last)
            for name, version in set(zip(names, versions, strict=True)):
                if version:
                    groups[cast(str, name)].versions.add(cast(str, version))
    for name, version, start, entry, error, duration in chain.from_iterable(
        ctx.execute(
            "SELECT r.service_name, r.version, s.start_unix_nano, "
            f"s.kind IN (2, 5) OR s.parent_span_id IS NULL, s.status_code = {_ERROR}, "
            f"s.duration_ns FROM spans s JOIN resources r ON r.id = s.resource_id WHERE {where} "
            f"{only}",
            [*params, *only_params],
        )
        for where, params in _raw_pieces(ctx, time_range, raw, raw_params, "s")
    ):
        group = groups[cast(str, name)]
        group.count += 1
        group.seen(cast(int, start), cast(int, start))
        if version:
            group.versions.add(cast(str, version))
        if entry:
            group.requests += 1
            group.errors += cast(int, error)
            group.table.add(group.index, cast(int, duration))
    ordered = sorted(groups.items(), key=lambda item: (-item[1].requests, item[0]))
    found = groups.percentiles()
    items = []
    for name, group in ordered[:limit]:
        p50, p95, p99 = found[group.index]
        items.append(
            ServiceSummary(
                service_name=name,
                span_count=group.count,
                request_count=group.requests,
                error_count=group.errors,
                p50_duration_ns=p50,
                p95_duration_ns=p95,
                p99_duration_ns=p99,
                last_seen_unix_nano=cast(int, group.last),
                versions=sorted(group.versions),
                percentile_relative_error=RELATIVE_ACCURACY,
            )
        )
    return Page(items=items, total=len(groups))


def operations(
    ctx: ReadContext,
    service_name: str,
    time_range: TimeRange,
    limit: int,
    cache: ClosedDays | None = None,
) -> Page[OperationSummary]:
    """RED per span name of one service from the roll-ups (see :class:`OperationSummary`).

    ``cache``: as :func:`services`'.
    """
    time_range = widened(ctx, time_range)
    part, cached = _from_cache(
        cache,
        ctx,
        time_range,
        f"operations\0{service_name}",
        lambda closed: _merged_operations(ctx, closed, service_name),
    )
    rolled, rolled_params, raw, raw_params = _ranges(
        time_range,
        "x",
        "s.start_unix_nano",
        each_bucket=(_OF_SERVICE, [service_name]),
        skip=part,
    )
    mine = "IN (SELECT r.id FROM resources r WHERE r.service_name = ?)"
    groups: _Groups[str] = _Groups()
    if rolled is not None or cached:
        rows = cached
        if rolled is not None:
            rows = cached + ctx.execute(_OPERATION_ROWS + rolled, rolled_params)
        if rows:
            names, counts, errors, blobs = zip(*rows, strict=True)
            groups.add_rolled_rows(
                cast("tuple[str, ...]", names),
                cast("tuple[int, ...]", counts),
                cast("tuple[int, ...]", errors),
                cast("tuple[bytes, ...]", blobs),
            )
    for name, error, duration in chain.from_iterable(
        ctx.execute(
            f"SELECT s.name, s.status_code = {_ERROR}, s.duration_ns FROM spans s "
            f"WHERE s.resource_id {mine} AND {where}",
            [service_name, *params],
        )
        for where, params in _raw_pieces(ctx, time_range, raw, raw_params, "s")
    ):
        groups[cast(str, name)].add_one(cast(int, error), cast(int, duration))
    ordered = sorted(groups.items(), key=lambda item: (-item[1].count, item[0]))
    found = groups.percentiles()
    items = []
    for name, group in ordered[:limit]:
        p50, p95, p99 = found[group.index]
        items.append(
            OperationSummary(
                service_name=service_name,
                name=name,
                span_count=group.count,
                error_count=group.errors,
                p50_duration_ns=p50,
                p95_duration_ns=p95,
                p99_duration_ns=p99,
                percentile_relative_error=RELATIVE_ACCURACY,
            )
        )
    return Page(items=items, total=len(groups))


def _raw_calls(
    conn: sqlite3.Connection | ReadContext,
    where: tuple[str, list[SqlParam]],
    service_name: str | None,
) -> list[Call]:
    """The calls whose child span (alias ``c``) meets ``where`` (the raw parent/child join).

    ``where``: a condition and its parameters, e.g. :func:`_raw_condition`'s or
    :func:`_raw_pieces`'.
    """
    condition, params = where[0], list(where[1])
    only = ""
    if service_name is not None:
        only = "AND (p.service_name = ? OR c.service_name = ?)"
        params += [service_name, service_name]
    sql = (
        "SELECT p.service_name, c.service_name, c.start_unix_nano, c.duration_ns, "
        f"c.status_code = {_ERROR} FROM spans c CROSS JOIN spans p "
        "ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id "
        f"WHERE {condition} AND c.parent_span_id IS NOT NULL "
        f"AND p.service_name != c.service_name {only}"
    )
    if isinstance(conn, ReadContext):
        return cast("list[Call]", conn.execute(sql, params))
    return cast("list[Call]", conn.execute(sql, params).fetchall())


def _bounds(time_range: TimeRange) -> tuple[int, int]:
    return time_range.start_unix_nano, time_range.end_unix_nano


def _waiting_calls(
    ctx: ReadContext, ranges: list[tuple[int, int]], service_name: str | None
) -> list[Call]:
    """Calls of waiting children (``edge_pending``) in ``ranges`` whose parent is stored now.

    The deferred pass has not rolled them up yet; counting them here keeps the answer equal to
    the raw join at every moment. Few: the children written since the last pass (and true
    orphans, whose parent is not found).
    """
    if not ranges:
        return []
    where = " OR ".join("(q.start_unix_nano >= ? AND q.start_unix_nano < ?)" for _ in ranges)
    params: list[SqlParam] = [v for r in ranges for v in r]
    only = ""
    if service_name is not None:
        only = "AND (p.service_name = ? OR c.service_name = ?)"
        params += [service_name, service_name]
    return cast(
        "list[Call]",
        ctx.execute(
            "SELECT p.service_name, c.service_name, c.start_unix_nano, c.duration_ns, "
            f"c.status_code = {_ERROR} FROM edge_pending q "
            "CROSS JOIN spans p ON p.trace_id = q.trace_id AND p.span_id = q.parent_span_id "
            "CROSS JOIN spans c ON c.id = q.child_id "
            f"WHERE ({where}) AND p.service_name != c.service_name {only}",
            params,
        ),
    )


def service_edges(
    ctx: ReadContext,
    time_range: TimeRange,
    limit: int,
    service_name: str | None,
    cache: ClosedDays | None = None,
) -> list[ServiceEdge]:
    """Caller -> callee edges from the roll-ups (see :class:`ServiceEdge`).

    ``cache``: as :func:`services`'.
    """
    time_range = widened(ctx, time_range)
    part, cached = _from_cache(
        cache, ctx, time_range, "edges", lambda closed: _merged_edges(ctx, closed)
    )
    if service_name is not None:
        cached = [row for row in cached if service_name in (row[0], row[1])]
    rolled, rolled_params, raw, raw_params = _ranges(
        time_range, "x", "c.start_unix_nano", skip=part
    )
    groups: _Groups[tuple[str, str]] = _Groups()
    if rolled is not None or cached:
        rows = cached
        if rolled is not None:
            only = ""
            params = list(rolled_params)
            if service_name is not None:
                only = "AND (x.caller = ? OR x.callee = ?)"
                params += [service_name, service_name]
            rows = cached + ctx.execute(f"{_EDGE_ROWS}{rolled} {only}", params)
        if rows:
            callers, callees, counts, errors, blobs = zip(*rows, strict=True)
            groups.add_rolled_rows(
                list(
                    zip(
                        cast("tuple[str, ...]", callers),
                        cast("tuple[str, ...]", callees),
                        strict=True,
                    )
                ),
                cast("tuple[int, ...]", counts),
                cast("tuple[int, ...]", errors),
                cast("tuple[bytes, ...]", blobs),
            )
    rolled_ranges = [(low, high) for _, low, high in plan(*_bounds(time_range))[1]]
    # Calls not in the roll-ups yet: children still waiting for the deferred pass, the raw
    # partial minutes at the window's ends, and the tail's children.
    for caller, callee, _start, duration, error in chain(
        _waiting_calls(ctx, rolled_ranges, service_name),
        *(
            _raw_calls(ctx, piece, service_name)
            for piece in _raw_pieces(ctx, time_range, raw, raw_params, "c")
        ),
    ):
        groups[(caller, callee)].add_one(int(error), duration)
    ordered = sorted(groups.items(), key=lambda item: (-item[1].count, item[0]))
    found = groups.percentiles()
    result = []
    for (caller, callee), group in ordered[:limit]:
        p50, p95, p99 = found[group.index]
        result.append(
            ServiceEdge(
                caller=caller,
                callee=callee,
                call_count=group.count,
                error_count=group.errors,
                p50_duration_ns=p50,
                p95_duration_ns=p95,
                p99_duration_ns=p99,
                percentile_relative_error=RELATIVE_ACCURACY,
            )
        )
    return result


def deploys(
    ctx: ReadContext,
    time_range: TimeRange,
    limit: int,
    service_name: str | None,
    cache: ClosedDays | None = None,
) -> list[DeployRecord]:
    """Versions per service from the roll-ups' first/last start and span count per resource.

    ``cache``: as :func:`services`' (the same entries).
    """
    time_range = widened(ctx, time_range)
    part, merged = _from_cache(
        cache,
        ctx,
        time_range,
        _services_kind(service_name),
        lambda closed: _merged_services(ctx, closed, service_name),
    )
    cached = [(row[0], row[1], row[3], row[4], row[2]) for row in merged if row[1] != ""]
    rolled, rolled_params, raw, raw_params = _ranges(
        time_range, "x", "s.start_unix_nano", skip=part
    )
    only = ""
    only_params: list[SqlParam] = []
    if service_name is not None:
        only = "AND r.service_name = ?"
        only_params = [service_name]
    groups: _Groups[tuple[str, str]] = _Groups()
    queries = []
    if rolled is not None:
        queries.append(
            (
                "SELECT r.service_name, r.version, min(x.first_start), max(x.last_start), "
                "sum(x.span_count) FROM red_services x JOIN resources r ON r.id = x.resource_id "
                f"WHERE r.version != '' {only} AND {rolled} GROUP BY r.service_name, r.version",
                [*only_params, *rolled_params],
            )
        )
    for where, params in _raw_pieces(ctx, time_range, raw, raw_params, "s"):
        queries.append(
            (
                "SELECT r.service_name, r.version, min(s.start_unix_nano), "
                "max(s.start_unix_nano), count(*) FROM spans s "
                "JOIN resources r ON r.id = s.resource_id "
                f"WHERE r.version != '' {only} AND {where} GROUP BY r.service_name, r.version",
                [*only_params, *params],
            )
        )
    for name, version, first, last, count in chain(
        cached, *(ctx.execute(sql, params) for sql, params in queries)
    ):
        key = (cast(str, name), cast(str, version))
        group = groups[key]
        group.count += cast(int, count)
        group.seen(cast(int, first), cast(int, last))
    ordered = sorted(groups.items(), key=lambda item: (-cast(int, item[1].first), item[0]))
    return [
        DeployRecord(
            service_name=name,
            version=version,
            first_seen_unix_nano=cast(int, group.first),
            last_seen_unix_nano=cast(int, group.last),
            span_count=group.count,
        )
        for (name, version), group in ordered[:limit]
    ]


def log_counts(
    ctx: ReadContext, time_range: TimeRange, step: int, limit: int
) -> list[LogCountSeries] | None:
    """Log counts per service and bucket from ``red_logs`` (and the partial minutes' records).

    ``None`` when the buckets are not made of whole minutes (neither one bucket over the
    window nor a minute-aligned start and step): the caller then counts the raw records.
    """
    start, end = time_range.start_unix_nano, time_range.end_unix_nano
    if step >= end - start:
        raw_ranges, rolled = plan(start, end)
    elif start % _MINUTE == 0 and step % _MINUTE == 0:
        last = end - end % _MINUTE
        rolled = [(60, start, last)] if start < last else []
        raw_ranges = [(last, end)] if last < end else []
    else:
        return None
    # Both queries yield (service.name, bucket index, records, warn, error): the rolled minutes
    # and the partial minutes' raw records add into the same buckets.
    queries: list[tuple[str, list[int]]] = []
    if rolled:
        where = " OR ".join("(x.width = ? AND x.bucket >= ? AND x.bucket < ?)" for _ in rolled)
        queries.append(
            (
                "SELECT r.service_name, (x.bucket - ?) / ?, sum(x.records), "
                "sum(x.warn_records), sum(x.error_records) FROM red_logs x "
                f"JOIN resources r ON r.id = x.resource_id WHERE {where} GROUP BY 1, 2",
                [start, step, *(v for r in rolled for v in r)],
            )
        )
    if raw_ranges:
        where = " OR ".join("(l.time_unix_nano >= ? AND l.time_unix_nano < ?)" for _ in raw_ranges)
        queries.append(
            (
                "SELECT l.service_name, (l.time_unix_nano - ?) / ?, count(*), "
                "sum(l.severity_number BETWEEN 13 AND 16), sum(l.severity_number >= 17) "
                f"FROM logs l WHERE {where} GROUP BY 1, 2",
                [start, step, *(v for r in raw_ranges for v in r)],
            )
        )
    counts: dict[str, dict[int, list[int]]] = {}
    for sql, parameters in queries:
        for name, bucket, records, warn, error in ctx.execute(sql, parameters):
            found = counts.setdefault(cast(str, name), {}).setdefault(cast(int, bucket), [0, 0, 0])
            found[0] += cast(int, records)
            found[1] += cast(int, warn)
            found[2] += cast(int, error)
    return [
        LogCountSeries(
            service_name=name,
            points=[
                LogCountPoint(
                    bucket_start_unix_nano=start + bucket * step,
                    records=values[0],
                    warn_records=values[1],
                    error_records=values[2],
                )
                for bucket, values in sorted(counts[name].items())
            ],
        )
        for name in sorted(counts)[:limit]
    ]
