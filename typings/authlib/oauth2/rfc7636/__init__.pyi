"""Partial stubs of ``authlib.oauth2.rfc7636`` (see authlib/__init__.pyi)."""

from collections.abc import Callable
from typing import ClassVar

from authlib.oauth2.rfc6749 import BaseGrant

def create_s256_code_challenge(code_verifier: str) -> str: ...

class CodeChallenge:
    DEFAULT_CODE_CHALLENGE_METHOD: ClassVar[str]
    SUPPORTED_CODE_CHALLENGE_METHOD: ClassVar[list[str]]
    CODE_CHALLENGE_METHODS: ClassVar[dict[str, Callable[[str, str], bool]]]
    required: bool
    def __init__(self, required: bool = True) -> None: ...
    def __call__(self, grant: BaseGrant) -> None: ...
    def validate_code_challenge(self, grant: BaseGrant, redirect_uri: str) -> None: ...
