"""Score the anomaly detector on the Numenta Anomaly Benchmark files carried in tests/data/nab.

Run: ``python bench/detect_score.py [--nab DIR] [--set FIELD=VALUE ...] [--repeat R]``
``[--json PATH] [--quiet]``.

For every series listed in ``labels/combined_windows.json`` whose CSV is present, the detector
(:func:`coremetry.detection.detect_series`, one parameter set for every series: the defaults
of :class:`~coremetry.detection.DetectorConfig`, or ``--set`` overrides for experiments) runs
over the whole series; a window counts as detected when an anomaly is raised inside it, and
anomalies raised outside every window are false positives, per 1,000 points outside windows
(rules in :mod:`coremetry.detection.evaluation`). Printed per series, per folder and in total,
for the detector and, as the baseline measured in the same run, NAB's "windowed Gaussian"
reference detector (trailing mean and standard deviation, a point beyond 4 standard
deviations raises an anomaly; no evidence rule, no hysteresis) scored the same way.

Then the targets of issue 7 (informational; exit 0 either way) and the detector's runtime over
the whole set (best of R runs, parsing excluded), beside the reference's.

Second part (``--nezha``, on by default): the shipped demo (the Nezha TrainTicket fault day,
``coremetry.demo``: spans, logs and metrics) is loaded into a fresh embedded store in a
temporary data dir, and :func:`coremetry.detection.runner.detect_in_store` runs over all of it
as ``coremetry detect`` would (series from the store, one-minute buckets,
:data:`~coremetry.detection.runner.LIVE_DETECTOR`, problems ranked with every series' evidence
and the traces' critical paths). Each injected fault of the demo's ``faults.json`` is matched
to the problems (:func:`coremetry.detection.evaluation.score_faults`): opened within 3 minutes
after it, the injected service among the top two origins. Every fault falls in the loaded
metrics (the whole day, 60 s, for the injected pods and the entry services); only two fall in
the spans (13:06 and 13:14, plus the fault-free 11:39 minute) and one in the logs (13:14): the
table says, per fault, which data its 3 minutes hold and whether the injected service's own
series show a symptom there (network delays mostly show only in their callers' client latency),
and the score is given per kind of data. The fault-free baseline minute (the 11:39 trace file,
before the first fault) must be covered by no problem; problems opened in the fault-free
afternoon (from 10 minutes after the last fault) are counted per hour. The run's wall time
(best of R, store reads included) is the "detection over the demo under 2 s" figure; a bare
pass over the same series (reading them from the store, no judging) is its baseline.

Third part (``--day DIR``, default ``tests/data/nezha-full``; ``--no-day-score`` skips it,
``--day-only`` runs only it): the whole published fault day, converted as
``scripts/convert_nezha.py --day`` does and loaded with its recorded times (``--day-db PATH``
keeps the store for the next run), scored two ways — one whole-day ``detect_in_store`` and a
live replay (per fault, the 6 h ending 4 minutes after it) — as AS@1 and AS@3 of the first
problem raised within 3 minutes of each fault (per fault type), how many faults open one,
false problems per hour of fault-free time (30 minutes after a fault until the next), the
origin ``triage_brief`` names over the 10 minutes around each fault, and runtimes.
``--baseline DIR`` scores another checkout's ``src/`` the same way in a subprocess, on the
same store, and prints it beside. Takes minutes (bench/README.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import msgspec

from coremetry.detection import Anomaly, DetectorConfig, Problem, Series, detect_series
from coremetry.detection.evaluation import (
    Fault,
    SeriesScore,
    Window,
    load_nab_series,
    load_nab_windows,
    score_faults,
    score_series,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_NAB = REPO / "tests" / "data" / "nab"
NO_ANOMALY_SERIES = "realAWSCloudwatch/ec2_cpu_utilization_c6585a.csv"


def windowed_gaussian(key: str, points: list[tuple[int, float]]) -> list[Anomaly]:
    """NAB's windowed-Gaussian reference: trailing 288-point mean/std, |z| >= 4 raises."""
    window: deque[float] = deque(maxlen=288)
    found: list[Anomaly] = []
    total = 0.0
    total_sq = 0.0
    for t, x in sorted(points):
        if len(window) >= 72:
            n = len(window)
            mean = total / n
            std = math.sqrt(max(total_sq / n - mean * mean, 0.0))
            if std > 0 and abs(x - mean) / std >= 4.0:
                found.append(
                    Anomaly(
                        series_id=key,
                        name=key,
                        direction="up" if x > mean else "down",
                        start_unix_nano=t,
                        detected_unix_nano=t,
                        end_unix_nano=t,
                        baseline=mean,
                        observed=x,
                        score=abs(x - mean) / std,
                        points=1,
                    )
                )
        if len(window) == window.maxlen:
            old = window[0]
            total -= old
            total_sq -= old * old
        window.append(x)
        total += x
        total_sq += x * x
    return found


