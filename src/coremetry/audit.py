"""The audit log: one row per gated call, kept in the embedded database.

Every ``tools/call``, ``resources/read`` and ``prompts/get`` — allowed or refused — ends in one
:class:`~coremetry.mcp.CallRecord` from the dispatcher's call observer
(:meth:`~coremetry.mcp.Server.set_call_observer`); :meth:`AuditLog.observe` is that observer.
Issue 4 "Audit log"; ``shared/DESIGN.md`` §3.

Storage:

- Table ``audit_log`` in ``<data_dir>/coremetry.db``, created here with
  ``CREATE TABLE IF NOT EXISTS`` plus its indexes; other modules own other tables in the same
  file. The file is put in WAL mode and every connection sets ``PRAGMA busy_timeout``
  (:data:`BUSY_TIMEOUT_MS`), so the writer, readers (``coremetry audit tail``) and the other
  tables' owners do not fail on each other's locks.
- Columns: ``at_unix_nano`` (the call's wall-clock start), ``sub``, ``token_name``, ``kind``
  (how the caller authenticated: ``jwt``, ``service_token``, ...), ``role``, ``transport``,
  ``call_kind`` (``tool``/``resource``/``prompt``), ``name``, ``arguments_sha256`` (a digest;
  the arguments themselves are never stored, nor logged), ``outcome``, ``duration_ms`` and
  ``source`` (``"mcp"``).
- Append-only from the server's point of view: there is no update or delete API; the only rows
  ever removed are those older than the retention period.

Writing — never on the call's path:

- :meth:`AuditLog.observe` only puts the record in a bounded in-memory queue (``queue_size``)
  and returns; it never blocks, never raises and hashes nothing (the record's
  ``arguments_sha256`` is computed by the writer, in its worker thread). When the queue is full
  (the disk cannot keep up) or the log is closed, the record is **dropped**: the drop is
  counted (:meth:`AuditLog.statistics`) and a warning is logged once per episode, then a
  summary with the number dropped once the writer catches up. Calls are never slowed down or
  refused because of the audit log.
- :meth:`AuditLog.run_writer` (a long-running task) takes what is queued in batches of up to
  ``batch_size`` records and writes each batch in one transaction in a worker thread
  (:func:`trio.to_thread.run_sync`). After the first record of a batch arrives it gathers for
  up to ``gather_s`` seconds (0.05 by default; a full batch, :meth:`AuditLog.wait_flushed` or
  :meth:`AuditLog.aclose` end the wait at once), so a busy server writes a few large
  transactions a second instead of one per handful of calls: each batch costs a worker-thread
  hand-off and a commit, paid on the event loop's core. A batch that fails to write
  (``sqlite3.Error``, or any other exception: a bug is logged with its traceback) is logged and
  counted as failed; the writer goes on — a failure never ends the server.
- Retention: when ``retention_days > 0`` the writer deletes rows older than that when it starts
  and then every ``retention_interval_s`` seconds (trio's clock).
- Shutdown: :meth:`AuditLog.aclose` stops accepting records and waits until everything queued
  is written; if the writer task is cancelled instead, it still writes what is queued (shielded)
  before it returns.

Administration — accounts and tokens: :meth:`AuditLog.record_admin` writes one row per admin
action (``user add|disable|enable|delete|passwd``, ``token create|revoke``), from the CLI or the
admin REST API, synchronously (the action is rare; the row is on disk when the command or request
answers). Such a row has ``call_kind`` ``"admin"``, ``name`` the action and its target (``"user
disable alice"``), ``transport`` ``"cli"`` or ``"rest"``, ``source`` :data:`ADMIN_SOURCE`,
``outcome`` ``ok``, ``not_found``, ``bad_args`` or ``denied``, and an empty
``arguments_sha256``: never a password or a token, nor a digest of one.

Reading: :meth:`AuditLog.tail` (synchronous, blocking; call it from a worker thread inside trio)
returns the newest rows first; records still queued are not visible yet.
:func:`register_audit_resource` exposes the newest :data:`RECENT_LIMIT` rows as the admin-only
MCP resource :data:`RECENT_URI`.
"""

