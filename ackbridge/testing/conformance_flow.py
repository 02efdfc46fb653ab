"""Conformance: confirms, the publish window, prefetch, conflation and cumulative
acks (mixed into :class:`~ackbridge.testing.conformance.ConformanceSuite`)."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from ackbridge.capabilities import Level, Verb
from ackbridge.errors import (
    UnsupportedVerbError,
)
from ackbridge.kernel.settlement import State
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.harness import BrokerHarness, eventually
from ackbridge.testing.suite_helpers import SuiteHelpers
from ackbridge.testing.suite_helpers import body_of as _body
from ackbridge.testing.twins import unwrap


class FlowConformance(SuiteHelpers):
    # ---- confirms -------------------------------------------------------------------------
    def test_confirm_confirmed(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        confirm = conn.publish(harness.publish_target(queue), _body("confirm"))
        outcome = confirm.result(timeout=30)
        assert outcome.status is ConfirmStatus.CONFIRMED
        self.broker_counts(harness, queue, ready=1)

    def test_confirm_refused(self, conn: Any, harness: BrokerHarness) -> None:
        support = conn.capabilities.support(Verb.CONFIRM_REFUSED)
        target = harness.unroutable_target()
        oversized = harness.oversized_body()
        if support.level is Level.UNSUPPORTED:
            pytest.skip(f"{harness.name}: confirm_refused is declared unsupported ({support.how})")
        if target is None and oversized is None:
            pytest.skip(f"{harness.name}: confirm_refused is declared {support.level.value} ({support.how}), "
                        "but the harness has no unroutable target nor oversized body to show it")
        queue = harness.new_queue()
        if target is not None:
            outcome = conn.publish(target, _body("unroutable")).result(timeout=30)
        else:
            assert oversized is not None
            outcome = conn.publish(harness.publish_target(queue), oversized).result(timeout=30)
        assert outcome.status is ConfirmStatus.REFUSED
        assert outcome.reason

    def test_confirm_unknown_on_connection_loss(self, conn: Any, harness: BrokerHarness) -> None:
        if not harness.can_hold_confirms:
            pytest.skip(f"{harness.name}: the harness cannot hold confirms, so no confirm is pending at the cut")
        queue = harness.new_queue()
        publisher = conn.publisher(window=1000)
        with harness.hold_confirms(unwrap(conn)):
            confirms = [publisher.publish(harness.publish_target(queue), _body("lost")) for _ in range(50)]
            harness.break_connection(unwrap(conn))
        outcomes = [c.result(timeout=60) for c in confirms]
        statuses = {o.status for o in outcomes}
        assert ConfirmStatus.REFUSED not in statuses
        assert ConfirmStatus.UNKNOWN in statuses, "a cut connection must leave pending confirms unknown"
        confirmed = sum(1 for o in outcomes if o.status is ConfirmStatus.CONFIRMED)
        # Every message reported confirmed is really on the broker.
        eventually(lambda: harness.ready(queue) >= confirmed, message="confirmed messages on the broker")

    def test_flush_waits_for_every_confirm(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        publisher = conn.publisher(window=16)
        confirms = [publisher.publish(harness.publish_target(queue), _body("flush")) for _ in range(100)]
        assert publisher.flush(timeout=60)
        assert all(c.done() for c in confirms)
        assert publisher.in_flight == 0
        self.broker_counts(harness, queue, ready=100)

    def test_window_applies_back_pressure(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        publisher = conn.publisher(window=3)
        done = threading.Event()

        def fourth() -> None:
            publisher.publish(harness.publish_target(queue), _body("window"))
            done.set()

        thread = threading.Thread(target=fourth)
        with harness.hold_confirms(unwrap(conn)):
            for _ in range(3):
                publisher.publish(harness.publish_target(queue), _body("window"))
            assert publisher.in_flight <= 3
            thread.start()
            if harness.can_hold_confirms:
                # Absence of progress can only be shown by waiting a little.
                assert not done.wait(0.5), "a 4th publish went out with 3 confirms pending"
        assert done.wait(30), "publish stayed blocked after confirms arrived"
        thread.join()
        assert publisher.flush(timeout=30)
        self.broker_counts(harness, queue, ready=4)

    # ---- flow control and conflation ------------------------------------------------------
    def test_prefetch_bounds_unsettled(self, conn: Any, harness: BrokerHarness) -> None:
        queue, _ = self.filled_queue(conn, harness, "prefetch", 8)
        consumer = conn.consume(queue, prefetch=3)
        got = self.get_n(consumer, 3)
        assert consumer.get(timeout=1.0) is None
        self.broker_counts(harness, queue, ready=5, unacked=3)
        got[0].ack()
        more = self.get_n(consumer, 1)
        assert more[0].body not in {d.body for d in got}

    def test_conflation_flushes_on_count(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "count", 10, prefetch=20, conflate_count=5, conflate_ms=0)
        for d in got[:4]:
            d.ack()
        assert consumer.unsettled == 10, "4 acks must wait for the 5th"
        got[4].ack()
        assert consumer.unsettled == 5
        self.broker_counts(harness, queue, ready=0, unacked=5)
        for d in got[5:]:
            d.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_conflation_flushes_on_time(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "time", 3, prefetch=20, conflate_count=1000,
                                             conflate_ms=100)
        for d in got:
            d.ack()
        eventually(lambda: consumer.unsettled == 0, message="timer flush")
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_conflation_flushes_on_close(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "close", 3, prefetch=20, conflate_count=1000, conflate_ms=0)
        for d in got:
            d.ack()
        assert consumer.unsettled == 3
        consumer.close()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_ack_through_is_cumulative(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, got = self.received(conn, harness, "through", 5, prefetch=10)
        if conn.capabilities.support(Verb.CUMULATIVE_ACK).level is Level.UNSUPPORTED:
            with pytest.raises(UnsupportedVerbError):
                consumer.ack_through(got[2])
            return
        got[1].ack()
        consumer.ack_through(got[2])
        assert [d.state for d in got] == [State.ACKED] * 3 + [State.PENDING] * 2
        self.broker_counts(harness, queue, ready=0, unacked=2)
        consumer.ack_through(got[4])
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_max_deliveries_dead_letters_poison(self, conn: Any, harness: BrokerHarness) -> None:
        """max_deliveries dead-letters a message requeued too often. It needs the broker's
        delivery count and a reject (declared unsupported: consume() refuses it) and
        requeue (declared unsupported: the real requeue() raises, and the message stays
        unsettled on the broker, so no requeue loop can form)."""
        caps = conn.capabilities
        bounded = caps.support(Verb.DELIVERY_COUNT).available and caps.support(Verb.REJECT).available
        can_requeue = caps.support(Verb.REQUEUE).available
        if not bounded:
            with pytest.raises(UnsupportedVerbError, match=r"delivery count|reject"):
                conn.consume(harness.new_queue(), max_deliveries=2)
        if not can_requeue:
            self._requeue_refused_and_message_kept(conn, harness, bounded)
        if bounded and can_requeue:
            self._poison_dead_lettered(conn, harness)

    def _requeue_refused_and_message_kept(self, conn: Any, harness: BrokerHarness, bounded: bool) -> None:
        queue = harness.new_queue(dead_letter=True)
        body = _body("poison")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=5, **({"max_deliveries": 2} if bounded else {}))
        delivery = self.get_n(consumer, 1)[0]
        with pytest.raises(UnsupportedVerbError, match="requeue"):
            delivery.requeue()
        assert delivery.state is State.PENDING, "a refused requeue settles nothing"
        assert consumer.get(timeout=1.0) is None, "nothing came back: the refused requeue sent nothing"
        self.broker_counts(harness, queue, ready=0, unacked=1)
        delivery.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def _poison_dead_lettered(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue(dead_letter=True)
        body = _body("poison")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=5, max_deliveries=2)
        for _ in range(2):
            self.get_n(consumer, 1)[0].requeue()
        assert consumer.get(timeout=1.5) is None
        eventually(lambda: harness.dead_lettered(queue) == [body], message="poison message dead-lettered")

    # ---- hygiene -------------------------------------------------------------------------------
