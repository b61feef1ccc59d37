"""Revocation beats the service-token cache at once, across processes, and fails safe.

A cache hit trusts the data dir's revocation marker as read at most 5 ms earlier, and a
revocation returns only after twice that, so these tests revoke from *other processes* — the
real ``coremetry token revoke`` CLI, and a separately opened store in a subprocess — and expect
the very next request to be refused, with no sleep in between. They also break the marker (a
directory in its place, an older Coremetry's marker, a marker deleted, truncated or replaced
while a server runs) and expect the cache to stop hitting or to see the change, never to serve
a revoked token, and never to crash.
"""

import contextlib
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from coremetry.auth import (
    Authenticator,
    Claims,
    IdentityStore,
    JwtIssuer,
    RevokedToken,
)
from coremetry.auth import open_identity_store as open_store
from coremetry.auth.identity_store import (
    REVOCATION_CHECK_INTERVAL_S,
    REVOCATION_MARKER_SIZE,
    REVOCATION_SETTLE_S,
    REVOCATIONS_FILENAME,
)

from ._support import CHEAP_PARAMS, FakeClock, headers

LIMIT_S = 60


async def _run(*command: str, data_dir: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = str(data_dir)
    with trio.fail_after(LIMIT_S):
        return await trio.run_process(
            [sys.executable, *command],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
            start_new_session=True,
        )


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


class CountingStore:
    """Counts the database reads an :class:`Authenticator` makes (its cache misses)."""

    def __init__(self, store: IdentityStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real_verify = store.verify_token

        def counting_verify(token: str) -> Claims:
            self.reads += 1
            return real_verify(token)

        monkeypatch.setattr(store, "verify_token", counting_verify)


@pytest.fixture
def reads(store: IdentityStore, monkeypatch: pytest.MonkeyPatch) -> CountingStore:
    return CountingStore(store, monkeypatch)


def _marker(data_dir: Path) -> Path:
    return data_dir / REVOCATIONS_FILENAME


def _directory_as_marker(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    _marker(data_dir).mkdir()  # nothing can map or replace this


# -- another process revokes: the very next request is refused ---------------------------------


async def test_cli_revocation_in_another_process_is_refused_on_the_next_request(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path, reads: CountingStore
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    other, _ = store.create_token("other", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    request = headers(*_bearer(token))
    for _ in range(3):
        assert (await authenticate(request)).token_name == "ci"
    await authenticate(headers(*_bearer(other)))
    assert reads.reads == 2, "the cache served the repeats"

    revoked = await _run("-m", "coremetry", "token", "revoke", "ci", data_dir=data_dir)
    assert revoked.returncode == 0, revoked.stderr

    with pytest.raises(RevokedToken):
        await authenticate(request)
    # The other token is still valid: read again once (the revocation emptied every hit), then
    # served from the cache again.
    for _ in range(2):
        assert (await authenticate(headers(*_bearer(other)))).token_name == "other"
    assert reads.reads == 4


async def test_store_opened_in_a_subprocess_revokes_at_once(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    request = headers(*_bearer(token))
    await authenticate(request)
    script = (
        "import sys\n"
        "from coremetry.auth import open_identity_store\n"
        "with open_identity_store(sys.argv[1]) as store:\n"
        "    store.revoke_token('ci')\n"
    )
    done = await _run("-c", script, str(data_dir), data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    with pytest.raises(RevokedToken):
        await authenticate(request)


async def test_every_spelling_of_a_cached_header_is_refused_after_revocation(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    spellings = [f"Bearer {token}", f"bearer   {token}", f"  BEARER\t{token} "]
    for value in spellings:
        await authenticate(headers(("authorization", value)))
    with open_store(data_dir, password_params=CHEAP_PARAMS) as cli:
        cli.revoke_token("ci")
    for value in spellings:
        with pytest.raises(RevokedToken):
            await authenticate(headers(("authorization", value)))


# -- the marker itself ----------------------------------------------------------------------------


def test_marker_is_private_and_changes_on_every_revocation(
    store: IdentityStore, data_dir: Path
) -> None:
    store.create_token("ci", "viewer", None)
    store.revoke_token("ci")
    info = _marker(data_dir).stat()
    assert info.st_size == REVOCATION_MARKER_SIZE
    assert stat.S_IMODE(info.st_mode) == 0o600
    first = _marker(data_dir).read_bytes()
    store.revoke_token("ci")  # again: allowed, and signalled again
    assert _marker(data_dir).read_bytes() != first
    leftovers = [p.name for p in data_dir.iterdir() if p.name.startswith(".token-revocations")]
    assert leftovers == [], "no temporary file is left behind"


def test_revoke_returns_only_once_every_process_has_reread_the_marker(
    store: IdentityStore,
) -> None:
    store.create_token("ci", "viewer", None)
    begin = time.monotonic()
    store.revoke_token("ci")
    # A lower bound (never flaky): every other process re-reads the marker at least once per
    # REVOCATION_CHECK_INTERVAL_S, so this wait is what makes "the next request" safe.
    assert time.monotonic() - begin >= REVOCATION_SETTLE_S >= 2 * REVOCATION_CHECK_INTERVAL_S


def test_stamp_is_reread_at_most_once_per_interval(
    store: IdentityStore, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    # The module's clock (time.monotonic, read through its `time` import); a sync test, so no
    # trio clock is affected.
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    before = store.revocation_stamp()
    _marker(data_dir).write_bytes(b"written by another process")
    now[0] += REVOCATION_CHECK_INTERVAL_S / 2
    assert store.revocation_stamp() == before, "within the interval the last read stands"
    now[0] += REVOCATION_CHECK_INTERVAL_S
    assert store.revocation_stamp() != before, "after it the marker is read again"


@pytest.mark.parametrize("old_content", [b"", b"1764480000\n"], ids=["empty", "timestamp"])
async def test_an_older_marker_is_just_content(
    data_dir: Path,
    clock: FakeClock,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    old_content: bytes,
) -> None:
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as first:
        token, _ = first.create_token("ci", "viewer", None)
    _marker(data_dir).write_bytes(old_content)  # as an older Coremetry left it
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as server:
        counted = CountingStore(server, monkeypatch)
        authenticate = Authenticator(server, issuer, cache_ttl_s=3600)
        request = headers(*_bearer(token))
        await authenticate(request)
        await authenticate(request)
        assert counted.reads == 1, "the cache hits with an older marker"
        with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as cli:
            cli.revoke_token("ci")
        assert _marker(data_dir).stat().st_size == REVOCATION_MARKER_SIZE
        with pytest.raises(RevokedToken):
            await authenticate(request)


async def test_an_unreadable_marker_fails_safe(
    data_dir: Path,
    clock: FakeClock,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _directory_as_marker(data_dir)
    caplog.set_level(logging.DEBUG, logger="coremetry.auth")
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as server:
        assert server.revocation_stamp() != server.revocation_stamp()
        token, _ = server.create_token("ci", "viewer", None)
        other, _ = server.create_token("other", "viewer", None)
        counted = CountingStore(server, monkeypatch)
        authenticate = Authenticator(server, issuer, cache_ttl_s=3600)
        request = headers(*_bearer(token))
        for _ in range(5):
            assert (await authenticate(request)).token_name == "ci"
        assert counted.reads == 5, "no cache hit without a readable marker"
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, "warned once, not on every request"
        assert "unreadable" in warnings[0].getMessage()
        with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as cli:
            cli.revoke_token("ci")  # cannot write the marker either: the database decides
        with pytest.raises(RevokedToken):
            await authenticate(request)
        # Once the path is fixed, the cache hits again.
        _marker(data_dir).rmdir()
        for _ in range(3):
            assert (await authenticate(headers(*_bearer(other)))).token_name == "other"
        assert counted.reads == 6 + 1, "one read, then cache hits"


@pytest.mark.parametrize("damage", ["delete", "truncate", "replace"])
async def test_a_marker_damaged_while_serving_never_serves_a_revoked_token(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path, damage: str
) -> None:
    first, _ = store.create_token("first", "viewer", None)
    store.create_token("second", "viewer", None)
    store.revoke_token("second")  # the marker exists
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    request = headers(*_bearer(first))
    await authenticate(request)
    marker = _marker(data_dir)
    if damage == "delete":
        marker.unlink()
    elif damage == "truncate":
        with marker.open("r+b") as handle:
            handle.truncate(0)
    else:
        replacement = data_dir / "replacement"
        replacement.write_bytes(b"x" * REVOCATION_MARKER_SIZE)
        os.replace(replacement, marker)
    assert (await authenticate(request)).token_name == "first"  # still valid, no crash
    with open_store(data_dir, password_params=CHEAP_PARAMS) as cli:
        cli.revoke_token("first")
    with pytest.raises(RevokedToken):
        await authenticate(request)


@pytest.mark.parametrize("restore", ["delete", "old-content"])
async def test_a_marker_returning_to_an_earlier_state_does_not_revive_a_revoked_token(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path, restore: str
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    marker = _marker(data_dir)
    old = marker.read_bytes() if marker.exists() else None
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    # Cached under the marker as it is now (absent in a fresh data dir), by a spelling that
    # will not be used again before the end, so no miss in between drops the entry.
    cached = headers(("authorization", f"bearer  {token}"))
    await authenticate(cached)
    with open_store(data_dir, password_params=CHEAP_PARAMS) as cli:
        cli.revoke_token("ci")
    with pytest.raises(RevokedToken):
        await authenticate(headers(*_bearer(token)))
    if restore == "delete" or old is None:
        marker.unlink()  # back to "no marker", the state the entry was cached in
    else:
        marker.write_bytes(old)
    await trio.sleep(2 * REVOCATION_CHECK_INTERVAL_S)  # the server re-reads the marker
    with pytest.raises(RevokedToken):
        await authenticate(cached)


async def test_own_revocation_after_the_marker_was_deleted_is_refused_at_once(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    request = headers(*_bearer(token))
    await authenticate(request)
    with contextlib.suppress(FileNotFoundError):
        _marker(data_dir).unlink()
    store.revoke_token("ci")  # writes a new marker; this store's stamp changes at once
    assert _marker(data_dir).stat().st_size == REVOCATION_MARKER_SIZE
    with pytest.raises(RevokedToken):
        await authenticate(request)


def test_stamp_after_close_never_repeats(data_dir: Path) -> None:
    store = open_store(data_dir, password_params=CHEAP_PARAMS)
    open_stamp = store.revocation_stamp()
    assert store.revocation_stamp() == open_stamp
    store.close()
    assert store.revocation_stamp() != store.revocation_stamp()
    assert open_stamp not in {store.revocation_stamp() for _ in range(3)}
