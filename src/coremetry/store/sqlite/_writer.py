"""The write side of the embedded store: one connection, blocking, run in a worker thread.

:class:`Writer` owns the store's single writer connection (the caller serialises calls with a
trio lock) and two caches of interned ids (resources, metric series). Each
:meth:`Writer.write` is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction: on any error it
rolls back (nothing of the batch is stored) and drops the caches, which may hold ids of rows
the rollback removed.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import msgspec

from coremetry.store.interface import RetentionResult, WriteResult
from coremetry.store.model import Attributes, MetricPoint, TelemetryBatch
from coremetry.store.validation import validate_batch

from . import _rollups
from ._codec import (
    LogRow,
    PointRow,
    SpanRow,
    encode_attributes,
    encode_json,
    fingerprint,
)

__all__ = ["Writer"]

_JSON_TEXT: Final = msgspec.json.Encoder(order="sorted").encode
"""Canonical JSON (sorted keys), as :func:`._codec.encode_json` writes it."""

_CACHE_MAX: Final = 100_000
"""Interned ids remembered per kind; the cache is cleared when it grows past this."""

_INSERT_SPAN: Final = (
    "INSERT OR IGNORE INTO spans (trace_id, span_id, parent_span_id, service_name, name, kind, "
    "start_unix_nano, end_unix_nano, duration_ns, status_code, status_message, resource_id, "
    "attributes, events, links, scope_name) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_LOG: Final = (
    "INSERT OR IGNORE INTO logs (time_unix_nano, observed_time_unix_nano, severity_number, "
    "severity_text, body, service_name, trace_id, span_id, resource_id, attributes, "
    "scope_name, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_POINT: Final = (
    "INSERT OR IGNORE INTO metric_points "
    "(series_id, time_unix_nano, start_time_unix_nano, value, histogram) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_RESOURCE: Final = (
    "INSERT OR IGNORE INTO resources (fingerprint, service_name, version, attributes) "
    "VALUES (?, ?, ?, ?)"
)
_INSERT_SERIES: Final = (
    "INSERT OR IGNORE INTO metric_series (fingerprint, name, service_name, type, unit, "
    "description, attributes, resource_id, is_monotonic, temporality) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_DELETE_SPANS: Final = (
    "DELETE FROM spans WHERE id IN "
    "(SELECT id FROM spans WHERE start_unix_nano < ? ORDER BY start_unix_nano LIMIT ?)"
)
_DELETE_LOGS: Final = (
    "DELETE FROM logs WHERE id IN "
    "(SELECT id FROM logs WHERE time_unix_nano < ? ORDER BY time_unix_nano, id LIMIT ?)"
)
_INDEX_NEW_LOGS: Final = "INSERT INTO logs_fts (rowid, body) SELECT id, body FROM logs WHERE id > ?"
_LOG_MINUTES: Final = (
    "INSERT INTO log_minutes (minute, min_id, max_id) "
    "SELECT time_unix_nano / 60000000000, min(id), max(id) FROM logs WHERE id > ? GROUP BY 1 "
    "ON CONFLICT (minute) DO UPDATE "
    "SET min_id = min(min_id, excluded.min_id), max_id = max(max_id, excluded.max_id)"
)
_UNINDEX_OLD_LOGS: Final = (
    "INSERT INTO logs_fts (logs_fts, rowid, body) SELECT 'delete', id, body FROM logs WHERE id IN "
    "(SELECT id FROM logs WHERE time_unix_nano < ? ORDER BY time_unix_nano, id LIMIT ?)"
)
_DELETE_POINTS: Final = (
    "DELETE FROM metric_points WHERE (series_id, time_unix_nano) IN "
    "(SELECT series_id, time_unix_nano FROM metric_points WHERE time_unix_nano < ? "
    "ORDER BY time_unix_nano LIMIT ?)"
)
_DELETE_EMPTY_SERIES: Final = (
    "DELETE FROM metric_series WHERE NOT EXISTS "
    "(SELECT 1 FROM metric_points p WHERE p.series_id = metric_series.id)"
)


def _version_text(attributes: Attributes) -> str:
    value = attributes.get("service.version", "")
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else encode_json(value)


class Writer:
    """The writer connection and its interned-id caches. Not thread-safe: one call at a time.

    Args:
        conn: an open connection in autocommit mode (``isolation_level=None``) on a migrated
            database.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._resources: dict[bytes, int] = {}
        self._series: dict[bytes, int] = {}
        self._rollups_stale = False  # retention deleted spans; straddling buckets not rebuilt
        self._logs_stale = False  # the same for log records
        self._parents_seen: int | None = None  # the deferred pass's watermark (None: all)
        self._tail = _rollups.TailRollup()  # the roll-ups of the spans above the mark
        _rollups.register_functions(conn)

    def _resource_id(
        self, service_name: str, attributes: Attributes, memo: dict[tuple[int, str], int]
    ) -> int:
        # Records of one OTLP resource usually share one attribute dict: remember it by
        # identity for this batch (the batch keeps every dict alive, so ids are stable).
        key = (id(attributes), service_name)
        found = memo.get(key)
        if found is not None:
            return found
        text = encode_attributes(attributes)
        digest = fingerprint(service_name, text)
        resource_id = self._resources.get(digest)
        if resource_id is None:
            self.conn.execute(
                _INSERT_RESOURCE, (digest, service_name, _version_text(attributes), text)
            )
            row = self.conn.execute(
                "SELECT id FROM resources WHERE fingerprint = ?", (digest,)
            ).fetchone()
            resource_id = int(row[0])
            if len(self._resources) >= _CACHE_MAX:
                self._resources.clear()
            self._resources[digest] = resource_id
        memo[key] = resource_id
        return resource_id

    def _series_id(
        self, point: MetricPoint, attributes_text: str | None, memo: dict[tuple[int, str], int]
    ) -> int:
        digest = fingerprint(point.name, point.service_name, attributes_text)
        series_id = self._series.get(digest)
        if series_id is None:
            resource_id = self._resource_id(point.service_name, point.resource_attributes, memo)
            self.conn.execute(
                _INSERT_SERIES,
                (
                    digest,
                    point.name,
                    point.service_name,
                    point.type,
                    point.unit,
                    point.description,
                    attributes_text,
                    resource_id,
                    int(point.is_monotonic),
                    point.temporality,
                ),
            )
            row = self.conn.execute(
                "SELECT id FROM metric_series WHERE fingerprint = ?", (digest,)
            ).fetchone()
            series_id = int(row[0])
            if len(self._series) >= _CACHE_MAX:
                self._series.clear()
            self._series[digest] = series_id
        return series_id

    def _span_rows(self, batch: TelemetryBatch, memo: dict[tuple[int, str], int]) -> list[SpanRow]:
        # The write path's hot loop (OTLP ingest goes through it): names bound locally, the
        # resource memo looked up inline, JSON encoded straight to text.
        fromhex = bytes.fromhex
        encode = _JSON_TEXT
        resource_id = self._resource_id
        rows: list[SpanRow] = []
        append = rows.append
        for span in batch.spans:
            start, end = span.start_time_unix_nano, span.end_time_unix_nano
            parent = span.parent_span_id
            service = span.service_name
            resource = span.resource_attributes
            rid = memo.get((id(resource), service))
            if rid is None:
                rid = resource_id(service, resource, memo)
            attributes = span.attributes
            events = span.events
            links = span.links
            append(
                (
                    fromhex(span.trace_id),
                    fromhex(span.span_id),
                    fromhex(parent) if parent else None,
                    service,
                    span.name,
                    int(span.kind),
                    start,
                    end,
                    end - start if end > start else 0,
                    int(span.status_code),
                    span.status_message or None,
                    rid,
                    encode(attributes).decode() if attributes else None,
                    encode(events).decode() if events else None,
                    encode(links).decode() if links else None,
                    span.scope_name or None,
                )
            )
        return rows

    def _log_rows(self, batch: TelemetryBatch, memo: dict[tuple[int, str], int]) -> list[LogRow]:
        rows: list[LogRow] = []
        for record in batch.logs:
            attributes = encode_attributes(record.attributes)
            resource_id = self._resource_id(record.service_name, record.resource_attributes, memo)
            rows.append(
                (
                    record.time_unix_nano,
                    record.observed_time_unix_nano,
                    record.severity_number,
                    record.severity_text,
                    record.body,
                    record.service_name,
                    bytes.fromhex(record.trace_id) if record.trace_id else None,
                    bytes.fromhex(record.span_id) if record.span_id else None,
                    resource_id,
                    attributes,
                    record.scope_name or None,
                    # Identity: every field (the resource by its interned id, which is
                    # itself unique per service name + resource attributes).
                    fingerprint(
                        record.time_unix_nano,
                        record.observed_time_unix_nano,
                        record.severity_number,
                        record.severity_text,
                        record.body,
                        record.service_name,
                        record.trace_id,
                        record.span_id,
                        attributes,
                        resource_id,
                        record.scope_name,
                    ),
                )
            )
        return rows

    def _point_rows(
        self, batch: TelemetryBatch, memo: dict[tuple[int, str], int]
    ) -> list[PointRow]:
        rows: list[PointRow] = []
        for point in batch.metrics:
            series_id = self._series_id(point, encode_attributes(point.attributes), memo)
            histogram = point.histogram
            rows.append(
                (
                    series_id,
                    point.time_unix_nano,
                    point.start_time_unix_nano,
                    # SQLite stores a NaN REAL as NULL: NULL *is* our NaN (see _schema).
                    float(point.value) if point.value is not None else None,
                    encode_json(histogram) if histogram is not None else None,
                )
            )
        return rows

    def write(self, batch: TelemetryBatch, cutoff_unix_nano: int | None) -> WriteResult:
        """Store ``batch`` in one transaction (blocking).

        Args:
            batch: the records.
            cutoff_unix_nano: records older than this are counted in ``outside_retention``
                (``None``: retention is off).

        Raises:
            QueryRejected: a malformed record (nothing is stored).
            sqlite3.Error: the database failed (nothing is stored).
        """
        validate_batch(batch)
        outside = 0
        if cutoff_unix_nano is not None:
            outside = (
                sum(1 for s in batch.spans if s.start_time_unix_nano < cutoff_unix_nano)
                + sum(1 for r in batch.logs if r.time_unix_nano < cutoff_unix_nano)
                + sum(1 for p in batch.metrics if p.time_unix_nano < cutoff_unix_nano)
            )
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            memo: dict[tuple[int, str], int] = {}
            spans = logs = points = 0
            if batch.spans:
                span_rows = self._span_rows(batch, memo)
                last_span = conn.execute("SELECT coalesce(max(id), 0) FROM spans").fetchone()[0]
                spans = conn.executemany(_INSERT_SPAN, span_rows).rowcount
                if spans:
                    # The RED roll-ups: summed in memory, written every ROLL_EVERY spans.
                    self._tail.written(
                        conn, last_span, span_rows if spans == len(span_rows) else None
                    )
            if batch.logs:
                rows = self._log_rows(batch, memo)
                last = conn.execute("SELECT coalesce(max(id), 0) FROM logs").fetchone()[0]
                logs = conn.executemany(_INSERT_LOG, rows).rowcount
                if logs:
                    # The new rows are exactly those above the previous largest id.
                    conn.execute(_INDEX_NEW_LOGS, (last,))
                    conn.execute(_LOG_MINUTES, (last,))
                    _rollups.apply_logs(conn, last)
            if batch.metrics:
                point_rows = self._point_rows(batch, memo)
                points = conn.executemany(_INSERT_POINT, point_rows).rowcount
                widths: dict[int, int] = {}
                for point, row in zip(batch.metrics, point_rows, strict=True):
                    if point.histogram is not None:
                        width = len(point.histogram.bucket_counts)
                        widths[row[0]] = max(width, widths.get(row[0], 0))
                if widths:
                    conn.executemany(
                        "UPDATE metric_series SET max_buckets = ? WHERE id = ? AND max_buckets < ?",
                        [(w, sid, w) for sid, w in widths.items()],
                    )
            conn.execute("COMMIT")
        except BaseException:
            self._resources.clear()
            self._series.clear()
            self._tail.drop()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return WriteResult(
            spans_written=spans,
            spans_duplicate=len(batch.spans) - spans,
            logs_written=logs,
            logs_duplicate=len(batch.logs) - logs,
            metric_points_written=points,
            metric_points_duplicate=len(batch.metrics) - points,
            outside_retention=outside,
        )

    def resolve_pending(self) -> None:
        """The roll-ups' deferred pass (:func:`._rollups.resolve_pending`), one transaction."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._tail.roll_up_all(conn)
            seen = _rollups.resolve_pending(conn, self._parents_seen)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._parents_seen = seen

    def delete_chunk(self, cutoff_unix_nano: int, chunk: int) -> RetentionResult:
        """Delete up to ``chunk`` spans, logs and points each older than the cutoff (blocking).

        One transaction. Metric series left without points are deleted with the last chunk
        (when fewer than ``chunk`` points were deleted). The RED roll-ups: buckets ending by the
        cutoff go with each chunk; the buckets straddling it are rebuilt from what is left
        with the last chunk of spans (:mod:`._rollups`).
        """
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            # The tail rolled up first: drop_before and the rebuild work on rolled-up rows.
            self._tail.roll_up_all(conn)
            spans = conn.execute(_DELETE_SPANS, (cutoff_unix_nano, chunk)).rowcount
            if spans:
                self._rollups_stale = True
                _rollups.drop_before(conn, cutoff_unix_nano)
            if spans < chunk and self._rollups_stale:
                # Waiting children whose parent came are rolled up first: the rebuilt minute
                # counts them from the raw join, so they must not stay pending as well.
                _rollups.resolve_pending(conn, None)
                _rollups.rebuild_straddling(conn, cutoff_unix_nano)
            conn.execute(_UNINDEX_OLD_LOGS, (cutoff_unix_nano, chunk))
            logs = conn.execute(_DELETE_LOGS, (cutoff_unix_nano, chunk)).rowcount
            points = conn.execute(_DELETE_POINTS, (cutoff_unix_nano, chunk)).rowcount
            if 0 < points < chunk:
                conn.execute(_DELETE_EMPTY_SERIES)
                self._series.clear()
            if logs:
                self._logs_stale = True
            if logs < chunk and self._logs_stale:
                _rollups.drop_logs_before(conn, cutoff_unix_nano)
            if logs < chunk:
                # Whole minutes before the cutoff are empty now (a partly deleted minute keeps
                # its bounds: a superset is still a correct bound).
                conn.execute(
                    "DELETE FROM log_minutes WHERE minute < ?",
                    (cutoff_unix_nano // 60_000_000_000,),
                )
            conn.execute("COMMIT")
        except BaseException:
            self._series.clear()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if spans:
            # Row ids may be reused once the newest rows are gone: the next pass checks all.
            self._parents_seen = None
        if spans < chunk:
            self._rollups_stale = False
        if logs < chunk:
            self._logs_stale = False
        return RetentionResult(spans_deleted=spans, logs_deleted=logs, metric_points_deleted=points)
