"""Resources, resource templates, prompts and completion over the tools' handlers.

Resources (``application/json``, viewer floor, the tools' output budget), windows anchored on
the newest stored data (:mod:`.anchoring`):

================================  =========================================================
URI                               contents
================================  =========================================================
``coremetry://services``          ``list_services`` over the last 24 h of stored data
``coremetry://service/{name}``    ``get_service`` of that service, same window
``coremetry://trace/{trace_id}``  ``get_trace`` (first page of the tree)
``coremetry://logs/{service}``    the service's 50 newest log records, same window
``coremetry://metric/{name}``     ``query_metric`` of that metric (10 series), same window
``coremetry://problems``          ``list_problems``
``coremetry://problem/{id}``      ``get_problem`` of that problem
================================  =========================================================

Prompts fetch the data and embed it (JSON in a fenced block after a short instruction), so
the model can reason without a follow-up call; the whole ``prompts/get`` result — the message
text as the JSON string it travels as (quotes escaped) plus the envelope and the prompt's
description (:data:`PROMPT_ENVELOPE_BYTES`) — stays within the output budget:
``explain_trace(trace_id)``, ``suggest_runbook(problem_id | service)``,
``compare_deploys(service, from_version?, to_version?)``, ``investigate_service(service,
range?)``, ``triage_brief(range? | start?, end?)``. A missing required argument is ``-32602``
naming it (the dispatcher checks declared ones; ``suggest_runbook`` checks its either-or
itself), and so is an argument the prompt does not take (:func:`check_prompt_arguments`).

Completion suggests service names, trace ids, metric names and versions (prefix match first,
then substring), from the last 24 h of stored data.
"""

import copy
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec

from coremetry.detection import Problem
from coremetry.mcp import CallContext, NotFound, ProtocolError, codes
from coremetry.store import (
    MAX_LIMIT,
    LogQuery,
    TelemetryStore,
    TimeRange,
    TraceQuery,
)

from ._reading import stored_extent
from .anchoring import ANCHORED_DEFAULT, anchored_args
from .budget import (
    MIN_BUDGET_BYTES,
    JsonObject,
    Shaped,
    Trimmable,
    encoded_size,
    fit,
    shorten,
)
from .origin import latency_metric_names, latency_shifts
from .problems import NO_DETECTION_NOTE, in_window
from .ranges import RangeArgs, resolve_range, rfc3339
from .tools import (
    SEVERITIES,
    CompareDeploysArgs,
    GetProblemArgs,
    GetServiceArgs,
    GetTraceArgs,
    ListDeploysArgs,
    ListProblemsArgs,
    ListServicesArgs,
    ObservabilityTools,
    QueryMetricArgs,
    SearchLogsArgs,
    SearchTracesArgs,
    log_row,
    service_row,
)
from .window_origin import problem_origin, reason_text, window_origin

__all__ = ["PROMPT_ENVELOPE_BYTES", "ObservabilityEntries"]

_JSON: Final = msgspec.json.Encoder()
_MAX_TRACE_IDS: Final = 1000
"""Trace ids a completion counts at most (the latest of the window); 100 are shown."""
PROMPT_ENVELOPE_BYTES: Final = 512
"""Bytes of a ``prompts/get`` result kept for everything but the message text: the JSON
envelope (``messages``, ``role``, ``content``, ``type``) and the prompt's description (each of
ours is under 300 bytes)."""


def _match(values: Sequence[str], partial: str) -> list[str]:
    """Prefix matches first, then substring matches (case-insensitive), each sorted.

    Every match is returned: ``completion/complete`` counts them (``total``, ``hasMore``) and
    then shows the first 100.
    """
    needle = partial.lower()
    prefix = sorted(v for v in values if v.lower().startswith(needle))
    inner = sorted(v for v in values if needle in v.lower() and not v.lower().startswith(needle))
    return prefix + inner


