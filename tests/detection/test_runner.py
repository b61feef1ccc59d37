"""Detection over a real embedded store: synthetic telemetry in, problems out.

Two services, ``frontend`` calling ``checkout``, ten requests a minute for four hours; for
fifteen minutes ``checkout`` turns slow (and its CPU gauge rises). The detector must open one
problem naming ``checkout`` first, with sample traces of slow requests, and ``coremetry
detect`` must print it and keep it in ``problems.json``.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest
import trio

from coremetry.cli import main
from coremetry.detection import Anomaly, Problem, Signal, TraceBlame
from coremetry.detection.cli import parse_duration_ns
from coremetry.detection.problem_store import (
    PROBLEMS_FILE,
    ProblemFileError,
    load_problems,
    save_problems,
)
from coremetry.detection.runner import (
    DetectionOptions,
    _corroborated,
    _slow_concentration,
    _trace_samples,
    detect_in_store,
    run_detection,
)
from coremetry.detection.spectrum import TraceProfile
from coremetry.store import (
    LogRecord,
    MetricPoint,
    Span,
    SpanKind,
    TelemetryBatch,
    TimeRange,
    TraceSummary,
)
from coremetry.store.sqlite import open_sqlite_store

MINUTE = 60 * 1_000_000_000
MS = 1_000_000
T0 = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z
MINUTES = 240
FAULT = range(180, 195)


def telemetry(seed: int = 1) -> TelemetryBatch:
    rng = random.Random(seed)
    spans: list[Span] = []
    points: list[MetricPoint] = []
    for minute in range(MINUTES):
        slow = minute in FAULT
        for request in range(10):
            start = T0 + minute * MINUTE + request * 6_000 * MS
            inner = (200.0 if slow else 20.0) * rng.uniform(0.8, 1.25) * MS
            trace_id = f"{minute + 1:016x}{request + 1:016x}"  # never all zero
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=f"{minute:08x}{request:04x}0001",
                    service_name="frontend",
                    name="GET /cart",
                    kind=SpanKind.SERVER,
                    start_time_unix_nano=start,
                    end_time_unix_nano=start + int(inner + 5 * MS),
                )
            )
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=f"{minute:08x}{request:04x}0002",
                    parent_span_id=f"{minute:08x}{request:04x}0001",
                    service_name="checkout",
                    name="POST /checkout",
                    kind=SpanKind.SERVER,
                    start_time_unix_nano=start + 2 * MS,
                    end_time_unix_nano=start + 2 * MS + int(inner),
                )
            )
        points.append(
            MetricPoint(
                name="k8s.pod.cpu.usage",
                type="gauge",
                unit="{cpu}",
                service_name="checkout",
                time_unix_nano=T0 + minute * MINUTE + 30 * 1_000_000_000,
                value=(0.5 if slow else 0.1) + rng.gauss(0.0, 0.005),
            )
        )
    return TelemetryBatch(spans=spans, metrics=points)


JUDGED = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + MINUTES * MINUTE)


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    async with open_sqlite_store(tmp_path / "telemetry.db") as store:
        await store.write(telemetry())
    return tmp_path


async def test_one_problem_with_the_slow_callee_first(data_dir: Path) -> None:
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        run = await detect_in_store(store, JUDGED)
    assert ("frontend", "checkout") in run.edges
    assert run.series_count >= 9  # 4 RED series per service + the CPU gauge
    [problem] = run.problems
    assert problem.services == ["checkout", "frontend"]
    assert problem.ranking[0].anomalous_callers == ["frontend"]
    assert problem.status == "resolved"
    fault_start = T0 + FAULT.start * MINUTE
    assert fault_start <= problem.detected_unix_nano <= fault_start + 3 * MINUTE
    assert problem.end_unix_nano <= T0 + (FAULT.stop + 2) * MINUTE
    names = {(a.service_name, a.name) for a in problem.anomalies}
    assert ("checkout", "service.duration.p99") in names
    assert ("checkout", "k8s.pod.cpu.usage") in names
    assert ("frontend", "service.duration.p99") in names
    assert problem.title.startswith("checkout: ")
    # sample traces are slow checkout requests from the fault
    assert len(problem.sample_trace_ids) == 3
    for trace_id in problem.sample_trace_ids:
        assert int(trace_id[:16], 16) - 1 in FAULT


async def test_run_detection_without_spans_uses_metrics_only(data_dir: Path) -> None:
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        # One series (the CPU gauge) and no traces compared: nothing corroborates it, so it is
        # reported only with corroboration switched off (with traces, they name checkout).
        alone = await run_detection(
            store, JUDGED, DetectionOptions(spans=False, samples=0, trace_samples=0)
        )
        traced = await run_detection(store, JUDGED, DetectionOptions(spans=False, samples=0))
        problems = await run_detection(
            store, JUDGED, DetectionOptions(spans=False, samples=0, min_corroboration=1)
        )
    assert alone == []
    assert [p.services[0] for p in traced] == ["checkout"]
    [problem] = problems
    assert problem.services == ["checkout"]
    assert {a.name for a in problem.anomalies} == {"k8s.pod.cpu.usage"}
    assert problem.sample_trace_ids == []


async def test_a_quiet_range_has_no_problem(data_dir: Path) -> None:
    before = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + FAULT.start * MINUTE)
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        assert await run_detection(store, before) == []


async def test_bad_range_and_step_are_refused(data_dir: Path) -> None:
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        with pytest.raises(ValueError, match="time_range"):
            await run_detection(store, TimeRange(start_unix_nano=T0, end_unix_nano=T0))
        with pytest.raises(ValueError, match="step_ns"):
            await run_detection(store, JUDGED, DetectionOptions(step_ns=0))


async def test_cli_prints_and_saves_the_problem(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["detect", "--data-dir", str(data_dir), "--end", "latest", "--range", "5h"]
    assert await trio.to_thread.run_sync(main, argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 problems" in out[0]
    assert f" in {data_dir / 'telemetry.db'}: " in out[0]  # the store it judged
    assert "[checkout, frontend]" in out[1]
    assert " resolved " in out[1]
    [saved] = load_problems(data_dir / PROBLEMS_FILE)
    assert out[1].startswith(saved.problem_id)
    # again, as JSON: the same problem (same id), still one in the file
    assert await trio.to_thread.run_sync(main, [*argv, "--json"]) == 0
    printed = msgspec.json.decode(capsys.readouterr().out, type=list[Problem])
    assert [p.problem_id for p in printed] == [saved.problem_id]
    assert len(load_problems(data_dir / PROBLEMS_FILE)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--range", "12x"], "--range: expected a duration"),
        (["--range", "0m"], "--range: must be longer than zero"),
        (["--end", "yesterday"], "--end: expected now, latest or an RFC 3339 time"),
    ],
)
async def test_cli_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = ["detect", "--data-dir", str(tmp_path), *args]
    assert await trio.to_thread.run_sync(main, argv) == 2
    assert message in capsys.readouterr().err


def test_durations() -> None:
    assert parse_duration_ns("90s", "f") == 90 * 1_000_000_000
    assert parse_duration_ns("1h30m", "f") == 90 * MINUTE
    assert parse_duration_ns("7d", "f") == 7 * 24 * 60 * MINUTE
    with pytest.raises(ValueError, match="f: expected"):
        parse_duration_ns("h", "f")


def problem(problem_id: str, start_minute: int) -> Problem:
    return Problem(
        problem_id=problem_id,
        status="resolved",
        start_unix_nano=T0 + start_minute * MINUTE,
        end_unix_nano=T0 + (start_minute + 5) * MINUTE,
        detected_unix_nano=T0 + (start_minute + 1) * MINUTE,
        services=[],
        ranking=[],
        anomalies=[],
        title=problem_id,
    )


def test_problem_file_keeps_what_a_later_run_does_not_find_again(tmp_path: Path) -> None:
    path = tmp_path / PROBLEMS_FILE
    assert load_problems(path) == []
    first = TimeRange(start_unix_nano=T0, end_unix_nano=T0 + 60 * MINUTE)
    open_b = msgspec.structs.replace(problem("prb_b", 40), status="open")
    open_d = msgspec.structs.replace(problem("prb_d", 58), status="open")
    save_problems(path, first, [problem("prb_a", 10), open_b, open_d])
    # A later run over minutes 30-90 finds only prb_c. prb_b and prb_d (inside its range) were
    # reported and keep answering; prb_b, open, ended inside the range the run judged without
    # seeing it: resolved. prb_d, open, ends past the range: as it was. prb_a (outside) stays.
    second = TimeRange(start_unix_nano=T0 + 30 * MINUTE, end_unix_nano=T0 + 62 * MINUTE)
    kept = save_problems(path, second, [problem("prb_c", 50)])
    assert [(p.problem_id, p.status) for p in kept] == [
        ("prb_d", "open"),
        ("prb_c", "resolved"),
        ("prb_b", "resolved"),
        ("prb_a", "resolved"),
    ]  # newest start first
    assert load_problems(path) == kept
    # No temporary file is left behind; the lock's sidecar file stays.
    assert sorted(f.name for f in tmp_path.iterdir()) == [PROBLEMS_FILE, PROBLEMS_FILE + ".lock"]


def test_corrupt_problem_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / PROBLEMS_FILE
    path.write_text('{"version": 1, "problems": [{"problem_id": 3}]}')
    with pytest.raises(ProblemFileError, match=PROBLEMS_FILE):
        load_problems(path)
    with pytest.raises(ProblemFileError):
        save_problems(path, JUDGED, [])
    assert path.read_text().startswith('{"version": 1, "problems": [{"problem_id": 3}')


def pod_metrics(names: list[str], seed: int = 3) -> TelemetryBatch:
    """Gauges of one pod (``cache``), each rising fivefold (below its limit) for fifteen minutes."""
    rng = random.Random(seed)
    points = [
        MetricPoint(
            name=name,
            type="gauge",
            unit="1" if "utilization" in name else "{cpu}",
            service_name="cache",
            time_unix_nano=T0 + minute * MINUTE + 30 * 1_000_000_000,
            value=(0.2 if minute in FAULT else 0.04) * (2.0 if "utilization" in name else 1.0)
            + rng.gauss(0.0, 0.005),
        )
        for minute in range(MINUTES)
        for name in names
    ]
    return TelemetryBatch(metrics=points)


async def test_series_of_one_signal_of_one_service_do_not_corroborate_each_other(
    tmp_path: Path,
) -> None:
    # A pod's CPU usage and its CPU limit utilisation are one figure divided by a constant:
    # together they are one symptom, which alone is not reported; a latency of the same
    # service is an independent symptom.
    options = DetectionOptions(samples=0, trace_samples=0)
    async with open_sqlite_store(tmp_path / "one.db") as store:
        await store.write(pod_metrics(["k8s.pod.cpu.usage", "k8s.pod.cpu_limit_utilization"]))
        one_signal = await detect_in_store(store, JUDGED, options)
    async with open_sqlite_store(tmp_path / "two.db") as store:
        await store.write(
            pod_metrics(["k8s.pod.cpu.usage", "k8s.pod.cpu_limit_utilization", "rpc.duration"])
        )
        two_signals = await detect_in_store(store, JUDGED, options)
    assert {a.name for a in one_signal.anomalies} == {
        "k8s.pod.cpu.usage",
        "k8s.pod.cpu_limit_utilization",
    }
    assert one_signal.problems == []
    [problem] = two_signals.problems
    assert problem.services == ["cache"]
    assert {a.signal for a in problem.anomalies} == {"saturation", "latency"}


def _anomaly(service: str, signal: Signal, name: str, unit: str, observed: float) -> Anomaly:
    return Anomaly(
        series_id=f"metric/{name}{{service.name={service}}}",
        name=name,
        direction="up" if signal != "traffic" else "down",
        start_unix_nano=T0,
        detected_unix_nano=T0 + MINUTE,
        end_unix_nano=T0 + 2 * MINUTE,
        baseline=1.0 if signal == "traffic" else 0.01,
        observed=observed,
        score=12.0,
        points=2,
        service_name=service,
        unit=unit,
        signal=signal,
    )


def _problem(anomalies: list[Anomaly], blame: TraceBlame | None) -> Problem:
    services = sorted({a.service_name for a in anomalies})
    return Problem(
        problem_id="prb_test",
        status="resolved",
        start_unix_nano=T0,
        end_unix_nano=T0 + 2 * MINUTE,
        detected_unix_nano=T0 + MINUTE,
        services=services,
        ranking=[],
        anomalies=anomalies,
        title="test",
        trace_blame=blame,
    )


def test_traces_corroborate_symptoms_not_a_traffic_change_alone() -> None:
    # The window's traces, against their reference, blame "seat": that corroborates a problem
    # with a symptom (a latency), but a problem of traffic changes alone is a consequence and
    # is not raised on the traces of whatever incident overlaps it.
    blame = TraceBlame(
        service_name="seat",
        excess_ns=1.6e9,
        gap_ns=2.0e9,
        slow_traces=10,
        typical_traces=40,
        reference=True,
        score=0.6,
    )
    traffic = _anomaly("admin", "traffic", "k8s.pod.network.io.rate", "By/s", 0.4)
    latency = _anomaly("admin", "latency", "http.client.request.duration", "s", 14.0)
    assert not _corroborated(_problem([traffic], blame), 2, 0.5)
    assert _corroborated(_problem([traffic, latency], blame), 2, 0.5)
    # Without traces, one symptom is still not enough; a utilisation at its limit is.
    assert not _corroborated(_problem([traffic, latency], None), 2, 0.5)
    saturated = _anomaly("food", "saturation", "k8s.pod.cpu_limit_utilization", "1", 0.99)
    assert _corroborated(_problem([saturated], None), 2, 0.5)
    # A blame without a reference (slow against typical traces of the window) corroborates
    # nothing.
    unreferenced = msgspec.structs.replace(blame, reference=False)
    assert not _corroborated(_problem([traffic, latency], unreferenced), 2, 0.5)


async def test_a_slowdown_seen_only_in_traces_opens_one_problem(data_dir: Path) -> None:
    # No series judged at all: the fault shows only in the traces, slow through checkout far
    # beyond their reference share. One problem for the whole slowdown (consecutive steps),
    # raised within its first steps, naming checkout from the traces' comparison.
    only_traces = DetectionOptions(spans=False, metrics=False, logs=False, samples=0)
    async with open_sqlite_store(data_dir / "telemetry.db") as store:
        run = await detect_in_store(store, JUDGED, only_traces)
        off = await detect_in_store(
            store, JUDGED, msgspec.structs.replace(only_traces, trace_alpha=None)
        )
        with pytest.raises(ValueError, match="trace_alpha"):
            await detect_in_store(
                store, JUDGED, msgspec.structs.replace(only_traces, trace_alpha=1.5)
            )
    assert off.problems == []
    [problem] = run.problems
    assert problem.services[0] == "checkout"
    assert problem.ranking[0].role == "trace_origin"
    fault_start = T0 + FAULT.start * MINUTE
    assert fault_start <= problem.detected_unix_nano <= fault_start + 2 * MINUTE
    [anomaly] = problem.anomalies
    assert anomaly.name == "trace.slow.share"
    assert anomaly.unit == "1"
    # The first step (on the half-minute grid) holds the fault's first half minute: half of
    # its traces, all slow.
    assert anomaly.observed == 0.5
    assert anomaly.baseline < 0.1  # against a reference with (almost) none slow
    assert anomaly.end_unix_nano >= T0 + (FAULT.stop - 2) * MINUTE


def _summary(index: int, services: list[str], duration_ms: float) -> TraceSummary:
    return TraceSummary(
        trace_id=f"{index + 1:032x}",
        root_service_name="frontend",
        root_name="GET /",
        root_missing=False,
        start_time_unix_nano=T0 + index * MS,
        duration_ns=int(duration_ms * MS),
        span_count=len(services),
        error_count=0,
        services=services,
    )


def test_slow_traces_concentrated_on_one_service_beyond_chance() -> None:
    # Reference: 200 requests, a fifth of them through "auth", durations 90-110 ms.
    def services(i: int) -> list[str]:
        return ["frontend", "auth"] if i % 5 == 0 else ["frontend", "cart"]

    period = [_summary(i, services(i), 90 + i % 21) for i in range(200)]
    # The window: 40 requests; the 8 through auth take 400 ms, the others are as usual.
    window = [
        _summary(1000 + i, services(i), 400 if i % 5 == 0 else 90 + i % 21) for i in range(40)
    ]
    found = _slow_concentration(window, period, T0, MINUTE, 0.01)
    assert found is not None
    assert found.service_name == "auth"
    assert found.observed == 1.0
    assert found.start_unix_nano == T0
    assert found.detected_unix_nano == T0 + MINUTE
    assert found.score > 2.3  # the corrected tail is below 0.01
    # The same slow requests spread over both services at the usual rate: chance, nothing.
    spread = [_summary(1000 + i, services(i), 400 if i == 1 else 90 + i % 21) for i in range(40)]
    assert _slow_concentration(spread, period, T0, MINUTE, 0.01) is None
    # Two slow traces through auth are not enough against a strict alpha.
    few = [_summary(1000 + i, services(i), 400 if i in (0, 5) else 90 + i % 21) for i in range(40)]
    assert _slow_concentration(few, period, T0, MINUTE, 1e-6) is None


def with_logs(batch: TelemetryBatch) -> TelemetryBatch:
    """``telemetry()`` plus logs: checkout's INFO line per request, and while the fault lasts
    one more INFO line per request (a retry) and no WARN; frontend logs a WARN line twice."""
    logs: list[LogRecord] = []
    for minute in range(MINUTES):
        for request in range(10):
            moment = T0 + minute * MINUTE + request * 6_000 * MS + 3 * MS
            logs.append(
                LogRecord(
                    time_unix_nano=moment,
                    severity_number=9,
                    severity_text="INFO",
                    body=f"cart {minute * 10 + request} priced in {request + 3} ms",
                    service_name="checkout",
                )
            )
            if minute in FAULT:
                logs.append(
                    LogRecord(
                        time_unix_nano=moment + MS,
                        severity_number=9,
                        severity_text="INFO",
                        body=f"inventory lookup slow, retrying attempt {request % 3 + 1}",
                        service_name="checkout",
                    )
                )
    for minute in (FAULT.start + 1, FAULT.start + 2):
        logs.append(
            LogRecord(
                time_unix_nano=T0 + minute * MINUTE + 7 * MS,
                severity_number=13,
                severity_text="WARN",
                body="upstream checkout took longer than 150 ms",
                service_name="frontend",
            )
        )
    return TelemetryBatch(spans=batch.spans, metrics=batch.metrics, logs=logs)


async def test_each_ranked_candidate_carries_samples_of_its_own(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "telemetry.db") as store:
        await store.write(with_logs(telemetry()))
        run = await detect_in_store(store, JUDGED)
        spans: dict[str, set[str]] = {}
        for span in telemetry().spans:
            spans.setdefault(span.trace_id, set()).add(span.service_name)
        none = await detect_in_store(store, JUDGED, DetectionOptions(sample_candidates=0))
        with pytest.raises(ValueError, match=r"DetectionOptions\.sample_candidates"):
            await detect_in_store(store, JUDGED, DetectionOptions(sample_candidates=-1))
    [problem] = run.problems
    checkout, frontend = problem.ranking
    assert (checkout.service_name, frontend.service_name) == ("checkout", "frontend")
    assert ". Ahead of frontend: " in checkout.reason  # why the first beats the second
    for rank in (checkout, frontend):
        # Traces of the fault that pass through the service itself, said how they were chosen.
        assert len(rank.sample_trace_ids) == 3
        for trace_id in rank.sample_trace_ids:
            assert int(trace_id[:16], 16) - 1 in FAULT
            assert rank.service_name in spans[trace_id]
        assert rank.samples_note.startswith("traces: 3 slow against the same requests before")
    # No WARN line from checkout: the lines of its template whose share grew, with the shares
    # (of the newest 200 of its 310 lines in the window, which runs a minute past the fault).
    assert len(checkout.sample_log_lines) == 3
    assert all(
        "INFO inventory lookup slow, retrying attempt" in x for x in checkout.sample_log_lines
    )
    assert checkout.samples_note.endswith(
        "'inventory lookup slow, retrying attempt <*>': 0% of its lines before, 49% of the "
        "newest 200 of its lines in the window"
    )
    # frontend's own WARN lines of the window.
    assert [line.split(" ", 1)[1] for line in frontend.sample_log_lines] == [
        "WARN upstream checkout took longer than 150 ms"
    ] * 2
    assert frontend.samples_note.endswith("log lines: its WARN and worse in the window")
    # The problem's own samples (older clients read them) are its origin's.
    assert problem.sample_trace_ids == checkout.sample_trace_ids
    assert problem.sample_log_lines == checkout.sample_log_lines
    # Sampling no candidate leaves every sample empty; the problems are the same.
    [bare] = none.problems
    assert bare.sample_trace_ids == []
    assert bare.sample_log_lines == []
    assert all(not r.samples_note and not r.sample_trace_ids for r in bare.ranking)
    assert [r.service_name for r in bare.ranking] == problem.services


def _profile(trace_id: str, critical: dict[str, int], errors: list[str]) -> TraceProfile:
    return TraceProfile(
        trace_id=trace_id,
        kind="frontend GET /",
        start_unix_nano=T0,
        duration_ns=sum(critical.values()),
        critical_ns=critical,
        error_origins=errors,
    )


def test_trace_samples_show_the_services_own_part() -> None:
    def failed(summary: TraceSummary) -> TraceSummary:
        return msgspec.structs.replace(summary, error_count=1)

    pool = [
        failed(_summary(0, ["frontend", "cart"], 100)),  # analysed: cart originated the error
        failed(_summary(1, ["frontend", "cart"], 100)),  # analysed: frontend's own error
        failed(_summary(2, ["frontend", "cart"], 90)),  # not analysed: kept after analysed ones
        _summary(3, ["frontend", "cart"], 900),  # slow, analysed: cart holds 800 ms of it
        _summary(4, ["frontend", "cart"], 950),  # slow, analysed: frontend not on its path
        _summary(5, ["frontend", "cart"], 990),  # slow, not analysed
        _summary(6, ["cart"], 2000),  # slow, not through frontend
    ]
    ids = [t.trace_id for t in pool]
    profiles: dict[str, TraceProfile | None] = {
        ids[0]: _profile(ids[0], {"frontend": 10, "cart": 90}, ["cart"]),
        ids[1]: _profile(ids[1], {"frontend": 90, "cart": 10}, ["frontend"]),
        ids[3]: _profile(ids[3], {"frontend": 100, "cart": 800}, []),
        ids[4]: _profile(ids[4], {"cart": 950}, []),
    }
    slow = {ids[3], ids[4], ids[5], ids[6]}
    chosen, note = _trace_samples("frontend", pool, slow, True, profiles, 10)
    assert chosen == [ids[1], ids[2], ids[3], ids[5]]
    assert note == (
        "traces: 2 with an error and 2 slow against the same requests before, of the 6 of "
        "the problem's window passing through it"
    )
    # cart: its own error first, then slow ones by its critical-path time, then the slowest.
    chosen, _ = _trace_samples("cart", pool, slow, True, profiles, 10)
    assert chosen == [ids[0], ids[2], ids[4], ids[3], ids[6], ids[5]]
    assert _trace_samples("cart", pool, slow, True, profiles, 2)[0] == [ids[0], ids[2]]
    # Nothing slow nor failed: the slowest traces through it, said so.
    calm = [_summary(i, ["frontend"], 100 + i) for i in range(5)]
    chosen, note = _trace_samples("frontend", calm, set(), True, {}, 2)
    assert chosen == [calm[4].trace_id, calm[3].trace_id]
    assert "the slowest of the 5" in note
    assert "none slow against the same requests before" in note
    assert _trace_samples("auth", calm, set(), False, {}, 2) == (
        [],
        "traces: none of the problem's window passes through it",
    )
