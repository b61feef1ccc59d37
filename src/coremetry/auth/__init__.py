"""Authentication: who is calling (``shared/DESIGN.md`` §5; issue 4).

Credentials are a session JWT (from a password login, sent as ``Authorization: Bearer`` or the
``coremetry_session`` cookie) or a ``cmk_`` service token (``Authorization: Bearer``). Users and
service tokens live in the data dir's embedded database (:class:`IdentityStore`); the JWT secret
in ``<data_dir>/jwt.secret``.

The pieces, and who calls them:

- :class:`Authenticator`: the HTTP transports' ``Authenticate`` hook (headers -> ``Caller``).
- :class:`LoginService`: ``POST /api/auth/login`` (name and password -> JWT), throttled.
- :func:`open_identity_store`, :class:`IdentityStore`: the CLI (``user``/``token`` commands)
  and the first start (:meth:`IdentityStore.create_first_admin_token`). Blocking: the app calls
  it through ``trio.to_thread``.
- :class:`JwtIssuer`, :func:`load_or_create_secret`: session JWTs.
- :class:`OidcVerifier`: access tokens of an external OpenID Connect identity provider
  (``[auth.oidc]``), one more credential kind of the :class:`Authenticator`.
- :class:`TicketBook`: single-use WebSocket tickets (``POST /api/mcp/ws-ticket``, then
  ``/api/mcp/ws?ticket=…``) for clients that cannot send headers.
- :class:`Claims` and the :class:`AuthError` tree (:mod:`coremetry.auth.principal`).

This package takes ``Caller`` and ``ROLES`` from :mod:`coremetry.roles` and never imports the
protocol core (:mod:`coremetry.mcp`) or the transports.
"""

from .authenticator import SESSION_COOKIE as SESSION_COOKIE
from .authenticator import Authenticator as Authenticator
from .authenticator import HeaderSource as HeaderSource
from .authenticator import extract_credential as extract_credential
from .identity_store import SCHEMA_VERSION as SCHEMA_VERSION
from .identity_store import TOKEN_PREFIX as TOKEN_PREFIX
from .identity_store import IdentityStore as IdentityStore
from .identity_store import IdentityStoreError as IdentityStoreError
from .identity_store import TokenInfo as TokenInfo
from .identity_store import UnknownName as UnknownName
from .identity_store import UserInfo as UserInfo
from .identity_store import open_identity_store as open_identity_store
from .jwt_verifier import JwtIssuer as JwtIssuer
from .jwt_verifier import load_or_create_secret as load_or_create_secret
from .login import LoginService as LoginService
from .oidc import OidcVerifier as OidcVerifier
from .passwords import DEFAULT_PARAMS as DEFAULT_PARAMS
from .passwords import ScryptParams as ScryptParams
from .passwords import hash_password as hash_password
from .passwords import verify_password as verify_password
from .principal import AuthError as AuthError
from .principal import Claims as Claims
from .principal import CredentialKind as CredentialKind
from .principal import ExpiredToken as ExpiredToken
from .principal import InvalidToken as InvalidToken
from .principal import LoginFailed as LoginFailed
from .principal import LoginThrottled as LoginThrottled
from .principal import MissingCredentials as MissingCredentials
from .principal import RevokedToken as RevokedToken
from .ws_ticket import Ticket as Ticket
from .ws_ticket import TicketBook as TicketBook
from .ws_ticket import TicketLimit as TicketLimit

__all__ = [
    "AuthError",
    "Authenticator",
    "Claims",
    "CredentialKind",
    "DEFAULT_PARAMS",
    "ExpiredToken",
    "HeaderSource",
    "IdentityStore",
    "IdentityStoreError",
    "InvalidToken",
    "JwtIssuer",
    "LoginFailed",
    "LoginService",
    "LoginThrottled",
    "MissingCredentials",
    "OidcVerifier",
    "RevokedToken",
    "SCHEMA_VERSION",
    "SESSION_COOKIE",
    "ScryptParams",
    "TOKEN_PREFIX",
    "Ticket",
    "TicketBook",
    "TicketLimit",
    "TokenInfo",
    "UnknownName",
    "UserInfo",
    "extract_credential",
    "hash_password",
    "load_or_create_secret",
    "open_identity_store",
    "verify_password",
]
