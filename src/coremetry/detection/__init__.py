"""Anomaly detection and problems."""

from .detector import Anomaly as Anomaly
from .detector import DetectionSummary as DetectionSummary
from .detector import DetectorConfig as DetectorConfig
from .detector import Direction as Direction
from .detector import Series as Series
from .detector import detect_anomalies as detect_anomalies
from .detector import detect_series as detect_series
