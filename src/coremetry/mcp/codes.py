"""JSON-RPC 2.0 and MCP error codes, with the situations each one is used for.

Sources: JSON-RPC 2.0 §5.1 (the ``-327xx``/``-326xx`` codes); MCP ``basic/index``
"Error Codes" for the ``-3202x`` band (2026-07-28) and ``server/resources`` "Error Handling"
for ``-32002`` (2024-11-05 … 2025-11-25); ``shared/DESIGN.md`` §3 for our own two codes in the
implementation-defined ``-32000..-32019`` band.
"""

from typing import Final

PARSE_ERROR: Final = -32700
"""The bytes are not JSON (or not UTF-8). Answered with ``id: null`` (JSON-RPC 2.0 §5.1)."""

INVALID_REQUEST: Final = -32600
"""JSON, but not a valid request object: not an object, ``jsonrpc`` is not ``"2.0"``, a
``null``/boolean/float/object ``id``, a missing or non-string ``method``, or a batch where
batches are not allowed. The id is echoed when it could be read, else ``null``."""

METHOD_NOT_FOUND: Final = -32601
"""The method does not exist in the negotiated revision (also: methods removed in 2026-07-28,
such as ``initialize`` or ``ping`` on a stateless request, and completion when the capability is
not offered). Over Streamable HTTP in the 2026-07-28 era this goes with HTTP 404."""

INVALID_PARAMS: Final = -32602
"""The params do not decode (the message names the field, e.g. "Expected `str`, got `int` - at
`$.name`"), an unknown tool or prompt, a missing required prompt argument, a bad cursor, an
invalid log level; in 2026-07-28 also a missing required ``_meta`` field (HTTP 400) and an unknown
resource URI (with ``data.uri``)."""

INTERNAL_ERROR: Final = -32603
"""A bug on our side. The message never carries a stack trace, a file path or a raw
exception repr; the details are logged server-side under an incident id."""

RESOURCE_NOT_FOUND: Final = -32002
"""``resources/read`` of an unknown URI, revisions 2024-11-05 to 2025-11-25 (``data.uri`` set).
Never emitted in 2026-07-28, where the same situation is :data:`INVALID_PARAMS`."""

HEADER_MISMATCH: Final = -32020
"""2026-07-28: an HTTP request header (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``)
is missing or disagrees with the body. Always with HTTP 400."""

MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
"""2026-07-28: the request needs a client capability the client did not declare in
``_meta["io.modelcontextprotocol/clientCapabilities"]``; ``data.requiredCapabilities`` names it.
HTTP 400."""

UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
"""2026-07-28: ``_meta["io.modelcontextprotocol/protocolVersion"]`` names a revision we do not
serve statelessly; ``data.supported`` lists ours and ``data.requested`` echoes theirs. HTTP 400."""

RATE_LIMITED: Final = -32000
"""Ours: the call gate's rate question said "not now". ``data.retry_after_ms`` says how long to
wait when the gate knows. Also used for any gate refusal that is not a role denial."""

FORBIDDEN: Final = -32001
"""Ours: the caller's role is below the entry's ``min_role``. The message names the role that is
needed; never an HTTP 401/403 (the identity is valid, the call is not allowed)."""
