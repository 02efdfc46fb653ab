"""The executor's half of the stream source: read one planned offset range.

Runs in Spark's Python workers on the executors. Each task opens (or reuses)
its own ``OffsetLog`` connection and reads exactly its range; the payloads go
from the broker to the executor and never pass through the driver.

The rows of a range are a function of the range alone -- a log never changes
a record once written -- which is what makes a replayed batch identical to
the first attempt. The checks in :func:`read_split` guard that property
against a misbehaving plugin (a record outside the range, an offset twice).

The one change a log makes is retention removing its head. A range whose first
record read lies past its start (or which yields none) asks the log for its
first offset: offsets of the range below it are data loss, reported by the
task (:func:`ackbridge_spark.log.loss.report_removed`) unless the driver already
reported them when it planned the batch (``LogSplit.reported_below``). A gap
above the log's first offset is not loss: a broker spends offsets on records
of its own (RabbitMQ's offset-tracking entries) that no range read returns.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ackbridge.errors import BrokerError
from ackbridge.transport.offset_log import LogRecord, OffsetLog, OffsetRange
from ackbridge_spark.log.loss import report_removed
from ackbridge_spark.log.options import LogSourceOptions
from ackbridge_spark.schema import ARROW_SCHEMA, _headers_array

log = logging.getLogger("ackbridge.spark")

#: Rows per Arrow batch handed to Spark: large enough to amortise the per-batch
#: cost, small enough that 4 KiB bodies stay at a few MiB per batch.
ROWS_PER_BATCH = 2048
BYTES_PER_BATCH = 8 * 1024 * 1024


@dataclass(frozen=True)
class LogSplit(InputPartition):
    """One task: offsets ``[start, end)`` of *partition*, which belongs to *source*."""

    source: str
    partition: str
    start: int
    end: int
    #: The driver reported the offsets below this one that retention removed.
    reported_below: int = 0

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.partition, self.start, self.end)


#: One OffsetLog per Python worker and broker options: Spark reuses a worker for
#: many tasks (spark.python.worker.reuse), and a connection per task would cost a
#: TCP and protocol handshake for every split of every batch.
_open_logs: dict[tuple[str, tuple[tuple[str, str], ...]], OffsetLog] = {}


def _key(options: LogSourceOptions) -> tuple[str, tuple[tuple[str, str], ...]]:
    return options.url, tuple(sorted(options.log_options.items()))


def _log_for(options: LogSourceOptions) -> tuple[OffsetLog, bool]:
    """(the worker's log for *options*, whether it was opened just now)."""
    from ackbridge.transport.offset_log import open_offset_log

    key = _key(options)
    found = _open_logs.get(key)
    if found is not None:
        return found, False
    opened = open_offset_log(options.url, **options.log_options)
    _open_logs[key] = opened
    return opened, True


def _forget(options: LogSourceOptions) -> None:
    found = _open_logs.pop(_key(options), None)
    if found is not None:
        with contextlib.suppress(Exception):
            found.close()


def close_worker_logs() -> None:
    """Close every connection this worker keeps (tests; a worker's exit closes them anyway)."""
    while _open_logs:
        _, found = _open_logs.popitem()
        with contextlib.suppress(Exception):
            found.close()


def records(split: LogSplit, options: LogSourceOptions) -> Iterator[LogRecord]:
    """The records of *split* in offset order. A kept connection that fails (the broker
    closed an idle one between tasks) is replaced once, and the read resumes after the
    last record already returned: the same records as an undisturbed read."""
    next_offset = split.start
    first_read: int | None = None
    retried = False
    while next_offset < split.end:
        olog, fresh = _log_for(options)
        try:
            for record in olog.read(OffsetRange(split.partition, next_offset, split.end)):
                _check(record, split, next_offset)
                if first_read is None:
                    first_read = record.offset
                next_offset = record.offset + 1
                yield record
            break
        except Exception:
            _forget(options)
            if fresh or retried:
                raise
            retried = True
            log.warning("ackbridge stream source: a kept broker connection failed; reading %s from %d on a new one",
                        split.partition, next_offset)
    _check_head(split, options, first_read)


def _check_head(split: LogSplit, options: LogSourceOptions, first_read: int | None) -> None:
    """Report the offsets of *split* retention removed that the driver did not report."""
    expected = max(split.start, split.reported_below)
    if expected >= split.end or (first_read is not None and first_read <= expected):
        return
    try:
        first = _log_for(options)[0].bounds(split.partition)[0]
    except Exception:
        _forget(options)  # a kept connection may have failed; one more try on a new one
        first = _log_for(options)[0].bounds(split.partition)[0]
    report_removed([(split.partition, expected, min(first, split.end))], options.fail_on_data_loss,
                   "after the driver planned the batch, before this task read them (not in data_loss)")


def _check(record: LogRecord, split: LogSplit, lowest: int) -> None:
    if record.partition != split.partition or not lowest <= record.offset < split.end:
        raise BrokerError(f"offset log returned offset {record.offset} of {record.partition!r} while reading "
                          f"{split.partition!r} [{lowest}, {split.end}): replay would not be deterministic")


def to_batch(chunk: Sequence[LogRecord], source: str, broker: str) -> pa.RecordBatch:
    """Rows of the source's schema; ``topic`` is the partition (the stream) a record sits in."""
    messages = [r.message for r in chunk]
    n = len(chunk)
    routing = pa.array([m.routing_key for m in messages], pa.string())
    timestamps = [m.timestamp for m in messages]
    arrays = [
        pa.array([m.body for m in messages], pa.binary()),
        routing,
        pa.array([r.partition for r in chunk], pa.string()),
        routing,
        _headers_array(messages),
        pa.array([m.message_id for m in messages], pa.string()),
        pa.array([m.correlation_id for m in messages], pa.string()),
        pa.array([None if ts is None else int(float(ts) * 1_000_000) for ts in timestamps],
                 ARROW_SCHEMA.field("timestamp").type),
        pa.array([False] * n, pa.bool_()),  # a log never redelivers: a replay is the same read
        pa.array([None] * n, pa.int32()),
        pa.array([broker] * n, pa.string()),
        pa.array([r.offset for r in chunk], pa.int64()),
        pa.array([source] * n, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def read_split(split: LogSplit, options: LogSourceOptions) -> Iterator[pa.RecordBatch]:
    """The rows of *split* as Arrow batches (runs on an executor)."""
    chunk: list[LogRecord] = []
    size = 0
    for record in records(split, options):
        chunk.append(record)
        size += len(record.message.body)
        if len(chunk) >= ROWS_PER_BATCH or size >= BYTES_PER_BATCH:
            yield to_batch(chunk, split.source, options.broker)
            chunk, size = [], 0
    if chunk:
        yield to_batch(chunk, split.source, options.broker)
