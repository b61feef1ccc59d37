"""Registry entries: tools, resources, resource templates and prompts (the domain types).

Each entry carries its ``min_role`` (``""`` = any authenticated identity, ``"editor"``,
``"admin"``): metadata only — the call gate enforces it, and the list methods show a caller only
the entries its role may use (``shared/DESIGN.md`` §3).

Tools declare their arguments as a msgspec Struct; the ``inputSchema`` that ``tools/list`` serves
is generated from that Struct (one source of truth), and a request's ``arguments`` are decoded
with it (a failure is a ``bad_args`` tool error that names the field). When a schema needs
keywords msgspec cannot generate (``if``/``then``/``else``, ``allOf``, ``$anchor``, ...), a tool
may pass an explicit ``input_schema``: it is served verbatim, and the arguments are still
decoded with the Struct.

:class:`Registry` holds the entries of one server: a duplicate name (or URI, or template) logs a
warning and the last registration wins; iteration is in registration order.
"""

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Generic, Literal, TypeVar

import msgspec
from msgspec import Struct

from .context import CallContext
from .gate import role_satisfies
from .uri_template import UriTemplate, compile_template
from .wire import (
    CallToolResult,
    Content,
    GetPromptResult,
    JsonObject,
    PromptMessage,
    ResourceContents,
    ToolAnnotations,
)

log = logging.getLogger("coremetry.mcp")

ArgsT = TypeVar("ArgsT", bound=Struct, covariant=True)
"""Covariant so that a ``Tool[EchoArgs]`` registers where a ``Tool[Struct]`` is expected; the
arguments only flow from the decoder into the handler, never in from outside."""


class InputRequired(Struct, frozen=True, kw_only=True):
    """A handler's answer "I need client input first" (2026-07-28 MRTR, ``basic/patterns/mrtr``).

    ``input_requests`` maps keys of the handler's choosing to request objects
    (``{"method": "elicitation/create", "params": {...}}``, ``sampling/createMessage``,
    ``roots/list``); ``request_state`` is state to get back on the retry — seal it with
    :meth:`CallContext.seal_state` when it matters (the client is untrusted). The client retries
    the same request with ``inputResponses`` under the same keys
    (:attr:`CallContext.input_responses`). Only valid in the stateless era and only for
    ``tools/call``, ``prompts/get`` and ``resources/read``.
    """

    input_requests: Mapping[str, JsonObject] | None = None
    request_state: str | None = None


ToolOutput = CallToolResult | InputRequired | str | Struct | JsonObject | Sequence[Content]
"""What a tool handler may return.

- :class:`~coremetry.mcp.wire.CallToolResult`: sent as is (the handler owns the shape);
- ``str``: one text block;
- :class:`InputRequired`: ask the client for input first (2026-07-28 only);
- a msgspec ``Struct`` or a JSON object: ``structuredContent`` (2025-06-18+) plus the same JSON
  as a text block (for older revisions and clients that read only text);
- a sequence of content blocks: sent as ``content``.
"""

ToolHandler = Callable[[ArgsT, CallContext], Awaitable[ToolOutput]]
"""``async def handler(args: ArgsStruct, ctx: CallContext) -> ToolOutput``."""

ResourceOutput = InputRequired | str | bytes | Sequence[ResourceContents]
"""What a resource handler may return: text (sent with the entry's ``mime_type``), bytes
(base64 ``blob``), or explicit contents."""

ResourceHandler = Callable[[str, CallContext], Awaitable[ResourceOutput]]
"""``async def read(uri: str, ctx: CallContext) -> ResourceOutput``."""

TemplateHandler = Callable[[str, Mapping[str, str], CallContext], Awaitable[ResourceOutput]]
"""``async def read(uri, variables, ctx)``; ``variables`` are the decoded template values."""

PromptOutput = GetPromptResult | InputRequired | Sequence[PromptMessage] | str
"""What a prompt handler may return (a ``str`` is one user text message)."""

PromptHandler = Callable[[Mapping[str, str], CallContext], Awaitable[PromptOutput]]
"""``async def render(arguments, ctx)``; required arguments are checked before the call."""

Completer = Callable[[str, str, Mapping[str, str]], Awaitable[Sequence[str]]]
"""``async def complete(argument_name, partial_value, resolved_arguments) -> values`` for
``completion/complete``; at most 100 values are sent."""

DEFAULT_READ_BUDGET_S: Final = 30.0

