"""Partial stubs of ``authlib.oauth2.rfc6749.grants`` (see authlib/__init__.pyi)."""

from typing import ClassVar

from authlib.oauth2.rfc6749 import OAuth2Request

class BaseGrant:
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]]
    request: OAuth2Request
    server: object
    def __init__(self, request: OAuth2Request, server: object) -> None: ...
    def register_hook(self, hook_type: str, hook: object) -> None: ...

class AuthorizationCodeGrant(BaseGrant):
    redirect_uri: str
    def validate_consent_request(self) -> str: ...

class RefreshTokenGrant(BaseGrant):
    INCLUDE_NEW_REFRESH_TOKEN: ClassVar[bool]
