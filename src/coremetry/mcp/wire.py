"""Every JSON-RPC 2.0 and MCP message, as msgspec Structs (the one place wire shapes live).

Conventions (``shared/STYLE.md`` habit 3):

- ``kw_only=True, omit_defaults=True, rename="camel"``: Python names are snake_case, the wire
  is camelCase; fields left at their default are not sent.
- Inbound types are tolerant readers: unknown fields are ignored, so new spec fields and extra
  ``_meta`` keys never break a request.
- ``msgspec.UNSET`` marks "absent" where absent and ``null`` differ (a request without ``id`` is
  a notification; ``"id": null`` is an invalid request).
- Content blocks are a tagged union on ``type`` (the wire's own discriminator).

Shapes follow ``tests/data/mcp-schema/<revision>/schema.json``; fields that only exist from some
revision on are noted on the field and left unset by the dispatcher for older revisions.
"""

from typing import Final, Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType, field

RequestId = int | str
"""JSON-RPC request id: a string or an integer, echoed exactly as sent (JSON-RPC 2.0 §4, §5)."""

ProgressToken = int | str
"""``_meta.progressToken``: chosen by the requester, echoed exactly as sent."""

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
"""RFC 5424 severities used by MCP logging (``server/utilities/logging``), least severe first."""

LOG_LEVELS: Final[tuple[LogLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
"""The levels of :data:`LogLevel` in order; the index is the severity."""

JsonObject = dict[str, object]
"""A JSON object we pass through without interpreting (capabilities, schemas, ``_meta``)."""

# Well-known _meta keys (MCP basic/index "_meta"; 2026-07-28 per-request metadata).
META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
META_TIMEOUT_MS: Final = "coremetry/timeout_ms"
"""Ours: the client's own budget for this call in milliseconds; the call's deadline is the
minimum of it, the tool's read budget and the server maximum. A non-negative integer (``0``: the
deadline is now, so a call that waits for anything times out); anything else is ``-32602``."""


class _Wire(Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """Base of the MCP payload Structs (not the JSON-RPC envelopes)."""


# --------------------------------------------------------------------------------------------
# JSON-RPC 2.0 envelopes
# --------------------------------------------------------------------------------------------


class InboundMessage(Struct, kw_only=True):
    """Any message a client sends, decoded in the first of two stages.

    ``params``, ``result`` and ``error`` stay raw bytes until the method is known (stage two
    decodes ``params`` with the method's own Struct). ``id`` absent means a notification; a
    ``null``, boolean, float or object ``id`` fails validation here (JSON-RPC 2.0 §4 and MCP
    ``basic/index``: ids are strings or integers and MUST NOT be null).
    """

    jsonrpc: str
    id: RequestId | UnsetType = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class ErrorObject(Struct, kw_only=True):
    """JSON-RPC error object: ``code`` (see :mod:`coremetry.mcp.codes`), ``message``, ``data``."""

    code: int
    message: str
    data: JsonObject | UnsetType = UNSET


class ErrorResponse(Struct, kw_only=True):
    """JSON-RPC error response; ``id`` is ``None`` only when the request's id was unreadable."""

    jsonrpc: str = "2.0"
    id: RequestId | None
    error: ErrorObject


class ResultResponse(Struct, kw_only=True):
    """JSON-RPC success response carrying one of the result Structs below."""

    jsonrpc: str = "2.0"
    id: RequestId
    result: Struct | JsonObject


class Notification(Struct, kw_only=True):
    """JSON-RPC notification (no ``id``; the receiver never answers it)."""

    jsonrpc: str = "2.0"
    method: str
    params: Struct | JsonObject | UnsetType = UNSET


class OutboundRequest(Struct, kw_only=True):
    """A server-to-client JSON-RPC request (sampling, elicitation, roots; handshake era only)."""

    jsonrpc: str = "2.0"
    id: RequestId
    method: str
    params: Struct | JsonObject | UnsetType = UNSET


# --------------------------------------------------------------------------------------------
# Request parameters (inbound, tolerant)
# --------------------------------------------------------------------------------------------


class RequestMeta(Struct, kw_only=True):
    """``params._meta`` of a client request: the keys the server reads; others are ignored."""

    progress_token: ProgressToken | UnsetType = field(default=UNSET, name="progressToken")
    protocol_version: str | UnsetType = field(default=UNSET, name=META_PROTOCOL_VERSION)
    client_capabilities: JsonObject | UnsetType = field(
        default=UNSET, name=META_CLIENT_CAPABILITIES
    )
    client_info: JsonObject | UnsetType = field(default=UNSET, name=META_CLIENT_INFO)
    log_level: LogLevel | UnsetType = field(default=UNSET, name=META_LOG_LEVEL)
    timeout_ms: int | float | UnsetType = field(default=UNSET, name=META_TIMEOUT_MS)

    def __post_init__(self) -> None:
        """Refuse a ``timeout_ms`` that is not a non-negative whole number of milliseconds.

        msgspec already refuses booleans and strings; a negative (``-5``) or fractional
        (``1.5``) budget was silently read as 0 or kept. Raised here, msgspec reports the error
        as a :class:`msgspec.ValidationError` at ``$._meta``, which the dispatcher answers with
        ``-32602`` like any other bad params.

        Raises:
            ValueError: ``timeout_ms`` is negative or not a whole number.
        """
        value = self.timeout_ms
        if isinstance(value, UnsetType):
            return
        if value < 0 or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(
                f'_meta["{META_TIMEOUT_MS}"] must be a non-negative integer number of '
                f"milliseconds, got {value!r}"
            )


class _Params(Struct, kw_only=True):
    """Base of request params: every request may carry ``_meta``."""

    meta: RequestMeta | UnsetType = field(default=UNSET, name="_meta")


RequestParams = _Params
"""The base of every request's params (public name): each carries ``_meta``."""


class EmptyParams(_Params, kw_only=True):
    """Params of ``ping``, ``server/discover`` and other parameterless requests."""


class InitializeParams(_Params, kw_only=True):
    """``initialize`` params (handshake era, ``basic/lifecycle``)."""

    protocol_version: str = field(name="protocolVersion")
    capabilities: JsonObject = field(default_factory=dict)
    client_info: JsonObject | UnsetType = field(default=UNSET, name="clientInfo")


class ListParams(_Params, kw_only=True):
    """``*/list`` params: an opaque ``cursor`` (``null`` reads as the first page)."""

    cursor: str | None = None


class _RetryableParams(_Params, kw_only=True):
    """Params of the methods that may answer ``input_required`` (2026-07-28 MRTR).

    A client retrying such a request sends the answers to the server's ``inputRequests`` in
    ``inputResponses`` and echoes ``requestState`` (``basic/patterns/mrtr``).
    """

    input_responses: JsonObject | UnsetType = field(default=UNSET, name="inputResponses")
    request_state: str | UnsetType = field(default=UNSET, name="requestState")


RetryableParams = _RetryableParams
"""The base of the params that may carry MRTR ``inputResponses``/``requestState`` (public name)."""


class TaskRequestMetadata(Struct, kw_only=True):
    """``params.task`` of a task-augmented request (2025-11-25 ``TaskMetadata``).

    ``ttl`` is the retention the client asks for, in milliseconds from creation; other keys
    (a 2026-07-28 server ignores the legacy ``pollInterval`` hint) are ignored.
    """

    ttl: int | UnsetType | None = UNSET


class CallToolParams(_RetryableParams, kw_only=True):
    """``tools/call`` params; ``arguments`` is decoded later with the tool's own Struct.

    ``task`` asks for a task-augmented call (2025-11-25 tasks); in 2026-07-28 the server alone
    decides and the key is tolerated but ignored (:mod:`coremetry.mcp.tasks`).
    """

    name: str
    arguments: Raw | UnsetType = UNSET
    task: TaskRequestMetadata | UnsetType = UNSET


class ReadResourceParams(_RetryableParams, kw_only=True):
    """``resources/read`` and ``resources/(un)subscribe`` params."""

    uri: str


class GetPromptParams(_RetryableParams, kw_only=True):
    """``prompts/get`` params; prompt arguments are strings (``server/prompts``)."""

    name: str
    arguments: dict[str, str] | None = None


class SetLevelParams(_Params, kw_only=True):
    """``logging/setLevel`` params; an unknown level fails decoding (``-32602``)."""

    level: LogLevel


class CancelledParams(Struct, kw_only=True):
    """``notifications/cancelled`` params (``basic/utilities/cancellation``)."""

    request_id: RequestId = field(name="requestId")
    reason: str | UnsetType = UNSET


class SubscriptionFilter(_Wire, kw_only=True):
    """Which notifications a ``subscriptions/listen`` stream carries (2026-07-28)."""

    tools_list_changed: bool | UnsetType = UNSET
    prompts_list_changed: bool | UnsetType = UNSET
    resources_list_changed: bool | UnsetType = UNSET
    resource_subscriptions: list[str] | UnsetType = UNSET


class ListenParams(_Params, kw_only=True):
    """``subscriptions/listen`` params (``basic/patterns/subscriptions``)."""

    notifications: SubscriptionFilter


class CompletionReference(Struct, kw_only=True):
    """``ref`` of ``completion/complete``.

    ``ref/prompt`` names a prompt (``name``); ``ref/resource`` a template URI (``uri``).
    """

    type: str
    name: str | UnsetType = UNSET
    uri: str | UnsetType = UNSET


class CompletionArgument(Struct, kw_only=True):
    """The argument being completed and its current partial value."""

    name: str
    value: str


class CompletionContext(Struct, kw_only=True):
    """Already-resolved arguments (2025-06-18+)."""

    arguments: dict[str, str] | None = None


class CompleteParams(_Params, kw_only=True):
    """``completion/complete`` params (``server/utilities/completion``)."""

    ref: CompletionReference
    argument: CompletionArgument
    context: CompletionContext | UnsetType = UNSET


# --------------------------------------------------------------------------------------------
# Results (outbound)
# --------------------------------------------------------------------------------------------


class Implementation(_Wire, kw_only=True):
    """``serverInfo``/``clientInfo``: name and version (``title`` from 2025-06-18)."""

    name: str
    version: str
    title: str | UnsetType = UNSET


class Result(_Wire, kw_only=True):
    """Fields any result may carry.

    ``result_type`` is required on every 2026-07-28 result (``"complete"`` or
    ``"input_required"``); ``ttl_ms``/``cache_scope`` on its list and read results
    (``server/utilities/caching``); ``_meta`` carries ``io.modelcontextprotocol/serverInfo``.
    All stay unset for the handshake era.
    """

    result_type: str | UnsetType = UNSET
    ttl_ms: int | UnsetType = UNSET
    cache_scope: Literal["public", "private"] | UnsetType = UNSET
    meta: JsonObject | UnsetType = field(default=UNSET, name="_meta")


class EmptyResult(Result, kw_only=True):
    """``{}`` (``ping``, ``logging/setLevel``, ``resources/subscribe``)."""


class ListChangedCapability(_Wire, kw_only=True):
    """``{listChanged?}`` of the tools and prompts capabilities."""

    list_changed: bool | UnsetType = UNSET


class ResourcesCapability(_Wire, kw_only=True):
    """``{subscribe?, listChanged?}`` of the resources capability."""

    subscribe: bool | UnsetType = UNSET
    list_changed: bool | UnsetType = UNSET


class ServerCapabilities(_Wire, kw_only=True):
    """What the server offers; each present key is a feature (``basic/lifecycle``)."""

    tools: ListChangedCapability | UnsetType = UNSET
    resources: ResourcesCapability | UnsetType = UNSET
    prompts: ListChangedCapability | UnsetType = UNSET
    logging: JsonObject | UnsetType = UNSET
    completions: JsonObject | UnsetType = UNSET
    experimental: JsonObject | UnsetType = UNSET
    tasks: JsonObject | UnsetType = UNSET
    """2025-11-25 tasks (``{list, cancel, requests: {tools: {call}}}``)."""
    extensions: JsonObject | UnsetType = UNSET
    """2026-07-28 extensions by identifier (``io.modelcontextprotocol/tasks``)."""


class InitializeResult(Result, kw_only=True):
    """``initialize`` result: the negotiated revision, capabilities and server identity."""

    protocol_version: str
    capabilities: ServerCapabilities
    server_info: Implementation
    instructions: str | UnsetType = UNSET


class DiscoverResult(Result, kw_only=True):
    """``server/discover`` result (2026-07-28)."""

    supported_versions: list[str]
    capabilities: ServerCapabilities
    instructions: str | UnsetType = UNSET


class ToolAnnotations(_Wire, kw_only=True):
    """Behaviour hints for clients (2025-03-26+); untrusted by clients unless the server is."""

    title: str | UnsetType = UNSET
    read_only_hint: bool | UnsetType = UNSET
    destructive_hint: bool | UnsetType = UNSET
    idempotent_hint: bool | UnsetType = UNSET
    open_world_hint: bool | UnsetType = UNSET


class ToolInfo(_Wire, kw_only=True):
    """A tool as listed by ``tools/list``; ``input_schema`` is pre-encoded JSON."""

    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    input_schema: Raw
    output_schema: Raw | UnsetType = UNSET
    annotations: ToolAnnotations | UnsetType = UNSET
    execution: JsonObject | UnsetType = UNSET
    """2025-11-25: ``{"taskSupport": "forbidden" | "optional" | "required"}``."""


class ListToolsResult(Result, kw_only=True):
    """``tools/list`` result page."""

    tools: list[ToolInfo]
    next_cursor: str | UnsetType = UNSET


class Annotations(_Wire, kw_only=True):
    """Content annotations: intended ``audience`` and ``priority`` (0..1)."""

    audience: list[Literal["user", "assistant"]] | UnsetType = UNSET
    priority: float | UnsetType = UNSET


class TextResourceContents(_Wire, kw_only=True):
    """Text contents of a resource."""

    uri: str
    mime_type: str | UnsetType = UNSET
    text: str


class BlobResourceContents(_Wire, kw_only=True):
    """Binary contents of a resource, base64 in ``blob``."""

    uri: str
    mime_type: str | UnsetType = UNSET
    blob: str


ResourceContents = TextResourceContents | BlobResourceContents


class TextContent(_Wire, kw_only=True, tag="text", tag_field="type"):
    """``{"type": "text", "text": …}`` content block."""

    text: str
    annotations: Annotations | UnsetType = UNSET


class ImageContent(_Wire, kw_only=True, tag="image", tag_field="type"):
    """Image content block: base64 ``data`` and its ``mimeType``."""

    data: str
    mime_type: str
    annotations: Annotations | UnsetType = UNSET


class AudioContent(_Wire, kw_only=True, tag="audio", tag_field="type"):
    """Audio content block (2025-03-26+)."""

    data: str
    mime_type: str
    annotations: Annotations | UnsetType = UNSET


class EmbeddedResource(_Wire, kw_only=True, tag="resource", tag_field="type"):
    """A resource's contents embedded in a result or prompt message."""

    resource: ResourceContents
    annotations: Annotations | UnsetType = UNSET


class ResourceLink(_Wire, kw_only=True, tag="resource_link", tag_field="type"):
    """A link to a resource the client may read (2025-06-18+)."""

    uri: str
    name: str
    description: str | UnsetType = UNSET
    mime_type: str | UnsetType = UNSET


Content = TextContent | ImageContent | AudioContent | EmbeddedResource | ResourceLink
"""A content block of a tool result or prompt message (tagged on ``type``)."""


class CallToolResult(Result, kw_only=True):
    """``tools/call`` result; ``is_error`` marks a tool-level failure (not a protocol error).

    ``structured_content`` exists from 2025-06-18; older revisions get the same JSON as text.
    """

    content: list[Content]
    structured_content: JsonObject | UnsetType = UNSET
    is_error: bool = False


class ResourceInfo(_Wire, kw_only=True):
    """A static resource as listed by ``resources/list``."""

    uri: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mime_type: str | UnsetType = UNSET
    size: int | UnsetType = UNSET


class ListResourcesResult(Result, kw_only=True):
    """``resources/list`` result page."""

    resources: list[ResourceInfo]
    next_cursor: str | UnsetType = UNSET


class ResourceTemplateInfo(_Wire, kw_only=True):
    """A resource template as listed by ``resources/templates/list`` (RFC 6570)."""

    uri_template: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mime_type: str | UnsetType = UNSET


class ListResourceTemplatesResult(Result, kw_only=True):
    """``resources/templates/list`` result page."""

    resource_templates: list[ResourceTemplateInfo]
    next_cursor: str | UnsetType = UNSET


class ReadResourceResult(Result, kw_only=True):
    """``resources/read`` result: never empty (2026-07-28 forbids empty ``contents``)."""

    contents: list[ResourceContents]


class PromptArgumentInfo(_Wire, kw_only=True):
    """One argument of a prompt as listed."""

    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    required: bool | UnsetType = UNSET


class PromptInfo(_Wire, kw_only=True):
    """A prompt as listed by ``prompts/list``."""

    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    arguments: list[PromptArgumentInfo] | UnsetType = UNSET


class ListPromptsResult(Result, kw_only=True):
    """``prompts/list`` result page."""

    prompts: list[PromptInfo]
    next_cursor: str | UnsetType = UNSET


class PromptMessage(_Wire, kw_only=True):
    """One message of a rendered prompt."""

    role: Literal["user", "assistant"]
    content: Content


class GetPromptResult(Result, kw_only=True):
    """``prompts/get`` result."""

    messages: list[PromptMessage]
    description: str | UnsetType = UNSET


class InputRequiredResult(Result, kw_only=True):
    """2026-07-28 MRTR: the request needs client input before it can complete.

    ``input_requests`` maps server-chosen keys to request objects (``{"method":
    "elicitation/create", "params": …}``); ``request_state`` is opaque, integrity-protected state
    the client echoes on its retry. At least one of the two is present.
    """

    input_requests: dict[str, JsonObject] | UnsetType = UNSET
    request_state: str | UnsetType = UNSET


class Completion(_Wire, kw_only=True):
    """``completion`` of ``completion/complete``: at most 100 ``values``."""

    values: list[str]
    total: int | UnsetType = UNSET
    has_more: bool | UnsetType = UNSET


class CompleteResult(Result, kw_only=True):
    """``completion/complete`` result."""

    completion: Completion


# --------------------------------------------------------------------------------------------
# Client results (inbound): answers to server requests
# --------------------------------------------------------------------------------------------
# What :meth:`CallContext.request` returns and what a 2026-07-28 retry carries in
# ``inputResponses``, for the three requests a server may make of a client. Tolerant readers:
# decode a value with ``msgspec.convert(value, type=ElicitResult)`` and treat a
# ``msgspec.ValidationError`` as "the client did not answer this request".


class ElicitResult(_Wire, kw_only=True):
    """The client's answer to ``elicitation/create`` (``client/elicitation``).

    ``content`` holds the submitted form values when ``action`` is ``"accept"`` (form mode).
    """

    action: Literal["accept", "decline", "cancel"]
    content: JsonObject | UnsetType = UNSET


class CreateMessageResult(_Wire, kw_only=True):
    """The client's answer to ``sampling/createMessage`` (``client/sampling``).

    ``content`` is one content block, or (2025-11-25+, with tools) a list of them; blocks stay
    raw JSON objects because sampling allows block types (``tool_use``, ``tool_result``) that
    tool results do not.
    """

    role: Literal["user", "assistant"]
    content: JsonObject | list[JsonObject]
    model: str
    stop_reason: str | UnsetType = UNSET


class Root(_Wire, kw_only=True):
    """One root of ``roots/list`` (``client/roots``)."""

    uri: str
    name: str | UnsetType = UNSET


class ListRootsResult(_Wire, kw_only=True):
    """The client's answer to ``roots/list``."""

    roots: list[Root]


# --------------------------------------------------------------------------------------------
# Notifications (outbound)
# --------------------------------------------------------------------------------------------


class ProgressParams(_Wire, kw_only=True):
    """``notifications/progress`` params; ``message`` exists from 2025-03-26."""

    progress_token: ProgressToken
    progress: float
    total: float | UnsetType = UNSET
    message: str | UnsetType = UNSET


class SubscriptionAcknowledgedParams(_Wire, kw_only=True):
    """``notifications/subscriptions/acknowledged`` params: the agreed subset."""

    notifications: SubscriptionFilter
    meta: JsonObject | UnsetType = field(default=UNSET, name="_meta")


class ListChangedParams(_Wire, kw_only=True):
    """Params of ``notifications/*/list_changed`` on a listen stream (only ``_meta``)."""

    meta: JsonObject | UnsetType = field(default=UNSET, name="_meta")


class ResourceUpdatedParams(_Wire, kw_only=True):
    """``notifications/resources/updated`` params."""

    uri: str
    meta: JsonObject | UnsetType = field(default=UNSET, name="_meta")


class LoggingMessageParams(_Wire, kw_only=True):
    """``notifications/message`` params (RFC 5424 ``level``, free-form JSON ``data``)."""

    level: LogLevel
    data: object
    logger: str | UnsetType = UNSET


_LINE_BREAKS: Final[tuple[tuple[bytes, bytes], ...]] = (
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
    ("\u0085".encode(), b"\\u0085"),
)


def line_safe(message: bytes) -> bytes:
    """Escape U+0085, U+2028 and U+2029 in an encoded JSON message (meaning unchanged).

    msgspec writes these code points raw inside strings (valid JSON), but line-oriented readers
    such as Python's ``str.splitlines`` and some SSE parsers split on them. The stdio and SSE
    transports frame messages by line, so they send this form. UTF-8 lead bytes never occur
    inside another character, so byte replacement is exact.
    """
    for raw, escaped in _LINE_BREAKS:
        if raw in message:
            message = message.replace(raw, escaped)
    return message


ENCODER: Final = msgspec.json.Encoder()
"""The one JSON encoder for everything the server sends (reused, as msgspec's perf tips say)."""

INBOUND_DECODER: Final = msgspec.json.Decoder(InboundMessage)
"""Stage-one decoder for every client message."""
