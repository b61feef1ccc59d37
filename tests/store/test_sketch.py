"""The RED roll-ups' latency sketch (``coremetry.store._sketch``): ddsketch's bins, nearest rank."""

import math
import random

import pytest
from ddsketch.mapping import LogarithmicMapping

from coremetry.store._sketch import (
    KEY_MULTIPLIER,
    RELATIVE_ACCURACY,
    ZERO_KEY,
    LatencySketch,
    SketchTable,
    bin_key,
    decode_msgpack,
    encode_msgpack,
    merge_encoded,
    merge_encoded_groups,
    reencode_msgpack,
)


def _nearest_rank(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * p / 100)) - 1]


def test_bins_are_ddsketchs_logarithmic_mapping() -> None:
    mapping = LogarithmicMapping(RELATIVE_ACCURACY)
    rng = random.Random(3)
    values = [rng.randrange(1, 10**13) for _ in range(20_000)] + list(range(1, 3000))
    assert [bin_key(v) for v in values] == [mapping.key(v) for v in values]
    assert bin_key(0) is None
    assert mapping._multiplier == KEY_MULTIPLIER


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_are_within_the_stated_error_of_nearest_rank(seed: int) -> None:
    rng = random.Random(seed)
    values = [int(rng.lognormvariate(14, 2.5)) for _ in range(rng.randrange(1, 3000))]
    sketch = LatencySketch()
    for v in values:
        sketch.add(v)
    for p in (1, 50, 90, 95, 99, 100):
        exact = _nearest_rank(values, p)
        found = sketch.percentile(p)
        assert found is not None
        assert abs(found - exact) <= RELATIVE_ACCURACY * exact + 0.5, (p, found, exact)
    assert sketch.percentiles() == tuple(sketch.percentile(p) for p in (50, 95, 99))


def test_merged_sketches_equal_one_sketch_of_everything_and_survive_encoding() -> None:
    rng = random.Random(9)
    parts = [[rng.randrange(0, 10**9) for _ in range(rng.randrange(0, 200))] for _ in range(7)]
    whole = LatencySketch()
    merged = LatencySketch()
    for part in parts:
        one = LatencySketch()
        for v in part:
            one.add(v)
            whole.add(v)
        merged.merge_encoded(one.encode())
    assert (merged.bins, merged.zeros) == (whole.bins, whole.zeros)
    assert merged.count == sum(map(len, parts))
    again = LatencySketch.decode(whole.encode())
    assert (again.bins, again.zeros) == (whole.bins, whole.zeros)


def test_bins_from_a_query_engine_count_the_zero_bin() -> None:
    sketch = LatencySketch()
    sketch.add_bins([ZERO_KEY, 10, 10], [3, 1, 2])
    assert (sketch.zeros, sketch.bins, sketch.percentile(50)) == (3, {10: 3}, 0)
    assert LatencySketch().percentiles() == (None, None, None)


@pytest.mark.parametrize("seed", range(20))
def test_encoded_sketches_merge_without_decoding(seed: int) -> None:
    rng = random.Random(seed)
    a, b = LatencySketch(), LatencySketch()
    for sketch in (a, b):
        for _ in range(rng.randrange(0, 60)):
            sketch.add(rng.choice([0, rng.randrange(1, 10**4), rng.randrange(1, 10**10)]))
    merged = LatencySketch.decode(merge_encoded(a.encode(), b.encode()))
    a.merge(b)
    assert (merged.bins, merged.zeros) == (a.bins, a.zeros)
    assert merge_encoded(merged.encode(), LatencySketch().encode()) == merged.encode()


@pytest.mark.parametrize("zeros", [0, 1, 60, 96, 100])
def test_percentiles_in_one_pass_equal_each_percentile_alone(zeros: int) -> None:
    # Wide sketches (hundreds of bins) with zero durations below some, all or none of the ranks.
    rng = random.Random(zeros)
    sketch = LatencySketch()
    for _ in range(zeros):
        sketch.add(0)
    for _ in range(100 - zeros):
        sketch.add(int(rng.lognormvariate(14, 4)))
    assert sketch.percentiles() == tuple(sketch.percentile(p) for p in (50, 95, 99))


@pytest.mark.parametrize("seed", range(10))
def test_a_table_of_groups_answers_as_each_group_merged_alone(seed: int) -> None:
    # Encoded sketches and single durations into groups, some groups left empty.
    rng = random.Random(seed)
    groups = rng.randrange(1, 12)
    alone = [LatencySketch() for _ in range(groups)]
    table = SketchTable()
    for _ in range(rng.randrange(0, 80)):
        group = rng.randrange(groups)
        part = LatencySketch()
        for _ in range(rng.randrange(0, 40)):
            part.add(rng.choice([0, rng.randrange(1, 10**4), int(rng.lognormvariate(14, 3))]))
        table.add_encoded(group, part.encode())
        alone[group].merge_encoded(part.encode())
        if rng.random() < 0.5:
            duration = rng.choice([0, -5, rng.randrange(1, 10**12)])
            table.add(group, duration)
            alone[group].add(duration)
    assert table.percentiles(groups) == [sketch.percentiles() for sketch in alone]