def parse_overrides(items: list[str]) -> DetectorConfig:
    fields: dict[str, object] = {}
    defaults = msgspec.structs.asdict(DetectorConfig())
    for item in items:
        name, _, text = item.partition("=")
        if name not in defaults:
            raise SystemExit(f"--set: unknown DetectorConfig field {name!r}")
        fields[name] = type(defaults[name])(text)
    config = msgspec.convert({**defaults, **fields}, DetectorConfig)
    config.validate()
    return config


def print_table(title: str, scores: list[SeriesScore]) -> dict[str, SeriesScore]:
    print(f"\n{title}")
    header = f"{'series':58} {'points':>6} {'windows':>7} {'found':>5} {'recall':>6} "
    header += f"{'anoms':>5} {'FP':>3} {'FP/1k':>6}"
    print(header)
    print("-" * len(header))
    folders: dict[str, list[SeriesScore]] = {}
    for score in scores:
        folders.setdefault(score.key.split("/")[0], []).append(score)
        recall = "-" if score.recall is None else f"{score.recall:.2f}"
        print(
            f"{score.key:58} {score.points:6d} {score.windows:7d} {score.detected:5d} "
            f"{recall:>6} {score.anomalies:5d} {score.false_positives:3d} "
            f"{score.fp_per_1000:6.2f}"
        )
    totals: dict[str, SeriesScore] = {}
    print("-" * len(header))
    for name, group in [*sorted(folders.items()), ("ALL", scores)]:
        total = SeriesScore(
            key=name,
            points=sum(s.points for s in group),
            points_outside=sum(s.points_outside for s in group),
            windows=sum(s.windows for s in group),
            detected=sum(s.detected for s in group),
            anomalies=sum(s.anomalies for s in group),
            false_positives=sum(s.false_positives for s in group),
        )
        totals[name] = total
        recall = "-" if total.recall is None else f"{total.recall:.2f}"
        print(
            f"{name:58} {total.points:6d} {total.windows:7d} {total.detected:5d} "
            f"{recall:>6} {total.anomalies:5d} {total.false_positives:3d} "
            f"{total.fp_per_1000:6.2f}"
        )
    return totals


BASELINE_MINUTE_ORIGINAL = (1675078732_000_000_000, 1675078792_000_000_000)  # 11:38:52-11:39:52
MINUTE_NS = 60 * 1_000_000_000
WINDOW_NS = 3 * MINUTE_NS
QUIET_AFTER_NS = 10 * MINUTE_NS  # the fault-free afternoon starts this long after the last fault


def rarity_ranking(series: list[Series], low: int, high: int) -> list[tuple[str, float]]:
    """Reference ranking: services by how unusual their most unusual series is in a window.

    No service graph, no evidence kinds: for every series of a service, the peak of
    ``[low, high)`` (the trough for series watched downwards, mirrored) against the peaks of
    the same-length windows in the hour before ``low`` (sliding by one point), as an empirical
    tail probability ``(1 + windows at least as extreme) / (1 + windows)``; only peaks at least
    twice the hour's median count (as the evidence rule of the detector's grouping). A
    service's score is its smallest such probability. This is what "name the service whose own
    metrics look most unusual" achieves, measured on the same series as the detector.

    Returns:
        ``[(service.name, probability)]``, most unusual first (ties by name).
    """
    width = high - low
    scores: dict[str, float] = {}
    for one in series:
        if not one.service_name:
            continue
        sign = -1.0 if one.watch == "down" else 1.0
        points = sorted(
            (t, sign * v) for t, v in one.points if math.isfinite(v) and low - 3_600e9 <= t < high
        )
        history = [(t, v) for t, v in points if t < low]
        window = [v for t, v in points if t >= low]
        if len(history) < 10 or not window:
            continue
        peak = max(window)
        median = statistics.median(v for _, v in history)
        if not (peak >= 2 * median if median > 0 else peak > median):
            continue
        peaks = [
            max(v for t, v in history[i:] if t < start + width)
            for i, (start, _) in enumerate(history)
            if start + width <= low
        ]
        probability = (1 + sum(1 for p in peaks if p >= peak)) / (1 + len(peaks))
        name = one.service_name
        scores[name] = min(scores.get(name, 1.0), probability)
    return sorted(scores.items(), key=lambda item: (item[1], item[0]))


