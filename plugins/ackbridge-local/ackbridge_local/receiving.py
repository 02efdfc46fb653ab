"""Consuming: a polling thread per subscription, the reply inbox, and settlements as row changes.

A subscription's thread leases ready rows (under the connection's live owner
record, up to the prefetch) and hands each to the core as a delivery of the
generation it was leased under. A settlement is a row change
(:mod:`ackbridge_local.row_changes`): ack deletes the row, requeue releases
its lease, reject moves it to the queue's dead-letter queue (or deletes it
where the queue has none), all of a settle call in one transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ackbridge.messages import InboundMessage, WireSettle, WireVerb
from ackbridge_local import codec
from ackbridge_local.broker_file import BrokerFile, Trouble
from ackbridge_local.errors import OwnerGone
from ackbridge_local.row_changes import Settlement
from ackbridge_local.store import Row, dead_letter_queue

#: Rows leased (or taken from the reply inbox) in one transaction at most.
BATCH = 512


class Subscription:
    """One consumer of one queue: the rows leased to it and the thread that polls for more.

    *lease(sub, limit)* leases rows under the live owner (returning them and their
    generation), *taken_over(owner)* ends the generation of an owner record found
    taken over, *end_generation(reason)* ends the live one after an unexpected error.
    """

    def __init__(self, name: str, source: str, prefetch: int, *, file: BrokerFile,
                 lease: Callable[[Subscription, int], tuple[list[Row], int]],
                 deliver: Callable[[str, InboundMessage], None], taken_over: Callable[[str], None],
                 end_generation: Callable[[str], None], poll_s: float) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.leased: set[int] = set()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self._file = file
        self._lease = lease
        self._deliver = deliver
        self._taken_over = taken_over
        self._trouble = Trouble(file, f"consuming from {source!r}", end_generation)
        self._poll_s = poll_s

    def poll_loop(self) -> None:
        idle = 0.001
        # A lease is a write transaction (an fsync): when only a little room is
        # free, wait one short beat for settlements to free more, so one lease
        # serves many deliveries instead of one each. Never more than one beat:
        # an application holding almost the whole prefetch still gets the rest.
        low_water = max(1, min(BATCH, self.prefetch // 2))
        deferred = False
        file, trouble = self._file, self._trouble
        while not self.stop.is_set() and file.failure is None:
            rows: list[Row] = []
            generation = 0
            try:
                file.store.reclaim_dead()
                room = self.prefetch - len(self.leased)
                if room > 0 and (room >= low_water or deferred or not self.leased):
                    rows, generation = self._lease(self, min(room, BATCH))
                    deferred = False
                elif room > 0:
                    deferred = True
                trouble.ok()
            except OwnerGone as gone:
                self._taken_over(str(gone))
                continue
            except Exception as exc:
                pause = trouble.failed(exc)
                if pause is None:
                    return
                self.stop.wait(pause)
                continue
            for row in rows:
                self._deliver(self.name, codec.inbound(row, generation))
            if rows:
                idle = 0.001
            elif deferred:
                self.stop.wait(0.005)
            else:
                self.stop.wait(idle)
                idle = min(idle * 2, self._poll_s)


def inbox_loop(inbox: str, *, file: BrokerFile, reply: Callable[[InboundMessage], None],
               generation: Callable[[], int], end_generation: Callable[[str], None], poll_s: float) -> None:
    """The reply inbox's thread: replies are taken (deleted) from *inbox* and handed to *reply*."""
    idle = 0.001
    trouble = Trouble(file, "reading replies", end_generation)
    while not file.closing.is_set() and file.failure is None:
        try:
            rows = file.store.take(inbox, BATCH)
            trouble.ok()
        except Exception as exc:
            pause = trouble.failed(exc)
            if pause is None:
                return
            file.closing.wait(pause)
            continue
        for row in rows:
            reply(codec.inbound(row, generation()))
        idle = 0.001 if rows else min(idle * 2, poll_s)
        file.closing.wait(idle)


def settlement_of(ops: Sequence[WireSettle], has_dead_letter: Callable[[str], bool]) -> Settlement:
    """*ops* as row changes: ack deletes, requeue releases, reject moves to the source's
    dead-letter queue (or deletes where the queue was declared without one)."""
    ack, requeue = WireVerb.ACK, WireVerb.REQUEUE  # read once: enum members are looked up through the class
    settlement = Settlement([], [], [])
    for op in ops:
        row_id = int(op.wire_tag)  # type: ignore[call-overload]
        if op.verb is ack:
            settlement.acks.append(row_id)
        elif op.verb is requeue:
            settlement.requeues.append(row_id)
        else:
            source = op.message.source if op.message else ""
            settlement.rejects.append((row_id, dead_letter_queue(source) if has_dead_letter(source) else ""))
    return settlement
