"""Partial stubs of ``authlib.oauth2.rfc7591`` (see authlib/__init__.pyi)."""

from authlib.oauth2.rfc6749 import AuthorizationServer

class ClientRegistrationEndpoint:
    ENDPOINT_NAME: str
    server: AuthorizationServer
    def __init__(self, server: AuthorizationServer | None = None) -> None: ...
