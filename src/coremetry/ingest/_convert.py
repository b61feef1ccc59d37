"""Conversion helpers shared by the decoders: ids, times, severities, service names.

Rules (each decoder's docstring refers here):

- **Times** are sane when ``0 < t <= 2**63 - 1`` unix nanoseconds (1970 up to 2262-04-11, the
  range of a signed 64-bit nanosecond count). A negative value, or an unsigned 64-bit value
  past that range (the Nezha logs' ``-6795364578871345152``, year 1754, is ``2**64`` less than
  such a value), is corrupt. ``0`` means "absent" in OTLP.
- **Ids** are lower-case hex, trace ids 32 and span ids 16 characters, shorter hex ids
  left-padded with zeros (:func:`coremetry.store.normalize_trace_id`); all-zero ids are absent.
- **Service name**: the resource attribute ``service.name``; absent or empty ->
  ``unknown_service`` (the OpenTelemetry SDK default).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Final

from coremetry.store.model import (
    UNKNOWN_SERVICE,
    AttributeScalar,
    AttributeValue,
    normalize_span_id,
    normalize_trace_id,
)

MAX_UNIX_NANO: Final = 2**63 - 1
"""Latest representable time, in unix nanoseconds (2262-04-11T23:47:16Z)."""

_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


class ItemRejected(Exception):
    """Raised inside a decoder for one item it cannot store; caught next to the item's loop.

    Attributes:
        reason: the rejection reason (shared by every item rejected for the same cause).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_sane_time(unix_nano: int) -> bool:
    """Whether ``unix_nano`` is a usable time (see the module docstring)."""
    return 0 < unix_nano <= MAX_UNIX_NANO


def parse_int(raw: int | str, what: str) -> int:
    """An OTLP JSON 64-bit integer, sent as a number or a decimal string.

    Raises:
        ItemRejected: ``raw`` is a string that is not a decimal integer.
    """
    if isinstance(raw, int):
        return raw
    try:
        return int(raw.strip())
    except ValueError:
        raise ItemRejected(f"{what} is not an integer: {raw[:40]!r}") from None


def parse_float(raw: float | str, what: str) -> float:
    """An OTLP JSON double: a number, or a string such as ``"NaN"``, ``"Infinity"``, ``"1.5"``.

    Raises:
        ItemRejected: ``raw`` is a string that is not a number.
    """
    if isinstance(raw, float | int):
        return float(raw)
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        raise ItemRejected(f"{what} is not a number: {raw[:40]!r}") from None


def hex_trace_id(raw: str, what: str = "trace_id") -> str:
    """A hex trace id as 32 lower-case hex characters (``""`` when empty or all zeros).

    Raises:
        ItemRejected: not hex, or longer than 32 characters.
    """
    try:
        return normalize_trace_id(raw)
    except ValueError:
        raise ItemRejected(f"{what} is not up to 32 hex characters: {raw[:40]!r}") from None


def hex_span_id(raw: str, what: str = "span_id") -> str:
    """A hex span id as 16 lower-case hex characters (``""`` when empty or all zeros).

    Raises:
        ItemRejected: not hex, or longer than 16 characters.
    """
    try:
        return normalize_span_id(raw)
    except ValueError:
        raise ItemRejected(f"{what} is not up to 16 hex characters: {raw[:40]!r}") from None


def bytes_trace_id(raw: bytes, what: str = "trace_id") -> str:
    """An OTLP protobuf trace id (16 bytes, or empty) as hex.

    Raises:
        ItemRejected: not 0 or 16 bytes long.
    """
    if not raw:
        return ""
    if len(raw) != 16:
        raise ItemRejected(f"{what} must be 16 bytes, got {len(raw)}")
    text = raw.hex()
    return "" if text == _ZERO_TRACE else text


def bytes_span_id(raw: bytes, what: str = "span_id") -> str:
    """An OTLP protobuf span id (8 bytes, or empty) as hex.

    Raises:
        ItemRejected: not 0 or 8 bytes long.
    """
    if not raw:
        return ""
    if len(raw) != 8:
        raise ItemRejected(f"{what} must be 8 bytes, got {len(raw)}")
    text = raw.hex()
    return "" if text == _ZERO_SPAN else text


def base64_text(raw: bytes) -> str:
    """Bytes attribute values are stored as standard base64 text (the model's rule)."""
    return base64.b64encode(raw).decode("ascii")


def service_name_of(resource_attributes: Mapping[str, AttributeValue]) -> str:
    """The resource's ``service.name`` as text, ``unknown_service`` when absent or empty."""
    value = resource_attributes.get("service.name")
    if value is None or value == "" or isinstance(value, list):
        return UNKNOWN_SERVICE
    return value if isinstance(value, str) else str(value)


_SEVERITY_BY_TEXT: Final = {
    "TRACE": 1,
    "DEBUG": 5,
    "INFO": 9,
    "INFORMATION": 9,
    "NOTICE": 10,
    "WARN": 13,
    "WARNING": 13,
    "ERROR": 17,
    "ERR": 17,
    "SEVERE": 17,
    "CRITICAL": 21,
    "CRIT": 21,
    "FATAL": 21,
    "ALERT": 22,
    "EMERGENCY": 23,
    "EMERG": 23,
    "PANIC": 21,
}


def severity_number_from_text(text: str) -> int:
    """The OTel severity number for a level name (``WARN`` -> 13), 0 when unknown.

    Source: the OTel logs data model's mapping table ("Mapping of SeverityNumber") and its
    syslog/log4j examples.
    """
    return _SEVERITY_BY_TEXT.get(text.strip().upper(), 0)


def scalar_text(value: AttributeScalar) -> str:
    """A scalar as the text Prometheus-style labels and quantile attributes use."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return str(value)
