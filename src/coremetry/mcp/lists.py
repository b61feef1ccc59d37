"""The ``*/list`` methods: what a caller's role may use, a page at a time.

Contract: a list shows a caller only the entries its role may use (``min_role``), in
registration order, :data:`page_size` at a time with an opaque cursor
(:mod:`coremetry.mcp.pagination`); fields a revision does not have are omitted (``title`` and
``outputSchema`` before 2025-06-18, tool ``annotations`` before 2025-03-26). ``tools/list``
always serves the long ``description``. In the 2026-07-28 era results carry ``ttlMs``.
"""

from msgspec import UNSET, Raw, Struct

from .calls import Connection
from .framing import Reply, Request, result_reply
from .gate import role_satisfies
from .pagination import page
from .registry import Registry, Tool
from .versions import V2025_03_26, V2025_06_18, V2025_11_25, at_least
from .wire import (
    JsonObject,
    ListParams,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PromptArgumentInfo,
    PromptInfo,
    ResourceInfo,
    ResourceTemplateInfo,
    ToolInfo,
)


class Listings:
    """The handlers of the four ``*/list`` methods over one registry.

    Args:
        registry: the entries listed.
        page_size: items per page.
        list_ttl_ms: ``ttlMs`` of 2026-07-28 list results, in milliseconds.
        server_meta: the ``_meta`` of every stateless result.

    Attributes:
        task_execution: tools list their ``execution.taskSupport`` (2025-11-25) — set while
            the server runs tasks (:meth:`~coremetry.mcp.Server.tasks_running`).
    """

    def __init__(
        self, registry: Registry, *, page_size: int, list_ttl_ms: int, server_meta: JsonObject
    ) -> None:
        self._registry = registry
        self._page_size = page_size
        self._list_ttl_ms = list_ttl_ms
        self._server_meta = server_meta
        self.task_execution = False

    def list_tools(self, request: Request, params: ListParams, conn: Connection) -> Reply:
        """``tools/list``: the tools the caller's role may use, one page."""
        visible = [
            t for t in self._registry.tools.values() if role_satisfies(conn.caller.role, t.min_role)
        ]
        shown, next_cursor = page("tools", visible, params.cursor, self._page_size)
        version = request.version
        infos = [_tool_info(t, version) for t in shown]
        if self.task_execution and version == V2025_11_25:
            for info, tool in zip(infos, shown, strict=True):
                if tool.task_support != "forbidden":
                    info.execution = {"taskSupport": tool.task_support}
        result = ListToolsResult(tools=infos, next_cursor=next_cursor)
        return result_reply(self._server_meta, request, result, cache=self._list_ttl_ms)

    def list_resources(self, request: Request, params: ListParams, conn: Connection) -> Reply:
        """``resources/list``: the static resources the caller may read, one page."""
        visible = [
            r
            for r in self._registry.resources.values()
            if role_satisfies(conn.caller.role, r.min_role)
        ]
        shown, next_cursor = page("resources", visible, params.cursor, self._page_size)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            ResourceInfo(
                uri=r.uri,
                name=r.name,
                title=r.title if titled and r.title else UNSET,
                description=r.description or UNSET,
                mime_type=r.mime_type,
            )
            for r in shown
        ]
        result = ListResourcesResult(resources=infos, next_cursor=next_cursor)
        return result_reply(self._server_meta, request, result, cache=self._list_ttl_ms)

    def list_templates(self, request: Request, params: ListParams, conn: Connection) -> Reply:
        """``resources/templates/list``: the templates the caller may read, one page."""
        visible = [
            t
            for t in self._registry.templates.values()
            if role_satisfies(conn.caller.role, t.min_role)
        ]
        shown, next_cursor = page("resources/templates", visible, params.cursor, self._page_size)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            ResourceTemplateInfo(
                uri_template=t.uri_template,
                name=t.name,
                title=t.title if titled and t.title else UNSET,
                description=t.description or UNSET,
                mime_type=t.mime_type,
            )
            for t in shown
        ]
        result = ListResourceTemplatesResult(
            resource_templates=infos,
            next_cursor=next_cursor,
        )
        return result_reply(self._server_meta, request, result, cache=self._list_ttl_ms)

    def list_prompts(self, request: Request, params: ListParams, conn: Connection) -> Reply:
        """``prompts/list``: the prompts the caller may use, one page."""
        visible = [
            p
            for p in self._registry.prompts.values()
            if role_satisfies(conn.caller.role, p.min_role)
        ]
        shown, next_cursor = page("prompts", visible, params.cursor, self._page_size)
        titled = at_least(request.version, V2025_06_18)
        infos = [
            PromptInfo(
                name=p.name,
                title=p.title if titled and p.title else UNSET,
                description=p.description or UNSET,
                arguments=[
                    PromptArgumentInfo(
                        name=a.name,
                        title=a.title if titled and a.title else UNSET,
                        description=a.description or UNSET,
                        required=a.required,
                    )
                    for a in p.arguments
                ]
                or UNSET,
            )
            for p in shown
        ]
        result = ListPromptsResult(prompts=infos, next_cursor=next_cursor)
        return result_reply(self._server_meta, request, result, cache=self._list_ttl_ms)


def _tool_info(tool: Tool[Struct], version: str) -> ToolInfo:
    titled = at_least(version, V2025_06_18)
    return ToolInfo(
        name=tool.name,
        title=tool.title if titled and tool.title else UNSET,
        description=tool.description,
        input_schema=Raw(tool.input_schema_json),
        output_schema=(
            Raw(tool.output_schema_json)
            if titled and tool.output_schema_json is not None
            else UNSET
        ),
        annotations=tool.annotations if at_least(version, V2025_03_26) else UNSET,
    )
