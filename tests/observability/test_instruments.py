"""Every instrument with a real, non-zero count from real traffic on a real broker.

``test_counts.py`` shows published / settled / the durations on every broker; here
each of the others is made to count by the scenario that produces it, and the
count is asserted exactly where the scenario fixes it:

* embedded broker (``local://``): received and redeliveries (requeue), dead-letter by
  policy (``max_deliveries``), labelled acks, retransmissions and the unconfirmed
  gauge (writes held, then a cut), stale refusals and reconnects (a cut);
* RabbitMQ through a :class:`~ackbridge.testing.proxy.FaultProxy` (a TCP reset):
  reconnects, stale refusals, redeliveries after the cut; retransmissions of
  publishes whose confirms the cut left unknown, and the unconfirmed gauge while the
  proxy holds the confirms.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import faults
from ackbridge.testing.proxy import FaultProxy
from tests.conftest import require_port
from tests.local.harness import LocalHarness
from tests.observability.conftest import Metrics

TIMEOUT = 30.0
SETTLED = "ackbridge.settled"


def settled(metrics: Metrics, verb: str, queue: str) -> float:
    return metrics.total(SETTLED, messaging__operation__name=verb, messaging__destination__name=queue)


def received(metrics: Metrics, queue: str) -> float:
    return metrics.total("ackbridge.received", messaging__destination__name=queue)


def redeliveries(metrics: Metrics, queue: str) -> float:
    return metrics.total("ackbridge.redeliveries", messaging__destination__name=queue)


def take(consumer: Any, n: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(n):
        delivery = consumer.get(timeout=TIMEOUT)
        assert delivery is not None, f"{len(got)} of {n} delivered"
        got.append(delivery)
    return got


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalHarness]:
    harness = LocalHarness(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


# ---- embedded broker ---------------------------------------------------------------------
def test_requeued_deliveries_count_as_received_and_redelivered(metrics: Metrics, local: LocalHarness) -> None:
    """5 published, taken, requeued, taken again and acked: 10 received, 5 of them redeliveries."""
    queue = local.new_queue()
    with ackbridge.connect(local.url()) as conn:
        for i in range(5):
            conn.publish(queue, f"m-{i}".encode(), message_id=f"m-{i}").result(TIMEOUT)
        consumer = conn.consume(queue, prefetch=10)
        first = take(consumer, 5)  # all five taken before any goes back: these are the originals
        assert not any(d.redelivered for d in first)
        assert received(metrics, queue) == 5 and redeliveries(metrics, queue) == 0
        for delivery in first:
            delivery.requeue()
        again = take(consumer, 5)
        assert all(d.redelivered for d in again) and sorted(d.body for d in again) == sorted(d.body for d in first)
        for delivery in again:
            delivery.ack()
        assert received(metrics, queue) == 10
        assert redeliveries(metrics, queue) == 5
        assert settled(metrics, "requeue", queue) == 5 and settled(metrics, "ack", queue) == 5
        assert metrics.count("ackbridge.settle.duration", messaging__destination__name=queue) == 10
        consumer.close()
    eventually(lambda: (local.ready(queue), local.unacked(queue)) == (0, 0), message="queue empty")


def test_a_poison_message_dead_lettered_by_max_deliveries(metrics: Metrics, local: LocalHarness) -> None:
    """max_deliveries=2, requeued twice: the third delivery is admitted and dead-lettered
    by the policy, counted as ``settled{dead_letter}`` (not as a reject)."""
    queue = local.new_queue(dead_letter=True)
    with ackbridge.connect(local.url()) as conn:
        conn.publish(queue, b"poison", message_id="poison").result(TIMEOUT)
        consumer = conn.consume(queue, prefetch=5, max_deliveries=2)
        for _ in range(2):
            take(consumer, 1)[0].requeue()
        eventually(lambda: local.dead_lettered(queue) == [b"poison"], timeout=TIMEOUT,
                   message="the poison message dead-lettered")
        eventually(lambda: settled(metrics, "dead_letter", queue) == 1, timeout=TIMEOUT,
                   message="settled{dead_letter} == 1")
        assert consumer.dead_lettered_by_policy == 1
        assert settled(metrics, "requeue", queue) == 2
        assert settled(metrics, "reject", queue) == 0 and settled(metrics, "ack", queue) == 0
        assert received(metrics, queue) == 3  # the third delivery too: admitted, then dead-lettered
        assert redeliveries(metrics, queue) == 2
        consumer.close()
    assert (local.ready(queue), local.unacked(queue)) == (0, 0)


def test_labelled_acks_are_counted_by_label_and_status(metrics: Metrics, local: LocalHarness) -> None:
    """Three labels answered (the broker's 200 and two issued by the consumer), one never
    answered (408 on timeout, received by nobody): three counted, one point each."""
    queue = local.new_queue()
    labels = ("broker-persisted", "db-written", "indexed", "never-sent")
    with ackbridge.connect(local.url()) as conn:
        confirm = conn.publish(queue, b"labelled", requested_acks=labels, ack_timeout=2.0)
        consumer = conn.consume(queue, prefetch=5)
        delivery = take(consumer, 1)[0]
        delivery.acknowledge("db-written", 201)
        delivery.acknowledge("indexed", 503)
        delivery.ack()
        result = confirm.wait_acks()
        assert {k: v.status for k, v in result.acks.items()} == {
            "broker-persisted": 200, "db-written": 201, "indexed": 503, "never-sent": 408}
        got = {(p.attributes["ackbridge.ack.label"], p.attributes["ackbridge.ack.status"]): p.value
               for p in metrics.points("ackbridge.labelled_acks")}
        assert got == {("broker-persisted", 200): 1, ("db-written", 201): 1, ("indexed", 503): 1}, got
        consumer.close()


def test_a_cut_with_publishes_unwritten_counts_unconfirmed_then_retransmissions(
        metrics: Metrics, local: LocalHarness) -> None:
    """10 publishes held (group commit paused): the gauge reads 10. A cut makes each
    unknown; each is sent again and confirmed on its second attempt: 10 retransmissions,
    10 published (confirmed, counted once), one reconnect, the gauge back to 0."""
    queue = local.new_queue()
    k = 10
    with ackbridge.connect(local.url()) as conn:
        publisher = conn.publisher(retransmit=True, confirm_timeout=TIMEOUT, max_attempts=5)
        with faults(conn).writes_held():
            confirms = [publisher.publish(queue, f"r-{i}".encode(), message_id=f"r-{i}") for i in range(k)]
            assert metrics.total("ackbridge.unconfirmed") == k
            assert metrics.total("ackbridge.retransmissions") == 0
            faults(conn).sever("test cut with writes held")
            eventually(lambda: metrics.total("ackbridge.reconnects") == 1, timeout=TIMEOUT, message="one reconnect")
        outcomes = [c.result(timeout=TIMEOUT) for c in confirms]
        assert [(o.status, o.attempts) for o in outcomes] == [(ConfirmStatus.CONFIRMED, 2)] * k, outcomes
        assert publisher.retransmitted == k
        assert metrics.total("ackbridge.retransmissions", messaging__destination__name=queue) == k
        assert metrics.total("ackbridge.published", ackbridge__outcome="confirmed") == k
        assert metrics.total("ackbridge.published", ackbridge__outcome="unknown") == 0
        assert metrics.count("ackbridge.confirm.duration") == k
        assert metrics.total("ackbridge.unconfirmed") == 0
    assert metrics.total("ackbridge.reconnects") == 1, "closing the connection is no reconnect"
    assert local.ready(queue) == k, "the unwritten originals never reached the broker: each is there once"


def test_settling_after_a_cut_is_refused_and_counted(metrics: Metrics, local: LocalHarness) -> None:
    queue = local.new_queue()
    with ackbridge.connect(local.url()) as conn:
        for i in range(3):
            conn.publish(queue, f"s-{i}".encode()).result(TIMEOUT)
        consumer = conn.consume(queue, prefetch=10)
        got = take(consumer, 3)
        faults(conn).sever("test cut")
        eventually(lambda: metrics.total("ackbridge.reconnects") == 1, timeout=TIMEOUT, message="one reconnect")
        for delivery in got:
            with pytest.raises(ackbridge.StaleDeliveryError):
                delivery.ack()
        assert metrics.total("ackbridge.stale_refused", messaging__destination__name=queue) == 3
        assert settled(metrics, "ack", queue) == 0, "a refused settlement is not a settlement"
        again = take(consumer, 3)  # the broker took the leases back and hands them out again
        assert all(d.redelivered for d in again)
        for delivery in again:
            delivery.ack()
        assert redeliveries(metrics, queue) == 3 and received(metrics, queue) == 6
        consumer.close()
    assert metrics.total("ackbridge.reconnects") == 1


# ---- RabbitMQ through a proxy: a real cut (TCP reset) ------------------------------------
@pytest.fixture
def rabbit() -> Iterator[tuple[Any, FaultProxy, str]]:
    require_port(5672, "RabbitMQ")
    require_port(15672, "RabbitMQ management API")
    from tests.rabbitmq.harness import TEST_PASSWORD, TEST_USER, RabbitHarness

    harness = RabbitHarness("classic")
    proxy = FaultProxy(5672)
    try:
        yield harness, proxy, f"amqp://{TEST_USER}:{TEST_PASSWORD}@127.0.0.1:{proxy.port}/"
    finally:
        proxy.close()
        harness.cleanup()


@pytest.mark.rabbitmq
def test_rabbitmq_cut_counts_a_reconnect_stale_refusals_and_redeliveries(
        metrics: Metrics, rabbit: tuple[Any, FaultProxy, str]) -> None:
    """3 deliveries held unsettled when the proxy resets the TCP connection: one
    reconnect; settling them is refused (3 stale); RabbitMQ hands them out again,
    marked redelivered (3 redeliveries, 6 received); acked, the queue ends empty."""
    harness, proxy, url = rabbit
    queue = harness.new_queue()
    with ackbridge.connect(url) as conn:
        for i in range(3):
            conn.publish(queue, f"c-{i}".encode()).result(TIMEOUT)
        consumer = conn.consume(queue, prefetch=10)
        got = take(consumer, 3)
        assert metrics.total("ackbridge.reconnects") == 0
        seam = faults(conn)
        before = seam.generation
        proxy.reset()
        eventually(lambda: seam.generation > before, timeout=TIMEOUT, message="the client reconnected")
        assert metrics.total("ackbridge.reconnects") == 1
        for delivery in got:
            with pytest.raises(ackbridge.StaleDeliveryError):
                delivery.ack()
        assert metrics.total("ackbridge.stale_refused", messaging__destination__name=queue) == 3
        again = take(consumer, 3)
        assert all(d.redelivered for d in again), [d.redelivered for d in again]
        assert sorted(d.body for d in again) == sorted(d.body for d in got)
        for delivery in again:
            delivery.ack()
        assert redeliveries(metrics, queue) == 3 and received(metrics, queue) == 6
        assert settled(metrics, "ack", queue) == 3
        consumer.close()
    assert metrics.total("ackbridge.reconnects") == 1, "closing the connection is no reconnect"
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), timeout=TIMEOUT,
               message="queue empty")


@pytest.mark.rabbitmq
def test_rabbitmq_unknown_confirms_from_a_cut_are_retransmitted_and_counted(
        metrics: Metrics, rabbit: tuple[Any, FaultProxy, str]) -> None:
    """The proxy holds RabbitMQ's confirms of 10 publishes the broker has stored: the
    gauge reads 10. The cut makes each unknown after it went on the wire; each is sent
    again and confirmed: 10 retransmissions, each publish counted once (confirmed),
    and the broker holds 20 copies (ids carried: a dedupe_window drops the extra)."""
    harness, proxy, url = rabbit
    queue = harness.new_queue()
    k = 10
    with ackbridge.connect(url) as conn:
        publisher = conn.publisher(retransmit=True, confirm_timeout=TIMEOUT, max_attempts=5)
        publisher.publish(queue, b"warm-up", message_id="warm-up").result(TIMEOUT)
        with proxy.held_replies():
            confirms = [publisher.publish(queue, f"r-{i}".encode(), message_id=f"r-{i}") for i in range(k)]
            eventually(lambda: harness.ready(queue) == k + 1, timeout=TIMEOUT,
                       message="RabbitMQ stored the held publishes (they went on the wire)")
            assert metrics.total("ackbridge.unconfirmed") == k
            assert metrics.total("ackbridge.retransmissions") == 0
            seam = faults(conn)
            before = seam.generation
            proxy.reset()
            eventually(lambda: seam.generation > before, timeout=TIMEOUT, message="the client reconnected")
        outcomes = [c.result(timeout=TIMEOUT) for c in confirms]
        assert [(o.status, o.attempts) for o in outcomes] == [(ConfirmStatus.CONFIRMED, 2)] * k, outcomes
        assert publisher.retransmitted == k
        assert metrics.total("ackbridge.retransmissions", messaging__destination__name=queue) == k
        assert metrics.total("ackbridge.published", ackbridge__outcome="confirmed") == k + 1
        assert metrics.total("ackbridge.published", ackbridge__outcome="unknown") == 0
        assert metrics.total("ackbridge.unconfirmed") == 0
        assert metrics.total("ackbridge.reconnects") == 1
        eventually(lambda: harness.ready(queue) == 2 * k + 1, timeout=TIMEOUT, message="originals and copies stored")
        consumer = conn.consume(queue, prefetch=50, dedupe_window=100)
        bodies = sorted(d.body for d in take(consumer, k + 1))
        assert bodies == sorted([b"warm-up", *(f"r-{i}".encode() for i in range(k))])
        eventually(lambda: consumer.duplicates_dropped == k, timeout=TIMEOUT, message="the copies dropped")
        consumer.close()

