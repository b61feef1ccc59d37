"""The result types of the tools: what ``structuredContent`` holds, as msgspec Structs.

Each tool's :attr:`~.spec.ToolSpec.output` is one of the ``*Result`` Structs below; its
``outputSchema`` is generated from it (:func:`output_schema`), served in ``tools/list`` from
MCP 2025-06-18 on, and the tests validate every tool's ``structuredContent`` against it. The
handlers build plain JSON objects (:data:`~.budget.JsonObject`), so these types describe those
objects; they are not used to encode them.

What the schema says, and why:

- **Top-level keys.** A key every successful result carries is ``required``; one that only some
  results carry (``cursor``, ``note``, ``data_extent``, ``next``, …) is optional. Objects are
  open (no ``additionalProperties: false``): the output budget may add ``strings_shortened``,
  ``omitted`` and ``<list>_omitted`` counts (:mod:`.budget`).
- **Rows.** A row of a list keeps its first key whatever the budget does; the budget may cut a
  paged list's one oversized row down to its leading keys (``keys_omitted``), or, as a last
  resort, to a placeholder string ``"…(item of N bytes not shown)"``, so every other key of a
  row is optional and a paged list's items are a row or a string.
- **Three shapes.** The root is ``{"type": "object", "anyOf": [result, cut, error]}``: the
  result; the minimal object the budget falls back to when nothing else fits (:class:`Cut`:
  ``truncated``, ``note``, and a cursor with one item of the paged list); and the tool-error
  object of an ``isError`` result (:class:`~coremetry.mcp.tool_errors.ToolError`). MCP
  (2025-06-18 ``server/tools`` "Output Schema") says a server MUST return ``structuredContent``
  conforming to the ``outputSchema`` it declares, without an exception for errors; and some
  clients validate error results too, so the error object is one of the declared shapes.

Nested Structs are under ``$defs`` (an output schema is read by the client library, not by the
model's function-declaration converter, so references are fine there).
"""

from typing import Final

import msgspec
from msgspec import UNSET, UnsetType

from coremetry.mcp.tool_errors import ToolError

from .budget import JsonObject

__all__ = [
    "RESULT_TYPES",
    "CompareDeploysResult",
    "Cut",
    "GetProblemResult",
    "GetServiceMapResult",
    "GetServiceResult",
    "GetTraceResult",
    "ListAnomaliesResult",
    "ListDeploysResult",
    "ListMetricsResult",
    "ListProblemsResult",
    "ListServicesResult",
    "QueryMetricResult",
    "Result",
    "SearchLogsResult",
    "SearchTracesResult",
    "output_schema",
]

Number = float | None
"""A JSON number, or ``null`` where it is not defined (no data, not finite)."""
Object = dict[str, object]
"""A nested JSON object whose keys this schema does not pin down (e.g. ``likely_origin``)."""


class Window(msgspec.Struct, kw_only=True):
    """A time window: RFC 3339 UTC ``start`` (inclusive) and ``end``."""

    start: str
    end: str


class Result(msgspec.Struct, kw_only=True):
    """The keys every result may carry (module docstring).

    Attributes:
        truncated: whether a list was cut (by its limit or the output budget).
        cursor: continues a cut paged list: pass it back with the same arguments.
        note: what to know about this answer (empty window, widened step, …).
        next: the tool to use next.
        strings_shortened: long strings were cut to fit the output budget.
        omitted: items left out of top-N lists, by list path.
    """

    truncated: bool
    cursor: str | UnsetType = UNSET
    note: str | UnsetType = UNSET
    next: str | UnsetType = UNSET
    strings_shortened: bool | UnsetType = UNSET
    omitted: dict[str, int] | UnsetType = UNSET


class Windowed(Result, kw_only=True):
    """A result over a time window; an empty one says where stored data is.

    Attributes:
        window: the window read.
        total: how many items match (when cheap to count).
        data_extent: where stored data is (``null``: the store is empty).
        newest_trace_start: the newest stored trace of the filter (empty trace results).
        newest_log_time: the newest stored log record of the filter (empty log results).
    """

    window: Window
    total: int | UnsetType = UNSET
    data_extent: Window | UnsetType | None = UNSET
    newest_trace_start: str | UnsetType = UNSET
    newest_log_time: str | UnsetType = UNSET


