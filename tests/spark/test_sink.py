"""The sink: confirms before a task returns, refusals fail the task, deterministic ids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge

from .helpers import Broker, eventually, make_spark

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-sink-tests")
    yield session
    session.stop()


def drain_ids(broker: Broker, queue: str, expected: int) -> list[str]:
    ids: list[str] = []
    with ackbridge.connect(broker.url()) as conn, conn.consume(queue, prefetch=500) as consumer:
        while len(ids) < expected:
            delivery = consumer.get(timeout=10)
            if delivery is None:
                break
            ids.append(delivery.message_id or "")
            delivery.ack()
        consumer.flush()
    return ids


def test_batch_sink_publishes_with_deterministic_ids(spark: Any, broker: Broker) -> None:
    queue = broker.new_queue()
    df = spark.createDataFrame([(f"row {i}".encode(),) for i in range(40)], "body binary").repartition(2)
    (df.write.format("ackbridge").option("url", broker.url()).option("queue", queue)
     .option("messageIdPrefix", "load1").mode("append").save())
    eventually(lambda: broker.counts(queue) == (40, 0), 30, message="40 confirmed messages on the queue")
    ids = drain_ids(broker, queue, 40)
    assert len(set(ids)) == 40
    assert all(i.startswith("load1-0-") for i in ids)
    assert {i.split("-")[2] for i in ids} == {"0", "1"}


def test_refused_publish_fails_the_task(spark: Any, broker: Broker) -> None:
    queue, options, bodies = broker.refusal()
    df = spark.createDataFrame([(b,) for b in bodies], "body binary").coalesce(1)
    writer = df.write.format("ackbridge").option("url", broker.url()).option("queue", queue)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match="not confirmed") as failure:
        writer.mode("append").save()
    assert "refused" in str(failure.value)
    # The broker holds exactly the confirmed rows; the refused one is nowhere.
    ready, unacked = broker.counts(queue)
    assert (ready, unacked) == (9, 0)


def test_stream_to_stream_pipeline(spark: Any, broker: Broker, tmp_path: Path) -> None:
    source, target = broker.new_queue(), broker.new_queue()
    broker.publish(source, 30)
    query = (spark.readStream.format("ackbridge").option("url", broker.url()).option("queue", source)
             .option("maxRecordsPerBatch", "10").option("availableNowIdleMs", "300").load()
             .select("body", "headers", "correlation_id")
             .writeStream.format("ackbridge").option("url", broker.url()).option("queue", target)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    eventually(lambda: broker.counts(target) == (30, 0), 30, message="30 republished")
    eventually(lambda: broker.counts(source) == (0, 0), 30, message="source settled")
    ids = drain_ids(broker, target, 30)
    assert len(set(ids)) == 30
    assert all(i.startswith(str(query.id)) for i in ids)
