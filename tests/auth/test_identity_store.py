import base64
import hashlib
import re
import sqlite3
import stat
from pathlib import Path

import msgspec
import pytest

from coremetry.auth import (
    SCHEMA_VERSION,
    Claims,
    ExpiredToken,
    IdentityStore,
    IdentityStoreError,
    InvalidToken,
    LoginFailed,
    RevokedToken,
    ScryptParams,
    UnknownName,
    UserInfo,
    open_identity_store,
)
from coremetry.auth.identity_store import DB_FILENAME, FIRST_ADMIN_TOKEN_NAME
from coremetry.auth.passwords import spend_dummy_hash

from ._support import CHEAP_PARAMS, FakeClock

TOKEN_SHAPE = re.compile(r"cmk_[A-Za-z0-9_-]{43,}")


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(row[0]) for row in rows}


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def _db_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob(DB_FILENAME + "*")))


# -- opening and migrations ---------------------------------------------------------------------


def test_fresh_database_is_migrated_with_private_modes(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "data"
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS) as opened:
        assert opened.data_dir == data_dir
        assert opened.list_users() == []
    db = data_dir / DB_FILENAME
    assert _user_version(db) == SCHEMA_VERSION >= 1
    assert {"auth_users", "auth_service_tokens"} <= _tables(db)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopened_database_keeps_its_data(data_dir: Path, clock: FakeClock) -> None:
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as first:
        first.add_user("alice", "editor", "pw-alice")
        token, _ = first.create_token("ci", "viewer", None)
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as second:
        assert [u.name for u in second.list_users()] == ["alice"]
        assert second.check_password("alice", "pw-alice").role == "editor"
        assert second.verify_token(token).token_name == "ci"
    assert _user_version(data_dir / DB_FILENAME) == SCHEMA_VERSION


def test_two_stores_share_one_data_dir(data_dir: Path) -> None:
    with (
        open_identity_store(data_dir, password_params=CHEAP_PARAMS) as server,
        open_identity_store(data_dir, password_params=CHEAP_PARAMS) as cli,
    ):
        token, _ = cli.create_token("from-cli", "admin", None)
        assert server.verify_token(token).role == "admin"


def test_newer_schema_is_refused(data_dir: Path) -> None:
    open_identity_store(data_dir, password_params=CHEAP_PARAMS).close()
    with sqlite3.connect(data_dir / DB_FILENAME) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(IdentityStoreError, match="newer"):
        open_identity_store(data_dir, password_params=CHEAP_PARAMS)


