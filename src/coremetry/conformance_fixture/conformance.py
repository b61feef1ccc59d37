"""The official MCP conformance suite's fixture (``coremetry conformance-fixture``).

Names, arguments and exact outputs follow the suite's reference fixture
(``modelcontextprotocol/conformance:examples/servers/typescript/everything-server.ts``) and the
scenario sources of ``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (digest in
``shared/reference/conformance.md`` §3). Served without authentication on loopback only; never
registered by ``coremetry serve``. Besides the suite's entries it carries our transport
fixture (``echo``, ``sleep_ms``, ``big_output``; :mod:`~coremetry.conformance_fixture.fixture`).

Client input (sampling, elicitation, roots) works in both eras with one handler:

- handshake era (2025-11-25 and older): the request goes to the client over the call's own SSE
  stream (:meth:`CallContext.request`) and the answer comes back in a new POST;
- 2026-07-28: the handler answers ``input_required`` (MRTR, :class:`InputRequired`) and reads the
  client's retry from :attr:`CallContext.input_responses`. Missing or malformed answers are asked
  for again; unknown keys are ignored. State carried between rounds is sealed with
  :meth:`CallContext.seal_state` (HMAC) and bound to the entry that issued it, so an altered or
  transplanted ``requestState`` is refused with ``-32602``.

A client capability the request needs must have been declared: in 2026-07-28 an undeclared one is
``-32021`` (HTTP 400) with ``data.requiredCapabilities``. In the handshake era over sessionless
HTTP the server cannot know what the client declared in ``initialize``
(:attr:`CallContext.client_capabilities_known` is False), so it asks and lets the client refuse.
"""

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Final, Literal

import msgspec
import trio

from coremetry import __version__
from coremetry.conformance_fixture.fixture import register_fixture
from coremetry.mcp import (
    BadArgs,
    CallContext,
    ClientRequestError,
    InputRequired,
    InternalFailure,
    Prompt,
    PromptArgument,
    ProtocolError,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
    codes,
)
from coremetry.mcp.registry import ToolHandler
from coremetry.mcp.wire import (
    AudioContent,
    CallToolResult,
    Content,
    CreateMessageResult,
    ElicitResult,
    EmbeddedResource,
    GetPromptResult,
    ImageContent,
    JsonObject,
    ListRootsResult,
    PromptMessage,
    ResourceContents,
    TextContent,
    TextResourceContents,
)

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

STATE_TTL_S: Final = 600.0
"""How long a sealed ``requestState`` stays valid, in seconds (wall clock)."""


class NoArgs(msgspec.Struct, kw_only=True):
    """No arguments (unknown ones are ignored, as the suite may send none or extras)."""


# -- the basic tools ------------------------------------------------------------------------------


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


# -- client input in both eras --------------------------------------------------------------------

ELICIT: Final = "elicitation/create"
SAMPLE: Final = "sampling/createMessage"
LIST_ROOTS: Final = "roots/list"

CAPABILITY_OF: Final[Mapping[str, str]] = {
    ELICIT: "elicitation",
    SAMPLE: "sampling",
    LIST_ROOTS: "roots",
}
"""The client capability each server-to-client request needs."""

Answer = ElicitResult | CreateMessageResult | ListRootsResult
"""A client's answer to one of the three requests."""

_ANSWER_TYPES: Final[Mapping[str, type[Answer]]] = {
    ELICIT: ElicitResult,
    SAMPLE: CreateMessageResult,
    LIST_ROOTS: ListRootsResult,
}


def elicit_request(
    message: str, properties: JsonObject, required: Sequence[str] = ()
) -> JsonObject:
    """An ``elicitation/create`` request (form mode) as an MRTR ``inputRequests`` value."""
    schema: JsonObject = {"type": "object", "properties": properties, "required": list(required)}
    return {"method": ELICIT, "params": {"message": message, "requestedSchema": schema}}


def sampling_request(prompt: str, max_tokens: int = 100) -> JsonObject:
    """A ``sampling/createMessage`` request for one user text message."""
    message: JsonObject = {"role": "user", "content": {"type": "text", "text": prompt}}
    return {"method": SAMPLE, "params": {"messages": [message], "maxTokens": max_tokens}}


def roots_request() -> JsonObject:
    """A ``roots/list`` request."""
    return {"method": LIST_ROOTS, "params": {}}


