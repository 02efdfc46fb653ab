"""A planned micro-batch of the driver-side source, and its read on an executor.

The rows travel in the partition (Arrow IPC bytes) or sit in a write-ahead
file it names (:mod:`ackbridge_spark.push.write_ahead`; the parallel readers'
files always), read by row range where a file was split.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ackbridge_spark.push.local_files import Probe, mark_if_local
from ackbridge_spark.schema import ARROW_SCHEMA, from_ipc, to_ipc


class AckbridgePartition(InputPartition):
    """One micro-batch's rows: Arrow IPC bytes, or the path of a write-ahead file
    (with *rows*, only the row range ``[start, stop)`` of it). Rows in the task may
    carry the runner's *probe* (:mod:`ackbridge_spark.push.local_files`)."""

    def __init__(self, ipc: bytes | None = None, path: str | None = None,
                 rows: tuple[int, int] | None = None, probe: Probe | None = None) -> None:
        super().__init__(path or len(ipc or b""))
        self.ipc = ipc
        self.path = path
        self.rows = rows
        self.probe = probe

    def __repr__(self) -> str:
        return f"AckbridgePartition(path={self.path!r}, bytes={len(self.ipc or b'')}, rows={self.rows})"


def in_task_partitions(batch: pa.RecordBatch, max_bytes: int,
                       probe: Probe | None = None) -> list[AckbridgePartition]:
    """*batch* as partitions whose rows travel inside their tasks, each about *max_bytes* at most.

    Every task's bytes are pickled on the driver, sent over Spark's RPC (a task may
    not exceed ``spark.rpc.message.maxSize``, 128 MiB, or the query fails) and held
    whole in the JVM's heap while it is scheduled. A planned batch of 25,000 bodies of
    4 KiB is ~100 MB: as one task it came near that limit and its GC cost grew with it.
    Split by rows, each part is one task of its own: the batch stays one micro-batch
    (Spark's per-batch cost is paid once) and the parts are read in parallel. Parts are
    cut at equal row counts; a single row larger than *max_bytes* still travels whole.
    """
    parts = min(batch.num_rows, -(-batch.nbytes // max_bytes)) if batch.num_rows else 1
    if parts <= 1:
        return [AckbridgePartition(ipc=to_ipc(batch), probe=probe)]
    rows = -(-batch.num_rows // parts)
    return [AckbridgePartition(ipc=to_ipc(batch.slice(start, rows)), probe=probe)
            for start in range(0, batch.num_rows, rows)]


#: Rows of a partition go to Spark in record batches of about this many bytes.
READ_CHUNK_BYTES = 4 * 1024 * 1024


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of *partition* (runs on an executor).

    A write-ahead file is memory-mapped, not read: the batches point into the
    page cache, with no copy of the file in the worker's memory. Rows go out in
    slices of about ``READ_CHUNK_BYTES``, each one Arrow message to Spark,
    instead of one message per planned batch (~100 MB at 25,000 bodies of 4 KiB).
    """
    assert isinstance(partition, AckbridgePartition)
    if partition.probe is not None:
        mark_if_local(partition.probe)
    if partition.path is not None:
        batches = from_ipc(pa.memory_map(partition.path))
    else:
        batches = from_ipc(partition.ipc or b"")
    if partition.rows is not None:
        table = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None
        lo, hi = partition.rows
        batches = table.slice(lo, hi - lo).to_batches() if table is not None else []
    for batch in batches:
        if batch.schema != ARROW_SCHEMA:
            batch = batch.cast(ARROW_SCHEMA)
        rows = max(1, READ_CHUNK_BYTES * batch.num_rows // max(1, batch.nbytes))
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)
