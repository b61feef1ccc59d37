"""The series detector's rules on synthetic series with a known answer.

Each series is 5-minute points (NAB's and CloudWatch's step) of Gaussian noise around a level,
with one pattern added: a step, a spike, a drift, a daily cycle. The detector runs with its
defaults, the parameter set scored on NAB.
"""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from coremetry.detection import Anomaly, DetectorConfig, Series, detect_series

STEP = 300 * 1_000_000_000
START = 1_700_000_000 * 1_000_000_000
DAY_POINTS = 288


def series(values: list[float], *, watch: str = "both") -> Series:
    return Series(
        series_id="test",
        name="test.value",
        points=[(START + i * STEP, v) for i, v in enumerate(values)],
        watch=watch,  # type: ignore[arg-type]  # a literal from the test's parameters
    )


def noise(count: int, *, seed: int, level: float = 50.0, sigma: float = 1.0) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0.0, sigma) for _ in range(count)]


def detect(values: list[float], *, watch: str = "both") -> list[Anomaly]:
    return detect_series(series(values, watch=watch))[0]


def index_of(time_unix_nano: int) -> int:
    return (time_unix_nano - START) // STEP


@pytest.mark.parametrize("seed", range(8))
def test_noise_only_raises_nothing(seed: int) -> None:
    assert detect(noise(7 * DAY_POINTS, seed=seed)) == []


def test_heavy_tailed_noise_raises_rarely() -> None:
    # Laplace noise has far more large deviations than a Gaussian, as real latency has: two
    # points beyond the week's envelope within half an hour happen about once a month
    # (measured: 0.25 a week). Ten weeks of it may raise a few short anomalies, no more.
    found: list[Anomaly] = []
    for seed in range(10):
        rng = random.Random(seed)
        values = [50.0 + rng.choice((-1, 1)) * rng.expovariate(1.0) for _ in range(7 * DAY_POINTS)]
        found.extend(detect(values))
    assert len(found) <= 5
    assert all(a.end_unix_nano - a.start_unix_nano <= 6 * STEP for a in found)


def test_one_spike_is_not_an_anomaly() -> None:
    values = noise(3 * DAY_POINTS, seed=1)
    values[2 * DAY_POINTS] += 40.0
    assert detect(values) == []


def test_a_burst_of_spikes_is_one_anomaly() -> None:
    values = noise(3 * DAY_POINTS, seed=1)
    at = 2 * DAY_POINTS
    for offset in (0, 2, 3):
        values[at + offset] += 40.0
    [anomaly] = detect(values)
    assert anomaly.direction == "up"
    assert index_of(anomaly.start_unix_nano) == at
    assert index_of(anomaly.detected_unix_nano) == at + 2  # the second exceeding point
    assert anomaly.observed == pytest.approx(max(values[at : at + 4]))
    assert anomaly.baseline == pytest.approx(50.0, abs=0.5)


def test_step_opens_once_and_closes_when_the_new_level_is_normal() -> None:
    values = noise(5 * DAY_POINTS, seed=2)
    at = 2 * DAY_POINTS
    for i in range(at, len(values)):
        values[i] += 8.0
    [anomaly] = detect(values)
    assert anomaly.direction == "up"
    assert at <= index_of(anomaly.start_unix_nano) <= at + 2
    assert index_of(anomaly.detected_unix_nano) <= at + 6
    assert not anomaly.ongoing  # the new level became the baseline
    assert index_of(anomaly.end_unix_nano) < len(values) - 1
    assert anomaly.observed > 56.0
    assert anomaly.baseline == pytest.approx(50.0, abs=0.5)


def test_hovering_near_the_threshold_opens_and_closes_once() -> None:
    # A 4.5-sigma shift for two hours: points cross z_open and fall back below it again and
    # again; hysteresis (close only below z_close) keeps it one anomaly.
    values = noise(3 * DAY_POINTS, seed=3)
    at = 2 * DAY_POINTS
    for i in range(at, at + 24):
        values[i] += 4.5
    found = detect(values)
    assert len(found) == 1
    assert not found[0].ongoing
    assert index_of(found[0].end_unix_nano) <= at + 24


def test_step_down_respects_watch() -> None:
    values = noise(3 * DAY_POINTS, seed=4)
    at = 2 * DAY_POINTS
    for i in range(at, at + 36):
        values[i] -= 10.0
    assert detect(values, watch="up") == []
    [anomaly] = detect(values, watch="both")
    assert anomaly.direction == "down"
    assert anomaly.observed < 42.0
    [same] = detect(values, watch="down")
    assert same == anomaly


