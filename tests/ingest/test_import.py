"""``coremetry ingest`` on the real files: exact counts in the store, idempotence, options.

With retention off, importing each OTLP JSON, Zipkin, Jaeger, Prometheus and NAB CSV file in
``tests/data`` stores exactly the spans / log records / metric points computed from the
file with plain ``json`` / ``csv`` parsing (``_support``; the README states the numbers), and
importing it again stores nothing new. The command runs as a user runs it: ``coremetry.cli.main``
in-process (its own trio loop), or ``python -m coremetry ingest`` as a separate process next to
a running server.
"""

import gzip
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Final

import pytest
import trio

from coremetry.cli import main
from coremetry.config import load_config
from coremetry.server import build_mcp_server, serve
from coremetry.store import MetricQuery, StoreStatistics, TimeRange
from coremetry.store.open import open_telemetry_store

from ._support import (
    JAEGER_FILE,
    PROMETHEUS_FILE,
    ZIPKIN_DIR,
    jaeger_span_count,
    nab_expected_points,
    nab_files,
    nab_rows,
    nab_time_ns,
    otlp_counts,
    otlp_files,
    prometheus_expected_points,
    zipkin_expected_spans,
    zipkin_files,
)

LIMIT_S: Final = 120.0
ALL_TIME: Final = TimeRange(start_unix_nano=1, end_unix_nano=2**63 - 1)


def expected_counts(path: Path) -> tuple[int, int, int]:
    """(spans, log records, metric points) the file holds, computed without our decoders."""
    if path.parent.name == "opentelemetry-proto":
        counts = otlp_counts(path)
        return counts["span"], counts["log"], counts["metric_point"]
    if path.parent.name == "zipkin":
        return zipkin_expected_spans(path), 0, 0
    if path == JAEGER_FILE:
        return jaeger_span_count(path), 0, 0
    if path == PROMETHEUS_FILE:
        return 0, 0, prometheus_expected_points(path)
    return 0, 0, nab_expected_points(path)


ALL_FILES: Final = [*otlp_files(), *zipkin_files(), JAEGER_FILE, PROMETHEUS_FILE, *nab_files()]


def statistics(data_dir: Path, retention_days: float = 0) -> StoreStatistics:
    config = load_config(
        environ={},
        overrides={"data_dir": str(data_dir), "store": {"retention_days": retention_days}},
    )

    async def read() -> StoreStatistics:
        async with open_telemetry_store(config) as store:
            return await store.statistics()

    return trio.run(read)


@pytest.fixture
def no_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREMETRY_STORE_RETENTION_DAYS", "0")


