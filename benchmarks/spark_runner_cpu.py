"""CPU per message of the driver-side source's runner alone, without Spark (not a test).

Issue 39, part 4: in the Spark benchmark (``spark_handwritten_bench.py``) the source runner
(``python_streaming_source_runner``) costs about what a whole hand-written pika -> Parquet job
costs. This drives the same reader object the runner holds, in this process, the way Spark's
runner calls it -- ``latestOffset``, ``partitions`` (pickled, as the runner sends them to the
JVM), then ``commit`` -- over N messages published beforehand into a fresh RabbitMQ classic
queue, and reports the process CPU per message of that loop (every thread: pika's I/O thread
included), with no JVM beside it. ``--profile FILE`` writes a cProfile of the loop.

    .venv/bin/python benchmarks/spark_runner_cpu.py --messages 200000 --size 256 --rounds 3

Baseline in the same run (``--raw``, on by default): pika ``SelectConnection`` receiving the
same messages with the same prefetch and one ``basic_ack(multiple=True)`` per batch, and
nothing else (no Arrow): the floor any AMQP 0-9-1 consumer in Python pays.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pickle
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def publish(queue: str, n: int, size: int) -> None:
    import ackbridge

    with ackbridge.connect(URL) as conn:
        conn.declare_queue(queue)
        pad = b"x" * size
        for i in range(n):
            head = f"{i}-".encode()
            conn.publish(queue, head + pad[len(head):], message_id=f"b-{i}")
        conn.flush(timeout=300)


def delete(queue: str) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    connection.channel().queue_delete(queue)
    connection.close()


def run_reader(queue: str, n: int, batch: int, trigger: float, profile: str | None) -> tuple[float, float, int]:
    """(cpu seconds, wall seconds, batches) of the reader's loop over *n* messages, a batch
    planned at most every *trigger* seconds (Spark's processing-time trigger)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from ackbridge_spark.options import parse
    from ackbridge_spark.push.source import AckbridgeStreamReader

    reader = AckbridgeStreamReader(parse({"url": URL, "queue": queue, "maxRecordsPerBatch": str(batch)}))
    limit = ReadMaxRows(batch)
    start: dict[str, Any] = reader.initialOffset()
    reader.latestOffset(start, limit)  # connect and subscribe: the runner's start, not timed
    profiler = cProfile.Profile() if profile else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    batches, due = 0, time.perf_counter()
    while True:
        time.sleep(max(0.0, due - time.perf_counter()))
        due = time.perf_counter() + trigger
        end = reader.latestOffset(start, limit)
        if end == start:
            if int(start.get("seq", 0)) >= n:
                break
            continue
        pickle.dumps(reader.partitions(start, end))
        reader.commit(end)
        start, batches = end, batches + 1
    reader.latestOffset(start, limit)  # settles the last committed batch
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    reader.stop()
    return cpu, wall, batches


def run_raw(queue: str, n: int, batch: int, prefetch: int) -> tuple[float, float]:
    """pika SelectConnection: receive *n*, one cumulative ack per *batch* (no Arrow)."""
    import pika

    state = {"got": 0, "cpu0": 0.0, "wall0": 0.0}
    params = pika.URLParameters(URL)

    def on_message(channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
        state["got"] += 1
        if state["got"] % batch == 0 or state["got"] == n:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if state["got"] == n:
            connection.close()

    def on_channel(channel: Any) -> None:
        channel.basic_qos(prefetch_count=prefetch,
                          callback=lambda _f: (state.update(cpu0=time.process_time(), wall0=time.perf_counter()),
                                               channel.basic_consume(queue, on_message)))

    connection = pika.SelectConnection(params, on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                       on_close_callback=lambda *_: connection.ioloop.stop())
    connection.ioloop.start()
    return time.process_time() - state["cpu0"], time.perf_counter() - state["wall0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=25_000, help="maxRecordsPerBatch (prefetch: 2x, as default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trigger", type=float, default=0.5, help="seconds between planned batches, as Spark's")
    parser.add_argument("--no-raw", action="store_true", help="skip the pika baseline")
    parser.add_argument("--profile", default="", help="write a cProfile of the reader's last round here")
    args = parser.parse_args()
    ours: list[float] = []
    raws: list[float] = []
    print(f"# N={args.messages:,} size={args.size} batch={args.batch:,} load={os.getloadavg()[0]:.1f}", flush=True)
    for r in range(args.rounds):
        queue = f"runner-cpu-{uuid.uuid4().hex[:8]}"
        publish(queue, args.messages, args.size)
        last = r == args.rounds - 1
        cpu, wall, batches = run_reader(queue, args.messages, args.batch, args.trigger,
                                         args.profile if last else None)
        delete(queue)
        ours.append(cpu / args.messages * 1e6)
        line = (f"round {r + 1}: reader {ours[-1]:.1f} us/msg ({args.messages / wall:,.0f} msgs/s, "
                f"{batches} batches)")
        if not args.no_raw:
            queue = f"runner-raw-{uuid.uuid4().hex[:8]}"
            publish(queue, args.messages, args.size)
            cpu, wall = run_raw(queue, args.messages, args.batch, 2 * args.batch)
            delete(queue)
            raws.append(cpu / args.messages * 1e6)
            line += f"; raw pika {raws[-1]:.1f} us/msg ({args.messages / wall:,.0f} msgs/s)"
        print(line, flush=True)
    summary = f"median: reader {statistics.median(ours):.1f} us/msg"
    if raws:
        ratios = sorted(o / w for o, w in zip(ours, raws, strict=True))
        summary += (f", raw pika {statistics.median(raws):.1f}, ratio {statistics.median(ratios):.2f} "
                    f"({ratios[0]:.2f}..{ratios[-1]:.2f})")
    print(summary + f"; load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
