"""What every decoder returns: a :class:`TelemetryBatch`, the items it rejected, and its notes.

A decoder never drops data silently. An item it cannot store (a span without a start time, a
CSV row whose timestamp does not parse) is *rejected* with a reason and a location; an item it
stores after adjusting it (a log record whose corrupt event time was replaced by its observed
time, a Zipkin span without a duration) is counted in a *note*. The OTLP receiver turns
rejections into ``partial_success``; ``coremetry ingest`` prints both in its summary.
"""

from __future__ import annotations

from collections import Counter
from typing import Final, Literal, TypeAlias

import msgspec

from coremetry.store.model import TelemetryBatch

__all__ = ["Decoded", "MAX_EXAMPLES", "Rejected", "Signal"]

Signal: TypeAlias = Literal["span", "log", "metric_point"]
"""The kind of item: a span, a log record, or a metric data point."""

MAX_EXAMPLES: Final = 3
"""Locations quoted per rejection reason in :meth:`Decoded.describe_rejections`."""


class Rejected(msgspec.Struct, frozen=True, kw_only=True):
    """One item a decoder could not store.

    Attributes:
        signal: what kind of item it was.
        reason: why, in words a user can act on; items rejected for the same cause share the
            same text (so they can be counted together).
        where: where the item is in the input (``resourceSpans[0].scopeSpans[0].spans[3]``,
            ``line 17``, ``spans[4] (id 1a2b…)``); ``""`` when unknown.
    """

    signal: Signal
    reason: str
    where: str = ""


class Decoded(msgspec.Struct, kw_only=True):
    """A decoder's result.

    Attributes:
        batch: the records to write (one transaction).
        rejected: items left out, with reasons, in input order.
        notes: adjustments made to stored items, message -> how many items (e.g. ``"log
            record time corrupt (before 1970 or past 2262); used observedTimeUnixNano"``).
        read: items read from the input, by signal (stored + rejected, before any merging of
            fragments the format defines).
    """

    batch: TelemetryBatch = msgspec.field(default_factory=TelemetryBatch)
    rejected: list[Rejected] = msgspec.field(default_factory=list)
    notes: dict[str, int] = msgspec.field(default_factory=dict)
    read: dict[Signal, int] = msgspec.field(default_factory=dict)

    def reject(self, signal: Signal, reason: str, where: str = "") -> None:
        """Record one rejected item."""
        self.rejected.append(Rejected(signal=signal, reason=reason, where=where))

    def note(self, message: str, count: int = 1) -> None:
        """Count ``count`` stored items adjusted as ``message`` says."""
        self.notes[message] = self.notes.get(message, 0) + count

    def count_read(self, signal: Signal, count: int = 1) -> None:
        """Count items read from the input."""
        self.read[signal] = self.read.get(signal, 0) + count

    def rejected_count(self, signal: Signal | None = None) -> int:
        """How many items were rejected (of one signal, or all)."""
        if signal is None:
            return len(self.rejected)
        return sum(1 for item in self.rejected if item.signal == signal)

    def rejection_counts(self) -> Counter[tuple[Signal, str]]:
        """Rejections counted by ``(signal, reason)``."""
        return Counter((item.signal, item.reason) for item in self.rejected)

    def describe_rejections(self, signal: Signal | None = None) -> str:
        """One line naming every rejection reason, its count and a few locations.

        Example: ``"2 span(s): span has no start time (at resourceSpans[0].scopeSpans[0]
        .spans[1], ...)"``. ``""`` when nothing was rejected.
        """
        by_reason: dict[tuple[Signal, str], list[str]] = {}
        for item in self.rejected:
            if signal is not None and item.signal != signal:
                continue
            by_reason.setdefault((item.signal, item.reason), []).append(item.where)
        parts: list[str] = []
        for (kind, reason), places in by_reason.items():
            shown = [p for p in places if p][:MAX_EXAMPLES]
            more = ", ..." if len(places) > len(shown) and shown else ""
            at = f" (at {', '.join(shown)}{more})" if shown else ""
            parts.append(f"{len(places)} {kind}(s): {reason}{at}")
        return "; ".join(parts)

    def extend(self, other: Decoded) -> None:
        """Append another result's records, rejections, notes and read counts to this one."""
        self.batch.spans.extend(other.batch.spans)
        self.batch.logs.extend(other.batch.logs)
        self.batch.metrics.extend(other.batch.metrics)
        self.rejected.extend(other.rejected)
        for message, count in other.notes.items():
            self.note(message, count)
        for signal, count in other.read.items():
            self.count_read(signal, count)
