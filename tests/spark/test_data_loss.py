"""failOnDataLoss (Spark's sense) wired to ackbridge's loss detection, and the
reconnect counter counting every new connection generation.

Losses here are the broker's own: a RabbitMQ queue capped with x-max-length
drops its oldest messages (drop-head), and Mosquitto drops what an offline
session cannot queue past max_queued_messages (1000 by default)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge

from .helpers import RABBIT_URL, HarnessBroker, RabbitBroker, eventually, make_spark

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-data-loss")
    yield session
    session.stop()


class Ids:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [r.message_id for r in df.select("message_id").collect()]
        with self.lock:
            self.ids.extend(got)

    def unique(self) -> set[str]:
        with self.lock:
            return set(self.ids)


def stats(query: Any) -> dict[str, Any]:
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return {}
    latest = progress["sources"][0].get("latestOffset")
    return json.loads(latest) if isinstance(latest, str) else dict(latest or {})


def capped_queue(broker: RabbitBroker, length: int) -> str:
    from tests.rabbitmq.harness import mgmt

    name = f"spark-loss-{uuid.uuid4().hex[:8]}"
    broker._created.append(name)  # deleted by broker.close()
    mgmt("PUT", f"/queues/%2F/{name}", {"durable": True, "auto_delete": False,
                                       "arguments": {"x-max-length": length}})
    return name


def publish_sequenced(url: str, destination: str, start: int, stop: int, publisher: Any = None) -> Any:
    """Publish ids s-<start>..s-<stop-1> with producer sequence numbers; returns the publisher."""
    conn = ackbridge.connect(url) if publisher is None else None
    pub = publisher or conn.publisher(sequence=True, producer_id=f"p-{uuid.uuid4().hex[:6]}")  # type: ignore[union-attr]
    confirms = [pub.publish(destination, f"s-{i}".encode(), message_id=f"s-{i}") for i in range(start, stop)]
    pub.flush(60)
    assert all(c.result().confirmed for c in confirms)
    return pub


def _stream(spark: Any, url: str, queue: str, tmp_path: Path, sink: Any, **options: str) -> Any:
    reader = spark.readStream.format("ackbridge").option("url", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")).start()


@pytest.mark.rabbitmq
def test_fail_on_data_loss_stops_the_query(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    queue = capped_queue(rabbit, 10)
    publish_sequenced(RABBIT_URL, queue, 1, 31)  # the broker keeps numbers 21..30
    seen = Ids()
    query = _stream(spark, RABBIT_URL, queue, tmp_path, seen, failOnDataLoss="true")
    with pytest.raises(Exception, match=r"data loss on source .* 20 message\(s\) .*sequence numbers 1\.\.20\)") as info:
        query.awaitTermination(120)
    assert "failOnDataLoss=true" in str(info.value)
    assert seen.ids == []  # nothing planned, nothing settled: the broker still holds all ten
    eventually(lambda: rabbit.counts(queue) == (10, 0), 60, message="the ten kept messages back on the queue")


@pytest.mark.rabbitmq
def test_data_loss_is_counted_by_default(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    queue = capped_queue(rabbit, 10)
    publish_sequenced(RABBIT_URL, queue, 1, 31)
    seen = Ids()
    query = _stream(spark, RABBIT_URL, queue, tmp_path, seen)
    try:
        eventually(lambda: seen.unique() == {f"s-{i}" for i in range(21, 31)}, 120, message="kept ones delivered")
        eventually(lambda: stats(query).get("data_loss") == 20, 60, message="20 counted lost")
        eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="settled")
    finally:
        query.stop()


@pytest.mark.rabbitmq
def test_no_false_loss_after_a_restart_from_the_checkpoint(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    """The highest number per producer travels in the planned offsets: a restarted
    runner does not take what its predecessor consumed for a loss."""
    queue = rabbit.new_queue()
    with ackbridge.connect(RABBIT_URL) as conn:
        pub = conn.publisher(sequence=True, producer_id=f"p-{uuid.uuid4().hex[:6]}")
        publish_sequenced(RABBIT_URL, queue, 0, 40, pub)
        first = Ids()
        query = _stream(spark, RABBIT_URL, queue, tmp_path, first, failOnDataLoss="true", maxRecordsPerBatch="15")
        try:
            eventually(lambda: len(first.unique()) == 40, 120, message="first run delivered")
            eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="first run settled")
        finally:
            query.stop()
        publish_sequenced(RABBIT_URL, queue, 40, 80, pub)
    second = Ids()
    query = _stream(spark, RABBIT_URL, queue, tmp_path, second, failOnDataLoss="true", maxRecordsPerBatch="15")
    try:
        eventually(lambda: {f"s-{i}" for i in range(40, 80)} <= second.unique(), 120, message="second run delivered")
        assert query.exception() is None
        assert stats(query).get("data_loss", 0) == 0
    finally:
        query.stop()


@pytest.mark.mqtt
def test_offline_mqtt_session_overflow_fails_the_query(spark: Any, tmp_path: Path) -> None:
    """3,000 messages to an offline session with Mosquitto's default limits: it
    keeps about 1,000 and drops the rest silently; the next message shows the gap."""
    from tests.conftest import require_port
    from tests.mqtt.harness import MqttHarness

    require_port(1883, "Mosquitto")
    harness = MqttHarness("5")
    broker = HarnessBroker("mqtt-5", harness)
    try:
        topic = harness.new_queue(dead_letter=False)
        url = broker.url()
        with ackbridge.connect(url) as conn:
            pub = conn.publisher(sequence=True, producer_id=f"p-{uuid.uuid4().hex[:6]}")
            publish_sequenced(url, topic, 0, 3000, pub)
            seen = Ids()
            query = _stream(spark, url, topic, tmp_path, seen, failOnDataLoss="true", maxRecordsPerBatch="500")
            eventually(lambda: len(seen.unique()) >= 900, 120, message="the kept messages flow")
            publish_sequenced(url, topic, 3000, 3001, pub)
            with pytest.raises(Exception, match=r"data loss on source .* never arrived .*failOnDataLoss=true"):
                query.awaitTermination(120)
        kept = len(seen.unique())
        assert kept < 3000
    finally:
        broker.close()


@pytest.mark.rabbitmq
def test_reconnects_count_connections_the_broker_closed(spark: Any, rabbit: RabbitBroker, tmp_path: Path) -> None:
    queue = rabbit.new_queue()
    url = rabbit.cut_url()  # through a proxy: only this query's connection is closed
    seen = Ids()
    query = _stream(spark, url, queue, tmp_path, seen)
    try:
        for round_ in range(3):
            sent = set(rabbit.publish(queue, 20, prefix=f"r{round_}"))
            eventually(lambda sent=sent: sent <= seen.unique(), 120, message=f"round {round_} delivered")
            eventually(lambda: rabbit.counts(queue) == (0, 0), 60, message="settled")
            # lastProgress is that of the batch which planned this round (idle triggers report none):
            # planned after the reconnect, so it counts the connection the broker closed before it.
            eventually(lambda r=round_: stats(query).get("reconnects") == r, 30,
                       message=f"{round_} new connection generation(s) counted")
            if round_ < 2:
                rabbit.sever_from_outside()  # rabbitmqctl close_connection: not the source's own doing
    finally:
        query.stop()
