"""The README's "Walkthrough: the demo incident", executed (issue 21).

Each call the walkthrough shows runs on ``coremetry serve --demo`` through the official ``mcp``
SDK client, and each claim the text makes is checked against the answer. Claims are kept in
:func:`test_the_walkthrough_says_what_the_tools_answer` as ``claim(fragment, holds)`` pairs: the
fragment is quoted from the README (whitespace aside) and must still be there, and ``holds`` is
the check of that sentence against the answers. If the text or the answers drift, the test fails
and names the sentence.

Times in the text are as recorded (UTC, 2023-01-30); the demo shifts the day to end now, by the
``shift_ns`` it writes to ``<data_dir>/demo/faults.json``, which the test undoes.
"""

import json
import re
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import trio
from mcp import types

from coremetry.observability.ranges import rfc3339

from ._client import mcp_client, num, obj, objs, structured
from .conftest import DemoServer

LIMIT_S: Final = 300.0
README: Final = Path(__file__).resolve().parents[2] / "README.md"
TRAVEL: Final = "ts-travel-service"
GATEWAY: Final = "ts-gateway-service"
DAY: Final = datetime(2023, 1, 30, tzinfo=UTC)

JsonObject = dict[str, object]


def walkthrough() -> str:
    """The walkthrough section of the README, whitespace collapsed."""
    text = README.read_text()
    start = text.index("## Walkthrough: the demo incident")
    end = text.index("\n## ", start + 1)
    return " ".join(text[start:end].split())


def rounds_to(value: float, shown: float, decimals: int) -> bool:
    """``value`` rounds to ``shown`` at ``decimals`` places (half a unit either way)."""
    return bool(abs(value - shown) <= 0.5 * 10**-decimals + 1e-9)


def points(series: JsonObject) -> list[tuple[str, float]]:
    """A series' ``[time, value]`` points."""
    found: list[tuple[str, float]] = []
    raw = series["points"]
    assert isinstance(raw, list), raw
    for point in raw:
        assert isinstance(point, list), point
        time, value = point
        found.append((str(time), num(value)))
    return found


class Clock:
    """Shown (shifted) times to recorded ones and back."""

    def __init__(self, demo: DemoServer) -> None:
        document = json.loads((demo.data_dir / "demo" / "faults.json").read_text())
        self.shift_ns = int(document["shift_ns"])
        self.faults = document["faults"]

    def recorded(self, shown: object) -> datetime:
        moment = datetime.fromisoformat(str(shown).replace("Z", "+00:00"))
        return moment - timedelta(microseconds=self.shift_ns // 1000)

    def shown(self, hhmmss: str) -> str:
        """The shown RFC 3339 time of a recorded ``HH:MM:SS`` on the fault day."""
        hours, minutes, seconds = (int(p) for p in hhmmss.split(":"))
        at = DAY + timedelta(hours=hours, minutes=minutes, seconds=seconds)
        return rfc3339(int(at.timestamp()) * 10**9 + self.shift_ns)


def shown_ns(text: object) -> int:
    """An RFC 3339 time shown by the tools (millisecond precision) as unix nanoseconds."""
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000) * 1_000_000


