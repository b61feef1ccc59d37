"""Password login: check a user name and password, hand out a session JWT, slow down guessing.

What ``POST /api/auth/login`` calls. The answer for an unknown user, a wrong password and a
disabled user is the same :class:`~coremetry.auth.LoginFailed`, after the same scrypt cost.

Throttling, per user name and per client (the caller's ``client_key``, e.g. the peer address),
each tracked separately:

- The first :data:`FREE_FAILURES` (5) failures of a user name, and the first
  :data:`CLIENT_FREE_FAILURES` (50) of a client, cost nothing extra. A client's allowance is
  larger because a client key is shared: every user behind one proxy, or on the loopback
  address the server binds by default, has the same one, and a handful of wrong guesses by one
  of them (or by anyone there) must not lock the others out. Guessing one account stays at 5.
- After that, each attempt waits ``min(MAX_DELAY_S, BASE_DELAY_S * 2 ** (n - free))``
  seconds after the key's previous attempt or failure, ``n`` being the key's failures plus the
  attempts for it still in progress: 1 s after 5 failures of a name, then 2, 4, 8, 16, and 30 s
  from the 10th on. With both keys involved, the longer wait applies. The wait happens before the
  password is checked, so nothing is learnt earlier.
- Counting in-progress attempts makes concurrent guesses queue up one delay apart instead of
  all running after one wait. An attempt whose turn is more than :data:`MAX_WAIT_S` (60 s) away
  is refused at once with :class:`~coremetry.auth.LoginThrottled` (``retry_after_s``) rather
  than holding a connection open.
- A success clears the user name's failures (not the client's: one valid account must not
  launder guesses at others). A key with no activity for :data:`FORGET_AFTER_S` (15 min) is
  forgotten.
- At most ``max_tracked_keys`` keys are kept; past that, the least recently active idle keys
  are dropped first, so an attacker spraying names or addresses can cost memory only up to
  that bound.

Throttling applies to unknown user names exactly as to real ones, so it tells nothing about which
names exist. Its state is per process and in memory; a restart clears it.

At most ``max_concurrent_hashes`` scrypt computations run at once (each needs 32 MiB with the
default parameters); further logins wait their turn.

Passwords and tokens are never logged; log lines name the user and the client key.
"""

import logging
import math
from typing import Final

import trio

from .identity_store import IdentityStore
from .jwt_verifier import JwtIssuer
from .principal import Claims, LoginFailed, LoginThrottled

_log: Final = logging.getLogger(__name__)

FREE_FAILURES: Final = 5
"""Failures of one user name before its attempts are slowed down."""

CLIENT_FREE_FAILURES: Final = 50
"""Failures from one client key (e.g. one address) before its attempts are slowed down."""

BASE_DELAY_S: Final = 1.0
"""Wait after the first throttled failure, in seconds; doubles with each further one."""

MAX_DELAY_S: Final = 30.0
"""Longest wait between two attempts for one key, in seconds."""

MAX_WAIT_S: Final = 60.0
"""Longest an attempt is made to wait for its turn before it is refused, in seconds."""

FORGET_AFTER_S: Final = 15 * 60.0
"""Idle time after which a key's failures are forgotten, in seconds."""

MAX_TRACKED_KEYS: Final = 10_000
"""Most user names plus client keys tracked at once."""

MAX_CONCURRENT_HASHES: Final = 4
"""Most password hashes computed at once."""

_MAX_KEY_CHARS: Final = 128

_Key = tuple[str, str]


class _Backoff:
    """Throttling state of one user name or client key (times on the trio clock, seconds)."""

    __slots__ = ("anchor_at", "failures", "pending")

    def __init__(self, now: float) -> None:
        self.failures = 0
        self.pending = 0
        self.anchor_at = now  # last failure or last admitted attempt


