"""The JSON-RPC fuzzer shared by ``tests/transports/test_fuzz.py`` (a seeded slice in CI) and
``bench/fuzz.py`` (≥ 100,000 bodies): strategies, transport drivers and the oracle.

One :class:`Case` is a message body plus header edits. Hypothesis generates cases
(:func:`cases`): valid-ish JSON-RPC (the server's methods and random ones, ids of every JSON type,
params of wrong shapes, batches, notifications, client responses), broken JSON, non-UTF-8
bytes, huge numbers, deep nesting, bodies over the size cap; and header edits (dropped,
replaced or repeated ``MCP-Protocol-Version``, ``Mcp-Session-Id``, ``Accept``, ``Content-Type``,
``Origin``, ``Authorization``, ``Mcp-Method``, ``Mcp-Name``), each tagged with the HTTP status it
must cause (``None``: none). A driver per transport (:class:`HttpDriver` for Streamable HTTP in
the handshake era 2025-11-25 and the stateless one 2026-07-28, :class:`SseDriver` for legacy
HTTP+SSE, :class:`WsDriver` for WebSocket, :class:`StdioDriver` for ``coremetry stdio``) sends a
case and returns an :class:`Observed`; :func:`judge` checks it (``None`` when right, else what is
wrong). After each case the driver makes a normal ``tools/call echo`` and checks its answer.

The oracle (JSON-RPC 2.0 §4-5, MCP ``basic/transports`` 2025-11-25 and 2026-07-28):

- no 5xx, no ``-32603`` (internal error), every answer a well-formed JSON-RPC response
  (``jsonrpc: "2.0"``, an ``id``, exactly one of ``result``/``error``, an integer ``code`` and a
  string ``message``);
- broken JSON or non-UTF-8 -> ``-32700`` (id ``null``); JSON that is not a request (wrong
  ``jsonrpc``, a non-string ``method``, an ``id`` neither string nor integer, a scalar or an empty
  array) -> ``-32600``; a method the server does not have -> ``-32601``; a known method with
  params of the wrong shape -> a result or ``-32602`` (or another MCP error code of that method,
  never a parse/invalid-request/internal error); a notification or a client response -> no
  answer (HTTP 202, empty body); a batch -> one answer per request inside a JSON array (HTTP
  ``2025-03-26`` only; elsewhere ``-32600``);
- a header edit tagged with a status -> that status (the first in the order the server applies:
  Origin 403, Content-Type 415, Accept 406, Authorization 401, body size 413, protocol headers
  400); a body over the cap -> 413 (HTTP) or ``-32700`` / close 1009 (stdio, WebSocket).

Drivers need a running server: :func:`start_http_server` starts ``coremetry serve --fixture``
with authentication on (a service token in a temporary data dir) and :func:`start_stdio`
``coremetry stdio --fixture``; both with a configuration (:data:`SERVER_CONFIG`) that lifts the
rate limit and makes the body caps small (:data:`MAX_BODY_BYTES`).
"""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Final, Literal, TypeAlias, cast

import httpx
import trio
from hypothesis import strategies as st
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None

REPO: Final = Path(__file__).resolve().parents[1]

MAX_BODY_BYTES: Final = 65_536
"""``http.max_body_bytes`` and ``websocket.max_message_bytes`` of the fuzzed server."""

HANDSHAKE: Final = "2025-11-25"
STATELESS: Final = "2026-07-28"

SERVER_CONFIG: Final = f"""
[http]
max_body_bytes = {MAX_BODY_BYTES}
graceful_shutdown_s = 1.0

[websocket]
max_message_bytes = {MAX_BODY_BYTES}

[rate_limit]
per_second = 1000000
burst = 1000000

[detection]
enabled = false
"""

KNOWN_METHODS: Final = (
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
)
"""The server's request methods the fuzzer calls. ``subscriptions/listen`` is left out: a valid
one is a stream that lasts until its deadline, which no per-body oracle can wait for."""

SERVER_METHODS: Final = frozenset(KNOWN_METHODS) | {"subscriptions/listen"}
"""Every request method the server has (a generated name among them is not 'unknown')."""

NOTIFICATIONS: Final = (
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
)

TOOLS: Final = ("echo", "fail", "log_levels", "nope", "")
"""Fixture tools (without ``sleep_ms`` and ``big_output``, whose random arguments could run for
a minute or answer megabytes) and names that do not exist."""

BAD_ORIGIN: Final = "http://evil.example"


# ---- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderEdit:
    """One change to the standard headers of an HTTP request.

    ``mode``: ``"set"`` replaces every value of ``name`` (``value=None`` drops it), ``"add"``
    appends one more field (a repeated header). ``status``: the HTTP status the edit must cause,
    or ``None`` when the request must be served as if the edit were not there.
    """

    name: str
    value: str | None
    mode: Literal["set", "add"]
    status: int | None


@dataclass(frozen=True)
class Case:
    """One fuzz example: a body and header edits (the latter used by the HTTP transports)."""

    body: bytes
    edits: tuple[HeaderEdit, ...] = ()
    stateless: bool = False
    """Whether the body was dressed as a 2026-07-28 request (``_meta`` and its headers)."""

    def describe(self) -> str:
        """A short reproducible description (for failure reports)."""
        edits = ", ".join(f"{e.mode} {e.name}={e.value!r}" for e in self.edits)
        return f"body={self.body[:300]!r}{'…' if len(self.body) > 300 else ''} edits=[{edits}]"


@cache
def _json_scalars() -> st.SearchStrategy[Json]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    )


