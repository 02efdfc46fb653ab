"""The conformance suite: one set of behaviour tests every adapter runs.

Use it from a plugin's tests::

    from ackbridge.testing.conformance import ConformanceSuite

    class TestMyBroker(ConformanceSuite):
        @pytest.fixture
        def harness(self):
            h = MyHarness()
            yield h
            h.cleanup()

Every test runs twice, on the sync client and on the async twin (through
:mod:`ackbridge.testing.twins`). Assertions are made broker-side through the
harness. Where an adapter declares a verb unsupported, the test checks that
the clear :class:`~ackbridge.errors.UnsupportedVerbError` is raised instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ackbridge.capabilities import Level, Verb
from ackbridge.errors import (
    AlreadySettledError,
    ConfigurationError,
    ConsumerClosedError,
    StaleDeliveryError,
    UnsupportedVerbError,
)
from ackbridge.messages import ConfirmStatus
from ackbridge.settlement import State
from ackbridge.testing.conformance_batch import BatchConformance
from ackbridge.testing.conformance_labels import LabelConformance
from ackbridge.testing.faults import transport_of
from ackbridge.testing.harness import BrokerHarness, eventually
from ackbridge.testing.suite_helpers import body_of as _body
from ackbridge.testing.twins import Twin, unwrap


def _in_turn(*steps: Callable[[], Any]) -> Any:
    """Call each step in order. The async twin's verbs return awaitables: then
    return one coroutine awaiting them in order (an async handler's body)."""
    first = steps[0]()
    if not inspect.isawaitable(first):
        for step in steps[1:]:
            step()
        return None

    async def rest() -> None:
        await first
        for step in steps[1:]:
            await step()

    return rest()


class ConformanceSuite(LabelConformance, BatchConformance):
    """Subclass and provide a ``harness`` fixture returning a BrokerHarness."""

    @pytest.fixture(params=["sync", "async"])
    def twin(self, request: pytest.FixtureRequest) -> Iterator[Twin]:
        twin = Twin(request.param)
        yield twin
        twin.close()

    @pytest.fixture
    def conn(self, harness: BrokerHarness, twin: Twin) -> Iterator[Any]:
        connection = twin.connect(harness.url(), **harness.connect_options())
        yield connection
        try:
            connection.close()
        except Exception:
            pass  # a test may have broken it on purpose

    # ---- ack / requeue / reject ----------------------------------------------------
    def test_ack_removes(self, conn: Any, harness: BrokerHarness) -> None:
        queue, bodies = self.filled_queue(conn, harness, "ack", 3)
        got = self.get_n(conn.consume(queue, prefetch=10), 3)
        assert sorted(d.body for d in got) == sorted(bodies)
        self.broker_counts(harness, queue, ready=0, unacked=3)
        for delivery in got:
            delivery.ack()
            assert delivery.state is State.ACKED
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_requeue_redelivers(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        body = _body("requeue")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=10)
        first = self.get_n(consumer, 1)[0]
        assert first.redelivered is False
        if conn.capabilities.support(Verb.REQUEUE).level is Level.UNSUPPORTED:
            with pytest.raises(UnsupportedVerbError, match="requeue"):
                first.requeue()
            return
        first.requeue()
        again = self.get_n(consumer, 1)[0]
        assert again.body == body
        assert again.redelivered is True
        if again.delivery_count is not None and first.delivery_count is not None:
            assert again.delivery_count == first.delivery_count + 1
        again.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_nack_requeue_false_dead_letters(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue(dead_letter=True)
        body = _body("reject")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=10)
        delivery = self.get_n(consumer, 1)[0]
        if conn.capabilities.support(Verb.REJECT).level is Level.UNSUPPORTED:
            with pytest.raises(UnsupportedVerbError, match="reject"):
                delivery.reject()
            return
        delivery.nack(requeue=False)
        assert delivery.state is State.REJECTED
        eventually(lambda: harness.dead_lettered(queue) == [body], message="body in the dead-letter target")
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_reject_dead_letters(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue(dead_letter=True)
        bodies = [_body("reject") for _ in range(2)]
        self.publish_all(conn, harness, queue, bodies)
        consumer = conn.consume(queue, prefetch=10)
        first, second = self.get_n(consumer, 2)
        if conn.capabilities.support(Verb.REJECT).level is Level.UNSUPPORTED:
            return
        first.reject()
        second.ack()
        eventually(lambda: harness.dead_lettered(queue) == [first.body], message="only the rejected body dead-lettered")
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_out_of_order_settlement(self, conn: Any, harness: BrokerHarness) -> None:
        queue, _, (d1, d2, d3) = self.received(conn, harness, "order", 3, prefetch=10)
        d3.ack()
        d1.ack()
        d2.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    # ---- handler consumers -------------------------------------------------------------
    def test_handler_settles_every_delivery_in_order(self, conn: Any, harness: BrokerHarness) -> None:
        queue, bodies = self.filled_queue(conn, harness, "handler", 20)
        seen: list[bytes] = []

        def handler(delivery: Any) -> Any:
            seen.append(delivery.body)
            return delivery.ack()  # the async twin awaits what the handler returns

        consumer = conn.consume(queue, prefetch=10, handler=handler)
        eventually(lambda: len(seen) == len(bodies), message="every delivery handled")
        assert seen == bodies
        self.broker_counts(harness, queue, ready=0, unacked=0)
        with pytest.raises(ConfigurationError, match="handler"):
            consumer.get(timeout=0.1)
        consumer.close()

    def test_handler_exception_rejects_its_delivery(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue(dead_letter=True)
        poison, good = _body("poison"), _body("good")
        self.publish_all(conn, harness, queue, [poison, good])
        can_reject = conn.capabilities.support(Verb.REJECT).available
        can_requeue = conn.capabilities.support(Verb.REQUEUE).available
        seen: list[bytes] = []

        def handler(delivery: Any) -> Any:
            seen.append(delivery.body)
            if delivery.body == poison and (can_reject or not delivery.redelivered):
                raise ValueError("cannot handle this one")
            return delivery.ack()

        consumer = conn.consume(queue, prefetch=10, handler=handler)
        if can_reject:
            eventually(lambda: harness.dead_lettered(queue) == [poison], message="poison dead-lettered")
            # The poison can reach the dead-letter queue before the next handler call has run.
            eventually(lambda: len(seen) >= 2, message="the good message handled")
            assert seen == [poison, good]
        elif not can_requeue:  # neither: the poison stays unsettled (a log holds its stored offset there)
            eventually(lambda: seen == [poison, good], message="both handled once")
            self.broker_counts(harness, queue, ready=0, unacked=2 if conn.capabilities.ordered_acks else 1)
            consumer.close()
            return
        else:  # requeued instead: handled again, then acked
            eventually(lambda: seen.count(poison) == 2, message="poison requeued and handled again")
        self.broker_counts(harness, queue, ready=0, unacked=0)
        consumer.close()

    def test_handler_may_close_its_own_consumer(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        bodies = [_body("stop") for _ in range(5)]
        handled: list[bytes] = []
        holder: list[Any] = []

        def handler(delivery: Any) -> Any:
            handled.append(delivery.body)
            return _in_turn(delivery.ack, holder[0].close)

        consumer = conn.consume(queue, prefetch=10, handler=handler)
        holder.append(unwrap(consumer))  # the consumer itself, not the test's facade
        self.publish_all(conn, harness, queue, bodies)
        eventually(lambda: handled, message="the first delivery handled")
        time.sleep(0.3)  # no delivery is handed to a closed consumer's handler
        assert handled == bodies[:1]
        rest = self.get_n(conn.consume(queue, prefetch=10), 4)
        assert sorted(d.body for d in rest) == sorted(bodies[1:])
        for d in rest:
            d.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    # ---- refused settlements ------------------------------------------------------------
    def test_double_settle_raises_and_sends_nothing(self, conn: Any, harness: BrokerHarness) -> None:
        queue, _, (first, second) = self.received(conn, harness, "double", 2, prefetch=10)
        first.ack()
        for verb in ("ack", "requeue", "reject"):
            # A verb the broker cannot do at all may be refused as unsupported before the state is looked at.
            refusal = (AlreadySettledError if conn.capabilities.support(Verb(verb)).available
                       else (AlreadySettledError, UnsupportedVerbError))
            with pytest.raises(refusal, match=r"already acked|does not support") as err:
                getattr(first, verb)()
            password = unwrap(conn).url.password_text
            assert not password or password not in str(err.value)
        # The other delivery was not touched by the refused calls.
        assert second.state is State.PENDING
        self.broker_counts(harness, queue, ready=0, unacked=1)
        second.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_stale_settle_raises_and_message_returns(self, conn: Any, harness: BrokerHarness, twin: Twin) -> None:
        queue, bodies = self.filled_queue(conn, harness, "stale", 2)
        consumer = conn.consume(queue, prefetch=1)
        old = self.get_n(consumer, 1)[0]
        harness.break_connection(unwrap(conn))
        with pytest.raises(StaleDeliveryError, match="redeliver"):
            old.ack()
        assert old.state is State.PENDING
        # Nothing was acked: both messages are still on the broker, the old one redelivered.
        try:
            conn.close()
        except Exception:
            pass
        fresh = twin.connect(harness.url(), **harness.connect_options())
        try:
            again = self.get_n(fresh.consume(queue, prefetch=10), 2)
            assert sorted(d.body for d in again) == sorted(bodies)
            if harness.counts_deliveries:  # a log does not know what the old connection was handed
                assert any(d.body == old.body and d.redelivered for d in again)
            for d in again:
                d.ack()
            self.broker_counts(harness, queue, ready=0, unacked=0)
        finally:
            fresh.close()

    def test_settle_after_close_raises_and_message_returns(self, conn: Any, harness: BrokerHarness) -> None:
        queue, consumer, (held, other) = self.received(conn, harness, "closed", 2, prefetch=10)
        bodies = [held.body, other.body]
        # The consumer is closed (by another thread, say) while the application still
        # holds deliveries: a later settlement cannot go out, so it raises, never passes.
        consumer.close()
        for verb in ("ack", "requeue", "reject"):
            if not conn.capabilities.support(Verb(verb)).available:
                continue
            with pytest.raises(ConsumerClosedError, match="closed before it was settled"):
                getattr(held, verb)()
        assert held.state is State.PENDING and other.state is State.PENDING
        again = self.get_n(conn.consume(queue, prefetch=10), 2)
        assert sorted(d.body for d in again) == sorted(bodies)
        for d in again:
            d.ack()
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_interrupted_work_is_never_dead_lettered(self, conn: Any, harness: BrokerHarness, twin: Twin) -> None:
        queue = harness.new_queue(dead_letter=True)
        body = _body("interrupted")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=10)
        delivery = self.get_n(consumer, 1)[0]
        target = unwrap(delivery)
        if twin.kind == "sync":
            with pytest.raises(KeyboardInterrupt), target.process():
                raise KeyboardInterrupt  # Ctrl-C in the middle of the work
        else:

            async def cancelled() -> None:
                async with target.process():
                    raise asyncio.CancelledError  # the task doing the work was cancelled

            with pytest.raises((asyncio.CancelledError, concurrent.futures.CancelledError)):
                twin.run(cancelled)
        # Requeued where the broker requeues natively, else left for the broker to redeliver.
        native = conn.capabilities.support(Verb.REQUEUE).level is Level.NATIVE
        assert delivery.state is (State.REQUEUED if native else State.PENDING)
        if not native:
            consumer.close()
            consumer = conn.consume(queue, prefetch=10)
        again = self.get_n(consumer, 1)[0]
        assert again.body == body
        again.ack()
        if conn.capabilities.support(Verb.REJECT).available:
            assert harness.dead_lettered(queue) == []
        self.broker_counts(harness, queue, ready=0, unacked=0)

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
        if support.level is Level.UNSUPPORTED or (target is None and oversized is None):
            assert support.level is Level.UNSUPPORTED or support.how, "refusal must be declared or testable"
            return
        queue = harness.new_queue()
        if target is not None:
            outcome = conn.publish(target, _body("unroutable")).result(timeout=30)
        else:
            assert oversized is not None
            outcome = conn.publish(harness.publish_target(queue), oversized).result(timeout=30)
        assert outcome.status is ConfirmStatus.REFUSED
        assert outcome.reason

    def test_confirm_unknown_on_connection_loss(self, conn: Any, harness: BrokerHarness) -> None:
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
        caps = conn.capabilities
        if not caps.support(Verb.DELIVERY_COUNT).available or not caps.support(Verb.REQUEUE).available:
            with pytest.raises(UnsupportedVerbError):
                conn.consume(harness.new_queue(), max_deliveries=2)
                if not caps.support(Verb.REQUEUE).available:
                    raise UnsupportedVerbError(caps.broker, "requeue")
            return
        queue = harness.new_queue(dead_letter=True)
        body = _body("poison")
        self.publish_all(conn, harness, queue, [body])
        consumer = conn.consume(queue, prefetch=5, max_deliveries=2)
        for _ in range(2):
            self.get_n(consumer, 1)[0].requeue()
        assert consumer.get(timeout=1.5) is None
        eventually(lambda: harness.dead_lettered(queue) == [body], message="poison message dead-lettered")

    # ---- hygiene -------------------------------------------------------------------------------
    def test_repr_never_shows_password(self, conn: Any, harness: BrokerHarness) -> None:
        url = harness.url()
        shown = repr(conn) + str(unwrap(conn).url) + repr(transport_of(unwrap(conn)))
        password = unwrap(conn).url.password_text
        if password:
            # Look for the password where it would sit, so a user named like it is not a false alarm.
            assert f":{password}@" not in shown
        assert "***" in shown or password is None or "@" not in url
