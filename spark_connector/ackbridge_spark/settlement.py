"""Settling what Spark committed: a committed batch's deliveries are acked
through the core's batch-settle call, labels requested by their publishers
are sent, and batches replayed from write-ahead files hold back the
redeliveries of their own messages until the replay commits.

A mixin of :class:`~ackbridge_spark.source.AckbridgeStreamReader`: it reads
and updates the reader's numbering (``_numbered``, ``_batch_ends``) and replay
state (``_replayed_ids``, ``_held``, ``_committed_replayed``).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from ackbridge.errors import AckbridgeError, ConnectionLostError, SettlementError
from ackbridge.kernel.labels import SPARK_COMMITTED
from ackbridge_spark._options import ConnectorOptions
from ackbridge_spark._schema import from_ipc

if TYPE_CHECKING:
    from ackbridge.contract import Connection, Consumer

log = logging.getLogger("ackbridge.spark")


class AckbridgePartition(InputPartition):
    """One micro-batch's rows: Arrow IPC bytes, or the path of a write-ahead file
    (with *rows*, only the row range ``[start, stop)`` of it)."""

    def __init__(self, ipc: bytes | None = None, path: str | None = None,
                 rows: tuple[int, int] | None = None) -> None:
        super().__init__(path or len(ipc or b""))
        self.ipc = ipc
        self.path = path
        self.rows = rows

    def __repr__(self) -> str:
        return f"AckbridgePartition(path={self.path!r}, bytes={len(self.ipc or b'')}, rows={self.rows})"


class CommittedSettlement:
    _opts: ConnectorOptions
    _conn: Connection | None
    _consumers: dict[str, Consumer]
    _pending: deque[Any]
    _numbered: dict[int, Any]
    _batch_ends: dict[int, int]
    _replayed_ids: dict[int, set[str]]
    _held: dict[str, Any]
    _committed_replayed: set[str]
    _reordered: bool
    stats: dict[str, int]

    # Provided by the reader.
    def _batch_of(self, seq: int) -> int | None:
        raise NotImplementedError

    def _drop_connection(self) -> None:
        raise NotImplementedError

    # ---- settlement ------------------------------------------------------------------
    def _settle_through(self, seq: int) -> None:
        numbered = self._numbered
        done = list(itertools.takewhile(seq.__ge__, numbered))
        if not done:
            self._release_replayed(seq)
            return
        if len(done) == len(numbered):
            items = list(numbered.values())
            numbered.clear()
        else:
            items = [numbered.pop(q) for q in done]
        self._settle_batch(items)
        for q, delivery in zip(done, items, strict=True):
            if delivery.headers:  # labels are requested in headers; most messages carry none
                self._label(delivery, q)
        for end in [end for end in self._batch_ends if end <= seq]:
            del self._batch_ends[end]
        self._flush()
        self._release_replayed(seq)

    def _settle_batch(self, items: list[Any]) -> None:
        """Ack a committed batch through the core's batch settle, per source (one
        consumer each): one cumulative ack when that acks exactly the batch (the
        core checks), else one by one.

        Deliveries are numbered in receive order and every earlier batch is settled
        before a later one, so the batch is usually the consumer's undecided prefix;
        a replay that handed deliveries back, held redeliveries, or a batch spanning
        a connection generation make the core settle one by one instead."""
        consumers = self._consumers
        if len(consumers) == 1:
            self._settle_on(next(iter(consumers.values())), items)
            return
        by_source: dict[str, list[Any]] = {}
        for d in items:
            by_source.setdefault(d.source, []).append(d)
        for source, group in by_source.items():
            self._settle_on(consumers.get(source), group)

    def _settle_on(self, consumer: Any, items: list[Any]) -> None:
        if consumer is None:
            self.stats["stale_refused"] += len(items)
            return
        try:
            result = consumer.settle_batch(items)
        except ConnectionLostError:
            self.stats["stale_refused"] += len(items)
            return
        self.stats["settled"] += result.settled
        self.stats["stale_refused"] += result.refused

    def _settle_one(self, delivery: Any, offset: int | None, *, replay_duplicate: bool = False) -> None:
        """Ack one delivery; with *offset* (its seq in a committed batch), also send its label."""
        try:
            delivery.ack()
            if replay_duplicate:
                self.stats["replay_duplicates_acked"] += 1
            else:
                self.stats["settled"] += 1
        except SettlementError:
            # Stale (its connection ended) or already settled: nothing was sent;
            # the broker redelivers it (a duplicate, never a loss).
            self.stats["stale_refused"] += 1
        except ConnectionLostError:
            self.stats["stale_refused"] += 1
        if offset is not None:
            self._label(delivery, offset)

    def _label(self, delivery: Any, offset: int) -> None:
        if SPARK_COMMITTED in delivery.requested_acks and self._conn is not None:
            batch = self._batch_of(offset)
            try:
                self._conn.issue_ack(delivery, SPARK_COMMITTED, 200, {"batch_id": batch, "offset": offset},
                                     reserved=True)
                self.stats["labels_sent"] += 1
            except AckbridgeError as exc:
                log.warning("could not send %s acknowledgement: %s", SPARK_COMMITTED, exc)

    def _flush(self) -> None:
        for consumer in list(self._consumers.values()):
            try:
                consumer.flush()
            except SettlementError:
                self.stats["stale_refused"] += 1
            except ConnectionLostError:
                self._drop_connection()
                return

    def _replay(self, wal: str, s: int, e: int) -> AckbridgePartition:
        # Our own numbered deliveries inside this range must not be acked by its
        # commit: give them back for later batches.
        mine = [q for q in self._numbered if s < q <= e]
        self._reordered = self._reordered or bool(mine)
        for q in reversed(mine):
            self._pending.appendleft(self._numbered.pop(q))
        if self._opts.dedupe_replayed:
            with open(wal, "rb") as fh:
                ids = {m for b in from_ipc(fh.read()) for m in b.column("message_id").to_pylist() if m}
            self._replayed_ids[e] = ids
            for d in list(self._pending):
                if d.redelivered and d.message_id in ids:
                    self._pending.remove(d)
                    self._held[d.message_id] = d
        log.info("ackbridge source replays planned batch (%d, %d] from its write-ahead file", s, e)
        return AckbridgePartition(path=wal)

    def _release_replayed(self, seq: int) -> None:
        for end in [x for x in self._replayed_ids if x <= seq]:
            ids = self._replayed_ids.pop(end)
            self._committed_replayed |= ids
            for mid in ids:
                held = self._held.pop(mid, None)
                if held is not None:
                    self._settle_one(held, None, replay_duplicate=True)
        if self._consumers and self._committed_replayed:
            self._flush()
