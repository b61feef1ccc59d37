"""JSON-RPC framing: the first decoding stage, error replies, and result encoding.

Contract:

- Request ids are echoed exactly (JSON type and value); an unreadable id is answered ``null``.
- Decoding is two-stage (``shared/STYLE.md`` habit 4): not UTF-8 or not JSON -> ``-32700``; not
  a valid envelope -> ``-32600`` (both HTTP 400); params that do not fit the method ->
  ``-32602`` with msgspec's message, which names the field and, for an enumerated field, the
  accepted values (:func:`decode_error_message`).
- A JSON-RPC *response* that fails envelope validation is never answered (a response is not a
  request).
- Nothing here raises for any input bytes: every failure is a :class:`Reply` or ``None``.
"""

import enum
import re
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType
from msgspec.inspect import (
    DictType,
    EnumType,
    FrozenSetType,
    ListType,
    LiteralType,
    Metadata,
    SetType,
    StructType,
    TupleType,
    Type,
    UnionType,
    VarTupleType,
    type_info,
)

from . import codes
from .versions import V2025_03_26
from .wire import (
    ENCODER,
    EmptyParams,
    ErrorObject,
    ErrorResponse,
    JsonObject,
    RequestId,
    RequestMeta,
    Result,
    ResultResponse,
)

Send = Callable[[bytes], Awaitable[None]]
"""Writes one encoded JSON-RPC message to the peer. Must be safe to call from concurrent tasks
(transports serialise writes, e.g. through a memory channel to one writer task)."""

EMPTY_OBJECT: Final = b"{}"
"""The params (or tool arguments) of a request that sent none."""

DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
"""What decoding untrusted JSON may raise (deep nesting is a ``RecursionError``)."""


class Reply(Struct, frozen=True):
    """An encoded answer and the HTTP status an HTTP transport should send it with.

    ``http_status`` is 200 except: parse errors and invalid requests (400); and, for stateless
    (2026-07-28) requests, ``-32601`` (404) and the ``-32602``/``-32020``/``-32021``/``-32022``
    ``_meta`` and header errors (400) (2026-07-28 ``basic/transports/streamable-http``).
    """

    body: bytes
    http_status: int = 200


