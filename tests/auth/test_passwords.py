import base64
import hashlib
import unicodedata

import pytest

from coremetry.auth import DEFAULT_PARAMS, ScryptParams, hash_password, verify_password
from coremetry.auth.passwords import (
    HASH_BYTES,
    MAX_PASSWORD_BYTES,
    MIN_PASSWORD_CHARS,
    SALT_BYTES,
    check_new_password,
    parse_hash,
    spend_dummy_hash,
)

from ._support import CHEAP_PARAMS


def test_hash_then_verify() -> None:
    encoded = hash_password("correct horse", CHEAP_PARAMS)
    assert verify_password("correct horse", encoded)
    assert not verify_password("correct horsE", encoded)
    assert not verify_password("", encoded)


def test_encoding_is_self_describing() -> None:
    encoded = hash_password("correct-horse-battery", ScryptParams(n=32, r=2, p=3))
    scheme, n, r, p, salt_b64, digest_b64 = encoded.split("$")
    assert (scheme, n, r, p) == ("scrypt", "32", "2", "3")
    assert len(base64.b64decode(salt_b64, validate=True)) == SALT_BYTES
    assert len(base64.b64decode(digest_b64, validate=True)) == HASH_BYTES
    assert "correct-horse-battery" not in encoded


def test_parse_round_trip() -> None:
    params = ScryptParams(n=64, r=1, p=2)
    encoded = hash_password("pw-round-trip", params)
    parsed_params, salt, digest = parse_hash(encoded)
    assert parsed_params == params
    assert (len(salt), len(digest)) == (SALT_BYTES, HASH_BYTES)


def test_salts_differ() -> None:
    assert hash_password("same-password", CHEAP_PARAMS) != hash_password(
        "same-password", CHEAP_PARAMS
    )


def test_each_hash_is_verified_with_its_own_parameters() -> None:
    old = hash_password("pw-either", ScryptParams(n=16, r=1, p=1))
    new = hash_password("pw-either", ScryptParams(n=64, r=2, p=1))
    assert verify_password("pw-either", old)
    assert verify_password("pw-either", new)


def test_default_parameters_work_and_cost_32_mib() -> None:
    # One real hash with the production setting: proves OpenSSL's memory cap is raised enough.
    assert DEFAULT_PARAMS.memory_bytes == 32 * 1024 * 1024
    encoded = hash_password("pw-default")
    assert encoded.startswith("scrypt$32768$8$3$")
    assert verify_password("pw-default", encoded)


def test_unicode_is_normalised() -> None:
    composed = unicodedata.normalize("NFC", "café crème")
    decomposed = unicodedata.normalize("NFD", "café crème")
    assert composed != decomposed
    assert verify_password(decomposed, hash_password(composed, CHEAP_PARAMS))


@pytest.mark.parametrize(
    ("password", "rule"),
    [
        ("", "at least 8 characters"),
        ("x", "at least 8 characters"),
        ("x" * (MIN_PASSWORD_CHARS - 1), "at least 8 characters"),
        # 14 code points as typed, 7 characters once composed (NFC): still too short
        (unicodedata.normalize("NFD", "é" * 7), "at least 8 characters"),
        ("x" * (MAX_PASSWORD_BYTES + 1), "at most 1024 bytes"),
        ("é" * (MAX_PASSWORD_BYTES // 2 + 1), "at most 1024 bytes"),
    ],
)
def test_unacceptable_new_passwords(password: str, rule: str) -> None:
    with pytest.raises(ValueError, match=f"the password must be {rule}") as refused:
        hash_password(password, CHEAP_PARAMS)
    if password:
        assert password not in str(refused.value)


def test_shortest_and_longest_passwords_are_accepted() -> None:
    assert MIN_PASSWORD_CHARS == 8  # NIST SP 800-63B §5.1.1.2
    check_new_password("x" * MIN_PASSWORD_CHARS)
    check_new_password("é" * MIN_PASSWORD_CHARS)  # characters, not bytes
    check_new_password("x" * MAX_PASSWORD_BYTES)


def test_verifying_applies_no_length_rule() -> None:
    # A password stored before the minimum length (hashed as hash_password does) still matches.
    encoded = hash_password("pw-placeholder", CHEAP_PARAMS)
    params, salt, _digest = parse_hash(encoded)
    digest = hashlib.scrypt(b"pw", salt=salt, n=params.n, r=params.r, p=params.p, dklen=32)
    legacy = encoded.rsplit("$", 1)[0] + "$" + base64.b64encode(digest).decode()
    assert verify_password("pw", legacy)
    assert not verify_password("pw-placeholder", legacy)


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "plain-text-password",
        "bcrypt$16$1$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$1$1$AAAAAAAAAAAAAAAAAAAAAA==",
        "scrypt$15$1$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$1$1$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$1073741824$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$0$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$1$99$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$-16$1$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$1$1$AAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$1$1$not base64!$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "scrypt$16$1$1$AAAAAAAAAAAAAAAAAAAAAA==$",
    ],
)
def test_malformed_hashes_are_refused(encoded: str) -> None:
    with pytest.raises(ValueError, match=r"scrypt|base64|Incorrect padding|Non-base64"):
        verify_password("pw", encoded)


def test_dummy_hash_never_matches() -> None:
    spend_dummy_hash("anything", CHEAP_PARAMS)
    spend_dummy_hash("", CHEAP_PARAMS)


@pytest.mark.parametrize(
    ("n", "r", "p"), [(0, 8, 1), (3, 8, 1), (2**15, 0, 1), (2**15, 8, 17), (2**22, 8, 1)]
)
def test_invalid_parameters(n: int, r: int, p: int) -> None:
    with pytest.raises(ValueError, match="scrypt"):
        hash_password("pw-long-enough", ScryptParams(n=n, r=r, p=p))
