"""Tests for the tool-error contract: the classifier table, the sanitizer and the JSON form."""

import json
from typing import Final, NamedTuple

import msgspec
import pytest
import trio

from coremetry.mcp import tool_errors
from coremetry.mcp.tool_errors import (
    DEFAULT_DETAILS,
    DEFAULT_HINTS,
    MAX_DETAIL_CHARS,
    RETRYABLE,
    BackendUnavailable,
    BadArgs,
    DeadlineExceeded,
    ErrorClass,
    InternalFailure,
    NotFound,
    ToolError,
    ToolErrorKind,
    ToolFailure,
    classify_tool_error,
    merge_error_classes,
    sanitize_detail,
    tool_error_dict,
    tool_error_json,
)

K = ToolErrorKind
GENERIC_INTERNAL = "unexpected error; it has been logged on the server"
SECRET = "hunter2-sk_live_51HfQzS3cr3t"
SECRET_PATH = "/etc/coremetry/secrets.toml"


# ---- test-only exception types, registered once for the whole module ----------------------


class _StoreDown(Exception):
    pass


class _StoreDownHard(_StoreDown):
    pass


class _QueryRejected(_StoreDown):
    """A more specific registration under _StoreDown: the MRO walk must prefer it."""


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


class _UnprintableRegistered(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


CLASSES: Final = merge_error_classes(
    {
        _StoreDown: ErrorClass(K.BACKEND_UNAVAILABLE, hint="Use the logs instead."),
        _QueryRejected: ErrorClass(K.BAD_ARGS, keep_message=True),
        _UnprintableRegistered: ErrorClass(K.BAD_ARGS, keep_message=True),
    }
)
"""The table these tests classify with (as a server assembled with it would)."""


class _Args(msgspec.Struct):
    text: str


def _validation_error() -> msgspec.ValidationError:
    try:
        msgspec.json.decode(b'{"text": 1}', type=_Args)
    except msgspec.ValidationError as exc:
        return exc
    raise AssertionError("the decode should have failed")


# ---- the classifier table ------------------------------------------------------------------


class Row(NamedTuple):
    exc: BaseException | None
    error: ToolErrorKind
    detail: str
    hint: str | None = None  # None: the kind's default hint


CLASSIFY_TABLE = [
    pytest.param(Row(None, K.INTERNAL, GENERIC_INTERNAL), id="none"),
    pytest.param(
        Row(BadArgs("limit must be <= 500"), K.BAD_ARGS, "limit must be <= 500"), id="bad-args"
    ),
    pytest.param(
        Row(
            BadArgs("start is after end", hint="Swap start and end."),
            K.BAD_ARGS,
            "start is after end",
            "Swap start and end.",
        ),
        id="bad-args-custom-hint",
    ),
    pytest.param(
        Row(NotFound("no service 'checkout'"), K.NOT_FOUND, "no service 'checkout'"), id="not-found"
    ),
    pytest.param(
        Row(
            NotFound("no trace abc", hint="Search with search_traces first."),
            K.NOT_FOUND,
            "no trace abc",
            "Search with search_traces first.",
        ),
        id="not-found-custom-hint",
    ),
    pytest.param(
        Row(
            BackendUnavailable("store is restarting"), K.BACKEND_UNAVAILABLE, "store is restarting"
        ),
        id="backend-unavailable",
    ),
    pytest.param(
        Row(
            BackendUnavailable("store down", hint="Try metrics."),
            K.BACKEND_UNAVAILABLE,
            "store down",
            "Try metrics.",
        ),
        id="backend-unavailable-custom-hint",
    ),
    pytest.param(
        Row(DeadlineExceeded("read budget of 5 s spent"), K.TIMEOUT, "read budget of 5 s spent"),
        id="deadline",
    ),
    pytest.param(
        Row(
            DeadlineExceeded("too slow", hint="Ask for one hour."),
            K.TIMEOUT,
            "too slow",
            "Ask for one hour.",
        ),
        id="deadline-custom-hint",
    ),
    pytest.param(
        Row(InternalFailure("index is corrupt"), K.INTERNAL, "index is corrupt"),
        id="internal-failure",
    ),
    pytest.param(
        Row(InternalFailure("bad state", hint="Report it."), K.INTERNAL, "bad state", "Report it."),
        id="internal-failure-custom-hint",
    ),
    pytest.param(
        Row(ToolFailure("raised the root"), K.INTERNAL, "raised the root"), id="root-tool-failure"
    ),
    pytest.param(
        Row(BadArgs(""), K.BAD_ARGS, DEFAULT_DETAILS[K.BAD_ARGS]), id="empty-detail-uses-default"
    ),
    pytest.param(Row(BadArgs("x", hint="  \n "), K.BAD_ARGS, "x"), id="blank-hint-uses-default"),
    pytest.param(
        Row(
            NotFound(f"no file at {SECRET_PATH}\nTraceback (most recent call last):\n  boom"),
            K.NOT_FOUND,
            "no file at <path>",
        ),
        id="tool-failure-detail-sanitized",
    ),
    pytest.param(
        Row(trio.TooSlowError(), K.TIMEOUT, DEFAULT_DETAILS[K.TIMEOUT]), id="trio-too-slow"
    ),
    pytest.param(
        Row(
            TimeoutError(f"timed out reading {SECRET_PATH}"), K.TIMEOUT, DEFAULT_DETAILS[K.TIMEOUT]
        ),
        id="builtin-timeout",
    ),
    pytest.param(
        Row(
            ConnectionRefusedError(111, "Connection refused to 10.0.0.5:9000"),
            K.BACKEND_UNAVAILABLE,
            "the backend did not answer",
        ),
        id="connection-refused",
    ),
    pytest.param(
        Row(_validation_error(), K.BAD_ARGS, "Expected `str`, got `int` - at `$.text`"),
        id="msgspec-validation-keeps-field-path",
    ),
    pytest.param(Row(KeyError("password"), K.INTERNAL, GENERIC_INTERNAL), id="key-error"),
    pytest.param(Row(LookupError("nope"), K.INTERNAL, GENERIC_INTERNAL), id="lookup-error"),
    pytest.param(
        Row(ValueError("invalid literal for int()"), K.INTERNAL, GENERIC_INTERNAL), id="value-error"
    ),
    pytest.param(Row(RuntimeError("boom"), K.INTERNAL, GENERIC_INTERNAL), id="runtime-error"),
    pytest.param(
        Row(
            RuntimeError(f"auth failed with token={SECRET} reading {SECRET_PATH}"),
            K.INTERNAL,
            GENERIC_INTERNAL,
        ),
        id="unknown-with-secret-and-path",
    ),
    pytest.param(
        Row(msgspec.DecodeError("malformed JSON"), K.INTERNAL, GENERIC_INTERNAL),
        id="msgspec-decode-error",
    ),
    pytest.param(
        Row(
            ExceptionGroup("g", [TimeoutError(), trio.TooSlowError()]),
            K.TIMEOUT,
            DEFAULT_DETAILS[K.TIMEOUT],
        ),
        id="group-same-kind",
    ),
    pytest.param(
        Row(
            ExceptionGroup("g", [NotFound("first"), ExceptionGroup("inner", [NotFound("second")])]),
            K.NOT_FOUND,
            "first",
        ),
        id="nested-group-same-kind-first-leaf-wins",
    ),
    pytest.param(
        Row(
            ExceptionGroup("g", [TimeoutError(), ConnectionResetError()]),
            K.INTERNAL,
            GENERIC_INTERNAL,
        ),
        id="group-mixed-kinds",
    ),
    pytest.param(
        Row(
            ExceptionGroup("g", [BadArgs("x"), RuntimeError(SECRET)]), K.INTERNAL, GENERIC_INTERNAL
        ),
        id="group-with-unknown-leaf",
    ),
    pytest.param(
        Row(
            BaseExceptionGroup("g", [TimeoutError(), KeyboardInterrupt()]),
            K.INTERNAL,
            GENERIC_INTERNAL,
        ),
        id="base-group-with-base-exception",
    ),
    pytest.param(Row(KeyboardInterrupt(), K.INTERNAL, GENERIC_INTERNAL), id="keyboard-interrupt"),
    pytest.param(Row(SystemExit(3), K.INTERNAL, GENERIC_INTERNAL), id="system-exit"),
    pytest.param(
        Row(
            _StoreDown(f"dial {SECRET_PATH}"),
            K.BACKEND_UNAVAILABLE,
            "the backend did not answer",
            "Use the logs instead.",
        ),
        id="registered-custom",
    ),
    pytest.param(
        Row(
            _StoreDownHard("x"),
            K.BACKEND_UNAVAILABLE,
            "the backend did not answer",
            "Use the logs instead.",
        ),
        id="registered-custom-subclass-via-mro",
    ),
    pytest.param(
        Row(
            _QueryRejected("query touches too many parts"),
            K.BAD_ARGS,
            "query touches too many parts",
        ),
        id="most-specific-registration-wins",
    ),
    pytest.param(Row(_UnprintableError(), K.INTERNAL, GENERIC_INTERNAL), id="unknown-str-raises"),
    pytest.param(
        Row(_UnprintableRegistered(), K.INTERNAL, GENERIC_INTERNAL), id="registered-str-raises"
    ),
]


@pytest.mark.parametrize("row", CLASSIFY_TABLE)
def test_classify_table(row: Row) -> None:
    err = classify_tool_error(row.exc, CLASSES)

    assert err == ToolError(
        error=row.error.value,
        retryable=RETRYABLE[row.error],
        hint=row.hint if row.hint is not None else DEFAULT_HINTS[row.error],
        detail=row.detail,
    )
    text = tool_error_json(err)
    assert SECRET not in text
    assert SECRET_PATH not in text
    assert "Traceback" not in text


def test_retryable_per_kind() -> None:
    assert dict(RETRYABLE) == {
        K.TIMEOUT: True,
        K.BACKEND_UNAVAILABLE: True,
        K.BAD_ARGS: False,
        K.NOT_FOUND: False,
        K.INTERNAL: False,
    }


def test_exactly_five_kinds_each_with_defaults() -> None:
    assert [k.value for k in K] == [
        "timeout",
        "backend_unavailable",
        "bad_args",
        "not_found",
        "internal",
    ]
    for table in (DEFAULT_HINTS, DEFAULT_DETAILS, RETRYABLE):
        assert set(table) == set(K)
    for kind in K:
        assert DEFAULT_HINTS[kind] == sanitize_detail(DEFAULT_HINTS[kind])
        assert DEFAULT_DETAILS[kind] == sanitize_detail(DEFAULT_DETAILS[kind])


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        pytest.param(BadArgs, K.BAD_ARGS, id="bad-args"),
        pytest.param(NotFound, K.NOT_FOUND, id="not-found"),
        pytest.param(BackendUnavailable, K.BACKEND_UNAVAILABLE, id="backend-unavailable"),
        pytest.param(DeadlineExceeded, K.TIMEOUT, id="deadline-exceeded"),
        pytest.param(InternalFailure, K.INTERNAL, id="internal-failure"),
        pytest.param(ToolFailure, K.INTERNAL, id="root"),
    ],
)
def test_tool_failure_classes(cls: type[ToolFailure], kind: ToolErrorKind) -> None:
    assert cls.kind is kind
    assert issubclass(cls, Exception)
    assert (cls.__doc__ or "").startswith("Raised by ")
    exc = cls("what happened", hint="what to do")
    assert (exc.detail, exc.hint, str(exc)) == ("what happened", "what to do", "what happened")


