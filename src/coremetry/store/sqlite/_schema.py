"""The embedded store's schema and its forward migrations.

The schema version is SQLite's ``PRAGMA user_version``. :data:`MIGRATIONS` is the ordered list
of steps; step ``i`` (0-based) takes a database from version ``i`` to ``i + 1`` in one
transaction, so a crash mid-migration leaves the previous version intact. Opening a database
runs every step above its version; a database *newer* than :data:`SCHEMA_VERSION` (written by
a later Coremetry) is refused, never downgraded.

Tables (version 8):

- ``resources``: one row per distinct resource (``service.name`` + resource attributes),
  interned so that spans, log records and metric series store a small integer instead of the
  same attribute map over and over. ``version`` is the resource attribute ``service.version``
  as text (``""`` when absent), which is how deploys are read.
- ``spans``: one row per span. Ids are stored as raw bytes (16-byte trace id, 8-byte span id;
  ``parent_span_id`` is NULL for a root span) — half the size of hex text in the table and in
  each index. ``duration_ns`` is ``max(0, end - start)``. Attributes, events and links are
  JSON text (NULL when empty). Unique on ``(trace_id, span_id)``: writes use
  ``INSERT OR IGNORE``, which makes them idempotent.
- ``logs``: one row per log record; ``fingerprint`` (16-byte BLAKE2b of every field) is
  unique, which makes log writes idempotent. ``logs_fts`` (version 2) is an FTS5
  *external-content* index over ``logs.body`` (unicode61 tokenizer: case- and
  diacritic-insensitive). The writer keeps it in step in the same transaction, with one
  ``INSERT ... SELECT`` per write and per retention chunk rather than a trigger per row
  (a trigger made log writes 2.3x slower): anything else that inserts into or deletes from
  ``logs`` must do the same.
- ``log_minutes`` (version 3): per minute of log time, the smallest and largest log row id,
  kept by the writer (a superset after retention deletes: still correct as a bound).
- ``metric_series`` / ``metric_points``: a series is ``(name, service_name, attributes)``
  (``fingerprint`` unique; ``max_buckets``, version 3, the longest ``bucket_counts`` of its
  histogram points); its points are keyed by ``(series_id, time_unix_nano)``. A NaN
  value is stored as NULL (SQLite has no NaN), ±Inf as itself; histogram points keep their
  buckets as JSON in ``histogram``.

- ``red_services`` / ``red_operations`` / ``red_edges`` / ``edge_pending`` / ``red_logs``
  (version 4; sketches re-encoded in 5): the RED roll-ups (and log counts) the writer keeps
  at ingest (spans: in bulk, up to the mark of version 7), described in :mod:`._rollups`.
- ``rollup_days`` (version 6): per UTC day (its start, unix ns), a generation every writer
  bumps in the transaction that changes that day's roll-up rows (day ``-1``: any day's, for
  retention), so that a process can tell whether merged rows it keeps are still the day's,
  whichever process wrote (``._rollups.ClosedDays``).
- ``rollup_mark`` (version 7): one row, the largest span row id the roll-ups count (the rows
  above it, the newest few seconds, are read raw beside them) and (version 8) an epoch every
  change of it bumps (``._rollups.TailRollup``).

Every query of :mod:`coremetry.store.sqlite` has an index; the comment on each index names the
queries that use it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Final

from ._rollups import build_rollups, reencode_sketches

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SchemaTooNew", "migrate", "schema_version"]

_V1: Final[tuple[str, ...]] = (
    """
    CREATE TABLE resources (
        id INTEGER PRIMARY KEY,
        fingerprint BLOB NOT NULL UNIQUE,
        service_name TEXT NOT NULL,
        version TEXT NOT NULL,
        attributes TEXT
    )
    """,
    """
    CREATE TABLE spans (
        id INTEGER PRIMARY KEY,
        trace_id BLOB NOT NULL,
        span_id BLOB NOT NULL,
        parent_span_id BLOB,
        service_name TEXT NOT NULL,
        name TEXT NOT NULL,
        kind INTEGER NOT NULL,
        start_unix_nano INTEGER NOT NULL,
        end_unix_nano INTEGER NOT NULL,
        duration_ns INTEGER NOT NULL,
        status_code INTEGER NOT NULL,
        status_message TEXT,
        resource_id INTEGER NOT NULL,
        attributes TEXT,
        events TEXT,
        links TEXT,
        scope_name TEXT
    )
    """,
    # Identity (idempotent writes) and the parent lookup of service_edges.
    "CREATE UNIQUE INDEX spans_identity ON spans (trace_id, span_id)",
    # get_trace (ordered pages), a trace's start for search_traces' ordering.
    "CREATE INDEX spans_trace_start ON spans (trace_id, start_unix_nano, span_id)",
    # Range scans: services, edges, deploys, search_traces without a service, retention.
    "CREATE INDEX spans_start ON spans (start_unix_nano)",
    # operations, search_traces by service (replaced in version 3).
    "CREATE INDEX spans_service_start ON spans (service_name, start_unix_nano)",
    """
    CREATE TABLE logs (
        id INTEGER PRIMARY KEY,
        time_unix_nano INTEGER NOT NULL,
        observed_time_unix_nano INTEGER NOT NULL,
        severity_number INTEGER NOT NULL,
        severity_text TEXT NOT NULL,
        body TEXT NOT NULL,
        service_name TEXT NOT NULL,
        trace_id BLOB,
        span_id BLOB,
        resource_id INTEGER NOT NULL,
        attributes TEXT,
        scope_name TEXT,
        fingerprint BLOB NOT NULL
    )
    """,
    "CREATE UNIQUE INDEX logs_identity ON logs (fingerprint)",
    # search_logs newest first, retention.
    "CREATE INDEX logs_time ON logs (time_unix_nano)",
    # search_logs by service (replaced in version 3).
    "CREATE INDEX logs_service_time ON logs (service_name, time_unix_nano)",
    # search_logs by trace id.
    "CREATE INDEX logs_trace ON logs (trace_id, time_unix_nano) WHERE trace_id IS NOT NULL",
    """
    CREATE TABLE metric_series (
        id INTEGER PRIMARY KEY,
        fingerprint BLOB NOT NULL UNIQUE,
        name TEXT NOT NULL,
        service_name TEXT NOT NULL,
        type TEXT NOT NULL,
        unit TEXT NOT NULL,
        description TEXT NOT NULL,
        attributes TEXT,
        resource_id INTEGER NOT NULL,
        is_monotonic INTEGER NOT NULL,
        temporality TEXT NOT NULL
    )
    """,
    # metric_names (by name / prefix), metric_series (the series of one name).
    "CREATE INDEX metric_series_name ON metric_series (name, service_name)",
    """
    CREATE TABLE metric_points (
        series_id INTEGER NOT NULL,
        time_unix_nano INTEGER NOT NULL,
        start_time_unix_nano INTEGER NOT NULL,
        value REAL,
        histogram TEXT,
        PRIMARY KEY (series_id, time_unix_nano)
    ) WITHOUT ROWID
    """,
    # Retention and the store's time extent; the primary key serves every series read.
    "CREATE INDEX metric_points_time ON metric_points (time_unix_nano)",
)

_V2: Final[tuple[str, ...]] = (
    """
    CREATE VIRTUAL TABLE logs_fts USING fts5(
        body, content='logs', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
    )
    """,
    # Index what version 1 stored (external content: rebuild reads logs.body).
    "INSERT INTO logs_fts (logs_fts) VALUES ('rebuild')",
)

_V3: Final[tuple[str, ...]] = (
    # Per minute of log time, the smallest and largest log row id: a text search over a time
    # range asks FTS5 only for the rowids in that span (FTS5 seeks rowid ranges), so BM25 is
    # computed for the matches of the range rather than of every log record.
    """
    CREATE TABLE log_minutes (
        minute INTEGER PRIMARY KEY,
        min_id INTEGER NOT NULL,
        max_id INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    "INSERT INTO log_minutes (minute, min_id, max_id) "
    "SELECT time_unix_nano / 60000000000, min(id), max(id) FROM logs GROUP BY 1",
    # search_traces(status="error"): errors are few, so they get their own (partial) index.
    "CREATE INDEX spans_errors ON spans (start_unix_nano) WHERE status_code = 2",
    # By resource instead of by service name: a service is its few resources (a resource is
    # service.name + the other resource attributes), an integer key is cheaper to maintain
    # than text (spans written ~20 % faster), and deploys gets first/last/count per resource
    # (= version) in a range by three seeks.
    "DROP INDEX spans_service_start",
    "CREATE INDEX spans_resource_start ON spans (resource_id, start_unix_nano)",
    "DROP INDEX logs_service_time",
    "CREATE INDEX logs_resource_time ON logs (resource_id, time_unix_nano)",
    # metric_series with a percentile sums histogram buckets as columns: how many there are.
    "ALTER TABLE metric_series ADD COLUMN max_buckets INTEGER NOT NULL DEFAULT 0",
    "UPDATE metric_series SET max_buckets = coalesce((SELECT max(json_array_length("
    "p.histogram, '$.bucket_counts')) FROM metric_points p WHERE p.series_id = metric_series.id"
    "), 0) WHERE type = 'histogram'",
)

