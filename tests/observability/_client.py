"""The official ``mcp`` SDK client over Streamable HTTP, with every emitted message validated.

The SDK gets an ``httpx2`` client whose transport taps each exchange; when the connection ends,
every JSON-RPC message the server sent (JSON bodies and each SSE event) is validated against the
official schema of the revision in use (:func:`conftest.check_emitted`), and every tool result
is checked to carry the same JSON as text and as ``structuredContent``.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import httpx2
from _sdk_support import Exchange, TapTransport, revision_of
from conftest import check_emitted
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

JsonObject = dict[str, object]
CLIENT_TIMEOUT_S: Final = 120.0


def _messages(exchange: Exchange) -> list[JsonObject]:
    body = bytes(exchange.body)
    if not body:
        return []
    if exchange.response_headers.get("content-type", "").startswith("text/event-stream"):
        found: list[JsonObject] = []
        for block in body.decode().split("\n\n"):
            for line in block.split("\n"):
                if line.startswith("data:"):
                    found.append(json.loads(line[5:]))
        return found
    decoded = json.loads(body)
    assert isinstance(decoded, dict), decoded
    return [decoded]


def validate(exchanges: list[Exchange]) -> int:
    """Validate every message the server sent; returns how many were checked."""
    checked = 0
    for exchange in exchanges:
        assert exchange.status < 500, (exchange.status, bytes(exchange.body))
        request: object = json.loads(exchange.request_body) if exchange.request_body else None
        method = request.get("method") if isinstance(request, dict) else None
        revision = revision_of(exchange, request, _messages(exchange))
        for message in _messages(exchange):
            answers = "result" in message and isinstance(method, str)
            check_emitted(message, revision, str(method) if answers else None)
            checked += 1
            result = message.get("result")
            if method == "tools/call" and isinstance(result, dict):
                content = result["content"]
                assert isinstance(content, list)
                assert len(content) == 1, content
                text = content[0]["text"]
                structured = result.get("structuredContent")
                if structured is not None:
                    assert json.loads(text) == structured, "text and structuredContent agree"
    return checked


@asynccontextmanager
async def mcp_client(url: str, token: str, mode: str = "legacy") -> AsyncIterator[Client]:
    """An SDK client on ``url`` with ``Authorization: Bearer token``; validates on exit."""
    tap = TapTransport(methods=frozenset({"POST"}))
    http = httpx2.AsyncClient(
        transport=tap,
        headers={"authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(CLIENT_TIMEOUT_S),
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client
    assert validate(tap.exchanges) > 0


def structured(result: types.CallToolResult) -> JsonObject:
    """A successful tool result's JSON object."""
    assert result.is_error is False, result.content
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    decoded = json.loads(item.text)
    assert isinstance(decoded, dict)
    return decoded


def failure(result: types.CallToolResult) -> JsonObject:
    """A failed tool result's five-class error object."""
    assert result.is_error is True, result.content
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    decoded = json.loads(item.text)
    assert isinstance(decoded, dict)
    assert list(decoded) == ["error", "retryable", "hint", "detail"]
    return decoded


def prompt_text(result: types.GetPromptResult) -> str:
    """The single user message of a prompt."""
    assert len(result.messages) == 1
    content = result.messages[0].content
    assert isinstance(content, types.TextContent)
    return content.text


def embedded_json(text: str) -> JsonObject:
    """The JSON block a prompt embeds."""
    start = text.index("```json\n") + len("```json\n")
    decoded = json.loads(text[start : text.rindex("\n```")])
    assert isinstance(decoded, dict)
    return decoded


def obj(value: object) -> JsonObject:
    """``value`` as a JSON object (asserted)."""
    assert isinstance(value, dict), value
    return value


def objs(value: object) -> list[JsonObject]:
    """``value`` as a list of JSON objects (asserted)."""
    assert isinstance(value, list), value
    return [obj(v) for v in value]


def num(value: object) -> float:
    """``value`` as a number (asserted; ints too)."""
    assert isinstance(value, int | float), value
    return float(value)
