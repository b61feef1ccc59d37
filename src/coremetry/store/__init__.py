"""The telemetry store: OpenTelemetry-model records behind the :class:`TelemetryStore` protocol.

``model`` holds the records, ``interface`` the protocol and its query/result types, ``errors``
the exception tree, ``sqlite`` the embedded default backend, ``clickhouse`` the backend over
the OpenTelemetry Collector exporter's ClickHouse tables (imported on demand: it needs the
``clickhouse`` extra), ``testing`` the conformance suite every backend passes. This package
never imports ``coremetry.mcp`` (the app registers the store's errors with the protocol core's
classifier).
"""

from .errors import QueryRejected as QueryRejected
from .errors import StoreClosed as StoreClosed
from .errors import StoreError as StoreError
from .errors import StoreSchemaError as StoreSchemaError
from .errors import StoreTimeout as StoreTimeout
from .errors import StoreUnavailable as StoreUnavailable
from .interface import DEFAULT_AGGREGATIONS as DEFAULT_AGGREGATIONS
from .interface import MAX_LIMIT as MAX_LIMIT
from .interface import MAX_TRACES_PER_READ as MAX_TRACES_PER_READ
from .interface import Aggregation as Aggregation
from .interface import DeployRecord as DeployRecord
from .interface import LabelMatcher as LabelMatcher
from .interface import LogQuery as LogQuery
from .interface import MetricDescriptor as MetricDescriptor
from .interface import MetricQuery as MetricQuery
from .interface import MetricSeries as MetricSeries
from .interface import OperationSummary as OperationSummary
from .interface import Page as Page
from .interface import RetentionResult as RetentionResult
from .interface import ServiceEdge as ServiceEdge
from .interface import ServiceSummary as ServiceSummary
from .interface import StatusFilter as StatusFilter
from .interface import StoreStatistics as StoreStatistics
from .interface import TelemetryStore as TelemetryStore
from .interface import TimeRange as TimeRange
from .interface import TraceQuery as TraceQuery
from .interface import TraceSummary as TraceSummary
from .interface import WriteResult as WriteResult
from .model import UNKNOWN_SERVICE as UNKNOWN_SERVICE
from .model import AggregationTemporality as AggregationTemporality
from .model import Attributes as Attributes
from .model import AttributeScalar as AttributeScalar
from .model import AttributeValue as AttributeValue
from .model import HistogramValue as HistogramValue
from .model import LogRecord as LogRecord
from .model import MetricPoint as MetricPoint
from .model import MetricType as MetricType
from .model import Span as Span
from .model import SpanEvent as SpanEvent
from .model import SpanKind as SpanKind
from .model import SpanLink as SpanLink
from .model import StatusCode as StatusCode
from .model import TelemetryBatch as TelemetryBatch
from .model import normalize_span_id as normalize_span_id
from .model import normalize_trace_id as normalize_trace_id
from .sqlite import SqliteStore as SqliteStore
from .sqlite import open_sqlite_store as open_sqlite_store

__all__ = [
    "DEFAULT_AGGREGATIONS",
    "MAX_LIMIT",
    "MAX_TRACES_PER_READ",
    "UNKNOWN_SERVICE",
    "Aggregation",
    "AggregationTemporality",
    "AttributeScalar",
    "AttributeValue",
    "Attributes",
    "DeployRecord",
    "HistogramValue",
    "LabelMatcher",
    "LogQuery",
    "LogRecord",
    "MetricDescriptor",
    "MetricPoint",
    "MetricQuery",
    "MetricSeries",
    "MetricType",
    "OperationSummary",
    "Page",
    "QueryRejected",
    "RetentionResult",
    "ServiceEdge",
    "ServiceSummary",
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanLink",
    "SqliteStore",
    "StatusCode",
    "StatusFilter",
    "StoreClosed",
    "StoreError",
    "StoreSchemaError",
    "StoreStatistics",
    "StoreTimeout",
    "StoreUnavailable",
    "TelemetryBatch",
    "TelemetryStore",
    "TimeRange",
    "TraceQuery",
    "TraceSummary",
    "WriteResult",
    "normalize_span_id",
    "normalize_trace_id",
    "open_sqlite_store",
]
