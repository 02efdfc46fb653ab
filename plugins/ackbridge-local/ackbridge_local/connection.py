"""The ``local://`` transport: the connection to one broker file, its lifecycle and generations.

A generation here is one owner record. It ends when the connection is cut
(fault seam), when this process learns its owner record was taken over
(it was presumed dead: paused or silent past its lease timeout), when its
heartbeat keeps failing, or when the file is found damaged. Then its
deliveries go stale in the core and a new owner id is registered before
anything is leased again. The parts get what they need, not this transport:
the subscriptions' polling and the reply inbox live in
:mod:`ackbridge_local.receiving`, the outbox and its group commit in
:mod:`ackbridge_local.sending`, the shared file state in :mod:`ackbridge_local.broker_file`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ackbridge.capabilities import CANNOT_TELL, DeadLetter, DeadLetterTarget
from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError, InvalidURLError
from ackbridge.kernel.generations import check_generation, check_ops, lease_lost
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_local.broker_file import BrokerFile, Trouble
from ackbridge_local.capabilities import CAPABILITIES
from ackbridge_local.errors import DamagedFileError
from ackbridge_local.options import OPTIONS, LocalSettings
from ackbridge_local.receiving import Subscription, inbox_loop, settlement_of
from ackbridge_local.sending import Outbox
from ackbridge_local.store import Row, Store, dead_letter_queue

log = logging.getLogger("ackbridge.local")

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
        self.local_settings = LocalSettings.resolve(options)
        self.file = BrokerFile(self.path, self._failed)
        self.outbox = Outbox(self.file, events, self.local_settings.max_message_bytes)
        self._lock = threading.RLock()
        self._generation = 0
        self._owner: str | None = None
        # Owners of ended generations whose release failed (disk full): released when writes work again.
        self._abandoned: list[str] = []
        # Rows whose settlement failed on a storage error: still leased to the live owner, so
        # they are requeued (redelivered) once the file accepts writes again.
        self._requeue_later: set[int] = set()
        self.subs: dict[str, Subscription] = {}
        self._threads: list[threading.Thread] = []
        self.heartbeat_fault_until = 0.0
        self.heartbeat_ok = time.monotonic()

    # ---- lifecycle -------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    @property
    def store(self) -> Store:
        return self.file.store

    @property
    def failure(self) -> DamagedFileError | None:
        return self.file.failure

    def open(self) -> None:
        try:
            store = Store(self.path, lease_timeout=self.local_settings.lease_timeout, fsync=self.local_settings.fsync,
                          file_mode=self.local_settings.file_mode)
        except DamagedFileError:
            raise
        except BrokerError as exc:
            raise type(exc)(f"cannot open the embedded broker file {self.path!r}: {exc}") from None
        except OSError as exc:
            raise BrokerError(f"cannot open the embedded broker file {self.path!r}: {exc}") from None
        self.file.opened(store)
        self._generation = 1
        self.ensure_owner()
        self._start(self.outbox.write_loop, "writer")
        self._start(self._heartbeat_loop, "heartbeat")

    def _start(self, target: Callable[..., None], name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=f"ackbridge-local-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def close(self) -> None:
        if not self.file.is_open or self.file.closing.is_set():
            return
        problem: AckbridgeError | None = None
        for sub in list(self.subs.values()):
            try:
                self._stop_sub(sub)
            except AckbridgeError as exc:
                problem = problem or exc
        self.outbox.flush_and_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.file.failure is None:
            with self._lock:
                owners = [*self._abandoned, *([self._owner] if self._owner else [])]
                self._owner, self._abandoned = None, []
            for owner in owners:
                try:
                    self.store.release_owner(owner)
                except BrokerError as exc:  # the leases return when this process exits or the lease expires
                    problem = problem or exc
        self.file.close()
        if self.file.failure is not None:
            raise self.file.failure
        if problem is not None:
            raise problem

    # ---- generations --------------------------------------------------------------
    def ensure_owner(self) -> str:
        """The live owner id, registering a new one when the last generation ended."""
        with self._lock:
            self.file.raise_if_failed()
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

    def taken_over(self, owner: str) -> None:
        """*owner*'s record was taken over: end its generation (if it is still the live one)."""
        self.end_generation(_TAKEN_OVER, owner)

    def _failed(self, exc: DamagedFileError) -> None:
        """The file is damaged, deleted or replaced (:meth:`BrokerFile.fail`): stop using it.

        The generation is not ended here: its deliveries then stay in the
        application's hands and settling one raises this error, naming the file,
        rather than a StaleDeliveryError promising a redelivery that cannot come.
        """
        with self._lock:
            self._owner = None
            for sub in self.subs.values():
                sub.stop.set()
        self.outbox.wake()
        self.events.failed(exc)  # a consumer waiting in get() raises it, never a silent None

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

    def _heartbeat_loop(self) -> None:
        """Keeps the owner record alive; ends the generation before anyone could take it over."""
        lease_timeout = self.local_settings.lease_timeout
        beat = max(min(lease_timeout / 4, 2.0), 0.05)
        trouble = Trouble(self.file, "the heartbeat", self.end_generation)
        while not self.file.closing.wait(beat) and self.file.failure is None:
            try:
                store = self.store
                store.check_file()  # a file deleted, replaced or truncated under us is reported here
                self.retry_pending()
                owner = self.ensure_owner()
                if time.monotonic() < self.heartbeat_fault_until:
                    raise BrokerError(f"heartbeat on the embedded broker file {self.path!r} failed "
                                      "(injected fault)")
                if store.heartbeat(owner):
                    self.heartbeat_ok = time.monotonic()
                    trouble.ok()
                else:
                    self.taken_over(owner)
            except Exception as exc:
                if trouble.failed(exc) is None:
                    return
                # Before anyone could reclaim this owner's leases (after lease_timeout without a
                # heartbeat), end the generation here: its deliveries go stale, its leases return.
                silent = time.monotonic() - self.heartbeat_ok
                if silent > lease_timeout / 2 and self._owner is not None:
                    self.end_generation(f"no heartbeat succeeded for {silent:.1f} s (lease_timeout "
                                        f"{lease_timeout:g} s): {exc}")

    # ---- fault seam ---------------------------------------------------------------
    def sever(self, reason: str = "connection severed") -> None:
        """Behave as if the connection dropped: leases return to the queue, the
        generation ends, unwritten publishes become unknown. (Fault injection.)"""
        self.outbox.lose(reason)
        self.end_generation(reason)
        with contextlib.suppress(BrokerError):
            self.ensure_owner()

    def hold_writes(self, hold: bool) -> None:
        """Pause group commits, so confirms stay pending (fault injection)."""
        self.outbox.hold(hold)

    def fail_heartbeats(self, seconds: float) -> None:
        """Make every heartbeat fail for *seconds* (fault injection, through ``transport_of``)."""
        self.heartbeat_fault_until = time.monotonic() + seconds

    # ---- queues ---------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with self.file.checked() as store:
            store.declare(name, dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with self.file.checked() as store:
            store.delete(name, dead_letter)

    def purge_queue(self, name: str) -> int | None:
        with self.file.checked() as store:
            return store.purge(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        with self.file.checked() as store:
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
            with self.file.checked() as store:
                declared = store.declared(source)
        except AckbridgeError:
            return CANNOT_TELL
        if declared is False:
            return DeadLetterTarget(DeadLetter.NONE, "declared with dead_letter=False")
        return DeadLetterTarget(DeadLetter.KNOWN, repr(dead_letter_queue(source)))

    # ---- consuming -------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        with self.file.checked() as store:
            store.probe(source)  # a damaged file fails consume() itself, not only a thread later
        sub = Subscription(subscription, source, prefetch, file=self.file, lease=self._lease,
                           deliver=self.events.deliver, taken_over=self.taken_over,
                           end_generation=self.end_generation, poll_s=self.local_settings.poll_s)
        with self._lock:
            self.subs[subscription] = sub
        sub.thread = self._start(sub.poll_loop, subscription)

    def unsubscribe(self, subscription: str) -> None:
        sub = self.subs.get(subscription)
        if sub is not None:
            self._stop_sub(sub)

    def _stop_sub(self, sub: Subscription) -> None:
        sub.stop.set()
        if sub.thread is not None and sub.thread is not threading.current_thread():
            sub.thread.join(timeout=5)
        with self._lock:
            self.subs.pop(sub.name, None)
            leased, sub.leased = list(sub.leased), set()
            owner = self._owner
        if leased and owner is not None and self.file.is_open and self.file.failure is None:
            try:
                with self.file.checked() as store:
                    store.requeue(owner, leased)
            except BrokerError:
                with self._lock:
                    self._requeue_later.update(leased)
                raise

    def _lease(self, sub: Subscription, limit: int) -> tuple[list[Row], int]:
        """Lease up to *limit* rows for *sub* under the live owner: (rows, their generation)."""
        with self._lock:
            owner = self.ensure_owner()
            rows = self.store.lease(sub.source, owner, limit)
            sub.leased.update(r.id for r in rows)
            return rows, self._generation

    def settle(self, ops: Sequence[WireSettle]) -> None:
        self.file.raise_if_failed()
        with self._lock:
            owner = self._owner
            if owner is None:
                check_ops(ops, None, "this connection holds no owner record: it was closed or its lease lapsed")
            check_ops(ops, self._generation)
            try:
                with self.file.checked() as store:
                    applied = store.settle(owner, settlement_of(ops, store.has_dead_letter))
            except BrokerError:
                # Nothing was settled; the rows stay leased to this owner. Take them out of
                # the prefetch and requeue them once the file takes writes: redelivered.
                self._forget(ops, later=True)
                raise
            if applied:
                self._forget(ops, later=False)
                return
        # Some of these rows were reclaimed: this owner's record lapsed at some point
        # (paused past its lease timeout). Nothing was applied; its generation ends.
        self.taken_over(owner)
        raise lease_lost()

    def extend_lease(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        """Leases belong to this connection's owner record: renew it now (its heartbeat)
        and confirm it still holds them; the seconds until the lease would lapse."""
        self.file.raise_if_failed()
        with self._lock:
            owner = self._owner
            check_generation(generation, self._generation if owner is not None else None)
        assert owner is not None  # check_generation raised otherwise
        with self.file.checked() as store:
            alive = store.heartbeat(owner)
        if not alive:
            self.taken_over(owner)
            raise lease_lost()
        self.heartbeat_ok = time.monotonic()
        return self.local_settings.lease_timeout

    def _forget(self, ops: Sequence[WireSettle], *, later: bool) -> None:
        ids = [int(op.wire_tag) for op in ops]  # type: ignore[call-overload]
        for op, row_id in zip(ops, ids, strict=True):
            if (sub := self.subs.get(op.subscription)) is not None:
                sub.leased.discard(row_id)
        if later:
            self._requeue_later.update(ids)

    # ---- publishing and replies -------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.outbox.publish(seq, destination, message)

    def open_reply_inbox(self) -> str:
        inbox = f"ackbridge.reply.{uuid.uuid4().hex}"
        with self.file.checked() as store:
            store.declare(inbox, False)
        self._start(lambda: inbox_loop(inbox, file=self.file, reply=self.events.reply,
                                       generation=lambda: self._generation, end_generation=self.end_generation,
                                       poll_s=self.local_settings.poll_s), "inbox")
        return inbox
