"""Embedded-broker throughput, and what the core's settlement layer costs on top.

Not a test: prints figures from one run. The same work is done twice on the
same broker file: once through ``ackbridge.connect`` (state machine, windows,
confirms), once by driving the ``local://`` transport directly. The ratio is
the core's overhead (target: core adds under 10%, i.e. ratio >= 0.90).

    .venv/bin/python benchmarks/core_bench.py --n 20000
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import ackbridge
from ackbridge.messages import ConfirmOutcome, InboundMessage, OutboundMessage, WireSettle, WireVerb
from ackbridge.urls import parse_url
from ackbridge_local.transport import LocalTransport

BODY = b"x" * 256


class DirectEvents:
    """The least a caller of the transport must do: count confirms and deliveries."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.deliveries: list[InboundMessage] = []
        self.cond = threading.Condition()

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        with self.cond:
            self.deliveries.append(message)
            self.cond.notify()

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        with self.cond:
            self.confirmed += 1
            self.cond.notify()

    def generation_ended(self, generation: int, reason: str) -> None:
        pass

    def reply(self, message: InboundMessage) -> None:
        pass


def direct(url: str, options: Mapping[str, Any], n: int, window: int, prefetch: int) -> tuple[float, float]:
    events = DirectEvents()
    transport = LocalTransport(parse_url(url), options, events)
    transport.open()
    queue = f"direct-{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    for seq in range(1, n + 1):
        with events.cond:
            while seq - events.confirmed > window:
                events.cond.wait()
        transport.publish(seq, queue, OutboundMessage(BODY, message_id=str(seq)))
    with events.cond:
        while events.confirmed < n:
            events.cond.wait()
    publish_s = time.perf_counter() - start
    start = time.perf_counter()
    transport.subscribe("s", queue, prefetch=prefetch)
    settled = 0
    while settled < n:
        with events.cond:
            while not events.deliveries:
                events.cond.wait()
            batch, events.deliveries = events.deliveries, []
        for message in batch:
            transport.settle([WireSettle(WireVerb.ACK, message.wire_tag, message.generation, "s", False, message)])
            settled += 1
    consume_s = time.perf_counter() - start
    transport.close()
    return n / publish_s, n / consume_s


def through_core(url: str, n: int, window: int, prefetch: int) -> tuple[float, float]:
    queue = f"core-{uuid.uuid4().hex[:6]}"
    with ackbridge.connect(url) as conn:
        publisher = conn.publisher(window=window)
        start = time.perf_counter()
        for i in range(n):
            publisher.publish(queue, BODY, message_id=str(i))
        publisher.flush()
        publish_s = time.perf_counter() - start
        start = time.perf_counter()
        consumer = conn.consume(queue, prefetch=prefetch)
        for _ in range(n):
            delivery = consumer.get(timeout=60)
            assert delivery is not None
            delivery.ack()
        consume_s = time.perf_counter() - start
    return n / publish_s, n / consume_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"local://{tmp}/bench.db"
        options = {"lease_timeout": 30.0, "fsync": True, "max_message_bytes": 16 << 20, "poll_ms": 20.0}
        rows = []
        for _ in range(args.rounds):  # interleave so machine noise hits both sides alike
            rows.append((direct(url, options, args.n, args.window, args.prefetch),
                         through_core(url, args.n, args.window, args.prefetch)))
    best_direct = (max(r[0][0] for r in rows), max(r[0][1] for r in rows))
    best_core = (max(r[1][0] for r in rows), max(r[1][1] for r in rows))
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"SQLite WAL fsync=on; n={args.n} x {len(BODY)} B, window={args.window}, prefetch={args.prefetch}, "
          f"best of {args.rounds}")
    print(f"{'work':34} {'transport msgs/s':>17} {'ackbridge msgs/s':>17} {'ratio':>7}")
    for name, d, c in (("publish with confirms", best_direct[0], best_core[0]),
                       ("consume with per-message ack", best_direct[1], best_core[1])):
        print(f"{name:34} {d:17,.0f} {c:17,.0f} {c / d:7.2f}")
    worst = min(best_core[0] / best_direct[0], best_core[1] / best_direct[1])
    print(f"core overhead: {max(0.0, 1 - worst):.1%} (target < 10%)")


if __name__ == "__main__":
    main()
