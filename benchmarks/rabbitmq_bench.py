"""ackbridge-rabbitmq vs raw pika on the local broker (not a test).

    .venv/bin/python benchmarks/rabbitmq_bench.py --n 100000

Measures: publish with confirms (ackbridge vs raw pika SelectConnection with
async confirms, same window; --rounds runs of each, alternated, each into an
emptied queue, medians compared), consume with acks (ackbridge conflated vs raw
pika with ``multiple`` acks, same prefetch), a naive per-message blocking
confirm loop (fewer messages, extrapolated), and peak RSS at two N values.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pika
import psutil

from ackbridge.connect import connect

URL = "amqp://guest:guest@127.0.0.1:5672/"
BODY = b"x" * 256


def params() -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", 5672, credentials=pika.PlainCredentials("guest", "guest"))


def declare(name: str) -> None:
    with pika.BlockingConnection(params()) as conn:
        conn.channel().queue_declare(name, durable=True)


def purge(name: str) -> None:
    with pika.BlockingConnection(params()) as conn:
        conn.channel().queue_purge(name)


def delete(name: str) -> None:
    with pika.BlockingConnection(params()) as conn:
        conn.channel().queue_delete(name)


def raw_publish(queue: str, n: int, window: int) -> float:
    """Best-effort raw pika: SelectConnection, async confirms, `window` in flight,
    one properties object for every message (nothing per message varies)."""
    state = {"sent": 0, "acked": 0, "t0": 0.0, "t1": 0.0}
    ch_holder: list[Any] = []
    props = pika.BasicProperties(delivery_mode=2)

    def pump() -> None:
        ch = ch_holder[0]
        while state["sent"] < n and state["sent"] - state["acked"] < window:
            ch.basic_publish("", queue, BODY, props)
            state["sent"] += 1

    def on_ack(frame: Any) -> None:
        tag = frame.method.delivery_tag
        state["acked"] = tag if frame.method.multiple else max(state["acked"], tag)
        if state["acked"] >= n:
            state["t1"] = time.perf_counter()
            conn.close()
            return
        pump()

    def on_channel(ch: Any) -> None:
        ch_holder.append(ch)
        ch.confirm_delivery(on_ack, callback=lambda _f: start())

    def start() -> None:
        state["t0"] = time.perf_counter()
        pump()

    conn = pika.SelectConnection(params(), on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda c, r: c.ioloop.stop())
    conn.ioloop.start()
    return n / (state["t1"] - state["t0"])


def ab_publish(queue: str, n: int, window: int) -> float:
    with connect(URL) as conn:
        publisher = conn.publisher(window=window)
        t0 = time.perf_counter()
        for _ in range(n):
            publisher.publish(queue, BODY)
        assert publisher.flush(timeout=300)
        return n / (time.perf_counter() - t0)


def naive_publish(queue: str, n: int) -> float:
    with pika.BlockingConnection(params()) as conn:
        ch = conn.channel()
        ch.confirm_delivery()  # every publish waits for its own confirm
        t0 = time.perf_counter()
        for _ in range(n):
            ch.basic_publish("", queue, BODY, pika.BasicProperties(delivery_mode=2))
        return n / (time.perf_counter() - t0)


def raw_consume(queue: str, n: int, prefetch: int, every: int) -> float:
    with pika.BlockingConnection(params()) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=prefetch)
        got = 0
        t0 = time.perf_counter()
        for method, _props, _body in ch.consume(queue, inactivity_timeout=10):
            if method is None:
                break
            got += 1
            if got % every == 0 or got == n:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if got >= n:
                break
        elapsed = time.perf_counter() - t0
        ch.cancel()
        return got / elapsed


def ab_consume(queue: str, n: int, prefetch: int, every: int) -> float:
    with connect(URL) as conn:
        consumer = conn.consume(queue, prefetch=prefetch, conflate_count=every, conflate_ms=50)
        t0 = time.perf_counter()
        for _ in range(n):
            d = consumer.get(timeout=10)
            assert d is not None
            d.ack()
        consumer.flush()
        elapsed = time.perf_counter() - t0
        consumer.close()
        return n / elapsed


def fill(queue: str, n: int) -> None:
    ab_publish(queue, n, 2000)


def peak_rss(fn: Callable[[], Any]) -> float:
    proc = psutil.Process()
    peak = proc.memory_info().rss
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.02):
            peak = max(peak, proc.memory_info().rss)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    fn()
    stop.set()
    t.join()
    return max(peak, proc.memory_info().rss) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--conflate", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3,
                    help="publish, consume and naive runs of each side, alternated (median shown)")
    args = ap.parse_args()
    n = args.n
    queue = f"ab-bench-{uuid.uuid4().hex[:8]}"
    declare(queue)
    rows: list[tuple[str, str]] = []
    try:
        # Alternated, each into an empty queue, median of --rounds each: one run of
        # each side was at the mercy of whatever else the machine did meanwhile.
        raws: list[float] = []
        abs_: list[float] = []
        for _ in range(args.rounds):
            purge(queue)
            raws.append(raw_publish(queue, n, args.window))
            purge(queue)
            abs_.append(ab_publish(queue, n, args.window))
        raw_p, ab_p = statistics.median(raws), statistics.median(abs_)
        each = f" (median of {args.rounds})" if args.rounds > 1 else ""
        rows += [(f"raw pika publish+confirms (msg/s){each}", f"{raw_p:,.0f}"),
                 (f"ackbridge publish+confirms (msg/s){each}", f"{ab_p:,.0f}"),
                 ("  ratio ackbridge/raw", f"{ab_p / raw_p:.2f}")]
        if args.rounds > 1:
            rows += [("  rounds raw (msg/s)", " ".join(f"{r:,.0f}" for r in raws)),
                     ("  rounds ackbridge (msg/s)", " ".join(f"{r:,.0f}" for r in abs_))]
        # Consume alternated too, median of --rounds each; every run drains N (the last
        # ackbridge publish round left N in the queue, each run after refills it).
        raw_cs: list[float] = []
        ab_cs: list[float] = []
        for r in range(args.rounds):
            if r:
                fill(queue, n)
            raw_cs.append(raw_consume(queue, n, args.prefetch, args.conflate))
            fill(queue, n)
            ab_cs.append(ab_consume(queue, n, args.prefetch, args.conflate))
        raw_c, ab_c = statistics.median(raw_cs), statistics.median(ab_cs)
        rows += [(f"raw pika consume, multiple acks (msg/s){each}", f"{raw_c:,.0f}"),
                 (f"ackbridge consume, conflated acks (msg/s){each}", f"{ab_c:,.0f}"),
                 ("  ratio ackbridge/raw", f"{ab_c / raw_c:.2f}")]
        if args.rounds > 1:
            rows += [("  rounds raw (msg/s)", " ".join(f"{r:,.0f}" for r in raw_cs)),
                     ("  rounds ackbridge (msg/s)", " ".join(f"{r:,.0f}" for r in ab_cs))]
        naive_n = max(200, min(2000, n // 50))
        naive = statistics.median(naive_publish(queue, naive_n) for _ in range(args.rounds))
        rows += [(f"naive blocking confirm per msg (msg/s, {naive_n} msgs){each}", f"{naive:,.0f}"),
                 ("  extrapolated time for N (s)", f"{n / naive:.1f}"),
                 ("  ackbridge speed-up vs naive", f"{ab_p / naive:.1f}x")]
        for size in (max(n // 5, 1000), n):
            def cycle(size: int = size) -> None:
                fill(queue, size)
                ab_consume(queue, size, args.prefetch, args.conflate)

            rows.append((f"peak RSS, ackbridge publish+consume N={size:,} (MiB)", f"{peak_rss(cycle):.1f}"))
    finally:
        delete(queue)
    width = max(len(k) for k, _ in rows)
    print(f"RabbitMQ benchmark: N={n:,}, body=256 B, window={args.window}, prefetch={args.prefetch}, "
          f"conflate={args.conflate}")
    print("-" * (width + 16))
    for key, value in rows:
        print(f"{key:<{width}}  {value:>12}")


if __name__ == "__main__":
    main()
