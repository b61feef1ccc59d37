"""Anomaly detection and problems: series-level detection, grouping, origin ranking.

``detector`` judges one ``(time_unix_nano, value)`` series at a time (robust baselines,
seasonality, minimum evidence, hysteresis); ``problems`` groups anomalies into problems over
the service graph and ranks their likely origin; ``evaluation`` scores anomalies against
labelled windows (NAB). All three are pure computation: the server-side runner that builds
series from the store lives beside them and is the only part that does I/O.
"""

from .detector import Anomaly as Anomaly
from .detector import DetectionSummary as DetectionSummary
from .detector import DetectorConfig as DetectorConfig
from .detector import Direction as Direction
from .detector import Series as Series
from .detector import Signal as Signal
from .detector import Watch as Watch
from .detector import detect_anomalies as detect_anomalies
from .detector import detect_series as detect_series
from .problems import GroupingConfig as GroupingConfig
from .problems import Problem as Problem
from .problems import ProblemStatus as ProblemStatus
from .problems import ServiceRank as ServiceRank
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
    "Series",
    "ServiceRank",
    "Signal",
    "Watch",
    "describe_anomaly",
    "detect_anomalies",
    "detect_series",
    "group_problems",
    "rank_origins",
]
