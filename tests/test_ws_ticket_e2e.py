"""WebSocket tickets end to end (issue 18): ``POST /api/mcp/ws-ticket``, then ``?ticket=``.

A real server (:func:`coremetry.server.serve`, hypercorn, real security over a temporary data
dir) on a free loopback port; tickets are minted over HTTP with httpx and presented by a real
WebSocket client (trio-websocket) that sends no credential header at all, as the stock clients
that cannot set headers do. Refused handshakes are read by hand (status, challenge, body).

The ticket book's clock is the test's (a list holding "now"), so expiry is tested without
waiting and without asserting on wall-clock time.
"""

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio
from _wire_support import as_object, request, upgrade_by_hand
from conftest import check_emitted
from test_auth_e2e import initialize_params, login, result_of, text_of
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from coremetry.audit import AuditEntry
from coremetry.auth import TicketBook
from coremetry.auth.ws_ticket import DEFAULT_TTL_S
from coremetry.config import load_config
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.rest import ADMIN_USERS_PATH, WS_TICKET_PATH
from coremetry.server import Security, build_mcp_server, open_security, serve

LIMIT_S: Final = 60.0
"""Hang guard of every test."""

PASSWORD: Final = "ticket tests password 9"
WS_PATH: Final = "/api/mcp/ws"
# Every 401 names the OAuth protected-resource metadata (RFC 9728 §5.1), ticket refusals too.
NO_TOKEN: Final = 'Bearer realm="coremetry", resource_metadata="http://'
INVALID_TOKEN: Final = 'Bearer realm="coremetry", error="invalid_token", resource_metadata="http://'


@dataclass
class Live:
    """A running server, its security and the test's service tokens and clock."""

    base: str
    security: Security
    tokens: dict[str, str]
    now: list[float]
    data_dir: Path

    @property
    def host_port(self) -> str:
        return self.base.removeprefix("http://")


@asynccontextmanager
async def live_server(tmp_path: Path) -> AsyncIterator[Live]:
    """``serve`` with real security; tokens ``viewer`` and ``admin``, user ``alice`` (editor)."""
    data_dir = tmp_path / "data"
    config = load_config(
        environ={},
        overrides={
            "http": {"port": 0, "graceful_shutdown_s": 1.0},
            "data_dir": str(data_dir),
            "rate_limit": {"per_second": 1000.0, "burst": 1000},
        },
    )
    security = open_security(config)
    now = [1000.0]
    security.tickets = TicketBook(clock=lambda: now[0], max_per_subject=3)
    try:
        tokens = {
            role: security.store.create_token(f"ws-{role}", role, None)[0]
            for role in ("viewer", "admin")
        }
        security.store.add_user("alice", "editor", PASSWORD)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            base: str = await nursery.start(
                partial(
                    serve,
                    config,
                    build_mcp_server(fixture=True),
                    announce=False,
                    shutdown=stop,
                    security=security,
                )
            )
            try:
                yield Live(base, security, tokens, now, data_dir)
            finally:
                stop.set()
    finally:
        security.close()


