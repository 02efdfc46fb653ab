"""Many sources per query: a list of queues, an MQTT topic filter; each row names
its source; everything settled after commit, asserted on the broker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackbridge_mqtt.sessions import session_topic
from ackbridge_spark.sources import declare_sources

from .helpers import Broker, HarnessBroker, RabbitBroker, eventually, make_spark, rabbit_ready

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-many-sources")
    yield session
    session.stop()


class Rows:
    """A foreachBatch sink in the test process: (message_id, source, topic) of every row."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [(r.message_id, r.source, r.topic) for r in df.select("message_id", "source", "topic").collect()]
        with self.lock:
            self.rows.extend(got)

    def ids(self) -> set[str]:
        with self.lock:
            return {r[0] for r in self.rows}


def _run(spark: Any, url: str, option: str, sources: str, tmp_path: Path, expected: set[str], settled: Any) -> Rows:
    rows = Rows()
    query = (spark.readStream.format("ackbridge").option("url", url).option(option, sources)
             .option("maxRecordsPerBatch", "25").load()
             .writeStream.foreachBatch(rows).option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        eventually(lambda: expected <= rows.ids(), 120, message="every id delivered")
        eventually(settled, 60, message="settled on the broker after commit")
    finally:
        query.stop()
    return rows


@pytest.mark.rabbitmq
def test_two_rabbitmq_queues_in_one_query(spark: Any, tmp_path: Path) -> None:
    why = rabbit_ready()
    if why:
        pytest.fail(why)
    broker = RabbitBroker()
    try:
        first, second = broker.new_queue(), broker.new_queue()
        sent = {first: set(broker.publish(first, 60, prefix="a")), second: set(broker.publish(second, 40, prefix="b"))}
        rows = _run(spark, broker.url(), "queue", f"{first},{second}", tmp_path, sent[first] | sent[second],
                    lambda: broker.counts(first) == (0, 0) and broker.counts(second) == (0, 0))
        for message_id, source, topic in rows.rows:
            assert message_id in sent[source], (message_id, source)
            assert topic == source  # a queue's rows carry the queue as their topic
        assert {r[1] for r in rows.rows} == {first, second}
    finally:
        broker.close()


@pytest.mark.mqtt
def test_mqtt_wildcard_filter_over_three_topics(spark: Any, tmp_path: Path) -> None:
    from ackbridge_mqtt.sessions import derived_session_id
    from tests.conftest import require_port
    from tests.mqtt.harness import MqttHarness

    require_port(1883, "Mosquitto")
    harness = MqttHarness("5")
    broker: Broker = HarnessBroker("mqtt-5", harness)
    try:
        topics = [harness.new_queue(dead_letter=False) for _ in range(3)]
        topic_filter = f"abtest/{harness.run}/+"
        harness.sessions.append(derived_session_id(session_topic(topic_filter)))
        declare_sources(broker.url(), (topic_filter,))  # the filter's session exists before anything is sent
        sent = {t: set(broker.publish(t, 30, prefix=f"t{i}")) for i, t in enumerate(topics)}
        expected = set().union(*sent.values())
        assert len(expected) == 90

        def settled() -> bool:
            return all(broker.counts(t) == (0, 0) for t in topics)

        rows = _run(spark, broker.url(), "topic", topic_filter, tmp_path, expected, settled)
        for message_id, source, topic in rows.rows:
            assert source == topic_filter
            assert message_id in sent[topic], (message_id, topic)  # the real topic, not the filter
        assert {r[2] for r in rows.rows} == set(topics)
    finally:
        broker.close()


@pytest.mark.amqp10
def test_two_amqp10_addresses_in_one_query(spark: Any, tmp_path: Path) -> None:
    from tests.amqp10.harness import Amqp10Harness
    from tests.conftest import require_port

    require_port(5672, "RabbitMQ (AMQP 1.0)")
    broker: Broker = HarnessBroker("amqp10", Amqp10Harness())
    try:
        first, second = broker.new_queue(), broker.new_queue()
        sent = {first: set(broker.publish(first, 50, prefix="x")), second: set(broker.publish(second, 50, prefix="y"))}
        rows = _run(spark, broker.url(), "address", f"{first},{second}", tmp_path, sent[first] | sent[second],
                    lambda: broker.counts(first) == (0, 0) and broker.counts(second) == (0, 0))
        for message_id, source, _topic in rows.rows:
            assert message_id in sent[source], (message_id, source)
        assert {r[1] for r in rows.rows} == {first, second}
    finally:
        broker.close()
