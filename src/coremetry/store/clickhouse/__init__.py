"""The ClickHouse telemetry store: the OpenTelemetry Collector exporter's tables, as they are.

:func:`open_clickhouse_store` connects (``clickhouse-connect``; an ``http(s)://`` server or an
embedded ``chdb://`` engine), checks the exporter's tables (``otel_traces``, ``otel_logs``,
``otel_metrics_gauge``/``_sum``/``_histogram``, names configurable) and yields a
:class:`ClickHouseStore`, which implements :class:`~coremetry.store.TelemetryStore` and passes
the same conformance suite as the embedded store. ``_schema`` holds the tables' columns, sort
keys and DDL, ``_codec`` how records map onto rows, ``_queries`` each read's SQL,
``_runtime`` query ids, budgets, ``KILL QUERY`` and error mapping, ``_store`` writes,
idempotency and the startup check. Needs the ``clickhouse`` extra
(``pip install coremetry[clickhouse]``).
"""

from ._codec import META_KEY as META_KEY
from ._runtime import KILL_TIMEOUT_S as KILL_TIMEOUT_S
from ._schema import TableNames as TableNames
from ._schema import exporter_ddl as exporter_ddl
from ._store import ClickHouseOptions as ClickHouseOptions
from ._store import ClickHouseStore as ClickHouseStore
from ._store import open_clickhouse_store as open_clickhouse_store

__all__ = [
    "ClickHouseOptions",
    "ClickHouseStore",
    "KILL_TIMEOUT_S",
    "META_KEY",
    "TableNames",
    "exporter_ddl",
    "open_clickhouse_store",
]
