"""Translate a user's full-text log query into a safe FTS5 query (never raw text to MATCH).

The accepted language (:class:`~coremetry.store.LogQuery`):

- ``word``: the word must occur (case- and diacritic-insensitive, unicode61 tokens). A word
  with punctuation inside (``bfa3bb70-d84f``, ``order_id=7``) is searched as the phrase of its
  tokens, as the tokenizer splits it.
- ``"a quoted phrase"``: the tokens must occur in this order, adjacent.
- ``prefix*`` / ``"a phrase prefix"*``: the last token is a prefix.
- Everything given must match (AND). Nothing else: the FTS5 operators ``AND``/``OR``/``NOT``/
  ``NEAR``, column filters (``body:x``), ``^``, ``+``, grouping parentheses, a leading ``-``
  and unbalanced quotes are rejected with ``QueryRejected("text", ...)`` explaining what is
  supported, rather than being given another meaning.

Every word and phrase becomes an FTS5 *string* (``"..."``), inside which FTS5 syntax has no
meaning, so the translated query can only ever be a conjunction of phrases.
"""

from __future__ import annotations

import re
from typing import Final

from coremetry.store.errors import QueryRejected

__all__ = ["MAX_TEXT_CHARS", "fts_query"]

MAX_TEXT_CHARS: Final = 1000
"""Longest accepted text query, in characters."""

_TOKEN: Final = re.compile(r'\s*(?:"(?P<phrase>[^"]*)"(?P<pstar>\*)?|(?P<word>[^\s"]+))\s*')
_OPERATORS: Final = frozenset(("AND", "OR", "NOT", "NEAR"))
_SYNTAX: Final = re.compile(r"[(){}^+:]")
_HAS_WORD: Final = re.compile(r"\w")

_SUPPORTED: Final = (
    'supported: words (all must occur), "quoted phrases" and prefix* '
    '(quote text that contains punctuation such as ":" or parentheses)'
)


def _reject(message: str) -> QueryRejected:
    return QueryRejected("text", f"{message}; {_SUPPORTED}")


def _string(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def fts_query(text: str) -> str:
    """The FTS5 MATCH expression for the user's ``text``.

    Raises:
        QueryRejected: ``field == "text"``: empty, too long, unbalanced quotes, operators,
            column filters or other FTS5 syntax (the message says what is supported).
    """
    if len(text) > MAX_TEXT_CHARS:
        raise QueryRejected("text", f"is longer than {MAX_TEXT_CHARS} characters")
    if text.count('"') % 2:
        raise _reject("has an unbalanced double quote")
    if not _HAS_WORD.search(text):
        raise _reject("has no word to search for")
    parts: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:  # cannot happen: the grammar is total
            raise _reject(f"cannot be read at character {pos + 1}")
        pos = match.end()
        phrase = match.group("phrase")
        if phrase is not None:
            if _HAS_WORD.search(phrase):
                parts.append(_string(phrase) + (" *" if match.group("pstar") else ""))
            continue
        word = match.group("word")
        assert word is not None
        if word in _OPERATORS or word.startswith("NEAR("):
            raise _reject(f"uses the operator {word}, which is not supported")
        if not _HAS_WORD.search(word):
            continue  # punctuation only: nothing the tokenizer would index
        if word.startswith("-"):
            raise _reject(f"excludes with {word!r}, which is not supported")
        if _SYNTAX.search(word):
            raise _reject(f"contains search syntax in {word!r}")
        prefix = word.endswith("*")
        if prefix:
            word = word[:-1]
        if "*" in word:
            raise _reject(f"has '*' inside {word!r}; it may only end a word")
        parts.append(_string(word) + (" *" if prefix else ""))
    if not parts:
        raise _reject("has no word to search for")
    return " ".join(parts)
