"""The synchronous client: connect, publish with confirms, consume and settle.

Thread-safe: deliveries may be settled, and messages published, from any
thread. Transport events arrive on the transport's own thread(s).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ackbridge import labels as labels_mod
from ackbridge._base import (
    HANDLER_OWNS,
    ConnectionBase,
    DeliveryBase,
    drop_older_than,
    handler_failed,
    next_flush_wait,
    prepare_publish,
)
from ackbridge.capabilities import Verb
from ackbridge.errors import AckbridgeError, ConfigurationError, InvalidLabelError, InvalidOptionError
from ackbridge.labels import AckCollector, AggregatedAcks, LabelAck, check_request
from ackbridge.messages import ConfirmOutcome, InboundMessage, WireSettle, WireVerb, unknown
from ackbridge.settlement import Ledger, Record
from ackbridge.transport import Transport
from ackbridge.urls import BrokerURL

log = logging.getLogger("ackbridge")

#: What a handler consumer is given: a function called with each delivery.
Handler = Callable[["Delivery"], object]


class Confirm:
    """The broker's answer to one publish. Resolves exactly once, by
    ``confirm_timeout`` at the latest (then as unknown)."""

    # No per-confirm Event or Lock: waiting uses the publisher's condition, so a
    # publish costs one lock round-trip (this is the hot path).
    __slots__ = ("_acks", "_callbacks", "_deadline", "_outcome", "_publisher", "correlation_id", "message_id",
                 "seq")

    def __init__(self, publisher: Publisher, seq: int, message_id: str | None, correlation_id: str | None,
                 deadline: float) -> None:
        self._publisher = publisher
        self.seq = seq
        self.message_id = message_id
        self.correlation_id = correlation_id
        self._deadline = deadline
        self._outcome: ConfirmOutcome | None = None
        self._callbacks: list[Callable[[Confirm], None]] | None = None
        self._acks: _AckWaiter | None = None

    def done(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> ConfirmOutcome | None:
        return self._outcome

    def add_done_callback(self, callback: Callable[[Confirm], None]) -> None:
        with self._publisher._cond:
            if self._outcome is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(self)

    def result(self, timeout: float | None = None) -> ConfirmOutcome:
        """Wait for the outcome. ``timeout`` bounds this wait only; on expiry
        TimeoutError is raised and the confirm stays pending."""
        publisher = self._publisher
        end = None if timeout is None else time.monotonic() + timeout
        with publisher._cond:
            publisher._waiters += 1
            try:
                while self._outcome is None:
                    now = time.monotonic()
                    if now >= self._deadline:
                        publisher._expire_locked()
                        continue
                    if end is not None and now >= end:
                        raise TimeoutError(f"publish {self.seq} not confirmed within {timeout} s")
                    left = self._deadline - now if end is None else min(self._deadline, end) - now
                    publisher._cond.wait(min(left, 1.0))
            finally:
                publisher._waiters -= 1
        return self._outcome

    def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        """The aggregated labelled acknowledgements this publish requested."""
        if self._acks is None:
            raise InvalidLabelError("this publish requested no acknowledgements (use requested_acks=...)")
        return self._acks.wait(timeout)

    def __repr__(self) -> str:
        state = self._outcome.status.value if self._outcome else "pending"
        return f"<Confirm seq={self.seq} id={self.message_id!r} {state}>"


class _AckWaiter:
    def __init__(self, collector: AckCollector, cond: threading.Condition) -> None:
        self.collector = collector
        self.cond = cond

    def wait(self, timeout: float | None) -> AggregatedAcks:
        limit = self.collector.deadline
        if timeout is not None:
            limit = min(limit, time.monotonic() + timeout)
        with self.cond:
            while not self.collector.complete:
                left = limit - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
        return self.collector.result()


class Delivery(DeliveryBase):
    """A received message. Settle it exactly once: ack, requeue/nack or reject."""

    __slots__ = ("_consumer",)

    def __init__(self, record: Record, broker: str, consumer: Consumer) -> None:
        # Slots set here rather than through super().__init__: one call less per message.
        self._record = record
        self.broker = broker
        self._consumer = consumer

    def ack(self) -> None:
        self._consumer._settle(self, WireVerb.ACK)

    def requeue(self) -> None:
        self._consumer._settle(self, WireVerb.REQUEUE)

    def nack(self, requeue: bool = True) -> None:
        self._consumer._settle(self, WireVerb.REQUEUE if requeue else WireVerb.REJECT)

    def reject(self) -> None:
        self._consumer._settle(self, WireVerb.REJECT)

    def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> Confirm:
        """Issue a labelled acknowledgement this message's publisher requested."""
        return self._consumer._connection._issue_ack(self, label, status, payload, internal=False)


