"""``coremetry demo load`` into ClickHouse (an embedded chDB engine) names that store."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

LIMIT_S: Final = 300.0
"""Hang guard: a hang fails, a slow machine does not."""


def test_demo_load_into_clickhouse_names_clickhouse(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREMETRY_")}
    env.update(
        COREMETRY_STORE_BACKEND="clickhouse",
        COREMETRY_CLICKHOUSE_URL=url,
        COREMETRY_CLICKHOUSE_CREATE_TABLES="true",
    )
    command = [sys.executable, "-m", "coremetry", "demo", "load", "--data-dir", str(tmp_path)]
    runs = [
        subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=LIMIT_S,
            check=False,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert "telemetry.db" not in done.stdout
        assert not (tmp_path / "telemetry.db").exists()
    assert runs[0].stdout.startswith(
        f"loaded the demo into ClickHouse at {url} (database default);"
    )
    assert runs[1].stdout.startswith(
        f"the demo is already in ClickHouse at {url} (database default)"
    )
