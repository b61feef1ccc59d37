"""Identity primitives shared by every layer: who is calling and what role they hold.

Contract:

- Roles are ordered ``viewer < editor < admin`` (:data:`ROLES`, least privileged first). A
  ``min_role`` of ``""`` means any authenticated identity (the viewer floor).
- :func:`role_satisfies` fails closed: an unknown role on either side satisfies nothing.
- :class:`Caller` is what the protocol core, the gate, the audit log and OTLP ingest know of an
  identity; the auth layer builds it from its claims.

This module imports nothing of ``coremetry`` (it is the bottom of the package graph, see
``tests/test_layering.py``), so the protocol core (``coremetry.mcp``) and the auth layer
(``coremetry.auth``) both depend on it and never on each other.
"""

from typing import Final

from msgspec import Struct

ROLES: Final[tuple[str, ...]] = ("viewer", "editor", "admin")
"""Known roles, least privileged first; the index is the rank."""


def role_rank(role: str) -> int:
    """Rank a role name.

    Args:
        role: a role name; ``""`` (the viewer floor) ranks as ``viewer``.

    Returns:
        0 for viewer/"", 1 for editor, 2 for admin, and -1 for an unknown role, which therefore
        satisfies nothing.
    """
    if role == "":
        return 0
    try:
        return ROLES.index(role)
    except ValueError:
        return -1


def role_satisfies(have: str, need: str) -> bool:
    """Tell whether a caller with role ``have`` may use an entry whose ``min_role`` is ``need``.

    An unknown ``need`` is satisfied by nobody (fail closed); an unknown ``have`` satisfies
    nothing.
    """
    rank_have = role_rank(have)
    rank_need = role_rank(need)
    return rank_have >= 0 and rank_need >= 0 and rank_have >= rank_need


class Caller(Struct, frozen=True, kw_only=True):
    """Who is calling, as the protocol core sees it.

    Built by the transport from its authentication result (the auth layer's claims), so the core
    never imports auth. ``subject`` is the stable identity (a user name or a token's owner);
    ``role`` one of :data:`ROLES`; ``kind`` how it authenticated (``"jwt"``,
    ``"service_token"``, ``"local"``); ``token_name`` the service token's name, if any.
    """

    subject: str
    role: str
    kind: str = ""
    token_name: str = ""
