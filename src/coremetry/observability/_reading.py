"""Store reads shared by the tools, resources and prompts (bounded, cancellable).

Every function here awaits the store directly, so it runs under the caller's cancel scope (the
dispatcher's per-call deadline): when the deadline passes, the store call is cancelled and the
store interrupts its query (``TelemetryStore`` contract).
"""

from typing import Final

import msgspec

from coremetry.mcp import BadArgs
from coremetry.store import (
    LogQuery,
    Span,
    TelemetryStore,
    TimeRange,
    TraceQuery,
    normalize_trace_id,
)

from .ranges import ResolvedRange, rfc3339

__all__ = [
    "MAX_TRACE_SPANS",
    "absent_data_note",
    "fetch_trace_spans",
    "parse_trace_id",
    "stored_extent",
]

MAX_TRACE_SPANS: Final = 10_000
"""Most spans of one trace read for analysis; a larger trace is analysed on its first 10,000
spans by start time, and the result says so."""

_PAGE: Final = 2_000


def parse_trace_id(raw: str) -> str:
    """Normalise a trace id from a model: 32 (or 16, left-padded) hex characters.

    Raises:
        BadArgs: not hex, too long, or all zeros (naming ``trace_id``).
    """
    try:
        trace_id = normalize_trace_id(raw)
    except ValueError:
        trace_id = ""
    if not trace_id:
        raise BadArgs(
            f"trace_id: {raw[:48]!r} is not a trace id; expected 32 hex characters as returned "
            "by search_traces or search_logs"
        )
    return trace_id


async def fetch_trace_spans(
    store: TelemetryStore, trace_id: str, *, max_spans: int = MAX_TRACE_SPANS
) -> tuple[list[Span], int]:
    """Read the spans of one trace, following the store's pages, up to ``max_spans``.

    Returns:
        The spans in start order, and the trace's total span count (``>= len(spans)``; equal
        unless the trace is larger than ``max_spans``). An unknown trace gives ``([], 0)``.

    Raises:
        QueryRejected, StoreUnavailable, StoreClosed: from the store.
    """
    spans: list[Span] = []
    cursor: str | None = None
    total = 0
    while len(spans) < max_spans:
        page = await store.get_trace(
            trace_id, limit=min(_PAGE, max_spans - len(spans)), cursor=cursor
        )
        spans.extend(page.items)
        total = page.total if page.total is not None else len(spans)
        cursor = page.next_cursor
        if cursor is None or not page.items:
            break
    return spans, max(total, len(spans))


async def stored_extent(store: TelemetryStore) -> TimeRange | None:
    """The window covering everything stored (``[oldest, newest + 1 ns)``), ``None`` if empty."""
    stats = await store.statistics()
    if stats.oldest_unix_nano is None or stats.newest_unix_nano is None:
        return None
    return TimeRange(
        start_unix_nano=stats.oldest_unix_nano, end_unix_nano=stats.newest_unix_nano + 1
    )


_NOT_FILTERS: Final = frozenset({"range", "start", "end", "limit", "cursor"})
"""Arguments of a listing that are not filters: the window and the paging."""


def filters_set(args: msgspec.Struct) -> list[str]:
    """The names of the arguments a call set that narrow what it lists (not window or paging).

    An argument counts when it differs from its default (``None``, empty, ``False``, or the
    struct's own default value), so a note can name what to loosen without a list per tool.
    """
    names = []
    for field in msgspec.structs.fields(args):
        if field.name in _NOT_FILTERS:
            continue
        value = getattr(args, field.name)
        if value in (None, "", [], {}, False) or value == field.default:
            continue
        names.append(field.name)
    return names


async def absent_data_note(
    store: TelemetryStore,
    what: str,
    window: ResolvedRange,
    signal: str,
    *,
    service: str | None = None,
    args: msgspec.Struct | None = None,
) -> dict[str, object]:
    """Explain an empty result: what the window was and where stored data actually is.

    Args:
        store: the store.
        what: what was looked for, e.g. ``"spans of ts-travel-service"``.
        window: the window that held none.
        signal: ``"traces"``, ``"logs"`` or ``"metrics"``: which newest record to name.
        service: the ``service.name`` the call asked about: the newest record named is that
            service's (not another system's).
        args: the call's arguments: when the window already holds every stored record, the
            note names the ones it set beside the window (:func:`filters_set`) as those to
            loosen.

    Returns:
        ``{"note": str, "data_extent": {"start", "end"} | None}`` (plus ``newest_trace_start``
        or ``newest_log_time`` when found) to merge into the result.
    """
    extent = await stored_extent(store)
    shown = window.as_json()
    if extent is None:
        return {
            "note": f"no {what} in {shown['start']} .. {shown['end']}: the store is empty "
            "(send OTLP to /v1/traces, /v1/logs, /v1/metrics or run coremetry ingest)",
            "data_extent": None,
        }
    extra: dict[str, object] = {}
    newest = ""
    of = f" of {service}" if service is not None else ""
    if signal == "traces":
        traces = await store.search_traces(
            TraceQuery(time_range=extent, service_name=service), limit=1
        )
        if traces.items:
            at = rfc3339(traces.items[0].start_time_unix_nano)
            extra["newest_trace_start"] = at
            newest = f"; the newest trace{of} starts at {at}"
    elif signal == "logs":
        logs = await store.search_logs(LogQuery(time_range=extent, service_name=service), limit=1)
        if logs.items:
            at = rfc3339(logs.items[0].time_unix_nano)
            extra["newest_log_time"] = at
            newest = f"; the newest log record{of} is at {at}"
    data_extent = {
        "start": rfc3339(extent.start_unix_nano),
        "end": rfc3339(extent.end_unix_nano - 1),
    }
    if window.start_unix_nano <= extent.start_unix_nano and extent.end_unix_nano <= (
        window.end_unix_nano
    ):
        # Moving the window cannot help: it already holds every stored record.
        loosen = filters_set(args) if args is not None else []
        if loosen:
            advice = (
                ": the window already covers all of it, so nothing matches the other "
                f"arguments; loosen them ({', '.join(loosen)}) instead"
            )
        else:
            advice = f": the window already covers all of it, and none of it is {what}"
    else:
        advice = ": retry with start/end (or a longer range) inside that extent"
    return {
        "note": f"no {what} in {shown['start']} .. {shown['end']}; stored telemetry spans "
        f"{data_extent['start']} .. {data_extent['end']}{newest}{advice}",
        "data_extent": data_extent,
        **extra,
    }
