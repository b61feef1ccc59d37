"""``register_observability``: every Coremetry tool, resource, template and prompt on a server.

Each tool is registered from its :class:`~.spec.ToolSpec` (:data:`~.catalog.TOOLS`). Its
handler returns a :class:`~.budget.Shaped` result; the registration passes it through
:func:`~.budget.fit` with the configured budget before the dispatcher sees it, so no tool can
exceed the output budget (resources and prompts fit their text the same way in
:mod:`.entries`). The store's errors are mapped onto the tool-error classes here, because the
store package never imports the protocol core (``coremetry.store.errors``); the mapping is
:data:`STORE_ERROR_CLASSES`, which the application passes to the ``Server`` it builds:

==========================  =======================  ==========================================
store exception             tool error               detail
==========================  =======================  ==========================================
``QueryRejected``           ``bad_args``             its message (names the field)
``StoreUnavailable``        ``backend_unavailable``  generic sentence
``StoreClosed``             ``backend_unavailable``  generic sentence
``StoreTimeout``            ``timeout``              generic sentence (the backend's time limit)
``StoreSchemaError``        ``internal``             its message (the missing table or column)
``ProblemFileError``        ``backend_unavailable``  generic sentence (the problems file)
==========================  =======================  ==========================================

Every entry is read-only (``readOnlyHint: true``) with the viewer floor (``min_role=""``).
"""

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import msgspec

from coremetry.detection.problem_store import ProblemFileError
from coremetry.mcp import (
    ErrorClass,
    ErrorClasses,
    Prompt,
    PromptArgument,
    Resource,
    ResourceTemplate,
    Server,
    ToolErrorKind,
)
from coremetry.store import (
    QueryRejected,
    StoreClosed,
    StoreSchemaError,
    StoreTimeout,
    StoreUnavailable,
    TelemetryStore,
)

from .admission import (
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_CALLS_PER_IDENTITY,
    AdmittedStore,
    StoreAdmission,
)
from .budget import DEFAULT_BUDGET_BYTES, MIN_BUDGET_BYTES
from .catalog import TOOLS
from .entries import ObservabilityEntries
from .problems import ProblemSource
from .spec import ToolSpec
from .tools import ObservabilityTools

__all__ = ["STORE_ERROR_CLASSES", "TOOL_NAMES", "register_observability"]

TOOL_NAMES: Final = tuple(spec.name for spec in TOOLS)
"""Every tool this package registers, in catalog order."""

_STORE_HINT: Final = (
    "The telemetry store did not answer. Retry once; if it fails again, say which data could "
    "not be read."
)


STORE_ERROR_CLASSES: Final[ErrorClasses] = {
    QueryRejected: ErrorClass(ToolErrorKind.BAD_ARGS, keep_message=True),
    ProblemFileError: ErrorClass(ToolErrorKind.BACKEND_UNAVAILABLE),
    StoreUnavailable: ErrorClass(ToolErrorKind.BACKEND_UNAVAILABLE, hint=_STORE_HINT),
    StoreClosed: ErrorClass(ToolErrorKind.BACKEND_UNAVAILABLE, hint=_STORE_HINT),
    StoreTimeout: ErrorClass(ToolErrorKind.TIMEOUT),
    StoreSchemaError: ErrorClass(ToolErrorKind.INTERNAL, keep_message=True),
}
"""The store's exceptions as tool-error classes (table above); the application hands it to the
dispatcher when it builds one (``Server(..., error_classes=STORE_ERROR_CLASSES)``)."""