_V4: Final[tuple[str | Callable[[sqlite3.Connection], None], ...]] = (
    # RED roll-ups (see ._rollups): per bucket of ``width`` seconds (60, 3600, 86400) starting
    # at ``bucket`` (unix ns), per resource (services, deploys), per resource and span name
    # (operations) and per caller -> callee service (edges), with a latency sketch.
    """
    CREATE TABLE red_services (
        width INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        resource_id INTEGER NOT NULL,
        span_count INTEGER NOT NULL,
        first_start INTEGER NOT NULL,
        last_start INTEGER NOT NULL,
        request_count INTEGER NOT NULL,
        error_count INTEGER NOT NULL,
        duration_sum INTEGER NOT NULL,
        sketch BLOB NOT NULL,
        PRIMARY KEY (width, bucket, resource_id)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE red_operations (
        width INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        resource_id INTEGER NOT NULL,
        name TEXT NOT NULL,
        span_count INTEGER NOT NULL,
        error_count INTEGER NOT NULL,
        duration_sum INTEGER NOT NULL,
        sketch BLOB NOT NULL,
        PRIMARY KEY (width, bucket, resource_id, name)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE red_edges (
        width INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        caller TEXT NOT NULL,
        callee TEXT NOT NULL,
        call_count INTEGER NOT NULL,
        error_count INTEGER NOT NULL,
        duration_sum INTEGER NOT NULL,
        sketch BLOB NOT NULL,
        PRIMARY KEY (width, bucket, caller, callee)
    ) WITHOUT ROWID
    """,
    # Child spans whose parent span is not stored (yet): the edge is rolled up when it comes.
    """
    CREATE TABLE edge_pending (
        trace_id BLOB NOT NULL,
        parent_span_id BLOB NOT NULL,
        child_id INTEGER NOT NULL,
        start_unix_nano INTEGER NOT NULL,
        PRIMARY KEY (trace_id, parent_span_id, child_id)
    ) WITHOUT ROWID
    """,
    # Retention of pending children.
    "CREATE INDEX edge_pending_start ON edge_pending (start_unix_nano)",
    # Log records per bucket and resource by severity (log_counts, list_services).
    """
    CREATE TABLE red_logs (
        width INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        resource_id INTEGER NOT NULL,
        records INTEGER NOT NULL,
        warn_records INTEGER NOT NULL,
        error_records INTEGER NOT NULL,
        PRIMARY KEY (width, bucket, resource_id)
    ) WITHOUT ROWID
    """,
    # Roll up what earlier versions stored (once, in this step's transaction).
    build_rollups,
)

