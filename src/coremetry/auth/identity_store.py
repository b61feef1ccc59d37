"""Users and service tokens, kept in the embedded database (``<data_dir>/coremetry.db``).

One :class:`IdentityStore` owns one :mod:`sqlite3` connection guarded by a lock. Every public
method is **synchronous and blocking** (file I/O, and scrypt for the password methods); the app
calls them through ``trio.to_thread.run_sync``, and the CLI calls them directly. Many processes
may open the same data dir at once (``serve`` plus the CLI): the database runs in WAL mode, with
a busy timeout of :data:`BUSY_TIMEOUT_S`.

Schema (forward-only migrations, numbered by ``PRAGMA user_version``; tables prefixed ``auth_``
because other subsystems share the file):

- ``auth_users(name, role, password_hash, created_at, password_changed_at,
  session_generation, disabled_at)``: the password is stored only as an scrypt hash
  (:mod:`coremetry.auth.passwords`). ``session_generation`` is written into every session JWT
  of the user (claim ``gen``) and replaced by a fresh value on every disable, password change
  (and a deleted user's row is gone): a JWT whose ``gen`` is not the user's current one, or
  whose user is disabled or deleted, is refused (:meth:`IdentityStore.session_generation`).
- ``auth_counters(name, value)``: the source of session generations. Every new value is
  taken from one counter for all users, so a user deleted and added again never gets a
  generation an old JWT of the same name carries.
- ``auth_service_tokens(id, name, role, token_sha256, created_at, expires_at, last_used_at,
  revoked_at)``: the token itself is never stored, only its SHA-256. A name is unique among
  the tokens not revoked (a partial unique index): revoking a token frees its name for a new
  one, and the revoked row stays (listed, and its token still refused).

Why a fast, unsalted hash is right for service tokens (unlike passwords): a token is
``cmk_`` + 32 random bytes (256 bits). Nobody can guess it, whatever the hash speed, so a slow
hash would add nothing but cost on every request; and with no dictionary to precompute, a salt
would add nothing either, while the unsalted digest lets us find the row by an indexed equality
lookup. Someone who reads the database learns no usable token.

``PRAGMA user_version`` is one number per database file. This module's :data:`SCHEMA_VERSION`
owns it; another subsystem that shares ``coremetry.db`` must add its migrations to the same
numbered list (or keep its own file), or the two will misread each other's versions.

Revocation is immediate across processes, for service tokens and for the sessions (JWTs) an account
change ends (disable, enable, delete, password change: all signal the same way). The database is
the truth; in addition, the data dir holds the revocation marker ``<data_dir>/token-revocations``,
a small file that every revocation, in any process, replaces (write a temporary file,
``os.replace`` it into place) with :data:`REVOCATION_MARKER_SIZE` fresh random bytes after the
database commit. Each store re-reads the marker at most once per
:data:`REVOCATION_CHECK_INTERVAL_S` (5 ms; between reads :meth:`IdentityStore.revocation_stamp` is
a clock reading and a comparison: no system call, and the GIL is kept, which matters because the
audit writer's thread would otherwise take it on every request), and its stamp is a generation
number that goes up every time the content it reads differs from the last (absence included), so a
marker that returns to an earlier state — deleted again, restored from a copy — is still a change.
``revoke_token`` returns only :data:`REVOCATION_SETTLE_S` (twice that interval) after writing the
marker, so every server that authenticates a request after ``revoke_token`` (or ``coremetry token
revoke``) returned has read the new content: its caches of verified tokens (the authenticator's)
compare the stamp on every request and refuse the revoked token on the very next one. A revocation
by the server's own process changes its stamp at once.

Why random bytes rather than a counter or a clock: two processes revoking at once could write
the same counter value or the same ``time_ns``, and a cache that recorded that value between
the two writes would miss the second revocation; 128 random bits never repeat in practice. Any
change at the path counts: content, deletion, replacement by hand, a marker left by an older
Coremetry (the content is compared whatever its size).

Failure modes, all failing safe:

- The marker cannot be read for another reason than its absence (a directory in its place,
  no permission): every :meth:`~IdentityStore.revocation_stamp` call re-reads it and returns a
  value never seen before, so caches never hit (every request reads the database), until the
  path is readable again. A warning is logged once.
- A revocation cannot write the marker (read-only data dir): the revocation stands (the
  database is the truth; other processes see it when their cached entries expire, within
  their cache lifetime), and this process's stamps never repeat from then on (its own caches
  stop hitting).
- Nothing is ``mmap``-ed: deleting, truncating or replacing the marker while servers run
  cannot crash them.

Timestamps are unix seconds (``*_at: int``); durations are seconds (``*_s``).
"""

