"""The ingest package's public names: sorted, importable, and re-exported where promised."""

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import coremetry.ingest


def ingest_modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(coremetry.ingest.__path__)]
    modules = [importlib.import_module(f"coremetry.ingest.{n}") for n in names]
    # every module but the private helpers declares its public surface
    assert all(hasattr(m, "__all__") for m in modules if m.__name__ != "coremetry.ingest._convert")
    return [coremetry.ingest, *(m for m in modules if hasattr(m, "__all__"))]


@pytest.mark.parametrize("module", ingest_modules(), ids=lambda m: m.__name__)
def test_public_names_are_sorted_and_importable(module: ModuleType) -> None:
    names = list(module.__all__)
    assert names == sorted(set(names))
    assert all(hasattr(module, name) for name in names)


def test_the_package_exports_the_decoding_entry_points() -> None:
    assert coremetry.ingest.detect_format(b'[{"traceId": "1", "id": "1"}]') == "zipkin"
    assert coremetry.ingest.FORMATS == ("otlp-json", "zipkin", "jaeger", "prometheus", "csv")


def test_the_package_all_is_complete() -> None:
    tree = ast.parse(Path(coremetry.ingest.__file__).read_text(encoding="utf-8"))
    reexported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert reexported == set(coremetry.ingest.__all__)
