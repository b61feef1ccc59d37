"""The protocol core of Coremetry MCP.

JSON-RPC 2.0 framing, MCP lifecycle and version negotiation, registries, the call gate, the
tool-error contract and per-call deadlines. It knows JSON-RPC and MCP and nothing of HTTP,
authentication storage or telemetry: it imports
nothing from :mod:`coremetry.transports`, auth, the store, quart or hypercorn (a test enforces
it). Transports hand :class:`Server` bytes plus a :class:`Connection` and send back what it
answers. The modules, lowest first: ``wire``, ``codes``, ``versions``, ``uri_template``,
``tool_errors``, ``gate``, ``framing``, ``request_state``, ``outbound``, ``context``,
``registry``, ``pagination``, ``observe``, ``calls``, ``lists``, ``subscriptions``, ``tasks``,
``methods``, ``server`` (the facade).
"""

from . import codes as codes
from . import versions as versions
from . import wire as wire
from .calls import Connection as Connection
from .calls import PendingBatch as PendingBatch
from .calls import PendingCall as PendingCall
from .context import CallContext as CallContext
from .context import WaitNote as WaitNote
from .context import current_call_context as current_call_context
from .framing import ProtocolError as ProtocolError
from .framing import Reply as Reply
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
from .methods import MethodSpec as MethodSpec
from .observe import CALL_OUTCOMES as CALL_OUTCOMES
from .observe import CallObserver as CallObserver
from .observe import CallOutcome as CallOutcome
from .observe import CallRecord as CallRecord
from .outbound import ClientRequestError as ClientRequestError
from .registry import InputRequired as InputRequired
from .registry import Prompt as Prompt
from .registry import PromptArgument as PromptArgument
from .registry import Resource as Resource
from .registry import ResourceTemplate as ResourceTemplate
from .registry import Tool as Tool
from .registry import schema_for as schema_for
from .server import ConnectionDrain as ConnectionDrain
from .server import Server as Server
from .server import serve_connection as serve_connection
from .tool_errors import BUILTIN_ERROR_CLASSES as BUILTIN_ERROR_CLASSES
from .tool_errors import BackendUnavailable as BackendUnavailable
from .tool_errors import BadArgs as BadArgs
from .tool_errors import DeadlineExceeded as DeadlineExceeded
from .tool_errors import ErrorClass as ErrorClass
from .tool_errors import ErrorClasses as ErrorClasses
from .tool_errors import InternalFailure as InternalFailure
from .tool_errors import NotFound as NotFound
from .tool_errors import ToolError as ToolError
from .tool_errors import ToolErrorKind as ToolErrorKind
from .tool_errors import ToolFailure as ToolFailure
from .tool_errors import classify_tool_error as classify_tool_error
from .tool_errors import merge_error_classes as merge_error_classes
from .tool_errors import tool_error_json as tool_error_json
from .uri_template import UriTemplate as UriTemplate
from .uri_template import extract_uri_template_value as extract_uri_template_value

__all__ = [
    "ANONYMOUS_VIEWER",
    "BUILTIN_ERROR_CLASSES",
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
    "ConnectionDrain",
    "DeadlineExceeded",
    "Denied",
    "ErrorClass",
    "ErrorClasses",
    "GateCall",
    "GateError",
    "InputRequired",
    "InternalFailure",
    "MethodSpec",
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
    "WaitNote",
    "classify_tool_error",
    "codes",
    "current_call_context",
    "denied",
    "extract_uri_template_value",
    "merge_error_classes",
    "role_gate",
    "role_satisfies",
    "schema_for",
    "serve_connection",
    "tool_error_json",
    "versions",
    "wire",
]
