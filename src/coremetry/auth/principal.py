"""Who a request is, once authenticated, and why authentication failed.

:class:`Claims` is the auth layer's domain type (``shared/DESIGN.md`` §5): what a verified JWT or
service token says about its bearer. Transports turn it into the protocol core's
:class:`~coremetry.roles.Caller` with :meth:`Claims.to_caller`, so the core never imports auth.

Error tree::

    AuthError                 token_sent, reason (server logs only)
    ├── MissingCredentials    nothing usable presented         token_sent False
    ├── InvalidToken          malformed, tampered, wrong iss/aud, unknown role, not yet valid
    ├── ExpiredToken          past ``exp`` (JWT) or ``expires_at`` (service token)
    ├── RevokedToken          a revoked service token; a JWT of a disabled or deleted user, or
    │                         one issued before the user's password changed
    └── LoginFailed           wrong user name or password (one message for both)
        └── LoginThrottled    too many recent failures; carries ``retry_after_s``

Every error carries two texts. ``str(error)`` is a fixed, generic message safe to show a client;
``error.reason`` says what really went wrong and is for server logs only: it never holds a token,
a password or a hash, but it may name a user or a token, which a client must not learn (that
would allow enumeration). ``token_sent`` tells the HTTP layer whether a credential was presented
and failed, in which case its ``401`` challenge gains ``error="invalid_token"`` (RFC 6750 §3.1);
when nothing (or an unsupported scheme, such as Basic) was presented, the challenge carries no
error code, as RFC 6750 §3.1 asks.
"""

from typing import ClassVar, Literal

import msgspec

from coremetry.roles import Caller

CredentialKind = Literal["jwt", "service_token", "oauth", "oidc"]
"""How a bearer authenticated: a session JWT (login), a ``cmk_`` service token, an OAuth access
token of the built-in authorization server (``token_name`` then names the client), or an access
token of the configured OpenID Connect provider (:mod:`coremetry.auth.oidc`)."""


class Claims(msgspec.Struct, frozen=True, kw_only=True):
    """What a verified credential says about its bearer.

    Attributes:
        sub: the stable identity: a user name for a JWT, ``"token:<name>"`` for a service token,
            ``"oidc:<issuer>#<sub>"`` for an identity provider's token (``:`` never occurs in a
            user name, so they can never collide). Rate budgets and the audit log are keyed on
            it.
        role: one of :data:`coremetry.roles.ROLES` (``viewer``, ``editor``, ``admin``).
        token_name: the service token's name; for an identity provider's token the client it
            was issued to (``client_id``/``azp``); ``""`` for a session JWT.
        issued_at: when the credential was issued, unix seconds.
        expires_at: when it stops being valid, unix seconds; ``None`` for a service token
            created without expiry.
        kind: ``"jwt"``, ``"service_token"`` or ``"oidc"``.
        generation: for a JWT, the user's session generation when it was issued (claim
            ``gen``; ``0`` in JWTs from before account lifecycle existed): the session is valid
            only while it equals the user's current one. ``0`` for a service token.
    """

    sub: str
    role: str
    token_name: str = ""
    issued_at: int
    expires_at: int | None
    kind: CredentialKind
    generation: int = 0

    def to_caller(self) -> Caller:
        """The protocol core's view of this identity (``kind`` and ``token_name`` carried)."""
        return Caller(subject=self.sub, role=self.role, kind=self.kind, token_name=self.token_name)


class AuthError(Exception):
    """Root of the auth layer's errors; raised when a request or login cannot be authenticated.

    Args:
        reason: what went wrong, for server logs only (never a secret; never sent to clients).
        token_sent: whether a credential was presented and failed. Each subclass has the right
            default; pass it only to override.

    Attributes:
        message: the generic text clients may see (also ``str(error)``).
        reason: the detailed cause, for server logs only.
        token_sent: see above.
    """

    message: ClassVar[str] = "authentication failed"
    default_token_sent: ClassVar[bool] = True
    expired: ClassVar[bool] = False
    """Whether the credential was refused only because it expired: the HTTP layer then says
    so (an expiry reveals nothing a client may not know; its ``exp`` is in its own token)."""

    def __init__(self, reason: str = "", *, token_sent: bool | None = None) -> None:
        super().__init__(self.message)
        self.reason = reason
        self.token_sent = self.default_token_sent if token_sent is None else token_sent

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, token_sent={self.token_sent})"


class MissingCredentials(AuthError):
    """Raised by the authenticator when a request carries no usable credential.

    That covers no ``Authorization`` header and no session cookie, and also an ``Authorization``
    header with a scheme other than Bearer (Basic, or a bare token without a scheme): RFC 6750
    §3.1 treats "attempted using an unsupported authentication method" like no credentials.
    """

    message: ClassVar[str] = "authentication required"
    default_token_sent: ClassVar[bool] = False


class InvalidToken(AuthError):
    """Raised by token verification when a bearer token is malformed or not ours.

    Covers a bad signature, another algorithm than the configured one (``none``, RS*/ES*), a
    wrong issuer or audience, a missing claim, a token not yet valid (``nbf``/``iat`` in the
    future beyond the leeway), an unknown role, and an unknown service token.
    """

    message: ClassVar[str] = "invalid token"


class ExpiredToken(AuthError):
    """Raised by token verification when a token is past its expiry (beyond the leeway)."""

    message: ClassVar[str] = "token expired"
    expired: ClassVar[bool] = True


class RevokedToken(AuthError):
    """Raised when a credential was ended early by an administrator.

    A revoked service token, or a session JWT whose user was disabled or deleted, or whose
    password changed after the JWT was issued.
    """

    message: ClassVar[str] = "invalid token"


class LoginFailed(AuthError):
    """Raised by a password login when the user name or the password is wrong.

    The message is the same for both, and an unknown user costs the same password hash as a
    known one, so neither the answer nor its timing tells whether a user exists.
    """

    message: ClassVar[str] = "invalid username or password"
    default_token_sent: ClassVar[bool] = False


class LoginThrottled(LoginFailed):
    """Raised by :class:`~coremetry.auth.LoginService` when a login would wait too long.

    Repeated failures for one user name or one client slow further attempts down; an attempt
    whose turn is more than the service's ``max_wait_s`` away is refused at once instead of
    holding a connection open. It never says whether the user exists (throttling applies to
    unknown names too).

    Args:
        reason: for server logs only.
        retry_after_s: seconds until an attempt would be admitted (for ``Retry-After``).
    """

    message: ClassVar[str] = "too many failed logins; try again later"

    def __init__(self, reason: str = "", *, retry_after_s: float) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
