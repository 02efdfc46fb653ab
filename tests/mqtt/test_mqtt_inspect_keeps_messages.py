"""Looking at an MQTT queue loses nothing it holds.

MQTT tells no queue depth, so ``inspect_queue`` (and ``declare_queue`` of a queue that
exists) connects as the queue's persistent session for a moment. Mosquitto hands that
connection what the session holds; the short link PUBACKed it on receipt, so each look
lost some of the queue (found by the dead-letter header test: 26 of 50 dead letters gone
after pipelines were started on their queue). Now the look acknowledges nothing, and what
it was handed comes back to the queue's consumer.
"""

from __future__ import annotations

import uuid

import pytest

import ackbridge
from tests.conftest import require_port

URL = "mqtt://127.0.0.1:1883/?protocol=5&expected_backlog=100"


@pytest.mark.mqtt
def test_inspect_and_declare_keep_every_message_of_the_queue() -> None:
    require_port(1883, "Mosquitto")
    topic = f"abtest/inspect/{uuid.uuid4().hex[:8]}"
    names = [f"m-{i:02d}" for i in range(50)]
    with ackbridge.connect(URL) as conn:
        conn.declare_queue(topic)
        try:
            for name in names:
                assert conn.publish(topic, name.encode(), message_id=name).result(10).confirmed
            for _ in range(3):
                assert conn.inspect_queue(topic).name == topic
                conn.declare_queue(topic)
            consumer = conn.consume(topic, prefetch=100)
            got: set[str] = set()
            while (delivery := consumer.get(timeout=3)) is not None:
                got.add(delivery.message_id or "")
                delivery.ack()
            consumer.close()
            assert sorted(got) == names, f"lost: {sorted(set(names) - got)}"
        finally:
            conn.delete_queue(topic)
