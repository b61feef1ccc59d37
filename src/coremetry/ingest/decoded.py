"""What every decoder returns: a :class:`TelemetryBatch`, the items it rejected, and its notes.

A decoder never drops data silently. An item it cannot store (a span without a start time, a
CSV row whose timestamp does not parse) is *rejected* with a reason and a location; an item it
stores after adjusting it (a log record whose corrupt event time was replaced by its observed
time, a Zipkin span without a duration) is counted in a *note*. The OTLP receiver turns
rejections into ``partial_success`` (notes too, as its warning text); ``coremetry ingest``
prints both in its summary.

Records dated too far in the future (a sender's clock running ahead) are refused after
decoding, by :meth:`Decoded.refuse_future` — the receiver and the importer call it with
``ingest.max_future_skew_s``: one such record would otherwise become "the newest data" that
every anchored window ends at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Final, Literal, TypeAlias

import msgspec

from coremetry.store.model import TelemetryBatch

__all__ = ["Decoded", "MAX_EXAMPLES", "Rejected", "Signal", "future_reason"]

Signal: TypeAlias = Literal["span", "log", "metric_point"]
"""The kind of item: a span, a log record, or a metric data point."""

MAX_EXAMPLES: Final = 3
"""Locations quoted per rejection reason in :meth:`Decoded.describe_rejections`."""

_NS_PER_S: Final = 1_000_000_000


def future_reason(signal: Signal, max_skew_ns: int) -> str:
    """The rejection reason of a record dated more than ``max_skew_ns`` after the clock."""
    what = {"span": "span end", "log": "log record", "metric_point": "data point"}[signal]
    return (
        f"{what} time is more than {max_skew_ns / _NS_PER_S:g} s ahead of this server's clock "
        "(ingest.max_future_skew_s); check the sender's clock"
    )


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

    def describe_notes(self, only: Collection[str] | None = None) -> str:
        """One line naming every adjustment (or those in ``only``) and its count.

        Example: ``"1 stored after adjusting: span end time before its start time (...)"``;
        ``""`` when there is none.
        """
        return "; ".join(
            f"{count} stored after adjusting: {note}"
            for note, count in self.notes.items()
            if only is None or note in only
        )

    def refuse_future(self, now_unix_nano: int, max_skew_ns: int) -> None:
        """Move records dated more than ``max_skew_ns`` after ``now_unix_nano`` to ``rejected``.

        A span counts by its end (its latest time), a log record and a data point by their
        time. Each refused record is a :class:`Rejected` with :func:`future_reason` and a
        location naming it (trace and span id, or the metric name).

        Args:
            now_unix_nano: this server's clock, unix nanoseconds.
            max_skew_ns: the tolerance, nanoseconds (``ingest.max_future_skew_s``).
        """
        limit = now_unix_nano + max_skew_ns
        batch = self.batch
        if any(max(s.start_time_unix_nano, s.end_time_unix_nano) > limit for s in batch.spans):
            kept_spans = []
            for span in batch.spans:
                if max(span.start_time_unix_nano, span.end_time_unix_nano) > limit:
                    where = f"trace {span.trace_id} span {span.span_id}"
                    self.reject("span", future_reason("span", max_skew_ns), where)
                else:
                    kept_spans.append(span)
            batch.spans = kept_spans
        if any(r.time_unix_nano > limit for r in batch.logs):
            kept_logs = []
            for record in batch.logs:
                if record.time_unix_nano > limit:
                    where = f"log record of {record.service_name}"
                    self.reject("log", future_reason("log", max_skew_ns), where)
                else:
                    kept_logs.append(record)
            batch.logs = kept_logs
        if any(p.time_unix_nano > limit for p in batch.metrics):
            kept_points = []
            for point in batch.metrics:
                if point.time_unix_nano > limit:
                    where = f"metric {point.name}"
                    self.reject("metric_point", future_reason("metric_point", max_skew_ns), where)
                else:
                    kept_points.append(point)
            batch.metrics = kept_points

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
