r"""Translate a user's full-text log query into terms of ClickHouse tokens.

The language and its errors are :mod:`coremetry.store._text_query`'s (shared by every
backend); this module only tokenizes its terms the way the queries tokenize log bodies.

Tokens are maximal runs of Unicode letters and digits, lower-cased (``[\p{L}\p{N}]+`` over
``lowerUTF8(Body)`` in ClickHouse, the same runs Python's ``[^\W_]+`` finds): a word with
punctuation inside (``inventory-db``, ``order_id=7``) is the phrase of its tokens. Matching is
case-insensitive; unlike the embedded store's unicode61 tokenizer, diacritics count
(``zurich`` does not find ``Zürich``).

A term never reaches SQL as text: its tokens are bound as an ``Array(String)`` parameter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import msgspec

from coremetry.store._text_query import TextTerm

__all__ = [
    "Term",
    "text_terms",
    "tokens",
]

_WORDS: Final = re.compile(r"[^\W_]+")


class Term(msgspec.Struct, frozen=True):
    """One condition: ``tokens`` adjacent and in order; the last one a prefix if ``prefix``."""

    tokens: tuple[str, ...]
    prefix: bool = False


def tokens(text: str) -> list[str]:
    """The lower-cased letter/digit runs of ``text`` (the tokenizer of the module docstring)."""
    return _WORDS.findall(text.lower())


def text_terms(terms: Sequence[TextTerm]) -> list[Term]:
    """Parsed ``terms`` (:func:`~coremetry.store._text_query.parse_text_query`) as token tuples.

    Every term holds a letter or digit, so none of the results is empty.
    """
    return [Term(tuple(tokens(t.text)), prefix=t.prefix) for t in terms]
