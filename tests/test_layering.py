"""Layering of the package: imports between coremetry's packages go one way, lowest first.

Three checks, all over the source parsed with :mod:`ast` (every import: module level, inside
functions, under ``TYPE_CHECKING``; relative imports resolved; ``importlib.import_module`` /
``__import__`` with a literal name):

- **The ranked order** (``LAYERS``, ``shared/DESIGN.md`` §2): every package and top-level module
  of ``coremetry`` has a rank, and a module imports only from units of a strictly lower rank.
  An upward import, an import between two units of the same rank, a cycle between units, or a
  unit missing from ``LAYERS`` is reported with its file and line. Imports inside one unit are
  that unit's business (``mcp/`` internals are checked by its own tests).
- **Ruled out** (``NEVER``): a few imports the ranks would allow but the design forbids
  (transports know no tools, observability no HTTP, auth no ``mcp/``).
- **The protocol core** ``coremetry.mcp`` knows JSON-RPC and MCP and nothing else: it must not
  import transports, auth, the store, ingest, observability, the web stack or JWT handling
  (``coremetry/mcp/__init__.py`` promises it), and its public surface (``__all__``) is sorted,
  complete and importable.
"""

import ast
import importlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import pytest

import coremetry
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


# ---- the ranked order of coremetry's packages -------------------------------------------------

ROOT: Final = "coremetry"
ROOT_DIR: Final = Path(coremetry.__file__).resolve().parent

LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    # Lowest first; a unit imports only from units of a lower line (never from its own line).
    # ``config`` sits at the bottom beside ``roles`` (DESIGN.md does not rank it): it imports
    # nothing of ours, and ``store/open.py`` reads the configured store location from it.
    # ``supervision`` (contain a task's failure: log it with an incident id) imports nothing of
    # ours either; transports, the HTTP worker and the server use it. ``private_files``
    # (create a database file 0600 without reopening one a connection holds) neither.
    ("roles", "config", "supervision", "private_files"),
    ("mcp",),
    ("store",),
    ("analysis",),
    ("http_edge",),
    ("ingest",),
    ("detection",),
    ("observability",),
    # ``access`` (the role + rate call gate) is unranked in DESIGN.md; like ``audit`` (the sink
    # of the audit records) it is application policy plugged into the core at assembly, and
    # imports only ``config`` and ``mcp``.
    ("audit", "access"),
    ("auth",),
    ("transports",),
    # ``oauth_http`` and ``well_known``: the OAuth authorization server's and the discovery
    # documents' HTTP endpoints (issue 18), beside the REST API: auth and the HTTP edge below.
    ("rest", "oauth_http", "well_known"),
    ("demo", "conformance_fixture"),
    # ``http_worker`` is hypercorn's trio worker with every connection contained; only the
    # server runs it, beside the app it serves.
    ("app", "http_worker"),
    ("server",),
    ("cli",),
    # ``python -m coremetry`` runs the CLI.
    ("__main__",),
)


def _unit_of(name: str, root: str) -> str | None:
    # ``coremetry.store.sqlite._writer`` -> ``store``; the root package itself -> ``""``.
    if name == root:
        return ""
    if not name.startswith(root + "."):
        return None
    return name[len(root) + 1 :].split(".")[0]


def import_edges(root_dir: Path, root: str) -> dict[tuple[str, str], list[str]]:
    """Map ``(importing unit, imported unit)`` to the ``"path:line"`` of each such import.

    A unit is a top-level module or package of ``root`` (the package in ``root_dir``); the
    root's own ``__init__.py`` is the unit ``""``. Imports within one unit are left out, and
    so is a bare ``import root`` (``from root import x`` counts as importing the unit ``x``).
    """
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root_dir.rglob("*.py")):
        relative = path.relative_to(root_dir)
        package = ".".join([root, *relative.parts[:-1]])
        source_unit = "" if relative.parts == ("__init__.py",) else relative.parts[0]
        source_unit = source_unit.removesuffix(".py")
        for line, name in imported_names(path.read_text(encoding="utf-8"), package):
            unit = _unit_of(name, root)
            if unit is None or unit == source_unit or (unit == "" and name == root):
                continue
            where = f"{relative.as_posix()}:{line}"
            found = edges.setdefault((source_unit, unit), [])
            if where not in found:
                found.append(where)
    return edges


def _units(root_dir: Path) -> set[str]:
    return {
        path.name.removesuffix(".py")
        for path in root_dir.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").exists())
    }


def _cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    # The strongly connected components with more than one unit, each sorted, by reachability
    # (the graph has a few dozen nodes).
    successors: dict[str, set[str]] = {}
    for source, target in edges:
        successors.setdefault(source, set()).add(target)
        successors.setdefault(target, set())

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for following in successors[todo.pop()]:
                if following not in seen:
                    seen.add(following)
                    todo.append(following)
        return seen

    reach = {unit: reachable(unit) for unit in successors}
    components = {
        tuple(sorted({unit} | {other for other in reach[unit] if unit in reach[other]}))
        for unit in successors
    }
    return sorted(list(component) for component in components if len(component) > 1)


