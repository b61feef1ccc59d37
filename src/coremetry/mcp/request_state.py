"""The sealed ``requestState`` of 2026-07-28 multi-round-trip requests (``basic/patterns/mrtr``).

Contract: :meth:`StateSealer.seal` returns a URL-safe token carrying the data readable by the
client but not forgeable by it (HMAC-SHA256 under the server's key); :meth:`StateSealer.open`
returns the data of an untouched token of this key and ``None`` for anything else (altered,
truncated, not base64, sealed under another key). Neither raises for any input.
"""

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Final

_MAC_BYTES: Final = 32


class StateSealer:
    """Seals and opens ``requestState`` tokens under one HMAC key.

    Args:
        key: the HMAC-SHA256 key; ``None``: 32 random bytes (tokens then do not survive a
            restart, nor verify on another process).
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None) -> None:
        self._key = secrets.token_bytes(32) if key is None else key

    def seal(self, data: bytes) -> str:
        """Seal ``data``: ``base64url(mac || data)`` without padding."""
        mac = hmac.new(self._key, data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac + data).decode("ascii").rstrip("=")

    def open(self, token: str) -> bytes | None:
        """The data of a token from :meth:`seal`, or ``None`` if it was altered or is not ours."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, binascii.Error):
            return None
        mac, data = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        expected = hmac.new(self._key, data, hashlib.sha256).digest()
        # Constant-time comparison: the token comes from the client.
        return data if len(mac) == _MAC_BYTES and hmac.compare_digest(mac, expected) else None
