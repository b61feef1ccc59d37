"""The call gate: one place that says yes or no to every tool call, resource read and prompt get.

Contract (``shared/DESIGN.md`` §3):

- The dispatcher consults the gate before every ``tools/call``, ``resources/read`` and
  ``prompts/get`` — never before ``initialize``, ``ping``, ``server/discover`` or the list
  methods. The gate answers the role question first, then the rate question.
- :class:`Denied` (raised through :func:`denied`) becomes JSON-RPC ``-32001`` with a message that
  names the role the entry needs. Any other exception out of the gate becomes ``-32000``; when
  it carries ``retry_after_ms`` (e.g. :class:`RateLimited`) that goes to ``data.retry_after_ms``.
- Roles are ordered ``viewer < editor < admin``. An entry's ``min_role`` of ``""`` means any
  authenticated identity (the viewer floor). ``Caller``, ``ROLES`` and ``role_satisfies`` live
  in :mod:`coremetry.roles` (re-exported here) so the auth layer never imports this package.

Error tree::

    GateError
    ├── Denied        role below min_role   -> -32001
    └── RateLimited   over the rate budget  -> -32000, data.retry_after_ms
"""

from collections.abc import Awaitable, Callable
from typing import Final, Literal

from msgspec import Struct

from coremetry.roles import ROLES as ROLES
from coremetry.roles import Caller as Caller
from coremetry.roles import role_rank as role_rank
from coremetry.roles import role_satisfies as role_satisfies

CallKind = Literal["tool", "resource", "prompt"]


ANONYMOUS_VIEWER: Final = Caller(subject="anonymous", role="viewer", kind="none")
"""The caller used when a transport has no authentication (tests, the local fixture)."""


class GateCall(Struct, frozen=True, kw_only=True):
    """One question to the gate.

    ``kind``/``name`` identify the entry (a tool name, a resource URI as requested, a prompt
    name); ``min_role`` comes from the registry entry (for a templated resource, the template's);
    ``caller`` and ``transport`` say who asks and over what (``"stdio"``, ``"http"``, ``"sse"``,
    ``"ws"``), for the rate budget and the audit log.
    """

    kind: CallKind
    name: str
    min_role: str
    caller: Caller = ANONYMOUS_VIEWER
    transport: str = ""


CallGate = Callable[[GateCall], Awaitable[None]]
"""An async callable that returns to allow a call and raises to refuse it.

It may block (e.g. to consult a store); it runs inside the call's cancel scope, so a client
cancel ends it too. Raise :func:`denied` for a role refusal and :class:`RateLimited` (or any
exception with a ``retry_after_ms: int`` attribute) for a rate refusal.
"""


class GateError(Exception):
    """Root of the errors a gate raises to refuse a call."""


class Denied(GateError):
    """Raised by a gate when the caller's role is below the entry's ``min_role``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RateLimited(GateError):
    """Raised by a gate when the caller is over its rate budget.

    Args:
        message: what to tell the client, e.g. "rate limit exceeded for viewer:alice".
        retry_after_ms: how long the caller should wait before the next call, in milliseconds.
    """

    def __init__(self, message: str, *, retry_after_ms: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms


def denied(message: str) -> Denied:
    """Build the role refusal a gate raises (e.g. with message "needs role editor").

    Returns:
        A :class:`Denied` carrying ``message``; the dispatcher answers ``-32001`` and makes sure
        the message names the required role.
    """
    return Denied(message)


async def role_gate(call: GateCall) -> None:
    """The default gate: the role question only (no rate limit).

    Raises:
        Denied: the caller's role does not satisfy ``call.min_role``.
    """
    if not role_satisfies(call.caller.role, call.min_role):
        raise denied(
            f"{call.kind} {call.name!r} requires role {call.min_role or 'viewer'}; "
            f"the caller has role {call.caller.role or 'none'}"
        )
