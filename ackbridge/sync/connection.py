"""The synchronous client: connect, publish with confirms, consume and settle.

Thread-safe: deliveries may be settled, and messages published, from any
thread. Transport events arrive on the transport's own thread(s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from ackbridge import contract
from ackbridge.capabilities import Topology
from ackbridge.engine import handles as handles_mod
from ackbridge.engine import plans
from ackbridge.engine.connection import ConnectionBase, persisted_ack
from ackbridge.engine.consumer import DeliveryBase
from ackbridge.errors import AckbridgeError
from ackbridge.kernel import labels as labels_mod
from ackbridge.kernel.labels import LabelAck
from ackbridge.kernel.settlement import BatchResult
from ackbridge.keywords import ConsumeOptions, PublisherOptions, PublishOptions
from ackbridge.messages import QueueInfo, WireVerb
from ackbridge.options import ConnectionSettings
from ackbridge.sync.consumer import Consumer, Delivery, Handler
from ackbridge.sync.publisher import Confirm, Publisher, _AckWaiter
from ackbridge.transport import SyncTransport
from ackbridge.urls import BrokerURL

__all__ = ["Confirm", "Connection", "Consumer", "Delivery", "Handler", "Publisher"]


class Connection(ConnectionBase[SyncTransport, Consumer, Publisher], contract.Connection):
    """One broker connection (one transport), made by :func:`ackbridge.connect`.

    Use it as a context manager; it is thread-safe.
    """

    def __init__(self, url: BrokerURL, transport_type: type[SyncTransport], options: Mapping[str, Any],
                 transport_options: Mapping[str, Any], *, messaging_system: str = "",
                 client_loggers: tuple[str, ...] = ()) -> None:
        super().__init__(url, options, messaging_system=messaging_system, client_loggers=client_loggers,
                         settings=ConnectionSettings.from_options(transport_options))
        self._lock = threading.Lock()
        self._collect_cond = threading.Condition()
        self._transport = transport_type(url, transport_options, self._router)

    def __repr__(self) -> str:
        return f"<ackbridge.Connection {self.url.redacted}>"

    def open(self) -> Connection:
        """Open the transport (``connect`` calls this); returns the connection."""
        self._transport.open()
        return self

    def close(self, *, leave_unsettled: bool = False) -> None:
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
        self._transport.declare_queue(name, dead_letter=dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self.capabilities.require_topology(Topology.DELETE_QUEUE)
        self._transport.delete_queue(name, dead_letter=dead_letter)

    def purge_queue(self, name: str) -> int | None:
        self.capabilities.require_topology(Topology.PURGE_QUEUE)
        return self._transport.purge_queue(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        self.capabilities.require_topology(Topology.INSPECT_QUEUE)
        return self._transport.inspect_queue(name)

    def consume(self, source: str, *, handler: Handler | None = None,
                **options: Unpack[ConsumeOptions]) -> Consumer:
        plan = self._plan_consumer(source, handler, options)
        consumer = Consumer(self, plan.subscription, source, plan.ledger, plan.conflate_ms, handler, plan.guard)
        with self._lock:
            self._consumers[plan.subscription] = consumer
        self._transport.subscribe(plan.subscription, source, prefetch=plan.prefetch)
        return consumer

    def publisher(self, **options: Unpack[PublisherOptions]) -> Publisher:
        return Publisher(self, *plans.plan_publisher(self._options, options))

    def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> Confirm:
        if self._default_publisher is None:
            self._default_publisher = self.publisher()
        return self._default_publisher.publish(destination, body, **options)

    def flush(self, timeout: float | None = None) -> bool:
        if self._default_publisher is None:
            return True
        return self._default_publisher.flush(timeout)

    def settle_handles(self, handles: Iterable[str], verb: WireVerb = WireVerb.ACK) -> BatchResult:
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
            confirm.add_done_callback(lambda c: self._add_ack(correlation_id, persisted_ack(c.outcome)))
        return _AckWaiter(collector, self._collect_cond)

    def _ask_dead_letter(self, source: str) -> None:
        try:
            target = self._transport.dead_letter_target(source)
        except Exception as exc:  # a plugin's check must never stop consume()
            self._dead_letter_untold(source, exc)
            return
        self._learned_dead_letter(source, target)

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        with self._collect_cond:
            if self._acks.add(correlation_id, ack):
                self._collect_cond.notify_all()

    def issue_ack(self, delivery: DeliveryBase, label: str, status: int = 200, payload: Any = None, *,
                  reserved: bool = False) -> Confirm:
        destination, body, options = self._reply(delivery, label, status, payload, reserved)
        return self.publish(destination, body, **options)
