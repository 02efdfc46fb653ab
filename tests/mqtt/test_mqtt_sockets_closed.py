"""A closed MQTT connection leaves no socket open, without waiting for the garbage collector.

paho-mqtt keeps a loopback socket pair per client (its network thread's wake-up) and
closed it only when the client was freed; a stopped client sits in a reference cycle,
so the pair stayed open until a collection, which then warned about both sockets
(found as a ResourceWarning at the teardown of a Spark test). ackbridge_mqtt/wakeup_pair.py.
"""

from __future__ import annotations

import uuid

import pytest

import ackbridge
from ackbridge.testing import eventually
from tests.conftest import require_port
from tests.sockets import open_sockets

URL = "mqtt://127.0.0.1:1883/"


@pytest.mark.mqtt
@pytest.mark.usefixtures("no_collection")
def test_publisher_and_consumer_links_close_every_socket() -> None:
    require_port(1883, "Mosquitto")
    topic = f"abtest/sockets/{uuid.uuid4().hex[:8]}"
    before = open_sockets()
    conn = ackbridge.connect(URL)
    consumer = conn.consume(topic)
    assert conn.publish(topic, b"x", message_id="m1").result(10).confirmed
    delivery = consumer.get(timeout=10)
    assert delivery is not None
    delivery.ack()
    assert open_sockets() > before  # the check sees this connection's sockets at all
    conn.close()
    eventually(lambda: open_sockets() == before, 10, message="every socket of the connection closed")
