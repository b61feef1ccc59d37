"""``coremetry ingest`` and ``detect`` on ClickHouse (an embedded chDB engine) through
``--store clickhouse --clickhouse-url``: they write and read that store and name it, and leave
no ``telemetry.db`` in the data dir."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

LIMIT_S: Final = 300.0
"""Hang guard: a hang fails, a slow machine does not."""

TRACE_ID: Final = "5b8efff798038103d269b633813fc60c"


def _coremetry(*args: str, create_tables: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    if create_tables:  # no Collector made the tables here
        env["COREMETRY_CLICKHOUSE_CREATE_TABLES"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "coremetry", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=LIMIT_S,
        check=False,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _zipkin_file(path: Path) -> Path:
    now_us = time.time_ns() // 1000 - 60_000_000  # a minute ago: inside any retention
    spans = [
        {
            "traceId": TRACE_ID,
            "id": f"00000000000000a{i}",
            "name": "get /cart",
            "timestamp": now_us + i * 1000,
            "duration": 1500,
            "localEndpoint": {"serviceName": "cart"},
        }
        for i in (1, 2)
    ]
    path.write_text(json.dumps(spans))
    return path


def test_ingest_and_detect_use_the_clickhouse_the_options_name(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}"
    data_dir = tmp_path / "data"
    store = ["--data-dir", str(data_dir), "--store", "clickhouse", "--clickhouse-url", url]
    named = f"ClickHouse at {url} (database default)"

    spans = _zipkin_file(tmp_path / "spans.json")
    ingested = _coremetry("ingest", *store, str(spans))
    assert ingested.returncode == 0, ingested.stderr
    assert ingested.stderr.startswith(f"importing into {named}\n")
    assert f"{spans} (zipkin): read 2 spans; wrote 2 spans; 0 already stored" in ingested.stdout

    detected = _coremetry("detect", *store, "--end", "latest", "--range", "1h")
    assert detected.returncode == 0, detected.stderr
    first = detected.stdout.splitlines()[0]
    assert f" in {named}: " in first
    series = re.search(r": (\d+) series", first)
    assert series is not None
    assert int(series.group(1)) > 0  # it read the spans just written
    assert (data_dir / "problems.json").exists()  # the problems stay in the data dir

    for done in (ingested, detected):
        assert "telemetry.db" not in done.stdout + done.stderr
    assert not (data_dir / "telemetry.db").exists()


def test_detect_names_the_clickhouse_it_cannot_open(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}"
    done = _coremetry(
        "detect",
        "--data-dir",
        str(tmp_path / "data"),
        "--store",
        "clickhouse",
        "--clickhouse-url",
        url,
        "--config",
        str(_config(tmp_path, database="no_such_db")),
        create_tables=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"coremetry detect: telemetry store ClickHouse at {url} (database no_such_db): "
    )
    assert "telemetry.db" not in done.stderr
    assert not (tmp_path / "data" / "telemetry.db").exists()


def _config(tmp_path: Path, *, database: str) -> Path:
    path = tmp_path / "coremetry.toml"
    path.write_text(f'[clickhouse]\ndatabase = "{database}"\n')
    return path
