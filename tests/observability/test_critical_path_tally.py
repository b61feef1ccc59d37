"""``CriticalPathTally.add_spans`` (the cheap path ``likely_origin`` takes) tallies exactly what
``add(analyse_trace(spans))`` tallies.

On the real SmartThings and Zipkin skew traces, and on generated traces built to hit every rule
and tie: clock skew (children starting before parents, in other services, async pairs), equal
starts, ends and durations, duplicate span ids, missing parents, parent cycles, several roots,
empty service names and every span kind; each with no scope and scoped to every service.
"""

import random
from pathlib import Path

import msgspec
import pytest

from coremetry.analysis import CriticalPathTally, analyse_trace
from coremetry.store import Span, SpanKind

from ._support import SKEW, SMARTTHINGS, spans_of


def tallies(spans: list[Span], scope: str | None) -> tuple[CriticalPathTally, CriticalPathTally]:
    """The full analysis' tally and the cheap one of the same trace."""
    full, cheap = CriticalPathTally(), CriticalPathTally()
    full.add(analyse_trace(spans), scope)
    cheap.add_spans(spans, scope)
    return full, cheap


def scopes(spans: list[Span]) -> list[str | None]:
    return [None, *sorted({s.service_name for s in spans}), "not-a-service"]


@pytest.mark.parametrize("path", [SMARTTHINGS, SKEW], ids=["smartthings", "skew"])
def test_real_traces_tally_the_same(path: Path) -> None:
    spans = spans_of(path)
    shuffled = list(spans)
    random.Random(3).shuffle(shuffled)
    for order in (spans, shuffled):
        for scope in scopes(spans):
            full, cheap = tallies(order, scope)
            assert cheap == full, scope
        assert tallies(order, None)[1].own, "the trace has critical-path time"


def generated_trace(rng: random.Random, size: int) -> list[Span]:
    """Spans with coarse times (many ties), few services, skew and corrupt parent ids."""
    base = 1_700_000_000_000_000_000
    services = ["a", "b", "c", ""][: rng.randint(1, 4)]
    kinds = list(SpanKind)
    spans: list[Span] = []
    for index in range(size):
        # Ids in no relation to the order of the spans; some repeat.
        span_id = f"{rng.randint(0, size if rng.random() < 0.1 else 10**9):016x}"
        if index == 0 or rng.random() < 0.08:
            parent = ""  # another root
        elif rng.random() < 0.05:
            parent = f"{rng.randint(0, 3 * size):016x}"  # often missing; may close a cycle
        else:
            parent = spans[rng.randrange(len(spans))].span_id
        start = base + rng.randint(-4, 12) * 1_000
        end = start + rng.choice([0, 1, 2, 3, 5, 8, 13]) * 1_000
        if spans and rng.random() < 0.3:  # exactly the times of another span: ties everywhere
            twin = rng.choice(spans)
            start, end = twin.start_time_unix_nano, twin.end_time_unix_nano
        spans.append(
            Span(
                trace_id="ab" * 16,
                span_id=span_id,
                parent_span_id=parent,
                service_name=rng.choice(services),
                name=f"op-{index}",
                kind=rng.choice(kinds),
                start_time_unix_nano=start,
                end_time_unix_nano=end,
            )
        )
    if rng.random() < 0.3:  # a parent cycle through the first root
        first = spans[0]
        spans[0] = msgspec.structs.replace(first, parent_span_id=spans[-1].span_id)
    return spans


def test_generated_traces_tally_the_same() -> None:
    rng = random.Random(15)
    for _ in range(600):
        spans = generated_trace(rng, rng.randint(1, 40))
        for scope in scopes(spans):
            full, cheap = tallies(spans, scope)
            assert cheap == full, (scope, spans)


def test_tallies_add_up_over_traces() -> None:
    rng = random.Random(4)
    traces = [generated_trace(rng, 25) for _ in range(30)]
    full, cheap = CriticalPathTally(), CriticalPathTally()
    for spans in traces:
        full.add(analyse_trace(spans), "b")
        cheap.add_spans(spans, "b")
    assert cheap.traces == 30
    assert cheap == full


def test_empty_trace_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one span"):
        CriticalPathTally().add_spans([])
