"""Write-ahead files: a planned batch's rows on disk, so a restarted query
replays exactly what it planned. Files and the directories created for them
are private to the user (0600 / 0700) unless ``writeAheadFileMode`` relaxes
them: they hold message bodies."""

from __future__ import annotations

import contextlib
import os
import uuid

from ackbridge.files import PRIVATE_FILE, dir_mode_for, open_private, private_dir


def batch_file(directory: str | None, s: int, e: int) -> str | None:
    """The write-ahead file of planned range (s, e], or None without a directory."""
    if not directory:
        return None
    return os.path.join(directory, f"batch-{s:020d}-{e:020d}.arrow")


def write_atomically(path: str, data: bytes, mode: int = PRIVATE_FILE) -> None:
    """Write *data* to *path* durably: a temp file with *mode*, fsync, rename, fsync the directory."""
    directory = os.path.dirname(path)
    private_dir(directory, dir_mode_for(mode))
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"  # planner and runner may both write one
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def remove_through(directory: str | None, seq: int) -> None:
    """Delete the write-ahead files of ranges ending at or before *seq* (committed)."""
    if not directory or not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if not (name.startswith("batch-") and name.endswith(".arrow")):
            continue
        try:
            end = int(name[:-6].split("-")[2])
        except (IndexError, ValueError):
            continue
        if end <= seq:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
