"""Mergeable latency sketches for the RED roll-ups, shared by the backends that keep them (no I/O).

A :class:`LatencySketch` is a DDSketch (Masson, Rim, Lee: *DDSketch: a fast and fully-mergeable
quantile sketch with relative-error guarantees*, VLDB 2019) over span durations in
nanoseconds: the ``ddsketch`` library's :class:`ddsketch.mapping.LogarithmicMapping` with a
relative accuracy of :data:`RELATIVE_ACCURACY` maps each duration to an integer *bin key*; a
sketch is the count of durations per key (plus a count of zero durations). Two sketches merge
by adding their counts per key, so per-minute sketches merge into any window exactly as the
durations themselves would.

Percentiles are **nearest-rank** over the sketch, as the raw-span queries compute them: with
``n`` durations, the ``p``-th percentile is the value of the duration at rank
``ceil(n * p / 100)``; the sketch finds the bin holding that rank and answers the bin's
representative value (``LogarithmicMapping.value``), which is within a relative
:data:`RELATIVE_ACCURACY` of every duration in the bin, so within it of the exact answer
(plus at most 0.5 ns from rounding to whole nanoseconds). (``ddsketch``'s own
``get_quantile_value`` uses the rank ``q * (n - 1)``, one rank off nearest-rank; that is why
the rank is found here.)

Encoding (:meth:`LatencySketch.encode`): MessagePack of one flat integer list
``[zeros, key_0, count_0, key_1 - key_0, count_1, ...]``, keys ascending and delta-encoded, so
a typical per-minute sketch is a few bytes per distinct bin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import msgspec
from ddsketch.mapping import LogarithmicMapping

__all__ = [
    "KEY_MULTIPLIER",
    "RELATIVE_ACCURACY",
    "ZERO_KEY",
    "LatencySketch",
    "bin_key",
    "merge_encoded",
]

RELATIVE_ACCURACY: Final = 0.01
"""Relative error of every sketch percentile against the exact nearest-rank one (1 %)."""

_MAPPING: Final = LogarithmicMapping(RELATIVE_ACCURACY)
KEY_MULTIPLIER: Final = math.log(2) / math.log1p(2 * RELATIVE_ACCURACY / (1 - RELATIVE_ACCURACY))
"""The mapping's factor: a duration ``d >= 1`` is in bin ``ceil(log2(d) * KEY_MULTIPLIER)``, as
``LogarithmicMapping`` computes it (for a query engine that computes bins itself)."""
ZERO_KEY: Final = -(2**31)
"""The bin a query engine gives a duration below 1 ns (:attr:`LatencySketch.zeros` here)."""
_KEY: Final = _MAPPING.key
_ENCODE: Final = msgspec.msgpack.Encoder().encode
_DECODE: Final = msgspec.msgpack.Decoder(list[int]).decode


_LOG: Final = math.log
_CEIL: Final = math.ceil


def bin_key(duration_ns: int) -> int | None:
    """The sketch bin of a duration in nanoseconds (``None``: the zero bin, below 1 ns).

    ``LogarithmicMapping.key`` inlined (the same arithmetic: ``ceil(log(d, 2) * multiplier)``,
    its offset being 0): it runs once per span written.
    """
    if duration_ns < 1:
        return None
    return int(_CEIL(_LOG(duration_ns, 2) * KEY_MULTIPLIER))


class LatencySketch:
    """Counts of durations (nanoseconds, ``>= 0``) per DDSketch bin; mergeable.

    Attributes:
        bins: bin key -> number of durations in it (durations ``>= 1`` ns).
        zeros: number of zero durations (a span whose end is not after its start).
    """

    __slots__ = ("bins", "zeros")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.zeros = 0

    @property
    def count(self) -> int:
        """How many durations were added."""
        return self.zeros + sum(self.bins.values())

    def add(self, duration_ns: int) -> None:
        """Add one duration (nanoseconds; values below 1 count as zero)."""
        if duration_ns < 1:
            self.zeros += 1
            return
        key = _KEY(duration_ns)
        bins = self.bins
        bins[key] = bins.get(key, 0) + 1

    def add_key(self, key: int | None) -> None:
        """Add one duration by its bin (:func:`bin_key`; ``None`` is the zero bin)."""
        if key is None:
            self.zeros += 1
        else:
            bins = self.bins
            bins[key] = bins.get(key, 0) + 1

    def add_bins(self, keys: Sequence[int], counts: Sequence[int]) -> None:
        """Add ``counts[i]`` durations to bin ``keys[i]`` (:data:`ZERO_KEY`: zero durations)."""
        bins = self.bins
        for key, count in zip(keys, counts, strict=True):
            if key == ZERO_KEY:
                self.zeros += count
            else:
                bins[key] = bins.get(key, 0) + count

    def merge(self, other: LatencySketch) -> None:
        """Add every duration of ``other`` to this sketch."""
        self.zeros += other.zeros
        bins = self.bins
        for key, count in other.bins.items():
            bins[key] = bins.get(key, 0) + count

    def merge_encoded(self, data: bytes) -> None:
        """Add every duration of an encoded sketch (:meth:`encode`) to this sketch.

        Raises:
            msgspec.DecodeError: ``data`` is not an encoded sketch.
        """
        values = _DECODE(data)
        self.zeros += values[0]
        bins = self.bins
        key = 0
        for index in range(1, len(values) - 1, 2):
            key += values[index]
            count = values[index + 1]
            bins[key] = bins.get(key, 0) + count

    @classmethod
    def decode(cls, data: bytes) -> LatencySketch:
        """The sketch :meth:`encode` wrote.

        Raises:
            msgspec.DecodeError: ``data`` is not an encoded sketch.
        """
        sketch = cls()
        sketch.merge_encoded(data)
        return sketch

    def encode(self) -> bytes:
        """The compact binary form (see the module docstring)."""
        flat = [self.zeros]
        previous = 0
        for key in sorted(self.bins):
            flat.append(key - previous)
            flat.append(self.bins[key])
            previous = key
        return _ENCODE(flat)

    def percentile(self, p: float) -> int | None:
        """The nearest-rank ``p``-th percentile (``0 < p <= 100``) in ns; ``None`` if empty.

        Within :data:`RELATIVE_ACCURACY` (relative) of the exact nearest-rank percentile of the
        durations added, plus at most 0.5 ns.
        """
        total = self.count
        if total == 0:
            return None
        rank = max(1, math.ceil(total * p / 100))
        seen = self.zeros
        if seen >= rank:
            return 0
        for key in sorted(self.bins):
            seen += self.bins[key]
            if seen >= rank:
                return max(1, round(_MAPPING.value(key)))
        raise AssertionError("unreachable: the rank is at most the count")  # pragma: no cover

    def percentiles(self) -> tuple[int | None, int | None, int | None]:
        """``(p50, p95, p99)`` as :meth:`percentile`, in one pass over the sorted bins."""
        total = self.count
        if total == 0:
            return (None, None, None)
        ranks = [max(1, math.ceil(total * p / 100)) for p in (50, 95, 99)]
        found: list[int] = []
        seen = self.zeros
        while ranks and seen >= ranks[0]:
            found.append(0)
            ranks.pop(0)
        bins = self.bins
        for key in sorted(bins) if ranks else ():
            seen += bins[key]
            if seen >= ranks[0]:
                # The bin's value only where a rank falls (a week's sketch has hundreds of bins).
                value = max(1, round(_MAPPING.value(key)))
                while ranks and seen >= ranks[0]:
                    found.append(value)
                    ranks.pop(0)
                if not ranks:
                    break
        return (found[0], found[1], found[2])


def merge_encoded(a: bytes, b: bytes) -> bytes:
    """The encoding of the merge of two encoded sketches (one pass over both, no decoding).

    Raises:
        msgspec.DecodeError: ``a`` or ``b`` is not an encoded sketch.
    """
    x = _DECODE(a)
    y = _DECODE(b)
    out = [x[0] + y[0]]
    append = out.append
    i, j = 1, 1
    nx, ny = len(x) - 1, len(y) - 1
    kx = x[1] if nx > 0 else 0
    ky = y[1] if ny > 0 else 0
    previous = 0
    while i < nx and j < ny:
        if kx < ky:
            append(kx - previous)
            append(x[i + 1])
            previous = kx
            i += 2
            if i < nx:
                kx += x[i]
        elif ky < kx:
            append(ky - previous)
            append(y[j + 1])
            previous = ky
            j += 2
            if j < ny:
                ky += y[j]
        else:
            append(kx - previous)
            append(x[i + 1] + y[j + 1])
            previous = kx
            i += 2
            j += 2
            if i < nx:
                kx += x[i]
            if j < ny:
                ky += y[j]
    while i < nx:
        append(kx - previous)
        append(x[i + 1])
        previous = kx
        i += 2
        if i < nx:
            kx += x[i]
    while j < ny:
        append(ky - previous)
        append(y[j + 1])
        previous = ky
        j += 2
        if j < ny:
            ky += y[j]
    return _ENCODE(out)
