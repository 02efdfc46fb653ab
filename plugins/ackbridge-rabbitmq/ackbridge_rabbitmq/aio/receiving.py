"""Subscriptions, their deliveries to the core and settlements as wire ops; the reply inbox (aio-pika).

As in the pika transport (``ackbridge_rabbitmq.receiving``): each subscription
has its own channel, so its delivery tags are its own and a ``multiple`` ack
never touches another subscription's; when the broker closes one subscription
channel (e.g. consumer_timeout) every subscription channel is reopened on a new
generation, so all live deliveries share one generation. Whether an op's
generation is live is decided by the core's guard (``check_ops``): every op of
a batch is checked before any is written, all on the loop, so nothing stale
reaches the wire. A subscription the broker cancels (``basic.cancel``: its queue
was deleted) fails alone, as in the pika transport: its consumer raises
:class:`~ackbridge.errors.SubscriptionCancelledError` after the deliveries it
already holds, which stay settle-able; it is not subscribed again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import aiormq.exceptions as ae
from aio_pika.abc import AbstractChannel, AbstractConnection
from aiormq.abc import AbstractChannel as WireChannel
from aiormq.abc import DeliveredMessage
from pamqp import commands as spec

from ackbridge.kernel.generations import check_ops
from ackbridge.messages import WireSettle, WireVerb
from ackbridge.transport import TransportEvents
from ackbridge_rabbitmq.aio import stalls
from ackbridge_rabbitmq.aio.codec import inbound
from ackbridge_rabbitmq.aio.errors import channel_error, describe, is_broker_channel_close, reply_code, reply_text
from ackbridge_rabbitmq.aio.link import Link
from ackbridge_rabbitmq.receiving import CONSUMER_TIMEOUT_TEXT, cancelled_by_broker

log = logging.getLogger("ackbridge.rabbitmq")


class _Sub:
    """One subscription: its own channel, so its delivery tags are its own."""

    __slots__ = ("active", "cancelled", "channel", "generation", "name", "prefetch", "source", "wire")

    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.channel: AbstractChannel | None = None
        self.wire: WireChannel | None = None
        self.generation = 0
        self.active = False
        #: The broker cancelled it (basic.cancel): never subscribed again.
        self.cancelled = False


class Subscriptions:
    """The subscriptions of one transport and the settlements on their channels."""

    def __init__(self, link: Link, events: TransportEvents, *, quorum: bool) -> None:
        self._link = link
        self._events = events
        self._quorum = quorum
        self.subs: dict[str, _Sub] = {}

    async def subscribe(self, subscription: str, source: str, prefetch: int) -> None:
        doing = f"subscribe to {source!r}"
        connection = self._link.require(doing)
        sub = _Sub(subscription, source, prefetch)
        self.subs[subscription] = sub
        try:
            await self._open(sub, connection)
        except BaseException as exc:
            self.subs.pop(subscription, None)
            await self._drop(sub)
            if isinstance(exc, Exception):
                raise channel_error(exc, doing) from None
            raise

    async def unsubscribe(self, subscription: str) -> None:
        sub = self.subs.pop(subscription, None)
        if sub is not None:
            await self._drop(sub)  # closing the channel returns its unacked deliveries to the queue

    async def reopen_all(self, connection: AbstractConnection) -> None:
        """After a (re)connect or a recycle: open every subscription's channel again."""
        for sub in list(self.subs.values()):
            if sub.cancelled:
                continue
            try:
                await self._open(sub, connection)
            except Exception as exc:
                log.warning("ackbridge-rabbitmq: re-subscribing to %r failed: %s", sub.source, describe(exc))

    def connection_lost(self) -> None:
        for sub in self.subs.values():
            sub.channel, sub.wire, sub.active = None, None, False

    async def _open(self, sub: _Sub, connection: AbstractConnection) -> None:
        sub.active = False
        channel = await connection.channel(publisher_confirms=False)
        wire = await channel.get_underlay_channel()
        # Set before consuming: deliveries may follow Basic.ConsumeOk at once.
        sub.channel, sub.wire, sub.generation = channel, wire, self._link.generation
        channel.close_callbacks.add(lambda ch, exc: self._closed(sub, ch, exc))
        await wire.basic_qos(prefetch_count=sub.prefetch)
        events, quorum = self._events, self._quorum

        async def on_message(message: DeliveredMessage) -> None:
            if sub.wire is not wire:
                return  # a channel being replaced: closing it requeues this delivery
            events.deliver(sub.name, inbound(message, generation=sub.generation, source=sub.source, quorum=quorum))

        def on_cancel(_frame: spec.Basic.Cancel) -> None:
            if sub.wire is not wire or self.subs.get(sub.name) is not sub:
                return  # a channel being replaced, or a subscription already ended
            sub.cancelled = True
            events.failed(cancelled_by_broker(sub.source), sub.name)

        wire.on_consumer_cancel_callbacks.add(on_cancel)
        await wire.basic_consume(sub.source, on_message, no_ack=False)
        sub.active = True

    async def _drop(self, sub: _Sub) -> None:
        channel, sub.channel, sub.wire = sub.channel, None, None
        if channel is not None and not channel.is_closed:
            try:
                await channel.close()
            except Exception as exc:  # the connection went meanwhile: the broker requeues anyway
                log.debug("ackbridge-rabbitmq: closing a subscription channel: %s", describe(exc))

    def _closed(self, sub: _Sub, channel: object, exc: BaseException | None) -> None:
        if sub.channel is not channel:
            return
        active, sub.channel, sub.wire, sub.active = sub.active, None, None, False
        if not (active and is_broker_channel_close(exc) and self._link.state == "open"):
            return
        assert exc is not None
        text = reply_text(exc)
        if reply_code(exc) == 406 and CONSUMER_TIMEOUT_TEXT in text and "timed out" in text:
            text = ("consumer_timeout: a delivery was held unsettled longer than the broker's consumer_timeout; "
                    f"its channel was closed and its deliveries requeued (broker said: {text})")
        self._recycle(f"channel of subscription {sub.source!r} closed by the broker: {reply_code(exc)} {text}")

    def _recycle(self, why: str) -> None:
        """Reopen every subscription channel on a new generation (see the module doc)."""
        old = self._link.next_generation(why)
        for other in self.subs.values():
            channel, other.channel, other.wire, other.active = other.channel, None, None, False
            if channel is not None and not channel.is_closed:
                self._link.spawn(channel.close())
        self._events.generation_ended(old, why)
        log.warning("ackbridge-rabbitmq: %s", why)
        connection = self._link.connection
        if connection is not None:
            self._link.spawn(self.reopen_all(connection))

    def check(self, ops: Sequence[WireSettle]) -> list[WireChannel]:
        """The channel of each op, once every op is checked live (StaleDeliveryError otherwise)."""
        check_ops(ops, self._link.generation)
        channels: list[WireChannel] = []
        for op in ops:
            sub = self.subs.get(op.subscription)
            wire = sub.wire if sub is not None else None
            live = sub.generation if sub is not None and wire is not None and not wire.is_closed else None
            check_ops((op,), live, f"delivery tag {op.wire_tag}: its channel is gone")
            assert wire is not None  # check_ops raised for a gone channel
            channels.append(wire)
        return channels

    async def settle(self, ops: Sequence[WireSettle]) -> None:
        channels = self.check(ops)
        generation, link = self._link.generation, self._link
        # A write may wait for room in aiormq's bounded frame queue, and a loss may
        # come meanwhile. Each op goes to its own generation's channel object, never
        # to a newer one: on a channel closed since, aiormq raises and the op is
        # dropped (the broker redelivers that message), as the transport contract says.
        # A write that cannot go at once is bounded (stalls.py): a dead socket never
        # holds a settle, and the ops it could not queue are stale.
        try:
            for index, (op, wire) in enumerate(zip(ops, channels, strict=True)):
                if stalls.has_room(wire):
                    await _write(op, wire)  # queued at once: aiormq's put does not wait
                    continue
                why = await stalls.bounded(_write(op, wire), link.ended(generation), stalls.stall_limit(link.settings))
                if why is not None:
                    if link.generation == generation:
                        link.sever(why)  # aiormq did not see the loss: end the generation here
                    check_ops(ops[index:], None, why)
        except ae.ChannelInvalidStateError as exc:
            log.debug("ackbridge-rabbitmq: settlement dropped, its channel closed meanwhile: %s", describe(exc))


