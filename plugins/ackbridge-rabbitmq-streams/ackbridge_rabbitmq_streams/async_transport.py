"""The asyncio transport: rstream on the caller's event loop.

One stream connection per transport, its generation, and the reconnect loop;
one :class:`~ackbridge_rabbitmq_streams.consuming.StreamConsumer` per
subscription and one :class:`~ackbridge_rabbitmq_streams.publishing.StreamPublishers`.
rstream's own recovery is not used: on a loss this transport ends the
generation (pending confirms unknown), opens a new connection with the core's
:class:`~ackbridge.kernel.backoff.Backoff` between attempts, and subscribes each
consumer again after its stored offset.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rstream import exceptions as rx
from rstream.client import Client

from ackbridge.errors import AckbridgeError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import OutboundMessage, WireSettle
from ackbridge.transport import AsyncTransport, TransportEvents
from ackbridge.transport.held_work import HeldWork
from ackbridge.transport.loop_thread import call_on_loop
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq_streams import codec
from ackbridge_rabbitmq_streams.capabilities import CAPABILITIES
from ackbridge_rabbitmq_streams.chunks import SubscriptionIds
from ackbridge_rabbitmq_streams.consuming import StreamConsumer
from ackbridge_rabbitmq_streams.endpoint import Endpoint
from ackbridge_rabbitmq_streams.errors import describe, stream_error
from ackbridge_rabbitmq_streams.link import FRAME_MAX, close_client, open_client
from ackbridge_rabbitmq_streams.naming import check_name
from ackbridge_rabbitmq_streams.options import OPTIONS, StreamSettings
from ackbridge_rabbitmq_streams.publishing import StreamPublishers

log = logging.getLogger("ackbridge.rabbitmq_streams")


class StreamAsyncTransport(AsyncTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.endpoint = Endpoint.resolve(url, self.settings)
        self.stream_settings = StreamSettings.resolve(options)
        self.client: Client | None = None
        self.ids = SubscriptionIds()
        self.consumers: dict[str, StreamConsumer] = {}
        self.publishes = StreamPublishers(events.confirm, self.stream_settings.publisher_name, FRAME_MAX)
        self._generation = 0
        #: The generation whose connection was opened last.
        self._connected = 0
        self._closing = False
        self._reconnecting: asyncio.Task[None] | None = None
        self.held = HeldWork(events, lambda: self._generation)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._outbox: collections.deque[tuple[int, str, bytes, str | None]] = collections.deque()
        self._sending = False
        self.name = f"ackbridge-{uuid.uuid4().hex[:12]}"
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def generation(self) -> int:
        return self._generation

    def __repr__(self) -> str:
        return f"<StreamAsyncTransport {self.url.redacted} generation={self._generation}>"

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- generations ------------------------------------------------------------------------
    async def _connect(self) -> None:
        # A loss moves the generation on at once (settlements of the old one are stale from
        # then on, whether or not a new connection opens); a connection takes the number.
        if self._generation == self._connected:
            self._generation += 1
        generation = self._generation

        def closed(reason: str) -> None:
            self._lost(generation, f"connection closed ({reason})")

        client = await open_client(self.endpoint, self.name, closed)
        self.client, self._connected, self.ids = client, generation, SubscriptionIds()
        self.publishes.start(client)
        for consumer in list(self.consumers.values()):
            await consumer.start(client, self.ids, generation)

    def _lost(self, generation: int, reason: str) -> None:
        """End *generation* (once): confirms unknown, consumers forgotten, reconnect if allowed."""
        if generation != self._generation or self.client is None:
            return
        client, self.client = self.client, None
        self.held.lost(reason)
        for consumer in self.consumers.values():
            consumer.lost()
        self.publishes.lost(reason)
        self._generation = generation + 1
        self.events.generation_ended(generation, reason)
        self.spawn(close_client(client))
        if not self._closing and self.settings.reconnect and self._reconnecting is None:
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        backoff = Backoff(self.settings.reconnect_max_delay)
        try:
            while not self._closing:
                await asyncio.sleep(backoff.next_delay())
                try:
                    await self._connect()
                    return
                except AckbridgeError as exc:
                    log.info("ackbridge-rabbitmq-streams: reconnect to %s failed: %s", self.url.redacted, exc)
                    if self.client is not None:
                        self._lost(self._generation, f"re-subscribe failed: {describe(exc)}")
                        return
                except Exception as exc:
                    log.info("ackbridge-rabbitmq-streams: reconnect to %s failed: %s", self.url.redacted,
                             describe(exc))
                    if self.client is not None:
                        self._lost(self._generation, f"re-subscribe failed: {describe(exc)}")
                        return
        finally:
            self._reconnecting = None

    def _live(self, doing: str) -> Client:
        if self.client is None or not self.client.is_connection_alive():
            raise ConnectionLostError(f"{doing}: the connection to {self.url.redacted} is down")
        return self.client

    # ---- lifecycle --------------------------------------------------------------------------------
    async def open_async(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._connect()

    async def close_async(self) -> None:
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reconnecting
        for consumer in list(self.consumers.values()):
            await consumer.stop()
        self.consumers.clear()
        client, self.client = self.client, None
        if client is not None:
            if self.publishes.pending:
                # The core waited for its confirms already; what is left is unknown.
                self.publishes.lost("the connection was closed")
            await self.publishes.close(client)
            await close_client(client)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ---- topology ---------------------------------------------------------------------------------
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        check_name(name, "stream name")
        client = self._live(f"declare stream {name!r}")
        try:
            await client.create_stream(name)
        except rx.StreamAlreadyExists:
            pass
        except Exception as exc:
            raise stream_error(exc, f"declare stream {name!r}", self.url) from None

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        check_name(name, "stream name")
        client = self._live(f"delete stream {name!r}")
        try:
            await client.delete_stream(name)
        except rx.StreamDoesNotExist:
            pass
        except Exception as exc:
            raise stream_error(exc, f"delete stream {name!r}", self.url) from None

    # ---- consuming ----------------------------------------------------------------------------------
    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        check_name(source, "stream name")
        client = self._live(f"consume {source!r}")
        consumer = StreamConsumer(subscription, source, prefetch=prefetch,
                                  reference=self.stream_settings.reference, initial=self.stream_settings.offset,
                                  deliver=self.events.deliver)
        try:
            await consumer.start(client, self.ids, self._generation)
        except Exception as exc:
            await consumer.stop()
            raise stream_error(exc, f"consume {source!r}", self.url) from None
        self.consumers[subscription] = consumer

    async def unsubscribe_async(self, subscription: str) -> None:
        consumer = self.consumers.pop(subscription, None)
        if consumer is not None:
            await consumer.stop()

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        check_ops(ops, self._generation)
        if not self.held.keep_settle(ops):
            await self._apply(ops)

    async def _apply(self, ops: Sequence[WireSettle]) -> None:
        by_sub: dict[str, list[WireSettle]] = {}
        for op in ops:
            by_sub.setdefault(op.subscription, []).append(op)
        for subscription, sub_ops in by_sub.items():
            consumer = self.consumers.get(subscription)
            if consumer is not None:
                await consumer.settle(sub_ops)

    # ---- publishing ----------------------------------------------------------------------------------
    def prepare(self, destination: str, message: OutboundMessage) -> tuple[str, bytes, str | None]:
        """The arguments of :meth:`send_prepared` after ``seq``: the stream, the encoded
        record and the message id (raises InvalidOptionError for headers a stream cannot carry)."""
        check_name(destination, "stream name")
        return destination, codec.encode(message), message.message_id

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        await self.send_prepared(seq, *self.prepare(destination, message))

    async def send_prepared(self, seq: int, destination: str, data: bytes, message_id: str | None = None) -> None:
        if self.held.keep_publish(seq, destination, data, message_id):
            return
        if self.client is None:
            raise ConnectionLostError(f"publish: the connection to {self.url.redacted} is down")
        # Never waited for here (the first publish to a stream declares a publisher, a round
        # trip): one sender task sends in call order, so publishing ids rise in that order.
        self._outbox.append((seq, destination, data, message_id))
        if not self._sending:
            self._sending = True
            self.spawn(self._send_outbox())

    async def _send_outbox(self) -> None:
        try:
            while self._outbox:
                seq, destination, data, message_id = self._outbox.popleft()
                await self.publishes.publish(seq, destination, data, message_id)
        finally:
            self._sending = False

    # ---- fault seam -----------------------------------------------------------------------------------
    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call *fn* on the transport's loop (at once when already there)."""
        call_on_loop(self.loop, fn, *args)

    def sever(self, reason: str) -> None:
        self.on_loop(lambda: self._lost(self._generation, reason))

    def hold_publishes(self, hold: bool) -> None:
        self.on_loop(self._hold_publishes, hold)

    def hold_writes(self, hold: bool) -> None:
        self.on_loop(self._hold_writes, hold)

    def _hold_publishes(self, hold: bool) -> None:
        for seq, prepared in self.held.hold_publishes(hold):
            self.spawn(self.send_prepared(seq, *prepared))

    def _hold_writes(self, hold: bool) -> None:
        self._hold_publishes(hold)
        live = self.held.hold_writes(hold)
        if live:
            self.spawn(self._apply(live))
