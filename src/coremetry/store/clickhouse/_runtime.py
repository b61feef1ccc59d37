"""Running ClickHouse statements from trio: clients, query ids, budgets, KILL QUERY, errors.

The maintained ``clickhouse-connect`` client is synchronous here (its asyncio client does not
run under trio): every statement runs in a worker thread (:func:`trio.to_thread.run_sync`)
holding one token of a :class:`trio.CapacityLimiter`, so at most ``query_threads`` statements
of this store are in flight.

Every read carries:

- ``query_id``: a fresh UUID, so the statement can be found on the server;
- ``readonly=1``: the server refuses anything but reading, whatever the SQL;
- ``max_execution_time``: the time left before the caller's trio deadline
  (:func:`trio.current_effective_deadline`, e.g. a tool call's budget), in seconds rounded up
  to 1/64 s (:func:`time_limit_s`), so the server stops by itself when the budget is gone.

When the calling task is cancelled first (its deadline, or the client went away), the worker
thread is abandoned and ``KILL QUERY WHERE query_id = '…' ASYNC`` goes to the server on a
*second* client with its own connection pool (the first one's connection is busy with the
query), shielded and bounded by :data:`KILL_TIMEOUT_S`; the abandoned thread then receives the
server's ``QUERY_WAS_CANCELLED`` and ends, releasing its limiter token. The query id is the only
value put into that statement as text: it is our own UUID, checked against :data:`_QUERY_ID`
(``KILL``'s ``WHERE`` is not a place where every server version substitutes query
parameters). An embedded chDB engine (``chdb://``) has no second connection to kill from: its
statement runs to its end (bounded by ``max_execution_time``) while the caller moves on.

An embedded engine's statements each take a client (a chDB connection) of their own, and a
client whose statement failed is closed, never used again (:class:`_EmbeddedClients`): chDB
4.4 (engine 26.9) keeps the output a failed statement had produced (a time limit reached part
way through its result, an error raised mid-scan) on its connection and returns it ahead of
the *next* statement's own result, which then decodes as garbage (``MemoryError``,
``UnicodeDecodeError``) or as wrong rows (another read's block added to the answer: doubled
counts). A cancelled read's abandoned statement keeps its own client until it ends, so it
never runs beside the next read on the same connection.

Server errors map onto the store's error tree (:func:`map_error`): time limits (``159
TIMEOUT_EXCEEDED`` and kin) -> :class:`~coremetry.store.errors.StoreTimeout`; an unreachable
server, memory or concurrency limits, refused credentials or rights ->
:class:`~coremetry.store.errors.StoreUnavailable`; a missing table, database or column ->
:class:`~coremetry.store.errors.StoreSchemaError`; a regular expression RE2 cannot compile ->
:class:`~coremetry.store.errors.QueryRejected`. Anything else is a bug of ours (bad SQL) and
propagates as the client raised it.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeAlias, TypeVar

import clickhouse_connect
import trio
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import (
    ClickHouseError,
    DatabaseError,
    Error,
    OperationalError,
)

from coremetry.store.errors import (
    QueryRejected,
    StoreError,
    StoreSchemaError,
    StoreTimeout,
    StoreUnavailable,
)

__all__ = [
    "KILL_TIMEOUT_S",
    "Param",
    "Row",
    "Runtime",
    "TIME_LIMIT_STEPS",
    "map_error",
    "redacted_url",
    "time_limit_s",
]

log = logging.getLogger("coremetry.store.clickhouse")

T = TypeVar("T")

Param: TypeAlias = (
    int
    | float
    | str
    | bool
    | Sequence[int]
    | Sequence[str]
    | Sequence[float]
    | Sequence[tuple[str, str]]
    | None
)
"""A value bound to a ``{name:Type}`` server-side parameter."""

Row: TypeAlias = tuple[object, ...]
"""One result row as ``clickhouse-connect`` decodes it."""

KILL_TIMEOUT_S: Final = 5.0
"""How long a cancelled read waits for its ``KILL QUERY`` to be accepted, in seconds."""

_QUERY_ID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

_TIMEOUT_CODES: Final = frozenset({159, 160, 209})
"""TIMEOUT_EXCEEDED, TOO_SLOW (estimated time over the limit), SOCKET_TIMEOUT."""
_UNAVAILABLE_CODES: Final = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE
        164,  # READONLY (the user may not write)
        192,  # UNKNOWN_USER
        193,  # WRONG_PASSWORD
        194,  # REQUIRED_PASSWORD
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        203,  # NO_FREE_CONNECTION
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        252,  # TOO_MANY_PARTS
        394,  # QUERY_WAS_CANCELLED (by someone else)
        497,  # ACCESS_DENIED
        516,  # AUTHENTICATION_FAILED
        999,  # KEEPER_EXCEPTION
    }
)
_SCHEMA_CODES: Final = frozenset(
    {
        10,  # NOT_FOUND_COLUMN_IN_BLOCK
        16,  # NO_SUCH_COLUMN_IN_TABLE
        47,  # UNKNOWN_IDENTIFIER
        60,  # UNKNOWN_TABLE
        81,  # UNKNOWN_DATABASE
    }
)
_REGEXP_CODE: Final = 427  # CANNOT_COMPILE_REGEXP
_CODE_IN_MESSAGE: Final = re.compile(r"\bCode:\s*(\d+)")


def redacted_url(url: str) -> str:
    """``url`` without its user info (``user:password@``), for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _name_of(exc: Error, code: int | None) -> str:
    name = exc.name
    if name and code is not None:
        return f"{name} (code {code})"
    if code is not None:
        return f"code {code}"
    return type(exc).__name__


