"""Conformance: labelled acknowledgement requests, aggregated per label."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ackbridge.capabilities import Level, Verb
from ackbridge.errors import InvalidLabelError, UnsupportedVerbError
from ackbridge.testing.harness import BrokerHarness
from ackbridge.testing.suite_helpers import SuiteHelpers
from ackbridge.testing.suite_helpers import body_of as _body


class LabelConformance(SuiteHelpers):
    def _labelled_round(self, conn: Any, harness: BrokerHarness, labels: tuple[str, ...],
                        issue: dict[str, int], timeout: float) -> Any:
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
        return confirm.wait_acks()

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
        started = time.monotonic()
        result = self._labelled_round(conn, harness, ("broker-persisted", "never-sent"), {}, 1.0)
        if result is None:
            return
        assert result.acks["never-sent"].status == 408
        assert result.status == 424
        assert time.monotonic() - started < 60

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
