"""Pure trace analysis shared by the observability tools and the problem detector.

- :mod:`.trace_analysis`: one trace as a tree — self time, clock-skew adjustment, the critical
  path and which callee a caller waits on;
- :mod:`.critical_path`: critical-path time per service summed over a set of traces, and the
  growth per service from typical to slow traces (who the slowness belongs to).

No I/O and no store access here: callers read the spans (through
:class:`~coremetry.store.TelemetryStore`) and pass them in.
"""

from .critical_path import CriticalPathTally as CriticalPathTally
from .critical_path import ServiceExcess as ServiceExcess
from .critical_path import critical_path_excess as critical_path_excess
from .trace_analysis import PathSegment as PathSegment
from .trace_analysis import SpanNode as SpanNode
from .trace_analysis import TraceAnalysis as TraceAnalysis
from .trace_analysis import analyse_trace as analyse_trace
from .trace_analysis import interval_union_ns as interval_union_ns
from .trace_analysis import self_intervals as self_intervals

__all__ = [
    "CriticalPathTally",
    "PathSegment",
    "ServiceExcess",
    "SpanNode",
    "TraceAnalysis",
    "analyse_trace",
    "critical_path_excess",
    "interval_union_ns",
    "self_intervals",
]
