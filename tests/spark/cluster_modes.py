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
