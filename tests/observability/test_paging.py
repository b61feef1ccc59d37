"""Cursors continue only the query that issued them: every argument but ``cursor`` counts.

The fingerprint a cursor carries is computed from the whole argument Struct, so a field added to
a tool later is covered without anyone listing it. Each paged tool is taken from the one list of
tool specs (a new paged tool is covered too), and each of its fields is changed in turn.
"""

import json
from pathlib import Path
from typing import Final

import msgspec
import pytest

from coremetry.mcp import BadArgs, Connection, Server
from coremetry.mcp.versions import LATEST_HANDSHAKE
from coremetry.observability import TOOLS, ToolSpec
from coremetry.observability.budget import CursorState, decode_cursor, encode_cursor, fingerprint
from coremetry.observability.paging import Pager
from coremetry.observability.ranges import ResolvedRange, rfc3339
from coremetry.server import build_mcp_server
from coremetry.store import Span, SpanKind, TelemetryBatch, TimeRange
from coremetry.store.sqlite import open_sqlite_store

PAGED: Final = [spec for spec in TOOLS if "cursor" in spec.args.__struct_fields__]
WINDOW: Final = ResolvedRange(
    time_range=TimeRange(start_unix_nano=10**18, end_unix_nano=10**18 + 3600 * 10**9),
    explicit=True,
)
CANDIDATES: Final[tuple[object, ...]] = (
    "error",
    "ok",
    "max",
    "ERROR",
    "2h",
    "2023-01-30T13:00:00Z",
    "x",
    7,
    2.5,
    ["x"],
    {"k": "v"},
)
"""Values tried, in order, for a field's other value: the first its type accepts is taken."""
START_NS: Final = 1_675_084_500 * 10**9
"""2023-01-30T13:15:00Z, the first stored span."""
END: Final = "2023-01-30T13:30:00Z"
LATER: Final = "2023-01-30T13:20:00Z"


def base_args(spec: ToolSpec[msgspec.Struct]) -> msgspec.Struct:
    """The tool's arguments with only its required fields set (to ``"a"``)."""
    required = {f.encode_name: "a" for f in msgspec.structs.fields(spec.args) if f.required}
    return msgspec.convert(required, spec.args)


def variants(args: msgspec.Struct) -> list[tuple[str, msgspec.Struct]]:
    """``args`` with one field (not ``cursor``) changed to another valid value, per field."""
    out: list[tuple[str, msgspec.Struct]] = []
    for field in msgspec.structs.fields(args):
        if field.name == "cursor":
            continue
        current = getattr(args, field.name)
        for candidate in (*CANDIDATES, f"{current}x" if isinstance(current, str) else None):
            try:
                value = msgspec.convert(candidate, field.type)
            except msgspec.ValidationError:
                continue
            if value != current:
                out.append((field.name, msgspec.structs.replace(args, **{field.name: value})))
                break
        else:
            pytest.fail(f"no other value found for {type(args).__name__}.{field.name}")
    return out


def cursor_of(tool: str, args: msgspec.Struct) -> str:
    return encode_cursor(
        CursorState(
            tool=tool,
            query=fingerprint(args),
            offset=1,
            start_unix_nano=WINDOW.start_unix_nano,
            end_unix_nano=WINDOW.end_unix_nano,
        )
    )


def unreachable() -> ResolvedRange:
    raise AssertionError("a continued page takes its window from the cursor")


def test_every_paged_tool_is_covered() -> None:
    names = {spec.name for spec in PAGED}
    assert {
        "list_services",
        "search_traces",
        "search_logs",
        "query_metric",
        "get_trace",
        "get_problem",
    } <= names
    assert len(PAGED) == 11


@pytest.mark.parametrize("spec", PAGED, ids=[spec.name for spec in PAGED])
def test_a_cursor_is_refused_for_a_query_differing_in_any_one_field(
    spec: ToolSpec[msgspec.Struct],
) -> None:
    args = base_args(spec)
    cursor = cursor_of(spec.name, args)
    # The same arguments continue, whatever the cursor field itself holds.
    same = msgspec.structs.replace(args, cursor=cursor)
    assert decode_cursor(cursor, tool=spec.name, query=fingerprint(same)).offset == 1
    changed = variants(args)
    names = {name for name, _ in changed}
    assert names == set(spec.args.__struct_fields__) - {"cursor"}
    for name, other in changed:
        with pytest.raises(BadArgs, match=r"^cursor: it belongs to a .* call with other arguments"):
            decode_cursor(cursor, tool=spec.name, query=fingerprint(other))
        assert fingerprint(other) != fingerprint(args), name


