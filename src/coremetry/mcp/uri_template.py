r"""RFC 6570 level-1 URI templates for MCP resource templates.

MCP servers advertise *resource templates* such as ``coremetry://trace/{trace_id}`` or
``test://template/{id}/data`` (MCP ``server/resources`` "Resource Templates"); a
``resources/read`` of a concrete URI is routed by matching it against those templates. This
module parses such templates, matches concrete URIs against them and expands them from values.

Guarantees:

- Only RFC 6570 *level 1* (§1.2 "Levels and Expression Types") is supported: simple
  ``{name}`` expressions, where ``name`` is one or more of ``[A-Za-z0-9_]`` (the §2.3
  ``varname`` without pct-encoded characters or dots). Everything else is rejected at
  construction with a :class:`ValueError` that names the problem: operators (``+ # . / ; ? &``
  and the reserved ``= , ! @ |``), prefix/explode modifiers (``:n``, ``*``), several variables in
  one expression, empty (``{}``), unclosed or nested braces, a stray ``}``, two adjacent
  expressions with no literal between them (``{a}{b}`` is ambiguous) and a variable name used
  twice.
- Expansion follows §3.2.2 "Simple String Expansion": unreserved characters
  (``ALPHA / DIGIT / "-" / "." / "_" / "~"``) are kept, everything else is UTF-8 encoded and
  percent-encoded with upper-case hex digits. Literal parts are copied as written.
- Matching is anchored (the whole URI must match) and case-sensitive on the literal parts (no
  scheme/host case folding, no normalisation of percent-escapes in literals). Each ``{name}``
  matches exactly one non-empty run of characters other than ``/``, ``?`` and ``#``, so a value
  never spans a path segment, a query or a fragment.
- Values are percent-decoded exactly once (``%2541`` gives ``%41``). A malformed escape
  (``%zz``, ``%4``) or bytes that are not valid UTF-8 make the URI not match.
- A reserved character percent-encoded in a value is part of the value (§3.2.2 encodes it so):
  ``coremetry://logs/api%2Fgateway`` gives ``api/gateway``.
- A ``#fragment`` is not part of the resource's identity (RFC 3986 §3.5): unless the template
  itself has a ``#``, the URI is matched without it (``coremetry://trace/abc#x`` gives ``abc``).
- Path traversal never matches: the 2026-07-28 ``server/resources`` "Security Considerations"
  require servers to sanitise resource paths, so a value whose raw form is ``.`` or ``..``,
  whose decoded form has a ``/``-separated segment ``.`` or ``..`` (``%2e%2e``,
  ``..%2Fetc``), or whose decoded form contains ``\`` or NUL (``%5C``, ``%00``), is rejected.
- Matching time is linear in the URI length (times the template length). It does not use a
  backtracking regular expression: several placeholders in one segment (``{a}-{b}-{c}``) make a
  regex such as ``([^/?#]+)-([^/?#]+)-([^/?#]+)`` backtrack in cubic time. Instead every literal
  that contains ``/``, ``?`` or ``#`` is pinned to the first such character after the
  preceding placeholder, and the placeholders between two pinned literals are split with one
  right-to-left scan. When several splits are possible the rightmost occurrence of each literal
  wins, so earlier placeholders take the longer value (``{name}.{ext}`` against ``a.b.c`` gives
  ``name="a.b"``, ``ext="c"``).

Limits: levels 2-4 are out of scope; literal parts are neither validated nor percent-encoded on
expansion; :meth:`UriTemplate.expand` follows the RFC and so may build URIs (for an empty,
``.``, ``..`` or ``/``-containing value) that :meth:`UriTemplate.match` refuses.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote, unquote_to_bytes

__all__ = ["UriTemplate", "compile_template", "extract_uri_template_value"]

_SEPARATORS: Final = "/?#"
"""Characters a placeholder never matches: path, query and fragment delimiters."""

_SEPARATOR_RE: Final = re.compile(r"[/?#]")
_VARNAME_RE: Final = re.compile(r"[A-Za-z0-9_]+")
_BAD_ESCAPE_RE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")

_OPERATORS: Final = frozenset("+#./;?&=,!@|")
"""RFC 6570 §2.2 operator characters (levels 2-3) and the reserved ones."""

_FORBIDDEN_DECODED: Final = ("\\", "\x00")
_DOT_SEGMENTS: Final = frozenset({".", ".."})


class _Chain:
    """Placeholders that share one segment, up to the next pinned literal or the end.

    ``literals[i]`` (separator-free, non-empty) sits between ``names[i]`` and
    ``names[i + 1]``; ``end`` follows the last name. ``end_pin`` is the index of the first
    separator in ``end``, or ``None`` when ``end`` has none (only possible for the last chain).
    """

    __slots__ = ("end", "end_pin", "literals", "names")

    def __init__(
        self,
        names: tuple[str, ...],
        literals: tuple[str, ...],
        end: str,
        end_pin: int | None,
    ) -> None:
        self.names = names
        self.literals = literals
        self.end = end
        self.end_pin = end_pin


def _first_separator(text: str) -> int | None:
    for index, char in enumerate(text):
        if char in _SEPARATORS:
            return index
    return None


def _parse(template: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split ``template`` into its leading literal and ``(name, following literal)`` pairs.

    Raises:
        ValueError: The template is not a valid level-1 template.
    """
    pieces: list[tuple[str, str]] = []
    literal: list[str] = []
    prefix: str | None = None
    seen: set[str] = set()
    pos = 0
    length = len(template)
    while pos < length:
        char = template[pos]
        if char == "}":
            raise ValueError(f"unmatched '}}' at offset {pos} in URI template {template!r}")
        if char != "{":
            literal.append(char)
            pos += 1
            continue
        close = template.find("}", pos + 1)
        if close < 0:
            raise ValueError(f"unclosed '{{' at offset {pos} in URI template {template!r}")
        body = template[pos + 1 : close]
        expression = template[pos : close + 1]
        _check_expression(body, expression, pos, template)
        if body in seen:
            raise ValueError(f"duplicate variable {body!r} in URI template {template!r}")
        text = "".join(literal)
        literal = []
        if prefix is None:
            prefix = text
        elif not text:
            raise ValueError(
                f"adjacent expressions before {expression!r} at offset {pos} in URI template "
                f"{template!r} are ambiguous; put a literal between them"
            )
        else:
            name, _ = pieces[-1]
            pieces[-1] = (name, text)
        seen.add(body)
        pieces.append((body, ""))
        pos = close + 1
    text = "".join(literal)
    if prefix is None:
        return text, ()
    if pieces:
        name, _ = pieces[-1]
        pieces[-1] = (name, text)
    return prefix, tuple(pieces)