def _hm(unix_nano: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix_nano / 1e9))


async def nezha_run(repeat: int) -> dict[str, object]:
    """Load the demo, run the detector as coremetry detect would, judge it per injected fault."""
    import tempfile

    from coremetry.demo.loader import load_demo
    from coremetry.detection import GroupingConfig
    from coremetry.detection.problems import service_evidence
    from coremetry.detection.runner import DetectionOptions, detect_in_store
    from coremetry.detection.sources import log_series, metric_series, red_series
    from coremetry.store import LogQuery, TimeRange, TraceQuery
    from coremetry.store.sqlite import open_sqlite_store

    with tempfile.TemporaryDirectory(prefix="coremetry-detect-") as tmp:
        data_dir = Path(tmp)
        async with open_sqlite_store(data_dir / "telemetry.db") as store:
            await load_demo(store, data_dir, now_unix_nano=1_767_225_600 * 1_000_000_000)
            raw = msgspec.json.decode((data_dir / "demo" / "faults.json").read_bytes())
            shift = int(raw["shift_ns"])
            faults = [
                Fault(
                    time_unix_nano=f["time_unix_nano"],
                    service_name=f["service.name"],
                    kind=f["type"],
                )
                for f in raw["faults"]
            ]
            stats = await store.statistics()
            assert stats.oldest_unix_nano is not None
            assert stats.newest_unix_nano is not None
            judged = TimeRange(
                start_unix_nano=stats.oldest_unix_nano, end_unix_nano=stats.newest_unix_nano + 1
            )
            runs: list[float] = []
            run = None
            for _ in range(max(1, repeat)):
                started = time.perf_counter()
                outcome = await detect_in_store(store, judged, DetectionOptions())
                runs.append(time.perf_counter() - started)
                run = outcome if run is None else run  # the first run is the one scored
            assert run is not None
            floor: list[float] = []
            series: list[Series] = []
            for _ in range(max(1, repeat)):
                started = time.perf_counter()
                series = await red_series(store, judged, run.step_ns)
                series += await metric_series(store, judged, run.step_ns)
                series += (await log_series(store, judged, run.step_ns))[0]
                sum(len(one.points) for one in series)
                floor.append(time.perf_counter() - started)
            # What each fault's window holds: spans and logs (any service), and whether the
            # injected service's own series show a symptom in the 3 minutes after it.
            data: list[tuple[bool, bool, list[str]]] = []
            reference: list[list[str]] = []
            own_rarity: list[float] = []
            for fault in faults:
                window = TimeRange(
                    start_unix_nano=fault.time_unix_nano,
                    end_unix_nano=fault.time_unix_nano + WINDOW_NS,
                )
                span_page = await store.search_traces(TraceQuery(time_range=window), limit=1)
                log_page = await store.search_logs(LogQuery(time_range=window), limit=1)
                own = service_evidence(
                    {
                        fault.service_name: [
                            one for one in series if one.service_name == fault.service_name
                        ]
                    },
                    fault.time_unix_nano,
                    fault.time_unix_nano + WINDOW_NS,
                    GroupingConfig(),
                ).get(fault.service_name)
                kinds: list[str] = sorted({s.kind for s in own.symptoms}) if own is not None else []
                data.append((bool(span_page.items), bool(log_page.items), kinds))
                ranking = rarity_ranking(
                    series, fault.time_unix_nano, fault.time_unix_nano + WINDOW_NS
                )
                reference.append([name for name, _ in ranking[:2]])
                own_rarity.append(dict(ranking).get(fault.service_name, 1.0))

    results = score_faults(run.problems, faults, window_ns=WINDOW_NS)
    by_id = {p.problem_id: p for p in run.problems}
    print(
        f"\nNezha demo ({len(faults)} injected faults): {run.series_count} series, "
        f"{run.point_count} points, {len(run.anomalies)} anomalies, {len(run.problems)} problems"
    )
    print(
        "Per fault: the data its 3 minutes hold (spans, logs; metrics always: the injected pod's "
        "and its neighbours'), whether the injected service's own series show a symptom, the "
        "problems opened within 3 minutes and their first two origins (* = the injected one)."
    )
    header = (
        f"{'fault (UTC, original)':21} {'service':29} {'type':14} {'data':13} {'own symptom':18} "
        f"{'opened':>6} {'top2':>4}  first two origins of the opened problems"
    )
    print(header)
    print("-" * len(header))
    classes: dict[str, list[bool]] = {}
    rows: list[dict[str, object]] = []
    for result, (has_spans, has_logs, kinds) in zip(results, data, strict=True):
        fault = result.fault
        label = "+".join(["spans"] * has_spans + ["logs"] * has_logs + ["metrics"])
        origins = [
            ", ".join(
                f"{name}{'*' if name == fault.service_name else ''}"
                for name in by_id[problem_id].services[:2]
            )
            or "-"
            for problem_id in result.opened
        ]
        print(
            f"{_hm(fault.time_unix_nano - shift):21} {fault.service_name:29} {fault.kind:14} "
            f"{label:13} {','.join(kinds) or '-':18} {len(result.opened):6d} "
            f"{'yes' if result.origin_top else '-':>4}  {' | '.join(origins)}"
        )
        classes.setdefault(label, []).append(result.origin_top)
        rows.append(
            {
                "time": _hm(fault.time_unix_nano - shift),
                "service": fault.service_name,
                "type": fault.kind,
                "data": label,
                "own_symptom": kinds,
                "opened": len(result.opened),
                "top2": result.origin_top,
                "origins": origins,
            }
        )
    opened = sum(1 for r in results if r.opened)
    top = sum(1 for r in results if r.origin_top)
    n = len(results)
    low, high = (t + shift for t in BASELINE_MINUTE_ORIGINAL)
    covering = [p for p in run.problems if p.start_unix_nano < high and p.end_unix_nano >= low]
    quiet_start = max(f.time_unix_nano for f in faults) + QUIET_AFTER_NS
    quiet = [p for p in run.problems if p.start_unix_nano >= quiet_start]
    quiet_hours = (judged.end_unix_nano - quiet_start) / 3_600e9
    verdict = "PASS" if top / n >= 0.7 else "FAIL"
    print(
        f"target Nezha: problem opened within 3 min for {opened}/{n}, injected service in its top "
        f"two origins for {top}/{n} = {top / n:.2f} (>= 0.70): {verdict}"
    )
    ref_top = sum(
        1
        for result, names in zip(results, reference, strict=True)
        if result.fault.service_name in names
    )
    plain = sum(1 for p in own_rarity if p <= 0.05)
    print(
        f"  faults whose injected service's own series are plainly unusual (more extreme than "
        f"all but 5 % of the windows of the hour before): {plain}/{n}"
    )
    print(
        f"  reference, same series, no service graph (the two services whose own series are "
        f"most unusual for the last hour): {ref_top}/{n} = {ref_top / n:.2f}; the detector "
        f"names {top - ref_top:+d} more ({top / max(ref_top, 1):.1f}x)"
    )
    for label, hits in sorted(classes.items()):
        print(f"  faults whose window holds {label}: top two {sum(hits)}/{len(hits)}")
    own_seen = [r for r, (_s, _l, kinds) in zip(results, data, strict=True) if kinds]
    print(
        f"  faults whose injected service shows a symptom in its own series: {len(own_seen)}/{n}, "
        f"of which top two {sum(1 for r in own_seen if r.origin_top)}"
    )
    print(
        f"target Nezha baseline minute: {len(covering)} problems cover it (0): "
        f"{'PASS' if not covering else 'FAIL'}"
    )
    print(
        f"problems opened in the fault-free afternoon ({_hm(quiet_start - shift)}-24:00, "
        f"{quiet_hours:.1f} h): {len(quiet)} = {len(quiet) / quiet_hours:.1f} per hour"
    )
    print(
        f"runtime, detection over the demo: {min(runs):.2f} s best of {len(runs)} "
        f"(target < 2 s: {'PASS' if min(runs) < 2 else 'FAIL'}); reading the series alone "
        f"{min(floor):.2f} s = {min(floor) / min(runs):.0%} of it"
    )
    return {
        "faults": rows,
        "opened": opened,
        "top2": top,
        "reference_top2": ref_top,
        "own_series_unusual": plain,
        "baseline_minute_problems": len(covering),
        "quiet_problems": len(quiet),
        "quiet_hours": quiet_hours,
        "problems": len(run.problems),
        "runtime_s": runs,
        "read_series_s": floor,
    }


