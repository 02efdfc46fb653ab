"""Issue 15: 3,000 QoS 1 messages to an offline MQTT persistent session, on a private Mosquitto
with its default limits (max_queued_messages 1000), on both faces.

Mosquitto PUBACKs every one and keeps 1,000 (plus what is in flight); the rest
are dropped silently. What ackbridge must do about it: the settings warning
fires at subscribe time, before anything is published (MQTT 5 and 3.1.1), and
on MQTT 5 a consumer of a ``sequence=True`` publisher reports the gap: how
many, and exactly which numbers, through ``on_gap``, ``gaps`` and ``missing``.
The broker side is read from a raw paho client's view of the session too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.errors import InvalidOptionError
from ackbridge.testing.twins import Twin
from tests.failures.private_mosquitto import PrivateMosquitto

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]

N = 3000
TOPIC = "abtest/offline-gap"


@pytest.fixture
def broker() -> Iterator[PrivateMosquitto]:
    with PrivateMosquitto() as mosquitto:  # Mosquitto's defaults: max_queued_messages 1000
        yield mosquitto


@pytest.fixture(params=["sync", "async"])
def twin(request: pytest.FixtureRequest) -> Iterator[Twin]:
    face = Twin(request.param)
    yield face
    face.close()


def _drain(consumer: Any, quiet: float = 2.0) -> list[bytes]:
    got = []
    while (delivery := consumer.get(timeout=quiet)) is not None:
        got.append(delivery.body)
        delivery.ack()
    return got


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "max_queued_messages" in r.getMessage()]


@pytest.mark.timeout(300)
def test_mqtt5_the_warning_fires_first_and_the_gap_is_reported_with_its_numbers(
        broker: PrivateMosquitto, twin: Twin, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    conn = twin.connect(broker.url(), protocol="5")
    try:
        conn.consume(TOPIC).close()  # the persistent session exists; now it is offline
        assert _warned(caplog), "the subscribe-time settings warning must fire before anything is published"
        warned_at = len(caplog.records)
        publisher = conn.publisher(sequence=True, producer_id="offline-producer")
        confirms = [publisher.publish(TOPIC, str(i).encode()) for i in range(1, N + 1)]
        assert all(c.result(timeout=60).confirmed for c in confirms), "Mosquitto PUBACKed every one"
        assert not any("data loss" in r.getMessage() for r in caplog.records[:warned_at])
        seen: list[tuple[str, tuple[int, ...]]] = []
        consumer = conn.consume(TOPIC, on_gap=lambda producer, missing: seen.append((producer, missing)))
        got = _drain(consumer)
        assert 0 < len(got) < N, f"{len(got)} of {N} arrived: the default limits must have dropped some"
        # A gap shows when a later number arrives: one more publish reveals a loss at the tail.
        assert publisher.publish(TOPIC, b"after").result(timeout=10).confirmed
        got += _drain(consumer)
        delivered = {int(body) for body in got if body != b"after"}
        never = set(range(1, N + 1)) - delivered
        assert never, "some messages were dropped"
        assert consumer.gaps == len(never), (consumer.gaps, len(never))
        assert set(consumer.missing["offline-producer"]) == never, "exactly the numbers never delivered"
        assert {p for p, _ in seen} == {"offline-producer"}
        assert sorted(n for _, numbers in seen for n in numbers) == sorted(never)
        assert any("data loss" in m and "offline-producer" in m for m in (r.getMessage() for r in caplog.records))
        consumer.close()
    finally:
        conn.close()


@pytest.mark.timeout(300)
def test_mqtt311_carries_no_numbers_so_the_warning_is_what_protects(
        broker: PrivateMosquitto, twin: Twin, caplog: pytest.LogCaptureFixture) -> None:
    """3.1.1 has no user properties: no sequence number reaches the consumer and no gap can be
    reported. The subscribe-time warning is the one signal, and it fires before the loss."""
    caplog.set_level(logging.WARNING)
    conn = twin.connect(broker.url(), protocol="3.1.1")
    try:
        conn.consume(TOPIC).close()
        assert _warned(caplog), "the subscribe-time settings warning must fire on 3.1.1 too"
        with pytest.raises(InvalidOptionError, match=r"3\.1\.1 cannot carry headers"):
            conn.publisher(sequence=True).publish(TOPIC, b"numbered")  # refused, not silently unnumbered
        publisher = conn.publisher()
        confirms = [publisher.publish(TOPIC, str(i).encode()) for i in range(1, N + 1)]
        assert all(c.result(timeout=60).confirmed for c in confirms), "Mosquitto PUBACKed every one"
        consumer = conn.consume(TOPIC, on_gap="warn")
        got = _drain(consumer)
        assert 0 < len(got) < N, f"{len(got)} of {N} arrived: the default limits must have dropped some"
        assert consumer.gaps == 0, "no numbers on the wire: a gap cannot be claimed"
        consumer.close()
    finally:
        conn.close()
