"""The streaming source: settle a micro-batch's deliveries only after Spark committed it.

Where things run (see docs/spark.md): Spark builds this reader in a long-lived
*runner* process on the driver, which calls ``latestOffset`` / ``partitions`` /
``commit`` in order, and in a *planner* process whose copy is pickled to the
executors for ``read``. Only the runner owns a broker connection, opened on
its first call (never in ``__init__`` or on unpickling, so copies never
subscribe).

One reader consumes every listed source (queues, MQTT topic filters, AMQP 1.0
addresses: :mod:`ackbridge_spark.sources`) on its one connection; with
``parallelism=N`` the runner drives N of them in reader processes instead
(:mod:`ackbridge_spark.push.parallel`).

Offsets are ``{"seq": n, "batch": b}`` (plus ``"producers"``, the loss
detection's highest sequence number per source and producer:
:mod:`ackbridge_spark.push.loss`): ``seq`` numbers deliveries in the
order they were planned; ``batch`` counts non-empty source batches (equal to
Spark's batchId for single-source queries without no-data batches). A
delivery is numbered only when ``latestOffset`` offers it to Spark, so a fresh
runner that learns, after a restart, of ranges planned by its predecessor
never numbers its own deliveries into those ranges -- a replayed batch never
acks what it did not deliver.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from ackbridge.errors import ConnectionLostError, DataLossError
from ackbridge.transport.files import PRIVATE_FILE
from ackbridge_spark import fault_seam
from ackbridge_spark.atomic_files import write_atomically
from ackbridge_spark.options import ConnectorOptions
from ackbridge_spark.push.local_files import LocalFiles
from ackbridge_spark.push.loss import LossWatch
from ackbridge_spark.push.partition import AckbridgePartition, in_task_partitions, read_partition
from ackbridge_spark.push.settlement import Settlement
from ackbridge_spark.push.write_ahead import batch_file, remove_through
from ackbridge_spark.reader_state import OptionsOnlyPickle
from ackbridge_spark.runner import install_sigterm_handler, tune_gc
from ackbridge_spark.schema import BodyScratch, to_record_batch
from ackbridge_spark.sources import is_mqtt, subscribe_all

if TYPE_CHECKING:
    from ackbridge import Connection, Consumer, Delivery

log = logging.getLogger("ackbridge.spark")


def _seq(offset: dict[str, Any] | None) -> int:
    return int((offset or {}).get("seq", 0))


def _batch(offset: dict[str, Any] | None) -> int:
    return int((offset or {}).get("batch", -1))


class AckbridgeStreamReader(OptionsOnlyPickle[ConnectorOptions], DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver-side source's reader; what Spark committed is settled by its
    :class:`~ackbridge_spark.push.settlement.Settlement`."""

    def __init__(self, options: ConnectorOptions) -> None:
        self._opts = options
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: Connection | None = None
        #: delivery.source -> its consumer / the source's name as configured.
        self._consumers: dict[str, Consumer] = {}
        self._names: dict[str, str] = {}
        self._topic_from_routing_key = False
        self._connections_opened = 0
        #: Per source, the generation of its last delivery; generations counted as reconnects.
        self._last_generation: dict[str, int] = {}
        self._counted_generations: set[int] = set()
        self._loss = LossWatch(self._opts.fail_on_data_loss)
        self._pending: deque[Delivery] = deque()
        self._scratch = BodyScratch()  # the body column's buffer, reused by every batch this reader plans
        # Filled by the consumer's handler on the transport's thread, drained by _pull.
        self._inbox: deque[Delivery] = deque()
        #: What is numbered (offered to Spark) and not settled yet, and how it is settled.
        self._settlement = Settlement(dedupe_replayed=self._opts.dedupe_replayed,
                                      on_connection_lost=self._drop_connection)
        self._high = 0
        self._available_now = False
        self._batches_planned = 0
        self._counters = {"reconnects": 0, "dropped_stale": 0, "data_loss": 0, "batches_as_files": 0}
        #: Batch files for tasks in this JVM (local mode); durable write-ahead files come first.
        self._files = LocalFiles(self._opts.local_files and not self._opts.write_ahead_path)

    @property
    def stats(self) -> dict[str, int]:
        """The reader's counters (settlement's and its own), as progress shows them."""
        return {**self._settlement.stats, **self._counters}

    # ---- connection (runner only, lazily) ----------------------------------------
    def _ensure_connected(self) -> None:
        if self._conn is not None:
            return
        import ackbridge

        install_sigterm_handler()
        tune_gc()
        opts = self._opts
        conn = ackbridge.connect(opts.url, **opts.connect_kwargs())
        # The handler only appends, on the transport's thread: no per-message hand-off
        # through the consumer's ready queue, lock and condition to this thread (in
        # py-spy that hand-off was ~20% of the RabbitMQ I/O thread). A deque's append
        # and popleft are atomic, and only this thread pops (in _pull). One inbox per
        # connection, shared by its consumers: a dropped connection's late deliveries
        # land in its own.
        inbox: deque[Delivery] = deque()
        try:
            opened = subscribe_all(conn, conn.url.scheme, opts.sources, opts.prefetch, inbox.append)
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        if self._connections_opened:
            self._counters["reconnects"] += 1  # a new connection after this reader dropped one
        self._connections_opened += 1
        self._conn = conn
        self._inbox = inbox
        self._consumers = {s.key: s.consumer for s in opened}
        self._settlement.attach(conn, self._consumers)
        self._names = {s.key: s.name for s in opened}
        self._topic_from_routing_key = is_mqtt(conn.url.scheme)
        self._last_generation, self._counted_generations = {}, set()
        log.info("ackbridge source subscribed to %s on %s", ", ".join(map(repr, opts.sources)), conn.url.redacted)

    def _note_generations(self, inbox: deque[Delivery], n: int) -> None:
        """Count every new connection generation as a reconnect: a source whose
        deliveries now come from a generation it had not delivered from before (the
        transport reconnected: a broker restart, a connection the broker closed).
        One generation shared by several sources (one AMQP connection) counts once;
        MQTT's per-topic links count each. Counted when the first delivery of the
        new generation arrives. Generations only grow in one source's receive
        order, so one source needs only the first and last of what arrived."""
        last = self._last_generation
        seen: tuple[tuple[str, int], ...]
        if len(self._consumers) == 1:
            seen = ((inbox[0].source, inbox[0].generation), (inbox[n - 1].source, inbox[n - 1].generation))
        else:
            seen = tuple((d.source, d.generation) for d in itertools.islice(inbox, n))
        for source, generation in seen:
            before = last.get(source)
            if before != generation:
                last[source] = generation
                if before is not None and generation not in self._counted_generations:
                    self._counted_generations.add(generation)
                    self._counters["reconnects"] += 1

    def _drop_connection(self) -> None:
        conn, self._conn, self._consumers = self._conn, None, {}
        self._settlement.detach()
        self._pending.clear()
        self._inbox = deque()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _pull(self, wait: float = 0.0) -> None:
        """Move received deliveries into ``_pending``; wait up to *wait* s for the first."""
        inbox = self._inbox
        if wait > 0 and not inbox:
            # Only AvailableNow waits (for its idle timeout): a short poll is enough.
            deadline = time.monotonic() + wait
            while not inbox and time.monotonic() < deadline:
                time.sleep(0.005)
        # Without replays in this run there is nothing to hold back or dedupe:
        # skip the per-delivery checks (this loop runs for every message).
        admit = self._admit if self._settlement.replaying else self._pending.append
        popleft = inbox.popleft
        n = len(inbox)
        if n:
            self._note_generations(inbox, n)
        for _ in range(n):
            admit(popleft())

    def _admit(self, delivery: Delivery) -> None:
        if not self._settlement.admit(delivery):
            self._pending.append(delivery)

    # ---- DataSourceStreamReader -------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        return {"seq": 0, "batch": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # A broker queue has no "latest offset" to pin: drain until it has been
        # idle for availableNowIdleMs (documented in docs/spark.md).
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        s = _seq(start)
        self._high = max(self._high, s)
        self._loss.seed(start)
        self._ensure_connected()
        if self._opts.settle_on_plan:
            # commits/N is on disk before latestOffset(start=end_N) is called.
            self._settlement.settle_through(s)
        remove_through(self._opts.write_ahead_path, s)
        self._files.committed(s)
        try:
            self._pull()
            self._drop_stale()
            cap = self._cap(limit)
            offered = self._settlement.numbered_after(s)
            if len(offered) < cap and not self._pending and self._available_now:
                self._pull(wait=self._opts.available_now_idle_ms / 1000.0)
                self._drop_stale()
        except ConnectionLostError:
            log.warning("ackbridge source lost its connection; reconnecting on the next trigger")
            self._drop_connection()
            offered = self._settlement.numbered_after(s)
            cap = self._cap(limit)
        batch = _batch(start) + 1
        # offered: numbered by an earlier call but not planned yet, then new ones; ascending.
        pending, high = self._pending, self._high
        take = max(0, min(cap - len(offered), len(pending)))
        if take:
            popleft = pending.popleft
            taken = [popleft() for _ in range(take)]
            try:
                self._check_loss(taken)
            except DataLossError:
                pending.extendleft(reversed(taken))  # failOnDataLoss: nothing numbered, nothing planned
                raise
            self._settlement.number(high + 1, taken)
            offered.extend(range(high + 1, high + take + 1))
            self._high = high + take
        if not offered:
            if _batch(start) < 0:
                # A fresh query runs batch 0 even when it is empty; numbering it keeps
                # our batch counter equal to Spark's batchId.
                return {"seq": s, "batch": 0}
            return start
        if isinstance(limit, ReadMinRows) and len(offered) < limit.min_rows and not self._available_now:
            return start
        end = offered[min(cap, len(offered)) - 1]
        self._settlement.planned(end, batch)
        producers = self._loss.state()
        return {"seq": end, "batch": batch, "producers": producers} if producers else {"seq": end, "batch": batch}

    def _check_loss(self, deliveries: list[Delivery]) -> None:
        check = self._loss.check
        before = self._loss.missing
        try:
            for d in deliveries:
                headers = d.headers
                if headers:
                    check(d.source, headers)
        finally:
            self._counters["data_loss"] += self._loss.missing - before

    def _cap(self, limit: ReadLimit) -> int:
        if isinstance(limit, ReadMaxRows):
            return max(1, int(limit.max_rows))
        if isinstance(limit, ReadAllAvailable):
            return 1 << 62
        return self._opts.max_records_per_batch

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = _seq(start), _seq(end)
        self._high = max(self._high, e)
        wal = batch_file(self._opts.write_ahead_path, s, e)
        if wal is not None and os.path.exists(wal):
            return [self._settlement.replay(wal, s, e, self._pending)]
        numbered = self._settlement.numbered
        rows = [(q, numbered[q]) for q in range(s + 1, e + 1) if q in numbered]
        self._batches_planned += 1
        if self._batches_planned == self._opts.faults.sever_after_batches > 0:
            self._sever_for_test()
        if not rows:
            # A range planned by an earlier run (crash before commit): its messages
            # were never settled, the broker redelivers them into later batches.
            return []
        batch = to_record_batch(rows, self._names, topic_from_routing_key=self._topic_from_routing_key,
                                scratch=self._scratch)
        if wal is not None:
            write_atomically(wal, batch, self._opts.write_ahead_file_mode, durable=self._opts.write_ahead_durable)
            return [AckbridgePartition(path=wal)]
        local = self._files.file_for(s, e, batch.nbytes)
        if local is not None:
            try:
                write_atomically(local, batch, PRIVATE_FILE, durable=False)
            except OSError as exc:  # a full temporary folder: the rows still travel, in their tasks
                self._files.give_up(exc)
            else:
                self._counters["batches_as_files"] += 1
                return [AckbridgePartition(path=local)]
        return in_task_partitions(batch, self._opts.max_partition_bytes, self._files.probe())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        e = _seq(end)
        self._high = max(self._high, e)
        if self._conn is None and not self._settlement.numbered:
            return
        self._settlement.settle_through(e)
        remove_through(self._opts.write_ahead_path, e)
        self._files.committed(e)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Shown as sources[0].latestOffset in lastProgress: counters, no secrets.
        return {"seq": self._high, "buffered": len(self._pending) + len(self._inbox),
                "unsettled": len(self._settlement.numbered), **self.stats}

    def stop(self) -> None:
        # Undecided deliveries (uncommitted batches) return to the broker on close.
        conn, self._conn, self._consumers = self._conn, None, {}
        self._settlement.detach()
        self._files.close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _drop_stale(self) -> None:
        # Generations only grow in receive order, so stale deliveries form a prefix
        # of _pending: look at the head first, scan everything only after a loss.
        if not self._pending or not _is_stale(self._pending[0]):
            return
        kept = [d for d in self._pending if not _is_stale(d)]
        self._counters["dropped_stale"] += len(self._pending) - len(kept)
        self._pending = deque(kept)

    def _sever_for_test(self) -> None:
        """The ``testSeverAfterBatches`` fault (:mod:`ackbridge_spark.fault_seam`)."""
        if self._conn is None:
            return
        log.warning("ackbridge source: fault injection, severing the broker connection")
        try:
            fault_seam.sever(self._conn, "fault injection (testSeverAfterBatches)")
        except NotImplementedError as exc:
            log.warning("ackbridge source: %s", exc)


def _is_stale(delivery: Delivery) -> bool:
    return bool(delivery.stale)
