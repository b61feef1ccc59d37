import logging

import pytest
import trio
import trio.testing

from coremetry.auth import (
    Claims,
    IdentityStore,
    JwtIssuer,
    LoginFailed,
    LoginService,
    LoginThrottled,
)
from coremetry.auth.login import BASE_DELAY_S, CLIENT_FREE_FAILURES, FREE_FAILURES, MAX_DELAY_S


@pytest.fixture
def service(store: IdentityStore, issuer: JwtIssuer) -> LoginService:
    store.add_user("alice", "editor", "alice-password")
    store.add_user("bob", "viewer", "bob-password")
    return LoginService(store, issuer)


async def _fail(service: LoginService, username: str, client_key: str) -> float:
    """One failed attempt; returns how long it took on the trio clock."""
    started = trio.current_time()
    with pytest.raises(LoginFailed) as refused:
        await service.login(username, "wrong", client_key=client_key)
    assert type(refused.value) is LoginFailed
    return trio.current_time() - started


async def test_login_issues_a_session(service: LoginService, issuer: JwtIssuer) -> None:
    token, claims = await service.login("alice", "alice-password", client_key="10.0.0.1")
    assert (claims.sub, claims.role, claims.kind, claims.token_name) == (
        "alice",
        "editor",
        "jwt",
        "",
    )
    assert claims.expires_at == claims.issued_at + 3600
    assert issuer.verify(token) == claims


async def test_unknown_user_and_wrong_password_look_the_same(service: LoginService) -> None:
    with pytest.raises(LoginFailed) as wrong:
        await service.login("alice", "nope", client_key="c1")
    with pytest.raises(LoginFailed) as unknown:
        await service.login("mallory", "nope", client_key="c2")
    assert type(wrong.value) is type(unknown.value) is LoginFailed
    assert str(wrong.value) == str(unknown.value)
    assert wrong.value.token_sent is unknown.value.token_sent is False


def test_delay_schedule(service: LoginService) -> None:
    assert [service.delay_s(n) for n in range(FREE_FAILURES)] == [0.0] * FREE_FAILURES
    assert [service.delay_s(FREE_FAILURES + k) for k in range(6)] == [1, 2, 4, 8, 16, 30]
    assert service.delay_s(10_000) == MAX_DELAY_S
    assert BASE_DELAY_S == 1.0


