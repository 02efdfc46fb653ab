"""Conformance: guaranteed publishing (issue 15) -- retransmission, duplicate detection, loss detection.

A mixin for a plugin's conformance class, next to
:class:`~ackbridge.testing.conformance.ConformanceSuite` (whose ``conn``,
``twin`` and ``harness`` fixtures it uses, so every test runs on the sync
client and on the async twin)::

    class TestMyBroker(ConformanceSuite, GuaranteedConformance):
        ...

What a broker cannot carry is found out by behaviour, not assumed: where a
message id or headers do not reach the consumer (MQTT 3.1.1 carries the body
only), the test checks that nothing pretends otherwise (no copy is dropped, no
gap is reported) instead. Where the broker deduplicates itself (JetStream's
``Nats-Msg-Id``), the copy never reaches the queue and the confirm says so.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ackbridge.capabilities import Verb
from ackbridge.errors import DataLossError, InvalidOptionError
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.harness import BrokerHarness
from ackbridge.testing.suite_helpers import SuiteHelpers
from ackbridge.testing.suite_helpers import body_of as _body
from ackbridge.testing.twins import unwrap

QUIET = 2.0


def _drain(consumer: Any, quiet: float = QUIET) -> list[Any]:
    """Take and ack deliveries until none comes for *quiet* seconds."""
    got = []
    while (delivery := consumer.get(timeout=quiet)) is not None:
        got.append(delivery)
        delivery.ack()
    return got


class GuaranteedConformance(SuiteHelpers):
    """Retransmission, ``dedupe_window`` and sequence gaps, against the real broker."""

    # ---- what the broker carries (found out, not assumed) ----------------------------------
    def _carries(self, conn: Any, harness: BrokerHarness) -> tuple[bool, bool]:
        """(message ids reach the consumer, headers reach the consumer) on this broker."""
        queue = harness.new_queue()
        headers: dict[str, str] = {"probe": "yes"}
        try:
            confirm = conn.publish(harness.publish_target(queue), _body("probe"), message_id="probe-id",
                                   headers=headers)
        except InvalidOptionError:  # refused before sending (MQTT 3.1.1 has no user properties)
            headers = {}
            confirm = conn.publish(harness.publish_target(queue), _body("probe"), message_id="probe-id")
        outcome = confirm.result(timeout=30)
        assert outcome.status is ConfirmStatus.CONFIRMED, outcome
        delivery = self.get_n(conn.consume(queue, prefetch=5), 1)[0]
        delivery.ack()
        return delivery.message_id == "probe-id", bool(headers) and dict(delivery.headers or {}).get("probe") == "yes"

    # ---- retransmission ---------------------------------------------------------------------
    def test_retransmit_resolves_once_and_every_id_arrives_once(self, conn: Any, harness: BrokerHarness) -> None:
        """Confirms pending when the connection is cut: each publish is sent again with
        its id and resolves once, confirmed, with its attempts; the consumer's
        dedupe_window hands each message out once and the queue ends empty."""
        if not harness.can_hold_confirms:
            pytest.skip(f"{harness.name}: the harness cannot hold confirms, so no confirm is pending at the cut")
        ids_carried, _ = self._carries(conn, harness)
        queue = harness.new_queue()
        publisher = conn.publisher(retransmit=True, confirm_timeout=5.0, max_attempts=20, retransmit_deadline=90.0)
        bodies = [_body("rt") for _ in range(20)]
        # One confirmed first: a round trip the first publish to a destination may need (a
        # streams publisher's declaration) is not held, so the rest go on the wire.
        confirms = [publisher.publish(harness.publish_target(queue), bodies[0])]
        assert confirms[0].result(timeout=30).status is ConfirmStatus.CONFIRMED
        with harness.hold_confirms(unwrap(conn)):
            confirms += [publisher.publish(harness.publish_target(queue), b) for b in bodies[1:]]
            harness.break_connection(unwrap(conn))
        outcomes = [c.result(timeout=120) for c in confirms]
        assert [o.status for o in outcomes] == [ConfirmStatus.CONFIRMED] * len(bodies), outcomes
        assert all(c.message_id for c in confirms), "retransmit assigns a message id when the caller gave none"
        assert len({c.message_id for c in confirms}) == len(bodies)
        if harness.holds_confirms_on_the_wire:
            assert publisher.retransmitted > 0 and max(o.attempts for o in outcomes) > 1, "the cut met pending confirms"
        else:  # parked publishes never left: sent once after the cut, which cost no attempt
            assert {o.attempts for o in outcomes} == {1}, outcomes
        # Consumed after the cut: a delivery in flight to a cut connection comes back only after
        # the broker's own timeout (JetStream: ack_wait), which is not what this test is about.
        consumer = conn.consume(queue, prefetch=50, dedupe_window=1000)
        got = [d.body for d in _drain(consumer)]
        if ids_carried:
            extra = sorted(set(got) - set(bodies)) + [b for b in set(got) if got.count(b) > 1]
            assert sorted(got) == sorted(bodies), (f"each message handed out exactly once: {len(got)} handed, "
                                                   f"missing {sorted(set(bodies) - set(got))}, extra {extra}, "
                                                   f"dropped {consumer.duplicates_dropped}")
        else:  # no id on the wire: copies cannot be told apart, but nothing is missing
            assert set(got) == set(bodies)
        self.broker_counts(harness, queue, ready=0, unacked=0)

    def test_refused_is_never_retransmitted(self, conn: Any, harness: BrokerHarness) -> None:
        target = harness.unroutable_target()
        oversized = harness.oversized_body()
        if target is None and oversized is None:
            support = conn.capabilities.support(Verb.CONFIRM_REFUSED)
            pytest.skip(f"{harness.name}: no publish can be made to be refused (confirm_refused is "
                        f"{support.level.value}: {support.how or 'no refusal declared'}), so there is "
                        "nothing a retransmit could wrongly repeat")
        queue = harness.new_queue()
        publisher = conn.publisher(retransmit=True, confirm_timeout=10.0)
        if target is not None:
            outcome = publisher.publish(target, _body("refused")).result(timeout=30)
        else:
            assert oversized is not None
            outcome = publisher.publish(harness.publish_target(queue), oversized).result(timeout=60)
        assert outcome.status is ConfirmStatus.REFUSED and outcome.attempts == 1, outcome
        assert publisher.retransmitted == 0

    def test_retransmit_keeps_the_callers_id_and_answers_in_one_attempt(self, conn: Any,
                                                                         harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        publisher = conn.publisher(retransmit=True)
        confirm = publisher.publish(harness.publish_target(queue), _body("id"), message_id="mine-1")
        outcome = confirm.result(timeout=30)
        assert outcome.status is ConfirmStatus.CONFIRMED and outcome.attempts == 1
        assert confirm.message_id == "mine-1" and publisher.retransmitted == 0

    # ---- duplicate detection ------------------------------------------------------------------
    def test_dedupe_window_hands_out_one_of_two_copies(self, conn: Any, harness: BrokerHarness) -> None:
        ids_carried, _ = self._carries(conn, harness)
        queue = harness.new_queue()
        message_id = f"dup-{uuid.uuid4().hex[:8]}"
        body = _body("dup")
        first = conn.publish(harness.publish_target(queue), body, message_id=message_id).result(timeout=30)
        second = conn.publish(harness.publish_target(queue), body, message_id=message_id).result(timeout=30)
        assert first.status is ConfirmStatus.CONFIRMED and second.status is ConfirmStatus.CONFIRMED
        broker_deduplicated = "duplicate" in second.reason  # JetStream: Nats-Msg-Id within its window
        consumer = conn.consume(queue, prefetch=10, dedupe_window=10)
        got = _drain(consumer)
        if not ids_carried:
            assert len(got) == 2 and consumer.duplicates_dropped == 0, "no id on the wire: nothing dropped"
        else:
            assert [d.body for d in got] == [body], "the application sees one copy"
            assert consumer.duplicates_dropped == (0 if broker_deduplicated else 1)
        self.broker_counts(harness, queue, ready=0, unacked=0)  # the dropped copy was acked, not left behind

    def test_dedupe_window_forgets_the_oldest(self, conn: Any, harness: BrokerHarness) -> None:
        """A window of 2 remembers the two ids acked last: after ids 0, 1, 2 are acked, a
        copy of id 0 (it left the window) is handed out again and a copy of id 2 (in it)
        is dropped. Checked against what the broker stored: a copy the broker itself
        dropped (JetStream's ``Nats-Msg-Id`` within its duplicate_window, confirmed with
        reason "duplicate") never reaches the consumer, so it is expected nowhere."""
        ids_carried, _ = self._carries(conn, harness)
        queue = harness.new_queue()
        run = uuid.uuid4().hex[:6]
        consumer = conn.consume(queue, prefetch=10, dedupe_window=2)
        for i in range(3):
            conn.publish(harness.publish_target(queue), _body("w"), message_id=f"{run}-{i}").result(timeout=30)
        assert len(_drain(consumer)) == 3
        stored: dict[bytes, int] = {}  # body of each copy the broker stored -> the id it carries
        for i in (0, 2):
            body = _body(f"again{i}")
            outcome = conn.publish(harness.publish_target(queue), body, message_id=f"{run}-{i}").result(timeout=30)
            assert outcome.status is ConfirmStatus.CONFIRMED, outcome
            if "duplicate" not in outcome.reason:
                stored[body] = i
        again = _drain(consumer)
        if ids_carried:  # id 0 left the window of 2 (ids 1 and 2 are in it): handed out; id 2 dropped
            expected = sorted(body for body, i in stored.items() if i == 0)
            dropped = sum(1 for i in stored.values() if i == 2)
        else:  # no id on the wire: the window cannot tell copies apart, so it drops none
            expected, dropped = sorted(stored), 0
        handed = sorted(d.body for d in again)
        assert handed == expected, (f"handed out {handed}, expected {expected}: the broker stored "
                                    f"{ {b: f'{run}-{i}' for b, i in stored.items()} }")
        assert consumer.duplicates_dropped == dropped, (consumer.duplicates_dropped, dropped)
        self.broker_counts(harness, queue, ready=0, unacked=0)
        if ids_carried and not stored:
            # Every copy dropped by the broker: nothing reached the window. Say so rather than pass
            # on an empty result (the other brokers' runs of this test check the window).
            pytest.skip(f"{harness.name}: the broker de-duplicated both copies itself (confirm reason "
                        "'duplicate'), so no copy reached the consumer's dedupe_window")

    # ---- loss detection -----------------------------------------------------------------------
    def _gap_round(self, conn: Any, harness: BrokerHarness, on_gap: Any) -> tuple[Any, str]:
        """Publish numbers 1..5 of one producer, number 3 to another queue: the consumer never sees it."""
        queue, elsewhere = harness.new_queue(), harness.new_queue()
        producer = f"p-{uuid.uuid4().hex[:8]}"
        publisher = conn.publisher(sequence=True, producer_id=producer)
        for number in range(1, 6):
            target = elsewhere if number == 3 else queue
            assert publisher.publish(harness.publish_target(target), _body(f"seq{number}")).result(timeout=30).confirmed
        return conn.consume(queue, prefetch=10, on_gap=on_gap), producer

    @staticmethod
    def _numbered_publish_is_refused(conn: Any, harness: BrokerHarness) -> None:
        """Where headers do not reach the consumer (MQTT 3.1.1 carries the body only), no
        gap could ever be claimed: a numbered publish is refused before sending instead."""
        queue = harness.new_queue()
        publisher = conn.publisher(sequence=True, producer_id=f"p-{uuid.uuid4().hex[:8]}")
        with pytest.raises(InvalidOptionError):
            publisher.publish(harness.publish_target(queue), _body("seq"))
        SuiteHelpers.broker_counts(harness, queue, ready=0)  # nothing was sent

    def test_sequence_gap_is_reported_with_its_numbers(self, conn: Any, harness: BrokerHarness) -> None:
        _, headers_carried = self._carries(conn, harness)
        if not headers_carried:  # the declared behaviour where headers are not carried
            self._numbered_publish_is_refused(conn, harness)
        else:
            seen: list[tuple[str, tuple[int, ...]]] = []
            consumer, producer = self._gap_round(conn, harness, lambda p, m: seen.append((p, m)))
            got = _drain(consumer)
            assert len(got) == 4
            assert seen == [(producer, (3,))]
            assert consumer.gaps == 1 and consumer.missing == {producer: [3]}

    def test_sequence_gap_raises_when_asked(self, conn: Any, harness: BrokerHarness) -> None:
        _, headers_carried = self._carries(conn, harness)
        if not headers_carried:  # the declared behaviour where headers are not carried
            self._numbered_publish_is_refused(conn, harness)
        else:
            self._gap_raises(conn, harness)

    def _gap_raises(self, conn: Any, harness: BrokerHarness) -> None:
        consumer, producer = self._gap_round(conn, harness, "raise")
        # get() raises once the delivery showing the gap (number 4) has arrived; what came
        # before it is handed out first, the delivery that showed the gap is not.
        handed: list[bytes] = []
        with pytest.raises(DataLossError) as info:
            for _ in range(5):
                delivery = consumer.get(timeout=15)
                assert delivery is not None, f"no DataLossError after {len(handed)} deliveries"
                handed.append(delivery.body)
                delivery.ack()
        assert info.value.missing == (3,) and info.value.producer == producer
        assert not any(body.startswith(b"seq4") for body in handed), handed