@cache
def json_values(max_leaves: int = 12) -> st.SearchStrategy[Json]:
    """Any JSON value (nested arrays and objects)."""
    return st.recursive(
        _json_scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.text(max_size=8), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


@cache
def _ids() -> st.SearchStrategy[Json]:
    valid: st.SearchStrategy[Json] = st.one_of(
        st.integers(min_value=-(2**31), max_value=2**31), st.text(max_size=12)
    )
    return st.one_of(
        valid,  # most requests carry a valid id, so the method and params get judged
        valid,
        valid,
        valid,
        valid,
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(min_value=2**64, max_value=2**80),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


@cache
def _tool_params() -> st.SearchStrategy[Json]:
    arguments = st.one_of(
        st.fixed_dictionaries({"text": st.text(max_size=30)}),
        st.fixed_dictionaries({"text": json_values(4)}),
        st.dictionaries(st.sampled_from(["text", "level", "message", "x"]), json_values(3)),
        json_values(4),
    )
    return st.one_of(
        st.fixed_dictionaries({"name": st.sampled_from(TOOLS), "arguments": arguments}),
        st.fixed_dictionaries({"name": json_values(2)}),
        st.fixed_dictionaries(
            {"name": st.sampled_from(TOOLS)},
            optional={"arguments": arguments, "_meta": json_values(4)},
        ),
    )


@cache
def _params_for(method: str) -> st.SearchStrategy[Json]:
    shaped: dict[str, st.SearchStrategy[Json]] = {
        "tools/call": _tool_params(),
        "resources/read": st.fixed_dictionaries(
            {
                "uri": st.one_of(
                    st.sampled_from(
                        ["coremetry://server", "fixture://echo/hi", "nope://x", "", "fixture://"]
                    ),
                    st.text(max_size=20),
                )
            }
        ),
        "prompts/get": st.fixed_dictionaries(
            {"name": st.sampled_from(["greeting", "triage_brief", "nope"])},
            optional={"arguments": json_values(4)},
        ),
        "logging/setLevel": st.fixed_dictionaries(
            {"level": st.sampled_from(["debug", "info", "error", "loud", ""])}
        ),
        "initialize": st.fixed_dictionaries(
            {
                "protocolVersion": st.sampled_from([HANDSHAKE, "2024-11-05", "1999-01-01", ""]),
                "capabilities": st.one_of(st.just({}), json_values(3)),
                "clientInfo": st.one_of(st.just({"name": "fuzz", "version": "1"}), json_values(3)),
            }
        ),
    }
    empty: dict[str, Json] = {}
    wrong: st.SearchStrategy[Json] = st.one_of(st.just(empty), json_values(6))
    if method in shaped:
        return st.one_of(shaped[method], wrong)
    return wrong


@st.composite
def _request_object(draw: st.DrawFn) -> dict[str, Json]:
    """A valid-ish JSON-RPC message: request, notification, client response or a near miss."""
    kind = draw(st.sampled_from(["request", "request", "request", "notification", "response"]))
    method: Json
    if kind == "response":
        message: dict[str, Json] = {"jsonrpc": "2.0", "id": draw(_ids())}
        if draw(st.booleans()):
            message["result"] = draw(json_values(4))
        else:
            message["error"] = {"code": draw(st.integers()), "message": draw(st.text(max_size=8))}
        return message
    if kind == "notification":
        method = draw(st.one_of(st.sampled_from(NOTIFICATIONS), st.text(max_size=20)))
    else:
        method = draw(
            st.one_of(
                st.sampled_from(KNOWN_METHODS),
                st.sampled_from(KNOWN_METHODS),
                st.text(max_size=24),
                st.sampled_from(["tools/call/", "Tools/List", "rpc.discover", "notifications/x"]),
            )
        )
    message = {"jsonrpc": "2.0", "method": method}
    if kind == "request":
        message["id"] = draw(_ids())
    if draw(st.integers(0, 9)) > 0:
        message["params"] = draw(_params_for(method))
    # Near misses: a wrong or missing jsonrpc, a method of another type, an extra member.
    twist = draw(st.integers(0, 19))
    if twist == 0:
        message["jsonrpc"] = draw(st.one_of(st.just("1.0"), json_values(1)))
    elif twist == 1:
        del message["jsonrpc"]
    elif twist == 2:
        message["method"] = draw(json_values(2))
    elif twist == 3:
        message[draw(st.text(max_size=6))] = draw(json_values(2))
    return message


def _encode(value: Json, pretty: bool) -> bytes:
    return json.dumps(value, indent=1 if pretty else None, ensure_ascii=pretty).encode()


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A message body: mostly JSON-RPC shapes, the rest broken in every way a body can be."""
    kind = draw(st.integers(0, 99))
    if kind < 55:
        return _encode(draw(_request_object()), draw(st.booleans()))
    if kind < 63:  # a batch
        items = draw(st.lists(st.one_of(_request_object(), json_values(2)), max_size=4))
        return _encode(cast(Json, items), False)
    if kind < 68:  # any JSON value at all
        return _encode(draw(json_values()), False)
    if kind < 76:  # valid JSON cut, or with a byte changed
        whole = _encode(draw(_request_object()), False)
        cut = draw(st.integers(0, max(0, len(whole) - 1)))
        if draw(st.booleans()):
            return whole[:cut]
        position = min(cut, len(whole) - 1)
        return whole[:position] + bytes([draw(st.integers(0, 255))]) + whole[position + 1 :]
    if kind < 80:  # non-UTF-8 inside an otherwise valid request
        raw = draw(st.binary(min_size=1, max_size=8)) + b"\xff\xfe"
        return b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"' + raw + b'"}}'
    if kind < 84:  # random bytes
        return draw(st.binary(max_size=64))
    if kind < 88:  # huge numbers and JSON's non-numbers
        number = draw(
            st.sampled_from(
                [
                    "1e999",
                    "-1e999",
                    "9" * 400,
                    "1" + "0" * 5000,
                    "NaN",
                    "Infinity",
                    "0.1e-99999",
                    "-0",
                    "1.5",
                    "18446744073709551616",
                ]
            )
        )
        where = draw(st.sampled_from(["id", "params", "arg"]))
        if where == "id":
            return f'{{"jsonrpc":"2.0","id":{number},"method":"ping"}}'.encode()
        if where == "params":
            return f'{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{number}}}'.encode()
        return (
            f'{{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            f'"params":{{"name":"echo","arguments":{{"text":{number}}}}}}}'
        ).encode()
    if kind < 92:  # deep nesting
        depth = draw(st.sampled_from([64, 200, 1000, 5000, 20000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        nested = opener * depth + "1" + closer * depth
        where = draw(st.sampled_from(["top", "params", "id", "arguments"]))
        if where == "top":
            return nested.encode()
        if where == "id":
            return f'{{"jsonrpc":"2.0","id":{nested},"method":"ping"}}'.encode()
        if where == "params":
            return f'{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{nested}}}'.encode()
        return (
            '{"jsonrpc":"2.0","id":3,"method":"tools/call",'
            f'"params":{{"name":"echo","arguments":{{"text":"x","deep":{nested}}}}}}}'
        ).encode()
    if kind < 94:  # over the body cap
        padding = MAX_BODY_BYTES + draw(st.integers(1, 4096))
        return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * padding + b'"}}'
    if kind < 96:  # duplicate members, odd whitespace, a BOM, a trailing comma
        return draw(
            st.sampled_from(
                [
                    b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
                    b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"nope"}',
                    b' \t\r\n{"jsonrpc":"2.0","id":1,"method":"ping"} \n',
                    b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}',
                    b'{"jsonrpc":"2.0","id":1,"method":"ping",}',
                    b'{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2}',
                    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
                    b'{"jsonrpc":"2.0","id":1,"method":"ping\\u0000"}',
                    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo\\u0000"}}',
                ]
            )
        )
    return draw(st.sampled_from([b"", b" ", b"null", b"[]", b"{}", b"[[]]", b"[null]", b'""']))


@cache
def _header_edits() -> st.SearchStrategy[HeaderEdit]:
    def edit(name: str, value: str | None, status: int | None, mode: str = "set") -> HeaderEdit:
        return HeaderEdit(name, value, "add" if mode == "add" else "set", status)

    odd_value = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).filter(
        lambda v: v == v.strip()
    )
    return st.one_of(
        st.sampled_from(
            [
                edit("content-type", None, 415),
                edit("content-type", "text/plain", 415),
                edit("content-type", "application/jsonx", 415),
                edit("content-type", "application/json; charset=utf-8", None),
                edit("content-type", "APPLICATION/JSON", None),
                edit("content-type", "application/json", 415, "add"),
                edit("accept", "text/html", 406),
                edit("accept", "image/*;q=1, application/json;q=0", 406),
                edit("accept", "*/*", None),
                edit("accept", "application/json", None),
                edit("accept", "text/event-stream", None),
                edit("accept", None, None),
                edit("accept", "application/json", None, "add"),
                edit("origin", BAD_ORIGIN, 403),
                edit("origin", "null", 403),
                edit("origin", "http://127.0.0.1:9", None),
                edit("origin", "http://localhost", None),
                edit("authorization", None, 401),
                edit("authorization", "Bearer cmk_not_a_token", 401),
                edit("authorization", "Basic YWxpY2U6c2VjcmV0", 401),
                edit("authorization", "Bearer", 401),
                edit("authorization", "", 401),
                edit("mcp-session-id", "abc", None),
                edit("mcp-session-id", "", None),
                edit("mcp-session-id", "x", None, "add"),
                edit("mcp-protocol-version", "1999-01-01", 400),
                edit("mcp-protocol-version", "latest", 400),
                edit("mcp-method", "tools/call", None),
                edit("mcp-name", "echo", None),
                edit("x-forwarded-prefix", "/../x", None),
            ]
        ),
        odd_value.map(lambda v: HeaderEdit("x-fuzz", v, "add", None)),
        odd_value.map(lambda v: HeaderEdit("mcp-session-id", v, "set", None)),
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A fuzz case: a body and, half the time, up to two header edits."""
    body = draw(bodies())
    edits = tuple(draw(st.lists(_header_edits(), max_size=2))) if draw(st.booleans()) else ()
    dropped = {e.name for e in edits if e.mode == "set" and e.value is None}
    if any(e.mode == "add" and e.name in dropped for e in edits):
        # A header dropped then added once is a plain header again; the edits' tags (the
        # status each causes alone) would not add up to the status of what is sent.
        edits = edits[:1]
    return Case(body, edits)


def dress_stateless(case: Case) -> Case:
    """The case as a 2026-07-28 client sends it: a request object gets the per-request
    ``_meta`` (protocol version, client capabilities and info) in its params; other bodies are
    left as they are."""
    if _too_deep(case.body):
        return case
    with suppress(ValueError, RecursionError, UnicodeDecodeError):
        message = json.loads(case.body)
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            params = message.get("params")
            if params is None or isinstance(params, dict):
                params = dict(params or {})
                params["_meta"] = {
                    "io.modelcontextprotocol/protocolVersion": STATELESS,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
                }
                message["params"] = params
                return Case(json.dumps(message).encode(), case.edits, True)
    return case


# ---- what a transport saw ------------------------------------------------------------------


@dataclass
class Observed:
    """What one case got back.

    ``status``: the HTTP status (``None`` on WebSocket and stdio). ``messages``: the JSON-RPC
    answers (each a decoded JSON value: an object, or an array for a batch), server
    notifications and requests left out. ``closed``: the WebSocket close code when the server
    closed the connection instead. ``problem``: something the driver itself saw wrong (an
    answer that is not JSON, a wrong content type, a hang).
    """

    status: int | None = None
    messages: list[Json] = field(default_factory=list)
    closed: int | None = None
    problem: str | None = None


def answer_class(observed: Observed) -> str:
    """A short label for the per-class counts of the bench (``"202"``, ``"-32602"``, …)."""
    if observed.closed is not None:
        return f"ws-close {observed.closed}"
    if observed.problem is not None:
        return "PROBLEM"
    codes: list[str] = []
    for message in observed.messages:
        items = message if isinstance(message, list) else [message]
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("error"), dict):
                error = cast(dict[str, Json], item["error"])
                codes.append(str(error.get("code")))
            else:
                codes.append("result")
    label = "batch " if any(isinstance(m, list) for m in observed.messages) else ""
    label += ",".join(sorted(set(codes))) if codes else "no answer"
    return f"{observed.status} {label}" if observed.status is not None else label


# ---- the oracle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What one JSON-RPC message must get: ``codes`` the error codes allowed (``"result"`` for a
    result), ``ids`` the ids the answer may carry; ``answered=False``: no answer at all."""

    answered: bool
    codes: frozenset[int | str] = frozenset()
    ids: tuple[Json, ...] = ()


NO_ANSWER: Final = Expect(False)
_LOOSE_ERRORS: Final = frozenset({-32602, -32601, -32600, -32001, -32002, -32000, -32020, -32021})
"""What a known method may answer to odd params besides a result (never -32700 nor -32603)."""


def _strict_json(body: bytes) -> tuple[bool, Json]:
    """Decode like a strict JSON parser (UTF-8, RFC 8259: no NaN/Infinity, no BOM)."""

    def refuse(constant: str) -> Json:
        raise ValueError(constant)

    try:
        text = body.decode("utf-8")
        return True, cast(Json, json.loads(text, parse_constant=refuse))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None


def _valid_id(value: Json) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _expect_message(message: Json, in_batch: bool) -> Expect:
    if not isinstance(message, dict):
        return Expect(True, frozenset({-32600}), (None,))
    request_id = message.get("id")
    id_ok = "id" in message and _valid_id(request_id)
    ids: tuple[Json, ...] = (request_id, None) if id_ok else (None,)
    method = message.get("method")
    if "method" not in message:
        if "result" in message or "error" in message:
            if "id" in message and message.get("jsonrpc") == "2.0":
                return NO_ANSWER  # a client response
            # A response without an id, or with a wrong "jsonrpc", is malformed but still a
            # response: a server may drop it or answer it as an invalid request.
            return Expect(True, frozenset({-32600, "none"}), ids)
        return Expect(True, frozenset({-32600}), ids)
    if "id" not in message:
        # A notification: never answered, even a malformed one (JSON-RPC 2.0 §4.1), though a
        # server may answer an invalid one as an invalid request.
        if message.get("jsonrpc") == "2.0" and isinstance(method, str):
            return NO_ANSWER
        return Expect(True, frozenset({-32600, "none"}), (None,))
    if message.get("jsonrpc") != "2.0" or not isinstance(method, str) or not id_ok:
        return Expect(True, frozenset({-32600}), ids)
    if method not in SERVER_METHODS:
        return Expect(True, frozenset({-32601}), (request_id,))
    if in_batch and method == "initialize":
        return Expect(True, frozenset({-32600, -32602, "result"}), ids)
    return Expect(True, _LOOSE_ERRORS | {"result"}, (request_id,))


def expect_body(body: bytes, batch_ok: bool) -> list[Expect] | Expect:
    """The answers ``body`` must get: one :class:`Expect`, or a list for a batch."""
    ok, message = _strict_json(body)
    if not ok:
        # Lone surrogates, duplicate members or a huge exponent can be parsed differently by
        # two correct parsers: those bodies may get -32700 or the answer to what was read.
        return Expect(True, frozenset({-32700}), (None,))
    if isinstance(message, list):
        if not message:
            return Expect(True, frozenset({-32600}), (None,))
        if not batch_ok:
            return Expect(True, frozenset({-32600}), (None,))
        return [_expect_message(item, True) for item in message]
    return _expect_message(message, False)


_BIG_EXPONENT: Final = re.compile(rb"[0-9][eE][+-]?[0-9]{3,}")


def _ambiguous(body: bytes) -> bool:
    """Bodies two correct JSON parsers may read differently (see :func:`expect_body`): lone
    surrogate escapes, huge exponents, repeated members, a byte-order mark."""
    if (
        b"e999" in body
        or b"e-99999" in body
        or body.count(b'"id"') > 1
        or body.count(b'"method"') > 1
        or body.startswith(b"\xef\xbb\xbf")
        or b"0" * 4000 in body  # Python's int() refuses over 4,300 digits; JSON does not
        # An exponent out of a double's range: a limit RFC 8259 §6 allows.
        or _BIG_EXPONENT.search(body) is not None
    ):
        return True
    if b"\\ud" not in body and b"\\uD" not in body:
        return False
    ok, message = _strict_json(body)
    if not ok:
        return False
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True  # a lone surrogate
    return False


def _too_deep(body: bytes) -> bool:
    return body.count(b"[") > 500 or body.count(b"{") > 500


def _check_response(item: Json, expect: Expect) -> str | None:
    if not isinstance(item, dict):
        return f"an answer that is not an object: {item!r:.200}"
    if item.get("jsonrpc") != "2.0" or "id" not in item:
        return f"not a JSON-RPC response: {item!r:.300}"
    has_result, has_error = "result" in item, "error" in item
    if has_result == has_error:
        return f"a response needs exactly one of result/error: {item!r:.300}"
    if has_error:
        error = item["error"]
        if not (
            isinstance(error, dict)
            and isinstance(error.get("code"), int)
            and isinstance(error.get("message"), str)
        ):
            return f"a malformed error object: {item!r:.300}"
        code: int | str = cast(int, error["code"])
        if code == -32603:
            return f"an internal error: {item!r:.500}"
    else:
        code = "result"
    if code not in expect.codes:
        allowed = sorted(str(c) for c in expect.codes)
        return f"answered {code}, expected one of {allowed}: {item!r:.300}"
    if item["id"] not in expect.ids or (
        item["id"] is not None and type(item["id"]) is not type(expect.ids[0])
    ):
        return f"answer id {item['id']!r} for request id(s) {expect.ids!r:.100}"
    return None


def judge_messages(body: bytes, messages: Sequence[Json], batch_ok: bool) -> str | None:
    """Check the JSON-RPC answers to ``body`` (``None`` when right, else what is wrong)."""
    if _too_deep(body) or _ambiguous(body):
        # Whatever a deep or ambiguous body is read as, it gets at most one well-formed answer
        # that is not an internal error.
        for message in messages:
            for item in message if isinstance(message, list) else [message]:
                if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
                    return f"not a JSON-RPC response: {item!r:.300}"
                error = item.get("error")
                if isinstance(error, dict) and error.get("code") == -32603:
                    return f"an internal error: {item!r:.500}"
        return None if len(messages) <= 1 else f"{len(messages)} answers to one body"
    expect = expect_body(body, batch_ok)
    if isinstance(expect, Expect):
        if not expect.answered or (expect.codes == {-32600, "none"} and not messages):
            return None if not messages else f"an answer to a notification: {messages!r:.300}"
        if len(messages) != 1:
            return f"{len(messages)} answers, expected 1"
        return _check_response(messages[0], expect)
    answered = [e for e in expect if e.answered]
    if not answered:
        return None if not messages else f"an answer to a batch of notifications: {messages!r:.300}"
    if len(messages) != 1 or not isinstance(messages[0], list):
        return f"a batch answered with {messages!r:.300}"
    items = messages[0]
    if len(items) < sum(1 for e in answered if "none" not in e.codes) or len(items) > len(answered):
        return f"{len(items)} answers in the batch for {len(answered)} requests"
    for item in items:
        if all(_check_response(item, e) is not None for e in answered):
            why = _check_response(item, answered[0])
            return f"no request in the batch matches {item!r:.300} ({why})"
    return None


def expected_refusal(case: Case, headers: Sequence[tuple[str, str]]) -> int | None:
    """The HTTP status the header edits must cause (the first the server checks), or ``None``."""
    order = (403, 405, 415, 406, 401, 413, 400)
    effective: dict[str, list[HeaderEdit]] = {}
    for edit in case.edits:  # a later "set" of a header undoes the edits before it
        if edit.mode == "set":
            effective[edit.name] = [edit]
        else:
            effective.setdefault(edit.name, []).append(edit)
    accept = effective.get("accept", [])
    if any(e.mode == "add" and e.status is None for e in accept):
        # An acceptable Accept line added after a refusing one: the lines are one list
        # (RFC 9110 §5.3), which now names an acceptable type, so no 406.
        effective["accept"] = [e for e in accept if e.status != 406]
    statuses = {e.status for edits in effective.values() for e in edits if e.status is not None}
    # A repeated Accept stays acceptable; a dropped Accept is "anything".
    for status in order:
        if status in statuses:
            return status
    return None


def judge_http(
    case: Case, body: bytes, observed: Observed, *, batch_ok: bool, session_post: bool = False
) -> str | None:
    """Judge an HTTP answer: the status, then (for 200/4xx with JSON) the JSON-RPC answers.

    ``session_post``: a legacy SSE POST (202 for every body taken; answers on the stream).
    """
    if observed.problem is not None:
        return observed.problem
    status = observed.status
    if status is None or status >= 500:
        return f"HTTP {status}"
    refusal = expected_refusal(case, [])
    if refusal == 400 and len(body) > MAX_BODY_BYTES:
        refusal = None  # the size is checked before the protocol headers
    if refusal == 400 and case.stateless is False and session_post:
        refusal = None  # protocol headers mean nothing on a legacy session POST
    if refusal is not None:
        if status != refusal:
            return f"HTTP {status}, expected {refusal} from the header edits"
        return _check_refusal_body(observed)
    if len(body) > MAX_BODY_BYTES and refusal in (None, 400):
        if status != 413:
            return f"HTTP {status} for a body over the cap, expected 413"
        return _check_refusal_body(observed)
    if session_post:
        if not body.strip():
            return None if status == 400 else f"HTTP {status} for an empty body, expected 400"
        if status != 202:
            return f"HTTP {status} for a session POST, expected 202"
        return judge_messages(body, observed.messages, batch_ok)
    if status == 202:
        if observed.messages:
            return f"202 with answers {observed.messages!r:.200}"
        return judge_messages(body, [], batch_ok)
    if status not in (200, 400, 404):
        return f"HTTP {status} for a JSON-RPC body"
    problem = judge_messages(body, observed.messages, batch_ok)
    if problem is not None:
        return problem
    if status != 200 and len(observed.messages) == 1 and isinstance(observed.messages[0], dict):
        error = observed.messages[0].get("error")
        if not isinstance(error, dict):
            return f"HTTP {status} with a result"
    return None


def _check_refusal_body(observed: Observed) -> str | None:
    """A refusal's body, when it has one, is a JSON-RPC error (or empty)."""
    for message in observed.messages:
        if not (isinstance(message, dict) and isinstance(message.get("error"), dict)):
            return f"a refusal whose body is not a JSON-RPC error: {message!r:.200}"
    return None