import itertools
import logging
import math
import os
import sqlite3
import time
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec
import trio

from coremetry.config import Config
from coremetry.mcp import CallContext, CallRecord, Resource, Server
from coremetry.private_files import create_private_file
from coremetry.roles import Caller

log = logging.getLogger("coremetry.audit")

DB_FILENAME: Final = "coremetry.db"
"""The embedded database's file name inside the data directory (shared with other tables)."""

BUSY_TIMEOUT_MS: Final = 5000
"""How long a statement waits for another connection's lock before failing, in ms."""

SOURCE: Final = "mcp"
"""The ``source`` of every row written by the MCP server."""

ADMIN_SOURCE: Final = "admin"
"""The ``source`` of the rows :meth:`AuditLog.record_admin` writes."""

ADMIN_CALL_KIND: Final = "admin"
"""The ``call_kind`` of an admin action's row."""

RECENT_URI: Final = "coremetry://audit/recent"
"""The admin-only MCP resource listing the newest audit rows."""

RECENT_LIMIT: Final = 100
"""How many rows :data:`RECENT_URI` returns, newest first."""

RECENT_FLUSH_WAIT_S: Final = 1.0
"""Longest a read of :data:`RECENT_URI` waits for the records queued before it, in seconds."""

NANOS_PER_DAY: Final = 86_400 * 1_000_000_000

