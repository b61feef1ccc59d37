"""The embedded telemetry store: SQLite (stdlib ``sqlite3``) in the data directory.

The default backend: nothing to install or run. :func:`open_sqlite_store` opens (creating or
migrating) ``<data_dir>/telemetry.db`` and yields a :class:`SqliteStore`, which implements
:class:`~coremetry.store.TelemetryStore`. See ``_store`` for the concurrency model
(worker threads under a capacity limiter, interruptible reads, one serialised writer,
background retention), ``_schema`` for the tables, indexes and migrations, ``_queries`` for
how each read is computed in SQL, and ``_text`` for the translation of full-text queries
into FTS5 (the language itself, and the argument checks shared with the other backend, are
``coremetry.store._text_query`` and ``coremetry.store._query_args``).
"""

from ._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._store import SqliteStore as SqliteStore
from ._store import open_sqlite_store as open_sqlite_store

__all__ = ["SCHEMA_VERSION", "SqliteStore", "open_sqlite_store"]