# ---- servers -------------------------------------------------------------------------------


@dataclass
class HttpServer:
    """A ``coremetry serve --fixture`` process under test."""

    process: trio.Process
    base: str
    token: str
    data_dir: Path

    @property
    def exited(self) -> bool:
        """Whether the process has ended (a crash: nothing here stops it)."""
        return self.process.poll() is not None


def _make_data_dir(root: Path) -> tuple[Path, Path, str]:
    """A data dir with a viewer service token, and a config file; returns (dir, config, token)."""
    from coremetry.auth import open_identity_store

    data_dir = root / "data"
    with open_identity_store(data_dir) as store:
        token, _info = store.create_token("fuzz", "viewer", None)
    config = root / "fuzz.toml"
    config.write_text(SERVER_CONFIG)
    return data_dir, config, token


def _server_env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "COREMETRY_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}


@asynccontextmanager
async def start_http_server(root: Path) -> AsyncIterator[HttpServer]:
    """Run ``coremetry serve --fixture`` (authentication on) for the block, in ``root``."""
    data_dir, config, token = _make_data_dir(root)
    stderr_path = root / "serve-stderr.log"
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "coremetry",
                "serve",
                "--fixture",
                "--port",
                "0",
                "--data-dir",
                str(data_dir),
                "--config",
                str(config),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_server_env(data_dir),
            cwd=REPO,
        )
    try:
        base = ""
        with trio.fail_after(60):
            while not base:
                await trio.sleep(0.05)
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited: {stderr_path.read_text()}")
                for line in stderr_path.read_text().splitlines():
                    if "listening on " in line:
                        base = line.split("listening on ", 1)[1].strip()
        yield HttpServer(process, base, token, data_dir)
    finally:
        if process.poll() is None:
            process.terminate()
            with trio.move_on_after(15):
                await process.wait()
            if process.poll() is None:
                process.kill()
                await process.wait()


