"""Shared helpers of the dispatcher tests (``test_dispatch_*``), plus tests of the helpers.

Every message a test gets back from the server (replies and the notifications captured through
``Connection(send=...)``) goes through :func:`check`, which runs ``tests/conftest.py``'s
``check_emitted`` for the revision in use.

One deliberate adaptation: JSON-RPC 2.0 §5 requires ``"id": null`` on an error answering a
request whose id could not be read (parse errors, invalid requests), while the MCP schemas type
``id`` as ``string | integer`` in every revision (2025-11-25+ make it optional instead). For such
a message :func:`check` asserts the JSON-RPC shape (``id`` present and ``null``, an ``error``, no
``result``) and validates everything else against the revision's schema with a placeholder id.
"""

import importlib
import json
from collections.abc import Callable, Mapping
from typing import Final, cast

import jsonschema
import pytest

from coremetry.mcp import Caller, Connection, Reply, Server
from coremetry.server import build_mcp_server

JsonObj = dict[str, object]
RequestId = int | str

HANDSHAKE_REVISIONS: Final[tuple[str, ...]] = (
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
)
LATEST_HANDSHAKE: Final = "2025-11-25"
STATELESS: Final = "2026-07-28"
META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPS: Final = "io.modelcontextprotocol/clientCapabilities"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"

_CheckEmitted = Callable[[object, str, str | None], None]


def _check_emitted() -> _CheckEmitted:
    # tests/conftest.py is importable as ``conftest`` under pytest (rootdir conftest, no
    # packages); loading it by name keeps mypy happy when it checks this file on its own.
    module = importlib.import_module("conftest")
    return cast(_CheckEmitted, module.check_emitted)


def obj(value: object) -> JsonObj:
    """Narrow a decoded JSON value to an object (fails the test otherwise)."""
    assert isinstance(value, dict), f"expected a JSON object, got {value!r}"
    return cast(JsonObj, value)


def arr(value: object) -> list[object]:
    """Narrow a decoded JSON value to an array (fails the test otherwise)."""
    assert isinstance(value, list), f"expected a JSON array, got {value!r}"
    return cast(list[object], value)


def text(value: object) -> str:
    """Narrow a decoded JSON value to a string (fails the test otherwise)."""
    assert isinstance(value, str), f"expected a JSON string, got {value!r}"
    return value


def decode(body: bytes) -> object:
    """Decode one body the server emitted; it must be UTF-8 JSON."""
    decoded: object = json.loads(body.decode("utf-8"))
    return decoded


def check(message: object, revision: str, method: str | None = None) -> JsonObj:
    """Validate one emitted message with ``check_emitted`` (see the module docstring)."""
    msg = obj(message)
    if "id" in msg and msg["id"] is None:
        assert "error" in msg, msg
        assert "result" not in msg, msg
        placeholder = dict(msg)
        placeholder["id"] = 0
        _check_emitted()(placeholder, revision, method)
    else:
        _check_emitted()(msg, revision, method)
    return msg


