"""The output budget: no result a model receives is larger than its byte budget.

Every tool, resource and prompt of this package builds a :class:`Shaped` result — a JSON
object plus the lists inside it that may be cut — and hands it to :func:`fit`, the one place
where sizes are enforced (no handler can return a result without passing through it: the
registration wraps every handler).

:func:`fit` guarantees ``len(encode(result)) <= budget_bytes`` for the compact JSON encoding
(the bytes of the text block; ``structuredContent`` carries the same object). It works in this
order, stopping as soon as the result fits:

1. the result as built;
2. each :class:`Trimmable` list in the order given (the first is cut first), cut to the longest
   prefix that fits — found by binary search over exact encoded sizes (item sizes are summed
   first to bound the search, then each probe encodes the result once). A cut list sets
   ``truncated: true`` and whatever its ``continuation`` returns (typically ``cursor``, the
   opaque token that continues after the last item kept); a list without a continuation (a
   top-N summary) records how many items were left out in ``omitted``, keyed by its path
   (``{"services": 12}``);
3. every string longer than 256, then 64 characters, is shortened with a ``…`` marker
   (``strings_shortened: true``);
4. a minimal object that names the problem (``truncated: true``, ``note``) — it always fits
   because budgets below :data:`MIN_BUDGET_BYTES` are refused.

Cursors (:func:`encode_cursor` / :func:`decode_cursor`) are opaque base64url tokens bound to the
tool and a fingerprint of the query that produced them (the time window resolved on the first
page included): a cursor passed with other arguments, to another tool, or garbled is a
``bad_args`` error naming ``cursor`` — never a silent first page (``shared/reference/
field-failures.md`` B23).

Sources: ``shared/DESIGN.md`` §7 (byte budget, ``truncated``, total, cursor); MCP 2025-11-25
``server/utilities/pagination`` (cursors are opaque).
"""

import base64
import binascii
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from coremetry.mcp import BadArgs

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MIN_BUDGET_BYTES",
    "CursorState",
    "JsonObject",
    "Shaped",
    "Trimmable",
    "decode_cursor",
    "encode_cursor",
    "encoded_size",
    "fingerprint",
    "fit",
    "shorten",
]

JsonObject = dict[str, object]
"""A JSON object as built by the handlers (values: JSON-encodable builtins)."""

DEFAULT_BUDGET_BYTES: Final = 16 * 1024
"""Default output budget of one result, in bytes of compact JSON (16 KiB)."""
MIN_BUDGET_BYTES: Final = 1024
"""Smallest accepted budget, in bytes: room for the fallback object and a useful page."""

_ENCODER: Final = msgspec.json.Encoder()
_ELLIPSIS: Final = "…"

Path = tuple[str | int, ...]
"""Where a list sits inside a result: keys and indices from the top."""


