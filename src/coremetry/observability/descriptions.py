"""What each tool tells a model: a full ``description`` and a compact ``short_description``.

The full text (served by ``tools/list``, at most :data:`MAX_DESCRIPTION_BYTES`) says what the
tool returns, its cost bounds, what not to invent, and which tool to use next. The short text is
one line for chat-style catalogs (``coremetry tools --catalog compact``). Shared conventions are
repeated only briefly, because a client may show one tool at a time.
"""

from collections.abc import Mapping
from typing import Final

from .tools import (
    CompareDeploysArgs,
    GetServiceArgs,
    GetServiceMapArgs,
    ListAnomaliesArgs,
    ListDeploysArgs,
    ListMetricsArgs,
    ListProblemsArgs,
    ListServicesArgs,
    QueryMetricArgs,
    SearchLogsArgs,
    SearchTracesArgs,
)

__all__ = ["DESCRIPTIONS", "MAX_DESCRIPTION_BYTES", "SHORT_DESCRIPTIONS"]

MAX_DESCRIPTION_BYTES: Final = 1500
"""Upper bound of any tool's full description, in UTF-8 bytes."""

_WINDOW = (
    'Window: range ("15m", "1h", "24h", "7d"; default {default}) or RFC 3339 start/end. '
    "Stored data may be older than the default window: an empty result carries note and "
    "data_extent; retry inside that extent instead of concluding nothing happened."
)
_OUTPUT = (
    "Output: JSON, times RFC 3339 UTC, durations *_ms; lists say truncated and return a cursor "
    "to pass back with the same arguments."
)