class ObservabilityEntries:
    """Resource, template and prompt handlers plus completers, over :class:`ObservabilityTools`.

    Args:
        tools: the tool handlers (and their store).
        budget_bytes: the output budget of every resource and prompt message, in bytes.
    """

    def __init__(self, tools: ObservabilityTools, budget_bytes: int) -> None:
        self.tools = tools
        self.store: TelemetryStore = tools.store
        self.budget_bytes = budget_bytes

    async def _window(self, range_text: str | None = None) -> RangeArgs:
        return await anchored_args(self.store, range_text, self.tools.clock())

    def _text(self, shaped: Shaped) -> str:
        return _JSON.encode(fit(shaped, self.budget_bytes)).decode()

    # ---- resources ------------------------------------------------------------------------

    async def services(self, uri: str, ctx: CallContext) -> str:
        """``coremetry://services``."""
        window = await self._window()
        args = ListServicesArgs(start=window.start, end=window.end)
        return self._text(await self.tools.list_services(args, ctx))

    async def service(self, uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
        """``coremetry://service/{name}``."""
        window = await self._window()
        args = GetServiceArgs(service=variables["name"], start=window.start, end=window.end)
        return self._text(await self.tools.get_service(args, ctx))

    async def trace(self, uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
        """``coremetry://trace/{trace_id}``."""
        args = GetTraceArgs(trace_id=variables["trace_id"])
        return self._text(await self.tools.get_trace(args, ctx))

    async def logs(self, uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
        """``coremetry://logs/{service}``."""
        window = await self._window()
        args = SearchLogsArgs(service=variables["service"], start=window.start, end=window.end)
        return self._text(await self.tools.search_logs(args, ctx))

    async def metric(self, uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
        """``coremetry://metric/{name}``."""
        window = await self._window()
        args = QueryMetricArgs(name=variables["name"], start=window.start, end=window.end)
        return self._text(await self.tools.query_metric(args, ctx))

    async def problems(self, uri: str, ctx: CallContext) -> str:
        """``coremetry://problems``."""
        window = await self._window()
        args = ListProblemsArgs(start=window.start, end=window.end)
        return self._text(await self.tools.list_problems(args, ctx))

    async def problem(self, uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
        """``coremetry://problem/{id}``."""
        args = GetProblemArgs(problem_id=variables["id"])
        return self._text(await self.tools.get_problem(args, ctx))

    # ---- completion -------------------------------------------------------------------------

    async def _service_names(self) -> list[str]:
        window = resolve_range(await self._window(), self.tools.clock())
        page = await self.store.services(window.time_range, limit=MAX_LIMIT)
        return [s.service_name for s in page.items]

    async def _trace_ids(self, service: str | None) -> list[str]:
        window = resolve_range(await self._window(), self.tools.clock())
        page = await self.store.search_traces(
            TraceQuery(time_range=window.time_range, service_name=service or None),
            limit=_MAX_TRACE_IDS,
        )
        return [t.trace_id for t in page.items]

    async def _metric_names(self, partial: str) -> list[str]:
        extent = await stored_extent(self.store)
        if extent is None:
            return []
        page = await self.store.metric_names(extent, limit=1000)
        return [d.name for d in page.items]

    async def _versions(self, service: str | None) -> list[str]:
        extent = await stored_extent(self.store)
        if extent is None or not service:
            return []
        records = await self.store.deploys(extent, limit=1000, service_name=service)
        return sorted({r.version for r in records})

    async def complete(
        self, argument: str, partial: str, context: Mapping[str, str]
    ) -> Sequence[str]:
        """Suggest values for an argument or template variable (see the module docstring)."""
        if argument in ("service", "name_service"):
            return _match(await self._service_names(), partial)
        if argument == "trace_id":
            return _match(await self._trace_ids(context.get("service")), partial)
        if argument in ("from_version", "to_version"):
            return _match(await self._versions(context.get("service")), partial)
        if argument == "problem_id":
            return await self.complete_problem_template(argument, partial, context)
        return []

    async def complete_service_template(
        self, argument: str, partial: str, context: Mapping[str, str]
    ) -> Sequence[str]:
        """Completer of the templates whose variable is a service name."""
        return _match(await self._service_names(), partial)

    async def complete_metric_template(
        self, argument: str, partial: str, context: Mapping[str, str]
    ) -> Sequence[str]:
        """Completer of ``coremetry://metric/{name}``."""
        return _match(await self._metric_names(partial), partial)

    async def complete_trace_template(
        self, argument: str, partial: str, context: Mapping[str, str]
    ) -> Sequence[str]:
        """Completer of ``coremetry://trace/{trace_id}``."""
        return _match(await self._trace_ids(None), partial)

    async def complete_problem_template(
        self, argument: str, partial: str, context: Mapping[str, str]
    ) -> Sequence[str]:
        """Completer of ``coremetry://problem/{id}``: stored problem ids."""
        stored = await self.tools.problems.load()
        return _match([p.problem_id for p in stored or []], partial)

    # ---- prompts ----------------------------------------------------------------------------

    def _message(self, instruction: str, shaped: Shaped) -> str:
        """The instruction and the data; the ``prompts/get`` result fits the output budget.

        The text is measured as the JSON string it is sent as (the embedded JSON's quotes are
        escaped, about a fifth more bytes), and the data refitted until it fits.
        """
        limit = self.budget_bytes - PROMPT_ENVELOPE_BYTES
        frame = f"{instruction}\n\nData (JSON):\n```json\n\n```"
        room = limit - encoded_size(frame)
        while True:
            # fit() cuts the body in place: each try starts from the whole data, so the
            # counts it records (``omitted``) are of the data as built, not of an earlier try.
            trial = Shaped(copy.deepcopy(shaped.body), shaped.trimmable)
            data = _JSON.encode(fit(trial, max(MIN_BUDGET_BYTES, room))).decode()
            text = f"{instruction}\n\nData (JSON):\n```json\n{data}\n```"
            size = encoded_size(text)
            if size <= limit or room <= MIN_BUDGET_BYTES:
                return text
            room = min(room - (size - limit), room * limit // size)

    async def explain_trace(self, arguments: Mapping[str, str], ctx: CallContext) -> str:
        """``explain_trace(trace_id)``."""
        check_prompt_arguments("explain_trace", arguments, ("trace_id",))
        trace_id = arguments["trace_id"]
        shaped = await self.tools.get_trace(GetTraceArgs(trace_id=trace_id, limit=60), ctx)
        return self._message(
            f"Explain trace {trace_id}: what the request did, where the time went (the critical "
            "path, the dominant span, and which service a caller was waiting on), and any "
            "errors. Use only the data below; say when something is not in it. For a large "
            "trace, get_trace with the cursor shows the remaining spans.",
            shaped,
        )

    async def suggest_runbook(self, arguments: Mapping[str, str], ctx: CallContext) -> str:
        """``suggest_runbook(problem_id | service)``."""
        check_prompt_arguments("suggest_runbook", arguments, ("problem_id", "service"))
        problem_id = arguments.get("problem_id", "").strip()
        service = arguments.get("service", "").strip()
        if not problem_id and not service:
            raise ProtocolError(
                codes.INVALID_PARAMS,
                "Missing required argument(s) for prompt 'suggest_runbook': problem_id or "
                "service (give one)",
                {"missing": ["problem_id", "service"]},
            )
        problem: JsonObject | None = None
        if problem_id:
            detail = await self.tools.get_problem(GetProblemArgs(problem_id=problem_id), ctx)
            problem = fit(detail, self.budget_bytes // 3)
            origin = problem.get("origin")
            service = service or (origin if isinstance(origin, str) else "")
        subject = f"problem {problem_id} ({service})" if problem_id else service
        window = await self._window()
        body: JsonObject = {}
        if problem is not None:
            body["problem"] = problem
        if service:
            overview = await self.tools.get_service(
                GetServiceArgs(service=service, start=window.start, end=window.end), ctx
            )
            logs = await self.tools.search_logs(
                SearchLogsArgs(
                    service=service,
                    min_severity="ERROR",
                    limit=10,
                    start=window.start,
                    end=window.end,
                ),
                ctx,
            )
            room = self.budget_bytes // 3 if problem is not None else self.budget_bytes * 2 // 3
            body["service"] = fit(overview, room)
            body["error_logs"] = logs.body.get("records", [])
        return self._message(
            f"Suggest a runbook for {subject}: how to confirm the issue, mitigate it and verify "
            "recovery, as numbered steps with the tool call or command for each. Ground every "
            "step in the data below (the problem's ranking and anomalies, likely_origin, edges, "
            "error logs); mark assumptions.",
            Shaped(body, [Trimmable(("error_logs",))]),
        )

    async def compare_deploys(self, arguments: Mapping[str, str], ctx: CallContext) -> str:
        """``compare_deploys(service, from_version?, to_version?)``."""
        check_prompt_arguments(
            "compare_deploys", arguments, ("service", "from_version", "to_version")
        )
        window = await self._window("30d")
        args = CompareDeploysArgs(
            service=arguments["service"],
            from_version=arguments.get("from_version") or None,
            to_version=arguments.get("to_version") or None,
            start=window.start,
            end=window.end,
        )
        try:
            shaped = await self.tools.compare_deploys(args, ctx)
        except NotFound as exc:
            # No version change to compare (e.g. telemetry without ``service.version``): the
            # prompt still answers, with the versions that were seen, so the model can tell the
            # user why there is nothing to compare instead of the client showing an error.
            deploys = await self.tools.list_deploys(
                ListDeploysArgs(service=arguments["service"], start=window.start, end=window.end),
                ctx,
            )
            return self._message(
                f"The user asked to compare deploys of {arguments['service']}, but there is no "
                f"version change to compare: {exc.detail}. Say so, list the versions seen "
                "below (if any), and suggest how to get versions into the telemetry (the "
                "service.version resource attribute) or which other evidence to look at.",
                deploys,
            )
        return self._message(
            f"Compare {arguments['service']} before and after the version change below: did "
            "latency or errors change, in which operations, and is the deploy a plausible "
            "cause? Note that traffic mix may differ between the two windows.",
            shaped,
        )

    async def investigate_service(self, arguments: Mapping[str, str], ctx: CallContext) -> str:
        """``investigate_service(service, range?)``."""
        check_prompt_arguments("investigate_service", arguments, ("service", "range"))
        service = arguments["service"]
        window = await self._window(arguments.get("range") or None)
        overview = await self.tools.get_service(
            GetServiceArgs(service=service, start=window.start, end=window.end), ctx
        )
        red = overview.body.get("red")
        p95 = red.get("p95_ms") if isinstance(red, dict) else None
        slow = await self.tools.search_traces(
            SearchTracesArgs(
                service=service,
                min_duration_ms=float(p95) if isinstance(p95, int | float) else None,
                limit=5,
                start=window.start,
                end=window.end,
            ),
            ctx,
        )
        logs = await self.tools.search_logs(
            SearchLogsArgs(
                service=service, min_severity="WARN", limit=10, start=window.start, end=window.end
            ),
            ctx,
        )
        body: JsonObject = {
            "service": fit(overview, self.budget_bytes // 2),
            "slow_traces": slow.body.get("traces", []),
            "warn_and_error_logs": logs.body.get("records", []),
        }
        return self._message(
            f"Investigate {service}: is it healthy? If not, is the cause in {service} itself or "
            "in a service it calls (see likely_origin: a slow callee makes its callers slow)? "
            "Cite trace ids, log lines and figures from the data; end with next steps.",
            Shaped(body, [Trimmable(("warn_and_error_logs",)), Trimmable(("slow_traces",))]),
        )

    async def triage_brief(self, arguments: Mapping[str, str], ctx: CallContext) -> str:
        """``triage_brief(range?, start?, end?)``.

        Without ``start``/``end`` the window is ``range`` (default 24 h) ending at the newest
        stored record; with them it is resolved as the tools resolve it
        (:func:`.ranges.resolve_range`, default length 24 h).

        Raises:
            ProtocolError: an argument the prompt does not take (``-32602``, naming it).
            BadArgs: a malformed or inverted window (naming ``range``, ``start`` or ``end``).
        """
        check_prompt_arguments("triage_brief", arguments, TRIAGE_ARGUMENTS)
        start = arguments.get("start") or None
        end = arguments.get("end") or None
        range_text = arguments.get("range") or None
        if start is None and end is None:
            shaped = await self.triage_data(range_text, ctx)
        else:
            given = RangeArgs(range=range_text, start=start, end=end)
            shaped = await self.triage_data(range_text, ctx, given)
        origin = shaped.body.get("likely_origin")
        lead = origin.get("summary") if isinstance(origin, dict) else None
        return self._message(
            "Write a triage brief of this system for an on-call engineer: lead with the likely "
            "origin, then the affected services, the evidence (slow traces, error logs, metric "
            "shifts), and the next checks. Use only the data below."
            + (f"\nLikely origin, as computed: {lead}" if isinstance(lead, str) else ""),
            shaped,
        )

    async def triage_data(
        self, range_text: str | None, ctx: CallContext, given: RangeArgs | None = None
    ) -> Shaped:
        """The data of ``triage_brief``: likely origin first, then the supporting evidence.

        The window: ``given`` (explicit ``start``/``end``, resolved like the tools' windows,
        default length 24 h), else ``range_text`` (default 24 h) ending at the newest record.
        """
        if given is None:
            window = resolve_range(await self._window(range_text), self.tools.clock())
            anchor = "ends at the newest stored record"
        else:
            window = resolve_range(given, self.tools.clock(), ANCHORED_DEFAULT)
            anchor = "as given (start/end)"
        tr = window.time_range
        summaries = (await self.store.services(tr, limit=MAX_LIMIT)).items
        edges = await self.store.service_edges(tr, limit=MAX_LIMIT)
        await ctx.report_progress(1, 3, "analysing slow traces")
        stored = await self.tools.problems.load()
        origin = await window_origin(
            self.store,
            tr,
            summaries,
            edges,
            stored,
            slow_traces=self.tools.origin_slow_traces,
            typical_traces=self.tools.origin_typical_traces,
        )
        await ctx.report_progress(2, 3, "reading logs and metrics")
        focus = origin.focus
        logs = await self.store.search_logs(
            LogQuery(time_range=tr, min_severity_number=SEVERITIES["ERROR"]), limit=200
        )
        by_service: dict[str, int] = {}
        for record in logs.items:
            by_service[record.service_name] = by_service.get(record.service_name, 0) + 1
        ranked_services = sorted(
            summaries, key=lambda s: (-s.error_rate, -(s.p95_duration_ns or 0), s.service_name)
        )
        # The rows the likely origin names come first: a cut keeps them (the origin, and the
        # service whose raw latency is highest because it waits on the origin).
        key_names = [
            name
            for name in (origin.body.get("service"), _get(origin.body, "highest_raw_latency"))
            if isinstance(name, str)
        ]
        ranked_services.sort(
            key=lambda s: (
                key_names.index(s.service_name) if s.service_name in key_names else len(key_names)
            )
        )
        body: JsonObject = {
            "window": window.as_json(),
            "window_anchor": anchor,
            "likely_origin": origin.body,
            **brief_problems(stored, tr, window.as_json(), origin.body),
            "error_logs": {
                "sampled": len(logs.items),
                "sample_is_complete": logs.next_cursor is None,
                "by_service": dict(sorted(by_service.items(), key=lambda item: -item[1])),
                "examples": [log_row(r) for r in logs.items[:5]],
            },
            "metric_shifts": await self._metric_shifts(tr, focus),
            "metric_shifts_method": "per service and latency metric: the highest bucket (max "
            "per bucket) while the slow traces ran (likely_origin.focus) against the median "
            "bucket of the whole window; a heuristic, not a detector",
            "services": [service_row(s, tr) for s in ranked_services],
            "truncated": False,
        }
        if not summaries:
            extent = await stored_extent(self.store)
            body["note"] = "no spans in this window" + (
                f"; stored data spans {rfc3339(extent.start_unix_nano)} .. "
                f"{rfc3339(extent.end_unix_nano - 1)}"
                if extent is not None
                else "; the store is empty"
            )
        return Shaped(
            body,
            # Least needed first. Services and problems come key rows first (the origin's
            # rows, the problem it cites), so a cut keeps what the likely origin stands on.
            [
                Trimmable(("likely_origin", "sampled")),
                Trimmable(("error_logs", "examples")),
                Trimmable(("services",)),
                Trimmable(("metric_shifts",)),
                Trimmable(("problems",)),
                Trimmable(("likely_origin", "candidates")),
            ],
        )

    async def _metric_shifts(self, tr: TimeRange, focus: TimeRange) -> list[JsonObject]:
        names = await self.store.metric_names(tr, limit=1000)
        shifts: list[JsonObject] = []
        for descriptor in latency_metric_names(names.items)[:3]:
            for series, shift in await latency_shifts(self.store, descriptor, tr, focus):
                shifts.append({"service": series.labels.get("service.name", ""), **shift})
        # Server-side latency first: a client-side latency includes its callees' time.
        shifts.sort(
            key=lambda s: ("server" not in str(s["metric"]), -float(str(s["peak_to_median"])))
        )
        return shifts[:8]


_BRIEF_PROBLEM_ROWS: Final = 5
"""Problems a triage brief lists at most (the cited first, then the newest)."""
_BRIEF_TEXT_CHARS: Final = 120
"""Characters a brief's problem title or origin reason keeps (``list_problems`` has them whole)."""
_BRIEF_ROW_SERVICES: Final = 4
"""Services a brief's problem row names (``services_total`` counts them all)."""


def _get(body: JsonObject, key: str) -> object:
    """``body[key]["service"]``, or ``None``."""
    value = body.get(key)
    return value.get("service") if isinstance(value, dict) else None


def brief_problem_row(problem: Problem, cited: bool) -> JsonObject:
    """One problem as a triage brief lists it: a compact :func:`.problems.problem_row`.

    No samples, the title shortened to ``_BRIEF_TEXT_CHARS`` characters, the first
    ``_BRIEF_ROW_SERVICES`` services and ``services_total``; the origin's reason (shortened the
    same way) only on the problem the likely origin cites (``cited``). The whole row is
    ``list_problems``' / ``get_problem``'s.
    """
    reason = problem.ranking[0].reason if problem.ranking and cited else ""
    row: JsonObject = {
        "problem_id": problem.problem_id,
        "status": problem.status,
        "title": shorten(problem.title, _BRIEF_TEXT_CHARS),
        "start": rfc3339(problem.start_unix_nano),
        "end": rfc3339(problem.end_unix_nano),
        "origin": problem_origin(problem),
        "services": problem.services[:_BRIEF_ROW_SERVICES],
        "services_total": len(problem.services),
        "anomaly_count": len(problem.anomalies),
    }
    if reason:
        row["origin_reason"] = shorten(reason_text(reason), _BRIEF_TEXT_CHARS)
    return row


def brief_problems(
    stored: Sequence[Problem] | None, tr: TimeRange, window: JsonObject, origin: JsonObject
) -> JsonObject:
    """The ``problems`` of a triage brief over ``tr``: the ones a reader needs, compact.

    The problem the likely origin cites (``origin["problem_id"]``) first, then the newest
    (latest start) — at most ``_BRIEF_PROBLEM_ROWS`` rows of :func:`brief_problem_row`.
    ``problems_total`` counts every stored problem overlapping the window; when rows are left
    out (here or by the output budget, which then sets ``omitted.problems``),
    ``problems_more`` says how to list them all (``list_problems`` over the same window).
    Without a detection run: no rows and ``problems_note``.
    """
    if stored is None:
        return {"problems": [], "problems_note": NO_DETECTION_NOTE}
    cited = origin.get("problem_id")
    chosen = sorted(
        (p for p in stored if in_window(p, tr)),
        key=lambda p: (p.problem_id != cited, -p.start_unix_nano, p.problem_id),
    )
    body: JsonObject = {
        "problems": [
            brief_problem_row(p, p.problem_id == cited) for p in chosen[:_BRIEF_PROBLEM_ROWS]
        ],
        "problems_total": len(chosen),
    }
    if chosen:
        body["problems_more"] = (
            f"list_problems(start={window['start']}, end={window['end']}) lists all "
            f"{len(chosen)} with whole rows; get_problem(problem_id) for one's evidence"
        )
    return body


TRIAGE_ARGUMENTS: Final = ("range", "start", "end")
"""The arguments ``triage_brief`` takes."""


def check_prompt_arguments(
    name: str, arguments: Mapping[str, str], accepted: Sequence[str]
) -> None:
    """Refuse arguments prompt ``name`` does not take, as the tools refuse unknown fields.

    Raises:
        ProtocolError: ``-32602`` (invalid params) naming the unknown argument(s) and the
            accepted ones; ``data``: ``{"unknown": [...], "accepted": [...]}``.
    """
    unknown = sorted(key for key in arguments if key not in accepted)
    if unknown:
        raise ProtocolError(
            codes.INVALID_PARAMS,
            f"Unknown argument(s) for prompt {name!r}: {', '.join(k[:64] for k in unknown)} "
            f"(accepted: {', '.join(accepted)})",
            {"unknown": [k[:64] for k in unknown[:20]], "accepted": list(accepted)},
        )