def encode(message: object) -> bytes:
    """Encode a request as a client would (UTF-8, non-ASCII characters kept raw)."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8")


def stateless_meta(**extra: object) -> JsonObj:
    """The two ``_meta`` keys every 2026-07-28 request carries, plus ``extra``."""
    meta: JsonObj = {META_VERSION: STATELESS, META_CAPS: {}}
    meta.update(extra)
    return meta


def error_of(message: JsonObj) -> JsonObj:
    """The ``error`` member of an error response (fails if it is a result)."""
    assert "result" not in message, message
    error = obj(message.get("error"))
    assert isinstance(error.get("code"), int), error
    assert isinstance(error.get("message"), str), error
    return error


def result_of(message: JsonObj) -> JsonObj:
    """The ``result`` member of a success response (fails if it is an error)."""
    assert "error" not in message, message
    return obj(message.get("result"))


def tool_error(result: JsonObj) -> JsonObj:
    """The tool-error object in the text of an ``isError`` ``tools/call`` result."""
    assert result.get("isError") is True, result
    content = arr(result["content"])
    assert len(content) == 1, content
    block = obj(content[0])
    assert block.get("type") == "text", block
    return obj(json.loads(text(block["text"])))


def tool_text(result: JsonObj) -> str:
    """The single text block of a successful ``tools/call`` result."""
    assert result.get("isError", False) is False, result
    content = arr(result["content"])
    assert len(content) == 1, content
    block = obj(content[0])
    assert block.get("type") == "text", block
    return text(block["text"])


class Session:
    """One client connection to a server, recording everything the server sends.

    ``events`` keeps replies and notifications in the order the server emitted them.
    """

    def __init__(
        self,
        server: Server | None = None,
        *,
        role: str = "viewer",
        protocol_version: str | None = None,
        can_notify: bool = True,
    ) -> None:
        self.server = server if server is not None else build_mcp_server(fixture=True)
        self.revision = protocol_version or LATEST_HANDSHAKE
        self.notify_revision = self.revision
        self.notifications: list[JsonObj] = []
        self.events: list[tuple[str, JsonObj]] = []
        self.conn = Connection(
            caller=Caller(subject="u", role=role),
            transport="test",
            send=self._capture if can_notify else None,
            protocol_version=protocol_version,
        )
        self._next_id = 1000

    async def _capture(self, data: bytes) -> None:
        message = check(decode(data), self.notify_revision)
        assert "id" not in message, f"only notifications go through send here: {message}"
        self.notifications.append(message)
        self.events.append(("notification", message))

    def fresh_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def record(self, reply: Reply, revision: str, method: str | None) -> JsonObj:
        """Decode and validate a single-message reply and add it to ``events``."""
        message = check(decode(reply.body), revision, method)
        self.events.append(("reply", message))
        return message

    async def initialize(self, revision: str) -> JsonObj:
        """Send ``initialize`` for ``revision``; validated at the negotiated revision."""
        reply = await self.server.handle(
            encode(
                {
                    "jsonrpc": "2.0",
                    "id": self.fresh_id(),
                    "method": "initialize",
                    "params": {
                        "protocolVersion": revision,
                        "capabilities": {},
                        "clientInfo": {"name": "dispatch-tests", "version": "1"},
                    },
                }
            ),
            self.conn,
        )
        assert reply is not None
        negotiated = text(result_of(obj(decode(reply.body)))["protocolVersion"])
        self.revision = negotiated
        self.notify_revision = negotiated
        message = self.record(reply, negotiated, "initialize")
        await self.notify("notifications/initialized")
        return message

    async def notify(self, method: str, params: JsonObj | None = None) -> None:
        message: JsonObj = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        assert await self.server.handle(encode(message), self.conn) is None

    def build(
        self,
        method: str,
        params: JsonObj | None = None,
        *,
        request_id: RequestId | None = None,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> bytes:
        """Encode a request; ``stateless`` adds the 2026-07-28 ``_meta`` keys."""
        merged: JsonObj = dict(params) if params is not None else {}
        all_meta: JsonObj = stateless_meta() if stateless else {}
        if meta is not None:
            all_meta.update(meta)
        if all_meta:
            merged["_meta"] = all_meta
        message: JsonObj = {
            "jsonrpc": "2.0",
            "id": request_id if request_id is not None else self.fresh_id(),
            "method": method,
        }
        if params is not None or all_meta:
            message["params"] = merged
        return encode(message)

    async def request_reply(
        self,
        method: str,
        params: JsonObj | None = None,
        *,
        request_id: RequestId | None = None,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> tuple[JsonObj, int]:
        """Send one request; return the validated answer and the HTTP status."""
        revision = STATELESS if stateless else self.revision
        self.notify_revision = revision
        data = self.build(method, params, request_id=request_id, stateless=stateless, meta=meta)
        reply = await self.server.handle(data, self.conn)
        assert reply is not None, f"no answer to {method}"
        return self.record(reply, revision, method), reply.http_status

    async def request(
        self,
        method: str,
        params: JsonObj | None = None,
        *,
        request_id: RequestId | None = None,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> JsonObj:
        """Send one request; return the validated answer."""
        message, _status = await self.request_reply(
            method, params, request_id=request_id, stateless=stateless, meta=meta
        )
        return message

    async def result(
        self,
        method: str,
        params: JsonObj | None = None,
        *,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> JsonObj:
        """Send one request that must succeed; return its ``result``."""
        return result_of(await self.request(method, params, stateless=stateless, meta=meta))

    async def error(
        self,
        method: str,
        params: JsonObj | None = None,
        *,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> JsonObj:
        """Send one request that must fail; return its ``error``."""
        return error_of(await self.request(method, params, stateless=stateless, meta=meta))

    async def call_tool(
        self,
        name: str,
        arguments: JsonObj | None = None,
        *,
        stateless: bool = False,
        meta: Mapping[str, object] | None = None,
    ) -> JsonObj:
        """``tools/call`` that must get a result (possibly ``isError``); return the result."""
        params: JsonObj = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.result("tools/call", params, stateless=stateless, meta=meta)


# ---- the helpers must be able to fail --------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"jsonrpc": "1.0", "id": 1, "result": {}}, id="wrong-jsonrpc"),
        pytest.param({"jsonrpc": "2.0", "id": 1.5, "result": {}}, id="float-id"),
        pytest.param(
            {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, id="code"
        ),
        pytest.param({"jsonrpc": "2.0", "id": None, "result": {}}, id="null-id-result"),
    ],
)
def test_check_rejects_malformed_messages(message: JsonObj) -> None:
    with pytest.raises((AssertionError, jsonschema.ValidationError)):
        check(message, LATEST_HANDSHAKE)


def test_check_validates_results_against_the_method() -> None:
    bad_list = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "x"}]}}
    with pytest.raises(jsonschema.ValidationError):
        check(bad_list, LATEST_HANDSHAKE, "tools/list")
    no_result_type = {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}
    with pytest.raises((AssertionError, jsonschema.ValidationError)):
        check(no_result_type, STATELESS, "tools/list")


def test_check_accepts_null_id_errors_only() -> None:
    parse_error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse"}}
    for revision in (*HANDSHAKE_REVISIONS, STATELESS):
        assert check(parse_error, revision) is parse_error
