"""Account lifecycle end to end: a real server on 127.0.0.1:0, the admin REST routes over HTTP,
and the ``coremetry user …`` commands run as separate processes while the server runs.

What a user sees: a session JWT obtained by login is refused (401) on the very next request
after its user is disabled, deleted or has its password changed — whether the change came over
REST or from the CLI in another process; enabling the user makes login work again; every admin
action leaves an audit row without any secret in it.
"""

import subprocess
import sys
from pathlib import Path
from typing import Final

import httpx
import trio
from _wire_support import as_object
from test_auth_e2e import LIMIT_S, PASSWORD, Live, live_server, login

from coremetry.audit import AuditEntry
from coremetry.rest import ADMIN_USERS_PATH, LOGIN_PATH, TOOLS_PATH

NEW_PASSWORD: Final = "a brand new password 77"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def status_with(live: Live, token: str) -> int:
    """The status of ``GET /api/tools`` with ``token``: 200 while the session is valid."""
    async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
        return (await client.get(TOOLS_PATH, headers=bearer(token))).status_code


async def login_status(live: Live, name: str, password: str) -> tuple[int, object]:
    async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
        response = await client.post(LOGIN_PATH, json={"username": name, "password": password})
    return response.status_code, response.json()


async def admin(
    live: Live, method: str, path: str, *, token: str | None = None, json: object = None
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
        return await client.request(
            method,
            ADMIN_USERS_PATH + path,
            headers=bearer(token if token is not None else live.tokens["admin"]),
            json=json,
        )


def cli(data_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``coremetry ARGS`` in a process of its own, without a terminal (as a script runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "coremetry", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "COREMETRY_DATA_DIR": str(data_dir)},
        timeout=LIMIT_S,
        check=False,
        start_new_session=True,
    )


async def run_cli(data_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(lambda: cli(data_dir, *args, stdin=stdin))


def admin_rows(live: Live) -> list[AuditEntry]:
    return [row for row in live.security.audit.tail(1000) if row.call_kind == "admin"]


async def test_admin_rest_ends_sessions_at_once_and_is_audited(tmp_path: Path) -> None:
    async with live_server(tmp_path, users=[("alice", "viewer")]) as live:
        token, _cookie = await login(live.base, "alice", PASSWORD)
        assert await status_with(live, token) == 200

        disabled = await admin(live, "POST", "/alice/disable")
        assert disabled.status_code == 200
        assert as_object(disabled.json())["disabled"] is True
        assert await status_with(live, token) == 401
        refused = await login_status(live, "alice", PASSWORD)
        assert refused == await login_status(live, "alice", "not the password")
        assert refused[0] == 401

        enabled = await admin(live, "POST", "/alice/enable")
        assert enabled.status_code == 200
        assert as_object(enabled.json())["disabled"] is False
        assert await status_with(live, token) == 401  # ended by the disable, for good
        token, _cookie = await login(live.base, "alice", PASSWORD)
        assert await status_with(live, token) == 200

        changed = await admin(live, "POST", "/alice/password", json={"password": NEW_PASSWORD})
        assert changed.status_code == 200
        assert await status_with(live, token) == 401
        assert (await login_status(live, "alice", PASSWORD))[0] == 401
        token, _cookie = await login(live.base, "alice", NEW_PASSWORD)
        assert await status_with(live, token) == 200

        deleted = await admin(live, "DELETE", "/alice")
        assert deleted.status_code == 200
        assert as_object(deleted.json()) == {"name": "alice", "deleted": True}
        assert await status_with(live, token) == 401
        assert (await login_status(live, "alice", NEW_PASSWORD))[0] == 401

        rows = admin_rows(live)
        assert [(row.name, row.outcome, row.transport) for row in reversed(rows)] == [
            ("user disable alice", "ok", "rest"),
            ("user enable alice", "ok", "rest"),
            ("user passwd alice", "ok", "rest"),
            ("user delete alice", "ok", "rest"),
        ]
        assert {row.sub for row in rows} == {"token:e2e-admin"}
        for row in rows:
            assert PASSWORD not in repr(row)
            assert NEW_PASSWORD not in repr(row)


async def test_admin_rest_refusals(tmp_path: Path) -> None:
    async with live_server(tmp_path, users=[("bob", "editor"), ("root", "admin")]) as live:
        bob, _cookie = await login(live.base, "bob", PASSWORD)
        for token in (live.tokens["viewer"], live.tokens["editor"], bob):
            refused = await admin(live, "POST", "/root/disable", token=token)
            assert refused.status_code == 403
            assert as_object(refused.json())["error"] == "forbidden"
        assert await status_with(live, bob) == 200  # nothing changed

        root, _cookie = await login(live.base, "root", PASSWORD)  # an admin user's JWT works
        missing = await admin(live, "POST", "/nobody/disable", token=root)
        assert missing.status_code == 404
        assert "nobody" in str(as_object(missing.json())["detail"])
        assert (await admin(live, "DELETE", "/nobody")).status_code == 404

        for body in ({}, {"password": 12345678}, {"password": "short"}, {"pw": NEW_PASSWORD}):
            bad = await admin(live, "POST", "/bob/password", json=body)
            assert bad.status_code == 400, body
            assert "password" in str(as_object(bad.json())["detail"]), body
        assert await status_with(live, bob) == 200  # the password did not change

        assert (await admin(live, "GET", "/bob/disable")).status_code == 405
        assert (await admin(live, "POST", "/bob/promote")).status_code == 404
        async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
            anonymous = await client.post(ADMIN_USERS_PATH + "/bob/disable")
        assert anonymous.status_code == 401

        outcomes = [(row.sub, row.name, row.outcome) for row in reversed(admin_rows(live))]
        assert outcomes[:3] == [
            ("token:e2e-viewer", "user disable root", "denied"),
            ("token:e2e-editor", "user disable root", "denied"),
            ("bob", "user disable root", "denied"),
        ]
        assert ("root", "user disable nobody", "not_found") in outcomes
        assert ("token:e2e-admin", "user passwd bob", "bad_args") in outcomes


async def test_cli_changes_end_a_running_servers_sessions(tmp_path: Path) -> None:
    async with live_server(tmp_path, users=[("carol", "viewer")]) as live:
        token, _cookie = await login(live.base, "carol", PASSWORD)
        assert await status_with(live, token) == 200

        done = await run_cli(live.data_dir, "user", "disable", "carol")
        assert done.returncode == 0, done.stderr
        assert await status_with(live, token) == 401
        assert (await login_status(live, "carol", PASSWORD))[0] == 401
        listed = await run_cli(live.data_dir, "user", "list")
        assert "carol\tviewer" in listed.stdout
        assert "disabled" in listed.stdout

        done = await run_cli(live.data_dir, "user", "enable", "carol")
        assert done.returncode == 0, done.stderr
        token, _cookie = await login(live.base, "carol", PASSWORD)
        assert await status_with(live, token) == 200

        done = await run_cli(
            live.data_dir, "user", "passwd", "carol", "--password-stdin", stdin=NEW_PASSWORD + "\n"
        )
        assert done.returncode == 0, done.stderr
        assert await status_with(live, token) == 401
        token, _cookie = await login(live.base, "carol", NEW_PASSWORD)
        assert await status_with(live, token) == 200

        done = await run_cli(live.data_dir, "user", "delete", "carol")
        assert done.returncode == 0, done.stderr
        assert await status_with(live, token) == 401

        rows = admin_rows(live)
        assert [(row.name, row.outcome, row.transport, row.kind) for row in reversed(rows)] == [
            ("user disable carol", "ok", "cli", "local"),
            ("user enable carol", "ok", "cli", "local"),
            ("user passwd carol", "ok", "cli", "local"),
            ("user delete carol", "ok", "cli", "local"),
        ]
        tail = await run_cli(live.data_dir, "audit", "tail")
        assert "user passwd carol" in tail.stdout
        assert NEW_PASSWORD not in tail.stdout
