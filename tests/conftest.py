"""Shared test fixtures: schema validation of everything the server emits.

Every message a test sees from the server goes through :func:`check_emitted`, which validates it
against ``tests/data/mcp-schema/<revision>/schema.json`` (the official schemas, carried verbatim;
``tests/data/README.md`` lists every carried file): the JSON-RPC envelope against
``JSONRPCMessage`` and, for a result, the ``result`` against the method's own result definition.
"""

import json
import os
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Final, TypeAlias, cast

import jsonschema
import jsonschema.validators
from jsonschema.protocols import Validator

JsonValue: TypeAlias = (
    str | int | float | bool | Mapping[str, "JsonValue"] | Sequence["JsonValue"] | None
)

REPO: Final = Path(__file__).resolve().parent.parent
DATA: Final = REPO / "tests" / "data"
"""The test data the repository carries (sources, commits and licences: its README.md)."""
SCHEMA_DIR: Final = DATA / "mcp-schema"

RESULT_DEFS: Final[Mapping[str, str]] = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "logging/setLevel": "EmptyResult",
    "resources/subscribe": "EmptyResult",
    "resources/unsubscribe": "EmptyResult",
    "server/discover": "DiscoverResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
    # 2025-11-25 tasks (the 2026-07-28 tasks extension has no schema file: its results are
    # checked by shape in tests/mcp/test_tasks_e2e.py).
    "tasks/get": "GetTaskResult",
    "tasks/list": "ListTasksResult",
    "tasks/cancel": "CancelTaskResult",
}

NOTIFICATION_DEFS: Final[Mapping[str, str]] = {
    "notifications/progress": "ProgressNotification",
    "notifications/message": "LoggingMessageNotification",
    "notifications/tasks/status": "TaskStatusNotification",
}


@cache
def _schema(revision: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((SCHEMA_DIR / revision / "schema.json").read_text())
    return loaded


def _definitions(revision: str) -> set[str]:
    schema = _schema(revision)
    defs = schema.get("$defs", schema.get("definitions"))
    return set(defs) if isinstance(defs, dict) else set()


@cache
def _validator(revision: str, definition: str) -> Validator:
    schema = _schema(revision)
    defs_key = "$defs" if "$defs" in schema else "definitions"
    ref_schema = dict(schema)
    ref_schema["$ref"] = f"#/{defs_key}/{definition}"
    cls = jsonschema.validators.validator_for(schema)
    validator: Validator = cls(ref_schema)
    return validator


def validate_definition(instance: Mapping[str, object], revision: str, definition: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``instance`` fits ``definition``."""
    # Decoded JSON is a JsonValue by construction; the stubs want that recursive alias.
    _validator(revision, definition).validate(cast(JsonValue, instance))


def check_emitted(message: object, revision: str, method: str | None = None) -> None:
    """Validate one message the server emitted, for the revision in use.

    Args:
        message: the decoded JSON message (a dict) the server sent.
        revision: the protocol revision in use (selects the schema file).
        method: the request method the message answers (selects the result definition);
            ``None`` for notifications and errors.

    Raises:
        AssertionError: the message is not a JSON object.
        jsonschema.ValidationError: the message does not validate.
    """
    assert isinstance(message, dict), f"not a JSON object: {message!r}"
    envelope = message
    if "error" in message and message.get("id", 0) is None:
        # JSON-RPC 2.0 §5 says an error answering an unreadable id MUST carry "id": null; the
        # MCP schemas only allow string/integer ids (and from 2025-11-25 let the id be
        # omitted). We follow JSON-RPC (as the SDKs do) and validate the rest of the envelope.
        envelope = {k: v for k, v in message.items() if k != "id"}
        if revision in ("2024-11-05", "2025-03-26", "2025-06-18"):
            envelope["id"] = 0
    validate_definition(envelope, revision, "JSONRPCMessage")
    if "result" in message and method is not None:
        definition = RESULT_DEFS.get(method)
        result = message["result"]
        assert isinstance(result, dict), f"result is not an object: {message!r}"
        if method == "tools/call" and "task" in result:
            definition = "CreateTaskResult"  # a task-augmented call (2025-11-25)
        if method == "tools/call" and result.get("resultType") == "task":
            return  # 2026-07-28 tasks extension: no schema file (checked by shape elsewhere)
        if definition is not None and definition in _definitions(revision):
            validate_definition(result, revision, definition)
        if revision == "2026-07-28":
            assert result.get("resultType") in ("complete", "input_required"), message
    elif "method" in message and message["method"] in NOTIFICATION_DEFS:
        validate_definition(message, revision, NOTIFICATION_DEFS[str(message["method"])])
    elif "error" in message:
        err = message["error"]
        assert isinstance(err, dict)
        assert isinstance(err.get("code"), int), message
        assert isinstance(err.get("message"), str), message


def stdio_identity(data_dir: Path, role: str = "viewer") -> dict[str, str]:
    """The environment a ``coremetry stdio`` subprocess needs: a data dir holding a service
    token of ``role``, and that token in ``COREMETRY_TOKEN`` (the process refuses to start
    without one). Returns ``os.environ`` plus those two variables."""
    from coremetry.auth import open_identity_store

    with open_identity_store(data_dir) as store:
        token, _info = store.create_token(f"test-{role}-{len(store.list_tokens())}", role, None)
    return {**os.environ, "COREMETRY_DATA_DIR": str(data_dir), "COREMETRY_TOKEN": token}
