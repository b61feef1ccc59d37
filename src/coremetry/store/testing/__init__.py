"""The store conformance suite (being split into modules by area; see ``_checks_traces``)."""

from ._checks_traces import (
    CONFORMANCE_CHECKS,
    ConformanceCheck,
    ConformanceError,
    MakeStore,
    _dataset,
    check_store_conformance,
)

__all__ = [
    "CONFORMANCE_CHECKS",
    "ConformanceCheck",
    "ConformanceError",
    "MakeStore",
    "_dataset",
    "check_store_conformance",
]