@pytest.mark.usefixtures("no_retention")
@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_import_stores_exactly_the_file_and_is_idempotent(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    spans, logs, points = expected_counts(path)
    assert (
        main(
            [
                "ingest",
                "--data-dir",
                str(data_dir),
                "--timestamp",
                "2024-05-01T12:00:00Z",
                str(path),
            ]
        )
        == 0
    )
    first = capsys.readouterr().out
    stored = statistics(data_dir)
    assert (stored.span_count, stored.log_count, stored.metric_point_count) == (spans, logs, points)
    assert "wrote nothing" not in first

    assert (
        main(
            [
                "ingest",
                "--data-dir",
                str(data_dir),
                "--timestamp",
                "2024-05-01T12:00:00Z",
                str(path),
            ]
        )
        == 0
    )
    second = capsys.readouterr().out
    assert "wrote nothing" in second
    assert f"{spans + logs + points} already stored" in second
    again = statistics(data_dir)
    assert (again.span_count, again.log_count, again.metric_point_count) == (spans, logs, points)


@pytest.mark.usefixtures("no_retention")
def test_all_shared_files_in_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    assert main(["ingest", "--data-dir", str(data_dir), *map(str, ALL_FILES)]) == 0
    totals = [sum(column) for column in zip(*map(expected_counts, ALL_FILES), strict=True)]
    stored = statistics(data_dir)
    assert [stored.span_count, stored.log_count, stored.metric_point_count] == totals
    captured = capsys.readouterr()
    summaries = [line for line in captured.out.splitlines() if not line.startswith(" ")]
    assert [line.split(" ", 1)[0] for line in summaries] == [str(p) for p in ALL_FILES]
    # stderr names the store written (not a terminal: no progress bars)
    assert captured.err == f"importing into {data_dir / 'telemetry.db'}\n"


@pytest.mark.usefixtures("no_retention")
def test_summary_says_what_was_rejected_and_adjusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nab = next(p for p in nab_files() if p.name == "machine_temperature_system_failure.csv")
    mobile = ZIPKIN_DIR / "smartthings-mobile-web-install.json"
    assert main(["ingest", "--data-dir", str(tmp_path / "d"), str(nab), str(mobile)]) == 0
    out = capsys.readouterr().out
    rows = len(nab_rows(nab))
    assert f"read {rows} metric points; wrote {nab_expected_points(nab)} metric points" in out
    assert f"{rows - nab_expected_points(nab)} rejected" in out
    assert "rejected 12 metric points: timestamp repeats an earlier row's" in out
    assert "(e.g. line 10151 (repeats line 10139)" in out
    assert "note (84): Zipkin span fragment (no timestamp) merged into its span" in out


def test_records_past_retention_are_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # default retention: 7 days; yelp.json is from 2019
    yelp = ZIPKIN_DIR / "yelp.json"
    assert main(["ingest", "--data-dir", str(tmp_path / "d"), str(yelp)]) == 0
    out = capsys.readouterr().out
    spans = zipkin_expected_spans(yelp)
    assert (
        f"{spans} records are older than the retention window (7 days): stored now, deleted by "
        "the next retention pass" in out
    )


@pytest.mark.usefixtures("no_retention")
def test_gzip_files_and_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skew = ZIPKIN_DIR / "skew.json"
    packed = tmp_path / "skew.json.gz"
    packed.write_bytes(gzip.compress(skew.read_bytes()))
    unknown = tmp_path / "notes.txt"
    unknown.write_text("just some words\n")
    broken = tmp_path / "broken.json"
    broken.write_text('{"resourceSpans": [{"scopeSpans": 7}]}')
    missing = tmp_path / "missing.json"
    status = main(
        [
            "ingest",
            "--data-dir",
            str(tmp_path / "d"),
            str(unknown),
            str(packed),
            str(broken),
            str(missing),
        ]
    )
    assert status == 1  # some files failed; the good one is still imported
    out = capsys.readouterr().out
    assert f"{unknown}: not imported: the content matches none of the formats: pass --format" in out
    assert f"{packed} (zipkin): read 4 spans; wrote 4 spans" in out
    assert (
        f"{broken} (otlp-json): not imported: not an OTLP JSON request: Expected `array`, got "
        "`int` - at `$.resourceSpans[0].scopeSpans`" in out
    )
    assert f"{missing}: not imported: cannot read: No such file or directory" in out
    assert statistics(tmp_path / "d").span_count == zipkin_expected_spans(skew)


@pytest.mark.usefixtures("no_retention")
def test_prometheus_scrape_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(tmp_path / "d")
    points = prometheus_expected_points(PROMETHEUS_FILE)
    pinned = ["ingest", "--data-dir", data_dir, "--timestamp", "1700000000", str(PROMETHEUS_FILE)]
    assert main(pinned) == 0
    assert main(pinned) == 0  # the same scrape again: nothing new
    assert statistics(tmp_path / "d").metric_point_count == points
    assert statistics(tmp_path / "d").newest_unix_nano == 1_700_000_000 * 10**9
    assert main(["ingest", "--data-dir", data_dir, str(PROMETHEUS_FILE)]) == 0  # a new scrape: now
    assert statistics(tmp_path / "d").metric_point_count == 2 * points
    assert (
        main(["ingest", "--data-dir", data_dir, "--timestamp", "soon", str(PROMETHEUS_FILE)]) == 2
    )
    assert "--timestamp 'soon'" in capsys.readouterr().err


@pytest.mark.usefixtures("no_retention")
def test_csv_options(tmp_path: Path) -> None:
    nab = next(p for p in nab_files() if p.name == "nyc_taxi.csv")
    data_dir = tmp_path / "d"
    command = [
        "ingest",
        "--data-dir",
        str(data_dir),
        "--metric-name",
        "taxi.passengers",
        "--label",
        "city=nyc",
        "--label",
        "source=nab",
        "--unit",
        "{passenger}",
        "--service-name",
        "taxi",
        str(nab),
    ]
    assert main(command) == 0
    rows = nab_rows(nab)
    config = load_config(
        environ={}, overrides={"data_dir": str(data_dir), "store": {"retention_days": 0}}
    )

    async def check() -> None:
        async with open_telemetry_store(config) as store:
            (descriptor,) = (await store.metric_names(ALL_TIME, limit=10)).items
            assert (descriptor.name, descriptor.type, descriptor.unit) == (
                "taxi.passengers",
                "gauge",
                "{passenger}",
            )
            assert {"city", "source"} <= set(descriptor.label_keys)
            start = nab_time_ns(rows[0][0])
            series = await store.metric_series(
                MetricQuery(
                    name="taxi.passengers",
                    time_range=TimeRange(
                        start_unix_nano=start, end_unix_nano=start + 3 * 1800 * 10**9
                    ),
                    step_ns=1800 * 10**9,
                    aggregation="last",
                    service_name="taxi",
                ),
                limit=10,
            )
            (only,) = series
            assert only.points == [
                (nab_time_ns(timestamp), float(value)) for timestamp, value in rows[:3]
            ]

    trio.run(check)


@pytest.mark.usefixtures("no_retention")
async def test_import_next_to_a_running_server(tmp_path: Path) -> None:
    """A separate ``coremetry ingest`` process writes while ``serve`` holds the store open (WAL)."""
    data_dir = tmp_path / "data"
    config = load_config(
        environ={},
        overrides={"http": {"port": 0}, "data_dir": str(data_dir), "store": {"retention_days": 0}},
    )
    yelp = ZIPKIN_DIR / "yelp.json"
    with trio.fail_after(LIMIT_S):
        async with open_telemetry_store(config) as store, trio.open_nursery() as nursery:
            stop = trio.Event()
            await nursery.start(
                partial(
                    serve, config, build_mcp_server(), announce=False, shutdown=stop, store=store
                )
            )
            env = {**os.environ, "COREMETRY_STORE_RETENTION_DAYS": "0"}
            result = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "coremetry",
                    "ingest",
                    "--data-dir",
                    str(data_dir),
                    str(yelp),
                ],
                capture_stdout=True,
                capture_stderr=True,
                env=env,
                start_new_session=True,
            )
            assert result.returncode == 0, result.stderr.decode()
            assert b"wrote 16 spans" in result.stdout
            # the server's own store connection sees the import at once
            assert (await store.statistics()).span_count == zipkin_expected_spans(yelp)
            stop.set()


