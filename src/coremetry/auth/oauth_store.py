"""What the built-in OAuth authorization server remembers: ``<data_dir>/oauth.db`` (issue 18).

A file of its own beside the identity store's ``coremetry.db`` (whose ``PRAGMA user_version``
belongs to :mod:`coremetry.auth.identity_store`). WAL mode and a busy timeout, like the identity
store: ``serve`` and the CLI may open it at once. Every method is **synchronous and blocking**;
the app calls them from worker threads (the Authlib endpoints run there as a whole).

Tables:

- ``oauth_clients(client_id, metadata_json, created_at, source)``: dynamically registered
  clients (RFC 7591; ``source`` the registering address). Client ID metadata documents are not
  stored here (they are fetched, :mod:`coremetry.auth.oauth_server`).
- ``oauth_codes(code_sha256, client_id, user, role, scope, redirect_uri, resource, challenge,
  generation, expires_at, used_at, family)``: authorization codes, single use. A second use
  revokes the family the first one started (RFC 6749 §4.1.2).
- ``oauth_families(family, client_id, user, role, scope, resource, generation, created_at,
  expires_at, revoked_at)``: one per grant (a sign-in and consent); every refresh token of the
  grant belongs to it, and revoking it ends them all.
- ``oauth_refresh_tokens(token_sha256, family, issued_at, used_at)``: rotating refresh tokens.
  Presenting one a second time (``used_at`` set) is reuse: the whole family is revoked
  (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2).

Codes and refresh tokens are stored only as their SHA-256 (256-bit random values: a fast hash is
enough, as for service tokens). Times are unix seconds.
"""

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import msgspec

from coremetry.private_files import create_private_file


class _CodeReused(Exception):
    """An authorization code presented after its use (carries whose it was)."""

    def __init__(self, user: str, role: str) -> None:
        super().__init__(user)
        self.user = user
        self.role = role


DB_FILENAME: Final = "oauth.db"
"""The OAuth database inside the data dir."""

BUSY_TIMEOUT_S: Final = 5.0
"""How long a write waits for another process's lock, in seconds."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS oauth_clients (
    client_id TEXT PRIMARY KEY,
    metadata_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    source TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS oauth_codes (
    code_sha256 BLOB PRIMARY KEY,
    client_id TEXT NOT NULL,
    user TEXT NOT NULL,
    role TEXT NOT NULL,
    scope TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    resource TEXT NOT NULL,
    challenge TEXT NOT NULL,
    generation INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER,
    family TEXT
);
CREATE TABLE IF NOT EXISTS oauth_families (
    family TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    user TEXT NOT NULL,
    role TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    generation INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS oauth_refresh_tokens (
    token_sha256 BLOB PRIMARY KEY,
    family TEXT NOT NULL REFERENCES oauth_families(family),
    issued_at INTEGER NOT NULL,
    used_at INTEGER
);
CREATE INDEX IF NOT EXISTS oauth_refresh_family ON oauth_refresh_tokens(family);
CREATE INDEX IF NOT EXISTS oauth_families_user ON oauth_families(user);
"""


def digest(secret: str) -> bytes:
    """The SHA-256 of a code or refresh token, as stored."""
    return hashlib.sha256(secret.encode("utf-8")).digest()


class CodeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An authorization code as stored (what the sign-in granted)."""

    client_id: str
    user: str
    role: str
    scope: str
    redirect_uri: str
    resource: str
    challenge: str
    generation: int
    expires_at: int


class Family(msgspec.Struct, frozen=True, kw_only=True):
    """A grant: the refresh-token family one sign-in started."""

    family: str
    client_id: str
    user: str
    role: str
    scope: str
    resource: str
    generation: int
    expires_at: int
    revoked_at: int | None


RefreshOutcome = Literal["ok", "reused", "unknown", "expired", "revoked"]
"""What presenting a refresh token found (:meth:`OAuthStore.use_refresh_token`)."""


class OAuthStore:
    """The OAuth tables in ``<data_dir>/oauth.db`` (see the module docstring).

    Args:
        data_dir: the data dir (created with mode 0700 when missing).
    """

    def __init__(self, data_dir: Path) -> None:
        self.path: Final = data_dir / DB_FILENAME
        # 0600 before sqlite opens it, so its -wal and -shm files are 0600 too (they were 0644
        # until a restart when the file was chmod-ed after the fact).
        create_private_file(self.path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()

    @staticmethod
    def now() -> int:
        """Unix seconds."""
        return int(time.time())

    # -- clients --------------------------------------------------------------------------------

    def add_client(self, client_id: str, metadata: dict[str, object], source: str) -> None:
        """Store a registered client's metadata (RFC 7591 §2) under ``client_id``."""
        with self._lock:
            self._db.execute(
                "INSERT INTO oauth_clients VALUES (?, ?, ?, ?)",
                (client_id, msgspec.json.encode(metadata).decode(), self.now(), source),
            )

    def client(self, client_id: str) -> dict[str, object] | None:
        """A registered client's metadata, or ``None``."""
        with self._lock:
            row = self._db.execute(
                "SELECT metadata_json FROM oauth_clients WHERE client_id = ?", (client_id,)
            ).fetchone()
        if row is None:
            return None
        metadata = msgspec.json.decode(row[0])
        return metadata if isinstance(metadata, dict) else None

    def client_count(self) -> int:
        """How many clients are registered."""
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) FROM oauth_clients").fetchone()
        return int(row[0])

    # -- codes ----------------------------------------------------------------------------------

    def save_code(self, code: str, record: CodeRecord) -> None:
        """Store a fresh authorization code."""
        with self._lock:
            self._db.execute(
                "INSERT INTO oauth_codes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
                (
                    digest(code),
                    record.client_id,
                    record.user,
                    record.role,
                    record.scope,
                    record.redirect_uri,
                    record.resource,
                    record.challenge,
                    record.generation,
                    record.expires_at,
                ),
            )

    def peek_code(
        self,
        code: str,
        client_id: str,
        on_reuse: Callable[[str, str], None] | None = None,
    ) -> CodeRecord | None:
        """The unused, unexpired code of ``client_id``, or ``None``.

        A code presented again after its use revokes the family its first use started
        (RFC 6749 §4.1.2) and answers ``None``; ``on_reuse(user, role)`` is then called (after
        the store's lock is released), for the audit log.
        """
        now = self.now()
        reused: tuple[str, str] | None = None
        try:
            return self._peek_code_locked(code, client_id, now, on_reuse is not None)
        except _CodeReused as reuse:
            reused = (reuse.user, reuse.role)
        if on_reuse is not None and reused is not None:
            on_reuse(*reused)
        return None

    def _peek_code_locked(
        self, code: str, client_id: str, now: int, tell: bool
    ) -> CodeRecord | None:
        with self._lock, self._db:
            row = self._db.execute(
                "SELECT client_id, user, role, scope, redirect_uri, resource, challenge,"
                " generation, expires_at, used_at, family FROM oauth_codes WHERE code_sha256 = ?",
                (digest(code),),
            ).fetchone()
            if row is None or row[0] != client_id:
                return None
            if row[9] is not None:
                if row[10] is not None:
                    self._revoke_family_locked(row[10], now)
                if tell:
                    raise _CodeReused(str(row[1]), str(row[2]))
                return None
            if row[8] < now:
                return None
            return CodeRecord(
                client_id=row[0],
                user=row[1],
                role=row[2],
                scope=row[3],
                redirect_uri=row[4],
                resource=row[5],
                challenge=row[6],
                generation=row[7],
                expires_at=row[8],
            )

    def spend_code(self, code: str, family: str) -> bool:
        """Mark a code used by the grant ``family``; ``False`` when it was used already."""
        with self._lock, self._db:
            cursor = self._db.execute(
                "UPDATE oauth_codes SET used_at = ?, family = ?"
                " WHERE code_sha256 = ? AND used_at IS NULL",
                (self.now(), family, digest(code)),
            )
            return cursor.rowcount == 1

    # -- families and refresh tokens ----------------------------------------------------------

    def add_family(self, family: Family) -> None:
        """Start a grant."""
        with self._lock:
            self._db.execute(
                "INSERT INTO oauth_families VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    family.family,
                    family.client_id,
                    family.user,
                    family.role,
                    family.scope,
                    family.resource,
                    family.generation,
                    self.now(),
                    family.expires_at,
                ),
            )

    def family(self, family: str) -> Family | None:
        """A grant by id, or ``None``."""
        with self._lock:
            return self._family_locked(family)

    def _family_locked(self, family: str) -> Family | None:
        row = self._db.execute(
            "SELECT family, client_id, user, role, scope, resource, generation, expires_at,"
            " revoked_at FROM oauth_families WHERE family = ?",
            (family,),
        ).fetchone()
        if row is None:
            return None
        return Family(
            family=row[0],
            client_id=row[1],
            user=row[2],
            role=row[3],
            scope=row[4],
            resource=row[5],
            generation=row[6],
            expires_at=row[7],
            revoked_at=row[8],
        )

    def add_refresh_token(self, token: str, family: str) -> None:
        """Store a refresh token of a grant."""
        with self._lock:
            self._db.execute(
                "INSERT INTO oauth_refresh_tokens VALUES (?, ?, ?, NULL)",
                (digest(token), family, self.now()),
            )

    def find_refresh_token(self, token: str) -> tuple[RefreshOutcome, Family | None]:
        """Look a refresh token up without spending it.

        Returns:
            ``("ok", family)`` for a live token; ``("reused", family)`` for a token already
            rotated (the family is revoked here and now); ``("expired"|"revoked", family)``;
            ``("unknown", None)``.
        """
        now = self.now()
        with self._lock, self._db:
            row = self._db.execute(
                "SELECT family, used_at FROM oauth_refresh_tokens WHERE token_sha256 = ?",
                (digest(token),),
            ).fetchone()
            if row is None:
                return "unknown", None
            family = self._family_locked(row[0])
            if family is None:
                return "unknown", None
            if family.revoked_at is not None:
                return "revoked", family
            if row[1] is not None:
                self._revoke_family_locked(family.family, now)
                return "reused", family
            if family.expires_at < now:
                return "expired", family
            return "ok", family

    def spend_refresh_token(self, token: str) -> bool:
        """Mark a refresh token rotated; ``False`` when it was spent already (a race lost)."""
        with self._lock, self._db:
            cursor = self._db.execute(
                "UPDATE oauth_refresh_tokens SET used_at = ? WHERE token_sha256 = ?"
                " AND used_at IS NULL",
                (self.now(), digest(token)),
            )
            return cursor.rowcount == 1

    def revoke_family(self, family: str) -> bool:
        """End a grant and every refresh token in it; ``False`` when it was ended already."""
        with self._lock, self._db:
            return self._revoke_family_locked(family, self.now())

    def _revoke_family_locked(self, family: str, now: int) -> bool:
        cursor = self._db.execute(
            "UPDATE oauth_families SET revoked_at = ? WHERE family = ? AND revoked_at IS NULL",
            (now, family),
        )
        return cursor.rowcount == 1
