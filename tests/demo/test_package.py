"""The demo data is packaged, listed in its manifest, and attributed in NOTICE."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Final

from conftest import DATA, REPO

import coremetry.demo
import coremetry.demo.cli
import coremetry.demo.loader
import coremetry.demo.manifest
from coremetry.demo.manifest import data_root, read_data_file, read_manifest

SOURCE_DATA: Final = REPO / "src" / "coremetry" / "demo" / "data"


def shipped_files() -> set[Path]:
    return {p.relative_to(SOURCE_DATA) for p in SOURCE_DATA.rglob("*") if p.is_file()}


def test_pyproject_package_data_covers_every_data_file() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["coremetry.demo"]
    package = SOURCE_DATA.parent
    covered = {
        p.relative_to(SOURCE_DATA)
        for pattern in patterns
        for p in package.glob(pattern)
        if p.is_file()
    }
    assert covered == shipped_files()


def test_every_manifest_file_is_in_the_installed_package() -> None:
    manifest = read_manifest()
    listed = {f.path for d in manifest.datasets for f in d.files}
    listed |= {d.license_file for d in manifest.datasets}
    listed |= {d.faults for d in manifest.datasets if d.faults}
    for path in listed:
        assert read_data_file(path), path  # read through importlib.resources
    extra = {str(p) for p in shipped_files()} - listed
    assert extra == {"manifest.json", "zipkin/README.md"}
    assert data_root().joinpath("manifest.json").is_file()


def test_each_licence_file_is_the_sources_own_text() -> None:
    upstream = {"nezha/LICENSE": "nezha/LICENSE", "zipkin/LICENSE": "zipkin/LICENSE"}
    for dataset in read_manifest().datasets:
        original = DATA / upstream[dataset.license_file]
        assert read_data_file(dataset.license_file) == original.read_bytes()


def test_notice_names_every_shipped_source() -> None:
    notice = (REPO / "NOTICE").read_text()
    listed = {w.rstrip(",") for w in notice.split() if "/" in w and "://" not in w}
    datasets = read_manifest().datasets
    assert {d.source.split("/tree/")[0] for d in datasets} == {
        "https://github.com/IntelligentDDS/Nezha",
        "https://github.com/openzipkin/zipkin",
    }
    for dataset in datasets:
        assert dataset.source.split("/tree/")[0] in notice, dataset.name
        assert dataset.commit in notice, dataset.name
        assert dataset.license.split()[0] in {"MIT", "Apache-2.0"}
        assert {"MIT": "MIT License", "Apache-2.0": "Apache License 2.0"}[
            dataset.license.split()[0]
        ] in notice
        assert f"coremetry/demo/data/{dataset.license_file}" in notice
        for data_file in dataset.files:  # each upstream file, by name or by a glob
            assert any(fnmatch(data_file.source, p) for p in listed), data_file.source


def test_no_research_only_data_is_shipped() -> None:
    # loghub's logs are for research only (its LICENSE): neither the package nor the
    # repository's test data may carry them. Its files are named <System>_2k.log[...].
    carried = [p.relative_to(REPO) for root in (SOURCE_DATA, DATA) for p in root.rglob("*")]
    assert len(carried) > 100  # the folders are there to look at
    for path in carried:
        assert "loghub" not in str(path).lower(), path
        assert "_2k.log" not in path.name, path
    assert "loghub" not in (REPO / "NOTICE").read_text().lower()


def test_the_demo_packages_public_names_are_sorted_and_importable() -> None:
    for module in (
        coremetry.demo,
        coremetry.demo.cli,
        coremetry.demo.loader,
        coremetry.demo.manifest,
    ):
        names = list(module.__all__)
        assert names == sorted(set(names)), module.__name__
        assert all(hasattr(module, name) for name in names), module.__name__
