"""Consuming: a polling thread per subscription, the reply inbox, and the group commit of settlements.

A subscription's thread leases ready rows (under the connection's live owner
record, up to the prefetch) and hands each to the core as a delivery of the
generation it was leased under. A settlement is a row change
(:mod:`ackbridge_local.row_changes`): ack deletes the row, requeue releases
its lease, reject moves it to the queue's dead-letter queue (or deletes it
where the queue has none). Settles that arrive together share one
transaction (:class:`SettleGroup`); each returns after that transaction
committed.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from ackbridge.errors import BrokerError, StaleDeliveryError
from ackbridge.kernel.generations import check_ops
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


class PendingSettle:
    """One settle call waiting for its group's commit, and what came of it."""

    __slots__ = ("done", "error", "lost", "ops")

    def __init__(self, ops: Sequence[WireSettle]) -> None:
        self.ops = ops
        #: Its group's commit ended (committed, refused or failed: see the other fields).
        self.done = False
        #: Raised to the caller: stale, or the transaction failed (nothing of it was applied).
        self.error: BaseException | None = None
        #: The owner whose leases turned out reclaimed (nothing of it was applied).
        self.lost: str | None = None


def still_current(group: list[PendingSettle], owner: str | None, generation: int) -> list[PendingSettle]:
    """The settles of *group* whose every op is of the live *generation* (*owner* None:
    none is live); each other one gets its error from the core's rule, and is not written."""
    live = []
    for pending in group:
        try:
            if owner is None:
                check_ops(pending.ops, None, "this connection holds no owner record: it was closed or its "
                                             "lease lapsed")
            check_ops(pending.ops, generation)
        except StaleDeliveryError as exc:
            pending.error = exc
        else:
            live.append(pending)
    return live


class SettleGroup:
    """Group commit of settles, on the lock every settle takes anyway.

    A settle queues itself, then takes *serial* (the transport's lock). Whoever
    gets it takes every settle queued by then and hands them to *commit* in one
    transaction; a settle that finds its own already done when it gets the lock
    returns at once. So the settles that queued while a commit ran share the
    next one, and each still returns only after its own rows changed in the
    file. No thread waits for another: each waits for the lock only, so a
    settle made on a polling thread (a handler acking inside ``deliver``) or one
    interrupted while it waits (KeyboardInterrupt) strands nobody. One
    interrupted before a group took it leaves the queue unapplied.
    """

    def __init__(self, serial: AbstractContextManager[object],
                 commit: Callable[[list[PendingSettle]], None]) -> None:
        self._serial = serial
        self._commit = commit
        self._mutex = threading.Lock()
        self._queue: list[PendingSettle] = []
        #: Read by tests: settles queued and not done yet, groups taken (one transaction
        #: each, none when all of a group was stale) and the settles they carried.
        self.unfinished = 0
        self.groups = 0
        self.settles = 0

    def settle(self, pending: PendingSettle) -> None:
        """Return once *pending* was committed, refused or failed (see its fields)."""
        try:
            with self._mutex:
                self._queue.append(pending)
                self.unfinished += 1
            with self._serial:
                if not pending.done:
                    self._commit_queued(pending)
        finally:
            if not pending.done:  # interrupted waiting for the lock
                with self._mutex:
                    if pending in self._queue:  # else a group took it: its commit decides
                        self._queue.remove(pending)
                        self.unfinished -= 1

    def _commit_queued(self, pending: PendingSettle) -> None:
        group: list[PendingSettle] = []
        try:
            with self._mutex:
                group, self._queue = self._queue, []
            self._commit(group)
        except BaseException as exc:  # *pending*'s thread raises exc; the others raise a copy
            for each in group:
                if each is not pending and each.error is None and each.lost is None:
                    each.error = shared_error(exc)
            raise
        finally:
            with self._mutex:
                for each in group:
                    each.done = True
                self.unfinished -= len(group)
                self.groups += 1
                self.settles += len(group)


def shared_error(exc: BaseException) -> BaseException:
    """A copy of *exc* for another thread to raise (one object raised in two threads
    gets one traceback written over the other). An interruption of the committing
    thread is no interruption of this one: its settle may not have been applied."""
    if not isinstance(exc, Exception):
        return BrokerError(f"settling was interrupted in the thread committing it ({type(exc).__name__}); "
                           "it may not have been applied, and is redelivered if it was not")
    try:
        return copy.copy(exc)
    except Exception:
        return exc