def decode_answer(method: str, value: object) -> Answer | None:
    """The client's answer to a ``method`` request, or ``None`` when ``value`` is not one."""
    try:
        return msgspec.convert(value, type=_ANSWER_TYPES[method])
    except (msgspec.ValidationError, KeyError):
        return None


def missing_capabilities(ctx: CallContext, requests: Mapping[str, JsonObject]) -> JsonObject:
    """The client capabilities ``requests`` need that the client did not declare.

    Empty when every one is declared, and when the declaration is unknown (handshake era over
    sessionless HTTP: the client decides by answering).
    """
    if not ctx.client_capabilities_known:
        return {}
    missing: JsonObject = {}
    for request in requests.values():
        capability = CAPABILITY_OF[str(request["method"])]
        if capability not in ctx.client_capabilities:
            missing[capability] = {}
    return missing


def capability_error(ctx: CallContext, missing: JsonObject) -> ProtocolError:
    """``-32021`` naming the undeclared capabilities (2026-07-28: with HTTP 400).

    The code is defined from 2026-07-28; a handshake-era client that declared its capabilities
    in ``initialize`` (stdio, WebSocket) gets the same error, as a plain JSON-RPC error.
    """
    names = ", ".join(sorted(missing))
    return ProtocolError(
        codes.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: {names}",
        {"requiredCapabilities": dict(missing)},
        http_status=400 if ctx.stateless else 200,
    )


async def gather(
    ctx: CallContext, requests: Mapping[str, JsonObject], *, state: str | None = None
) -> dict[str, Answer] | InputRequired:
    """The client's answers to ``requests`` (key -> ``{"method", "params"}``), in either era.

    Handshake era: each request is sent over the call's stream and awaited, in order. 2026-07-28:
    the answers come from the retry's ``inputResponses``; when any is missing or malformed, an
    :class:`InputRequired` asks (again) for exactly those, carrying ``state``.

    Raises:
        ProtocolError: ``-32021`` when a needed client capability was not declared.
        InternalFailure: handshake era, the client refused a request or answered it with
            something that is not its result (an ``internal`` tool error naming the method).
    """
    missing = missing_capabilities(ctx, requests)
    if missing:
        raise capability_error(ctx, missing)
    answers: dict[str, Answer] = {}
    ask: dict[str, JsonObject] = {}
    for key, request in requests.items():
        method = str(request["method"])
        if ctx.stateless:
            answer = decode_answer(method, ctx.input_responses.get(key))
            if answer is None:
                ask[key] = request
                continue
        else:
            params = request.get("params")
            try:
                result = await ctx.request(method, params if isinstance(params, dict) else {})
            except ClientRequestError as exc:
                raise InternalFailure(
                    f"the client did not answer {method} (error {exc.code}: {exc.message})"
                ) from None
            answer = decode_answer(method, result)
            if answer is None:
                raise InternalFailure(f"the client's answer to {method} is malformed")
        answers[key] = answer
    if ask:
        return InputRequired(input_requests=ask, request_state=state)
    return answers


def elicited(answers: Mapping[str, Answer], key: str) -> ElicitResult:
    """The elicitation answer under ``key``."""
    answer = answers[key]
    assert isinstance(answer, ElicitResult)
    return answer


def sampled_text(answers: Mapping[str, Answer], key: str) -> str:
    """The text of the sampling answer under ``key`` ("" when it holds no text block)."""
    answer = answers[key]
    assert isinstance(answer, CreateMessageResult)
    blocks = answer.content if isinstance(answer.content, list) else [answer.content]
    for block in blocks:
        text = block.get("text")
        if block.get("type") == "text" and isinstance(text, str):
            return text
    return ""


def root_uris(answers: Mapping[str, Answer], key: str) -> list[str]:
    """The root URIs of the ``roots/list`` answer under ``key``."""
    answer = answers[key]
    assert isinstance(answer, ListRootsResult)
    return [root.uri for root in answer.roots]


def _describe(answer: ElicitResult) -> str:
    content = answer.content if isinstance(answer.content, dict) else {}
    return f"action={answer.action}, content={msgspec.json.encode(content).decode()}"