def map_error(exc: ClickHouseError, where: str) -> StoreError | ClickHouseError:
    """The store error a ``clickhouse-connect`` exception stands for (or itself: a bug).

    Args:
        exc: what the client raised.
        where: the server, as :func:`redacted_url` gives it (for the message).
    """
    if not isinstance(exc, Error):
        return StoreUnavailable(f"ClickHouse at {where}: {type(exc).__name__}")
    code = exc.code
    if code is None and isinstance(exc, DatabaseError):
        # An embedded chDB engine reports the code only in the message.
        found = _CODE_IN_MESSAGE.search(str(exc))
        code = int(found.group(1)) if found else None
    if code in _TIMEOUT_CODES:
        return StoreTimeout(f"ClickHouse at {where} stopped the query at its time limit")
    if code in _SCHEMA_CODES:
        return StoreSchemaError(
            f"ClickHouse at {where}: a table or column the store reads is missing "
            f"({_name_of(exc, code)}); check the [clickhouse] table names and the exporter's schema"
        )
    if code == _REGEXP_CODE:
        return QueryRejected(
            "matchers", "a regular expression is not valid RE2 syntax (as ClickHouse reads it)"
        )
    if code is None and (isinstance(exc, OperationalError) or not isinstance(exc, DatabaseError)):
        return StoreUnavailable(
            f"ClickHouse at {where} did not answer (refused, unreachable or timed out: "
            f"{type(exc).__name__})"
        )
    if code in _UNAVAILABLE_CODES or code is None:
        return StoreUnavailable(f"ClickHouse at {where} failed: {_name_of(exc, code)}")
    return exc


TIME_LIMIT_STEPS: Final = 64
"""``max_execution_time`` is sent in 1/64 s steps (15.625 ms), see :func:`time_limit_s`."""


def time_limit_s(remaining_s: float) -> float:
    """The ``max_execution_time`` for ``remaining_s`` of budget: rounded up to a 1/64 s step.

    At least one step. A multiple of 1/64 s is exact in binary and in microseconds, so the
    server's round trip through its microsecond setting gives back the value sent: ClickHouse
    (seen on chDB 4.4, engine 26.9) refuses a query whose ``SETTINGS readonly = 1,
    max_execution_time = 268.4`` does not survive that round trip (268.399999 s) with ``164
    READONLY: Cannot modify 'max_execution_time' setting in readonly mode`` — about one
    whole-millisecond value in a hundred.
    """
    steps = max(1, math.ceil(remaining_s * TIME_LIMIT_STEPS))
    return steps / TIME_LIMIT_STEPS


def _remaining_s() -> float | None:
    deadline = trio.current_effective_deadline()
    if math.isinf(deadline):
        return None
    return deadline - trio.current_time()