_SCHEMA: Final[tuple[str, ...]] = (
    """
    CREATE TABLE IF NOT EXISTS audit_log (
        id INTEGER PRIMARY KEY,
        at_unix_nano INTEGER NOT NULL,
        sub TEXT NOT NULL,
        token_name TEXT NOT NULL,
        kind TEXT NOT NULL,
        role TEXT NOT NULL,
        transport TEXT NOT NULL,
        call_kind TEXT NOT NULL,
        name TEXT NOT NULL,
        arguments_sha256 TEXT NOT NULL,
        outcome TEXT NOT NULL,
        duration_ms REAL NOT NULL,
        source TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at_unix_nano)",
    "CREATE INDEX IF NOT EXISTS audit_log_sub_at ON audit_log (sub, at_unix_nano)",
)

_COLUMNS: Final = (
    "at_unix_nano, sub, token_name, kind, role, transport, call_kind, name, "
    "arguments_sha256, outcome, duration_ms, source"
)
_PLACEHOLDERS: Final = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT: Final = f"INSERT INTO audit_log ({_COLUMNS}) VALUES {_PLACEHOLDERS}"

_ROWS_PER_INSERT: Final = 32
"""Rows per multi-row ``INSERT`` in a batch (the remainder goes one row per statement).

One statement step inserts them all: ~20 % less CPU per row than one row per step, and the
writer thread gives up and takes back the GIL once per 32 rows instead of once per row (each
take-back may have to wait for the event loop). 32 x 12 = 384 parameters, well under SQLite's
smallest default limit (999)."""
_INSERT_MANY: Final = f"INSERT INTO audit_log ({_COLUMNS}) VALUES " + ", ".join(
    [_PLACEHOLDERS] * _ROWS_PER_INSERT
)

_PURGE: Final = (
    "DELETE FROM audit_log WHERE id IN "
    "(SELECT id FROM audit_log WHERE at_unix_nano < ? ORDER BY at_unix_nano LIMIT ?)"
)
_PURGE_BATCH: Final = 5000
"""Most rows deleted per retention transaction."""

_Row = tuple[int, str, str, str, str, str, str, str, str, str, float, str]


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the audit log, as :meth:`AuditLog.tail` returns it.

    Attributes:
        at_unix_nano: when the call started (wall clock), in ns since the Unix epoch.
        sub: the caller's identity.
        token_name: the service token's name, or ``""``.
        kind: how the caller authenticated (``jwt``, ``service_token``, ``local``, ...).
        role: the caller's role at the time of the call.
        transport: ``stdio``, ``http``, ``sse``, ``ws``, ...
        call_kind: ``tool``, ``resource`` or ``prompt``; ``admin`` for an admin action.
        name: the tool or prompt name, or the resource URI (a template's, for a templated read);
            for an admin action, the action and its target (``"user disable alice"``).
        arguments_sha256: hex SHA-256 of the arguments (never the arguments).
        outcome: ``ok``, one of the five tool-error classes, ``denied``, ``rate_limited`` or
            ``cancelled``.
        duration_ms: how long the call took, in milliseconds.
        source: who wrote the row (``"mcp"``, or ``"admin"`` for an admin action).
    """

    at_unix_nano: int
    sub: str
    token_name: str
    kind: str
    role: str
    transport: str
    call_kind: str
    name: str
    arguments_sha256: str
    outcome: str
    duration_ms: float
    source: str


class AuditStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of an :class:`AuditLog`'s counters.

    Attributes:
        queued: records waiting for the writer.
        written_total: records written since creation.
        dropped_total: records dropped because the queue was full or the log closed.
        failed_total: records lost because their batch could not be written.
        purged_total: rows deleted by retention since creation.
    """

    queued: int
    written_total: int
    dropped_total: int
    failed_total: int
    purged_total: int


def _row(record: CallRecord) -> _Row:
    caller = record.caller
    return (
        record.started_at_unix_nano,
        caller.subject,
        caller.token_name,
        caller.kind,
        caller.role,
        record.transport,
        record.kind,
        record.name,
        record.arguments_sha256,
        record.outcome,
        record.duration_ms,
        SOURCE,
    )


def _connect(path: Path) -> sqlite3.Connection:
    """Open the database with our pragmas and make sure our table exists (blocking)."""
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        with conn:
            for statement in _SCHEMA:
                conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


class AuditLog:
    """The audit log of gated calls: a queue in memory, a writer task, a table on disk.

    Args:
        path: the database file (normally ``<data_dir>/coremetry.db``); its directory is
            created when missing.
        retention_days: rows older than this many days are deleted by the writer; 0 keeps
            everything.
        queue_size: records that may wait for the writer before new ones are dropped.
        batch_size: most records written in one transaction.
        gather_s: seconds the writer waits, after a batch's first record, for more records
            before it writes (0: write at once). Only the audit rows' visibility waits.
        retention_interval_s: how often the writer enforces retention, in seconds.

    Raises:
        ValueError: a negative retention, or a queue, batch or interval that is not positive.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_days: int = 30,
        queue_size: int = 10_000,
        batch_size: int = 500,
        retention_interval_s: float = 3600.0,
        gather_s: float = 0.05,
    ) -> None:
        if retention_days < 0:
            raise ValueError(f"retention_days must not be negative, got {retention_days}")
        if queue_size < 1 or batch_size < 1:
            raise ValueError("queue_size and batch_size must be at least 1")
        if not retention_interval_s > 0:
            raise ValueError("retention_interval_s must be positive")
        if not 0 <= gather_s <= 60:
            raise ValueError(f"gather_s must be between 0 and 60 seconds, got {gather_s}")
        self.path = Path(path)
        self.retention_days = retention_days
        self.batch_size = batch_size
        self.retention_interval_s = retention_interval_s
        self.queue_size = queue_size
        self.gather_s = gather_s
        # A plain deque, bounded by hand (a full queue drops the *new* record, counted), and a
        # wake-up Event the writer sets up only while it waits for an empty queue: a record
        # costs an append, and only the first record after an idle spell pays a wake-up.
        self._queue: deque[CallRecord] = deque()
        self._writing = 0  # the oldest records of the queue, being written (not counted)
        self._closed = False
        self._wakeup: trio.Event | None = None
        # Set while the writer gathers a batch; observe() sets it when the batch is full,
        # wait_flushed() and aclose() at once.
        self._gathering: trio.Event | None = None
        self._flush_waiters = 0  # wait_flushed() callers: the writer does not gather for them
        self._conn: sqlite3.Connection | None = None
        self._writer_started = False
        self._writer_done = trio.Event()
        self._progress = trio.Event()
        self._accepted = 0
        self._written = 0
        self._dropped = 0
        self._dropped_reported = 0
        self._failed = 0
        self._purged = 0

    @classmethod
    def from_config(cls, config: "Config") -> "AuditLog":
        """The audit log of a configured server: ``<data_dir>/coremetry.db`` and ``[audit]``."""
        return cls(
            Path(config.data_dir).expanduser() / DB_FILENAME,
            retention_days=config.audit.retention_days,
            queue_size=config.audit.queue_size,
        )

    # -- the observer (trio loop, never blocks) ---------------------------------------------

    def observe(self, record: CallRecord) -> None:
        """Queue one record for the writer (the :data:`~coremetry.mcp.CallObserver`).

        Never blocks and never raises: when the queue is full or the log is closed the record
        is dropped and counted, with a warning (see the module docstring). Call it from the
        trio loop. It does no hashing: the record's ``arguments_sha256`` is computed by the
        writer, in its worker thread.
        """
        queue = self._queue
        if len(queue) - self._writing < self.queue_size and not self._closed:
            queue.append(record)
            self._accepted += 1
            wakeup = self._wakeup
            if wakeup is not None:
                self._wakeup = None
                wakeup.set()
            elif self._gathering is not None and len(queue) >= self.batch_size:
                self._end_gathering()
            return
        first = self._dropped == self._dropped_reported
        self._dropped += 1
        if first:
            reason = "it is closed" if self._closed else "the queue is full"
            log.warning(
                "audit log: dropping records because %s (%s %r by %r, outcome %s)",
                reason,
                record.kind,
                record.name,
                record.caller.subject,
                record.outcome,
            )

    # -- the writer ----------------------------------------------------------------------------

    async def run_writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write queued records until :meth:`aclose` (run it in a nursery; runs once).

        Opens the database (creating the directory, the table and its indexes), reports
        ``started``, enforces retention, then writes batches as records arrive. Blocking work
        runs in worker threads. Cancelled, it still writes what is queued (shielded) before it
        returns, so records are not lost on shutdown; a batch being written when the
        cancellation arrives is completed, never half-written.

        Raises:
            OSError: the data directory cannot be created.
            sqlite3.Error: the database cannot be opened or its table created (before
                ``started``: a server fails at boot, not later).
            RuntimeError: the writer was already started.
        """
        if self._writer_started:
            raise RuntimeError("the audit writer is already running")
        self._writer_started = True
        try:
            self._conn = await trio.to_thread.run_sync(self._open)
            task_status.started()
            await self._write_loop()
        finally:
            with trio.CancelScope(shield=True):
                await self._drain()
                await trio.to_thread.run_sync(self._close_connection)
            self._writer_done.set()
            self._notify_progress()

    async def aclose(self) -> None:
        """Stop accepting records and wait until every queued record is written.

        Blocks until the writer has flushed (or, when no writer was ever started, writes the
        queue itself in a worker thread). Idempotent. Records observed afterwards are dropped
        and counted.
        """
        self._closed = True
        self._wake_writer()
        if self._writer_started:
            await self._writer_done.wait()
            return
        if self._queue:
            self._conn = await trio.to_thread.run_sync(self._open)
            try:
                await self._drain()
            finally:
                await trio.to_thread.run_sync(self._close_connection)

    async def wait_flushed(self) -> None:
        """Block until every record accepted before this call is written (or its batch failed).

        Needs a running writer (or one started later); returns at once when nothing is
        pending, e.g. after :meth:`aclose`. Cancellable; cancelling it affects nothing else.
        """
        target = self._accepted
        self._flush_waiters += 1
        self._end_gathering()
        try:
            while self._written + self._failed < target and not self._writer_done.is_set():
                await self._progress.wait()
        finally:
            self._flush_waiters -= 1

    async def _write_loop(self) -> None:
        queue = self._queue
        retention = self.retention_days > 0
        next_purge = trio.current_time()
        while True:
            if retention and trio.current_time() >= next_purge:
                await self._purge()
                next_purge = trio.current_time() + self.retention_interval_s
            if queue:
                if (
                    self.gather_s > 0
                    and len(queue) < self.batch_size
                    and not self._closed
                    and not self._flush_waiters
                ):
                    await self._gather()
                await self._write_batch()
                continue
            if self._closed:
                return
            wakeup = self._wakeup = trio.Event()
            with trio.move_on_at(next_purge if retention else math.inf):
                await wakeup.wait()
            self._wakeup = None

    async def _gather(self) -> None:
        """Wait up to ``gather_s`` for the batch to fill (cut short by :meth:`_end_gathering`)."""
        gathering = self._gathering = trio.Event()
        try:
            with trio.move_on_after(self.gather_s):
                await gathering.wait()
        finally:
            self._gathering = None

    def _end_gathering(self) -> None:
        gathering, self._gathering = self._gathering, None
        if gathering is not None:
            gathering.set()

    def _wake_writer(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            wakeup.set()
        self._end_gathering()

    async def _drain(self) -> None:
        while self._queue:
            await self._write_batch()

    async def _write_batch(self) -> None:
        """Write the oldest ``batch_size`` queued records in one transaction (worker thread).

        The records leave the queue only once their batch is written (or failed): when the
        write is cancelled before the thread starts, they are still queued for the shielded
        drain. While it runs they do not count against ``queue_size`` (``_writing``).
        """
        queue = self._queue
        batch = list(itertools.islice(queue, self.batch_size))
        self._writing = len(batch)
        try:
            await trio.to_thread.run_sync(self._write, batch)
        except sqlite3.Error as exc:
            self._failed += len(batch)
            log.error("audit log: could not write %d records: %s", len(batch), exc)
        except Exception:  # a bug (a record that cannot be encoded, ...): that batch only
            self._failed += len(batch)
            log.exception("audit log: could not write %d records (unexpected error)", len(batch))
        else:
            self._written += len(batch)
            if self._dropped > self._dropped_reported:
                log.warning(
                    "audit log: %d records were dropped (queue full or closed); writing again",
                    self._dropped - self._dropped_reported,
                )
                self._dropped_reported = self._dropped
        finally:
            self._writing = 0
        for _ in batch:  # written or failed (not reached when cancelled)
            queue.popleft()
        self._notify_progress()

    def _notify_progress(self) -> None:
        progress, self._progress = self._progress, trio.Event()
        progress.set()

    async def _purge(self) -> None:
        try:
            purged = await trio.to_thread.run_sync(self.purge_expired)
        except sqlite3.Error as exc:
            log.error("audit log: retention failed: %s", exc)
            return
        except Exception:  # a bug: retention tries again at its next interval
            log.exception("audit log: retention failed (unexpected error)")
            return
        self._purged += purged
        if purged:
            log.info("audit log: retention deleted %d rows", purged)

    # -- blocking helpers (worker threads) -------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        # 0600 from the start: the audit log names callers and digests their arguments.
        create_private_file(self.path)
        return _connect(self.path)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _write(self, batch: Sequence[CallRecord]) -> None:
        conn = self._conn
        if conn is None:
            raise sqlite3.OperationalError("the audit log is not open")
        rows = [_row(record) for record in batch]  # digests the arguments (this thread)
        whole = len(rows) - len(rows) % _ROWS_PER_INSERT
        with conn:  # one transaction per batch: committed whole or rolled back
            if whole:
                conn.executemany(
                    _INSERT_MANY,
                    (
                        tuple(itertools.chain.from_iterable(rows[i : i + _ROWS_PER_INSERT]))
                        for i in range(0, whole, _ROWS_PER_INSERT)
                    ),
                )
            if whole < len(rows):
                conn.executemany(_INSERT, rows[whole:])

    def purge_expired(self, now_unix_nano: int | None = None) -> int:
        """Delete the rows older than the retention period (blocking; retention only).

        The writer calls it periodically; it uses its own connection, so it may also be called
        from any thread (e.g. a CLI) while the writer runs.

        Args:
            now_unix_nano: the current wall-clock time, in ns since the epoch (default: now).

        Returns:
            The number of rows deleted (0 when ``retention_days`` is 0: keep forever).

        Raises:
            sqlite3.Error: the database could not be written.
        """
        if self.retention_days <= 0:
            return 0
        now = time.time_ns() if now_unix_nano is None else now_unix_nano
        cutoff = now - self.retention_days * NANOS_PER_DAY
        deleted = 0
        conn = self._open()
        try:
            while True:
                # Bounded transactions: the file is shared with other tables' owners, so never
                # hold the write lock for one huge delete.
                with conn:
                    count: int = conn.execute(_PURGE, (cutoff, _PURGE_BATCH)).rowcount
                deleted += count
                if count < _PURGE_BATCH:
                    return deleted
        finally:
            conn.close()

    # -- administration ----------------------------------------------------------------------

    def record_admin(
        self,
        actor: Caller,
        *,
        transport: str,
        action: str,
        target: str,
        outcome: str,
        at_unix_nano: int | None = None,
    ) -> None:
        """Write one admin action's row now (synchronous and blocking; see the module docstring).

        Uses its own short-lived connection, so it is safe from any thread, from the CLI, and
        while the writer runs; inside trio call it through :func:`trio.to_thread.run_sync`.

        Args:
            actor: who did it (for the CLI: ``kind="local"``, the operating-system user).
            transport: ``"cli"`` or ``"rest"``.
            action: what was done, e.g. ``"user disable"``, ``"token revoke"``.
            target: the user or token name acted on (never a secret).
            outcome: ``ok``, ``not_found``, ``bad_args`` or ``denied``.
            at_unix_nano: when, in ns since the epoch (default: now).

        Raises:
            sqlite3.Error: the database could not be written.
        """
        row: _Row = (
            time.time_ns() if at_unix_nano is None else at_unix_nano,
            actor.subject,
            actor.token_name,
            actor.kind,
            actor.role,
            transport,
            ADMIN_CALL_KIND,
            f"{action} {target}",
            "",
            outcome,
            0.0,
            ADMIN_SOURCE,
        )
        conn = self._open()
        try:
            with conn:
                conn.execute(_INSERT, row)
        finally:
            conn.close()

    # -- reading ---------------------------------------------------------------------------------

    def tail(self, limit: int = 50, *, sub: str | None = None) -> list[AuditEntry]:
        """The newest rows, newest first (synchronous and blocking).

        Opens its own short-lived connection, so it is safe from any thread and while the
        writer runs; inside trio call it through :func:`trio.to_thread.run_sync`. Records
        still queued in memory are not included.

        Args:
            limit: at most this many rows (``<= 0`` returns nothing).
            sub: only rows of this identity.

        Returns:
            A list of :class:`AuditEntry`, newest call start first (ties: last written first);
            empty when the database does not exist yet.

        Raises:
            sqlite3.Error: the database could not be read.
        """
        if limit <= 0 or not self.path.exists():
            return []
        where, params = ("WHERE sub = ?", (sub, limit)) if sub is not None else ("", (limit,))
        conn = _connect(self.path)
        try:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audit_log {where} "
                "ORDER BY at_unix_nano DESC, id DESC LIMIT ?",
                params,
            ).fetchall()
        finally:
            conn.close()
        return [
            AuditEntry(
                at_unix_nano=row[0],
                sub=row[1],
                token_name=row[2],
                kind=row[3],
                role=row[4],
                transport=row[5],
                call_kind=row[6],
                name=row[7],
                arguments_sha256=row[8],
                outcome=row[9],
                duration_ms=row[10],
                source=row[11],
            )
            for row in rows
        ]

    def statistics(self) -> AuditStatistics:
        """A snapshot of the counters and the queue's length."""
        return AuditStatistics(
            queued=len(self._queue) - self._writing,
            written_total=self._written,
            dropped_total=self._dropped,
            failed_total=self._failed,
            purged_total=self._purged,
        )


