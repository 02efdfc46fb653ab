"""Consuming: one consumer per subscription; chunks in, deliveries out, acks -> the stored offset.

The broker sends a subscription whole chunks, one per credit. The records of
a chunk wait here and are handed to the core only while fewer than
``prefetch`` deliveries are unsettled, so prefetch bounds deliveries exactly
whatever the chunk size; the next chunk is asked for (one credit) when the
records here run out.

A log cannot take one message back: an ack marks a delivery done, and once
every delivery up to it is done the consumer's offset is stored on the broker
(StoreOffset under its reference: the last offset processed, as RabbitMQ's
clients store it). The store waits for the loop's next turn, so the acks
settled meanwhile (a burst of single acks on the asyncio face, a batch from the
blocking face) send one StoreOffset frame, not one each; stopping a consumer
sends what is still waiting. A new subscription (a reconnect, or a new consumer with
the same reference) starts after the stored offset, so what was delivered but
not acked is delivered again, flagged redelivered where this transport saw it
before.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rstream import exceptions as rx
from rstream.client import Client

from ackbridge.errors import UnsupportedVerbError
from ackbridge.messages import ACK, InboundMessage, WireSettle
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq_streams import codec
from ackbridge_rabbitmq_streams.chunks import ChunkSubscription, SubscriptionIds, offset_spec, records_from
from ackbridge_rabbitmq_streams.errors import stream_error
from ackbridge_rabbitmq_streams.naming import check_name
from ackbridge_rabbitmq_streams.options import StreamSettings

log = logging.getLogger("ackbridge.rabbitmq_streams")


class StreamConsumer:
    """Runs on the transport's loop; ``deliver`` is the core's event for this subscription."""

    def __init__(self, subscription: str, stream: str, *, prefetch: int, reference: str, initial: str | int,
                 deliver: Callable[[str, InboundMessage], None], fast: bool) -> None:
        self.subscription = subscription
        self.stream = stream
        self.prefetch = prefetch
        self.reference = reference
        self.initial = initial
        self._deliver = deliver
        self.fast = fast
        self.generation = 0
        self.client: Client | None = None
        self.sub: ChunkSubscription | None = None
        self._buffer: collections.deque[tuple[int, bytes]] = collections.deque()
        #: Delivered on this generation and not acked (its size is what prefetch bounds); ``_order``
        #: holds every offset delivered and not stored past yet, acked or not, in delivery (offset)
        #: order: the offset to store is the last of its head's run of acked offsets.
        self._unacked: set[int] = set()
        self._order: collections.deque[int] = collections.deque()
        #: The offset to store at the loop's next turn (None: nothing waits), and whether that
        #: turn is scheduled.
        self._to_store: int | None = None
        self._store_scheduled = False
        #: Where the next subscription starts when the broker holds no offset for the reference.
        self.resume_at: int | None = None
        self._skip_below = 0
        self._highest_delivered = -1
        self._credit_out = 0
        self._pump: asyncio.Task[None] | None = None
        self._handing_out = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, client: Client, ids: SubscriptionIds, generation: int) -> None:
        """Subscribe on *client* for *generation*, after the offset stored for the reference."""
        self.client, self.generation = client, generation
        self._buffer.clear()
        self._unacked.clear()
        self._order.clear()
        start: str | int = self.initial
        try:
            start = int(await client.query_offset(self.stream, self.reference)) + 1
        except rx.OffsetNotFound:
            if self.resume_at is not None:
                start = self.resume_at
        self._skip_below = start if isinstance(start, int) else 0
        self.sub = await ChunkSubscription.open(client, ids, self.stream, offset_spec(start), credit=1)
        self._credit_out = 1
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self.sub is not None
        sub = self.sub
        while True:
            chunk = await sub.chunks.get()
            self._credit_out -= 1
            self._buffer.extend(records_from(chunk, self._skip_below))
            self.hand_out()

    def hand_out(self) -> None:
        """Deliver buffered records while the prefetch allows; ask for a chunk when none is left."""
        if self._handing_out:
            return  # called again from inside deliver (a handler acking): the loop below goes on
        self._handing_out = True
        buffer, unacked, order, prefetch = self._buffer, self._unacked, self._order, self.prefetch
        # Fixed for this call: a new generation starts only in start(), after an await.
        deliver, subscription, stream, generation, fast = (
            self._deliver, self.subscription, self.stream, self.generation, self.fast)
        decode = codec.decode
        try:
            # Read again after each delivery: a handler may ack (or the connection go) inside deliver.
            while buffer and len(unacked) < prefetch and self.sub is not None:
                offset, data = buffer.popleft()
                if self.resume_at is None:
                    self.resume_at = offset
                redelivered = offset <= self._highest_delivered
                if not redelivered:
                    self._highest_delivered = offset
                message = decode(data, stream, offset, offset, generation, fast, redelivered)
                unacked.add(offset)
                order.append(offset)
                deliver(subscription, message)
        finally:
            self._handing_out = False
        if not buffer and self._credit_out == 0 and self.sub is not None:
            self._credit_out = 1
            self._spawn(self.sub.credit(1))

    @property
    def _unsettled(self) -> int:
        """Deliveries handed out and not acked (what prefetch bounds)."""
        return len(self._unacked)

    async def settle(self, ops: Sequence[WireSettle]) -> None:
        """:meth:`ack` as a coroutine."""
        self.ack(ops)

    def ack(self, ops: Sequence[WireSettle]) -> None:
        """Apply acks of the live generation (the caller checked it); store the new offset.
        Not a coroutine: nothing here waits, and an ack is the per-message path (two coroutines
        per ack on the way here were a measurable part of its CPU)."""
        unacked, order = self._unacked, self._order
        for op in ops:
            if op.verb is not ACK:
                raise UnsupportedVerbError("rabbitmq-streams", op.verb.value, "one message of a log cannot be "
                                           "put back or dead-lettered")
            tag: int = op.wire_tag  # type: ignore[assignment]  # an offset: hand_out's wire_tag
            if op.multiple:
                for offset in order:
                    if offset > tag:
                        break
                    unacked.discard(offset)
            else:
                unacked.discard(tag)  # a tag not delivered (or acked before) changes nothing
        last = None
        while order and order[0] not in unacked:
            last = order.popleft()
        if last is not None:
            self.resume_at = last + 1
            self._to_store = last
            if not self._store_scheduled:
                self._store_scheduled = True
                asyncio.get_running_loop().call_soon(self._store_waiting)
        self.hand_out()

    def _store_waiting(self) -> None:
        """Send the offset waiting to be stored (the last acked prefix's end: never past a
        delivery not acked), one frame for the acks settled since the last turn."""
        self._store_scheduled = False
        last, self._to_store = self._to_store, None
        client = self.client
        if last is not None and client is not None and client.is_connection_alive():
            self._spawn(client.store_offset(self.stream, self.reference, last))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """End this generation's subscription (unsubscribe if the connection lives), after
        storing the offset still waiting for the loop's turn."""
        self._store_waiting()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
        sub, self.sub = self.sub, None
        if sub is not None:
            await sub.close()
        self._buffer.clear()

    def lost(self) -> None:
        """The connection went: forget the subscription without talking to the broker."""
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        self.sub = None
        self._buffer.clear()


