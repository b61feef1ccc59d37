"""Account lifecycle in the identity store and the authenticator: disable, enable, delete,
password change end a user's sessions at once; revoked token names can be reused."""

import sqlite3
from pathlib import Path

import pytest

from coremetry.auth import (
    Authenticator,
    IdentityStore,
    JwtIssuer,
    LoginFailed,
    LoginService,
    RevokedToken,
    UnknownName,
    open_identity_store,
)
from coremetry.auth.identity_store import DB_FILENAME, SCHEMA_VERSION
from coremetry.auth.principal import InvalidToken
from coremetry.http_edge import Headers

from ._support import CHEAP_PARAMS, headers


async def _login(store: IdentityStore, issuer: JwtIssuer, name: str, password: str) -> str:
    token, _claims = await LoginService(store, issuer).login(name, password, client_key="t")
    return token


def _bearer(token: str) -> Headers:
    return headers(("authorization", f"Bearer {token}"))


async def test_disable_ends_sessions_and_login_enable_restores_login(
    store: IdentityStore, issuer: JwtIssuer
) -> None:
    store.add_user("alice", "editor", "alice-password")
    authenticate = Authenticator(store, issuer)
    token = await _login(store, issuer, "alice", "alice-password")
    assert (await authenticate(_bearer(token))).subject == "alice"
    info = store.disable_user("alice")
    assert info.disabled
    assert info.disabled_at is not None
    with pytest.raises(RevokedToken):
        await authenticate(_bearer(token))
    for password in ("alice-password", "wrong-password"):  # the same refusal either way
        with pytest.raises(LoginFailed) as refused:
            await _login(store, issuer, "alice", password)
        assert str(refused.value) == "invalid username or password"
    assert store.enable_user("alice").disabled is False
    with pytest.raises(RevokedToken):  # a session ended by the disable stays ended
        await authenticate(_bearer(token))
    fresh = await _login(store, issuer, "alice", "alice-password")
    assert (await authenticate(_bearer(fresh))).subject == "alice"


async def test_password_change_ends_sessions(store: IdentityStore, issuer: JwtIssuer) -> None:
    store.add_user("bob", "viewer", "old-password")
    authenticate = Authenticator(store, issuer)
    token = await _login(store, issuer, "bob", "old-password")
    await authenticate(_bearer(token))
    store.set_password("bob", "new-password")
    with pytest.raises(RevokedToken):
        await authenticate(_bearer(token))
    fresh = await _login(store, issuer, "bob", "new-password")
    assert (await authenticate(_bearer(fresh))).subject == "bob"


async def test_delete_ends_sessions_and_a_readded_name_does_not_revive_them(
    store: IdentityStore, issuer: JwtIssuer
) -> None:
    store.add_user("carol", "admin", "carol-password")
    authenticate = Authenticator(store, issuer)
    token = await _login(store, issuer, "carol", "carol-password")
    await authenticate(_bearer(token))
    store.delete_user("carol")
    assert [user.name for user in store.list_users()] == []
    with pytest.raises(RevokedToken):
        await authenticate(_bearer(token))
    store.add_user("carol", "admin", "carol-password")
    with pytest.raises(RevokedToken):
        await authenticate(_bearer(token))


def test_unknown_users_are_named(store: IdentityStore) -> None:
    for action in (store.disable_user, store.enable_user, store.delete_user):
        with pytest.raises(UnknownName, match="no user named 'nobody'"):
            action("nobody")
    with pytest.raises(UnknownName, match="no user named 'nobody'"):
        store.set_password("nobody", "long-enough")


def test_a_change_in_another_process_changes_the_stamp(data_dir: Path) -> None:
    with (
        open_identity_store(data_dir, password_params=CHEAP_PARAMS) as server,
        open_identity_store(data_dir, password_params=CHEAP_PARAMS) as cli,
    ):
        cli.add_user("dave", "viewer", "dave-password")
        stamp = server.revocation_stamp()
        cli.disable_user("dave")  # returns once every process re-reads the marker
        assert server.revocation_stamp() != stamp
        assert server.session_generation("dave") is None


def test_revoking_a_token_frees_its_name(store: IdentityStore) -> None:
    old, _ = store.create_token("ci", "viewer", None)
    with pytest.raises(ValueError, match="already exists"):
        store.create_token("ci", "viewer", None)
    store.revoke_token("ci")
    new, info = store.create_token("ci", "editor", None)
    assert info.role == "editor"
    assert not info.revoked
    with pytest.raises(RevokedToken):
        store.verify_token(old)
    assert store.verify_token(new).role == "editor"
    listed = store.list_tokens()
    assert [(t.name, t.revoked) for t in listed] == [("ci", True), ("ci", False)]
    assert store.revoke_token("ci").revoked  # the new one
    with pytest.raises(RevokedToken):
        store.verify_token(new)
    assert store.revoke_token("ci").revoked  # all revoked already: allowed


def test_a_version_1_database_is_migrated(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    with sqlite3.connect(data_dir / DB_FILENAME) as db:
        db.execute(
            "CREATE TABLE auth_users (name TEXT PRIMARY KEY NOT NULL, role TEXT NOT NULL,"
            " password_hash TEXT NOT NULL, created_at INTEGER NOT NULL,"
            " password_changed_at INTEGER NOT NULL)"
        )
        db.execute(
            "CREATE TABLE auth_service_tokens (name TEXT PRIMARY KEY NOT NULL,"
            " role TEXT NOT NULL, token_sha256 BLOB NOT NULL UNIQUE, created_at INTEGER NOT NULL,"
            " expires_at INTEGER, last_used_at INTEGER, revoked_at INTEGER)"
        )
        db.execute(
            "INSERT INTO auth_service_tokens VALUES ('old', 'viewer', ?, 1, NULL, NULL, 5)",
            (bytes(32),),
        )
        db.execute("PRAGMA user_version = 1")
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS) as store:
        assert [(t.name, t.revoked) for t in store.list_tokens()] == [("old", True)]
        token, _ = store.create_token("old", "viewer", None)
        assert store.verify_token(token).token_name == "old"
        with pytest.raises(InvalidToken):
            store.verify_token("cmk_" + "A" * 43)
    with sqlite3.connect(data_dir / DB_FILENAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_create_token_with_replace_rotates(store: IdentityStore) -> None:
    old, _ = store.create_token("deploy", "viewer", None)
    stamp = store.revocation_stamp()
    new, info = store.create_token("deploy", "admin", None, replace=True)
    assert info.role == "admin"
    assert store.revocation_stamp() != stamp  # cached copies of the old token stop hitting
    with pytest.raises(RevokedToken):
        store.verify_token(old)
    assert store.verify_token(new).token_name == "deploy"
    fresh, _ = store.create_token("fresh", "viewer", None, replace=True)  # nothing to replace
    assert store.verify_token(fresh).token_name == "fresh"
