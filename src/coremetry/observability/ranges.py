"""Time ranges as models write them, and times as models read them.

Input: every tool that reads a time window takes three optional arguments (:class:`RangeArgs`):

- ``range``: a relative length, ``<number><unit>`` with unit ``s``, ``m``, ``h``, ``d`` or
  ``w`` (``"15m"``, ``"1h"``, ``"24h"``, ``"7d"``), at most :data:`MAX_RANGE_NS` (400 days);
- ``start`` / ``end``: absolute RFC 3339 times with a zone (``"2023-01-30T13:05:00Z"``,
  ``"2023-01-30T14:05:00+01:00"``).

Each tool has its own default length: :attr:`RangeArgs.default_range`, a class attribute of
its argument Struct, is the one source of both the behaviour (:func:`resolve_range`) and the
text a model reads (the ``range`` property's description, :func:`range_description`, put into
the served input schema by :func:`coremetry.observability.spec.input_schema`).

Resolution (:func:`resolve_range`), ``now`` being the server's clock:

======================  ==========================================
given                   window ``[start, end)``
======================  ==========================================
nothing                 ``[now - default, now)``
``range``               ``[now - range, now)``
``start``               ``[start, start + range)`` if ``range`` else ``[start, now)``
``end``                 ``[end - (range or default), end)``
``start`` and ``end``   ``[start, end)`` (``range`` must then be absent)
======================  ==========================================

A bad value is a :class:`~coremetry.mcp.BadArgs` naming the argument and showing an accepted
form. ``end <= start`` is refused the same way (the store contract's half-open interval), and so
are times outside 1970-01-01 .. 2262-04-11 (what 64-bit unix nanoseconds hold).

Output: times are RFC 3339 in UTC with millisecond precision and a ``Z`` suffix
(:func:`rfc3339`), durations are milliseconds as floats rounded to 0.001 ms (:func:`ms`).

Sources: RFC 3339 §5.6 (``date-time``); OTLP ``*_unix_nano`` fields (nanoseconds since the
Unix epoch, UTC); ``shared/DESIGN.md`` §7 (times RFC 3339 UTC, units in field names).
"""

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, ClassVar, Final

import msgspec

from coremetry.mcp import BadArgs
from coremetry.store import TimeRange

__all__ = [
    "DEFAULT_RANGE",
    "MAX_RANGE_NS",
    "MAX_UNIX_NANO",
    "NS_PER_MS",
    "NS_PER_S",
    "RangeArgs",
    "ResolvedRange",
    "auto_step_ns",
    "duration_ns",
    "ms",
    "parse_rfc3339_ns",
    "range_description",
    "resolve_range",
    "rfc3339",
]

NS_PER_MS: Final = 1_000_000
NS_PER_S: Final = 1_000_000_000
_UNIT_NS: Final = {
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86_400 * NS_PER_S,
    "w": 7 * 86_400 * NS_PER_S,
}
_RELATIVE: Final = re.compile(r"([1-9][0-9]*)([smhdw])")
MAX_RANGE_NS: Final = 400 * 86_400 * NS_PER_S
"""Longest accepted window (400 days), in nanoseconds."""
DEFAULT_RANGE: Final = "1h"
"""The window most tools use when given no time arguments."""
MAX_UNIX_NANO: Final = 2**63 - 1
"""Latest representable time (2262-04-11T23:47:16Z), unix nanoseconds."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_RANGE_TEXT: Final = (
    'Relative window ending now (or at `end`, or starting at `start`): "15m", "1h", "24h", "7d".'
)


def range_description(default: str) -> str:
    """The ``range`` property's description for a tool whose default window is ``default``."""
    return f'{_RANGE_TEXT} Default "{default}".'


class RangeArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Time window arguments shared by every windowed tool (see the module docstring).

    Attributes:
        default_range: class attribute, the tool's window when no time argument is given;
            subclasses set their own (it also feeds the schema's ``range`` description).
    """

    default_range: ClassVar[str] = DEFAULT_RANGE

    range: Annotated[str | None, msgspec.Meta(description=range_description(DEFAULT_RANGE))] = None
    start: Annotated[
        str | None,
        msgspec.Meta(description='Window start, RFC 3339 with zone, e.g. "2023-01-30T13:00:00Z".'),
    ] = None
    end: Annotated[
        str | None,
        msgspec.Meta(description="Window end (exclusive), RFC 3339 with zone. Default now."),
    ] = None


class ResolvedRange(msgspec.Struct, frozen=True, kw_only=True):
    """A resolved window plus whether the caller chose it.

    Attributes:
        time_range: the half-open window in unix nanoseconds.
        explicit: ``True`` when the caller gave ``range``, ``start`` or ``end``.
    """

    time_range: TimeRange
    explicit: bool

    @property
    def start_unix_nano(self) -> int:
        """Window start, unix nanoseconds."""
        return self.time_range.start_unix_nano

    @property
    def end_unix_nano(self) -> int:
        """Window end (exclusive), unix nanoseconds."""
        return self.time_range.end_unix_nano

    def as_json(self) -> dict[str, object]:
        """``{"start": RFC 3339, "end": RFC 3339}`` for a result."""
        return {"start": rfc3339(self.start_unix_nano), "end": rfc3339(self.end_unix_nano)}


def duration_ns(text: str, field: str = "range") -> int:
    """Parse a relative length such as ``"15m"`` into nanoseconds.

    Args:
        text: ``<number><unit>``, unit one of ``s m h d w``.
        field: the argument name used in the error.

    Returns:
        The length in nanoseconds, ``1 s <= length <= 400 d``.

    Raises:
        BadArgs: not of that form, or longer than 400 days.
    """
    match = _RELATIVE.fullmatch(text.strip())
    if match is None:
        raise BadArgs(
            f'{field}: {text[:40]!r} is not a relative length; use e.g. "15m", "1h", "24h", "7d"'
        )
    digits = match.group(1)
    # More than 12 digits of any unit is past 400 days (and never a huge int to build).
    length = int(digits) * _UNIT_NS[match.group(2)] if len(digits) <= 12 else MAX_RANGE_NS + 1
    if length > MAX_RANGE_NS:
        raise BadArgs(f"{field}: {text[:40]!r} is longer than the 400-day maximum")
    return length


def parse_rfc3339_ns(text: str, field: str) -> int:
    """Parse an RFC 3339 time with a zone into unix nanoseconds (microsecond precision).

    Args:
        text: e.g. ``"2023-01-30T13:05:00Z"`` or ``"2023-01-30T14:05:00.5+01:00"``.
        field: the argument name used in the error.

    Raises:
        BadArgs: not an RFC 3339 date-time, without a zone offset, or outside 1970-01-01 ..
            2262-04-11 (64-bit unix nanoseconds).
    """
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadArgs(
            f'{field}: {text[:40]!r} is not an RFC 3339 time; use e.g. "2023-01-30T13:05:00Z"'
        ) from None
    if parsed.tzinfo is None:
        raise BadArgs(f'{field}: {text[:40]!r} has no zone; add "Z" for UTC')
    delta = parsed - _EPOCH
    unix_nano = (delta.days * 86_400 + delta.seconds) * NS_PER_S + delta.microseconds * 1000
    if not 0 <= unix_nano <= MAX_UNIX_NANO:
        raise BadArgs(
            f"{field}: {text[:40]!r} is outside the times telemetry can carry "
            "(1970-01-01 .. 2262-04-11)"
        )
    return unix_nano


def resolve_range(args: RangeArgs, now_unix_nano: int, default: str | None = None) -> ResolvedRange:
    """Resolve ``range`` / ``start`` / ``end`` into a window (table in the module docstring).

    Args:
        args: the caller's arguments.
        now_unix_nano: the current time, unix nanoseconds.
        default: the relative length used when neither ``range`` nor both bounds are given;
            ``None``: the arguments' own :attr:`RangeArgs.default_range`.

    Returns:
        The window and whether the caller chose it.

    Raises:
        BadArgs: a malformed value, ``range`` together with both bounds, ``end <= start``.
    """
    default = args.default_range if default is None else default
    explicit = args.range is not None or args.start is not None or args.end is not None
    start = None if args.start is None else parse_rfc3339_ns(args.start, "start")
    end = None if args.end is None else parse_rfc3339_ns(args.end, "end")
    if start is not None and end is not None:
        if args.range is not None:
            raise BadArgs("range: give either range or both start and end, not all three")
    elif start is not None:
        end = start + duration_ns(args.range) if args.range is not None else now_unix_nano
    else:
        end = end if end is not None else now_unix_nano
        length = duration_ns(args.range) if args.range is not None else duration_ns(default)
        start = end - length
    if end <= start:
        raise BadArgs(
            f"end: the window is empty or inverted ({rfc3339(start)} .. {rfc3339(end)}); "
            "end must be after start"
        )
    if end - start > MAX_RANGE_NS:
        raise BadArgs("start: the window is longer than the 400-day maximum")
    if start < 0 or end > MAX_UNIX_NANO:
        raise BadArgs(
            f"{'start' if start < 0 else 'end'}: the window {rfc3339(start)} .. {rfc3339(end)} "
            "reaches outside the times telemetry can carry (1970-01-01 .. 2262-04-11)"
        )
    return ResolvedRange(
        time_range=TimeRange(start_unix_nano=start, end_unix_nano=end), explicit=explicit
    )


def rfc3339(unix_nano: int) -> str:
    """Format unix nanoseconds as RFC 3339 UTC with milliseconds: ``2023-01-30T13:15:43.651Z``.

    Times outside years 1..9999 (corrupt source timestamps) come out as ``"@<ns>ns"`` rather
    than failing.
    """
    try:
        moment = _EPOCH + timedelta(microseconds=unix_nano // 1000)
    except OverflowError:
        return f"@{unix_nano}ns"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ms(nanoseconds: int | float | None) -> float | None:
    """Nanoseconds as milliseconds rounded to 3 decimals (``None`` stays ``None``)."""
    if nanoseconds is None:
        return None
    return round(nanoseconds / NS_PER_MS, 3)


_NICE_STEPS_S: Final = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    2 * 86400,
    7 * 86400,
)


def auto_step_ns(window_ns: int, max_buckets: int = 120, min_step_ns: int = 0) -> int:
    """The smallest "nice" step (1 s .. 7 d) giving at most ``max_buckets`` buckets.

    Args:
        window_ns: the window length, nanoseconds.
        max_buckets: the most buckets wanted.
        min_step_ns: a floor (e.g. the metric's scrape interval), nanoseconds.

    Returns:
        The step in nanoseconds.
    """
    for step_s in _NICE_STEPS_S:
        step_ns = step_s * NS_PER_S
        if step_ns >= min_step_ns and -(-window_ns // step_ns) <= max_buckets:
            return step_ns
    return -(-window_ns // max_buckets)
