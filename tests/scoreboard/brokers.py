"""The scoreboard's broker list: a harness factory per broker, and how to reach it through the proxy."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ackbridge.testing import BrokerHarness


@dataclass(frozen=True)
class BrokerEntry:
    name: str
    make: Callable[[], BrokerHarness]
    #: proxied_url(harness) -> (proxy_port -> url), or None when the broker has no socket.
    proxied: Callable[[BrokerHarness], Callable[[int], str]] | None
    faults: tuple[str, ...]


def _local() -> BrokerHarness:
    from tests.local.harness import LocalHarness

    return LocalHarness(Path(tempfile.mkdtemp(prefix="scoreboard-")))


def _mqtt(protocol: str) -> Callable[[], BrokerHarness]:
    def make() -> BrokerHarness:
        from tests.mqtt.harness import MqttHarness

        return MqttHarness(protocol)

    return make


def _mqtt_via_proxy(harness: BrokerHarness) -> Callable[[int], str]:
    return lambda port: f"mqtt://127.0.0.1:{port}"


LOCAL_FAULTS = ("none", "connection-cut", "consumer-sigkill", "poison")
NETWORK = ("none", "connection-cut", "tcp-reset", "blackhole", "cut-mid-frame", "consumer-sigkill")

BROKERS: list[BrokerEntry] = [
    BrokerEntry("embedded", _local, None, LOCAL_FAULTS),
    BrokerEntry("mqtt-5", _mqtt("5"), _mqtt_via_proxy, (*NETWORK, "poison")),
    # 3.1.1 has no delivery count, so the poison policy cannot run there (declared gap).
    BrokerEntry("mqtt-3.1.1", _mqtt("3.1.1"), _mqtt_via_proxy, NETWORK),
]
