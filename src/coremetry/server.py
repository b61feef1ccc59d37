"""Assembly of the MCP server: which entries the production registry holds.

Later issues add the HTTP app, the store and the observability tools here; today the server
carries the fixture entries only when asked (``--fixture``), and always the ``coremetry://server``
resource that says what this server is and what it serves.
"""

import msgspec

from coremetry import __version__
from coremetry.mcp import CallContext, Resource, Server, versions

INSTRUCTIONS = (
    "Coremetry exposes a system's telemetry (traces, logs, metrics, detected problems, deploys). "
    "Start from summaries, then drill down; every tool is read-only. Errors come as JSON with "
    "error, retryable, hint and detail: follow the hint."
)


def build_mcp_server(*, fixture: bool = False, max_budget_s: float = 60.0) -> Server:
    """Build the dispatcher with the production registry.

    Args:
        fixture: also register the test fixture entries (:mod:`coremetry.testing.fixture`).
        max_budget_s: the server maximum for any call's deadline, in seconds.

    Returns:
        A ready :class:`~coremetry.mcp.Server`.
    """
    server = Server(
        "coremetry",
        __version__,
        title="Coremetry MCP",
        instructions=INSTRUCTIONS,
        max_budget_s=max_budget_s,
    )

    async def server_info(uri: str, ctx: CallContext) -> str:
        static, templates = server.resource_count()
        return msgspec.json.encode(
            {
                "name": "coremetry",
                "version": __version__,
                "protocol_versions": list(versions.ALL_VERSIONS),
                "protocol_version_in_use": ctx.protocol_version,
                "caller": {"subject": ctx.caller.subject, "role": ctx.caller.role},
                "tools": server.tool_count(),
                "resources": static,
                "resource_templates": templates,
                "prompts": server.prompt_count(),
            }
        ).decode()

    server.register_resource(
        Resource(
            "coremetry://server",
            "server",
            server_info,
            title="Coremetry server",
            description="What this server is: version, protocol revisions, registry sizes, "
            "and the identity the caller is seen as.",
        )
    )
    if fixture:
        from coremetry.testing.fixture import register_fixture

        register_fixture(server)
    return server
