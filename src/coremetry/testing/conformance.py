"""The official MCP conformance suite's fixture (``coremetry conformance-fixture``).

Names, arguments and exact outputs follow the suite's reference fixture
(``modelcontextprotocol/conformance:examples/servers/typescript/everything-server.ts``; digest in
``shared/reference/conformance.md`` §3). Served without authentication on loopback only; never
registered by ``coremetry serve``. Besides the suite's entries it carries our transport
fixture (``echo``, ``sleep_ms``, ``big_output``; :mod:`coremetry.testing.fixture`).
"""

import base64
from collections.abc import Mapping, Sequence
from typing import Final

import msgspec
import trio

from coremetry import __version__
from coremetry.mcp import (
    CallContext,
    Prompt,
    PromptArgument,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
)
from coremetry.mcp.registry import ToolHandler
from coremetry.mcp.wire import (
    AudioContent,
    CallToolResult,
    Content,
    EmbeddedResource,
    GetPromptResult,
    ImageContent,
    PromptMessage,
    ResourceContents,
    TextContent,
    TextResourceContents,
)
from coremetry.testing.fixture import register_fixture

# A 1x1 transparent PNG and a tiny silent WAV (44-byte header + 2 samples).
PNG_1X1: Final = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PNG_B64: Final = base64.b64encode(PNG_1X1).decode("ascii")
WAV_B64: Final = base64.b64encode(
    b"RIFF"
    + (36 + 4).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (1).to_bytes(2, "little")
    + (8000).to_bytes(4, "little")
    + (16000).to_bytes(4, "little")
    + (2).to_bytes(2, "little")
    + (16).to_bytes(2, "little")
    + b"data"
    + (4).to_bytes(4, "little")
    + b"\x00\x00\x00\x00"
).decode("ascii")


class NoArgs(msgspec.Struct, kw_only=True):
    """No arguments (unknown ones are ignored, as the suite may send none or extras)."""


async def _simple_text(args: NoArgs, ctx: CallContext) -> str:
    return "This is a simple text response for testing."


async def _image(args: NoArgs, ctx: CallContext) -> Sequence[Content]:
    return [ImageContent(data=PNG_B64, mime_type="image/png")]


async def _audio(args: NoArgs, ctx: CallContext) -> Sequence[Content]:
    return [AudioContent(data=WAV_B64, mime_type="audio/wav")]


async def _embedded(args: NoArgs, ctx: CallContext) -> Sequence[Content]:
    resource = TextResourceContents(
        uri="test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    )
    return [EmbeddedResource(resource=resource)]


async def _mixed(args: NoArgs, ctx: CallContext) -> Sequence[Content]:
    resource = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text='{"test":"data","value":123}',
    )
    return [
        TextContent(text="Multiple content types test:"),
        ImageContent(data=PNG_B64, mime_type="image/png"),
        EmbeddedResource(resource=resource),
    ]


async def _logging(args: NoArgs, ctx: CallContext) -> str:
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.log("info", message, logger="conformance")
        await trio.sleep(0.05)
    return "Tool with logging executed successfully"


async def _error(args: NoArgs, ctx: CallContext) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text="This tool intentionally returns an error for testing")],
        is_error=True,
    )


async def _progress(args: NoArgs, ctx: CallContext) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, total=100, message=f"Completed step {step} of 100")
        if step < 100:
            await trio.sleep(0.05)
    return "Tool with progress executed successfully"


async def _static_text(uri: str, ctx: CallContext) -> str:
    return "This is the content of the static text resource."


async def _static_binary(uri: str, ctx: CallContext) -> bytes:
    return PNG_1X1


async def _watched(uri: str, ctx: CallContext) -> str:
    return "Watched resource content"


async def _template(uri: str, variables: Mapping[str, str], ctx: CallContext) -> str:
    item = variables["id"]
    return msgspec.json.encode(
        {"id": item, "templateTest": True, "data": f"Data for ID: {item}"}
    ).decode()


async def _simple_prompt(arguments: Mapping[str, str], ctx: CallContext) -> str:
    return "This is a simple prompt for testing."


