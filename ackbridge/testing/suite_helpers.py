"""Helpers shared by the parts of the conformance suite."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from ackbridge.messages import ConfirmStatus
from ackbridge.testing.harness import BrokerHarness, eventually

GET_TIMEOUT = 15.0
#: Beyond GET_TIMEOUT, for a released message a broker hands back only after its ack
#: deadline (JetStream's default ack_wait is 30 s).
REDELIVERY_SLACK = 35.0


def body_of(tag: str) -> bytes:
    return f"{tag}-{uuid.uuid4().hex[:8]}".encode()


class SuiteHelpers:
    """Helpers every part of the conformance suite uses."""

    @staticmethod
    def publish_all(conn: Any, harness: BrokerHarness, queue: str, bodies: list[bytes]) -> None:
        publisher = conn.publisher()
        confirms = [publisher.publish(harness.publish_target(queue), b, message_id=f"m{i}")
                    for i, b in enumerate(bodies)]
        assert publisher.flush(timeout=30)
        statuses = [c.outcome.status for c in confirms]
        assert statuses == [ConfirmStatus.CONFIRMED] * len(bodies), statuses

    def filled_queue(self, conn: Any, harness: BrokerHarness, tag: str, n: int) -> tuple[str, list[bytes]]:
        """A new queue holding *n* confirmed messages tagged *tag*: (queue, their bodies)."""
        queue = harness.new_queue()
        bodies = [body_of(tag) for _ in range(n)]
        self.publish_all(conn, harness, queue, bodies)
        return queue, bodies

    def received(self, conn: Any, harness: BrokerHarness, tag: str, n: int,
                 **consume_options: Any) -> tuple[str, Any, list[Any]]:
        """*n* messages published to a new queue and received, unsettled, by a new
        consumer: (queue, consumer, deliveries)."""
        queue, _ = self.filled_queue(conn, harness, tag, n)
        consumer = conn.consume(queue, **consume_options)
        return queue, consumer, self.get_n(consumer, n)

    @staticmethod
    def get_n(consumer: Any, n: int) -> list[Any]:
        got: list[Any] = []
        for _ in range(n):
            delivery = consumer.get(timeout=GET_TIMEOUT)
            assert delivery is not None, f"only {len(got)} of {n} deliveries arrived"
            got.append(delivery)
        return got

    @staticmethod
    def get_until_seen(consumer: Any, bodies: Sequence[bytes]) -> list[Any]:
        """Deliveries until each of *bodies* arrived at least once, waiting up to
        GET_TIMEOUT plus :data:`REDELIVERY_SLACK` in all. At-least-once allows a copy
        more: nats-server 2.9.10 was seen handing one released message out twice and
        another only on the next pull or after ``ack_wait`` (30 s by default;
        docs/broker-quirks.md), so the next n deliveries are not always the n released."""
        got: list[Any] = []
        deadline = time.monotonic() + GET_TIMEOUT + REDELIVERY_SLACK
        while not set(bodies) <= {d.body for d in got}:
            delivery = consumer.get(timeout=max(deadline - time.monotonic(), 0.1))
            missing = sorted(set(bodies) - {d.body for d in got})
            assert delivery is not None, f"{missing} did not come back ({len(got)} deliveries arrived)"
            got.append(delivery)
        return got

    @staticmethod
    def broker_counts(harness: BrokerHarness, queue: str, ready: int, unacked: int | None = None) -> None:
        if not harness.counts_deliveries:
            unsettled = ready + (unacked or 0)
            eventually(lambda: harness.ready(queue) == unsettled, message=f"not settled in {queue} == {unsettled}")
            return
        eventually(lambda: harness.ready(queue) == ready, message=f"ready({queue}) == {ready}")
        if unacked is not None and harness.can_count_unacked:
            eventually(lambda: harness.unacked(queue) == unacked, message=f"unacked({queue}) == {unacked}")
