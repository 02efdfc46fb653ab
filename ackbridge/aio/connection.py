"""The asyncio twin of :mod:`ackbridge.sync.connection`: same classes, same method names.

Transport events may come from any thread; :mod:`ackbridge.aio.handoff` moves
them onto the event loop before they touch any state here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from ackbridge import contract
from ackbridge.aio.consumer import AsyncConsumer, AsyncDelivery, AsyncHandler
from ackbridge.aio.handoff import LoopEvents, LoopHandoff
from ackbridge.aio.publisher import AsyncConfirm, AsyncPublisher, _AsyncAckWaiter
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
from ackbridge.transport import AsyncTransport
from ackbridge.urls import BrokerURL

__all__ = ["AsyncConfirm", "AsyncConnection", "AsyncConsumer", "AsyncDelivery", "AsyncHandler", "AsyncPublisher"]


class AsyncConnection(ConnectionBase[AsyncTransport, AsyncConsumer, AsyncPublisher], contract.AsyncConnection):
    """One broker connection for asyncio, made by :func:`ackbridge.connect_async`.

    Use it as an async context manager; its methods run on the loop that opened it.
    """

    def __init__(self, url: BrokerURL, transport_type: type[AsyncTransport], options: Mapping[str, Any],
                 transport_options: Mapping[str, Any], *, messaging_system: str = "",
                 client_loggers: tuple[str, ...] = ()) -> None:
        super().__init__(url, options, messaging_system=messaging_system, client_loggers=client_loggers,
                         settings=ConnectionSettings.from_options(transport_options))
        self._loop = asyncio.get_running_loop()
        self._inbox_lock = asyncio.Lock()
        self._collect_changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        # Transport events reach the router on this loop, whatever thread reports them.
        self._transport = transport_type(url, transport_options, LoopEvents(self._router, LoopHandoff(self._loop)))

    def __repr__(self) -> str:
        return f"<ackbridge.AsyncConnection {self.url.redacted}>"

    async def open(self) -> AsyncConnection:
        """Open the transport (``connect_async`` calls this); returns the connection."""
        await self._transport.open_async()
        return self

    async def close(self, *, leave_unsettled: bool = False) -> None:
        if self._closed:
            return
        if leave_unsettled:
            self.capabilities.require_connection_free_acks()
            await self._transport.leave_unsettled_async()
            for consumer in list(self._consumers.values()):
                await consumer._release_untaken()
        for consumer in list(self._consumers.values()):
            await consumer.close()
        for publisher in {id(p): p for p in self._publishers.values()}.values():
            await publisher.flush(timeout=5.0)
        self._closed = True
        await self._transport.close_async()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        await self._transport.declare_queue_async(name, dead_letter=dead_letter)

    async def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self.capabilities.require_topology(Topology.DELETE_QUEUE)
        await self._transport.delete_queue_async(name, dead_letter=dead_letter)

    async def purge_queue(self, name: str) -> int | None:
        self.capabilities.require_topology(Topology.PURGE_QUEUE)
        return await self._transport.purge_queue_async(name)

    async def inspect_queue(self, name: str) -> QueueInfo:
        self.capabilities.require_topology(Topology.INSPECT_QUEUE)
        return await self._transport.inspect_queue_async(name)

    async def consume(self, source: str, *, handler: AsyncHandler | None = None,
                      **options: Unpack[ConsumeOptions]) -> AsyncConsumer:
        plan = self._plan_consumer(source, handler, options)
        consumer = AsyncConsumer(self, plan.subscription, source, plan.ledger, plan.conflate_ms, handler,
                                 plan.guard)
        self._consumers[plan.subscription] = consumer
        await self._transport.subscribe_async(plan.subscription, source, prefetch=plan.prefetch)
        return consumer

    def publisher(self, **options: Unpack[PublisherOptions]) -> AsyncPublisher:
        return AsyncPublisher(self, *plans.plan_publisher(self._options, options))

    async def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> AsyncConfirm:
        if self._default_publisher is None:
            self._default_publisher = self.publisher()
        return await self._default_publisher.publish(destination, body, **options)

    async def flush(self, timeout: float | None = None) -> bool:
        if self._default_publisher is None:
            return True
        return await self._default_publisher.flush(timeout)

    async def settle_handles(self, handles: Iterable[str], verb: WireVerb = WireVerb.ACK) -> BatchResult:
        unique, result = handles_mod.plan_settle(self.capabilities, handles, verb)
        if unique:
            await self._transport.settle_handles_async(unique, verb)
        return result

    # ---- internals ------------------------------------------------------------
    def _ask_dead_letter(self, source: str) -> None:
        self._spawn(self._ask_dead_letter_async(source))

    async def _ask_dead_letter_async(self, source: str) -> None:
        try:
            target = await self._transport.dead_letter_target_async(source)
        except Exception as exc:  # a plugin's check must never stop consume()
            self._dead_letter_untold(source, exc)
            return
        self._learned_dead_letter(source, target)

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_consumer(self, consumer: AsyncConsumer) -> None:
        self._consumers.pop(consumer.subscription, None)
        try:
            await self._transport.unsubscribe_async(consumer.subscription)
        except AckbridgeError:
            pass  # connection already gone

    async def _inbox(self) -> str:
        async with self._inbox_lock:
            if self._inbox_address is None:
                self._inbox_address = await self._transport.open_reply_inbox_async()
            return self._inbox_address

    def _collect(self, correlation_id: str, labels: tuple[str, ...], timeout: float,
                 confirm: AsyncConfirm) -> _AsyncAckWaiter:
        collector = self._acks.open(self.capabilities, correlation_id, labels, timeout)
        if labels_mod.BROKER_PERSISTED in labels:
            confirm.add_done_callback(lambda c: self._add_ack(correlation_id, persisted_ack(c.outcome)))
        return _AsyncAckWaiter(collector, self._collect_changed)

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        if self._acks.add(correlation_id, ack):
            self._spawn(self._notify_acks())

    async def _notify_acks(self) -> None:
        async with self._collect_changed:
            self._collect_changed.notify_all()

    async def issue_ack(self, delivery: DeliveryBase, label: str, status: int = 200, payload: Any = None, *,
                        reserved: bool = False) -> AsyncConfirm:
        destination, body, options = self._reply(delivery, label, status, payload, reserved)
        return await self.publish(destination, body, **options)
