"""The ``local://`` transport: the core's verbs on top of :class:`~ackbridge_local.store.Store`.

A generation here is one owner record. It ends when the connection is cut
(fault seam), when this process learns its owner record was taken over
(it was presumed dead: paused or silent past its lease timeout), when its
heartbeat keeps failing, or when the file is found damaged. Then its
deliveries go stale in the core and a new owner id is registered before
anything is leased again. The background threads live in
:mod:`ackbridge_local.workers`; none of them ends on an error unreported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ackbridge.capabilities import (
    CANNOT_TELL,
    Capabilities,
    ConfirmDurability,
    DeadLetter,
    DeadLetterTarget,
    Durability,
    RejectFate,
    RejectOutcome,
    Topology,
    Verb,
    emulated,
    native,
)
from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError, InvalidURLError
from ackbridge.kernel.generations import check_ops, lease_lost
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle, WireVerb, refused, unknown, unsent
from ackbridge.options import OptionSpec, positive_int
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.transport.files import parse_mode
from ackbridge.urls import BrokerURL
from ackbridge_local import codec, workers
from ackbridge_local.errors import DamagedFileError
from ackbridge_local.store import Store, dead_letter_queue

log = logging.getLogger("ackbridge.local")

CAPABILITIES = Capabilities(
    broker="embedded",
    verbs={
        Verb.ACK: native("row deleted in one SQLite transaction"),
        Verb.REQUEUE: native("lease released; the message keeps its place"),
        Verb.REJECT: native("moved to QUEUE.dlq (queues dead-letter unless declared otherwise)"),
        Verb.CUMULATIVE_ACK: emulated("individual acks in one transaction"),
        Verb.CONFIRM: native("after the transaction commits (fsync unless fsync=false)"),
        Verb.CONFIRM_REFUSED: native("message larger than max_message_bytes, or the write failed (e.g. disk full)"),
        Verb.DELIVERY_COUNT: native("counted on every lease"),
        Verb.LABELLED_ACKS: native("replies go to a per-connection inbox queue"),
    },
    notes=("local default for one machine; not a production broker",),
    confirm_durability=ConfirmDurability(
        Durability.ON_DISK,
        "confirmed after the SQLite transaction (WAL) commits and is fsynced (group commit); with fsync=false "
        "it is written to the operating system only: survives a process kill, not a power loss"),
    topology={
        Topology.DECLARE_QUEUE: native("a row in the file's queues table (QUEUE.dlq beside it)"),
        Topology.DELETE_QUEUE: native("its rows (and QUEUE.dlq's) deleted in one transaction"),
        Topology.PURGE_QUEUE: native("ready rows deleted; leased ones stay with their consumer"),
        Topology.INSPECT_QUEUE: native("ready and leased rows counted; consumers are not tracked"),
    },
    reject_outcome=RejectOutcome(
        RejectFate.DEAD_LETTERS_IF_TARGET,
        "moved to QUEUE.dlq, in the same transaction; a queue declared with dead_letter=False DISCARDS it "
        "(deleted), which consume() warns about"),
    requeue_bound=("consume(max_deliveries=N) dead-letters a message leased more than N times (the file counts "
                   "every lease); or reject it instead of requeueing it"),
)


def _valid_mode(text: str) -> bool:
    try:
        parse_mode(text)
    except ValueError:
        return False
    return True


OPTIONS = (
    OptionSpec("lease_timeout", float, 30.0, "seconds without heartbeat before leases return",
               lambda v: v > 0, "must be > 0"),
    OptionSpec("fsync", bool, True, "fsync each group commit before confirming"),
    positive_int("max_message_bytes", 16 * 1024 * 1024, "larger publishes are refused"),
    OptionSpec("poll_ms", float, 20.0, "longest idle wait between polls", lambda v: v > 0, "must be > 0"),
    OptionSpec("file_mode", str, "0600", "permissions of the broker files it creates (directories get x where r)",
               _valid_mode, "an octal mode the owner can read and write, e.g. 0600 or 0640"),
)

_TAKEN_OVER = ("this consumer's owner record was taken over (it was presumed dead: paused or silent past its "
               "lease_timeout); its deliveries were returned to the queue")


class LocalTransport(SyncTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        path = url.location
        if not path:
            raise InvalidURLError(f"{url.redacted!r}: give a file, e.g. local:///tmp/ackbridge.db")
        self.path = os.path.abspath(path)
        self.lease_timeout = float(options.get("lease_timeout", 30.0))
        self.poll_s = float(options.get("poll_ms", 20.0)) / 1000.0
        self._store: Store | None = None
        self._lock = threading.RLock()
        self._generation = 0
        self._owner: str | None = None
        # Owners of ended generations whose release failed (disk full): released when writes work again.
        self._abandoned: list[str] = []
        # Rows whose settlement failed on a storage error: still leased to the live owner, so
        # they are requeued (redelivered) once the file accepts writes again.
        self._requeue_later: set[int] = set()
        self.failure: DamagedFileError | None = None
        self.subs: dict[str, workers.Subscription] = {}
        self.outbox: list[tuple[int, int, str, bytes, str]] = []
        self.outbox_cond = threading.Condition()
        self.writes_held = False
        self.closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self.heartbeat_fault_until = 0.0
        self.heartbeat_ok = time.monotonic()

    # ---- lifecycle -------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        return self._store

    def open(self) -> None:
        try:
            self._store = Store(self.path, lease_timeout=self.lease_timeout,
                                fsync=bool(self.options.get("fsync", True)),
                                file_mode=parse_mode(str(self.options.get("file_mode", "0600"))))
        except DamagedFileError:
            raise
        except BrokerError as exc:
            raise type(exc)(f"cannot open the embedded broker file {self.path!r}: {exc}") from None
        except OSError as exc:
            raise BrokerError(f"cannot open the embedded broker file {self.path!r}: {exc}") from None
        self._generation = 1
        self.ensure_owner()
        for target, name in ((workers.write_loop, "writer"), (workers.heartbeat_loop, "heartbeat")):
            self._start(target, name, self)

    def _start(self, target: Any, name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=f"ackbridge-local-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def close(self) -> None:
        if self._store is None or self.closing.is_set():
            return
        problem: AckbridgeError | None = None
        for sub in list(self.subs.values()):
            try:
                self._stop_sub(sub)
            except AckbridgeError as exc:
                problem = problem or exc
        with self.outbox_cond:
            self.writes_held = False
            while self.outbox and self.failure is None:
                self.outbox_cond.notify_all()
                self.outbox_cond.wait(0.05)
            self.closing.set()
            self.outbox_cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.failure is None:
            with self._lock:
                owners = [*self._abandoned, *([self._owner] if self._owner else [])]
                self._owner, self._abandoned = None, []
            for owner in owners:
                try:
                    self.store.release_owner(owner)
                except BrokerError as exc:  # the leases return when this process exits or the lease expires
                    problem = problem or exc
        self.store.close()
        self._store = None
        if self.failure is not None:
            raise self.failure
        if problem is not None:
            raise problem

    # ---- generations --------------------------------------------------------------
    def ensure_owner(self) -> str:
        """The live owner id, registering a new one when the last generation ended."""
        with self._lock:
            self.raise_if_failed()
            if self._owner is None:
                owner = f"{os.getpid()}-{uuid.uuid4().hex[:10]}-g{self._generation}"
                self.store.register_owner(owner)
                self._owner = owner
                self.heartbeat_ok = time.monotonic()
            return self._owner

    @property
    def owner(self) -> str | None:
        return self._owner

    def end_generation(self, reason: str, owner: str | None = None) -> None:
        """End the live generation (only if it is still *owner*'s): its deliveries go
        stale, its leases return to the queue (now, or once the file takes writes)."""
        with self._lock:
            if self._owner is None or (owner is not None and owner != self._owner):
                return
            ended, old_owner = self._generation, self._owner
            # The next owner leases under a new generation: nothing of this one stays valid.
            self._generation += 1
            self._owner = None
            self._abandoned.append(old_owner)
            self._requeue_later.clear()  # they belong to the old owner, released with it
            for sub in self.subs.values():
                sub.leased.clear()
        log.warning("ackbridge embedded broker %s: generation %d ended: %s", self.path, ended, reason)
        self.events.generation_ended(ended, reason)
        with contextlib.suppress(BrokerError, ConnectionLostError):
            self.retry_pending()

    def fail(self, exc: DamagedFileError) -> None:
        """The file is damaged, deleted or replaced: report it once and make every later
        call raise it (settle, consume, close; publishes are refused with it).

        The generation is not ended here: its deliveries then stay in the
        application's hands and settling one raises this error, naming the file,
        rather than a StaleDeliveryError promising a redelivery that cannot come.
        """
        with self._lock:
            if self.failure is not None:
                return
            self.failure = exc
            self._owner = None
            for sub in self.subs.values():
                sub.stop.set()
        log.error("ackbridge embedded broker: %s", exc)
        with self.outbox_cond:
            self.outbox_cond.notify_all()
        self.events.failed(exc)  # a consumer waiting in get() raises it, never a silent None

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    @contextlib.contextmanager
    def checked(self) -> Iterator[Store]:
        """The store, for one call; damage found during it ends this connection."""
        self.raise_if_failed()
        try:
            yield self.store
        except DamagedFileError as exc:
            self.fail(exc)
            raise

    def retry_pending(self) -> None:
        """Release abandoned owners and requeue rows whose settlement failed (writes work again)."""
        with self._lock:
            abandoned, requeue, owner = list(self._abandoned), list(self._requeue_later), self._owner
        for old in abandoned:
            self.store.release_owner(old)
            with self._lock:
                self._abandoned.remove(old)
        if requeue and owner is not None:
            self.store.requeue(owner, requeue)
            with self._lock:
                self._requeue_later.difference_update(requeue)

    def sever(self, reason: str = "connection severed") -> None:
        """Behave as if the connection dropped: leases return to the queue, the
        generation ends, unwritten publishes become unknown. (Fault injection.)"""
        with self.outbox_cond:
            lost, self.outbox = self.outbox, []
        for seq, *_ in lost:
            self.events.confirm(seq, unknown(f"{reason} before the write committed"))
        self.end_generation(reason)
        with contextlib.suppress(BrokerError):
            self.ensure_owner()

    def hold_writes(self, hold: bool) -> None:
        """Pause group commits, so confirms stay pending (fault injection)."""
        with self.outbox_cond:
            self.writes_held = hold
            self.outbox_cond.notify_all()

    def fail_heartbeats(self, seconds: float) -> None:
        """Make every heartbeat fail for *seconds* (fault injection, through ``transport_of``)."""
        self.heartbeat_fault_until = time.monotonic() + seconds

    # ---- queues ---------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with self.checked() as store:
            store.declare(name, dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with self.checked() as store:
            store.delete(name, dead_letter)

    def purge_queue(self, name: str) -> int | None:
        with self.checked() as store:
            return store.purge(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        with self.checked() as store:
            # Every name is a queue here (a publish to an undeclared one is kept), so there
            # is nothing to refuse: an unknown name is an empty queue that dead-letters.
            declared = store.declared(name)
            ready, leased = store.counts(name)
            dlq = dead_letter_queue(name) if declared in (None, True) else None
            dead = sum(store.counts(dlq)) if dlq is not None else None
        return QueueInfo(name, messages=ready, unacked=leased, consumers=None, dead_letter=dlq, dead_lettered=dead)

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        """Read from the file: every queue dead-letters to QUEUE.dlq unless declared with dead_letter=False."""
        try:
            with self.checked() as store:
                declared = store.declared(source)
        except AckbridgeError:
            return CANNOT_TELL
        if declared is False:
            return DeadLetterTarget(DeadLetter.NONE, "declared with dead_letter=False")
        return DeadLetterTarget(DeadLetter.KNOWN, repr(dead_letter_queue(source)))

    # ---- consuming -------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        with self.checked() as store:
            store.probe(source)  # a damaged file fails consume() itself, not only a thread later
        sub = workers.Subscription(subscription, source, prefetch)
        with self._lock:
            self.subs[subscription] = sub
        sub.thread = self._start(workers.poll_loop, subscription, self, sub)

    def unsubscribe(self, subscription: str) -> None:
        sub = self.subs.get(subscription)
        if sub is not None:
            self._stop_sub(sub)

    def _stop_sub(self, sub: workers.Subscription) -> None:
        sub.stop.set()
        if sub.thread is not None and sub.thread is not threading.current_thread():
            sub.thread.join(timeout=5)
        with self._lock:
            self.subs.pop(sub.name, None)
            leased, sub.leased = list(sub.leased), set()
            owner = self._owner
        if leased and owner is not None and self._store is not None and self.failure is None:
            try:
                with self.checked() as store:
                    store.requeue(owner, leased)
            except BrokerError:
                with self._lock:
                    self._requeue_later.update(leased)
                raise

    def lease(self, sub: workers.Subscription, limit: int) -> tuple[list[Any], int]:
        """Lease up to *limit* rows for *sub* under the live owner: (rows, their generation)."""
        with self._lock:
            owner = self.ensure_owner()
            rows = self.store.lease(sub.source, owner, limit)
            sub.leased.update(r.id for r in rows)
            return rows, self._generation

    def settle(self, ops: Sequence[WireSettle]) -> None:
        self.raise_if_failed()
        with self._lock:
            check_ops(ops, self._generation)
            owner = self._owner
            if owner is None:
                raise lease_lost()
            acks: list[int] = []
            requeues: list[int] = []
            rejects: list[tuple[int, str]] = []
            try:
                with self.checked() as store:
                    for op in ops:
                        row_id = int(op.wire_tag)  # type: ignore[call-overload]
                        if op.verb is WireVerb.ACK:
                            acks.append(row_id)
                        elif op.verb is WireVerb.REQUEUE:
                            requeues.append(row_id)
                        else:
                            source = op.message.source if op.message else ""
                            target = dead_letter_queue(source) if store.has_dead_letter(source) else ""
                            rejects.append((row_id, target))
                    matched = store.settle(owner, acks, requeues, rejects)
            except BrokerError:
                # Nothing was settled; the rows stay leased to this owner. Take them out of
                # the prefetch and requeue them once the file takes writes: redelivered.
                self._forget(ops, later=True)
                raise
            if matched == len(ops):
                self._forget(ops, later=False)
                return
        # Some of these rows were reclaimed: this owner's record lapsed at some point
        # (paused past its lease timeout). Nothing was applied; its generation ends.
        self.end_generation(_TAKEN_OVER, owner)
        raise lease_lost()

    def _forget(self, ops: Sequence[WireSettle], *, later: bool) -> None:
        ids = [int(op.wire_tag) for op in ops]  # type: ignore[call-overload]
        for op, row_id in zip(ops, ids, strict=True):
            sub = self.subs.get(op.subscription)
            if sub is not None:
                sub.leased.discard(row_id)
        if later:
            self._requeue_later.update(ids)

    # ---- publishing ----------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        if self.failure is not None:
            self.events.confirm(seq, refused(str(self.failure)))
            return
        if self._store is None or self.closing.is_set():
            self.events.confirm(seq, unsent("not connected"))
            return
        limit = int(self.options.get("max_message_bytes", 16 * 1024 * 1024))
        if len(message.body) > limit:
            self.events.confirm(seq, refused(f"message of {len(message.body)} bytes exceeds "
                                             f"max_message_bytes={limit}"))
            return
        if not destination:
            self.events.confirm(seq, refused("no destination queue given"))
            return
        props = codec.dumps({
            "headers": dict(message.headers), "message_id": message.message_id,
            "correlation_id": message.correlation_id, "reply_to": message.reply_to,
            "content_type": message.content_type, "timestamp": message.timestamp or time.time(),
        })
        with self.outbox_cond:
            self.outbox.append((seq, self._generation, destination, message.body, props))
            if len(self.outbox) == 1:
                self.outbox_cond.notify()

    # ---- replies ----------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        inbox = f"ackbridge.reply.{uuid.uuid4().hex}"
        with self.checked() as store:
            store.declare(inbox, False)
        self._start(workers.inbox_loop, "inbox", self, inbox)
        return inbox
