"""The protocol core of Coremetry MCP.

JSON-RPC 2.0 framing, MCP lifecycle and version negotiation, registries, the call gate, the
tool-error contract and per-call deadlines. It knows JSON-RPC and MCP and nothing of HTTP,
authentication storage or telemetry: it imports
nothing from :mod:`coremetry.transports`, auth, the store, quart or hypercorn (a test enforces
it). Transports hand :class:`Server` bytes plus a :class:`Connection` and send back what it
answers.
"""

from . import codes as codes
from . import versions as versions
from . import wire as wire
from .dispatch import CALL_OUTCOMES as CALL_OUTCOMES
from .dispatch import CallContext as CallContext
from .dispatch import CallObserver as CallObserver
from .dispatch import CallOutcome as CallOutcome
from .dispatch import CallRecord as CallRecord
from .dispatch import ClientRequestError as ClientRequestError
from .dispatch import Connection as Connection
from .dispatch import PendingBatch as PendingBatch
from .dispatch import PendingCall as PendingCall
from .dispatch import ProtocolError as ProtocolError
from .dispatch import Reply as Reply
from .dispatch import Server as Server
from .dispatch import serve_connection as serve_connection
from .gate import ANONYMOUS_VIEWER as ANONYMOUS_VIEWER
from .gate import ROLES as ROLES
from .gate import Caller as Caller
from .gate import CallGate as CallGate
from .gate import CallKind as CallKind
from .gate import Denied as Denied
from .gate import GateCall as GateCall
from .gate import GateError as GateError
from .gate import RateLimited as RateLimited
from .gate import denied as denied
from .gate import role_gate as role_gate
from .gate import role_satisfies as role_satisfies
from .registry import InputRequired as InputRequired
from .registry import Prompt as Prompt
from .registry import PromptArgument as PromptArgument
from .registry import Resource as Resource
from .registry import ResourceTemplate as ResourceTemplate
from .registry import Tool as Tool
from .registry import schema_for as schema_for
from .tool_errors import BackendUnavailable as BackendUnavailable
from .tool_errors import BadArgs as BadArgs
from .tool_errors import DeadlineExceeded as DeadlineExceeded
from .tool_errors import InternalFailure as InternalFailure
from .tool_errors import NotFound as NotFound
from .tool_errors import ToolError as ToolError
from .tool_errors import ToolErrorKind as ToolErrorKind
from .tool_errors import ToolFailure as ToolFailure
from .tool_errors import classify_tool_error as classify_tool_error
from .tool_errors import register_error_class as register_error_class
from .tool_errors import tool_error_json as tool_error_json
from .uri_template import UriTemplate as UriTemplate
from .uri_template import extract_uri_template_value as extract_uri_template_value

__all__ = [
    "ANONYMOUS_VIEWER",
    "BackendUnavailable",
    "BadArgs",
    "CALL_OUTCOMES",
    "CallContext",
    "CallGate",
    "CallKind",
    "CallObserver",
    "CallOutcome",
    "CallRecord",
    "Caller",
    "ClientRequestError",
    "Connection",
    "DeadlineExceeded",
    "Denied",
    "GateCall",
    "GateError",
    "InputRequired",
    "InternalFailure",
    "NotFound",
    "PendingBatch",
    "PendingCall",
    "Prompt",
    "PromptArgument",
    "ProtocolError",
    "ROLES",
    "RateLimited",
    "Reply",
    "Resource",
    "ResourceTemplate",
    "Server",
    "Tool",
    "ToolError",
    "ToolErrorKind",
    "ToolFailure",
    "UriTemplate",
    "classify_tool_error",
    "codes",
    "denied",
    "extract_uri_template_value",
    "register_error_class",
    "role_gate",
    "role_satisfies",
    "schema_for",
    "serve_connection",
    "tool_error_json",
    "versions",
    "wire",
]
