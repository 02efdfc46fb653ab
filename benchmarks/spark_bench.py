"""Spark connector benchmark (not a test).

In one run, on the embedded broker (and on RabbitMQ when the ackbridge-rabbitmq
plugin is installed):

* raw drain: an ackbridge consumer acks N messages as fast as it can;
* end-to-end: N messages broker -> Spark (ackbridge source, settle after
  commit) -> Parquet (foreachBatch append), msgs/s from query start to the
  last settle (Spark session start-up excluded);
* commit-to-ack latency per micro-batch: from the moment foreachBatch returned
  (Spark writes commits/N right after) to the moment the broker shows the
  batch's messages gone (broker-side polling every 20 ms), p50/p99.

usage: .venv/bin/python benchmarks/spark_bench.py [--messages 20000] [--batch 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import ackbridge
from ackbridge.plugins import registry

BODY_BYTES = 256


def publish(url: str, queue: str, n: int) -> None:
    body = b"x" * BODY_BYTES
    with ackbridge.connect(url) as conn:
        conn.declare_queue(queue)
        for i in range(n):
            conn.publish(queue, body, message_id=f"b-{i}")
        assert conn.flush(timeout=300)


def raw_drain(url: str, queue: str, n: int, prefetch: int) -> float:
    with ackbridge.connect(url) as conn:
        consumer = conn.consume(queue, prefetch=prefetch, conflate_count=min(prefetch // 2, 500))
        start = time.perf_counter()
        got = 0
        while got < n:
            d = consumer.get(timeout=30)
            if d is None:
                raise RuntimeError(f"raw drain stalled after {got} messages")
            d.ack()
            got += 1
        consumer.flush()
        elapsed = time.perf_counter() - start
        consumer.close()
    return n / elapsed


def raw_pika_drain(queue: str, n: int, prefetch: int) -> float:
    """The best plain pika consumer: basic_qos prefetch, a cumulative ack every prefetch/2."""
    import pika

    params = pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F")
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    every = max(1, min(prefetch // 2, 500))
    got = 0
    start = time.perf_counter()
    for method, _props, _body in channel.consume(queue, inactivity_timeout=30):
        if method is None:
            raise RuntimeError(f"raw pika drain stalled after {got} messages")
        got += 1
        if got % every == 0 or got == n:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if got == n:
            break
    elapsed = time.perf_counter() - start
    channel.cancel()
    connection.close()
    return n / elapsed


def delete_rabbit_queues(*queues: str) -> None:
    """Leave the shared broker as we found it (queues, their .dlq and .dlx)."""
    for queue in queues:
        for kind, name in (("queue", queue), ("queue", f"{queue}.dlq"), ("exchange", f"{queue}.dlx")):
            subprocess.run(["rabbitmqctl", "-q", f"delete_{kind}" if kind == "queue" else "eval",
                            *([name] if kind == "queue" else
                              [f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{name}">>), false, '
                               '<<"ackbridge-bench">>).'])],
                           capture_output=True, timeout=60, check=False)


def rabbit_counts(queue: str) -> tuple[int, int]:
    out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name", "messages_ready", "messages_unacknowledged"],
                         capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == queue:
            return int(parts[1]), int(parts[2])
    return 0, 0


def spark_run(spark: Any, url: str, queue: str, n: int, batch: int, work: Path,
              counts: Any, trigger_s: float) -> tuple[float, list[float]]:
    done_at: dict[int, tuple[float, int]] = {}
    remaining_after: dict[int, int] = {}
    written = [0]
    lock = threading.Lock()

    def sink(df: Any, batch_id: int) -> None:
        df.select("message_id", "body", "offset").write.mode("append").parquet(str(work / "table"))
        rows = df.count()
        with lock:
            written[0] += rows
            remaining_after[batch_id] = n - written[0]
            done_at[batch_id] = (time.perf_counter(), rows)

    acked_at: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            ready, unacked = counts(queue)
            now = time.perf_counter()
            with lock:
                for b, left in remaining_after.items():
                    if b not in acked_at and b in done_at and ready + unacked <= left:
                        acked_at[b] = now
            time.sleep(0.02)  # poll the broker; too tight a loop slows the driver it measures

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    query = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
             .option("maxRecordsPerBatch", str(batch)).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "ck"))
             .trigger(processingTime=f"{trigger_s} seconds").start())
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with lock:
            finished = written[0] >= n and all(b in acked_at for b, (_, r) in done_at.items() if r)
        if finished:
            break
        time.sleep(0.01)
    elapsed = time.perf_counter() - start
    query.stop()
    stop.set()
    watcher.join()
    lat = [(acked_at[b] - t) * 1000 for b, (t, r) in done_at.items() if r and b in acked_at]
    return n / elapsed, lat


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--trigger", type=float, default=2.0, help="trigger interval, seconds")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    import ackbridge_spark

    work = Path(tempfile.mkdtemp(prefix="ackbridge-bench-"))
    targets: list[tuple[str, str, Any]] = []
    local_url = f"local://{work / 'broker.db'}"
    local_conn = ackbridge.connect(local_url)
    targets.append(("embedded", local_url, lambda q: local_conn._transport.store.counts(q)))
    if "amqp" in registry().adapters:
        targets.append(("rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", rabbit_counts))
    else:
        print("rabbitmq: skipped (ackbridge-rabbitmq plugin not installed)")

    spark = (SparkSession.builder.master("local[2]").appName("ackbridge-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ackbridge_spark.register(spark)
    rows = []
    for name, url, counts in targets:
        raw_q, spark_q = f"bench-raw-{uuid.uuid4().hex[:6]}", f"bench-spark-{uuid.uuid4().hex[:6]}"
        publish(url, raw_q, args.messages)
        publish(url, spark_q, args.messages)
        if name == "rabbitmq":
            raw = raw_pika_drain(raw_q, args.messages, prefetch=min(2 * args.batch, 65535))
        else:
            raw = raw_drain(url, raw_q, args.messages, prefetch=2 * args.batch)
        e2e, lat = spark_run(spark, url, spark_q, args.messages, args.batch, work / name, counts, args.trigger)
        rows.append((name, raw, e2e, pct(lat, 0.5), pct(lat, 0.99), len(lat)))
        if name == "rabbitmq":
            delete_rabbit_queues(raw_q, spark_q)
    spark.stop()
    local_conn.close()
    print(f"\nmessages={args.messages} maxRecordsPerBatch={args.batch} body={BODY_BYTES} B  "
          f"trigger={args.trigger} s  cores={os.cpu_count()}")
    print("raw drain: embedded = ackbridge consumer (no other client exists); rabbitmq = plain pika, "
          "multiple acks. Latency resolution: one broker poll (rabbitmqctl ~0.5 s, SQLite ~1 ms).")
    print(f"{'broker':<10} {'raw drain msg/s':>16} {'spark->parquet msg/s':>21} {'ratio':>6} "
          f"{'commit->ack p50 ms':>19} {'p99 ms':>8} {'batches':>8}")
    for name, raw, e2e, p50, p99, nb in rows:
        print(f"{name:<10} {raw:>16.0f} {e2e:>21.0f} {e2e / raw:>6.2f} {p50:>19.1f} {p99:>8.1f} {nb:>8}")
        verdict = "under" if p99 < args.trigger * 1000 else "OVER"
        print(f"  {name}: ratio target >= 0.50: {'met' if e2e / raw >= 0.5 else 'NOT met'}; "
              f"p99 {verdict} one trigger interval ({args.trigger * 1000:.0f} ms)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
