"""Is the broker file still the one this broker wrote?

SQLite opens a missing or 0-byte file as a new, empty database, so a deleted
or truncated broker file would silently become an empty broker. Two checks
stop that:

* a marker file next to the broker file (``broker.db.ackbridge-id``) holds the
  id stored inside the database when it was created, and the file's inode. A
  marker without a broker file, or with an empty, foreign, moved-in or
  non-SQLite one, is an error until a person restores the file or deletes the
  marker. The inode is checked before SQLite opens the file: SQLite finds its
  write-ahead log by name, so a ``-wal`` left by the file that was replaced
  would be replayed onto the new one;
* while open, the path must still lead to the same file (device and inode),
  non-empty: a file deleted, replaced or truncated under a running process is
  reported instead of written into.

These checks never open the broker file: closing any descriptor of a file
releases every POSIX lock the process holds on it, including SQLite's, and two
processes writing without their locks corrupt the database. A file that is not
an SQLite database is reported by SQLite itself (SQLITE_NOTADB, mapped to
DamagedFileError), and so is an overwritten one on its next read.
"""

from __future__ import annotations

import os

from ackbridge.transport.files import write_private_bytes
from ackbridge_local.errors import DamagedFileError

MARKER_SUFFIX = ".ackbridge-id"


def marker_path(path: str) -> str:
    return path + MARKER_SUFFIX


def read_marker(path: str) -> tuple[str, int | None] | None:
    """(broker id, inode) from the marker; None when there is none."""
    try:
        with open(marker_path(path), encoding="ascii") as fh:
            parts = fh.read().split()
    except FileNotFoundError:
        return None
    if not parts:
        return None
    return parts[0], int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def write_marker(path: str, broker_id: str, mode: int) -> None:
    inode = os.stat(path).st_ino
    write_private_bytes(marker_path(path), f"{broker_id} {inode}\n".encode("ascii"), mode)


def _fix(path: str) -> str:
    return (f"restore it from a backup, or delete {marker_path(path)!r} to start an empty broker there "
            "(the messages it held are then gone)")


def check_before_open(path: str) -> str | None:
    """The broker id the marker records (None: no broker was created here yet).

    Raises DamagedFileError when the marker says a broker lived at *path* and
    the file there is gone, empty or not an SQLite database, before SQLite
    could create an empty one in its place.
    """
    found = read_marker(path)
    if found is None:
        return None
    marker, inode = found
    try:
        st = os.stat(path)
        size = st.st_size
    except FileNotFoundError:
        raise DamagedFileError(f"the embedded broker file {path!r} is missing although broker {marker} was created "
                               f"there: it was deleted or moved; {_fix(path)}") from None
    if size == 0:
        raise DamagedFileError(f"the embedded broker file {path!r} is empty (0 bytes) although broker {marker} held "
                               f"data there: it was truncated; {_fix(path)}")
    if inode is not None and st.st_ino != inode:
        raise DamagedFileError(f"the embedded broker file {path!r} is not the file broker {marker} was created in: "
                               f"the file was replaced (moved or copied in); {_fix(path)}")
    return marker


def check_same_broker(path: str, marker: str | None, stored_id: str) -> None:
    if marker is not None and marker != stored_id:
        raise DamagedFileError(f"the embedded broker file {path!r} holds broker {stored_id}, but broker {marker} "
                               f"was created there: the file was replaced; {_fix(path)}")


class OpenFile:
    """The identity of the broker file as opened; :meth:`check` says whether the path still leads to it."""

    def __init__(self, path: str) -> None:
        st = os.stat(path)
        self.path = path
        self.dev, self.ino = st.st_dev, st.st_ino

    def check(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DamagedFileError(f"the embedded broker file {self.path!r} was deleted while open; nothing more is "
                                   "written to it (a new process would not see what it held)") from None
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            raise DamagedFileError(f"the embedded broker file {self.path!r} was replaced by another file while open; "
                                   "nothing more is written to either")
        if st.st_size == 0:
            raise DamagedFileError(f"the embedded broker file {self.path!r} was truncated to 0 bytes while open")