def test_help_lists_the_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    out = capsys.readouterr().out
    assert "{auto,otlp-json,zipkin,jaeger,prometheus,csv}" in out


@pytest.mark.usefixtures("no_retention")
def test_records_dated_in_the_future_are_rejected_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time_ns()
    hour = 3600 * 1_000_000_000
    spans = [
        {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": span_id,
            "name": "clocky",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1_000_000),
        }
        for span_id, start in (("00000000000000b1", now - hour), ("00000000000000b2", now + hour))
    ]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    # The tolerance is ingest.max_future_skew_s (30 minutes here: the second span is past it).
    monkeypatch.setenv("COREMETRY_INGEST_MAX_FUTURE_SKEW_S", "1800")
    assert main(["ingest", "--data-dir", str(tmp_path / "d"), str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} (otlp-json): read 2 spans; wrote 1 spans" in out
    assert "1 rejected" in out
    assert (
        "span end time is more than 1800 s ahead of this server's clock "
        "(ingest.max_future_skew_s); check the sender's clock" in out
    )
    assert statistics(tmp_path / "d").span_count == 1


def _zipkin_spans(now_us: int, bad: dict[str, int]) -> list[dict[str, object]]:
    good = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "id": "00000000000000a1",
        "name": "get /cart",
        "timestamp": now_us,
        "duration": 1500,
        "localEndpoint": {"serviceName": "cart"},
    }
    return [good, {**good, "id": "00000000000000a2", "name": "get /bad", **bad}]


def _jaeger_trace(now_us: int, bad: dict[str, int]) -> dict[str, object]:
    good = {
        "traceID": "5b8efff798038103d269b633813fc60c",
        "spanID": "00000000000000a1",
        "operationName": "get /cart",
        "startTime": now_us,
        "duration": 1500,
        "processID": "p1",
    }
    bad_span = {**good, "spanID": "00000000000000a2", "operationName": "get /bad", **bad}
    return {"data": [{"spans": [good, bad_span], "processes": {"p1": {"serviceName": "cart"}}}]}


