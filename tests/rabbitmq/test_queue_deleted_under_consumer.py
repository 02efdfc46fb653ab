"""Deleting the queue under a live RabbitMQ consumer (issue 37): the broker's basic.cancel
reaches the consumer as SubscriptionCancelledError naming the queue, with one WARNING on
the ``ackbridge.rabbitmq`` logger, instead of get() returning None forever.

The rule (ackbridge.errors.SubscriptionCancelledError): deliveries already received are
handed out first and stay settle-able (their generation is still live), then get()
raises; another consumer on the same connection goes on. The queue is deleted with the
management API, as an operator would; counts come from the broker (rabbitmqctl).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator

import pytest

from ackbridge.connect import connect
from ackbridge.errors import SubscriptionCancelledError
from tests.rabbitmq.harness import RabbitHarness, mgmt

pytestmark = pytest.mark.rabbitmq

#: Generous bound for an event wait: get() returns as soon as the cancel arrives.
EVENT_WAIT_S = 60.0


@pytest.fixture
def harness() -> Iterator[RabbitHarness]:
    made = RabbitHarness("classic")
    yield made
    made.cleanup()


def delete_queue_now(name: str) -> None:
    """Delete *name* with the management API (not the helper that hides a failure)."""
    mgmt("DELETE", f"/queues/%2F/{urllib.parse.quote(name, safe='')}")


def cancel_warnings(caplog: pytest.LogCaptureFixture, queue: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "ackbridge.rabbitmq" and r.levelno == logging.WARNING and queue in r.getMessage()]


def test_get_raises_after_the_queue_is_deleted(harness: RabbitHarness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ackbridge.rabbitmq")
    doomed, other = harness.new_queue(), harness.new_queue()
    with connect(harness.url(), queue_type="classic") as conn:
        for i in range(2):
            assert conn.publish(doomed, f"d-{i}".encode()).result().confirmed
        with conn.consume(doomed, prefetch=10) as consumer, conn.consume(other, prefetch=10) as bystander:
            first = consumer.get(timeout=EVENT_WAIT_S)
            assert first is not None
            # Both are on the client before the delete (the broker counts them unacked).
            assert harness.unacked(doomed) == 2
            delete_queue_now(doomed)
            # The one already received comes first, then the error, as the rule says.
            second = consumer.get(timeout=EVENT_WAIT_S)
            assert second is not None and second.body == b"d-1"
            with pytest.raises(SubscriptionCancelledError, match=doomed) as raised:
                consumer.get(timeout=EVENT_WAIT_S)
            assert raised.value.source == doomed
            # And on every later call (no None "nothing yet" that hides it).
            with pytest.raises(SubscriptionCancelledError):
                consumer.get(timeout=EVENT_WAIT_S)
            with pytest.raises(SubscriptionCancelledError, match=doomed):
                for _ in consumer:
                    pytest.fail("nothing can arrive from a deleted queue")
            # Deliveries received before the cancel are still settle-able: no StaleDeliveryError.
            first.ack()
            second.ack()
            # The other subscription on the same connection goes on: not failed (a non-blocking
            # poll finds nothing and no error), and it still receives.
            assert bystander.get(timeout=0) is None
            assert conn.publish(other, b"still here").result().confirmed
            kept = bystander.get(timeout=EVENT_WAIT_S)
            assert kept is not None and kept.body == b"still here"
            kept.ack()
    assert len(cancel_warnings(caplog, doomed)) == 1, [r.getMessage() for r in caplog.records]