class Consumer:
    """Deliveries from one source. Iterate it, or call :meth:`get`; or, when it
    was made with a ``handler``, the handler is called with each delivery."""

    def __init__(self, connection: Connection, subscription: str, source: str, ledger: Ledger,
                 conflate_ms: float, handler: Handler | None = None) -> None:
        self._connection = connection
        self._handler = handler
        # The thread running the handler right now (the transport's): close() from
        # inside the handler must not wait for that thread to unsubscribe.
        self._handler_thread: int | None = None
        self.subscription = subscription
        self.source = source
        self._ledger = ledger
        self._lock = threading.RLock()
        self._ready: deque[Delivery] = deque()
        self._cond = threading.Condition(self._lock)
        # Ops leave the ledger in order under _lock, wait here, and go on the wire
        # under _send_lock, so no thread holds _lock across transport I/O (the
        # transport's thread needs _lock to hand over the next delivery).
        self._outbox: deque[WireSettle] = deque()
        self._send_lock = threading.Lock()
        self._getters = 0
        self._closed = False
        self._timer: threading.Thread | None = None
        if conflate_ms > 0:
            self._timer = threading.Thread(target=self._flush_on_time, name=f"ackbridge-flush-{subscription}",
                                           daemon=True)
            self._timer.start()

    # ---- application side ---------------------------------------------------
    def get(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery, or None when *timeout* passes (or the consumer closes)."""
        if self._handler is not None:
            raise ConfigurationError(HANDLER_OWNS)
        ready = self._ready
        if ready:
            try:
                return ready.popleft()  # deque.popleft is atomic: no lock when one is waiting
            except IndexError:
                pass
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._getters += 1
            try:
                while not ready:
                    if self._closed:
                        return None
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
        """Ack every undecided delivery received up to and including *delivery*."""
        self._connection.capabilities.require(Verb.CUMULATIVE_ACK)
        with self._lock:
            self._queue(self._ledger.ack_through(delivery._record))
        self._push()

    def flush(self) -> None:
        """Put every conflated ack on the wire now."""
        with self._lock:
            self._queue(self._ledger.flush())
        self._push()

    @property
    def unsettled(self) -> int:
        with self._lock:
            return self._ledger.unsettled

    def close(self) -> None:
        """Flush decided acks and stop; undecided deliveries return to the broker."""
        with self._cond:
            if self._closed:
                return
            self._queue(self._ledger.flush())
            self._closed = True
            self._ready.clear()
            self._cond.notify_all()
        if self._handler_thread == threading.get_ident():
            # Called by the handler on the transport's thread, which the unsubscribe
            # below may wait for: finish on another thread.
            threading.Thread(target=self._finish_close, name=f"ackbridge-close-{self.subscription}",
                             daemon=True).start()
            return
        self._finish_close()

    def _finish_close(self) -> None:
        try:
            self._push()
        except AckbridgeError:
            pass  # the connection is gone; the broker will redeliver
        self._connection._drop_consumer(self)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------
    def _settle(self, delivery: Delivery, verb: WireVerb) -> None:
        if verb is WireVerb.REQUEUE:
            self._connection.capabilities.require(Verb.REQUEUE)
        elif verb is WireVerb.REJECT:
            self._connection.capabilities.require(Verb.REJECT)
        outbox = self._outbox
        with self._lock:
            ops = self._ledger.settle(delivery._record, verb)
            # The per-message path: nothing queued ahead and the sender free, so
            # these go straight out. _send_lock is taken before _lock is released:
            # whatever is decided after this joins the outbox and goes out after it.
            direct = bool(ops) and not outbox and self._send_lock.acquire(blocking=False)
            if ops and not direct:
                outbox.extend(ops)
        if direct:
            try:
                self._connection._transport.settle(ops)
            finally:
                self._send_lock.release()
        if outbox:
            self._push()

    def _queue(self, ops: list[WireSettle]) -> None:
        # Called with _lock held: the outbox keeps the ledger's order.
        if ops:
            self._outbox.extend(ops)

    def _push(self, *, wait: bool = True) -> None:
        """Put queued ops on the wire, in order, from whichever thread gets _send_lock.

        With ``wait=False`` (the transport's own thread, which must never block on
        an application thread waiting for it) a busy sender is left to send them:
        it re-checks the outbox after releasing the lock. A stale op raises in the
        thread that sends it; nothing stale reaches the wire either way.
        """
        outbox = self._outbox
        while outbox:
            if not self._send_lock.acquire(blocking=wait):
                return
            try:
                # Only the holder of _send_lock pops, so len() items are there to take.
                count = len(outbox)
                ops = [outbox.popleft()] if count == 1 else [outbox.popleft() for _ in range(count)]
                if ops:
                    self._connection._transport.settle(ops)
            finally:
                self._send_lock.release()

    def _on_message(self, message: InboundMessage) -> None:
        handler = self._handler
        reject: list[WireSettle] = []
        with self._lock:
            if self._closed:
                return
            record = self._ledger.receive_simple(message)
            if record is None:
                admission = self._ledger.receive(message)
                if admission.new_generation:
                    # It may arrive before generation_ended does.
                    drop_older_than(self._ready, message.generation)
                reject = admission.reject
                self._queue(reject)
                record = admission.record
            delivery = None if record is None else Delivery(record, self._connection.broker, self)
            if delivery is not None and handler is None:
                self._ready.append(delivery)
                if self._getters:
                    self._cond.notify()
        if reject:
            self._push(wait=False)
        if handler is not None and delivery is not None:
            self._call_handler(handler, delivery)

    def _call_handler(self, handler: Handler, delivery: Delivery) -> None:
        # On the transport's thread, in delivery order, no lock held: the handler
        # may settle at once (the transport takes settlements from its own thread).
        self._handler_thread = threading.get_ident()
        try:
            handler(delivery)
        except Exception:
            verb = handler_failed(self._connection.capabilities, self.source, delivery)
            if verb is not None:
                try:
                    self._settle(delivery, verb)
                except AckbridgeError as exc:
                    log.warning("ackbridge could not settle the failed message: %s", exc)
        finally:
            self._handler_thread = None

    def _on_generation_end(self, generation: int) -> None:
        with self._lock:
            self._ledger.generation_ended(generation)
            drop_older_than(self._ready, generation + 1)

    @property
    def dead_lettered_by_policy(self) -> int:
        """Poison messages dead-lettered by ``max_deliveries`` instead of handed out."""
        return self._ledger.dead_lettered_by_policy

    def _flush_on_time(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                deadline = self._ledger.deadline()
                if deadline is None:
                    self._cond.wait(0.05)
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(min(left, 0.05))
                    continue
                self._queue(self._ledger.due())
            try:
                self._push()
            except AckbridgeError:
                pass  # stale or lost: the broker redelivers; the next settle reports it


class Publisher:
    """Publishes with confirms; at most ``window`` confirms outstanding."""

    def __init__(self, connection: Connection, window: int, confirm_timeout: float) -> None:
        self._connection = connection
        self.window = window
        self._confirm_timeout = confirm_timeout
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
        self._low_water = window - max(1, window // 4)
        self._pending: dict[int, Confirm] = {}

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def publish(
        self,
        destination: str,
        body: bytes,
        *,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        content_type: str | None = None,
        persistent: bool = True,
        requested_acks: Iterable[str] | None = None,
        ack_timeout: float = 10.0,
    ) -> Confirm:
        """Send one message; returns its :class:`Confirm` without waiting for it.

        Waits (back-pressure) while ``window`` confirms are outstanding.
        """
        conn = self._connection
        wants_labels = requested_acks is not None
        if requested_acks is not None:
            # Check labels and the capability before opening any reply inbox.
            requested_acks = check_request(requested_acks)
            conn.capabilities.require(Verb.LABELLED_ACKS)
        inbox = conn._inbox() if wants_labels and _needs_inbox(requested_acks) else None
        prepared = prepare_publish(
            body, headers=headers, message_id=message_id, correlation_id=correlation_id,
            reply_to=reply_to, content_type=content_type, persistent=persistent,
            requested_acks=requested_acks, inbox=inbox,
        )
        msg = prepared.message
        seq = next(conn._seq)
        confirm = Confirm(self, seq, msg.message_id, msg.correlation_id, 0.0)
        with self._lock:
            while len(self._pending) >= self.window:
                self._wait_for_room_locked()
            confirm._deadline = time.monotonic() + self._confirm_timeout
            self._pending[seq] = confirm
        if wants_labels:
            assert msg.correlation_id is not None
            confirm._acks = conn._collect(msg.correlation_id, prepared.all_labels, ack_timeout, confirm)
        conn._publishers[seq] = self
        try:
            conn._transport.publish(seq, destination, msg)
        except AckbridgeError as exc:
            self._resolved(seq, unknown(str(exc)))
            raise
        return confirm

    def _wait_for_room_locked(self) -> None:
        oldest = next(iter(self._pending.values()))
        left = oldest._deadline - time.monotonic()
        if left <= 0:
            self._expire_locked()
            return
        self._room_waiters += 1
        try:
            self._cond.wait(min(left, 1.0))
        finally:
            self._room_waiters -= 1

    def _expire_locked(self) -> None:
        now = time.monotonic()
        expired = [c for c in self._pending.values() if c._deadline <= now]
        for confirm in expired:
            del self._pending[confirm.seq]
            self._connection._publishers.pop(confirm.seq, None)
            self._settle_locked(confirm, unknown("no answer from the broker within confirm_timeout"))

    def _settle_locked(self, confirm: Confirm, outcome: ConfirmOutcome) -> None:
        confirm._outcome = outcome
        callbacks, confirm._callbacks = confirm._callbacks, None
        if self._waiters or (self._flush_waiters and not self._pending):
            self._cond.notify_all()
        elif self._room_waiters and len(self._pending) <= self._low_water:
            self._cond.notify_all()  # all: a flush() waiter may sit first in the queue
        if callbacks:
            for callback in callbacks:
                callback(confirm)

    def _resolved(self, seq: int, outcome: ConfirmOutcome) -> None:
        with self._lock:
            confirm = self._pending.pop(seq, None)
            if confirm is not None:
                self._settle_locked(confirm, outcome)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every publish so far has an outcome; False if *timeout* passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flush_waiters += 1
            try:
                while self._pending:
                    wait = next_flush_wait(next(iter(self._pending.values()))._deadline, end, time.monotonic())
                    if wait is None:
                        return False
                    if wait == 0.0:
                        self._expire_locked()
                        continue
                    self._cond.wait(wait)
            finally:
                self._flush_waiters -= 1
        return True


def _needs_inbox(requested: Iterable[str] | None) -> bool:
    return requested is not None and any(label != labels_mod.BROKER_PERSISTED for label in requested)


class Connection(ConnectionBase):
    """One broker connection (one transport). Use as a context manager."""

    def __init__(self, url: BrokerURL, transport_type: type[Transport], options: Mapping[str, Any],
                 transport_options: Mapping[str, Any]) -> None:
        self.url = url
        self._options = dict(options)
        self._transport = transport_type(url, transport_options, self)
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._consumers: dict[str, Consumer] = {}
        self._publishers: dict[int, Publisher] = {}
        self._default_publisher: Publisher | None = None
        self._inbox_address: str | None = None
        self._collect_cond = threading.Condition()
        self._collectors: dict[str, AckCollector] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<ackbridge.Connection {self.url.redacted}>"

    def open(self) -> Connection:
        self._transport.open()
        return self

    def close(self) -> None:
        if self._closed:
            return
        for consumer in list(self._consumers.values()):
            consumer.close()
        for publisher in {id(p): p for p in self._publishers.values()}.values():
            publisher.flush(timeout=5.0)
        self._closed = True
        self._transport.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- public API -----------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._transport.declare_queue(name, dead_letter=dead_letter)

    def consume(self, source: str, *, prefetch: int | None = None, conflate_count: int | None = None,
                conflate_ms: float | None = None, max_deliveries: int | None = None,
                handler: Handler | None = None) -> Consumer:
        """Subscribe to *source*. Without *handler*, take deliveries with get() or by
        iterating. With it, ``handler(delivery)`` is called for each delivery, one at
        a time in arrival order, on the transport's own thread (no hand-off between
        threads: the fastest way to consume). The handler settles the delivery (now
        or later, from any thread) and must return quickly: while it runs, this
        connection's I/O waits. If it raises, its unsettled delivery is rejected
        (dead-lettered), or requeued where the broker cannot reject."""
        if handler is not None and not callable(handler):
            raise InvalidOptionError(f"handler must be callable, not {type(handler).__name__}")
        opts = _consumer_options(self._options, prefetch, conflate_count, conflate_ms, max_deliveries)
        if opts["max_deliveries"] is not None:
            self.capabilities.require(Verb.DELIVERY_COUNT)
            self.capabilities.require(Verb.REJECT)
        subscription = f"sub-{uuid.uuid4().hex[:12]}"
        ledger = Ledger(subscription, self.capabilities, conflate_count=opts["conflate_count"],
                        conflate_ms=opts["conflate_ms"], max_deliveries=opts["max_deliveries"])
        consumer = Consumer(self, subscription, source, ledger, opts["conflate_ms"], handler)
        with self._lock:
            self._consumers[subscription] = consumer
        self._transport.subscribe(subscription, source, prefetch=opts["prefetch"])
        return consumer

    def publisher(self, *, window: int | None = None, confirm_timeout: float | None = None) -> Publisher:
        opts = _publisher_options(self._options, window, confirm_timeout)
        return Publisher(self, opts["window"], opts["confirm_timeout"])

    def publish(self, destination: str, body: bytes, **kwargs: Any) -> Confirm:
        """Publish through the connection's default publisher."""
        if self._default_publisher is None:
            self._default_publisher = self.publisher()
        return self._default_publisher.publish(destination, body, **kwargs)

    def flush(self, timeout: float | None = None) -> bool:
        if self._default_publisher is None:
            return True
        return self._default_publisher.flush(timeout)

    # ---- TransportEvents --------------------------------------------------------
    def deliver(self, subscription: str, message: InboundMessage) -> None:
        consumer = self._consumers.get(subscription)
        if consumer is not None:
            consumer._on_message(message)

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        # dict.pop is atomic under the GIL; no lock on the per-message path.
        publisher = self._publishers.pop(seq, None)
        if publisher is not None:
            publisher._resolved(seq, outcome)

    def generation_ended(self, generation: int, reason: str) -> None:
        for consumer in list(self._consumers.values()):
            consumer._on_generation_end(generation)

    def reply(self, message: InboundMessage) -> None:
        ack = labels_mod.parse_reply(message)
        if ack is None or message.correlation_id is None:
            return
        self._add_ack(message.correlation_id, ack)

    # ---- internals -------------------------------------------------------------
    def _drop_consumer(self, consumer: Consumer) -> None:
        with self._lock:
            self._consumers.pop(consumer.subscription, None)
        try:
            self._transport.unsubscribe(consumer.subscription)
        except AckbridgeError:
            pass  # connection already gone: nothing left to cancel

    def _inbox(self) -> str:
        with self._lock:
            if self._inbox_address is None:
                self._inbox_address = self._transport.open_reply_inbox()
            return self._inbox_address

    def _collect(self, correlation_id: str, labels: tuple[str, ...], timeout: float,
                 confirm: Confirm) -> _AckWaiter:
        self.capabilities.require(Verb.LABELLED_ACKS)
        collector = AckCollector(correlation_id, labels, time.monotonic() + timeout)
        with self._collect_cond:
            self._collectors[correlation_id] = collector
        if labels_mod.BROKER_PERSISTED in labels:
            confirm.add_done_callback(
                lambda c: self._add_ack(correlation_id, LabelAck(
                    labels_mod.BROKER_PERSISTED,
                    labels_mod.confirm_status(c.outcome) if c.outcome else 503,
                    c.outcome.reason if c.outcome and c.outcome.reason else None,
                ))
            )
        return _AckWaiter(collector, self._collect_cond)

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        with self._collect_cond:
            collector = self._collectors.get(correlation_id)
            if collector is None or not collector.add(ack):
                return
            if collector.complete:
                del self._collectors[correlation_id]
            self._collect_cond.notify_all()

    def _issue_ack(self, delivery: DeliveryBase, label: str, status: int, payload: Any, *,
                   internal: bool) -> Confirm:
        reply = _reply_for(delivery, label, status, payload, internal)
        return self.publish(delivery.reply_to or "", reply.body, headers=reply.headers,
                            correlation_id=reply.correlation_id, content_type=reply.content_type,
                            persistent=False)