# ---- drivers -------------------------------------------------------------------------------


def _apply(base: Sequence[tuple[str, str]], edits: Sequence[HeaderEdit]) -> list[tuple[str, str]]:
    headers = list(base)
    for edit in edits:
        if edit.mode == "set":
            headers = [(k, v) for k, v in headers if k != edit.name]
            if edit.value is not None:
                headers.append((edit.name, edit.value))
        elif edit.value is not None:
            headers.append((edit.name, edit.value))
    return headers


def _sse_data(text: str) -> list[Json]:
    """The JSON of every ``message`` event (or event without a name) of an SSE body."""
    messages: list[Json] = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
        name = [line[6:].strip() for line in event.split("\n") if line.startswith("event:")]
        if data and (not name or name[0] == "message"):
            messages.append(cast(Json, json.loads("\n".join(data))))
    return messages


def _answers(messages: Sequence[Json]) -> list[Json]:
    """Leave out the server's notifications and requests (objects with a ``method``)."""
    return [m for m in messages if not (isinstance(m, dict) and "method" in m)]


def echo_call(request_id: str, text: str) -> bytes:
    """A normal ``tools/call echo`` request."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}},
        }
    ).encode()


def echo_ok(answer: Json, request_id: str, text: str) -> bool:
    """Whether ``answer`` is the echo tool's result for that request."""
    if not isinstance(answer, dict) or answer.get("id") != request_id:
        return False
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        return False
    content = result.get("content")
    return (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("text") == text
    )


