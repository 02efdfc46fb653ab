"""The exactly-once recipe run as its own driver process (the tests SIGKILL it).

usage: job_exactly_once.py URL QUEUE CHECKPOINT TABLE BLOCK_ID|- MARKER BATCH [TRIGGER_S]

source -> dropDuplicatesWithinWatermark(message_id) over the ingest time ->
Spark's Parquet file sink. With BLOCK_ID, the task that meets that message id
touches MARKER and waits (to be killed before its batch commits). Without it
the query runs with a processing-time trigger of TRIGGER_S seconds (the tests
kill it between a batch's commit and its ack) -- or, with TRIGGER_S = 0, with
Trigger.AvailableNow (a restart that drains the queue and ends).
ACKBRIDGE_JOB_DEDUPE=0 drops the dedupe step (the stream source's cells).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: How long after its first copy a redelivered copy is still recognised (the
#: recipe's window: longer than the longest driver outage between a commit and its ack).
DEDUPE_WINDOW = "10 minutes"


def main() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    import ackbridge_spark

    url, queue, checkpoint, table, block_id, marker, batch = sys.argv[1:8]
    trigger_s = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    spark = (SparkSession.builder.master("local[2]").appName("ackbridge-exactly-once-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ackbridge_spark.register(spark)

    def block(message_id: str) -> str:
        if message_id == block_id:
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            while True:
                time.sleep(1)  # a task stuck before its batch commits; the test SIGKILLs us here
        return message_id

    # ACKBRIDGE_JOB_OPTIONS adds options or, with a JSON null, removes one of these.
    options = {"maxRecordsPerBatch": batch, "availableNowIdleMs": "2000",
               **json.loads(os.environ.get("ACKBRIDGE_JOB_OPTIONS") or "{}")}
    reader = spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    rows = reader.load()
    if block_id != "-":
        rows = rows.withColumn("message_id", F.udf(block, StringType())("message_id"))
    if os.environ.get("ACKBRIDGE_JOB_DEDUPE", "1") == "0":
        # A source with deterministic replay (offset logs) needs no dedupe step:
        # the job then shows that the source and the file sink alone are exactly-once.
        deduped = rows.select("message_id", "source", "redelivered")
    else:
        deduped = (rows.withColumn("seen_at", F.current_timestamp())
                   .withWatermark("seen_at", DEDUPE_WINDOW)
                   .dropDuplicatesWithinWatermark(["message_id"])
                   .select("message_id", "source", "redelivered"))
    writer = (deduped.writeStream.format("parquet").option("path", table)
              .option("checkpointLocation", checkpoint).outputMode("append"))
    if trigger_s > 0 or block_id != "-":
        writer = writer.trigger(processingTime=f"{max(trigger_s, 0.5)} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    writer.start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
