"""The package contract: a sorted, complete ``__all__``; it reads the store and the registry
types only — never HTTP, transports, auth or a concrete store backend (``shared/DESIGN.md`` §2)."""

import ast
import importlib
from pathlib import Path
from typing import Final

import pytest

import coremetry.observability

PACKAGE_DIR: Final = Path(coremetry.observability.__file__).resolve().parent
MODULES: Final = sorted(PACKAGE_DIR.glob("*.py"))
FORBIDDEN: Final = (
    "coremetry.transports",
    "coremetry.auth",
    "coremetry.app",
    "coremetry.server",
    "coremetry.store.sqlite",
    "coremetry.ingest",
    "quart",
    "hypercorn",
    "trio_websocket",
    "httpx",
    "asyncio",
    "anyio",
)


def test_all_is_sorted_and_importable() -> None:
    names = list(coremetry.observability.__all__)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(coremetry.observability, name) is not None


def test_all_is_complete() -> None:
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    reexported = {
        alias.asname
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname is not None
    }
    assert reexported == set(coremetry.observability.__all__)


@pytest.mark.parametrize("module", MODULES, ids=[m.stem for m in MODULES])
def test_reads_through_the_store_protocol_only(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.append(node.module)
    assert [name for name in imported if name.startswith(FORBIDDEN)] == []
    importlib.import_module(
        "coremetry.observability"
        if module.stem == "__init__"
        else f"coremetry.observability.{module.stem}"
    )
