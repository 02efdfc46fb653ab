"""The shared connection options on MQTT (heartbeat, reconnect, TLS files), the
prefetch capability, and the sever fault."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

import ackbridge
from ackbridge.errors import InvalidOptionError, StaleDeliveryError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.faults import faults, transport_of
from ackbridge.testing.harness import eventually
from ackbridge_mqtt import limits
from ackbridge_mqtt.capabilities import CAPABILITIES_V5, CAPABILITIES_V311, MAX_RECEIVE_MAXIMUM
from ackbridge_mqtt.options import MAX_KEEPALIVE, keepalive_seconds
from ackbridge_mqtt.sessions import derived_session_id
from tests.mqtt.harness import MqttHarness, delete_session

pytestmark = pytest.mark.mqtt
URL = "mqtt://127.0.0.1:1883"


@pytest.fixture(params=["5", "3.1.1"])
def harness(request: pytest.FixtureRequest) -> Iterator[MqttHarness]:
    h = MqttHarness(request.param)
    yield h
    h.cleanup()


def test_heartbeat_is_the_keep_alive() -> None:
    assert keepalive_seconds(0) == 0  # off stays off
    assert keepalive_seconds(0.4) == 1  # a short heartbeat never rounds to "off"
    assert keepalive_seconds(30.0) == 30
    with pytest.raises(InvalidOptionError, match="at most 65535"):
        keepalive_seconds(MAX_KEEPALIVE + 1.0)
    with ackbridge.connect(URL, heartbeat=5) as conn:
        assert transport_of(conn).mqtt.keepalive == 5  # type: ignore[attr-defined]


def test_old_keepalive_spelling_points_to_heartbeat() -> None:
    with pytest.raises(InvalidOptionError, match="did you mean 'heartbeat'"):
        ackbridge.connect(URL, keepalive=30)


def test_key_file_without_certificate_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="tls_cert_file"):
        ackbridge.connect("mqtts://127.0.0.1:8883", tls_key_file="/nonexistent/client.key")


def test_prefetch_limit_is_a_capability() -> None:
    assert CAPABILITIES_V5.max_prefetch == MAX_RECEIVE_MAXIMUM == limits.MAX_RECEIVE_MAXIMUM == 65535
    assert CAPABILITIES_V311.max_prefetch is None  # 3.1.1 sends no Receive Maximum at all
    assert any("refuses" in w for w in limits.check_settings(prefetch=70000, batch_size=10))


def test_prefetch_above_receive_maximum_is_refused_on_v5_only() -> None:
    with ackbridge.connect(URL) as conn:
        with pytest.raises(InvalidOptionError, match="above 65535"):
            conn.consume("abtest/prefetch/never-subscribed", prefetch=MAX_RECEIVE_MAXIMUM + 1)
    topic = f"abtest/prefetch/{uuid.uuid4().hex[:10]}"
    try:
        with ackbridge.connect(URL, protocol="3.1.1") as conn:
            # Nothing to refuse: 3.1.1 sends no Receive Maximum (the broker's own window applies).
            conn.consume(topic, prefetch=MAX_RECEIVE_MAXIMUM + 1).close()
    finally:
        delete_session(derived_session_id(topic))


def test_sever_ends_the_generation_and_the_link_comes_back(harness: MqttHarness) -> None:
    queue = harness.new_queue(dead_letter=False)
    with ackbridge.connect(harness.url(), protocol=harness.protocol) as conn:
        assert conn.publish(queue, b"before").result(timeout=10).status is ConfirmStatus.CONFIRMED
        consumer = conn.consume(queue, prefetch=5)
        first = consumer.get(timeout=10)
        assert first is not None
        seam = faults(conn)
        before = seam.generation
        seam.sever("test cut")
        with pytest.raises(StaleDeliveryError, match="redeliver"):
            first.ack()  # the generation ended before sever() returned: nothing is sent
        eventually(lambda: seam.generation > before and all(link.live for link in transport_of(conn).links()),  # type: ignore[attr-defined]
                   timeout=10, message="links reconnected")
        again = consumer.get(timeout=10)
        assert again is not None and again.body == b"before" and again.redelivered
        again.ack()
        assert conn.publish(queue, b"after").result(timeout=10).status is ConfirmStatus.CONFIRMED


def test_reconnect_false_stays_down(harness: MqttHarness) -> None:
    queue = harness.new_queue(dead_letter=False)
    with ackbridge.connect(harness.url(reconnect="false"), protocol=harness.protocol) as conn:
        links = transport_of(conn).links()  # type: ignore[attr-defined]
        faults(conn).sever("test cut")
        # The first reconnect would come after ackbridge.kernel.backoff.INITIAL_DELAY (0.1 s).
        time.sleep(1.0)
        assert not any(link.live for link in links)
        outcome = conn.publish(queue, b"while-down").result(timeout=10)
        assert outcome.status is ConfirmStatus.UNKNOWN and "not connected" in outcome.reason