def layering_violations(
    root_dir: Path, root: str, layers: Sequence[Sequence[str]] = LAYERS
) -> list[str]:
    """Every import in the package at ``root_dir`` that breaks the ranked order ``layers``.

    Reported: a unit absent from ``layers`` (or ranked twice, or ranked but absent), an
    import from a unit of the same or a higher rank, a cycle between units, and any import of
    ours in the root ``__init__.py``. Each message names the files and lines.
    """
    rank: dict[str, int] = {}
    problems: list[str] = []
    for index, line in enumerate(layers):
        for unit in line:
            if unit in rank:
                problems.append(f"{unit!r} is ranked twice")
            rank[unit] = index
    present = _units(root_dir)
    problems += [f"{unit!r} has no rank in the layers" for unit in sorted(present - set(rank))]
    problems += [f"{unit!r} is ranked but does not exist" for unit in sorted(set(rank) - present)]
    edges = import_edges(root_dir, root)
    for (source, target), where in sorted(edges.items()):
        if source == "":
            problems.append(f"the root __init__.py imports {target!r} ({', '.join(where)})")
        elif source in rank and target in rank and rank[target] >= rank[source]:
            kind = "sideways" if rank[target] == rank[source] else "upward"
            problems.append(f"{kind}: {source} imports {target} ({', '.join(where)})")
    for cycle in _cycles(edges):
        problems.append(f"cycle between {', '.join(cycle)}")
    return problems


def test_the_packages_import_one_way_lowest_first() -> None:
    assert layering_violations(ROOT_DIR, ROOT) == []


NEVER: Final[dict[str, frozenset[str]]] = {
    # Imports the ranks would allow but DESIGN.md §2 rules out: transports never know about
    # tools (nor the telemetry behind them); observability knows the store and the registry
    # types, not HTTP; auth uses roles, never mcp/.
    "transports": frozenset({"observability", "detection", "ingest", "analysis", "store"}),
    "observability": frozenset({"http_edge"}),
    "auth": frozenset({"mcp"}),
}


def never_imported(
    edges: dict[tuple[str, str], list[str]], never: Mapping[str, frozenset[str]] = NEVER
) -> list[str]:
    """The imports of ``edges`` that ``never`` rules out, with their files and lines."""
    return [
        f"{source} must not import {target} ({', '.join(where)})"
        for (source, target), where in sorted(edges.items())
        if target in never.get(source, frozenset())
    ]


def test_no_package_imports_what_the_design_rules_out() -> None:
    assert never_imported(import_edges(ROOT_DIR, ROOT)) == []


def test_a_ruled_out_import_is_reported(tmp_path: Path) -> None:
    root_dir = _tree(tmp_path, {**_CLEAN, "high.py": "def f() -> None:\n    import pkg.peer\n"})
    edges = import_edges(root_dir, "pkg")
    assert layering_violations(root_dir, "pkg", _SYNTHETIC_LAYERS) == []
    assert never_imported(edges, {"high": frozenset({"peer"})}) == [
        "high must not import peer (high.py:2)"
    ]


def test_the_layers_name_every_package_and_top_level_module() -> None:
    ranked = {unit for line in LAYERS for unit in line}
    assert ranked == _units(ROOT_DIR)
    assert {"roles", "mcp", "store", "app", "server", "cli"} <= ranked


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root_dir = tmp_path / "pkg"
    for name, source in {"__init__.py": "", **files}.items():
        path = root_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return root_dir


_SYNTHETIC_LAYERS: Final = (("low",), ("mid", "peer"), ("high",))
_CLEAN: Final = {
    "low.py": "import trio\n",
    "mid/__init__.py": "from pkg import low\n",
    "mid/inner.py": "from . import __name__ as _n\nfrom ..low import x\nfrom .other import y\n",
    "peer.py": "import pkg.low\n",
    "high.py": "from pkg.mid import inner\nfrom .peer import z\nimport pkg\n",
}


def test_a_clean_synthetic_tree_has_no_violation(tmp_path: Path) -> None:
    assert layering_violations(_tree(tmp_path, _CLEAN), "pkg", _SYNTHETIC_LAYERS) == []


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        # inside a function, relative, two levels up
        (
            "mid/inner.py",
            "def f() -> None:\n    from ..high import thing\n",
            "upward: mid imports high (mid/inner.py:2)",
        ),
        # under TYPE_CHECKING
        (
            "low.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.mid.inner\n",
            "upward: low imports mid (low.py:3)",
        ),
        # a literal importlib call
        ("low.py", "import importlib\nimportlib.import_module('pkg.high')\n", "upward: low"),
        # between two units of the same rank
        ("peer.py", "from pkg import mid\n", "sideways: peer imports mid (peer.py:1)"),
        ("__init__.py", "from .low import x\n", "the root __init__.py imports 'low'"),
        ("extra.py", "", "'extra' has no rank in the layers"),
    ],
)
def test_a_synthetic_tree_with_an_upward_import_is_reported(
    tmp_path: Path, path: str, source: str, expected: str
) -> None:
    root_dir = _tree(tmp_path, {**_CLEAN, path: source})
    problems = layering_violations(root_dir, "pkg", _SYNTHETIC_LAYERS)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_a_synthetic_tree_with_a_cycle_is_reported(tmp_path: Path) -> None:
    cyclic = {
        **_CLEAN,
        "low.py": "def f() -> None:\n    from pkg.mid.inner import y\n",
        "mid/inner.py": "from ..low import x\n",
    }
    problems = layering_violations(_tree(tmp_path, cyclic), "pkg", _SYNTHETIC_LAYERS)
    assert "cycle between low, mid" in problems
    assert "upward: low imports mid (low.py:2)" in problems
    # The cycle is found from the graph alone, whatever the ranks say.
    unranked = layering_violations(
        _tree(tmp_path, cyclic), "pkg", (("low", "mid", "peer", "high"),)
    )
    assert "cycle between low, mid" in unranked


def test_a_missing_unit_is_reported(tmp_path: Path) -> None:
    problems = layering_violations(_tree(tmp_path, _CLEAN), "pkg", (*_SYNTHETIC_LAYERS, ("gone",)))
    assert problems == ["'gone' is ranked but does not exist"]
