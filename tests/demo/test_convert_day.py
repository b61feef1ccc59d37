"""``scripts/convert_nezha.py --day``: any day of the published Nezha dataset, on small inputs.

Synthetic upstream files written in the upstream layout and CSV shapes: torn log rows are
counted and skipped, a metric file whose ``Time`` and ``TimeStamp`` disagree keeps ``Time``
and says so, and fault times come from ``inject_time``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "scripts" / "convert_nezha.py"
DAY = "2023-02-01"
POD = "ts-order-service-5b67c48447-fj8b7"
TRACE = "d9dda41eed9569ef91cbc77142a5a4d7"


def _docker(text: str, at: str) -> str:
    return json.dumps({"log": text + "\n", "stream": "stdout", "time": at})


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def make_day(root: Path, *, stamp_offset_s: int = 0) -> Path:
    rca = root / "rca_data" / DAY
    header = "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,"
    _write(
        rca / "trace" / "10_00_trace.csv",
        header
        + "Duration\n"
        + f"{TRACE},a2171d1763e0631f,root,{POD},GET /orders,1675245600000000000,"
        "1675245600005000000,5000\n",
    )
    good = _docker("18:00:00.100 ERROR o.s.Impl#1 order not found", "2023-02-01T10:00:00.1Z")
    log_rows = [
        "Timestamp,TimeUnixNano,Node,PodName,Container,TraceID,SpanID,Log",
        f"2023-02-01T10:00:00.1Z,1675245600100000000,10.0.0.1,{POD},server,{TRACE},"
        f'a2171d1763e0631f,"{good.replace(chr(34), chr(34) * 2)}"',
        # torn: the Log column cut short (not JSON)
        f"2023-02-01T10:00:00.2Z,1675245600200000000,10.0.0.1,{POD},server,{TRACE},"
        'a2171d1763e0631f,"{""log"":""18:00:00.200 INFO cut"',
        # torn: run into the next row, columns missing
        "2023-02-01T10:00:00.3Z,1675245600300000000",
    ]
    _write(rca / "log" / "10_00_log.csv", "\n".join(log_rows) + "\n")
    metric_header = (
        "Time,TimeStamp,PodName,CpuUsage(m),CpuUsageRate(%),MemoryUsage(Mi),MemoryUsageRate(%)"
    )
    metric_rows = [metric_header]
    for minute in range(3):
        second = 1675245600 + 60 * minute
        clock = f"2023-02-01 10:{minute:02d}:00.5 +0000 UTC m=+1.0"
        metric_rows.append(f"{clock},{second + stamp_offset_s},{POD},10,2,100,5")
    _write(rca / "metric" / f"{POD}_metric.csv", "\n".join(metric_rows) + "\n")
    _write(
        rca / f"{DAY}-fault_list.json",
        json.dumps(
            {
                "10": [
                    {
                        "inject_time": "2023-02-01 10:01:30",
                        "inject_timestamp": "1675200000",  # hours off, as on other days
                        "inject_pod": POD,
                        "inject_type": "exception",
                    }
                ]
            }
        ),
    )
    _write(root / "LICENSE", "MIT\n")
    return root


def run(day: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--nezha", str(day), "--day", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_any_day_converts_torn_rows_counted_faults_from_inject_time(tmp_path: Path) -> None:
    done = run(make_day(tmp_path / "nezha"), tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert f"nezha-trainticket-{DAY}" in done.stdout
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    [dataset] = manifest["datasets"]
    [log_entry] = [f for f in dataset["files"] if f["signal"] == "logs"]
    assert log_entry["log_records"] == 1
    assert log_entry["torn_rows"] == 2
    logs = json.loads(gzip.decompress((tmp_path / "out" / log_entry["path"]).read_bytes()))
    [resource] = logs["resourceLogs"]
    [record] = resource["scopeLogs"][0]["logRecords"]
    assert record["severityText"] == "ERROR"
    faults = json.loads((tmp_path / "out" / "nezha" / "faults.json").read_text())["faults"]
    [fault] = faults
    assert fault["time_unix_nano"] == 1675245690 * 1_000_000_000  # 10:01:30 UTC
    assert fault["service.name"] == "ts-order-service"
    assert fault["type"] == "exception"
    assert "inject_timestamp says 2023-01-31 21:20:00" in fault["note"]
    [metric_entry] = [f for f in dataset["files"] if f["signal"] == "metrics"]
    assert "note" not in metric_entry


def test_metric_time_columns_that_disagree_keep_time_and_say_so(tmp_path: Path) -> None:
    done = run(make_day(tmp_path / "nezha", stamp_offset_s=8 * 3600), tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "Time and TimeStamp disagree in 3 rows; Time is kept" in done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    [metric_entry] = [f for f in manifest["datasets"][0]["files"] if f["signal"] == "metrics"]
    assert metric_entry["note"] == "Time and TimeStamp disagree in 3 rows; Time is kept"
    request = json.loads(gzip.decompress((tmp_path / "out" / metric_entry["path"]).read_bytes()))
    times = {
        int(point["timeUnixNano"])
        for metric in request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        for point in metric["gauge"]["dataPoints"]
    }
    assert times == {(1675245600 + 60 * m) * 1_000_000_000 + 500_000_000 for m in range(3)}


def test_a_folder_with_several_days_needs_one_named(tmp_path: Path) -> None:
    day = make_day(tmp_path / "nezha")
    (day / "rca_data" / "2023-02-02").mkdir()
    done = run(day, tmp_path / "out")
    assert done.returncode == 1
    assert "2 days" in done.stderr
    assert "--date" in done.stderr or "--day" in done.stderr
