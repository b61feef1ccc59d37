"""One typed :class:`MethodSpec` per MCP method: its params type, handler, eras and flags.

A server registers each method once (``Server.add_method(name, MethodSpec(...))``, the shape of
python-sdk's ``add_request_handler(method, params_type, handler)``); the params type and the
handler are checked against each other when the spec is built, so the table needs no casts.

Contract of :meth:`MethodSpec.route` (era selection, ``shared/reference/mcp-spec.md`` §1'):

- A request whose ``_meta`` names a protocol version, or that arrives on a connection pinned to
  2026-07-28, is served statelessly (``server/discover`` always is): ``_meta`` must carry a
  supported stateless revision and the client capabilities (``-32602``/``-32022``, HTTP 400).
  Otherwise the connection's revision (or our latest handshake revision) applies.
- An ``initialize`` whose params name a ``protocolVersion`` and whose ``_meta`` names none is
  the handshake, whatever the connection is pinned to: it selects the handshake era (the
  revision it negotiates), so a client sending ``MCP-Protocol-Version: 2026-07-28`` on it is
  not answered ``-32601`` (:func:`is_handshake`).
- A method the stateless era removed is ``-32601`` (HTTP 404) in that era whatever its params
  or ``_meta``; params that do not fit the method are ``-32602`` naming the field (and the
  accepted values of an enumerated one).
- A gated call reusing the id of a call still in flight on the connection is ``-32600``; a
  gated call is registered in ``conn.in_flight`` before it is returned.
"""

from collections.abc import Callable
from typing import Final, Generic, Literal, Protocol, TypeVar

import msgspec
from msgspec import UnsetType

from . import codes
from .calls import Connection, PendingCall
from .framing import (
    DECODE_ERRORS,
    ProtocolError,
    Reply,
    Request,
    decode_error_message,
    meta_of,
)
from .gate import CallKind
from .versions import LATEST_HANDSHAKE, STATELESS_VERSIONS, is_stateless
from .wire import META_PROTOCOL_VERSION, RequestId, RequestMeta, RequestParams

Era = Literal["handshake", "stateless", "both"]
"""Where a method exists: the handshake revisions, the stateless (2026-07-28) one, or both."""

ParamsT = TypeVar("ParamsT", bound=RequestParams)

MethodHandler = Callable[[Request, ParamsT, Connection], Reply | PendingCall]
"""``handler(request, params, conn)``: answers at once (:class:`Reply`) or returns the
:class:`PendingCall` to run. Raises :class:`ProtocolError` to answer a JSON-RPC error."""

_DISCOVER: Final = "server/discover"
_INITIALIZE: Final = "initialize"


class Method(Protocol):
    """What routing needs of a registered method, whatever its params type."""

    @property
    def observed(self) -> CallKind | None:
        """The call observer's kind for this method, or ``None`` (not observed)."""
        ...

    def decode(self, params: bytes) -> RequestParams:
        """Decode raw params (raises msgspec's errors or ``RecursionError``)."""
        ...

    def route(
        self, request_id: RequestId, method: str, params: bytes, conn: Connection, *, in_batch: bool
    ) -> Reply | PendingCall:
        """Decode, select the era, and run the handler (see the module docstring)."""
        ...


