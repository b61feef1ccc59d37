"""The tool-error contract: five classes of failure, each a different action for the model.

A failing tool call is answered with a ``tools/call`` result whose ``isError`` is ``true`` and
whose text is the compact JSON of a :class:`ToolError` (and, where the revision has it,
``structuredContent`` holding the same object, see :func:`tool_error_dict`)::

    {"error":"timeout","retryable":true,"hint":"The call ran out ...","detail":"..."}

The keys always come out in the order ``error, retryable, hint, detail``.

Classification table (what the model is expected to do next):

=======================  =========  ==========================================================
``error``                retryable  action for the model
=======================  =========  ==========================================================
``timeout``              yes        narrow the time window or add filters, then retry
``backend_unavailable``  yes        retry once; otherwise use another evidence path
``bad_args``             no         fix the argument; the same call again is useless
``not_found``            no         verify with a discovery tool or widen the time window
``internal``             no         do not repeat; say in the answer that this step failed
=======================  =========  ==========================================================

Exceptions raised on purpose (one root; ``kind`` is a class attribute)::

    Exception
    └── ToolFailure                  (root; counts as ``internal`` if raised directly)
        ├── BadArgs                  -> bad_args
        ├── NotFound                 -> not_found
        ├── BackendUnavailable       -> backend_unavailable
        ├── DeadlineExceeded         -> timeout
        └── InternalFailure          -> internal

Other exception types are mapped through a table handed to the dispatcher when the application
is assembled (:data:`ErrorClasses`, built with :func:`merge_error_classes`; e.g.
``Server(..., error_classes=STORE_ERROR_CLASSES)``), so that the store layer or a ClickHouse
client can map its own exceptions without the protocol core importing them, and without any
process-wide registry. Lookup walks the exception's MRO; the most specific listed class wins.
Built-in classes (:data:`BUILTIN_ERROR_CLASSES`, always present):

=============================  =======================  =========================================
exception type                 kind                     ``detail``
=============================  =======================  =========================================
``trio.TooSlowError``          ``timeout``              generic sentence
``TimeoutError`` (builtin)     ``timeout``              generic sentence
``ConnectionError`` (+ subs)   ``backend_unavailable``  generic sentence (no host or port)
``msgspec.ValidationError``    ``bad_args``             msgspec's message, which names the field
                                                        ("Expected `str`, got `int` - at
                                                        `$.text`"), sanitized
=============================  =======================  =========================================

``LookupError``/``KeyError`` are deliberately *not* mapped: inside a handler a ``KeyError`` is
almost always a bug, so it is ``internal``. A handler that means "no such entity" raises
:class:`NotFound`.

Anything else, including an ``ExceptionGroup`` whose leaves do not all map to one kind, is
``internal`` with the detail ``"unexpected error; it has been logged on the server"``. The
text of an unknown exception (``str(exc)``) never reaches the model: it may hold paths, hosts,
SQL or secrets. The classifier is pure and does not log; the caller (the dispatcher) logs the
exception with its traceback on the server side, which is what that detail promises.

Guarantees:

- :func:`classify_tool_error` is pure (no logging, no I/O) and never raises an ``Exception``:
  if anything goes wrong while classifying, the answer is ``internal``.
- Every ``detail`` and ``hint`` goes through :func:`sanitize_detail`: a single line of at
  most :data:`MAX_DETAIL_CHARS` characters, with no traceback, no absolute file path, no
  object repr and no memory address.

Cancellation is never swallowed. Callers catch ``Exception``, never ``BaseException``, so
``trio.Cancelled`` (a ``BaseException``), ``KeyboardInterrupt`` and ``SystemExit`` propagate
and are never turned into a tool result. When a ``BaseExceptionGroup`` carrying a
``trio.Cancelled`` arrives, the caller splits the cancelled part off and re-raises it. If a
``BaseException`` that is not an ``Exception`` is passed anyway, it is classified ``internal``,
never anything else, and :func:`merge_error_classes` refuses such types.

Sources: ``shared/DESIGN.md`` §3 "Tool errors" (the five classes and the JSON key order);
``shared/STYLE.md`` habits 5 (one root, "Raised by … when …") and 6 (explicit classifier table,
never swallow cancellation, never return ``str(e)``); MCP 2025-11-25 ``server/tools`` "Error
Handling" (tool execution and input-validation errors are ``isError`` results, SEP-1303);
``python-trio/trio:src/trio/_timeouts.py`` (``fail_after`` raises ``TooSlowError``).
"""

