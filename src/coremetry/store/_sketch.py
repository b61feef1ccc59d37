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

Encoding (:meth:`LatencySketch.encode`, since schema 5 of the embedded store): packed
little-endian records of 6 bytes, ``(int16 key, uint32 count)``, keys ascending, the zero
durations as key ``-1`` (bin keys of durations ``>= 1`` ns are ``0..2200``); a count above
``2**32 - 1`` is split over records of the same key (readers add the records of a key). A
fixed-width record lets a read merge thousands of sketches with one ``numpy.frombuffer`` over
their concatenation (:class:`SketchTable`) instead of a dictionary update per bin in Python.
Schema 4 stored MessagePack (``[zeros, key_0, count_0, key_1 - key_0, ...]``);
:func:`reencode_msgpack` converts it.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from itertools import chain
from typing import Final

import msgspec
import numpy as np
import numpy.typing as npt
from ddsketch.mapping import LogarithmicMapping

__all__ = [
    "KEY_MULTIPLIER",
    "RELATIVE_ACCURACY",
    "ZERO_KEY",
    "LatencySketch",
    "SketchTable",
    "bin_key",
    "decode_msgpack",
    "encode_msgpack",
    "merge_encoded",
    "merge_encoded_groups",
    "reencode_msgpack",
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
_DECODE_MSGPACK: Final = msgspec.msgpack.Decoder(list[int]).decode
_RECORD: Final = struct.Struct("<hI")
"""One encoded bin: (key, count); key :data:`_ZERO_RECORD_KEY` holds the zero durations."""
_RECORD_DTYPE: Final = np.dtype([("key", "<i2"), ("count", "<u4")])
_ZERO_RECORD_KEY: Final = -1
_MAX_RECORD_COUNT: Final = 2**32 - 1


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
            ValueError: ``data`` is not an encoded sketch (not whole 6-byte records).
        """
        if len(data) % _RECORD.size:
            raise ValueError(f"not an encoded sketch: {len(data)} bytes, not 6-byte records")
        bins = self.bins
        for key, count in _RECORD.iter_unpack(data):
            if key == _ZERO_RECORD_KEY:
                self.zeros += count
            else:
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
        items = sorted(self.bins.items())
        if self.zeros:
            items.insert(0, (_ZERO_RECORD_KEY, self.zeros))
        if items and max(count for _, count in items) > _MAX_RECORD_COUNT:
            return _encode_split(items)
        return _packer(len(items)).pack(*chain.from_iterable(items))

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


@functools.lru_cache(maxsize=1024)
def _packer(records: int) -> struct.Struct:
    """The ``struct`` layout of ``records`` records (compiled once per length)."""
    return struct.Struct("<" + "hI" * records)


def _encode_split(items: list[tuple[int, int]]) -> bytes:
    """Records of ``(key, count)`` items, a count above 32 bits split over several."""
    pack = _RECORD.pack
    parts = []
    for key, count in items:
        while count > _MAX_RECORD_COUNT:
            parts.append(pack(key, _MAX_RECORD_COUNT))
            count -= _MAX_RECORD_COUNT
        if count:
            parts.append(pack(key, count))
    return b"".join(parts)


_NUMPY_MERGE_BYTES: Final = 64 * 6
"""Above this many bytes of records, :func:`merge_encoded` sums them with numpy (below, the
fixed cost of a few numpy calls is more than a dictionary's)."""


def _merge_numpy(a: bytes, b: bytes) -> bytes:
    """:func:`merge_encoded` of two non-empty encodings, the records summed per key by numpy."""
    both = np.concatenate(
        (np.frombuffer(a, dtype=_RECORD_DTYPE), np.frombuffer(b, dtype=_RECORD_DTYPE))
    )
    keys, where = np.unique(both["key"], return_inverse=True)
    sums = np.bincount(where, weights=both["count"], minlength=keys.size)
    if float(sums.max()) > _MAX_RECORD_COUNT:
        return _encode_split(list(zip(keys.tolist(), (int(v) for v in sums.tolist()), strict=True)))
    out = np.empty(keys.size, dtype=_RECORD_DTYPE)
    out["key"] = keys
    out["count"] = sums
    return out.tobytes()


def merge_encoded(a: bytes, b: bytes) -> bytes:
    """The encoding of the merge of two encoded sketches (the write path's upsert).

    The same bytes as decoding both, merging and :meth:`LatencySketch.encode`. Small ones:
    ``a`` (the stored sketch) becomes a dictionary in one C call, ``b`` (a write's few bins)
    is added to it, and the result is packed by one compiled ``struct``; larger ones (a day's
    sketch has hundreds of bins) are summed per key by numpy.

    Raises:
        ValueError: ``a`` or ``b`` is not an encoded sketch.
    """
    for data in (a, b):
        if len(data) % _RECORD.size:
            raise ValueError(f"not an encoded sketch: {len(data)} bytes, not 6-byte records")
    if not b:
        return a
    if not a:
        return b
    if len(a) + len(b) > _NUMPY_MERGE_BYTES:
        return _merge_numpy(a, b)
    bins = dict(_RECORD.iter_unpack(a))
    if len(bins) * _RECORD.size != len(a):
        bins = {}  # a key over several records (a count above 32 bits): add them up
        for key, count in _RECORD.iter_unpack(a):
            bins[key] = bins.get(key, 0) + count
    get = bins.get
    for key, count in _RECORD.iter_unpack(b):
        bins[key] = get(key, 0) + count
    items = sorted(bins.items())
    if max(bins.values()) > _MAX_RECORD_COUNT:
        return _encode_split(items)
    return _packer(len(items)).pack(*chain.from_iterable(items))


def merge_encoded_groups(owners: Sequence[int], blobs: Sequence[bytes], groups: int) -> list[bytes]:
    """The merged encoding per group of many encoded sketches (``blobs[i]`` into ``owners[i]``).

    Returns one encoding per group ``0 .. groups - 1`` (``b""`` for a group given none): the
    records summed per key by numpy, keys ascending, a count above 32 bits split over several
    records. Any reader of encoded sketches (:class:`SketchTable`,
    :meth:`LatencySketch.merge_encoded`) gets the same bins as from the blobs one by one.

    Raises:
        ValueError: a blob is not an encoded sketch, the lengths differ, or an owner is
            outside ``0 .. groups - 1``.
    """
    if len(owners) != len(blobs):
        raise ValueError(f"{len(owners)} groups for {len(blobs)} encoded sketches")
    lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    if lengths.size and bool((lengths % _RECORD.size).any()):
        raise ValueError("not an encoded sketch: a blob is not whole 6-byte records")
    out = [b""] * groups
    records = np.frombuffer(b"".join(blobs), dtype=_RECORD_DTYPE)
    if not records.size:
        return out
    who = np.repeat(np.asarray(owners, dtype=np.int64), lengths // _RECORD.size)
    if int(who.min()) < 0 or int(who.max()) >= groups:
        raise ValueError(f"a group added is outside 0..{groups - 1}")
    cells, where = np.unique(
        who * 65536 + (records["key"].astype(np.int64) + 32768), return_inverse=True
    )
    sums = np.bincount(where, weights=records["count"].astype(np.float64), minlength=cells.size)
    cell_owners = cells >> 16
    cell_keys = (cells & 0xFFFF) - 32768
    bounds = np.searchsorted(cell_owners, np.arange(groups + 1)).tolist()
    if float(sums.max()) > _MAX_RECORD_COUNT:
        key_list, sum_list = cell_keys.tolist(), [int(v) for v in sums.tolist()]
        for group in range(groups):
            low, high = bounds[group], bounds[group + 1]
            out[group] = _encode_split(
                list(zip(key_list[low:high], sum_list[low:high], strict=True))
            )
        return out
    packed = np.empty(cells.size, dtype=_RECORD_DTYPE)
    packed["key"] = cell_keys
    packed["count"] = sums
    for group in range(groups):
        out[group] = packed[bounds[group] : bounds[group + 1]].tobytes()
    return out


_ENCODE_MSGPACK: Final = msgspec.msgpack.Encoder().encode


def encode_msgpack(sketch: LatencySketch) -> bytes:
    """Schema 4's encoding of a sketch (the embedded store's migrations only).

    MessagePack of ``[zeros, key_0, count_0, key_1 - key_0, count_1, ...]``, keys ascending.
    """
    flat = [sketch.zeros]
    previous = 0
    for key in sorted(sketch.bins):
        flat.append(key - previous)
        flat.append(sketch.bins[key])
        previous = key
    return _ENCODE_MSGPACK(flat)


def decode_msgpack(data: bytes) -> LatencySketch:
    """The sketch :func:`encode_msgpack` wrote.

    Raises:
        msgspec.DecodeError: ``data`` is not a MessagePack list of integers.
    """
    values = _DECODE_MSGPACK(data)
    sketch = LatencySketch()
    sketch.zeros = values[0] if values else 0
    key = 0
    for index in range(1, len(values) - 1, 2):
        key += values[index]
        sketch.bins[key] = sketch.bins.get(key, 0) + values[index + 1]
    return sketch


def reencode_msgpack(data: bytes) -> bytes:
    """A schema-4 sketch (:func:`encode_msgpack`) in today's (:meth:`LatencySketch.encode`).

    Raises:
        msgspec.DecodeError: ``data`` is not a MessagePack list of integers.
    """
    return decode_msgpack(data).encode()


_Percentiles = tuple[int | None, int | None, int | None]
_CELLS_PER_PASS: Final = 1 << 20
"""Groups x key span summed per numpy pass of :meth:`SketchTable.percentiles` (8 MiB)."""


class SketchTable:
    """The latency sketches of many groups, merged at once (a read's groups: services, edges).

    A read adds each roll-up row's encoded sketch (:meth:`add_encoded`) and each raw span's
    duration (:meth:`add`) to its group (``0 <= group < groups``); :meth:`percentiles`
    then concatenates every encoded sketch, reads their records with one
    ``numpy.frombuffer``, sums the counts per (group, key) with ``numpy.bincount`` and finds
    each group's nearest-rank p50/p95/p99 by a cumulative sum: the same answer as merging the
    sketches one by one (:meth:`LatencySketch.merge_encoded`, then
    :meth:`LatencySketch.percentiles`), at a cost per record in C. Memory: the encoded
    sketches added, then at most :data:`_CELLS_PER_PASS` sums at a time.
    """

    __slots__ = ("_blob_groups", "_blob_sizes", "_blobs", "_key_groups", "_keys")

    def __init__(self) -> None:
        self._blobs: list[bytes] = []
        self._blob_groups: list[int] = []
        self._blob_sizes: list[int] = []
        self._keys: list[int] = []
        self._key_groups: list[int] = []

    def add_encoded(self, group: int, data: bytes) -> None:
        """Add an encoded sketch (:meth:`LatencySketch.encode`) to ``group``.

        Raises:
            ValueError: ``data`` is not an encoded sketch (not whole 6-byte records).
        """
        size, rest = divmod(len(data), _RECORD.size)
        if rest:
            raise ValueError(f"not an encoded sketch: {len(data)} bytes, not 6-byte records")
        self._blobs.append(data)
        self._blob_groups.append(group)
        self._blob_sizes.append(size)

    def add_encoded_many(self, groups: Sequence[int], blobs: Sequence[bytes]) -> None:
        """:meth:`add_encoded` of ``blobs[i]`` to ``groups[i]`` for each ``i`` (one call).

        Raises:
            ValueError: a blob is not an encoded sketch, or the lengths differ.
        """
        if len(groups) != len(blobs):
            raise ValueError(f"{len(groups)} groups for {len(blobs)} encoded sketches")
        lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
        if lengths.size and bool((lengths % _RECORD.size).any()):
            raise ValueError("not an encoded sketch: a blob is not whole 6-byte records")
        self._blobs += blobs
        self._blob_groups += groups
        self._blob_sizes += (lengths // _RECORD.size).tolist()

    def add(self, group: int, duration_ns: int) -> None:
        """Add one duration (nanoseconds; below 1 counts as zero) to ``group``."""
        key = bin_key(duration_ns)
        self._keys.append(_ZERO_RECORD_KEY if key is None else key)
        self._key_groups.append(group)

    def percentiles(self, groups: int) -> list[_Percentiles]:
        """``(p50, p95, p99)`` per group ``0 .. groups - 1``, as :meth:`LatencySketch.percentiles`.

        Raises:
            ValueError: a group added is outside ``0 .. groups - 1``.
        """
        records = np.frombuffer(b"".join(self._blobs), dtype=_RECORD_DTYPE)
        keys = np.concatenate(
            (records["key"].astype(np.int64), np.array(self._keys, dtype=np.int64))
        )
        counts = np.concatenate(
            (records["count"].astype(np.float64), np.ones(len(self._keys), dtype=np.float64))
        )
        owners = np.concatenate(
            (
                np.repeat(
                    np.array(self._blob_groups, dtype=np.int64),
                    np.array(self._blob_sizes, dtype=np.int64),
                ),
                np.array(self._key_groups, dtype=np.int64),
            )
        )
        found: list[_Percentiles] = [(None, None, None)] * groups
        if not keys.size:
            return found
        if int(owners.min()) < 0 or int(owners.max()) >= groups:
            raise ValueError(f"a group added is outside 0..{groups - 1}")
        low = int(keys.min())
        span = int(keys.max()) - low + 1
        step = max(1, _CELLS_PER_PASS // span)
        for first in range(0, groups, step):
            last = min(groups, first + step)
            if first == 0 and last == groups:
                part_keys, part_counts, part_owners = keys, counts, owners
            else:
                mine = (owners >= first) & (owners < last)
                part_keys, part_counts, part_owners = keys[mine], counts[mine], owners[mine]
            sums = np.bincount(
                (part_owners - first) * span + (part_keys - low),
                weights=part_counts,
                minlength=(last - first) * span,
            ).reshape(last - first, span)
            _ranks_into(found, first, np.cumsum(sums, axis=1), low)
        return found


def _ranks_into(
    found: list[_Percentiles], first: int, running: npt.NDArray[np.float64], low: int
) -> None:
    """Fill ``found[first + row]`` from each row's cumulative counts per key (from ``low``).

    Nearest rank as :meth:`LatencySketch.percentiles`: ``max(1, ceil(total * p / 100))``
    (the same float division as Python's), the first key whose running count reaches it.
    """
    totals = running[:, -1]
    columns = []
    for p in (50, 95, 99):
        ranks = np.maximum(1.0, np.ceil(totals * p / 100))
        columns.append((running >= ranks[:, None]).argmax(axis=1).tolist())
    for row, (total, c50, c95, c99) in enumerate(zip(totals.tolist(), *columns, strict=True)):
        if total == 0:
            continue
        values = []
        for column in (c50, c95, c99):
            key = column + low
            values.append(0 if key == _ZERO_RECORD_KEY else max(1, round(_MAPPING.value(key))))
        found[first + row] = (values[0], values[1], values[2])
