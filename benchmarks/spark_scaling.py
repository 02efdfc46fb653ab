"""Spark source scaling curves (a benchmark, not a test).

For the embedded broker and RabbitMQ: msgs/s of the ackbridge source (settle
after commit) and the peak resident memory (VmHWM from /proc/PID/status) of the
driver's processes, versus the number of messages N and versus the message size.

Each point runs in a fresh driver process, so every high-water mark belongs to
that point alone: N messages are published with confirms, then a streaming
query (default trigger, foreachBatch that counts the batch) reads them; msgs/s
is N over the time from query start to the last row counted. Peaks are sampled
every 0.2 s over the driver's process tree: the JVM, the driver's Python, and
the Python processes Spark starts (the source runner that owns the broker
connection, and the workers).

    .venv/bin/python benchmarks/spark_scaling.py                      # full sweep (~15 min)
    .venv/bin/python benchmarks/spark_scaling.py --quick
    .venv/bin/python benchmarks/spark_scaling.py --png docs/spark_scaling.png

Prints a Markdown table (benchmarks/report.py puts it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ackbridge.testing.faults import transport_of

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

HERE = Path(__file__).resolve().parent
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"
#: A micro-batch carries at most this many payload bytes (the partition is pickled into its task).
BATCH_BYTES = 16 * 1024 * 1024
MAX_BATCH = 5000


def batch_size(n: int, size: int) -> int:
    return max(100, min(MAX_BATCH, n, BATCH_BYTES // max(size, 1)))


# ---- memory ------------------------------------------------------------------------------
def _status(pid: int) -> dict[str, str]:
    fields = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    except OSError:
        pass
    return fields


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
                found += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return found


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return "gone"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    return "python" if "python" in cmd else "other"


class PeakSampler(threading.Thread):
    """Max VmHWM (KiB) per process of this driver's tree, sampled until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        me = os.getpid()
        todo, seen = [me], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            hwm = _status(pid).get("VmHWM", "0 kB").split()[0]
            kind = "driver" if pid == me else _kind(pid)
            previous = self.peaks.get(pid, (kind, 0))[1]
            self.peaks[pid] = (kind, max(previous, int(hwm or 0)))
            todo += _children(pid)

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.sample()

    def stop(self) -> dict[str, float]:
        self.sample()
        self._stop_event.set()
        self.join(5)
        mib = 1024.0
        jvm = [v for k, v in self.peaks.values() if k == "jvm"]
        workers = [v for k, v in self.peaks.values() if k == "python"]
        driver = [v for k, v in self.peaks.values() if k == "driver"]
        return {"jvm_mib": max(jvm, default=0) / mib, "driver_py_mib": max(driver, default=0) / mib,
                "worker_py_max_mib": max(workers, default=0) / mib,
                "workers": len(workers), "total_mib": sum(v for _, v in self.peaks.values()) / mib}


# ---- one point (runs in its own process) -----------------------------------------------------
def _counts(broker: str, url: str, queue: str) -> tuple[int, int]:
    if broker == "embedded":
        import ackbridge

        with ackbridge.connect(url) as conn:
            return transport_of(conn).store.counts(queue)  # type: ignore[attr-defined,no-any-return]
    sys.path.insert(0, str(HERE))
    from spark_bench import rabbit_counts

    return rabbit_counts(queue)


def publish(url: str, queue: str, n: int, size: int) -> None:
    import ackbridge

    body = b"x" * size
    with ackbridge.connect(url) as conn:
        conn.declare_queue(queue)
        for i in range(n):
            conn.publish(queue, body, message_id=f"s-{i}")
        assert conn.flush(timeout=600), "publishes not confirmed"


