"""RabbitMQ -> Spark -> Parquet with settle-after-commit, and Spark -> RabbitMQ with confirms.

Needs the ackbridge-rabbitmq plugin (amqp://) and a broker on 127.0.0.1:5672.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/spark_rabbitmq.py /tmp/ackbridge-rmq
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

import ackbridge_spark

work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ackbridge-rmq"
# Keep the broker URL in the option named "url": Spark redacts it in explain() and the UI.
url = "amqp://guest:guest@127.0.0.1:5672/"

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
ackbridge_spark.register(spark)

# A batch write: every task waits for all its publisher confirms, or fails.
(spark.range(1000).selectExpr("cast(concat('event ', id) as binary) as body")
 .write.format("ackbridge").option("url", url).option("queue", "events").mode("append").save())

query = (spark.readStream.format("ackbridge")
         .option("url", url).option("queue", "events").option("maxRecordsPerBatch", "500")
         .load()
         .writeStream.format("parquet").option("path", f"{work}/events")
         .option("checkpointLocation", f"{work}/checkpoint")
         .trigger(availableNow=True).start())
query.awaitTermination()
print(spark.read.parquet(f"{work}/events").count(), "rows written")
spark.stop()
