"""Moved to :mod:`coremetry.analysis.trace_analysis` (shared with the problem detector).

Re-exported here so that existing imports keep working.
"""

from coremetry.analysis.trace_analysis import PathSegment as PathSegment
from coremetry.analysis.trace_analysis import SpanNode as SpanNode
from coremetry.analysis.trace_analysis import TraceAnalysis as TraceAnalysis
from coremetry.analysis.trace_analysis import analyse_trace as analyse_trace
from coremetry.analysis.trace_analysis import interval_union_ns as interval_union_ns

__all__ = ["PathSegment", "SpanNode", "TraceAnalysis", "analyse_trace", "interval_union_ns"]
