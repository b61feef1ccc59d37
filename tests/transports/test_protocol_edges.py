"""Protocol edges of the HTTP server, replayed from field reports of other MCP servers (issue 17).

Every test runs the real server (``coremetry.server.serve`` with the fixture registry) on a free
loopback port and speaks raw HTTP to it; every JSON-RPC message it sends is validated against
the official schema of the revision in use (``post`` of ``test_streamable_http``).

- ``initialize`` sent with ``MCP-Protocol-Version: 2026-07-28`` selects the handshake era;
- the 2026-07-28 ``serverInfo`` carries the handshake era's ``title``;
- every unknown path answers JSON, the OAuth discovery paths clients probe after a 401 included;
- refusals (403, 413, 415) carry their reason phrase in the status line.
"""

import json
from http import HTTPStatus
from typing import Final

import pytest
import trio
from _wire_support import as_object

from coremetry.mcp.versions import HANDSHAKE_VERSIONS, LATEST_HANDSHAKE

from .test_streamable_http import (
    JSON_HEADERS,
    LIMIT_S,
    STATELESS,
    http_client,
    post,
    rpc,
    start_server,
    stateless,
)

PROBED_PATHS: Final = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/api/mcp",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
    "/register",
    "/authorize",
    "/token",
    "/no/such/page",
)


def initialize_params(version: str) -> dict[str, object]:
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "tests", "version": "1"},
    }


@pytest.mark.parametrize("requested", [*HANDSHAKE_VERSIONS, STATELESS])
async def test_initialize_with_the_2026_header_selects_the_handshake_era(
    nursery: trio.Nursery, requested: str
) -> None:
    expected = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(
                client,
                url,
                rpc("initialize", "init", initialize_params(requested)),
                {"mcp-protocol-version": STATELESS},
                revision=expected,
            )
    assert answer.status == 200, answer.body
    result = answer.result()
    assert result["protocolVersion"] == expected
    assert as_object(result["serverInfo"])["name"] == "coremetry"


async def test_bad_initialize_with_the_2026_header_is_invalid_params(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            answer = await post(
                client,
                url,
                rpc("initialize", 7, {"protocolVersion": 2025}),
                {"mcp-protocol-version": STATELESS},
                revision=LATEST_HANDSHAKE,
            )
    assert answer.status == 200, answer.body
    assert answer.error_code() == -32602, "the handshake's params are wrong, the method exists"


async def test_stateless_server_info_has_the_handshake_title(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            handshake = await post(
                client,
                url,
                rpc("initialize", 1, initialize_params(LATEST_HANDSHAKE)),
                revision=LATEST_HANDSHAKE,
            )
            body, headers = stateless("server/discover", 2)
            discover = await post(client, url, body, headers)
            body, headers = stateless("tools/list", 3)
            listed = await post(client, url, body, headers)
    info = as_object(handshake.result()["serverInfo"])
    assert isinstance(info.get("title"), str)
    assert info["title"]
    for answer in (discover, listed):
        meta = as_object(answer.result()["_meta"])
        assert as_object(meta["io.modelcontextprotocol/serverInfo"]) == info


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_every_unknown_path_answers_json(nursery: trio.Nursery, method: str) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        base = url.removesuffix("/api/mcp")
        async with http_client() as client:
            for path in PROBED_PATHS:
                response = await client.request(
                    method, base + path, content=b"{}", headers=JSON_HEADERS
                )
                assert response.status_code == 404, (path, response.text)
                assert response.reason_phrase == "Not Found", path
                assert response.headers["content-type"] == "application/json", path
                body = response.json()
                assert body["error"] == "not_found", (path, body)
                assert "/api/mcp" in body["detail"]


async def test_a_wrong_method_on_a_quart_route_answers_json(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery)
        async with http_client() as client:
            response = await client.post(url.removesuffix("/api/mcp") + "/healthz")
    assert response.status_code == 405
    assert response.reason_phrase == "Method Not Allowed"
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == "method_not_allowed"
    assert "GET" in response.headers["allow"]


async def test_refusals_carry_their_reason_phrase(nursery: trio.Nursery) -> None:
    with trio.fail_after(LIMIT_S):
        url = await start_server(nursery, http={"max_body_bytes": 256})
        ping = json.dumps(rpc("ping", 1)).encode()
        async with http_client() as client:
            wrong_type = await client.post(
                url, content=ping, headers={**JSON_HEADERS, "content-type": "text/plain"}
            )
            too_large = await client.post(
                url, content=json.dumps(rpc("ping", 1, {"pad": "x" * 300})), headers=JSON_HEADERS
            )
            foreign = await client.post(
                url, content=ping, headers={**JSON_HEADERS, "origin": "https://evil.example"}
            )
            served = await client.post(url, content=ping, headers=JSON_HEADERS)
    assert (wrong_type.status_code, wrong_type.reason_phrase) == (415, "Unsupported Media Type")
    # RFC 9110 renamed 413 "Content Too Large"; Python < 3.13 still says the RFC 7231 name.
    assert (too_large.status_code, too_large.reason_phrase) == (413, HTTPStatus(413).phrase)
    assert too_large.reason_phrase.endswith("Too Large")
    assert (foreign.status_code, foreign.reason_phrase) == (403, "Forbidden")
    assert (served.status_code, served.reason_phrase) == (200, "OK")
    for refused in (wrong_type, too_large, foreign):
        assert as_object(refused.json())["error"]
