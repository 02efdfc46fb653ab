"""The interface a plugin implements: wire operations only, no settlement rules.

A transport is the I/O edge of one connection. The core decides *whether* a
settlement or publish may happen (double settle, stale generation, windows,
conflation); the transport only puts it on the wire and reports what the
broker said. The sync and async sides use distinct method names so a single
class (like the embedded broker) can serve both.

Contract, in short:

* ``generation`` rises every time the transport (re)opens a channel/link/
  session whose settlement tags restart. Every :class:`InboundMessage` carries
  the generation it arrived on. When a generation ends the transport calls
  ``events.generation_ended(generation, reason)`` and reports every pending
  publish of that generation as unknown through ``events.confirm``.
* ``settle`` must never apply an op whose generation is not the current one:
  it raises :class:`~ackbridge.errors.StaleDeliveryError` instead (the core
  checks first; the transport re-checks where the race is decided).
* Each subscription has its own tag space (e.g. its own AMQP channel), so a
  ``multiple`` ack never touches another subscription's deliveries.
* Sync methods may be called from any thread. Events may be called from any
  thread for sync transports; async transports call them on the event loop.
  The core never holds one of its locks while it calls the transport, so a
  transport may call events on its own I/O thread even while an application
  thread is inside ``settle``; ``settle`` may hand ops to that thread without
  waiting (an op that loses the race with a loss there is dropped, not applied).
  ``settle`` may be called on the transport's own thread from inside
  ``events.deliver`` (a handler consumer acks there): it must not wait for that
  thread then.
* ``publish`` does not wait for the confirm: it reports it later, exactly once
  per ``seq``, through ``events.confirm(seq, outcome)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ackbridge.capabilities import Capabilities
from ackbridge.messages import ConfirmOutcome, InboundMessage, OutboundMessage, WireSettle
from ackbridge.options import OptionSpec
from ackbridge.urls import BrokerURL


class TransportEvents(Protocol):
    """Callbacks the core hands a transport."""

    def deliver(self, subscription: str, message: InboundMessage) -> None: ...

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None: ...

    def generation_ended(self, generation: int, reason: str) -> None: ...

    def reply(self, message: InboundMessage) -> None: ...


class Transport:
    """Base class of every adapter's transport (sync and/or async side).

    Subclasses set ``capabilities`` (or override it per instance, e.g. when it
    depends on the protocol version chosen by an option) and ``option_specs``
    for their own options, then implement the side(s) they support. A side
    that is not implemented raises NotImplementedError from every method.
    """

    capabilities: Capabilities
    option_specs: ClassVar[tuple[OptionSpec, ...]] = ()
    supports_sync: ClassVar[bool] = True
    supports_async: ClassVar[bool] = False

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        self.url = url
        self.options = options
        self.events = events

    @property
    def generation(self) -> int:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url.redacted}>"

    # ---- sync side -------------------------------------------------------
    def open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        raise NotImplementedError

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        raise NotImplementedError

    def unsubscribe(self, subscription: str) -> None:
        raise NotImplementedError

    def settle(self, ops: Sequence[WireSettle]) -> None:
        raise NotImplementedError

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        raise NotImplementedError

    def open_reply_inbox(self) -> str:
        """Start receiving replies (to ``events.reply``); return their address."""
        raise NotImplementedError

    # ---- async side (same operations, distinct names) ----------------------
    async def open_async(self) -> None:
        raise NotImplementedError

    async def close_async(self) -> None:
        raise NotImplementedError

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        raise NotImplementedError

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        raise NotImplementedError

    async def unsubscribe_async(self, subscription: str) -> None:
        raise NotImplementedError

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        raise NotImplementedError

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        raise NotImplementedError

    async def open_reply_inbox_async(self) -> str:
        raise NotImplementedError


SYNC_METHODS = ("open", "close", "declare_queue", "subscribe", "unsubscribe", "settle", "publish", "open_reply_inbox")


class ThreadedAsyncSide(Transport):
    """The async side for a transport whose sync side already runs its I/O on its
    own thread(s): steps that wait for the broker run in a worker thread, and
    ``settle``/``publish``, which only hand work to that I/O thread, are called
    directly. Subclasses override any step they can await natively."""

    supports_async: ClassVar[bool] = True

    async def open_async(self) -> None:
        await asyncio.to_thread(self.open)

    async def close_async(self) -> None:
        await asyncio.to_thread(self.close)

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        await asyncio.to_thread(self.declare_queue, name, dead_letter=dead_letter)

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        await asyncio.to_thread(self.subscribe, subscription, source, prefetch=prefetch)

    async def unsubscribe_async(self, subscription: str) -> None:
        await asyncio.to_thread(self.unsubscribe, subscription)

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        self.settle(ops)

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.publish(seq, destination, message)

    async def open_reply_inbox_async(self) -> str:
        return await asyncio.to_thread(self.open_reply_inbox)