import contextlib
import hashlib
import logging
import math
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import msgspec

from coremetry.private_files import create_private_file
from coremetry.roles import ROLES

from .passwords import (
    DEFAULT_PARAMS,
    ScryptParams,
    check_new_password,
    hash_password,
    spend_dummy_hash,
    verify_password,
)
from .principal import Claims, ExpiredToken, InvalidToken, LoginFailed, RevokedToken

_log: Final = logging.getLogger(__name__)

DB_FILENAME: Final = "coremetry.db"
"""The embedded database inside the data dir."""

REVOCATIONS_FILENAME: Final = "token-revocations"
"""Marker file replaced on every revocation (see the module docstring)."""

REVOCATION_MARKER_SIZE: Final = 16
"""Random bytes a revocation writes into the marker (see the module docstring)."""

REVOCATION_CHECK_INTERVAL_S: Final = 0.005
"""A store re-reads the revocation marker at most once per this many seconds."""

REVOCATION_SETTLE_S: Final = 2 * REVOCATION_CHECK_INTERVAL_S
"""How long ``revoke_token`` waits after writing the marker, in seconds: by then every process
re-reads it before trusting a cached token again (see the module docstring)."""

BUSY_TIMEOUT_S: Final = 5.0
"""How long a statement waits for another process's write lock, in seconds."""

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
"""Allowed user and token names (matched in full)."""

TOKEN_PREFIX: Final = "cmk_"
"""Prefix of every service token, so scanners and people can recognise one."""

TOKEN_RANDOM_BYTES: Final = 32
"""Random bytes in a service token (encoded as 43 URL-safe base64 characters)."""

TOKEN_PATTERN: Final = re.compile(r"cmk_[A-Za-z0-9_-]{43,128}")
"""What a service token looks like (matched in full); anything else is refused unread."""

LAST_USED_RESOLUTION_S: Final = 60
"""``last_used_at`` is written at most once per this many seconds per token, in seconds."""

FIRST_ADMIN_TOKEN_NAME: Final = "first-admin"
"""Name of the admin token :meth:`IdentityStore.create_first_admin_token` makes."""

RevocationStamp = bytes
"""An opaque value that changes whenever a token is revoked (compare with ``==`` only).

A generation number (8 bytes) that goes up every time the store sees the marker change
(content, absence), and on every call while the marker is unreadable or this process failed
to write it; it never repeats, so a marker returning to an earlier state is still a change.
"""

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # 0 -> 1: users and service tokens.
    (
        """
        CREATE TABLE auth_users (
            name TEXT PRIMARY KEY NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
            password_hash TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            password_changed_at INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE auth_service_tokens (
            name TEXT PRIMARY KEY NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
            token_sha256 BLOB NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
            created_at INTEGER NOT NULL,
            expires_at INTEGER,
            last_used_at INTEGER,
            revoked_at INTEGER
        )
        """,
    ),
    # 1 -> 2: account lifecycle (disable, session generations) and reusable token names.
    (
        "ALTER TABLE auth_users ADD COLUMN session_generation INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE auth_users ADD COLUMN disabled_at INTEGER",
        """
        CREATE TABLE auth_counters (
            name TEXT PRIMARY KEY NOT NULL,
            value INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE auth_service_tokens_v2 (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
            token_sha256 BLOB NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
            created_at INTEGER NOT NULL,
            expires_at INTEGER,
            last_used_at INTEGER,
            revoked_at INTEGER
        )
        """,
        "INSERT INTO auth_service_tokens_v2 (name, role, token_sha256, created_at, expires_at,"
        " last_used_at, revoked_at) SELECT name, role, token_sha256, created_at, expires_at,"
        " last_used_at, revoked_at FROM auth_service_tokens ORDER BY created_at, name",
        "DROP TABLE auth_service_tokens",
        "ALTER TABLE auth_service_tokens_v2 RENAME TO auth_service_tokens",
        "CREATE UNIQUE INDEX auth_service_tokens_active_name ON auth_service_tokens (name)"
        " WHERE revoked_at IS NULL",
    ),
)

