"""Helpers shared by the parts of the conformance suite."""

from __future__ import annotations

import uuid
from typing import Any

from ackbridge.messages import ConfirmStatus
from ackbridge.testing.harness import BrokerHarness, eventually

GET_TIMEOUT = 15.0


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

    @staticmethod
    def get_n(consumer: Any, n: int) -> list[Any]:
        got: list[Any] = []
        for _ in range(n):
            delivery = consumer.get(timeout=GET_TIMEOUT)
            assert delivery is not None, f"only {len(got)} of {n} deliveries arrived"
            got.append(delivery)
        return got

    @staticmethod
    def broker_counts(harness: BrokerHarness, queue: str, ready: int, unacked: int | None = None) -> None:
        eventually(lambda: harness.ready(queue) == ready, message=f"ready({queue}) == {ready}")
        if unacked is not None and harness.can_count_unacked:
            eventually(lambda: harness.unacked(queue) == unacked, message=f"unacked({queue}) == {unacked}")
