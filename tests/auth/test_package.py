"""The package contract: a sorted, complete ``__all__``; auth never imports transports or mcp."""

import ast
import importlib
from pathlib import Path
from typing import Final

import pytest

import coremetry.auth
from coremetry.auth import Claims
from coremetry.roles import ROLES, Caller, role_satisfies

PACKAGE_DIR: Final = Path(coremetry.auth.__file__).resolve().parent
MODULES: Final = sorted(PACKAGE_DIR.glob("*.py"))


def test_all_is_sorted_and_importable() -> None:
    names = list(coremetry.auth.__all__)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(coremetry.auth, name) is not None


def test_all_is_complete() -> None:
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    reexported = {
        alias.asname
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname is not None
    }
    assert reexported == set(coremetry.auth.__all__)


@pytest.mark.parametrize("module", MODULES, ids=[m.stem for m in MODULES])
def test_auth_never_imports_transports_or_mcp(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.append(node.module)
    forbidden = [
        name
        for name in imported
        if name.startswith(
            ("coremetry.transports", "coremetry.mcp", "quart", "hypercorn", "trio_websocket")
        )
    ]
    assert forbidden == []


def test_only_the_two_verifiers_decode_jwts() -> None:
    # Session JWTs (HS256, our secret) and an identity provider's access tokens (its published
    # keys, asymmetric only): each verifier's rules live in one module.
    callers = [m.name for m in MODULES if "jwt.decode" in m.read_text(encoding="utf-8")]
    assert callers == ["jwt_verifier.py", "oidc.py"]


def test_every_module_imports() -> None:
    for module in MODULES:
        name = "coremetry.auth" if module.stem == "__init__" else f"coremetry.auth.{module.stem}"
        importlib.import_module(name)


@pytest.mark.parametrize("role", ROLES)
def test_claims_become_a_caller(role: str) -> None:
    claims = Claims(
        sub="token:ci",
        role=role,
        token_name="ci",
        issued_at=1,
        expires_at=None,
        kind="service_token",
    )
    caller = claims.to_caller()
    assert caller == Caller(subject="token:ci", role=role, kind="service_token", token_name="ci")
    assert role_satisfies(caller.role, role)
