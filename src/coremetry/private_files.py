"""Create the data dir's database files private to the server's user, safely.

Telemetry, the audit log and the identity store carry user data, so their directory is made
``0700`` and each database file ``0600`` from the start (sqlite gives its ``-wal`` and ``-shm``
files the database file's permissions).

The file is created with ``O_CREAT | O_EXCL`` and *never opened when it already exists*. That
matters: SQLite locks its files with POSIX advisory locks, which a process loses on *every*
descriptor of the file as soon as it closes *any* descriptor of it (SQLite, "How To Corrupt An
SQLite Database File" §2.2). An ``open()``/``close()`` of a database another connection of this
process holds (the audit log and the identity store share ``coremetry.db``) silently drops that
connection's locks; it showed as a server reading a stale snapshot of the users table.
"""

import os
from pathlib import Path

__all__ = ["create_private_file"]


def create_private_file(path: Path) -> None:
    """Make ``path``'s directory (``0700``, parents too) and an empty ``path`` (``0600``).

    Does nothing to a file that exists (its mode is left as it is, and it is not opened: see
    the module docstring), nor to an existing directory's mode.

    Raises:
        OSError: the directory or the file cannot be created.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(descriptor)  # a new, empty file: no connection of ours can hold it yet
