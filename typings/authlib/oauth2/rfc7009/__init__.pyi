"""Partial stubs of ``authlib.oauth2.rfc7009`` (see authlib/__init__.pyi)."""

from typing import ClassVar

from authlib.oauth2.rfc6749 import AuthorizationServer

class RevocationEndpoint:
    ENDPOINT_NAME: ClassVar[str]
    CLIENT_AUTH_METHODS: ClassVar[list[str]]
    server: AuthorizationServer
    def __init__(self, server: AuthorizationServer) -> None: ...
