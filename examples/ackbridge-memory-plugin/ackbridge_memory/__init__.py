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
                    self._owner.pop(tag, None)
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
            batch = []
            with _LOCK:
                for subscription, (source, prefetch) in list(self._subs.items()):
                    held = sum(1 for s in self._owner.values() if s == subscription)
                    queue = _QUEUES.setdefault(source, deque())
                    while held < prefetch and queue:
                        message = queue.popleft()
                        self._tag += 1
                        self._in_flight[self._tag] = (source, message)
                        self._owner[self._tag] = subscription
                        batch.append((subscription, self._tag, source, message, id(message) in _REDELIVERED))
                        held += 1
                generation = self._generation
            if not batch:
                with self._pump_guard:  # idle: stop pumping unless asked again meanwhile
                    if not self._pump_again:
                        self._pumping = False
                        return
                continue
            for subscription, tag, source, message, again in batch:
                self.events.deliver(subscription, InboundMessage(
                    wire_tag=tag, generation=generation, body=message.body, source=source,
                    headers=message.headers, message_id=message.message_id, redelivered=again))

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
            self._subs[subscription] = (source, prefetch)
        self._pump()

    def unsubscribe(self, subscription: str) -> None:
        with _LOCK:
            self._subs.pop(subscription, None)
        self._return_in_flight(subscription)
        _pump_all()

    def settle(self, ops: Sequence[WireSettle]) -> None:
        with _LOCK:
            check_ops(ops, self._generation)  # the core's stale rule, re-checked where the race is decided
            for op in ops:
                source, message = self._in_flight.pop(int(op.wire_tag))  # type: ignore[call-overload]
                self._owner.pop(int(op.wire_tag), None)  # type: ignore[call-overload]
                if op.verb is WireVerb.REQUEUE:
                    _REDELIVERED[id(message)] = message
                    _QUEUES[source].appendleft(message)
                else:
                    _REDELIVERED.pop(id(message), None)
        _pump_all()

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        with _LOCK:
            _QUEUES.setdefault(destination, deque()).append(message)
        self.events.confirm(seq, CONFIRMED)
        _pump_all()


def _pump_all() -> None:
    with _LOCK:
        transports = list(_TRANSPORTS)
    for transport in transports:
        transport._pump()


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(name="memory", schemes=("memory",), sync_transport=MemoryTransport,
                         capabilities=CAPABILITIES, description="example: in-process broker"))
