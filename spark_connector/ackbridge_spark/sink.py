"""The sink: each task publishes its rows with confirms and returns only after
every confirm arrived. A refused or unanswered publish fails the task (Spark
retries it or fails the query): at-least-once, and no row is reported written
that the broker did not confirm.

Message ids are deterministic, ``<prefix>-<batch>-<partition>-<row>``, so a
retried task republishes the same ids and consumers can drop duplicates.
Rows: ``body`` (binary or string, required) and optionally ``headers``
(map), ``message_id``, ``correlation_id``, ``content_type``, ``topic`` (a
per-row destination overriding the ``queue`` option).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from ackbridge.errors import AckbridgeError
from ackbridge.messages import ConfirmStatus
from ackbridge_spark import fault_seam
from ackbridge_spark.options import ConnectorOptions

if TYPE_CHECKING:
    from ackbridge import Connection, Publisher

log = logging.getLogger("ackbridge.spark")


class SinkPublishError(AckbridgeError):
    """A sink task could not get every publish confirmed (the task fails; Spark retries)."""


@dataclass
class PublishCommitMessage(WriterCommitMessage):
    partition_id: int
    published: int
    confirmed: int


def _publish_partition(options: ConnectorOptions, rows: Iterator[Row], prefix: str, batch: str) -> PublishCommitMessage:
    from pyspark import TaskContext

    import ackbridge

    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    first_attempt = ctx is None or ctx.attemptNumber() == 0
    confirms = []
    conn = ackbridge.connect(options.url, **options.connect_kwargs())
    try:
        publisher = conn.publisher()
        for index, row in enumerate(rows):
            data = row.asDict(recursive=False)
            body = data.get("body")
            if isinstance(body, str):
                body = body.encode("utf-8")
            elif isinstance(body, (bytearray, memoryview)):
                body = bytes(body)
            if not isinstance(body, bytes):
                raise SinkPublishError(f"row {index} of partition {partition_id} has no binary or string 'body'")
            headers = data.get("headers") or None
            message_id = data.get("message_id") or f"{prefix}-{batch}-{partition_id}-{index}"
            confirms.append(publisher.publish(
                data.get("topic") or options.destination, body,
                headers=dict(headers) if headers else None, message_id=message_id,
                correlation_id=data.get("correlation_id"), content_type=data.get("content_type"),
            ))
            if first_attempt and index + 1 in {options.faults.sever_after_rows, options.faults.fail_after_rows}:
                _inject_fault(options, conn, publisher, index + 1)
        publisher.flush()
    finally:
        conn.close()
    outcomes = [c.result() for c in confirms]
    bad = [o for o in outcomes if not o.confirmed]
    if bad:
        refused = sum(1 for o in bad if o.status is ConfirmStatus.REFUSED)
        raise SinkPublishError(
            f"partition {partition_id} of batch {batch}: {len(bad)} of {len(outcomes)} publishes not confirmed "
            f"({refused} refused, {len(bad) - refused} unknown); first reason: {bad[0].reason}"
        )
    return PublishCommitMessage(partition_id, len(outcomes), len(outcomes))


def _inject_fault(options: ConnectorOptions, conn: Connection, publisher: Publisher, rows: int) -> None:
    """Test-only faults (:mod:`ackbridge_spark.fault_seam`) on a task's first attempt,
    after *rows* rows were published."""
    if rows == options.faults.sever_after_rows:
        log.warning("ackbridge sink: fault injection, severing the broker connection after %d rows", rows)
        try:
            fault_seam.sever(conn, "fault injection (testSeverAfterRows)")
        except NotImplementedError:
            raise SinkPublishError("testSeverAfterRows needs a transport that can sever itself "
                                   "(embedded broker)") from None
    if rows == options.faults.fail_after_rows:
        publisher.flush()  # the rows so far are confirmed: a retry duplicates them
        raise fault_seam.InjectedTaskFailure(
            f"fault injection: task fails after {rows} published rows (testFailAfterRows)")


class AckbridgeBatchWriter(DataSourceWriter):
    def __init__(self, options: ConnectorOptions) -> None:
        self._opts = options
        # Built on the driver, pickled into every task: one id for the whole write.
        self._write_id = options.message_id_prefix or f"write-{uuid.uuid4().hex[:12]}"

    def write(self, iterator: Iterator[Row]) -> PublishCommitMessage:
        return _publish_partition(self._opts, iterator, self._write_id, "0")

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.confirmed for m in messages if isinstance(m, PublishCommitMessage))
        log.info("ackbridge sink: %d rows published and confirmed", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.confirmed for m in messages if isinstance(m, PublishCommitMessage))
        log.warning("ackbridge sink write aborted; %d rows of successful tasks were confirmed "
                    "(at-least-once: a retry republishes them with the same message ids)", done)


class AckbridgeStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: ConnectorOptions) -> None:
        self._opts = options

    def write(self, iterator: Iterator[Row]) -> PublishCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "0"
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "query"
        prefix = self._opts.message_id_prefix or query
        return _publish_partition(self._opts, iterator, prefix, batch)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.confirmed for m in messages if isinstance(m, PublishCommitMessage))
        log.info("ackbridge sink: batch %d: %d rows published and confirmed", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("ackbridge sink: batch %d aborted; Spark replays it with the same message ids", batchId)
