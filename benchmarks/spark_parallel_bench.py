"""Spark -> Parquet with ``parallelism`` 1 and 2 against a raw drain with 1 and 2
consumers, in one run, at each body size (not a test).

RabbitMQ only (127.0.0.1:5672, guest). For each size in ``--sizes``:

* raw drain, 1 and 2 consumer processes: plain pika (basic_qos prefetch, a
  cumulative ack every prefetch/2), each in its own process, all started
  together; msgs/s from the start to the last message of the slowest;
* Spark: N messages -> ackbridge source (``parallelism`` 1, then 2) -> Spark's
  Parquet file sink, trigger 0.5 s; msgs/s from ``start()`` to the progress
  report of the batch that completes N rows (reported after its commit; its ack
  follows at the next trigger). Then the management API must show the queue
  empty with nothing unacked (settled after commit, checked, not timed) and the
  table must hold every message id (lost = 0).

CPU seconds per process kind (psutil, every process under this one: the
driver JVM, the source runner, the reader processes, Spark's Python workers,
this process) are measured over the same span. Spark session start-up and one
warm-up query are excluded.

The driver JVM's CPU in a short run is mostly its JIT compiler (C2) compiling
Spark's hot paths: ``--warm`` sizes the warm-up query, ``--jvm-options`` passes
e.g. ``-XX:TieredStopAtLevel=1`` (see docs/benchmarks.md).

Bodies are ``b"x" * size`` unless ``--bodies distinct``: Parquet's min/max
statistics then compare each body with the column's minimum and maximum to its
last byte, a cost equal bodies alone have (see docs/benchmarks.md). ``--sink-option``
passes options to the Parquet sink.

usage: .venv/bin/python benchmarks/spark_parallel_bench.py [--messages 150000] [--sizes 256,4096]
       [--batch 25000] [--prefetch 2000] [--trigger 0.5] [--write-ahead] [--warm 5000] [--rounds 1]
       [--jvm-options "-XX:TieredStopAtLevel=1"] [--bodies same|distinct] [--sink-option KEY=VALUE]
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import ackbridge

URL = "amqp://guest:guest@127.0.0.1:5672/"
MGMT = "http://127.0.0.1:15672/api"
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def mgmt(method: str, path: str) -> Any:
    request = urllib.request.Request(MGMT + path, method=method, headers={"Authorization": _AUTH})
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def counts(queue: str) -> tuple[int, int]:
    q = mgmt("GET", f"/queues/%2F/{queue}?disable_stats=false")
    return int(q.get("messages_ready", 0) or 0), int(q.get("messages_unacknowledged", 0) or 0)


def settled(queue: str, n: int = 0) -> bool:
    """The broker's own counters: nothing ready, nothing unacked (they lag ~1 s behind)."""
    q = mgmt("GET", f"/queues/%2F/{queue}")
    return int(q.get("messages", -1)) == 0 and int(q.get("messages_unacknowledged", -1)) == 0


def publish(queue: str, n: int, size: int, bodies: str = "same") -> None:
    """*n* messages of *size* bytes: all ``b"x" * size`` (``same``), or each starting with
    its own number (``distinct``; the rest is the same filler)."""
    body = b"x" * size
    with ackbridge.connect(URL) as conn:
        conn.declare_queue(queue, dead_letter=False)
        for i in range(n):
            if bodies == "distinct":
                head = b"%d:" % i
                body = head + b"x" * max(0, size - len(head))
            conn.publish(queue, body, message_id=f"b-{i}")
        assert conn.flush(timeout=600)
    # The management API counts late: wait until it shows them all.
    deadline = time.monotonic() + 60
    while counts(queue)[0] < n and time.monotonic() < deadline:
        time.sleep(0.5)


