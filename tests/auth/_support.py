"""Shared helpers for the auth tests: a cheap scrypt, a settable wall clock, JWT forging."""

import base64
import hmac
import time
from typing import Final

import msgspec

from coremetry.auth import ScryptParams
from coremetry.http_edge import Headers

CHEAP_PARAMS: Final = ScryptParams(n=16, r=1, p=1)
"""Milliseconds instead of a third of a second per hash; the algorithm is the same."""

SECRET: Final = bytes(range(64))
"""The issuer's HMAC key in tests: 64 bytes, so HS384/HS512 forgeries raise no key warning."""

OTHER_SECRET: Final = bytes(range(100, 164))


class FakeClock:
    """A wall clock (unix seconds) that moves only when told to."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def forge(
    header: object,
    payload: object,
    *,
    key: bytes | None = None,
    digest: str = "sha256",
    signature: bytes | None = None,
) -> str:
    """Build a compact JWS by hand: HMAC with ``key``, or the given ``signature`` (b"" if none)."""
    signing_input = f"{b64url(msgspec.json.encode(header))}.{b64url(msgspec.json.encode(payload))}"
    if signature is None:
        signature = b"" if key is None else hmac.new(key, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64url(signature)}"


def good_payload(**changes: object) -> dict[str, object]:
    """A payload the test issuer accepts; ``changes`` override claims, ``None`` removes one."""
    now = int(time.time())
    payload: dict[str, object] = {
        "sub": "alice",
        "role": "viewer",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "iss": "coremetry",
        "aud": "coremetry",
        "jti": "test",
    }
    for name, value in changes.items():
        if value is None:
            payload.pop(name, None)
        else:
            payload[name] = value
    return payload


def headers(*pairs: tuple[str, str]) -> Headers:
    """Request headers as the transports build them (``Headers`` from raw ASGI pairs)."""
    return Headers([(name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs])
