"""Single-use WebSocket tickets: a way in for clients that cannot send headers (issue 18).

Browsers' ``WebSocket`` and the stock MCP clients built on it (the TypeScript SDK's
``WebSocketClientTransport``, langchain's adapter) cannot set ``Authorization`` on the
handshake. Instead of a long-lived token in the URL (RFC 6750 §2.3 warns that URLs end up in
logs and histories), such a client first calls ``POST /api/mcp/ws-ticket`` the usual way and
then connects to ``/api/mcp/ws?ticket=<ticket>``.

A ticket:

- is :data:`TICKET_BYTES` random bytes from :mod:`secrets` (256 bits), URL-safe base64;
- works once: redeeming it removes it, whatever the outcome of the handshake;
- expires :data:`DEFAULT_TTL_S` seconds after it was minted (at most :data:`MAX_TTL_S`);
- is bound to the credential that minted it: the book keeps that request's ``Authorization``
  and ``Cookie`` header values (in memory only, until the ticket is redeemed or expires), and
  the WebSocket handshake authenticates *them* again. So the socket gets exactly the identity
  and role of the minting credential, and a credential that stopped working in between — a
  revoked service token, a disabled or deleted user, a password change (session generation),
  an expired JWT — makes the ticket fail too. The socket then re-checks that credential on
  every message, like a socket opened with headers.

Only a SHA-256 digest of the ticket is kept as the key (a memory dump shows no usable
ticket); the ticket itself is never logged. The book lives in one process: a ticket minted by
one server process is unknown to another (behind a load balancer, route ``/api/mcp/ws-ticket``
and ``/api/mcp/ws`` to the same process, or use headers).

Bounds: at most ``max_per_subject`` live tickets per identity and ``max_tickets`` in all;
minting beyond either raises :class:`TicketLimit` (the endpoint answers 429). Expired tickets
are dropped whenever a ticket is minted or redeemed.
"""

import hashlib
import math
import secrets
import time
from collections.abc import Callable
from typing import Final

import msgspec

from .authenticator import HeaderSource
from .principal import ExpiredToken, InvalidToken

TICKET_BYTES: Final = 32
"""Random bytes in a ticket (256 bits; URL-safe base64 makes 43 characters)."""

DEFAULT_TTL_S: Final = 30.0
"""How long a ticket stays valid, in seconds."""

MAX_TTL_S: Final = 60.0
"""The longest ticket lifetime accepted, in seconds (issue 18: "expires within a minute")."""

CREDENTIAL_HEADERS: Final[tuple[str, ...]] = ("authorization", "cookie")
"""The headers of the minting request a ticket keeps, to authenticate them again."""

MAX_TICKET_CHARS: Final = 128
"""A presented ticket longer than this is refused unhashed."""


class TicketLimit(Exception):
    """Raised by :meth:`TicketBook.mint` when an identity (or everyone) holds too many tickets.

    Attributes:
        retry_after_s: seconds until the oldest live ticket of the identity expires.
    """

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """A freshly minted ticket: the value to hand the client, once, and its lifetime.

    Attributes:
        value: the ticket (URL-safe; put it in ``?ticket=`` as it is).
        expires_in_s: seconds until it expires.
    """

    value: str
    expires_in_s: float


class _Entry(msgspec.Struct, frozen=True):
    subject: str
    headers: tuple[tuple[bytes, bytes], ...]  # the minting request's credential headers
    expires_at: float  # the book's clock, seconds


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


class TicketBook:
    """Mints and redeems single-use WebSocket tickets (see the module docstring).

    Args:
        ttl_s: ticket lifetime, in seconds (``0 < ttl_s <=`` :data:`MAX_TTL_S`).
        max_tickets: live tickets in all.
        max_per_subject: live tickets per identity (``Caller.subject``).
        clock: a monotonic clock in seconds (tests inject one).

    Raises:
        ValueError: a lifetime outside ``(0, MAX_TTL_S]`` or a limit below 1.
    """

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_tickets: int = 10_000,
        max_per_subject: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(ttl_s) and 0 < ttl_s <= MAX_TTL_S):
            raise ValueError(f"ttl_s must be in (0, {MAX_TTL_S}] seconds, got {ttl_s}")
        if max_tickets < 1 or max_per_subject < 1:
            raise ValueError("max_tickets and max_per_subject must be at least 1")
        self.ttl_s: Final = ttl_s
        """Ticket lifetime, in seconds."""
        self._max_tickets = max_tickets
        self._max_per_subject = max_per_subject
        self._clock = clock
        self._entries: dict[bytes, _Entry] = {}  # insertion order = expiry order

    def __len__(self) -> int:
        """The number of tickets held (expired ones not yet dropped included)."""
        return len(self._entries)

    def mint(self, subject: str, headers: HeaderSource) -> Ticket:
        """Mint a ticket for an already authenticated request.

        Args:
            subject: the caller's identity (``Caller.subject``), for the per-identity bound.
            headers: the minting request's headers; only :data:`CREDENTIAL_HEADERS` are kept.

        Returns:
            The new ticket.

        Raises:
            TicketLimit: the identity holds ``max_per_subject`` live tickets, or the book
                ``max_tickets``.
        """
        now = self._clock()
        self._drop_expired(now)
        mine = [entry for entry in self._entries.values() if entry.subject == subject]
        if len(mine) >= self._max_per_subject:
            raise TicketLimit(
                f"{subject!r} holds {len(mine)} unused WebSocket tickets",
                retry_after_s=max(0.0, mine[0].expires_at - now),
            )
        if len(self._entries) >= self._max_tickets:
            oldest = next(iter(self._entries.values()))
            raise TicketLimit(
                f"{len(self._entries)} unused WebSocket tickets are held",
                retry_after_s=max(0.0, oldest.expires_at - now),
            )
        kept = tuple(
            (name.encode(), value.encode("latin-1"))
            for name in CREDENTIAL_HEADERS
            if (value := headers.get(name)) is not None
        )
        value = secrets.token_urlsafe(TICKET_BYTES)
        self._entries[_digest(value)] = _Entry(subject, kept, now + self.ttl_s)
        return Ticket(value=value, expires_in_s=self.ttl_s)

    def redeem(self, value: str) -> tuple[tuple[bytes, bytes], ...]:
        """Use a ticket up: it is removed, and cannot be redeemed again.

        Args:
            value: the ticket as presented in ``?ticket=``.

        Returns:
            The minting request's credential headers (raw ASGI pairs), to authenticate again.

        Raises:
            InvalidToken: unknown, already used, or malformed.
            ExpiredToken: past its lifetime (it is removed too).
        """
        now = self._clock()
        if not value or len(value) > MAX_TICKET_CHARS:
            raise InvalidToken("WebSocket ticket malformed")
        entry = self._entries.pop(_digest(value), None)
        self._drop_expired(now)
        if entry is None:
            raise InvalidToken("WebSocket ticket unknown or already used")
        if now >= entry.expires_at:
            raise ExpiredToken(f"WebSocket ticket of {entry.subject!r} expired")
        return entry.headers

    def _drop_expired(self, now: float) -> None:
        # Entries are in minting order and share one lifetime, so expired ones come first.
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.expires_at > now:
                return
            del self._entries[key]