def test_tool_failure_with_clobbered_attributes_still_classifies() -> None:
    exc = NotFound("x")
    exc.detail = 42  # type: ignore[assignment]
    exc.hint = object()  # type: ignore[assignment]
    assert classify_tool_error(exc, CLASSES) == ToolError(
        error="not_found",
        retryable=False,
        hint=DEFAULT_HINTS[K.NOT_FOUND],
        detail=DEFAULT_DETAILS[K.NOT_FOUND],
    )


def test_tool_failure_subclass_with_broken_kind_is_internal() -> None:
    class Weird(BadArgs):
        kind = "bad_args"  # type: ignore[assignment]

    assert classify_tool_error(Weird("x"), CLASSES).error == "internal"


async def test_trio_cancelled_is_internal() -> None:
    caught: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            caught.append(exc)
            raise
    assert scope.cancelled_caught
    (cancelled,) = caught
    assert classify_tool_error(cancelled, CLASSES).error == "internal"
    group = BaseExceptionGroup("g", [cancelled, TimeoutError()])
    assert classify_tool_error(group, CLASSES).error == "internal"


def test_huge_group_is_internal() -> None:
    group = ExceptionGroup("g", [TimeoutError() for _ in range(1000)])
    assert classify_tool_error(group, CLASSES).error == "internal"


