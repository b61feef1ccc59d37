"""Wire taps for the official MCP Python SDK's client streams, shared by the end-to-end tests.

The SDK's transports (``stdio_client``, ``sse_client``) hand a ``ClientSession`` a read stream
and a write stream of :class:`mcp.shared.message.SessionMessage`. :class:`TapRead` and
:class:`TapWrite` wrap them and append every JSON-RPC message that passes, dumped as the JSON
object it is on the wire (by alias, unset fields left out), to a list the test owns.

Imported as ``from _sdk_support import ...``: pytest puts ``tests/`` on ``sys.path`` (no
``tests/__init__.py``), the way ``conftest`` is imported.
"""

from types import TracebackType
from typing import Self

from mcp import types
from mcp.client._transport import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

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