TaskSupport = Literal["forbidden", "optional", "required"]
"""Whether a tool may run as a task (2025-11-25 ``execution.taskSupport``; the 2026-07-28 tasks
extension keeps the three values): never, when the client can take one, or always."""
"""Default per-call read budget in seconds (the server maximum may shorten it)."""


def schema_for(args_type: type[Struct]) -> JsonObject:
    """Generate a tool ``inputSchema`` from an arguments Struct.

    The schema is JSON Schema 2020-12 (MCP 2025-11-25 default dialect) with ``type: "object"``
    at the top (the MCP schema requires it); nested Structs stay under ``$defs``.

    Args:
        args_type: a msgspec Struct class.

    Returns:
        The schema as a JSON object.

    Raises:
        TypeError: ``args_type`` has fields msgspec cannot describe.
    """
    (ref,), components = msgspec.json.schema_components([args_type], ref_template="#/$defs/{name}")
    name = str(ref["$ref"]).rsplit("/", 1)[-1]
    top: JsonObject = dict(components.pop(name))
    top.pop("title", None)
    if components:
        top["$defs"] = components
    return top


def param_headers_of(schema: JsonObject) -> dict[str, str]:
    """The arguments an input schema mirrors into HTTP headers (SEP-2243 ``x-mcp-header``).

    Returns:
        ``{argument: header name suffix}``: a client sends the argument's value in the header
        ``Mcp-Param-<suffix>`` too (2026-07-28 Streamable HTTP), and the server checks that
        the two agree.
    """
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    return {
        str(name): spec["x-mcp-header"]
        for name, spec in properties.items()
        if isinstance(spec, dict) and isinstance(spec.get("x-mcp-header"), str)
    }


class Tool(Generic[ArgsT]):
    """A tool: a named, read-budgeted operation a model may call (MCP ``server/tools``).

    Args:
        name: unique name, 1-128 chars of ``[A-Za-z0-9_.-]`` (2025-11-25 guidance).
        description: the long text ``tools/list`` always serves (what it returns, cost, what not
            to invent, which tool to use next).
        args: the msgspec Struct its arguments decode into; the input schema is generated.
        handler: ``async def handler(args, ctx) -> ToolOutput``.
        min_role: ``""`` (viewer floor), ``"editor"`` or ``"admin"``.
        short_description: a compact line for chat-style catalogs (see :meth:`chat_description`).
        read_budget_s: this tool's deadline in seconds; the server maximum and the client's
            ``_meta["coremetry/timeout_ms"]`` may shorten it, never lengthen it.
        annotations: behaviour hints; tools default to ``readOnlyHint: true``.
        title: a human-readable title (2025-06-18+).
        output_schema: a JSON Schema for ``structuredContent``, if the tool guarantees one.
        input_schema: an explicit JSON Schema served as ``inputSchema`` instead of the one
            generated from ``args`` — for keywords msgspec cannot generate (conditionals,
            composition, ``$anchor``, a ``$schema`` dialect). It must be an object schema
            (``"type": "object"``). ``arguments`` are still decoded with ``args``, so the Struct
            must accept every value the schema accepts (and should reject what it rejects).
        task_support: whether a call may run as a task (:mod:`coremetry.mcp.tasks`): a task's
            deadline is the server's task budget instead of ``read_budget_s``.
        input_before_task: 2026-07-28, a ``"required"``/``"optional"`` tool that gathers client
            input (MRTR) before its long part: a call carrying no ``inputResponses`` runs
            synchronously (its ``input_required`` answer goes back at once); the retry carrying
            the answers becomes the task.

    Raises:
        ValueError: an empty name or description, a non-positive budget, or an
            ``input_schema`` whose ``type`` is not ``"object"``.
    """

    def __init__(
        self,
        name: str,
        description: str,
        args: type[ArgsT],
        handler: ToolHandler[ArgsT],
        *,
        task_support: TaskSupport = "forbidden",
        input_before_task: bool = False,
        min_role: str = "",
        short_description: str = "",
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
        annotations: ToolAnnotations | None = None,
        title: str | None = None,
        output_schema: JsonObject | None = None,
        input_schema: JsonObject | None = None,
    ) -> None:
        if not name:
            raise ValueError("tool name must not be empty")
        if not description:
            raise ValueError(f"tool {name!r}: description must not be empty")
        if read_budget_s <= 0:
            raise ValueError(f"tool {name!r}: read_budget_s must be positive")
        if input_schema is not None and input_schema.get("type") != "object":
            raise ValueError(f'tool {name!r}: input_schema must have "type": "object"')
        self.name = name
        self.description = description
        self.args = args
        self.handler = handler
        self.min_role = min_role
        self.short_description = short_description
        self.read_budget_s = read_budget_s
        self.annotations = (
            annotations if annotations is not None else ToolAnnotations(read_only_hint=True)
        )
        self.title = title
        self.input_schema: JsonObject = (
            schema_for(args) if input_schema is None else dict(input_schema)
        )
        self.output_schema = output_schema
        self.task_support: TaskSupport = task_support
        # SEP-2243 (2026-07-28): arguments mirrored into ``Mcp-Param-<name>`` HTTP headers.
        self.param_headers: dict[str, str] = param_headers_of(self.input_schema)
        self.input_before_task = input_before_task
        self.decoder: msgspec.json.Decoder[ArgsT] = msgspec.json.Decoder(args)
        self.input_schema_json: bytes = msgspec.json.encode(self.input_schema)
        self.output_schema_json: bytes | None = (
            msgspec.json.encode(output_schema) if output_schema is not None else None
        )

    def bind(self, arguments: bytes) -> Callable[[CallContext], Awaitable[ToolOutput]]:
        """Decode a request's raw ``arguments`` JSON and bind them to the handler.

        Args:
            arguments: the JSON object from ``params.arguments`` (``b"{}"`` when absent).

        Returns:
            ``run(ctx)``, which awaits the handler with the decoded arguments.

        Raises:
            msgspec.ValidationError: an argument has the wrong type or a required one is
                missing; the message names the field (``at `$.field```).
            msgspec.DecodeError: ``arguments`` is not JSON.
        """
        args = self.decoder.decode(arguments)
        handler = self.handler

        def run(ctx: CallContext) -> Awaitable[ToolOutput]:
            return handler(args, ctx)

        return run

    def chat_description(self) -> str:
        """The compact description for chat catalogs; falls back to ``description``."""
        return self.short_description or self.description

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, min_role={self.min_role!r})"


