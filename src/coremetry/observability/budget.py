"""The output budget: no result a model receives is larger than its byte budget.

Every tool, resource and prompt of this package builds a :class:`Shaped` result — a JSON
object plus the lists inside it that may be cut — and hands it to :func:`fit`, the one place
where sizes are enforced (no handler can return a result without passing through it: the
registration wraps every handler).

:func:`fit` guarantees ``len(encode(result)) <= budget_bytes`` for the compact JSON encoding
(the bytes of the text block; ``structuredContent`` carries the same object). It works in this
order, stopping as soon as the result fits:

1. the result as built;
2. every string longer than ``max(1024, budget_bytes // 16)`` characters is cut, ending with the
   marker ``…(+N bytes)`` (N: the UTF-8 bytes cut off; ``strings_shortened: true``) — a
   30,000-character span name is never worth a page;
3. each :class:`Trimmable` list in the order given (the first is cut first), cut to the longest
   prefix that fits — found by binary search over exact encoded sizes (item sizes are summed
   first to bound the search, then each probe encodes the result once). A cut list sets
   ``truncated: true`` and whatever its ``continuation`` returns (typically ``cursor``, the
   opaque token that continues after the last item kept); a list without a continuation (a
   top-N summary) records how many items were left out in ``omitted``, keyed by its path
   (``{"services": 12}``);
4. every string longer than 256, then 64 characters, is shortened the same way;
5. a minimal object that names the problem (``truncated: true``, ``note``) — it always fits
   because budgets below :data:`MIN_BUDGET_BYTES` are refused.

**A page always makes progress.** A list with a continuation (a paged list) is never cut to
zero items while it has any: when its first item alone does not fit, that item is itself
shrunk (:attr:`Trimmable.shrink`, by default :func:`shrink_value`: long strings cut with the
marker, long inner lists cut with ``<key>_omitted`` counts; a metric series downsamples its
points with a note) and returned with ``truncated: true`` and the cursor after it — so a
cursor is never the one that produced the page, and no later item becomes unreachable (the
minimal object of step 5 keeps that item and cursor too).

Cursors (:func:`encode_cursor` / :func:`decode_cursor`) are opaque base64url tokens bound to the
tool and a fingerprint of the query that produced them (:func:`fingerprint`: every argument but
the cursor; the time window resolved on the first page travels in the cursor): a cursor passed
with other arguments, to another tool, garbled, or carrying values no page of ours produces (an
offset past :data:`MAX_CURSOR_OFFSET`, a window outside 64-bit nanoseconds) is a ``bad_args``
error naming ``cursor`` — never a silent first page (``shared/reference/field-failures.md`` B23).
Paged tools page through :mod:`.paging`.

Sources: ``shared/DESIGN.md`` §7 (byte budget, ``truncated``, total, cursor); MCP 2025-11-25
``server/utilities/pagination`` (cursors are opaque).
"""

import base64
import binascii
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from coremetry.mcp import BadArgs

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MAX_CURSOR_OFFSET",
    "MIN_BUDGET_BYTES",
    "MIN_ITEM_BYTES",
    "CursorState",
    "JsonObject",
    "Shaped",
    "Shrink",
    "Trimmable",
    "decode_cursor",
    "encode_cursor",
    "encoded_size",
    "fingerprint",
    "fit",
    "shorten",
    "shrink_value",
]

JsonObject = dict[str, object]
"""A JSON object as built by the handlers (values: JSON-encodable builtins)."""

DEFAULT_BUDGET_BYTES: Final = 16 * 1024
"""Default output budget of one result, in bytes of compact JSON (16 KiB)."""
MIN_BUDGET_BYTES: Final = 1024
"""Smallest accepted budget, in bytes: room for the fallback object and a useful page."""
MIN_ITEM_BYTES: Final = 128
"""Smallest room, in bytes, a page's one shrunk item is given (:func:`shrink_value` fits
anything into 48 bytes, so a shrunk item always fits a budget of :data:`MIN_BUDGET_BYTES`)."""
MAX_CURSOR_OFFSET: Final = 10_000
"""Largest ``offset`` a cursor of ours carries (items of one store page or of one analysed
trace: ``MAX_LIMIT`` and ``MAX_TRACE_SPANS`` are both 10,000)."""

_ENCODER: Final = msgspec.json.Encoder()
_ELLIPSIS: Final = "…"
_MAX_UNIX_NANO: Final = 2**63 - 1

Path = tuple[str | int, ...]
"""Where a list sits inside a result: keys and indices from the top."""

Shrink = Callable[[object, int], object]
"""Shrinks one item to (at most) a number of bytes of compact JSON: ``shrink(item, max_bytes)``."""


