r"""The full-text log query language, read into terms that become ClickHouse array conditions.

The same language as the embedded store (:class:`~coremetry.store.LogQuery`): ``word`` (must
occur), ``"a quoted phrase"`` (tokens adjacent, in order), ``prefix*`` and ``"a phrase
prefix"*``; everything given must match. Operators (``AND``/``OR``/``NOT``/``NEAR``), column
filters, ``^``, ``+``, parentheses, a leading ``-``, ``*`` inside a word and unbalanced quotes
are rejected with ``QueryRejected("text", ...)``.

Tokens are maximal runs of Unicode letters and digits, lower-cased (``[\p{L}\p{N}]+`` over
``lowerUTF8(Body)`` in ClickHouse, the same runs Python's ``[^\W_]+`` finds): a word with
punctuation inside (``inventory-db``, ``order_id=7``) is the phrase of its tokens. Matching is
case-insensitive; unlike the embedded store's unicode61 tokenizer, diacritics count
(``zurich`` does not find ``Zürich``).

A term never reaches SQL as text: its tokens are bound as an ``Array(String)`` parameter.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from coremetry.store.errors import QueryRejected

__all__ = [
    "MAX_TEXT_CHARS",
    "Term",
    "parse_text",
    "tokens",
]

MAX_TEXT_CHARS: Final = 1000
"""Longest accepted text query, in characters."""

_TOKEN: Final = re.compile(r'\s*(?:"(?P<phrase>[^"]*)"(?P<pstar>\*)?|(?P<word>[^\s"]+))\s*')
_WORDS: Final = re.compile(r"[^\W_]+")
_OPERATORS: Final = frozenset(("AND", "OR", "NOT", "NEAR"))
_SYNTAX: Final = re.compile(r"[(){}^+:]")
_HAS_WORD: Final = re.compile(r"\w")

_SUPPORTED: Final = (
    'supported: words (all must occur), "quoted phrases" and prefix* '
    '(quote text that contains punctuation such as ":" or parentheses)'
)


class Term(msgspec.Struct, frozen=True):
    """One condition: ``tokens`` adjacent and in order; the last one a prefix if ``prefix``."""

    tokens: tuple[str, ...]
    prefix: bool = False


def tokens(text: str) -> list[str]:
    """The lower-cased letter/digit runs of ``text`` (the tokenizer of the module docstring)."""
    return _WORDS.findall(text.lower())


def _reject(message: str) -> QueryRejected:
    return QueryRejected("text", f"{message}; {_SUPPORTED}")


def parse_text(text: str) -> list[Term]:
    """The terms of the user's ``text`` (at least one).

    Raises:
        QueryRejected: ``field == "text"``: empty, too long, unbalanced quotes, operators,
            column filters or other search syntax (the message says what is supported).
    """
    if len(text) > MAX_TEXT_CHARS:
        raise QueryRejected("text", f"is longer than {MAX_TEXT_CHARS} characters")
    if text.count('"') % 2:
        raise _reject("has an unbalanced double quote")
    if not _HAS_WORD.search(text):
        raise _reject("has no word to search for")
    terms: list[Term] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:  # cannot happen: the grammar is total
            raise _reject(f"cannot be read at character {pos + 1}")
        pos = match.end()
        phrase = match.group("phrase")
        if phrase is not None:
            found = tokens(phrase)
            if found:
                terms.append(Term(tuple(found), prefix=bool(match.group("pstar"))))
            continue
        word = match.group("word")
        assert word is not None
        if word in _OPERATORS or word.startswith("NEAR("):
            raise _reject(f"uses the operator {word}, which is not supported")
        if not _HAS_WORD.search(word):
            continue  # punctuation only: nothing to search for
        if word.startswith("-"):
            raise _reject(f"excludes with {word!r}, which is not supported")
        if _SYNTAX.search(word):
            raise _reject(f"contains search syntax in {word!r}")
        prefix = word.endswith("*")
        if prefix:
            word = word[:-1]
        if "*" in word:
            raise _reject(f"has '*' inside {word!r}; it may only end a word")
        found = tokens(word)
        if found:
            terms.append(Term(tuple(found), prefix=prefix))
    if not terms:
        raise _reject("has no word to search for")
    return terms