class Resource:
    """A static resource at a fixed URI (MCP ``server/resources``).

    Args:
        uri: the resource's URI (RFC 3986).
        name: a short name.
        handler: ``async def read(uri, ctx) -> ResourceOutput``.
        description: what it holds.
        mime_type: the MIME type of its text (default ``application/json``).
        min_role: ``""`` (viewer floor), ``"editor"`` or ``"admin"``.
        title: a human-readable title (2025-06-18+).
        read_budget_s: the read's deadline in seconds.
    """

    def __init__(
        self,
        uri: str,
        name: str,
        handler: ResourceHandler,
        *,
        description: str = "",
        mime_type: str = "application/json",
        min_role: str = "",
        title: str | None = None,
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
    ) -> None:
        if not uri:
            raise ValueError("resource uri must not be empty")
        self.uri = uri
        self.name = name
        self.handler = handler
        self.description = description
        self.mime_type = mime_type
        self.min_role = min_role
        self.title = title
        self.read_budget_s = read_budget_s

    def __repr__(self) -> str:
        return f"Resource(uri={self.uri!r}, min_role={self.min_role!r})"


class ResourceTemplate:
    """A family of resources addressed by an RFC 6570 level-1 URI template.

    Args:
        uri_template: e.g. ``coremetry://trace/{trace_id}``; each placeholder matches one
            path segment (traversal never matches).
        name: a short name.
        handler: ``async def read(uri, variables, ctx) -> ResourceOutput``.
        description: what a resource of this family holds.
        mime_type: the MIME type of its text (default ``application/json``).
        min_role: applies to every URI the template matches.
        title: a human-readable title.
        read_budget_s: the read's deadline in seconds.
        completer: suggests values for a placeholder (``completion/complete``).

    Raises:
        ValueError: the template is not a valid level-1 template.
    """

    def __init__(
        self,
        uri_template: str,
        name: str,
        handler: TemplateHandler,
        *,
        description: str = "",
        mime_type: str = "application/json",
        min_role: str = "",
        title: str | None = None,
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
        completer: Completer | None = None,
    ) -> None:
        self.template: UriTemplate = compile_template(uri_template)
        self.uri_template = uri_template
        self.name = name
        self.handler = handler
        self.description = description
        self.mime_type = mime_type
        self.min_role = min_role
        self.title = title
        self.read_budget_s = read_budget_s
        self.completer = completer

    def __repr__(self) -> str:
        return f"ResourceTemplate(uri_template={self.uri_template!r}, min_role={self.min_role!r})"


