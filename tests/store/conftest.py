"""Fixtures of the store tests."""

import pytest

from coremetry.store.sqlite import _rollups

TAIL_SIZES = {"rolled-at-once": 1, "mixed": 97, "all-in-the-tail": _rollups.ROLL_EVERY}
"""Spans the embedded store's roll-ups may lag behind (``_rollups.ROLL_EVERY``): every write
rolled up in its transaction, a tail of the newest spans beside rolled-up rows, or (the
default, for a test's few thousand spans) every span read raw from the tail."""


@pytest.fixture(params=list(TAIL_SIZES.values()), ids=list(TAIL_SIZES))
def rollup_tail(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run the test with each of :data:`TAIL_SIZES` (the embedded store's tail bound)."""
    size = int(request.param)
    monkeypatch.setattr(_rollups, "ROLL_EVERY", size)
    return size