class LoginService:
    """Password logins with throttling; see the module docstring for the numbers.

    Args:
        store: checks passwords (called through ``trio.to_thread``).
        issuer: issues the session JWT.
        free_failures: failures per key before throttling starts.
        base_delay_s: first throttled wait, in seconds.
        max_delay_s: longest wait between attempts, in seconds.
        max_wait_s: longest an attempt may wait before it is refused, in seconds.
        forget_after_s: idle time after which a key is forgotten, in seconds.
        max_tracked_keys: memory bound on tracked keys.
        max_concurrent_hashes: scrypt computations allowed at once.
    """

    def __init__(
        self,
        store: IdentityStore,
        issuer: JwtIssuer,
        *,
        free_failures: int = FREE_FAILURES,
        client_free_failures: int = CLIENT_FREE_FAILURES,
        base_delay_s: float = BASE_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
        max_wait_s: float = MAX_WAIT_S,
        forget_after_s: float = FORGET_AFTER_S,
        max_tracked_keys: int = MAX_TRACKED_KEYS,
        max_concurrent_hashes: int = MAX_CONCURRENT_HASHES,
    ) -> None:
        self._store = store
        self._issuer = issuer
        self._free_failures = free_failures
        self._client_free_failures = client_free_failures
        self._base_delay_s = base_delay_s
        self._max_delay_s = max_delay_s
        self._max_wait_s = max_wait_s
        self._forget_after_s = forget_after_s
        self._max_tracked_keys = max_tracked_keys
        self._limiter = trio.CapacityLimiter(max_concurrent_hashes)
        self._states: dict[_Key, _Backoff] = {}

    def delay_s(self, failures: int, *, client: bool = False) -> float:
        """The wait imposed on a key with ``failures`` failures (plus attempts in progress).

        Args:
            failures: the key's failures plus its attempts in progress.
            client: the key is a client's (its allowance is ``client_free_failures``), not a
                user name's (``free_failures``).

        Returns:
            Seconds: 0 below the allowance, then ``base_delay_s`` doubling per failure, at
            most ``max_delay_s``.
        """
        free = self._client_free_failures if client else self._free_failures
        excess = failures - free
        if excess < 0:
            return 0.0
        return min(self._max_delay_s, self._base_delay_s * 2.0 ** min(excess, 64))

    async def login(self, username: str, password: str, *, client_key: str) -> tuple[str, Claims]:
        """Check a user name and password and issue a session JWT.

        Blocks (asynchronously) for any throttling wait, then for one scrypt hash in a worker
        thread. Cancelled while waiting, the attempt records no failure (the turn it reserved
        is spent: the next attempt's wait counts from it). Cancellation during the hash takes
        effect once the hash has finished (a fraction of a second), and its outcome counts.

        Args:
            username: the name as typed.
            password: the password as typed; never logged.
            client_key: identifies the client for throttling (e.g. the peer IP address).

        Returns:
            ``(jwt, claims)``: the session token and what it says (``kind="jwt"``,
            ``expires_at`` after the issuer's ``ttl_s``).

        Raises:
            LoginFailed: unknown user, wrong password or disabled user (one message for all;
                a disabled user's attempt counts as a failure whether the password was right or
                not, so neither the answer nor the throttling tells).
            LoginThrottled: too many recent failures for this user name or client; the attempt
                was refused without checking the password (``retry_after_s`` says when the
                next one could run).
        """
        keys: tuple[_Key, _Key] = (
            ("user", username[:_MAX_KEY_CHARS]),
            ("client", client_key[:_MAX_KEY_CHARS]),
        )
        start_at = self._admit(keys)
        try:
            await trio.sleep_until(start_at)
            try:
                claims = await trio.to_thread.run_sync(
                    self._store.check_password, username, password, limiter=self._limiter
                )
            except LoginFailed as failure:
                self._record_failure(keys)
                _log.info("login refused for client %r: %s", client_key, failure.reason)
                raise
            self._record_success(keys[0])
        finally:
            for key in keys:
                state = self._states.get(key)
                if state is not None:
                    state.pending -= 1
        session = self._issuer.session_claims(claims.sub, claims.role, claims.generation)
        _log.info("login: user %r (%s) from client %r", session.sub, session.role, client_key)
        return self._issuer.issue(session), session

    def _admit(self, keys: tuple[_Key, _Key]) -> float:
        """Reserve the attempt's turn and return its start time (trio clock, seconds).

        Raises:
            LoginThrottled: the turn is more than ``max_wait_s`` away (nothing reserved).
        """
        now = trio.current_time()
        self._prune(now)
        states = [self._state(key, now) for key in keys]
        start_at = now
        for key, state in zip(keys, states, strict=True):
            delay = self.delay_s(state.failures + state.pending, client=key[0] == "client")
            if delay > 0:
                start_at = max(start_at, state.anchor_at + delay)
        if start_at - now > self._max_wait_s:
            raise LoginThrottled(
                f"login for user {keys[0][1]!r} from client {keys[1][1]!r} throttled",
                retry_after_s=start_at - now,
            )
        for state in states:
            state.pending += 1
            state.anchor_at = max(state.anchor_at, start_at)
        return start_at

    def _state(self, key: _Key, now: float) -> _Backoff:
        state = self._states.get(key)
        if state is None or (state.pending == 0 and now - state.anchor_at > self._forget_after_s):
            state = self._states[key] = _Backoff(now)
        return state

    def _record_failure(self, keys: tuple[_Key, _Key]) -> None:
        now = trio.current_time()
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                state.failures += 1
                state.anchor_at = max(state.anchor_at, now)

    def _record_success(self, user_key: _Key) -> None:
        state = self._states.get(user_key)
        if state is not None:
            state.failures = 0

    def _prune(self, now: float) -> None:
        if len(self._states) < self._max_tracked_keys:
            return
        idle = [(state.anchor_at, key) for key, state in self._states.items() if state.pending == 0]
        for _anchor_at, key in idle:
            if now - self._states[key].anchor_at > self._forget_after_s:
                del self._states[key]
        if len(self._states) >= self._max_tracked_keys:
            # Still full: drop the least recently active idle keys, down to 90 %.
            excess = len(self._states) - math.floor(self._max_tracked_keys * 0.9)
            survivors = [(anchor_at, key) for anchor_at, key in idle if key in self._states]
            for _anchor_at, key in sorted(survivors)[:excess]:
                del self._states[key]
