"""The asyncio face's settlements are checked at once, queued, and written by one
writer task from the next loop turn (NatsAsyncTransport.settle_async): what a
consumer settled before it closes, or before its connection closes, is written
before the consumer's deliveries are released (-NAKed) and before the client
closes. A writer slower than every pull request's life makes the order visible:
written late, the acks would follow the release (or find the client closed), and
what was queued while the writer wrote must not be left behind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ackbridge
from ackbridge.testing.faults import transport_of
from ackbridge.testing.harness import eventually
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats

N = 5


def _fill(harness: NatsHarness, queue: str) -> None:
    with ackbridge.connect(harness.url()) as conn:
        for i in range(N):
            conn.publish(queue, b"%d" % i)
        assert conn.flush(timeout=10)


def _slow_writer(conn: Any, delay: float) -> Any:
    inner: Any = transport_of(conn)
    apply = inner.apply

    async def slow_apply(client: Any, ops: Any) -> None:
        await asyncio.sleep(delay)  # longer than a pull request lives (pull_expires=0.5: the stop waits 1.5 s)
        await apply(client, ops)

    inner.apply = slow_apply
    return inner


@pytest.mark.parametrize("closing", ["consumer", "connection"])
def test_settlements_queued_before_a_close_are_written_before_the_release(harness: NatsHarness,
                                                                          closing: str) -> None:
    queue = harness.new_queue()
    _fill(harness, queue)

    async def scenario() -> None:
        conn = await ackbridge.connect_async(harness.url(), pull_expires=0.5)
        inner = _slow_writer(conn, 2.5)
        consumer = await conn.consume(queue, prefetch=N)
        deliveries = [await consumer.get(timeout=10) for _ in range(N)]
        assert all(deliveries)
        await deliveries[0].ack()  # type: ignore[union-attr]
        await asyncio.sleep(0.1)  # the writer takes it and is slow to write it
        for delivery in deliveries[1:]:
            await delivery.ack()  # type: ignore[union-attr]
        assert len(inner.settles.queued) == N - 1  # checked and queued meanwhile: the writer takes them next
        if closing == "consumer":
            await consumer.close()
            assert not inner.settles.queued
        await conn.close()

    asyncio.run(scenario())
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), timeout=10,
               message="every acked delivery acked on the server")
    assert harness.redelivered(queue) == 0
    assert harness.stream_messages(queue) == 0