def test_a_table_sums_in_passes_when_its_groups_are_many() -> None:
    # 3,000 groups of keys 0..~2,000 do not fit one pass of the table's bounded sums.
    table = SketchTable()
    alone = [LatencySketch() for _ in range(3000)]
    for group, sketch in enumerate(alone):
        for duration in (1, 10**9 * (group + 1), 10**18):
            sketch.add(duration)
            table.add(group, duration)
    assert table.percentiles(3000) == [sketch.percentiles() for sketch in alone]
    with pytest.raises(ValueError, match=r"outside 0\.\.2998"):
        table.percentiles(2999)


def test_an_encoded_sketch_is_six_byte_records_and_bad_bytes_are_refused() -> None:
    sketch = LatencySketch()
    sketch.zeros = 2
    sketch.bins = {0: 1, 2199: 2**33 + 5}  # a count above 32 bits: split over records
    data = sketch.encode()
    assert len(data) == 6 * 5  # zeros, key 0, and key 2199 over three records
    again = LatencySketch.decode(data)
    assert (again.zeros, again.bins) == (2, {0: 1, 2199: 2**33 + 5})
    table = SketchTable()
    table.add_encoded(0, data)
    assert table.percentiles(1) == [again.percentiles()]
    assert LatencySketch().encode() == b""
    one = LatencySketch()
    one.add_bins([2199, 5], [1, 1])
    merged = LatencySketch.decode(merge_encoded(data, one.encode()))
    assert (merged.zeros, merged.bins) == (2, {0: 1, 5: 1, 2199: 2**33 + 6})
    with pytest.raises(ValueError, match="not an encoded sketch"):
        LatencySketch.decode(data[:-1])
    with pytest.raises(ValueError, match="not an encoded sketch"):
        SketchTable().add_encoded(0, b"12345")


@pytest.mark.parametrize("seed", range(5))
def test_schema_4_sketches_reencode_to_the_same_bins(seed: int) -> None:
    rng = random.Random(seed)
    sketch = LatencySketch()
    for _ in range(rng.randrange(0, 300)):
        sketch.add(rng.choice([0, int(rng.lognormvariate(14, 3))]))
    old = encode_msgpack(sketch)
    assert (decode_msgpack(old).bins, decode_msgpack(old).zeros) == (sketch.bins, sketch.zeros)
    assert reencode_msgpack(old) == sketch.encode()


@pytest.mark.parametrize("sizes", [(3000, 5), (5, 3000), (400, 400)])
def test_large_encoded_sketches_merge_as_small_ones(sizes: tuple[int, int]) -> None:
    # Hundreds of bins (a stored day's sketch) take the bulk path; the answer is the same.
    rng = random.Random(sum(sizes))
    a, b = LatencySketch(), LatencySketch()
    for sketch, size in zip((a, b), sizes, strict=True):
        for _ in range(size):
            sketch.add(rng.choice([0, int(rng.lognormvariate(14, 3))]))
    merged = merge_encoded(a.encode(), b.encode())
    a.merge(b)
    assert merged == a.encode()


@pytest.mark.parametrize("seed", range(10))
def test_many_encoded_sketches_merge_per_group(seed: int) -> None:
    # The closed-day cache's merge: each group's blobs summed per bin, as one merge at a time.
    rng = random.Random(seed)
    groups = rng.randrange(1, 6)
    owners, blobs = [], []
    expected = [LatencySketch() for _ in range(groups)]
    for _ in range(rng.randrange(0, 30)):
        sketch = LatencySketch()
        for _ in range(rng.randrange(0, 80)):
            sketch.add(rng.choice([0, rng.randrange(1, 10**4), rng.randrange(1, 10**10)]))
        owner = rng.randrange(groups)
        owners.append(owner)
        blobs.append(sketch.encode())
        expected[owner].merge(sketch)
    merged = merge_encoded_groups(owners, blobs, groups)
    assert [LatencySketch.decode(blob).bins for blob in merged] == [e.bins for e in expected]
    assert [LatencySketch.decode(blob).zeros for blob in merged] == [e.zeros for e in expected]


def test_merged_groups_split_a_count_above_32_bits() -> None:
    big = LatencySketch()
    big.add_bins([10], [2**32 - 1])
    merged = merge_encoded_groups([1, 1], [big.encode(), big.encode()], 2)
    assert merged[0] == b""
    assert LatencySketch.decode(merged[1]).bins == {10: 2 * (2**32 - 1)}
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        merge_encoded_groups([2], [big.encode()], 2)
    with pytest.raises(ValueError, match="6-byte records"):
        merge_encoded_groups([0], [b"12345"], 1)
