"""Write-ahead files: a planned batch's rows on disk, so a restarted query
replays exactly what it planned. They are written by
:func:`ackbridge_spark.atomic_files.write_atomically` (private to the user unless
``writeAheadFileMode`` relaxes them: they hold message bodies)."""

from __future__ import annotations

import contextlib
import os


def batch_file(directory: str | None, s: int, e: int) -> str | None:
    """The write-ahead file of planned range (s, e], or None without a directory."""
    if not directory:
        return None
    return os.path.join(directory, f"batch-{s:020d}-{e:020d}.arrow")


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