@pytest.mark.parametrize("spec", [s for s in PAGED if s.name != "get_trace"], ids=lambda s: s.name)
def test_the_pager_continues_only_its_own_query(spec: ToolSpec[msgspec.Struct]) -> None:
    args = base_args(spec)
    first = Pager.start(spec.name, args, None, lambda: WINDOW)
    assert first.first
    assert first.offset == 0
    page = first.page(["a", "b", "c"], 1)
    assert (page.items, page.more) == (["a"], True)
    cursor = page.continuation(1)["cursor"]
    assert isinstance(cursor, str)
    resumed = Pager.start(spec.name, args, cursor, unreachable)
    assert (resumed.offset, resumed.window) == (1, WINDOW)
    assert resumed.page(["a", "b", "c"], 1).items == ["b"]
    for _, other in variants(args):
        with pytest.raises(BadArgs, match=r"^cursor:"):
            Pager.start(spec.name, other, cursor, unreachable)
    with pytest.raises(BadArgs, match=r"^cursor:"):
        Pager.start("another_tool", args, cursor, unreachable)


def test_object_arguments_in_another_key_order_are_the_same_query() -> None:
    spec = next(s for s in PAGED if s.name == "search_traces")
    one = msgspec.convert({"attributes": {"a": "1", "b": "2"}}, spec.args)
    other = msgspec.convert({"attributes": {"b": "2", "a": "1"}}, spec.args)
    assert fingerprint(one) == fingerprint(other)


async def call(server: Server, name: str, arguments: dict[str, object]) -> dict[str, object]:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    reply = await server.handle(
        msgspec.json.encode(request), Connection(protocol_version=LATEST_HANDSHAKE)
    )
    assert reply is not None
    body = json.loads(reply.body)["result"]["structuredContent"]
    assert isinstance(body, dict)
    return body


def three_traces() -> TelemetryBatch:
    """Three one-span traces of three services, a second apart."""
    return TelemetryBatch(
        spans=[
            Span(
                trace_id=f"{i + 1:032x}",
                span_id=f"{i + 1:016x}",
                service_name=f"svc-{i}",
                name="GET /",
                kind=SpanKind.SERVER,
                start_time_unix_nano=START_NS + i * 10**9,
                end_time_unix_nano=START_NS + i * 10**9 + 5 * 10**6,
                attributes={"http.route": "/"},
            )
            for i in range(3)
        ]
    )


@pytest.mark.parametrize(
    ("tool", "changes"),
    [
        ("list_services", {"limit": 2, "range": "2h", "start": LATER, "end": LATER}),
        (
            "search_traces",
            {
                "service": "svc-0",
                "operation": "GET /",
                "min_duration_ms": 1,
                "status": "ok",
                "attributes": {"http.route": "/"},
                "limit": 2,
                "range": "2h",
                "start": LATER,
                "end": LATER,
            },
        ),
    ],
)
async def test_a_served_cursor_is_refused_with_any_one_argument_changed(
    tmp_path: Path, tool: str, changes: dict[str, object]
) -> None:
    spec = next(s for s in TOOLS if s.name == tool)
    assert set(changes) == set(spec.args.__struct_fields__) - {"cursor"}, "every argument"
    arguments: dict[str, object] = {"limit": 1, "start": rfc3339(START_NS), "end": END}
    async with open_sqlite_store(tmp_path / "telemetry.db", retention_days=0) as store:
        await store.write(three_traces())
        server = build_mcp_server(store=store)
        first = await call(server, tool, arguments)
        cursor = first["cursor"]
        again = await call(server, tool, {**arguments, "cursor": cursor})
        assert "error" not in again
        for name, value in changes.items():
            refused = await call(server, tool, {**arguments, name: value, "cursor": cursor})
            assert refused["error"] == "bad_args", (name, refused)
            assert str(refused["detail"]).startswith("cursor:"), (name, refused)
