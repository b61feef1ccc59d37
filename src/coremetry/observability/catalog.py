"""The tool catalog, full and compact, and what it costs in bytes.

- **full**: each tool as ``tools/list`` serves it — ``name``, ``title``, ``description`` (the long
  text), ``inputSchema`` (generated from the argument Struct) and ``annotations``;
- **compact**: for chat-style catalogs that pay for every byte in the model's context — ``name``,
  the one-line ``short_description`` as ``description``, and the input schema without its
  ``description``/``title`` keywords (types, enums, bounds, defaults and ``required`` stay, so a
  call can still be formed).

Both are compact JSON arrays; ``coremetry tools --catalog compact|full`` prints one and its size,
``bench/catalog_size.py`` compares them. The same :data:`TOOL_ARGS`, descriptions and schema
generator feed :func:`~.registration.register_observability`, so the catalog is what a client
is served (a test compares them byte for byte).
"""

from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from coremetry.mcp import schema_for

from .budget import JsonObject
from .descriptions import DESCRIPTIONS, SHORT_DESCRIPTIONS
from .ranges import RangeArgs, range_description
from .tools import (
    CompareDeploysArgs,
    GetProblemArgs,
    GetServiceArgs,
    GetServiceMapArgs,
    GetTraceArgs,
    ListAnomaliesArgs,
    ListDeploysArgs,
    ListMetricsArgs,
    ListProblemsArgs,
    ListServicesArgs,
    QueryMetricArgs,
    SearchLogsArgs,
    SearchTracesArgs,
)

__all__ = [
    "ANNOTATIONS",
    "TOOL_ARGS",
    "CatalogKind",
    "catalog",
    "catalog_bytes",
    "input_schema",
    "title_of",
]

CatalogKind = Literal["compact", "full"]
"""Which catalog."""

TOOL_ARGS: Final[Mapping[str, type[msgspec.Struct]]] = {
    "list_services": ListServicesArgs,
    "get_service": GetServiceArgs,
    "get_service_map": GetServiceMapArgs,
    "search_traces": SearchTracesArgs,
    "get_trace": GetTraceArgs,
    "search_logs": SearchLogsArgs,
    "list_metrics": ListMetricsArgs,
    "query_metric": QueryMetricArgs,
    "list_deploys": ListDeploysArgs,
    "compare_deploys": CompareDeploysArgs,
    "list_problems": ListProblemsArgs,
    "get_problem": GetProblemArgs,
    "list_anomalies": ListAnomaliesArgs,
}
"""Every tool's argument Struct, in catalog order."""

ANNOTATIONS: Final[JsonObject] = {"readOnlyHint": True, "openWorldHint": False}
"""The annotations every tool carries (read-only, closed world: it reads only our store)."""

_ENCODER: Final = msgspec.json.Encoder()


def title_of(name: str) -> str:
    """A tool's human-readable title: ``get_service_map`` -> ``Get service map``."""
    return name.replace("_", " ").capitalize()


def input_schema(args: type[msgspec.Struct]) -> JsonObject:
    """The served input schema: generated from the Struct, without the Struct's docstring.

    For a windowed tool (a :class:`~.ranges.RangeArgs`), the ``range`` property's description
    names the tool's own default window (:attr:`~.ranges.RangeArgs.default_range`, the value
    the handler uses).
    """
    schema = schema_for(args)
    schema.pop("description", None)
    properties = schema.get("properties")
    if issubclass(args, RangeArgs) and isinstance(properties, dict):
        window = properties.get("range")
        if isinstance(window, dict):
            window["description"] = range_description(args.default_range)
    return schema


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _strip(v) for k, v in value.items() if k not in ("description", "title")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def catalog(kind: CatalogKind) -> list[JsonObject]:
    """The catalog entries of every tool (see the module docstring)."""
    entries: list[JsonObject] = []
    for name, args in TOOL_ARGS.items():
        if kind == "full":
            entries.append(
                {
                    "name": name,
                    "title": title_of(name),
                    "description": DESCRIPTIONS[name],
                    "inputSchema": input_schema(args),
                    "annotations": dict(ANNOTATIONS),
                }
            )
        else:
            entries.append(
                {
                    "name": name,
                    "description": SHORT_DESCRIPTIONS[name],
                    "inputSchema": _strip(input_schema(args)),
                }
            )
    return entries


def catalog_bytes(kind: CatalogKind) -> bytes:
    """The catalog as compact JSON (its length is the catalog's size in bytes)."""
    return _ENCODER.encode(catalog(kind))
