"""The contracts a plugin implements: wire operations only, no settlement rules.

A transport is the I/O edge of one connection. The core decides *whether* a
settlement or publish may happen (double settle, stale generation, windows,
conflation); the transport only puts it on the wire and reports what the
broker said. There are two contracts with distinct method names, so one class
may serve both and a test fake can too:

* :class:`SyncTransport`: ``open``, ``close``, ``declare_queue``,
  ``subscribe``, ``unsubscribe``, ``settle``, ``publish`` (and optionally
  ``open_reply_inbox``, the topology verbs ``delete_queue``,
  ``purge_queue``, ``inspect_queue``, each declared in
  ``Capabilities.topology``, and ``settle_handles`` / ``leave_unsettled``,
  declared by ``Capabilities.connection_free_acks``). Called from any thread.
* :class:`AsyncTransport`: the same operations as coroutines named
  ``open_async`` ... ``publish_async``, called on the event loop.

A plugin registers a sync class, an async class, or both
(:class:`~ackbridge.plugins.AdapterSpec`). With only a sync class the core
serves asyncio through :class:`ThreadedAsyncTransport`: the hand-off to the
transport's I/O thread lives once, here.

Contract, in short:

* ``generation`` rises every time the transport (re)opens a channel/link/
  session whose settlement tags restart. Every :class:`InboundMessage` carries
  the generation it arrived on. When a generation ends the transport calls
  ``events.generation_ended(generation, reason)`` and reports every pending
  publish of that generation as unknown through ``events.confirm``.
* ``settle`` must never apply an op whose generation is not the current one.
  The core checks first; where the race with a loss is decided inside the
  transport it re-checks with :func:`ackbridge.kernel.generations.check_ops` (the
  only place :class:`~ackbridge.errors.StaleDeliveryError` is raised).
* Each subscription has its own tag space (e.g. its own AMQP channel), so a
  ``multiple`` ack never touches another subscription's deliveries.
* Events may be called from any thread for sync transports; async transports
  call them on the event loop. The core never holds one of its locks while it
  calls the transport, so a transport may call events on its own I/O thread
  even while an application thread is inside ``settle``; ``settle`` may hand
  ops to that thread without waiting (an op that loses the race with a loss
  there is dropped, not applied). ``settle`` may be called on the transport's
  own thread from inside ``events.deliver`` (a handler consumer acks there):
  it must not wait for that thread then.
* ``publish`` does not wait for the confirm: it reports it later, exactly once
  per ``seq``, through ``events.confirm(seq, outcome)``.
* ``settle_handles(handles, verb)`` (connection-free acks only) puts one
  settlement per handle on the wire and returns once they are flushed to the
  broker; the core has checked the verb and removed repeats
  (:mod:`ackbridge.engine.handles`). ``leave_unsettled()`` makes the following
  unsubscribes and close leave every delivery the application took to the
  broker (no release): another connection settles them by handle, or the
  broker redelivers them after its own timeout.
* ``dead_letter_target(source)`` (optional; default "cannot tell") answers
  where a message rejected from *source* would go: a known target, none (a
  reject discards it), or cannot tell. ``consume()`` asks it once per source
  and connection before subscribing (the async face in a task of its own),
  warns when there is none, and the failed-handler log quotes the answer. It
  may ask the broker once (cheaply: no management API); it must not raise
  for a queue it cannot check (answer cannot tell).
* Reconnecting transports wait between attempts with
  :class:`ackbridge.kernel.backoff.Backoff`; shared connection options arrive
  resolved (:class:`ackbridge.options.ConnectionSettings`).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ackbridge.capabilities import CANNOT_TELL, Capabilities, DeadLetterTarget
from ackbridge.errors import AckbridgeError, UnsupportedVerbError
from ackbridge.messages import ConfirmOutcome, InboundMessage, OutboundMessage, QueueInfo, WireSettle, WireVerb
from ackbridge.options import ConnectionSettings, OptionSpec
from ackbridge.urls import BrokerURL


class TransportEvents(Protocol):
    """Callbacks the core hands a transport."""

    def deliver(self, subscription: str, message: InboundMessage) -> None: ...

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None: ...

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        """Many publishes answered at once (a group commit, a broker's ``multiple``
        ack): the same as :meth:`confirm` for each, in order, with one lock
        round-trip and one wake-up for the lot instead of one per publish."""
        ...

    def generation_ended(self, generation: int, reason: str) -> None: ...

    def reply(self, message: InboundMessage) -> None: ...

    def failed(self, error: AckbridgeError, subscription: str | None = None) -> None:
        """The connection cannot go on (e.g. the embedded broker's file is damaged):
        consumers waiting for deliveries raise *error* instead of waiting forever.
        With *subscription*, only that one cannot go on (e.g. the broker cancelled
        it because its queue was deleted): only its consumer raises *error*."""
        ...


class TransportBase:
    """What both contracts share: the URL, resolved options, events, the
    capability table and the current generation.

    Subclasses set ``capabilities`` (or override it per instance, e.g. when it
    depends on the protocol version chosen by an option) and ``option_specs``
    for their own options (the shared connection options come from the core).
    """

    capabilities: Capabilities
    option_specs: ClassVar[tuple[OptionSpec, ...]] = ()

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        self.url = url
        self.options = options
        self.events = events
        self.settings = ConnectionSettings.from_options(options)

    @property
    def generation(self) -> int:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url.redacted}>"

    # ---- fault seam: used through ackbridge.transport.faults, never by the core -----
    def sever(self, reason: str) -> None:
        """Cut the connection as a network fault would (the generation ends)."""
        raise NotImplementedError(f"{type(self).__name__} offers no sever() fault")

    def hold_writes(self, hold: bool) -> None:
        """Stop (True) or resume (False) writing settlements and publishes to the broker."""
        raise NotImplementedError(f"{type(self).__name__} offers no hold_writes() fault")

    def hold_publishes(self, hold: bool) -> None:
        """Queue publishes without sending them (True) until released (False)."""
        raise NotImplementedError(f"{type(self).__name__} offers no hold_publishes() fault")


class SyncTransport(TransportBase, abc.ABC):
    """The blocking contract: every method may be called from any thread."""

    @abc.abstractmethod
    def open(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None: ...

    @abc.abstractmethod
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None: ...

    @abc.abstractmethod
    def unsubscribe(self, subscription: str) -> None: ...

    @abc.abstractmethod
    def settle(self, ops: Sequence[WireSettle]) -> None: ...

    @abc.abstractmethod
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None: ...

    def open_reply_inbox(self) -> str:
        """Start receiving replies (to ``events.reply``); return their address."""
        raise UnsupportedVerbError(self.capabilities.broker, "acknowledgement requests", "no reply inbox")

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        """Where a message rejected from *source* goes: known, none (discarded) or cannot tell."""
        return CANNOT_TELL

    # ---- connection-free acks: optional, declared in Capabilities.connection_free_acks ----
    def settle_handles(self, handles: Sequence[str], verb: WireVerb) -> None:
        """Settle each delivery named by an ack handle, from this connection; return once flushed."""
        raise UnsupportedVerbError(self.capabilities.broker, "settle by ack handle", "not offered by this plugin")

    def leave_unsettled(self) -> None:
        """From now on, unsubscribe and close release nothing the application took."""
        raise UnsupportedVerbError(self.capabilities.broker, "leave unsettled", "not offered by this plugin")

    # ---- leases: optional, declared in Capabilities.lease_extension -----------------------
    def extend_lease(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        """Push back the broker's redelivery deadline of one unsettled delivery (the core
        checked it is pending); the seconds the broker now waits, where known. Raises
        StaleDeliveryError when *generation* is not the live one (nothing sent)."""
        raise UnsupportedVerbError(self.capabilities.broker, "extend lease", "not offered by this plugin")

    # ---- topology: optional, each declared in Capabilities.topology ----------------------
    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        """Delete queue *name* and its messages (and its dead-letter companion with *dead_letter*).
        Deleting a queue that does not exist is not an error."""
        raise UnsupportedVerbError(self.capabilities.broker, "delete queue", "not offered by this plugin")

    def purge_queue(self, name: str) -> int | None:
        """Drop the ready messages of *name*; return how many, where the broker tells."""
        raise UnsupportedVerbError(self.capabilities.broker, "purge queue", "not offered by this plugin")

    def inspect_queue(self, name: str) -> QueueInfo:
        """What the broker tells about *name*; raise BrokerError if it does not exist."""
        raise UnsupportedVerbError(self.capabilities.broker, "inspect queue", "not offered by this plugin")


class AsyncTransport(TransportBase, abc.ABC):
    """The asyncio contract: the same operations, awaited on the event loop."""

    #: True when :meth:`settle_nowait` is offered: settling never has to wait (the ops are
    #: queued or written at once, in call order). Read once per consumer.
    settles_without_waiting: bool = False

    @abc.abstractmethod
    async def open_async(self) -> None: ...

    @abc.abstractmethod
    async def close_async(self) -> None: ...

    @abc.abstractmethod
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None: ...

    @abc.abstractmethod
    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None: ...

    @abc.abstractmethod
    async def unsubscribe_async(self, subscription: str) -> None: ...

    @abc.abstractmethod
    async def settle_async(self, ops: Sequence[WireSettle]) -> None: ...

    @abc.abstractmethod
    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None: ...

    def settle_nowait(self, ops: Sequence[WireSettle]) -> None:
        """:meth:`settle_async` without a coroutine, on the loop, where
        :attr:`settles_without_waiting`: the same checks (a stale op raises at once,
        nothing of the call sent), then *ops* go to the wire after every earlier call's."""
        raise NotImplementedError(f"{type(self).__name__} settles only by settle_async")

    async def open_reply_inbox_async(self) -> str:
        """Start receiving replies (to ``events.reply``); return their address."""
        raise UnsupportedVerbError(self.capabilities.broker, "acknowledgement requests", "no reply inbox")

    async def dead_letter_target_async(self, source: str) -> DeadLetterTarget:
        """See :meth:`SyncTransport.dead_letter_target`."""
        return CANNOT_TELL

    async def settle_handles_async(self, handles: Sequence[str], verb: WireVerb) -> None:
        """See :meth:`SyncTransport.settle_handles`."""
        raise UnsupportedVerbError(self.capabilities.broker, "settle by ack handle", "not offered by this plugin")

    async def leave_unsettled_async(self) -> None:
        """See :meth:`SyncTransport.leave_unsettled`."""
        raise UnsupportedVerbError(self.capabilities.broker, "leave unsettled", "not offered by this plugin")

    async def extend_lease_async(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        """See :meth:`SyncTransport.extend_lease`."""
        raise UnsupportedVerbError(self.capabilities.broker, "extend lease", "not offered by this plugin")

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        """See :meth:`SyncTransport.delete_queue`."""
        raise UnsupportedVerbError(self.capabilities.broker, "delete queue", "not offered by this plugin")

    async def purge_queue_async(self, name: str) -> int | None:
        """See :meth:`SyncTransport.purge_queue`."""
        raise UnsupportedVerbError(self.capabilities.broker, "purge queue", "not offered by this plugin")

    async def inspect_queue_async(self, name: str) -> QueueInfo:
        """See :meth:`SyncTransport.inspect_queue`."""
        raise UnsupportedVerbError(self.capabilities.broker, "inspect queue", "not offered by this plugin")


SYNC_METHODS = ("open", "close", "declare_queue", "subscribe", "unsubscribe", "settle", "publish", "open_reply_inbox",
                "delete_queue", "purge_queue", "inspect_queue", "settle_handles", "leave_unsettled",
                "dead_letter_target", "extend_lease")


class ForwardedFaults:
    """The fault seam of a transport that wraps another (``self.wrapped``): the
    faults are the wrapped transport's, where the wire is."""

    wrapped: TransportBase

    def sever(self, reason: str) -> None:
        self.wrapped.sever(reason)

    def hold_writes(self, hold: bool) -> None:
        self.wrapped.hold_writes(hold)

    def hold_publishes(self, hold: bool) -> None:
        self.wrapped.hold_publishes(hold)


class ThreadedAsyncTransport(ForwardedFaults, AsyncTransport):
    """The asyncio contract over a sync transport that runs its I/O on its own
    thread(s): steps that wait for the broker run in a worker thread, and
    ``settle``/``publish``, which only hand work to that I/O thread, are called
    directly. Build one with :meth:`over`."""

    sync_type: ClassVar[type[SyncTransport]]

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.sync = self.wrapped = self.sync_type(url, options, events)

    @classmethod
    def over(cls, sync_type: type[SyncTransport]) -> type[ThreadedAsyncTransport]:
        """The async transport class serving *sync_type*'s broker."""
        return type(f"Threaded{sync_type.__name__}", (cls,), {
            "sync_type": sync_type, "option_specs": sync_type.option_specs, "__module__": cls.__module__})

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]  # live: the sync side refines it on open
        return self.sync.capabilities

    @property
    def generation(self) -> int:
        return self.sync.generation

    def __repr__(self) -> str:
        return repr(self.sync)

    async def open_async(self) -> None:
        await asyncio.to_thread(self.sync.open)

    async def close_async(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        await asyncio.to_thread(self.sync.declare_queue, name, dead_letter=dead_letter)

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        await asyncio.to_thread(self.sync.subscribe, subscription, source, prefetch=prefetch)

    async def unsubscribe_async(self, subscription: str) -> None:
        await asyncio.to_thread(self.sync.unsubscribe, subscription)

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        self.sync.settle(ops)

    #: The sync transport's settle() hands ops to its I/O thread and never waits for the wire.
    settles_without_waiting = True

    def settle_nowait(self, ops: Sequence[WireSettle]) -> None:
        self.sync.settle(ops)

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self.sync.publish(seq, destination, message)

    async def open_reply_inbox_async(self) -> str:
        return await asyncio.to_thread(self.sync.open_reply_inbox)

    async def settle_handles_async(self, handles: Sequence[str], verb: WireVerb) -> None:
        await asyncio.to_thread(self.sync.settle_handles, handles, verb)

    async def dead_letter_target_async(self, source: str) -> DeadLetterTarget:
        return await asyncio.to_thread(self.sync.dead_letter_target, source)

    async def leave_unsettled_async(self) -> None:
        self.sync.leave_unsettled()

    async def extend_lease_async(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        return await asyncio.to_thread(self.sync.extend_lease, subscription, wire_tag, generation)

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        await asyncio.to_thread(self.sync.delete_queue, name, dead_letter=dead_letter)

    async def purge_queue_async(self, name: str) -> int | None:
        return await asyncio.to_thread(self.sync.purge_queue, name)

    async def inspect_queue_async(self, name: str) -> QueueInfo:
        return await asyncio.to_thread(self.sync.inspect_queue, name)
