"""The store conformance suite: the behaviour every :class:`TelemetryStore` backend must have.

Modelled on ``trio.testing.check_two_way_stream``: a backend's tests call
:func:`check_store_conformance` with a factory of *empty* stores, or parametrise over
:data:`CONFORMANCE_CHECKS` so that a failure names the check::

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.name)
    async def test_conformance(check: ConformanceCheck, tmp_path: Path) -> None:
        await check.run(lambda: open_sqlite_store(tmp_path / "t.db", retention_days=0))

The suite uses only the :class:`~coremetry.store.TelemetryStore` protocol, so the embedded
SQLite backend and the ClickHouse backend run it unchanged. Every check opens its own store
(one ``make_store()`` each, sometimes more), writes a dataset built from a fixed seed and
placed in the last few hours (so that a default retention window keeps it), and compares each
query's answer with what a plain Python reference computes from the same records — expected
values are never hard-coded. Failures raise :class:`ConformanceError` (an ``AssertionError``)
whose message says what differed.

What is covered: write (counts, idempotency of spans/logs/points, all-or-nothing on a bad
record), every query's results and order, paging through every item with cursors without
loss or duplicates, limits and totals, ``QueryRejected`` naming the field for bad input (limit,
range, cursor, ids, full-text syntax, regex, step, aggregation), the bucketed RED and log
counts, non-ASCII and odd service names, clock skew (a child starting before its parent),
NaN/±Inf metric values, retention (``delete_before``), ``StoreClosed`` after ``aclose``, and
cancellation leaving the store usable.

The modules: ``_support`` (harness types and assertion helpers), ``_dataset`` (the records
written), ``_reference`` (what each query must answer), and the checks by area
(``_checks_writes``, ``_checks_traces``, ``_checks_logs``, ``_checks_metrics``,
``_checks_arguments``).
"""

from __future__ import annotations

from typing import Final

from coremetry.store.errors import StoreError

from ._checks_arguments import check_bad_arguments, check_odd_service_names
from ._checks_logs import check_search_logs_filters, check_search_logs_text
from ._checks_metrics import (
    check_bucketed_series,
    check_metric_math,
    check_metric_names,
    check_metric_series,
    check_nan_and_infinity,
)
from ._checks_rollups import check_rollups_match_raw
from ._checks_traces import (
    check_clock_skew,
    check_deploys,
    check_get_trace,
    check_operations,
    check_search_traces,
    check_service_edges,
    check_services,
)
from ._checks_writes import (
    check_cancellation,
    check_closed,
    check_concurrency,
    check_retention,
    check_write_all_or_nothing,
    check_write_and_statistics,
    check_write_idempotent,
)
from ._support import ConformanceCheck, ConformanceError, MakeStore

__all__ = [
    "CONFORMANCE_CHECKS",
    "ConformanceCheck",
    "ConformanceError",
    "MakeStore",
    "check_store_conformance",
]


CONFORMANCE_CHECKS: Final[tuple[ConformanceCheck, ...]] = tuple(
    ConformanceCheck(name=fn.__name__.removeprefix("check_"), run=fn)
    for fn in (
        check_write_and_statistics,
        check_write_idempotent,
        check_write_all_or_nothing,
        check_get_trace,
        check_search_traces,
        check_clock_skew,
        check_services,
        check_operations,
        check_service_edges,
        check_deploys,
        check_rollups_match_raw,
        check_search_logs_filters,
        check_search_logs_text,
        check_metric_names,
        check_metric_series,
        check_metric_math,
        check_bucketed_series,
        check_nan_and_infinity,
        check_bad_arguments,
        check_odd_service_names,
        check_retention,
        check_closed,
        check_cancellation,
        check_concurrency,
    )
)
"""Every check, in a sensible order; parametrise over it to get one test per check."""


async def check_store_conformance(make_store: MakeStore) -> None:
    """Run every check of :data:`CONFORMANCE_CHECKS` against stores from ``make_store``.

    Args:
        make_store: called once or more per check; each call must return an async context
            manager that opens a new, *empty* store and closes it on exit. A retention window
            of at least a day (or none) is assumed: the data are placed in the last few hours.

    Raises:
        ConformanceError: the first check that failed, its name in the message.
    """
    for check in CONFORMANCE_CHECKS:
        try:
            await check.run(make_store)
        except ConformanceError as exc:
            raise ConformanceError(f"{check.name}: {exc}") from exc
        except StoreError as exc:
            raise ConformanceError(f"{check.name}: unexpected {exc!r}") from exc