def hms(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S")


async def test_the_walkthrough_says_what_the_tools_answer(demo_server: DemoServer) -> None:
    clock = Clock(demo_server)
    with trio.fail_after(LIMIT_S):
        async with mcp_client(demo_server.mcp_url, demo_server.admin_token) as client:

            async def call(name: str, args: JsonObject) -> JsonObject:
                result = await client.call_tool(name, args)
                (content,) = result.content
                assert isinstance(content, types.TextContent)
                sizes.append(len(content.text.encode()))
                return structured(result)

            sizes: list[int] = []

            # Question 1.
            gateway = await call("get_service", {"service": GATEWAY, "range": "24h"})
            # Question 2.
            own_slow = await call(
                "search_traces", {"service": TRAVEL, "min_duration_ms": 1000, "range": "24h"}
            )
            own_traces = [
                await call("get_trace", {"trace_id": t["trace_id"]})
                for t in objs(own_slow["traces"])
            ]
            travel = await call("get_service", {"service": TRAVEL, "range": "24h"})
            delayed = [
                await call("get_trace", {"trace_id": t["trace_id"]})
                for t in objs(obj(travel["likely_origin"])["slow_traces"])
            ]
            # Question 3.
            errors = await call(
                "search_logs", {"service": TRAVEL, "min_severity": "ERROR", "range": "24h"}
            )
            first_error = objs(errors["records"])[0]
            linked = await call("search_logs", {"trace_id": first_error["trace_id"]})
            linked_trace = await call("get_trace", {"trace_id": first_error["trace_id"]})
            focus = obj(obj(gateway["likely_origin"])["focus"])
            p99_args: JsonObject = {
                "name": "http.server.request.duration",
                "service": TRAVEL,
                "labels": [{"key": "quantile", "value": "0.99"}],
                "step": "1m",
                "start": focus["start"],
                "end": focus["end"],
            }
            p99 = await call("query_metric", p99_args)
            # Every scrape in a bucket of its own (scrapes are ~60 s apart), to tell which
            # 1-minute buckets hold two.
            scrapes = await call("query_metric", {**p99_args, "step": "30s"})
            wide = await call(
                "query_metric",
                {k: v for k, v in p99_args.items() if k not in ("start", "end")} | {"range": "12h"},
            )
            # What the demo carries: no travel traces between and after the fault minutes.
            gaps = [
                await call(
                    "search_traces",
                    {"service": TRAVEL, "start": clock.shown(a), "end": clock.shown(b)},
                )
                for a, b in (("11:41:00", "13:05:50"), ("13:09:00", "13:14:50"))
            ]
            after = await call(
                "search_traces",
                {
                    "service": TRAVEL,
                    "start": clock.shown("13:18:00"),
                    "end": clock.shown("23:59:59"),
                },
            )
            listed = await client.list_tools()

    text = walkthrough()
    failed: list[str] = []

    def claim(fragment: str, holds: bool) -> None:
        quoted = " ".join(fragment.split())
        if quoted not in text:
            failed.append(f"the README walkthrough no longer says {quoted!r}")
        elif not holds:
            failed.append(f"the README walkthrough says {quoted!r}, the answers do not")

    # -- the faults -------------------------------------------------------------------------
    travel_faults = [
        (
            f["type"],
            hms(datetime.fromtimestamp((int(f["time_unix_nano"]) - clock.shift_ns) // 10**9, UTC)),
        )
        for f in clock.faults
        if f["service.name"] == TRAVEL
    ]
    claim(
        "CPU contention at 13:06:49, then network delays at 13:14:43 and 13:22:22",
        travel_faults
        == [
            ("cpu_contention", "13:06:49"),
            ("network_delay", "13:14:43"),
            ("network_delay", "13:22:22"),
        ],
    )
    cpu_shown = min(int(f["time_unix_nano"]) for f in clock.faults if f["service.name"] == TRAVEL)
    cpu_ago = datetime.now(UTC) - datetime.fromtimestamp(cpu_shown / 1e9, UTC)
    claim("so they are about 11 hours ago", 10.5 <= cpu_ago.total_seconds() / 3600 < 11.5)
    claim(
        "It carries traces of the minutes after the first two (13:06-13:08 and 13:15-13:17, and "
        "a fault-free minute at 11:39)",
        all(objs(g["traces"]) == [] for g in [*gaps, after]),
    )

    # -- question 1 -------------------------------------------------------------------------
    origin = obj(gateway["likely_origin"])
    top = objs(origin["candidates"])[0]
    summary = str(origin["summary"])
    claim("`likely_origin` names `ts-travel-service`", origin["service"] == TRAVEL)
    claim("in the slowest tenth of the traces", "slowest tenth" in str(origin["method"]))
    claim(
        "its time on the critical path is about 3.3 s per trace above typical traces",
        top["service"] == TRAVEL and rounds_to(num(top["excess_ms"]) / 1000, 3.3, 1),
    )
    claim(
        "mostly callers waiting on its calls",
        "mostly callers waiting on its calls" in summary
        and num(top["callers_waiting_ms"]) > num(top["own_ms"]),
    )
    raw = obj(origin["highest_raw_latency"])
    claim(
        "`ts-gateway-service` shows the highest raw p95 latency (2.3 s) only because its "
        "requests include those calls",
        raw["service"] == GATEWAY
        and rounds_to(num(raw["p95_ms"]) / 1000, 2.3, 1)
        and "because its requests include those calls" in summary,
    )
    evidence = obj(origin["evidence"])
    into = {str(e["caller"]): e for e in objs(evidence["calls_into"])}
    claim(
        "gateway→travel calls at p95 1.3 s with 27 errors",
        rounds_to(num(into[GATEWAY]["p95_ms"]) / 1000, 1.3, 1) and into[GATEWAY]["errors"] == 27,
    )
    logs = obj(evidence["error_logs"])
    claim(
        "travel's 27 ERROR log lines", logs["count"] == 27 and logs["count_is_lower_bound"] is False
    )
    server_latency = next(
        m
        for m in objs(evidence["latency_metrics"])
        if m["metric"] == "http.server.request.duration"
    )
    peak_start = shown_ns(server_latency["peak_bucket_start"])
    scrape_second = shown_ns(clock.shown("13:09:54"))  # the scrape lands within this second
    claim(
        "its `http.server.request.duration` peak (4.9 s, in the 1-minute bucket holding the "
        "13:09:54 scrape, three minutes after the CPU fault) against its median (0.05 s)",
        rounds_to(num(server_latency["peak_in_focus"]), 4.9, 1)
        and server_latency["bucket_s"] == 60
        # [scrape_second, +1 s) meets [peak_start, +1 min): the bucket holds the scrape.
        and peak_start < scrape_second + 10**9
        and scrape_second < peak_start + 60 * 10**9
        and rounds_to(num(server_latency["median"]), 0.05, 2),
    )

    # -- question 2 -------------------------------------------------------------------------
    own_starts = [clock.recorded(t["start"]) for t in objs(own_slow["traces"])]
    claim(
        "lists the 12 traces in which one of travel's own spans ran for over a second — all from "
        "the CPU fault (13:07-13:08)",
        len(own_traces) == 12
        and own_slow.get("total") == 12
        and all("13:07:00" <= hms(s) < "13:09:00" for s in own_starts),
    )
    dominant = [obj(t["dominant_span"]) for t in own_traces]
    in_travel = [d for d in dominant if d["service"] == TRAVEL]
    claim(
        "In 8 of the 12 the `dominant_span` (the span holding the most critical-path time) is one "
        "of travel's, in 5 its `TripRepository.findAll`",
        len(in_travel) == 8 and sum(d["name"] == "TripRepository.findAll" for d in in_travel) == 5,
    )
    claim(
        "`get_trace` on one returns the tree with each span's self time and the critical path",
        all(
            t["critical_path"] and all("self_time_ms" in s for s in objs(t["spans"]))
            for t in own_traces
        ),
    )
    claim(
        "The network delay does not show there: its time passes before travel's own spans "
        "start, so none of them is long.",
        all(hms(s) < "13:14:43" for s in own_starts),
    )
    claim(
        "in 9 travel holds the most critical-path time of any service",
        sum(objs(t["services"])[0]["service"] == TRAVEL for t in own_traces) == 9,
    )
    downstream = {str(e["callee"]) for e in objs(travel["downstream"])}
    claim(
        "in the others the dominant span is in `ts-basic-service` or `ts-seat-service`, which "
        "travel calls",
        {str(d["service"]) for d in dominant if d["service"] != TRAVEL}
        == {"ts-basic-service", "ts-seat-service"}
        and {"ts-basic-service", "ts-seat-service"} <= downstream,
    )
    slow = objs(obj(travel["likely_origin"])["slow_traces"])
    durations = [num(t["duration_ms"]) / 1000 for t in slow]
    starts = sorted(hms(clock.recorded(t["start"])) for t in slow)
    claim(
        "the three slowest, 4.4-6.3 s, starting from 13:15:41 to 13:17:45",
        len(slow) == 3
        and rounds_to(min(durations), 4.4, 1)
        and rounds_to(max(durations), 6.3, 1)
        and (starts[0], starts[-1]) == ("13:15:41", "13:17:45"),
    )
    waits = [obj(t["dominant_span"]) for t in delayed]
    claim(
        "on each of those, `get_trace`'s dominant span is the gateway's `HTTP POST` client span "
        'with `waiting_on: "ts-travel-service"`',
        len(waits) == 3
        and all(
            (d["service"], d["name"], d.get("waiting_on")) == (GATEWAY, "HTTP POST", TRAVEL)
            for d in waits
        ),
    )
    gateway_rows = [
        next(s for s in objs(t["services"]) if s["service"] == GATEWAY) for t in delayed
    ]
    claim(
        "the gateway's `self_time_ms` there is a few milliseconds; its `call_wait_ms` holds the "
        "wait.",
        all(
            num(row["self_time_ms"]) < 10 and num(row["call_wait_ms"]) > 0.9 * num(t["duration_ms"])
            for row, t in zip(gateway_rows, delayed, strict=True)
        ),
    )
    claim(
        "(On the `critical_path`, the `HTTP POST` span's own `self_time_ms` is that wait: no span "
        "of travel's covers it.)",
        all(
            num(
                next(p for p in objs(t["critical_path"]) if p["span_id"] == d["span_id"])[
                    "self_time_ms"
                ]
            )
            > 0.9 * num(row["call_wait_ms"])
            for d, row, t in zip(waits, gateway_rows, delayed, strict=True)
        ),
    )

    # -- question 3 -------------------------------------------------------------------------
    records = objs(errors["records"])
    claim(
        "returns its `500 Internal Server Error` lines with their trace ids",
        bool(records)
        and all(
            r["service"] == TRAVEL
            and r["severity"] == "ERROR"
            and "500 Internal Server Error" in str(r["body"])
            and re.fullmatch(r"[0-9a-f]{32}", str(r["trace_id"]))
            for r in records
        ),
    )
    linked_records = objs(linked["records"])
    error_spans = {str(s["span_id"]) for s in objs(linked_trace["error_spans"])}
    claim(
        "(`search_logs(trace_id=…)` gives every service's lines of that request, and `get_trace` "
        "marks the same spans as errors)",
        {r["trace_id"] for r in linked_records} == {first_error["trace_id"]}
        and len({r["service"] for r in linked_records}) > 1
        and all(
            str(r["span_id"]) in error_spans for r in linked_records if r["severity"] == "ERROR"
        ),
    )
    focus_minutes = (
        clock.recorded(focus["end"]) - clock.recorded(focus["start"])
    ).total_seconds() / 60
    claim(
        "its `likely_origin.focus`, the 20 minutes around the slow traces)",
        19 <= focus_minutes <= 21,
    )
    (series,) = objs(p99["series"])
    (fine,) = objs(scrapes["series"])
    minute_ns, half_ns, second_ns = 60 * 10**9, 30 * 10**9, 10**9
    buckets = {shown_ns(t): v for t, v in points(series)}
    by_scrape = [(shown_ns(t), v) for t, v in points(fine)]

    def scrape(at: str) -> float:
        """The p99 of the scrape recorded at ``at`` (HH:MM:SS; it lands within that second).

        30-second buckets hold one scrape each (scrapes are ~60 s apart) and nest in the
        1-minute ones (both start at multiples of their step): the 1-minute bucket holding it
        shows it, or, when the shift puts two scrapes in it, their mean (the text says so).
        """
        moment = shown_ns(clock.shown(at))
        (found,) = [(b, v) for b, v in by_scrape if moment - half_ns < b < moment + second_ns]
        half_start, value = found
        (minute,) = [m for m in buckets if m <= half_start < m + minute_ns]
        together = [v for b, v in by_scrape if minute <= b < minute + minute_ns]
        assert rounds_to(buckets[minute], statistics.mean(together), 6), (minute, together)
        return value

    claim(
        "shows its p99 scraped at 0.49 s at 13:06:54, then 2.35, 2.48 and 4.88 s in the three "
        "scrapes after it, and 2.47 s at 13:15:54, after the network delay",
        "points_note" not in series
        and rounds_to(scrape("13:06:54"), 0.49, 2)
        and rounds_to(scrape("13:07:54"), 2.35, 2)
        and rounds_to(scrape("13:08:54"), 2.48, 2)
        and rounds_to(scrape("13:09:54"), 4.88, 2)
        and rounds_to(scrape("13:15:54"), 2.47, 2),
    )
    (wide_series,) = objs(wide["series"])
    claim(
        'Over `range="12h"` a 1-minute step gives several hundred points, more than one answer '
        "holds: the series comes back with 1 bucket in 2 and a `points_note` naming the step "
        "that shows every bucket.",
        200 <= num(wide_series["point_count"]) < 1000
        and str(wide_series["points_note"]).startswith("1 bucket in 2 ")
        and 'step="2m"' in str(wide_series["points_note"]),
    )

    # -- the closing paragraph ------------------------------------------------------------
    claim(
        "Every answer fits a 16 KiB budget (`mcp.output_budget_bytes`): long lists say "
        "`truncated` and return a `cursor` to continue.",
        max(sizes) <= 16 * 1024 and errors["truncated"] is True and "cursor" in errors,
    )
    claim(
        "An empty answer says where the stored data is (`data_extent`)",
        all(obj(g["data_extent"])["end"] for g in [*gaps, after]),
    )
    defaults = {}
    for tool in listed.tools:
        window = obj(obj(tool.input_schema["properties"]).get("range", {}))
        found = re.search(r'Default "(\w+)"', str(window.get("description", "")))
        if found:
            defaults[tool.name] = found.group(1)
    claim(
        "the default window is the last hour (7 days for `list_deploys` and `compare_deploys`, "
        "24 hours for `list_problems` and `list_anomalies`, as each tool's schema says)",
        len(defaults) >= 10
        and {t for t, d in defaults.items() if d != "1h"}
        == {"list_deploys", "compare_deploys", "list_problems", "list_anomalies"}
        and defaults["list_deploys"] == defaults["compare_deploys"] == "7d"
        and defaults["list_problems"] == defaults["list_anomalies"] == "24h",
    )

    assert not failed, "\n".join(failed)