class Cut(msgspec.Struct, kw_only=True):
    """The minimal object of :func:`~.budget.fit` when nothing else fits the output budget.

    Attributes:
        truncated: always ``true``.
        note: says so, and how to narrow the query.
        cursor: continues after the one item kept of a paged list (under that list's key).
    """

    truncated: bool
    note: str
    cursor: str | UnsetType = UNSET


# ---- rows ---------------------------------------------------------------------------------


class ServiceRow(msgspec.Struct, kw_only=True):
    """One service over a window (``list_services``, ``get_service.red``).

    RED fields only where the service has spans; ``signals`` (``list_services``) names the
    signals that carried it, ``log_count``/``metric_count`` what it sent of each.
    """

    service: str
    request_count: int | UnsetType = UNSET
    requests_per_s: Number | UnsetType = UNSET
    error_count: int | UnsetType = UNSET
    error_rate: float | UnsetType = UNSET
    p50_ms: Number | UnsetType = UNSET
    p95_ms: Number | UnsetType = UNSET
    p99_ms: Number | UnsetType = UNSET
    span_count: int | UnsetType = UNSET
    versions: list[str] | UnsetType = UNSET
    last_seen: str | UnsetType = UNSET
    signals: list[str] | UnsetType = UNSET
    log_count: int | UnsetType = UNSET
    metric_count: int | UnsetType = UNSET


class EdgeRow(msgspec.Struct, kw_only=True):
    """One caller -> callee edge with the callee-side RED of its calls."""

    caller: str
    callee: str | UnsetType = UNSET
    call_count: int | UnsetType = UNSET
    error_count: int | UnsetType = UNSET
    error_rate: float | UnsetType = UNSET
    p50_ms: Number | UnsetType = UNSET
    p95_ms: Number | UnsetType = UNSET
    p99_ms: Number | UnsetType = UNSET


class MapServiceRow(msgspec.Struct, kw_only=True):
    """One service of the service map."""

    service: str
    request_count: int | UnsetType = UNSET
    error_rate: float | UnsetType = UNSET
    p95_ms: Number | UnsetType = UNSET


class TraceRow(msgspec.Struct, kw_only=True):
    """One trace summary (``search_traces``)."""

    trace_id: str
    root_service: str | UnsetType = UNSET
    root_name: str | UnsetType = UNSET
    root_missing: bool | UnsetType = UNSET
    start: str | UnsetType = UNSET
    duration_ms: Number | UnsetType = UNSET
    span_count: int | UnsetType = UNSET
    error_count: int | UnsetType = UNSET
    services: list[str] | UnsetType = UNSET


class LogRow(msgspec.Struct, kw_only=True):
    """One log record (``search_logs``)."""

    time: str
    service: str | UnsetType = UNSET
    severity: str | UnsetType = UNSET
    body: str | UnsetType = UNSET
    trace_id: str | UnsetType = UNSET
    span_id: str | UnsetType = UNSET
    attributes: Object | UnsetType = UNSET
    attributes_omitted: int | UnsetType = UNSET


class MetricRow(msgspec.Struct, kw_only=True):
    """One metric name (``list_metrics``)."""

    name: str
    type: str | UnsetType = UNSET
    unit: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    label_keys: list[str] | UnsetType = UNSET
    series_count: int | UnsetType = UNSET
    last_seen: str | UnsetType = UNSET


class SeriesRow(msgspec.Struct, kw_only=True):
    """One bucketed series (``query_metric``); ``points`` are ``[time, value]`` pairs.

    A point is typed as a list of strings and numbers rather than a pair: a series the budget
    shrinks keeps each point's leading item at least (:func:`~.budget.shrink_value`).
    """

    labels: dict[str, str]
    min: Number | UnsetType = UNSET
    max: Number | UnsetType = UNSET
    mean: Number | UnsetType = UNSET
    last: Number | UnsetType = UNSET
    point_count: int | UnsetType = UNSET
    points: list[list[str | Number]] | UnsetType = UNSET
    points_shown: int | UnsetType = UNSET
    points_note: str | UnsetType = UNSET


class DeployRow(msgspec.Struct, kw_only=True):
    """One version of one service as seen in spans."""

    service: str
    version: str | UnsetType = UNSET
    first_seen: str | UnsetType = UNSET
    last_seen: str | UnsetType = UNSET
    span_count: int | UnsetType = UNSET