def test_slow_drift_is_followed_not_raised() -> None:
    # 2 noise widths per day: the trailing median keeps up with it.
    values = noise(7 * DAY_POINTS, seed=5)
    values = [v + 2.0 * i / DAY_POINTS for i, v in enumerate(values)]
    assert detect(values) == []


def test_fast_ramp_is_raised_while_it_outruns_the_baseline() -> None:
    values = noise(4 * DAY_POINTS, seed=5)
    at = 2 * DAY_POINTS
    for i in range(at, len(values)):
        values[i] += min(0.25 * (i - at), 30.0)  # +30 over 10 hours, then flat
    found = detect(values)
    assert len(found) == 1
    assert found[0].direction == "up"
    assert at < index_of(found[0].start_unix_nano) < at + 60


def test_lasting_small_shift_is_seen_by_the_smoothed_view() -> None:
    # +2.5 sigma for four hours: no single point is remarkable, the hour-long median is.
    values = noise(4 * DAY_POINTS, seed=6)
    at = 3 * DAY_POINTS
    for i in range(at, at + 48):
        values[i] += 2.5
    [anomaly] = detect(values)
    assert anomaly.direction == "up"
    assert at <= index_of(anomaly.detected_unix_nano) <= at + 24


def daily_cycle(days: int, *, seed: int, amplitude: float = 10.0) -> list[float]:
    rng = random.Random(seed)
    return [
        50.0 + amplitude * math.sin(2 * math.pi * i / DAY_POINTS) + rng.gauss(0.0, 1.0)
        for i in range(days * DAY_POINTS)
    ]


@pytest.mark.parametrize("seed", range(3))
def test_daily_cycle_alone_raises_nothing(seed: int) -> None:
    assert detect(daily_cycle(8, seed=seed)) == []


def test_seasonal_anomaly_at_the_trough_is_found_by_the_daily_baseline() -> None:
    # At the daily trough (phase 3/4) the value rises to the day's average: within the
    # range of the whole day, but 10 noise widths above that time of day on prior days.
    values = daily_cycle(6, seed=7)
    trough = 5 * DAY_POINTS + 3 * DAY_POINTS // 4
    for i in range(trough - 6, trough + 6):
        values[i] += 10.0
    [anomaly] = detect(values)
    assert anomaly.direction == "up"
    assert anomaly.season_ns == 86_400 * 1_000_000_000
    assert trough - 6 <= index_of(anomaly.start_unix_nano) <= trough
    assert anomaly.baseline == pytest.approx(40.0, abs=1.5)  # the trough, not the day's median
    without_seasons = detect_series(
        series(values), msgspec.structs.replace(DetectorConfig(), seasons_ns=())
    )[0]
    assert without_seasons == []  # the plain baseline cannot see it