class StreamConsumers:
    """The consumers of one transport by subscription: subscribed on its live connection,
    started again on each new one, settled by subscription. Runs on the transport's loop."""

    def __init__(self, url: BrokerURL, settings: StreamSettings,
                 deliver: Callable[[str, InboundMessage], None], *, fast: bool) -> None:
        self.url = url
        self.fast = fast
        self.settings = settings
        self._deliver = deliver
        self.by_subscription: dict[str, StreamConsumer] = {}

    async def subscribe(self, client: Client, ids: SubscriptionIds, generation: int, subscription: str,
                        source: str, *, prefetch: int) -> None:
        check_name(source, "stream name")
        consumer = StreamConsumer(subscription, source, prefetch=prefetch, reference=self.settings.reference,
                                  initial=self.settings.offset, deliver=self._deliver, fast=self.fast)
        try:
            await consumer.start(client, ids, generation)
        except Exception as exc:
            await consumer.stop()
            raise stream_error(exc, f"consume {source!r}", self.url) from None
        self.by_subscription[subscription] = consumer

    async def unsubscribe(self, subscription: str) -> None:
        consumer = self.by_subscription.pop(subscription, None)
        if consumer is not None:
            await consumer.stop()

    def settle(self, ops: Sequence[WireSettle]) -> None:
        """Apply *ops* (of the live generation: the caller checked) to their consumers, on the
        loop; nothing waits (:meth:`StreamConsumer.ack`)."""
        if len(ops) == 1:  # the common case: one ack, or one cumulative ack
            only = self.by_subscription.get(ops[0].subscription)
            if only is not None:
                only.ack(ops)
            return
        by_sub: dict[str, list[WireSettle]] = {}
        for op in ops:
            by_sub.setdefault(op.subscription, []).append(op)
        for subscription, sub_ops in by_sub.items():
            consumer = self.by_subscription.get(subscription)
            if consumer is not None:
                consumer.ack(sub_ops)

    async def start_all(self, client: Client, ids: SubscriptionIds, generation: int) -> None:
        """A new connection: every consumer subscribes again after its stored offset."""
        for consumer in list(self.by_subscription.values()):
            await consumer.start(client, ids, generation)

    def lost(self) -> None:
        for consumer in self.by_subscription.values():
            consumer.lost()

    async def stop_all(self) -> None:
        for consumer in list(self.by_subscription.values()):
            await consumer.stop()
        self.by_subscription.clear()