def test_deep_group_is_internal() -> None:
    group: ExceptionGroup[Exception] = ExceptionGroup("g", [TimeoutError()])
    for _ in range(50):
        group = ExceptionGroup("g", [group])
    assert classify_tool_error(group, CLASSES).error == "internal"


@pytest.mark.parametrize(
    "exc_type",
    [
        pytest.param(trio.Cancelled, id="trio-cancelled"),
        pytest.param(KeyboardInterrupt, id="keyboard-interrupt"),
        pytest.param(BadArgs, id="tool-failure"),
        pytest.param(ExceptionGroup, id="exception-group"),
    ],
)
def test_merge_refuses(exc_type: type[BaseException]) -> None:
    with pytest.raises(TypeError):
        merge_error_classes({exc_type: ErrorClass(K.TIMEOUT)})


def test_a_type_is_classified_only_by_the_table_handed_in() -> None:
    # No process-wide registry: the default table knows the built-in classes only.
    assert classify_tool_error(_StoreDown("down")).error == "internal"
    assert classify_tool_error(_StoreDown("down"), CLASSES).error == "backend_unavailable"
    assert classify_tool_error(TimeoutError()).error == "timeout"


def test_merge_refuses_unknown_kind() -> None:
    class Local(Exception):
        pass

    with pytest.raises(ValueError, match="nope"):
        merge_error_classes({Local: ErrorClass("nope")})  # type: ignore[arg-type]


