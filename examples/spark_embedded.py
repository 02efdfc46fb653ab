"""Broker (embedded local://) -> Spark -> Parquet, acking each batch after Spark committed it.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/spark_embedded.py /tmp/ackbridge-example
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

import ackbridge
import ackbridge_spark

work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ackbridge-example"
url = f"local://{os.path.abspath(work)}/broker.db"

with ackbridge.connect(url) as conn:
    conn.declare_queue("orders")
    for i in range(1000):
        conn.publish("orders", f"order {i}".encode(), message_id=f"order-{i}")
    conn.flush()

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
ackbridge_spark.register(spark)
query = (spark.readStream.format("ackbridge")
         .option("url", url).option("queue", "orders").option("maxRecordsPerBatch", "250")
         .load()
         .writeStream.format("parquet").option("path", f"{work}/orders")
         .option("checkpointLocation", f"{work}/checkpoint")
         .trigger(availableNow=True).start())
query.awaitTermination()
print(spark.read.parquet(f"{work}/orders").count(), "rows written; the queue is drained and acked")
spark.stop()
