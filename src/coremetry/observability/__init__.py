"""The Coremetry tools, resources and prompts: what a model sees of the telemetry store.

:func:`register_observability` puts every entry on a :class:`~coremetry.mcp.Server`. The
package reads only through the :class:`~coremetry.store.TelemetryStore` protocol and knows the
protocol core's registry types, nothing of HTTP (``shared/DESIGN.md`` §2). Modules:

- :mod:`.ranges`: time windows in (``range``/``start``/``end``) and times out (RFC 3339);
- :mod:`.budget`: the output budget every result passes through, and opaque cursors;
- :mod:`.paging`: the one paging sequence of the list tools (cursor in, page, cursor out);
- :mod:`.origin`: the likely origin of slowness (whose critical-path time grew);
- :mod:`.problems`: the detector's stored problems and anomalies, rendered;
- :mod:`.tools`: the tool handlers and their argument Structs;
- :mod:`.spec`: :class:`ToolSpec`, everything about one tool in one declaration;
- :mod:`.catalog`: :data:`TOOLS`, the one list of tool specs, and the catalog (full, compact)
  derived from it;
- :mod:`.entries`: resources, templates, prompts and completion;
- :mod:`.registration`: the wiring, and the store-error classification;
- :mod:`.cli`: ``coremetry tools --catalog compact|full``.
"""

from .budget import DEFAULT_BUDGET_BYTES as DEFAULT_BUDGET_BYTES
from .budget import MIN_BUDGET_BYTES as MIN_BUDGET_BYTES
from .budget import Shaped as Shaped
from .budget import Trimmable as Trimmable
from .budget import fit as fit
from .catalog import TOOLS as TOOLS
from .problems import NO_DETECTION_NOTE as NO_DETECTION_NOTE
from .problems import ProblemSource as ProblemSource
from .registration import STORE_ERROR_CLASSES as STORE_ERROR_CLASSES
from .registration import TOOL_NAMES as TOOL_NAMES
from .registration import register_observability as register_observability
from .spec import ToolSpec as ToolSpec
from .tools import ObservabilityTools as ObservabilityTools

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MIN_BUDGET_BYTES",
    "NO_DETECTION_NOTE",
    "ObservabilityTools",
    "ProblemSource",
    "STORE_ERROR_CLASSES",
    "Shaped",
    "TOOLS",
    "TOOL_NAMES",
    "ToolSpec",
    "Trimmable",
    "fit",
    "register_observability",
]