def _reply_for(delivery: DeliveryBase, label: str, status: int, payload: Any, internal: bool) -> Any:
    labels_mod.validate_label(label, issuing=True, internal=internal)
    labels_mod.validate_status(status)
    if label not in delivery.requested_acks:
        raise InvalidLabelError(f"acknowledgement {label!r} was not requested by this message")
    if not delivery.reply_to or not delivery.correlation_id:
        raise InvalidLabelError("this message carries no reply address or correlation id to acknowledge to")
    return labels_mod.build_reply(delivery.correlation_id, label, status, payload)


def _consumer_options(base: Mapping[str, Any], prefetch: int | None, conflate_count: int | None,
                      conflate_ms: float | None, max_deliveries: int | None) -> dict[str, Any]:
    from ackbridge.options import CORE_OPTIONS, resolve_options

    given = {k: v for k, v in base.items() if k in {"prefetch", "conflate_count", "conflate_ms", "max_deliveries"}}
    overrides = {"prefetch": prefetch, "conflate_count": conflate_count, "conflate_ms": conflate_ms,
                 "max_deliveries": max_deliveries}
    given.update({k: v for k, v in overrides.items() if v is not None})
    return resolve_options(CORE_OPTIONS, given, owner="consume()")


def _publisher_options(base: Mapping[str, Any], window: int | None, confirm_timeout: float | None) -> dict[str, Any]:
    from ackbridge.options import CORE_OPTIONS, resolve_options

    given = {k: v for k, v in base.items() if k in {"window", "confirm_timeout"}}
    if window is not None:
        given["window"] = window
    if confirm_timeout is not None:
        given["confirm_timeout"] = confirm_timeout
    return resolve_options(CORE_OPTIONS, given, owner="publisher()")