import enum
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import ClassVar, Final, NamedTuple

import msgspec
import trio

__all__ = [
    "BUILTIN_ERROR_CLASSES",
    "BackendUnavailable",
    "BadArgs",
    "DEFAULT_DETAILS",
    "DEFAULT_HINTS",
    "DeadlineExceeded",
    "ErrorClass",
    "ErrorClasses",
    "InternalFailure",
    "MAX_DETAIL_CHARS",
    "NotFound",
    "RETRYABLE",
    "ToolError",
    "ToolErrorKind",
    "ToolFailure",
    "classify_tool_error",
    "merge_error_classes",
    "sanitize_detail",
    "tool_error_dict",
    "tool_error_json",
]


class ToolErrorKind(enum.StrEnum):
    """The five classes of tool failure; the value is the ``error`` field of the JSON."""

    TIMEOUT = "timeout"
    """The call ran out of its time budget. Retryable with a narrower query."""

    BACKEND_UNAVAILABLE = "backend_unavailable"
    """The telemetry backend did not answer. Retryable once."""

    BAD_ARGS = "bad_args"
    """An argument was rejected. Not retryable as is."""

    NOT_FOUND = "not_found"
    """Nothing matched. Not retryable as is."""

    INTERNAL = "internal"
    """A bug or an unexpected failure on our side. Not retryable."""


class ToolError(msgspec.Struct, frozen=True):
    """The model-facing description of a failed tool call.

    Field order is the JSON key order (``error, retryable, hint, detail``); do not reorder.

    Attributes:
        error: the kind's value, one of the five :class:`ToolErrorKind` strings.
        retryable: whether repeating the call (possibly narrowed) can succeed; see
            :data:`RETRYABLE`.
        hint: what the model should do next, written for a model; at most
            :data:`MAX_DETAIL_CHARS` characters when built by :func:`classify_tool_error`.
        detail: what went wrong, a single sanitized line of at most :data:`MAX_DETAIL_CHARS`
            characters; never a traceback, a file path or the text of an unknown exception.
    """

    error: str
    retryable: bool
    hint: str
    detail: str


# --------------------------------------------------------------------------------------------
# Exceptions raised on purpose
# --------------------------------------------------------------------------------------------


class ToolFailure(Exception):
    """Raised by tool handlers and store layers, through a subclass, when a failure is known.

    The message the model sees is ``detail`` (sanitized) and ``hint`` (or the default hint of
    the kind). Write both in words that are safe to show: they reach the model as they are,
    minus paths, reprs and addresses. Subclass one of the five concrete classes to add a
    more specific type (e.g. a store's ``StoreUnavailable(BackendUnavailable)``); raised
    directly, the root counts as ``internal``.

    Args:
        detail: what went wrong, for the model (e.g. ``"no service named 'checkout'"``).
        hint: what the model should do next; ``None`` uses :data:`DEFAULT_HINTS` for the kind.

    Attributes:
        kind: the class of failure; a class attribute set by each subclass.
        detail: the ``detail`` argument, unsanitized (sanitizing happens when classifying).
        hint: the ``hint`` argument, or ``None``.
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.INTERNAL
    detail: str
    hint: str | None

    def __init__(self, detail: str, *, hint: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.hint = hint


class BadArgs(ToolFailure):
    """Raised by a tool handler when an argument decodes but cannot be used.

    For example an inverted time range, a limit above the cap or a malformed trace id. The
    detail should name the argument and say what is accepted.
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.BAD_ARGS


class NotFound(ToolFailure):
    """Raised by a tool handler or the store layer when the named entity does not exist.

    For example a service, trace id or problem id absent from the queried time window.
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.NOT_FOUND


class BackendUnavailable(ToolFailure):
    """Raised by the store layer when the telemetry backend cannot be reached or refuses work.

    For example a refused connection, an overloaded server or an open circuit breaker. Keep
    hosts, ports and credentials out of the detail.
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.BACKEND_UNAVAILABLE


