"""Layering of the protocol core: ``coremetry.mcp`` knows JSON-RPC and MCP and nothing else.

It must not import transports, auth, the store, ingest, observability, the web stack or JWT
handling (``coremetry/mcp/__init__.py`` promises it), and its public surface (``__all__``) is
sorted, complete and importable.
"""

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

import coremetry.mcp

PACKAGE: Final = "coremetry.mcp"
PACKAGE_DIR: Final = Path(coremetry.mcp.__file__).resolve().parent
FORBIDDEN: Final[tuple[str, ...]] = (
    "coremetry.transports",
    "coremetry.auth",
    "coremetry.store",
    "coremetry.ingest",
    "coremetry.observability",
    "quart",
    "quart_trio",
    "hypercorn",
    "trio_websocket",
    "jwt",
    "sqlite3",
)
_IMPORT_FUNCTIONS: Final = frozenset({"import_module", "__import__"})


def _modules() -> list[Path]:
    return sorted(PACKAGE_DIR.rglob("*.py"))


def _package_of(path: Path) -> str:
    # The package a module's relative imports resolve against (its parent package; for an
    # ``__init__.py``, the package itself, which is the same directory).
    relative = path.relative_to(PACKAGE_DIR)
    return ".".join([PACKAGE, *relative.parts[:-1]])


def _resolve(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, module] if module else base)


def imported_names(source: str, package: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line, absolute module name)`` for every import in ``source``.

    ``from X import Y`` yields both ``X`` and ``X.Y`` (``Y`` may be a submodule), relative
    imports are resolved against ``package``, and ``importlib.import_module("...")`` or
    ``__import__("...")`` with a literal name count as imports too.
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node.module, node.level)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _IMPORT_FUNCTIONS and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield node.lineno, first.value


def forbidden_imports(source: str, package: str) -> list[str]:
    hits: list[str] = []
    for line, name in imported_names(source, package):
        for banned in FORBIDDEN:
            if name == banned or name.startswith(banned + "."):
                hits.append(f"line {line}: {name}")
    return hits


def test_the_package_has_modules() -> None:
    names = {path.name for path in _modules()}
    assert {"__init__.py", "server.py", "wire.py", "gate.py", "registry.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda path: path.name)
def test_core_module_imports_nothing_outside_the_protocol(path: Path) -> None:
    hits = forbidden_imports(path.read_text(encoding="utf-8"), _package_of(path))
    assert hits == [], f"{path.name} imports {hits}"


@pytest.mark.parametrize(
    "source",
    [
        "import sqlite3",
        "import jwt.algorithms",
        "from quart import Quart",
        "import quart_trio as qt",
        "from hypercorn.trio import serve",
        "from trio_websocket import open_websocket_url",
        "from coremetry.transports import http",
        "from coremetry import auth",
        "from coremetry.store.sql import Store",
        "from .. import ingest",
        "from ..observability import metrics",
        "import importlib\nimportlib.import_module('coremetry.auth.jwt')",
        "def f():\n    import coremetry.store\n",
    ],
)
def test_the_import_walker_catches_forbidden_imports(source: str) -> None:
    assert forbidden_imports(source, PACKAGE) != []


@pytest.mark.parametrize(
    "source",
    [
        "import trio",
        "import msgspec",
        "from . import codes",
        "from .wire import ENCODER",
        "from coremetry.mcp import gate",
        "import jwtlike",
        "import quartz",
        "from coremetry import storefront",
    ],
)
def test_the_import_walker_allows_protocol_imports(source: str) -> None:
    assert forbidden_imports(source, PACKAGE) == []


# ---- __all__ ---------------------------------------------------------------------------------


def _all() -> list[str]:
    names: object = coremetry.mcp.__all__
    assert isinstance(names, list | tuple)
    assert all(isinstance(name, str) for name in names)
    return [str(name) for name in names]


def test_all_is_sorted() -> None:
    names = _all()
    assert names == sorted(names)
    assert len(names) == len(set(names))


def test_every_name_in_all_is_importable() -> None:
    module = importlib.import_module(PACKAGE)
    for name in _all():
        assert hasattr(module, name), name
        namespace: dict[str, object] = {}
        exec(f"from {PACKAGE} import {name}", namespace)  # the statement a user writes
        assert namespace[name] is getattr(module, name)


def _public_names_defined_in_init() -> set[str]:
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_every_public_name_of_the_package_is_in_all() -> None:
    defined = _public_names_defined_in_init()
    assert "Server" in defined
    assert defined - set(_all()) == set()
    assert set(_all()) - defined == set(), "__all__ names something the __init__ does not define"
