"""What the application-fault rows share: running a row on one broker, draining a queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ackbridge
from ackbridge.testing import BrokerHarness
from tests.conftest import require_port
from tests.scoreboard.checker import ScoreRow

Row = tuple[ScoreRow, dict[str, Any]]


def on_rabbitmq(row: Callable[..., Row], *args: Any, **kwargs: Any) -> Row:
    """*row* on a RabbitMQ classic queue (the CI broker of most rows), cleaned up after."""
    require_port(5672, "RabbitMQ")
    from tests.rabbitmq.harness import RabbitHarness

    return on_harness(RabbitHarness(), row, *args, **kwargs)


def on_nats(row: Callable[..., Row], *args: Any, **kwargs: Any) -> Row:
    require_port(4222, "nats-server (JetStream)")
    from tests.nats.harness import NatsHarness

    return on_harness(NatsHarness(), row, *args, **kwargs)


def on_harness(harness: BrokerHarness, row: Callable[..., Row], *args: Any, **kwargs: Any) -> Row:
    try:
        return row(harness, *args, **kwargs)
    finally:
        harness.cleanup()


def drain(harness: BrokerHarness, queue: str, expected: int) -> list[str]:
    """Take and ack what *queue* holds: wait up to 10 s a message for the *expected*
    ones, then 1 s for any more. The bodies, in arrival order."""
    drained: list[str] = []
    with ackbridge.connect(harness.url(), prefetch=500, reconnect=False, **harness.connect_options()) as conn:
        consumer = conn.consume(queue)
        while True:
            delivery = consumer.get(timeout=1 if len(drained) >= expected else 10)
            if delivery is None:
                break
            drained.append(delivery.body.decode())
            delivery.ack()
        consumer.close()
    return drained
