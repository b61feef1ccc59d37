"""Server-to-client requests (``sampling/createMessage``, ``elicitation/create``, ``roots/list``).

Contract:

- Each request gets a fresh string id (``coremetry-<seq>-<random>``), so a client's answer can
  never be mistaken for one to another request, nor guessed.
- A client's response is delivered to the request waiting for it; a late, duplicate or unknown
  response is ignored (``basic/utilities/cancellation`` races).
- The caller gets the client's ``result`` object, or :class:`ClientRequestError` carrying the
  client's JSON-RPC error (or ours, for a malformed answer). Cancelling the waiting task
  forgets the request.
"""

import contextlib
import secrets

import msgspec
import trio
from msgspec import Raw, UnsetType

from . import codes
from .framing import DECODE_ERRORS, Send
from .wire import ENCODER, ErrorObject, JsonObject, OutboundRequest, RequestId

_Answer = tuple[Raw | None, Raw | None]
"""A client's response: its raw ``result`` or its raw ``error``."""


class ClientRequestError(Exception):
    """Raised by :meth:`CallContext.request <coremetry.mcp.CallContext.request>` on an error.

    That is: when the client answers with an error, or when no answer can come (no stream,
    stateless era). ``code`` and ``message`` are the client's JSON-RPC error, or ours.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class OutboundRequests:
    """The server-to-client requests waiting for their answer, by id."""

    def __init__(self) -> None:
        self._waiting: dict[RequestId, trio.MemorySendChannel[_Answer]] = {}
        self._seq = 0

    async def request(self, send: Send, method: str, params: JsonObject) -> JsonObject:
        """Send one request through ``send`` and wait for the client's answer.

        Raises:
            ClientRequestError: the client answered with an error, or with something that is
                not a JSON-RPC result or error object.
        """
        self._seq += 1
        request_id = f"coremetry-{self._seq}-{secrets.token_hex(4)}"
        answer_send, answer_recv = trio.open_memory_channel[_Answer](1)
        self._waiting[request_id] = answer_send
        try:
            await send(ENCODER.encode(OutboundRequest(id=request_id, method=method, params=params)))
            result, error = await answer_recv.receive()
        finally:
            del self._waiting[request_id]
        if error is not None:
            try:
                detail = msgspec.json.decode(error, type=ErrorObject)
            except DECODE_ERRORS:
                raise ClientRequestError(
                    codes.INTERNAL_ERROR, "malformed error from client"
                ) from None
            raise ClientRequestError(detail.code, detail.message)
        try:
            return msgspec.json.decode(result or b"{}", type=JsonObject)
        except DECODE_ERRORS:
            raise ClientRequestError(codes.INTERNAL_ERROR, "malformed result from client") from None

    def deliver(
        self, request_id: RequestId, result: Raw | UnsetType, error: Raw | UnsetType
    ) -> None:
        """Hand a client's response to the :meth:`request` waiting for it (else ignore it)."""
        waiter = self._waiting.get(request_id) if isinstance(request_id, str) else None
        if waiter is None:
            return
        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
            waiter.send_nowait(
                (
                    None if isinstance(result, UnsetType) else result,
                    None if isinstance(error, UnsetType) else error,
                )
            )
