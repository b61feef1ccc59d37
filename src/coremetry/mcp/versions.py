"""Supported MCP protocol revisions and version negotiation.

Revisions are dates, but they are ordered through :data:`ALL_VERSIONS` (a tuple), never by
string comparison, following ``python-sdk:src/mcp-types/mcp_types/version.py``.

Two eras (``shared/reference/mcp-spec.md`` §1 and §1'):

- the *handshake era* (2024-11-05 … 2025-11-25): ``initialize`` negotiates a revision for a
  session; an unknown requested revision is answered with our latest of that era, never an error
  (``basic/lifecycle`` "Version Negotiation");
- the *stateless era* (2026-07-28): every request names its revision in
  ``_meta["io.modelcontextprotocol/protocolVersion"]``; an unknown one is ``-32022``.
"""

from typing import Final

V2024_11_05: Final = "2024-11-05"
V2025_03_26: Final = "2025-03-26"
V2025_06_18: Final = "2025-06-18"
V2025_11_25: Final = "2025-11-25"
V2026_07_28: Final = "2026-07-28"

HANDSHAKE_VERSIONS: Final[tuple[str, ...]] = (V2024_11_05, V2025_03_26, V2025_06_18, V2025_11_25)
"""Revisions negotiated by ``initialize``, oldest first."""

STATELESS_VERSIONS: Final[tuple[str, ...]] = (V2026_07_28,)
"""Revisions served per request through ``_meta`` (``server/discover`` era), oldest first."""

ALL_VERSIONS: Final[tuple[str, ...]] = HANDSHAKE_VERSIONS + STATELESS_VERSIONS
"""Every revision we serve, oldest first; the index is the order."""

LATEST_HANDSHAKE: Final = HANDSHAKE_VERSIONS[-1]
LATEST: Final = ALL_VERSIONS[-1]

DEFAULT_WITHOUT_HEADER: Final = V2025_03_26
"""The revision assumed when an HTTP client sends no ``MCP-Protocol-Version`` and nothing else
says which revision is in use (2025-06-18 ``basic/transports`` "Protocol Version Header")."""


def negotiate(requested: str) -> str:
    """Answer an ``initialize`` request's ``protocolVersion``.

    Args:
        requested: the client's ``params.protocolVersion`` (any string).

    Returns:
        ``requested`` when it is a handshake-era revision we serve, else :data:`LATEST_HANDSHAKE`
        (spec: the server "MUST respond with another protocol version it supports", which SHOULD
        be its latest). Never raises.
    """
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE


def at_least(version: str, minimum: str) -> bool:
    """Tell whether ``version`` is ``minimum`` or a later revision.

    Args:
        version: a revision from :data:`ALL_VERSIONS`.
        minimum: a revision from :data:`ALL_VERSIONS`.

    Returns:
        True when ``version`` is the same as or newer than ``minimum``.

    Raises:
        ValueError: either argument is not a revision we know.
    """
    return ALL_VERSIONS.index(version) >= ALL_VERSIONS.index(minimum)


def is_stateless(version: str) -> bool:
    """Tell whether ``version`` belongs to the stateless (2026-07-28) era."""
    return version in STATELESS_VERSIONS
