"""What the local-cluster and Spark Connect tests share: one source query (two
queues, two readers) and one sink write, over the embedded broker, checked on
the broker's side and in the Parquet table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import ackbridge

from .helpers import LocalBroker, eventually


def source_two_queues_two_readers(spark: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    broker = LocalBroker(tmp_path)
    try:
        first, second = broker.new_queue(), broker.new_queue()
        sent = {first: set(broker.publish(first, 120, prefix="a")), second: set(broker.publish(second, 80, prefix="b"))}
        table = tmp_path / "table"
        query = (spark.readStream.format("ackbridge").option("url", broker.url()).option("queue", f"{first},{second}")
                 .option("parallelism", "2").option("maxRecordsPerBatch", "50").load()
                 .select("message_id", "source").writeStream.format("parquet").option("path", str(table))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="0.5 seconds").start())
        try:
            eventually(lambda: broker.counts(first) == (0, 0) and broker.counts(second) == (0, 0), 180,
                       message="both queues drained and settled after commit")
            time.sleep(0.5)
        finally:
            query.stop()
        rows = [r for f in sorted(table.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        assert {r["message_id"] for r in rows} == sent[first] | sent[second]
        for r in rows:
            assert r["message_id"] in sent[r["source"]]
    finally:
        broker.close()


def sink_write(spark: Any, tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path)
    try:
        queue = broker.new_queue()
        frame = spark.createDataFrame([(f"row-{i}",) for i in range(300)], "body string").repartition(3)
        frame.write.format("ackbridge").option("url", broker.url()).option("queue", queue).mode("append").save()
        assert broker.counts(queue) == (300, 0)
        with ackbridge.connect(broker.url()) as conn:
            consumer = conn.consume(queue, prefetch=500)
            bodies = set()
            while len(bodies) < 300:
                d = consumer.get(timeout=30)
                assert d is not None
                bodies.add(d.body.decode())
                d.ack()
        assert bodies == {f"row-{i}" for i in range(300)}
    finally:
        broker.close()


def large_batches_one_reader(spark: Any, tmp_path: Path) -> dict[str, Any]:
    """Batches over local_files.MIN_FILE_BYTES from one reader into Parquet: every id once, the
    queue settled; returns the source's last progress counters."""
    import json

    import pyarrow.parquet as pq

    from ackbridge_spark.push.local_files import MIN_FILE_BYTES

    broker = LocalBroker(tmp_path)
    try:
        queue = broker.new_queue()
        per_batch, n = 60, 240
        body = b"z" * (MIN_FILE_BYTES // per_batch + 2048)
        ids = {f"big-{i}" for i in range(n)}
        with ackbridge.connect(broker.url()) as producer:
            for mid in sorted(ids):
                producer.publish(queue, mid.encode() + body, message_id=mid)
            assert producer.flush(timeout=60)
        table = tmp_path / "table"
        query = (spark.readStream.format("ackbridge").option("url", broker.url()).option("queue", queue)
                 .option("maxRecordsPerBatch", str(per_batch)).load()
                 .select("message_id").writeStream.format("parquet").option("path", str(table))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="0.5 seconds").start())
        try:
            eventually(lambda: broker.counts(queue) == (0, 0), 180, message="drained and settled after commit")
            time.sleep(0.5)
            progress = [p for p in query.recentProgress if p.get("sources")]
        finally:
            query.stop()
        rows = [r for f in sorted(table.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        assert sorted(r["message_id"] for r in rows) == sorted(ids)  # every id once
        latest = progress[-1]["sources"][0]["latestOffset"]
        return dict(json.loads(latest) if isinstance(latest, str) else latest)
    finally:
        broker.close()
