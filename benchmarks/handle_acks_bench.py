"""The driver's work in ``fetch=executors`` (docs/spark.md): acking deliveries by their
ack handles from a connection that did not receive them, ackbridge vs raw nats-py.

Each round fills a JetStream work queue with M messages and pulls them all on one
connection (raw ``fetch``, nothing acked), keeping their reply subjects -- the ack
handles. Then, timed, on a second connection:

* raw: ``nc.publish(reply, b"+ACK")`` for each handle, then one ``flush()``;
* ackbridge: ``Connection.settle_handles(handles)`` (the sync face, whose loop runs
  on its own thread), which checks the handles and does the same on the wire.

Afterwards the server must hold nothing pending or ack-pending. Prints acks/s, the
median paired ratio (target >= 0.9), and CPU microseconds per ack of this process
(every thread): the driver's cost per message in the 32-executor model.

Usage: .venv/bin/python benchmarks/handle_acks_bench.py [--m 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid

import nats
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from paired import paired_line

import ackbridge
from ackbridge_nats.naming import DEFAULT_DURABLE, stream_name

URL = "nats://127.0.0.1:4222"
BODY = b"x" * 100


async def pulled_handles(nc: nats.NATS, m: int) -> tuple[str, list[str]]:
    """A new work queue of *m* messages, all pulled and none acked: (subject, reply subjects)."""
    subject = f"bench.handles.{uuid.uuid4().hex[:10]}"
    stream = stream_name(subject)
    await nc.jsm().add_stream(StreamConfig(name=stream, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE,
                                           storage=StorageType.MEMORY))
    await nc.jsm().add_consumer(stream, ConsumerConfig(durable_name=DEFAULT_DURABLE, ack_policy=AckPolicy.EXPLICIT,
                                                       filter_subject=subject, max_ack_pending=m, ack_wait=300))
    js = nc.jetstream()
    for start in range(0, m, 1000):
        await asyncio.gather(*[await js.publish_async(subject, BODY) for _ in range(min(1000, m - start))])
    sub = await js.pull_subscribe_bind(DEFAULT_DURABLE, stream)
    replies: list[str] = []
    while len(replies) < m:
        replies.extend(msg.reply for msg in await sub.fetch(min(1000, m - len(replies)), timeout=10))
    await sub.unsubscribe()
    return subject, replies


async def settled_on_server(nc: nats.NATS, subject: str) -> None:
    """Wait until the server holds nothing of *subject*'s queue, then delete it."""
    stream = stream_name(subject)
    for _ in range(200):
        info = await nc.jsm().consumer_info(stream, DEFAULT_DURABLE)
        if info.num_pending == 0 and info.num_ack_pending == 0:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"server still holds {info.num_pending} pending, {info.num_ack_pending} ack-pending")
    await nc.jsm().delete_stream(stream)


async def raw_acks(replies: list[str]) -> tuple[float, float]:
    nc = await nats.connect(URL)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for reply in replies:
            await nc.publish(reply, b"+ACK")
        await nc.flush()
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await nc.close()


def ackbridge_acks(replies: list[str]) -> tuple[float, float]:
    with ackbridge.connect(URL) as conn:
        wall, cpu = time.perf_counter(), time.process_time()
        result = conn.settle_handles(replies)
        elapsed = time.perf_counter() - wall, time.process_time() - cpu
    assert result.settled == len(replies), result
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=20_000, help="handles acked per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

    nc = run(nats.connect(URL))
    raw_rates: list[float] = []
    ab_rates: list[float] = []
    raw_cpu: list[float] = []
    ab_cpu: list[float] = []
    for _ in range(args.rounds):
        subject, replies = run(pulled_handles(nc, args.m))  # type: ignore[misc]
        wall, cpu = run(raw_acks(replies))  # type: ignore[misc]
        run(settled_on_server(nc, subject))
        raw_rates.append(args.m / wall)
        raw_cpu.append(cpu / args.m * 1e6)
        subject, replies = run(pulled_handles(nc, args.m))  # type: ignore[misc]
        wall, cpu = ackbridge_acks(replies)
        run(settled_on_server(nc, subject))
        ab_rates.append(args.m / wall)
        ab_cpu.append(cpu / args.m * 1e6)
    run(nc.close())  # type: ignore[union-attr]
    print(f"acks by handle from a second connection (NATS JetStream, memory stream), {args.rounds} paired rounds, "
          f"M={args.m}, acks/s")
    print(paired_line("settle by handle (sync face)", "nats-py", raw_rates, ab_rates))
    print(f"CPU per ack, this process (us, median): nats-py {statistics.median(raw_cpu):.1f}, "
          f"ackbridge {statistics.median(ab_cpu):.1f}")


if __name__ == "__main__":
    main()
