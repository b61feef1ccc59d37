"""The OAuth resource-server side: public URLs, protected-resource metadata, scopes (issue 18).

MCP 2025-06-18 and 2025-11-25 (Authorization) make an HTTP MCP server an OAuth 2.1 resource
server: it publishes RFC 9728 protected-resource metadata (PRM), names it in every 401's
``WWW-Authenticate`` (``resource_metadata="…"``), and accepts only access tokens issued for
itself (RFC 8707 ``resource``, checked as the token's ``aud``).

URLs (:class:`PublicUrls`). Every absolute URL we announce comes from one *base*:
``http.public_url`` when configured, else ``<scheme>://<Host><prefix>`` of the request, where the
scheme is a sane ``X-Forwarded-Proto`` (``http``/``https``) or ``http`` (the server itself speaks
plain HTTP), ``Host`` has already passed the Host allow-list (:class:`~coremetry.http_edge.
HttpPolicy`), and the prefix is :func:`~coremetry.http_edge.public_prefix`. From it:

- the MCP resource: ``<base>/api/mcp``; the server's own resource identifiers are that and
  ``<base>`` (what the root PRM names), and an access token must carry one of them as ``aud``;
- the PRM: ``<base>/.well-known/oauth-protected-resource/api/mcp`` (RFC 9728 §3.1: the
  well-known segment between the authority and the resource's path; with a prefix, the
  prefix stays in front, where the proxy routes it to us);
- the issuer of the built-in authorization server: ``<base>``.

Scopes map to roles (:data:`SCOPE_ROLES`): ``mcp:read`` viewer, ``mcp:write`` editor,
``mcp:admin`` admin. A grant's role is the highest its scopes name, capped at the user's role.
"""

from collections.abc import Iterable
from typing import Final

from coremetry.config import Config
from coremetry.http_edge import HeaderLookup, HttpPolicy, public_prefix
from coremetry.roles import ROLES

MCP_PATH: Final = "/api/mcp"
"""The MCP endpoint's path below the base."""

PRM_PATH: Final = "/.well-known/oauth-protected-resource"
"""RFC 9728 §3 well-known path of the protected-resource metadata."""

AS_METADATA_PATH: Final = "/.well-known/oauth-authorization-server"
"""RFC 8414 §3 well-known path of the authorization-server metadata."""

OIDC_DISCOVERY_PATH: Final = "/.well-known/openid-configuration"
"""OpenID Connect Discovery 1.0 §4 path, which MCP clients also probe (2025-11-25)."""

SCOPE_ROLES: Final[dict[str, str]] = {
    "mcp:read": "viewer",
    "mcp:write": "editor",
    "mcp:admin": "admin",
}
"""OAuth scope -> the role it grants (never more than the user's own)."""

ROLE_SCOPES: Final[dict[str, str]] = {role: scope for scope, role in SCOPE_ROLES.items()}
"""Role -> the scope that names it."""

DEFAULT_SCOPE: Final = "mcp:read"
"""The scope granted when a client asks for none."""


def role_rank(role: str) -> int:
    """The rank of a role in :data:`~coremetry.roles.ROLES` (viewer 0 < editor < admin)."""
    return ROLES.index(role)


def role_for_scopes(scopes: Iterable[str], user_role: str) -> str:
    """The role a grant of ``scopes`` gives a user of ``user_role``.

    The highest role a scope names, capped at ``user_role`` (viewer when no scope names one).
    """
    wanted = "viewer"
    for scope in scopes:
        role = SCOPE_ROLES.get(scope)
        if role is not None and role_rank(role) > role_rank(wanted):
            wanted = role
    return wanted if role_rank(wanted) <= role_rank(user_role) else user_role


def scopes_for_role(role: str) -> list[str]:
    """The scopes a token of ``role`` carries: every scope up to and including the role's."""
    return [scope for scope, named in SCOPE_ROLES.items() if role_rank(named) <= role_rank(role)]