_V5: Final[tuple[str | Callable[[sqlite3.Connection], None], ...]] = (
    # The roll-ups' sketches as fixed-width records read in bulk (see coremetry.store._sketch).
    reencode_sketches,
)

_V6: Final[tuple[str | Callable[[sqlite3.Connection], None], ...]] = (
    # Per UTC day, the generation of its roll-up rows (day -1: retention's, for every day).
    """
    CREATE TABLE rollup_days (
        day INTEGER PRIMARY KEY,
        generation INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
)

_V7: Final[tuple[str | Callable[[sqlite3.Connection], None], ...]] = (
    # The roll-ups' mark: span rows above it are not rolled up yet (read raw beside them).
    """
    CREATE TABLE rollup_mark (
        only INTEGER PRIMARY KEY CHECK (only = 0),
        span_id INTEGER NOT NULL
    )
    """,
    # Every span stored so far was rolled up in its own write.
    "INSERT INTO rollup_mark (only, span_id) SELECT 0, coalesce(max(id), 0) FROM spans",
)

_V8: Final[tuple[str | Callable[[sqlite3.Connection], None], ...]] = (
    # The mark's epoch, bumped by every change of it: a writer tells by it, not by the mark's
    # value, whether another process moved the mark (retention may move it back down).
    "ALTER TABLE rollup_mark ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",
)

MIGRATIONS: Final[tuple[Sequence[str | Callable[[sqlite3.Connection], None]], ...]] = (
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V7,
    _V8,
)
"""Step ``i`` takes the schema from version ``i`` to ``i + 1``: 1 the tables and indexes, 2 the
full-text index over log bodies (built from the logs already stored), 3 what
``bench/store_queries.py`` showed missing: the log id ranges per minute (text search over a
range), an index of error spans, per-resource indexes instead of per-service-name ones (deploys;
cheaper writes), and the histogram width of each metric series; 4 the RED roll-ups
(:mod:`._rollups`), built from the spans already stored; 5 the roll-ups' sketches re-encoded
as fixed-width records (:mod:`coremetry.store._sketch`), which a read merges in bulk; 6 the
roll-up days' generations, written by every process that writes (``._rollups.ClosedDays``); 7
the roll-ups' mark, so that a writer rolls up its spans in bulk (``._rollups.TailRollup``); 8
the mark's epoch."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The version this code writes and reads."""


class SchemaTooNew(Exception):
    """Raised by :func:`migrate` when the database was written by a newer schema version."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"its schema version is {found}, newer than this Coremetry's {SCHEMA_VERSION}: "
            "upgrade Coremetry, or point it at another data directory"
        )
        self.found = found


def schema_version(conn: sqlite3.Connection) -> int:
    """Return the database's ``PRAGMA user_version`` (blocking)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, *, target: int = SCHEMA_VERSION) -> int:
    """Bring the database up to ``target`` (blocking); return the version found before.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each step runs in its own
    ``BEGIN IMMEDIATE`` transaction together with the new ``user_version``, so concurrent
    openers serialise and never run a step twice.

    Raises:
        SchemaTooNew: the database's version is above :data:`SCHEMA_VERSION`.
        sqlite3.Error: a step failed (its transaction is rolled back).
    """
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(found)
    for step in range(found, min(target, SCHEMA_VERSION)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have migrated while we waited for the lock.
            if schema_version(conn) > step:
                conn.execute("COMMIT")
                continue
            for statement in MIGRATIONS[step]:
                if isinstance(statement, str):
                    conn.execute(statement)
                else:
                    statement(conn)
            conn.execute(f"PRAGMA user_version = {step + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return found
