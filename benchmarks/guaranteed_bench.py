"""What guaranteed publishing costs: the same publishes with it off and on, in one run.

Not a test: prints figures from one run. Each round publishes N messages with
confirms through a plain publisher and through one with the guarantee on
(``retransmit=True``; ``sequence=True``), back to back in alternating order on
the same broker, and consumes N with and without ``dedupe_window``. The
figure is the median of the per-round ratios (on / off); ``rounds`` shows the
lowest and highest round. No fault is injected: this is the price of the
bookkeeping when nothing goes wrong (a message id per publish, the attempt
record, the resender thread; the consumer's id window).

    .venv/bin/python benchmarks/guaranteed_bench.py --n 20000 --rounds 5 --brokers embedded rabbitmq
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import ackbridge

BODY = b"x" * 256
WINDOW = 1000
PREFETCH = 500

PUBLISHERS: dict[str, dict[str, Any]] = {
    "retransmit": {"retransmit": True},
    "sequence": {"sequence": True},
    "retransmit+sequence": {"retransmit": True, "sequence": True},
}


def _brokers() -> dict[str, Callable[[], tuple[str, dict[str, Any], Callable[[], None]]]]:
    def embedded() -> tuple[str, dict[str, Any], Callable[[], None]]:
        directory = tempfile.mkdtemp(prefix="guaranteed-bench-")
        return f"local://{directory}/bench.db", {}, lambda: shutil.rmtree(directory, ignore_errors=True)

    def rabbitmq() -> tuple[str, dict[str, Any], Callable[[], None]]:
        return "amqp://guest:guest@127.0.0.1:5672/", {}, lambda: None

    # Not MQTT (a round queues 6n messages before consuming, past Mosquitto's per-session limit) and
    # not NATS (its plugin declares no queues: the streams would be made outside ackbridge).
    return {"embedded": embedded, "rabbitmq": rabbitmq}


def _publish(conn: ackbridge.Connection, queue: str, n: int, options: dict[str, Any]) -> float:
    publisher = conn.publisher(window=WINDOW, **options)
    started = time.perf_counter()
    confirms = [publisher.publish(queue, BODY) for _ in range(n)]
    assert publisher.flush(timeout=300)
    elapsed = time.perf_counter() - started
    bad = [c.outcome for c in confirms if c.outcome is None or not c.outcome.confirmed]
    assert not bad, bad[:3]
    return n / elapsed


def _consume(conn: ackbridge.Connection, queue: str, n: int, dedupe: int | None) -> float:
    consumer = conn.consume(queue, prefetch=PREFETCH, dedupe_window=dedupe)
    started = time.perf_counter()
    for _ in range(n):
        delivery = consumer.get(timeout=60)
        assert delivery is not None, "the queue ran dry"
        delivery.ack()
    consumer.flush()
    elapsed = time.perf_counter() - started
    consumer.close()
    return n / elapsed


def _line(label: str, off: list[float], on: list[float]) -> str:
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    return (f"{label:<40} off {statistics.median(off):>8.0f}   on {statistics.median(on):>8.0f}   "
            f"rounds {min(ratios):.2f}..{max(ratios):.2f}   median ratio {statistics.median(ratios):.2f}")


def run_broker(name: str, n: int, rounds: int) -> list[str]:
    url, options, cleanup = _brokers()[name]()
    queue = f"guaranteed-bench-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    try:
        with ackbridge.connect(url, **options) as conn:
            conn.declare_queue(queue, dead_letter=False)
            try:
                publish: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in PUBLISHERS}
                consume: tuple[list[float], list[float]] = ([], [])
                for r in range(rounds):
                    for label, guarantee in PUBLISHERS.items():
                        # alternate which goes first: drift within a round falls on both sides
                        order = [({}, 0), (guarantee, 1)][:: 1 if r % 2 == 0 else -1]
                        for opts, side in order:
                            publish[label][side].append(_publish(conn, queue, n, opts))
                    # what the publishes above left: consume n with the window off, n with it on (alternating)
                    for dedupe, side in [(None, 0), (10_000, 1)][:: 1 if r % 2 == 0 else -1]:
                        consume[side].append(_consume(conn, queue, n, dedupe))
                    conn.purge_queue(queue)
                for label, (off, on) in publish.items():
                    lines.append(_line(f"{name}: publish, {label}", off, on))
                lines.append(_line(f"{name}: consume, dedupe_window=10000", *consume))
            finally:
                conn.delete_queue(queue, dead_letter=False)
    finally:
        cleanup()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--brokers", nargs="*", default=["embedded", "rabbitmq"], choices=list(_brokers()))
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"n={args.n} x {len(BODY)} B, window={WINDOW}, prefetch={PREFETCH}, {args.rounds} paired rounds; "
          "msgs/s medians, ratio = on / off")
    for broker in args.brokers:
        for line in run_broker(broker, args.n, args.rounds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
