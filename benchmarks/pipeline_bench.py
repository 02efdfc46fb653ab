"""What the handler pipeline costs when nothing fails: pipeline consume against plain consume, same run.

Not a test: prints figures from one run (issue 36's target: the pipeline costs < 5%).
Each round fills one queue with N x 256 B messages (each with its own message id, so
the pipeline's recognition window does its insert), then drains it twice, once per
side, in an order that alternates from round to round:

* plain: ``conn.consume(queue, handler=h, prefetch=P)``, ``h`` acks its delivery;
* pipeline: ``Pipeline(conn, queue, policy=RedeliveryPolicy(attempts=3)).consume(h, prefetch=P)``,
  ``h`` returns and the pipeline acks. The policy has two back-off levels, so the
  pipeline also declares two delay queues and runs their two (idle) pumps: that is
  part of what a policy costs.

Per side: CPU seconds of the whole process over the drain (``time.process_time``:
every thread, from ``consume()`` to the last ack flushed) divided by N, and
throughput (N over the same wall time). Filling is not counted. The figure reported
is the median of the per-round ratios (benchmarks/paired.py): CPU pipeline / plain
(the cost: 1.03 = 3% more CPU per message) and throughput pipeline / plain.

    .venv/bin/python benchmarks/pipeline_bench.py --n 20000 --rounds 5
    .venv/bin/python benchmarks/pipeline_bench.py --brokers rabbitmq --faces sync,asyncio
    .venv/bin/python benchmarks/pipeline_bench.py --profile embedded   # cProfile of the pipeline side

``--profile BROKER`` drains once through the pipeline (sync face) under cProfile and
prints the functions of ``ackbridge/pipeline/`` and the top of the whole drain.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import ackbridge
from ackbridge.kernel.backoff import Schedule
from ackbridge.pipeline import RedeliveryPolicy
from ackbridge.pipeline.aio import Pipeline as AsyncPipeline
from ackbridge.pipeline.sync import Pipeline

BODY = b"x" * 256
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"
#: Two back-off levels: the pipeline declares two delay queues and runs two pumps.
POLICY = RedeliveryPolicy(attempts=int(os.environ.get("PIPELINE_BENCH_ATTEMPTS", "3")),
                          schedule=Schedule.explicit([1.0, 10.0]))
SIDES = ("plain", "pipeline")


def fill(url: str, queue: str, n: int) -> None:
    with ackbridge.connect(url) as conn:
        conn.declare_queue(queue)  # with its .dlq: the pipeline refuses to start without one
        publisher = conn.publisher(window=1000)
        for i in range(n):
            publisher.publish(queue, BODY, message_id=f"m{i}")
        assert publisher.flush(timeout=300), "the fill was not confirmed"


def cleanup(url: str, queue: str) -> None:
    with ackbridge.connect(url) as conn:
        for name in POLICY.delay_queues(queue):
            conn.delete_queue(name)
        conn.delete_queue(queue)


class Count:
    """Handler runs, and an event when the N-th has run."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.done = threading.Event()
        #: The N-th delivery: the pipeline acks it after the handler returns, so the drain
        #: ends when this one is settled (polled: it carries no event).
        self.last: Any = None

    def one(self, delivery: Any) -> None:
        # One handler thread (or task) per consumer: no lock needed for the count.
        self.seen += 1
        if self.seen >= self.n:
            self.last = delivery
            self.done.set()

    def wait_settled(self) -> None:
        while not self.last.settled:
            time.sleep(0.0005)


def settle_collector() -> None:
    """Start every drain with the cyclic collector in the same state: its counts at zero.

    A full collection walks every object of the process (some 15 ms here, ~18 million
    instructions), and when one falls is set by what was allocated since start-up, not
    by the drain: it fell inside the pipeline's 3,000-message drain and outside plain
    consume's, which read as +9,000 instructions per message of a 1,000-to-3,000
    difference (+12% on RabbitMQ; with 2,000 and 6,000 both sides had one and it
    cancelled). After this, a collection during the drain is one the drain's own
    allocations set off, on either side."""
    gc.collect()


def drain_sync(url: str, queue: str, n: int, prefetch: int, side: str) -> tuple[float, float]:
    """Drain *n* from *queue* on the sync face: (msgs/s, CPU s per message)."""
    count = Count(n)
    with ackbridge.connect(url) as conn:
        settle_collector()
        start, cpu = time.perf_counter(), time.process_time()
        if side == "plain":
            def plain(delivery: ackbridge.Delivery) -> None:
                delivery.ack()
                count.one(delivery)

            consumer = conn.consume(queue, handler=plain, prefetch=prefetch)
            assert count.done.wait(600), f"plain drained {count.seen} of {n}"
            consumer.flush()
            elapsed, used = time.perf_counter() - start, time.process_time() - cpu
            consumer.close()
        else:
            with Pipeline(conn, queue, policy=POLICY) as pipeline:
                consumer = pipeline.consume(count.one, prefetch=prefetch)
                assert count.done.wait(600), f"pipeline drained {count.seen} of {n}"
                count.wait_settled()
                consumer.flush()
                elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    return n / elapsed, used / n