class ProblemRow(msgspec.Struct, kw_only=True):
    """One detected problem, summarised."""

    problem_id: str
    status: str | UnsetType = UNSET
    title: str | UnsetType = UNSET
    start: str | UnsetType = UNSET
    end: str | UnsetType = UNSET
    detected: str | UnsetType = UNSET
    origin: str | UnsetType | None = UNSET
    origin_reason: str | UnsetType = UNSET
    services: list[str] | UnsetType = UNSET
    anomaly_count: int | UnsetType = UNSET
    sample_trace_ids: list[str] | UnsetType = UNSET


class AnomalyRow(msgspec.Struct, kw_only=True):
    """One anomalous episode of one series (``problem_id`` in ``list_anomalies`` only)."""

    problem_id: str | UnsetType = UNSET
    service: str | UnsetType | None = UNSET
    series: str | UnsetType = UNSET
    labels: dict[str, str] | UnsetType = UNSET
    signal: str | UnsetType = UNSET
    unit: str | UnsetType = UNSET
    direction: str | UnsetType = UNSET
    start: str | UnsetType = UNSET
    detected: str | UnsetType = UNSET
    end: str | UnsetType = UNSET
    ongoing: bool | UnsetType = UNSET
    baseline: float | UnsetType = UNSET
    observed: float | UnsetType = UNSET
    score: float | UnsetType = UNSET


class RankRow(msgspec.Struct, kw_only=True):
    """One service of a problem's origin ranking."""

    service: str
    role: str | UnsetType = UNSET
    symptomatic: bool | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    evidence: list[str] | UnsetType = UNSET
    evidence_total: int | UnsetType = UNSET
    anomalous_callers: list[str] | UnsetType = UNSET
    anomalous_callees: list[str] | UnsetType = UNSET
    depth: int | UnsetType = UNSET
    first_anomaly: str | UnsetType = UNSET
    max_score: float | UnsetType = UNSET
    sample_trace_ids: list[str] | UnsetType = UNSET
    """Traces of the problem's window showing this service's part (sampled services only)."""
    sample_log_lines: list[str] | UnsetType = UNSET
    """Its log lines of the problem's window (sampled services only)."""
    samples_note: str | UnsetType = UNSET
    """How its samples were chosen; present exactly when the detector sampled it."""


class OperationRow(msgspec.Struct, kw_only=True):
    """One operation (span name) of a service."""

    name: str
    span_count: int | UnsetType = UNSET
    error_count: int | UnsetType = UNSET
    p50_ms: Number | UnsetType = UNSET
    p95_ms: Number | UnsetType = UNSET
    p99_ms: Number | UnsetType = UNSET


class SpanEventRow(msgspec.Struct, kw_only=True):
    """One event of a span (``get_trace``): ``offset_ms`` from the span's start."""

    name: str
    offset_ms: Number | UnsetType = UNSET
    attributes: Object | UnsetType = UNSET
    attributes_omitted: int | UnsetType = UNSET


class SpanRow(msgspec.Struct, kw_only=True):
    """One span of a trace tree (defaults omitted)."""

    span_id: str
    parent_span_id: str | UnsetType = UNSET
    orphan: bool | UnsetType = UNSET
    depth: int | UnsetType = UNSET
    service: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    kind: str | UnsetType = UNSET
    start_offset_ms: Number | UnsetType = UNSET
    duration_ms: Number | UnsetType = UNSET
    self_time_ms: Number | UnsetType = UNSET
    critical_path_ms: Number | UnsetType = UNSET
    status: str | UnsetType = UNSET
    status_message: str | UnsetType = UNSET
    skew_shift_ms: Number | UnsetType = UNSET
    attributes: Object | UnsetType = UNSET
    attributes_omitted: int | UnsetType = UNSET
    events: list[SpanEventRow] | UnsetType = UNSET
    events_omitted: int | UnsetType = UNSET


class TraceSpanRef(msgspec.Struct, kw_only=True):
    """A span named in a trace summary (root, dominant span, critical path, error spans)."""

    span_id: str
    service: str | UnsetType = UNSET
    name: str | UnsetType = UNSET
    duration_ms: Number | UnsetType = UNSET
    critical_path_ms: Number | UnsetType = UNSET
    self_time_ms: Number | UnsetType = UNSET
    share_of_root: Number | UnsetType = UNSET
    waiting_on: str | UnsetType = UNSET
    status: str | UnsetType = UNSET
    status_message: str | UnsetType = UNSET