class ProtocolError(Exception):
    """Raised inside the dispatcher when a request must be answered with a JSON-RPC error."""

    def __init__(
        self,
        code: int,
        message: str,
        data: JsonObject | None = None,
        *,
        http_status: int = 200,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


class UnknownEntry(ProtocolError):
    """Raised when a gated call names a tool, prompt or resource we do not serve.

    The call observer records it as ``not_found`` whatever its JSON-RPC code.
    """


class Request(Struct, frozen=True, kw_only=True):
    """What routing learned about one request: its id, method and era.

    Attributes:
        id: the JSON-RPC id, as sent.
        method: the method name.
        version: the protocol revision serving it.
        stateless: served in the 2026-07-28 era.
        meta: the request's ``_meta`` (empty when absent).
    """

    id: RequestId
    method: str
    version: str
    stateless: bool
    meta: RequestMeta


def error_reply(
    request_id: RequestId | None,
    code: int,
    message: str,
    data: JsonObject | None = None,
    http_status: int = 200,
) -> Reply:
    """Encode a JSON-RPC error answering ``request_id`` (``None``: the id could not be read)."""
    error = ErrorObject(code=code, message=message, data=UNSET if data is None else data)
    return Reply(ENCODER.encode(ErrorResponse(id=request_id, error=error)), http_status)


def result_reply(
    server_meta: JsonObject, request: Request, result: Result, *, cache: int | None = None
) -> Reply:
    """Encode a successful result; in the 2026-07-28 era add ``resultType`` and ``_meta``.

    Args:
        server_meta: the ``_meta`` every stateless result carries (``serverInfo``).
        request: the request answered.
        result: its result (mutated: the era's fields are set on it).
        cache: ``ttlMs`` (ms) for a cacheable stateless result (lists, reads), with
            ``cacheScope: "private"``; ``None`` for results that are not cached.
    """
    if request.stateless:
        result.result_type = "complete"
        result.meta = server_meta
        if cache is not None:
            result.ttl_ms = cache
            result.cache_scope = "private"
    return Reply(ENCODER.encode(ResultResponse(id=request.id, result=result)))


def utf8_problem(data: bytes) -> Reply | None:
    """The parse error for bytes that are not UTF-8, else ``None`` (RFC 8259 §8.1).

    msgspec validates the UTF-8 of what it decodes into ``str``, not of what it skips or keeps
    as ``Raw``; JSON text must be UTF-8 throughout.
    """
    if data.isascii():
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return error_reply(
            None, codes.PARSE_ERROR, "Parse error: the message is not valid UTF-8", http_status=400
        )
    return None


def parse_problem(data: bytes) -> Reply | None:
    """The parse error (``-32700``, HTTP 400) for bytes that are not one JSON text, else ``None``.

    For the error paths only (it parses the whole message once more, untyped): a message that
    failed typed decoding may also not be JSON at all, and then the parse error is the answer
    (JSON-RPC 2.0 §5.1), not ``-32600``.
    """
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        return error_reply(None, codes.PARSE_ERROR, f"Parse error: {exc}", http_status=400)
    except RecursionError:
        return error_reply(
            None, codes.PARSE_ERROR, "Parse error: JSON nested too deeply", http_status=400
        )
    return None


class _MethodOnly(Struct):
    method: object = None


_BATCH_PEEK: Final = msgspec.json.Decoder(_MethodOnly)


def batch_items(data: bytes, protocol_version: str | None, *, in_batch: bool) -> list[Raw] | Reply:
    """Split a 2025-03-26 JSON-RPC batch into its elements, or the error refusing it whole.

    A batch is refused (``-32600``, HTTP 400) when nested, empty, at any other revision, or when
    it holds ``initialize`` (2025-03-26 ``basic/lifecycle``: it MUST NOT be batched); nothing in
    a refused batch runs.
    """
    try:
        items = msgspec.json.decode(data, type=list[Raw])
    except DECODE_ERRORS as exc:  # pragma: no cover
        return error_reply(None, codes.PARSE_ERROR, f"Parse error: {exc}", http_status=400)
    if in_batch or protocol_version != V2025_03_26:
        return error_reply(
            None,
            codes.INVALID_REQUEST,
            "Invalid Request: JSON-RPC batches are only accepted at protocol revision "
            "2025-03-26; send one message per request",
            http_status=400,
        )
    if not items:
        return error_reply(
            None, codes.INVALID_REQUEST, "Invalid Request: empty batch", http_status=400
        )
    for item in items:
        try:
            method = _BATCH_PEEK.decode(item).method
        except DECODE_ERRORS:
            continue  # answered per element
        if method == "initialize":
            return error_reply(
                None,
                codes.INVALID_REQUEST,
                "Invalid Request: initialize must not be part of a JSON-RPC batch",
                http_status=400,
            )
    return items


def invalid_envelope(data: bytes, exc: msgspec.ValidationError) -> Reply | None:
    """Answer a (non-batch) message whose envelope failed validation.

    Returns:
        ``None`` for a response (e.g. an error with ``"id": null``: never answered), else the
        ``-32600`` error echoing the id when it can be read.
    """
    if _looks_like_response(data):
        return None
    return error_reply(
        _readable_id(data), codes.INVALID_REQUEST, f"Invalid Request: {exc}", http_status=400
    )


def _looks_like_response(data: bytes) -> bool:
    try:
        obj = msgspec.json.decode(data, type=dict[str, Raw])
    except DECODE_ERRORS:
        return False
    return "method" not in obj and ("result" in obj or "error" in obj)


def _readable_id(data: bytes) -> RequestId | None:
    """Best effort: the ``id`` of a message whose envelope failed validation (else ``None``)."""
    try:
        obj = msgspec.json.decode(data, type=dict[str, Raw])
        raw_id = obj.get("id")
        if raw_id is None:
            return None
        return msgspec.json.decode(raw_id, type=RequestId)
    except DECODE_ERRORS:
        return None


def meta_of(params: bytes) -> RequestMeta:
    """The ``_meta`` of params that did not decode for their method (empty when unreadable)."""
    try:
        decoded = msgspec.json.decode(params, type=EmptyParams)
    except DECODE_ERRORS:
        return RequestMeta()
    return decoded.meta if not isinstance(decoded.meta, UnsetType) else RequestMeta()


# -- decode errors that say what would have been accepted ----------------------------------------

MAX_LISTED_VALUES: Final = 12
"""An enumerated field with at most this many accepted values has them listed in the error."""

_INVALID_ENUM = re.compile(r"Invalid enum value .*? - at `\$(?P<path>[^`]*)`")
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `[^`]*`(?: - at `\$(?P<path>[^`]*)`)?")
_PATH_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def _accepted(info: Type) -> list[object] | None:
    """The accepted values of an enumerated type (``None``: not enumerated)."""
    if isinstance(info, Metadata):  # Annotated[..., msgspec.Meta(description=...)]
        return _accepted(info.type)
    if isinstance(info, LiteralType):
        return list(info.values)
    if isinstance(info, EnumType):
        return [member.value for member in info.cls]
    if isinstance(info, UnionType):
        values: list[object] = []
        for member in info.types:
            found = _accepted(member)
            if found is not None:
                values.extend(found)
        return values or None
    return None


def _child(info: Type, field: str | None) -> Type | None:
    """The type one path step below ``info`` (a field name, or ``None`` for an item/value)."""
    if isinstance(info, Metadata):
        return _child(info.type, field)
    if isinstance(info, UnionType):
        for member in info.types:
            found = _child(member, field)
            if found is not None:
                return found
        return None
    if field is not None:
        if isinstance(info, StructType):
            for candidate in info.fields:
                if candidate.encode_name == field:
                    return candidate.type
        if isinstance(info, DictType):
            return info.value_type
        return None
    if isinstance(info, ListType | SetType | FrozenSetType | VarTupleType):
        return info.item_type
    if isinstance(info, TupleType) and info.item_types:
        return info.item_types[0]
    if isinstance(info, DictType):
        return info.value_type
    return None


def _declared(annotation: object) -> list[object] | None:
    """The values of a ``Literal``/``Enum`` annotation in declaration order (else ``None``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _declared(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return list(typing.get_args(annotation))
    if origin is typing.Union or origin is types.UnionType:
        values: list[object] = []
        for member in typing.get_args(annotation):
            found = _declared(member)
            if found is not None:
                values.extend(found)
        return values or None
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [member.value for member in annotation]
    return None


def accepted_values(target: type[Struct], path: str) -> Sequence[object] | None:
    """The accepted values of the enumerated field at msgspec's error ``path`` (``.a[0].b``).

    Returns:
        The values (in declaration order when the path ends at a Struct field), or ``None`` when
        the path does not lead to an enumerated type.
    """
    info: Type | None = type_info(target)
    owner: tuple[type[Struct], str] | None = None
    position = 0
    while info is not None and position < len(path):
        step = _PATH_STEP.match(path, position)
        if step is None:
            return None
        field = step.group(1)
        owner = _field_owner(info, field)
        info = _child(info, field)
        position = step.end()
    if info is None:
        return None
    if owner is not None:
        # msgspec's inspection sorts Literal values; the declaration's order reads better (a
        # severity scale from low to high, say).
        declared = _declared(typing.get_type_hints(owner[0], include_extras=True)[owner[1]])
        if declared is not None:
            return declared
    return _accepted(info)


def _field_owner(info: Type, field: str | None) -> tuple[type[Struct], str] | None:
    """The Struct class and attribute name of the field ``field`` of ``info``, if it is one."""
    if field is None:
        return None
    if isinstance(info, Metadata):
        return _field_owner(info.type, field)
    if isinstance(info, UnionType):
        for member in info.types:
            found = _field_owner(member, field)
            if found is not None:
                return found
        return None
    if isinstance(info, StructType):
        for candidate in info.fields:
            if candidate.encode_name == field:
                return info.cls, candidate.name
    return None


def accepted_fields(target: type[Struct], path: str) -> list[str] | None:
    """The field names (as encoded) of the object at msgspec's error ``path`` (``""``: the root).

    Returns:
        The names in declaration order, or ``None`` when the path does not lead to a Struct.
    """
    info: Type | None = type_info(target)
    position = 0
    while info is not None and position < len(path):
        step = _PATH_STEP.match(path, position)
        if step is None:
            return None
        info = _child(info, step.group(1))
        position = step.end()
    while isinstance(info, Metadata):
        info = info.type
    if isinstance(info, UnionType):
        info = next((t for t in info.types if isinstance(t, StructType)), None)
    if not isinstance(info, StructType):
        return None
    return [candidate.encode_name for candidate in info.fields]


def decode_error_message(exc: Exception, target: type[Struct]) -> str:
    """Msgspec's decode error for ``target``, plus what is accepted where it helps.

    ``Invalid enum value 'error' - at `$.severity``` becomes ``Invalid enum value 'error' - at
    `$.severity` (accepted: 'info', 'warn')`` when there are at most
    :data:`MAX_LISTED_VALUES` of them, else it says how many there are; ``Object contains
    unknown field `id``` gains the object's field names (``(accepted fields: problem_id,
    service)``), so a misnamed argument is named right in the next call.
    """
    text = str(exc)
    unknown = _UNKNOWN_FIELD.fullmatch(text)
    if unknown is not None:
        try:
            fields = accepted_fields(target, unknown.group("path") or "")
        except Exception:  # pragma: no cover - introspection must never turn into a 500
            fields = None
        if not fields:
            return text
        return f"{text} (accepted fields: {', '.join(fields)})"
    match = _INVALID_ENUM.fullmatch(text)
    if match is None:
        return text
    try:
        values = accepted_values(target, match.group("path"))
    except Exception:  # pragma: no cover - introspection must never turn into a 500
        values = None
    if not values:
        return text
    if len(values) > MAX_LISTED_VALUES:
        return f"{text} ({len(values)} accepted values; see the inputSchema)"
    return f"{text} (accepted: {', '.join(repr(value) for value in values)})"