# ---- JSON and dict forms --------------------------------------------------------------------


FIXED = ToolError(error="timeout", retryable=True, hint="Narrow it.", detail="took 5 s …")


def test_tool_error_json_exact() -> None:
    assert (
        tool_error_json(FIXED)
        == '{"error":"timeout","retryable":true,"hint":"Narrow it.","detail":"took 5 s …"}'
    )


def test_tool_error_json_round_trips() -> None:
    err = classify_tool_error(_validation_error(), CLASSES)
    decoded = json.loads(tool_error_json(err))
    assert list(decoded) == ["error", "retryable", "hint", "detail"]
    assert decoded == tool_error_dict(err)
    assert msgspec.json.decode(tool_error_json(err), type=ToolError) == err


def test_tool_error_dict_order() -> None:
    assert list(tool_error_dict(FIXED).items()) == [
        ("error", "timeout"),
        ("retryable", True),
        ("hint", "Narrow it."),
        ("detail", "took 5 s …"),
    ]


# ---- sanitizer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("plain message", "plain message", id="plain"),
        pytest.param(
            "  line one\nline two\r\n\tthree  ", "line one line two three", id="newlines-tabs"
        ),
        pytest.param("nul\x00and\x1bescape", "nul and escape", id="control-chars"),
        pytest.param(
            "query failed\nTraceback (most recent call last):\n"
            '  File "/srv/app/x.py", line 3\nKeyError',
            "query failed",
            id="traceback-cut",
        ),
        pytest.param("Traceback (most recent call last): all of it", "", id="only-traceback"),
        pytest.param(f"cannot open {SECRET_PATH}", "cannot open <path>", id="posix-path"),
        pytest.param(
            "error in /srv/app/store.py:120.", "error in <path>.", id="posix-path-line-period"
        ),
        pytest.param("see '/var/lib/coremetry/db'", "see '<path>'", id="posix-path-quoted"),
        pytest.param("key in ~/.ssh/id_ed25519", "key in <path>", id="home-path"),
        pytest.param(
            r"cannot open C:\Users\ops\secrets.txt, sorry",
            "cannot open <path>, sorry",
            id="windows-path",
        ),
        pytest.param("file C:/data/x.db", "file <path>", id="windows-forward-slashes"),
        pytest.param(r"share \\fileserver\ops\x.cfg", "share <path>", id="unc-path"),
        pytest.param(
            "service checkout/payments, endpoint /metrics, ./rel/path",
            "service checkout/payments, endpoint /metrics, ./rel/path",
            id="not-paths-kept",
        ),
        pytest.param(
            "connect http://admin:s3cret@db.local:8123/q failed",
            "connect http://<redacted>@db.local:8123/q failed",
            id="url-credentials",
        ),
        pytest.param(
            "got <foo.Bar object at 0x7f3a2c1b5e10> here", "got <object> here", id="object-repr"
        ),
        pytest.param("cb <function handler at 0x10ab23cd8>", "cb <object>", id="function-repr"),
        pytest.param("freed 0x7f3a2c1b5e10 twice", "freed twice", id="bare-address"),
        pytest.param("flag 0x1F set", "flag 0x1F set", id="small-hex-kept"),
        pytest.param(
            "Expected `str`, got `int` - at `$.text`",
            "Expected `str`, got `int` - at `$.text`",
            id="msgspec-message",
        ),
        pytest.param("a" * MAX_DETAIL_CHARS, "a" * MAX_DETAIL_CHARS, id="exactly-max"),
        pytest.param("a" * 1000, "a" * (MAX_DETAIL_CHARS - 1) + "…", id="truncated"),
        pytest.param("", "", id="empty"),
    ],
)
def test_sanitize_detail(text: str, expected: str) -> None:
    assert sanitize_detail(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("x\n" * 100_000, id="huge-multiline"),
        pytest.param("<" + "a" * 100_000, id="unclosed-repr"),
        pytest.param("/" + "a/" * 50_000, id="deep-path"),
        pytest.param("é\u2028ü\x85" * 1000, id="unicode-separators"),
    ],
)
def test_sanitize_detail_bounds(text: str) -> None:
    out = sanitize_detail(text)
    assert len(out) <= MAX_DETAIL_CHARS
    assert "\n" not in out
    assert "\u2028" not in out
    assert out == out.strip()


def test_sanitize_detail_never_raises_on_non_str() -> None:
    class Bad:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert sanitize_detail(Bad()) == ""  # type: ignore[arg-type]
    assert sanitize_detail(12) == "12"  # type: ignore[arg-type]


def test_all_is_sorted_and_complete() -> None:
    assert tool_errors.__all__ == sorted(tool_errors.__all__)
    public = {
        name
        for name, value in vars(tool_errors).items()
        if not name.startswith("_")
        and getattr(value, "__module__", tool_errors.__name__) == tool_errors.__name__
        and name.isidentifier()
        and not isinstance(value, type(tool_errors))
    }
    assert public <= set(tool_errors.__all__)
    for name in tool_errors.__all__:
        assert hasattr(tool_errors, name)