async def _drain_async(url: str, queue: str, n: int, prefetch: int, side: str) -> tuple[float, float]:
    count = Count(n)
    conn = await ackbridge.connect_async(url)
    async with conn:
        settle_collector()
        start, cpu = time.perf_counter(), time.process_time()
        if side == "plain":
            async def plain(delivery: ackbridge.AsyncDelivery) -> None:
                await delivery.ack()
                count.one(delivery)

            consumer = await conn.consume(queue, handler=plain, prefetch=prefetch)
            while not count.done.is_set():
                await asyncio.sleep(0.005)
            await consumer.flush()
            elapsed, used = time.perf_counter() - start, time.process_time() - cpu
            await consumer.close()
        else:
            async def quiet(delivery: ackbridge.AsyncDelivery) -> None:
                count.one(delivery)

            async with AsyncPipeline(conn, queue, policy=POLICY) as pipeline:
                consumer = await pipeline.consume(quiet, prefetch=prefetch)
                while not count.done.is_set():
                    await asyncio.sleep(0.005)
                while not count.last.settled:  # the pipeline acks after the handler returns
                    await asyncio.sleep(0.0005)
                await consumer.flush()
                elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    return n / elapsed, used / n


def drain_async(url: str, queue: str, n: int, prefetch: int, side: str) -> tuple[float, float]:
    return asyncio.run(_drain_async(url, queue, n, prefetch, side))


DRAINS: dict[str, Callable[[str, str, int, int, str], tuple[float, float]]] = {
    "sync": drain_sync, "asyncio": drain_async}


def ratio_line(label: str, plain: list[float], pipe: list[float], unit: str, scale: float, cost: bool) -> str:
    """One printed line: medians of each side, the per-round ratios' spread, the median ratio last."""
    ratios = [p / q for q, p in zip(plain, pipe, strict=True)]
    median = statistics.median(ratios)
    verdict = f"cost {median - 1:+.1%}" if cost else f"cost {1 - median:+.1%}"
    return (f"{label:<26}plain {statistics.median(plain) * scale:>9.1f} {unit}   pipeline "
            f"{statistics.median(pipe) * scale:>9.1f} {unit}   rounds {min(ratios):.3f}..{max(ratios):.3f}   "
            f"{verdict}   median ratio {median:.3f}")


def bench(broker: str, url: str, face: str, n: int, prefetch: int, rounds: int) -> None:
    queue = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    drain = DRAINS[face]
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    try:
        for round_no in range(rounds):
            order = SIDES if round_no % 2 == 0 else SIDES[::-1]  # ABBA: drift hits both sides alike
            for side in order:
                fill(url, queue, n)
                rate, cpu = drain(url, queue, n, prefetch, side)
                results[side].append((rate, cpu))
                print(f"  {broker}/{face} round {round_no + 1} {side:<9} {rate:>8.0f} msgs/s  "
                      f"{cpu * 1e6:>6.1f} us CPU/msg", flush=True)
    finally:
        cleanup(url, queue)
    plain, pipe = results["plain"], results["pipeline"]
    print(ratio_line(f"{broker}/{face} CPU/msg", [c for _, c in plain], [c for _, c in pipe], "us", 1e6, True))
    print(ratio_line(f"{broker}/{face} msgs/s", [r for r, _ in plain], [r for r, _ in pipe], "/s", 1, False),
          flush=True)


def profile(url: str, n: int, prefetch: int) -> None:
    """One pipeline drain (sync face) under cProfile; every thread is profiled through threading.setprofile."""
    queue = f"bench-pipeline-prof-{uuid.uuid4().hex[:8]}"
    profiler = cProfile.Profile()
    try:
        fill(url, queue, n)
        # cProfile sees only the thread that enables it: profile the handler thread from inside.
        started = threading.Event()
        original = Pipeline.handle

        def handle(self: Pipeline, delivery: Any, handler: Any) -> None:
            if not started.is_set():
                started.set()
                profiler.enable()
            original(self, delivery, handler)

        Pipeline.handle = handle  # type: ignore[method-assign]
        try:
            drain_sync(url, queue, n, prefetch, "pipeline")
        finally:
            profiler.disable()
            Pipeline.handle = original  # type: ignore[method-assign]
    finally:
        cleanup(url, queue)
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime")
    print(f"cProfile, the handler thread of one pipeline drain of {n}: the pipeline's own functions")
    stats.print_stats("ackbridge/pipeline/")
    print("the whole handler thread, by own time")
    stats.print_stats(25)