class MethodSpec(Generic[ParamsT]):
    """One method: its params Struct, its handler, where it exists, and how it is treated.

    Args:
        params: the msgspec Struct its params decode into.
        handler: ``handler(request, params, conn)``.
        eras: where the method exists. Only the stateless era refuses: a ``"handshake"``
            method is not found in 2026-07-28; a ``"stateless"`` one reached without a
            revision in ``_meta`` is still served (``server/discover`` always statelessly,
            ``subscriptions/listen`` in the connection's era).
        gated: a call that runs as a :class:`PendingCall` under its own cancel scope and whose
            id must not collide with one in flight.
        observed: the :data:`~coremetry.mcp.gate.CallKind` the call observer records it under;
            ``None`` for methods it never hears about.
    """

    __slots__ = ("_decoder", "_stateless_ok", "eras", "gated", "handler", "observed", "params")

    def __init__(
        self,
        params: type[ParamsT],
        handler: MethodHandler[ParamsT],
        *,
        eras: Era,
        gated: bool = False,
        observed: CallKind | None = None,
    ) -> None:
        self.params = params
        self.handler = handler
        self.eras: Era = eras
        self.gated = gated
        self.observed: CallKind | None = observed
        self._stateless_ok = eras != "handshake"
        self._decoder: msgspec.json.Decoder[ParamsT] = msgspec.json.Decoder(params)

    def decode(self, params: bytes) -> ParamsT:
        """Decode raw params into :attr:`params` (raises msgspec's errors or RecursionError)."""
        return self._decoder.decode(params)

    def route(
        self, request_id: RequestId, method: str, params: bytes, conn: Connection, *, in_batch: bool
    ) -> Reply | PendingCall:
        """Decode the params, select the era, and run the handler.

        Raises:
            ProtocolError: the JSON-RPC error to answer (see the module docstring).
        """
        # The hot path of every request: one decode, the era, one handler call.
        try:
            decoded = self._decoder.decode(params)
        except DECODE_ERRORS as exc:
            raise self._undecodable(method, params, conn, exc) from None
        meta = decoded.meta if not isinstance(decoded.meta, UnsetType) else RequestMeta()
        # A handshake selects the handshake era even when the transport's MCP-Protocol-Version
        # header names a stateless revision: on an endpoint serving both eras, it is how a
        # client asks for the older one.
        handshake = method == _INITIALIZE and is_handshake(params)
        stateless = (is_stateless_request(meta, conn) and not handshake) or method == _DISCOVER
        if stateless:
            if not self._stateless_ok:
                # Removed in the stateless era: not found whatever its _meta, checked before
                # _meta's required keys (a missing one would be a 400 -32602 here).
                revision = meta.protocol_version
                if isinstance(revision, UnsetType):
                    revision = conn.protocol_version or ""
                raise ProtocolError(
                    codes.METHOD_NOT_FOUND,
                    f"Method not found: {method} is not part of protocol revision {revision}",
                    http_status=404,
                )
            version = check_stateless_meta(meta)
        else:
            version = conn.protocol_version or LATEST_HANDSHAKE
            if is_stateless(version):
                version = LATEST_HANDSHAKE
            if in_batch and method == "initialize":
                raise ProtocolError(
                    codes.INVALID_REQUEST, "Invalid Request: initialize must not be batched"
                )
        request = Request(
            id=request_id, method=method, version=version, stateless=stateless, meta=meta
        )
        if self.gated and request_id in conn.in_flight:
            raise ProtocolError(
                codes.INVALID_REQUEST,
                f"Invalid Request: id {request_id!r} is already in use by a call in progress",
            )
        outcome = self.handler(request, decoded, conn)
        if isinstance(outcome, PendingCall):
            conn.in_flight[request_id] = outcome
        return outcome

    def _undecodable(
        self, method: str, params: bytes, conn: Connection, exc: Exception
    ) -> ProtocolError:
        handshake = method == _INITIALIZE and is_handshake(params)
        if not self._stateless_ok and is_stateless_request(meta_of(params), conn) and not handshake:
            # A method the stateless era removed stays "not found", whatever its params.
            return ProtocolError(
                codes.METHOD_NOT_FOUND, f"Method not found: {method}", http_status=404
            )
        return ProtocolError(
            codes.INVALID_PARAMS,
            f"Invalid params for {method}: {decode_error_message(exc, self.params)}",
        )

    def __repr__(self) -> str:
        return f"MethodSpec({self.params.__name__}, eras={self.eras!r}, gated={self.gated})"


_LOOSE: Final = msgspec.json.Decoder()


def is_handshake(params: bytes) -> bool:
    """Whether ``initialize`` params are a handshake (a ``protocolVersion``, none in ``_meta``).

    Such an ``initialize`` is served in the handshake era whatever the connection is pinned to
    (issue 17: clients send ``MCP-Protocol-Version: 2026-07-28`` on it); any other
    ``initialize`` on a 2026-07-28 connection stays a method that revision removed.
    """
    try:
        decoded = _LOOSE.decode(params)
    except msgspec.DecodeError:
        return False
    if not isinstance(decoded, dict) or "protocolVersion" not in decoded:
        return False
    meta = decoded.get("_meta")
    return not (isinstance(meta, dict) and META_PROTOCOL_VERSION in meta)


def is_stateless_request(meta: RequestMeta, conn: Connection) -> bool:
    """Whether a request is served in the 2026-07-28 era (its ``_meta`` or its connection)."""
    if not isinstance(meta.protocol_version, UnsetType):
        return True
    return conn.protocol_version is not None and is_stateless(conn.protocol_version)


def check_stateless_meta(meta: RequestMeta) -> str:
    """The revision of a stateless request, once its ``_meta`` has what the era requires.

    Raises:
        ProtocolError: no protocol version or client capabilities (``-32602``), or an
            unsupported revision (``-32022`` listing the supported ones); HTTP 400.
    """
    version = meta.protocol_version
    if isinstance(version, UnsetType):
        raise ProtocolError(
            codes.INVALID_PARAMS,
            'Invalid params: missing required _meta["io.modelcontextprotocol/protocolVersion"]',
            http_status=400,
        )
    if version not in STATELESS_VERSIONS:
        raise ProtocolError(
            codes.UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version: {version}",
            {"supported": list(STATELESS_VERSIONS), "requested": version},
            http_status=400,
        )
    if isinstance(meta.client_capabilities, UnsetType):
        raise ProtocolError(
            codes.INVALID_PARAMS,
            'Invalid params: missing required _meta["io.modelcontextprotocol/clientCapabilities"]',
            http_status=400,
        )
    return version
