"""Time windows as models write them; times as models read them."""

import pytest

from coremetry.mcp import BadArgs
from coremetry.observability.ranges import (
    RangeArgs,
    auto_step_ns,
    duration_ns,
    ms,
    parse_rfc3339_ns,
    resolve_range,
    rfc3339,
)

NOW = 1_675_084_543_651_197_703
"""2023-01-30T13:15:43.651197703Z, a Nezha log timestamp."""
H = 3_600_000_000_000


def test_formats_and_parses_rfc3339_utc() -> None:
    assert rfc3339(NOW) == "2023-01-30T13:15:43.651Z"
    assert parse_rfc3339_ns("2023-01-30T13:15:43.651197Z", "start") == NOW - 703
    assert parse_rfc3339_ns("2023-01-30T14:15:43.651197+01:00", "start") == NOW - 703
    # Nezha's corrupt log times (year 1754) still format; absurd ones do not crash.
    assert rfc3339(-6795364578871345152) == "1754-08-30T22:43:41.128Z"
    assert rfc3339(10**21) == f"@{10**21}ns"


@pytest.mark.parametrize(
    ("args", "start", "end"),
    [
        (RangeArgs(), NOW - H, NOW),
        (RangeArgs(range="15m"), NOW - H // 4, NOW),
        (RangeArgs(range="7d"), NOW - 168 * H, NOW),
        (RangeArgs(start="2023-01-30T13:00:00Z"), 1_675_083_600_000_000_000, NOW),
        (
            RangeArgs(start="2023-01-30T13:00:00Z", range="30m"),
            1_675_083_600_000_000_000,
            1_675_085_400_000_000_000,
        ),
        (
            RangeArgs(end="2023-01-30T13:00:00Z", range="2h"),
            1_675_083_600_000_000_000 - 2 * H,
            1_675_083_600_000_000_000,
        ),
        (
            RangeArgs(start="2023-01-30T12:00:00Z", end="2023-01-30T13:00:00Z"),
            1_675_080_000_000_000_000,
            1_675_083_600_000_000_000,
        ),
    ],
)
def test_resolution_table(args: RangeArgs, start: int, end: int) -> None:
    resolved = resolve_range(args, NOW)
    assert (resolved.start_unix_nano, resolved.end_unix_nano) == (start, end)
    assert resolved.explicit == (args != RangeArgs())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (RangeArgs(range="yesterday"), r"^range: 'yesterday' is not a relative length"),
        (RangeArgs(range="0m"), r"^range: '0m' is not a relative length"),
        (RangeArgs(range="401d"), r"^range: '401d' is longer than the 400-day maximum"),
        (RangeArgs(range="99999999d"), r"^range: '99999999d' is longer than the 400-day maximum"),
        (RangeArgs(range="9" * 60 + "s"), r"^range: '9{40}' is longer than the 400-day maximum"),
        (RangeArgs(start="30/01/2023"), r"^start: '30/01/2023' is not an RFC 3339 time"),
        (RangeArgs(end="2023-01-30T13:00:00"), r'^end: .* has no zone; add "Z" for UTC'),
        (
            RangeArgs(start="2023-01-30T13:00:00Z", end="2023-01-30T12:00:00Z"),
            r"^end: the window is empty or inverted",
        ),
        (
            RangeArgs(start="2023-01-30T12:00:00Z", end="2023-01-30T13:00:00Z", range="1h"),
            r"^range: give either range or both start and end",
        ),
    ],
)
def test_bad_windows_name_the_argument(args: RangeArgs, message: str) -> None:
    with pytest.raises(BadArgs, match=message):
        resolve_range(args, NOW)


def test_auto_step_is_a_nice_step_within_the_bucket_budget() -> None:
    assert auto_step_ns(H) == 30_000_000_000  # 1 h / 30 s = 120 buckets
    assert auto_step_ns(24 * H) == 900_000_000_000  # 96 buckets of 15 min
    assert auto_step_ns(24 * H, min_step_ns=3600 * 10**9) == 3600 * 10**9
    assert duration_ns("90s") == 90 * 10**9
    assert ms(1_234_567) == 1.235
    assert ms(None) is None