class TraceServiceRow(msgspec.Struct, kw_only=True):
    """One service's part of a trace."""

    service: str
    span_count: int | UnsetType = UNSET
    self_time_ms: Number | UnsetType = UNSET
    call_wait_ms: Number | UnsetType = UNSET
    critical_path_ms: Number | UnsetType = UNSET
    error_count: int | UnsetType = UNSET


class DeploySide(msgspec.Struct, kw_only=True):
    """One side of ``compare_deploys``: its version, the time it was seen, its RED."""

    version: str
    window: Window
    red: ServiceRow | None


# ---- results ------------------------------------------------------------------------------


class ListServicesResult(Windowed, kw_only=True):
    """``list_services``."""

    percentile_relative_error: float | UnsetType = UNSET
    """Every ``p50_ms``/``p95_ms``/``p99_ms`` of the answer is within this relative error of
    the exact nearest-rank percentile of the spans' durations (``0.01``: within 1 %, read from
    the store's per-minute latency sketches; ``0``: exact). Present when it has percentiles."""

    services: list[ServiceRow | str]


class GetServiceResult(Result, kw_only=True):
    """``get_service``: ``likely_origin`` is described in the tool's description."""

    percentile_relative_error: float | UnsetType = UNSET
    """Every ``p50_ms``/``p95_ms``/``p99_ms`` of the answer is within this relative error of
    the exact nearest-rank percentile of the spans' durations (``0.01``: within 1 %, read from
    the store's per-minute latency sketches; ``0``: exact). Present when it has percentiles."""

    service: str
    window: Window
    red: ServiceRow | UnsetType = UNSET
    """Absent when the service has no spans in the window (``note`` says so)."""
    likely_origin: Object | UnsetType = UNSET
    """Absent when the service has no spans in the window (``note`` says so)."""
    metrics: list[str] | UnsetType = UNSET
    """Without spans in the window: the names of its metrics with points in it (up to 20)."""
    metrics_total: int | UnsetType = UNSET
    """Without spans in the window: how many metric names have its points in it."""
    operations: list[OperationRow]
    operations_total: int | None
    upstream: list[EdgeRow]
    downstream: list[EdgeRow]
    deploys: list[DeployRow]
    problems: list[ProblemRow]
    problems_note: str | UnsetType = UNSET


class GetServiceMapResult(Windowed, kw_only=True):
    """``get_service_map`` (``services`` on the first page only)."""

    percentile_relative_error: float | UnsetType = UNSET
    """Every ``p50_ms``/``p95_ms``/``p99_ms`` of the answer is within this relative error of
    the exact nearest-rank percentile of the spans' durations (``0.01``: within 1 %, read from
    the store's per-minute latency sketches; ``0``: exact). Present when it has percentiles."""

    edges: list[EdgeRow | str]
    services: list[MapServiceRow] | UnsetType = UNSET


class SearchTracesResult(Windowed, kw_only=True):
    """``search_traces``."""

    traces: list[TraceRow | str]


class GetTraceResult(Result, kw_only=True):
    """``get_trace``."""

    trace_id: str
    root: TraceSpanRef
    start: str
    duration_ms: Number
    span_count: int
    error_count: int
    dominant_span: TraceSpanRef | None
    services: list[TraceServiceRow]
    critical_path: list[TraceSpanRef]
    critical_path_span_count: int
    critical_path_omitted: int | UnsetType = UNSET
    error_spans: list[TraceSpanRef]
    notes: list[str]
    spans: list[SpanRow | str]
    spans_offset: int


class SearchLogsResult(Windowed, kw_only=True):
    """``search_logs``."""

    records: list[LogRow | str]


class ListMetricsResult(Windowed, kw_only=True):
    """``list_metrics``."""

    metrics: list[MetricRow | str]


class QueryMetricResult(Windowed, kw_only=True):
    """``query_metric``: ``window`` is aligned to the step."""

    metric: str
    aggregation: str
    step_s: float
    type: str | None
    unit: str | None
    series: list[SeriesRow | str]
    points_format: str


