"""The synchronous client: connect, publish with confirms, consume and settle.

Thread-safe: deliveries may be settled, and messages published, from any
thread. Transport events arrive on the transport's own thread(s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from ackbridge import engine
from ackbridge import handles as handles_mod
from ackbridge import labels as labels_mod
from ackbridge._base import ConnectionBase, DeliveryBase, EventRouter
from ackbridge.capabilities import Topology
from ackbridge.engine import BatchResult
from ackbridge.errors import AckbridgeError
from ackbridge.keywords import ConsumeOptions, PublisherOptions
from ackbridge.labels import LabelAck
from ackbridge.messages import QueueInfo, WireVerb
from ackbridge.publishing import PublishOptions
from ackbridge.sync_consumer import Consumer, Delivery, Handler
from ackbridge.sync_publisher import Confirm, Publisher, _AckWaiter
from ackbridge.transport import SyncTransport
from ackbridge.urls import BrokerURL

__all__ = ["Confirm", "Connection", "Consumer", "Delivery", "Handler", "Publisher"]


class Connection(ConnectionBase):
    """One broker connection (one transport), made by :func:`ackbridge.connect`.

    Use it as a context manager; it is thread-safe.
    """

    _transport: SyncTransport

    def __init__(self, url: BrokerURL, transport_type: type[SyncTransport], options: Mapping[str, Any],
                 transport_options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self._lock = threading.Lock()
        self._consumers: dict[str, Consumer] = {}
        self._publishers: dict[int, Publisher] = {}
        self._default_publisher: Publisher | None = None
        self._collect_cond = threading.Condition()
        # The transport's events go to a router, not to this object: the callbacks
        # are not part of the public API.
        events = EventRouter(self._consumers, self._publishers, self._observer, self._on_reply)
        self._transport = transport_type(url, transport_options, events)

    def __repr__(self) -> str:
        return f"<ackbridge.Connection {self.url.redacted}>"

    def open(self) -> Connection:
        """Open the transport (``connect`` calls this); returns the connection."""
        self._transport.open()
        return self

    def close(self, *, leave_unsettled: bool = False) -> None:
        """Close every consumer, flush every publisher (up to 5 s), close the transport.

        Undecided deliveries return to the broker. With ``leave_unsettled=True``
        (brokers with connection-free acks only, else UnsupportedVerbError before
        anything is closed) the deliveries the application took are left to the
        broker instead, for another connection to settle by handle
        (:meth:`settle_handles`) or the broker to redeliver after its own timeout;
        what was received and never handed out is still requeued."""
        if self._closed:
            return
        if leave_unsettled:
            self.capabilities.require_connection_free_acks()
            self._transport.leave_unsettled()
            for consumer in list(self._consumers.values()):
                consumer._release_untaken()
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
        """Create queue *name* (durable) if it does not exist; with *dead_letter*, also its
        dead-letter companion, where rejected messages go. Declaring again is harmless."""
        self._transport.declare_queue(name, dead_letter=dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Delete queue *name* with its messages (and its dead-letter companion with
        *dead_letter*). Raises UnsupportedVerbError where the broker cannot."""
        self.capabilities.require_topology(Topology.DELETE_QUEUE)
        self._transport.delete_queue(name, dead_letter=dead_letter)

    def purge_queue(self, name: str) -> int | None:
        """Drop the ready messages of *name*; return how many, where the broker tells.
        Raises UnsupportedVerbError where the broker cannot."""
        self.capabilities.require_topology(Topology.PURGE_QUEUE)
        return self._transport.purge_queue(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        """Depth, consumers and dead-letter companion of *name*, where the broker tells.
        Raises BrokerError if the queue does not exist, UnsupportedVerbError where the
        broker tells nothing."""
        self.capabilities.require_topology(Topology.INSPECT_QUEUE)
        return self._transport.inspect_queue(name)

    def consume(self, source: str, *, handler: Handler | None = None,
                **options: Unpack[ConsumeOptions]) -> Consumer:
        """Subscribe to *source*. Without *handler*, take deliveries with get() or by
        iterating. With it, ``handler(delivery)`` is called for each delivery, one at
        a time in arrival order, on the transport's own thread (no hand-off between
        threads: the fastest way to consume). The handler settles the delivery (now
        or later, from any thread) and must return quickly: while it runs, this
        connection's I/O waits. If it raises, its unsettled delivery is rejected
        (dead-lettered), or requeued where the broker cannot reject.

        ``dedupe_window=N``: a delivery whose message id was acked within the last N
        acked ids is acked and not handed out (``duplicates_dropped`` counts them).
        ``on_gap``: loss detection on messages stamped by ``publisher(sequence=True)``:
        ``"warn"`` (a log warning), ``"raise"`` (get() raises DataLossError) or a
        callable ``on_gap(producer_id, missing_numbers)``; ``gaps`` and ``missing``
        count and list them."""
        plan = self._plan_consumer(source, handler, options)
        consumer = Consumer(self, plan.subscription, source, plan.ledger, plan.conflate_ms, handler, plan.guard)
        with self._lock:
            self._consumers[plan.subscription] = consumer
        self._transport.subscribe(plan.subscription, source, prefetch=plan.prefetch)
        return consumer

    def publisher(self, **options: Unpack[PublisherOptions]) -> Publisher:
        """A publisher with its own window of unconfirmed publishes; *options* are
        :class:`~ackbridge.keywords.PublisherOptions` (unset ``window`` and
        ``confirm_timeout``: the connection's).

        With ``retransmit=True`` a publish whose outcome is unknown is sent again,
        with the same message id (one is assigned when none was given), in order,
        after a back-off; refused is never sent again. Its confirm resolves once,
        with the final outcome and ``outcome.attempts``; each attempt waits
        ``confirm_timeout`` for its answer. ``sequence=True`` stamps
        ``ackbridge-producer`` and ``ackbridge-seq`` (1, 2, 3...) on every message
        for consumers' loss detection (``consume(on_gap=...)``).
        """
        return Publisher(self, *engine.plan_publisher(self._options, options))

    def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> Confirm:
        """Publish through the connection's default publisher (see :meth:`Publisher.publish`)."""
        if self._default_publisher is None:
            self._default_publisher = self.publisher()
        return self._default_publisher.publish(destination, body, **options)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every publish of the default publisher has its outcome; False if
        *timeout* passed first."""
        if self._default_publisher is None:
            return True
        return self._default_publisher.flush(timeout)

    def settle_handles(self, handles: Iterable[str], verb: WireVerb = WireVerb.ACK) -> BatchResult:
        """Settle deliveries by their ack handles (``delivery.ack_handle``), whichever
        connection received them; returns once the settlements are flushed to the
        broker. ``verb``: ack, or requeue where the broker requeues natively. A handle
        given twice is settled once (counted in ``refused``). Raises
        UnsupportedVerbError before anything is sent on a broker whose acks are bound
        to the receiving connection (see :mod:`ackbridge.handles`)."""
        unique, result = handles_mod.plan_settle(self.capabilities, handles, verb)
        if unique:
            self._transport.settle_handles(unique, verb)
        return result

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
        with self._collect_cond:
            collector = self._acks.open(self.capabilities, correlation_id, labels, timeout)
        if labels_mod.BROKER_PERSISTED in labels:
            confirm.add_done_callback(lambda c: self._add_ack(correlation_id, engine.persisted_ack(c.outcome)))
        return _AckWaiter(collector, self._collect_cond)

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        with self._collect_cond:
            if self._acks.add(correlation_id, ack):
                self._collect_cond.notify_all()

    def issue_ack(self, delivery: DeliveryBase, label: str, status: int = 200, payload: Any = None, *,
                  reserved: bool = False) -> Confirm:
        """Send the labelled acknowledgement *label* for *delivery* to its publisher.

        Applications use :meth:`Delivery.acknowledge`; ``reserved=True`` lets an
        integration issue a reserved label it owns (the Spark source's
        ``spark-committed``)."""
        destination, body, options = self._reply(delivery, label, status, payload, reserved)
        return self.publish(destination, body, **options)
