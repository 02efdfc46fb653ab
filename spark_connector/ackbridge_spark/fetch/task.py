"""The executor's half of the executor-fetch source: one fetch task.

Runs in Spark's Python workers. A task of batch N, part i:

1. if the part is complete on disk (a retried task, or batch N replayed after a
   driver restart), reads its rows back -- every attempt of a part yields the
   same rows;
2. else opens its own broker connection, consumes every listed source with a
   pull credit of its share of ``maxRecordsPerBatch``, and takes deliveries
   until it has its share, nothing arrived for ``fetchIdleMs``, or
   ``fetchTimeoutMs`` passed; a delivery beyond its share is requeued at once;
3. writes the rows and their ack handles, and claims the part
   (:mod:`ackbridge_spark.fetch.files`: the first attempt to finish wins);
4. closes the connection: with ``leave_unsettled=True`` when it claimed the
   part -- what it took stays pending on the broker (nothing is -NAKed) until
   the driver acks the handles after Spark committed the batch, or the broker
   redelivers it after its ack timeout (a failed batch, a dead driver) --
   else plainly, which releases (-NAKs) what it took at once: an attempt that
   lost the part to another, or failed before claiming it, strands nothing;
5. yields the part's rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ackbridge_spark.fetch import files
from ackbridge_spark.fetch.options import FetchOptions
from ackbridge_spark.schema import ARROW_SCHEMA, from_ipc, to_ipc, to_record_batch
from ackbridge_spark.sources import subscribe_all

if TYPE_CHECKING:
    from ackbridge.contract import Delivery


@dataclass(frozen=True)
class FetchTask(InputPartition):
    """Part *index* of *batch*: fetch at most *share* deliveries, files under *directory*."""

    batch: int
    index: int
    share: int
    directory: str


def row_offset(task: FetchTask, row: int) -> int:
    """The row's ``offset`` column: batch << 32 | task << 22 | row (unique within a query)."""
    return (task.batch << 32) | (task.index << 22) | row


class _Taker:
    """The consumers' handler: keeps up to *share* deliveries, requeues the rest."""

    def __init__(self, share: int) -> None:
        self.share = share
        self.taken: list[Delivery] = []
        self.last_at = time.monotonic()
        self.stopped = False
        self.full = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, delivery: Delivery) -> None:
        with self._lock:
            if not self.stopped and len(self.taken) < self.share:
                self.taken.append(delivery)
                self.last_at = time.monotonic()
                if len(self.taken) >= self.share:
                    self.full.set()
                return
        delivery.requeue()  # beyond this task's share (several sources): back for the next fetch at once

    def stop(self) -> list[Delivery]:
        with self._lock:
            self.stopped = True
            return list(self.taken)


def fetch_and_claim(task: FetchTask, opts: FetchOptions) -> bytes:
    """Fetch this task's deliveries and claim the part with them; the part's rows (Arrow
    IPC): these, or those of the attempt that claimed it first."""
    import ackbridge

    base = opts.base
    conn = ackbridge.connect(base.url, **opts.connect_kwargs())
    taker = _Taker(task.share)
    claimed = False
    try:
        subscribe_all(conn, conn.url.scheme, base.sources, task.share, taker)
        deadline = time.monotonic() + opts.fetch_timeout_ms / 1000.0
        idle = opts.fetch_idle_ms / 1000.0
        while True:
            now = time.monotonic()
            wait = min(deadline, taker.last_at + idle) - now
            if wait <= 0 or taker.full.wait(min(wait, 0.05)):
                break
        taken = taker.stop()
        handles = [d.ack_handle for d in taken]
        rows = to_ipc(to_record_batch([(row_offset(task, i), d) for i, d in enumerate(taken)]))
        claimed = files.claim_part(task.directory, task.batch, task.index, rows, handles,
                                         base.write_ahead_file_mode)
    finally:
        conn.close(leave_unsettled=claimed)
    if claimed:
        return rows
    winner = files.read_rows(task.directory, task.batch, task.index)
    assert winner is not None  # claim_part returns False only when the part exists
    return winner


def read_fetch(task: FetchTask, opts: FetchOptions) -> Iterator[pa.RecordBatch]:
    """The rows of *task* (runs on an executor)."""
    # A retried or replayed part: the rows of the attempt that claimed it.
    written = files.read_rows(task.directory, task.batch, task.index)
    batches = from_ipc(written if written is not None else fetch_and_claim(task, opts))
    for batch in batches:
        if batch.num_rows:
            yield batch.cast(ARROW_SCHEMA) if batch.schema != ARROW_SCHEMA else batch