def encoded_size(value: object) -> int:
    """Bytes of ``value`` as compact JSON (the encoding the dispatcher sends)."""
    return len(_ENCODER.encode(value))


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, the last being ``…`` when cut."""
    if len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - 1)] + _ELLIPSIS


@dataclass(frozen=True)
class Trimmable:
    """A list inside a result that :func:`fit` may cut from the end.

    Attributes:
        path: keys/indices from the top of the result to the list.
        continuation: given how many items were kept, the top-level keys to set so the caller
            can continue (e.g. ``{"cursor": "..."}``); ``None`` when there is no way to continue
            (the list is a top-N summary and the total is shown instead).
    """

    path: Path
    continuation: Callable[[int], JsonObject] | None = None


@dataclass
class Shaped:
    """A result before the budget is applied.

    Attributes:
        body: the JSON object. Lists named in ``trimmable`` must be Python lists.
        trimmable: the lists that may be cut, least important first.
    """

    body: JsonObject
    trimmable: Sequence[Trimmable] = field(default_factory=tuple)


def _parent(body: JsonObject, path: Path) -> tuple[dict[str, object] | list[object], str | int]:
    node: object = body
    for step in path[:-1]:
        if isinstance(node, dict) and isinstance(step, str):
            node = node[step]
            continue
        if isinstance(node, list) and isinstance(step, int):
            node = node[step]
            continue
        raise KeyError(step)
    if not isinstance(node, dict | list):
        raise KeyError(path[-1])
    return node, path[-1]


def _get_list(body: JsonObject, path: Path) -> list[object] | None:
    try:
        parent, key = _parent(body, path)
    except (KeyError, IndexError):
        return None
    value: object
    if isinstance(parent, dict):
        value = parent.get(str(key))
    elif isinstance(key, int) and -len(parent) <= key < len(parent):
        value = parent[key]
    else:
        value = None
    return value if isinstance(value, list) else None


def _set_list(body: JsonObject, path: Path, items: list[object]) -> None:
    parent, key = _parent(body, path)
    if isinstance(parent, dict):
        parent[str(key)] = items
    else:
        parent[int(key)] = items


def _trim_one(body: JsonObject, spec: Trimmable, budget: int) -> bool:
    """Cut the list at ``spec.path`` to the longest prefix that fits; ``True`` if it fits."""
    items = _get_list(body, spec.path)
    if items is None:
        return encoded_size(body) <= budget
    full = list(items)
    count = len(full)

    label = ".".join(str(step) for step in spec.path)

    def apply(kept: int) -> None:
        _set_list(body, spec.path, full[:kept])
        omitted = body.get("omitted")
        if isinstance(omitted, dict):
            omitted.pop(label, None)
            if not omitted:
                body.pop("omitted")
        if kept < count:
            body["truncated"] = True
            if spec.continuation is not None:
                body.update(spec.continuation(kept))
            else:
                recorded = body.setdefault("omitted", {})
                if isinstance(recorded, dict):
                    recorded[label] = count - kept

    # Upper bound from item sizes alone: the kept items (plus commas) can never exceed the budget.
    upper = 0
    running = 0
    for item in full:
        running += encoded_size(item) + 1
        if running > budget:
            break
        upper += 1
    low, high = 0, min(count, upper)
    while low < high:
        middle = (low + high + 1) // 2
        apply(middle)
        if encoded_size(body) <= budget:
            low = middle
        else:
            high = middle - 1
    apply(low)
    return encoded_size(body) <= budget


def _shorten_strings(value: object, max_chars: int) -> object:
    if isinstance(value, str):
        return shorten(value, max_chars)
    if isinstance(value, list):
        return [_shorten_strings(v, max_chars) for v in value]
    if isinstance(value, dict):
        return {str(k): _shorten_strings(v, max_chars) for k, v in value.items()}
    return value


def fit(shaped: Shaped, budget_bytes: int) -> JsonObject:
    """Return the result cut to at most ``budget_bytes`` of compact JSON (module docstring).

    Args:
        shaped: the result and its trimmable lists; ``shaped.body`` is modified in place.
        budget_bytes: the budget, at least :data:`MIN_BUDGET_BYTES`.

    Returns:
        A JSON object whose compact encoding is at most ``budget_bytes`` bytes.

    Raises:
        ValueError: ``budget_bytes`` is below :data:`MIN_BUDGET_BYTES`.
    """
    if budget_bytes < MIN_BUDGET_BYTES:
        raise ValueError(f"budget_bytes must be at least {MIN_BUDGET_BYTES}")
    body = shaped.body
    if encoded_size(body) <= budget_bytes:
        return body
    for spec in shaped.trimmable:
        if _trim_one(body, spec, budget_bytes):
            return body
    for max_chars in (256, 64):
        shortened = _shorten_strings(body, max_chars)
        assert isinstance(shortened, dict)
        shortened["strings_shortened"] = True
        if encoded_size(shortened) <= budget_bytes:
            return shortened
    return {
        "truncated": True,
        "note": (
            f"the result did not fit in the {budget_bytes}-byte output budget even after "
            "cutting its lists; narrow the query (shorter window, more filters, smaller limit)"
        ),
    }


# ---- cursors ------------------------------------------------------------------------------


class CursorState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a cursor carries (opaque to the model).

    Attributes:
        tool: the tool (or resource family) that issued it.
        query: :func:`fingerprint` of the query it continues.
        offset: items already shown (for lists paged by us).
        store_cursor: the store's own cursor for the page ``offset`` counts into, if any.
        start_unix_nano: the resolved window start of the first page.
        end_unix_nano: the resolved window end of the first page.
    """

    tool: str
    query: str
    offset: int = 0
    store_cursor: str | None = None
    start_unix_nano: int | None = None
    end_unix_nano: int | None = None


_CURSOR_DECODER: Final = msgspec.json.Decoder(CursorState)
_CURSOR_PREFIX: Final = "cm1."


def fingerprint(*parts: object) -> str:
    """A short stable digest of a query's arguments (16 hex characters)."""
    return hashlib.sha256(_ENCODER.encode(list(parts))).hexdigest()[:16]


def encode_cursor(state: CursorState) -> str:
    """Encode a cursor as an opaque URL-safe token."""
    raw = base64.urlsafe_b64encode(_ENCODER.encode(state)).decode("ascii").rstrip("=")
    return _CURSOR_PREFIX + raw


def decode_cursor(token: str, *, tool: str, query: str) -> CursorState:
    """Decode a cursor this package issued for ``tool`` and the query ``query``.

    Raises:
        BadArgs: garbled, issued by another tool, or issued for other arguments (naming
            ``cursor``).
    """
    problem = (
        f"cursor: not a cursor that {tool} returned; pass the cursor from the previous "
        "result unchanged, with the same arguments, or omit it for the first page"
    )
    if not token.startswith(_CURSOR_PREFIX) or len(token) > 4096:
        raise BadArgs(problem)
    raw = token[len(_CURSOR_PREFIX) :]
    try:
        decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        state = _CURSOR_DECODER.decode(decoded)
    except (binascii.Error, ValueError, msgspec.DecodeError, msgspec.ValidationError):
        raise BadArgs(problem) from None
    if state.tool != tool:
        raise BadArgs(problem)
    if state.query != query:
        raise BadArgs(
            f"cursor: it belongs to a {tool} call with other arguments; repeat the same "
            "arguments with it, or omit it to start over"
        )
    if state.offset < 0:
        raise BadArgs(problem)
    return state
