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
from ackbridge.kernel.settlement import State
from ackbridge.testing.conformance_batch import BatchConformance
from ackbridge.testing.conformance_flow import FlowConformance
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


class ConformanceSuite(LabelConformance, BatchConformance, FlowConformance):
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
            # Declared unsupported: the real verb raises, settles nothing and sends nothing.
            with pytest.raises(UnsupportedVerbError, match="reject"):
                first.reject()
            assert first.state is State.PENDING
            self.broker_counts(harness, queue, ready=0, unacked=2)
            first.ack()
        else:
            first.reject()
        second.ack()
        if conn.capabilities.support(Verb.REJECT).available:
            eventually(lambda: harness.dead_lettered(queue) == [first.body],
                       message="only the rejected body dead-lettered")
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
        again = self.get_until_seen(conn.consume(queue, prefetch=10), bodies)
        assert {d.body for d in again} == set(bodies), f"{[d.body for d in again]} returned, {bodies} held"
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

    def test_repr_never_shows_password(self, conn: Any, harness: BrokerHarness) -> None:
        url = harness.url()
        shown = repr(conn) + str(unwrap(conn).url) + repr(transport_of(unwrap(conn)))
        password = unwrap(conn).url.password_text
        if password:
            # Look for the password where it would sit, so a user named like it is not a false alarm.
            assert f":{password}@" not in shown
        assert "***" in shown or password is None or "@" not in url
