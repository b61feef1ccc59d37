"""The store's exceptions: one root, data-carrying, mapped to tool error classes by the app.

::

    StoreError                       root of everything a TelemetryStore raises on purpose
    ├── QueryRejected                the query itself is wrong (bad cursor, bad full-text
    │                                syntax, inverted range): the caller must change it
    ├── StoreUnavailable             the backend failed or cannot be reached (disk full,
    │                                database locked past its wait, server refused)
    └── StoreClosed                  we closed the store; no more calls are accepted

``coremetry.store`` registers these with the protocol core's classifier
(:func:`coremetry.mcp.register_error_class`) in ``coremetry.observability`` — the store itself
never imports the protocol core. ``QueryRejected`` -> ``bad_args`` (its message is written for
users and names the field), ``StoreUnavailable`` / ``StoreClosed`` -> ``backend_unavailable``.
Anything else a backend raises is a bug and classifies as ``internal``.
"""

from __future__ import annotations

__all__ = ["QueryRejected", "StoreClosed", "StoreError", "StoreUnavailable"]


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
