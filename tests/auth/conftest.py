from collections.abc import Iterator
from pathlib import Path

import pytest

from coremetry.auth import IdentityStore, JwtIssuer, open_identity_store

from ._support import CHEAP_PARAMS, SECRET, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path, clock: FakeClock) -> Iterator[IdentityStore]:
    with open_identity_store(data_dir, password_params=CHEAP_PARAMS, clock=clock) as opened:
        yield opened


@pytest.fixture
def issuer() -> JwtIssuer:
    return JwtIssuer(SECRET)
