"""The two asyncio transports of ``amqp://`` against raw aio-pika, same run (RabbitMQ).

Not a test: prints figures from one run. Three sides do the same work on the same
queue, alternated within each round: raw aio-pika (its own way: a window of
publishes awaited together; ``queue.iterator()`` with a ``multiple`` ack every
``--every``), ackbridge's aio-pika transport (``asyncio_transport=aio-pika``, on
the caller's loop) and ackbridge's threaded path (the default: pika on an I/O
thread). Work: publish N x 256 B with confirms (window 1000), consume N with
acks (prefetch 1000, an ack flushed every 100). Per-round ratios (paired.py),
median reported. Targets (issue 38): aio-pika transport / raw aio-pika >= 1.0 on
both; its ratio to the threaded path decides the default.

    .venv/bin/python benchmarks/aio_pika_transport_bench.py --n 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import uuid

import aio_pika
import rabbitmq_bench as rb
from async_face_bench import aio_pika_consume, aio_pika_publish, async_consume, async_publish
from paired import paired_line

URL = rb.URL
BODY = rb.BODY
WINDOW, PREFETCH, EVERY = 1000, 1000, 100
SIDES = ("aio-pika raw", "ab aio-pika", "ab threaded")
TRANSPORT = {"ab aio-pika": "aio-pika", "ab threaded": "threaded"}


async def ab_publish(queue: str, n: int, transport: str) -> float:
    return await async_publish(queue, n, WINDOW, asyncio_transport=transport)


async def ab_consume(queue: str, n: int, transport: str) -> float:
    return await async_consume(queue, n, PREFETCH, EVERY, asyncio_transport=transport)


def run_side(side: str, kind: str, queue: str, n: int) -> float:
    if side == "aio-pika raw":
        if kind == "publish":
            return asyncio.run(aio_pika_publish(queue, n, WINDOW))
        return asyncio.run(aio_pika_consume(queue, n, PREFETCH, EVERY))
    if kind == "publish":
        return asyncio.run(ab_publish(queue, n, TRANSPORT[side]))
    return asyncio.run(ab_consume(queue, n, TRANSPORT[side]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.n
    # The bench queue has no dead-letter companion: consume() says so once per connection.
    logging.getLogger("ackbridge").setLevel(logging.ERROR)
    queue = f"ab-aio-pika-bench-{uuid.uuid4().hex[:8]}"
    rb.declare(queue)
    rates: dict[str, dict[str, list[float]]] = {kind: {side: [] for side in SIDES} for kind in ("publish", "consume")}
    try:
        for round_no in range(args.rounds):
            # Rotate who goes first, so no side always meets a freshly quiet broker.
            order = SIDES[round_no % 3:] + SIDES[:round_no % 3]
            for side in order:
                rb.purge(queue)
                rates["publish"][side].append(run_side(side, "publish", queue, n))
            for side in order:
                rb.purge(queue)
                rb.fill(queue, n)
                rates["consume"][side].append(run_side(side, "consume", queue, n))
    finally:
        rb.delete(queue)
    print(f"RabbitMQ asyncio transports: N={n:,}, body=256 B, window {WINDOW}, prefetch {PREFETCH}, ack every "
          f"{EVERY}; {args.rounds} alternated rounds; aio-pika {aio_pika.__version__}")
    for kind, title in (("publish", "publish+confirms"), ("consume", "consume+acks")):
        for side in SIDES:
            shown = " ".join(f"{r:,.0f}" for r in rates[kind][side])
            print(f"{title:<17} {side:<13} {statistics.median(rates[kind][side]):>10,.0f} msg/s   rounds: {shown}")
        by = rates[kind]
        print(paired_line(title, "aio-pika", by["aio-pika raw"], by["ab aio-pika"],
                          "ab aio-pika transport / raw aio-pika (target >= 1.0)"))
        print(paired_line(title, "threaded", by["ab threaded"], by["ab aio-pika"],
                          "ab aio-pika transport / ab threaded (< 1.0: threaded is faster)"))


if __name__ == "__main__":
    main()
