"""The output budget and cursors, on rows made from the real SmartThings trace."""

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coremetry.analysis.trace_analysis import analyse_trace
from coremetry.mcp import BadArgs
from coremetry.observability.budget import (
    MIN_BUDGET_BYTES,
    CursorState,
    JsonObject,
    Shaped,
    Trimmable,
    decode_cursor,
    encode_cursor,
    encoded_size,
    fit,
    shorten,
    shrink_value,
)
from coremetry.observability.tools import span_row

from ._support import SMARTTHINGS, spans_of


def trace_rows() -> list[JsonObject]:
    analysis = analyse_trace(spans_of(SMARTTHINGS))
    on_path = analysis.critical_time_by_span()
    return [span_row(n, analysis.start_ns, on_path) for n in analysis.nodes]


def body_with(rows: list[JsonObject]) -> JsonObject:
    return {"trace_id": "x" * 32, "spans": list(rows), "truncated": False}


@pytest.mark.parametrize("budget", [MIN_BUDGET_BYTES, 2048, 4096, 16 * 1024, 64 * 1024])
def test_fit_keeps_the_longest_prefix_that_fits(budget: int) -> None:
    rows = trace_rows()
    assert encoded_size(body_with(rows)) > 64 * 1024, "the real trace is far over budget"
    seen: list[int] = []

    def continuation(kept: int) -> JsonObject:
        seen.append(kept)
        return {"cursor": f"after-{kept}"}

    result = fit(Shaped(body_with(rows), [Trimmable(("spans",), continuation)]), budget)
    size = encoded_size(result)
    assert size <= budget
    kept = result["spans"]
    assert isinstance(kept, list)
    assert kept == rows[: len(kept)], "a prefix, in order, items unchanged"
    assert result["truncated"] is True
    assert result["cursor"] == f"after-{len(kept)}"
    # Maximal: one more row (with its cursor) would not fit.
    bigger = body_with(rows[: len(kept) + 1])
    bigger.update(truncated=True, cursor=f"after-{len(kept) + 1}")
    assert encoded_size(bigger) > budget


def test_fit_returns_a_small_result_unchanged() -> None:
    rows = trace_rows()[:3]
    body = body_with(rows)
    before = msgspec.json.encode(body)
    result = fit(Shaped(body, [Trimmable(("spans",))]), 16 * 1024)
    assert msgspec.json.encode(result) == before
    assert result["truncated"] is False


def test_fit_trims_in_the_order_given_and_reaches_nested_lists() -> None:
    rows = trace_rows()
    body: JsonObject = {
        "summary": {"errors": rows[:200]},
        "spans": rows[:200],
        "truncated": False,
    }
    result = fit(Shaped(body, [Trimmable(("summary", "errors")), Trimmable(("spans",))]), 8 * 1024)
    assert encoded_size(result) <= 8 * 1024
    summary = result["summary"]
    assert isinstance(summary, dict)
    assert summary["errors"] == [], "the least important list goes first, entirely"
    # Neither list has a continuation: the result says how much each left out.
    omitted = result["omitted"]
    assert isinstance(omitted, dict)
    assert omitted["summary.errors"] == 200
    spans = result["spans"]
    assert isinstance(spans, list)
    assert 0 < len(spans) < 200
    assert omitted["spans"] == 200 - len(spans)
    assert result["truncated"] is True
    assert "cursor" not in result


def test_fit_shortens_huge_strings_and_never_exceeds_the_budget() -> None:
    one_line = {"body": "x" * 200_000, "service": "s"}
    result = fit(Shaped({"records": [one_line], "truncated": False}), 4096)
    assert encoded_size(result) <= 4096
    assert result.get("strings_shortened") is True
    records = result["records"]
    assert isinstance(records, list)
    assert records
    # Nothing to cut and nothing to shorten enough: the fallback names the problem.
    wide: JsonObject = {f"key-{i}": i for i in range(2000)}
    fallback = fit(Shaped(wide), MIN_BUDGET_BYTES)
    assert encoded_size(fallback) <= MIN_BUDGET_BYTES
    assert fallback["truncated"] is True
    assert "budget" in str(fallback["note"])


def test_budget_below_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1024"):
        fit(Shaped({}), 100)


def test_cursor_round_trip_and_refusals() -> None:
    state = CursorState(tool="search_logs", query="abc", offset=40, store_cursor="s1")
    token = encode_cursor(state)
    assert decode_cursor(token, tool="search_logs", query="abc") == state
    with pytest.raises(BadArgs, match=r"^cursor: not a cursor that get_trace returned"):
        decode_cursor(token, tool="get_trace", query="abc")
    with pytest.raises(BadArgs, match=r"^cursor: it belongs to a search_logs call with other"):
        decode_cursor(token, tool="search_logs", query="other")
    for garbage in ("bogus", token[:-3] + "!!!", "cm1.", "cm1." + "A" * 5000, ""):
        with pytest.raises(BadArgs, match=r"^cursor:"):
            decode_cursor(garbage, tool="search_logs", query="abc")


