"""The Spark driver-side source against the job a data engineer would write by hand (not a test).

Issue 39, part 4. RabbitMQ only (127.0.0.1:5672, guest/guest, management API on 15672).
Both sides take the same N messages (``b-0`` .. ``b-<N-1>``, published beforehand with
publisher confirms into a fresh classic queue) to Parquet files on the same disk, and
settle them only once they are written:

* **hand-written**: one Python process (its own interpreter; imports only pika and
  pyarrow): pika ``BlockingConnection``, ``basic_qos(prefetch)`` (default 50,000),
  manual acks; a ``basic_consume`` callback appends ``message_id``, ``body`` (binary) and
  the delivery tag (``offset``, int64) to three lists; every ``--batch`` messages
  (25,000) it builds a ``pyarrow`` table, writes it with ``pyarrow.parquet`` to a hidden
  temporary name, fsyncs the file, renames it to ``part-NNNNN.parquet``, fsyncs the
  directory, and only then sends ONE cumulative ``basic_ack(multiple=True)`` for the
  batch. A partial batch is written the same way once N arrived (or after 1 s idle).
* **ackbridge**: the driver-side source (``format("ackbridge")`` on the queue, the
  default source for RabbitMQ classic queues, as ``spark_bench.py`` runs it:
  ``maxRecordsPerBatch`` 25,000, prefetch 2x that = 50,000, settle after commit) ->
  ``select("message_id", "body", "offset")`` -> Spark's own Parquet file sink,
  processing-time trigger 0.5 s, ``local[2]``, driver JVM with C1 only (``--jit``).
  One SparkSession for the whole run; its start-up and one untimed warm-up query
  (``--warm-up`` messages) are excluded, every timed query's own start is in.

Both sides connect through ``spark_bench.AckWire``, a loopback relay in this process
that timestamps the basic.ack frames on their way to the broker. Throughput:

* end to end: N / (last message settled - start), where start is ``Popen`` of the
  job's process (its imports and connection are in) or the Spark query's
  ``load()`` (the source runner's start and the first batch are in);
* after the first batch: messages settled after the first ack / (last ack - first ack).

CPU, per process, from ``/proc/PID/stat`` (utime + stime), over the same span:

* hand-written: the job's process, whole life (``wait4`` rusage; its start-up CPU, the
  imports and the connection, is also shown on its own);
* Spark: every process under this one, sampled every 0.5 s (a process that ends between
  samples loses at most 0.5 s of CPU) and once at the end: the driver JVM (split by
  thread name at both ends: JIT compilers, GC, executor task threads -- Arrow to rows,
  Parquet encoding and writing --, and the rest: the query's own thread, planning,
  commits, threads that ended), the source runner
  (``python_streaming_source_runner``), Spark's Python workers (``pyspark.daemon`` and
  its forks: the tasks' ``read()``, and planner workers forked by the daemon), planner
  workers started on their own (``pyspark.sql.worker.*``); the JSON also holds the
  driver JVM's top ten thread names by CPU (``jvm_threads_cpu_s``);
* this process (the relay, polling; the SparkSession's py4j client on the Spark side),
  and RabbitMQ's ``beam.smp`` when readable (the broker is shared: informational).

CPU per message compares the job's process with the Spark processes (JVM + Python),
without this process on either side. After every run: every id ``b-0..b-<N-1>`` must be
in the Parquet output exactly once (Spark: the files its ``_spark_metadata`` log lists;
hand-written: ``part-*.parquet``), read back with pyarrow; and the management API must
show the queue with nothing ready and nothing unacked. Sides alternate across rounds
(round 1: hand-written first; round 2: Spark first; ...). Bodies are distinct by default
(each starts with its number, the rest ``x``): ``--bodies same`` sends ``b"x" * size``.

Known asymmetry: the hand-written job fsyncs each file and the directory before its ack;
Spark's file sink on the local filesystem writes its part files, ``_spark_metadata`` and
checkpoint without fsync.

usage (from the repository root, after scripts/setup.sh):

    export PYSPARK_PYTHON=$PWD/.venv/bin/python PYSPARK_DRIVER_PYTHON=$PWD/.venv/bin/python SPARK_LOCAL_IP=127.0.0.1
    .venv/bin/python benchmarks/spark_handwritten_bench.py --messages 100000 --size 256 --rounds 2
    .venv/bin/python benchmarks/spark_handwritten_bench.py --messages 1000000 --size 256,4096 --rounds 1

    [--batch 25000] [--prefetch 50000] [--trigger 0.5] [--warm-up 100000] [--jit c1|tiered]
    [--driver-memory 2g] [--bodies distinct|same] [--write-ahead-path DIR] [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RABBIT = "amqp://guest:guest@127.0.0.1:{port}/%2F"


# ---- the hand-written job (runs in its own process: ``--job``) --------------------------------
def handwritten_job(url: str, queue: str, out_dir: str, n: int, batch: int, prefetch: int) -> dict[str, Any]:
    """What a data engineer writes: pika -> pyarrow tables -> one fsynced Parquet file per
    *batch* messages -> one cumulative ack for them. Returns its own counters."""
    import pika
    import pyarrow as pa
    import pyarrow.parquet as pq

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    started_cpu = time.process_time()  # imports and connection done
    ids: list[str] = []
    bodies: list[bytes] = []
    tags: list[int] = []
    state = {"got": 0, "files": 0, "write_s": 0.0}
    dir_fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)

    def write_and_ack() -> None:
        t0 = time.perf_counter()
        table = pa.table({"message_id": pa.array(ids, pa.string()),
                          "body": pa.array(bodies, pa.binary()),
                          "offset": pa.array(tags, pa.int64())})
        name = f"part-{state['files']:05d}.parquet"
        tmp = os.path.join(out_dir, f".{name}.tmp")  # readers skip names starting with "."
        pq.write_table(table, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(out_dir, name))
        os.fsync(dir_fd)
        # Durable on disk: now settle the whole batch with one frame.
        channel.basic_ack(delivery_tag=tags[-1], multiple=True)
        state["files"] += 1
        ids.clear()
        bodies.clear()
        tags.clear()
        state["write_s"] += time.perf_counter() - t0

    def on_message(_channel: Any, method: Any, properties: Any, body: bytes) -> None:
        ids.append(properties.message_id)
        bodies.append(body)
        tags.append(method.delivery_tag)
        state["got"] += 1
        if len(tags) >= batch or state["got"] == n:
            write_and_ack()

    channel.basic_consume(queue=queue, on_message_callback=on_message, auto_ack=False)
    idle_since = time.monotonic()
    seen = 0
    while state["got"] < n:
        connection.process_data_events(time_limit=0.5)
        if state["got"] != seen:
            seen, idle_since = state["got"], time.monotonic()
        elif tags and time.monotonic() - idle_since > 1.0:
            write_and_ack()  # a partial batch, once the queue went quiet
    connection.process_data_events(time_limit=0)  # push the last ack out
    channel.close()
    connection.close()
    os.close(dir_fd)
    return {"got": state["got"], "files": state["files"], "write_s": round(state["write_s"], 3),
            "startup_cpu_s": round(started_cpu, 3)}


# ---- measurement helpers ---------------------------------------------------------------------
def proc_cpu(pid: int | str) -> float:
    """utime + stime of one process (or ``pid/task/tid``) from /proc, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid() -> int | None:
    """RabbitMQ's node (``beam.smp ... -s rabbit boot``), not a short-lived rabbitmqctl VM."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ")
                if b"beam.smp" in cmdline and b"rabbit boot" in cmdline:
                    proc_cpu(entry)
                    return int(entry)
            except OSError:
                continue
    return None


def kind_of(cmdline: str, pid: int) -> str:
    if pid == os.getpid():
        return "bench"
    if " --job " in cmdline:
        return "job"
    if "java" in cmdline.split(" ")[0]:
        return "jvm"
    if "python_streaming_source_runner" in cmdline:
        return "runner"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "workers"
    if "pyspark.sql.worker" in cmdline:
        return "planner"
    return "other"


def jvm_thread_kind(comm: str) -> str:
    if "CompilerThre" in comm:
        return "jvm_jit"
    if comm.startswith(("GC Thread", "G1 ")):
        return "jvm_gc"
    if comm.startswith("Executor task"):
        return "jvm_tasks"
    return "jvm_rest"


class TreeSampler:
    """CPU seconds per process kind under this process (and per driver-JVM thread kind),
    sampled every *period* s so that processes ending before the end are counted."""

    def __init__(self, period: float = 0.2) -> None:
        import psutil

        self._psutil = psutil
        self.period = period
        self.base: dict[str, float] = {}  # key -> CPU at start
        self.last: dict[str, float] = {}
        self.kinds: dict[str, str] = {}
        self.jvm_threads: dict[str, float] = {}
        self.names: dict[str, str] = {}  # JVM thread key -> its name (digits dropped), for the breakdown
        self._stop = threading.Event()
        self._sample(base=True)
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _sample(self, base: bool = False, threads: bool = True) -> None:
        me = self._psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                key = str(proc.pid)
                if key not in self.kinds:
                    self.kinds[key] = kind_of(" ".join(proc.cmdline()), proc.pid)
                self.last[key] = proc_cpu(proc.pid)
                if base:
                    self.base[key] = self.last[key]
                if threads and self.kinds[key] == "jvm":
                    for tid in os.listdir(f"/proc/{proc.pid}/task"):
                        tkey = f"{proc.pid}/task/{tid}"
                        try:
                            with open(f"/proc/{tkey}/comm") as f:
                                comm = f.read().strip()
                            self.kinds[tkey] = jvm_thread_kind(comm)
                            self.names[tkey] = "".join(c for c in comm if not c.isdigit()).strip("#-_ ")
                            self.last[tkey] = proc_cpu(tkey)
                        except OSError:
                            continue
                        if base:
                            self.base[tkey] = self.last[tkey]
            except (self._psutil.Error, OSError):
                continue

    def _run(self) -> None:
        # JVM threads only at both ends (JIT, GC and task threads live as long as the JVM or its
        # pool): walking ~100 threads every period costs this process CPU the two cores lack.
        while not self._stop.wait(self.period):
            self._sample(threads=False)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._sample()
        out: dict[str, float] = {}
        for key, cpu in self.last.items():
            kind = self.kinds[key]
            out[kind] = out.get(kind, 0.0) + cpu - self.base.get(key, 0.0)
        # Threads that ended since the start are in the JVM's total, not in a thread row.
        out["jvm_rest"] = out.get("jvm", 0.0) - sum(out.get(k, 0.0) for k in ("jvm_jit", "jvm_gc", "jvm_tasks"))
        by_name: dict[str, float] = {}
        for key, name in self.names.items():
            by_name[name] = by_name.get(name, 0.0) + self.last[key] - self.base.get(key, 0.0)
        self.jvm_threads = {k: round(v, 2) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:10]}
        return {k: round(v, 3) for k, v in sorted(out.items())}


def wait_published(queue: str, n: int) -> None:
    from spark_parallel_bench import counts

    deadline = time.monotonic() + 120
    while counts(queue)[0] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the management API never showed {n} messages in {queue}")
        time.sleep(0.5)


def broker_left(queue: str, timeout: float = 60.0) -> tuple[int, int]:
    """(ready, unacked) on the broker once its counters settle (they lag ~5 s)."""
    from spark_parallel_bench import counts, settled

    deadline = time.monotonic() + timeout
    while not settled(queue):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return counts(queue)


def verify_ids(files: list[Path], n: int) -> dict[str, int]:
    """Every id b-0..b-<n-1> exactly once in *files* (lost, duplicates, strangers)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    columns = [pq.read_table(f, columns=["message_id"]).column("message_id") for f in files]
    ids = pa.chunked_array([c for col in columns for c in col.chunks], pa.string())
    unique = pc.unique(ids)
    expected = pa.array([f"b-{i}" for i in range(n)], pa.string())
    present = pc.sum(pc.is_in(expected, value_set=unique)).as_py() or 0
    return {"rows": len(ids), "files": len(files), "lost": n - present, "duplicates": len(ids) - len(unique),
            "strangers": len(unique) - present}


