"""The application's call gate: the role question first, then the rate question.

Plugged into the protocol core with ``server.set_call_gate(make_call_gate(limiter))``
(``shared/DESIGN.md`` §3, issue 4 "The gate"). For every ``tools/call``, ``resources/read`` and
``prompts/get``:

1. **Role.** The caller's role must satisfy the entry's ``min_role`` (viewer < editor < admin;
   ``""`` is the viewer floor). Otherwise :func:`~coremetry.mcp.denied` -> JSON-RPC ``-32001``,
   e.g. "tool 'x' requires role admin; caller 'alice' has role viewer". A refused call costs no
   rate budget.
2. **Rate.** A token bucket per identity (``caller.subject``): it holds at most ``burst`` tokens,
   refills at ``per_second`` tokens per second, and each allowed call takes one token. An empty
   bucket -> :class:`~coremetry.mcp.RateLimited` -> ``-32000`` with ``data.retry_after_ms``, the
   wait until one token is back, rounded up to a whole millisecond. A refused call takes no
   token. Identities never share a bucket, so one busy identity never slows another.

Guarantees and limits:

- By default tools, resources and prompts draw on one budget per identity; with
  ``per_kind=True`` each kind has its own bucket (same rate and size).
- Time is trio's clock (:func:`trio.current_time`), so tests drive it with ``autojump_clock``;
  :meth:`RateLimiter.try_acquire` must therefore run inside ``trio.run``.
- Memory is bounded: at most ``max_identities`` buckets are kept, in least-recently-used order.
  A bucket that has refilled completely is indistinguishable from a new one, so when a new
  identity arrives, such idle buckets are dropped from the old end first (losing nothing). If
  the bound is still reached, the least recently seen bucket is dropped although it is still
  refilling: that identity starts again with a full bucket (``evicted_active`` in
  :meth:`RateLimiter.statistics`; size the bound above the number of active identities).
  Each call is O(1) amortised.
- The recency order is exact up to one approximation that keeps the common call cheap: a
  bucket is moved to the recent end only on its first use after some new identity arrived
  (not on every call), so buckets used between two arrivals rank by their first use in that
  interval, not their last. All of them still rank above every bucket not used since.
- Not thread-safe: use it from the trio loop only (the gate runs there).
"""

import math
from collections import OrderedDict
from typing import Final

import msgspec
import trio

from coremetry.config import RateLimitConfig
from coremetry.mcp import (
    ROLES,
    CallGate,
    CallKind,
    GateCall,
    RateLimited,
    denied,
    role_satisfies,
)

_EPSILON: Final = 1e-9
"""Tolerance for float rounding when a refill lands exactly on a whole token (e.g. after
sleeping exactly the advertised wait)."""

SHARED_BUDGET: Final = ""
"""The bucket key's kind part when all call kinds share one budget."""


class RateLimiterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a :class:`RateLimiter` (for health resources and tests).

    Attributes:
        buckets: buckets currently held in memory.
        allowed_total: calls allowed since creation.
        refused_total: calls refused since creation.
        evicted_idle: buckets dropped because they had refilled completely (lossless).
        evicted_active: buckets dropped while still refilling, to keep the memory bound (their
            identity starts again with a full bucket).
    """

    buckets: int
    allowed_total: int
    refused_total: int
    evicted_idle: int
    evicted_active: int


class _Bucket:
    __slots__ = ("arrivals", "tokens", "updated")

    def __init__(self, tokens: float, updated: float, arrivals: int) -> None:
        self.tokens = tokens
        self.updated = updated
        # The limiter's arrival count when this bucket was last moved to the recent end.
        self.arrivals = arrivals


class RateLimiter:
    """A token bucket per identity, optionally one per identity and call kind.

    Args:
        per_second: refill rate, in tokens (calls) per second; must be positive.
        burst: bucket size, in calls; at least 1. A new identity starts with a full bucket.
        per_kind: give tools, resources and prompts separate buckets (else one shared budget).
        max_identities: buckets kept in memory (see the module docstring for eviction).

    Raises:
        ValueError: a non-positive or non-finite rate, a burst below 1, or a bound below 1.
    """

    def __init__(
        self,
        per_second: float,
        burst: int,
        *,
        per_kind: bool = False,
        max_identities: int = 10_000,
    ) -> None:
        if not (math.isfinite(per_second) and per_second > 0):
            raise ValueError(f"per_second must be a positive number, got {per_second!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        if max_identities < 1:
            raise ValueError(f"max_identities must be at least 1, got {max_identities!r}")
        self.per_second = float(per_second)
        self.burst = burst
        self.per_kind = per_kind
        self.max_identities = max_identities
        self._full = float(burst)
        # Keyed by subject alone for one shared budget (no tuple built per call), by
        # (subject, kind) when per_kind.
        self._buckets: OrderedDict[str | tuple[str, str], _Bucket] = OrderedDict()
        self._arrivals = 0  # buckets ever created: the recency order's clock (module docstring)
        self._allowed = 0
        self._refused = 0
        self._evicted_idle = 0
        self._evicted_active = 0

    @classmethod
    def from_config(cls, config: "RateLimitConfig") -> "RateLimiter":
        """Build a limiter from the ``[rate_limit]`` configuration section."""
        return cls(
            config.per_second,
            config.burst,
            per_kind=config.per_kind,
            max_identities=config.max_identities,
        )

    def try_acquire(self, subject: str, kind: CallKind = "tool") -> float | None:
        """Take one token from ``subject``'s bucket if there is one (never blocks).

        Args:
            subject: the identity (``caller.subject``).
            kind: the call kind; selects the bucket when the limiter is ``per_kind``.

        Returns:
            ``None`` when the call is allowed (a token was taken), else the seconds to wait
            until one token is back (nothing was taken).
        """
        # Every call of every gated request runs this: written for speed (no min/max calls,
        # no key tuple without per_kind, no reordering unless a new identity arrived since).
        now = trio.current_time()
        key: str | tuple[str, str] = (subject, kind) if self.per_kind else subject
        bucket = self._buckets.get(key)
        if bucket is None:
            self._evict(now)
            self._arrivals += 1
            bucket = _Bucket(self._full, now, self._arrivals)
            self._buckets[key] = bucket
            tokens = self._full
        else:
            if bucket.arrivals != self._arrivals:
                self._buckets.move_to_end(key)
                bucket.arrivals = self._arrivals
            tokens = bucket.tokens
            elapsed = now - bucket.updated
            if elapsed > 0:
                tokens += elapsed * self.per_second
                if tokens > self._full:
                    tokens = self._full
                bucket.updated = now
        if tokens >= 1.0 - _EPSILON:
            bucket.tokens = tokens - 1.0 if tokens > 1.0 else 0.0
            self._allowed += 1
            return None
        bucket.tokens = tokens
        self._refused += 1
        return (1.0 - tokens) / self.per_second

    def _evict(self, now: float) -> None:
        """Make room for one new bucket (called before inserting it)."""
        buckets = self._buckets
        # Oldest first: drop buckets that are full again (lossless; each bucket is dropped at
        # most once, so this is amortised O(1)) ...
        while buckets:
            oldest = next(iter(buckets.values()))
            if oldest.tokens + (now - oldest.updated) * self.per_second < self.burst - _EPSILON:
                break
            buckets.popitem(last=False)
            self._evicted_idle += 1
        # ... then, at the bound, the least recently seen one whatever its state.
        while len(buckets) >= self.max_identities:
            buckets.popitem(last=False)
            self._evicted_active += 1

    def statistics(self) -> RateLimiterStatistics:
        """A snapshot of the counters and the number of buckets held."""
        return RateLimiterStatistics(
            buckets=len(self._buckets),
            allowed_total=self._allowed,
            refused_total=self._refused,
            evicted_idle=self._evicted_idle,
            evicted_active=self._evicted_active,
        )


_SATISFIED: Final = frozenset(
    (have, need) for have in ("", *ROLES) for need in ("", *ROLES) if role_satisfies(have, need)
)
"""Every (caller role, ``min_role``) pair :func:`~coremetry.mcp.role_satisfies` allows, for a
set lookup per call instead of two rank look-ups. Roles outside :data:`~coremetry.mcp.ROLES`
(and ``""``) satisfy nothing, so a pair missing here is one ``role_satisfies`` refuses."""


def retry_after_ms(wait_s: float) -> int:
    """Whole milliseconds to wait (rounded up, at least 1) for a wait of ``wait_s`` seconds.

    A wait that is a whole number of milliseconds up to float noise (``0.05 * 1000`` is
    ``50.00000000000001``) is not rounded up to the next millisecond.
    """
    return max(1, math.ceil(round(wait_s * 1000.0, 6)))


def make_call_gate(limiter: RateLimiter | None) -> CallGate:
    """Build the application's call gate: role first, then rate.

    Args:
        limiter: the rate limiter to consult for allowed roles, or ``None`` for the role
            question alone.

    Returns:
        An async :data:`~coremetry.mcp.CallGate` for :meth:`~coremetry.mcp.Server.set_call_gate`.
        It never blocks or awaits (both answers are in memory); it raises
        :class:`~coremetry.mcp.Denied` (-> ``-32001``) naming the needed role, or
        :class:`~coremetry.mcp.RateLimited` (-> ``-32000``, ``data.retry_after_ms``).
    """

    async def gate(call: GateCall) -> None:
        caller = call.caller
        if (caller.role, call.min_role) not in _SATISFIED:
            raise denied(
                f"{call.kind} {call.name!r} requires role {call.min_role or 'viewer'}; "
                f"caller {caller.subject!r} has role {caller.role or 'none'}"
            )
        if limiter is not None:
            wait = limiter.try_acquire(caller.subject, call.kind)
            if wait is not None:
                ms = retry_after_ms(wait)
                raise RateLimited(
                    f"rate limit exceeded for {caller.subject!r}: retry in {ms} ms",
                    retry_after_ms=ms,
                )

    return gate