def test_a_file_that_is_not_a_database_is_refused(data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    (data_dir / DB_FILENAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(IdentityStoreError, match="cannot use"):
        open_identity_store(data_dir, password_params=CHEAP_PARAMS)


# -- users --------------------------------------------------------------------------------------


def test_add_and_list_users(store: IdentityStore, clock: FakeClock) -> None:
    created = store.add_user("bob", "viewer", "pw-bob-secret")
    store.add_user("alice@example.com", "admin", "pw-alice")
    users = store.list_users()
    assert [u.name for u in users] == ["alice@example.com", "bob"]
    assert users[1] == created
    assert created.created_at == created.password_changed_at == int(clock.now)


@pytest.mark.parametrize(
    "name", ["", " ", "a b", "x" * 65, "名前", "a/b", "token:x", "a\nb", "quote'"]
)
def test_bad_user_names(store: IdentityStore, name: str) -> None:
    with pytest.raises(ValueError, match="invalid user name"):
        store.add_user(name, "viewer", "pw-long-enough")


@pytest.mark.parametrize("role", ["", "root", "Admin", "viewer ", "superuser"])
def test_bad_roles(store: IdentityStore, role: str) -> None:
    with pytest.raises(ValueError, match="unknown role"):
        store.add_user("carol", role, "pw-long-enough")
    with pytest.raises(ValueError, match="unknown role"):
        store.create_token("carol", role, None)


def test_duplicate_user(store: IdentityStore) -> None:
    store.add_user("dave", "viewer", "pw-long-enough")
    with pytest.raises(ValueError, match="already exists"):
        store.add_user("dave", "admin", "other-password")


@pytest.mark.parametrize("password", ["", "x", "7-chars", "e\u0301" * 7, "x" * 1025])
def test_unacceptable_passwords_store_nothing(store: IdentityStore, password: str) -> None:
    # "e" + combining acute accent 7 times is 14 code points, but 7 characters after NFC.
    with pytest.raises(ValueError, match=r"the password must be at (least 8 characters|most)"):
        store.add_user("erin", "viewer", password)
    assert store.list_users() == []
    store.add_user("erin", "viewer", "erin-password")
    with pytest.raises(ValueError, match="the password must be at least 8 characters"):
        store.set_password("erin", "short")
    assert store.check_password("erin", "erin-password").sub == "erin"  # unchanged


def test_a_short_password_stored_before_the_rule_still_logs_in(
    store: IdentityStore, data_dir: Path
) -> None:
    store.add_user("olga", "viewer", "placeholder-password")
    # A hash of "pw" made as hash_password makes it (scrypt of the NFC UTF-8 bytes): what a
    # store written before the minimum length holds. Verifying applies no length rule.
    salt = bytes(range(16))
    digest = hashlib.scrypt(b"pw", salt=salt, n=16, r=1, p=1, dklen=32)
    legacy = "$".join(
        (
            "scrypt",
            "16",
            "1",
            "1",
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        )
    )
    with sqlite3.connect(data_dir / DB_FILENAME) as db:
        db.execute("UPDATE auth_users SET password_hash = ? WHERE name = 'olga'", (legacy,))
    assert store.check_password("olga", "pw").sub == "olga"
    with pytest.raises(LoginFailed):
        store.check_password("olga", "placeholder-password")


def test_listing_never_shows_hashes(store: IdentityStore) -> None:
    store.add_user("frank", "viewer", "pw-frank")
    listed = msgspec.json.encode(store.list_users())
    assert b"scrypt" not in listed
    assert b"pw-frank" not in listed
    assert "password_hash" not in {f.name for f in msgspec.structs.fields(UserInfo)}


def test_passwords_are_stored_hashed(store: IdentityStore, data_dir: Path) -> None:
    store.add_user("grace", "viewer", "grace-secret-password")
    store.close()
    raw = _db_bytes(data_dir)
    assert b"grace-secret-password" not in raw
    assert b"scrypt$16$1$1$" in raw


def test_check_password(store: IdentityStore, clock: FakeClock) -> None:
    store.add_user("heidi", "editor", "pw-heidi")
    claims = store.check_password("heidi", "pw-heidi")
    assert claims == Claims(
        sub="heidi",
        role="editor",
        kind="jwt",
        issued_at=int(clock.now),
        expires_at=None,
        generation=store.session_generation("heidi") or -1,
    )


def test_unknown_user_and_wrong_password_look_the_same(
    store: IdentityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add_user("ivan", "viewer", "pw-ivan-secret")
    dummy_hashes: list[str] = []

    def recording_dummy(password: str, params: ScryptParams) -> None:
        dummy_hashes.append(password)
        spend_dummy_hash(password, params)

    monkeypatch.setattr("coremetry.auth.identity_store.spend_dummy_hash", recording_dummy)
    with pytest.raises(LoginFailed) as wrong:
        store.check_password("ivan", "nope")
    assert dummy_hashes == []  # a real verification was spent
    with pytest.raises(LoginFailed) as unknown:
        store.check_password("mallory", "nope")
    assert dummy_hashes == ["nope"]  # an unknown user costs one hash too
    with pytest.raises(LoginFailed) as malformed_name:
        store.check_password("not a valid name", "nope")
    assert dummy_hashes == ["nope", "nope"]
    assert type(wrong.value) is type(unknown.value) is type(malformed_name.value) is LoginFailed
    assert str(wrong.value) == str(unknown.value) == "invalid username or password"
    assert wrong.value.reason != unknown.value.reason  # only the server log tells them apart
    assert not wrong.value.token_sent
    assert "nope" not in wrong.value.reason + unknown.value.reason


def test_set_password(store: IdentityStore, clock: FakeClock) -> None:
    store.add_user("judy", "viewer", "old-password")
    clock.advance(10)
    store.set_password("judy", "new-password")
    with pytest.raises(LoginFailed):
        store.check_password("judy", "old-password")
    assert store.check_password("judy", "new-password").sub == "judy"
    assert store.list_users()[0].password_changed_at == int(clock.now)
    with pytest.raises(UnknownName, match="no user named 'nobody'") as missing:
        store.set_password("nobody", "pw-long-enough")
    assert isinstance(missing.value, KeyError)


# -- service tokens -----------------------------------------------------------------------------


def test_token_format_and_claims(store: IdentityStore, clock: FakeClock) -> None:
    token, info = store.create_token("ci", "editor", None)
    assert TOKEN_SHAPE.fullmatch(token)
    assert (info.name, info.role, info.created_at) == ("ci", "editor", int(clock.now))
    assert (info.expires_at, info.last_used_at, info.revoked) == (None, None, False)
    assert store.verify_token(token) == Claims(
        sub="token:ci",
        role="editor",
        token_name="ci",
        issued_at=int(clock.now),
        expires_at=None,
        kind="service_token",
    )
    assert store.verify_token(token).to_caller().kind == "service_token"


def test_tokens_are_unique(store: IdentityStore) -> None:
    tokens = {store.create_token(f"t{i}", "viewer", None)[0] for i in range(20)}
    assert len(tokens) == 20


def test_only_the_token_hash_is_stored(store: IdentityStore, data_dir: Path) -> None:
    token, _ = store.create_token("stored", "viewer", None)
    store.close()
    raw = _db_bytes(data_dir)
    assert token.encode() not in raw
    assert token.removeprefix("cmk_").encode() not in raw
    assert token.removeprefix("cmk_")[:16].encode() not in raw
    assert hashlib.sha256(token.encode()).digest() in raw


def test_listing_tokens_shows_no_secret(store: IdentityStore) -> None:
    token, _ = store.create_token("b-token", "viewer", None)
    store.create_token("a-token", "admin", 3600)
    listed = store.list_tokens()
    assert [t.name for t in listed] == ["a-token", "b-token"]
    encoded = msgspec.json.encode(listed)
    assert token.encode() not in encoded
    assert hashlib.sha256(token.encode()).hexdigest().encode() not in encoded


def test_duplicate_and_bad_token_names(store: IdentityStore) -> None:
    store.create_token("dup", "viewer", None)
    with pytest.raises(ValueError, match="already exists"):
        store.create_token("dup", "viewer", None)
    with pytest.raises(ValueError, match="invalid token name"):
        store.create_token("has space", "viewer", None)


@pytest.mark.parametrize("expires_in_s", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_expiry(store: IdentityStore, expires_in_s: float) -> None:
    with pytest.raises(ValueError, match="expires_in_s"):
        store.create_token("x", "viewer", expires_in_s)


def test_revocation_is_immediate(store: IdentityStore, clock: FakeClock) -> None:
    token, _ = store.create_token("gone", "admin", None)
    store.verify_token(token)
    stamp = store.revocation_stamp()
    clock.advance(5)
    revoked = store.revoke_token("gone")
    assert (revoked.revoked, revoked.revoked_at) == (True, int(clock.now))
    assert store.revocation_stamp() != stamp
    with pytest.raises(RevokedToken) as refused:
        store.verify_token(token)
    assert refused.value.token_sent
    assert token not in refused.value.reason
    clock.advance(5)
    assert store.revoke_token("gone").revoked_at == revoked.revoked_at  # idempotent
    assert store.list_tokens()[0].revoked


def test_revocation_by_another_process_changes_the_stamp(
    store: IdentityStore, data_dir: Path
) -> None:
    token, _ = store.create_token("shared", "viewer", None)
    before = store.revocation_stamp()
    assert store.revocation_stamp() == before  # stable while nothing happens
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS) as cli:
        cli.revoke_token("shared")
        middle = store.revocation_stamp()
        assert middle != before
        cli.create_token("another", "viewer", None)
        cli.revoke_token("another")
        assert store.revocation_stamp() != middle
    with pytest.raises(RevokedToken):
        store.verify_token(token)


def test_revoking_an_unknown_token(store: IdentityStore) -> None:
    stamp = store.revocation_stamp()
    with pytest.raises(UnknownName, match="no token named 'ghost'"):
        store.revoke_token("ghost")
    assert store.revocation_stamp() == stamp


def test_expiry(store: IdentityStore, clock: FakeClock) -> None:
    token, info = store.create_token("short", "viewer", 60)
    assert info.expires_at == int(clock.now) + 60
    clock.advance(59)
    assert store.verify_token(token).expires_at == info.expires_at
    clock.advance(1)
    with pytest.raises(ExpiredToken) as refused:
        store.verify_token(token)
    assert refused.value.token_sent


def test_fractional_expiry_rounds_up(store: IdentityStore, clock: FakeClock) -> None:
    token, info = store.create_token("tiny", "viewer", 0.5)
    assert info.expires_at == int(clock.now) + 1
    store.verify_token(token)


def test_last_used_at_is_written_at_most_once_a_minute(
    store: IdentityStore, clock: FakeClock
) -> None:
    token, _ = store.create_token("busy", "viewer", None)
    assert store.list_tokens()[0].last_used_at is None
    first_use = int(clock.now)
    store.verify_token(token)
    assert store.list_tokens()[0].last_used_at == first_use
    clock.advance(30)
    store.verify_token(token)
    assert store.list_tokens()[0].last_used_at == first_use
    clock.advance(31)
    store.verify_token(token)
    assert store.list_tokens()[0].last_used_at == int(clock.now)


def test_failed_verifications_do_not_touch_last_used_at(
    store: IdentityStore, clock: FakeClock
) -> None:
    token, _ = store.create_token("revoked", "viewer", None)
    store.revoke_token("revoked")
    with pytest.raises(RevokedToken):
        store.verify_token(token)
    assert store.list_tokens()[0].last_used_at is None


@pytest.mark.parametrize(
    "token",
    [
        "",
        "cmk_",
        "cmk_short",
        "cmk_" + "A" * 42,
        "cmk_" + "A" * 42 + "!",
        "CMK_" + "A" * 43,
        "cmk_" + "A" * 43 + " ",
        "cmk_" + "A" * 200,
        "eyJhbGciOiJIUzI1NiJ9.e30.sig",
    ],
)
def test_malformed_tokens(store: IdentityStore, token: str) -> None:
    with pytest.raises(InvalidToken, match="invalid token"):
        store.verify_token(token)


def test_unknown_well_formed_token(store: IdentityStore) -> None:
    store.create_token("real", "viewer", None)
    with pytest.raises(InvalidToken) as refused:
        store.verify_token("cmk_" + "A" * 43)
    assert refused.value.reason == "unknown service token"


def test_first_admin_token(store: IdentityStore) -> None:
    assert not store.has_any_token()
    created = store.create_first_admin_token()
    assert created is not None
    token, info = created
    assert (info.name, info.role, info.expires_at) == (FIRST_ADMIN_TOKEN_NAME, "admin", None)
    assert store.verify_token(token).role == "admin"
    assert store.has_any_token()
    assert store.create_first_admin_token() is None
    store.revoke_token(FIRST_ADMIN_TOKEN_NAME)
    assert store.has_any_token()  # revoking every token never re-arms the first start
    assert store.create_first_admin_token() is None


def test_no_first_admin_token_once_a_user_exists(store: IdentityStore) -> None:
    store.add_user("root", "admin", "pw-long-enough")
    assert not store.has_any_token()
    assert store.create_first_admin_token() is None
    assert store.list_tokens() == []
