"""The repository carries its own test data: ``tests/data/README.md`` lists every file there,
each source folder has its licence, and nothing outside the repository is read."""

import re
from pathlib import Path
from typing import Final

from conftest import DATA, REPO

LICENCES: Final = {
    "mcp-schema": "LICENSE",
    "nezha": "LICENSE",
    "nezha-full": "LICENSE",
    "zipkin": "LICENSE",
    "jaeger-ui": "LICENSE",
    "opentelemetry-proto": "LICENSE",
    "node_exporter": "LICENSE",
    "nab": "LICENSE.txt",
}


def carried() -> set[str]:
    return {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file()} - {"README.md"}


def test_the_readme_lists_every_carried_file_and_nothing_else() -> None:
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([^`]+)` \| [\d,.]+ [KM]iB \|", readme, flags=re.MULTILINE))
    assert listed == carried()


def test_each_source_folder_carries_its_licence_and_is_permissive() -> None:
    assert {path.split("/", 1)[0] for path in carried()} == set(LICENCES)
    for folder, name in LICENCES.items():
        text = (DATA / folder / name).read_text(encoding="utf-8")
        assert "MIT License" in text or "Apache License" in text or "Permission is hereby" in text


def test_large_files_are_compressed() -> None:
    for path in carried():
        size = (DATA / path).stat().st_size
        assert path.endswith(".gz") or size < 1024 * 1024, path
    total = sum((DATA / path).stat().st_size for path in carried())
    assert total < 30 * 1024 * 1024


def project_files() -> list[Path]:
    """The files of ``tests/``, ``bench/``, ``scripts/``, ``noxfile.py`` and ``.ci/`` (no
    caches, no results)."""
    found = [REPO / "noxfile.py"]
    for folder in ("tests", "bench", "scripts", ".ci"):
        for path in (REPO / folder).rglob("*"):
            parts = set(path.relative_to(REPO).parts)
            if path.is_file() and not parts & {"__pycache__", "results", ".pytest_cache"}:
                found.append(path)
    return found


def test_nothing_reads_a_folder_beside_the_repository() -> None:
    variable = "COREMETRY_" + "SHARED"  # spelled so that this file does not match
    beside = re.compile(rf"\.\./shared|{variable}|parents?(\[\d\])? / \"shared\"")
    checked = 0
    for path in project_files():
        if path.suffix in {".py", ".sh", ".md", ""}:
            text = path.read_text(encoding="utf-8", errors="replace")
            assert not beside.search(text), path
            checked += 1
    assert checked > 100
    assert not [path for path in project_files() if "loghub" in path.name.lower()]
