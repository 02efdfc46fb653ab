"""Ways to hurt an embedded broker file from outside, for the fault tests and the scoreboard."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def corrupt_message_pages(path: Path) -> int:
    """Overwrite the pages of the ``messages`` table and its indexes with garbage; return how many.

    The schema, owners and queues pages stay intact, so the file still opens and
    the damage shows where a consumer reads. A change written afterwards through
    another connection makes every open connection drop its page cache (WAL
    mode keeps a cache while the WAL is unchanged), so they read the damage.
    """
    db = sqlite3.connect(path, isolation_level=None)
    try:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "the WAL could not be checkpointed into the file"
        pages = [p for (p,) in db.execute(
            "SELECT pageno FROM dbstat WHERE name IN ('messages', 'messages_ready', 'messages_owner')") if p > 1]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        with open(path, "r+b") as fh:
            for page in pages:
                fh.seek((page - 1) * page_size)
                fh.write(b"\xa5" * page_size)
        db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('test-touch', 'x')")
    finally:
        db.close()
    return len(pages)


def can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@contextlib.contextmanager
def small_disk(size: str = "8m") -> Iterator[Path]:
    """A tmpfs of *size* (needs root): a disk that really fills up."""
    if not can_mount():
        from tests.conftest import IN_CI

        why = "a small tmpfs needs root (mount -t tmpfs); not root here"
        if IN_CI:
            pytest.fail(why)  # never a silent skip in CI: the disk-full row must run there
        pytest.skip(why)
    where = Path(tempfile.mkdtemp(prefix="ackbridge-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(directory: Path) -> Path:
    """Write a filler file in *directory* until the disk is full; return it (delete it to free space)."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    return filler
