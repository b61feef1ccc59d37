"""Open the telemetry store the configuration selects (``store.backend``).

- :func:`open_telemetry_store`: an async context manager yielding the open store (the embedded
  SQLite database at ``<data_dir>/telemetry.db`` or the ClickHouse backend); it closes the store
  on exit.
- :func:`store_location`: where that store is, as the CLI's messages name it.
- :func:`clickhouse_options`: the ClickHouse backend's options from the configuration.

Every command that touches telemetry (``serve``, ``stdio``, ``ingest``, ``demo``, ``detect``)
opens it through here, so they all agree on the same store.
"""

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from coremetry.config import Config
from coremetry.store.interface import TelemetryStore
from coremetry.store.sqlite import open_sqlite_store

if TYPE_CHECKING:
    from coremetry.store.clickhouse import ClickHouseOptions


TELEMETRY_DB = "telemetry.db"
"""The embedded store's file name inside the data dir."""


def open_telemetry_store(config: Config) -> AbstractAsyncContextManager[TelemetryStore]:
    """Open the configured telemetry store (``store.backend``).

    ``sqlite`` (default): embedded SQLite at ``<data_dir>/telemetry.db``, settings from
    ``config.store`` (retention, its interval, query threads). ``clickhouse``: the Collector
    exporter's tables as ``config.clickhouse`` says (:func:`clickhouse_options`), with
    ``store.query_threads``. Use as ``async with open_telemetry_store(config) as store:``; the
    store closes on exit.

    Raises:
        StoreUnavailable: (on entry) the database cannot be opened, migrated or reached.
        StoreSchemaError: (on entry) ClickHouse lacks a table or column (all are named).
        ValueError: (on entry) a store setting is out of range, or the ``clickhouse`` extra is
            not installed.
    """
    if config.store.backend == "clickhouse":
        try:
            # Deferred: the ClickHouse backend imports clickhouse_connect, an optional extra
            # that the embedded store does not need.
            from coremetry.store.clickhouse import open_clickhouse_store
        except ImportError as exc:
            raise ValueError(
                "store.backend = clickhouse needs the clickhouse extra "
                f"(pip install 'coremetry[clickhouse]'): {exc}"
            ) from None
        return open_clickhouse_store(clickhouse_options(config))
    return open_sqlite_store(
        Path(config.data_dir).expanduser() / TELEMETRY_DB,
        retention_days=config.store.retention_days,
        retention_interval_s=config.store.retention_interval_s,
        query_threads=config.store.query_threads,
    )


def store_location(config: Config) -> str:
    """The telemetry store ``config`` selects, as the CLI's messages name it.

    ``<data_dir>/telemetry.db`` for the embedded store (``store.backend = "sqlite"``, ``~``
    expanded); ``ClickHouse at <url> (database <name>)`` for ``store.backend = "clickhouse"``
    (the URL never holds a password: :class:`~coremetry.config.ClickHouseConfig`). The same
    choice as :func:`open_telemetry_store`.
    """
    if config.store.backend == "clickhouse":
        section = config.clickhouse
        return f"ClickHouse at {section.url} (database {section.database})"
    return str(Path(config.data_dir).expanduser() / TELEMETRY_DB)


def clickhouse_options(config: Config) -> "ClickHouseOptions":
    """The ClickHouse backend's options from ``config.clickhouse`` and ``config.store``.

    The password is ``clickhouse.password`` (e.g. from ``COREMETRY_CLICKHOUSE_PASSWORD``) or the
    first line of ``clickhouse.password_file``.

    Raises:
        ValueError: the password file cannot be read (names it).
    """
    # Deferred: the ClickHouse backend imports clickhouse_connect, an optional extra.
    from coremetry.store.clickhouse import ClickHouseOptions, TableNames

    section = config.clickhouse
    password = section.password
    if section.password_file:
        path = Path(section.password_file).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(
                f"clickhouse.password_file {str(path)!r} cannot be read: {exc.strerror}"
            ) from None
        password = lines[0] if lines else ""
    return ClickHouseOptions(
        url=section.url,
        username=section.username,
        password=password,
        tables=TableNames(
            database=section.database,
            traces=section.traces_table_name,
            logs=section.logs_table_name,
            metrics=section.metrics_table_name,
        ),
        query_threads=config.store.query_threads,
        connect_timeout_s=section.connect_timeout_s,
        create_tables=section.create_tables,
    )
