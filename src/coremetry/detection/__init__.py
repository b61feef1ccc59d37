"""Anomaly detection and problems: series-level detection, grouping, origin ranking.

``detector`` judges one ``(time_unix_nano, value)`` series at a time (robust baselines,
seasonality, minimum evidence, hysteresis); ``templates`` mines log templates and reports new
ones; ``events`` finds changes of log template frequency and sequence at every severity
(Nezha's event patterns) and joins them to problems as evidence; ``problems`` groups
anomalies into problems, one per onset, and ranks their likely origin
with the evidence of every series, the service graph and traces; ``spectrum`` compares a
problem's traces with traces of the same requests before it (which service's share grew, or
began failing); ``evaluation`` scores
anomalies and problems against labelled windows and injected faults. All of these are pure
computation. ``sources`` and ``runner`` read the store (the only I/O), ``problem_store`` keeps
problems in ``<data_dir>/problems.json``, ``service`` is the server's background task and
``cli`` is ``coremetry detect``.
"""

from .detector import Anomaly as Anomaly
from .detector import DetectionSummary as DetectionSummary
from .detector import DetectorConfig as DetectorConfig
from .detector import Direction as Direction
from .detector import Series as Series
from .detector import Side as Side
from .detector import Signal as Signal
from .detector import Watch as Watch
from .detector import detect_anomalies as detect_anomalies
from .detector import detect_series as detect_series
from .problems import GroupingConfig as GroupingConfig
from .problems import Problem as Problem
from .problems import ProblemStatus as ProblemStatus
from .problems import Role as Role
from .problems import ServiceEvidence as ServiceEvidence
from .problems import ServiceRank as ServiceRank
from .problems import Symptom as Symptom
from .problems import SymptomKind as SymptomKind
from .problems import TraceBlame as TraceBlame
from .problems import describe_anomaly as describe_anomaly
from .problems import group_problems as group_problems
from .problems import rank_origins as rank_origins

__all__ = [
    "Anomaly",
    "DetectionSummary",
    "DetectorConfig",
    "Direction",
    "GroupingConfig",
    "Problem",
    "ProblemStatus",
    "Role",
    "Series",
    "ServiceEvidence",
    "ServiceRank",
    "Side",
    "Signal",
    "Symptom",
    "SymptomKind",
    "TraceBlame",
    "Watch",
    "describe_anomaly",
    "detect_anomalies",
    "detect_series",
    "group_problems",
    "rank_origins",
]
