"""Translate a user's full-text log query into a safe FTS5 query (never raw text to MATCH).

The language and its errors are :mod:`coremetry.store._text_query`'s (shared by every
backend); this module only writes its terms in FTS5 syntax. Words and phrases are tokenized
by the ``unicode61`` tokenizer of ``logs_fts`` (case- and diacritic-insensitive), so a word
with punctuation inside (``bfa3bb70-d84f``) is searched as the phrase of its tokens.

Every term becomes an FTS5 *string* (``"..."``, a prefix followed by `` *``), inside which
FTS5 syntax has no meaning, so the translated query can only ever be a conjunction of phrases.
"""

from __future__ import annotations

from collections.abc import Sequence

from coremetry.store._text_query import TextTerm, parse_text_query

__all__ = ["fts_match", "fts_query"]


def _fts_term(term: TextTerm) -> str:
    quoted = '"' + term.text.replace('"', '""') + '"'
    return quoted + " *" if term.prefix else quoted


def fts_match(terms: Sequence[TextTerm]) -> str:
    """The FTS5 MATCH expression of parsed ``terms`` (at least one).

    Returns:
        The terms as FTS5 strings separated by spaces (an implicit AND), e.g.
        ``'"card expired" "retry" *'`` for ``"card expired" retry*``.
    """
    return " ".join(_fts_term(term) for term in terms)


def fts_query(text: str) -> str:
    """The FTS5 MATCH expression for the user's ``text``.

    Args:
        text: the full-text query (:attr:`LogQuery.text <coremetry.store.LogQuery.text>`).

    Returns:
        The terms as FTS5 strings separated by spaces (an implicit AND), e.g.
        ``'"card expired" "retry" *'`` for ``"card expired" retry*``.

    Raises:
        QueryRejected: ``field == "text"``: see :func:`~coremetry.store._text_query.
            parse_text_query` (empty, too long, unbalanced quotes, operators, column filters or
            other search syntax; the message says what is supported).
    """
    return fts_match(parse_text_query(text))
