"""Conformance: labelled acknowledgement requests, aggregated per label."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ackbridge.capabilities import Level, Verb
from ackbridge.errors import InvalidLabelError, UnsupportedVerbError
from ackbridge.testing.harness import BrokerHarness
from ackbridge.testing.suite_helpers import SuiteHelpers
from ackbridge.testing.suite_helpers import body_of as _body

#: How long the labelled-ack wait may take to return before it counts as never returning:
#: a failure bound only (the ack_timeout under test is 1 s), not a claim about speed.
ACK_WAIT_DEADLINE = 60.0


class LabelConformance(SuiteHelpers):
    def _labelled_publish(self, conn: Any, harness: BrokerHarness, labels: tuple[str, ...],
                          issue: dict[str, int], timeout: float) -> Any:
        """Publish requesting *labels*, receive it, issue *issue* and ack: the confirm
        (None where labelled acks are declared unsupported, after checking they are refused)."""
        queue = harness.new_queue()
        if conn.capabilities.support(Verb.LABELLED_ACKS).level is Level.UNSUPPORTED:
            with pytest.raises(UnsupportedVerbError):
                conn.publish(harness.publish_target(queue), b"x", requested_acks=labels)
            return None
        confirm = conn.publish(harness.publish_target(queue), _body("labels"), requested_acks=labels,
                               ack_timeout=timeout)
        consumer = conn.consume(queue, prefetch=5)
        delivery = self.get_n(consumer, 1)[0]
        assert set(delivery.requested_acks) == {label for label in labels if label != "broker-persisted"}
        for label, status in issue.items():
            delivery.acknowledge(label, status, {"label": label})
        delivery.ack()
        return confirm

    def _labelled_round(self, conn: Any, harness: BrokerHarness, labels: tuple[str, ...],
                        issue: dict[str, int], timeout: float) -> Any:
        confirm = self._labelled_publish(conn, harness, labels, issue, timeout)
        return None if confirm is None else confirm.wait_acks()

    def test_labelled_acks_all_succeed(self, conn: Any, harness: BrokerHarness) -> None:
        result = self._labelled_round(conn, harness, ("broker-persisted", "db-written"), {"db-written": 200}, 20)
        if result is None:
            return
        assert result.status == 200
        assert result.acks["broker-persisted"].status == 200
        assert result.acks["db-written"].payload == {"label": "db-written"}

    def test_labelled_acks_aggregate_failure(self, conn: Any, harness: BrokerHarness) -> None:
        result = self._labelled_round(conn, harness, ("broker-persisted", "db-written", "indexed"),
                                      {"db-written": 201, "indexed": 503}, 20)
        if result is None:
            return
        assert result.status == 424
        assert {k: v.status for k, v in result.acks.items()} == {
            "broker-persisted": 200, "db-written": 201, "indexed": 503}

    def test_labelled_acks_time_out(self, conn: Any, harness: BrokerHarness) -> None:
        """A label nobody issues ends as 408 once the request's ack_timeout passes.

        The event shown is that ``wait_acks()``, given no bound of its own, returns at
        all: only the request's ack_timeout can end that wait, as "never-sent" is never
        issued. It runs on a thread so that a wait the timeout does not end fails here
        with a message, not at the suite's per-test timeout."""
        confirm = self._labelled_publish(conn, harness, ("broker-persisted", "never-sent"), {}, 1.0)
        if confirm is None:
            return  # declared unsupported: _labelled_publish asserted the refusal
        outcome: list[Any] = []
        returned = threading.Event()

        def wait() -> None:
            try:
                outcome.append(confirm.wait_acks())
            finally:
                returned.set()

        threading.Thread(target=wait, name="labelled-acks-wait", daemon=True).start()
        assert returned.wait(timeout=ACK_WAIT_DEADLINE), \
            "wait_acks() never returned: the 1 s ack_timeout did not end the wait"
        assert len(outcome) == 1, "wait_acks() raised instead of reporting the timed-out label"
        result = outcome[0]
        assert result.acks["never-sent"].status == 408
        assert result.acks["broker-persisted"].status == 200, "the confirm answers broker-persisted"
        assert result.status == 424

    def test_labels_are_validated(self, conn: Any, harness: BrokerHarness) -> None:
        queue = harness.new_queue()
        for bad in ("a b", "x", "", "é-label", "y" * 101):
            with pytest.raises(InvalidLabelError):
                conn.publish(harness.publish_target(queue), b"x", requested_acks=(bad,))
        if conn.capabilities.support(Verb.LABELLED_ACKS).level is Level.UNSUPPORTED:
            return
        conn.publish(harness.publish_target(queue), _body("lbl"), requested_acks=("custom-one",), ack_timeout=5)
        delivery = self.get_n(conn.consume(queue, prefetch=5), 1)[0]
        for label in ("broker-persisted", "spark-committed", "not-requested", "bad label"):
            with pytest.raises(InvalidLabelError):
                delivery.acknowledge(label, 200)
        with pytest.raises(InvalidLabelError, match="status"):
            delivery.acknowledge("custom-one", 99)
        delivery.ack()
