"""The shared conformance suite against Mosquitto, over MQTT 5 and MQTT 3.1.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.testing.conformance import ConformanceSuite
from ackbridge.testing.conformance_guaranteed import GuaranteedConformance
from tests.mqtt.harness import MqttHarness

pytestmark = pytest.mark.mqtt


class TestMqtt5Conformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[MqttHarness]:
        harness = MqttHarness("5")
        yield harness
        harness.cleanup()


class TestMqtt311Conformance(ConformanceSuite, GuaranteedConformance):
    @pytest.fixture
    def harness(self) -> Iterator[MqttHarness]:
        harness = MqttHarness("3.1.1")
        yield harness
        harness.cleanup()

    @pytest.mark.xfail(reason="declared gap: MQTT 3.1.1 has no Receive Maximum; Mosquitto sends up to its "
                              "max_inflight_messages (20) whatever prefetch says", strict=True)
    def test_prefetch_bounds_unsettled(self, conn: Any, harness: Any) -> None:
        super().test_prefetch_bounds_unsettled(conn, harness)
