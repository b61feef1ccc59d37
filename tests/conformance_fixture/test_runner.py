"""``tests/conformance/run.py`` fails on any failed check, scored or not (issue 19).

The suite's own exit status counts only scored scenarios; the runner also reads every
``checks.json`` of the results folder, so a failing extension or pending scenario fails the run.
"""

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import cast

from conftest import REPO


def failed_checks() -> Callable[[Path], list[str]]:
    spec = importlib.util.spec_from_file_location(
        "conformance_run", REPO / "tests/conformance/run.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast("Callable[[Path], list[str]]", module.failed_checks)


def write_checks(folder: Path, scenario: str, statuses: list[str]) -> None:
    (folder / scenario).mkdir(parents=True)
    checks = [
        {"id": f"{scenario}-{i}", "status": status, "errorMessage": f"why {i}"}
        for i, status in enumerate(statuses)
    ]
    (folder / scenario / "checks.json").write_text(json.dumps(checks), encoding="utf-8")


def test_every_failure_is_reported_whatever_the_scenario(tmp_path: Path) -> None:
    write_checks(tmp_path, "tasks-lifecycle-2026", ["SUCCESS", "FAILURE"])
    write_checks(tmp_path, "custom-header-2026", ["FAILURE"])
    write_checks(tmp_path, "server-initialize-2026", ["SUCCESS", "WARNING", "INFO", "SKIPPED"])
    assert failed_checks()(tmp_path) == [
        "custom-header-2026: custom-header-2026-0: why 0",
        "tasks-lifecycle-2026: tasks-lifecycle-2026-1: why 1",
    ]


def test_a_clean_run_has_no_failure(tmp_path: Path) -> None:
    write_checks(tmp_path, "tasks-lifecycle-2026", ["SUCCESS", "SUCCESS"])
    assert failed_checks()(tmp_path) == []
