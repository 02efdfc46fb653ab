"""Writing a file atomically and privately: the write-ahead files of the
driver-side source (:mod:`ackbridge_spark.push.write_ahead`) and the part files
of the executor-fetch source (:mod:`ackbridge_spark.fetch.files`). Files and the
directories created for them are private to the user (0600 / 0700) unless
``writeAheadFileMode`` relaxes them: they hold message bodies."""

from __future__ import annotations

import contextlib
import os
import uuid

import pyarrow as pa

from ackbridge.transport.files import PRIVATE_FILE, dir_mode_for, open_private, private_dir


def write_atomically(path: str, data: bytes | pa.RecordBatch, mode: int = PRIVATE_FILE, *,
                     durable: bool = True) -> None:
    """Write *data* to *path*: a temp file with *mode*, renamed into place.

    A record batch is written as an Arrow IPC stream straight from its buffers
    (no serialised copy in memory first: at 4 KiB bodies that was two more
    copies of a 100 MB batch). With *durable*, the file and then its directory
    are fsynced, so the batch survives a crash of the machine, not only of the
    process.
    """
    directory = os.path.dirname(path)
    private_dir(directory, dir_mode_for(mode))
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"  # planner and runner may both write one
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if isinstance(data, pa.RecordBatch):
            os.close(fd)
            fd = -1
            # pyarrow's own file: the batch's buffers go to write(2) as they are. The
            # file already exists with its mode (pyarrow would create it 0666 & ~umask).
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_stream(sink, data.schema) as writer:
                writer.write_batch(data)
            if durable:
                fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                os.fsync(fd)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)
    if durable:
        with contextlib.suppress(OSError):
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