SCHEMA_VERSION: Final = len(_MIGRATIONS)
"""The ``PRAGMA user_version`` this code migrates to."""

_USER_COLUMNS: Final = "name, role, created_at, password_changed_at, disabled_at"


class IdentityStoreError(Exception):
    """Raised by :func:`open_identity_store` when the database cannot be used.

    For instance when its schema is newer than this code understands (a downgrade), or the file
    is not a database.
    """


class UnknownName(KeyError):
    """Raised by the account methods and :meth:`~IdentityStore.revoke_token` for a missing name.

    Raised when no user or token has the given name.

    Attributes:
        kind: ``"user"`` or ``"token"``.
        name: the name looked up.
    """

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(name)
        self.kind = kind
        self.name = name

    def __str__(self) -> str:
        return f"no {self.kind} named {self.name!r}"


class UserInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A user as listed (never the password hash).

    Attributes:
        name: the login name.
        role: ``viewer``, ``editor`` or ``admin``.
        created_at: unix seconds.
        password_changed_at: unix seconds.
        disabled: whether the user is disabled (cannot log in; its sessions are refused).
        disabled_at: unix seconds of the disable, or ``None``.
    """

    name: str
    role: str
    created_at: int
    password_changed_at: int
    disabled: bool = False
    disabled_at: int | None = None


class TokenInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A service token as listed (never the token, never its hash).

    Attributes:
        name: the token's unique name (also in ``Claims.token_name`` and the audit log).
        role: ``viewer``, ``editor`` or ``admin``.
        created_at: unix seconds.
        expires_at: unix seconds, or ``None`` for no expiry.
        last_used_at: unix seconds of the last successful use, to within
            :data:`LAST_USED_RESOLUTION_S`; ``None`` if never used.
        revoked: whether the token was revoked.
        revoked_at: unix seconds of the revocation, or ``None``.
    """

    name: str
    role: str
    created_at: int
    expires_at: int | None
    last_used_at: int | None
    revoked: bool
    revoked_at: int | None = None


def _check_name(kind: str, name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"invalid {kind} name {name[:80]!r}: use 1 to 64 of A-Z a-z 0-9 _ . @ -")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role[:80]!r}; expected one of {', '.join(ROLES)}")


def _token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _optional_int(value: object) -> int | None:
    return None if value is None else int(str(value))


