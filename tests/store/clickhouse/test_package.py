"""The ClickHouse backend package: sorted, complete public names; it reads through no layer
above the store (no protocol core, server, transport or observability import)."""

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import coremetry.store.clickhouse

PACKAGE_DIR = Path(coremetry.store.clickhouse.__file__).parent


def modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(coremetry.store.clickhouse.__path__)]
    found = [importlib.import_module(f"coremetry.store.clickhouse.{n}") for n in names]
    assert all(hasattr(m, "__all__") for m in found)
    return [coremetry.store.clickhouse, *found]


@pytest.mark.parametrize("module", modules(), ids=lambda m: m.__name__)
def test_public_names_are_sorted_and_importable(module: ModuleType) -> None:
    names = list(module.__all__)
    assert names == sorted(set(names))
    assert all(hasattr(module, name) for name in names)


def test_the_package_all_is_complete() -> None:
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    reexported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert reexported == set(coremetry.store.clickhouse.__all__)


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_the_backend_imports_nothing_above_the_store(path: Path) -> None:
    forbidden = (
        "coremetry.mcp",
        "coremetry.server",
        "coremetry.app",
        "coremetry.transports",
        "coremetry.observability",
        "coremetry.config",
        "quart",
        "hypercorn",
    )
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    assert [name for name in imported if name.startswith(forbidden)] == []
