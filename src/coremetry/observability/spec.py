"""``ToolSpec``: everything about one tool, declared once.

A spec names the tool, its argument Struct, its handler (a method of
:class:`~.tools.ObservabilityTools`), its full and compact descriptions, the role it needs, its
annotations and its result type. Everything a client sees of a tool is derived from its spec:
the served ``tools/list`` entry and the MCP registration (:meth:`ToolSpec.tool`), the REST
listing and calls (which go through that registration), and the catalog that
``coremetry tools --catalog compact|full`` prints (:mod:`.catalog`, which also holds the list of
specs). The input schema is generated from the argument Struct (:func:`input_schema`: one
``type`` per argument, nested Structs inlined), the output schema from the result Struct
(:func:`~.results.output_schema`).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec

from coremetry.mcp import CallContext, Tool, schema_for
from coremetry.mcp.registry import TaskSupport, ToolOutput
from coremetry.mcp.wire import ToolAnnotations

from .budget import JsonObject, Shaped, fit
from .ranges import RangeArgs, range_description
from .results import Result, output_schema
from .tools import ObservabilityTools

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "READ_ONLY",
    "ToolMethod",
    "ToolSpec",
    "input_schema",
    "single_typed",
    "title_of",
]

ArgsT = TypeVar("ArgsT", bound=msgspec.Struct, covariant=True)
"""Covariant, as :class:`coremetry.mcp.Tool`'s: a ``ToolSpec[ListServicesArgs]`` sits in a list
of ``ToolSpec[Struct]``; the arguments only flow from the decoder into the handler."""

ToolMethod = Callable[[ObservabilityTools, ArgsT, CallContext], Awaitable[Shaped]]
"""A tool handler as declared: an (unbound) method of :class:`~.tools.ObservabilityTools`, e.g.
``ObservabilityTools.list_services``, returning its result before the output budget is applied."""

MAX_DESCRIPTION_BYTES: Final = 1500
"""Upper bound of any tool's full description, in UTF-8 bytes."""

READ_ONLY: Final = ToolAnnotations(read_only_hint=True, open_world_hint=False)
"""The annotations of every tool today: read-only, closed world (it reads only our store)."""


def title_of(name: str) -> str:
    """A tool's human-readable title: ``get_service_map`` -> ``Get service map``."""
    return name.replace("_", " ").capitalize()


_JSON_TYPES: Final = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _enum_type(values: list[object]) -> str | None:
    """The one JSON type of an enum's values, if they share one."""
    kinds = set()
    for value in values:
        kinds.add(next((name for py, name in _JSON_TYPES if isinstance(value, py)), None))
    return kinds.pop() if len(kinds) == 1 else None


