"""Embedded-broker throughput, and what the core's settlement layer costs on top.

Not a test: prints figures from one run. The same work is done twice on the
same broker file: once through ``ackbridge.connect`` (state machine, windows,
confirms), once by driving the ``local://`` transport directly. The ratio is
the core's overhead (target: core adds under 10%, i.e. ratio >= 0.90).

Each round runs both sides back to back; the overhead is taken from the median
of the per-round (paired) ratios, which one slow round cannot move the way it
moves a best-of figure (benchmarks/paired.py). Best-of figures are printed too.

    .venv/bin/python benchmarks/core_bench.py --n 20000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import ackbridge
from ackbridge.messages import ConfirmOutcome, InboundMessage, OutboundMessage, WireSettle, WireVerb
from ackbridge.urls import parse_url
from ackbridge_local.connection import LocalTransport

BODY = b"x" * 256


class DirectEvents:
    """The least a caller of the transport must do: count confirms and deliveries."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.deliveries: list[InboundMessage] = []
        self.cond = threading.Condition()
        #: Set: settle each delivery right here, on the transport's thread.
        self.inline: LocalTransport | None = None
        self.settled = 0

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        if self.inline is not None:
            self.inline.settle([WireSettle(WireVerb.ACK, message.wire_tag, message.generation, subscription, False,
                                           message)])
            with self.cond:
                self.settled += 1
                self.cond.notify()
            return
        with self.cond:
            self.deliveries.append(message)
            self.cond.notify()

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        with self.cond:
            self.confirmed += 1
            self.cond.notify()

    def confirm_batch(self, outcomes: Sequence[tuple[int, ConfirmOutcome]]) -> None:
        with self.cond:
            self.confirmed += len(outcomes)
            self.cond.notify()

    def generation_ended(self, generation: int, reason: str) -> None:
        pass

    def reply(self, message: InboundMessage) -> None:
        pass


def open_direct(url: str, options: Mapping[str, Any]) -> tuple[LocalTransport, DirectEvents]:
    events = DirectEvents()
    transport = LocalTransport(parse_url(url), options, events)
    transport.open()
    return transport, events


def direct_publish(transport: LocalTransport, events: DirectEvents, queue: str, n: int,
                   window: int) -> tuple[float, float]:
    """Publish *n* with at most *window* unconfirmed, straight to the transport: (msgs/s, CPU s per message)."""
    start, cpu = time.perf_counter(), time.process_time()
    base = events.confirmed
    for seq in range(base + 1, base + n + 1):
        with events.cond:
            while seq - events.confirmed > window:
                events.cond.wait()
        transport.publish(seq, queue, OutboundMessage(BODY, message_id=str(seq)))
    with events.cond:
        while events.confirmed < base + n:
            events.cond.wait()
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n


def direct_consume(transport: LocalTransport, events: DirectEvents, queue: str, n: int, prefetch: int,
                   *, inline: bool = False) -> tuple[float, float]:
    """Consume and ack *n* straight from the transport. ``inline``: settle inside deliver,
    on the transport's thread; otherwise hand batches of deliveries to this thread."""
    start, cpu = time.perf_counter(), time.process_time()
    if inline:
        events.inline = transport
        transport.subscribe("s", queue, prefetch=prefetch)
        with events.cond:
            while events.settled < n:
                events.cond.wait()
    else:
        transport.subscribe("s", queue, prefetch=prefetch)
        settled = 0
        while settled < n:
            with events.cond:
                while not events.deliveries:
                    events.cond.wait()
                batch, events.deliveries = events.deliveries, []
            for message in batch:
                transport.settle([WireSettle(WireVerb.ACK, message.wire_tag, message.generation, "s", False,
                                             message)])
                settled += 1
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n


def direct(url: str, options: Mapping[str, Any], n: int, window: int, prefetch: int,
           *, inline: bool = False) -> tuple[float, float, float, float]:
    """Drive the transport with no core: publish *n*, then consume them."""
    transport, events = open_direct(url, options)
    queue = f"direct-{uuid.uuid4().hex[:6]}"
    publish_rate, publish_cpu = direct_publish(transport, events, queue, n, window)
    consume_rate, consume_cpu = direct_consume(transport, events, queue, n, prefetch, inline=inline)
    transport.close()
    return publish_rate, consume_rate, publish_cpu, consume_cpu


def core_publish(conn: ackbridge.Connection, queue: str, n: int, window: int) -> tuple[float, float]:
    publisher = conn.publisher(window=window)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        publisher.publish(queue, BODY, message_id=str(i))
    publisher.flush()
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n


def core_consume(conn: ackbridge.Connection, queue: str, n: int, prefetch: int) -> tuple[float, float]:
    """A get() loop, each delivery acked on the caller's thread."""
    start, cpu = time.perf_counter(), time.process_time()
    consumer = conn.consume(queue, prefetch=prefetch)
    for _ in range(n):
        delivery = consumer.get(timeout=60)
        assert delivery is not None
        delivery.ack()
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n


