"""JetStream throughput: ackbridge vs raw nats-py doing the same work, in one run.

* publish: N publishes, each confirmed by a PubAck, up to 1000 unconfirmed,
  wait for all. Raw: ``js.publish_async`` futures, gathered in windows.
  ackbridge: ``publisher(window=1000).publish`` then ``flush`` (the sync face,
  whose loop runs on its own thread, and the native async face).
* consume: a backlog of M messages on a durable pull consumer, +ACK each.
  Raw: ``pull_subscribe`` + ``fetch(100)`` + ``msg.ack()``. ackbridge:
  ``consume(prefetch=100)`` with ``get()`` + ``ack()`` (sync and async faces).

Usage: .venv/bin/python benchmarks/nats_bench.py [--n 20000] [--m 20000] [--rounds 5]
Prints msgs/s and the ratio ackbridge / raw (target >= 0.9): the median of the
per-round ratios, each round timing raw and ackbridge back to back (benchmarks/paired.py).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import nats
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from paired import paired_line

import ackbridge
from ackbridge_nats.naming import DEFAULT_DURABLE, stream_name

URL = "nats://127.0.0.1:4222"
WINDOW = 1000
PREFETCH = 100
BODY = b"x" * 100


async def _new_queue(nc: nats.NATS) -> str:
    subject = f"bench.{uuid.uuid4().hex[:10]}"
    stream = stream_name(subject)
    await nc.jsm().add_stream(StreamConfig(name=stream, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE,
                                           storage=StorageType.MEMORY))
    await nc.jsm().add_consumer(stream, ConsumerConfig(durable_name=DEFAULT_DURABLE, ack_policy=AckPolicy.EXPLICIT,
                                                       filter_subject=subject, max_ack_pending=PREFETCH))
    return subject


async def _fill(nc: nats.NATS, subject: str, m: int) -> None:
    js = nc.jetstream()
    for start in range(0, m, WINDOW):
        futures = [await js.publish_async(subject, BODY) for _ in range(min(WINDOW, m - start))]
        await asyncio.gather(*futures)


async def raw_publish(nc: nats.NATS, n: int) -> float:
    subject = await _new_queue(nc)
    js = nc.jetstream()
    started = time.perf_counter()
    pending: list[asyncio.Future[object]] = []
    for _ in range(n):
        pending.append(await js.publish_async(subject, BODY))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending[: WINDOW // 2])
            del pending[: WINDOW // 2]
    await asyncio.gather(*pending)
    rate = n / (time.perf_counter() - started)
    await nc.jsm().delete_stream(stream_name(subject))
    return rate


async def raw_consume(nc: nats.NATS, m: int) -> float:
    subject = await _new_queue(nc)
    await _fill(nc, subject, m)
    sub = await nc.jetstream().pull_subscribe_bind(DEFAULT_DURABLE, stream_name(subject))
    started = time.perf_counter()
    done = 0
    while done < m:
        for msg in await sub.fetch(PREFETCH, timeout=10):
            await msg.ack()
            done += 1
    rate = m / (time.perf_counter() - started)
    await nc.jsm().delete_stream(stream_name(subject))
    return rate


def ab_publish(nc_loop: asyncio.AbstractEventLoop, nc: nats.NATS, n: int) -> float:
    subject = asyncio.run_coroutine_threadsafe(_new_queue(nc), nc_loop).result()
    with ackbridge.connect(URL) as conn:
        publisher = conn.publisher(window=WINDOW)
        started = time.perf_counter()
        for _ in range(n):
            publisher.publish(subject, BODY)
        assert publisher.flush(timeout=120)
        rate = n / (time.perf_counter() - started)
    asyncio.run_coroutine_threadsafe(nc.jsm().delete_stream(stream_name(subject)), nc_loop).result()
    return rate


def ab_consume(nc_loop: asyncio.AbstractEventLoop, nc: nats.NATS, m: int) -> float:
    subject = asyncio.run_coroutine_threadsafe(_new_queue(nc), nc_loop).result()
    asyncio.run_coroutine_threadsafe(_fill(nc, subject, m), nc_loop).result()
    with ackbridge.connect(URL) as conn:
        consumer = conn.consume(subject, prefetch=PREFETCH)
        started = time.perf_counter()
        for _ in range(m):
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            delivery.ack()
        consumer.flush()
        rate = m / (time.perf_counter() - started)
    asyncio.run_coroutine_threadsafe(nc.jsm().delete_stream(stream_name(subject)), nc_loop).result()
    return rate


async def ab_publish_async(nc: nats.NATS, n: int) -> float:
    subject = await _new_queue(nc)
    conn = await ackbridge.connect_async(URL)
    publisher = conn.publisher(window=WINDOW)
    started = time.perf_counter()
    for _ in range(n):
        await publisher.publish(subject, BODY)
    assert await publisher.flush(timeout=120)
    rate = n / (time.perf_counter() - started)
    await conn.close()
    await nc.jsm().delete_stream(stream_name(subject))
    return rate


async def ab_consume_async(nc: nats.NATS, m: int) -> float:
    subject = await _new_queue(nc)
    await _fill(nc, subject, m)
    conn = await ackbridge.connect_async(URL)
    consumer = await conn.consume(subject, prefetch=PREFETCH)
    started = time.perf_counter()
    for _ in range(m):
        delivery = await consumer.get(timeout=30)
        assert delivery is not None
        await delivery.ack()
    await consumer.flush()
    rate = m / (time.perf_counter() - started)
    await conn.close()
    await nc.jsm().delete_stream(stream_name(subject))
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000, help="publishes per round")
    parser.add_argument("--m", type=int, default=20_000, help="backlog consumed per round")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (raw and ackbridge back to back)")
    args = parser.parse_args()

    # The raw client (and the queue set-up) live on a loop of their own thread, so the
    # sync ackbridge rounds run on the main thread as an application's would.
    loop = asyncio.new_event_loop()
    import threading

    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(coro: object) -> float:
        return float(asyncio.run_coroutine_threadsafe(coro, loop).result())  # type: ignore[arg-type]

    nc = asyncio.run_coroutine_threadsafe(nats.connect(URL), loop).result()
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in (
        "publish sync", "publish async", "consume sync", "consume async")}
    for _ in range(args.rounds):
        raw = run(raw_publish(nc, args.n))
        results["publish sync"][0].append(raw)
        results["publish sync"][1].append(ab_publish(loop, nc, args.n))
        raw = run(raw_publish(nc, args.n))
        results["publish async"][0].append(raw)
        results["publish async"][1].append(run(ab_publish_async(nc, args.n)))
        raw = run(raw_consume(nc, args.m))
        results["consume sync"][0].append(raw)
        results["consume sync"][1].append(ab_consume(loop, nc, args.m))
        raw = run(raw_consume(nc, args.m))
        results["consume async"][0].append(raw)
        results["consume async"][1].append(run(ab_consume_async(nc, args.m)))
    asyncio.run_coroutine_threadsafe(nc.close(), loop).result()
    print(f"NATS JetStream (nats-server on 127.0.0.1:4222, memory streams), {args.rounds} paired rounds, "
          f"N={args.n} M={args.m}, msgs/s")
    for label, (raw_rates, ab_rates) in results.items():
        print(paired_line(label, "nats-py", raw_rates, ab_rates))


if __name__ == "__main__":
    main()