def _inline(node: object, defs: JsonObject) -> object:
    """``node`` with every ``$ref`` to ``#/$defs/…`` replaced by its definition (no docstring)."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = dict(_as_object(defs[ref.removeprefix("#/$defs/")]))
        target.pop("title", None)
        target.pop("description", None)  # the Struct's docstring, written for developers
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **rest}, defs)
    return {str(k): _inline(v, defs) for k, v in node.items()}


def _as_object(value: object) -> JsonObject:
    assert isinstance(value, dict), value
    return {str(k): v for k, v in value.items()}


def single_typed(node: object) -> object:
    """A schema in which every value has exactly one ``type`` (the form strict clients accept).

    - ``anyOf`` alternatives of type ``null`` are dropped (an optional argument is simply not
      ``required``; the Struct still decodes an explicit ``null`` where it did), and so is a
      ``default`` of ``null``;
    - of the remaining alternatives the first is served: it is the advertised form, and later
      ones are accepted on input for compatibility only (e.g. the ``{key: value}`` map of
      :data:`~.tools.Filters`);
    - an ``enum`` gets the ``type`` of its values.
    """
    if isinstance(node, list):
        return [single_typed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: JsonObject = {str(k): single_typed(v) for k, v in node.items()}
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if kept:
            del out["anyOf"]
            out = {**_as_object(kept[0]), **out}
    if "default" in out and out["default"] is None:
        del out["default"]
    enum = out.get("enum")
    if isinstance(enum, list) and "type" not in out:
        kind = _enum_type(enum)
        if kind is not None:
            out = {"type": kind, **out}
    return out


def input_schema(args: type[msgspec.Struct]) -> JsonObject:
    """The served input schema: generated from the Struct, without the Struct's docstring.

    Nested Structs are inlined (no ``$defs``/``$ref``, which Gemini's function declarations
    do not take) and every property has exactly one ``type`` (:func:`single_typed`). For a
    windowed tool (a :class:`~.ranges.RangeArgs`), the ``range`` property's description names
    the tool's own default window (:attr:`~.ranges.RangeArgs.default_range`, the value the
    handler uses).
    """
    generated = schema_for(args)
    defs = _as_object(generated.pop("$defs", {}))
    schema = _as_object(single_typed(_inline(generated, defs)))
    schema.pop("description", None)
    properties = schema.get("properties")
    if issubclass(args, RangeArgs) and isinstance(properties, dict):
        window = properties.get("range")
        if isinstance(window, dict):
            window["description"] = range_description(args.default_range)
    return schema


_A = TypeVar("_A", bound=msgspec.Struct)


def _fitted(
    method: ToolMethod[_A], tools: ObservabilityTools, budget_bytes: int
) -> Callable[[_A, CallContext], Awaitable[ToolOutput]]:
    """``method`` bound to ``tools``, its result passed through :func:`~.budget.fit`."""

    async def handler(args: _A, ctx: CallContext) -> ToolOutput:
        return fit(await method(tools, args, ctx), budget_bytes)

    return handler


@dataclass(frozen=True, kw_only=True)
class ToolSpec(Generic[ArgsT]):
    """One tool, declared once (module docstring).

    Attributes:
        name: the tool name, ``[A-Za-z0-9_]`` (its title is derived: :func:`title_of`).
        args: the argument Struct; ``inputSchema`` is generated from it (:func:`input_schema`)
            and ``arguments`` decode into it (a failure is ``bad_args`` naming the field).
        handler: the method that answers a call (:data:`ToolMethod`); its result passes through
            :func:`~.budget.fit` with the configured output budget.
        description: the full text ``tools/list`` serves (what it returns, cost, what not to
            invent, which tool next; at most :data:`MAX_DESCRIPTION_BYTES`).
        short_description: one line for chat-style catalogs (``--catalog compact``).
        min_role: ``""`` (any authenticated identity, the viewer floor), ``"editor"`` or
            ``"admin"``; enforced by the gate, and ``tools/list`` hides what a caller may not use.
        annotations: behaviour hints served with the tool (:data:`READ_ONLY`).
        output: the type of the result a client receives (``structuredContent``), a
            :class:`~.results.Result` Struct; the served ``outputSchema`` is generated from it
            (:func:`~.results.output_schema`: the result, the budget's minimal object, or the
            tool-error object).
        task_support: whether a call may run as an MCP task (:mod:`coremetry.mcp.tasks`):
            ``"optional"`` for the store-heavy tools (long windows, wide scans), whose task
            deadline is ``mcp.task_max_budget_s`` instead of the call budget.
    """

    name: str
    args: type[ArgsT]
    handler: ToolMethod[ArgsT]
    description: str
    short_description: str
    min_role: str = ""
    output: type[Result]
    annotations: ToolAnnotations = READ_ONLY
    task_support: TaskSupport = "forbidden"

    @property
    def title(self) -> str:
        """The human-readable title (:func:`title_of` of the name)."""
        return title_of(self.name)

    def input_schema(self) -> JsonObject:
        """The served input schema (:func:`input_schema` of :attr:`args`)."""
        return input_schema(self.args)

    def output_schema(self) -> JsonObject:
        """The served output schema (:func:`~.results.output_schema` of :attr:`output`)."""
        return output_schema(self.output)

    def tool(self, tools: ObservabilityTools, budget_bytes: int) -> Tool[ArgsT]:
        """The MCP registration of this tool over ``tools``, every result fit to ``budget_bytes``.

        Args:
            tools: the handlers' instance (its store, clock and problems).
            budget_bytes: the output budget of every result, in bytes of compact JSON.

        Returns:
            The :class:`~coremetry.mcp.Tool` to register on a server.
        """
        return Tool(
            self.name,
            self.description,
            self.args,
            _fitted(self.handler, tools, budget_bytes),
            short_description=self.short_description,
            annotations=self.annotations,
            title=self.title,
            min_role=self.min_role,
            input_schema=self.input_schema(),
            output_schema=self.output_schema(),
            task_support=self.task_support,
        )
