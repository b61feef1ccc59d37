"""Opaque keyset cursors: the last item's sort key, bound to the query that produced it.

A cursor is URL-safe base64 (no padding) of msgspec JSON ``["ch", query_hash, [key...]]``:
``query_hash`` is 8 bytes of BLAKE2b (hex) over the method name and every argument that shapes
the result except ``limit`` (pages may change size); ``key`` is the sort key of the last item
returned, and the next page continues strictly after it. A cursor from another query, another
method, another backend, or that does not decode is ``QueryRejected("cursor", ...)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Final, TypeAlias

import msgspec

from coremetry.store.errors import QueryRejected

__all__ = [
    "CursorKey",
    "decode_cursor",
    "encode_cursor",
    "query_hash",
]

CursorKey: TypeAlias = tuple[int | str, ...]
"""A sort key: ints (times, hashes, a score's IEEE-754 bits) and strings (ids)."""

_TAG: Final = "ch"
_MAX_CURSOR_CHARS: Final = 1024
_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(tuple[str, str, list[int | str]])
_MSGPACK: Final = msgspec.msgpack.Encoder(order="sorted")


def query_hash(method: str, *args: object) -> str:
    """Hex digest of ``method`` and the result-shaping arguments (msgspec-encodable)."""
    return hashlib.blake2b(_MSGPACK.encode((method, args)), digest_size=8).hexdigest()


def encode_cursor(qhash: str, key: CursorKey) -> str:
    """The cursor continuing after ``key`` for the query ``qhash``."""
    raw = _ENCODER.encode((_TAG, qhash, list(key)))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(
    cursor: object, qhash: str, types: tuple[type[int] | type[str], ...]
) -> CursorKey:
    """The sort key inside ``cursor``, checked against the query and the key's shape.

    Raises:
        QueryRejected: ``field == "cursor"``: not a cursor of this store, or of another query.
    """
    if not isinstance(cursor, str):
        raise QueryRejected("cursor", "must be a string returned by a previous page")
    if len(cursor) > _MAX_CURSOR_CHARS:
        raise QueryRejected("cursor", "is not a cursor returned by this query (too long)")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        tag, found_hash, key = _DECODER.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise QueryRejected("cursor", "is not a cursor returned by this store") from None
    if tag != _TAG:
        raise QueryRejected("cursor", "is not a cursor returned by this store")
    if found_hash != qhash:
        raise QueryRejected(
            "cursor",
            "belongs to another query: pass it back with the same arguments, "
            "or start again without a cursor",
        )
    if len(key) != len(types) or any(
        type(value) is not expected for value, expected in zip(key, types, strict=True)
    ):
        raise QueryRejected("cursor", "is not a cursor returned by this query")
    return tuple(key)