@pytest.mark.usefixtures("no_retention")
@pytest.mark.parametrize(
    ("fmt", "bad", "reason"),
    [
        ("zipkin", {"duration": -5}, "Zipkin span duration is negative"),
        ("zipkin", {"duration": 2**62}, "Zipkin span timestamp + duration is past 2262"),
        ("jaeger", {"duration": -5}, "Jaeger span duration is negative"),
        ("jaeger", {"duration": 2**62}, "Jaeger span startTime + duration is past 2262"),
    ],
)
def test_zipkin_and_jaeger_spans_with_a_bad_duration_are_rejected(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    bad: dict[str, int],
    reason: str,
) -> None:
    now_us = time.time_ns() // 1000 - 60_000_000  # a minute ago
    document = _zipkin_spans(now_us, bad) if fmt == "zipkin" else _jaeger_trace(now_us, bad)
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(document))
    data_dir = tmp_path / "d"
    assert main(["ingest", "--data-dir", str(data_dir), str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} ({fmt}): read 2 spans; wrote 1 spans" in out
    assert "1 rejected" in out
    assert f"rejected 1 spans: {reason}" in out
    config = load_config(
        environ={}, overrides={"data_dir": str(data_dir), "store": {"retention_days": 0}}
    )

    async def stored() -> list[tuple[str, int]]:
        async with open_telemetry_store(config) as store:
            page = await store.get_trace("5b8efff798038103d269b633813fc60c", limit=10)
            return [(s.name, s.end_time_unix_nano - s.start_time_unix_nano) for s in page.items]

    assert trio.run(stored) == [("get /cart", 1_500_000)]  # the good span, its 1.5 ms kept


@pytest.mark.usefixtures("no_retention")
@pytest.mark.parametrize("fmt", ["zipkin", "jaeger"])
def test_zipkin_annotations_and_jaeger_logs_with_a_bad_time_are_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    now_us = time.time_ns() // 1000 - 60_000_000  # a minute ago
    times = {"get /cart": [now_us + 100, -5], "get /bad": [2**62]}  # microseconds
    if fmt == "zipkin":
        document: object = _zipkin_spans(now_us, {})
        for span in _as_dicts(document):
            span["annotations"] = [
                {"timestamp": t, "value": f"event {i}"}
                for i, t in enumerate(times[str(span["name"])])
            ]
        note = "note (2): Zipkin annotation timestamp is missing or outside 1970..2262"
    else:
        document = _jaeger_trace(now_us, {})
        trace = _as_dicts(_as_dict(document)["data"])[0]
        for span in _as_dicts(trace["spans"]):
            span["logs"] = [
                {"timestamp": t, "fields": [{"key": "event", "value": f"event {i}"}]}
                for i, t in enumerate(times[str(span["operationName"])])
            ]
        note = "note (2): Jaeger span log timestamp is missing or outside 1970..2262"
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(document))
    data_dir = tmp_path / "d"
    assert main(["ingest", "--quiet", "--data-dir", str(data_dir), str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # --quiet: no store line either
    out = captured.out
    assert f"{path} ({fmt}): read 2 spans; wrote 2 spans; 0 already stored; 0 rejected" in out
    assert note in out
    config = load_config(
        environ={}, overrides={"data_dir": str(data_dir), "store": {"retention_days": 0}}
    )

    async def stored() -> dict[str, list[tuple[str, int]]]:
        async with open_telemetry_store(config) as store:
            page = await store.get_trace("5b8efff798038103d269b633813fc60c", limit=10)
            return {s.name: [(e.name, e.time_unix_nano) for e in s.events] for s in page.items}

    # both spans kept; only the event with a usable time, at its time in nanoseconds
    assert trio.run(stored) == {"get /cart": [("event 0", (now_us + 100) * 1000)], "get /bad": []}


def _as_dict(value: object) -> dict[str, object]:
    assert isinstance(value, dict)
    return value


def _as_dicts(value: object) -> list[dict[str, object]]:
    assert isinstance(value, list)
    return [_as_dict(item) for item in value]
