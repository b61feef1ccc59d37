"""The store's exceptions: one root, data-carrying, mapped to tool error classes by the app.

::

    StoreError                       root of everything a TelemetryStore raises on purpose
    ├── QueryRejected                the query itself is wrong (bad cursor, bad full-text
    │                                syntax, inverted range): the caller must change it
    ├── StoreUnavailable             the backend failed or cannot be reached (disk full,
    │   │                            database locked past its wait, server refused)
    │   └── StoreTimeout             the backend stopped the query at its own time limit
    │                                (ClickHouse ``max_execution_time``, code 159)
    ├── StoreSchemaError             the backend's tables lack what the store reads (a
    │                                ClickHouse table or column missing or of another type)
    └── StoreClosed                  we closed the store; no more calls are accepted

``coremetry.observability`` maps these onto the protocol core's tool-error classes
(``STORE_ERROR_CLASSES``, handed to the ``Server`` at assembly) — the store itself never
imports the protocol core. ``QueryRejected`` -> ``bad_args`` (its message is written for
users and names the field), ``StoreUnavailable`` / ``StoreClosed`` -> ``backend_unavailable``,
``StoreTimeout`` -> ``timeout``, ``StoreSchemaError`` -> ``internal`` (its message names the
table or column, from the configuration, never the data).
Anything else a backend raises is a bug and classifies as ``internal``.
"""

from __future__ import annotations

__all__ = [
    "QueryRejected",
    "StoreClosed",
    "StoreError",
    "StoreSchemaError",
    "StoreTimeout",
    "StoreUnavailable",
]


class StoreError(Exception):
    """Root of the store's exceptions; never raised itself."""


class QueryRejected(StoreError):
    """Raised by a store query when its arguments cannot be run as given.

    The message names the field (``cursor``, ``text``, ``time_range``, ...) and says what is
    wrong, in words a user (or a model) can act on.

    Attributes:
        field: the name of the offending argument.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StoreUnavailable(StoreError):
    """Raised by any store call when the backend fails (I/O error, locked, refused, full)."""


class StoreClosed(StoreError):
    """Raised by any store call made after :meth:`TelemetryStore.aclose` began."""


class StoreTimeout(StoreUnavailable):
    """Raised by a store query when the backend stopped it at its own time limit.

    The ClickHouse backend sends the call's remaining budget as ``max_execution_time``; when
    the server gives up first (``TIMEOUT_EXCEEDED``, code 159, and its kin) the query raises
    this. A deadline that trio enforces first raises ``Cancelled`` as usual.
    """


class StoreSchemaError(StoreError):
    """Raised by a store call when the backend's tables lack what the store reads or writes.

    The message names the tables and columns (e.g. ``column default.otel_traces.Duration is
    Int64, expected UInt64``): a deployment problem to fix, not a transient failure.
    """