class Driver:
    """One transport: :meth:`send` a case, :meth:`judge` what came back, :meth:`check_alive`."""

    name: str = "?"
    batch_ok: bool = False

    def prepare(self, case: Case) -> Case:
        """The case as this transport's client sends it (the same by default)."""
        return case

    async def send(self, case: Case) -> Observed:
        """Send one case; what came back."""
        raise NotImplementedError

    def judge(self, case: Case, observed: Observed) -> str | None:
        """``None`` when the answer is right, else what is wrong."""
        raise NotImplementedError

    async def check_alive(self, n: int) -> str | None:
        """A normal ``tools/call echo`` on this transport; ``None`` when it answered right."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the connection(s)."""


def header_value(value: str) -> str:
    """An MCP header value (2026-07-28): visible ASCII as is, else ``=?base64?…?=``."""
    if value.isascii() and value.isprintable() and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8", "surrogatepass")).decode() + "?="


class HttpDriver(Driver):
    """Streamable HTTP at ``POST /api/mcp``, in the handshake era or the stateless one."""

    def __init__(self, server: HttpServer, client: httpx.AsyncClient, era: str) -> None:
        self.server = server
        self.client = client
        self.era = era
        self.name = f"http {era}"
        self.url = server.base + "/api/mcp"
        self.auth = f"Bearer {server.token}"

    def _base_headers(self, case: Case) -> list[tuple[str, str]]:
        headers = [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("authorization", self.auth),
            ("mcp-protocol-version", self.era),
        ]
        if case.stateless:
            message = json.loads(case.body)
            headers.append(("mcp-method", header_value(message["method"])))
            params = message.get("params") or {}
            name = (
                params.get("uri") if message["method"] == "resources/read" else params.get("name")
            )
            if message["method"] in ("tools/call", "prompts/get", "resources/read") and isinstance(
                name, str
            ):
                headers.append(("mcp-name", header_value(name)))
        return headers

    def prepare(self, case: Case) -> Case:
        """The case as this era's client sends it (2026-07-28: :func:`dress_stateless`)."""
        return dress_stateless(case) if self.era == STATELESS else case

    async def send(self, case: Case) -> Observed:
        headers = _apply(self._base_headers(case), case.edits)
        response = await self.client.post(
            self.url, content=case.body, headers=[(k.encode(), v.encode()) for k, v in headers]
        )
        return _observe_http(response)

    def judge(self, case: Case, observed: Observed) -> str | None:
        # Batches only at 2025-03-26; with the header dropped, that is the revision.
        dropped = any(e.name == "mcp-protocol-version" and e.value is None for e in case.edits)
        batch_ok = dropped and not case.stateless
        if self._mismatched(case) and observed.status == 400:
            return _check_refusal_body(observed)
        return judge_http(case, case.body, observed, batch_ok=batch_ok)

    @staticmethod
    def _mismatched(case: Case) -> bool:
        """A stateless request whose protocol headers were edited may be a 400 -32020."""
        return case.stateless and any(
            e.name in ("mcp-method", "mcp-name", "mcp-protocol-version") for e in case.edits
        )

    async def check_alive(self, n: int) -> str | None:
        request_id, text = f"alive-{n}", f"still here {n}"
        response = await self.client.post(
            self.url,
            content=echo_call(request_id, text),
            headers={
                "content-type": "application/json",
                "accept": "application/json",
                "authorization": self.auth,
                "mcp-protocol-version": HANDSHAKE,
            },
        )
        observed = _observe_http(response)
        if observed.status != 200 or len(observed.messages) != 1:
            return f"echo after the case: HTTP {observed.status} {observed.messages!r:.200}"
        if not echo_ok(observed.messages[0], request_id, text):
            return f"echo after the case answered {observed.messages[0]!r:.300}"
        return None