# ---- instructions per message (callgrind), as benchmarks/instructions.py counts them -------------
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def count_instructions(broker: str, url: str, queue: str, face: str, side: str, n: int, prefetch: int) -> int:
    """Instructions of one child process draining *n* (filled here, uncounted) on one side, every thread."""
    fill(url, queue, n)
    child = json.dumps([url, queue, face, side, n, prefetch])
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
               os.path.abspath(__file__), "--child", child]
    # A fixed hash seed: str hashes (dict and set layouts) the same in every child.
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    found = _IREFS.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{broker}/{face}/{side} n={n} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found[-1].replace(",", ""))


def instructions(broker: str, url: str, face: str, n1: int, n2: int, prefetch: int, repeats: int) -> None:
    """Instructions per message of each side: (count at n2 - count at n1) / (n2 - n1), start-up
    and imports cancelled out; *repeats* alternating pairs, the median ratio reported."""
    queue = f"bench-pipeline-instr-{uuid.uuid4().hex[:8]}"
    per: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for repeat in range(repeats):
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                low = count_instructions(broker, url, queue, face, side, n1, prefetch)
                high = count_instructions(broker, url, queue, face, side, n2, prefetch)
                per[side].append((high - low) / (n2 - n1))
                print(f"  {broker}/{face} repeat {repeat + 1} {side:<9} {per[side][-1]:>12,.0f} instructions/msg",
                      flush=True)
    finally:
        cleanup(url, queue)
    ratios = [p / q for q, p in zip(per["plain"], per["pipeline"], strict=True)]
    median = statistics.median(ratios)
    print(f"{broker + '/' + face + ' instructions/msg':<34}plain {statistics.median(per['plain']):>10,.0f}   "
          f"pipeline {statistics.median(per['pipeline']):>10,.0f}   repeats {min(ratios):.3f}..{max(ratios):.3f}   "
          f"cost {median - 1:+.1%}   median ratio {median:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--brokers", default="embedded,rabbitmq")
    parser.add_argument("--faces", default="sync,asyncio")
    parser.add_argument("--profile", metavar="BROKER", help="profile one pipeline drain on BROKER instead")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per message under callgrind instead of timing (slow)")
    parser.add_argument("--n1", type=int, default=2000)
    parser.add_argument("--n2", type=int, default=6000)
    parser.add_argument("--attempts", type=int, default=3,
                        help="the policy's attempts (1: no delay queue, no pump: the per-delivery path alone)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global POLICY
    POLICY = RedeliveryPolicy(attempts=args.attempts, schedule=POLICY.schedule)
    os.environ["PIPELINE_BENCH_ATTEMPTS"] = str(args.attempts)  # the children use the same policy
    if args.child:
        url, queue, face, side, n, prefetch = json.loads(args.child)
        DRAINS[face](url, queue, n, prefetch, side)
        return
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"embedded": f"local://{tmp}/bench.db", "rabbitmq": RABBIT_URL}
        if args.profile:
            profile(urls[args.profile], args.n, args.prefetch)
            return
        if args.instructions:
            if shutil.which("valgrind") is None:
                parser.error("valgrind is not installed (apt-get install valgrind)")
            # The embedded broker's idle consumers (the pumps) poll every poll_ms of wall time, and
            # callgrind runs some 50 times slower: polls every second instead, on both sides.
            urls["embedded"] += "?poll_ms=1000"
            print(f"instructions per message (callgrind, every thread of the consuming process), "
                  f"n = {args.n2} - {args.n1}, prefetch={args.prefetch}, {args.rounds} repeats (alternating)")
            for broker in args.brokers.split(","):
                for face in args.faces.split(","):
                    instructions(broker, urls[broker], face, args.n1, args.n2, args.prefetch, args.rounds)
            return
        print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"n={args.n} x {len(BODY)} B, prefetch={args.prefetch}, {args.rounds} rounds (ABBA), "
              f"policy attempts={POLICY.attempts} ({len(POLICY.delay_queues('q'))} delay queues, pumps idle)")
        for broker in args.brokers.split(","):
            for face in args.faces.split(","):
                bench(broker, urls[broker], face, args.n, args.prefetch, args.rounds)


if __name__ == "__main__":
    main()
