"""The "Mosquitto may drop an offline backlog" warning: once per topic and connection,
not on every consume() (a consumer re-made in a loop repeated it each time), and gone
when expected_backlog says the backlog fits."""

from __future__ import annotations

import logging
import uuid

import pytest

import ackbridge
from tests.conftest import require_port

URL = "mqtt://127.0.0.1:1883/"


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "max_queued_messages" in r.getMessage()]


@pytest.mark.mqtt
def test_warned_once_per_topic_and_connection(caplog: pytest.LogCaptureFixture) -> None:
    require_port(1883, "Mosquitto")
    caplog.set_level(logging.WARNING, logger="ackbridge.mqtt")
    first, second = (f"abtest/backlog/{uuid.uuid4().hex[:8]}" for _ in range(2))
    with ackbridge.connect(URL) as conn:
        for _ in range(3):
            conn.consume(first).close()
        assert len(warned(caplog)) == 1, warned(caplog)
        conn.consume(second).close()
        assert len(warned(caplog)) == 2, warned(caplog)
        for topic in (first, second):
            conn.delete_queue(topic)
    with ackbridge.connect(URL + "?expected_backlog=500") as conn:
        third = f"abtest/backlog/{uuid.uuid4().hex[:8]}"
        conn.consume(third).close()
        conn.delete_queue(third)
    assert len(warned(caplog)) == 2, "expected_backlog within broker_max_queued: no warning"