async def test_failures_for_one_user_slow_down_the_next_attempts(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    # Different clients each time, so only the user name's counter grows.
    for i in range(FREE_FAILURES):
        assert await _fail(service, "alice", f"client-{i}") == 0
    assert await _fail(service, "alice", "client-a") >= 1.0
    assert await _fail(service, "alice", "client-b") >= 2.0
    assert await _fail(service, "alice", "client-c") >= 4.0
    # Unknown names are throttled the same way (no enumeration through throttling).
    for i in range(FREE_FAILURES):
        assert await _fail(service, "nobody", f"other-{i}") == 0
    assert await _fail(service, "nobody", "other-x") >= 1.0


async def test_failures_from_one_client_slow_down_its_next_attempts(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(CLIENT_FREE_FAILURES):
        assert await _fail(service, f"user{i}", "203.0.113.9") == 0
    assert await _fail(service, "another-name", "203.0.113.9") >= 1.0
    # Other users from other clients are unaffected.
    assert await _fail(service, "bob", "198.51.100.1") == 0
    started = trio.current_time()
    await service.login("bob", "bob-password", client_key="198.51.100.2")
    assert trio.current_time() == started


async def test_success_clears_the_user_name(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(FREE_FAILURES):
        await _fail(service, "alice", f"c{i}")
    started = trio.current_time()
    await service.login("alice", "alice-password", client_key="home")
    assert trio.current_time() - started >= 1.0  # the success also waited its turn
    assert await _fail(service, "alice", "fresh-client") == 0


async def test_success_does_not_clear_the_client(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(CLIENT_FREE_FAILURES):
        await _fail(service, f"victim{i}", "attacker")
    await service.login("bob", "bob-password", client_key="attacker")  # waits, succeeds
    assert await _fail(service, "victim9", "attacker") >= 1.0  # still throttled


async def test_concurrent_guesses_queue_up(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(FREE_FAILURES):
        await _fail(service, "alice", f"c{i}")
    started = trio.current_time()
    finished: list[float] = []

    async def guess(client_key: str) -> None:
        with pytest.raises(LoginFailed):
            await service.login("alice", "guess", client_key=client_key)
        finished.append(trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(guess, f"parallel-{i}")
    # Spaced 1, 2 and 4 s apart rather than all released after one wait.
    assert sorted(finished)[0] >= 1.0
    assert sorted(finished)[1] >= 3.0
    assert sorted(finished)[2] >= 7.0


async def test_attempts_too_far_out_are_refused_at_once(
    store: IdentityStore,
    issuer: JwtIssuer,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    store.add_user("alice", "editor", "alice-password")
    service = LoginService(store, issuer, max_wait_s=3)
    for i in range(FREE_FAILURES + 2):  # waits 1 s, then 2 s
        await _fail(service, "alice", f"c{i}")
    checks: list[str] = []
    real_check = store.check_password

    def recording_check(name: str, password: str) -> Claims:
        checks.append(name)
        return real_check(name, password)

    monkeypatch.setattr(store, "check_password", recording_check)
    started = trio.current_time()
    with pytest.raises(LoginThrottled) as refused:
        await service.login("alice", "alice-password", client_key="new")
    assert trio.current_time() == started  # refused without waiting
    assert checks == []  # and without looking at the password
    assert refused.value.retry_after_s > 3
    assert isinstance(refused.value, LoginFailed)
    assert "alice-password" not in refused.value.reason
    await trio.sleep(refused.value.retry_after_s)
    await service.login("alice", "alice-password", client_key="new")


async def test_cancelled_attempt_counts_for_nothing(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(FREE_FAILURES):
        await _fail(service, "alice", f"c{i}")
    started = trio.current_time()
    with trio.move_on_after(0.5) as scope:  # its turn would have come at +1 s
        await service.login("alice", "alice-password", client_key="impatient")
    assert scope.cancelled_caught
    # The next attempt waits one first-step delay after the spent turn (+1 +1 s), not the
    # second step's 2 s (+1 +2 s): the cancelled attempt recorded no failure.
    await service.login("alice", "alice-password", client_key="patient")
    assert trio.current_time() - started == 2.0


async def test_no_secret_is_logged(service: LoginService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="coremetry.auth")
    with pytest.raises(LoginFailed):
        await service.login("alice", "wrong-password-123", client_key="c1")
    with pytest.raises(LoginFailed):
        await service.login("nobody", "other-password-456", client_key="c1")
    token, _ = await service.login("alice", "alice-password", client_key="c1")
    assert "login refused" in caplog.text
    assert "login: user 'alice'" in caplog.text
    for secret in ("wrong-password-123", "other-password-456", "alice-password", token):
        assert secret not in caplog.text
    assert token.split(".")[2] not in caplog.text


async def test_a_few_failures_at_a_shared_address_do_not_lock_its_other_users_out(
    service: LoginService, autojump_clock: trio.testing.MockClock
) -> None:
    """Everyone behind one proxy (or on loopback) shares a client key: 15 wrong guesses at
    other names there leave alice's login immediate (found by a fresh-user run: 429 for all)."""
    for i in range(15):
        assert await _fail(service, f"mallory{i}", "127.0.0.1") == 0
    started = trio.current_time()
    await service.login("alice", "alice-password", client_key="127.0.0.1")
    assert trio.current_time() == started
    # One account guessed from there is still slowed down after 5.
    for _ in range(FREE_FAILURES):
        assert await _fail(service, "bob", "127.0.0.1") == 0
    assert await _fail(service, "bob", "127.0.0.1") >= BASE_DELAY_S


def test_a_clients_allowance_is_larger_than_a_names(service: LoginService) -> None:
    assert service.delay_s(CLIENT_FREE_FAILURES - 1, client=True) == 0.0
    assert service.delay_s(CLIENT_FREE_FAILURES, client=True) == BASE_DELAY_S
    assert service.delay_s(FREE_FAILURES, client=False) == BASE_DELAY_S
