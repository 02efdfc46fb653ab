"""Settlement facts checked on the broker: redelivery after SIGKILL, PUBACK order,
dead-lettering with its attempt count, confirms while disconnected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.processes import reap
from ackbridge_mqtt import limits
from ackbridge_mqtt.sessions import derived_session_id
from tests.mqtt.harness import MqttHarness, RawClient, delete_session, ensure_session, peek_session

pytestmark = pytest.mark.mqtt
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["5", "3.1.1"])
def harness(request: pytest.FixtureRequest) -> Iterator[MqttHarness]:
    h = MqttHarness(request.param)
    yield h
    h.cleanup()


def _publish(url: str, protocol: str, topic: str, bodies: list[bytes]) -> None:
    with ackbridge.connect(url, protocol=protocol) as conn:
        confirms = [conn.publish(topic, b) for b in bodies]
        assert all(c.result(timeout=30).status is ConfirmStatus.CONFIRMED for c in confirms)


def test_sigkilled_consumer_loses_nothing(harness: MqttHarness) -> None:
    topic = harness.new_queue(dead_letter=False)
    client_id = f"ab-kill-{uuid.uuid4().hex[:10]}"
    ensure_session(client_id, topic)  # the fixed-id session exists before anything is published
    harness.sessions.append(client_id)
    bodies = [f"kill-{i}".encode() for i in range(15)]
    _publish(harness.url(), harness.protocol, topic, bodies)
    url = f"mqtt://127.0.0.1:1883?protocol={harness.protocol}"
    child = subprocess.Popen([sys.executable, str(ROOT / "tests/mqtt/consumer_proc.py"), url, topic, client_id,
                              str(len(bodies))], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == f"RECEIVED {len(bodies)}", line
    finally:
        reap(child, sig=signal.SIGKILL, timeout=10)  # waits, and closes its stdout pipe
    # A new process (here: this one) with the same client id gets every one of them back.
    with ackbridge.connect(url, client_id=client_id) as conn:
        consumer = conn.consume(topic, prefetch=50)
        got = []
        for _ in bodies:
            delivery = consumer.get(timeout=15)
            assert delivery is not None, f"lost {len(bodies) - len(got)} of {len(bodies)}"
            got.append(delivery)
        assert sorted(d.body for d in got) == sorted(bodies)
        assert all(d.redelivered for d in got), "the broker resent them with the dup flag"
        for d in got:
            d.ack()
    assert peek_session(client_id) == []


def test_close_returns_once_the_broker_has_read_every_puback(harness: MqttHarness) -> None:
    """A PUBACK has no answer. close() makes one round trip after the last, so the next
    connection of the session cannot take it over with PUBACKs still unread (Mosquitto
    then closes the old connection and the messages come back). Here the client's
    packets are held on the way to the broker for a second: close() must wait for them."""
    topic = harness.new_queue(dead_letter=False)
    client_id = f"ab-close-{uuid.uuid4().hex[:10]}"
    ensure_session(client_id, topic)
    harness.sessions.append(client_id)
    bodies = [f"close-{i}".encode() for i in range(10)]
    _publish(harness.url(), harness.protocol, topic, bodies)
    conn = ackbridge.connect(harness.url(), protocol=harness.protocol, client_id=client_id)
    consumer = conn.consume(topic, prefetch=20)
    got = [consumer.get(timeout=15) for _ in bodies]
    assert all(got)
    held = harness.tap.hold_upstream({client_id})
    assert held, "the consumer's connection passes through the tap"
    release = threading.Timer(1.0, lambda: [c.release_upstream() for c in held])
    release.start()
    try:
        for delivery in got:
            assert delivery is not None
            delivery.ack()
        conn.close()  # without the round trip, the held PUBACKs die with the socket
    finally:
        release.join()
    assert peek_session(client_id) == []


def test_out_of_order_settlement_pubacks_leave_in_order(harness: MqttHarness) -> None:
    topic = harness.new_queue(dead_letter=False)
    bodies = [f"order-{i}".encode() for i in range(10)]
    _publish(harness.url(), harness.protocol, topic, bodies)
    conn = ackbridge.connect(harness.url(), protocol=harness.protocol)
    try:
        consumer = conn.consume(topic, prefetch=20)
        got = [consumer.get(timeout=15) for _ in bodies]
        assert all(got)
        assert [d.body for d in got if d] == bodies
        for index in (9, 8, 7, 5, 4, 2, 1, 0):  # 3 and 6 stay undecided
            got[index].ack()  # type: ignore[union-attr]
        # The wire saw PUBACKs for 0, 1, 2 only: 4, 5, 7, 8, 9 wait behind 3.
        from ackbridge.testing.harness import eventually
        eventually(lambda: harness.tap.acked[topic] == 3, message="3 PUBACKs on the wire")
        assert harness.unacked(topic) == 7
    finally:
        conn.close()
    # Broker side: the session redelivers exactly the unacked suffix.
    held = peek_session(derived_session_id(topic))
    assert sorted(bytes(m.payload) for m in held) == sorted(bodies[3:])


def test_reject_lands_in_dead_letter_topic_with_attempt_count(harness: MqttHarness) -> None:
    topic = harness.new_queue(dead_letter=True)
    body = f"poison-{uuid.uuid4().hex[:6]}".encode()
    _publish(harness.url(), harness.protocol, topic, [body])
    with ackbridge.connect(harness.url(), protocol=harness.protocol) as conn:
        consumer = conn.consume(topic, prefetch=5)
        first = consumer.get(timeout=15)
        assert first is not None
        if harness.protocol == "5":
            first.requeue()
            first = consumer.get(timeout=15)
            assert first is not None and first.delivery_count == 2
        first.reject()
    messages = harness.dead_letter_messages(topic)
    assert [bytes(m.payload) for m in messages] == [body]
    props = dict(getattr(messages[0].properties, "UserProperty", []) or [])
    if harness.protocol == "5":
        assert props["ackbridge-attempt"] == "2"
        assert props["ackbridge-dead-lettered-from"] == topic
    else:
        assert props == {}, "3.1.1 carries no properties (declared)"
    assert peek_session(derived_session_id(topic)) == [], "original PUBACKed"


def test_publish_while_disconnected_is_unknown(harness: MqttHarness) -> None:
    topic = harness.new_queue(dead_letter=False)
    with ackbridge.connect(harness.url(), protocol=harness.protocol) as conn:
        harness.break_connection(conn)
        outcome = conn.publish(topic, b"while-down").result(timeout=10)
        assert outcome.status is ConfirmStatus.UNKNOWN, outcome
        assert "not connected" in outcome.reason


def test_backlog_past_mosquitto_queue_limit_is_dropped_and_flagged() -> None:
    """Measure the silent-drop limit: nothing lost up to 1000 queued, the excess lost beyond."""
    for backlog, expected_kept in ((1000, 1000), (1300, 1000)):
        topic = f"abtest/flood/{uuid.uuid4().hex[:10]}"
        session = derived_session_id(topic)
        ensure_session(session, topic)
        try:
            _publish("mqtt://127.0.0.1:1883", "5", topic, [str(i).encode() for i in range(backlog)])
            drain = RawClient(session, clean=False, manual_ack=False)
            kept = {bytes(m.payload) for m in drain.collect(quiet=2.0, limit=30)}
            drain.close()
            assert len(kept) == expected_kept, (backlog, len(kept))
        finally:
            delete_session(session)
        warned = limits.check_settings(prefetch=100, batch_size=50, expected_backlog=backlog)
        assert bool(warned) == (backlog > limits.MOSQUITTO_MAX_QUEUED), warned


def test_check_settings_flags_unsafe_windows() -> None:
    assert limits.check_settings(prefetch=100, batch_size=100) == []
    assert any("never fill" in w for w in limits.check_settings(prefetch=50, batch_size=100))
    assert any("3.1.1" in w for w in limits.check_settings(prefetch=100, batch_size=10, protocol="3.1.1"))
    assert any("never fill" in w for w in limits.check_settings(prefetch=20, batch_size=50, protocol="3.1.1"))