_ENTRIES_ENCODER: Final = msgspec.json.Encoder()


def _audit_row(entry: AuditEntry) -> dict[str, object]:
    """One entry as the resource shows it: RFC 3339 UTC time, duration rounded to the µs."""
    row: dict[str, object] = msgspec.structs.asdict(entry)
    at = row.pop("at_unix_nano")
    assert isinstance(at, int)
    seconds, nanos = divmod(at, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return {
        "time": f"{stamp}.{nanos // 1000:06d}Z",
        **row,
        "duration_ms": round(entry.duration_ms, 3),
    }


def recent_audit_json(entries: Sequence[AuditEntry], budget_bytes: int) -> bytes:
    """The body of :data:`RECENT_URI`: the newest entries that fit ``budget_bytes`` of JSON.

    Shape: ``{"entries": [...], "shown": N, "truncated": bool, "note"?: str}``; entries newest
    first, each with the fields of :class:`AuditEntry` except ``at_unix_nano``, replaced by
    ``time`` (RFC 3339 UTC, µs). When not all of ``entries`` fit, the oldest are left out,
    ``truncated`` is true and ``note`` says how to read more (``coremetry audit tail``).
    """
    rows = [_audit_row(e) for e in entries]

    def body(count: int) -> bytes:
        value: dict[str, object] = {
            "entries": rows[:count],
            "shown": count,
            "truncated": count < len(rows),
        }
        if count < len(rows):
            value["note"] = (
                f"{len(rows) - count} older entries left out to stay within the output budget; "
                "`coremetry audit tail -n N` on the server prints more."
            )
        return _ENTRIES_ENCODER.encode(value)

    # Largest prefix that fits (binary search: size grows with the count).
    low, high = 0, len(rows)
    while low < high:
        middle = (low + high + 1) // 2
        if len(body(middle)) <= budget_bytes:
            low = middle
        else:
            high = middle - 1
    return body(low)


def register_audit_resource(
    server: Server, audit: AuditLog, *, budget_bytes: int = 16 * 1024
) -> None:
    """Register the admin-only resource :data:`RECENT_URI` on ``server``.

    Reading it returns the newest :data:`RECENT_LIMIT` rows that fit ``budget_bytes`` of JSON
    (see :func:`recent_audit_json`), newest first. ``min_role="admin"``: the list methods hide
    it from other roles and the gate refuses their reads with ``-32001``.
    """

    async def recent(uri: str, ctx: CallContext) -> str:
        # The calls made before this read are listed: their records may still be queued or
        # gathering into a batch (``gather_s``); a writer that is down does not hold the read.
        with trio.move_on_after(RECENT_FLUSH_WAIT_S):
            await audit.wait_flushed()
        # Blocking sqlite read of at most RECENT_LIMIT rows through an index: off the loop.
        entries = await trio.to_thread.run_sync(audit.tail, RECENT_LIMIT)
        return recent_audit_json(entries, budget_bytes).decode()

    server.register_resource(
        Resource(
            RECENT_URI,
            "audit-recent",
            recent,
            title="Audit log (recent)",
            description=f"The newest {RECENT_LIMIT} audited calls (tools, resources, prompts), "
            "newest first: who, when, over which transport, what, the outcome and the duration. "
            "Arguments appear only as a SHA-256 digest. Admins only.",
            min_role="admin",
        )
    )
