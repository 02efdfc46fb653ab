"""SQLite's errors mapped to ackbridge's tree at the plugin's edge.

::

    BrokerError
    ├── StorageFullError     recoverable: the disk (or the file's size limit) is full;
    │                        nothing was written, retry when space returns
    └── DamagedFileError     fatal for this connection: the broker file is corrupt,
                             truncated, deleted or replaced; every later call raises it

Every message names the broker file (a local path: no secret in it).
"""

from __future__ import annotations

import sqlite3

from ackbridge.errors import BrokerError

# Primary result codes (sqlite3.h); Python reports the extended code, whose low byte is these.
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26
SQLITE_READONLY_DBMOVED = 1032  # SQLite noticed the file was unlinked or renamed

_DAMAGE = {SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB}


class StorageFullError(BrokerError):
    """The broker file could not grow: the disk or its size limit is full. Nothing was written."""

    recoverable = True


class DamagedFileError(BrokerError):
    """The broker file is corrupt, truncated, deleted or replaced; this connection cannot go on."""


class OwnerGone(Exception):
    """Internal: this process's owner record was taken over (never leaves the plugin)."""


def mapped(exc: sqlite3.Error, path: str, doing: str) -> BrokerError:
    """The typed error for SQLite's *exc* raised while *doing* something with the file at *path*."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = f"{doing} on the embedded broker file {path!r} failed: {exc}"
    if primary == SQLITE_FULL or "disk is full" in str(exc):
        return StorageFullError(text + " (nothing was written; it works again once space is freed)")
    if code == SQLITE_READONLY_DBMOVED:
        return DamagedFileError(text + " (the file was deleted or moved while open)")
    if primary in _DAMAGE or "malformed" in str(exc):
        return DamagedFileError(text + " (the file is damaged; restore it from a backup)")
    return BrokerError(text)
