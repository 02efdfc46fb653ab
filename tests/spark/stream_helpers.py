"""What the executor-side source's tests share: unique streams on the shared RabbitMQ
(deleted afterwards), ids published into them, what the broker holds, and a query
over them checked in its Parquet table."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from ackbridge.transport.offset_log import open_offset_log

from .helpers import eventually

STREAM_URL = "rabbitmq-stream://guest:guest@127.0.0.1:5552/"


async def _producer() -> Any:
    from rstream import Producer

    producer = Producer("127.0.0.1", 5552, username="guest", password="guest")
    await producer.start()
    return producer


async def publish_async(stream: str, ids: list[str], chunk: int, body_size: int = 0) -> None:
    """Each id as message id (and body, or *body_size* bytes), *chunk* per batch, all confirmed."""
    from rstream import AMQPMessage, ConfirmationStatus, Properties

    producer = await _producer()
    done = asyncio.Event()
    confirmed = [0]
    refused: list[int] = []

    def on_confirm(status: ConfirmationStatus) -> None:
        if not status.is_confirmed:
            refused.append(status.message_id)
        confirmed[0] += 1
        if confirmed[0] == len(ids):
            done.set()

    try:
        for i in range(0, len(ids), chunk):
            batch = [AMQPMessage(body=(b"x" * body_size) if body_size else mid.encode(),
                                 properties=Properties(message_id=mid)) for mid in ids[i:i + chunk]]
            await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
        if ids:
            await asyncio.wait_for(done.wait(), 300)
        assert not refused, f"{len(refused)} publishes refused"
    finally:
        await producer.close()


class Streams:
    """Streams made for one test (unique names, deleted by close()), filled with rstream
    directly, not through the plugin: the broker's own view. What the broker stores is
    read through the OffsetLog contract."""

    def __init__(self) -> None:
        from tests.conftest import require_port

        require_port(5552, "RabbitMQ's stream plugin (rabbitmq-plugins enable rabbitmq_stream)")
        self.reference = f"spark-test-{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []

    def new(self, prefix: str = "spark-stream") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"

        async def create() -> None:
            producer = await _producer()
            try:
                await producer.create_stream(name)
            finally:
                await producer.close()

        self.created.append(name)
        asyncio.run(create())
        return name

    def publish(self, stream: str, n: int, *, prefix: str, chunk: int = 100) -> list[str]:
        """Publish ids ``prefix-0`` .. ``prefix-(n-1)`` (message id = body); return them once confirmed."""
        ids = [f"{prefix}-{i}" for i in range(n)]
        asyncio.run(publish_async(stream, ids, chunk))
        return ids

    def stored(self, stream: str) -> int | None:
        """The next offset the broker holds for this test's reference (through the OffsetLog contract)."""
        with open_offset_log(STREAM_URL) as log:
            return log.stored_offset(stream, self.reference)

    def end(self, stream: str) -> int:
        with open_offset_log(STREAM_URL) as log:
            return log.bounds(stream)[1]

    def close(self) -> None:
        async def delete() -> None:
            producer = await _producer()
            try:
                for name in self.created:
                    await producer.delete_stream(name, missing_ok=True)
            finally:
                await producer.close()

        asyncio.run(delete())


def committed_rows(table: Path) -> list[dict[str, Any]]:
    """Rows of the files Spark's file sink committed (its _spark_metadata log), not stray ones."""
    from urllib.parse import urlsplit

    import pyarrow.parquet as pq

    log = table / "_spark_metadata"
    paths: set[str] = set()
    for entry in sorted(log.iterdir()) if log.exists() else []:
        if entry.name.isdigit() or entry.name.endswith(".compact"):
            for line in entry.read_text().splitlines()[1:]:
                paths.add(urlsplit(json.loads(line)["path"]).path)
    return [r for p in sorted(paths) for r in pq.read_table(p).to_pylist()]


def run_query(spark: Any, streams: Streams, names: list[str], tmp: Path, expected: int,
              **options: str) -> tuple[list[dict[str, Any]], Any]:
    """Stream *names* into Parquet until *expected* rows are committed and every stream's
    end is stored on the broker; then the query must stay idle (no batch out of nothing)."""
    table = tmp / "table"
    reader = (spark.readStream.format("ackbridge").option("url", STREAM_URL).option("subscribe", ",".join(names))
              .option("consumerReference", streams.reference))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().select("message_id", "source", "topic", "offset", "broker", "redelivered")
             .writeStream.format("parquet").option("path", str(table))
             .option("checkpointLocation", str(tmp / "ck")).trigger(processingTime="0.5 seconds").start())
    try:
        ends = {name: streams.end(name) for name in names}
        eventually(lambda: query.exception() is not None or len(committed_rows(table)) >= expected, 240,
                   message="every row committed")
        assert query.exception() is None, query.exception()
        eventually(lambda: all(streams.stored(n) == e for n, e in ends.items()), 60,
                   message="the committed offsets stored on the broker")
        batches = query.lastProgress["batchId"] if query.lastProgress else -1
        time.sleep(3.0)  # six triggers: storing offsets must not look like new data
        assert (query.lastProgress["batchId"] if query.lastProgress else -1) == batches
        assert {n: streams.end(n) for n in names} == ends
    finally:
        query.stop()
    return committed_rows(table), query


def once_each(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Ids seen more than once (must be empty)."""
    return {k: v for k, v in Counter(r["message_id"] for r in rows).items() if v > 1}


def two_streams_into_parquet(spark: Any, tmp: Path) -> None:
    """Two streams as two partitions, read by the executors, checked in the table and on the broker."""
    streams = Streams()
    try:
        a, b = streams.new(), streams.new()
        sent = set(streams.publish(a, 250, prefix="a")) | set(streams.publish(b, 150, prefix="b"))
        rows, _ = run_query(spark, streams, [a, b], tmp, 400, maxRecordsPerBatch="150", minPartitions="4")
        assert once_each(rows) == {} and {r["message_id"] for r in rows} == sent
        assert streams.stored(a) == streams.end(a) and streams.stored(b) == streams.end(b)
    finally:
        streams.close()
