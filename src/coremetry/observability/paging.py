"""One paged list: the cursor in, the page shown, the cursor out.

Every windowed list tool (``list_services``, ``get_service_map``, ``search_traces``,
``search_logs``, ``list_metrics``, ``query_metric``, ``list_deploys``, ``list_problems``,
``list_anomalies``) pages the same way:

1. :meth:`Pager.start`: the query's :func:`~.budget.fingerprint` (every argument but
   ``cursor``), then the window — resolved from the arguments on the first page, taken from the
   cursor on the next ones (a cursor continues exactly the window of its first page, even when
   ``range`` is relative and time has passed) — and the offset the cursor carries. A cursor of
   another tool or of other arguments is ``bad_args`` naming ``cursor``
   (:func:`~.budget.decode_cursor`);
2. :meth:`Pager.page` (items paged by us) or :meth:`Pager.store_page` (items the store pages
   with its own cursor): the slice ``offset .. offset + limit``, whether more follow, and the
   continuation that makes the cursor after the ``k``-th shown item — the same function the
   output budget (:func:`~.budget.fit`) calls when it cuts the list further.

The handler keeps the shape of its result: it writes ``truncated`` (:attr:`Page.more`) where
its result has it, calls :meth:`Page.add_cursor` and hands :meth:`Page.trimmable` to its
:class:`~.budget.Shaped` result.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from coremetry.mcp import BadArgs
from coremetry.store import MAX_LIMIT, TimeRange

from .budget import (
    CursorState,
    JsonObject,
    Shrink,
    Trimmable,
    decode_cursor,
    encode_cursor,
    fingerprint,
)
from .ranges import ResolvedRange

__all__ = ["Page", "Pager"]

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """The items one call shows and how to continue after them.

    Attributes:
        items: the items of this page (at most ``limit``).
        more: whether items follow this page (the result's ``truncated``).
        continuation: given how many of :attr:`items` were kept, ``{"cursor": ...}`` continuing
            after the last kept one.
    """

    items: list[T]
    more: bool
    continuation: Callable[[int], JsonObject]

    def add_cursor(self, body: JsonObject) -> None:
        """Put ``cursor`` (after every item of the page) into ``body`` when :attr:`more`."""
        if self.more:
            body.update(self.continuation(len(self.items)))

    def trimmable(self, key: str, shrink: Shrink | None = None) -> Trimmable:
        """The page's list at the top-level ``key`` of the result, cut with this continuation."""
        return Trimmable((key,), self.continuation, shrink)


@dataclass(frozen=True)
class Pager:
    """Where one call of a paged tool starts (module docstring, step 1).

    Attributes:
        tool: the tool name the cursors are bound to.
        query: the fingerprint of the call's arguments.
        window: the call's window (from the cursor when continuing).
        state: the decoded cursor; ``None`` on a first page.
    """

    tool: str
    query: str
    window: ResolvedRange
    state: CursorState | None

    @classmethod
    def start(
        cls,
        tool: str,
        args: msgspec.Struct,
        cursor: str | None,
        first_window: Callable[[], ResolvedRange],
    ) -> "Pager":
        """Start a call of ``tool`` with ``args`` (its ``cursor`` given apart).

        Args:
            tool: the tool name.
            args: the call's arguments: every field but ``cursor`` is the query (normalise a
                field first, with :func:`msgspec.structs.replace`, where two spellings mean the
                same query).
            cursor: the ``cursor`` argument, ``None`` for a first page.
            first_window: resolves the window of a first page (not called when continuing).

        Raises:
            BadArgs: the cursor is not one ``tool`` returned for these arguments (names
                ``cursor``).
        """
        query = fingerprint(args)
        if cursor is None:
            return cls(tool, query, first_window(), None)
        state = decode_cursor(cursor, tool=tool, query=query)
        if state.start_unix_nano is None or state.end_unix_nano is None:
            raise BadArgs(f"cursor: not a cursor that {tool} returned")
        window = ResolvedRange(
            time_range=TimeRange(
                start_unix_nano=state.start_unix_nano, end_unix_nano=state.end_unix_nano
            ),
            explicit=True,
        )
        return cls(tool, query, window, state)

    @property
    def first(self) -> bool:
        """Whether this is a first page (no cursor was given)."""
        return self.state is None

    @property
    def offset(self) -> int:
        """Items already shown: where this page starts in the list (0 on a first page)."""
        return self.state.offset if self.state is not None else 0

    @property
    def store_cursor(self) -> str | None:
        """The store's cursor of the store page :attr:`offset` counts into, if any."""
        return self.state.store_cursor if self.state is not None else None

    def fetch_limit(self, limit: int, *, lookahead: int = 0) -> int:
        """How many items to ask the store for: through this page (plus ``lookahead``)."""
        return min(MAX_LIMIT, self.offset + limit + lookahead)

    def _cursor(self, offset: int, store_cursor: str | None) -> JsonObject:
        state = CursorState(
            tool=self.tool,
            query=self.query,
            offset=offset,
            store_cursor=store_cursor,
            start_unix_nano=self.window.start_unix_nano,
            end_unix_nano=self.window.end_unix_nano,
        )
        return {"cursor": encode_cursor(state)}

    def page(self, items: Sequence[T], limit: int, *, total: int | None = None) -> Page[T]:
        """This call's page of a list we page ourselves.

        Args:
            items: the list from its start (or at least through :attr:`offset` + ``limit``,
                plus one when ``total`` is not given, to tell whether more follow).
            limit: the most items a page shows.
            total: the list's full length when ``items`` is only its beginning.
        """
        shown = list(items[self.offset : self.offset + limit])
        end = self.offset + len(shown)
        more = end < (len(items) if total is None else total)
        start = self.offset

        def continuation(kept: int) -> JsonObject:
            return self._cursor(start + kept, None)

        return Page(shown, more, continuation)

    def store_page(self, items: Sequence[T], limit: int, next_cursor: str | None) -> Page[T]:
        """This call's page of a store page fetched with :attr:`store_cursor`.

        Args:
            items: the store page (read from :attr:`store_cursor`).
            limit: the most items a page shows.
            next_cursor: the store's cursor after ``items`` (``None``: the list ends there).

        The cursor out continues inside ``items`` while some are left, else at
        ``next_cursor``.
        """
        shown = list(items[self.offset : self.offset + limit])
        more = next_cursor is not None or self.offset + len(shown) < len(items)
        start, here, count = self.offset, self.store_cursor, len(items)

        def continuation(kept: int) -> JsonObject:
            if start + kept < count or next_cursor is None:
                return self._cursor(start + kept, here)
            return self._cursor(0, next_cursor)

        return Page(shown, more, continuation)
