"""Revocation beats the service-token cache at once, across processes, and fails safe.

The cache hit reads the data dir's revocation marker through a shared mapping (no system call),
so these tests revoke from *other processes* — the real ``coremetry token revoke`` CLI, and a
separately opened store in a subprocess — and expect the very next request to be refused, with
no sleep in between. They also break the marker (a directory in its place, an older
Coremetry's marker, a marker deleted while a server runs) and expect the cache to stop hitting
or to heal, never to serve a revoked token.
"""

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from coremetry.auth import Authenticator, Claims, IdentityStore, JwtIssuer, RevokedToken
from coremetry.auth import open_identity_store as open_store
from coremetry.auth.identity_store import REVOCATION_MARKER_SIZE, REVOCATIONS_FILENAME

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


def test_marker_is_private_and_fixed_size(store: IdentityStore, data_dir: Path) -> None:
    info = _marker(data_dir).stat()
    assert info.st_size == REVOCATION_MARKER_SIZE
    assert stat.S_IMODE(info.st_mode) == 0o600
    before = _marker(data_dir).read_bytes()
    inode = info.st_ino
    store.create_token("ci", "viewer", None)
    store.revoke_token("ci")
    after = _marker(data_dir)
    assert after.stat().st_ino == inode, "overwritten in place, never replaced"
    assert after.stat().st_size == REVOCATION_MARKER_SIZE
    assert after.read_bytes() != before


@pytest.mark.parametrize("old_content", [b"", b"1764480000\n"], ids=["empty", "timestamp"])
async def test_an_older_marker_is_migrated_at_open(
    data_dir: Path,
    clock: FakeClock,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    old_content: bytes,
) -> None:
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as first:
        token, _ = first.create_token("ci", "viewer", None)
    marker = _marker(data_dir)
    marker.unlink()
    marker.write_bytes(old_content)  # as an older Coremetry left it
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as server:
        assert marker.stat().st_size == REVOCATION_MARKER_SIZE
        assert stat.S_IMODE(marker.stat().st_mode) == 0o600
        counted = CountingStore(server, monkeypatch)
        authenticate = Authenticator(server, issuer, cache_ttl_s=3600)
        request = headers(*_bearer(token))
        await authenticate(request)
        await authenticate(request)
        assert counted.reads == 1, "the migrated marker lets the cache hit"
        with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as cli:
            assert marker.stat().st_size == REVOCATION_MARKER_SIZE
            cli.revoke_token("ci")
        with pytest.raises(RevokedToken):
            await authenticate(request)


async def test_an_unusable_marker_fails_safe(
    data_dir: Path,
    clock: FakeClock,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _directory_as_marker(data_dir)
    caplog.set_level(logging.DEBUG, logger="coremetry.auth")
    with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as server:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1
        assert "token revocation marker" in warnings[0].getMessage()
        assert "unusable" in warnings[0].getMessage()
        assert server.revocation_stamp() != server.revocation_stamp()
        token, _ = server.create_token("ci", "viewer", None)
        other, _ = server.create_token("other", "viewer", None)
        counted = CountingStore(server, monkeypatch)
        authenticate = Authenticator(server, issuer, cache_ttl_s=3600)
        request = headers(*_bearer(token))
        for _ in range(5):
            assert (await authenticate(request)).token_name == "ci"
        assert counted.reads == 5, "no cache hit without a usable marker"
        attempts = [r for r in caplog.records if "unusable" in r.getMessage()]
        assert len(attempts) <= 2, "an unchanged unusable marker is not retried every request"
        with open_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as cli:
            cli.revoke_token("ci")
        with pytest.raises(RevokedToken):
            await authenticate(request)
        # Once the path is fixed, the next miss maps a marker and the cache hits again.
        _marker(data_dir).rmdir()
        for _ in range(3):
            assert (await authenticate(headers(*_bearer(other)))).token_name == "other"
        assert counted.reads == 6 + 2, "one miss maps the new marker, the next read caches"


async def test_a_marker_deleted_while_serving_heals_on_the_next_miss(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    first, _ = store.create_token("first", "viewer", None)
    second, _ = store.create_token("second", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    await authenticate(headers(*_bearer(first)))
    _marker(data_dir).unlink()  # the server still maps the deleted file
    with open_store(data_dir, password_params=CHEAP_PARAMS) as cli:  # makes a new marker
        assert _marker(data_dir).stat().st_size == REVOCATION_MARKER_SIZE
        await authenticate(headers(*_bearer(second)))  # a miss: the server maps the new file
        cli.revoke_token("first")
    with pytest.raises(RevokedToken):
        await authenticate(headers(*_bearer(first)))


async def test_own_revocation_after_the_marker_was_deleted_is_refused_at_once(
    store: IdentityStore, issuer: JwtIssuer, data_dir: Path
) -> None:
    token, _ = store.create_token("ci", "viewer", None)
    authenticate = Authenticator(store, issuer, cache_ttl_s=3600)
    request = headers(*_bearer(token))
    await authenticate(request)
    _marker(data_dir).unlink()
    store.revoke_token("ci")  # recreates the marker, and this store maps the new one
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
