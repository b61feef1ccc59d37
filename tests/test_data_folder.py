"""The repository carries its own test data: ``tests/data/README.md`` lists every file there,
each source folder has its licence, and nothing outside the repository is read."""

import re
import subprocess
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


def test_nothing_reads_a_folder_beside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "tests", "bench", "scripts", "noxfile.py", ".ci"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    ).stdout.split()
    variable = "COREMETRY_" + "SHARED"  # spelled so that this file does not match
    beside = re.compile(rf"\.\./shared|{variable}|parents?(\[\d\])? / \"shared\"")
    for name in tracked:
        path = REPO / name
        if path.suffix in {".py", ".sh", ".md", ""} and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert not beside.search(text), name
    assert not [name for name in tracked if "loghub" in name.lower()]
