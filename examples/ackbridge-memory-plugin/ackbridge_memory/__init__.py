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

    @property
    def generation(self) -> int:
        return self._generation

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._return_in_flight()

    def _return_in_flight(self) -> None:
        with _LOCK:
            for source, message in self._in_flight.values():
                _QUEUES.setdefault(source, deque()).appendleft(message)
            self._in_flight.clear()

    def sever(self, reason: str) -> None:
        """The fault seam's cut: deliveries return, their generation ends."""
        self._return_in_flight()
        ended, self._generation = self._generation, self._generation + 1
        self.events.generation_ended(ended, reason)

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        with _LOCK:
            _QUEUES.setdefault(name, deque())

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        # Deliver what is queued now (enough for an example).
        with _LOCK:
            queue = _QUEUES.setdefault(source, deque())
            batch = [queue.popleft() for _ in range(min(prefetch, len(queue)))]
        for message in batch:
            self._tag += 1
            self._in_flight[self._tag] = (source, message)
            self.events.deliver(subscription, InboundMessage(
                wire_tag=self._tag, generation=self._generation, body=message.body, source=source,
                headers=message.headers, message_id=message.message_id))

    def unsubscribe(self, subscription: str) -> None:
        pass

    def settle(self, ops: Sequence[WireSettle]) -> None:
        with _LOCK:
            check_ops(ops, self._generation)  # the core's stale rule, re-checked where the race is decided
            for op in ops:
                source, message = self._in_flight.pop(int(op.wire_tag))  # type: ignore[call-overload]
                if op.verb is WireVerb.REQUEUE:
                    _QUEUES[source].appendleft(message)

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        with _LOCK:
            _QUEUES.setdefault(destination, deque()).append(message)
        self.events.confirm(seq, CONFIRMED)


@hookimpl
def ackbridge_register_adapters(register: Callable[[AdapterSpec], None]) -> None:
    register(AdapterSpec(name="memory", schemes=("memory",), sync_transport=MemoryTransport,
                         capabilities=CAPABILITIES, description="example: in-process broker"))
