"""The sync face's consumer and its deliveries (see :mod:`ackbridge.sync.connection`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ackbridge import contract
from ackbridge.engine import handles
from ackbridge.engine.consumer import HANDLER_OWNS, ConsumerBase, DeliveryBase, settle_failed
from ackbridge.engine.draining import Drain, DrainResult, report
from ackbridge.engine.leases import extended
from ackbridge.errors import AckbridgeError, ConfigurationError, StaleDeliveryError
from ackbridge.kernel.guaranteed import ConsumerGuard
from ackbridge.kernel.interruptions import DRAIN_S, interrupted
from ackbridge.kernel.settlement import BatchResult, Ledger, Record
from ackbridge.messages import ACK, InboundMessage, WireSettle, WireVerb

if TYPE_CHECKING:
    from ackbridge.sync.connection import Connection
    from ackbridge.sync.publisher import Confirm

log = logging.getLogger("ackbridge")

#: What a handler consumer is given: a function called with each delivery.
Handler = Callable[["Delivery"], object]


class Delivery(DeliveryBase, contract.Delivery):
    """A received message. Settle it exactly once: ack, requeue/nack or reject."""

    __slots__ = ()
    _consumer: Consumer

    def __init__(self, record: Record, broker: str, consumer: Consumer) -> None:
        # Slots set here rather than through super().__init__: one call less per message.
        self._record = record
        self.broker = broker
        self._consumer = consumer

    def ack(self) -> None:
        self._consumer._settle(self, ACK)

    def requeue(self) -> None:
        self._consumer._settle(self, WireVerb.REQUEUE)

    def nack(self, requeue: bool = True) -> None:
        self._consumer._settle(self, WireVerb.REQUEUE if requeue else WireVerb.REJECT)

    def reject(self) -> None:
        self._consumer._settle(self, WireVerb.REJECT)

    @contextlib.contextmanager
    def process(self, *, requeue: bool = False) -> Iterator[Delivery]:
        try:
            yield self
        except Exception:
            if not self.settled and not self.stale:
                self.requeue() if requeue else self.reject()
            raise
        except BaseException:
            # Ctrl-C, sys.exit, a generator closed early: the work was stopped, not
            # failed, so the message goes back to the queue (see interruptions.py).
            verb = interrupted(self._consumer._connection.capabilities, self)
            if verb is not None:
                with contextlib.suppress(AckbridgeError):
                    self._consumer._settle(self, verb)
            raise
        if not self.settled and not self.stale:
            self.ack()

    def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> Confirm:
        return self._consumer._connection.issue_ack(self, label, status, payload)

    def extend(self) -> float | None:
        return self._consumer._extend(self)


class Consumer(ConsumerBase, contract.Consumer):
    """Deliveries from one source. Iterate it, or call :meth:`get`; or, when it
    was made with a ``handler``, the handler is called with each delivery, in
    arrival order, on a thread of its own (``ackbridge-handler-<subscription>``).

    The handler never runs on the transport's I/O thread: a slow handler there
    would hold back heartbeats and settlements until the broker dropped the
    connection (and every ack with it). ``close()`` lets the delivery the handler
    holds finish (up to ``DRAIN_S``) before it cancels the subscription."""

    _connection: Connection

    def __init__(self, connection: Connection, subscription: str, source: str, ledger: Ledger,
                 conflate_ms: float, handler: Handler | None = None, guard: ConsumerGuard | None = None) -> None:
        super().__init__(subscription, source, ledger, guard)
        self._connection = connection
        self._broker = connection.broker  # read per delivery: one attribute, not two properties
        self._handler = handler
        self._lock = threading.RLock()
        self._ready: deque[Delivery] = deque()
        self._cond = threading.Condition(self._lock)
        # Ops leave the ledger in order under _lock, wait here, and go on the wire
        # under _send_lock, so no thread holds _lock across transport I/O (the
        # transport's thread needs _lock to hand over the next delivery).
        self._outbox: deque[WireSettle] = deque()
        self._send_lock = threading.Lock()
        self._getters = 0
        self._timer: threading.Thread | None = None
        if conflate_ms > 0:
            self._timer = threading.Thread(target=self._flush_on_time, name=f"ackbridge-flush-{subscription}",
                                           daemon=True)
            self._timer.start()
        self._handler_thread: threading.Thread | None = None
        #: Set once a drain() has closed the consumer (close() meanwhile waits for it).
        self._drain_done: threading.Event | None = None
        self._drain_result = DrainResult()
        if handler is not None:
            self._handler_thread = threading.Thread(target=self._run_handler, args=(handler,),
                                                    name=f"ackbridge-handler-{subscription}", daemon=True)
            self._handler_thread.start()

    # ---- application side ---------------------------------------------------
    def get(self, timeout: float | None = None) -> Delivery | None:
        if self._handler is not None:
            raise ConfigurationError(HANDLER_OWNS)
        ready = self._ready
        if ready:  # the common case, kept free of a second call (benchmarks/instructions.py)
            try:
                return ready.popleft()  # deque.popleft is atomic: no lock when one is waiting
            except IndexError:
                pass
        return self._take(timeout)

    def _take(self, timeout: float | None) -> Delivery | None:
        ready = self._ready
        if ready:
            try:
                return ready.popleft()
            except IndexError:
                pass
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._getters += 1
            try:
                while not ready:
                    if self._closed:
                        return None
                    if self._failure is not None:
                        raise self._failure
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._cond.wait(left)
            finally:
                self._getters -= 1
            return ready.popleft()

    def __iter__(self) -> Iterator[Delivery]:
        while True:
            delivery = self.get()
            if delivery is None:
                return
            yield delivery

    def ack_through(self, delivery: Delivery) -> None:
        with self._lock:
            self._queue(self._decide_through(delivery._record))
            self._cond.notify_all()
        self._push()

    def flush(self) -> None:
        with self._lock:
            self._queue(self._ledger.flush())
        self._push()

    def settle_batch(self, deliveries: Sequence[Delivery], verb: WireVerb = WireVerb.ACK) -> BatchResult:
        with self._lock:
            ops, result = self._plan_batch(deliveries, verb)
            self._queue(ops)
            self._cond.notify_all()
        self._push()
        return result

    def drain(self, timeout: float = DRAIN_S) -> DrainResult:
        with self._cond:
            closing = self._closed
            if not closing:
                self._closed = True
                done = self._drain_done = threading.Event()
                drain = Drain(self._ledger, self._ready, timeout, self.source)
                self._cond.notify_all()
        if closing:
            self._await_drain(self._drain_done)  # another drain() (or close()) is under way
            return self._drain_result
        runner = self._handler_thread
        if runner is not None and runner is not threading.current_thread():
            runner.join(drain.left())
        try:
            with self._cond:
                # Each settlement notifies while closed (_settle); a generation end empties the ledger.
                while drain.in_flight() and drain.left() > 0:
                    self._cond.wait(drain.left())
                result = self._drain_result = drain.result()
            self._close_ledger()
        finally:
            done.set()
        report(self._ledger, self.source, self._broker, self._connection._transport.generation, result)
        return result

    def _await_drain(self, done: threading.Event | None) -> None:
        # The handler's own thread must not wait: the drain is waiting for it.
        if done is not None and self._handler_thread is not threading.current_thread():
            done.wait()

    def close(self) -> None:
        with self._cond:
            closing = self._closed
            if not closing:
                # Nothing more is handed out; what was received and not handed out goes
                # back to the broker with the subscription.
                self._closed = True
                self._ready.clear()
                self._cond.notify_all()
        if closing:
            self._await_drain(self._drain_done)  # a drain() under way closes it
            return
        runner = self._handler_thread
        if runner is not None and runner is not threading.current_thread():
            # Drain: the delivery the handler holds may still be settled.
            runner.join(DRAIN_S)
            if runner.is_alive():
                log.warning("ackbridge: the handler of %r did not finish within %.0f s of close(); its delivery "
                            "returns to the broker and settling it will raise ConsumerClosedError",
                            self.source, DRAIN_S)
        self._close_ledger()

    def _close_ledger(self) -> None:
        with self._lock:
            self._queue(self._ledger.flush())
            # From here on a settlement raises ConsumerClosedError: the unsubscribe
            # below hands every undecided delivery back to the broker.
            self._ledger.close()
        self._finish_close()

    def _release_untaken(self) -> None:
        """``close(leave_unsettled=True)``: requeue what was received and never handed out."""
        with self._lock:
            self._queue(handles.release_untaken(self._ledger, self._ready))
        with contextlib.suppress(AckbridgeError):  # the connection is gone: the broker redelivers them
            self._push()

    def _finish_close(self) -> None:
        with contextlib.suppress(AckbridgeError):  # the connection is gone; the broker will redeliver
            self._push()
        self._connection._drop_consumer(self)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------
    def _settle(self, delivery: Delivery, verb: WireVerb) -> None:
        outbox = self._outbox
        with self._lock:
            ops = self._decide(delivery._record, verb)
            if self._closed:
                self._cond.notify_all()  # a drain() waits for the deliveries in flight
            # The per-message path: nothing queued ahead and the sender free, so
            # these go straight out. _send_lock is taken before _lock is released:
            # whatever is decided after this joins the outbox and goes out after it.
            direct = bool(ops) and not outbox and self._send_lock.acquire(blocking=False)
            if ops and not direct:
                outbox.extend(ops)
        if direct:
            try:
                self._send(ops, delivery._record)
            finally:
                self._send_lock.release()
        if outbox:
            self._push(mine=delivery._record)

    def _extend(self, delivery: Delivery) -> float | None:
        with self._lock:
            tag, generation = self._check_extend(delivery)
        granted = self._connection._transport.extend_lease(self.subscription, tag, generation)
        extended(self._ledger, self.source)
        return granted

    def _queue(self, ops: list[WireSettle]) -> None:
        # Called with _lock held: the outbox keeps the ledger's order.
        if ops:
            self._outbox.extend(ops)

    def _push(self, *, wait: bool = True, mine: Record | None = None) -> None:
        """Put queued ops on the wire, in order, from whichever thread gets _send_lock.

        With ``wait=False`` (the transport's own thread, which must never block on
        an application thread waiting for it) a busy sender is left to send them:
        it re-checks the outbox after releasing the lock. A stale op raises in the
        thread that sends it (*mine*: the delivery that thread settled, see _send);
        nothing stale reaches the wire either way."""
        outbox = self._outbox
        while outbox:
            if not self._send_lock.acquire(blocking=wait):
                return
            try:
                # Only the holder of _send_lock pops, so len() items are there to take.
                count = len(outbox)
                ops = [outbox.popleft()] if count == 1 else [outbox.popleft() for _ in range(count)]
                if ops:
                    self._send(ops, mine)
            finally:
                self._send_lock.release()

    def _send(self, ops: list[WireSettle], mine: Record | None) -> None:
        # Called holding _send_lock. Refused as stale, *mine* reads undecided again.
        try:
            self._connection._transport.settle(ops)
        except StaleDeliveryError:
            if mine is not None:
                with self._lock:
                    self._undecide(mine, ops)
            raise

    def _on_message(self, message: InboundMessage) -> None:
        reject: list[WireSettle] = []
        with self._lock:
            if self._closed:
                return
            record, reject = self._admit(message)
            if reject:
                self._queue(reject)
            if self._failure is not None:
                self._cond.notify_all()
            if record is not None:
                self._ready.append(Delivery(record, self._broker, self))
                if self._getters:
                    self._cond.notify()
        if reject:
            self._push(wait=False)

    def _run_handler(self, handler: Handler) -> None:
        # The handler's own thread: one delivery at a time, in arrival order, no lock
        # held while it runs. It ends when the consumer closes or fails.
        while True:
            try:
                delivery = self._take(None)
            except AckbridgeError:
                return  # the connection failed for good; close() reports nothing more
            if delivery is None:
                return
            try:
                handler(delivery)
            except Exception:
                verb = self._handler_failed(delivery)
                if verb is not None:
                    try:
                        self._settle(delivery, verb)
                    except AckbridgeError as exc:
                        settle_failed(delivery, exc)
            except BaseException as exc:
                # sys.exit() or the like inside the handler: stop handling, hand the
                # delivery back, never dead-letter it.
                verb = interrupted(self._connection.capabilities, delivery)
                if verb is not None:
                    with contextlib.suppress(AckbridgeError):
                        self._settle(delivery, verb)
                log.warning("ackbridge: the handler of %r raised %s; it stops and the consumer closes",
                            self.source, type(exc).__name__)
                self.close()
                return

    def _on_failure(self, error: AckbridgeError) -> None:
        with self._lock:
            self._failure = error
            self._cond.notify_all()

    def _on_generation_end(self, generation: int) -> None:
        with self._lock:
            self._end_generation(generation)
            self._cond.notify_all()  # what a drain() waited for went stale

    def _flush_on_time(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                wait = self._ledger.flush_wait()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._queue(self._ledger.due())
            with contextlib.suppress(AckbridgeError):  # stale or lost: the broker redelivers;
                self._push()  # the next settle reports it
