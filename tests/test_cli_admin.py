"""The administration commands and the first start, driven as a user would: the CLI."""

import fcntl
import json
import os
import re
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import httpx
import pytest
import trio

from coremetry.auth import LoginFailed, RevokedToken, open_identity_store
from coremetry.cli import main

LIMIT_S = 60


def admin_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = str(data_dir)
    return env


def coremetry(data_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``coremetry ARGS`` as a script would: stdin from ``stdin``, no controlling terminal
    (its own session), whether or not the tests run from one."""
    return subprocess.run(
        [sys.executable, "-m", "coremetry", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=admin_env(data_dir),
        timeout=LIMIT_S,
        check=False,
        start_new_session=True,
    )


def _take_terminal() -> None:
    """In the child, in its new session (``start_new_session``): make stdin, the pty's end,
    its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def on_terminal(data_dir: Path, args: list[str], keys: bytes, after: bytes) -> tuple[int, str]:
    """Run ``coremetry ARGS`` on a pseudo-terminal of its own, as a person at a terminal does:
    wait until it has written ``after``, type ``keys``; return its exit status and everything
    the terminal showed."""
    main_fd, child_fd = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coremetry", *args],
        stdin=child_fd,
        stdout=child_fd,
        stderr=child_fd,
        env=admin_env(data_dir),
        preexec_fn=_take_terminal,  # in the child, after setsid, before exec
        start_new_session=True,
    )
    os.close(child_fd)
    shown = b""
    typed = False
    deadline = time.monotonic() + LIMIT_S
    try:
        while time.monotonic() < deadline:
            if not typed and shown.endswith(after):
                os.write(main_fd, keys)
                typed = True
            ready, _, _ = select.select([main_fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # EIO: the child closed the terminal (it exited)
                break
            if not chunk:
                break
            shown += chunk
        return proc.wait(timeout=LIMIT_S), shown.decode("utf-8", errors="replace")
    finally:
        os.close(main_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tokens_are_created_listed_used_and_revoked(tmp_path: Path) -> None:
    created = coremetry(tmp_path, "token", "create", "--name", "ci", "--role", "editor")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"cmk_[A-Za-z0-9_-]{43,}", token)  # the token alone on stdout
    listed = coremetry(tmp_path, "token", "list")
    assert "ci\teditor\tactive" in listed.stdout
    assert token not in listed.stdout  # shown once, never again
    ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    env_run = subprocess.run(
        [sys.executable, "-m", "coremetry", "stdio"],
        input=ping,
        capture_output=True,
        text=True,
        env={**os.environ, "COREMETRY_DATA_DIR": str(tmp_path), "COREMETRY_TOKEN": token},
        timeout=LIMIT_S,
        check=False,
        start_new_session=True,
    )
    assert env_run.returncode == 0, env_run.stderr
    assert json.loads(env_run.stdout) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    revoked = coremetry(tmp_path, "token", "revoke", "ci")
    assert revoked.returncode == 0
    assert "ci\teditor\trevoked" in coremetry(tmp_path, "token", "list").stdout
    refused = subprocess.run(
        [sys.executable, "-m", "coremetry", "stdio"],
        input=ping,
        capture_output=True,
        text=True,
        env={**os.environ, "COREMETRY_DATA_DIR": str(tmp_path), "COREMETRY_TOKEN": token},
        timeout=LIMIT_S,
        check=False,
        start_new_session=True,
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert token not in refused.stderr


def test_stdio_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    result = coremetry(tmp_path, "stdio", stdin='{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert result.returncode == 2
    assert result.stdout == ""
    assert "COREMETRY_TOKEN" in result.stderr


def test_users_are_added_from_stdin_and_listed_without_passwords(tmp_path: Path) -> None:
    added = coremetry(
        tmp_path,
        "user",
        "add",
        "alice",
        "--role",
        "viewer",
        "--password-stdin",
        stdin="correct horse battery\n",
    )
    assert added.returncode == 0, added.stderr
    listed = coremetry(tmp_path, "user", "list")
    assert listed.stdout.startswith("alice\tviewer\t")
    assert "correct horse" not in listed.stdout
    again = coremetry(
        tmp_path, "user", "add", "alice", "--role", "viewer", "--password-stdin", stdin="x" * 12
    )
    assert again.returncode == 2
    bad = coremetry(
        tmp_path, "token", "create", "--name", "t", "--role", "viewer", "--expires-in", "soon"
    )
    assert bad.returncode == 2
    assert "invalid duration" in bad.stderr


async def test_first_start_prints_an_admin_token_that_unlocks_the_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env["COREMETRY_DATA_DIR"] = str(tmp_path)
    # A setting the stdio server must share: it runs retention on the same data dir.
    env["COREMETRY_STORE_RETENTION_DAYS"] = "0"
    env["COREMETRY_CLICKHOUSE_PASSWORD"] = "s3cret-never-printed"  # a secret: named, not shown
    with trio.fail_after(LIMIT_S):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "coremetry", "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            err = bytearray()
            while (announced := re.search(rb"listening on (http://\S+)\n", err)) is None:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, bytes(err)
                err.extend(chunk)
            url = announced.group(1).decode()
            out = bytearray()
            while b"Claude Desktop" not in out or not out.endswith(b"\n\n"):  # all of it
                chunk = await process.stdout.receive_some(4096)
                assert chunk, bytes(out)
                out.extend(chunk)
            token_match = re.search(r"cmk_[A-Za-z0-9_-]+", out.decode())
            assert token_match is not None
            token = token_match.group(0)
            assert f"claude mcp add --transport http coremetry {url}/api/mcp" in out.decode()
            body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            async with httpx.AsyncClient(timeout=LIMIT_S) as client:
                anonymous = await client.post(f"{url}/api/mcp", json=body)
                forged = await client.post(
                    f"{url}/api/mcp", json=body, headers={"authorization": "Bearer cmk_nope"}
                )
                admin = await client.post(
                    f"{url}/api/mcp", json=body, headers={"authorization": f"Bearer {token}"}
                )
            assert anonymous.status_code == 401
            assert anonymous.headers["www-authenticate"] == (
                'Bearer realm="coremetry", resource_metadata="'
                f'{url}/.well-known/oauth-protected-resource/api/mcp"'
            )
            assert forged.status_code == 401
            assert 'error="invalid_token"' in forged.headers["www-authenticate"]
            assert admin.status_code == 200
            assert admin.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        finally:
            process.terminate()
            await process.wait()
    assert process.returncode == 0
    # The Claude Desktop entry, run as Claude Desktop runs it: its command, args and env
    # only (no COREMETRY_* of ours, another working directory), answers on the same data dir.
    desktop_line = out.decode().split("Claude Desktop (claude_desktop_config.json)")[1]
    entry = json.loads(desktop_line.split("\n")[1])["mcpServers"]["coremetry"]
    assert Path(entry["command"]).is_absolute()
    assert entry["env"]["COREMETRY_STORE_RETENTION_DAYS"] == "0"  # the server's configuration
    assert "s3cret-never-printed" not in out.decode()
    assert "left out of its env, secrets: COREMETRY_CLICKHOUSE_PASSWORD" in out.decode()
    with trio.fail_after(LIMIT_S):
        launched = await trio.run_process(
            [entry["command"], *entry["args"]],
            stdin=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
            capture_stdout=True,
            capture_stderr=True,
            env={
                **{k: v for k, v in env.items() if not k.startswith("COREMETRY_")},
                **entry["env"],
            },
            cwd="/",
            check=False,
            start_new_session=True,
        )
    assert launched.returncode == 0, launched.stderr
    assert json.loads(launched.stdout) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    audit = coremetry(tmp_path, "audit", "tail")
    assert audit.returncode == 0
    assert token not in audit.stdout


def test_revoking_the_token_ends_a_running_stdio_session(tmp_path: Path) -> None:
    created = coremetry(tmp_path, "token", "create", "--name", "desk", "--role", "viewer")
    token = created.stdout.strip()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coremetry", "stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COREMETRY_DATA_DIR": str(tmp_path), "COREMETRY_TOKEN": token},
        start_new_session=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1  # served while the token is valid
    assert coremetry(tmp_path, "token", "revoke", "desk").returncode == 0
    proc.stdin.write('{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    proc.stdin.flush()
    out, err = proc.communicate(timeout=LIMIT_S)  # the session ends by itself
    assert out == ""  # nothing answered after the revocation
    assert "no longer valid" in err
    assert proc.returncode == 2  # as when it refuses to start: the client can tell why
    assert token not in err


def test_admin_commands_fail_cleanly(tmp_path: Path) -> None:
    huge = coremetry(
        tmp_path, "token", "create", "--name", "w", "--role", "viewer", "--expires-in", "99999999d"
    )
    assert huge.returncode == 2
    assert "at most 100 years" in huge.stderr
    no_tty = coremetry(tmp_path, "user", "add", "carol", "--role", "viewer")
    assert no_tty.returncode == 2  # at once: no prompt without a terminal, even on /dev/tty
    (line,) = no_tty.stderr.splitlines()
    assert line.startswith("coremetry: no terminal to ask for the password on")
    assert "--password-stdin" in line
    assert "carol" not in coremetry(tmp_path, "user", "list").stdout
    unknown = coremetry(tmp_path, "token", "revoke", "nope")
    assert unknown.returncode == 1
    assert "Traceback" not in unknown.stderr
    short = coremetry(
        tmp_path, "token", "create", "--name", "s", "--role", "viewer", "--expires-in", "1s"
    )
    assert short.returncode == 0
    time.sleep(1.5)  # noqa: TID251 - a plain sync test; the token must outlive its expiry
    assert "s\tviewer\texpired" in coremetry(tmp_path, "token", "list").stdout


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--expires-in", "-5m"], id="separate"),
        pytest.param(["--expires-in=-5m"], id="joined"),
        pytest.param(["--exp", "-5m"], id="abbreviated"),
        pytest.param(["--expires-in", "-.5h"], id="fraction"),
        pytest.param(["--expires-in", "-5"], id="no-unit"),
        pytest.param(["--expires-in", "0m"], id="zero"),
        pytest.param(["--expires-in", "0.0s"], id="zero-fraction"),
    ],
)
def test_token_lifetime_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    base = ["token", "create", "--data-dir", str(tmp_path), "--name", "t", "--role", "viewer"]
    with pytest.raises(SystemExit) as exited:
        main([*base, *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --expires-in: invalid duration" in err
    assert "must be a positive duration like 30d, 12h, 90m or 3600s" in err
    assert "expected one argument" not in err
    assert main(["token", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""  # nothing was created


def test_negative_token_lifetime_is_refused_by_the_command(tmp_path: Path) -> None:
    refused = coremetry(
        tmp_path, "token", "create", "--name", "n", "--role", "viewer", "--expires-in", "-5m"
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "--expires-in: invalid duration '-5m': must be a positive duration" in refused.stderr
    created = coremetry(
        tmp_path, "token", "create", "--name", "p", "--role", "viewer", "--expires-in", "90m"
    )
    assert created.returncode == 0, created.stderr
    assert coremetry(tmp_path, "token", "list").stdout.startswith("p\tviewer\tactive\t")


@pytest.mark.parametrize("password", ["x", "7-chars"])
def test_user_add_refuses_a_short_password_and_stores_nothing(
    tmp_path: Path, password: str
) -> None:
    refused = coremetry(
        tmp_path, "user", "add", "bob", "--role", "viewer", "--password-stdin", stdin=password
    )
    assert refused.returncode == 2
    assert "coremetry: the password must be at least 8 characters long" in refused.stderr
    assert password not in refused.stderr
    assert coremetry(tmp_path, "user", "list").stdout == ""
    added = coremetry(
        tmp_path, "user", "add", "bob", "--role", "viewer", "--password-stdin", stdin="8-chars!"
    )
    assert added.returncode == 0, added.stderr
    assert coremetry(tmp_path, "user", "list").stdout.startswith("bob\tviewer\t")


def test_the_password_prompt_on_a_terminal(tmp_path: Path) -> None:
    status, shown = on_terminal(
        tmp_path,
        ["user", "add", "dave", "--role", "editor"],
        b"correct horse battery\r",
        after=b"password for dave: ",
    )
    assert status == 0, shown
    assert "correct horse" not in shown  # not echoed
    assert "added user dave (editor)" in shown
    assert coremetry(tmp_path, "user", "list").stdout.startswith("dave\teditor\t")


def test_ctrl_c_at_the_password_prompt_exits_130_with_one_line(tmp_path: Path) -> None:
    status, shown = on_terminal(
        tmp_path, ["user", "add", "erin", "--role", "viewer"], b"\x03", after=b"password for erin: "
    )
    assert status == 130
    lines = [line for line in shown.replace("\r", "").split("\n") if line]
    assert lines == ["password for erin: ", "coremetry: interrupted"]
    assert "erin" not in coremetry(tmp_path, "user", "list").stdout


# ---- account lifecycle -------------------------------------------------------------------------


def _audit_rows(data_dir: Path) -> list[dict[str, object]]:
    tail = coremetry(data_dir, "audit", "tail", "-n", "100")
    assert tail.returncode == 0, tail.stderr
    return [json.loads(line) for line in tail.stdout.splitlines()]


def test_user_lifecycle_commands_change_the_account_and_are_audited(tmp_path: Path) -> None:
    old, new = "the first password", "the second password"
    added = coremetry(
        tmp_path, "user", "add", "frank", "--role", "editor", "--password-stdin", stdin=old + "\n"
    )
    assert added.returncode == 0, added.stderr
    disabled = coremetry(tmp_path, "user", "disable", "frank")
    assert disabled.returncode == 0, disabled.stderr
    assert "frank\teditor\t" in coremetry(tmp_path, "user", "list").stdout
    assert coremetry(tmp_path, "user", "list").stdout.rstrip("\n").endswith("\tdisabled")
    with open_identity_store(tmp_path) as store, pytest.raises(LoginFailed):
        store.check_password("frank", old)
    assert coremetry(tmp_path, "user", "enable", "frank").returncode == 0
    assert "disabled" not in coremetry(tmp_path, "user", "list").stdout
    changed = coremetry(tmp_path, "user", "passwd", "frank", "--password-stdin", stdin=new + "\n")
    assert changed.returncode == 0, changed.stderr
    with open_identity_store(tmp_path) as store:
        with pytest.raises(LoginFailed):
            store.check_password("frank", old)
        assert store.check_password("frank", new).sub == "frank"
    assert coremetry(tmp_path, "user", "delete", "frank").returncode == 0
    assert coremetry(tmp_path, "user", "list").stdout == ""
    rows = _audit_rows(tmp_path)
    assert [(row["name"], row["outcome"], row["call_kind"]) for row in rows] == [
        ("user add frank", "ok", "admin"),
        ("user disable frank", "ok", "admin"),
        ("user enable frank", "ok", "admin"),
        ("user passwd frank", "ok", "admin"),
        ("user delete frank", "ok", "admin"),
    ]
    assert all(str(row["sub"]).startswith("local:") for row in rows)
    everything = json.dumps(rows)
    assert old not in everything
    assert new not in everything


def test_user_lifecycle_commands_refuse_cleanly(tmp_path: Path) -> None:
    for action in ("disable", "enable", "delete"):
        missing = coremetry(tmp_path, "user", action, "nobody")
        assert missing.returncode == 1
        assert missing.stderr == "coremetry: no user named 'nobody'\n"
    coremetry(
        tmp_path, "user", "add", "gina", "--role", "viewer", "--password-stdin", stdin="p" * 9
    )
    no_tty = coremetry(tmp_path, "user", "passwd", "gina")
    assert no_tty.returncode == 2  # at once: no prompt without a terminal
    (line,) = no_tty.stderr.splitlines()
    assert line.startswith("coremetry: no terminal to ask for the password on")
    assert "--password-stdin" in line
    short = coremetry(tmp_path, "user", "passwd", "gina", "--password-stdin", stdin="short\n")
    assert short.returncode == 2
    assert "at least 8 characters" in short.stderr
    with open_identity_store(tmp_path) as store:
        assert store.check_password("gina", "p" * 9).sub == "gina"  # unchanged
    outcomes = [(row["name"], row["outcome"]) for row in _audit_rows(tmp_path)]
    assert ("user disable nobody", "not_found") in outcomes
    assert ("user passwd gina", "bad_args") in outcomes
    assert ("user passwd gina", "ok") not in outcomes


def test_the_passwd_prompt_on_a_terminal(tmp_path: Path) -> None:
    coremetry(
        tmp_path, "user", "add", "hank", "--role", "viewer", "--password-stdin", stdin="p" * 9
    )
    status, shown = on_terminal(
        tmp_path, ["user", "passwd", "hank"], b"typed at the prompt\r", after=b"password for hank: "
    )
    assert status == 0, shown
    assert "typed at the prompt" not in shown  # not echoed
    with open_identity_store(tmp_path) as store:
        assert store.check_password("hank", "typed at the prompt").sub == "hank"


def test_a_revoked_tokens_name_can_be_reused(tmp_path: Path) -> None:
    first = coremetry(tmp_path, "token", "create", "--name", "ci", "--role", "viewer")
    assert first.returncode == 0, first.stderr
    taken = coremetry(tmp_path, "token", "create", "--name", "ci", "--role", "viewer")
    assert taken.returncode == 2
    assert "revoke it first" in taken.stderr
    assert coremetry(tmp_path, "token", "revoke", "ci").returncode == 0
    second = coremetry(tmp_path, "token", "create", "--name", "ci", "--role", "editor")
    assert second.returncode == 0, second.stderr
    listed = coremetry(tmp_path, "token", "list").stdout.splitlines()
    assert [line.split("\t")[:3] for line in listed] == [
        ["ci", "viewer", "revoked"],
        ["ci", "editor", "active"],
    ]
    with open_identity_store(tmp_path) as store:
        with pytest.raises(RevokedToken):
            store.verify_token(first.stdout.strip())
        assert store.verify_token(second.stdout.strip()).role == "editor"
    rows = _audit_rows(tmp_path)
    assert [(row["name"], row["outcome"]) for row in rows] == [
        ("token create ci", "ok"),
        ("token create ci", "bad_args"),
        ("token revoke ci", "ok"),
        ("token create ci", "ok"),
    ]
    everything = json.dumps(rows)
    assert first.stdout.strip() not in everything
    assert second.stdout.strip() not in everything


def test_token_create_replace_rotates_the_token(tmp_path: Path) -> None:
    first = coremetry(tmp_path, "token", "create", "--name", "bot", "--role", "viewer")
    assert first.returncode == 0, first.stderr
    second = coremetry(
        tmp_path, "token", "create", "--name", "bot", "--role", "viewer", "--replace"
    )
    assert second.returncode == 0, second.stderr
    assert re.fullmatch(r"cmk_[A-Za-z0-9_-]{43,}", second.stdout.strip())
    states = [
        line.split("\t")[2] for line in coremetry(tmp_path, "token", "list").stdout.splitlines()
    ]
    assert states == ["revoked", "active"]
    with open_identity_store(tmp_path) as store:
        with pytest.raises(RevokedToken):
            store.verify_token(first.stdout.strip())
        assert store.verify_token(second.stdout.strip()).token_name == "bot"
    names = [(row["name"], row["outcome"]) for row in _audit_rows(tmp_path)]
    assert names == [("token create bot", "ok"), ("token replace bot", "ok")]