class PublicUrls:
    """Absolute URLs of this server as a client reaches it (see the module docstring).

    Args:
        root_path: ``http.root_path`` (a sane ``X-Forwarded-Prefix`` wins per request).
        public_url: ``http.public_url``; when set it is the base of every URL, whatever the
            request says.

    The ``Host`` has passed the allow-list before any of these methods is called (transports
    admit a request first).
    """

    def __init__(self, root_path: str = "", public_url: str = "") -> None:
        self._policy = HttpPolicy(root_path=root_path)
        self._public_url = public_url.rstrip("/")

    @classmethod
    def from_config(cls, config: Config) -> "PublicUrls":
        """The URLs of ``http.root_path`` and ``http.public_url``."""
        return cls(config.http.root_path, config.http.public_url)

    def base(self, headers: HeaderLookup) -> str:
        """``<scheme>://<host><prefix>``, never ending in ``/``."""
        if self._public_url:
            return self._public_url
        proto = (headers.get("x-forwarded-proto") or "").split(",", 1)[0].strip().lower()
        scheme = proto if proto in ("http", "https") else "http"
        host = (headers.get("host") or "localhost").strip().lower()
        if not host or any(c in host for c in '/\\"@ ?#'):
            host = "localhost"
        return f"{scheme}://{host}{public_prefix(headers, self._policy)}"

    def resource(self, headers: HeaderLookup) -> str:
        """The MCP resource identifier (``<base>/api/mcp``)."""
        return self.base(headers) + MCP_PATH

    def audiences(self, headers: HeaderLookup) -> frozenset[str]:
        """This server's resource identifiers for the request.

        ``<base>`` and ``<base>/api/mcp``; an access token's ``aud`` must be one of them.
        """
        base = self.base(headers)
        return frozenset({base, base + MCP_PATH})

    def resource_metadata(self, headers: HeaderLookup) -> str:
        """The PRM URL every 401 names.

        ``<base>/.well-known/oauth-protected-resource/api/mcp``.
        """
        return self.base(headers) + PRM_PATH + MCP_PATH

    def issuer(self, headers: HeaderLookup) -> str:
        """The built-in authorization server's issuer identifier (RFC 8414 §2): ``<base>``."""
        return self.base(headers)


def oidc_issuer(config: Config) -> str:
    """``auth.oidc.issuer``: the external identity provider's issuer, ``""`` when none is set."""
    return config.auth.oidc.issuer


def authorization_servers(config: Config, own_issuer: str) -> list[str]:
    """The ``authorization_servers`` of the protected-resource metadata (RFC 9728 §2).

    Args:
        config: the effective configuration.
        own_issuer: the built-in authorization server's issuer for this request
            (:meth:`PublicUrls.issuer`).

    Returns:
        ``[auth.oidc.issuer]`` when an external identity provider is configured; else
        ``[own_issuer]`` when ``auth.oauth.enabled``; else ``[]`` (no OAuth discovery).
    """
    external = oidc_issuer(config)
    if external:
        return [external]
    if config.auth.oauth.enabled:
        return [own_issuer]
    return []


def discovery_offered(config: Config) -> bool:
    """Whether OAuth discovery is offered at all (the built-in server or an external one)."""
    return bool(oidc_issuer(config)) or config.auth.oauth.enabled


def protected_resource_metadata(
    config: Config, urls: PublicUrls, headers: HeaderLookup, *, root: bool
) -> dict[str, object]:
    """The RFC 9728 §2 document for this request.

    Args:
        config: the effective configuration.
        urls: the public URLs.
        headers: the request's headers.
        root: the document at ``/.well-known/oauth-protected-resource`` (resource ``<base>``)
            rather than its ``/api/mcp``-suffixed form (resource ``<base>/api/mcp``); RFC 9728
            §3.3 wants ``resource`` to match the URL the document was fetched for.

    Returns:
        ``resource``, ``authorization_servers``, ``scopes_supported``,
        ``bearer_methods_supported`` (``["header"]``) and ``resource_name``.
    """
    base = urls.base(headers)
    return {
        "resource": base if root else base + MCP_PATH,
        "authorization_servers": authorization_servers(config, urls.issuer(headers)),
        "scopes_supported": list(SCOPE_ROLES),
        "bearer_methods_supported": ["header"],
        "resource_name": "Coremetry MCP",
    }
