"""Settlements made just before a close take effect on the broker (RabbitMQ 3.10.8).

RabbitMQ 3.10's AMQP 1.0 plugin reads frames in its connection process and
hands each session's frames to a session process, which turns every
disposition into a 0-9-1 basic.ack/basic.reject, one call at a time. A
connection ``close`` is handled by the connection process at once: the
session's shutdown overtakes the dispositions still queued for it, and its
backing channel is closed, which puts those deliveries back as ready. So a
burst of settlements followed straight away by a close lost most of them.
The transport now ends each receiver's session and waits for the broker's
``end`` (sent only after every earlier frame of that session was handled)
before it closes the connection; these tests show the counts on the broker.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from ackbridge.connect import connect, connect_async
from ackbridge.testing.harness import eventually
from tests.amqp10.harness import Amqp10Harness, queue_counts, queue_name

pytestmark = pytest.mark.amqp10

#: Enough dispositions that the broker's session process is still working through
#: them when the close reaches the broker (held back together, see held_back()).
BURST = 3000


def held(address: str) -> tuple[int, int]:
    """(ready, unacked) on the broker."""
    return queue_counts().get(queue_name(address), (0, 0))


def settle(delivery: Any, index: int) -> Any:
    """Ack and reject in turn (the queue has no dead-letter target: both remove the
    message): proton sends one disposition frame per delivery instead of one for
    a whole run of accepted ones, so the broker has thousands of frames to work through."""
    return delivery.reject if index % 2 else delivery.ack


def publish_burst(harness: Amqp10Harness, queue: str) -> None:
    with connect(harness.url(), **harness.connect_options()) as conn:
        publisher = conn.publisher()
        for i in range(BURST):
            publisher.publish(queue, f"m-{i}".encode())
        assert publisher.flush(timeout=60)
    eventually(lambda: held(queue) == (BURST, 0), timeout=30, message=f"{BURST} ready before consuming")


def assert_all_removed(queue: str) -> None:
    seen: list[tuple[int, int]] = []

    def empty() -> bool:
        seen.append(held(queue))
        return seen[-1] == (0, 0)

    # A lost ack is for good (the message is ready again), so the wait only covers the
    # broker's own delay in applying what it was sent.
    try:
        eventually(empty, timeout=15, message="every settled message gone")
    except AssertionError:
        raise AssertionError(f"(ready, unacked) after the close: {sorted(set(seen))}") from None


def held_back(harness: Amqp10Harness, seconds: float = 1.0) -> threading.Timer:
    """Hold the client's bytes at the proxy for *seconds*: the burst of dispositions and
    whatever the close sends reach the broker together, as from a busy client."""
    harness.proxy.blackhole(True)
    timer = threading.Timer(seconds, harness.proxy.blackhole, (False,))
    timer.start()
    return timer


def test_acks_just_before_a_close_all_take_effect(harness: Amqp10Harness) -> None:
    queue = harness.new_queue(dead_letter=False)
    publish_burst(harness, queue)
    with connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=BURST)
        deliveries = []
        while len(deliveries) < BURST:
            delivery = consumer.get(timeout=30)
            assert delivery is not None, f"{len(deliveries)} of {BURST} received"
            deliveries.append(delivery)
        timer = held_back(harness)
        for i, delivery in enumerate(deliveries):
            settle(delivery, i)()
        # No consumer.close(): the connection's close must carry them too.
    timer.join()
    assert_all_removed(queue)


def test_acks_just_before_a_consumer_close_all_take_effect_async(harness: Amqp10Harness) -> None:
    queue = harness.new_queue(dead_letter=False)
    publish_burst(harness, queue)

    async def run() -> None:
        async with await connect_async(harness.url(), **harness.connect_options()) as conn:
            consumer = await conn.consume(queue, prefetch=BURST)
            deliveries = []
            while len(deliveries) < BURST:
                delivery = await consumer.get(timeout=30)
                assert delivery is not None, f"{len(deliveries)} of {BURST} received"
                deliveries.append(delivery)
            held_back(harness)
            for i, delivery in enumerate(deliveries):
                await settle(delivery, i)()
            await consumer.close()

    asyncio.run(run())
    assert_all_removed(queue)