class _EmbeddedClients:
    """The clients of an embedded chDB engine: one statement at a time on each (thread-safe).

    A statement takes an idle client (or a new one from ``reconnect``) and gives it back when
    it ends; a client whose statement raised is replaced by a new one and closed (see the
    module docstring: chDB would hand the failed statement's leftover output to the next
    statement on it). The new client is opened first: an in-memory engine (``chdb://memory``)
    loses its data when its last connection closes. At most as many clients exist as
    statements run at once (the runtime's limiter, whose token an abandoned statement holds
    until it ends).

    Args:
        first: an open client (the one the store was opened with).
        reconnect: opens another client on the same engine (blocking, in a worker thread).
    """

    def __init__(self, first: Client, reconnect: Callable[[], Client]) -> None:
        self._reconnect = reconnect
        self._idle: list[Client] = [first]
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> Client:
        """An idle client, or a new one (blocking)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._reconnect()

    def give(self, client: Client, *, failed: bool) -> None:
        """Give ``client`` back after its statement; replaced and closed if it raised."""
        if failed and not self._closed:
            try:
                fresh: Client | None = self._reconnect()
            except StoreError as exc:
                log.warning("reopening a chDB client after a failed statement: %s", exc)
                fresh = None
            if fresh is not None:
                self.give(fresh, failed=False)
        with self._lock:
            if not failed and not self._closed:
                self._idle.append(client)
                return
        _close_quietly(client)

    def close(self) -> None:
        """Close the idle clients; a client still running a statement closes when it ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for client in idle:
            _close_quietly(client)


def _close_quietly(client: Client) -> None:
    try:
        client.close()
    except ClickHouseError as exc:  # closing must not fail a read or the shutdown
        log.debug("closing the ClickHouse client: %s", exc)


