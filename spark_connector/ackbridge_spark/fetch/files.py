"""The files of the executor-fetch source: how a batch's ack handles reach the driver.

Under the source's directory (``writeAheadPath``, or a private temporary one
on a single machine), one folder per planned batch::

    batch-00000000000000000007/
        plan.json              {"tasks": 2}   written by the driver when it plans the batch
        part-00000/rows.arrow  the rows task 0 fetched (Arrow IPC)
        part-00000/acks        their ack handles, one per line
        part-00001/...

An attempt writes both files into a folder of its own, then renames it to
``part-<i>``: the first attempt to finish claims the part (a rename onto an
existing folder fails), so a part is complete or absent, never half written,
and two attempts (a retry racing a slow first one, speculation) cannot mix
their rows and handles. A retried task, or the task of a batch replayed after
a driver restart, finds the part complete and reads its rows back instead of
fetching, so every attempt of a part yields the same rows, and the handles
the driver acks are exactly those of the rows Spark committed. The
payloads go from the broker to an executor and its file, never through the
driver; the driver reads the ``acks`` files only. Files and folders are
private to the user (0600 / 0700) unless ``writeAheadFileMode`` relaxes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid

from ackbridge_spark.atomic_files import write_atomically

_PREFIX = "batch-"


def batch_dir(directory: str, batch: int) -> str:
    return os.path.join(directory, f"{_PREFIX}{batch:020d}")


def part_dir(directory: str, batch: int, index: int) -> str:
    return os.path.join(batch_dir(directory, batch), f"part-{index:05d}")


def part_paths(directory: str, batch: int, index: int) -> tuple[str, str]:
    """(rows file, handles file) of task *index* of *batch*."""
    base = part_dir(directory, batch, index)
    return os.path.join(base, "rows.arrow"), os.path.join(base, "acks")


def plan(directory: str, batch: int, tasks: int, mode: int) -> int:
    """The number of fetch tasks of *batch*: the one written when it was first planned
    (a replay after a restart keeps it, so each part is read back as written), else
    *tasks*, written now."""
    path = os.path.join(batch_dir(directory, batch), "plan.json")
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["tasks"])
    write_atomically(path, json.dumps({"tasks": tasks}).encode(), mode)
    return tasks


def planned_tasks(directory: str, batch: int) -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        with open(os.path.join(batch_dir(directory, batch), "plan.json"), encoding="utf-8") as fh:
            return int(json.load(fh)["tasks"])
    return None


def claim_part(directory: str, batch: int, index: int, rows: bytes, handles: list[str], mode: int) -> bool:
    """Write this attempt's part and claim it; False when another attempt claimed it first."""
    final = part_dir(directory, batch, index)
    own = f"{final}.tmp-{uuid.uuid4().hex}"
    try:
        write_atomically(os.path.join(own, "rows.arrow"), rows, mode)
        write_atomically(os.path.join(own, "acks"), "".join(h + "\n" for h in handles).encode(), mode)
        try:
            os.rename(own, final)
        except OSError:
            if os.path.isdir(final):
                return False  # claimed by another attempt: its rows are the part's
            raise
        return True
    finally:
        shutil.rmtree(own, ignore_errors=True)


def read_rows(directory: str, batch: int, index: int) -> bytes | None:
    """The rows of a complete part, or None when no attempt completed it."""
    try:
        with open(part_paths(directory, batch, index)[0], "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def read_handles(directory: str, batch: int, index: int) -> list[str] | None:
    with contextlib.suppress(FileNotFoundError):
        with open(part_paths(directory, batch, index)[1], encoding="utf-8") as fh:
            return [line for line in fh.read().splitlines() if line]
    return None


def batches_through(directory: str, batch: int) -> list[int]:
    """Batch ids at or below *batch* that still have a folder, ascending."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        if name.startswith(_PREFIX):
            with contextlib.suppress(ValueError):
                number = int(name[len(_PREFIX):])
                if number <= batch:
                    found.append(number)
    return sorted(found)


def remove_batch(directory: str, batch: int) -> None:
    shutil.rmtree(batch_dir(directory, batch), ignore_errors=True)
