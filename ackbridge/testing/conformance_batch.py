"""Conformance: the batch settle call and manual-flush consumers (what the
Spark source settles through)."""

from __future__ import annotations

from typing import Any

from ackbridge.kernel.settlement import State
from ackbridge.testing.harness import BrokerHarness
from ackbridge.testing.suite_helpers import SuiteHelpers


class BatchConformance(SuiteHelpers):
    def test_settle_batch_acks_exactly_the_batch(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "batch", 6, prefetch=10, conflate_count="manual")
        result = consumer.settle_batch(got[:4])
        assert (result.settled, result.refused) == (4, 0)
        assert [d.state for d in got] == [State.ACKED] * 4 + [State.PENDING] * 2
        self.broker_counts(harness, queue, ready=0, unacked=2)
        # A batch that is not the undecided prefix (a gap before it) settles one by one;
        # where acks must leave in receive order (MQTT) its ack waits behind the gap.
        again = consumer.settle_batch([got[5]])
        assert again.settled == 1 and not again.cumulative
        self.broker_counts(harness, queue, ready=0, unacked=2 if conn.capabilities.ordered_acks else 1)
        got[4].ack()
        consumer.flush()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_settle_batch_counts_refused_and_touches_nothing_else(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "refused", 3, prefetch=10)
        got[0].ack()
        result = consumer.settle_batch(got[:2])
        assert (result.settled, result.refused, result.cumulative) == (1, 1, False)
        assert got[2].state is State.PENDING
        self.broker_counts(harness, queue, ready=0, unacked=1)
        got[2].ack()

    def test_manual_flush_holds_acks_until_flush(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "manual", 3, prefetch=10, conflate_count="manual",
                                             conflate_ms=0)
        for delivery in got:
            delivery.ack()
        assert consumer.unsettled == 3  # decided, nothing on the wire yet
        self.broker_counts(harness, queue, ready=0, unacked=3)
        consumer.flush()
        self.broker_counts(harness, queue, ready=0, unacked=0)
