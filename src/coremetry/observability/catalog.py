"""Every tool, declared once, and the catalog derived from them, full and compact.

:data:`TOOLS` is the one list of :class:`~.spec.ToolSpec` (name, argument Struct, handler, full
and short description, role, annotations, result type). Everything else is derived from it:
:func:`~.registration.register_observability` registers each spec on the MCP server (so
``tools/list``, ``tools/call`` and the REST routes of :mod:`coremetry.rest`, which go through the
same registry, serve it), and :func:`catalog` renders it:

- **full**: each tool as ``tools/list`` serves it — ``name``, ``title``, ``description`` (the long
  text), ``inputSchema`` (generated from the argument Struct), ``outputSchema`` (generated from
  the result Struct, :mod:`.results`) and ``annotations``;
- **compact**: for chat-style catalogs that pay for every byte in the model's context — ``name``,
  the one-line ``short_description`` as ``description``, and the input schema without its
  ``description``/``title`` keywords (types, enums, bounds, defaults and ``required`` stay, so a
  call can still be formed), and no output schema.

Both are compact JSON arrays; ``coremetry tools --catalog compact|full`` prints one and its size,
``bench/catalog_size.py`` compares them (a test compares the full catalog with what a client is
served, byte for byte).

A full description says what the tool returns, its cost bounds, what not to invent, and which
tool to use next (at most :data:`~.spec.MAX_DESCRIPTION_BYTES`); the short one is one line.
Shared conventions are repeated only briefly, because a client may show one tool at a time.
"""

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from . import results
from .budget import JsonObject
from .spec import ToolSpec
from .tools import (
    CompareDeploysArgs,
    GetProblemArgs,
    GetServiceArgs,
    GetServiceMapArgs,
    GetTraceArgs,
    ListAnomaliesArgs,
    ListDeploysArgs,
    ListMetricsArgs,
    ListProblemsArgs,
    ListServicesArgs,
    ObservabilityTools,
    QueryMetricArgs,
    SearchLogsArgs,
    SearchTracesArgs,
)

__all__ = ["TOOLS", "CatalogKind", "catalog", "catalog_bytes"]

CatalogKind = Literal["compact", "full"]
"""Which catalog."""

_WINDOW = (
    'Window: range ("15m", "1h", "24h", "7d"; default {default}) or RFC 3339 start/end. '
    "Stored data may be older than the default window: an empty result carries note and "
    "data_extent; retry inside that extent instead of concluding nothing happened."
)
_OUTPUT = (
    "Output: JSON, times RFC 3339 UTC, durations *_ms; lists say truncated and return a cursor "
    "to pass back with the same arguments."
)

