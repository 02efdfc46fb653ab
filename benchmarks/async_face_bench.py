"""The asyncio face against the sync face and raw aio-pika, same run (RabbitMQ).

Not a test: prints figures from one run. Every side does the same work on the
same queue, alternated, median of ``--rounds``: publish N x 256 B with
confirms (window 1000), and consume N with acks (prefetch 1000, an ack every
100 deliveries). Targets (issue 14): async/sync >= 0.9 on both, async/aio-pika
>= 1.0.

    .venv/bin/python benchmarks/async_face_bench.py --n 50000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import aio_pika
import rabbitmq_bench as rb

from ackbridge.connect import connect_async

URL = rb.URL
BODY = rb.BODY


async def async_publish(queue: str, n: int, window: int, **connect_options: Any) -> float:
    conn = await connect_async(URL, **connect_options)
    try:
        publisher = conn.publisher(window=window)
        t0 = time.perf_counter()
        for _ in range(n):
            await publisher.publish(queue, BODY)
        assert await publisher.flush(timeout=300)
        return n / (time.perf_counter() - t0)
    finally:
        await conn.close()


async def async_consume(queue: str, n: int, prefetch: int, every: int, **connect_options: Any) -> float:
    conn = await connect_async(URL, **connect_options)
    try:
        consumer = await conn.consume(queue, prefetch=prefetch, conflate_count=every, conflate_ms=50)
        t0 = time.perf_counter()
        for _ in range(n):
            delivery = await consumer.get(timeout=10)
            assert delivery is not None
            await delivery.ack()
        await consumer.flush()
        elapsed = time.perf_counter() - t0
        await consumer.close()
        return n / elapsed
    finally:
        await conn.close()


async def aio_pika_publish(queue: str, n: int, window: int) -> float:
    """aio-pika's own way to keep `window` confirms in flight: that many publishes awaited together."""
    conn = await aio_pika.connect(URL)
    try:
        channel = await conn.channel(publisher_confirms=True)
        exchange = channel.default_exchange
        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            batch = min(window, n - sent)
            await asyncio.gather(*(exchange.publish(
                aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue)
                for _ in range(batch)))
            sent += batch
        return n / (time.perf_counter() - t0)
    finally:
        await conn.close()


async def aio_pika_consume(queue: str, n: int, prefetch: int, every: int) -> float:
    conn = await aio_pika.connect(URL)
    try:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=prefetch)
        source = await channel.get_queue(queue, ensure=False)
        got = 0
        t0 = time.perf_counter()
        async with source.iterator() as messages:
            async for message in messages:
                got += 1
                if got % every == 0 or got == n:
                    await message.ack(multiple=True)
                if got >= n:
                    break
        return got / (time.perf_counter() - t0)
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.n
    queue = f"ab-async-bench-{uuid.uuid4().hex[:8]}"
    rb.declare(queue)
    pub: dict[str, list[float]] = {"sync": [], "async": [], "aio-pika": []}
    con: dict[str, list[float]] = {"sync": [], "async": [], "aio-pika": []}
    try:
        for _ in range(args.rounds):
            rb.purge(queue)
            pub["sync"].append(rb.ab_publish(queue, n, 1000))
            rb.purge(queue)
            pub["async"].append(asyncio.run(async_publish(queue, n, 1000)))
            rb.purge(queue)
            pub["aio-pika"].append(asyncio.run(aio_pika_publish(queue, n, 1000)))
        for _ in range(args.rounds):
            rb.fill(queue, n)
            con["sync"].append(rb.ab_consume(queue, n, 1000, 100))
            rb.fill(queue, n)
            con["async"].append(asyncio.run(async_consume(queue, n, 1000, 100)))
            rb.fill(queue, n)
            con["aio-pika"].append(asyncio.run(aio_pika_consume(queue, n, 1000, 100)))
    finally:
        rb.delete(queue)
    med = {k: statistics.median(v) for k, v in pub.items()}
    cmed = {k: statistics.median(v) for k, v in con.items()}
    print(f"RabbitMQ async face benchmark: N={n:,}, body=256 B, median of {args.rounds} alternated rounds")
    for title, figures, rounds in (("publish+confirms", med, pub), ("consume+acks", cmed, con)):
        for side in ("sync", "async", "aio-pika"):
            shown = " ".join(f"{r:,.0f}" for r in rounds[side])
            print(f"{title:<17} {side:<9} {figures[side]:>10,.0f} msg/s   rounds: {shown}")
        print(f"{title:<17} ratio async/sync {figures['async'] / figures['sync']:.2f}   "
              f"async/aio-pika {figures['async'] / figures['aio-pika']:.2f}")


if __name__ == "__main__":
    main()
