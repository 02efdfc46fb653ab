"""The asyncio face's two settle paths: without waiting, or behind a send under way.

A transport that declares ``settles_without_waiting`` (NATS, streams, every
threaded one) is handed a settlement at once through ``settle_nowait`` while no
send holds the consumer's send lock; while one does (a cumulative ack, a flush,
a transport write that waits), the settlement waits its turn, so ops reach the
wire in the order they were decided. A stale op refused by ``settle_nowait``
leaves the delivery undecided, as the awaited path does, and a drain() waiting
for the deliveries in flight wakes when the last of them is settled either way.
The scripted transport here records what reached it, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import pytest

from ackbridge.aio.connection import AsyncConnection
from ackbridge.errors import StaleDeliveryError
from ackbridge.messages import InboundMessage, WireSettle
from ackbridge.urls import parse_url
from tests.core.scripted import QuietAsyncTransport, default_options


class Script:
    """What reached the transport, and what the test makes it do."""

    def __init__(self) -> None:
        #: (path, wire tags) per call, in call order.
        self.calls: list[tuple[str, list[Hashable]]] = []
        #: settle_async waits for this before it returns (a write under way).
        self.written = asyncio.Event()
        self.written.set()
        #: settle_nowait refuses every op as stale.
        self.stale = False
        self.transport: Scripted | None = None
        self.subscription = ""


class Scripted(QuietAsyncTransport):
    settles_without_waiting = True
    script: ClassVar[Script]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.script.transport = self

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        self.script.subscription = subscription

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        self.script.calls.append(("awaited", [op.wire_tag for op in ops]))
        await self.script.written.wait()

    def settle_nowait(self, ops: Sequence[WireSettle]) -> None:
        if self.script.stale:
            raise StaleDeliveryError("the connection that delivered it is gone (scripted)")
        self.script.calls.append(("nowait", [op.wire_tag for op in ops]))

    def deliver(self, *tags: int) -> None:
        for tag in tags:
            self.events.deliver(self.script.subscription, InboundMessage(wire_tag=tag, generation=1, body=b"x",
                                                                         source="q"))


async def _consumer() -> tuple[AsyncConnection, Any, Script]:
    script = Scripted.script = Script()
    conn = AsyncConnection(parse_url("scripted://test"), Scripted, *default_options())
    await conn.open()
    return conn, await conn.consume("q", prefetch=10), script


async def _taken(consumer: Any, n: int) -> list[Any]:
    deliveries = [await consumer.get(timeout=5) for _ in range(n)]
    assert all(d is not None for d in deliveries)
    return deliveries


def test_a_settlement_while_nothing_is_being_sent_reaches_the_transport_without_waiting() -> None:
    async def run() -> None:
        conn, consumer, script = await _consumer()
        assert script.transport is not None
        script.transport.deliver(1, 2)
        first, second = await _taken(consumer, 2)
        await first.ack()
        await second.reject()
        assert script.calls == [("nowait", [1]), ("nowait", [2])]
        assert first.settled and second.settled
        await conn.close()

    asyncio.run(run())


def test_a_settlement_waits_behind_a_send_under_way_and_keeps_the_decided_order() -> None:
    async def run() -> None:
        conn, consumer, script = await _consumer()
        assert script.transport is not None
        script.transport.deliver(1, 2, 3)
        _, second, third = await _taken(consumer, 3)
        script.written.clear()  # the cumulative ack's write does not finish yet
        through = asyncio.create_task(consumer.ack_through(second))
        await asyncio.sleep(0)
        later = asyncio.create_task(third.ack())
        for _ in range(5):
            await asyncio.sleep(0)
        assert script.calls == [("awaited", [2])], "the later ack went out before the cumulative one was written"
        script.written.set()
        await asyncio.gather(through, later)
        assert [tags for _, tags in script.calls] == [[2], [3]]
        await conn.close()

    asyncio.run(run())


def test_a_stale_refusal_without_waiting_leaves_the_delivery_undecided() -> None:
    async def run() -> None:
        conn, consumer, script = await _consumer()
        assert script.transport is not None
        script.transport.deliver(1)
        (delivery,) = await _taken(consumer, 1)
        script.stale = True
        with pytest.raises(StaleDeliveryError):
            await delivery.ack()
        assert not delivery.settled and script.calls == []
        await conn.close()

    asyncio.run(run())


def test_a_drain_wakes_when_its_last_delivery_is_settled_without_waiting() -> None:
    async def run() -> None:
        conn, consumer, script = await _consumer()
        assert script.transport is not None
        script.transport.deliver(1)
        (delivery,) = await _taken(consumer, 1)
        drain = asyncio.create_task(consumer.drain(timeout=3600))
        await asyncio.sleep(0)
        await delivery.ack()
        # A hang guard, not a time bound: an unwoken drain waits out its hour.
        async with asyncio.timeout(60):
            result = await drain
        assert ("nowait", [1]) in script.calls
        assert (result.finished, result.abandoned) == (1, 0)
        await conn.close()

    asyncio.run(run())