def _observe_http(response: httpx.Response) -> Observed:
    observed = Observed(status=response.status_code)
    kind = response.headers.get("content-type", "")
    text = response.text
    try:
        if kind.startswith("text/event-stream"):
            observed.messages = _answers(_sse_data(text))
        elif kind.startswith("application/json"):
            observed.messages = [cast(Json, json.loads(text))] if text else []
        elif response.status_code == 202 and text == "Accepted" and kind.startswith("text/plain"):
            pass  # the legacy SSE POST's answer
        elif text:
            observed.problem = f"202 with a body {text[:200]!r}"
    except ValueError:
        observed.problem = f"an answer that is not JSON: {text[:300]!r}"
    return observed


class _Stream:
    """A receiving side that yields decoded JSON-RPC messages (SSE, WebSocket, stdio)."""

    def __init__(self) -> None:
        self.send_channel, self.receive_channel = trio.open_memory_channel[Json](1000)
        self.closed: int | None = None

    async def collect(
        self, sentinel_id: str, expected: int, text: str, grace_s: float = 2.0
    ) -> tuple[list[Json], str | None]:
        """Messages up to the sentinel echo's answer, then up to ``expected`` late ones.

        Returns the answers (sentinel excluded) and a problem with the sentinel (or ``None``).
        """
        answers: list[Json] = []
        sentinel_problem: str | None = "no answer to the echo after the case"
        with trio.move_on_after(30):
            async for message in self.receive_channel:
                if isinstance(message, dict) and message.get("id") == sentinel_id:
                    sentinel_problem = (
                        None if echo_ok(message, sentinel_id, text) else f"echo: {message!r:.300}"
                    )
                    break
                if not (isinstance(message, dict) and "method" in message):
                    answers.append(message)
        if sentinel_problem is None and len(answers) < expected:
            with trio.move_on_after(grace_s):
                async for message in self.receive_channel:
                    if not (isinstance(message, dict) and "method" in message):
                        answers.append(message)
                    if len(answers) >= expected:
                        break
        return answers, sentinel_problem


def _expected_count(body: bytes, batch_ok: bool) -> int:
    """How many answers to wait for after the sentinel (late answers of concurrent calls)."""
    if _too_deep(body):
        return 1
    expect = expect_body(body, batch_ok)
    if isinstance(expect, Expect):
        return 1 if expect.answered and "none" not in expect.codes else 0
    return 1 if any(e.answered for e in expect) else 0