async def _prompt_with_args(arguments: Mapping[str, str], ctx: CallContext) -> str:
    return f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"


async def _prompt_embedded(arguments: Mapping[str, str], ctx: CallContext) -> GetPromptResult:
    uri = arguments["resourceUri"]
    contents: ResourceContents = TextResourceContents(
        uri=uri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return GetPromptResult(
        messages=[
            PromptMessage(role="user", content=EmbeddedResource(resource=contents)),
            PromptMessage(
                role="user", content=TextContent(text="Please process the embedded resource above.")
            ),
        ]
    )


async def _prompt_image(arguments: Mapping[str, str], ctx: CallContext) -> GetPromptResult:
    return GetPromptResult(
        messages=[
            PromptMessage(role="user", content=ImageContent(data=PNG_B64, mime_type="image/png")),
            PromptMessage(role="user", content=TextContent(text="Please analyze the image above.")),
        ]
    )


async def _complete_args(name: str, value: str, context: Mapping[str, str]) -> Sequence[str]:
    options = {"arg1": ["test", "testing", "tested"], "arg2": ["value", "values"]}
    return [option for option in options.get(name, []) if option.startswith(value)]


def register_conformance(server: Server) -> None:
    """Register the conformance suite's fixture entries (and our transport fixture)."""
    tools: list[tuple[str, str, ToolHandler[NoArgs]]] = [
        ("test_simple_text", "Returns a simple text response.", _simple_text),
        ("test_image_content", "Returns a 1x1 PNG image.", _image),
        ("test_audio_content", "Returns a short WAV clip.", _audio),
        ("test_embedded_resource", "Returns an embedded text resource.", _embedded),
        ("test_multiple_content_types", "Returns text, an image and a resource.", _mixed),
        ("test_tool_with_logging", "Sends three log messages while it runs.", _logging),
        ("test_error_handling", "Always returns a tool error.", _error),
        ("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.", _progress),
    ]
    for name, description, handler in tools:
        server.register_tool(
            Tool(name, description, NoArgs, handler, short_description=description)
        )
    server.register_resource(
        Resource(
            "test://static-text",
            "static-text",
            _static_text,
            description="A static text resource.",
            mime_type="text/plain",
        )
    )
    server.register_resource(
        Resource(
            "test://static-binary",
            "static-binary",
            _static_binary,
            description="A static binary resource (PNG).",
            mime_type="image/png",
        )
    )
    server.register_resource(
        Resource(
            "test://watched-resource",
            "watched-resource",
            _watched,
            description="A resource clients may subscribe to.",
            mime_type="text/plain",
        )
    )
    server.register_resource_template(
        ResourceTemplate(
            "test://template/{id}/data",
            "template-data",
            _template,
            description="Data for an id.",
            mime_type="application/json",
        )
    )
    server.register_prompt(
        Prompt("test_simple_prompt", "A simple prompt without arguments.", _simple_prompt)
    )
    server.register_prompt(
        Prompt(
            "test_prompt_with_arguments",
            "A prompt with two required arguments.",
            _prompt_with_args,
            arguments=[
                PromptArgument(name="arg1", description="First argument", required=True),
                PromptArgument(name="arg2", description="Second argument", required=True),
            ],
            completer=_complete_args,
        )
    )
    server.register_prompt(
        Prompt(
            "test_prompt_with_embedded_resource",
            "A prompt that embeds a resource.",
            _prompt_embedded,
            arguments=[
                PromptArgument(name="resourceUri", description="URI of the resource", required=True)
            ],
        )
    )
    server.register_prompt(
        Prompt("test_prompt_with_image", "A prompt that includes an image.", _prompt_image)
    )
    register_fixture(server)


def build_conformance_server() -> Server:
    """A :class:`~coremetry.mcp.Server` carrying the conformance fixture."""
    server = Server(
        "coremetry-conformance-fixture",
        __version__,
        title="Coremetry conformance fixture",
        resource_subscriptions=True,
    )
    register_conformance(server)
    return server
