"""An example third-party plugin: ``memory://NAME``, a broker inside one process.

It shows everything a plugin needs: a ``SyncTransport`` that maps verbs to
operations (asyncio is served by the core's thread hand-off), a capability
table (reject is declared unsupported on purpose, so the core raises a clear
error), the generation guard, one fault for the test seam (``sever``), and one
hook registered through the ``ackbridge`` entry-point group. It touches nothing
in the core.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ackbridge.capabilities import Capabilities, ConfirmDurability, Durability, Verb, emulated, native, unsupported
from ackbridge.hookspecs import hookimpl
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import CONFIRMED, InboundMessage, OutboundMessage, WireSettle, WireVerb
from ackbridge.plugins import AdapterSpec
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL

_QUEUES: dict[str, deque[OutboundMessage]] = {}
_LOCK = threading.Lock()
#: Messages handed out before and not settled for good, by id(): held here, so no id is reused meanwhile.
_REDELIVERED: dict[int, OutboundMessage] = {}
_TRANSPORTS: weakref.WeakSet[MemoryTransport] = weakref.WeakSet()
#: Open subscriptions per source queue, over every transport: a publish or a requeue to a
#: queue nobody consumes has no one to pump for.
_CONSUMERS: dict[str, int] = {}

CAPABILITIES = Capabilities(
    broker="memory",
    verbs={
        Verb.ACK: native("dropped from the in-flight table"),
        Verb.REQUEUE: native("put back at the head of the queue"),
        Verb.REJECT: unsupported("the memory broker has no dead-letter queue"),
        Verb.CUMULATIVE_ACK: emulated("one ack per delivery"),
        Verb.CONFIRM: native("immediately"),
        Verb.CONFIRM_REFUSED: unsupported("never refuses"),
        Verb.DELIVERY_COUNT: unsupported("not tracked"),
        Verb.LABELLED_ACKS: unsupported("no reply addresses"),
    },
    confirm_durability=ConfirmDurability(Durability.IN_MEMORY, "the queues live in the process: gone with it"),
)


class MemoryTransport(SyncTransport):
    capabilities = CAPABILITIES

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self._tag = 0
        self._generation = 1
        self._in_flight: dict[int, tuple[str, OutboundMessage]] = {}
        self._subs: dict[str, tuple[str, int]] = {}
        self._owner: dict[int, str] = {}
        #: How many deliveries each subscription holds (its _owner entries), kept as they change:
        #: counting them on every pump made each settle cost as much as everything held.
        self._held: dict[str, int] = {}
        # One thread hands deliveries out at a time, so they arrive in order; a pump asked
        # for meanwhile (another thread, or a handler settling inside deliver) is a rerun.
        self._pump_guard = threading.Lock()
        self._pumping = False
        self._pump_again = False
        with _LOCK:
            _TRANSPORTS.add(self)

    @property
    def generation(self) -> int:
        return self._generation

    def open(self) -> None:
        pass

    def close(self) -> None:
        with _LOCK:
            for source, _ in self._subs.values():
                _consumers_of(source, -1)
            self._subs.clear()
        self._return_in_flight()
        with _LOCK:
            _TRANSPORTS.discard(self)
        _pump_all()

    def _return_in_flight(self, subscription: str | None = None) -> None:
        with _LOCK:
            for tag in sorted(self._in_flight, reverse=True):
                if subscription is None or self._owner.get(tag) == subscription:
                    source, message = self._in_flight.pop(tag)
                    self._release(tag)
                    _REDELIVERED[id(message)] = message
                    _QUEUES.setdefault(source, deque()).appendleft(message)

    def _pump(self) -> None:
        with self._pump_guard:
            if self._pumping:
                self._pump_again = True
                return
            self._pumping = True
        try:
            self._pump_until_idle()
        except BaseException:
            with self._pump_guard:
                self._pumping = False
            raise

    def _pump_until_idle(self) -> None:
        while True:
            with self._pump_guard:
                self._pump_again = False
            # The deliveries are made under the lock, a list per subscription: no tuple per delivery.
            batch: list[tuple[str, list[InboundMessage]]] = []
            with _LOCK:
                generation = self._generation
                for subscription, (source, prefetch) in list(self._subs.items()):
                    held = self._held.get(subscription, 0)
                    queue = _QUEUES.setdefault(source, deque())
                    if held >= prefetch or not queue:
                        continue
                    out: list[InboundMessage] = []
                    for _ in range(min(prefetch - held, len(queue))):
                        message = queue.popleft()
                        self._tag += 1
                        tag = self._tag
                        self._in_flight[tag] = (source, message)
                        self._owner[tag] = subscription
                        out.append(InboundMessage(
                            wire_tag=tag, generation=generation, body=message.body, source=source,
                            headers=message.headers, message_id=message.message_id,
                            redelivered=id(message) in _REDELIVERED))
                    self._held[subscription] = held + len(out)
                    batch.append((subscription, out))
            if not batch:
                with self._pump_guard:  # idle: stop pumping unless asked again meanwhile
                    if not self._pump_again:
                        self._pumping = False
                        return
                continue
            deliver = self.events.deliver
            for subscription, messages in batch:
                for inbound in messages:
                    deliver(subscription, inbound)

    def _release(self, tag: int) -> None:
        """*tag* is no longer held by its subscription (called under _LOCK)."""
        subscription = self._owner.pop(tag, None)
        if subscription is not None:
            self._held[subscription] -= 1

    def sever(self, reason: str) -> None:
        """The fault seam's cut: deliveries return, their generation ends."""
        self._return_in_flight()
        ended, self._generation = self._generation, self._generation + 1
        self.events.generation_ended(ended, reason)
        _pump_all()

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with _LOCK:
            _QUEUES.setdefault(name, deque())

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        with _LOCK:
            if (old := self._subs.get(subscription)) is not None:
                _consumers_of(old[0], -1)
            self._subs[subscription] = (source, prefetch)
            _consumers_of(source, +1)
        self._pump()

    def unsubscribe(self, subscription: str) -> None:
        with _LOCK:
            if (old := self._subs.pop(subscription, None)) is not None:
                _consumers_of(old[0], -1)
        self._return_in_flight(subscription)
        _pump_all()

    def settle(self, ops: Sequence[WireSettle]) -> None:
        requeued = False
        with _LOCK:
            check_ops(ops, self._generation)  # the core's stale rule, re-checked where the race is decided
            for op in ops:
                tag = int(op.wire_tag)  # type: ignore[call-overload]
                source, message = self._in_flight.pop(tag)
                self._release(tag)
                if op.verb is WireVerb.REQUEUE:
                    _REDELIVERED[id(message)] = message
                    _QUEUES[source].appendleft(message)
                    requeued = requeued or _CONSUMERS.get(source, 0) > 0
                else:
                    _REDELIVERED.pop(id(message), None)
        # An ack frees room in this transport's prefetch only; a requeued message may go to any consumer.
        if requeued:
            _pump_all()
        elif self._subs:
            self._pump()

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        with _LOCK:
            _QUEUES.setdefault(destination, deque()).append(message)
            consumed = _CONSUMERS.get(destination, 0) > 0
        self.events.confirm(seq, CONFIRMED)
        if consumed:
            _pump_all()


def _consumers_of(source: str, change: int) -> None:
    """Count a subscription to *source* in or out (called under _LOCK)."""
    count = _CONSUMERS.get(source, 0) + change
    if count > 0:
        _CONSUMERS[source] = count
    else:
        _CONSUMERS.pop(source, None)


def _pump_all() -> None:
    with _LOCK:
        transports = list(_TRANSPORTS)
    for transport in transports:
        transport._pump()


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(name="memory", schemes=("memory",), sync_transport=MemoryTransport,
                         capabilities=CAPABILITIES, description="example: in-process broker"))
