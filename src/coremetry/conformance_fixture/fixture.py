"""Fixture entries for transport tests, end-to-end tests and benchmarks.

Registered only by :func:`register_fixture` (``coremetry stdio --fixture``); never part of the
production registry. Every entry behaves deterministically:

- tools: ``echo(text)``, ``sleep_ms(ms)`` (reports progress every 10 ms of sleep, honours
  cancellation, read budget 2 s), ``big_output(size_bytes)``, ``fail(kind)`` (raises the tool-error
  class named), ``admin_only()`` (``min_role="admin"``), ``log_levels()`` (one log message per
  level);
- resources: ``fixture://info`` (static JSON) and the template ``fixture://echo/{text}``;
- prompts: ``greet(name, style?)`` with completion of ``name``.
"""

from collections.abc import Mapping, Sequence
from typing import Final, Literal

import msgspec
import trio

from coremetry.mcp import (
    BackendUnavailable,
    BadArgs,
    CallContext,
    DeadlineExceeded,
    NotFound,
    Prompt,
    PromptArgument,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
)
from coremetry.mcp.wire import LOG_LEVELS

SLEEP_BUDGET_S: Final = 2.0
"""Read budget of ``sleep_ms``, in seconds: a longer sleep is a ``timeout``."""

GREET_NAMES: Final[tuple[str, ...]] = ("ada", "alan", "grace", "linus", "margaret")


class EchoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``echo``."""

    text: str


class SleepArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``sleep_ms``: how long to sleep, in milliseconds (0..600000)."""

    ms: int = msgspec.field(default=0)


class BigOutputArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``big_output``: the size of the text to return, in bytes (0..16 MiB)."""

    size_bytes: int


class FailArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``fail``: which tool-error class to raise."""

    kind: Literal["timeout", "backend_unavailable", "bad_args", "not_found", "internal"]


class NoArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """No arguments."""


async def _echo(args: EchoArgs, ctx: CallContext) -> str:
    return args.text


async def _sleep(args: SleepArgs, ctx: CallContext) -> str:
    if not 0 <= args.ms <= 600_000:
        raise BadArgs("ms must be between 0 and 600000")
    slept_ms = 0  # whole milliseconds, so progress is exact and strictly increasing
    while slept_ms < args.ms:
        step_ms = min(10, args.ms - slept_ms)
        await trio.sleep(step_ms / 1000.0)
        slept_ms += step_ms
        await ctx.report_progress(slept_ms, total=args.ms, message="sleeping")
    return f"slept {args.ms} ms"


async def _big(args: BigOutputArgs, ctx: CallContext) -> str:
    if not 0 <= args.size_bytes <= 16 * 1024 * 1024:
        raise BadArgs("size_bytes must be between 0 and 16777216")
    return "x" * args.size_bytes


async def _fail(args: FailArgs, ctx: CallContext) -> str:
    if args.kind == "timeout":
        raise DeadlineExceeded("the fixture backend took too long")
    if args.kind == "backend_unavailable":
        raise BackendUnavailable("the fixture backend is down")
    if args.kind == "bad_args":
        raise BadArgs("the fixture rejects these arguments")
    if args.kind == "not_found":
        raise NotFound("no such fixture object")
    raise RuntimeError("fixture bug: /srv/secret/path.py leaked password=hunter2")


async def _admin_only(args: NoArgs, ctx: CallContext) -> str:
    return "admin secret"


async def _log_levels(args: NoArgs, ctx: CallContext) -> str:
    for level in LOG_LEVELS:
        await ctx.log(level, {"level": level}, logger="fixture")
    return "logged"


async def _info(uri: str, ctx: CallContext) -> str:
    return msgspec.json.encode({"fixture": True, "uri": uri}).decode()


async def _echo_resource(uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
    return msgspec.json.encode({"text": variables["text"]}).decode()


async def _greet(arguments: Mapping[str, str], ctx: CallContext) -> str:
    style = arguments.get("style", "plain")
    return f"Say hello to {arguments['name']} in a {style} style."


async def _complete_name(name: str, value: str, context: Mapping[str, str]) -> Sequence[str]:
    if name != "name":
        return []
    return [n for n in GREET_NAMES if n.startswith(value.lower())]


def register_fixture(server: Server) -> None:
    """Register every fixture entry on ``server`` (see the module docstring)."""
    server.register_tool(
        Tool(
            "echo",
            "Return the text argument unchanged. A fixture for transport tests.",
            EchoArgs,
            _echo,
            short_description="Echo text back.",
        )
    )
    server.register_tool(
        Tool(
            "sleep_ms",
            "Sleep for ms milliseconds, reporting progress every 10 ms; read budget 2 s "
            "(as a task: the server's task budget).",
            SleepArgs,
            _sleep,
            short_description="Sleep, with progress.",
            read_budget_s=SLEEP_BUDGET_S,
            task_support="optional",
        )
    )
    server.register_tool(
        Tool(
            "big_output",
            "Return a text of size_bytes bytes (for payload-size tests and benchmarks).",
            BigOutputArgs,
            _big,
            short_description="Return a large text.",
        )
    )
    server.register_tool(
        Tool(
            "fail",
            "Fail with the tool-error class named by kind.",
            FailArgs,
            _fail,
            short_description="Fail on purpose.",
        )
    )
    server.register_tool(
        Tool(
            "admin_only",
            "A tool only admins may call (role-gate tests).",
            NoArgs,
            _admin_only,
            short_description="Admins only.",
            min_role="admin",
        )
    )
    server.register_tool(
        Tool(
            "log_levels",
            "Send one notifications/message at every RFC 5424 level.",
            NoArgs,
            _log_levels,
            short_description="Log at every level.",
        )
    )
    server.register_resource(
        Resource("fixture://info", "fixture-info", _info, description="Static fixture resource.")
    )
    server.register_resource_template(
        ResourceTemplate(
            "fixture://echo/{text}",
            "fixture-echo",
            _echo_resource,
            description="Echoes the path segment back as JSON.",
        )
    )
    server.register_prompt(
        Prompt(
            "greet",
            "Ask the model to greet someone.",
            _greet,
            arguments=[
                PromptArgument(name="name", description="who to greet", required=True),
                PromptArgument(name="style", description="plain or pirate"),
            ],
            completer=_complete_name,
        )
    )