def _check_expression(body: str, expression: str, pos: int, template: str) -> None:
    where = f"expression {expression!r} at offset {pos} in URI template {template!r}"
    if not body:
        raise ValueError(f"empty {where}")
    if "{" in body:
        raise ValueError(f"nested '{{' in {where}")
    if body[0] in _OPERATORS:
        raise ValueError(
            f"operator {body[0]!r} in {where} is not supported (RFC 6570 level 1 only)"
        )
    if "," in body:
        raise ValueError(f"several variables in {where} are not supported (RFC 6570 level 1 only)")
    if body.endswith("*") or ":" in body:
        raise ValueError(
            f"value modifier in {where} is not supported (RFC 6570 level 1 only: no ':n' or '*')"
        )
    if _VARNAME_RE.fullmatch(body) is None:
        raise ValueError(f"invalid variable name in {where}: use only [A-Za-z0-9_]")


def _build_chains(pieces: tuple[tuple[str, str], ...]) -> tuple[_Chain, ...]:
    chains: list[_Chain] = []
    names: list[str] = []
    literals: list[str] = []
    for index, (name, following) in enumerate(pieces):
        names.append(name)
        pin = _first_separator(following)
        if pin is None and index < len(pieces) - 1:
            literals.append(following)
            continue
        chains.append(_Chain(tuple(names), tuple(literals), following, pin))
        names = []
        literals = []
    return tuple(chains)


def _decode(raw: str) -> str | None:
    """Percent-decode ``raw`` once and apply the traversal rules; ``None`` when refused."""
    if raw in _DOT_SEGMENTS:
        return None
    if _BAD_ESCAPE_RE.search(raw) is not None:
        return None
    try:
        value = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeError:  # lone surrogate in the raw text, or decoded bytes not UTF-8
        return None
    if any(bad in value for bad in _FORBIDDEN_DECODED):
        return None
    if any(segment in _DOT_SEGMENTS for segment in value.split("/")):
        return None
    return value