def encoded_size(value: object) -> int:
    """Bytes of ``value`` as compact JSON (the encoding the dispatcher sends)."""
    return len(_ENCODER.encode(value))


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, ending with ``…(+N bytes)`` when cut.

    ``N`` is the number of UTF-8 bytes cut off, so a reader knows how much is missing. When
    ``max_chars`` is too small for that marker, the cut text ends with a bare ``…``.
    """
    if len(text) <= max_chars:
        return text
    keep = max_chars
    while True:
        cut = len(text[keep:].encode("utf-8", "surrogatepass"))
        marker = f"{_ELLIPSIS}(+{cut} bytes)"
        if keep + len(marker) <= max_chars:
            return text[:keep] + marker
        keep = max_chars - len(marker)
        if keep < 1:
            return text[: max(0, max_chars - 1)] + _ELLIPSIS


def _shorten_strings(value: object, max_chars: int) -> object:
    if isinstance(value, str):
        return shorten(value, max_chars)
    if isinstance(value, list):
        return [_shorten_strings(v, max_chars) for v in value]
    if isinstance(value, dict):
        return {str(k): _shorten_strings(v, max_chars) for k, v in value.items()}
    return value


def _cut_lists(value: object, keep_ratio: float) -> object:
    """Every list inside ``value`` cut to its first ``ceil(len * keep_ratio)`` items (>= 1).

    A list held by a dict key ``k`` that loses items gets a sibling ``k_omitted`` with the count.
    """
    if isinstance(value, list):
        kept = max(1, math.ceil(len(value) * keep_ratio))
        return [_cut_lists(v, keep_ratio) for v in value[:kept]]
    if isinstance(value, dict):
        out: JsonObject = {}
        for key, item in value.items():
            new = _cut_lists(item, keep_ratio)
            out[str(key)] = new
            if isinstance(item, list) and isinstance(new, list) and len(new) < len(item):
                out[f"{key}_omitted"] = len(item) - len(new)
        return out
    return value


def shrink_value(value: object, max_bytes: int) -> object:
    """``value`` made to fit ``max_bytes`` of compact JSON, keeping as much as it can.

    In order, stopping when it fits: strings cut at 1,024, 256, 64, then 16 characters (with
    the ``…(+N bytes)`` marker of :func:`shorten`); inner lists cut to 1/2, 1/4, … of their
    items (a dict records ``<key>_omitted``); a dict's trailing keys dropped (``keys_omitted``);
    finally a placeholder string ``"…(item of N bytes not shown)"``. The result fits whenever
    ``max_bytes >= 48``.

    Args:
        value: a JSON-encodable value (not modified).
        max_bytes: the room, in bytes.

    Returns:
        The value, or a smaller version of it.
    """
    if encoded_size(value) <= max_bytes:
        return value
    original_size = encoded_size(value)
    current = value
    for max_chars in (1024, 256, 64, 16):
        current = _shorten_strings(current, max_chars)
        if encoded_size(current) <= max_bytes:
            return current
    ratio = 0.5
    while ratio > 1e-6:
        cut = _cut_lists(current, ratio)
        if encoded_size(cut) <= max_bytes:
            return cut
        ratio /= 2
    current = _cut_lists(current, 0.0)
    if isinstance(current, dict):
        kept: JsonObject = {}
        items = list(current.items())
        for index, (key, item) in enumerate(items):
            trial = {**kept, key: item, "keys_omitted": len(items) - index - 1}
            if encoded_size(trial) > max_bytes:
                break
            kept[key] = item
        if kept:
            kept["keys_omitted"] = len(items) - len(kept)
            if encoded_size(kept) <= max_bytes:
                return kept
    return f"{_ELLIPSIS}(item of {original_size} bytes not shown)"


@dataclass(frozen=True)
class Trimmable:
    """A list inside a result that :func:`fit` may cut from the end.

    Attributes:
        path: keys/indices from the top of the result to the list.
        continuation: given how many items were kept, the top-level keys to set so the caller
            can continue (e.g. ``{"cursor": "..."}``); ``None`` when there is no way to continue
            (the list is a top-N summary and the total is shown instead).
        shrink: how to shrink one item of a paged list that does not fit alone (default
            :func:`shrink_value`).
    """

    path: Path
    continuation: Callable[[int], JsonObject] | None = None
    shrink: Shrink | None = None


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
    """Cut the list at ``spec.path`` to the longest prefix that fits; ``True`` if it fits.

    A paged list (one with a continuation) keeps at least one item: its first, shrunk to fit
    when it does not fit as it is (module docstring, "A page always makes progress").
    """
    items = _get_list(body, spec.path)
    if items is None:
        return encoded_size(body) <= budget
    full = list(items)
    count = len(full)
    shrunk = False

    label = ".".join(str(step) for step in spec.path)

    def apply(kept: int) -> None:
        _set_list(body, spec.path, full[:kept])
        omitted = body.get("omitted")
        if isinstance(omitted, dict):
            omitted.pop(label, None)
            if not omitted:
                body.pop("omitted")
        if kept < count or shrunk:
            body["truncated"] = True
        if kept < count:
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
    if low == 0 and count and spec.continuation is not None:
        low = 1
        apply(1)
        excess = encoded_size(body) - budget
        if excess > 0:
            first = full[0]
            first_size = encoded_size(first)
            allowance = max(MIN_ITEM_BYTES, first_size - excess)
            shrink = spec.shrink or shrink_value
            shrunk = True
            for _attempt in range(4):
                full[0] = shrink(first, allowance)
                apply(1)
                excess = encoded_size(body) - budget
                if excess <= 0 or allowance == MIN_ITEM_BYTES:
                    break
                allowance = max(MIN_ITEM_BYTES, allowance - excess)
    apply(low)
    return encoded_size(body) <= budget


def _fallback(body: JsonObject, trimmable: Sequence[Trimmable], budget: int) -> JsonObject:
    """The minimal object of step 5, still making progress on a top-level paged list."""
    note = (
        f"the result did not fit in the {budget}-byte output budget even after cutting its "
        "lists; narrow the query (shorter window, more filters, smaller limit)"
    )
    minimal: JsonObject = {"truncated": True, "note": note}
    for spec in trimmable:
        if spec.continuation is None or len(spec.path) != 1:
            continue
        items = _get_list(body, spec.path)
        if not items:
            continue
        minimal.update(spec.continuation(1))
        key = str(spec.path[0])
        minimal[key] = []
        room = budget - encoded_size(minimal) - 1
        minimal[key] = [shrink_value(items[0], room)]
        minimal["note"] = note + "; one item is shown, the cursor continues after it"
        if encoded_size(minimal) > budget:  # pragma: no cover - shrink_value fits 48 bytes
            minimal[key] = []
        break
    return minimal


def fit(shaped: Shaped, budget_bytes: int) -> JsonObject:
    """Return the result cut to at most ``budget_bytes`` of compact JSON (module docstring).

    Args:
        shaped: the result and its trimmable lists; ``shaped.body`` is modified in place.
        budget_bytes: the budget, at least :data:`MIN_BUDGET_BYTES`.

    Returns:
        A JSON object whose compact encoding is at most ``budget_bytes`` bytes; a paged list
        that had items keeps at least one (shrunk if need be) with its continuation.

    Raises:
        ValueError: ``budget_bytes`` is below :data:`MIN_BUDGET_BYTES`.
    """
    if budget_bytes < MIN_BUDGET_BYTES:
        raise ValueError(f"budget_bytes must be at least {MIN_BUDGET_BYTES}")
    body = shaped.body
    if encoded_size(body) <= budget_bytes:
        return body
    long_chars = max(1024, budget_bytes // 16)
    shortened = _shorten_strings(body, long_chars)
    assert isinstance(shortened, dict)
    if shortened != body:
        body = shortened
        body["strings_shortened"] = True
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
    return _fallback(body, shaped.trimmable, budget_bytes)


# ---- cursors ------------------------------------------------------------------------------


class CursorState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a cursor carries (opaque to the model).

    Attributes:
        tool: the tool (or resource family) that issued it.
        query: :func:`fingerprint` of the query it continues.
        offset: items already shown (for lists paged by us), ``0 .. MAX_CURSOR_OFFSET``.
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
_CANONICAL: Final = msgspec.json.Encoder(order="sorted")
_CURSOR_PREFIX: Final = "cm1."


def fingerprint(args: msgspec.Struct) -> str:
    """A short stable digest of a query: every field of its argument Struct but ``cursor``.

    Every field counts, so no argument can be forgotten: a cursor never continues a call that
    differs in any of them. Object keys and Struct fields are encoded in sorted order, so the
    same arguments in another key order (``attributes``, ``labels``) are the same query.

    Returns:
        16 hex characters (the first 64 bits of a SHA-256).
    """
    fields = msgspec.structs.asdict(args)
    fields.pop("cursor", None)
    return hashlib.sha256(_CANONICAL.encode(fields)).hexdigest()[:16]


def encode_cursor(state: CursorState) -> str:
    """Encode a cursor as an opaque URL-safe token."""
    raw = base64.urlsafe_b64encode(_ENCODER.encode(state)).decode("ascii").rstrip("=")
    return _CURSOR_PREFIX + raw


def _in_range(value: int | None) -> bool:
    return value is None or 0 <= value <= _MAX_UNIX_NANO


def decode_cursor(token: str, *, tool: str, query: str) -> CursorState:
    """Decode a cursor this package issued for ``tool`` and the query ``query``.

    Raises:
        BadArgs: garbled, issued by another tool, issued for other arguments, or carrying
            values no page produces (offset outside ``0 .. MAX_CURSOR_OFFSET``, window times
            outside 64-bit unix nanoseconds or inverted) — always naming ``cursor``.
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
    if not 0 <= state.offset <= MAX_CURSOR_OFFSET:
        raise BadArgs(problem)
    if not (_in_range(state.start_unix_nano) and _in_range(state.end_unix_nano)):
        raise BadArgs(problem)
    if (
        state.start_unix_nano is not None
        and state.end_unix_nano is not None
        and state.end_unix_nano <= state.start_unix_nano
    ):
        raise BadArgs(problem)
    return state