def register_observability(
    server: Server,
    store: TelemetryStore,
    *,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    clock: Callable[[], int] = time.time_ns,
    problems_path: Path | None = None,
    specs: Sequence[ToolSpec[msgspec.Struct]] = TOOLS,
    max_calls_per_identity: int = DEFAULT_MAX_CALLS_PER_IDENTITY,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> ObservabilityTools:
    """Register every Coremetry tool, resource, template and prompt on ``server``.

    Args:
        server: the dispatcher.
        store: where telemetry is read from (the caller owns it and closes it).
        budget_bytes: the output budget of every result, in bytes of compact JSON.
        clock: the current time in unix nanoseconds (tests pin it).
        problems_path: the detector's problems file (``<data_dir>/problems.json``); ``None``
            (or a file not written yet) makes the problem tools say no detection has run.
        specs: the tools to register (:data:`~.catalog.TOOLS`; tests add their own).
        max_calls_per_identity: store calls one identity's tools, resources and prompts may
            run at once (``store.max_calls_per_identity``; :mod:`.admission`).
        max_calls: store calls all identities together may run at once (``store.max_calls``).

    Returns:
        The tool handlers (for tests and benchmarks that call them directly); their ``store``
        is the :class:`~.admission.AdmittedStore` every entry reads through.

    Raises:
        ValueError: ``budget_bytes`` is below :data:`~.budget.MIN_BUDGET_BYTES`, or an
            admission limit is out of range (:class:`~.admission.StoreAdmission`).
    """
    if budget_bytes < MIN_BUDGET_BYTES:
        raise ValueError(f"budget_bytes must be at least {MIN_BUDGET_BYTES}")
    # Every store read of every tool, resource and prompt passes this one admission point.
    admitted = AdmittedStore(store, StoreAdmission(max_calls_per_identity, max_calls))
    tools = ObservabilityTools(admitted, clock=clock, problems=ProblemSource(problems_path))
    entries = ObservabilityEntries(tools, budget_bytes)
    for spec in specs:
        server.register_tool(spec.tool(tools, budget_bytes))
    _register_resources(server, entries)
    _register_prompts(server, entries)
    return tools


def _register_resources(server: Server, entries: ObservabilityEntries) -> None:
    window = "the 24 h ending at the newest stored record (never later than now)"
    server.register_resource(
        Resource(
            "coremetry://services",
            "services",
            entries.services,
            title="Services",
            description=f"Every service with RED (requests, errors, p50/p95/p99 ms) over {window}.",
            min_role="",
        )
    )
    server.register_resource(
        Resource(
            "coremetry://problems",
            "problems",
            entries.problems,
            title="Problems",
            description=f"Problems the anomaly detector found over {window} (empty, with a "
            "note, when no detection has run).",
            min_role="",
        )
    )
    templates = (
        (
            "coremetry://service/{name}",
            "service",
            entries.service,
            "One service: RED, operations, edges, versions and the likely origin of slowness, "
            f"over {window}.",
            entries.complete_service_template,
        ),
        (
            "coremetry://trace/{trace_id}",
            "trace",
            entries.trace,
            "One trace: tree with self times, critical path, dominant span, error spans (first "
            "page; get_trace pages the rest).",
            entries.complete_trace_template,
        ),
        (
            "coremetry://logs/{service}",
            "logs",
            entries.logs,
            f"A service's 50 newest log records over {window}.",
            entries.complete_service_template,
        ),
        (
            "coremetry://metric/{name}",
            "metric",
            entries.metric,
            f"One metric as bucketed series (up to 10) with min/max/mean/last, over {window}.",
            entries.complete_metric_template,
        ),
        (
            "coremetry://problem/{id}",
            "problem",
            entries.problem,
            "One detected problem: origin ranking, anomalies, sample traces and log lines.",
            entries.complete_problem_template,
        ),
    )
    for uri, name, handler, description, completer in templates:
        server.register_resource_template(
            ResourceTemplate(
                uri,
                name,
                handler,
                title=name.capitalize(),
                description=description,
                min_role="",
                completer=completer,
            )
        )


def _register_prompts(server: Server, entries: ObservabilityEntries) -> None:
    service = PromptArgument(name="service", description="service.name, exactly", required=True)
    range_arg = PromptArgument(
        name="range", description='Window length ending at the newest data, e.g. "1h" (24h)'
    )
    prompts = (
        Prompt(
            "explain_trace",
            "Explain one trace: what it did, its critical path and dominant span, its errors. "
            "Embeds get_trace.",
            entries.explain_trace,
            min_role="",
            completer=entries.complete,
            arguments=[
                PromptArgument(name="trace_id", description="32 hex characters", required=True)
            ],
        ),
        Prompt(
            "suggest_runbook",
            "Suggest a runbook (confirm, mitigate, verify) for a problem or a service. Give "
            "problem_id or service. Embeds get_service and the service's error logs.",
            entries.suggest_runbook,
            min_role="",
            completer=entries.complete,
            arguments=[
                PromptArgument(name="problem_id", description="from list_problems"),
                PromptArgument(name="service", description="service.name, exactly"),
            ],
        ),
        Prompt(
            "compare_deploys",
            "Judge a version change of a service: RED and operations before versus after. "
            "Embeds compare_deploys.",
            entries.compare_deploys,
            min_role="",
            completer=entries.complete,
            arguments=[
                service,
                PromptArgument(name="from_version", description="default: the previous version"),
                PromptArgument(name="to_version", description="default: the latest version"),
            ],
        ),
        Prompt(
            "investigate_service",
            "Investigate one service: health, likely origin (itself or a callee), slow traces "
            "and WARN/ERROR logs. Embeds get_service, search_traces, search_logs.",
            entries.investigate_service,
            min_role="",
            completer=entries.complete,
            arguments=[service, range_arg],
        ),
        Prompt(
            "triage_brief",
            "One-shot triage across services: the likely origin first, then affected services, "
            "slow traces, error logs and metric shifts.",
            entries.triage_brief,
            min_role="",
            completer=entries.complete,
            arguments=[
                range_arg,
                PromptArgument(
                    name="start",
                    description='Window start, RFC 3339 with zone, e.g. "2023-01-30T13:00:00Z" '
                    "(with start or end the window is as given, not anchored)",
                ),
                PromptArgument(
                    name="end", description="Window end (exclusive), RFC 3339 with zone"
                ),
            ],
        ),
    )
    for prompt in prompts:
        server.register_prompt(prompt)