TOOLS: Final = (
    ToolSpec(
        name="list_services",
        task_support="optional",
        args=ListServicesArgs,
        output=results.ListServicesResult,
        handler=ObservabilityTools.list_services,
        description=(
            "List every service seen in a window in any signal: signals (traces, logs, metrics), "
            "log_count, metric_count; services with spans first, busiest first, with RED figures: "
            "request_count (entry spans: SERVER/CONSUMER or roots), error_count, error_rate, "
            "p50/p95/p99_ms, versions seen and last_seen. Start here to learn service names "
            "(use them exactly). Aggregate queries; cost grows with the window. "
            + _WINDOW.format(default=ListServicesArgs.default_range)
            + " "
            + _OUTPUT
            + " The highest latency is often a caller of the real culprit: use get_service for "
            "likely_origin. Next: get_service(service), get_service_map."
        ),
        short_description="Services of any signal; RED (requests, errors, p50/p95/p99) if spans.",
    ),
    ToolSpec(
        name="get_service",
        task_support="optional",
        args=GetServiceArgs,
        output=results.GetServiceResult,
        handler=ObservabilityTools.get_service,
        description=(
            "One service in depth: RED summary, top operations, upstream callers and downstream "
            "callees with per-edge calls/errors/p95, recent versions, and likely_origin: the "
            "service (this one or one it calls) whose own time on the critical path of slow traces "
            "grew most against typical traces, with evidence (latency of calls into it, its ERROR "
            "logs, its latency metrics' peak vs median) and example slow trace ids. A slow callee "
            "makes every caller slow; trust likely_origin over raw latency. Cost: a few aggregates "
            "plus reading up to 40 traces. "
            + _WINDOW.format(default=GetServiceArgs.default_range)
            + " Metrics but no spans in the window: its metric names, no red/likely_origin "
            "(note). Unknown service: "
            "not_found naming the services seen. Do not invent causes beyond the evidence. Next: "
            "get_trace on a slow trace id, search_logs, query_metric."
        ),
        short_description=(
            "One service: RED, operations, edges, versions, likely origin of slowness."
        ),
    ),
    ToolSpec(
        name="get_service_map",
        task_support="optional",
        args=GetServiceMapArgs,
        output=results.GetServiceMapResult,
        handler=ObservabilityTools.get_service_map,
        description=(
            "The service dependency graph in a window: edges caller -> callee with call_count, "
            "error_count, error_rate and callee-side p50/p95/p99_ms, plus each service's request "
            "count, error rate and p95. An edge exists only where a span's parent is in another "
            "service of the same trace. "
            + _WINDOW.format(default=GetServiceMapArgs.default_range)
            + " "
            + _OUTPUT
            + " Next: get_service on a service with a slow or failing edge."
        ),
        short_description="Service dependency graph with per-edge calls, errors, latency.",
    ),
    ToolSpec(
        name="search_traces",
        task_support="optional",
        args=SearchTracesArgs,
        output=results.SearchTracesResult,
        handler=ObservabilityTools.search_traces,
        description=(
            "Find traces, newest first, having one span that matches every given condition: "
            "service, operation (span name), min_duration_ms, status (error/ok/any) and attribute "
            "equality (span or resource attributes, compared as text). Returns summaries: "
            "trace_id, root service and name, start, duration_ms, span_count, error_count, "
            "services. For slow traces of a service, set min_duration_ms near its p95 from "
            "list_services. Cost: one indexed query per page (limit <= 100). "
            + _WINDOW.format(default=SearchTracesArgs.default_range)
            + " "
            + _OUTPUT
            + " Only report trace ids this tool returned. Next: get_trace(trace_id)."
        ),
        short_description="Find traces by service, operation, min duration, status, attributes.",
    ),
    ToolSpec(
        name="get_trace",
        args=GetTraceArgs,
        output=results.GetTraceResult,
        handler=ObservabilityTools.get_trace,
        description=(
            "One trace as a compact tree (depth-first, children by start): per span service, name, "
            "kind, start_offset_ms, duration_ms, self_time_ms (minus children and sibling calls), "
            "critical_path_ms, error status, its attributes (semantic-convention keys first; past "
            "64 counted in attributes_omitted) and events. Also: the critical path (the chain "
            "that decided the end-to-end latency; waiting_on names the callee a caller waited "
            "for), dominant_span, per-service self time (overlapping spans counted once, so never "
            "above the trace's duration), call_wait_ms (its calls' time outside the callee) and "
            "critical-path time, error spans, notes on clock "
            "skew (shifted spans) or missing parents. Large traces come in pages of limit spans: "
            "pass cursor for the rest; the summary covers the whole trace. Reads any time range. "
            "Unknown id: not_found; find ids with search_traces or search_logs. Next: "
            "search_logs(trace_id) for its log lines."
        ),
        short_description=(
            "Trace tree: self time, critical path, dominant span, error spans; paged."
        ),
    ),
    ToolSpec(
        name="search_logs",
        task_support="optional",
        args=SearchLogsArgs,
        output=results.SearchLogsResult,
        handler=ObservabilityTools.search_logs,
        description=(
            "Search log records, newest first (best match first with text): text (words must all "
            'occur, "quoted phrase", prefix*), service, min_severity (TRACE..FATAL), trace_id and '
            "attributes (equality, as text). Each record: time, service, severity, body (cut at "
            "1000 chars), trace_id, span_id, attributes. "
            "With trace_id and no window, searches all stored time. Cost: one indexed query per "
            "page (limit <= 200). "
            + _WINDOW.format(default=SearchLogsArgs.default_range)
            + " "
            + _OUTPUT
            + " Quote log lines as returned; do not paraphrase them as facts they do not state. "
            "Next: get_trace(trace_id) of a record."
        ),
        short_description="Search logs by text, service, min severity, trace id, attributes.",
    ),
    ToolSpec(
        name="list_metrics",
        args=ListMetricsArgs,
        output=results.ListMetricsResult,
        handler=ObservabilityTools.list_metrics,
        description=(
            "Discover metrics with points in a window: name, type (gauge/sum/histogram), unit "
            "(UCUM), description, label_keys, series_count, last_seen. Filter by name prefix "
            '(e.g. "http.", "k8s.pod."). One query. '
            + _WINDOW.format(default=ListMetricsArgs.default_range)
            + " "
            + _OUTPUT
            + " Use names exactly as listed. Next: query_metric(name)."
        ),
        short_description="Metric names with type, unit, label keys.",
    ),
    ToolSpec(
        name="query_metric",
        task_support="optional",
        args=QueryMetricArgs,
        output=results.QueryMetricResult,
        handler=ObservabilityTools.query_metric,
        description=(
            "One metric as bucketed series: aggregation per bucket (default by type: gauge avg, "
            "counter rate, histogram p95; also min, max, sum, count, last, increase for "
            "counters, p50..p99/count/sum/avg for histograms; a histogram percentile comes with "
            "the bucket [lower, upper] it was interpolated in), step (default about 120 buckets; "
            "a step giving more than 1000 is widened, and said; buckets start at multiples of the "
            "step), filters service and labels (equality), group_by label keys. Each "
            "series: labels, points [time, value], min, max, mean, last; the result states the "
            "step used; a series too long for one page shows 1 bucket in k (points_note says the "
            "step to pass). Cost: one aggregate query; limit series per page. "
            + _WINDOW.format(default=QueryMetricArgs.default_range)
            + " "
            + _OUTPUT
            + " Unknown name: not_found (use list_metrics). Read units from the result; do not "
            "assume them. Next: get_service for the service whose metric moved."
        ),
        short_description="Bucketed metric series with min/max/mean/last and the step used.",
    ),
    ToolSpec(
        name="list_deploys",
        args=ListDeploysArgs,
        output=results.ListDeploysResult,
        handler=ObservabilityTools.list_deploys,
        description=(
            "Versions per service as seen in spans (the service.version resource attribute), "
            "latest first: service, version, first_seen, last_seen, span_count. A new version "
            "appearing is how a deploy shows in telemetry. "
            + _WINDOW.format(default=ListDeploysArgs.default_range)
            + " No versions means spans carry no service.version, not that nothing was deployed. "
            "Next: compare_deploys(service)."
        ),
        short_description="Versions seen per service (deploys), latest first.",
    ),
    ToolSpec(
        name="compare_deploys",
        task_support="optional",
        args=CompareDeploysArgs,
        output=results.CompareDeploysResult,
        handler=ObservabilityTools.compare_deploys,
        description=(
            "RED of one service before versus after a version change, side by side: each side's "
            "window (the time its version was seen), request_count, error_rate, p50/p95/p99_ms, "
            "the deltas, and per-operation count/errors/p95 on both sides. Defaults: to_version = "
            "latest version in the window, from_version = the one before it. Fewer than two "
            "versions: not_found (see list_deploys). "
            + _WINDOW.format(default=CompareDeploysArgs.default_range)
            + " Traffic mix may differ between sides; say so before blaming a deploy."
        ),
        short_description="A service's RED before vs after a version change.",
    ),
    ToolSpec(
        name="list_problems",
        args=ListProblemsArgs,
        output=results.ListProblemsResult,
        handler=ObservabilityTools.list_problems,
        description=(
            "Problems found by the anomaly detector (coremetry detect), overlapping a window, "
            "newest first: problem_id, status (open/resolved), title, start/end, origin (the "
            "detector's most likely origin service) with its reason, services involved, anomaly "
            "count, sample trace ids. "
            + _WINDOW.format(default=ListProblemsArgs.default_range)
            + " The detector ranks "
            "origins from the service graph, a heuristic: confirm with get_service (likely_origin "
            "reads the traces' critical paths). If no detection has run, the list is empty and "
            "note says so: that is not evidence that all is well; never invent problems. Next: "
            "get_problem(problem_id)."
        ),
        short_description="Problems the anomaly detector found, with their likely origin.",
    ),
    ToolSpec(
        name="get_problem",
        args=GetProblemArgs,
        output=results.GetProblemResult,
        handler=ObservabilityTools.get_problem,
        description=(
            "One detected problem by id (from list_problems): the origin ranking with a reason and "
            "evidence per service (its anomalous callers and callees; the first's reason says why "
            "it beats the second; the first three with sample trace ids and log lines of their "
            "own), its anomalies strongest first (series, signal, unit, baseline vs observed, "
            "score, start/end). A large problem is cut to fit: ranking_total/ranking_shown and "
            "anomaly_count/anomalies_shown say what is shown, cursor continues the anomalies. "
            "service narrows to one service of the problem: its rank, all its evidence and "
            "anomalies. An id a later detection run merged into another problem answers that "
            "problem (requested_id says so). Unknown id or no detection run: not_found. Next: "
            "get_trace on a sample trace id, get_service on the origin."
        ),
        short_description=(
            "One detected problem: origin ranking, anomalies, sample traces and logs."
        ),
    ),
    ToolSpec(
        name="list_anomalies",
        task_support="optional",
        args=ListAnomaliesArgs,
        output=results.ListAnomaliesResult,
        handler=ObservabilityTools.list_anomalies,
        description=(
            "Anomalous episodes of series (RED per service and metrics) the detector found, "
            "newest first, with their problem_id: service, series, labels, signal, unit, "
            "direction, baseline vs observed, score, start/end. Filter by service. "
            + _WINDOW.format(default=ListAnomaliesArgs.default_range)
            + " Empty with a note when no detection has run; do not read that as all clear. Next: "
            "query_metric on the series, get_problem."
        ),
        short_description="Anomalous series episodes the detector found, with their problem.",
    ),
)
"""Every tool, in catalog (and ``tools/list``) order."""

_ENCODER: Final = msgspec.json.Encoder()


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _strip(v) for k, v in value.items() if k not in ("description", "title")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def catalog(
    kind: CatalogKind, specs: Sequence[ToolSpec[msgspec.Struct]] = TOOLS
) -> list[JsonObject]:
    """The catalog entries of ``specs`` (every tool by default; see the module docstring)."""
    entries: list[JsonObject] = []
    for spec in specs:
        if kind == "full":
            entries.append(
                {
                    "name": spec.name,
                    "title": spec.title,
                    "description": spec.description,
                    "inputSchema": spec.input_schema(),
                    "outputSchema": spec.output_schema(),
                    "annotations": msgspec.to_builtins(spec.annotations),
                }
            )
        else:
            entries.append(
                {
                    "name": spec.name,
                    "description": spec.short_description,
                    "inputSchema": _strip(spec.input_schema()),
                }
            )
    return entries


def catalog_bytes(kind: CatalogKind, specs: Sequence[ToolSpec[msgspec.Struct]] = TOOLS) -> bytes:
    """The catalog as compact JSON (its length is the catalog's size in bytes)."""
    return _ENCODER.encode(catalog(kind, specs))
