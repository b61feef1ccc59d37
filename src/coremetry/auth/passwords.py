"""Password hashing with scrypt from the standard library.

scrypt (RFC 7914) is memory-hard: every guess costs ``128 * r * n`` bytes of memory as well as
time, which is what makes GPU and ASIC guessing expensive. The defaults, ``n = 2**15``, ``r = 8``,
``p = 3``, are one of the equivalent settings the OWASP Password Storage Cheat Sheet lists for
scrypt: 32 MiB of memory per hash, about 0.1 to 0.5 s of one core on current hardware.

Encoding: a self-describing string, so the parameters can be raised later without breaking
stored hashes (each hash is verified with the parameters it was made with)::

    scrypt$<n>$<r>$<p>$<salt, base64>$<hash, base64>

with a random 16-byte salt (:data:`SALT_BYTES`), a 32-byte derived key (:data:`HASH_BYTES`) and
standard base64 with padding (``$`` never occurs in it). Passwords are normalised to Unicode NFC
and encoded as UTF-8 first (RFC 8265 §4.2, the OpaqueString profile, also uses NFC), so the same
password typed on two keyboards matches.

Guarantees and limits:

- The comparison is constant-time (:func:`hmac.compare_digest`).
- :func:`spend_dummy_hash` costs what a real verification costs, so a login for an unknown user
  takes as long as one with a wrong password (no user enumeration by timing).
- Every function here blocks the calling thread for the whole hash; async callers run them with
  ``trio.to_thread.run_sync`` (and should bound how many run at once: each needs 32 MiB).
- A stored encoding with absurd parameters (beyond :data:`MAX_MEMORY_BYTES`, ``n`` not a power of
  two, ...) is refused with :class:`ValueError` instead of being computed, so a damaged database
  cannot make the server allocate gigabytes.
"""

import base64
import hashlib
import hmac
import secrets
import unicodedata
from functools import cache
from typing import Final

import msgspec

SALT_BYTES: Final = 16
"""Length of the random salt, in bytes."""

HASH_BYTES: Final = 32
"""Length of the derived key, in bytes."""

MIN_PASSWORD_CHARS: Final = 8
"""Shortest password :func:`check_new_password` accepts, in Unicode code points after NFC.

NIST SP 800-63B §5.1.1.2: user-chosen memorized secrets shall be at least 8 characters long
(each Unicode code point counts as one character)."""

MAX_PASSWORD_BYTES: Final = 1024
"""Longest password :func:`check_new_password` accepts, in UTF-8 bytes after NFC; bounds the
work one hash does with the password (NIST SP 800-63B §5.1.1.2 allows a maximum of at least 64
characters)."""

MAX_MEMORY_BYTES: Final = 256 * 1024 * 1024
"""Most memory a stored hash may ask for (``128 * r * n``), in bytes; larger ones are refused."""

_SCHEME: Final = "scrypt"


class ScryptParams(msgspec.Struct, frozen=True, kw_only=True):
    """scrypt cost parameters (RFC 7914 §2).

    Attributes:
        n: CPU/memory cost, a power of two greater than 1.
        r: block size (``r = 8`` means 1 KiB blocks).
        p: parallelisation: independent passes, each ``128 * r * n`` bytes; Python's
            :func:`hashlib.scrypt` runs them one after another, so ``p`` multiplies time but not
            memory.
    """

    n: int
    r: int
    p: int

    @property
    def memory_bytes(self) -> int:
        """Memory one hash needs, in bytes (``128 * r * n``)."""
        return 128 * self.r * self.n

    def check(self) -> None:
        """Validate the parameters.

        Raises:
            ValueError: ``n`` is not a power of two above 1, ``r`` or ``p`` is outside 1..16, or
                the hash would need more than :data:`MAX_MEMORY_BYTES`.
        """
        if self.n < 2 or self.n & (self.n - 1):
            raise ValueError(f"scrypt n must be a power of two above 1, got {self.n}")
        if not (1 <= self.r <= 16 and 1 <= self.p <= 16):
            raise ValueError(f"scrypt r and p must be within 1..16, got r={self.r} p={self.p}")
        if self.memory_bytes > MAX_MEMORY_BYTES:
            raise ValueError(
                f"scrypt parameters need {self.memory_bytes} bytes, above {MAX_MEMORY_BYTES}"
            )


DEFAULT_PARAMS: Final = ScryptParams(n=2**15, r=8, p=3)
"""The production setting: 32 MiB and roughly 0.1-0.5 s per hash (see the module docstring)."""


def _normalise(password: str) -> bytes:
    return unicodedata.normalize("NFC", password).encode("utf-8", "surrogatepass")


