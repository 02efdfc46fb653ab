"""The scoreboard's broker list: a harness factory per broker, and how to reach it through the proxy."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ackbridge.testing import BrokerHarness


@dataclass(frozen=True)
class BrokerEntry:
    name: str
    make: Callable[[], BrokerHarness]
    #: proxied_url(harness) -> (proxy_port -> url), or None when the broker has no socket.
    proxied: Callable[[BrokerHarness], Callable[[int], str]] | None
    faults: tuple[str, ...]
    #: Consume while publishing: the broker drops a backlog beyond a per-session limit.
    online_consumer: bool = False
    #: Producer back-pressure (published but not yet delivered), for brokers that drop a backlog.
    max_backlog: int | None = None
    #: The client library resends publishes pending at a loss after its own reconnect (paho),
    #: on top of the workload's retry of their unknown confirms (docs/broker-quirks.md, MQTT).
    client_resends: bool = False


def _local() -> BrokerHarness:
    from tests.local.harness import LocalHarness

    return LocalHarness(Path(tempfile.mkdtemp(prefix="scoreboard-")))


def _mqtt(protocol: str) -> Callable[[], BrokerHarness]:
    def make() -> BrokerHarness:
        from tests.mqtt.harness import MqttHarness

        return MqttHarness(protocol)

    return make


def _rabbit(queue_type: str) -> Callable[[], BrokerHarness]:
    def make() -> BrokerHarness:
        from tests.rabbitmq.harness import RabbitHarness, ensure_test_user

        ensure_test_user()
        return RabbitHarness(queue_type)

    return make


def _amqp10() -> BrokerHarness:
    from tests.amqp10.harness import Amqp10Harness

    return Amqp10Harness()


def _nats() -> BrokerHarness:
    from tests.nats.harness import NatsHarness

    return NatsHarness()


def _streams() -> BrokerHarness:
    from tests.rabbitmq_streams.harness import StreamsHarness

    return StreamsHarness()


def broker_port(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"no port in {url.split('@')[-1]!r}")
    return port


def _via_proxy(harness: BrokerHarness) -> Callable[[int], str]:
    """The harness's URL with its port replaced by the fault proxy's."""
    url = harness.url()
    port_now = broker_port(url)
    return lambda port: url.replace(f":{port_now}", f":{port}", 1)


LOCAL_FAULTS = ("none", "connection-cut", "consumer-sigkill", "poison")
NETWORK = ("none", "connection-cut", "tcp-reset", "blackhole", "cut-mid-frame", "consumer-sigkill")

BROKERS: list[BrokerEntry] = [
    BrokerEntry("embedded", _local, None, LOCAL_FAULTS),
    BrokerEntry("mqtt-5", _mqtt("5"), _via_proxy, (*NETWORK, "poison"), online_consumer=True,
                max_backlog=800, client_resends=True),
    # 3.1.1 has no delivery count, so the poison policy cannot run there (declared gap).
    BrokerEntry("mqtt-3.1.1", _mqtt("3.1.1"), _via_proxy, NETWORK, online_consumer=True, max_backlog=800,
                client_resends=True),
    BrokerEntry("rabbitmq-classic", _rabbit("classic"), _via_proxy, NETWORK),
    BrokerEntry("rabbitmq-quorum", _rabbit("quorum"), _via_proxy, (*NETWORK, "poison")),
    # RabbitMQ 3.10's AMQP 1.0 plugin reports no delivery count: no poison policy (declared gap).
    BrokerEntry("amqp10-rabbitmq", _amqp10, _via_proxy, NETWORK),
    # JetStream counts deliveries itself: the poison policy runs there.
    BrokerEntry("nats-jetstream", _nats, _via_proxy, (*NETWORK, "poison")),
    # A stream can neither requeue nor count deliveries: no poison policy (declared gap).
    BrokerEntry("rabbitmq-streams", _streams, _via_proxy, NETWORK),
]

#: The small matrix CI runs (every broker, the faults that matter most).
CI_FAULTS = ("connection-cut", "tcp-reset", "consumer-sigkill", "poison")
