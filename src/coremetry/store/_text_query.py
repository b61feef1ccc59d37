"""The full-text log query language, read once for every backend into a small typed AST.

The accepted language (:attr:`~coremetry.store.LogQuery.text`):

- ``word``: the word must occur. A word with punctuation inside (``bfa3bb70-d84f``,
  ``order_id=7``) is searched as the phrase of its tokens, as the backend's tokenizer splits
  it.
- ``"a quoted phrase"``: its tokens must occur in this order, adjacent. Inside the quotes any
  character is text (``"body:foo AND (x)"``).
- ``prefix*`` / ``"a phrase prefix"*``: the last token is a prefix.
- Everything given must match (AND). Nothing else: the operators ``AND``/``OR``/``NOT``/
  ``NEAR``, column filters (``body:x``), ``^``, ``+``, grouping parentheses, a leading ``-``,
  ``*`` inside a word and unbalanced quotes are rejected with ``QueryRejected("text", ...)``
  saying what is supported, rather than being given another meaning.

A word or phrase with no letter or digit in it (``---``, ``"_"``) has nothing a tokenizer
indexes and is left out; a query left with no term at all is rejected ("has no word to search
for").

:func:`parse_text_query` returns the terms; each backend only translates them into its own
syntax (``sqlite._text``: an FTS5 ``MATCH`` string; ``clickhouse._text``: token arrays bound as
parameters), so the grammar and its error messages are the same whichever backend answers.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

from coremetry.store.errors import QueryRejected

__all__ = ["MAX_TEXT_CHARS", "TextTerm", "parse_text_query"]

MAX_TEXT_CHARS: Final = 1000
"""Longest accepted text query, in characters."""

_TOKEN: Final = re.compile(r'\s*(?:"(?P<phrase>[^"]*)"(?P<pstar>\*)?|(?P<word>[^\s"]+))\s*')
_OPERATORS: Final = frozenset(("AND", "OR", "NOT", "NEAR"))
_SYNTAX: Final = re.compile(r"[(){}^+:]")
_HAS_WORD: Final = re.compile(r"\w")
_HAS_TOKEN: Final = re.compile(r"[^\W_]")
"""A letter or digit: what both tokenizers index (``_`` and other punctuation separate)."""

_SUPPORTED: Final = (
    'supported: words (all must occur), "quoted phrases" and prefix* '
    '(quote text that contains punctuation such as ":" or parentheses)'
)


class TextTerm(msgspec.Struct, frozen=True):
    """One condition of a text query (all of a query's terms must match).

    Attributes:
        kind: ``"word"`` (given bare) or ``"phrase"`` (given between double quotes).
        text: the word without its trailing ``*``, or the phrase between its quotes, as the
            user wrote it (the backend tokenizes it); holds at least one letter or digit.
        prefix: the last token of ``text`` is a prefix (``retry*``, ``"cache mi"*``).
    """

    kind: Literal["word", "phrase"]
    text: str
    prefix: bool = False


def _reject(message: str) -> QueryRejected:
    return QueryRejected("text", f"{message}; {_SUPPORTED}")


def parse_text_query(text: object) -> list[TextTerm]:
    """The terms of the user's full-text query ``text``, in the order written (at least one).

    Args:
        text: :attr:`LogQuery.text <coremetry.store.LogQuery.text>`, at most
            :data:`MAX_TEXT_CHARS` characters.

    Returns:
        The terms (see :class:`TextTerm` and the module docstring for the language).

    Raises:
        QueryRejected: ``field == "text"``: not a string, empty, too long, unbalanced quotes,
            operators, column filters or other search syntax (the message says what is
            supported).
    """
    if not isinstance(text, str):
        raise QueryRejected("text", "must be text")
    if len(text) > MAX_TEXT_CHARS:
        raise QueryRejected("text", f"is longer than {MAX_TEXT_CHARS} characters")
    if text.count('"') % 2:
        raise _reject("has an unbalanced double quote")
    if not _HAS_WORD.search(text):
        raise _reject("has no word to search for")
    terms: list[TextTerm] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:  # cannot happen: the grammar is total
            raise _reject(f"cannot be read at character {pos + 1}")
        pos = match.end()
        phrase = match.group("phrase")
        if phrase is not None:
            if _HAS_TOKEN.search(phrase):
                terms.append(TextTerm("phrase", phrase, prefix=bool(match.group("pstar"))))
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
        if _HAS_TOKEN.search(word):
            terms.append(TextTerm("word", word, prefix=prefix))
    if not terms:
        raise _reject("has no word to search for")
    return terms
