"""One check for a ``service`` argument that names no stored service (issue 21).

Every tool that takes a ``service`` answers a name that no stored telemetry carries the same
way: ``not_found`` whose detail names the argument, the closest stored names ("did you mean")
and the stored services, with a hint naming ``list_services``. A name that *is* stored but has
nothing in the asked window is not an error: the tool answers its empty result with the note on
where the data is (:func:`._reading.absent_data_note`).

The check reads the stored service names — span services (:meth:`TelemetryStore.services`)
and log services (:meth:`TelemetryStore.log_counts`) over everything stored, plus, for a
metric query, the metric's own ``service.name`` values — so tools call it only when their
result came back empty, where it costs two or three aggregate reads.
"""

import difflib
from collections.abc import Iterable
from typing import Final

from coremetry.mcp import NotFound
from coremetry.store import MAX_LIMIT, MetricQuery, QueryRejected, TelemetryStore

from ._reading import stored_extent

__all__ = ["require_known_service", "stored_service_names", "unknown_service"]

_SHOWN_NAMES: Final = 12
"""Stored names listed in the error (the total is always given)."""
_CLOSE_MATCHES: Final = 3
HINT: Final = (
    "Check the exact service.name with list_services (names are exact and case-sensitive), "
    "then call again with it."
)


async def stored_service_names(store: TelemetryStore) -> set[str] | None:
    """Every ``service.name`` with spans or log records stored; ``None`` when the store is empty."""
    extent = await stored_extent(store)
    if extent is None:
        return None
    names = {s.service_name for s in (await store.services(extent, limit=MAX_LIMIT)).items}
    whole = extent.end_unix_nano - extent.start_unix_nano
    names.update(
        series.service_name
        for series in await store.log_counts(extent, step_ns=max(1, whole), limit=MAX_LIMIT)
    )
    names.discard("")
    return names


async def _metric_service_names(store: TelemetryStore, metric: str) -> set[str] | None:
    """The ``service.name`` values of ``metric``'s points; ``None`` when they cannot be read."""
    extent = await stored_extent(store)
    if extent is None:
        return None
    try:
        series_list = await store.metric_series(
            MetricQuery(
                name=metric,
                time_range=extent,
                step_ns=max(1, extent.end_unix_nano - extent.start_unix_nano),
                aggregation="count",
                group_by=["service.name"],
            ),
            limit=MAX_LIMIT,
        )
    except QueryRejected:
        return None  # the names cannot be read: none to check against
    return {str(s.labels.get("service.name", "")) for s in series_list}


def unknown_service(name: str, stored: Iterable[str], field: str = "service") -> NotFound:
    """The ``not_found`` for ``name``, which none of the ``stored`` names equals."""
    known = sorted(stored)
    close = difflib.get_close_matches(name, known, n=_CLOSE_MATCHES, cutoff=0.6)
    shown = ", ".join(known[:_SHOWN_NAMES]) + (", …" if len(known) > _SHOWN_NAMES else "")
    return NotFound(
        f"{field}: no stored telemetry has service.name {name[:128]!r}"
        + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "")
        + f" Stored services ({len(known)}): {shown}",
        hint=HINT,
    )


async def require_known_service(
    store: TelemetryStore, name: str | None, *, metric: str | None = None
) -> None:
    """Raise :func:`unknown_service`'s ``not_found`` when ``name`` is not a stored service.

    Nothing happens for ``None``, an empty store, or a name with spans, logs (or points of
    ``metric``) anywhere in the stored data. The error lists the span and log services, the
    same for every tool (a service with only metric points is accepted but not listed).

    Raises:
        NotFound: ``name`` names no stored service.
    """
    if name is None:
        return
    stored = await stored_service_names(store)
    if stored is None or name in stored:
        return
    if metric is not None:
        of_metric = await _metric_service_names(store, metric)
        if of_metric is None or name in of_metric:
            return
    raise unknown_service(name, stored)