class Runtime:
    """The clients of one store and the rules every statement follows (module docstring).

    Args:
        client: runs reads and writes (a server's: thread-safe, no session, a connection pool).
        killer: a second client on its own connection pool for ``KILL QUERY`` (``None`` for an
            embedded chDB engine, which has nothing to kill from).
        where: the server for messages (no credentials).
        query_threads: statements in flight at once.
        reconnect: for an embedded chDB engine, opens another client on it: statements then
            take a client each and a client whose statement failed is closed
            (:class:`_EmbeddedClients`). ``None`` for a server: ``client`` is shared.
    """

    def __init__(
        self,
        client: Client,
        killer: Client | None,
        *,
        where: str,
        query_threads: int,
        reconnect: Callable[[], Client] | None = None,
    ) -> None:
        self.client = client
        self.killer = killer
        self.where = where
        self.limiter = trio.CapacityLimiter(query_threads)
        self.kills: list[str] = []
        """Query ids this runtime asked the server to kill (for logs and tests)."""
        self._embedded = _EmbeddedClients(client, reconnect) if reconnect is not None else None

    def _on_client(self, fn: Callable[[Client], T]) -> Callable[[], T]:
        """``fn`` on the shared client, or on an embedded client of its own (module docstring).

        The embedded client goes back (or is closed) in the worker thread when the statement
        ends, even when the caller was cancelled and the thread abandoned.
        """
        embedded = self._embedded
        if embedded is None:
            return lambda: fn(self.client)

        def run() -> T:
            client = embedded.take()
            try:
                result = fn(client)
            except BaseException:
                embedded.give(client, failed=True)
                raise
            embedded.give(client, failed=False)
            return result

        return run

    async def _run(self, fn: Callable[[Client], T], query_id: str) -> T:
        try:
            return await trio.to_thread.run_sync(
                self._on_client(fn), abandon_on_cancel=True, limiter=self.limiter
            )
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._kill(query_id)
            raise
        except ClickHouseError as exc:
            mapped = map_error(exc, self.where)
            if mapped is exc:
                raise
            raise mapped from exc

    async def _kill(self, query_id: str) -> None:
        killer = self.killer
        if killer is None or _QUERY_ID.fullmatch(query_id) is None:
            return
        self.kills.append(query_id)
        statement = f"KILL QUERY WHERE query_id = '{query_id}' ASYNC"
        with trio.move_on_after(KILL_TIMEOUT_S) as scope:
            try:
                await trio.to_thread.run_sync(killer.command, statement, abandon_on_cancel=True)
            except ClickHouseError as exc:
                log.warning("KILL QUERY %s on %s failed: %s", query_id, self.where, exc)
                return
        if scope.cancelled_caught:
            log.warning(
                "KILL QUERY %s on %s got no answer in %s s", query_id, self.where, KILL_TIMEOUT_S
            )

    async def query(
        self,
        sql: str,
        params: Mapping[str, Param],
        *,
        settings: Mapping[str, int | str] | None = None,
    ) -> list[Row]:
        """Run one read statement; its rows (see the module docstring for the settings).

        ``settings`` adds query-level ClickHouse settings (planner choices of one statement).

        Raises:
            StoreTimeout, StoreUnavailable, StoreSchemaError, QueryRejected: see
                :func:`map_error`.
            trio.Cancelled: the caller was cancelled; the server was told to kill the query.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        query_id = str(uuid.uuid4())
        settings_all: dict[str, object] = {**(settings or {}), "readonly": 1, "query_id": query_id}
        remaining = _remaining_s()
        if remaining is not None:
            settings_all["max_execution_time"] = time_limit_s(remaining)

        def run(client: Client) -> list[Row]:
            result = client.query(sql, parameters=dict(params), settings=settings_all)
            return [tuple(row) for row in result.result_rows]

        return await self._run(run, query_id)

    async def command(self, sql: str, params: Mapping[str, Param]) -> None:
        """Run one statement that changes data (``DELETE``, DDL); no ``readonly``.

        Raises:
            StoreTimeout, StoreUnavailable, StoreSchemaError: see :func:`map_error`.
        """
        query_id = str(uuid.uuid4())
        settings: dict[str, object] = {"query_id": query_id}

        def run(client: Client) -> None:
            client.command(sql, parameters=dict(params), settings=settings)

        await self._run(run, query_id)

    async def insert(
        self,
        table: str,
        database: str,
        columns: Sequence[str],
        types: Sequence[str],
        rows: Sequence[Sequence[object]],
    ) -> None:
        """Insert ``rows`` into ``database.table`` as one ``INSERT`` (one block: atomic).

        ``insert_deduplicate`` is off (the store checks identities itself, see ``_store``) and
        ``async_insert`` off (the rows are stored when this returns).

        Raises:
            StoreUnavailable, StoreSchemaError: see :func:`map_error`.
        """
        query_id = str(uuid.uuid4())
        settings: dict[str, object] = {
            "query_id": query_id,
            "insert_deduplicate": 0,
            "async_insert": 0,
        }

        def run(client: Client) -> None:
            client.insert(
                table,
                [list(row) for row in rows],
                column_names=list(columns),
                database=database,
                column_type_names=list(types),
                settings=settings,
            )

        await self._run(run, query_id)

    def close(self) -> None:
        """Close the clients (blocking briefly; idempotent)."""
        if self._embedded is not None:
            self._embedded.close()
            return
        for client in (self.client, self.killer):
            if client is not None:
                _close_quietly(client)


def connect(
    url: str,
    *,
    username: str,
    password: str,
    connect_timeout_s: float,
    dedicated_pool: bool,
) -> Client:
    """A ``clickhouse-connect`` client for ``url`` (blocking: asks for the server's settings).

    ``http(s)://host:port`` is a server; ``chdb://memory`` or ``chdb:///path`` an embedded chDB
    engine (credentials ignored). No session id (statements run concurrently), no retries of
    reads (a retried read would be a second query the budget did not plan for).

    Raises:
        StoreUnavailable: the server cannot be reached or refuses the credentials.
    """
    try:
        if url.startswith("chdb:"):
            return clickhouse_connect.get_client(dsn=url)
        return clickhouse_connect.get_client(
            dsn=url,
            username=username or None,
            password=password,
            connect_timeout=max(1, math.ceil(connect_timeout_s)),
            send_receive_timeout=3600,
            autogenerate_session_id=False,
            query_retries=0,
            dedicated_pool=dedicated_pool,
        )
    except ClickHouseError as exc:
        mapped = map_error(exc, redacted_url(url))
        if isinstance(mapped, StoreError):
            raise StoreUnavailable(f"cannot connect: {mapped}") from exc
        raise StoreUnavailable(f"cannot connect to ClickHouse at {redacted_url(url)}") from exc
