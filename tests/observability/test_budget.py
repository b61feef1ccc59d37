"""The output budget and cursors, on rows made from the real SmartThings trace."""

import msgspec
import pytest

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
)
from coremetry.observability.tools import span_row
from coremetry.observability.trace_analysis import analyse_trace

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
