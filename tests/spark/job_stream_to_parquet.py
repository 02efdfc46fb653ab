"""A streaming job run as its own driver process (the SIGKILL test kills it).

usage: job_stream_to_parquet.py URL QUEUE CHECKPOINT OUT_DIR BLOCK_AT_BATCH|-1 MARKER [BATCH_SIZE]
Every batch is appended as a new Parquet file under OUT_DIR (replays show up
as duplicates). When BLOCK_AT_BATCH >= 0, that batch writes its rows, touches
MARKER and then waits forever (until killed) before returning.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    import ackbridge_spark

    url, queue, checkpoint, out, block_at, marker = sys.argv[1:7]
    batch_size = sys.argv[7] if len(sys.argv) > 7 else "25"
    block = int(block_at)
    spark = (SparkSession.builder.master("local[2]").appName("ackbridge-kill-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ackbridge_spark.register(spark)

    def sink(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        # MQTT 3.1.1 carries no message id: the tests' bodies are the ids.
        rows = df.selectExpr("coalesce(message_id, cast(body as string)) as message_id", "redelivered").collect()
        table = pa.table({"message_id": [r["message_id"] for r in rows],
                          "redelivered": [r["redelivered"] for r in rows]})
        pq.write_table(table, os.path.join(out, f"batch-{batch_id:05d}-{uuid.uuid4().hex[:8]}.parquet"))
        if batch_id == block:
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            while True:
                time.sleep(1)  # stands for a long write; the test SIGKILLs us here

    df = (spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
          .option("maxRecordsPerBatch", batch_size).option("availableNowIdleMs", "1500").load())
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    query = query.trigger(availableNow=True) if block < 0 else query
    running = query.start()
    running.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
