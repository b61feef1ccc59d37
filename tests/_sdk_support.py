"""Wire taps for the official MCP Python SDK's clients, shared by the end-to-end tests.

Streamable HTTP: :class:`TapTransport` is an ``httpx2`` transport that records each HTTP
:class:`Exchange` (request and response bodies) the SDK's client makes.

stdio and legacy SSE: the SDK's transports (``stdio_client``, ``sse_client``) hand a
``ClientSession`` a read stream and a write stream of
:class:`mcp.shared.message.SessionMessage`. :class:`TapRead` and :class:`TapWrite` wrap them and
append every JSON-RPC message that passes, dumped as the JSON object it is on the wire (by
alias, unset fields left out), to a list the test owns.

Imported as ``from _sdk_support import ...``: pytest puts ``tests/`` on ``sys.path`` (no
``tests/__init__.py``), the way ``conftest`` is imported.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import httpx2
from mcp import types
from mcp.client._transport import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from coremetry.mcp.versions import ALL_VERSIONS, DEFAULT_WITHOUT_HEADER, STATELESS_VERSIONS

JsonObject = dict[str, object]


def dump_message(message: SessionMessage) -> JsonObject:
    """One SDK message as the JSON object sent on the wire.

    Args:
        message: A message read or written by the SDK's session.

    Returns:
        The JSON-RPC message, field names by alias, fields never set left out.
    """
    return message.message.model_dump(by_alias=True, mode="json", exclude_unset=True)


class _Tap:
    """What both taps forward unchanged to the wrapped stream: closing and context management."""

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception] | WriteStream[SessionMessage],
        log: list[JsonObject],
    ) -> None:
        self._inner = inner
        self._log = log

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


class TapRead(_Tap):
    """The SDK's read stream, recording each message before the session sees it.

    Args:
        inner: The transport's read stream.
        log: Where each message (server -> client) is appended, as JSON.
    """

    def __init__(self, inner: ReadStream[SessionMessage | Exception], log: list[JsonObject]):
        super().__init__(inner, log)
        self._reader = inner

    def _record(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, SessionMessage):
            self._log.append(dump_message(item))
        return item

    async def receive(self) -> SessionMessage | Exception:
        return self._record(await self._reader.receive())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._record(await self._reader.__anext__())


class TapWrite(_Tap):
    """The SDK's write stream, recording each message it hands to the transport.

    Args:
        inner: The transport's write stream.
        log: Where each message (client -> server) is appended, as JSON.
    """

    def __init__(self, inner: WriteStream[SessionMessage], log: list[JsonObject]):
        super().__init__(inner, log)
        self._writer = inner

    async def send(self, item: SessionMessage, /) -> None:
        self._log.append(dump_message(item))
        await self._writer.send(item)


def only_text(content: list[types.ContentBlock]) -> str:
    """The text of a tool result's content that must be exactly one text block."""
    assert len(content) == 1, content
    item = content[0]
    assert isinstance(item, types.TextContent), item
    return item.text


# ---- Streamable HTTP: an httpx2 transport tap -----------------------------------------------


@dataclass
class Exchange:
    """One HTTP exchange as the SDK's httpx2 client saw it."""

    method: str
    request_headers: httpx2.Headers
    request_body: bytes
    status: int = 0
    response_headers: httpx2.Headers = field(default_factory=httpx2.Headers)
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False
    """The whole body was received (an SSE answer the client abandoned is not complete)."""


class TapStream(httpx2.AsyncByteStream):
    """A response body stream that copies every chunk into its exchange as the SDK reads it."""

    def __init__(self, inner: httpx2.AsyncByteStream, exchange: Exchange) -> None:
        self._inner = inner
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._exchange.body.extend(chunk)
            yield chunk
        self._exchange.complete = True

    async def aclose(self) -> None:
        await self._inner.aclose()


class TapTransport(httpx2.AsyncBaseTransport):
    """Records every request and response body that passes through (for the SDK's httpx2 client).

    Bodies that are not event streams are read here in full (the SDK does not read every one,
    e.g. the body of the 405 answering its GET), so each is validated; event streams are
    copied as the SDK reads them.

    Args:
        methods: The HTTP methods whose exchanges are recorded; ``None`` for all. The others
            pass through untouched.
    """

    def __init__(self, methods: frozenset[str] | None = None) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._methods = methods
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._methods is not None and request.method not in self._methods:
            return await self._inner.handle_async_request(request)
        exchange = Exchange(request.method, request.headers, await request.aread())
        self.exchanges.append(exchange)
        response = await self._inner.handle_async_request(request)
        exchange.status = response.status_code
        exchange.response_headers = response.headers
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            exchange.body.extend(await response.aread())
            exchange.complete = True
            await response.aclose()
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                content=bytes(exchange.body),
                extensions=response.extensions,
                request=request,
            )
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = TapStream(stream, exchange)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def revision_of(exchange: Exchange, request: object, response: list[JsonObject]) -> str:
    """The revision the server served an exchange at.

    Args:
        exchange: The exchange (its ``MCP-Protocol-Version`` request header is the fallback).
        request: The decoded request body (its ``_meta`` protocol version for 2026-07-28).
        response: The JSON-RPC messages of the answer (``initialize`` result's version).
    """
    if isinstance(request, dict):
        params = request.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict):
            version = meta.get("io.modelcontextprotocol/protocolVersion")
            if version in STATELESS_VERSIONS:
                return str(version)
        if request.get("method") == "initialize":
            for message in response:
                result = message.get("result")
                if isinstance(result, dict) and result.get("protocolVersion") in ALL_VERSIONS:
                    return str(result["protocolVersion"])
    header = exchange.request_headers.get("mcp-protocol-version")
    if header in ALL_VERSIONS:
        return str(header)
    return DEFAULT_WITHOUT_HEADER
