"""One broker per parameter for the bad-input properties, through each plugin's own harness.

Brokers are required under CI=true (a failure, never a skip), as everywhere else.
Each parameter builds its harness once per module; queues/topics get unique names
and are deleted by the harness's ``cleanup()``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_port

BROKERS = [
    pytest.param("embedded", id="embedded"),
    pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
    pytest.param("mqtt-5", id="mqtt-5", marks=pytest.mark.mqtt),
    pytest.param("mqtt-3.1.1", id="mqtt-3.1.1", marks=pytest.mark.mqtt),
    pytest.param("amqp10", id="amqp10", marks=pytest.mark.amqp10),
    pytest.param("nats", id="nats", marks=pytest.mark.nats),
    pytest.param("rabbitmq-streams", id="rabbitmq-streams", marks=pytest.mark.rabbitmq_streams),
]


def make_harness(kind: str, tmp: Path) -> Any:
    if kind == "embedded":
        from tests.local.harness import LocalHarness

        return LocalHarness(tmp)
    if kind == "rabbitmq":
        require_port(5672, "RabbitMQ")
        require_port(15672, "RabbitMQ management API")
        from tests.rabbitmq.harness import RabbitHarness

        return RabbitHarness()
    if kind.startswith("mqtt"):
        require_port(1883, "Mosquitto")
        from tests.mqtt.harness import MqttHarness

        return MqttHarness(kind.split("-", 1)[1])
    if kind == "rabbitmq-streams":
        require_port(5552, "RabbitMQ streams (rabbitmq_stream)")
        from tests.rabbitmq_streams.harness import StreamsHarness

        return StreamsHarness()
    if kind == "nats":
        require_port(4222, "NATS (JetStream)")
        from tests.nats.harness import NatsHarness

        return NatsHarness()
    require_port(5672, "RabbitMQ (AMQP 1.0)")
    require_port(15672, "RabbitMQ management API")
    from tests.amqp10.harness import Amqp10Harness

    return Amqp10Harness()


@pytest.fixture(scope="module", params=BROKERS)
def harness(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    h = make_harness(request.param, tmp_path_factory.mktemp("badinput"))
    h.kind = request.param
    try:
        yield h
    finally:
        h.cleanup()


@pytest.fixture(autouse=True)
def no_thread_crashes() -> Iterator[list[str]]:
    """Fail the test when any thread (a client's network loop) died of an exception."""
    crashes: list[str] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        crashes.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")
        print("thread crashed:", crashes[-1], file=sys.stderr)

    threading.excepthook = hook
    try:
        yield crashes
    finally:
        threading.excepthook = previous
    assert crashes == [], f"a client thread crashed: {crashes}"
