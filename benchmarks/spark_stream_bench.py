"""The executor-side stream source against a raw stream drain, and the driver CPU it
costs next to the driver-side source's, in one run (not a test).

RabbitMQ 3.10 on 127.0.0.1 (streams on 5552, classic queues on 5672, guest). For
each body size in ``--sizes``:

* raw drain, 1 and 2 partitions: rstream ``Consumer`` processes, one per stream
  (3.10 has no super streams: two streams serve as two partitions), all started
  together, reading from the first offset; msgs/s from the start to the last
  message of the slowest;
* Spark -> Parquet, stream source, 1 and 2 partitions, on each master in
  ``--masters`` (``local[2]``, ``local-cluster[2,1,1024]``), ``maxRecordsPerBatch``
  ``--batch``, ``minPartitions`` 2, trigger 0.5 s; msgs/s from ``start()`` to the
  progress report of the batch that completes N rows; then the broker must hold
  each stream's end for the query's reference, and the table every id;
* Spark -> Parquet, driver-side source (a classic queue, ``parallelism=1``), same
  N, batch and trigger, on each master: the driver CPU it costs per message.

CPU seconds per process kind (psutil, every process under this one) over the same
span. *Driver* = the driver JVM (on ``local-cluster`` only: in ``local[2]`` the
driver JVM also runs every task) plus the driver's Python processes (the source's
runner and the planner workers). *Executors* = executor JVMs and their Python
workers (in ``local[2]``: the task Python workers only).

usage: .venv/bin/python benchmarks/spark_stream_bench.py [--messages 100000] [--sizes 256,4096]
       [--batch 20000] [--queue-batch N] [--masters local[2],local-cluster[2,1,1024]]
       .venv/bin/python benchmarks/spark_stream_bench.py --messages 200000 --driver-per-batch 20000,50000,100000
       (only: the driver JVM's CPU per batch of the stream source, on local-cluster)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from spark_parallel_bench import URL as QUEUE_URL
from spark_parallel_bench import cpu_by_kind, delete, publish, settled, steady_rate

STREAM_URL = "rabbitmq-stream://guest:guest@127.0.0.1:5552/"


# ---- streams, with rstream directly ---------------------------------------------------------
async def _producer() -> Any:
    from rstream import Producer

    producer = Producer("127.0.0.1", 5552, username="guest", password="guest")
    await producer.start()
    return producer


async def _fill(stream: str, n: int, size: int, prefix: str) -> None:
    from rstream import AMQPMessage, ConfirmationStatus, Properties

    producer = await _producer()
    done, confirmed = asyncio.Event(), [0]

    def on_confirm(status: ConfirmationStatus) -> None:
        if not status.is_confirmed:
            raise SystemExit(f"a publish to {stream} was refused")
        confirmed[0] += 1
        if confirmed[0] == n:
            done.set()

    try:
        await producer.create_stream(stream)
        body = b"x" * size
        for i in range(0, n, 1000):
            batch = [AMQPMessage(body=body, properties=Properties(message_id=f"{prefix}-{j}"))
                     for j in range(i, min(n, i + 1000))]
            await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
        await asyncio.wait_for(done.wait(), 600)
    finally:
        await producer.close()


def fill(streams: list[str], n: int, size: int) -> None:
    """*n* messages in all, shared evenly by *streams* (created here)."""
    for k, stream in enumerate(streams):
        asyncio.run(_fill(stream, n // len(streams), size, f"{k}"))


def drop_streams(streams: list[str]) -> None:
    async def run() -> None:
        producer = await _producer()
        try:
            for stream in streams:
                await producer.delete_stream(stream, missing_ok=True)
        finally:
            await producer.close()

    asyncio.run(run())


def _drain_one(stream: str, n: int, go: Any, out: Any) -> None:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    async def run() -> tuple[int, float, float]:
        consumer = Consumer("127.0.0.1", 5552, username="guest", password="guest")
        await consumer.start()
        got, last = [0], [0.0]
        done = asyncio.Event()

        async def on_message(body: Any, context: Any) -> None:
            got[0] += 1
            if got[0] >= n:
                last[0] = time.time()
                done.set()

        while not go.is_set():
            await asyncio.sleep(0.01)
        cpu0 = time.process_time()
        await consumer.subscribe(stream, on_message,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 300)
        cpu = time.process_time() - cpu0
        await consumer.close()
        return got[0], last[0], cpu

    out.put(asyncio.run(run()))


def raw_drain(streams: list[str], per_stream: int) -> tuple[float, float]:
    """(msgs/s, CPU s of the consumers): one rstream consumer process per stream, started together."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_drain_one, args=(s, per_stream, go, out)) for s in streams]
    for p in procs:
        p.start()
    time.sleep(2.0)  # interpreters up
    start = time.time()
    go.set()
    try:
        results = [out.get(timeout=400) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.terminate()
    got = sum(r[0] for r in results)
    return got / (max(r[1] for r in results) - start), sum(r[2] for r in results)


# ---- CPU per process kind ------------------------------------------------------------------
def _kind(proc: psutil.Process, driver_jvm: int | None) -> str:
    try:
        cmd = " ".join(proc.cmdline())
        parent = proc.ppid()
    except psutil.Error:
        return "gone"
    if proc.pid == os.getpid():
        return "benchmark"
    if "java" in cmd.split(" ")[0]:
        return "executor JVMs" if "CoarseGrainedExecutorBackend" in cmd else "driver JVM"
    if "python_streaming_source_runner" in cmd or "pyspark.sql.worker." in cmd:
        return "driver Python"  # the source's runner; planner, lookup and create workers
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "executor Python"  # task workers (forked by the daemon)
    if parent == driver_jvm:
        return "driver Python"
    return "other"


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    me = psutil.Process()
    children = me.children(recursive=True)
    driver = next((p.pid for p in children if p.ppid() == me.pid and "java" in (p.name() or "")), None)
    found: dict[int, tuple[str, float]] = {}
    for proc in children:
        try:
            t = proc.cpu_times()
            found[proc.pid] = (_kind(proc, driver), t.user + t.system + t.children_user + t.children_system)
        except psutil.Error:
            continue
    return found


def driver_cpu(cpu: dict[str, float], master: str) -> float:
    """The driver's CPU seconds: its Python processes, and its JVM where that runs no task."""
    return cpu.get("driver Python", 0.0) + (cpu.get("driver JVM", 0.0) if master.startswith("local-cluster") else 0.0)


# ---- Spark runs ----------------------------------------------------------------------------
class RowCounter:
    """Rows of a query's finished batches. Polls ``lastProgress`` (one JSON object):
    ``recentProgress`` serialises up to 100 reports in the driver JVM on every call,
    which, polled every 50 ms, showed up as driver JVM CPU."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.seen: dict[int, int] = {}

    def __call__(self) -> int:
        if self.query.exception() is not None:
            raise RuntimeError(f"query failed: {self.query.exception()}")
        last, seen = self.query.lastProgress, self.seen
        if last is not None and last["batchId"] not in seen:
            if seen and last["batchId"] > max(seen) + 1:  # batches finished between two polls
                seen.update({p["batchId"]: p["numInputRows"] for p in self.query.recentProgress})
            seen[last["batchId"]] = last["numInputRows"]
        return sum(seen.values())

    @property
    def batches(self) -> int:
        return max(self.seen, default=-1)


def spark_run(spark: Any, frame: Any, n: int, work: Path, name: str, done: Any) -> dict[str, Any]:
    table, ck = work / f"t-{name}", work / f"ck-{name}"
    before = cpu_snapshot()
    start = time.time()
    query = (frame.select("message_id", "body", "source").writeStream.format("parquet")
             .option("path", str(table)).option("checkpointLocation", str(ck))
             .trigger(processingTime="0.5 seconds").start())
    rows_done = RowCounter(query)
    try:
        while rows_done() == 0:
            time.sleep(0.02)
        # Steady state: from the end of the first batch (the query's start-up -- runner and
        # planner processes, imports, connections -- is paid once per query, not per message).
        first_rows, after_first = rows_done(), cpu_snapshot()
        while rows_done() < n:
            time.sleep(0.05)
        elapsed = time.time() - start
        end = cpu_snapshot()
        cpu = cpu_by_kind(before, end)
        steady_cpu = cpu_by_kind(after_first, end)
        steady = steady_rate(list(query.recentProgress))
        deadline = time.monotonic() + 60
        while not done():  # the broker's side: offsets stored / queue settled (not timed)
            if time.monotonic() > deadline:
                raise RuntimeError("the broker does not show the run settled")
            time.sleep(0.5)
    finally:
        query.stop()
    ids = spark.read.parquet(str(table)).select("message_id", "source")
    distinct = ids.distinct().count()
    return {"msgs/s": round(n / elapsed), "steady msgs/s": steady, "seconds": round(elapsed, 1),
            "lost": n - distinct, "rows": ids.count(), "cpu_s": cpu, "steady_cpu_s": steady_cpu,
            "steady_rows": n - first_rows}


def stream_cell(spark: Any, n: int, size: int, parts: int, batch: int, work: Path) -> dict[str, Any]:
    from ackbridge.transport.offset_log import open_offset_log

    streams = [f"bench-stream-{uuid.uuid4().hex[:8]}" for _ in range(parts)]
    reference = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        fill(streams, n, size)
        frame = (spark.readStream.format("ackbridge").option("url", STREAM_URL).option("subscribe", ",".join(streams))
                 .option("consumerReference", reference).option("maxRecordsPerBatch", str(batch))
                 .option("minPartitions", "2").load())
        with open_offset_log(STREAM_URL) as log:
            ends = {s: log.bounds(s)[1] for s in streams}

            def stored() -> bool:
                return all(log.stored_offset(s, reference) == e for s, e in ends.items())

            return spark_run(spark, frame, n, work, streams[0], stored)
    finally:
        drop_streams(streams)


def queue_cell(spark: Any, n: int, size: int, batch: int, work: Path) -> dict[str, Any]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        publish(queue, n, size)
        frame = (spark.readStream.format("ackbridge").option("url", QUEUE_URL).option("queue", queue)
                 .option("maxRecordsPerBatch", str(batch)).load())
        return spark_run(spark, frame, n, work, queue, lambda: settled(queue))
    finally:
        delete(queue)


def session(master: str) -> Any:
    from pyspark.sql import SparkSession

    import ackbridge_spark

    spark = (SparkSession.builder.master(master).appName("ackbridge-stream-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.showConsoleProgress", "false")
             # The driver-side source pickles each batch into its task (~100 MB at 25,000 x 4 KiB):
             # the default 1 GiB driver heap ran out on local-cluster.
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ackbridge_spark.register(spark)
    return spark


def driver_per_batch(spark: Any, n: int, batches: list[int]) -> None:
    """How the driver JVM's CPU follows batches, not rows: the stream source (2 streams, 256 B)
    at several ``maxRecordsPerBatch``, CPU counted after the first batch, then 5 s idle."""
    def jvm() -> dict[str, float]:
        snap = cpu_snapshot()
        out: dict[str, float] = {}
        for kind, cpu in snap.values():
            out[kind] = out.get(kind, 0.0) + cpu
        return out

    for batch in batches:
        streams = [f"bench-per-batch-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        work = Path(tempfile.mkdtemp(prefix="ackbridge-sbench-"))
        try:
            fill(streams, n, 256)
            query = (spark.readStream.format("ackbridge").option("url", STREAM_URL)
                     .option("subscribe", ",".join(streams)).option("consumerReference", "bench")
                     .option("maxRecordsPerBatch", str(batch)).option("minPartitions", "2").load()
                     .select("message_id").writeStream.format("parquet").option("path", str(work / "t"))
                     .option("checkpointLocation", str(work / "ck")).trigger(processingTime="0.5 seconds").start())
            rows = RowCounter(query)
            while rows() == 0:
                time.sleep(0.05)
            r0, c0, t0, b0 = rows(), jvm(), time.time(), rows.batches
            while rows() < n:
                time.sleep(0.05)
            c1, t1, b1 = jvm(), time.time(), rows.batches
            time.sleep(5.0)
            c2 = jvm()
            query.stop()
            if n - r0 <= 0:
                print(f"maxRecordsPerBatch={batch}: one batch held every row; give more --messages than that")
                continue
            d = c1.get("driver JVM", 0.0) - c0.get("driver JVM", 0.0)
            k, span = max(1, b1 - b0), t1 - t0
            print(f"maxRecordsPerBatch={batch}: {n - r0} rows in {k} batches, {span:.1f} s; driver JVM {d:.2f} s CPU = "
                  f"{d / k:.3f} s per batch = {d / (n - r0) * 1e6:.1f} us per row; driver Python "
                  f"{(c1.get('driver Python', 0.0) - c0.get('driver Python', 0.0)) / (n - r0) * 1e6:.2f} us per row; "
                  f"idle: driver JVM {(c2.get('driver JVM', 0.0) - c1.get('driver JVM', 0.0)) / 5:.2f} cores",
                  flush=True)
        finally:
            drop_streams(streams)
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sizes", default="256,4096")
    parser.add_argument("--batch", type=int, default=20_000, help="maxRecordsPerBatch (both sources)")
    parser.add_argument("--queue-batch", type=int, default=0,
                        help="maxRecordsPerBatch of the driver-side source (default: --batch); it pickles each "
                             "batch into one task, which must stay under spark.rpc.message.maxSize (128 MiB)")
    parser.add_argument("--masters", default="local[2],local-cluster[2,1,1024]")
    parser.add_argument("--driver-per-batch", default="",
                        help="only this: maxRecordsPerBatch values (e.g. 20000,50000,100000) on local-cluster, "
                             "the driver JVM's CPU per batch")
    args = parser.parse_args()
    if args.driver_per_batch:
        spark = session("local-cluster[2,1,1024]")
        try:
            stream_cell(spark, 20000, 256, 2, 10000, Path(tempfile.mkdtemp(prefix="ackbridge-sbench-")))  # warm-up
            driver_per_batch(spark, args.messages, [int(b) for b in args.driver_per_batch.split(",")])
        finally:
            spark.stop()
        return
    n, sizes = args.messages, [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        results.append(row)

    for size in sizes:
        for parts in (1, 2):
            streams = [f"bench-raw-{uuid.uuid4().hex[:8]}" for _ in range(parts)]
            try:
                fill(streams, n, size)
                rate, cpu = raw_drain(streams, n // parts)
            finally:
                drop_streams(streams)
            record({"size": size, "master": "-", "run": f"raw drain x{parts}", "msgs/s": round(rate),
                    "cpu_s": {"consumers": round(cpu, 2)}})
    work = Path(tempfile.mkdtemp(prefix="ackbridge-sbench-"))
    try:
        # Masters are comma-separated, and local-cluster[2,1,1024] has commas of its own.
        for master in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", args.masters):
            spark = session(master)
            try:
                # Warm-up of both paths (Python workers, the JVM's JIT): a fresh JVM compiles
                # in background threads for its first minute, and that CPU counts as the driver's.
                stream_cell(spark, 20000, 256, 2, args.batch // 2, work)
                queue_cell(spark, 20000, 256, (args.queue_batch or args.batch) // 2, work)
                for size in sizes:
                    for parts in (1, 2):
                        row = stream_cell(spark, n, size, parts, args.batch, work)
                        record({"size": size, "master": master, "run": f"stream source x{parts}", **row})
                    row = queue_cell(spark, n, size, args.queue_batch or args.batch, work)
                    record({"size": size, "master": master, "run": "driver-side source (queue)", **row})
            finally:
                spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(results, n)


def summary(results: list[dict[str, Any]], n: int) -> None:
    print("\n| body | master | run | msgs/s | ratio to raw drain | steady msgs/s | driver CPU s | driver CPU us/msg "
          "| steady: driver Python / driver JVM us/msg | executor CPU us/msg | lost |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    raw = {(r["size"], r["run"]): r["msgs/s"] for r in results if r["master"] == "-"}
    for r in results:
        if r["master"] == "-":
            print(f"| {r['size']} B | - | {r['run']} | {r['msgs/s']:,} | 1.00 | | | | | "
                  f"{r['cpu_s']['consumers'] / n * 1e6:.1f} (consumers) | |")
            continue
        parts = 2 if r["run"].endswith("x2") else 1
        base = raw.get((r["size"], f"raw drain x{parts}"))
        ratio = f"{r['msgs/s'] / base:.2f}" if base else "-"
        cpu = r["cpu_s"]
        drv = driver_cpu(cpu, r["master"])
        rows = max(1, r["steady_rows"])
        py_us = r["steady_cpu_s"].get("driver Python", 0.0) / rows * 1e6
        jvm_us = r["steady_cpu_s"].get("driver JVM", 0.0) / rows * 1e6
        steady = f"{py_us:.1f} / " + (f"{jvm_us:.1f}" if r["master"].startswith("local-cluster") else "(runs tasks)")
        exe = cpu.get("executor JVMs", 0.0) + cpu.get("executor Python", 0.0)
        print(f"| {r['size']} B | {r['master']} | {r['run']} | {r['msgs/s']:,} | {ratio} | {r['steady msgs/s']:,} "
              f"| {drv:.2f} | {drv / n * 1e6:.1f} | {steady} | {exe / n * 1e6:.1f} | {r['lost']} |")
    for size in sorted({r["size"] for r in results}):
        for master in sorted({r["master"] for r in results} - {"-"}):
            mine = {r["run"]: r for r in results if r["size"] == size and r["master"] == master}
            queue = mine.get("driver-side source (queue)")
            for parts in (1, 2):
                stream = mine.get(f"stream source x{parts}")
                if queue and stream:
                    total = driver_cpu(stream["cpu_s"], master) / max(driver_cpu(queue["cpu_s"], master), 1e-9)
                    steady = steady_driver_us(stream) / max(steady_driver_us(queue), 1e-9)
                    python = (stream["steady_cpu_s"].get("driver Python", 0.0) / max(1, stream["steady_rows"])) / max(
                        queue["steady_cpu_s"].get("driver Python", 0.0) / max(1, queue["steady_rows"]), 1e-12)
                    print(f"{size} B on {master}: stream source x{parts} driver CPU per message = {total:.3f} of the "
                          f"driver-side source's over the whole run, {steady:.3f} after the first batch; its driver "
                          f"Python alone {python:.3f} (target <= 0.1)")


def steady_driver_us(r: dict[str, Any]) -> float:
    """Driver CPU per message after the first batch, in microseconds."""
    return driver_cpu(r["steady_cpu_s"], r["master"]) / max(1, r["steady_rows"]) * 1e6


if __name__ == "__main__":
    main()
