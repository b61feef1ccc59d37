"""``/.well-known/*``: the OAuth discovery documents, and a JSON 404 for every other name.

Clients that got a 401 probe these paths and parse the answer as JSON; an HTML 404 broke
their discovery (``shared/reference/field-failures.md`` B16). Served here:

- ``/.well-known/oauth-protected-resource`` and ``…/oauth-protected-resource/api/mcp``: the
  RFC 9728 protected-resource metadata (:func:`~coremetry.auth.oauth_resource.
  protected_resource_metadata`), when OAuth discovery is offered;
- ``/.well-known/oauth-authorization-server[/…]`` and ``/.well-known/openid-configuration[/…]``:
  the RFC 8414 authorization-server metadata, when the built-in authorization server is on
  (a ``metadata`` callable given by the app);
- anything else under ``/.well-known/``: ``404 {"error": "not_found", "detail": …}``.

The documents are public: ``GET`` (and ``HEAD``) without authentication, any ``Origin`` may
read them (``Access-Control-Allow-Origin: *``, as RFC 8414 §3 and RFC 9728 §3 metadata are
meant to be fetched from browsers too); other methods get 405.
"""

from collections.abc import Callable
from typing import Final

import msgspec
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

from coremetry.auth.oauth_resource import (
    AS_METADATA_PATH,
    MCP_PATH,
    OIDC_DISCOVERY_PATH,
    PRM_PATH,
    PublicUrls,
    discovery_offered,
    protected_resource_metadata,
)
from coremetry.config import Config
from coremetry.http_edge import Headers, send_response

WELL_KNOWN_PREFIX: Final = "/.well-known/"
"""Every path under this prefix is answered here."""

_ENCODER: Final = msgspec.json.Encoder()
_PUBLIC: Final = [
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"no-store"),
]

AsMetadata = Callable[[Headers], dict[str, object]]
"""Renders the RFC 8414 authorization-server metadata for a request."""


class WellKnown:
    """The ASGI handler of every ``/.well-known/*`` path (see the module docstring).

    Args:
        config: the effective configuration (decides what discovery is offered).
        urls: the public URLs the documents name.
        as_metadata: the built-in authorization server's metadata, or ``None`` when it is off.
    """

    def __init__(
        self, config: Config, urls: PublicUrls, as_metadata: AsMetadata | None = None
    ) -> None:
        self._config = config
        self._urls = urls
        self._as_metadata = as_metadata

    @staticmethod
    def matches(path: str) -> bool:
        """Whether ``path`` is under ``/.well-known/``."""
        return path.startswith(WELL_KNOWN_PREFIX)

    async def __call__(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Answer one request (JSON in every case)."""
        headers = Headers(scope["headers"])
        path = scope["path"]
        document = self._document(path, headers)
        if document is None:
            await send_response(
                send,
                404,
                _ENCODER.encode(
                    {
                        "error": "not_found",
                        "detail": f"no discovery document at {path} (the MCP endpoint is /api/mcp)",
                    }
                ),
                headers=_PUBLIC,
            )
            return
        if scope["method"] == "OPTIONS":
            await send_response(
                send,
                204,
                headers=[
                    *_PUBLIC,
                    (b"access-control-allow-methods", b"GET, OPTIONS"),
                    (b"access-control-allow-headers", b"mcp-protocol-version"),
                    (b"allow", b"GET, HEAD, OPTIONS"),
                ],
            )
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send_response(
                send,
                405,
                _ENCODER.encode({"error": "method_not_allowed", "detail": "use GET"}),
                headers=[*_PUBLIC, (b"allow", b"GET, HEAD, OPTIONS")],
            )
            return
        await send_response(send, 200, _ENCODER.encode(document), headers=_PUBLIC)

    def _document(self, path: str, headers: Headers) -> dict[str, object] | None:
        if path in (PRM_PATH, PRM_PATH + MCP_PATH, PRM_PATH + MCP_PATH + "/"):
            if not discovery_offered(self._config):
                return None
            return protected_resource_metadata(
                self._config, self._urls, headers, root=path == PRM_PATH
            )
        if self._as_metadata is not None and any(
            path == known or path.startswith(known + "/")
            for known in (AS_METADATA_PATH, OIDC_DISCOVERY_PATH)
        ):
            return self._as_metadata(headers)
        return None