def core_consume_handler(conn: ackbridge.Connection, queue: str, n: int, prefetch: int) -> tuple[float, float]:
    """Consume with consume(handler=...): each delivery acked on the consumer's handler thread."""
    cond = threading.Condition()
    settled = [0]

    def handler(delivery: ackbridge.Delivery) -> None:
        delivery.ack()
        with cond:
            settled[0] += 1
            cond.notify()

    start, cpu = time.perf_counter(), time.process_time()
    consumer = conn.consume(queue, prefetch=prefetch, handler=handler)
    with cond:
        while settled[0] < n:
            cond.wait()
    rate, cpu_each = n / (time.perf_counter() - start), (time.process_time() - cpu) / n
    consumer.close()
    return rate, cpu_each


def through_core(url: str, n: int, window: int, prefetch: int) -> tuple[float, float, float, float]:
    queue = f"core-{uuid.uuid4().hex[:6]}"
    with ackbridge.connect(url) as conn:
        publish_rate, publish_cpu = core_publish(conn, queue, n, window)
        consume_rate, consume_cpu = core_consume(conn, queue, n, prefetch)
    return publish_rate, consume_rate, publish_cpu, consume_cpu


def through_core_handler(url: str, n: int, prefetch: int) -> tuple[float, float]:
    queue = f"hnd-{uuid.uuid4().hex[:6]}"
    with ackbridge.connect(url) as conn:
        publisher = conn.publisher()
        for i in range(n):
            publisher.publish(queue, BODY, message_id=str(i))
        publisher.flush()
        return core_consume_handler(conn, queue, n, prefetch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"local://{tmp}/bench.db"
        options = {"lease_timeout": 30.0, "fsync": True, "max_message_bytes": 16 << 20, "poll_ms": 20.0}
        rows = []
        for _ in range(args.rounds):  # interleave so machine noise hits both sides alike
            rows.append((direct(url, options, args.n, args.window, args.prefetch),
                         through_core(url, args.n, args.window, args.prefetch),
                         direct(url, options, args.n, args.window, args.prefetch, inline=True),
                         through_core_handler(url, args.n, args.prefetch)))
    # The consume baseline is the faster of the two direct shapes (hand-off or inline).
    best_direct = (max(r[0][0] for r in rows), max(max(r[0][1], r[2][1]) for r in rows))
    best_core = (max(r[1][0] for r in rows), max(r[1][1] for r in rows))
    best_handler = max(r[3][0] for r in rows)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"SQLite WAL fsync=on; n={args.n} x {len(BODY)} B, window={args.window}, prefetch={args.prefetch}, "
          f"best of {args.rounds}")
    print(f"{'work':34} {'transport msgs/s':>17} {'ackbridge msgs/s':>17} {'ratio':>7}")
    for name, d, c in (("publish with confirms", best_direct[0], best_core[0]),
                       ("consume, per-message ack, get()", best_direct[1], best_core[1]),
                       ("consume, per-message ack, handler", best_direct[1], best_handler)):
        print(f"{name:34} {d:17,.0f} {c:17,.0f} {c / d:7.2f}")
    print("consume baseline: the faster direct shape each round (settle in deliver, or hand batches to the caller)")
    consume = max(best_core[1], best_handler)
    worst = min(best_core[0] / best_direct[0], consume / best_direct[1])
    print(f"core overhead, best of {args.rounds}: {max(0.0, 1 - worst):.1%} (consume: the faster ackbridge way)")
    # Paired: each round's ackbridge rate over the same round's transport rate.
    publish_ratios = [r[1][0] / r[0][0] for r in rows]
    consume_ratios = [max(r[1][1], r[3][0]) / max(r[0][1], r[2][1]) for r in rows]
    get_ratios = [r[1][1] / max(r[0][1], r[2][1]) for r in rows]
    for name, ratios in (("publish with confirms", publish_ratios), ("consume (faster ackbridge way)", consume_ratios),
                         ("consume, get() loop", get_ratios)):
        print(f"paired ratio {name:31} rounds {min(ratios):.2f}..{max(ratios):.2f}   "
              f"median {statistics.median(ratios):.2f}")
    paired = min(statistics.median(publish_ratios), statistics.median(consume_ratios))
    print(f"core overhead: {max(0.0, 1 - paired):.1%} (target < 10%; median of {args.rounds} paired rounds)")
    # CPU seconds of the whole process per message (every thread): steadier than
    # throughput when other work shares the machine. Ratio = transport / ackbridge.
    cpu_direct = (min(r[0][2] for r in rows), min(min(r[0][3], r[2][3]) for r in rows))
    cpu_core = (min(r[1][2] for r in rows), min(min(r[1][3], r[3][1]) for r in rows))
    print(f"{'CPU per message':34} {'transport us':>17} {'ackbridge us':>17} {'ratio':>7}")
    for name, d, c in (("publish with confirms", cpu_direct[0], cpu_core[0]),
                       ("consume, per-message ack (faster)", cpu_direct[1], cpu_core[1])):
        print(f"{name:34} {d * 1e6:17.1f} {c * 1e6:17.1f} {d / c:7.2f}")
    print(f"core overhead in CPU: {max(0.0, 1 - min(cpu_direct[0] / cpu_core[0], cpu_direct[1] / cpu_core[1])):.1%}")

if __name__ == "__main__":
    main()