def spark_committed_files(table: Path) -> list[Path]:
    """The part files the file sink's ``_spark_metadata`` log lists as added (what Spark reads)."""
    added: set[str] = set()
    for entry in (table / "_spark_metadata").iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".crc"):
            continue
        for line in entry.read_text().splitlines()[1:]:  # first line: version "v1"
            record = json.loads(line)
            if record.get("action", "add") == "add":
                added.add(record["path"])
    return sorted(Path(p.removeprefix("file://")) for p in added)


def rates(wire: Any, n: int, start: float) -> dict[str, Any]:
    from spark_bench import first_reaching

    events = list(wire.events)
    end = first_reaching(events, n)
    first = next(((t, s) for t, s in events if s > 0), None)
    out: dict[str, Any] = {"seconds": round(end - start, 3), "msgs_s": round(n / (end - start))}
    if first is not None and end > first[0]:
        out["first_ack_after_s"] = round(first[0] - start, 3)
        out["first_ack_msgs"] = first[1]
        out["after_first_msgs_s"] = round((n - first[1]) / (end - first[0]))
    return out


# ---- the two sides ---------------------------------------------------------------------------
def run_handwritten(queue: str, n: int, args: argparse.Namespace, work: Path, beam: int | None) -> dict[str, Any]:
    from spark_bench import AckWire

    out_dir = work / f"hand-{queue}"
    out_dir.mkdir()
    wire = AckWire()
    url = RABBIT.format(port=wire.port)
    # The idle SparkSession shares the machine during the job: its CPU is shown, not counted.
    idle = TreeSampler(period=1.0)
    beam0 = proc_cpu(beam) if beam else 0.0
    bench0 = time.process_time()
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    job = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--job", url, queue, str(out_dir), str(n),
                            str(args.batch), str(args.prefetch)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 1800
    while wire.settled() < n:
        if job.poll() is not None and wire.settled() < n:
            time.sleep(0.2)
            if wire.settled() < n:
                raise RuntimeError(f"the hand-written job ended (rc {job.returncode}) with {wire.settled()} settled")
        if time.monotonic() > deadline:
            job.kill()
            raise RuntimeError("the hand-written job timed out")
        time.sleep(0.01)
    bench_cpu = time.process_time() - bench0
    beam_cpu = (proc_cpu(beam) - beam0) if beam else None
    idle_cpu = idle.stop()
    stdout = job.stdout.read() if job.stdout else ""
    _, status, usage = os.wait4(job.pid, 0)
    job.returncode = os.waitstatus_to_exitcode(status)
    wire.close()
    if job.returncode != 0:
        raise RuntimeError(f"the hand-written job failed: rc {job.returncode}")
    report = json.loads(stdout.strip().splitlines()[-1])
    res: dict[str, Any] = {"side": "hand-written", **rates(wire, n, start), "load_1min": load0}
    job_cpu = usage.ru_utime + usage.ru_stime
    res["cpu_s"] = {"job": round(job_cpu, 3), "job_startup": report["startup_cpu_s"], "bench": round(bench_cpu, 3),
                    "idle_spark_session": round(sum(v for k, v in idle_cpu.items()
                                                    if k in ("jvm", "runner", "workers", "planner", "other")), 3)}
    if beam_cpu is not None:
        res["cpu_s"]["broker"] = round(beam_cpu, 3)
    res["compared_cpu_s"] = round(job_cpu, 3)
    res["job"] = report
    res["verify"] = verify_ids(sorted(out_dir.glob("part-*.parquet")), n)
    res["broker_left"] = broker_left(queue)
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def run_spark(spark: Any, queue: str, n: int, args: argparse.Namespace, work: Path, beam: int | None,
              verify: bool = True) -> dict[str, Any]:
    from spark_bench import AckWire

    table, checkpoint = work / f"spark-{queue}", work / f"ck-{queue}"
    wire = AckWire()
    url = RABBIT.format(port=wire.port).removesuffix("%2F")
    sampler = TreeSampler(period=0.5)
    beam0 = proc_cpu(beam) if beam else 0.0
    bench0 = time.process_time()
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    wall_start = time.time()
    reader = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
              .option("maxRecordsPerBatch", str(args.batch)))
    if args.max_partition_bytes:  # the connector's default (16 MiB) unless asked; a huge value: one task a batch
        reader = reader.option("maxPartitionBytes", str(args.max_partition_bytes))
    if args.write_ahead_path:  # not the default: batches travel as fsynced Arrow files, not inside the task
        reader = reader.option("writeAheadPath", os.path.join(args.write_ahead_path, queue))
    stream = reader.load()
    query = (stream.select("message_id", "body", "offset").writeStream.format("parquet")
             .option("path", str(table)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=f"{args.trigger} seconds").start())
    try:
        deadline = time.monotonic() + 1800
        polls = 0
        while wire.settled() < n:
            polls += 1
            if polls % 50 == 0 and not query.isActive:  # a py4j call: every 0.5 s only
                raise RuntimeError(f"the query stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError("the Spark query timed out")
            time.sleep(0.01)
        bench_cpu = time.process_time() - bench0
        beam_cpu = (proc_cpu(beam) - beam0) if beam else None
        cpu = sampler.stop()
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        query.stop()
        wire.close()
    res: dict[str, Any] = {"side": "spark", **rates(wire, n, start), "load_1min": load0}
    cpu["bench"] = round(bench_cpu, 3)
    if beam_cpu is not None:
        cpu["broker"] = round(beam_cpu, 3)
    res["cpu_s"] = cpu
    res["jvm_threads_cpu_s"] = sampler.jvm_threads  # the top 10 thread names (Linux's 15-character comm)
    res["compared_cpu_s"] = round(sum(cpu.get(k, 0.0) for k in ("jvm", "runner", "workers", "planner", "other")), 3)
    batches = [p for p in progress if p.get("numInputRows")]
    res["batches"] = len(batches)
    zero = next((p for p in progress if p["batchId"] == 0), None)
    if zero is not None:
        from datetime import datetime

        began = datetime.fromisoformat(zero["timestamp"].replace("Z", "+00:00")).timestamp()
        res["first_batch"] = {"rows": zero["numInputRows"],
                              "ends_after_s": round(began + zero["durationMs"]["triggerExecution"] / 1000
                                                    - wall_start, 2)}
    if batches:
        res["mean_ms"] = {k: round(sum(p["durationMs"].get(k, 0) for p in batches) / len(batches))
                          for k in ("latestOffset", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")}
    if verify:
        res["verify"] = verify_ids(spark_committed_files(table), n)
        res["broker_left"] = broker_left(queue)
    shutil.rmtree(table, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    if args.write_ahead_path:  # the source removes committed files, not the directory
        shutil.rmtree(os.path.join(args.write_ahead_path, queue), ignore_errors=True)
    return res


# ---- report ----------------------------------------------------------------------------------
def us(seconds: float | None, n: int) -> str:
    return "-" if seconds is None else f"{seconds * 1e6 / n:.1f}"


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| size | N | round | side | msgs/s end to end | msgs/s after 1st batch | CPU us/msg (compared) "
             "| driver JVM (JIT / GC / tasks / rest) | runner | Python workers | planner | job | bench | broker "
             "| lost | dup | left on broker |",
             "|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        n, c = r["n"], r["cpu_s"]
        jvm = (f"{us(c.get('jvm'), n)} ({us(c.get('jvm_jit', 0), n)} / {us(c.get('jvm_gc', 0), n)} / "
               f"{us(c.get('jvm_tasks', 0), n)} / {us(c.get('jvm_rest', 0), n)})" if "jvm" in c else "-")
        lines.append(
            f"| {r['size']} B | {n:,} | {r['round']} | {r['side']} | {r['msgs_s']:,} | "
            f"{r.get('after_first_msgs_s', 0):,} | {us(r['compared_cpu_s'], n)} | {jvm} | {us(c.get('runner'), n)} | "
            f"{us(c.get('workers'), n)} | {us(c.get('planner'), n)} | {us(c.get('job'), n)} | "
            f"{us(c.get('bench'), n)} | {us(c.get('broker'), n)} | {r['verify']['lost']} | "
            f"{r['verify']['duplicates']} | {r['broker_left'][0]} ready, {r['broker_left'][1]} unacked |")
    return "\n".join(lines)


def ratios(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for size in sorted({r["size"] for r in results}):
        pairs = []
        for round_no in sorted({r["round"] for r in results if r["size"] == size}):
            sides = {r["side"]: r for r in results if r["size"] == size and r["round"] == round_no}
            if len(sides) == 2:
                pairs.append((sides["spark"], sides["hand-written"]))
        if not pairs:
            continue
        cpu = [s["compared_cpu_s"] / h["compared_cpu_s"] for s, h in pairs]
        e2e = [s["msgs_s"] / h["msgs_s"] for s, h in pairs]
        # No "after the first batch" when N fits in one batch (a single ack).
        after = [s["after_first_msgs_s"] / h["after_first_msgs_s"] for s, h in pairs
                 if "after_first_msgs_s" in s and "after_first_msgs_s" in h]

        def fmt(values: list[float]) -> str:
            if not values:
                return "n/a"
            return " ".join(f"{v:.2f}" for v in values) + f" (median {statistics.median(values):.2f})"

        out.append(f"size {size} B, N={pairs[0][0]['n']:,}: Spark / hand-written per round: CPU per message "
                   f"{fmt(cpu)} [target <= 1.5]; throughput end to end {fmt(e2e)}; after the first batch "
                   f"{fmt(after)} [target >= 0.8]")
    return out


# ---- main ------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="N messages per run (each side, each round)")
    parser.add_argument("--size", default="256", help="body size in bytes; a comma list runs each (e.g. 256,4096)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size; sides alternate which goes first")
    parser.add_argument("--batch", type=int, default=25_000,
                        help="messages per Parquet file (hand-written) and maxRecordsPerBatch (Spark)")
    parser.add_argument("--prefetch", type=int, default=50_000, help="the hand-written job's basic_qos prefetch")
    parser.add_argument("--trigger", type=float, default=0.5, help="Spark processing-time trigger, seconds")
    parser.add_argument("--warm-up", type=int, default=100_000, help="messages of the untimed Spark warm-up query")
    parser.add_argument("--jit", choices=("c1", "tiered"), default="c1", help="driver JVM JIT (as spark_bench.py)")
    parser.add_argument("--driver-memory", default="", help="spark.driver.memory (default: Spark's 1g)")
    parser.add_argument("--bodies", choices=("distinct", "same"), default="distinct",
                        help="distinct: each body starts with its number; same: b'x' * size")
    parser.add_argument("--write-ahead-path", default="",
                        help="run the source with writeAheadPath under this directory (not the default; the "
                             "connector's advice for batches of tens of MB)")
    parser.add_argument("--max-partition-bytes", type=int, default=0,
                        help="the source's maxPartitionBytes (default: the connector's, 16 MiB; 2000000000 plans "
                             "each batch as one task, as before the option)")
    parser.add_argument("--work", default="", help="directory for Parquet output and checkpoints (default: a temp dir)")
    parser.add_argument("--json", default="", help="append each run's result as a JSON line to this file")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.path.insert(0, str(HERE))
    from pyspark.sql import SparkSession
    from spark_parallel_bench import delete, publish

    import ackbridge_spark

    sizes = [int(s) for s in args.size.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="ackbridge-hwbench-", dir=args.work or None))
    builder = (SparkSession.builder.master("local[2]").appName("ackbridge-handwritten-bench")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.showConsoleProgress", "false"))
    if args.jit == "c1":
        builder = builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    if args.driver_memory:
        builder = builder.config("spark.driver.memory", args.driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    ackbridge_spark.register(spark)
    beam = broker_pid()
    results: list[dict[str, Any]] = []
    print(f"# N={args.messages:,} sizes={sizes} rounds={args.rounds} batch={args.batch:,} prefetch={args.prefetch:,} "
          f"trigger={args.trigger} s jit={args.jit} bodies={args.bodies} warm-up={args.warm_up:,} work={work} "
          f"writeAheadPath={args.write_ahead_path or 'off'} maxPartitionBytes={args.max_partition_bytes or 'default'} "
          f"driver-memory={args.driver_memory or 'default'} "
          f"cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}", flush=True)
    try:
        if args.warm_up:
            queue = f"hwbench-warm-{uuid.uuid4().hex[:6]}"
            try:
                publish(queue, args.warm_up, sizes[0], args.bodies)
                wait_published(queue, args.warm_up)
                t0 = time.perf_counter()
                run_spark(spark, queue, args.warm_up, args, work, beam, verify=False)
                print(f"# warm-up query: {args.warm_up:,} messages in {time.perf_counter() - t0:.1f} s", flush=True)
            finally:
                delete(queue)
        for size in sizes:
            for round_no in range(1, args.rounds + 1):
                order = ("hand-written", "spark") if round_no % 2 else ("spark", "hand-written")
                for side in order:
                    queue = f"hwbench-{uuid.uuid4().hex[:8]}"
                    t0 = time.perf_counter()
                    publish(queue, args.messages, size, args.bodies)
                    wait_published(queue, args.messages)
                    published_s = time.perf_counter() - t0
                    try:
                        if side == "spark":
                            res = run_spark(spark, queue, args.messages, args, work, beam)
                        else:
                            res = run_handwritten(queue, args.messages, args, work, beam)
                    finally:
                        delete(queue)
                    res.update({"size": size, "n": args.messages, "round": round_no,
                                "published_s": round(published_s, 1),
                                "load_1min_after": round(os.getloadavg()[0], 1),
                                "utc": time.strftime("%H:%M:%S", time.gmtime())})
                    results.append(res)
                    print(json.dumps(res), flush=True)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps(res) + "\n")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(markdown(results))
    print()
    for line in ratios(results):
        print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        _, _, job_url, job_queue, job_dir, job_n, job_batch, job_prefetch = sys.argv
        print(json.dumps(handwritten_job(job_url, job_queue, job_dir, int(job_n), int(job_batch),
                                         int(job_prefetch))), flush=True)
    else:
        main()