class SseDriver(Driver):
    """Legacy HTTP+SSE: one session (``GET /api/mcp/sse``), cases POSTed to its endpoint."""

    name = "sse"

    def __init__(self, server: HttpServer, client: httpx.AsyncClient) -> None:
        self.server = server
        self.client = client
        self.auth = f"Bearer {server.token}"
        self.endpoint = ""
        self.stream = _Stream()
        self.n = 0
        self._cancel = trio.CancelScope()
        # The stream has a client of its own: closing it closes the stream's connection, which
        # a cancelled read leaves open.
        self._stream_client = httpx.AsyncClient(timeout=httpx.Timeout(60, read=None))

    async def open(self, nursery: trio.Nursery) -> None:
        """Open the session and run ``initialize`` on it."""
        self.stream = _Stream()
        self._cancel = trio.CancelScope()
        endpoint: str = await nursery.start(self._read)
        self.endpoint = self.server.base + endpoint
        init = {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        }
        await self._post(json.dumps(init).encode(), self._headers())
        async for message in self.stream.receive_channel:
            if isinstance(message, dict) and message.get("id") == "init":
                break
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self._post(json.dumps(note).encode(), self._headers())

    async def _read(self, task_status: trio.TaskStatus[str]) -> None:
        with self._cancel:
            async with self._stream_client.stream(
                "GET",
                self.server.base + "/api/mcp/sse",
                headers={"accept": "text/event-stream", "authorization": self.auth},
            ) as response:
                buffer = ""
                started = False
                async for chunk in response.aiter_text():
                    buffer += chunk.replace("\r\n", "\n")
                    while "\n\n" in buffer:
                        event, buffer = buffer.split("\n\n", 1)
                        lines = event.split("\n")
                        name = next((x[6:].strip() for x in lines if x.startswith("event:")), "")
                        data = "\n".join(x[5:].lstrip() for x in lines if x.startswith("data:"))
                        if name == "endpoint" and not started:
                            started = True
                            task_status.started(data)
                        elif data:
                            await self.stream.send_channel.send(cast(Json, json.loads(data)))
        await self.stream.send_channel.aclose()

    def _headers(self) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("authorization", self.auth)]

    async def _post(self, body: bytes, headers: Sequence[tuple[str, str]]) -> httpx.Response:
        return await self.client.post(
            self.endpoint, content=body, headers=[(k.encode(), v.encode()) for k, v in headers]
        )

    async def send(self, case: Case) -> Observed:
        self.n += 1
        edits = [e for e in case.edits if e.name not in ("accept",)]
        response = await self._post(case.body, _apply(self._headers(), edits))
        observed = _observe_http(response)
        answers: list[Json] = []
        if response.status_code == 202:
            # The answers ride the stream; the sentinel echo marks where they end.
            sentinel, text = f"alive-sse-{self.n}", f"sse {self.n}"
            await self._post(echo_call(sentinel, text), self._headers())
            answers, problem = await self.stream.collect(
                sentinel, _expected_count(case.body, False), text
            )
            if problem is not None:
                observed.problem = problem
            observed.messages = answers
        return observed

    def judge(self, case: Case, observed: Observed) -> str | None:
        edits = tuple(e for e in case.edits if e.name != "accept")
        # Protocol headers are the session's business on a legacy POST: only the edge's
        # refusals (403, 415, 401) and the body cap apply.
        kept = tuple(
            e
            if e.name not in ("mcp-protocol-version",)
            else HeaderEdit(e.name, e.value, e.mode, None)
            for e in edits
        )
        return judge_http(
            Case(case.body, kept, case.stateless),
            case.body,
            observed,
            batch_ok=False,
            session_post=True,
        )

    async def check_alive(self, n: int) -> str | None:
        sentinel, text = f"alive-sse-check-{n}", f"sse check {n}"
        response = await self._post(echo_call(sentinel, text), self._headers())
        if response.status_code != 202:
            return f"echo POST: HTTP {response.status_code}"
        _answers_before, problem = await self.stream.collect(sentinel, 0, text, grace_s=0)
        return problem

    async def aclose(self) -> None:
        self._cancel.cancel()
        await self._stream_client.aclose()


class WsDriver(Driver):
    """WebSocket at ``/api/mcp/ws`` (subprotocol ``mcp``), one message per text frame."""

    name = "websocket"

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.ws: WebSocketConnection | None = None
        self.stream = _Stream()
        self.n = 0
        self._nursery: trio.Nursery | None = None
        self._cancel = trio.CancelScope()

    async def open(self, nursery: trio.Nursery) -> None:
        """Connect (again) and start reading."""
        self._nursery = nursery
        self.stream = _Stream()
        ready = trio.Event()
        nursery.start_soon(self._run, ready)
        await ready.wait()

    async def _run(self, ready: trio.Event) -> None:
        host, port = self.server.base.removeprefix("http://").rsplit(":", 1)
        with self._cancel:
            # The TCP stream is ours to close: open_websocket_url left the socket of a
            # connection the server had closed (1003, 1009) to the garbage collector.
            stream = await trio.open_tcp_stream(host, int(port))
            try:
                async with trio.open_nursery() as reader:
                    ws = await wrap_client_stream(
                        reader,
                        stream,
                        f"{host}:{port}",
                        "/api/mcp/ws",
                        subprotocols=["mcp"],
                        extra_headers=[(b"authorization", f"Bearer {self.server.token}".encode())],
                        max_message_size=16 * MAX_BODY_BYTES,
                    )
                    self.ws = ws
                    ready.set()
                    try:
                        while True:
                            message = await ws.get_message()
                            await self.stream.send_channel.send(cast(Json, json.loads(message)))
                    finally:
                        await ws.aclose()
                        reader.cancel_scope.cancel()
            except* ConnectionClosed as group:  # raised in the reader's nursery
                closed = group.exceptions[0]
                assert isinstance(closed, ConnectionClosed)
                self.stream.closed = closed.reason.code if closed.reason is not None else 1006
            finally:
                ready.set()
                self.ws = None
                self.stream.send_channel.close()
                await stream.aclose()  # closes the socket first, even when cancelled

    async def _reopen(self) -> None:
        assert self._nursery is not None
        self._cancel.cancel()
        self._cancel = trio.CancelScope()
        await self.open(self._nursery)

    async def send(self, case: Case) -> Observed:
        self.n += 1
        if self.ws is None:
            await self._reopen()
        assert self.ws is not None
        observed = Observed()
        try:
            text = case.body.decode("utf-8")
        except UnicodeDecodeError:
            # Not UTF-8 cannot be a text frame: sent as a binary frame, which the server refuses
            # by closing with 1003 (unsupported data).
            await self.ws.send_message(case.body)
            with trio.move_on_after(10):
                async for _ in self.stream.receive_channel:
                    pass
            observed.closed = self.stream.closed
            await self._reopen()
            return observed
        sentinel, echo_text = f"alive-ws-{self.n}", f"ws {self.n}"
        try:
            await self.ws.send_message(text)
            await self.ws.send_message(echo_call(sentinel, echo_text).decode())
        except ConnectionClosed:
            pass
        answers, problem = await self.stream.collect(
            sentinel, _expected_count(case.body, False), echo_text
        )
        observed.messages = answers
        if self.stream.closed is not None:
            observed.closed = self.stream.closed
            await self._reopen()
        elif problem is not None:
            observed.problem = problem
        return observed

    def judge(self, case: Case, observed: Observed) -> str | None:
        if observed.closed is not None:
            if len(case.body) > MAX_BODY_BYTES and observed.closed == 1009:
                return None
            if observed.closed in (1003, 1007) and not _is_utf8(case.body):
                return None
            return f"the server closed the WebSocket with {observed.closed}"
        if len(case.body) > MAX_BODY_BYTES:
            return "a message over the cap was not refused with 1009"
        if observed.problem is not None:
            return observed.problem
        return judge_messages(case.body, observed.messages, False)

    async def check_alive(self, n: int) -> str | None:
        if self.ws is None:
            await self._reopen()
        assert self.ws is not None
        sentinel, text = f"alive-ws-check-{n}", f"ws check {n}"
        await self.ws.send_message(echo_call(sentinel, text).decode())
        _before, problem = await self.stream.collect(sentinel, 0, text, grace_s=0)
        return problem

    async def aclose(self) -> None:
        self._cancel.cancel()


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def stdio_line(body: bytes) -> bytes:
    """The line stdio carries for a body: newlines (never inside a message) become spaces."""
    return body.replace(b"\r", b" ").replace(b"\n", b" ")


