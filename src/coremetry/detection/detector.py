"""Series-level anomaly detection: robust trailing baselines, minimum evidence, hysteresis.

Pure computation over one series of ``(time_unix_nano, value)`` points; no I/O, no clock.
:func:`detect_series` turns a :class:`Series` into the :class:`Anomaly` records it holds,
judging every point only against the points *before* it (causal: what a detector running
every minute would have said at that moment, so scores on labelled data are honest).

Method, per point ``x`` (parameters are the fields of :class:`DetectorConfig`):

1. **Clean.** Points are sorted by time; a repeated timestamp keeps its last value; NaN and
   ±Inf are skipped (counted in :attr:`DetectionSummary.nonfinite_points`). A gap longer
   than ``max_gap_steps`` times the series' median step closes an open anomaly at its last
   point and resets the evidence (a scrape outage is not "the value stayed anomalous").
2. **Two views.** Every rule below runs on the raw values and, separately, on their rolling
   median over the last ``smooth_points`` points. The raw view sees sharp departures; the
   smoothed view sees a modest shift that lasts (an hour at 2-3 noise widths), which no single
   raw point shows — the job of an EWMA/CUSUM chart (Montgomery, *Introduction to Statistical
   Quality Control*, ch. 9), done with a median so that spikes do not leak into it. Each view
   has its own baseline and scale, so the smoothed view's scale accounts for the series'
   autocorrelation without a model of it.
3. **Plain baseline.** Over the trailing ``window_points`` values: the median as the
   expected value and a robust scale, the interquartile range / 1.349 (the standard
   deviation for Gaussian data). Where the IQR is zero (quantized or mostly-flat series) the
   10-90 % range / 2.563 stands in; the scale never drops below
   ``relative_scale_floor · |expected|`` nor ``absolute_scale_floor``. Median and IQR are the
   textbook robust location/scale pair (Rousseeuw & Croux, "Alternatives to the Median
   Absolute Deviation", JASA 1993); the IQR rather than the MAD because it reads off the
   sorted window in O(1) per point.
4. **Seasonal baselines** (a day and a week, ``seasons_ns``), after Twitter's seasonal
   hybrid ESD (Hochenbaum, Vallis & Kejariwal, "Automatic Anomaly Detection in the Cloud
   Via Statistical Learning", 2017), which uses medians rather than means of the seasonal
   decomposition: for each season, the expected value is the median of the values at the
   same phase (± ``season_neighbours`` points) over up to ``season_periods`` prior seasons,
   once ``min_season_periods`` exist; its scale is the robust scale of the trailing
   residuals against it. A seasonal baseline replaces the plain one at a point only when
   its residual scale is below ``season_gain`` times the plain scale (the smallest wins), so
   series without a daily or weekly pattern never pay for one; then the envelope below is
   taken over the residuals too (a night-time value as high as a normal midday is still
   anomalous at night).
5. **Exceeding.** ``z = (x - expected) / scale``. A point exceeds upwards when
   ``z >= z_open``, ``x - expected >= min_relative_change · |expected|``, and ``x`` lies
   beyond the recent *envelope*: above the ``1 - envelope_tail`` quantile ``hi`` of the last
   ``envelope_points`` values by ``envelope_margin · (hi - median)`` (downwards mirrored).
   The envelope is what keeps bursty series quiet: a burst as high as bursts seen during the
   last week is that series' normal, however far it is from the median. Only departures a
   series cares about count (``Series.watch``: latency ``up``, request rate ``both``).
6. **Minimum evidence.** An anomaly opens when at least ``evidence_k`` of the last
   ``evidence_n`` points exceed in the same direction, in either view — a "k of n" run rule
   as in the Western Electric / Nelson control-chart rules — so one outlier never opens one.
7. **Hysteresis.** An open anomaly stays open while a view keeps ``|z| >= z_close`` in its
   direction (``z_close < z_open``) and closes after ``close_points`` consecutive points
   below that; its end is the last point still at or beyond ``z_close``. So a series
   hovering around the threshold opens and closes once. Anomalous values enter the windows
   like any other, so a lasting level shift becomes the new normal and its anomaly closes.

The defaults were chosen once, by a grid over the thresholds, evidence, envelope and
smoothing on NAB's ``realAWSCloudwatch`` series, and are the same for every series (no
per-series tuning); ``realKnownCause`` is the held-out check. Figures in ``bench/README.md``
(``bench/detect_score.py``).

Units: times in unix nanoseconds, values in the series' own unit. Bad *values* are skipped
and counted, never raised; bad *arguments* raise :class:`ValueError` naming the field.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, Literal, TypeAlias

import msgspec

__all__ = [
    "Anomaly",
    "DetectionSummary",
    "DetectorConfig",
    "Direction",
    "Series",
    "Side",
    "Signal",
    "Watch",
    "detect_anomalies",
    "detect_series",
]

Direction: TypeAlias = Literal["up", "down"]
"""Which way an anomaly departs from its baseline."""

Watch: TypeAlias = Literal["both", "up", "down"]
"""Which departures a series cares about (latency: ``up``; request rate: ``both``)."""

Signal: TypeAlias = Literal["latency", "errors", "traffic", "saturation", "logs", "other"]
"""What a series measures, in the terms of Google SRE's four golden signals (latency, traffic,
errors, saturation) plus ``logs`` (severity rates, new templates) and ``other``. Problems use
it to rank origins: a traffic drop at a callee is usually a consequence of its caller's
trouble, not a cause, so ``traffic`` anomalies do not make a service an origin candidate."""

Side: TypeAlias = Literal["", "server", "client"]
"""Which end of a call a latency series measures, where the series says so: ``server`` (the
service's own handling of requests it received: entry spans, ``http.server.request.duration``),
``client`` (its calls into others, waiting included: ``http.client.request.duration``), ``""``
(not a call latency, or not known). Problems use it to tell a service that is slow from one
that waits on a slow callee."""

_DAY_NS: Final = 86_400 * 1_000_000_000
_IQR_TO_SIGMA: Final = 1.349
_P10_P90_TO_SIGMA: Final = 2.563


class DetectorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parameters of :func:`detect_anomalies`; the defaults are the tuned set used everywhere.

    Attributes:
        window_points: trailing window length in points for the plain baseline and for the
            seasonal residual scale.
        min_history_points: points needed in the window before any point is judged.
        z_open: ``|z|`` at or above which a point exceeds.
        z_close: ``|z|`` below which a point counts towards closing (hysteresis).
        evidence_k: exceeding points needed among the last ``evidence_n`` to open.
        evidence_n: see ``evidence_k``.
        close_points: consecutive points below ``z_close`` that close an anomaly.
        min_relative_change: a point exceeds only if it departs from the expected value by
            at least this fraction of ``|expected|`` (0 disables).
        relative_scale_floor: the scale is at least this fraction of ``|expected|``.
        absolute_scale_floor: the scale is at least this (series unit).
        seasons_ns: season lengths in nanoseconds tried (default a day and a week; empty
            disables seasonality). Each needs ``min_season_periods`` of history.
        season_periods: prior seasons the seasonal baseline uses at most.
        min_season_periods: prior seasons needed before the seasonal baseline is tried.
        season_neighbours: points either side of the same phase taken from each season.
        season_gain: the seasonal baseline is used when its residual scale is below this
            fraction of the plain scale.
        max_gap_steps: a gap longer than this many median steps resets evidence.
        envelope_points: how many recent values the envelope spans (2016: a week of
            5-minute points).
        envelope_tail: the envelope's bounds are the ``envelope_tail`` and
            ``1 - envelope_tail`` quantiles of those values.
        envelope_margin: how far beyond a bound a value must be, as a fraction of the
            bound's distance from the envelope's median.
        smooth_points: length of the rolling median of the smoothed view (1 disables it).
    """

    window_points: int = 288
    min_history_points: int = 72
    z_open: float = 4.0
    z_close: float = 2.5
    evidence_k: int = 2
    evidence_n: int = 6
    close_points: int = 3
    min_relative_change: float = 0.0
    relative_scale_floor: float = 0.01
    absolute_scale_floor: float = 1e-9
    seasons_ns: tuple[int, ...] = (_DAY_NS, 7 * _DAY_NS)
    season_periods: int = 7
    min_season_periods: int = 2
    season_neighbours: int = 2
    season_gain: float = 0.7
    max_gap_steps: float = 10.0
    envelope_points: int = 2016
    envelope_tail: float = 0.005
    envelope_margin: float = 0.1
    smooth_points: int = 12

    def validate(self) -> None:
        """Check the parameters are coherent.

        Raises:
            ValueError: naming the first offending field.
        """
        checks: list[tuple[str, bool, str]] = [
            ("window_points", self.window_points >= 4, "must be at least 4"),
            (
                "min_history_points",
                2 <= self.min_history_points <= self.window_points,
                "must be between 2 and window_points",
            ),
            ("z_open", self.z_open > 0, "must be positive"),
            ("z_close", 0 <= self.z_close <= self.z_open, "must be between 0 and z_open"),
            ("evidence_n", self.evidence_n >= 1, "must be at least 1"),
            ("evidence_k", 1 <= self.evidence_k <= self.evidence_n, "must be in 1..evidence_n"),
            ("close_points", self.close_points >= 1, "must be at least 1"),
            ("min_relative_change", self.min_relative_change >= 0, "must not be negative"),
            ("relative_scale_floor", self.relative_scale_floor >= 0, "must not be negative"),
            ("absolute_scale_floor", self.absolute_scale_floor > 0, "must be positive"),
            ("seasons_ns", all(season > 0 for season in self.seasons_ns), "must be positive"),
            ("season_periods", self.season_periods >= 1, "must be at least 1"),
            (
                "min_season_periods",
                1 <= self.min_season_periods <= self.season_periods,
                "must be in 1..season_periods",
            ),
            ("season_neighbours", self.season_neighbours >= 0, "must not be negative"),
            ("season_gain", 0 < self.season_gain <= 1, "must be in (0, 1]"),
            ("max_gap_steps", self.max_gap_steps >= 1, "must be at least 1"),
            ("envelope_points", self.envelope_points >= 1, "must be at least 1"),
            ("envelope_tail", 0 <= self.envelope_tail < 0.5, "must be in [0, 0.5)"),
            ("envelope_margin", self.envelope_margin >= 0, "must not be negative"),
            ("smooth_points", self.smooth_points >= 1, "must be at least 1"),
        ]
        for field, ok, message in checks:
            if not ok:
                raise ValueError(f"DetectorConfig.{field} {message}")


class Series(msgspec.Struct, frozen=True, kw_only=True):
    """One time series to judge.

    Attributes:
        series_id: stable identity, unique among the series of one detection run (e.g.
            ``"red/ts-travel-service/duration.p99"``).
        name: what is measured, in OTel naming where one exists (``http.server.request.
            duration.p99``, ``system.cpu.utilization``).
        labels: the series' labels as text.
        service_name: the service the series belongs to (``service.name``), ``""`` when it
            belongs to none; problems group anomalies by it.
        unit: the values' unit (UCUM, as OTel metrics: ``s``, ``1``, ``{request}/s``).
        watch: which departures matter: ``up`` (latency, error rate), ``down``, ``both``.
        signal: what the series measures (see :data:`Signal`).
        side: for call latencies, which end measures it (see :data:`Side`).
        points: ``(time_unix_nano, value)`` pairs, any order.
    """

    series_id: str
    name: str
    points: Sequence[tuple[int, float]]
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    service_name: str = ""
    unit: str = ""
    watch: Watch = "both"
    signal: Signal = "other"
    side: Side = ""


class Anomaly(msgspec.Struct, frozen=True, kw_only=True):
    """One anomalous episode of one series.

    Attributes:
        series_id: the :attr:`Series.series_id`.
        name: the series' name.
        labels: the series' labels.
        service_name: the series' service (``""`` for none).
        unit: the series' unit.
        direction: ``up`` or ``down`` from the baseline.
        start_unix_nano: the first exceeding point of the evidence that opened it.
        detected_unix_nano: the point at which the evidence rule was met (when a detector
            running live would have raised it).
        end_unix_nano: the last point still at or beyond ``z_close``.
        ongoing: true when the series ended with the anomaly still open.
        baseline: the expected value when it opened (series unit).
        observed: the most extreme value during it, in its direction (series unit).
        score: the largest ``|z|`` during it (robust standard deviations).
        points: how many of its points were at or beyond ``z_close``.
        season_ns: the season whose baseline judged the opening point (0: the plain one).
        signal: the series' :data:`Signal`.
        side: the series' :data:`Side`.
    """

    series_id: str
    name: str
    direction: Direction
    start_unix_nano: int
    detected_unix_nano: int
    end_unix_nano: int
    baseline: float
    observed: float
    score: float
    points: int
    ongoing: bool = False
    season_ns: int = 0
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    service_name: str = ""
    unit: str = ""
    signal: Signal = "other"
    side: Side = ""


class DetectionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`detect_series` saw besides the anomalies.

    Attributes:
        points: finite points judged or used as history.
        nonfinite_points: NaN/±Inf points skipped.
        duplicate_points: points dropped because a later one had the same timestamp.
        gaps: gaps longer than ``max_gap_steps`` median steps.
        step_ns: the median step between points (0 with fewer than 2 points).
    """

    points: int
    nonfinite_points: int
    duplicate_points: int
    gaps: int
    step_ns: int


class _SortedWindow:
    """The last ``size`` values in arrival order and sorted, for O(1) quantiles."""

    __slots__ = ("_fifo", "_size", "_sorted")

    def __init__(self, size: int) -> None:
        self._size = size
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._fifo)

    def push(self, value: float) -> None:
        if len(self._fifo) == self._size:
            old = self._fifo.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._fifo.append(value)
        bisect.insort(self._sorted, value)

    def quantile(self, q: float) -> float:
        """Linear-interpolated quantile (type 7, numpy's default); window must be non-empty."""
        data = self._sorted
        pos = q * (len(data) - 1)
        low = int(pos)
        high = min(low + 1, len(data) - 1)
        return data[low] + (data[high] - data[low]) * (pos - low)

    def scale(self) -> float:
        """Robust scale: IQR/1.349, or the 10-90 % range / 2.563 where the IQR is zero."""
        iqr = self.quantile(0.75) - self.quantile(0.25)
        if iqr > 0:
            return iqr / _IQR_TO_SIGMA
        return (self.quantile(0.9) - self.quantile(0.1)) / _P10_P90_TO_SIGMA

    def location_scale(self) -> tuple[float, float]:
        """``(median, scale())`` in one pass over the sorted list (the hot path)."""
        data = self._sorted
        last = len(data) - 1
        pos = 0.5 * last
        low = int(pos)
        median = data[low] + (data[min(low + 1, last)] - data[low]) * (pos - low)
        pos = 0.25 * last
        low = int(pos)
        q25 = data[low] + (data[min(low + 1, last)] - data[low]) * (pos - low)
        pos = 0.75 * last
        low = int(pos)
        q75 = data[low] + (data[min(low + 1, last)] - data[low]) * (pos - low)
        if q75 > q25:
            return median, (q75 - q25) / _IQR_TO_SIGMA
        return median, self.scale()


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2


def _clean(
    points: Iterable[tuple[int, float]],
) -> tuple[list[int], list[float], int, int]:
    """Sorted times and finite values, last value per timestamp; counts of dropped points."""
    nonfinite = 0
    latest: dict[int, float] = {}
    total = 0
    for index, (time_unix_nano, value) in enumerate(points):
        if type(time_unix_nano) is not int:  # exact: bool and float are rejected
            raise ValueError(f"points[{index}].time_unix_nano must be an int (unix ns)")
        if type(value) is not float and type(value) is not int:
            raise ValueError(f"points[{index}].value must be a number")
        if not math.isfinite(value):
            nonfinite += 1
            continue
        total += 1
        latest[time_unix_nano] = float(value)
    times = sorted(latest)
    return times, [latest[t] for t in times], nonfinite, total - len(times)


class _Judgement:
    __slots__ = ("expected", "season", "sign", "z")

    def __init__(self, z: float, expected: float, season: int, sign: int) -> None:
        self.z = z
        self.expected = expected
        self.season = season
        self.sign = sign


class _Season:
    """One season's same-phase lags and its residual windows, for one view."""

    __slots__ = ("envelope", "lags", "length", "residual", "residuals")

    def __init__(self, cfg: DetectorConfig, length: int, lags: list[list[int]]) -> None:
        self.length = length
        self.lags = lags
        self.residuals = _SortedWindow(cfg.window_points)
        self.envelope = _SortedWindow(cfg.envelope_points)
        self.residual: float | None = None


class _Channel:
    """Baseline, scale, envelope and seasonal residuals of one view of the series."""

    def __init__(self, cfg: DetectorConfig, lags: dict[int, list[list[int]]]) -> None:
        self.cfg = cfg
        self.values: list[float] = []
        self.window = _SortedWindow(cfg.window_points)
        self.envelope = _SortedWindow(cfg.envelope_points)
        self.seasons = [_Season(cfg, length, lag) for length, lag in lags.items()]

    def judge(self, x: float, up_allowed: bool, down_allowed: bool) -> _Judgement | None:
        """Judge the next value against the history, then add it; ``None`` while warming up."""
        cfg = self.cfg
        index = len(self.values)
        judgement: _Judgement | None = None
        for season in self.seasons:
            seasonal_expected = self._seasonal_expected(season.lags, index)
            season.residual = None if seasonal_expected is None else x - seasonal_expected
        if len(self.window) >= cfg.min_history_points:
            expected, scale = self.window.location_scale()
            envelope, position = self.envelope, x
            used = 0
            best = cfg.season_gain * scale
            for season in self.seasons:
                if season.residual is None or len(season.residuals) < cfg.min_history_points:
                    continue
                seasonal_scale = season.residuals.scale()
                if seasonal_scale < best:
                    best = seasonal_scale
                    expected = x - season.residual + season.residuals.quantile(0.5)
                    scale = seasonal_scale
                    envelope, position = season.envelope, season.residual
                    used = season.length
            scale = max(scale, cfg.relative_scale_floor * abs(expected), cfg.absolute_scale_floor)
            z = (x - expected) / scale
            sign = 0
            if abs(z) >= cfg.z_open and abs(x - expected) >= cfg.min_relative_change * abs(
                expected
            ):
                high = envelope.quantile(1 - cfg.envelope_tail)
                low = envelope.quantile(cfg.envelope_tail)
                middle = envelope.quantile(0.5)
                margin = cfg.envelope_margin
                if z > 0 and up_allowed and position > high + margin * (high - middle):
                    sign = 1
                elif z < 0 and down_allowed and position < low - margin * (middle - low):
                    sign = -1
            judgement = _Judgement(z, expected, used, sign)
        for season in self.seasons:
            if season.residual is not None:
                season.residuals.push(season.residual)
                season.envelope.push(season.residual)
        self.values.append(x)
        self.window.push(x)
        self.envelope.push(x)
        return judgement

    def _seasonal_expected(self, lags: list[list[int]], index: int) -> float | None:
        """Median of the same-phase neighbourhoods over prior seasons, or ``None``."""
        cfg = self.cfg
        values = self.values
        gathered: list[float] = []
        periods = 0
        for lag in lags:
            best = lag[index]
            if best < 0:
                continue
            low = max(0, best - cfg.season_neighbours)
            gathered.extend(values[low : min(index, best + cfg.season_neighbours + 1)])
            periods += 1
        if periods < cfg.min_season_periods:
            return None
        return _median(gathered)


def _season_lags(times: list[int], season: int, periods: int, tolerance: int) -> list[list[int]]:
    """Per prior season, per point: the index of the point at the same phase, or -1.

    ``lags[p - 1][i]`` is the index of the point nearest ``times[i] - p * season`` when it is
    within ``tolerance``. Two pointers, O(n) per season.
    """
    lags: list[list[int]] = []
    count = len(times)
    for period in range(1, periods + 1):
        shift = period * season
        found = [-1] * count
        j = 0
        for i in range(count):
            target = times[i] - shift
            while j + 1 < i and times[j + 1] <= target:
                j += 1
            best = -1
            best_distance = tolerance + 1
            for candidate in (j, j + 1):
                if candidate < i:
                    distance = abs(times[candidate] - target)
                    if distance < best_distance:
                        best, best_distance = candidate, distance
            found[i] = best
        lags.append(found)
    return lags


class _Open:
    """Book-keeping of the anomaly being built."""

    __slots__ = (
        "baseline",
        "detected",
        "direction",
        "end",
        "end_raw",
        "observed",
        "points",
        "score",
        "season",
        "start",
    )

    def __init__(
        self, *, direction: Direction, start: int, detected: int, baseline: float, season: int
    ) -> None:
        self.direction: Direction = direction
        self.start = start
        self.detected = detected
        self.end = detected
        self.end_raw: int | None = None
        self.baseline = baseline
        self.season = season
        self.observed = baseline
        self.score = 0.0
        self.points = 0

    def final_end(self) -> int:
        """The last point still anomalous, never before detection.

        In the raw view when it has one: the smoothed view lags by up to half its window.
        """
        end = self.end if self.end_raw is None else self.end_raw
        return max(end, self.detected)

    def extend(self, time_unix_nano: int, value: float, score: float, raw_held: bool) -> None:
        self.end = max(self.end, time_unix_nano)
        if raw_held:
            self.end_raw = (
                time_unix_nano if self.end_raw is None else max(self.end_raw, time_unix_nano)
            )
        self.points += 1
        self.score = max(self.score, score)
        if (self.direction == "up" and value > self.observed) or (
            self.direction == "down" and value < self.observed
        ):
            self.observed = value


def detect_series(
    series: Series, config: DetectorConfig | None = None
) -> tuple[list[Anomaly], DetectionSummary]:
    """Judge one series; return its anomalies (by start time) and what was seen.

    See the module docstring for the method. Anomalies closed by the end of the points have
    ``ongoing=False``; one still open at the last point has ``ongoing=True``. An anomaly ends
    at its last point still at or beyond ``z_close`` (in the raw view when it has one there).

    Args:
        series: the series; its points in any order, times in unix ns.
        config: parameters; ``None`` uses the tuned defaults.

    Returns:
        ``(anomalies, summary)``.

    Raises:
        ValueError: a bad config field, or a point whose time is not an int or whose value
            is not a number (naming ``points[i]``).
    """
    cfg = config if config is not None else DetectorConfig()
    cfg.validate()
    times, values, nonfinite, duplicates = _clean(series.points)
    count = len(times)
    step = 0
    if count >= 2:
        diffs = sorted(b - a for a, b in itertools.pairwise(times))
        step = diffs[len(diffs) // 2]
    max_gap = cfg.max_gap_steps * step if step else math.inf
    if count and min(values) == max(values):
        # A constant series never departs from its baseline: nothing to judge (a fast path
        # with the same result; idle counters and unused ratios are common).
        gaps = sum(1 for a, b in itertools.pairwise(times) if b - a > max_gap)
        return [], DetectionSummary(
            points=count,
            nonfinite_points=nonfinite,
            duplicate_points=duplicates,
            gaps=gaps,
            step_ns=step,
        )
    lags = {
        season: _season_lags(times, season, cfg.season_periods, step)
        for season in sorted(set(cfg.seasons_ns))
        if step and season >= 2 * step and times[-1] - times[0] >= cfg.min_season_periods * season
    }
    raw = _Channel(cfg, lags)
    smooth = _Channel(cfg, lags) if cfg.smooth_points > 1 else None
    recent: deque[float] = deque(maxlen=max(1, cfg.smooth_points))
    up_allowed = series.watch in ("both", "up")
    down_allowed = series.watch in ("both", "down")

    # (sign, time, value, score, raw z) of the last evidence_n judged points
    evidence: deque[tuple[int, int, float, float, float]] = deque(maxlen=cfg.evidence_n)
    found: list[Anomaly] = []
    current: _Open | None = None
    below = 0
    gaps = 0

    def close(ongoing: bool) -> None:
        nonlocal current
        if current is not None:
            found.append(
                Anomaly(
                    series_id=series.series_id,
                    name=series.name,
                    labels=series.labels,
                    service_name=series.service_name,
                    unit=series.unit,
                    signal=series.signal,
                    side=series.side,
                    direction=current.direction,
                    start_unix_nano=current.start,
                    detected_unix_nano=current.detected,
                    end_unix_nano=current.final_end(),
                    ongoing=ongoing,
                    baseline=current.baseline,
                    observed=current.observed,
                    score=round(current.score, 3),
                    points=current.points,
                    season_ns=current.season,
                )
            )
        current = None

    for i in range(count):
        t = times[i]
        x = values[i]
        if i and t - times[i - 1] > max_gap:
            gaps += 1
            close(ongoing=False)
            evidence.clear()
            recent.clear()
            below = 0
        judged = raw.judge(x, up_allowed, down_allowed)
        recent.append(x)
        smoothed = None
        if smooth is not None:
            smoothed = smooth.judge(_median(list(recent)), up_allowed, down_allowed)
        if judged is None:
            continue
        sign = judged.sign or (smoothed.sign if smoothed is not None else 0)
        smoothed_z = smoothed.z if smoothed is not None else judged.z
        direction = sign if current is None else (1 if current.direction == "up" else -1)
        # The score of a point in a direction: the larger departure of the two views.
        score = max(direction * judged.z, direction * smoothed_z) if direction else abs(judged.z)
        evidence.append((sign, t, x, score, judged.z))

        if current is not None:
            if score >= cfg.z_close:
                current.extend(t, x, score, direction * judged.z >= cfg.z_close)
                below = 0
            else:
                below += 1
                if below >= cfg.close_points:
                    close(ongoing=False)
                    evidence.clear()
                    below = 0
            continue

        if sign == 0 or sum(1 for s, *_ in evidence if s == sign) < cfg.evidence_k:
            continue
        basis = judged if judged.sign == sign or smoothed is None else smoothed
        current = _Open(
            direction="up" if sign > 0 else "down",
            start=next(time for s, time, *_ in evidence if s == sign),
            detected=t,
            baseline=basis.expected,
            season=basis.season,
        )
        for s, time, value, point_score, raw_z in evidence:
            if s == sign:
                current.extend(time, value, point_score, sign * raw_z >= cfg.z_close)
        below = 0

    close(ongoing=True)
    summary = DetectionSummary(
        points=count,
        nonfinite_points=nonfinite,
        duplicate_points=duplicates,
        gaps=gaps,
        step_ns=step,
    )
    return found, summary


def detect_anomalies(
    series: Iterable[Series], config: DetectorConfig | None = None
) -> list[Anomaly]:
    """Judge many series; return all their anomalies ordered by start time, then series id.

    Args:
        series: the series to judge (see :func:`detect_series`).
        config: parameters; ``None`` uses the tuned defaults.

    Raises:
        ValueError: as :func:`detect_series`.
    """
    found: list[Anomaly] = []
    for one in series:
        found.extend(detect_series(one, config)[0])
    found.sort(key=lambda a: (a.start_unix_nano, a.series_id))
    return found
