"""ackbridge's side of a row for any URL, both faces, where no older benchmark has it.

The RabbitMQ, NATS, MQTT (sync) and AMQP 1.0 (sync) rows reuse the ackbridge
functions of their own benchmark modules; these serve the rest (the asyncio face
of MQTT and AMQP 1.0, RabbitMQ streams, the embedded broker) with the same shape:
``publisher(window=...)`` then ``flush()``; ``consume(prefetch=...)`` with a
``get()`` + ``ack()`` loop (the default ``conflate_count=1``: every ack goes to
the wire) then ``flush()``. Each times its work between two ``CLOCK.perf_counter()``
calls, connection set-up left out.
"""

from __future__ import annotations

import threading
from typing import Any

from cpu_clock import CLOCK

import ackbridge


def publish(url: str, destination: str, n: int, window: int, body: bytes, **options: Any) -> None:
    with ackbridge.connect(url, **options) as conn:
        publisher = conn.publisher(window=window)
        CLOCK.perf_counter()
        for _ in range(n):
            publisher.publish(destination, body)
        assert publisher.flush(timeout=300)
        CLOCK.perf_counter()


def consume(url: str, source: str, n: int, prefetch: int, **options: Any) -> None:
    with ackbridge.connect(url, **options) as conn:
        consumer = conn.consume(source, prefetch=prefetch)
        first = consumer.get(timeout=60)  # the subscription is up: the clock starts
        assert first is not None
        CLOCK.perf_counter()
        first.ack()
        for _ in range(n - 1):
            delivery = consumer.get(timeout=60)
            assert delivery is not None
            delivery.ack()
        consumer.flush()
        CLOCK.perf_counter()
        consumer.close()


def consume_handler(url: str, source: str, n: int, prefetch: int, **options: Any) -> None:
    """``consume(handler=...)``: each delivery acked in the handler (the default handler
    thread, off the transport's I/O thread), in the shape of a raw client's callback."""
    done = threading.Event()
    handled = [0]

    def handler(delivery: Any) -> None:
        if not handled[0]:
            CLOCK.perf_counter()  # the subscription is up and delivering: the clock starts
        delivery.ack()
        handled[0] += 1
        if handled[0] == n:
            done.set()

    with ackbridge.connect(url, **options) as conn:
        consumer = conn.consume(source, prefetch=prefetch, handler=handler)
        assert done.wait(300), f"ran dry after {handled[0]}"
        consumer.flush()
        CLOCK.perf_counter()
        consumer.close()


async def publish_async(url: str, destination: str, n: int, window: int, body: bytes, **options: Any) -> None:
    conn = await ackbridge.connect_async(url, **options)
    try:
        publisher = conn.publisher(window=window)
        CLOCK.perf_counter()
        for _ in range(n):
            await publisher.publish(destination, body)
        assert await publisher.flush(timeout=300)
        CLOCK.perf_counter()
    finally:
        await conn.close()


async def consume_async(url: str, source: str, n: int, prefetch: int, **options: Any) -> None:
    conn = await ackbridge.connect_async(url, **options)
    try:
        consumer = await conn.consume(source, prefetch=prefetch)
        first = await consumer.get(timeout=60)
        assert first is not None
        CLOCK.perf_counter()
        await first.ack()
        for _ in range(n - 1):
            delivery = await consumer.get(timeout=60)
            assert delivery is not None
            await delivery.ack()
        await consumer.flush()
        CLOCK.perf_counter()
        await consumer.close()
    finally:
        await conn.close()
