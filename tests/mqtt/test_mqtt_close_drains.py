"""close() sends every settlement decided before it, however long a run of copies takes.

An MQTT reject (or requeue) is a QoS 1 copy published first; the original is
PUBACKed only once the broker has the copy, one copy at a time. Closing used to
wait at most 5 s for that queue and then disconnect, so a run of rejects on a
slow link (or a busy broker: the suite's observability counts under load) left
originals unPUBACKed: rejected messages came back to the next consumer. close()
now waits while the queue keeps moving. Here a proxy adds 50 ms to every packet
each way, so 80 rejects need about 8 s of round trips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.proxy import FaultProxy
from ackbridge_mqtt.sessions import derived_session_id
from tests.mqtt.harness import MqttHarness, peek_session

pytestmark = pytest.mark.mqtt
N = 80


@pytest.fixture
def harness() -> Iterator[MqttHarness]:
    made = MqttHarness("5")
    yield made
    made.cleanup()


def test_close_after_a_run_of_rejects_on_a_slow_link_leaves_none_of_them_behind(harness: MqttHarness) -> None:
    queue = harness.new_queue()
    bodies = [f"r-{i}".encode() for i in range(N)]
    with ackbridge.connect(harness.url(), protocol="5") as conn:
        confirms = [conn.publish(queue, body) for body in bodies]
        assert all(c.result(timeout=30).status is ConfirmStatus.CONFIRMED for c in confirms)
    with FaultProxy(harness.tap.port) as proxy:
        with ackbridge.connect(f"mqtt://127.0.0.1:{proxy.port}", protocol="5") as conn:
            consumer = conn.consume(queue, prefetch=N)
            taken = [consumer.get(timeout=30) for _ in range(N)]
            proxy.set_latency(0.05)  # from the first reject on, every packet waits
            for delivery in taken:
                assert delivery is not None
                delivery.reject()
            consumer.close()
    left = [bytes(m.payload) for m in peek_session(derived_session_id(queue), quiet=0.5)]
    assert left == [], f"{len(left)} rejected message(s) still held by the source session"
    assert sorted(harness.dead_lettered(queue)) == sorted(bodies)