class PromptArgument(Struct, frozen=True, kw_only=True):
    """One named string argument of a prompt."""

    name: str
    description: str = ""
    required: bool = False
    title: str = ""


class Prompt:
    """A prompt template a client can render (MCP ``server/prompts``).

    Args:
        name: unique name.
        description: what the prompt is for.
        handler: ``async def render(arguments, ctx) -> PromptOutput``; it is only called once
            every required argument is present.
        arguments: the declared arguments.
        min_role: ``""`` (viewer floor), ``"editor"`` or ``"admin"``.
        title: a human-readable title.
        read_budget_s: the render's deadline in seconds (prompts may fetch data).
        completer: suggests argument values (``completion/complete``).
    """

    def __init__(
        self,
        name: str,
        description: str,
        handler: PromptHandler,
        *,
        arguments: Sequence[PromptArgument] = (),
        min_role: str = "",
        title: str | None = None,
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
        completer: Completer | None = None,
    ) -> None:
        if not name:
            raise ValueError("prompt name must not be empty")
        self.name = name
        self.description = description
        self.handler = handler
        self.arguments: tuple[PromptArgument, ...] = tuple(arguments)
        self.min_role = min_role
        self.title = title
        self.read_budget_s = read_budget_s
        self.completer = completer

    def __repr__(self) -> str:
        return f"Prompt(name={self.name!r}, min_role={self.min_role!r})"


_ArgsT = TypeVar("_ArgsT", bound=Struct)


class Registry:
    """The tools, resources, resource templates and prompts of one server, by key.

    Keys: a tool's or prompt's ``name``, a resource's ``uri``, a template's ``uri_template``.
    Registering a key again logs a warning and replaces the entry (the last one wins), keeping
    its place in the order.
    """

    def __init__(self) -> None:
        self.tools: dict[str, Tool[Struct]] = {}
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, ResourceTemplate] = {}
        self.prompts: dict[str, Prompt] = {}

    def register_tool(self, tool: Tool[_ArgsT]) -> None:
        """Register a tool; a duplicate name logs a warning and the last registration wins."""
        if tool.name in self.tools:
            log.warning("tool %r registered twice; the last registration wins", tool.name)
        self.tools[tool.name] = tool

    def register_resource(self, resource: Resource) -> None:
        """Register a static resource; a duplicate URI logs a warning and the last one wins."""
        if resource.uri in self.resources:
            log.warning("resource %r registered twice; the last registration wins", resource.uri)
        self.resources[resource.uri] = resource

    def register_resource_template(self, template: ResourceTemplate) -> None:
        """Register a resource template; a duplicate template string: warning, last one wins."""
        if template.uri_template in self.templates:
            log.warning(
                "resource template %r registered twice; the last registration wins",
                template.uri_template,
            )
        self.templates[template.uri_template] = template

    def register_prompt(self, prompt: Prompt) -> None:
        """Register a prompt; a duplicate name logs a warning and the last registration wins."""
        if prompt.name in self.prompts:
            log.warning("prompt %r registered twice; the last registration wins", prompt.name)
        self.prompts[prompt.name] = prompt

    def visible_counts(self, role: str) -> dict[str, int]:
        """How many entries of each kind a caller with ``role`` sees in the list methods.

        Returns:
            ``{"tools": n, "resources": n, "resource_templates": n, "prompts": n}``.
        """
        ok = role_satisfies
        return {
            "tools": sum(ok(role, t.min_role) for t in self.tools.values()),
            "resources": sum(ok(role, r.min_role) for r in self.resources.values()),
            "resource_templates": sum(ok(role, t.min_role) for t in self.templates.values()),
            "prompts": sum(ok(role, p.min_role) for p in self.prompts.values()),
        }

    def find_resource(
        self, uri: str
    ) -> tuple[Resource | ResourceTemplate, Mapping[str, str]] | None:
        """The entry serving ``uri`` and its template variables; a static resource wins.

        Templates are tried in registration order; ``None`` when nothing matches.
        """
        resource = self.resources.get(uri)
        if resource is not None:
            return resource, {}
        for template in self.templates.values():
            variables = template.template.match(uri)
            if variables is not None:
                return template, variables
        return None