class UriTemplate:
    """A parsed, immutable RFC 6570 level-1 URI template.

    Instances compare equal and hash by their template string. Prefer
    :func:`compile_template`, which caches parsed templates.

    Args:
        template: The template text, e.g. ``"coremetry://trace/{trace_id}"``.

    Raises:
        ValueError: The template uses anything beyond level-1 ``{name}`` expressions, has
            empty, unclosed or nested braces, a stray ``}``, two adjacent expressions or a
            duplicate variable name. The message names the problem and its offset.
    """

    __slots__ = ("_chains", "_prefix", "_template", "_variables")

    _template: str
    _variables: tuple[str, ...]
    _prefix: str
    _chains: tuple[_Chain, ...]

    def __init__(self, template: str) -> None:
        prefix, pieces = _parse(template)
        object.__setattr__(self, "_template", template)
        object.__setattr__(self, "_variables", tuple(name for name, _ in pieces))
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_chains", _build_chains(pieces))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def template(self) -> str:
        """The template text exactly as given."""
        return self._template

    @property
    def variables(self) -> tuple[str, ...]:
        """The variable names, in template order."""
        return self._variables

    @property
    def is_template(self) -> bool:
        """Whether the template has at least one variable (otherwise it is a plain URI)."""
        return bool(self._variables)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._template!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UriTemplate):
            return self._template == other._template
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._template)

    def match(self, uri: str) -> dict[str, str] | None:
        """Match a concrete URI against the whole template.

        Args:
            uri: The concrete URI, e.g. ``"coremetry://trace/abc%20def"``.

        Returns:
            The percent-decoded value of every variable, in template order (an empty dict for a
            template without variables that equals ``uri``), or ``None`` when the URI does not
            match, a value is empty, spans a raw ``/`` or ``?``, has a malformed escape, is
            not UTF-8, or is a traversal attempt (see the module docstring). A ``#fragment``
            is dropped first unless the template has a ``#``.
        """
        if "#" not in self._template:
            uri = uri.partition("#")[0]
        prefix = self._prefix
        if not uri.startswith(prefix):
            return None
        pos = len(prefix)
        raw_values: list[str] = []
        for chain in self._chains:
            if chain.end_pin is not None:
                found = _SEPARATOR_RE.search(uri, pos)
                if found is None:
                    return None
                region_end = found.start() - chain.end_pin
                if region_end <= pos or not uri.startswith(chain.end, region_end):
                    return None
                next_pos = region_end + len(chain.end)
            else:
                if _SEPARATOR_RE.search(uri, pos) is not None or not uri.endswith(chain.end):
                    return None
                region_end = len(uri) - len(chain.end)
                if region_end <= pos:
                    return None
                next_pos = len(uri)
            split = _split_region(uri, pos, region_end, chain.literals)
            if split is None:
                return None
            raw_values.extend(split)
            pos = next_pos
        if pos != len(uri):
            return None
        result: dict[str, str] = {}
        for name, raw in zip(self._variables, raw_values, strict=True):
            value = _decode(raw)
            if value is None:
                return None
            result[name] = value
        return result

    def expand(self, values: Mapping[str, str]) -> str:
        """Build a URI by RFC 6570 §3.2.2 simple string expansion.

        Args:
            values: A value for every variable; extra keys are ignored.

        Returns:
            The template with each ``{name}`` replaced by its value, unreserved characters kept
            and everything else UTF-8 percent-encoded (``"café/1"`` gives ``caf%C3%A9%2F1``).

        Raises:
            KeyError: A variable has no value; the key is the variable name.
            ValueError: A value cannot be encoded as UTF-8 (a lone surrogate).
        """
        parts = [self._prefix]
        for chain in self._chains:
            following = (*chain.literals, chain.end)
            for name, literal in zip(chain.names, following, strict=True):
                if name not in values:
                    raise KeyError(name)
                try:
                    parts.append(quote(values[name], safe=""))
                except UnicodeEncodeError as exc:
                    raise ValueError(f"value for {name!r} is not encodable as UTF-8") from exc
                parts.append(literal)
        return "".join(parts)


def _split_region(uri: str, start: int, end: int, literals: tuple[str, ...]) -> list[str] | None:
    """Split ``uri[start:end]`` (separator-free) into ``len(literals) + 1`` non-empty values.

    Scans right to left, taking the rightmost occurrence of each literal that leaves the value
    after it non-empty; this finds a split whenever one exists, in one pass.
    """
    values: list[str] = []
    high = end
    for literal in reversed(literals):
        found = uri.rfind(literal, start + 1, high - 1)
        if found < 0:
            return None
        values.append(uri[found + len(literal) : high])
        high = found
    if high <= start:
        return None
    values.append(uri[start:high])
    values.reverse()
    return values


@functools.lru_cache(maxsize=512)
def _compile_cached(template: str) -> UriTemplate:
    return UriTemplate(template)


def compile_template(template: str) -> UriTemplate:
    """Parse a template, reusing an earlier parse of the same text.

    Args:
        template: The template text.

    Returns:
        The (shared, immutable) parsed template.

    Raises:
        ValueError: The template is invalid (see :class:`UriTemplate`); failures are not cached.
    """
    return _compile_cached(template)


def extract_uri_template_value(template: str, concrete: str) -> str:
    """Return the decoded value of the first placeholder of ``template`` in ``concrete``.

    Meant for handlers of single-placeholder templates such as
    ``coremetry://trace/{trace_id}``. Never raises for string inputs.

    Args:
        template: The template text.
        concrete: The concrete URI.

    Returns:
        The percent-decoded value of the first variable, or ``""`` when the template has no
        variable, is invalid, or ``concrete`` does not match it.
    """
    try:
        parsed = compile_template(template)
    except ValueError:
        return ""
    if not parsed.is_template:
        return ""
    found = parsed.match(concrete)
    if found is None:
        return ""
    return found[parsed.variables[0]]
