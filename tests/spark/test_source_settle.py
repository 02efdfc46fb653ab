"""The source's settlement driven the way Spark's runner drives it, without a Spark session.

A committed batch is acked as a whole (one ``ack_through`` when the batch is the
consumer's undecided prefix): what must hold is that exactly the committed
deliveries leave the broker, never the next planned-but-uncommitted batch.
"""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import Broker, eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def _reader(broker: Broker, queue: str, **options: str) -> Any:
    from ackbridge_spark.options import parse
    from ackbridge_spark.push.source import AckbridgeStreamReader

    return AckbridgeStreamReader(parse({"url": broker.url(), "queue": queue, **options}))


def _plan(reader: Any, start: dict[str, Any], limit: Any, rows: int) -> dict[str, Any]:
    """latestOffset until a batch of *rows* is offered (deliveries arrive asynchronously)."""
    found: list[dict[str, Any]] = []

    def offered() -> bool:
        end = reader.latestOffset(start, limit)
        found[:] = [end]
        return bool(end["seq"] - start["seq"] >= rows)

    eventually(offered, timeout=30)
    return found[0]


def test_commit_settles_exactly_the_committed_batch(broker: Broker) -> None:
    queue = broker.new_queue()
    ids = broker.publish(queue, 30)
    assert len(ids) == 30
    reader = _reader(broker, queue, maxRecordsPerBatch="10", prefetch="30")
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        end1 = _plan(reader, start, limit, 10)
        assert end1["seq"] == 10
        assert len(reader.partitions(start, end1)) == 1
        eventually(lambda: broker.counts(queue) == (0, 30), timeout=30)

        # Spark calls latestOffset(start=end_N) only after commits/N is on disk:
        # batch 1 is settled there, batch 2 is planned and must stay unsettled.
        end2 = _plan(reader, end1, limit, 10)
        assert end2["seq"] == 20
        reader.partitions(end1, end2)
        eventually(lambda: broker.counts(queue) == (0, 20), timeout=30)
        assert reader.stats["settled"] == 10

        reader.commit(end2)
        eventually(lambda: broker.counts(queue) == (0, 10), timeout=30)
        assert reader.stats["settled"] == 20
        assert reader.stats["stale_refused"] == 0
    finally:
        reader.stop()
    # The last batch was never committed: closing returns it to the broker.
    eventually(lambda: broker.counts(queue) == (10, 0), timeout=30)



def test_labels_carry_the_batch_that_planned_them(broker: Broker) -> None:
    """Deliveries numbered by one latestOffset call but planned by a later one (here a
    ReadMinRows that was not met) get the later call's batch id in their label."""
    from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

    import ackbridge

    queue = broker.new_queue()
    with ackbridge.connect(broker.url()) as producer:
        def publish(first: int, count: int) -> list[Any]:
            confirms = [producer.publish(queue, b"x", message_id=f"lab-{i}", requested_acks=["spark-committed"],
                                         ack_timeout=60) for i in range(first, first + count)]
            assert producer.flush(timeout=30)
            return confirms

        first = publish(0, 3)
        reader = _reader(broker, queue, maxRecordsPerBatch="10")
        try:
            start = reader.initialOffset()
            eventually(lambda: reader.latestOffset(start, ReadMinRows(5)) == start
                       and reader.reportLatestOffset()["unsettled"] == 3, timeout=30)
            end1 = reader.latestOffset(start, ReadMaxRows(10))
            assert end1 == {"seq": 3, "batch": 0}
            reader.partitions(start, end1)
            reader.commit(end1)
            second = publish(3, 2)
            end2 = _plan(reader, end1, ReadMaxRows(10), 2)
            assert end2 == {"seq": 5, "batch": 1}
            reader.partitions(end1, end2)
            reader.commit(end2)
            results = [c.wait_acks(timeout=60) for c in first + second]
        finally:
            reader.stop()
    batches = [r.acks["spark-committed"].payload["batch_id"] for r in results]
    offsets = [r.acks["spark-committed"].payload["offset"] for r in results]
    assert batches == [0, 0, 0, 1, 1]
    assert offsets == [1, 2, 3, 4, 5]
    eventually(lambda: broker.counts(queue) == (0, 0), timeout=30)

def test_record_batch_rows_follow_offsets(broker: Broker) -> None:
    from ackbridge_spark.schema import ARROW_SCHEMA, from_ipc

    queue = broker.new_queue()
    broker.publish(queue, 5, prefix="r")
    reader = _reader(broker, queue, maxRecordsPerBatch="5")
    try:
        start = reader.initialOffset()
        end = _plan(reader, start, reader.getDefaultReadLimit(), 5)
        (part,) = reader.partitions(start, end)
        (batch,) = from_ipc(part.ipc)
        assert batch.schema == ARROW_SCHEMA
        assert batch.column("offset").to_pylist() == [1, 2, 3, 4, 5]
        assert batch.column("message_id").to_pylist() == [f"r-{i}" for i in range(5)]
        assert batch.column("body").to_pylist() == [f"r-{i}".encode() for i in range(5)]
        assert batch.column("headers").to_pylist() == [[]] * 5
        assert len(set(batch.column("broker").to_pylist())) == 1
    finally:
        reader.stop()


@pytest.mark.parametrize(("max_rows", "expected"), [("10", 100), ("1000", 2000), ("30000", 60000),
                                                     ("50000", 65535)])
def test_default_prefetch_twice_the_batch_within_what_brokers_carry(max_rows: str, expected: int) -> None:
    from ackbridge_spark.options import parse

    opts = parse({"url": "local:///tmp/x.db", "queue": "q", "maxRecordsPerBatch": max_rows})
    assert opts.prefetch == expected
    explicit = parse({"url": "local:///tmp/x.db", "queue": "q", "maxRecordsPerBatch": max_rows, "prefetch": "70000"})
    assert explicit.prefetch == 70000
