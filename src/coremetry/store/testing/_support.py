"""What every check uses: the harness types, the failure type and small assertion helpers."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Protocol, TypeVar

import msgspec

from coremetry.store.errors import QueryRejected
from coremetry.store.interface import (
    LogQuery,
    MetricQuery,
    Page,
    TelemetryStore,
    TimeRange,
    TraceQuery,
)

T = TypeVar("T")


MakeStore = Callable[[], AbstractAsyncContextManager[TelemetryStore]]
"""Opens a new, empty store and closes it on exit (e.g. ``lambda: open_sqlite_store(p)``)."""

SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE


class ConformanceError(AssertionError):
    """Raised by a conformance check when the store under test behaves differently."""


class ConformanceCheck(msgspec.Struct, frozen=True):
    """One named check of the suite: ``await check.run(make_store)``."""

    name: str
    run: Callable[[MakeStore], Awaitable[None]]


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _equal(actual: object, expected: object, what: str) -> None:
    if actual != expected:
        raise ConformanceError(f"{what}: expected {expected!r}, got {actual!r}")


def _close(actual: float | None, expected: float | None, what: str) -> None:
    if actual is None or expected is None:
        _equal(actual, expected, what)
        return
    if not math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9):
        raise ConformanceError(f"{what}: expected {expected!r}, got {actual!r}")


MAX_PERCENTILE_ERROR: Final = 0.01
"""The largest ``percentile_relative_error`` a backend may declare (a 1 % sketch)."""


def _equal_red(
    actual: Sequence[tuple[object, ...]],
    expected: Sequence[tuple[object, ...]],
    percentiles: tuple[int, ...],
    relative_error: Sequence[float],
    what: str,
) -> None:
    """Rows equal, except the ``percentiles`` columns: within each row's declared error.

    ``relative_error[i]`` is row ``i``'s ``percentile_relative_error`` (``0.0``: exact); it
    must be at most :data:`MAX_PERCENTILE_ERROR`. A percentile ``a`` for the exact ``e``
    passes when ``|a - e| <= error * e + 0.5`` (sketch values are rounded to whole ns).
    """
    mismatch = ConformanceError(f"{what}: expected {list(expected)!r}, got {list(actual)!r}")
    if len(actual) != len(expected):
        raise mismatch
    for row, want, error in zip(actual, expected, relative_error, strict=True):
        _expect(
            0.0 <= error <= MAX_PERCENTILE_ERROR,
            f"{what}: percentile_relative_error {error!r} is not within "
            f"[0, {MAX_PERCENTILE_ERROR}]",
        )
        exact = [v for i, v in enumerate(row) if i not in percentiles]
        if exact != [v for i, v in enumerate(want) if i not in percentiles] or len(row) != len(
            want
        ):
            raise mismatch
        for i in percentiles:
            got, ideal = row[i], want[i]
            if got is None or ideal is None:
                if got is not ideal:
                    raise mismatch
                continue
            assert isinstance(got, int | float)
            assert isinstance(ideal, int | float)
            if abs(got - ideal) > error * abs(ideal) + 0.5:
                raise ConformanceError(
                    f"{what}: percentile {got!r} is not within {error:.0%} of the exact "
                    f"{ideal!r}; expected {list(expected)!r}, got {list(actual)!r}"
                )


async def _rejected(call: Awaitable[object], field: str, what: str) -> QueryRejected:
    try:
        await call
    except QueryRejected as exc:
        _equal(exc.field, field, f"{what}: QueryRejected.field")
        _expect(field in str(exc), f"{what}: the message should name {field!r}: {exc}")
        return exc
    raise ConformanceError(f"{what}: expected QueryRejected({field!r}), but the call succeeded")


class _Fetch(Protocol[T]):
    def __call__(self, *, cursor: str | None) -> Awaitable[Page[T]]: ...


async def _all_pages(fetch: _Fetch[T], what: str, max_pages: int = 10_000) -> list[T]:
    items: list[T] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = await fetch(cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        _expect(bool(page.items), f"{what}: a page with a next_cursor must not be empty")
        cursor = page.next_cursor
    raise ConformanceError(f"{what}: more than {max_pages} pages (a cursor loop?)")


def _every_query(
    store: TelemetryStore, time_range: TimeRange, limit: int, cursor: str | None = None
) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    return [
        ("services", lambda: store.services(time_range, limit=limit)),
        ("operations", lambda: store.operations("frontend", time_range, limit=limit)),
        ("get_trace", lambda: store.get_trace("ab" * 16, limit=limit, cursor=cursor)),
        (
            "search_traces",
            lambda: store.search_traces(
                TraceQuery(time_range=time_range), limit=limit, cursor=cursor
            ),
        ),
        (
            "search_logs",
            lambda: store.search_logs(LogQuery(time_range=time_range), limit=limit, cursor=cursor),
        ),
        (
            "search_logs(text)",
            lambda: store.search_logs(
                LogQuery(time_range=time_range, text="order"), limit=limit, cursor=cursor
            ),
        ),
        ("metric_names", lambda: store.metric_names(time_range, limit=limit)),
        (
            "metric_series",
            lambda: store.metric_series(
                MetricQuery(name="container.cpu.utilization", time_range=time_range, step_ns=HOUR),
                limit=limit,
            ),
        ),
        ("service_edges", lambda: store.service_edges(time_range, limit=limit)),
        ("deploys", lambda: store.deploys(time_range, limit=limit)),
        (
            "service_red_series",
            lambda: store.service_red_series(time_range, step_ns=10 * MINUTE, limit=limit),
        ),
        ("log_counts", lambda: store.log_counts(time_range, step_ns=10 * MINUTE, limit=limit)),
    ]