class DeadlineExceeded(ToolFailure):
    """Raised by a handler or the per-call deadline code when the time budget runs out.

    The usual source is a ``trio.fail_after`` around the call whose ``trio.TooSlowError`` is
    mapped to this class (or classified as ``timeout`` directly).
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.TIMEOUT


class InternalFailure(ToolFailure):
    """Raised by any layer when an invariant breaks and the model can do nothing about it.

    Unlike an unexpected exception, its detail is shown (sanitized), so write it for a model.
    """

    kind: ClassVar[ToolErrorKind] = ToolErrorKind.INTERNAL


# --------------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------------

MAX_DETAIL_CHARS: Final = 300
"""Upper bound, in characters (ellipsis included), of a sanitized ``detail`` or ``hint``."""

DEFAULT_HINTS: Final[Mapping[ToolErrorKind, str]] = MappingProxyType(
    {
        ToolErrorKind.TIMEOUT: (
            "The call ran out of its time budget. Narrow the time range or add filters, then retry."
        ),
        ToolErrorKind.BACKEND_UNAVAILABLE: (
            "The telemetry backend did not answer. Retry once; if it fails again, use another "
            "evidence path (for example logs instead of traces) and say which source was "
            "unavailable."
        ),
        ToolErrorKind.BAD_ARGS: (
            "An argument was rejected. Fix the argument named in detail; repeating the same "
            "call will fail the same way."
        ),
        ToolErrorKind.NOT_FOUND: (
            "Nothing matched. Check the name or id with a discovery tool (e.g. list_services, "
            "search_traces) or widen the time range."
        ),
        ToolErrorKind.INTERNAL: (
            "The server hit an unexpected error. Do not repeat this call; say in your answer "
            "that this step failed."
        ),
    }
)
"""The hint used when the raiser or the registration gives none, per kind."""

DEFAULT_DETAILS: Final[Mapping[ToolErrorKind, str]] = MappingProxyType(
    {
        ToolErrorKind.TIMEOUT: "the call did not finish within its time budget",
        ToolErrorKind.BACKEND_UNAVAILABLE: "the backend did not answer",
        ToolErrorKind.BAD_ARGS: "an argument was not accepted",
        ToolErrorKind.NOT_FOUND: "nothing matched the request",
        ToolErrorKind.INTERNAL: "unexpected error; it has been logged on the server",
    }
)
"""The generic detail used when the exception's own text is not shown (or is empty), per kind.

