"""Cursors of the ``*/list`` methods (``server/utilities/pagination``).

Contract: a cursor is opaque to the client (``base64url("c1:<list>:<offset>")``); it is only
valid for the list that issued it and only while it points inside that list
(``0 < offset <= total``). Anything else — another list's cursor, garbage, an offset past the
end — is ``-32602`` naming the list. ``null``/absent is the first page; the last page carries
no ``nextCursor``.
"""

import base64
import binascii
from collections.abc import Sequence
from typing import Final, TypeVar

from msgspec import UNSET, UnsetType

from . import codes
from .framing import ProtocolError

_CURSOR_PREFIX: Final = "c1:"

_ItemT = TypeVar("_ItemT")


def encode_cursor(kind: str, offset: int) -> str:
    """The cursor of the page of list ``kind`` starting at ``offset``."""
    raw = f"{_CURSOR_PREFIX}{kind}:{offset}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(kind: str, cursor: str | None, total: int) -> int:
    """Offset of an opaque cursor for list ``kind``; ``None`` is the first page.

    Raises:
        ProtocolError: ``-32602`` for a cursor we did not issue for this list.
    """
    if cursor is None:
        return 0
    offset = -1
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
        prefix, cursor_kind, offset_text = text.rsplit(":", 2)
        if prefix + ":" == _CURSOR_PREFIX and cursor_kind == kind:
            offset = int(offset_text)
    except (ValueError, UnicodeError, binascii.Error):
        offset = -1
    if not 0 < offset <= total:
        raise ProtocolError(codes.INVALID_PARAMS, f"Invalid cursor for {kind}/list: {cursor!r}")
    return offset


def page(
    kind: str, items: Sequence[_ItemT], cursor: str | None, page_size: int
) -> tuple[Sequence[_ItemT], str | UnsetType]:
    """The page of ``items`` that ``cursor`` points at, and the next page's cursor (if any).

    Raises:
        ProtocolError: ``-32602`` for a cursor we did not issue for this list.
    """
    start = decode_cursor(kind, cursor, len(items))
    end = min(start + page_size, len(items))
    return items[start:end], encode_cursor(kind, end) if end < len(items) else UNSET
