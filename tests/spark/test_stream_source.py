"""The executor-side source against RabbitMQ streams (port 5552), through Spark: every id
arrives once, the committed offsets are what the broker stores afterwards, minPartitions
cuts a batch into tasks, and bad options fail at load(). Planning itself is unit-tested
on a fake log in test_stream_planning.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import make_spark
from .stream_helpers import STREAM_URL, Streams, committed_rows, once_each, run_query

pytestmark = [pytest.mark.spark, pytest.mark.rabbitmq_streams, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-stream-source")
    yield session
    session.stop()


@pytest.fixture
def streams() -> Iterator[Streams]:
    made = Streams()
    yield made
    made.close()


def test_two_streams_every_id_once_and_offsets_stored_on_the_broker(spark: Any, streams: Streams,
                                                                      tmp_path: Path) -> None:
    a, b = streams.new(), streams.new()
    sent = {a: set(streams.publish(a, 300, prefix="a")), b: set(streams.publish(b, 170, prefix="b", chunk=50))}
    rows, query = run_query(spark, streams, [a, b], tmp_path, 470, maxRecordsPerBatch="120", minPartitions="3")
    assert once_each(rows) == {}
    assert {r["message_id"] for r in rows} == sent[a] | sent[b]
    for r in rows:
        # The row names its stream (source and partition: on 3.10 a stream is its own
        # partition) and its broker offset; a log never redelivers.
        assert r["message_id"] in sent[r["source"]] and r["topic"] == r["source"]
        assert r["broker"] == "rabbitmq-streams" and r["redelivered"] is False
    assert sorted(r["offset"] for r in rows if r["source"] == a) == list(range(300))
    # Capped batches: 470 rows at most 120 per batch take at least 4 batches.
    assert sum(1 for p in query.recentProgress if p["numInputRows"]) >= 4
    assert max(p["numInputRows"] for p in query.recentProgress) <= 120
    assert streams.stored(a) == 300 and streams.stored(b) == 170


def test_restart_resumes_from_the_checkpoint_and_a_new_query_from_the_broker(spark: Any, streams: Streams,
                                                                             tmp_path: Path) -> None:
    a = streams.new()
    first = set(streams.publish(a, 100, prefix="one"))
    rows, _ = run_query(spark, streams, [a], tmp_path, 100)
    assert {r["message_id"] for r in rows} == first
    second = set(streams.publish(a, 60, prefix="two"))
    rows, _ = run_query(spark, streams, [a], tmp_path, 160)  # same checkpoint
    assert once_each(rows) == {} and {r["message_id"] for r in rows} == first | second
    # A new checkpoint with the same consumerReference starts where the broker says.
    third = set(streams.publish(a, 40, prefix="three"))
    rows, _ = run_query(spark, streams, [a], tmp_path / "fresh", 40)
    assert {r["message_id"] for r in rows} == third
    # Offsets are not counts: each stored offset is a tracking record with an offset of its own.
    assert streams.stored(a) == streams.end(a) > 200


def test_min_partitions_cuts_one_stream_into_tasks(spark: Any, streams: Streams, tmp_path: Path) -> None:
    a = streams.new()
    sent = set(streams.publish(a, 400, prefix="m"))
    query = (spark.readStream.format("ackbridge").option("url", STREAM_URL).option("subscribe", a)
             .option("consumerReference", streams.reference).option("minPartitions", "4").load()
             .select("message_id", "offset").writeStream.format("parquet").option("path", str(tmp_path / "t"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None
    rows = committed_rows(tmp_path / "t")
    assert {r["message_id"] for r in rows} == sent and once_each(rows) == {}
    # One batch, four tasks, each writing its own file with a quarter of the offsets.
    files = sorted((tmp_path / "t").glob("*.parquet"))
    assert len(files) == 4
    import pyarrow.parquet as pq

    spans = sorted((min(o), max(o)) for o in (pq.read_table(f).column("offset").to_pylist() for f in files))
    assert spans == [(0, 99), (100, 199), (200, 299), (300, 399)]


@pytest.mark.parametrize(("given", "expected"), [
    ({"minPartiton": "3"}, "did you mean 'minPartitions'"),
    ({"parallelism": "2"}, "'parallelism' does not apply to the stream source"),
    ({"consumerReference": ""}, "needs option 'consumerReference'"),
    ({"startingOffsets": "soonest"}, "'startingOffsets' must be"),
    ({"heartbeat": "soon"}, "'heartbeat'='soon' is not a valid float"),
])
def test_bad_options_fail_at_load(spark: Any, given: dict[str, str], expected: str) -> None:
    reader = (spark.readStream.format("ackbridge").option("url", STREAM_URL).option("subscribe", "s")
              .option("consumerReference", "r"))
    for key, value in given.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=expected) as info:
        reader.load()
    assert "guest:guest" not in str(info.value)


def test_missing_stream_fails_the_query_with_its_name(spark: Any, streams: Streams, tmp_path: Path) -> None:
    query = (spark.readStream.format("ackbridge").option("url", STREAM_URL)
             .option("subscribe", "spark-no-such-stream-7f3a").option("consumerReference", streams.reference).load()
             .writeStream.format("parquet").option("path", str(tmp_path / "t"))
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    with pytest.raises(Exception, match="spark-no-such-stream-7f3a"):
        query.awaitTermination(120)
