"""The sync face's publisher and its confirms (see :mod:`ackbridge.sync.connection`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Unpack

from ackbridge import contract
from ackbridge.engine import plans
from ackbridge.engine.publisher import ConfirmBase, PublisherBase, build_message, left_to_wait, wait_limit
from ackbridge.errors import AckbridgeError
from ackbridge.kernel.labels import AckCollector, AggregatedAcks
from ackbridge.keywords import PublishOptions
from ackbridge.messages import ConfirmOutcome, OutboundMessage, unsent

if TYPE_CHECKING:
    from ackbridge.sync.connection import Connection


class Confirm(ConfirmBase, contract.Confirm):
    """The broker's answer to one publish. Resolves exactly once, by
    ``confirm_timeout`` at the latest (then as unknown)."""

    # No per-confirm Event or Lock: waiting uses the publisher's condition, so a
    # publish costs one lock round-trip (this is the hot path). ConfirmBase's
    # constructor is this face's own.
    __slots__ = ()
    _acks: _AckWaiter | None
    _publisher: Publisher

    def add_done_callback(self, callback: Callable[[Confirm], None]) -> None:
        """Call *callback(confirm)* once the outcome is known (at once if it is)."""
        with self._publisher._cond:
            if self._outcome is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(self)

    def result(self, timeout: float | None = None) -> ConfirmOutcome:
        publisher = self._publisher
        end = None if timeout is None else time.monotonic() + timeout
        with publisher._cond:
            publisher._waiters += 1
            try:
                while self._outcome is None:
                    now = time.monotonic()
                    if now >= self._deadline:
                        publisher._expire()
                        continue
                    if end is not None and now >= end:
                        raise TimeoutError(f"publish {self.seq} not confirmed within {timeout} s")
                    left = self._deadline - now if end is None else min(self._deadline, end) - now
                    publisher._cond.wait(min(left, 1.0))
            finally:
                publisher._waiters -= 1
        return self._outcome

    def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        waiter: _AckWaiter = self._requested_acks()
        return waiter.wait(timeout)


class _AckWaiter:
    def __init__(self, collector: AckCollector, cond: threading.Condition) -> None:
        self.collector = collector
        self.cond = cond

    def wait(self, timeout: float | None) -> AggregatedAcks:
        limit = wait_limit(self.collector.deadline, timeout)
        with self.cond:
            while (left := left_to_wait(self.collector, limit)) is not None:
                self.cond.wait(left)
        return self.collector.result()


class Publisher(PublisherBase, contract.Publisher):
    """Publishes with confirms; at most ``window`` confirms outstanding."""

    _connection: Connection

    def _init_waiting(self) -> None:
        self._retry_at = 0.0
        self._resender: threading.Thread | None = None
        # Enter the C-level lock on the hot path; the Condition shares it for waiting.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # Three kinds of waiter, woken at different moments: a thread waiting for
        # one confirm (result) on every resolution; flush() only when nothing is
        # pending; a publisher blocked by the window only when the window has
        # drained to its low-water mark, so it then sends a burst instead of one
        # message per wake-up (one wake per confirm traded the GIL with the transport
        # thread on every message).
        self._waiters = 0
        self._flush_waiters = 0
        self._room_waiters = 0
        self._low_water = self.window - max(1, self.window // 4)

    def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> Confirm:
        conn = self._connection
        labels = self._labels(options) if options and "requested_acks" in options else None
        inbox = conn._inbox() if labels is not None and plans.needs_inbox(labels) else None
        msg, attempts = build_message(body, options, labels, inbox), None
        if self._guarantee is not None:
            msg, attempts = self._guaranteed(destination, msg)
        seq = next(conn._seq)
        confirm = Confirm(self, seq, msg, attempts)
        if self._observer is not None:  # one check per publish when nothing records
            self._observe(confirm, destination, msg)
        pending, lock = self._pending, self._lock
        lock.acquire()  # acquire/release, not a with block: half the cost, on the per-message path
        try:
            # The usual case first: nothing waits to be sent again, so the window is pending alone.
            if self._retry or self._resending or len(pending) >= self.window:
                while self.in_flight >= self.window:
                    self._wait_for_room_locked()
            confirm._deadline = time.monotonic() + self._confirm_timeout
            pending[seq] = confirm
        finally:
            lock.release()
        if labels is not None:
            assert msg.correlation_id is not None
            confirm._acks = conn._collect(msg.correlation_id, labels, options.get("ack_timeout", 10.0), confirm)
        conn._publishers[seq] = self  # _send inline: this is the per-message path
        try:
            conn._transport.publish(seq, destination, msg)
        except AckbridgeError as exc:
            self._send_failed(seq, exc, False)
        return confirm

    def _send(self, seq: int, destination: str, msg: OutboundMessage, *, again: bool) -> None:
        conn = self._connection
        conn._publishers[seq] = self
        try:
            conn._transport.publish(seq, destination, msg)
        except AckbridgeError as exc:
            self._send_failed(seq, exc, again)

    def _wait_for_room_locked(self) -> None:
        left = self._oldest()._deadline - time.monotonic()
        if left <= 0:
            self._expire()
            return
        self._room_waiters += 1
        try:
            self._cond.wait(min(left, 1.0))
        finally:
            self._room_waiters -= 1

    def _expire(self) -> None:
        """Resolve every confirm whose wait has ended (call with the lock held)."""
        for confirm, outcome in self._take_expired(time.monotonic()):
            self._settle_locked(confirm, outcome)

    def _settle_locked(self, confirm: Confirm, outcome: ConfirmOutcome, *, wake: bool = True) -> None:
        # Nothing to decide or record (no retransmission, no observer): the outcome stands.
        final = outcome if confirm._attempts is None and self._observer is None else self._final(confirm, outcome)
        if final is None:
            self._schedule_retry_locked(confirm)
            return
        confirm._outcome = final
        callbacks, confirm._callbacks = confirm._callbacks, None
        if wake:
            self._wake_locked()
        if callbacks:
            for callback in callbacks:
                callback(confirm)

    def _wake_locked(self) -> None:
        if self._waiters or (self._flush_waiters and not self.in_flight):
            self._cond.notify_all()
        elif self._room_waiters and len(self._pending) <= self._low_water:
            self._cond.notify_all()  # all: a flush() waiter may sit first in the queue

    # ---- retransmission (retransmit=True) --------------------------------------------------
    def _schedule_retry_locked(self, confirm: Confirm) -> None:
        if not self._retry:
            self._retry_at = time.monotonic() + self._backoff.next_delay()
        self._due_retry(confirm)
        self._retry.append(confirm)
        if self._resender is None:
            self._resender = threading.Thread(target=self._resend_loop, name="ackbridge-retransmit", daemon=True)
            self._resender.start()
        self._cond.notify_all()

    def _resend_loop(self) -> None:
        conn = self._connection
        while not conn._closed:
            with self._cond:
                wait = self._retry_at - time.monotonic() if self._retry else 1.0
                if wait > 0:
                    self._cond.wait(min(wait, 1.0))
                    continue
                self._start_resend()
            while self._send_again():  # in the order they were first published
                pass

    def _send_again(self) -> bool:
        """Send the next publish of the retry batch again; False once the batch is done."""
        seq = next(self._connection._seq)
        with self._lock:
            taken = self._next_resend(seq, time.monotonic())
            if taken is None:
                return False
            confirm, attempts = taken
            if attempts is None:
                self._settle_locked(confirm, unsent("not sent again"))
                return True
        self._send(seq, attempts.destination, attempts.message, again=True)
        return True

    def _resolved(self, seq: int, outcome: ConfirmOutcome) -> None:
        with self._lock:
            confirm = self._pending.pop(seq, None)
            if confirm is not None:
                self._settle_locked(confirm, outcome)

    def _resolved_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        with self._lock:
            pending = self._pending
            for seq, outcome in outcomes:
                confirm = pending.pop(seq, None)
                if confirm is not None:
                    self._settle_locked(confirm, outcome, wake=False)
            self._wake_locked()

    def flush(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flush_waiters += 1
            try:
                while (wait := self._flush_wait(end)) is not None:
                    self._cond.wait(wait)
                return not self.in_flight
            finally:
                self._flush_waiters -= 1
