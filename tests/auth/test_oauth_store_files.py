"""The OAuth store's files are private from the first start (grants name users and clients)."""

from pathlib import Path

from coremetry.auth.oauth_store import DB_FILENAME, OAuthStore


def test_a_new_oauth_store_and_its_wal_files_are_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # does not exist yet
    store = OAuthStore(data_dir)
    try:
        modes = {p.name: p.stat().st_mode & 0o777 for p in data_dir.iterdir()}
    finally:
        store.close()
    assert data_dir.stat().st_mode & 0o777 == 0o700
    assert modes[DB_FILENAME] == 0o600
    assert modes[DB_FILENAME + "-wal"] == 0o600  # WAL mode: present while it is open
    assert set(modes.values()) == {0o600}