def test_bursty_series_repeating_its_bursts_stays_quiet_until_a_larger_one() -> None:
    # Idle at 0 with a 1-hour burst to 100 every 8 hours (a batch job), for 6 days; then a
    # burst twice as high.
    rng = random.Random(8)
    values = [abs(rng.gauss(0.0, 0.5)) for _ in range(7 * DAY_POINTS)]
    for start in range(24, 6 * DAY_POINTS, 96):
        for i in range(start, start + 12):
            values[i] = 100.0 + rng.gauss(0.0, 3.0)
    big = 6 * DAY_POINTS + 24
    for i in range(big, big + 12):
        values[i] = 200.0 + rng.gauss(0.0, 3.0)
    found = detect(values)
    first_bursts = [a for a in found if index_of(a.start_unix_nano) < 3 * DAY_POINTS // 8]
    later = [a for a in found if a not in first_bursts]
    assert len(later) == 1  # once the bursts are in the envelope, only the larger one counts
    assert big <= index_of(later[0].start_unix_nano) <= big + 1


def test_nan_and_inf_are_skipped_and_counted() -> None:
    values = noise(3 * DAY_POINTS, seed=9)
    at = 2 * DAY_POINTS
    for i in range(at, at + 36):
        values[i] += 10.0
    clean = detect_series(series(values))
    dirty_values = list(values)
    points = [(START + i * STEP, v) for i, v in enumerate(dirty_values)]
    extra = [(START + i * STEP + STEP // 2, math.nan) for i in range(0, len(values), 50)]
    extra.append((START + 10 * STEP + 7, math.inf))
    extra.append((START + 11 * STEP + 7, -math.inf))
    dirty = detect_series(Series(series_id="test", name="test.value", points=points + extra))
    assert dirty[0] == clean[0]
    assert dirty[1].nonfinite_points == len(extra)
    assert dirty[1].points == clean[1].points


def test_order_and_duplicate_timestamps() -> None:
    values = noise(3 * DAY_POINTS, seed=10)
    for i in range(2 * DAY_POINTS, 2 * DAY_POINTS + 36):
        values[i] += 10.0
    points = [(START + i * STEP, v) for i, v in enumerate(values)]
    expected = detect_series(Series(series_id="t", name="n", points=points))
    shuffled = list(points)
    random.Random(0).shuffle(shuffled)
    stale = [(t, v - 1000.0) for t, v in points[::7]]  # sent first, overwritten below
    got = detect_series(Series(series_id="t", name="n", points=stale + shuffled))
    assert got[0] == expected[0]
    assert got[1].duplicate_points == len(stale)


def test_gap_closes_an_open_anomaly_at_its_last_point() -> None:
    values = noise(3 * DAY_POINTS, seed=11)
    at = 2 * DAY_POINTS
    for i in range(at, len(values)):
        values[i] += 10.0
    points = [(START + i * STEP, v) for i, v in enumerate(values)]
    cut = at + 12
    resumed = [(t + 100 * STEP, v) for t, v in points[cut + 1 :]]
    anomalies, summary = detect_series(
        Series(series_id="t", name="n", points=points[: cut + 1] + resumed)
    )
    assert summary.gaps == 1
    assert anomalies[0].end_unix_nano == points[cut][0]
    assert not anomalies[0].ongoing


def test_anomaly_still_open_at_the_end_is_ongoing() -> None:
    values = noise(2 * DAY_POINTS, seed=12)
    for i in range(len(values) - 10, len(values)):
        values[i] += 15.0
    [anomaly] = detect(values)
    assert anomaly.ongoing
    assert anomaly.end_unix_nano == START + (len(values) - 1) * STEP


def test_too_short_a_series_is_not_judged() -> None:
    values = noise(DetectorConfig().min_history_points, seed=13)
    values[-3:] = [500.0, 500.0, 500.0]
    anomalies, summary = detect_series(series(values))
    assert anomalies == []
    assert summary.points == len(values)
    assert detect_series(Series(series_id="t", name="n", points=[]))[1].step_ns == 0


def test_series_identity_is_carried_to_the_anomaly() -> None:
    values = noise(3 * DAY_POINTS, seed=14)
    for i in range(2 * DAY_POINTS, 2 * DAY_POINTS + 12):
        values[i] += 20.0
    one = Series(
        series_id="red/checkout/duration.p99",
        name="http.server.request.duration.p99",
        points=[(START + i * STEP, v) for i, v in enumerate(values)],
        labels={"service.name": "checkout"},
        service_name="checkout",
        unit="s",
        watch="up",
        signal="latency",
    )
    [anomaly] = detect_series(one)[0]
    assert (anomaly.series_id, anomaly.name, anomaly.service_name, anomaly.unit) == (
        "red/checkout/duration.p99",
        "http.server.request.duration.p99",
        "checkout",
        "s",
    )
    assert anomaly.labels == {"service.name": "checkout"}
    assert anomaly.signal == "latency"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("z_open", 0.0),
        ("z_close", 9.0),
        ("evidence_k", 7),
        ("window_points", 2),
        ("min_history_points", 1000),
        ("envelope_tail", 0.5),
        ("seasons_ns", (0,)),
    ],
)
def test_bad_config_names_the_field(field: str, value: object) -> None:
    config = msgspec.structs.replace(DetectorConfig(), **{field: value})
    with pytest.raises(ValueError, match=f"DetectorConfig.{field} "):
        detect_series(series(noise(10, seed=0)), config)


@pytest.mark.parametrize(
    ("point", "message"),
    [
        ((1.5, 1.0), r"points\[1\].time_unix_nano must be an int"),
        ((True, 1.0), r"points\[1\].time_unix_nano must be an int"),
        ((START, "3"), r"points\[1\].value must be a number"),
    ],
)
def test_bad_point_names_its_index(point: tuple[object, object], message: str) -> None:
    points: list[tuple[object, object]] = [(START, 1.0), point]
    bad = Series(series_id="t", name="n", points=points)  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(ValueError, match=message):
        detect_series(bad)