# --- the whole fault day (issue 16) ---------------------------------------------------------

DEFAULT_DAY = REPO / "tests" / "data" / "nezha-full"
LIVE_AFTER_NS = 4 * MINUTE_NS  # live replay: the 6 h ending this long after each fault
LIVE_SPAN_NS = 6 * 60 * MINUTE_NS
FREE_AFTER_NS = 30 * MINUTE_NS  # fault-free time starts this long after a fault
TRIAGE_HALF_NS = 5 * MINUTE_NS  # triage_brief over the 10 minutes around each fault


class FaultRow(msgspec.Struct, kw_only=True):
    """How one run answered one fault."""

    time: str
    service: str
    type: str
    opened: bool
    delay_s: float | None
    rank: int | None
    top3: list[str]


class DayFigures(msgspec.Struct, kw_only=True):
    """Everything the day part measures for one source tree."""

    whole: list[FaultRow]
    live: list[FaultRow]
    triage: list[str | None]  # the shared origin (window_origin), as triage_brief says it
    false_problems: int
    false_titles: list[str]
    free_hours: float
    problems: int
    whole_s: float
    live_s: list[float]
    triage_traces: list[str | None] = []


async def load_day(day: Path, db: Path) -> list[Fault]:
    """Convert a whole Nezha day (``scripts/convert_nezha.py``) into a sqlite store at ``db``.

    Times are kept as recorded (no shift). A store already at ``db`` is reused as it is.
    Returns the day's faults (time from ``inject_time``).
    """
    import gzip
    import tempfile

    import trio

    from coremetry.ingest import ImportOptions
    from coremetry.ingest.formats import decode_file
    from coremetry.store.sqlite import open_sqlite_store

    sys.path.insert(0, str(REPO / "scripts"))
    import convert_nezha

    date = convert_nezha.find_date(day)
    faults: list[Fault] = []
    for f in convert_nezha.convert_faults(day / "rca_data" / date / f"{date}-fault_list.json"):
        assert isinstance(f, dict)
        faults.append(
            Fault(
                time_unix_nano=int(str(f["time_unix_nano"])),
                service_name=str(f["service.name"]),
                kind=str(f["type"]),
            )
        )
    if _exists(db):
        return faults
    with tempfile.TemporaryDirectory(prefix="coremetry-day-") as tmp:
        out = Path(tmp)
        entry = convert_nezha.build_nezha(day, out, date=date)
        files = entry["files"]
        assert isinstance(files, list)
        paths = [out / str(f["path"]) for f in files if isinstance(f, dict)]
        partial = db.with_name(db.name + ".partial")
        partial.unlink(missing_ok=True)
        async with open_sqlite_store(partial, retention_days=0) as store:
            for path in paths:
                data = gzip.decompress(path.read_bytes())
                decoded = await trio.to_thread.run_sync(
                    decode_file, data, "otlp-json", ImportOptions()
                )
                await store.write(decoded.batch)
        _finish(partial, db)
    return faults


