"""The executor-fetch source (``fetch=executors``): executors fetch, the driver acks
after commit. For brokers whose acks any connection may settle (NATS JetStream).

What runs where (see docs/spark.md):

* the driver's runner process keeps one small broker connection. In
  ``latestOffset`` it asks the broker how many messages wait on each source
  (``inspect_queue``: not yet delivered + delivered and not acked) and plans
  the next batch when any do; the offset is only ``{"batch": n}``.
  ``partitions`` plans ``minPartitions`` fetch tasks (a pull consumer hands
  out what it has: there are no ranges to cut);
* each task fetches its share on its own connection and writes its rows and
  their ack handles to files (:mod:`ackbridge_spark.fetch.task`,
  :mod:`ackbridge_spark.fetch.files`); no payload passes through the driver;
* once Spark has committed batch N (``commit``, or ``latestOffset`` with
  ``settleOnPlan``: ``commits/N`` is on disk by then), the runner reads the
  handle files of batch N and acks them all with one
  ``Connection.settle_handles`` call (one publish per handle, one flush), then
  deletes the batch's folder.

A batch that fails, or a driver that dies, acks nothing: the broker redelivers
after its ack timeout (JetStream's ``ack_wait``). At-least-once; exactly-once
into a table with the message-id recipe. A batch replayed after a restart
reads back the parts its tasks completed, so it holds the same rows where the
files survived, and fetches anew where a part never completed.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ackbridge.errors import AckbridgeError
from ackbridge_spark.fetch import files
from ackbridge_spark.fetch.options import FetchOptions
from ackbridge_spark.fetch.task import FetchTask, read_fetch
from ackbridge_spark.reader_state import OptionsOnlyPickle
from ackbridge_spark.runner import install_sigterm_handler

if TYPE_CHECKING:
    from ackbridge.contract import Connection

log = logging.getLogger("ackbridge.spark")


def _batch(offset: dict[str, Any] | None) -> int:
    return int((offset or {}).get("batch", -1))


class FetchStreamReader(OptionsOnlyPickle[FetchOptions], DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: FetchOptions) -> None:
        self._opts = options
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: Connection | None = None
        self._tmp: str | None = None
        self._waiting = 0
        self.stats = {"acked": 0, "repeated_handles": 0, "ack_failures": 0, "missing_parts": 0, "reconnects": 0}

    # ---- the runner's connection and folder (lazily) ----------------------------------
    def _broker(self) -> Connection:
        if self._conn is None:
            import ackbridge

            install_sigterm_handler()
            self._conn = ackbridge.connect(self._opts.base.url, **self._opts.connect_kwargs())
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.stats["reconnects"] += 1
            with contextlib.suppress(Exception):
                conn.close()

    def _directory(self) -> str:
        path = self._opts.base.write_ahead_path
        if path:
            return path
        if self._tmp is None:
            # One machine only (local mode): executors must read the driver's folder.
            self._tmp = tempfile.mkdtemp(prefix="ackbridge-fetch-")  # 0700: the files hold message bodies
        return self._tmp

    def _waiting_messages(self) -> int:
        """Messages the broker holds for the sources: not delivered yet, or delivered and
        not acked (redelivered after the ack timeout: a dead task's, a failed batch's)."""
        def ask() -> int:
            conn = self._broker()
            total = 0
            for source in self._opts.base.sources:
                info = conn.inspect_queue(source)
                total += (info.messages or 0) + (info.unacked or 0)
            return total
        try:
            return ask()
        except AckbridgeError:
            self._drop()  # a broker restart or a closed idle connection: once more on a new one
            return ask()

    # ---- DataSourceStreamReader -------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        return {"batch": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._opts.base.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # Nothing to pin: AvailableNow ends once the sources hold nothing pending or unacked.
        pass

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        b = _batch(start)
        if self._opts.base.settle_on_plan and b >= 0:
            self._ack_through(b)  # commits/b is on disk before latestOffset(start=end_b) is called
        self._waiting = self._waiting_messages()
        return {"batch": b + 1} if self._waiting else start

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        n = _batch(end)
        if n == _batch(start):
            return []
        directory = self._directory()
        tasks = files.plan(directory, n, self._opts.min_partitions, self._opts.base.write_ahead_file_mode)
        share = -(-self._opts.base.max_records_per_batch // tasks)
        return [FetchTask(n, i, share, directory) for i in range(tasks)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FetchTask)
        return read_fetch(partition, self._opts)

    def commit(self, end: dict[str, Any]) -> None:
        self._ack_through(_batch(end))

    def _ack_through(self, batch: int) -> None:
        """Ack every handle of the committed batches up to *batch*, oldest first. A
        failure is logged and counted: the folder stays, and the next commit tries
        again (meanwhile the broker may redeliver: duplicates, never a loss)."""
        directory = self._directory()
        for n in files.batches_through(directory, batch):
            tasks = files.planned_tasks(directory, n) or 0
            handles: list[str] = []
            for i in range(tasks):
                found = files.read_handles(directory, n, i)
                if found is None:
                    # A committed batch's tasks all completed: only a lost file gets here.
                    self.stats["missing_parts"] += 1
                    log.warning("ackbridge fetch source: batch %d part %d has no ack handles; its messages come "
                                "back after the broker's ack timeout", n, i)
                    continue
                handles.extend(found)
            if handles and not self._ack(handles):
                return
            files.remove_batch(directory, n)

    def _ack(self, handles: list[str]) -> bool:
        try:
            result = self._broker().settle_handles(handles)
        except AckbridgeError as exc:
            self.stats["ack_failures"] += 1
            log.warning("ackbridge fetch source: acking a committed batch failed (%s); retried at the next "
                        "commit", type(exc).__name__)
            self._drop()
            return False
        self.stats["acked"] += result.settled
        self.stats["repeated_handles"] += result.refused
        return True

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Shown as sources[0].latestOffset in lastProgress: counters, no secrets.
        return {"waiting": self._waiting, **self.stats}

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