def wait_for_broker(timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            mgmt("GET", "/overview")
            ackbridge.connect(URL).close()
            return
        except Exception:
            time.sleep(2)
    raise SystemExit("RabbitMQ did not come back")


def delete(queue: str) -> None:
    try:
        mgmt("DELETE", f"/queues/%2F/{queue}")
    except Exception:
        pass


def _pika_drain(queue: str, prefetch: int, go: Any, out: Any) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    every = max(1, prefetch // 2)
    go.wait()
    cpu0 = time.process_time()
    got, last, tag = 0, time.time(), None
    for method, _props, _body in channel.consume(queue, inactivity_timeout=2.0):
        if method is None:
            break
        got += 1
        tag = method.delivery_tag
        last = time.time()
        if got % every == 0:
            channel.basic_ack(tag, multiple=True)
            tag = None
    if tag is not None:
        channel.basic_ack(tag, multiple=True)
    out.put((got, last, time.process_time() - cpu0))
    channel.cancel()
    connection.close()


def raw_drain(queue: str, consumers: int, prefetch: int) -> tuple[float, float, int]:
    """(msgs/s, CPU s of all consumers, messages) for *consumers* pika processes on *queue*."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_pika_drain, args=(queue, prefetch, go, out)) for _ in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # connected and subscribed
    start = time.time()
    go.set()
    try:
        results = [out.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    for p in procs:
        p.join(60)
    got = sum(r[0] for r in results)
    return got / (max(r[1] for r in results) - start), sum(r[2] for r in results), got


def _kind(proc: psutil.Process) -> str:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    if proc.pid == os.getpid():
        return "benchmark (driver Python)"
    if "java" in cmd.split(" ")[0]:
        return "driver JVM"
    if "reader_process" in cmd:
        return "reader processes"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
        return "Spark Python workers"
    return "other Python (source runner, planner)"


def _jvm_threads(pid: int) -> dict[str, float]:
    """CPU seconds of the driver JVM's JIT compiler and garbage-collector threads
    (Linux /proc). Both live as long as the JVM; task threads come and go, and a
    thread that has ended is in no /proc entry, so "the rest" is taken from the
    process total instead (:func:`cpu_snapshot`)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {"driver JVM: JIT compilers": 0.0, "driver JVM: GC": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if "CompilerThre" in name:
            found["driver JVM: JIT compilers"] += seconds
        elif name.startswith(("GC Thread", "G1 ")):
            found["driver JVM: GC"] += seconds
    return found


def cpu_snapshot() -> dict[int | str, tuple[str, float]]:
    me = psutil.Process()
    found: dict[int | str, tuple[str, float]] = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            kind = _kind(proc)
            found[proc.pid] = (kind, t.user + t.system)
            if kind == "driver JVM" and os.path.isdir(f"/proc/{proc.pid}/task"):
                parts = _jvm_threads(proc.pid)
                parts["driver JVM: tasks and the rest"] = t.user + t.system - sum(parts.values())
                for part, seconds in parts.items():
                    found[f"{proc.pid}:{part}"] = (part, seconds)
        except psutil.Error:
            continue
    return found


def cpu_by_kind(before: dict[int | str, tuple[str, float]], after: dict[int | str, tuple[str, float]]
                ) -> dict[str, float]:
    total: dict[str, float] = {}
    for pid, (kind, cpu) in after.items():
        total[kind] = total.get(kind, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]
    # Two decimals: the stream benchmark turns these into microseconds per message.
    return {k: round(v, 2) for k, v in sorted(total.items())}


def steady_rate(progress: list[Any]) -> int:
    """msgs/s after the first batch (the query's start: reader connections, first-batch
    planning), from the start of batch 1 to the end of the last batch."""
    from datetime import datetime

    later = [p for p in progress if p["batchId"] >= 1 and p["numInputRows"]]
    if not later:
        return 0

    def at(p: Any) -> float:
        return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    span = at(later[-1]) + later[-1]["durationMs"]["triggerExecution"] / 1000 - at(later[0])
    return round(sum(p["numInputRows"] for p in later) / span) if span > 0 else 0


def first_batch(progress: list[Any], start: float) -> dict[str, Any]:
    """Batch 0: its rows, and seconds from ``start()`` to its end (the query's start-up:
    the source runner and its broker connection, the first plan, the JIT's first compiles)."""
    from datetime import datetime

    zero = [p for p in progress if p["batchId"] == 0]
    if not zero:
        return {}
    began = datetime.fromisoformat(zero[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    ended = began + zero[0]["durationMs"]["triggerExecution"] / 1000
    return {"first batch rows": zero[0]["numInputRows"], "first batch ends after s": round(ended - start, 2),
            "first batch ms": zero[0]["durationMs"]}


def spark_run(spark: Any, queue: str, n: int, batch: int, parallelism: int, work: Path,
              trigger: float = 0.5, write_ahead: bool = False,
              sink_options: dict[str, str] | None = None) -> dict[str, Any]:
    table, ck = work / f"t-{queue}", work / f"ck-{queue}"
    reader = (spark.readStream.format("ackbridge").option("url", URL).option("queue", queue)
              .option("maxRecordsPerBatch", str(batch)).option("parallelism", str(parallelism)))
    if write_ahead:  # payloads go to executors as files, also with parallelism=1
        reader = reader.option("writeAheadPath", str(work / f"wal-{queue}"))
    frame = reader.load()
    before = cpu_snapshot()
    start = time.time()
    writer = (frame.select("message_id", "body", "source").writeStream.format("parquet")
              .option("path", str(table)).option("checkpointLocation", str(ck)))
    for key, value in (sink_options or {}).items():
        writer = writer.option(key, value)
    if trigger > 0:  # 0: Spark's default trigger, each batch as soon as the last ended
        writer = writer.trigger(processingTime=f"{trigger} seconds")
    query = writer.start()
    try:
        # Done when Spark reports batches covering all n rows (progress comes after a
        # batch committed; polling the query is cheap). The management API's counters
        # lag by up to its 5 s statistics interval, so they only check the acks after.
        while sum(p["numInputRows"] for p in query.recentProgress) < n:
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            time.sleep(0.05)
        elapsed = time.time() - start
        cpu = cpu_by_kind(before, cpu_snapshot())
        progress = list(query.recentProgress)
        steady = steady_rate(progress)
        first = first_batch(progress, start)
        deadline = time.monotonic() + 60
        while not settled(queue, n):  # acked after commit, at the next trigger
            if time.monotonic() > deadline:
                raise RuntimeError("messages left unsettled on the broker")
            time.sleep(0.5)
    finally:
        query.stop()
    ids = spark.read.parquet(str(table)).select("message_id")
    distinct = ids.distinct().count()
    return {"msgs/s": round(n / elapsed), "steady msgs/s": steady, "seconds": round(elapsed, 1), **first,
            "ids in table": distinct,
            "lost": n - distinct, "rows": ids.count(), "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=150_000)
    parser.add_argument("--sizes", default="256,4096")
    parser.add_argument("--batch", type=int, default=25_000, help="maxRecordsPerBatch")
    parser.add_argument("--prefetch", type=int, default=2000, help="raw drain prefetch per consumer")
    parser.add_argument("--trigger", type=float, default=0.5,
                        help="processingTime trigger in seconds; 0: Spark's default (as soon as possible)")
    parser.add_argument("--write-ahead", action="store_true",
                        help="set writeAheadPath: payloads reach executors as files with parallelism=1 too")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every cell; ratios are paired per round")
    parser.add_argument("--warm", type=int, default=5000,
                        help="messages of the warm-up query (the JIT compiles Spark's hot paths during it)")
    parser.add_argument("--jvm-options", default="",
                        help="spark.driver.extraJavaOptions, e.g. -XX:TieredStopAtLevel=1 (C1 only: no C2 compiles)")
    parser.add_argument("--bodies", choices=("same", "distinct"), default="same",
                        help="same: every body b'x' * size; distinct: each starts with its number (Parquet's "
                             "min/max statistics compare equal bodies to their last byte)")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the Parquet sink, e.g. parquet.column.statistics.enabled#body=false")
    args = parser.parse_args()
    sink_options = dict(item.split("=", 1) for item in args.sink_option)
    from pyspark.sql import SparkSession

    import ackbridge_spark

    spark = (SparkSession.builder.master("local[2]").appName("ackbridge-parallel-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.driver.extraJavaOptions", args.jvm_options).getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    ackbridge_spark.register(spark)
    work = Path(tempfile.mkdtemp(prefix="ackbridge-pbench-"))
    results: list[dict[str, Any]] = []
    try:
        warm = f"bench-warm-{uuid.uuid4().hex[:6]}"
        publish(warm, args.warm, 256)
        spark_run(spark, warm, args.warm, args.batch, 2, work, args.trigger, args.write_ahead, sink_options)
        delete(warm)
        for size, round_no in ((int(s), r) for s in args.sizes.split(",") for r in range(1, args.rounds + 1)):
            for label, kind, k in (("raw drain", "raw", 1), ("raw drain", "raw", 2),
                                   ("spark->parquet", "spark", 1), ("spark->parquet", "spark", 2)):
                for attempt in range(3):
                    queue = f"bench-{uuid.uuid4().hex[:8]}"
                    try:
                        publish(queue, args.messages, size, args.bodies)
                        if kind == "raw":
                            rate, cpu, got = raw_drain(queue, k, args.prefetch)
                            if got != args.messages:
                                raise RuntimeError(f"raw drain got {got} of {args.messages}")
                            row = {"msgs/s": round(rate), "cpu_s": {"consumer processes": round(cpu, 1)},
                                   "messages": got}
                        else:
                            row = spark_run(spark, queue, args.messages, args.batch, k, work, args.trigger,
                                            args.write_ahead, sink_options)
                        break
                    except Exception as exc:  # the shared broker was restarted under the run: redo it
                        print(f"# {label} x{k} at {size} B, attempt {attempt + 1}: {type(exc).__name__}; "
                              "waiting for the broker and running it again", flush=True)
                        wait_for_broker()
                    finally:
                        wait_for_broker()
                        delete(queue)
                else:
                    raise SystemExit(f"{label} x{k} at {size} B failed three times")
                row = {"size": size, "round": round_no, "run": f"{label} x{k}", **row,
                       "MB/s": round(row["msgs/s"] * size / 1e6, 1),
                       "cpu us/msg": {kind: round(s * 1e6 / args.messages, 1) for kind, s in row["cpu_s"].items()}}
                print(json.dumps(row), flush=True)
                results.append(row)
        for size in (int(s) for s in args.sizes.split(",")):
            for k in (1, 2):
                # Paired: each round's Spark rate over the same round's raw drain (the shared
                # broker's rate moves between rounds; a lone slow drain flatters Spark).
                ratios, later = [], []
                for round_no in range(1, args.rounds + 1):
                    rows = {r["run"]: r for r in results if r["size"] == size and r["round"] == round_no}
                    raw, spark_row = rows[f"raw drain x{k}"]["msgs/s"], rows[f"spark->parquet x{k}"]
                    ratios.append(spark_row["msgs/s"] / raw)
                    later.append(spark_row.get("steady msgs/s", 0) / raw)
                print(f"size {size} B: spark parallelism={k} / raw drain {k} consumer(s) = "
                      f"{' '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}); "
                      f"after the first batch: {' '.join(f'{r:.2f}' for r in later)} "
                      f"(median {statistics.median(later):.2f})")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
