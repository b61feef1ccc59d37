"""Bad tool arguments and params name what is accepted: the values of an enumerated field, the
fields of an object that got an unknown one (issue 21).

Through the dispatcher: a ``tools/call`` whose argument is not one of a ``Literal``'s or an
``Enum``'s values answers a ``bad_args`` result whose detail names the field *and* the values it
accepts (when there are few); a bad ``logging/setLevel`` level is ``-32602`` naming the levels.
"""

import enum
from typing import Annotated, Literal

import msgspec
import pytest
from test_dispatch_support import LATEST_HANDSHAKE, STATELESS, Session, error_of, text, tool_error

from coremetry.mcp import CallContext, Server, Tool

INVALID_PARAMS = -32602
SEVERITIES = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")


class Unit(enum.Enum):
    SECONDS = "s"
    MILLISECONDS = "ms"


class Matcher(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    op: Literal["=", "!=", "=~"]


Many = Literal[
    "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11", "a12", "a13", "a14"
]


class SearchArgs(msgspec.Struct, forbid_unknown_fields=True):
    # Shaped like search_logs' argument (Annotated with a description, optional).
    min_severity: Annotated[
        Literal["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"] | None,
        msgspec.Meta(description="Only records at or above this severity."),
    ] = None
    unit: Unit = Unit.SECONDS
    matchers: list[Matcher] = []
    many: Many = "a1"
    limit: int = 10


async def _search(args: SearchArgs, ctx: CallContext) -> str:
    return "ok"


def _server() -> Server:
    server = Server("t", "1")
    server.register_tool(Tool("search", "Searches.", SearchArgs, _search))
    return server


async def _detail(arguments: dict[str, object], revision: str = LATEST_HANDSHAKE) -> str:
    session = Session(_server())
    if revision != STATELESS:
        await session.initialize(revision)
    result = await session.call_tool("search", arguments, stateless=revision == STATELESS)
    error = tool_error(result)
    assert error["error"] == "bad_args"
    assert error["retryable"] is False
    return text(error["detail"])


@pytest.mark.parametrize("revision", [LATEST_HANDSHAKE, STATELESS])
async def test_bad_literal_names_the_field_and_the_accepted_values(revision: str) -> None:
    detail = await _detail({"min_severity": "error"}, revision)
    assert "Invalid enum value 'error'" in detail
    assert "$.min_severity" in detail
    assert "accepted: " + ", ".join(repr(value) for value in SEVERITIES) in detail


async def test_bad_enum_member_lists_the_enum_values() -> None:
    detail = await _detail({"unit": "minutes"})
    assert "$.unit" in detail
    assert "accepted: 's', 'ms'" in detail


async def test_bad_literal_inside_a_list_of_structs_lists_that_fields_values() -> None:
    detail = await _detail({"matchers": [{"key": "a", "op": "="}, {"key": "b", "op": "~"}]})
    assert "$.matchers[1].op" in detail
    assert "accepted: '=', '!=', '=~'" in detail


async def test_many_accepted_values_are_counted_not_listed() -> None:
    detail = await _detail({"many": "zz"})
    assert "$.many" in detail
    assert "14 accepted values" in detail
    assert "'a13'" not in detail


async def test_a_non_enumerated_field_keeps_the_plain_message() -> None:
    detail = await _detail({"limit": "ten"})
    assert "Expected `int`, got `str`" in detail
    assert "$.limit" in detail
    assert "accepted" not in detail


async def test_bad_log_level_is_invalid_params_naming_the_levels() -> None:
    session = Session(_server())
    await session.initialize(LATEST_HANDSHAKE)
    message = await session.request("logging/setLevel", {"level": "verbose"})
    error = error_of(message)
    assert error["code"] == INVALID_PARAMS
    assert "'verbose'" in text(error["message"])
    assert "'debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'" in (
        text(error["message"])
    )


async def test_unknown_argument_names_the_accepted_fields() -> None:
    # A misnamed argument ('id' for 'problem_id') is answered with the names the tool takes.
    detail = await _detail({"severity": "ERROR"})
    assert "unknown field `severity`" in detail
    assert "accepted fields: min_severity, unit, matchers, many, limit" in detail


async def test_unknown_field_of_a_nested_object_names_that_objects_fields() -> None:
    detail = await _detail({"matchers": [{"key": "a", "op": "=", "value": "b"}]})
    assert "unknown field `value`" in detail
    assert "$.matchers[0]" in detail
    assert "accepted fields: key, op)" in detail