DESCRIPTIONS: Final[Mapping[str, str]] = {
    "list_services": (
        "List every service that emitted spans in a window, busiest first, with RED figures: "
        "request_count (entry spans: SERVER/CONSUMER or roots), error_count, error_rate, "
        "p50/p95/p99_ms, versions seen and last_seen. Start here to learn service names "
        "(use them exactly). One aggregate query; cost grows with the window. "
        + _WINDOW.format(default=ListServicesArgs.default_range)
        + " "
        + _OUTPUT
        + " The highest latency is often a caller of the real culprit: use get_service for "
        "likely_origin. Next: get_service(service), get_service_map."
    ),
    "get_service": (
        "One service in depth: RED summary, top operations, upstream callers and downstream "
        "callees with per-edge calls/errors/p95, recent versions, and likely_origin: the "
        "service (this one or one it calls) whose own time on the critical path of slow traces "
        "grew most against typical traces, with evidence (latency of calls into it, its ERROR "
        "logs, its latency metrics' peak vs median) and example slow trace ids. A slow callee "
        "makes every caller slow; trust likely_origin over raw latency. Cost: a few aggregates "
        "plus reading up to 40 traces. "
        + _WINDOW.format(default=GetServiceArgs.default_range)
        + " Unknown service: "
        "not_found naming the services seen. Do not invent causes beyond the evidence. Next: "
        "get_trace on a slow trace id, search_logs, query_metric."
    ),
    "get_service_map": (
        "The service dependency graph in a window: edges caller -> callee with call_count, "
        "error_count, error_rate and callee-side p50/p95/p99_ms, plus each service's request "
        "count, error rate and p95. An edge exists only where a span's parent is in another "
        "service of the same trace. "
        + _WINDOW.format(default=GetServiceMapArgs.default_range)
        + " "
        + _OUTPUT
        + " Next: get_service on a service with a slow or failing edge."
    ),
    "search_traces": (
        "Find traces, newest first, having one span that matches every given condition: "
        "service, operation (span name), min_duration_ms, status (error/ok/any) and attribute "
        "equality (span or resource attributes, compared as text). Returns summaries: trace_id, "
        "root service and name, start, duration_ms, span_count, error_count, services. For slow "
        "traces of a service, set min_duration_ms near its p95 from list_services. Cost: one "
        "indexed query per page (limit <= 100). "
        + _WINDOW.format(default=SearchTracesArgs.default_range)
        + " "
        + _OUTPUT
        + " Only report trace ids this tool returned. Next: get_trace(trace_id)."
    ),
    "get_trace": (
        "One trace as a compact tree (depth-first, children by start): per span service, name, "
        "kind, start_offset_ms, duration_ms, self_time_ms (minus children and sibling calls), "
        "critical_path_ms, error status and key attributes. Also: the critical path (the chain "
        "that decided the end-to-end latency; waiting_on names the callee a caller waited for), "
        "dominant_span, per-service self time (overlapping spans counted once, so never above the "
        "trace's duration), call_wait_ms (its calls' time outside the callee) and critical-path "
        "time, error spans, notes on clock "
        "skew (shifted spans) or missing parents. Large traces come in pages of limit spans: "
        "pass cursor for the rest; the summary covers the whole trace. Reads any time range. "
        "Unknown id: not_found; find ids with search_traces or search_logs. Next: "
        "search_logs(trace_id) for its log lines."
    ),
    "search_logs": (
        "Search log records, newest first (best match first with text): text (words must all "
        'occur, "quoted phrase", prefix*), service, min_severity (TRACE..FATAL) and trace_id. '
        "Each record: time, service, severity, body (cut at 1000 chars), trace_id, span_id. "
        "With trace_id and no window, searches all stored time. Cost: one indexed query per "
        "page (limit <= 200). "
        + _WINDOW.format(default=SearchLogsArgs.default_range)
        + " "
        + _OUTPUT
        + " Quote log lines as returned; do not paraphrase them as facts they do not state. "
        "Next: get_trace(trace_id) of a record."
    ),
    "list_metrics": (
        "Discover metrics with points in a window: name, type (gauge/sum/histogram), unit "
        "(UCUM), description, label_keys, series_count, last_seen. Filter by name prefix "
        '(e.g. "http.", "k8s.pod."). One query. '
        + _WINDOW.format(default=ListMetricsArgs.default_range)
        + " "
        + _OUTPUT
        + " Use names exactly as listed. Next: query_metric(name)."
    ),
    "query_metric": (
        "One metric as bucketed series: aggregation per bucket (avg, min, max, sum, count, "
        "last, rate for counters, p50..p99 for histograms), step (default about 120 buckets; "
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
    "list_deploys": (
        "Versions per service as seen in spans (the service.version resource attribute), "
        "latest first: service, version, first_seen, last_seen, span_count. A new version "
        "appearing is how a deploy shows in telemetry. "
        + _WINDOW.format(default=ListDeploysArgs.default_range)
        + " No versions means spans carry no service.version, not that nothing was deployed. "
        "Next: compare_deploys(service)."
    ),
    "compare_deploys": (
        "RED of one service before versus after a version change, side by side: each side's "
        "window (the time its version was seen), request_count, error_rate, p50/p95/p99_ms, "
        "the deltas, and per-operation count/errors/p95 on both sides. Defaults: to_version = "
        "latest version in the window, from_version = the one before it. Fewer than two "
        "versions: not_found (see list_deploys). "
        + _WINDOW.format(default=CompareDeploysArgs.default_range)
        + " Traffic mix may differ between sides; say so before blaming a deploy."
    ),
    "list_problems": (
        "Problems found by the anomaly detector (coremetry detect), overlapping a window, "
        "newest first: problem_id, status (open/resolved), title, start/end, origin (the "
        "detector's most likely origin service) with its reason, services involved, anomaly "
        "count, sample trace ids. "
        + _WINDOW.format(default=ListProblemsArgs.default_range)
        + " The detector ranks "
        "origins from the service graph, a heuristic: confirm with get_service (likely_origin "
        "reads the traces' critical paths). If no detection has run, the list is empty and note "
        "says so: that is not evidence that all is well; never invent problems. Next: "
        "get_problem(problem_id)."
    ),
    "get_problem": (
        "One detected problem by id (from list_problems): the origin ranking with a reason and "
        "evidence per service (its anomalous callers and callees), its anomalies strongest "
        "first (series, signal, unit, baseline vs observed, score, start/end), sample trace ids "
        "and log lines. A large problem is cut to fit: ranking_total/ranking_shown and "
        "anomaly_count/anomalies_shown say what is shown, cursor continues the anomalies. "
        "service narrows to one service of the problem: its rank, all its evidence and "
        "anomalies. An id a later detection run merged into another problem answers that "
        "problem (requested_id says so). Unknown id or no detection run: not_found. Next: "
        "get_trace on a sample trace id, get_service on the origin."
    ),
    "list_anomalies": (
        "Anomalous episodes of series (RED per service and metrics) the detector found, "
        "newest first, with their problem_id: service, series, labels, signal, unit, direction, "
        "baseline vs observed, score, start/end. Filter by service. "
        + _WINDOW.format(default=ListAnomaliesArgs.default_range)
        + " Empty with a note when no detection has run; do not read that as all clear. Next: "
        "query_metric on the series, get_problem."
    ),
}
"""Full descriptions by tool name."""

SHORT_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "list_services": "Services with RED (requests, errors, p50/p95/p99 ms) in a window.",
    "get_service": "One service: RED, operations, edges, versions, likely origin of slowness.",
    "get_service_map": "Service dependency graph with per-edge calls, errors, latency.",
    "search_traces": "Find traces by service, operation, min duration, status, attributes.",
    "get_trace": "Trace tree: self time, critical path, dominant span, error spans; paged.",
    "search_logs": "Search logs by text, service, min severity, trace id.",
    "list_metrics": "Metric names with type, unit, label keys.",
    "query_metric": "Bucketed metric series with min/max/mean/last and the step used.",
    "list_deploys": "Versions seen per service (deploys), latest first.",
    "compare_deploys": "A service's RED before vs after a version change.",
    "list_problems": "Problems the anomaly detector found, with their likely origin.",
    "get_problem": "One detected problem: origin ranking, anomalies, sample traces and logs.",
    "list_anomalies": "Anomalous series episodes the detector found, with their problem.",
}
"""Compact one-line descriptions by tool name."""
