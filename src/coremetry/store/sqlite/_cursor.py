"""Opaque keyset cursors: the last item's sort key, bound to the query that produced it.

A cursor is URL-safe base64 (no padding) of msgspec JSON ``[query_hash, [key...]]``:
``query_hash`` is 8 bytes of BLAKE2b (hex) over the method name and every argument that
shapes the result except ``limit`` (pages may change size), and ``key`` the sort key of the
last item returned. The next page continues strictly after that key, so paging visits every
item once while the stored data do not change. A cursor from another query, from another
method, or that does not decode is ``QueryRejected("cursor", ...)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Final, TypeAlias

import msgspec

from coremetry.store.errors import QueryRejected

__all__ = ["CursorKey", "decode_cursor", "encode_cursor", "query_hash"]

CursorKey: TypeAlias = tuple[int | float | str, ...]
"""A sort key: ints (times, row ids), floats (BM25 scores), strings (ids)."""

_MAX_CURSOR_CHARS: Final = 1024
_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(tuple[str, list[int | float | str]])
_MSGPACK: Final = msgspec.msgpack.Encoder(order="sorted")


def query_hash(method: str, *args: object) -> str:
    """Hex digest of ``method`` and the result-shaping arguments (msgspec-encodable)."""
    return hashlib.blake2b(_MSGPACK.encode((method, args)), digest_size=8).hexdigest()


def encode_cursor(qhash: str, key: CursorKey) -> str:
    """The cursor continuing after ``key`` for the query ``qhash``."""
    return base64.urlsafe_b64encode(_ENCODER.encode((qhash, list(key)))).rstrip(b"=").decode()


def decode_cursor(
    cursor: str, qhash: str, types: tuple[type[int] | type[float] | type[str], ...]
) -> CursorKey:
    """The sort key inside ``cursor``, checked against the query and the key's shape.

    Args:
        cursor: as returned in ``Page.next_cursor``.
        qhash: :func:`query_hash` of the query now asked.
        types: the expected type of each key element (``float`` accepts ints too).

    Raises:
        QueryRejected: ``field == "cursor"``: not a cursor of this store, or of another query.
    """
    if len(cursor) > _MAX_CURSOR_CHARS:
        raise QueryRejected("cursor", "is not a cursor returned by this query (too long)")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found_hash, key = _DECODER.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise QueryRejected("cursor", "is not a cursor returned by this store") from None
    if found_hash != qhash:
        raise QueryRejected(
            "cursor",
            "belongs to another query: pass it back with the same arguments, "
            "or start again without a cursor",
        )
    if len(key) != len(types):
        raise QueryRejected("cursor", "is not a cursor returned by this query")
    checked: list[int | float | str] = []
    for value, expected in zip(key, types, strict=True):
        if expected is float and type(value) is int:
            value = float(value)
        if type(value) is not expected:
            raise QueryRejected("cursor", "is not a cursor returned by this query")
        checked.append(value)
    return tuple(checked)
