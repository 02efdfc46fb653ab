"""Settling what Spark committed: a committed batch's deliveries are acked
through the core's batch-settle call, labels requested by their publishers
are sent, and batches replayed from write-ahead files hold back the
redeliveries of their own messages until the replay commits.

:class:`Settlement` is an object the reader
(:class:`~ackbridge_spark.push.source.AckbridgeStreamReader`) holds. It owns
what is planned and not settled yet -- the numbered deliveries (``seq`` ->
delivery), the batch id of each planned range, the replay state -- and its
own counters. The reader numbers deliveries into it as it offers them to
Spark, hands it the consumers of each connection it opens (:meth:`attach`),
and tells it what Spark committed (:meth:`settle_through`).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ackbridge.errors import AckbridgeError, ConnectionLostError, SettlementError
from ackbridge.kernel.labels import SPARK_COMMITTED
from ackbridge_spark.push.partition import AckbridgePartition
from ackbridge_spark.schema import from_ipc

if TYPE_CHECKING:
    from ackbridge import Connection, Consumer, Delivery

log = logging.getLogger("ackbridge.spark")


class Settlement:
    """The reader's settle-after-commit ledger, for one reader (and its successive connections).

    *on_connection_lost* is called when a flush finds the connection gone (the
    reader drops it and reconnects on the next trigger)."""

    def __init__(self, *, dedupe_replayed: bool, on_connection_lost: Callable[[], None]) -> None:
        self._dedupe_replayed = dedupe_replayed
        self._on_connection_lost = on_connection_lost
        self._conn: Connection | None = None
        self._consumers: dict[str, Consumer] = {}
        # seq -> delivery. Seqs are only ever inserted in increasing order (a delivery
        # handed back by a replay gets a new, higher one), so the dict's own order is
        # seq order: settling through a seq takes a prefix, the unplanned rest is a suffix.
        self.numbered: dict[int, Delivery] = {}
        # Last seq of each planned range -> its batch id (for spark-committed labels).
        self._batch_ends: dict[int, int] = {}
        self._replayed_ids: dict[int, set[str]] = {}  # end seq of a replayed WAL batch -> its message ids
        self._held: dict[str, Delivery] = {}  # redeliveries of replayed messages, acked when the replay commits
        self._committed_replayed: set[str] = set()
        # Set once a replay handed numbered deliveries back to the reader: numbering
        # order is then no longer receive order, and batches settle one by one.
        self.reordered = False
        self.stats = {"settled": 0, "stale_refused": 0, "labels_sent": 0, "replay_duplicates_acked": 0}

    # ---- the reader's connection -------------------------------------------------------
    def attach(self, conn: Connection, consumers: dict[str, Consumer]) -> None:
        """Settle on *conn*'s *consumers* (``delivery.source`` -> consumer) from now on."""
        self._conn, self._consumers = conn, consumers

    def detach(self) -> None:
        """The connection is gone: what it delivered can no longer be settled (counted stale)."""
        self._conn, self._consumers = None, {}

    # ---- numbering -------------------------------------------------------------------------
    def number(self, first: int, deliveries: Iterable[Delivery]) -> None:
        """Number *deliveries* ``first, first + 1, ...`` (above every seq numbered so far)."""
        self.numbered.update(zip(itertools.count(first), deliveries))

    def numbered_after(self, seq: int) -> list[int]:
        """Numbered seqs above *seq*, ascending: a suffix of ``numbered``."""
        return list(itertools.takewhile(seq.__lt__, reversed(self.numbered)))[::-1]

    def planned(self, end: int, batch: int) -> None:
        """The range ending at seq *end* is planned as batch *batch*."""
        self._batch_ends[end] = batch

    def batch_of(self, seq: int) -> int | None:
        """The batch id of the planned range holding *seq*."""
        ends = [end for end in self._batch_ends if end >= seq]
        return self._batch_ends[min(ends)] if ends else None

    # ---- replays -------------------------------------------------------------------------
    @property
    def replaying(self) -> bool:
        """Whether redeliveries must be checked against replayed batches (:meth:`admit`)."""
        return bool(self._replayed_ids or self._committed_replayed)

    def admit(self, delivery: Delivery) -> bool:
        """Take *delivery* if it is the redelivery of a replayed message (held until the
        replay commits, or acked at once when it already did); False: the reader's."""
        mid = delivery.message_id
        if mid is not None and delivery.redelivered:
            if mid in self._committed_replayed:
                self._settle_one(delivery, None, replay_duplicate=True)
                return True
            if any(mid in ids for ids in self._replayed_ids.values()):
                self._held[mid] = delivery
                return True
        return False

    def replay(self, wal: str, s: int, e: int, pending: deque[Delivery]) -> AckbridgePartition:
        """Plan range ``(s, e]`` from its write-ahead file; this reader's own numbered
        deliveries inside it go back to the front of *pending* (its commit must not ack them)."""
        mine = [q for q in self.numbered if s < q <= e]
        self.reordered = self.reordered or bool(mine)
        for q in reversed(mine):
            pending.appendleft(self.numbered.pop(q))
        if self._dedupe_replayed:
            with open(wal, "rb") as fh:
                ids = {m for b in from_ipc(fh.read()) for m in b.column("message_id").to_pylist() if m}
            self._replayed_ids[e] = ids
            for d in list(pending):
                mid = d.message_id
                if d.redelivered and mid is not None and mid in ids:
                    pending.remove(d)
                    self._held[mid] = d
        log.info("ackbridge source replays planned batch (%d, %d] from its write-ahead file", s, e)
        return AckbridgePartition(path=wal)

    # ---- settlement ------------------------------------------------------------------
    def settle_through(self, seq: int) -> None:
        """Spark committed everything through *seq*: ack it, send its labels."""
        numbered = self.numbered
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

    def _settle_batch(self, items: list[Delivery]) -> None:
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
        by_source: dict[str, list[Delivery]] = {}
        for d in items:
            by_source.setdefault(d.source, []).append(d)
        for source, group in by_source.items():
            self._settle_on(consumers.get(source), group)

    def _settle_on(self, consumer: Consumer | None, items: list[Delivery]) -> None:
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

    def _settle_one(self, delivery: Delivery, offset: int | None, *, replay_duplicate: bool = False) -> None:
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

    def _label(self, delivery: Delivery, offset: int) -> None:
        if SPARK_COMMITTED in delivery.requested_acks and self._conn is not None:
            batch = self.batch_of(offset)
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
                self._on_connection_lost()
                return

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