class StdioDriver(Driver):
    """``coremetry stdio --fixture``: newline-delimited JSON-RPC on the process's pipes."""

    name = "stdio"

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stream = _Stream()
        self.n = 0

    @property
    def exited(self) -> bool:
        """Whether the process has ended."""
        return self.process.poll() is not None

    async def read(self) -> None:
        """Decode stdout lines into the stream until the pipe closes."""
        assert self.process.stdout is not None
        buffer = b""
        async with self.stream.send_channel:
            async for chunk in self.process.stdout:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        await self.stream.send_channel.send(cast(Json, json.loads(line)))

    async def write(self, line: bytes) -> None:
        """Write one line to the process."""
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line + b"\n")

    async def send(self, case: Case) -> Observed:
        self.n += 1
        line = stdio_line(case.body)
        sentinel, text = f"alive-stdio-{self.n}", f"stdio {self.n}"
        await self.write(line)
        await self.write(echo_call(sentinel, text))
        expected = _expected_count(line, False) if line.strip() else 0
        answers, problem = await self.stream.collect(sentinel, expected, text)
        return Observed(messages=answers, problem=problem)

    def judge(self, case: Case, observed: Observed) -> str | None:
        if observed.problem is not None:
            return observed.problem
        line = stdio_line(case.body)
        if not line.strip():
            return (
                None
                if not observed.messages
                else f"an answer to a blank line: {observed.messages!r:.200}"
            )
        return judge_messages(line, observed.messages, False)

    async def check_alive(self, n: int) -> str | None:
        sentinel, text = f"alive-stdio-check-{n}", f"stdio check {n}"
        await self.write(echo_call(sentinel, text))
        _before, problem = await self.stream.collect(sentinel, 0, text, grace_s=0)
        return problem


@asynccontextmanager
async def start_stdio(root: Path, nursery: trio.Nursery) -> AsyncIterator[StdioDriver]:
    """Run ``coremetry stdio --fixture`` (a viewer token) with a reader task in ``nursery``."""
    data_dir, config, token = _make_data_dir(root)
    env = {**_server_env(data_dir), "COREMETRY_TOKEN": token}
    stderr = (root / "stdio-stderr.log").open("wb")
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "coremetry", "stdio", "--fixture", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=env,
        cwd=REPO,
    )
    driver = StdioDriver(process)
    nursery.start_soon(driver.read)
    init = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    try:
        await driver.write(json.dumps(init).encode())
        async for message in driver.stream.receive_channel:
            if isinstance(message, dict) and message.get("id") == "init":
                break
        await driver.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield driver
    finally:
        if process.stdin is not None:
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await process.stdin.aclose()
        with trio.move_on_after(15):
            await process.wait()
        if process.poll() is None:
            process.kill()
            await process.wait()
        stderr.close()


# ---- running a batch of cases --------------------------------------------------------------


@dataclass
class Tally:
    """Counts of one transport's run."""

    sent: int = 0
    classes: dict[str, int] = field(default_factory=dict)
    server_errors: int = 0
    failures: list[str] = field(default_factory=list)


async def run_cases(
    driver: Driver,
    examples: Sequence[Case],
    tally: Tally,
    *,
    alive_every: int = 1,
    exited: Callable[[], bool] = lambda: False,
    max_failures: int = 50,
    on_failure: Callable[[str], None] | None = None,
) -> None:
    """Send every case, judge it, and check the transport still serves an echo.

    Failures (with the case) go to ``tally.failures``; a process that ended stops the run.
    """
    for i, generated in enumerate(examples):
        case = driver.prepare(generated)
        try:
            with trio.fail_after(60):
                observed = await driver.send(case)
        except (trio.TooSlowError, httpx.HTTPError, ConnectionClosed, OSError) as exc:
            observed = Observed(problem=f"{type(exc).__name__}: {exc}")
        tally.sent += 1
        label = answer_class(observed)
        tally.classes[label] = tally.classes.get(label, 0) + 1
        if observed.status is not None and observed.status >= 500:
            tally.server_errors += 1
        problem = driver.judge(case, observed)
        if problem is None and alive_every and (i + 1) % alive_every == 0:
            try:
                with trio.fail_after(60):
                    problem = await driver.check_alive(i)
            except (trio.TooSlowError, httpx.HTTPError, ConnectionClosed, OSError) as exc:
                problem = f"echo after the case: {type(exc).__name__}: {exc}"
        if problem is not None:
            tally.failures.append(f"[{driver.name}] {problem}\n    case: {case.describe()}")
            if on_failure is not None:
                on_failure(tally.failures[-1])
        if exited():
            tally.failures.append(f"[{driver.name}] the server process exited")
            return
        if len(tally.failures) >= max_failures:
            return


def _given_case(
    strategy: st.SearchStrategy[Case],
) -> Callable[[Callable[[Case], None]], Callable[[], None]]:
    from hypothesis import given

    # Typed adapter: hypothesis types the decorated function as Callable[..., None], which
    # mypy's disallow_any_decorated rejects (as in tests/mcp/test_dispatch_jsonrpc.py).
    return given(strategy)


def generate(strategy: st.SearchStrategy[Case], n: int, seed: int) -> list[Case]:
    """``n`` examples of ``strategy``, the same for the same seed (Hypothesis, generate phase)."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as hypothesis_seed

    out: list[Case] = []

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @_given_case(strategy)
    def collect(case: Case) -> None:
        out.append(case)

    # Applied as a call, not as a decorator: its signature is untyped (Callable[..., ...]).
    seeded = hypothesis_seed(seed)(collect)
    seeded()
    return out[:n]


def generate_cases(n: int, seed: int) -> list[Case]:
    """``n`` examples of :func:`cases` for ``seed`` (a plain function: it can run in a worker
    process, which a Hypothesis strategy object cannot be sent to)."""
    return generate(cases(), n, seed)


def tally_report(tallies: Mapping[str, Tally]) -> str:
    """Per-transport counts and answer classes, as lines."""
    lines = []
    for name, tally in tallies.items():
        classes = ", ".join(f"{k}: {v}" for k, v in sorted(tally.classes.items()))
        lines.append(f"{name}: {tally.sent} bodies; {classes}")
    return "\n".join(lines)


def temp_root() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for a server's data dir and logs."""
    return tempfile.TemporaryDirectory(prefix="coremetry-fuzz-")