class ListDeploysResult(Windowed, kw_only=True):
    """``list_deploys``."""

    deploys: list[DeployRow | str]


class CompareDeploysResult(Result, kw_only=True):
    """``compare_deploys``: ``change`` holds ``<key>_delta`` (after minus before)."""

    percentile_relative_error: float | UnsetType = UNSET
    """Every ``p50_ms``/``p95_ms``/``p99_ms`` of the answer is within this relative error of
    the exact nearest-rank percentile of the spans' durations (``0.01``: within 1 %, read from
    the store's per-minute latency sketches; ``0``: exact). Present when it has percentiles."""

    service: str
    window: Window
    from_version: str
    to_version: str
    before: DeploySide
    after: DeploySide
    change: dict[str, float]
    operations: list[Object]


class ListProblemsResult(Windowed, kw_only=True):
    """``list_problems``."""

    problems: list[ProblemRow | str]
    detection_available: bool
    detected_by: str | UnsetType = UNSET


class GetProblemResult(Result, kw_only=True):
    """``get_problem`` (the ranking and samples on the first page only)."""

    problem_id: str
    status: str
    title: str
    start: str
    end: str
    detected: str
    origin: str | None
    origin_reason: str
    requested_id: str | UnsetType = UNSET
    merged_note: str | UnsetType = UNSET
    service: str | UnsetType = UNSET
    position: int | UnsetType = UNSET
    service_count: int
    services: list[str] | UnsetType = UNSET
    ranking: list[RankRow] | UnsetType = UNSET
    ranking_total: int | UnsetType = UNSET
    ranking_shown: int | UnsetType = UNSET
    candidate_samples: str | UnsetType = UNSET
    """Present when only the first ranked services carry their own samples: says so."""
    anomalies_offset: int | UnsetType = UNSET
    anomaly_count: int
    anomalies_shown: int
    anomalies: list[AnomalyRow]
    anomalies_order: str
    sample_trace_ids: list[str] | UnsetType = UNSET
    """The origin's sample traces (as ``ranking[0]``'s)."""
    sample_log_lines: list[str] | UnsetType = UNSET
    """The origin's sample log lines (as ``ranking[0]``'s)."""
    detected_by: str


class ListAnomaliesResult(Windowed, kw_only=True):
    """``list_anomalies``."""

    anomalies: list[AnomalyRow | str]
    detection_available: bool
    detected_by: str | UnsetType = UNSET


RESULT_TYPES: Final[tuple[type[Result], ...]] = (
    ListServicesResult,
    GetServiceResult,
    GetServiceMapResult,
    SearchTracesResult,
    GetTraceResult,
    SearchLogsResult,
    ListMetricsResult,
    QueryMetricResult,
    ListDeploysResult,
    CompareDeploysResult,
    ListProblemsResult,
    GetProblemResult,
    ListAnomaliesResult,
)
"""Every tool's result type, in catalog order."""


def _any_value(kind: type) -> JsonObject:
    """The ``schema_hook`` of msgspec: ``object`` is any JSON value (every type listed).

    Raises:
        TypeError: any other type msgspec cannot describe — a result Struct must use JSON
            types (raised at import, when the schemas are built, never while serving).
    """
    if kind is object:
        return {"type": ["object", "array", "string", "number", "boolean", "null"]}
    raise TypeError(f"no JSON schema for {kind!r} in a tool result")


def output_schema(result: type[Result]) -> JsonObject:
    """The ``outputSchema`` of a tool whose result is ``result`` (module docstring).

    Returns:
        ``{"type": "object", "anyOf": [result, Cut, ToolError], "$defs": …}`` with each Struct's
        first docstring line as its ``description``.
    """
    refs, components = msgspec.json.schema_components(
        [result, Cut, ToolError], schema_hook=_any_value, ref_template="#/$defs/{name}"
    )
    defs: JsonObject = {}
    for name, component in components.items():
        trimmed = dict(component)
        doc = trimmed.get("description")
        if isinstance(doc, str):
            first = doc.split("\n\n", 1)[0]
            trimmed["description"] = first.replace("\n", " ").replace("``", "`")
        trimmed.pop("title", None)
        defs[name] = trimmed
    return {"type": "object", "anyOf": list(refs), "$defs": defs}
