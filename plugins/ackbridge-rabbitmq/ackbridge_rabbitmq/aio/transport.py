"""The asyncio transport on aio-pika: on the caller's event loop, no thread.

Maps the core's operations onto one :class:`~ackbridge_rabbitmq.aio.link.Link`
(the connection and its generations), one
:class:`~ackbridge_rabbitmq.aio.sending.Publishes` (the confirm channel), the
:class:`~ackbridge_rabbitmq.aio.receiving.Subscriptions` (a channel each) and a
:class:`~ackbridge_rabbitmq.aio.topology.QueueAdmin`. The names, arguments,
capabilities and message rules are the pika transport's, shared, so the two
asyncio transports of ``amqp://`` differ only in where the I/O runs
(``asyncio_transport=aio-pika|threaded``, see ``selection.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from aio_pika.abc import AbstractConnection

from ackbridge.capabilities import DeadLetterTarget
from ackbridge.errors import ConnectionLostError
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle, refused
from ackbridge.transport import AsyncTransport, TransportEvents
from ackbridge.transport.held_work import HeldWork
from ackbridge.transport.loop_thread import call_on_loop
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq import queues
from ackbridge_rabbitmq.aio import codec
from ackbridge_rabbitmq.aio.link import Link
from ackbridge_rabbitmq.aio.receiving import ReplyInbox, Subscriptions
from ackbridge_rabbitmq.aio.sending import Prepared, Publishes
from ackbridge_rabbitmq.aio.topology import QueueAdmin
from ackbridge_rabbitmq.capabilities import CLASSIC, capabilities_for
from ackbridge_rabbitmq.connection import connection_name
from ackbridge_rabbitmq.options import OPTIONS, RabbitSettings


class RabbitAioPikaTransport(AsyncTransport):
    capabilities = CLASSIC
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.rabbit = RabbitSettings.from_options(options)
        # Per instance: delivery counts exist only for quorum queues.
        self.capabilities = capabilities_for(self.rabbit.quorum)
        #: The name the broker shows (rabbitmqctl list_connections client_properties).
        self.connection_name = connection_name()
        self.link = Link(url, self.settings, self.connection_name, self._up, self._lost)
        self.publishes = Publishes(events, self.link.spawn)
        self.subscriptions = Subscriptions(self.link, events, quorum=self.rabbit.quorum)
        self.inbox = ReplyInbox(self.link, events)
        self.queues = QueueAdmin(self.link, self.rabbit)
        self.held = HeldWork(events, lambda: self.generation)
        self._id_prefix = f"ab-{uuid.uuid4().hex[:12]}-"
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def generation(self) -> int:
        return self.link.generation

    @property
    def state(self) -> str:
        return self.link.state

    def __repr__(self) -> str:
        return f"<RabbitAioPikaTransport {self.url.redacted} generation={self.generation}>"

    # ---- generations -------------------------------------------------------------------------
    async def _up(self, connection: AbstractConnection) -> None:
        await self.publishes.start(connection)
        await self.subscriptions.reopen_all(connection)
        await self.inbox.reopen(connection)

    def _lost(self, generation: int, reason: str) -> None:
        self.held.lost(reason)
        self.publishes.lost(reason)
        self.subscriptions.connection_lost()
        self.events.generation_ended(generation, reason)

    # ---- lifecycle ----------------------------------------------------------------------------
    async def open_async(self) -> None:
        if self.link.state != "new":
            return
        self.loop = asyncio.get_running_loop()
        await self.link.open()

    async def close_async(self) -> None:
        if self.link.state in ("new", "closed", "closing"):
            return
        await self.link.close()
        self.publishes.lost("connection closed")

    # ---- queues (topology.py) -------------------------------------------------------------------
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        await self.queues.declare(name, dead_letter=dead_letter)

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        await self.queues.delete(name, dead_letter=dead_letter)

    async def purge_queue_async(self, name: str) -> int | None:
        return await self.queues.purge(name)

    async def inspect_queue_async(self, name: str) -> QueueInfo:
        return await self.queues.inspect(name)

    async def dead_letter_target_async(self, source: str) -> DeadLetterTarget:
        return await self.queues.dead_letter_target(source)

    # ---- consuming and settling (receiving.py) --------------------------------------------------
    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        queues.check_queue_name(source)
        self.capabilities.check_prefetch(prefetch)
        await self.subscriptions.subscribe(subscription, source, prefetch)

    async def unsubscribe_async(self, subscription: str) -> None:
        await self.subscriptions.unsubscribe(subscription)

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        if not ops:
            return
        check_ops(ops, self.generation)
        if self.link.state != "open":
            check_ops(ops, None, "the connection is down")
        if not self.held.keep_settle(ops):
            await self.subscriptions.settle(ops)

    async def open_reply_inbox_async(self) -> str:
        return await self.inbox.open()

    # ---- publishing (sending.py) -----------------------------------------------------------------
    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        state = self.link.state
        if state != "open":
            doing = "is reconnecting" if state == "reconnecting" else "is not connected"
            raise ConnectionLostError(f"publish: {self.url.redacted} {doing}; nothing was sent")
        if not destination:
            self.events.confirm(seq, refused("no destination given"))
            return
        exchange, key = queues.parse_destination(destination)
        # InvalidOptionError (a float header) goes to the caller, before anything is counted.
        props = codec.properties(message, message.message_id or f"{self._id_prefix}{seq}")
        prepared: Prepared = (exchange, key, props, message.body)
        if not self.held.keep_publish(seq, prepared):
            self.publishes.send(seq, prepared)

    # ---- the declared fault seam (TransportBase); callable from any thread ------------------------
    def sever(self, reason: str) -> None:
        call_on_loop(self.loop, self.link.sever, reason)

    def hold_publishes(self, hold: bool) -> None:
        call_on_loop(self.loop, self._hold_publishes, hold)

    def hold_writes(self, hold: bool) -> None:
        call_on_loop(self.loop, self._hold_writes, hold)
        call_on_loop(self.loop, self._hold_publishes, hold)

    def _hold_publishes(self, hold: bool) -> None:
        for seq, (prepared,) in self.held.hold_publishes(hold):
            self.publishes.send(seq, prepared)

    def _hold_writes(self, hold: bool) -> None:
        live = self.held.hold_writes(hold)
        if live and self.link.state == "open":
            self.link.spawn(self.subscriptions.settle(live))