async def _write(op: WireSettle, wire: WireChannel) -> None:
    """Queue one settlement frame; ``wait=False``: never wait for the writer's drain()."""
    tag = int(op.wire_tag)  # type: ignore[call-overload]
    if op.verb is WireVerb.ACK:
        await wire.basic_ack(tag, multiple=op.multiple, wait=False)
    elif op.verb is WireVerb.REQUEUE:
        await wire.basic_nack(tag, multiple=op.multiple, requeue=True, wait=False)
    else:
        await wire.basic_reject(tag, requeue=False, wait=False)


class ReplyInbox:
    """The exclusive, client-named reply queue of one transport, consumed with auto-ack;
    client-named so the same address survives a reconnect (:meth:`reopen`)."""

    def __init__(self, link: Link, events: TransportEvents) -> None:
        self._link = link
        self._events = events
        self.name: str | None = None

    async def open(self) -> str:
        name = self.name or f"ackbridge.reply.{uuid.uuid4().hex}"
        connection = self._link.require("open the reply inbox")
        try:
            await self._open(name, connection)
        except Exception as exc:
            raise channel_error(exc, "open the reply inbox") from None
        self.name = name
        return name

    async def reopen(self, connection: AbstractConnection) -> None:
        if self.name is not None:
            await self._open(self.name, connection)

    async def _open(self, name: str, connection: AbstractConnection) -> None:
        channel = await connection.channel(publisher_confirms=False)
        wire = await channel.get_underlay_channel()
        link, events = self._link, self._events

        async def on_message(message: DeliveredMessage) -> None:
            events.reply(inbound(message, generation=link.generation, source=name, quorum=False))

        await wire.queue_declare(name, exclusive=True, auto_delete=True)
        await wire.basic_consume(name, on_message, no_ack=True)
