"""``ToolSpec``: everything about one tool, declared once.

A spec names the tool, its argument Struct, its handler (a method of
:class:`~.tools.ObservabilityTools`), its full and compact descriptions, the role it needs, its
annotations and its result type. Everything a client sees of a tool is derived from its spec:
the served ``tools/list`` entry and the MCP registration (:meth:`ToolSpec.tool`), the REST
listing and calls (which go through that registration), and the catalog that
``coremetry tools --catalog compact|full`` prints (:mod:`.catalog`, which also holds the list of
specs). The input schema is generated from the argument Struct (:func:`input_schema`).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec

from coremetry.mcp import CallContext, Tool, schema_for
from coremetry.mcp.registry import ToolOutput
from coremetry.mcp.wire import ToolAnnotations

from .budget import JsonObject, Shaped, fit
from .ranges import RangeArgs, range_description
from .tools import ObservabilityTools

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "READ_ONLY",
    "ToolMethod",
    "ToolSpec",
    "input_schema",
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


def input_schema(args: type[msgspec.Struct]) -> JsonObject:
    """The served input schema: generated from the Struct, without the Struct's docstring.

    For a windowed tool (a :class:`~.ranges.RangeArgs`), the ``range`` property's description
    names the tool's own default window (:attr:`~.ranges.RangeArgs.default_range`, the value
    the handler uses).
    """
    schema = schema_for(args)
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
        output: the type of the result a client receives (``structuredContent``): today every
            tool answers a JSON object (:data:`~.budget.JsonObject`).
    """

    name: str
    args: type[ArgsT]
    handler: ToolMethod[ArgsT]
    description: str
    short_description: str
    min_role: str = ""
    annotations: ToolAnnotations = READ_ONLY
    output: type[JsonObject] = JsonObject

    @property
    def title(self) -> str:
        """The human-readable title (:func:`title_of` of the name)."""
        return title_of(self.name)

    def input_schema(self) -> JsonObject:
        """The served input schema (:func:`input_schema` of :attr:`args`)."""
        return input_schema(self.args)

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
        )
