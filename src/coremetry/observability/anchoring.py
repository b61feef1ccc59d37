"""Windows for entries without time arguments: anchored on the newest stored data.

Resources have no arguments and prompts take at most a ``range``; a window ending *now* would
be empty for imported or replayed data, and a user reading ``coremetry://services`` wants what
is there. So these windows end at the newest stored record (for a live system, about now) and
reach back ``range`` (default 24 h) — but never past now: a record dated in the future (a
sender's clock running ahead; ingest refuses those beyond ``ingest.max_future_skew_s``) does
not drag every window into a future with no data. Tools keep now-relative windows and explain
empty results (:func:`coremetry.observability._reading.absent_data_note`).
"""

from datetime import UTC, datetime, timedelta
from typing import Final

from coremetry.store import TelemetryStore

from ._reading import stored_extent
from .ranges import NS_PER_S, RangeArgs, duration_ns

__all__ = ["ANCHORED_DEFAULT", "anchored_args"]

ANCHORED_DEFAULT: Final = "24h"
"""Default length of an anchored window."""


def _rfc3339_us(unix_nano: int) -> str:
    """RFC 3339 UTC with microseconds, rounded up (so the bound includes ``unix_nano``)."""
    micros = -(-unix_nano // 1000)
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def anchored_args(
    store: TelemetryStore, range_text: str | None, now_unix_nano: int
) -> RangeArgs:
    """``RangeArgs`` for the ``range`` (default 24 h) ending at the newest stored record.

    The end is capped at ``now_unix_nano`` (records dated in the future do not move it), and an
    empty store anchors on ``now_unix_nano``.

    Raises:
        BadArgs: ``range_text`` is not a relative length (naming ``range``).
        StoreUnavailable, StoreClosed: from the store.
    """
    length = duration_ns(range_text or ANCHORED_DEFAULT)
    extent = await stored_extent(store)
    end = now_unix_nano if extent is None else min(extent.end_unix_nano, now_unix_nano)
    end = end + 1000  # one microsecond past the newest record: it is inside the window
    start = max(0, end - length)
    if end - start < NS_PER_S:
        start = end - NS_PER_S
    return RangeArgs(start=_rfc3339_us(start), end=_rfc3339_us(end))