# ---- a page always makes progress ------------------------------------------------------------

_TEXT = st.tuples(st.sampled_from(["a", "é", "😀", '"', "\\n"]), st.integers(0, 40_000)).map(
    lambda pair: pair[0] * pair[1]
)
_POINTS = st.integers(0, 3_000).map(
    lambda n: [[f"2026-01-01T00:{i % 60:02d}:00.000Z", i / 7] for i in range(n)]
)
_ITEM = st.one_of(
    st.fixed_dictionaries(
        {"name": _TEXT, "points": _POINTS, "attributes": st.dictionaries(_TEXT, _TEXT, max_size=3)}
    ),
    _TEXT,
    st.integers(),
    st.lists(_TEXT, max_size=50),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(_ITEM, max_size=12),
    budget=st.integers(MIN_BUDGET_BYTES, 64 * 1024),
    header=_TEXT,
)
def test_every_page_makes_progress_within_the_budget(  # type: ignore[misc]  # hypothesis's given() returns Callable[..., None]
    items: list[object], budget: int, header: str
) -> None:
    """Any items, any budget >= the floor: each page fits, shows >= 1 item, and paging ends."""
    offset = 0
    pages = 0
    while offset < len(items):

        def continuation(kept: int, start: int = offset) -> JsonObject:
            return {"cursor": f"after-{start + kept}"}

        body: JsonObject = {
            "root_name": header,
            "items": list(items[offset:]),
            "summary": [header, header],
            "truncated": False,
        }
        result = fit(
            Shaped(body, [Trimmable(("items",), continuation), Trimmable(("summary",))]), budget
        )
        assert encoded_size(result) <= budget
        shown = result["items"]
        assert isinstance(shown, list)
        assert shown, "a page with items left shows at least one"
        # Items are shown as they are, unless long strings were cut (said) or a lone first item
        # was shrunk (truncated).
        for index, item in enumerate(shown):
            if item != items[offset + index]:
                assert result.get("strings_shortened") is True or (index, len(shown)) == (0, 1)
                assert result["truncated"] is True or result.get("strings_shortened") is True
        if "cursor" in result:
            assert result["cursor"] == f"after-{offset + len(shown)}"
            assert result["cursor"] != f"after-{offset}", "never the cursor that made the page"
        else:
            assert offset + len(shown) == len(items), "no cursor only on the last page"
        offset += len(shown)
        pages += 1
    assert pages <= len(items)


def test_a_lone_oversized_item_is_shrunk_with_markers() -> None:
    name = "GET /search?q=" + "q" * 30_000
    rows: list[object] = [{"name": name, "n": i} for i in range(3)]

    def continuation(kept: int) -> JsonObject:
        return {"cursor": f"after-{kept}"}

    result = fit(
        Shaped({"spans": rows, "truncated": False}, [Trimmable(("spans",), continuation)]), 4096
    )
    assert encoded_size(result) <= 4096
    spans = result["spans"]
    assert isinstance(spans, list)
    assert spans
    first = spans[0]
    assert isinstance(first, dict)
    shown = str(first["name"])
    assert shown.startswith("GET /search?q=qqq")
    cut = len(name.encode()) - len(shown.split("…(+")[0].encode())
    assert shown.endswith(f"…(+{cut} bytes)"), "the marker says how much was cut"
    # Cut names leave room for every row: all three are shown, and the result says so.
    assert len(spans) == 3
    assert result["strings_shortened"] is True
    assert "cursor" not in result
    # A row that stays too large alone is shrunk itself and the page still moves on.
    big: list[object] = [{"name": "x", "points": [[i, i / 3] for i in range(5000)]}, "next"]
    page = fit(
        Shaped({"series": big, "truncated": False}, [Trimmable(("series",), continuation)]), 4096
    )
    assert encoded_size(page) <= 4096
    series = page["series"]
    assert isinstance(series, list)
    assert len(series) == 1
    assert isinstance(series[0], dict)
    assert 0 < series[0]["points_omitted"] < 5000
    assert page["truncated"] is True
    assert page["cursor"] == "after-1"


def test_shorten_marks_what_it_cut() -> None:
    assert shorten("short", 10) == "short"
    text = "é" * 100
    cut = shorten(text, 40)
    assert len(cut) <= 40
    kept = cut.split("…")[0]
    assert cut == kept + f"…(+{2 * (100 - len(kept))} bytes)"
    assert shorten("abcdefgh", 3) == "ab…", "too short for the marker: a bare ellipsis"


@settings(max_examples=100, deadline=None)
@given(value=_ITEM, room=st.integers(48, 20_000))
def test_shrink_value_always_fits_its_room(value: object, room: int) -> None:  # type: ignore[misc]  # hypothesis's given() returns Callable[..., None]
    shrunk = shrink_value(value, room)
    assert encoded_size(shrunk) <= room
    if encoded_size(value) <= room:
        assert shrunk == value