def _exists(path: Path) -> bool:
    return path.exists()


def _finish(partial: Path, db: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(str(partial) + suffix).unlink(missing_ok=True)
    partial.rename(db)


def _first_opened(problems: Sequence[Problem], fault: Fault, step: int) -> Problem | None:
    """The earliest problem raised within 3 minutes of the fault (from its bucket's start)."""
    low = fault.time_unix_nano - step
    high = fault.time_unix_nano + WINDOW_NS
    opened = [p for p in problems if low <= p.detected_unix_nano <= high]
    return min(opened, key=lambda p: (p.detected_unix_nano, p.problem_id), default=None)


def fault_free(
    faults: Sequence[Fault], low: int, high: int, step: int = 0
) -> list[tuple[int, int]]:
    """Intervals of ``[low, high)`` at least 30 min after every earlier fault, before the next.

    Each interval ends where the next fault's scoring begins (its bucket's start, ``step``
    before it, as :func:`_first_opened`): a problem credited to a fault is not also false.
    """
    spans: list[tuple[int, int]] = []
    start = low
    for t in [*sorted(f.time_unix_nano for f in faults), high + step]:
        end = min(t - step, high)
        if end > start:
            spans.append((start, end))
        start = max(start, t + FREE_AFTER_NS)
    return spans


def score_run(problems: Sequence[Problem], faults: Sequence[Fault], step: int) -> list[FaultRow]:
    """Per fault: the first problem opened within 3 minutes and where it ranks the injected one."""
    rows: list[FaultRow] = []
    for fault in faults:
        problem = _first_opened(problems, fault, step)
        services = list(problem.services) if problem is not None else []
        rows.append(
            FaultRow(
                time=_hm(fault.time_unix_nano),
                service=fault.service_name,
                type=fault.kind,
                opened=problem is not None,
                delay_s=(
                    (problem.detected_unix_nano - fault.time_unix_nano) / 1e9
                    if problem is not None
                    else None
                ),
                rank=(
                    services.index(fault.service_name) + 1
                    if fault.service_name in services
                    else None
                ),
                top3=services[:3],
            )
        )
    return rows


async def day_run(db: Path, faults: list[Fault]) -> DayFigures:
    """Whole-day detect, live replay and triage_brief's origin on a loaded day."""
    from coremetry.detection.runner import DetectionOptions, detect_in_store
    from coremetry.observability.origin import likely_origin

    # A baseline checkout from before the shared origin function has only the trace analysis.
    shared = importlib.util.find_spec("coremetry.observability.window_origin") is not None
    from coremetry.store import MAX_LIMIT, TimeRange
    from coremetry.store.sqlite import open_sqlite_store

    async with open_sqlite_store(db, retention_days=0) as store:
        stats = await store.statistics()
        assert stats.oldest_unix_nano is not None
        assert stats.newest_unix_nano is not None
        whole = TimeRange(
            start_unix_nano=stats.oldest_unix_nano, end_unix_nano=stats.newest_unix_nano + 1
        )
        started = time.perf_counter()
        run = await detect_in_store(store, whole, DetectionOptions())
        whole_s = time.perf_counter() - started
        step = run.step_ns
        whole_rows = score_run(run.problems, faults, step)
        free = fault_free(
            faults, run.time_range.start_unix_nano + 10 * step, run.time_range.end_unix_nano, step
        )
        false = [p for p in run.problems if any(a <= p.detected_unix_nano < b for a, b in free)]
        live_rows: list[FaultRow] = []
        live_s: list[float] = []
        for fault in faults:
            end = fault.time_unix_nano + LIVE_AFTER_NS
            window = TimeRange(start_unix_nano=end - LIVE_SPAN_NS, end_unix_nano=end)
            started = time.perf_counter()
            live = await detect_in_store(store, window, DetectionOptions())
            live_s.append(time.perf_counter() - started)
            live_rows.extend(score_run(live.problems, [fault], live.step_ns))
        triage: list[str | None] = []
        triage_traces: list[str | None] = []
        for fault in faults:
            window = TimeRange(
                start_unix_nano=fault.time_unix_nano - TRIAGE_HALF_NS,
                end_unix_nano=fault.time_unix_nano + TRIAGE_HALF_NS,
            )
            summaries = (await store.services(window, limit=MAX_LIMIT)).items
            edges = await store.service_edges(window, limit=MAX_LIMIT)
            if not shared:
                origin = await likely_origin(store, window, summaries, edges, evidence=False)
                body = origin.body
                alone = body.get("service")
            else:
                from coremetry.observability.window_origin import window_origin

                origin = await window_origin(
                    store, window, summaries, edges, run.problems, evidence=False
                )
                body = origin.body
                analysis = body.get("trace_analysis")
                alone = analysis.get("service") if isinstance(analysis, dict) else body["service"]
            service = body.get("service")
            triage.append(service if isinstance(service, str) else None)
            triage_traces.append(alone if isinstance(alone, str) else None)
    return DayFigures(
        whole=whole_rows,
        live=live_rows,
        triage=triage,
        triage_traces=triage_traces,
        false_problems=len(false),
        false_titles=[p.title[:110] for p in false[:12]],
        free_hours=sum(b - a for a, b in free) / 3_600e9,
        problems=len(run.problems),
        whole_s=whole_s,
        live_s=live_s,
    )


class DaySummary(msgspec.Struct, kw_only=True):
    """AS@1, AS@3 and opened counts of one scoring mode."""

    n: int
    opened: int
    as1: float
    as3: float
    kinds: dict[str, tuple[int, int, int]]  # type -> (faults, ranked first, in the top 3)


def summarise(rows: Sequence[FaultRow]) -> DaySummary:
    """AS@1 and AS@3 over every fault (a fault with no problem opened is a miss)."""
    n = len(rows)
    kinds: dict[str, tuple[int, int, int]] = {}
    for r in rows:
        total, first, top3 = kinds.get(r.type, (0, 0, 0))
        rank = r.rank if r.opened else None
        kinds[r.type] = (
            total + 1,
            first + (rank == 1),
            top3 + (rank is not None and rank <= 3),
        )
    first = sum(k[1] for k in kinds.values())
    top3 = sum(k[2] for k in kinds.values())
    return DaySummary(
        n=n,
        opened=sum(1 for r in rows if r.opened),
        as1=first / n if n else 0.0,
        as3=top3 / n if n else 0.0,
        kinds=kinds,
    )


def _triage_as1(figures: DayFigures, faults: Sequence[Fault], traces: bool = False) -> float:
    named = figures.triage_traces if traces and figures.triage_traces else figures.triage
    hits = sum(1 for s, x in zip(named, faults, strict=True) if s == x.service_name)
    return hits / len(faults) if faults else 0.0


def print_day(figures: DayFigures, baseline: DayFigures | None, faults: Sequence[Fault]) -> None:
    """The day's table: this tree's figures, and the baseline's beside them when measured."""
    runs = [("now", figures)] + ([("baseline", baseline)] if baseline is not None else [])
    print(
        f"\nWhole fault day ({len(faults)} faults). AS@k: the injected service is in the top k "
        "of the first problem opened within 3 min of the fault (no problem opened: a miss)"
    )
    header = f"{'':46}" + "".join(f"{name:>24}" for name, _ in runs)
    print(header)
    print("-" * len(header))

    def line(label: str, values: list[str]) -> None:
        print(f"{label:46}" + "".join(f"{v:>24}" for v in values))

    for mode in ("whole", "live"):
        title = "whole-day detect" if mode == "whole" else "live replay"
        sums = [summarise(f.whole if mode == "whole" else f.live) for _, f in runs]
        line(f"{title}: AS@1", [f"{s.as1:.2f}" for s in sums])
        line(f"{title}: AS@3", [f"{s.as3:.2f}" for s in sums])
        line(f"{title}: opened within 3 min", [f"{s.opened}/{s.n}" for s in sums])
        for kind in sorted(sums[0].kinds):
            line(
                f"  {kind}: first / top 3",
                ["{1}/{0} / {2}/{0}".format(*s.kinds.get(kind, (0, 0, 0))) for s in sums],
            )
    line(
        "false problems per hour fault-free",
        [
            f"{f.false_problems} in {f.free_hours:.1f} h = {f.false_problems / f.free_hours:.1f}"
            for _, f in runs
        ],
    )
    line(
        "triage_brief AS@1 (10 min around the fault)",
        [f"{_triage_as1(f, faults):.2f}" for _, f in runs],
    )
    line(
        "  the window's trace analysis alone",
        [f"{_triage_as1(f, faults, traces=True):.2f}" for _, f in runs],
    )
    line("whole-day detect runtime", [f"{f.whole_s:.1f} s" for _, f in runs])
    line("live replay runtime (median)", [f"{statistics.median(f.live_s):.1f} s" for _, f in runs])
    print(
        "\nPer fault (now): rank whole-day / live, seconds to open, triage_brief's origin "
        "(ok = the injected one), whole-day top 3"
    )
    for fault, whole, live, tri in zip(
        faults, figures.whole, figures.live, figures.triage, strict=True
    ):
        delay = "-" if whole.delay_s is None else f"{whole.delay_s:.0f}"
        print(
            f"{_hm(fault.time_unix_nano)} {fault.service_name:30} {fault.kind:14} "
            f"{whole.rank or '-'!s:>3} {live.rank or '-'!s:>3} {delay:>5} "
            f"{'ok' if tri == fault.service_name else str(tri)[:24]:24} {', '.join(whole.top3)}"
        )
    if figures.false_titles:
        print("false problems (first of them):")
        for title in figures.false_titles:
            print(f"  {title}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nab", type=Path, default=DEFAULT_NAB, help="NAB folder")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (best counts)")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON")
    parser.add_argument("--quiet", action="store_true", help="skip the reference table")
    parser.add_argument(
        "--nezha",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also score problems on the shipped Nezha demo (default: yes)",
    )
    parser.add_argument(
        "--day",
        type=Path,
        default=DEFAULT_DAY,
        help="a whole Nezha fault day (default tests/data/nezha-full); --no-day-score skips it",
    )
    parser.add_argument("--day-score", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--day-db",
        type=Path,
        help="keep the day's converted store here and reuse it (default: a temporary one)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout (e.g. a git worktree of main) whose src/ is scored on the day too, "
        "in a subprocess, and printed beside this tree's figures",
    )
    parser.add_argument("--day-only", action="store_true", help="only the whole-day part")
    parser.add_argument("--day-json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.day_only or args.day_json:
        return day_main(args)
    config = parse_overrides(args.set)

    windows = load_nab_windows(args.nab / "labels" / "combined_windows.json")
    data: list[tuple[str, list[tuple[int, float]], list[Window]]] = []
    for key in sorted(windows):
        path = args.nab / key
        if path.exists():
            data.append((key, load_nab_series(path), windows[key]))
    if not data:
        print(f"ERROR: no NAB series found under {args.nab}", file=sys.stderr)
        return 1
    print(f"{len(data)} series, {sum(len(p) for _, p, _ in data)} points from {args.nab}")
    if args.set:
        print(f"overrides: {', '.join(args.set)}")

    ours: dict[str, list[Anomaly]] = {}
    runs: list[float] = []
    for _ in range(max(1, args.repeat)):
        started = time.perf_counter()
        for key, points, _ in data:
            ours[key] = detect_series(Series(series_id=key, name=key, points=points), config)[0]
        runs.append(time.perf_counter() - started)
    reference: dict[str, list[Anomaly]] = {}
    reference_runs: list[float] = []
    for _ in range(max(1, args.repeat)):
        started = time.perf_counter()
        for key, points, _ in data:
            reference[key] = windowed_gaussian(key, points)
        reference_runs.append(time.perf_counter() - started)

    our_scores = [score_series(k, p, w, ours[k]) for k, p, w in data]
    reference_scores = [score_series(k, p, w, reference[k]) for k, p, w in data]
    if args.quiet:
        totals = print_table("coremetry detector", our_scores)
    else:
        totals = print_table("coremetry detector (DetectorConfig defaults)", our_scores)
        print_table("reference: windowed Gaussian (288 points, |z| >= 4)", reference_scores)

    points_total = sum(len(p) for _, p, _ in data)
    best = min(runs)
    print(
        f"\nruntime, whole set ({points_total} points): {best:.3f} s best of {len(runs)} "
        f"(median {statistics.median(runs):.3f} s, {points_total / best / 1000:.0f}k points/s); "
        f"reference {min(reference_runs):.3f} s = {best / min(reference_runs):.1f}x"
    )
    aws = totals.get("realAWSCloudwatch")
    if aws is not None and aws.recall is not None:
        ok = aws.recall >= 0.7 and aws.fp_per_1000 <= 2.0
        print(
            f"target realAWSCloudwatch: recall {aws.recall:.3f} (>= 0.7), "
            f"FP/1k {aws.fp_per_1000:.2f} (<= 2): {'PASS' if ok else 'FAIL'}"
        )
    quiet = next((s for s in our_scores if s.key == NO_ANOMALY_SERIES), None)
    if quiet is not None:
        print(
            f"target {NO_ANOMALY_SERIES}: {quiet.anomalies} anomalies (0): "
            f"{'PASS' if quiet.anomalies == 0 else 'FAIL'}"
        )
    nezha: dict[str, object] | None = None
    if args.nezha:
        import trio

        nezha = trio.run(nezha_run, args.repeat)
    if args.day_score:
        day_main(args)
    if args.json:
        args.json.write_bytes(
            msgspec.json.encode(
                {
                    "nezha": nezha,
                    "config": config,
                    "scores": [msgspec.structs.asdict(s) for s in our_scores],
                    "reference": [msgspec.structs.asdict(s) for s in reference_scores],
                    "runtime_s": runs,
                    "reference_runtime_s": reference_runs,
                    "anomalies": {
                        k: [(a.detected_unix_nano, a.end_unix_nano) for a in v]
                        for k, v in ours.items()
                    },
                }
            )
        )
    return 0


def day_main(args: argparse.Namespace) -> int:
    """Score the whole day with this tree and, with ``--baseline``, with another one."""
    import subprocess
    import tempfile

    import trio

    with tempfile.TemporaryDirectory(prefix="coremetry-day-") as tmp:
        db = args.day_db if args.day_db is not None else Path(tmp) / "day.db"
        faults = trio.run(load_day, args.day, db)
        figures = trio.run(day_run, db, faults)
        if args.day_json is not None:
            args.day_json.write_bytes(msgspec.json.encode(figures))
            return 0
        baseline: DayFigures | None = None
        if args.baseline is not None:
            out = Path(tmp) / "baseline.json"
            env = {**__import__("os").environ, "PYTHONPATH": str(args.baseline / "src")}
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys, runpy; sys.path.insert(0, sys.argv[1]); "
                    "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                    str(args.baseline / "src"),
                    __file__,
                    "--day-json",
                    str(out),
                    "--day",
                    str(args.day),
                    "--day-db",
                    str(db),
                ],
                check=False,
                env=env,
            )
            if out.exists():
                baseline = msgspec.json.decode(out.read_bytes(), type=DayFigures)
            else:
                print(f"baseline {args.baseline}: did not run (see above)", file=sys.stderr)
        print_day(figures, baseline, faults)
    return 0


if __name__ == "__main__":
    sys.exit(main())
