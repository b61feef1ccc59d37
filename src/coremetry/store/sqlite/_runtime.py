"""Running blocking SQLite work from trio: reader connections and interruptible reads.

A read runs ``fn(ctx)`` in a worker thread on one reader connection. If the calling task is
cancelled while the thread runs, :func:`run_interruptible` marks the read as stopped and calls
:meth:`sqlite3.Connection.interrupt` on *that* connection — repeatedly, every
:data:`INTERRUPT_REPEAT_S`, until the thread has returned, because ``sqlite3_interrupt`` is a
no-op while no statement is running and the thread may be between two statements — then
re-raises ``Cancelled``. :meth:`ReadContext.execute` refuses to start a statement once the read
is stopped, so the work ends at the current statement. The connection is then idle and
healthy (an interrupted statement only aborts itself and rolls back the read transaction) and
goes back to the pool.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Final, TypeAlias, TypeVar, cast

import trio

__all__ = [
    "BUSY_TIMEOUT_MS",
    "INTERRUPT_REPEAT_S",
    "ReadContext",
    "ReadStopped",
    "SqlParam",
    "connect",
    "release_free_memory",
    "run_interruptible",
]

T = TypeVar("T")

SqlParam: TypeAlias = int | float | str | bytes | None
"""A value bound to a ``?`` placeholder."""

BUSY_TIMEOUT_MS: Final = 5000
"""How long a statement waits for another connection's (or process's) lock, in ms."""

INTERRUPT_REPEAT_S: Final = 0.002
"""Interval at which a stopped read's connection is interrupted again until its thread ends."""

_MMAP_BYTES: Final = 256 * 1024 * 1024
_CACHE_KIB: Final = 32 * 1024


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)  # glibc only (musl, macOS: absent)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast("Callable[[int], int]", trim)


def release_free_memory() -> bool:
    """Give the heap memory that SQLite and Python have freed back to the OS (blocking).

    glibc's allocator keeps freed memory in its arenas (one per thread that allocated): after a
    burst of large reads on the query threads the process's anonymous RSS stays at its peak
    although nothing uses it. ``malloc_trim(0)`` (glibc ``malloc.h``) returns the free pages
    of every arena. ctypes releases the GIL during the call.

    Returns:
        ``True`` if glibc released memory; ``False`` if none was free or the C library has no
        ``malloc_trim`` (musl, macOS), where this is a no-op.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


class ReadStopped(Exception):
    """Raised inside a worker thread by :meth:`ReadContext.execute` after the read was stopped."""


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _regexp(pattern: str | None, value: object) -> bool:
    """SQLite's ``value REGEXP pattern``: the whole text matches (Python ``re``, anchored)."""
    if pattern is None or value is None:
        return False
    return _compiled(pattern).fullmatch(value if isinstance(value, str) else str(value)) is not None


def connect(path: Path, *, reader: bool) -> sqlite3.Connection:
    """Open ``path`` with the store's pragmas (blocking).

    Autocommit mode (transactions are explicit), WAL, ``synchronous=NORMAL`` (durable at each
    checkpoint; a power loss may drop the last transactions but never corrupts), a busy
    timeout, memory-mapped reads, and the ``REGEXP`` function. Readers are ``query_only``.

    Raises:
        sqlite3.Error: the file cannot be opened as a database.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not reader:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        conn.execute("PRAGMA temp_store = MEMORY")
        if reader:
            conn.execute("PRAGMA query_only = 1")
        conn.create_function("regexp", 2, _regexp, deterministic=True)
    except BaseException:
        conn.close()
        raise
    return conn


class ReadContext:
    """What a read function gets: its connection, behind a statement gate that can be shut.

    Attributes:
        conn: the reader connection (use :meth:`execute`, which honours a stop).
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()
        self._phase = "pending"  # pending -> running [-> stopping] -> finishing -> done,
        # or pending -> stopped (never ran)
        self._finished = threading.Event()

    def execute(
        self, sql: str, params: Sequence[SqlParam] | Mapping[str, SqlParam] = ()
    ) -> list[tuple[SqlParam, ...]]:
        """Run one statement and return all its rows (blocking).

        Raises:
            ReadStopped: the read was stopped before this statement began.
            sqlite3.Error: as ``sqlite3`` raises (an interrupt: ``OperationalError``).
        """
        if self._phase == "stopping":
            raise ReadStopped
        rows: list[tuple[SqlParam, ...]] = self.conn.execute(sql, params).fetchall()
        return rows

    def run(self, fn: Callable[[ReadContext], T]) -> T:
        """Run ``fn(self)`` in one read transaction (blocking; the worker thread's body).

        Raises:
            ReadStopped: stopped before it began (``fn`` did not run), or during.
        """
        with self._lock:
            if self._phase == "stopped":
                self._finished.set()
                raise ReadStopped
            self._phase = "running"
        try:
            # One snapshot for every statement of the read (WAL: readers never block).
            self.conn.execute("BEGIN")
            try:
                return fn(self)
            finally:
                # From here on stop() no longer interrupts (it does so under the lock), so the
                # ROLLBACK that ends the read transaction cannot itself be interrupted.
                with self._lock:
                    self._phase = "finishing"
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
        finally:
            with self._lock:
                if self._phase != "stopped":
                    self._phase = "done"
            self._finished.set()

    async def stop(self) -> None:
        """Stop the read and wait until its thread has left the connection (shield this)."""
        with self._lock:
            if self._phase == "pending":
                # Trio had not started the thread, or run() will see "stopped" and return at
                # once without touching the connection.
                self._phase = "stopped"
                return
            if self._phase == "running":
                self._phase = "stopping"
        while not self._finished.is_set():
            with self._lock:
                if self._phase == "stopping":
                    self.conn.interrupt()
            await trio.sleep(INTERRUPT_REPEAT_S)


async def run_interruptible(conn: sqlite3.Connection, fn: Callable[[ReadContext], T]) -> T:
    """Run ``fn`` on ``conn`` in a worker thread; a cancel interrupts it (module docstring).

    When this returns or raises, no thread uses ``conn`` any more.

    Raises:
        trio.Cancelled: the caller was cancelled; the thread has stopped.
        ReadStopped: never to the caller of a cancelled read (``Cancelled`` wins).
        sqlite3.Error: as ``fn`` raised it.
    """
    ctx = ReadContext(conn)
    try:
        return await trio.to_thread.run_sync(ctx.run, fn, abandon_on_cancel=True)
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            await ctx.stop()
        raise