class _State(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a sealed ``requestState`` carries: the issuing entry, the round, the data so far."""

    entry: str
    round: int
    expires: float
    data: dict[str, str] = msgspec.field(default_factory=dict)


def seal(ctx: CallContext, entry: str, round_: int, data: Mapping[str, str] | None = None) -> str:
    """A ``requestState`` for ``entry`` at ``round_`` (HMAC-sealed, expires in 10 minutes)."""
    state = _State(
        entry=entry, round=round_, expires=time.time() + STATE_TTL_S, data=dict(data or {})
    )
    return ctx.seal_state(msgspec.json.encode(state))


def unseal(ctx: CallContext, entry: str) -> _State | None:
    """The verified ``requestState`` of this retry, or ``None`` when the request carries none.

    Raises:
        ProtocolError: ``-32602`` when the state was altered, is not ours, belongs to another
            entry or has expired.
    """
    token = ctx.request_state
    if token is None:
        return None
    raw = ctx.open_state(token)
    state: _State | None = None
    if raw is not None:
        try:
            state = msgspec.json.decode(raw, type=_State)
        except (msgspec.DecodeError, msgspec.ValidationError):
            state = None
    if state is None or state.entry != entry:
        raise ProtocolError(
            codes.INVALID_PARAMS, "Invalid params: requestState failed its integrity check"
        )
    if state.expires < time.time():
        raise ProtocolError(codes.INVALID_PARAMS, "Invalid params: requestState has expired")
    return state


# -- handshake-era sampling and elicitation (2025-11-25 scenarios) --------------------------------


class PromptArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``test_sampling``."""

    prompt: str


class MessageArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``test_elicitation``."""

    message: str


async def _sampling(args: PromptArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"sample": sampling_request(args.prompt)})
    if isinstance(answers, InputRequired):
        return answers
    return f"LLM response: {sampled_text(answers, 'sample') or 'No response'}"


async def _elicitation(args: MessageArgs, ctx: CallContext) -> str | InputRequired:
    request = elicit_request(
        args.message,
        {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        ["username", "email"],
    )
    answers = await gather(ctx, {"user": request})
    if isinstance(answers, InputRequired):
        return answers
    return f"User response: {_describe(elicited(answers, 'user'))}"


SEP1034_PROPERTIES: Final[JsonObject] = {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {
        "type": "string",
        "description": "User status",
        "enum": ["active", "inactive", "pending"],
        "default": "active",
    },
    "verified": {"type": "boolean", "description": "Verification status", "default": True},
}
"""SEP-1034: a default for every primitive type."""

SEP1330_PROPERTIES: Final[JsonObject] = {
    "untitledSingle": {
        "type": "string",
        "description": "Select one option",
        "enum": ["option1", "option2", "option3"],
    },
    "titledSingle": {
        "type": "string",
        "description": "Select one option with titles",
        "oneOf": [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ],
    },
    "legacyEnum": {
        "type": "string",
        "description": "Select one option (legacy)",
        "enum": ["opt1", "opt2", "opt3"],
        "enumNames": ["Option One", "Option Two", "Option Three"],
    },
    "untitledMulti": {
        "type": "array",
        "description": "Select multiple options",
        "minItems": 1,
        "maxItems": 3,
        "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
    },
    "titledMulti": {
        "type": "array",
        "description": "Select multiple options with titles",
        "minItems": 1,
        "maxItems": 3,
        "items": {
            "anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"},
            ]
        },
    },
}
"""SEP-1330: the five enum forms."""


async def _elicit_form(
    ctx: CallContext, message: str, properties: JsonObject
) -> str | InputRequired:
    answers = await gather(ctx, {"form": elicit_request(message, properties)})
    if isinstance(answers, InputRequired):
        return answers
    return f"Elicitation completed: {_describe(elicited(answers, 'form'))}"


async def _sep1034(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    message = "Please review and update the form fields with defaults"
    return await _elicit_form(ctx, message, SEP1034_PROPERTIES)


async def _sep1330(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    return await _elicit_form(ctx, "Please select options from the enum fields", SEP1330_PROPERTIES)


# -- JSON Schema 2020-12 (SEP-1613, SEP-2106) -----------------------------------------------------

JSON_SCHEMA_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"

JSON_SCHEMA_2020_12_INPUT: Final[JsonObject] = {
    "$schema": JSON_SCHEMA_2020_12,
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
"""The ``inputSchema`` of ``json_schema_2020_12_tool``, served verbatim."""


class Address(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``$defs/address`` of :data:`JSON_SCHEMA_2020_12_INPUT`."""

    street: str | None = None
    city: str | None = None


class ContactArgs(
    msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True, rename="camel"
):
    """Arguments of ``json_schema_2020_12_tool``: what its schema accepts.

    ``additionalProperties: false`` is ``forbid_unknown_fields``; the ``allOf``/``anyOf`` and
    ``if``/``then``/``else`` rules are checked by the handler (msgspec cannot express them).
    """

    name: str | None = None
    address: Address | None = None
    contact_method: Literal["phone", "email"] | None = None
    phone: str | None = None
    email: str | None = None


async def _json_schema_tool(args: ContactArgs, ctx: CallContext) -> str:
    if args.phone is None and args.email is None:
        raise BadArgs("give phone or email (allOf/anyOf)")
    if args.contact_method == "phone" and args.phone is None:
        raise BadArgs("contactMethod is phone: phone is required (if/then)")
    if args.contact_method != "phone" and args.email is None:
        raise BadArgs("contactMethod is not phone: email is required (if/else)")
    return f"JSON Schema 2020-12 tool called with: {msgspec.json.encode(args).decode()}"


# -- 2026-07-28 diagnostics (server-stateless) ----------------------------------------------------


async def _missing_capability(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    """Needs sampling: an undeclared ``sampling`` capability is ``-32021``."""
    answers = await gather(ctx, {"sample": sampling_request("Say hello.")})
    if isinstance(answers, InputRequired):
        return answers
    return f"Sampling answered: {sampled_text(answers, 'sample')}"


async def _logging_tool(args: NoArgs, ctx: CallContext) -> str:
    """Logs only when the request asked for logs (``_meta`` ``logLevel`` / ``logging/setLevel``)."""
    await ctx.log("info", "test_logging_tool ran", logger="conformance")
    return "Logging tool completed"


async def _streaming_elicitation(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    """Asks for input on the response stream the only way 2026-07-28 allows: ``input_required``."""
    await ctx.report_progress(0, total=1, message="asking for input")
    request = elicit_request("Continue?", {"ok": {"type": "boolean"}}, ["ok"])
    answers = await gather(ctx, {"continue": request})
    if isinstance(answers, InputRequired):
        return answers
    return f"Streaming elicitation completed: {_describe(elicited(answers, 'continue'))}"


# -- 2026-07-28 MRTR (input-required-result-*) ----------------------------------------------------

NAME_REQUEST: Final = elicit_request("What is your name?", {"name": {"type": "string"}}, ["name"])
CONFIRM_REQUEST: Final = elicit_request("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
CAPITAL_REQUEST: Final = sampling_request("What is the capital of France?")
GREETING_REQUEST: Final = sampling_request("Generate a greeting", max_tokens=50)
STEP1_REQUEST: Final = elicit_request(
    "Step 1: What is your name?", {"name": {"type": "string"}}, ["name"]
)
STEP2_REQUEST: Final = elicit_request(
    "Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"]
)
CONTEXT_REQUEST: Final = elicit_request(
    "What context should the prompt use?", {"context": {"type": "string"}}, ["context"]
)


def _field(answer: ElicitResult, name: str) -> str:
    """A submitted form field as text ("" when the user did not accept or left it out)."""
    if answer.action != "accept" or not isinstance(answer.content, dict):
        return ""
    value = answer.content.get(name)
    return "" if value is None else str(value)


async def _mrtr_elicitation(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"user_name": NAME_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    answer = elicited(answers, "user_name")
    if answer.action != "accept":
        return f"No name given (action={answer.action})."
    return f"Hello, {_field(answer, 'name')}!"


async def _mrtr_sampling(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"capital_question": CAPITAL_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    return f"Sampling said: {sampled_text(answers, 'capital_question')}"


async def _mrtr_roots(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"client_roots": roots_request()})
    if isinstance(answers, InputRequired):
        return answers
    return "Client roots: " + ", ".join(root_uris(answers, "client_roots"))


async def _mrtr_request_state(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    entry = "test_input_required_result_request_state"
    state = unseal(ctx, entry)
    if ctx.stateless and state is None:
        return InputRequired(
            input_requests={"confirm": CONFIRM_REQUEST}, request_state=seal(ctx, entry, 1)
        )
    answers = await gather(ctx, {"confirm": CONFIRM_REQUEST}, state=ctx.request_state)
    if isinstance(answers, InputRequired):
        return answers
    return f"state-ok: confirmed={_field(elicited(answers, 'confirm'), 'ok')}"


async def _mrtr_multiple(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    entry = "test_input_required_result_multiple_inputs"
    requests = {
        "user_name": NAME_REQUEST,
        "greeting": GREETING_REQUEST,
        "client_roots": roots_request(),
    }
    token = ctx.request_state if unseal(ctx, entry) is not None else seal(ctx, entry, 1)
    answers = await gather(ctx, requests, state=token)
    if isinstance(answers, InputRequired):
        return answers
    name = _field(elicited(answers, "user_name"), "name")
    greeting = sampled_text(answers, "greeting")
    roots = ", ".join(root_uris(answers, "client_roots"))
    return f"{greeting} {name} (roots: {roots})"


async def _mrtr_multi_round(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    entry = "test_input_required_result_multi_round"
    if not ctx.stateless:  # one call, two questions in a row
        first = await gather(ctx, {"step1": STEP1_REQUEST})
        if isinstance(first, InputRequired):
            return first
        second = await gather(ctx, {"step2": STEP2_REQUEST})
        if isinstance(second, InputRequired):
            return second
        name = _field(elicited(first, "step1"), "name")
        return f"{name} likes {_field(elicited(second, 'step2'), 'color')}."
    state = unseal(ctx, entry)
    if state is None or state.round == 1:
        token = seal(ctx, entry, 1) if state is None else ctx.request_state
        first = await gather(ctx, {"step1": STEP1_REQUEST}, state=token)
        if isinstance(first, InputRequired):
            return first
        name = _field(elicited(first, "step1"), "name")
        return InputRequired(
            input_requests={"step2": STEP2_REQUEST},
            request_state=seal(ctx, entry, 2, {"name": name}),
        )
    second = await gather(ctx, {"step2": STEP2_REQUEST}, state=ctx.request_state)
    if isinstance(second, InputRequired):
        return second
    return f"{state.data.get('name', '')} likes {_field(elicited(second, 'step2'), 'color')}."


async def _mrtr_tampered(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    entry = "test_input_required_result_tampered_state"
    state = unseal(ctx, entry)  # an altered state is refused here
    token = ctx.request_state if state is not None else seal(ctx, entry, 1)
    answers = await gather(ctx, {"confirm": CONFIRM_REQUEST}, state=token)
    if isinstance(answers, InputRequired):
        return answers
    return f"state verified: confirmed={_field(elicited(answers, 'confirm'), 'ok')}"


async def _mrtr_capabilities(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    """Asks only for what the client declared (elicitation, sampling, roots)."""
    wanted = {
        "user_name": NAME_REQUEST,
        "greeting": GREETING_REQUEST,
        "client_roots": roots_request(),
    }
    requests = {
        key: request
        for key, request in wanted.items()
        if not missing_capabilities(ctx, {key: request})
    }
    if not requests:
        return "No input requested: the client declared none of elicitation, sampling, roots."
    answers = await gather(ctx, requests)
    if isinstance(answers, InputRequired):
        return answers
    return "Received: " + ", ".join(sorted(answers))


async def _mrtr_prompt(arguments: Mapping[str, str], ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"user_context": CONTEXT_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    return f"Use this context: {_field(elicited(answers, 'user_context'), 'context')}"


# -- list-changed triggers (subscriptions/listen) -------------------------------------------------


def _trigger(server: Server, kind: Literal["tools", "prompts"]) -> ToolHandler[NoArgs]:
    async def trigger(args: NoArgs, ctx: CallContext) -> str:
        server.notify_list_changed(kind)
        return f"Announced a {kind} list change"

    return trigger


# -- resources and prompts ------------------------------------------------------------------------


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


# -- registration ---------------------------------------------------------------------------------


def _no_args_tools(server: Server) -> list[tuple[str, str, ToolHandler[NoArgs]]]:
    return [
        ("test_simple_text", "Returns a simple text response.", _simple_text),
        ("test_image_content", "Returns a 1x1 PNG image.", _image),
        ("test_audio_content", "Returns a short WAV clip.", _audio),
        ("test_embedded_resource", "Returns an embedded text resource.", _embedded),
        ("test_multiple_content_types", "Returns text, an image and a resource.", _mixed),
        ("test_tool_with_logging", "Sends three log messages while it runs.", _logging),
        ("test_error_handling", "Always returns a tool error.", _error),
        ("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.", _progress),
        (
            "test_elicitation_sep1034_defaults",
            "Elicits a form with a default for every primitive type (SEP-1034).",
            _sep1034,
        ),
        (
            "test_elicitation_sep1330_enums",
            "Elicits a form with the five enum schema forms (SEP-1330).",
            _sep1330,
        ),
        (
            "test_missing_capability",
            "Needs the client's sampling capability; without it: -32021.",
            _missing_capability,
        ),
        (
            "test_logging_tool",
            "Logs one message, only when the request asked for logs.",
            _logging_tool,
        ),
        (
            "test_streaming_elicitation",
            "Asks for input (elicitation) while its response streams.",
            _streaming_elicitation,
        ),
        (
            "test_trigger_tool_change",
            "Announces a tools list change to subscriptions/listen streams.",
            _trigger(server, "tools"),
        ),
        (
            "test_trigger_prompt_change",
            "Announces a prompts list change to subscriptions/listen streams.",
            _trigger(server, "prompts"),
        ),
        (
            "test_input_required_result_elicitation",
            "Asks the user's name (key user_name), then greets them.",
            _mrtr_elicitation,
        ),
        (
            "test_input_required_result_sampling",
            "Asks the client's model a question (key capital_question).",
            _mrtr_sampling,
        ),
        (
            "test_input_required_result_list_roots",
            "Asks for the client's roots (key client_roots).",
            _mrtr_roots,
        ),
        (
            "test_input_required_result_request_state",
            "Asks for a confirmation and carries sealed requestState (answers state-ok).",
            _mrtr_request_state,
        ),
        (
            "test_input_required_result_multiple_inputs",
            "Asks for an elicitation, a sampling and the roots at once.",
            _mrtr_multiple,
        ),
        (
            "test_input_required_result_multi_round",
            "Asks two questions in two rounds, with evolving requestState.",
            _mrtr_multi_round,
        ),
        (
            "test_input_required_result_tampered_state",
            "Carries HMAC-sealed requestState and refuses an altered one (-32602).",
            _mrtr_tampered,
        ),
        (
            "test_input_required_result_capabilities",
            "Asks only for the inputs whose client capability was declared.",
            _mrtr_capabilities,
        ),
    ]


# -- the tasks extension (tasks-* scenarios, SEP-2663) ------------------------------------------

DELETE_REQUEST: Final = elicit_request(
    "Delete this file?", {"confirm": {"type": "boolean"}}, ["confirm"]
)
FIRST_REQUEST: Final = elicit_request("First: your name?", {"name": {"type": "string"}}, ["name"])
SECOND_REQUEST: Final = elicit_request(
    "Second: confirm?", {"confirm": {"type": "boolean"}}, ["confirm"]
)


class GreetArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``greet``."""

    name: str = "World"


class ComputeArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``slow_compute``: how long to work, in seconds, and a label to echo."""

    seconds: float = 0.0
    label: str = ""


class DeleteArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``confirm_delete``."""

    filename: str = ""


async def _greet(args: GreetArgs, ctx: CallContext) -> str:
    return f"Hello, {args.name}!"


async def _slow_compute(args: ComputeArgs, ctx: CallContext) -> str:
    if args.seconds > 0:
        await trio.sleep(args.seconds)
    return f"Computed {args.label or 'result'} after {args.seconds:g} s."


async def _failing_job(args: NoArgs, ctx: CallContext) -> CallToolResult:
    await trio.sleep(0.5)
    return CallToolResult(content=[TextContent(text="The job failed (on purpose).")], is_error=True)


async def _protocol_error_job(args: NoArgs, ctx: CallContext) -> str:
    await trio.sleep(0.2)
    raise ProtocolError(codes.INTERNAL_ERROR, "Internal error: the job broke (on purpose)")


async def _confirm_delete(args: DeleteArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"confirm": DELETE_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    confirmed = _field(elicited(answers, "confirm"), "confirm")
    return f"Deleted {args.filename}." if confirmed == "True" else f"Kept {args.filename}."


async def _multi_input(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"first": FIRST_REQUEST, "second": SECOND_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    return f"Got {_field(elicited(answers, 'first'), 'name')} and both answers."


async def _tool_with_task(args: NoArgs, ctx: CallContext) -> str | InputRequired:
    answers = await gather(ctx, {"user_name": NAME_REQUEST})
    if isinstance(answers, InputRequired):
        return answers
    await trio.sleep(0.2)  # the long part, run as the task
    return f"Hello, {_field(elicited(answers, 'user_name'), 'name')}! (from the task)"


class RegionArgs(msgspec.Struct, kw_only=True):
    """Arguments of ``test_header_param``."""

    region: str


REGION_SCHEMA: Final[JsonObject] = {
    "type": "object",
    "properties": {
        "region": {
            "type": "string",
            "description": "A region, mirrored in the Mcp-Param-Region header.",
            "x-mcp-header": "Region",
        }
    },
    "required": ["region"],
}


async def _header_param(args: RegionArgs, ctx: CallContext) -> str:
    return f"Region: {args.region}"


def register_header_fixture(server: Server) -> None:
    """The tool with an ``x-mcp-header`` argument (``http-custom-header-server-validation``)."""
    server.register_tool(
        Tool(
            "test_header_param",
            "Echoes `region`, which the client also sends as the Mcp-Param-Region header.",
            RegionArgs,
            _header_param,
            input_schema=REGION_SCHEMA,
        )
    )


def register_task_fixtures(server: Server) -> None:
    """The tools the suite's ``tasks-*`` scenarios call (SEP-2663 fixture names)."""
    server.register_tool(Tool("greet", "Says hello (never a task).", GreetArgs, _greet))
    server.register_tool(
        Tool(
            "slow_compute",
            "Works `seconds` seconds, then answers (a task when the client can take one).",
            ComputeArgs,
            _slow_compute,
            task_support="optional",
        )
    )
    server.register_tool(
        Tool(
            "failing_job",
            "Fails with a tool error after about half a second (runs only as a task).",
            NoArgs,
            _failing_job,
            task_support="required",
        )
    )
    server.register_tool(
        Tool(
            "protocol_error_job",
            "Breaks with a protocol-level error (a task when the client can take one).",
            NoArgs,
            _protocol_error_job,
            task_support="optional",
        )
    )
    server.register_tool(
        Tool(
            "confirm_delete",
            "Asks the user to confirm (elicitation), then answers.",
            DeleteArgs,
            _confirm_delete,
            task_support="optional",
        )
    )
    server.register_tool(
        Tool(
            "multi_input",
            "Asks two questions at once (elicitation), then answers.",
            NoArgs,
            _multi_input,
            task_support="optional",
        )
    )
    server.register_tool(
        Tool(
            "test_tool_with_task",
            "Asks for user_name (MRTR) synchronously, then runs as a task that greets.",
            NoArgs,
            _tool_with_task,
            task_support="required",
            input_before_task=True,
        )
    )


def register_conformance(server: Server) -> None:
    """Register the conformance suite's fixture entries (and our transport fixture)."""
    for name, description, handler in _no_args_tools(server):
        server.register_tool(
            Tool(name, description, NoArgs, handler, short_description=description)
        )
    server.register_tool(
        Tool(
            "test_sampling",
            "Asks the client's model to answer `prompt` (sampling/createMessage).",
            PromptArgs,
            _sampling,
        )
    )
    server.register_tool(
        Tool(
            "test_elicitation",
            "Asks the user for a username and an email (elicitation/create).",
            MessageArgs,
            _elicitation,
        )
    )
    server.register_tool(
        Tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features (SEP-1613, SEP-2106).",
            ContactArgs,
            _json_schema_tool,
            input_schema=JSON_SCHEMA_2020_12_INPUT,
        )
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
    register_task_fixtures(server)
    register_header_fixture(server)
    server.register_prompt(
        Prompt(
            "test_input_required_result_prompt",
            "Asks which context to use (key user_context), then renders with it.",
            _mrtr_prompt,
        )
    )
    register_fixture(server)


def build_conformance_server(*, state_key: bytes | None = None) -> Server:
    """A :class:`~coremetry.mcp.Server` carrying the conformance fixture.

    Args:
        state_key: the HMAC key sealing ``requestState`` (default: random per process).
    """
    server = Server(
        "coremetry-conformance-fixture",
        __version__,
        title="Coremetry conformance fixture",
        resource_subscriptions=True,
        list_changed=True,
        state_key=state_key,
    )
    register_conformance(server)
    return server