def point(broker: str, n: int, size: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from spark_bench import delete_rabbit_queues

    work = Path(tempfile.mkdtemp(prefix="ackbridge-scaling-"))
    url = f"local://{work / 'broker.db'}" if broker == "embedded" else RABBIT_URL
    queue = f"scale-{uuid.uuid4().hex[:8]}"
    batch = batch_size(n, size)
    try:
        # Published by another process: the driver's own peak memory is the query's alone.
        subprocess.run([sys.executable, __file__, "--publish", url, queue, str(n), str(size)], check=True,
                       timeout=1800)
        sampler = PeakSampler()
        sampler.start()
        from pyspark.sql import SparkSession

        import ackbridge_spark

        spark = (SparkSession.builder.master("local[2]").appName("ackbridge-scaling")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        ackbridge_spark.register(spark)
        counted = [0]
        done = threading.Event()
        finished_at = [0.0]

        def sink(df: Any, batch_id: int) -> None:
            counted[0] += df.count()
            if counted[0] >= n and not done.is_set():
                finished_at[0] = time.perf_counter()
                done.set()

        start = time.perf_counter()
        query = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
                 .option("maxRecordsPerBatch", str(batch)).load()
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "ck")).start())
        ok = done.wait(1200)
        elapsed = finished_at[0] - start if ok else float("nan")
        # Settled after commit: the queue empties once the last batch committed.
        deadline = time.monotonic() + 120
        while ok and sum(_counts(broker, url, queue)) and time.monotonic() < deadline:
            time.sleep(0.2)
        settled = ok and sum(_counts(broker, url, queue)) == 0
        query.stop()
        memory = sampler.stop()
        spark.stop()
        return {"broker": broker, "n": n, "size": size, "batch": batch, "msgs_s": n / elapsed if ok else 0.0,
                "mib_s": n * size / elapsed / 2**20 if ok else 0.0, "counted": counted[0], "settled": settled,
                **memory}
    finally:
        if broker != "embedded":
            delete_rabbit_queues(queue)
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def run_point(broker: str, n: int, size: int) -> dict[str, Any]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, __file__, "--point", broker, str(n), str(size)], capture_output=True,
                          text=True, env=env, timeout=3600, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("POINT "):
            return dict(json.loads(line[6:]))
    return {"broker": broker, "n": n, "size": size, "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}


# ---- report ----------------------------------------------------------------------------------
def table(points: list[dict[str, Any]]) -> str:
    lines = ["| broker | N | body | maxRecordsPerBatch | msgs/s | MiB/s | JVM peak MiB | driver Python MiB | "
             "largest Spark Python MiB | Python procs | all peaks MiB | settled |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        if "error" in p:
            lines.append(f"| {p['broker']} | {p['n']:,} | {_size(p['size'])} | - | FAILED: {p['error']} |"
                         " - | - | - | - | - | - | no |")
            continue
        lines.append(f"| {p['broker']} | {p['n']:,} | {_size(p['size'])} | {p['batch']:,} | {p['msgs_s']:,.0f} | "
                     f"{p['mib_s']:.1f} | {p['jvm_mib']:.0f} | {p['driver_py_mib']:.0f} | "
                     f"{p['worker_py_max_mib']:.0f} | {p['workers']} | {p['total_mib']:.0f} | "
                     f"{'yes' if p['settled'] else 'NO'} |")
    return "\n".join(lines)


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def plot(points: list[dict[str, Any]], n_sweep: list[int], sizes: list[int], fixed_n: int, base_size: int,
         png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    good = [p for p in points if "error" not in p]
    for broker, colour in (("embedded", "#3a7"), ("rabbitmq", "#d84")):
        by_n = sorted((p for p in good if p["broker"] == broker and p["size"] == base_size and p["n"] in n_sweep),
                      key=lambda p: p["n"])
        by_size = sorted((p for p in good if p["broker"] == broker and p["n"] == fixed_n and p["size"] in sizes),
                         key=lambda p: p["size"])
        for ax, rows, x, y in ((axes[0][0], by_n, "n", "msgs_s"), (axes[0][1], by_size, "size", "msgs_s")):
            ax.plot([r[x] for r in rows], [r[y] for r in rows], "o-", color=colour, label=broker)
        for ax, rows, x in ((axes[1][0], by_n, "n"), (axes[1][1], by_size, "size")):
            ax.plot([r[x] for r in rows], [r["jvm_mib"] for r in rows], "o-", color=colour, label=f"{broker}: JVM")
            ax.plot([r[x] for r in rows], [r["worker_py_max_mib"] for r in rows], "s--", color=colour,
                    label=f"{broker}: largest Spark Python")
    axes[0][0].set_title(f"msgs/s vs N ({_size(base_size)} bodies)")
    axes[0][1].set_title(f"msgs/s vs body size (N={fixed_n:,})")
    axes[1][0].set_title("peak RSS (VmHWM) vs N")
    axes[1][1].set_title("peak RSS (VmHWM) vs body size")
    for ax in axes[0][1], axes[1][1]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("body bytes")
    for ax in axes[0][0], axes[1][0]:
        ax.set_xscale("log")
        ax.set_xlabel("messages")
    for ax in axes[1]:
        ax.set_ylabel("MiB")
    for ax in axes[0]:
        ax.set_ylabel("msgs/s")
    for row in axes:
        for ax in row:
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    fig.suptitle("ackbridge Spark source: throughput and driver memory (local[2], 2 cores)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--point", nargs=3, metavar=("BROKER", "N", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--publish", nargs=4, metavar=("URL", "QUEUE", "N", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="N in 2k/5k/10k, sizes at N=2000")
    parser.add_argument("--brokers", nargs="*", default=["embedded", "rabbitmq"])
    parser.add_argument("--png", type=Path, help="also draw the curves into this PNG")
    parser.add_argument("--json", type=Path, help="also write the points as JSON")
    args = parser.parse_args()
    if args.publish:
        url, queue, n, size = args.publish
        publish(url, queue, int(n), int(size))
        return 0
    if args.point:
        broker, n, size = args.point
        print("POINT " + json.dumps(point(broker, int(n), int(size))), flush=True)
        return 0
    n_sweep = [2000, 5000, 10000] if args.quick else [10000, 30000, 100000]
    fixed_n = 2000 if args.quick else 5000
    sizes, base = [64, 1024, 16384, 65536], 256
    plan = [(b, n, base) for b in args.brokers for n in n_sweep]
    plan += [(b, fixed_n, s) for b in args.brokers for s in sizes]
    points = []
    for broker, n, size in plan:
        print(f"# {broker} N={n} body={size}", file=sys.stderr, flush=True)
        points.append(run_point(broker, n, size))
        print(f"#   {points[-1]}", file=sys.stderr, flush=True)
    import datetime

    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"Run {when}. Each point: a fresh driver (`local[2]`, spark.driver.memory=2g) reads N messages "
          f"published beforehand "
          f"(default trigger, foreachBatch counting each batch, maxRecordsPerBatch = min({MAX_BATCH:,}, "
          f"16 MiB / body), prefetch 2x). msgs/s: query start to the last row counted (session start-up "
          f"excluded). Memory: peak VmHWM per process over the run; 'largest Spark Python' is the biggest "
          f"of the Python processes Spark started (the source runner, which holds the broker connection "
          f"and the unsettled deliveries, and the workers); 'all peaks' sums every process's peak (an "
          f"upper bound: the peaks need not coincide).\n")
    print(f"Versus N ({_size(base)} bodies):\n")
    print(table([p for p in points if p["size"] == base and p["n"] in n_sweep]))
    print(f"\nVersus body size (N = {fixed_n:,}):\n")
    print(table([p for p in points if p["n"] == fixed_n and p["size"] in sizes]))
    if args.png:
        plot(points, n_sweep, sizes, fixed_n, base, args.png)
        print(f"\n![Spark source scaling]({args.png.name})")
    if args.json:
        args.json.write_text(json.dumps(points, indent=1))
    return 0 if all("error" not in p and p.get("settled") for p in points) else 1


if __name__ == "__main__":
    raise SystemExit(main())