def _derive(secret: bytes, salt: bytes, params: ScryptParams, length: int) -> bytes:
    # OpenSSL refuses work above ``maxmem`` (32 MiB by default, just below what n=2**15, r=8
    # needs); allow twice the nominal size, which covers its bookkeeping.
    return hashlib.scrypt(
        secret,
        salt=salt,
        n=params.n,
        r=params.r,
        p=params.p,
        maxmem=2 * params.memory_bytes,
        dklen=length,
    )


def check_new_password(password: str) -> None:
    """Validate a password about to be stored (a new user's, or a changed one).

    Only new passwords are checked: verifying a login (:func:`verify_password`) never applies
    these rules, so a password stored before them still logs in.

    Raises:
        ValueError: the password is shorter than :data:`MIN_PASSWORD_CHARS` characters or longer
            than :data:`MAX_PASSWORD_BYTES` UTF-8 bytes (both after NFC). The message names the
            password and the limit, never the password itself.
    """
    normalised = unicodedata.normalize("NFC", password)
    if len(normalised) < MIN_PASSWORD_CHARS:
        raise ValueError(
            f"the password must be at least {MIN_PASSWORD_CHARS} characters long "
            "(NIST SP 800-63B); a passphrase of a few words is easiest to remember"
        )
    if len(_normalise(password)) > MAX_PASSWORD_BYTES:
        raise ValueError(f"the password must be at most {MAX_PASSWORD_BYTES} bytes")


def hash_password(password: str, params: ScryptParams = DEFAULT_PARAMS) -> str:
    """Hash a password for storage. Blocks for the whole hash (see the module docstring).

    Args:
        password: the clear-text password (validated with :func:`check_new_password`).
        params: the scrypt cost; tests pass a cheap one.

    Returns:
        ``scrypt$n$r$p$salt_b64$hash_b64``.

    Raises:
        ValueError: an unacceptable password or invalid parameters.
    """
    check_new_password(password)
    params.check()
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _derive(_normalise(password), salt, params, HASH_BYTES)
    return _encode(params, salt, digest)


def _encode(params: ScryptParams, salt: bytes, digest: bytes) -> str:
    return "$".join(
        (
            _SCHEME,
            str(params.n),
            str(params.r),
            str(params.p),
            base64.b64encode(salt).decode("ascii"),
            base64.b64encode(digest).decode("ascii"),
        )
    )


def parse_hash(encoded: str) -> tuple[ScryptParams, bytes, bytes]:
    """Split an encoded hash into ``(params, salt, digest)``.

    Raises:
        ValueError: not an encoding :func:`hash_password` could have produced (wrong scheme or
            field count, bad numbers or base64, a salt under :data:`SALT_BYTES`, an empty digest,
            or parameters :meth:`ScryptParams.check` refuses).
    """
    parts = encoded.split("$")
    if len(parts) != 6 or parts[0] != _SCHEME:
        raise ValueError("not an scrypt password hash")
    scheme_n, scheme_r, scheme_p, salt_b64, digest_b64 = parts[1:]
    if not all(field.isdigit() and field.isascii() for field in (scheme_n, scheme_r, scheme_p)):
        raise ValueError("malformed scrypt parameters")
    params = ScryptParams(n=int(scheme_n), r=int(scheme_r), p=int(scheme_p))
    params.check()
    salt = base64.b64decode(salt_b64, validate=True)
    digest = base64.b64decode(digest_b64, validate=True)
    if len(salt) < SALT_BYTES or not 16 <= len(digest) <= 64:
        raise ValueError("malformed scrypt salt or digest")
    return params, salt, digest


def verify_password(password: str, encoded: str) -> bool:
    """Check a password against a stored hash, in constant time. Blocks for the whole hash.

    Args:
        password: the candidate, in clear.
        encoded: a value from :func:`hash_password` (any parameters within the limits).

    Returns:
        Whether the password matches.

    Raises:
        ValueError: ``encoded`` is malformed (see :func:`parse_hash`).
    """
    params, salt, expected = parse_hash(encoded)
    candidate = _derive(_normalise(password), salt, params, len(expected))
    return hmac.compare_digest(candidate, expected)


@cache
def _dummy_hash(params: ScryptParams) -> str:
    # Random salt and random digest: no password hashes to it (but for a 2**-256 chance), and
    # verifying against it costs exactly what a real verification with these parameters costs.
    return _encode(params, secrets.token_bytes(SALT_BYTES), secrets.token_bytes(HASH_BYTES))


def spend_dummy_hash(password: str, params: ScryptParams = DEFAULT_PARAMS) -> None:
    """Spend the time and memory of one verification, for a user that does not exist.

    Blocks like :func:`verify_password`. Used so that "unknown user" and "wrong password" take
    the same time.
    """
    verify_password(password, _dummy_hash(params))