async def mint(live: Live, headers: Mapping[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
        return await client.post(WS_TICKET_PATH, headers=dict(headers))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@asynccontextmanager
async def ws_with_ticket(live: Live, ticket: str) -> AsyncIterator[WebSocketConnection]:
    """A trio-websocket client on ``/api/mcp/ws?ticket=…``, no credential header sent."""
    host, port = live.host_port.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, live.host_port, f"{WS_PATH}?ticket={ticket}", subprotocols=["mcp"]
        )
        try:
            yield ws
        finally:
            await ws.aclose()


async def rpc(ws: WebSocketConnection, message: Mapping[str, object]) -> dict[str, object]:
    await ws.send_message(json.dumps(message))
    while True:
        reply = as_object(json.loads(await ws.get_message()))
        if "method" not in reply:
            return reply


async def who_am_i(ws: WebSocketConnection) -> dict[str, object]:
    """Initialize, then read ``coremetry://server``: the caller the socket is seen as."""
    init = await rpc(ws, request(0, "initialize", initialize_params(LATEST_HANDSHAKE)))
    check_emitted(init, LATEST_HANDSHAKE, "initialize")
    await ws.send_message(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    read = await rpc(ws, request(1, "resources/read", {"uri": "coremetry://server"}))
    check_emitted(read, LATEST_HANDSHAKE, "resources/read")
    contents = result_of(read)["contents"]
    assert isinstance(contents, list)
    text = as_object(contents[0])["text"]
    assert isinstance(text, str)
    server = as_object(json.loads(text))
    return as_object(server["caller"])


async def upgrade(live: Live, query: str) -> tuple[int, dict[str, str], str]:
    status, fields, body = await upgrade_by_hand(live.host_port, f"{WS_PATH}{query}", {})
    return status, fields, body.decode()


async def test_a_ticket_opens_one_socket_as_its_minter(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            response = await mint(live, bearer(live.tokens["viewer"]))
            assert response.status_code == 200, response.text
            assert response.headers["cache-control"] == "no-store"
            body = response.json()
            ticket = body["ticket"]
            assert len(ticket) >= 43  # 256 bits, URL-safe base64
            assert body["expires_in"] == DEFAULT_TTL_S
            assert body["url"] == f"ws://{live.host_port}{WS_PATH}?ticket={ticket}"
            async with ws_with_ticket(live, ticket) as ws:
                assert ws.subprotocol == "mcp"
                assert await who_am_i(ws) == {"subject": "token:ws-viewer", "role": "viewer"}
                # The socket keeps working after the handshake (the credential is re-checked
                # on every message, not the ticket).
                echo = await rpc(
                    ws, request(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
                )
                assert text_of(result_of(echo)) == "hi"
            # Used once: the same ticket is refused at the handshake, before any upgrade.
            status, fields, text = await upgrade(live, f"?ticket={ticket}")
            assert status == 401
            assert fields["www-authenticate"].startswith(INVALID_TOKEN)
            assert "already used" in text
            assert "POST /api/mcp/ws-ticket" in text


async def test_unknown_expired_and_repeated_tickets_are_refused_before_the_upgrade(
    tmp_path: Path,
) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            status, _, text = await upgrade(live, "?ticket=not-a-ticket-we-minted")
            assert status == 401
            assert "unknown or already used" in text
            status, _, text = await upgrade(live, "?ticket=")
            assert status == 401
            # No ticket and no header: the ordinary 401, which names the ways in.
            status, fields, text = await upgrade(live, "")
            assert status == 401
            assert fields["www-authenticate"].startswith(NO_TOKEN)

            ticket = (await mint(live, bearer(live.tokens["viewer"]))).json()["ticket"]
            other = (await mint(live, bearer(live.tokens["viewer"]))).json()["ticket"]
            status, _, text = await upgrade(live, f"?ticket={ticket}&ticket={other}")
            assert status == 401
            live.now[0] += DEFAULT_TTL_S  # the book's clock: the tickets are now expired
            status, fields, text = await upgrade(live, f"?ticket={other}")
            assert status == 401
            assert "error_description" in fields["www-authenticate"]
            assert "expired" in text


async def test_a_ticket_fails_once_its_user_is_disabled(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            jwt, _cookie = await login(live.base, "alice", PASSWORD)
            first = (await mint(live, bearer(jwt))).json()["ticket"]
            second = (await mint(live, bearer(jwt))).json()["ticket"]
            async with ws_with_ticket(live, first) as ws:
                assert await who_am_i(ws) == {"subject": "alice", "role": "editor"}
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                disabled = await client.post(
                    f"{ADMIN_USERS_PATH}/alice/disable", headers=bearer(live.tokens["admin"])
                )
            assert disabled.status_code == 200
            status, fields, _ = await upgrade(live, f"?ticket={second}")
            assert status == 401
            assert fields["www-authenticate"].startswith(INVALID_TOKEN)


async def test_an_open_ticket_socket_ends_when_its_user_is_disabled(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            jwt, _cookie = await login(live.base, "alice", PASSWORD)
            ticket = (await mint(live, bearer(jwt))).json()["ticket"]
            async with ws_with_ticket(live, ticket) as ws:
                assert (await who_am_i(ws))["subject"] == "alice"
                async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                    disabled = await client.post(
                        f"{ADMIN_USERS_PATH}/alice/disable", headers=bearer(live.tokens["admin"])
                    )
                assert disabled.status_code == 200
                # The credential behind the ticket is checked on every message, like a header's.
                await ws.send_message(json.dumps(request(9, "ping", {})))
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                reason = closed.value.reason
                assert reason is not None
                assert reason.code == 1008


async def test_a_session_cookie_mints_a_ticket_too(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            _jwt, cookie = await login(live.base, "alice", PASSWORD)
            response = await mint(live, {"cookie": cookie})
            assert response.status_code == 200
            async with ws_with_ticket(live, response.json()["ticket"]) as ws:
                assert (await who_am_i(ws))["subject"] == "alice"


async def test_minting_needs_credentials_and_is_bounded_and_audited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with trio.fail_after(LIMIT_S):
        async with live_server(tmp_path) as live:
            refused = await mint(live, {})
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith(NO_TOKEN)
            assert (await mint(live, bearer("cmk_not_a_real_token"))).status_code == 401
            async with httpx.AsyncClient(base_url=live.base, timeout=LIMIT_S) as client:
                wrong_method = await client.get(
                    WS_TICKET_PATH, headers=bearer(live.tokens["viewer"])
                )
            assert wrong_method.status_code == 405
            assert wrong_method.headers["allow"] == "POST, OPTIONS"

            tickets = [
                (await mint(live, bearer(live.tokens["admin"]))).json()["ticket"] for _ in range(3)
            ]
            over = await mint(live, bearer(live.tokens["admin"]))
            assert over.status_code == 429  # max_per_subject=3 in this server's book
            assert int(over.headers["retry-after"]) >= 1
            # Another identity is not held back by the admin's unused tickets.
            assert (await mint(live, bearer(live.tokens["viewer"]))).status_code == 200

            rows: list[AuditEntry] = await trio.to_thread.run_sync(
                lambda: live.security.audit.tail(50)
            )
            mints = [(row.sub, row.outcome) for row in rows if row.name == "ws-ticket mint"]
            assert sorted(mints) == sorted(
                [("token:ws-admin", "ok")] * 3
                + [("token:ws-admin", "denied"), ("token:ws-viewer", "ok")]
            )
            # A ticket is a credential: never in a log line nor in the database files.
            logged = "\n".join(record.getMessage() for record in caplog.records)
            stored = b"".join(
                path.read_bytes() for path in live.data_dir.rglob("*") if path.is_file()
            )
            for ticket in tickets:
                assert ticket not in logged
                assert ticket.encode() not in stored
