"""Partial stubs of ``authlib.oauth2.rfc6749`` (see authlib/__init__.pyi)."""

from collections.abc import Callable, Mapping, Sequence
from typing import Never, Protocol

from .grants import AuthorizationCodeGrant as AuthorizationCodeGrant
from .grants import BaseGrant as BaseGrant
from .grants import RefreshTokenGrant as RefreshTokenGrant

Headers = list[tuple[str, str]]

class TokenGenerator(Protocol):
    def __call__(
        self,
        *,
        grant_type: str,
        client: Never,
        user: Never,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, object]: ...

Response = tuple[int, object, Headers]

class OAuth2Error(Exception):
    error: str | None
    description: str
    status_code: int
    state: str | None
    redirect_uri: str | None
    def __init__(
        self,
        description: str | None = None,
        uri: str | None = None,
        status_code: int | None = None,
        state: str | None = None,
        redirect_uri: str | None = None,
        redirect_fragment: bool = False,
        error: str | None = None,
    ) -> None: ...
    def __call__(self, uri: str | None = None) -> Response: ...

class InvalidRequestError(OAuth2Error): ...
class InvalidClientError(OAuth2Error): ...
class InvalidGrantError(OAuth2Error): ...
class InvalidScopeError(OAuth2Error): ...
class AccessDeniedError(OAuth2Error): ...
class UnauthorizedClientError(OAuth2Error): ...

class OAuth2Payload:
    @property
    def data(self) -> Mapping[str, str]: ...
    @property
    def datalist(self) -> Mapping[str, list[str]]: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def redirect_uri(self) -> str | None: ...
    @property
    def scope(self) -> str | None: ...
    @property
    def state(self) -> str | None: ...

class OAuth2Request:
    method: str
    uri: str
    headers: Mapping[str, str]
    payload: OAuth2Payload | None
    client: object
    user: object
    auth_method: str | None
    def __init__(
        self, method: str, uri: str, body: None = None, headers: Mapping[str, str] | None = None
    ) -> None: ...
    @property
    def args(self) -> Mapping[str, str]: ...
    @property
    def form(self) -> Mapping[str, str]: ...
    @property
    def scope(self) -> str | None: ...

class JsonPayload:
    @property
    def data(self) -> Mapping[str, object]: ...

class JsonRequest:
    method: str
    uri: str
    headers: Mapping[str, str]
    payload: JsonPayload | None
    def __init__(self, method: str, uri: str, headers: Mapping[str, str] | None = None) -> None: ...

class ClientMixin: ...
class AuthorizationCodeMixin: ...
class TokenMixin: ...

class AuthorizationServer:
    scopes_supported: Sequence[str] | None
    def __init__(self, scopes_supported: Sequence[str] | None = None) -> None: ...
    def register_grant(
        self,
        grant_cls: type[BaseGrant],
        extensions: Sequence[Callable[[BaseGrant], None]] | None = None,
    ) -> None: ...
    def register_endpoint(self, endpoint: object) -> None: ...
    def register_token_generator(self, grant_type: str, func: TokenGenerator) -> None: ...
    def get_consent_grant(
        self, request: object = None, end_user: object = None
    ) -> AuthorizationCodeGrant: ...
    def create_authorization_response(
        self, request: object = None, grant_user: object = None, grant: BaseGrant | None = None
    ) -> Response: ...
    def create_token_response(self, request: object = None) -> Response: ...
    def create_endpoint_response(self, name: str, request: object = None) -> Response: ...
    def handle_error_response(self, request: object, error: OAuth2Error) -> Response: ...