class IdentityStore:
    """Users and service tokens over one sqlite connection; open with :func:`open_identity_store`.

    All public methods block (see the module docstring); they are safe to call from several
    threads at once (one lock serialises the connection). Usable as a context manager that
    closes it.

    Args:
        connection: an open, migrated connection (``check_same_thread=False``, autocommit).
        data_dir: the directory holding the database and the revocation marker.
        password_params: scrypt cost for new password hashes and for the dummy hash spent on
            unknown users.
        clock: wall clock in unix seconds; tests inject one to move time.
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        data_dir: Path,
        *,
        password_params: ScryptParams = DEFAULT_PARAMS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._connection = connection
        self._data_dir = data_dir
        self._params = password_params
        self._clock = clock
        self._lock = threading.Lock()
        self._marker_path = os.fspath(data_dir / REVOCATIONS_FILENAME)
        # The last stamp read from the marker and the time.monotonic() taken just before the
        # read; None forces the next revocation_stamp() to read (one pair, swapped atomically).
        self._stamp: tuple[RevocationStamp, float] | None = None
        # The marker's content as last read (None: absent) and how many times it was seen to
        # change; the stamp is that count, so it never repeats (guarded by _stamp_lock).
        self._marker_content: bytes | None = None
        self._generation = 0
        self._stamp_lock = threading.Lock()
        # Set when this process failed to signal one of its own revocations: its caches may
        # hold entries stamped before it, so its stamps must never repeat again.
        self._marker_disabled = False
        self._marker_warned = False

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The data dir this store lives in."""
        return self._data_dir

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards.

        Idempotent. :meth:`revocation_stamp` still answers afterwards (as for an unreadable
        marker: never the same value twice).
        """
        with self._lock:
            self._connection.close()
        self._marker_disabled = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _now(self) -> int:
        return int(self._clock())

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE takes the write lock up front, so a read-then-write (the first-admin
        # check) cannot interleave with another process's write.
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield self._connection
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    # -- users -----------------------------------------------------------------------------------

    def add_user(self, name: str, role: str, password: str) -> UserInfo:
        """Create a user. Blocks for one scrypt hash plus a write.

        Args:
            name: the login name (``[A-Za-z0-9_.@-]{1,64}``).
            role: ``viewer``, ``editor`` or ``admin``.
            password: the clear-text password (at least 8 characters, at most 1024 UTF-8
                bytes: :func:`~coremetry.auth.passwords.check_new_password`); only its hash is
                stored.

        Returns:
            The new user.

        Raises:
            ValueError: a bad name or role, an unacceptable password, or a user with that name
                already exists.
        """
        _check_name("user", name)
        _check_role(role)
        check_new_password(password)
        with self._lock:
            exists = self._connection.execute(
                "SELECT 1 FROM auth_users WHERE name = ?", (name,)
            ).fetchone()
        if exists is not None:
            raise ValueError(f"a user named {name!r} already exists")
        hashed = hash_password(password, self._params)  # slow: outside the lock
        now = self._now()
        try:
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO auth_users (name, role, password_hash, created_at,"
                    " password_changed_at, session_generation) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, role, hashed, now, now, _next_generation(db)),
                )
        except sqlite3.IntegrityError:
            raise ValueError(f"a user named {name!r} already exists") from None
        return UserInfo(name=name, role=role, created_at=now, password_changed_at=now)

    def set_password(self, name: str, password: str) -> None:
        """Replace a user's password and end its sessions.

        Blocks for one scrypt hash plus a write, then :data:`REVOCATION_SETTLE_S` (as
        :meth:`revoke_token`).

        Every session JWT issued before is refused from the next request on, in every process
        (its ``gen`` claim no longer matches); a disabled user stays disabled.

        Raises:
            ValueError: an unacceptable password.
            UnknownName: no user has that name.
        """
        check_new_password(password)
        hashed = hash_password(password, self._params)
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE auth_users SET password_hash = ?, password_changed_at = ?,"
                " session_generation = ? WHERE name = ?",
                (hashed, self._now(), _next_generation(db), name),
            )
            updated = cursor.rowcount
        if updated == 0:
            raise UnknownName("user", name)
        self._signal_revocation()

    def disable_user(self, name: str) -> UserInfo:
        """Disable a user: no login, and every session JWT refused at once, in every process.

        Blocks for a write, then :data:`REVOCATION_SETTLE_S`. Disabling a disabled user is
        allowed and keeps the first ``disabled_at``. The password is kept (see
        :meth:`enable_user`).

        Returns:
            The user after the change.

        Raises:
            UnknownName: no user has that name.
        """
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE auth_users SET disabled_at = coalesce(disabled_at, ?),"
                " session_generation = ? WHERE name = ?",
                (self._now(), _next_generation(db), name),
            ).rowcount
        if updated == 0:
            raise UnknownName("user", name)
        self._signal_revocation()
        return self._user(name)

    def enable_user(self, name: str) -> UserInfo:
        """Let a disabled user log in again (with its old password). Blocks for a write.

        Sessions ended by the disable stay ended: only a new login works. Enabling an enabled
        user changes nothing.

        Returns:
            The user after the change.

        Raises:
            UnknownName: no user has that name.
        """
        with self._transaction() as db:
            updated = db.execute(
                "UPDATE auth_users SET disabled_at = NULL WHERE name = ?", (name,)
            ).rowcount
        if updated == 0:
            raise UnknownName("user", name)
        # Caches elsewhere may remember the user as disabled: make them read again.
        self._signal_revocation()
        return self._user(name)

    def delete_user(self, name: str) -> None:
        """Delete a user; its sessions are refused at once, in every process.

        Blocks for a write, then :data:`REVOCATION_SETTLE_S`. The name may be added again
        later; sessions of the deleted user never become valid for the new one (generations
        are never reused).

        Raises:
            UnknownName: no user has that name.
        """
        with self._transaction() as db:
            deleted = db.execute("DELETE FROM auth_users WHERE name = ?", (name,)).rowcount
        if deleted == 0:
            raise UnknownName("user", name)
        self._signal_revocation()

    def _user(self, name: str) -> UserInfo:
        users = self._select_users("WHERE name = ?", (name,))
        if not users:
            raise UnknownName("user", name)  # deleted meanwhile by another process
        return users[0]

    def _select_users(self, clause: str, parameters: tuple[str, ...]) -> list[UserInfo]:
        with self._lock:
            rows = self._connection.execute(
                f"SELECT {_USER_COLUMNS} FROM auth_users {clause}", parameters
            ).fetchall()
        return [
            UserInfo(
                name=str(name),
                role=str(role),
                created_at=int(created_at),
                password_changed_at=int(changed_at),
                disabled=disabled_at is not None,
                disabled_at=_optional_int(disabled_at),
            )
            for name, role, created_at, changed_at, disabled_at in rows
        ]

    def list_users(self) -> list[UserInfo]:
        """All users, sorted by name, without their password hashes. Blocks for one read."""
        return self._select_users("ORDER BY name", ())

    def session_generation(self, name: str) -> int | None:
        """The session generation a JWT of user ``name`` must carry to be accepted.

        Blocks for one indexed read. The authenticator caches the answer and asks again after
        any account change anywhere (:meth:`revocation_stamp`).

        Returns:
            The user's current generation, or ``None`` when the user does not exist or is
            disabled (no session of it is valid).
        """
        with self._lock:
            row = self._connection.execute(
                "SELECT session_generation, disabled_at FROM auth_users WHERE name = ?", (name,)
            ).fetchone()
        if row is None or row[1] is not None:
            return None
        return int(row[0])

    def check_password(self, name: str, password: str) -> Claims:
        """Verify a user's password. Blocks for one scrypt hash, whether or not the user exists.

        Args:
            name: the login name as typed.
            password: the password as typed.

        Returns:
            The user's identity for a session: ``kind="jwt"``, ``sub`` the user name,
            ``issued_at`` now, ``expires_at`` ``None`` (the JWT issuer sets the expiry) and
            ``generation`` the user's session generation.

        Raises:
            LoginFailed: unknown user, wrong password or disabled user, with the same message
                and the same cost (a dummy hash is spent for an unknown user; a disabled user's
                password is checked as usual, and refused whether it is right or not, so the
                answer never tells); ``reason`` tells them apart for the server log.
        """
        row = None
        if NAME_PATTERN.fullmatch(name):
            with self._lock:
                row = self._connection.execute(
                    "SELECT role, password_hash, session_generation, disabled_at"
                    " FROM auth_users WHERE name = ?",
                    (name,),
                ).fetchone()
        if row is None:
            spend_dummy_hash(password, self._params)
            raise LoginFailed(f"unknown user {name[:80]!r}")
        role, password_hash = str(row[0]), str(row[1])
        generation, disabled = int(row[2]), row[3] is not None
        try:
            matches = verify_password(password, password_hash)
        except ValueError:
            spend_dummy_hash(password, self._params)
            _log.error("the stored password hash of user %r is malformed", name)
            raise LoginFailed(f"malformed stored password hash for user {name!r}") from None
        if disabled:
            raise LoginFailed(f"user {name!r} is disabled")
        if not matches:
            raise LoginFailed(f"wrong password for user {name!r}")
        return Claims(
            sub=name,
            role=role,
            kind="jwt",
            issued_at=self._now(),
            expires_at=None,
            generation=generation,
        )

    # -- service tokens --------------------------------------------------------------------------

    def _insert_token(
        self, db: sqlite3.Connection, name: str, role: str, expires_in_s: float | None
    ) -> tuple[str, TokenInfo]:
        now = self._now()
        expires_at = None if expires_in_s is None else now + math.ceil(expires_in_s)
        token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)
        db.execute(
            "INSERT INTO auth_service_tokens (name, role, token_sha256, created_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (name, role, _token_digest(token), now, expires_at),
        )
        info = TokenInfo(
            name=name,
            role=role,
            created_at=now,
            expires_at=expires_at,
            last_used_at=None,
            revoked=False,
        )
        return token, info

    def create_token(
        self, name: str, role: str, expires_in_s: float | None, *, replace: bool = False
    ) -> tuple[str, TokenInfo]:
        """Create a service token. Blocks for one write.

        Args:
            name: a name (``[A-Za-z0-9_.@-]{1,64}``) no token that is not revoked has; a
                revoked token's name may be reused (the revoked token stays refused).
            role: ``viewer``, ``editor`` or ``admin``.
            expires_in_s: lifetime in seconds (rounded up to whole seconds), or ``None`` for
                no expiry.
            replace: revoke the token of that name, if any, in the same transaction (then
                wait :data:`REVOCATION_SETTLE_S`, as :meth:`revoke_token`): a rotation.

        Returns:
            ``(token, info)``. The token (``cmk_`` + 43 URL-safe characters) exists only in this
            return value: show it once; only its SHA-256 is stored.

        Raises:
            ValueError: a bad name or role, a non-positive or non-finite ``expires_in_s``, or a
                token that is not revoked has that name.
        """
        _check_name("token", name)
        _check_role(role)
        if expires_in_s is not None and not (math.isfinite(expires_in_s) and expires_in_s > 0):
            raise ValueError(
                f"expires_in_s must be a positive number of seconds, got {expires_in_s}"
            )
        try:
            with self._transaction() as db:
                revoked = 0
                if replace:
                    revoked = db.execute(
                        "UPDATE auth_service_tokens SET revoked_at = ?"
                        " WHERE name = ? AND revoked_at IS NULL",
                        (self._now(), name),
                    ).rowcount
                created = self._insert_token(db, name, role, expires_in_s)
            if revoked:
                self._signal_revocation()
            return created
        except sqlite3.IntegrityError:
            raise ValueError(
                f"a token named {name!r} already exists (revoke it first to reuse the name)"
            ) from None

    def list_tokens(self) -> list[TokenInfo]:
        """All service tokens, revoked ones included, sorted by name then age. Blocks for a read."""
        return self._select_tokens("ORDER BY name, id", ())

    def _select_tokens(self, clause: str, parameters: tuple[str, ...]) -> list[TokenInfo]:
        with self._lock:
            rows = self._connection.execute(
                "SELECT name, role, created_at, expires_at, last_used_at, revoked_at"
                f" FROM auth_service_tokens {clause}",
                parameters,
            ).fetchall()
        return [
            TokenInfo(
                name=str(name),
                role=str(role),
                created_at=int(created_at),
                expires_at=_optional_int(expires_at),
                last_used_at=_optional_int(last_used_at),
                revoked=revoked_at is not None,
                revoked_at=_optional_int(revoked_at),
            )
            for name, role, created_at, expires_at, last_used_at, revoked_at in rows
        ]

    def revoke_token(self, name: str) -> TokenInfo:
        """Revoke a service token, with immediate effect in every process.

        Blocks for a write, then :data:`REVOCATION_SETTLE_S` (10 ms) after replacing the
        revocation marker, so that every process has re-read it when this returns (module
        docstring). The name is free for :meth:`create_token` afterwards. Revoking a name whose
        tokens are all revoked already is allowed and changes nothing.

        Returns:
            The revoked token's state (the newest of that name when all were revoked already).

        Raises:
            UnknownName: no token has that name.
        """
        with self._transaction() as db:
            row = db.execute(
                "SELECT id FROM auth_service_tokens WHERE name = ?"
                " ORDER BY revoked_at IS NULL DESC, id DESC LIMIT 1",
                (name,),
            ).fetchone()
            if row is None:
                raise UnknownName("token", name)
            token_id = str(int(row[0]))
            db.execute(
                "UPDATE auth_service_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                (self._now(), token_id),
            )
        self._signal_revocation()
        return self._select_tokens("WHERE id = ?", (token_id,))[0]

    def _signal_revocation(self) -> None:
        # A complete temporary file renamed into place: a reader sees the old content or the
        # new, never a mix. A failure does not undo the revocation (the database is the truth):
        # other processes see it when their cached entries expire, and this process's stamps
        # never repeat from then on (its own caches stop hitting: fail safe).
        temporary = os.fspath(
            self._data_dir / f".{REVOCATIONS_FILENAME}.{os.getpid()}.{secrets.token_hex(4)}"
        )
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, secrets.token_bytes(REVOCATION_MARKER_SIZE))
            finally:
                os.close(fd)
            os.replace(temporary, self._marker_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            _log.warning(
                "could not update the token revocation marker %s: %s; other processes see"
                " this revocation when their cached tokens expire",
                self._marker_path,
                exc,
            )
            self._marker_disabled = True
        self._stamp = None  # this process sees its own revocation at once
        # Every other process re-reads the marker at least once per REVOCATION_CHECK_INTERVAL_S
        # before trusting a cached token: after this wait, none trusts one stamped before it.
        threading.Event().wait(REVOCATION_SETTLE_S)

    def revocation_stamp(self) -> RevocationStamp:
        """A value that changes whenever any process revokes a token.

        Cheap enough to call on every request: the marker is read at most once per
        :data:`REVOCATION_CHECK_INTERVAL_S` (5 ms); in between, a ``time.monotonic()`` and a
        comparison (no system call; the GIL is kept). The value is a generation number (8
        bytes) that goes up whenever the content read differs from the last (absence
        included), so it never repeats. Every process has re-read the marker by the time a
        ``revoke_token`` anywhere returns (module docstring). When the marker cannot be read
        (other than absent), or this process failed to write one of its revocations, every call
        returns a new value, and caches keyed on it stop hitting (fail safe).

        Returns:
            An opaque value to compare with ``==`` to an earlier one (equal: no revocation in
            between).
        """
        if self._marker_disabled:
            return self._unique_stamp()
        now = time.monotonic()
        last = self._stamp
        if last is not None and now - last[1] < REVOCATION_CHECK_INTERVAL_S:
            return last[0]
        try:
            fd = os.open(self._marker_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                content: bytes | None = os.read(fd, 4 * REVOCATION_MARKER_SIZE)
            finally:
                os.close(fd)
        except FileNotFoundError:
            content = None
        except OSError as exc:
            if not self._marker_warned:
                self._marker_warned = True
                _log.warning(
                    "token revocation marker %s unreadable (%s): cached service tokens are"
                    " checked against the database on every request instead",
                    self._marker_path,
                    exc,
                )
            self._stamp = None
            return self._unique_stamp()
        with self._stamp_lock:
            # A generation, not the content itself: a marker that returns to an earlier state
            # (deleted again, restored from a copy) must not revive entries stamped back then.
            if content != self._marker_content or self._generation == 0:
                self._marker_content = content
                self._generation += 1
            stamp = self._generation.to_bytes(8, "big")
            self._stamp = (stamp, now)
        return stamp

    def _unique_stamp(self) -> RevocationStamp:
        # A stamp no other call returns (and that no later content can match): caches stop
        # hitting while the marker is unreadable or this process failed to signal a revocation.
        with self._stamp_lock:
            self._generation += 1
            self._marker_content = b"\x00unreadable"  # the next readable content is a change
            return self._generation.to_bytes(8, "big")

    def verify_token(self, token: str) -> Claims:
        """Check a service token. Blocks for one indexed read (plus a write at most once a minute).

        Also checks, with one ``stat``, that the revocation marker this store maps is still the
        file in the data dir, and maps the one there if not (see the module docstring): a cache
        miss is the moment to heal a mapping left stale by a marker deleted or replaced by hand.

        Args:
            token: the presented ``cmk_…`` string.

        Returns:
            ``Claims(kind="service_token", sub="token:<name>", token_name=<name>, role=…,
            issued_at=created_at, expires_at=…)``.

        Raises:
            InvalidToken: not shaped like a service token, or no such token.
            RevokedToken: the token was revoked.
            ExpiredToken: the token is past ``expires_at``.
        """
        if not TOKEN_PATTERN.fullmatch(token):
            raise InvalidToken("not shaped like a service token")
        with self._lock:
            row = self._connection.execute(
                "SELECT name, role, created_at, expires_at, last_used_at, revoked_at, id"
                " FROM auth_service_tokens WHERE token_sha256 = ?",
                (_token_digest(token),),
            ).fetchone()
        if row is None:
            raise InvalidToken("unknown service token")
        name, role = str(row[0]), str(row[1])
        created_at, expires_at = int(row[2]), _optional_int(row[3])
        last_used_at, revoked_at = _optional_int(row[4]), _optional_int(row[5])
        if revoked_at is not None:
            raise RevokedToken(f"service token {name!r} was revoked")
        now = self._now()
        if expires_at is not None and now >= expires_at:
            raise ExpiredToken(f"service token {name!r} expired")
        if last_used_at is None or now - last_used_at >= LAST_USED_RESOLUTION_S:
            self._record_use(name, int(row[6]), now)
        return Claims(
            sub=f"token:{name}",
            role=role,
            token_name=name,
            issued_at=created_at,
            expires_at=expires_at,
            kind="service_token",
        )

    def _record_use(self, name: str, token_id: int, now: int) -> None:
        # A busy database (another process writing) must not fail the request: last_used_at is
        # bookkeeping, and the next use retries.
        try:
            with self._lock:
                self._connection.execute(
                    "UPDATE auth_service_tokens SET last_used_at = ? WHERE id = ?", (now, token_id)
                )
        except sqlite3.OperationalError as exc:
            _log.warning("could not record the use of service token %r: %s", name, exc)

    def has_any_token(self) -> bool:
        """Whether any service token was ever created (revoked ones count). Blocks for a read."""
        with self._lock:
            row = self._connection.execute("SELECT 1 FROM auth_service_tokens LIMIT 1").fetchone()
        return row is not None

    def create_first_admin_token(self) -> tuple[str, TokenInfo] | None:
        """On a first start, create the admin service token; otherwise do nothing.

        "First start" means no user and no service token exist at all (revoked tokens count),
        checked and acted on in one transaction, so two processes starting at once cannot both
        create one, and revoking every token never makes a restart mint a new admin token.
        Blocks for one write.

        Returns:
            ``(token, info)`` for a new admin token named :data:`FIRST_ADMIN_TOKEN_NAME`
            without expiry (print the token once), or ``None`` when this is not a first start.
        """
        with self._transaction() as db:
            used = db.execute(
                "SELECT EXISTS (SELECT 1 FROM auth_service_tokens)"
                " OR EXISTS (SELECT 1 FROM auth_users)"
            ).fetchone()
            if used is not None and int(used[0]):
                return None
            return self._insert_token(db, FIRST_ADMIN_TOKEN_NAME, "admin", None)


def _next_generation(db: sqlite3.Connection) -> int:
    """Take the next session generation (inside a write transaction); never repeats."""
    row = db.execute(
        "INSERT INTO auth_counters (name, value) VALUES ('session_generation', 1)"
        " ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value"
    ).fetchone()
    return int(row[0])


def _user_version(connection: sqlite3.Connection) -> int:
    row = connection.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _migrate(connection: sqlite3.Connection) -> None:
    if _user_version(connection) == SCHEMA_VERSION:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(connection)  # another process may have migrated meanwhile
        if version > SCHEMA_VERSION:
            raise IdentityStoreError(
                f"the database has schema version {version}, newer than this Coremetry "
                f"understands ({SCHEMA_VERSION}); upgrade Coremetry"
            )
        for step in _MIGRATIONS[version:]:
            for statement in step:
                connection.execute(statement)
        # PRAGMA takes no parameters; SCHEMA_VERSION is our own int.
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def open_identity_store(
    data_dir: str | os.PathLike[str],
    *,
    password_params: ScryptParams = DEFAULT_PARAMS,
    clock: Callable[[], float] = time.time,
) -> IdentityStore:
    """Open (creating if needed) the identity store of a data dir. Blocks.

    Synchronous, unlike the async ``open_*`` context managers elsewhere: the store is blocking
    by design (the CLI uses it directly, the app through ``trio.to_thread``); the returned store
    is itself a (synchronous) context manager.

    Creates the data dir with mode 0700 and ``coremetry.db`` with mode 0600 when they do not
    exist (existing ones keep their modes), switches the database to WAL, and applies pending
    migrations in one transaction.

    Args:
        data_dir: the data dir (``~`` is expanded).
        password_params: scrypt cost (tests pass a cheap one).
        clock: wall clock in unix seconds (tests inject one).

    Returns:
        The open store; close it with :meth:`IdentityStore.close` or a ``with`` block.

    Raises:
        IdentityStoreError: the database's schema is newer than this code, or the file is not a
            usable database.
        OSError: the directory or the file cannot be created.
    """
    directory = Path(data_dir).expanduser()
    path = directory / DB_FILENAME
    create_private_file(path)  # 0600 from the start, never reopened (see private_files)
    connection = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        # FULL rather than NORMAL: auth writes are rare, and a revocation must survive a crash.
        connection.execute("PRAGMA synchronous = FULL")
        _migrate(connection)
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise IdentityStoreError(f"cannot use {path}: {exc}") from exc
    except BaseException:
        connection.close()
        raise
    return IdentityStore(connection, directory, password_params=password_params, clock=clock)