The ``internal`` sentence is a promise the caller keeps: it logs the exception server-side."""

RETRYABLE: Final[Mapping[ToolErrorKind, bool]] = MappingProxyType(
    {
        ToolErrorKind.TIMEOUT: True,
        ToolErrorKind.BACKEND_UNAVAILABLE: True,
        ToolErrorKind.BAD_ARGS: False,
        ToolErrorKind.NOT_FOUND: False,
        ToolErrorKind.INTERNAL: False,
    }
)
"""Whether the model may repeat the call, per kind (``timeout`` after narrowing it;
``backend_unavailable`` once)."""


# --------------------------------------------------------------------------------------------
# Sanitizer
# --------------------------------------------------------------------------------------------

_MAX_SCAN_CHARS: Final = 8192
"""Input beyond this is dropped before the regexes run: bounds the work on huge messages."""

_TRACEBACK_MARKER: Final = "Traceback (most recent call last)"
_SPACE_RE: Final = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
# ``scheme://user:password@host`` -> ``scheme://<redacted>@host``: connection URLs end up in
# backend error messages, and their userinfo is a credential.
_URL_USERINFO_RE: Final = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@]+@")
# ``<foo.Bar object at 0x7f...>``, ``<function f at 0x...>``: bounded, so no pathological
# backtracking on long inputs.
_REPR_RE: Final = re.compile(r"<[^<>]{1,200}? at 0x[0-9A-Fa-f]+>")
# Windows: ``C:\...`` or ``C:/...`` (not the ``p:/`` of ``http://``), and UNC ``\\host\share``.
_WINDOWS_PATH_RE: Final = re.compile(
    r"(?<![\w])(?:[A-Za-z]:[\\/]|\\\\[^\s\\/]+\\)[^\s'\"`<>|*?]*(?<![.,:;])"
)
# POSIX: an absolute path with at least two segments (``/a/b``, ``/a/b.py:12``, ``~/x/y``),
# not preceded by a word character, ``.``, ``:`` or ``/`` (so ``svc/a/b``, ``./a/b`` and URLs
# are left alone). A lone ``/metrics`` is kept: one segment is not a path worth hiding. Segment
# characters exclude ``/``, so the nested quantifiers cannot backtrack badly.
_POSIX_SEG: Final = r"[^\s/\\'\"`<>()\[\]{},;|]"
_POSIX_PATH_RE: Final = re.compile(
    rf"(?<![\w.:/~\\-])~?/(?:{_POSIX_SEG}+/)+{_POSIX_SEG}*(?<![.,:;])"
)
_ADDRESS_RE: Final = re.compile(r"\b0x[0-9A-Fa-f]{6,}\b")


def sanitize_detail(text: str) -> str:
    r"""Make a message safe and compact enough to show a model.

    Steps, in order:

    1. cut at ``Traceback (most recent call last)`` (it and everything after are dropped);
    2. newlines, tabs and other whitespace or control characters become single spaces;
    3. ``scheme://user:pass@`` URL credentials become ``scheme://<redacted>@``;
    4. object reprs such as ``<foo.Bar object at 0x7f...>`` become ``<object>``;
    5. absolute file paths (POSIX ``/a/b...`` with at least two segments, ``~/a/b``, Windows
       ``C:\...`` and ``\\host\share``) become ``<path>``. This also hides a two-segment
       URL path such as ``/api/v1``, a price paid for never leaking a file path;
    6. remaining ``0x`` memory addresses (six or more hex digits) are removed;
    7. whitespace is collapsed and trimmed, and the result is cut to :data:`MAX_DETAIL_CHARS`
       characters, the last being ``…`` when something was cut.

    Args:
        text: any message (``str``; anything else is converted with ``str()`` first).

    Returns:
        A single line of at most :data:`MAX_DETAIL_CHARS` characters, possibly empty. Never
        raises an ``Exception``: on any internal failure it returns ``""``.
    """
    try:
        if not isinstance(text, str):  # defensive: callers outside mypy's reach
            text = str(text)  # type: ignore[unreachable]
        cut = text.find(_TRACEBACK_MARKER)
        if cut >= 0:
            text = text[:cut]
        text = text[:_MAX_SCAN_CHARS]
        text = _SPACE_RE.sub(" ", text)
        text = _URL_USERINFO_RE.sub(r"\g<scheme><redacted>@", text)
        text = _REPR_RE.sub("<object>", text)
        text = _WINDOWS_PATH_RE.sub("<path>", text)
        text = _POSIX_PATH_RE.sub("<path>", text)
        text = _ADDRESS_RE.sub("", text)
        text = _SPACE_RE.sub(" ", text).strip()
        if len(text) > MAX_DETAIL_CHARS:
            text = text[: MAX_DETAIL_CHARS - 1].rstrip() + "…"
    except Exception:
        return ""
    return text


# --------------------------------------------------------------------------------------------
# Registry of foreign exception types
# --------------------------------------------------------------------------------------------


class ErrorClass(NamedTuple):
    """How one foreign exception type (and its subclasses) is classified.

    Attributes:
        kind: the kind to answer with.
        hint: the hint for the model; ``None`` uses :data:`DEFAULT_HINTS` for the kind.
        keep_message: show the exception's own text (sanitized) as ``detail``. Only for types
            whose messages are written for users (msgspec's validation errors name the field);
            otherwise the detail is the kind's generic sentence from :data:`DEFAULT_DETAILS`.
    """

    kind: ToolErrorKind
    hint: str | None = None
    keep_message: bool = False


ErrorClasses = Mapping[type[BaseException], ErrorClass]
"""Exception type -> its classification; lookup walks the raised type's MRO, so the most
specific listed class wins."""

BUILTIN_ERROR_CLASSES: Final[ErrorClasses] = MappingProxyType(
    {
        trio.TooSlowError: ErrorClass(ToolErrorKind.TIMEOUT),
        TimeoutError: ErrorClass(ToolErrorKind.TIMEOUT),
        ConnectionError: ErrorClass(ToolErrorKind.BACKEND_UNAVAILABLE),
        # msgspec's messages name the field ("Expected `str`, got `int` - at `$.text`"): keep
        # them.
        msgspec.ValidationError: ErrorClass(ToolErrorKind.BAD_ARGS, keep_message=True),
    }
)
"""The classes every server knows (the table in the module docstring)."""


def merge_error_classes(*tables: ErrorClasses) -> ErrorClasses:
    """Check ``tables`` and lay them over :data:`BUILTIN_ERROR_CLASSES`, later ones winning.

    This is how the application hands its own mapping to the dispatcher at assembly
    (``Server(..., error_classes=...)``): the layer that owns an exception type exports a
    table, the protocol core never imports it, and no process-wide state is written.

    Returns:
        A read-only table for :func:`classify_tool_error`.

    Raises:
        TypeError: a key is not an ``Exception`` subclass (``trio.Cancelled``,
            ``KeyboardInterrupt``...: cancellation is never a tool result), is a
            :class:`ToolFailure` (it carries its own kind) or an exception group (classified
            by its leaves: list the leaves).
        ValueError: a kind is not a :class:`ToolErrorKind` value.
    """
    merged: dict[type[BaseException], ErrorClass] = dict(BUILTIN_ERROR_CLASSES)
    for table in tables:
        for exc_type, entry in table.items():
            if not issubclass(exc_type, Exception):
                raise TypeError(
                    f"only Exception subclasses can be mapped, not {exc_type!r} "
                    "(cancellation and interpreter exits are never tool errors)"
                )
            if issubclass(exc_type, ToolFailure):
                raise TypeError(
                    f"{exc_type.__qualname__} is a ToolFailure and carries its own kind"
                )
            if issubclass(exc_type, BaseExceptionGroup):
                raise TypeError("exception groups are classified by their leaves; map the leaves")
            merged[exc_type] = ErrorClass(ToolErrorKind(entry.kind), entry.hint, entry.keep_message)
    return MappingProxyType(merged)


def _lookup(exc_type: type[BaseException], table: ErrorClasses) -> ErrorClass | None:
    for cls in exc_type.__mro__:
        entry = table.get(cls)
        if entry is not None:
            return entry
    return None


# --------------------------------------------------------------------------------------------
# Classifier
# --------------------------------------------------------------------------------------------


def _build(kind: ToolErrorKind, *, detail: str, hint: str | None) -> ToolError:
    clean_detail = sanitize_detail(detail)
    clean_hint = sanitize_detail(hint) if hint else ""
    return ToolError(
        error=kind.value,
        retryable=RETRYABLE[kind],
        hint=clean_hint or DEFAULT_HINTS[kind],
        detail=clean_detail or DEFAULT_DETAILS[kind],
    )


_INTERNAL_ERROR: Final = ToolError(
    error=ToolErrorKind.INTERNAL.value,
    retryable=RETRYABLE[ToolErrorKind.INTERNAL],
    hint=DEFAULT_HINTS[ToolErrorKind.INTERNAL],
    detail=DEFAULT_DETAILS[ToolErrorKind.INTERNAL],
)

_MAX_GROUP_DEPTH: Final = 16
_MAX_GROUP_LEAVES: Final = 256


class _GroupTooLargeError(Exception):
    """Raised by :func:`_leaves` when a group is nested too deep or has too many leaves."""


def _leaves(group: BaseExceptionGroup[BaseException], depth: int = 0) -> Iterator[BaseException]:
    if depth >= _MAX_GROUP_DEPTH:
        raise _GroupTooLargeError
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc, depth + 1)
        else:
            yield exc


def _classify_group(group: BaseExceptionGroup[BaseException], table: ErrorClasses) -> ToolError:
    first: ToolError | None = None
    for count, leaf in enumerate(_leaves(group), start=1):
        if count > _MAX_GROUP_LEAVES:
            return _INTERNAL_ERROR
        result = _classify_leaf(leaf, table)
        if first is None:
            first = result
        elif result.error != first.error:
            return _INTERNAL_ERROR
    return first if first is not None else _INTERNAL_ERROR


def _classify_leaf(exc: BaseException, table: ErrorClasses) -> ToolError:
    if not isinstance(exc, Exception):
        # trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit: never a tool error.
        return _INTERNAL_ERROR
    if isinstance(exc, ToolFailure):
        kind: object = type(exc).kind
        if not isinstance(kind, ToolErrorKind):  # a subclass that overrode ``kind`` badly
            return _INTERNAL_ERROR
        detail: object = getattr(exc, "detail", None)
        hint: object = getattr(exc, "hint", None)
        return _build(
            kind,
            detail=detail if isinstance(detail, str) else "",
            hint=hint if isinstance(hint, str) else None,
        )
    registration = _lookup(type(exc), table)
    if registration is None:
        return _INTERNAL_ERROR
    return _build(
        registration.kind,
        detail=str(exc) if registration.keep_message else "",
        hint=registration.hint,
    )


def classify_tool_error(
    exc: BaseException | None, error_classes: ErrorClasses = BUILTIN_ERROR_CLASSES
) -> ToolError:
    """Turn a tool handler's exception into the :class:`ToolError` the model sees.

    Pure: no logging, no I/O; the caller logs the exception (with its traceback) itself.

    Rules, first match wins:

    - ``None`` -> ``internal``;
    - a ``BaseException`` that is not an ``Exception`` (``trio.Cancelled``,
      ``KeyboardInterrupt``...) -> ``internal``. Callers catch ``Exception`` only, so this
      should not happen; cancellation must propagate, not become a tool result;
    - an exception group -> the classification of its first leaf (depth first) when every
      leaf maps to the same kind, else ``internal``;
    - a :class:`ToolFailure` -> its ``kind``, its sanitized ``detail``, its sanitized
      ``hint`` or the kind's default hint;
    - a type listed in ``error_classes`` (most specific class in the MRO wins) -> its kind;
      the sanitized message when listed with ``keep_message``, else the kind's generic
      sentence from :data:`DEFAULT_DETAILS`;
    - anything else -> ``internal`` with ``"unexpected error; it has been logged on the
      server"``; ``str(exc)`` is never used.

    Args:
        exc: the exception caught around the handler, or ``None``.
        error_classes: how foreign exception types are classified; the server passes the table
            it was assembled with (:func:`merge_error_classes`), the default knows only
            :data:`BUILTIN_ERROR_CLASSES`.

    Returns:
        A :class:`ToolError` whose ``retryable`` follows :data:`RETRYABLE` and whose ``detail``
        and ``hint`` are non-empty sanitized single lines. Never raises an ``Exception``: if
        classifying fails (e.g. the exception's ``__str__`` raises), the answer is
        ``internal``.
    """
    try:
        if exc is None:
            return _INTERNAL_ERROR
        if isinstance(exc, BaseExceptionGroup):
            return _classify_group(exc, error_classes)
        return _classify_leaf(exc, error_classes)
    except Exception:
        return _INTERNAL_ERROR


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------

_ENCODER: Final = msgspec.json.Encoder()


def tool_error_json(err: ToolError) -> str:
    """Encode a tool error as the text of an ``isError`` result.

    Args:
        err: the error to encode.

    Returns:
        Compact JSON (no spaces, UTF-8 characters not escaped) with keys in the order
        ``error, retryable, hint, detail``, e.g.
        ``{"error":"timeout","retryable":true,"hint":"...","detail":"..."}``.
    """
    return _ENCODER.encode(err).decode("utf-8")


def tool_error_dict(err: ToolError) -> dict[str, str | bool]:
    """Give a tool error as a plain object, for ``structuredContent``.

    Args:
        err: the error to convert.

    Returns:
        ``{"error": str, "retryable": bool, "hint": str, "detail": str}``, in that key order.
    """
    return {
        "error": err.error,
        "retryable": err.retryable,
        "hint": err.hint,
        "detail": err.detail,
    }
