"""A handler slower than JetStream's ``ack_wait``, on a consumer with ``dedupe_window`` (issue 32, finding 2).

JetStream redelivers the same stream sequence while the application still works on
the first delivery. That redelivery is not a retransmitted copy stored separately:
acking it as a duplicate settles the very message the application has not decided
on, and the application's later ``requeue()`` of the first delivery finds nothing
(before the fix: every message lost, not dead-lettered).

The application here holds each first delivery (a handler working longer than
``ack_wait``); when a later delivery of the same id arrives it requeues the held
one and acks the later one -- half of the ids requeue first, half ack first. A held
delivery whose redelivery never arrives is requeued after ``3 * ack_wait``. Only
acks count as delivered: a requeued delivery gave the message back.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import ackbridge
from ackbridge.testing.harness import eventually
from tests.application_faults.on_broker import on_nats
from tests.scoreboard.checker import History, ScoreRow, markdown, score

BROKER = "nats-jetstream"
FAULT = "ack_wait < handler, dedupe_window, requeue"


def row_ack_wait_shorter_than_handler(harness: Any, n: int = 30, ack_wait: float = 1.0,
                                      deadline_s: float = 60.0) -> tuple[ScoreRow, dict[str, Any]]:
    """Publish *n* unique ids, consume them as above on ``ack_wait=ack_wait``, drain, and
    read what the broker holds. Returns the row and the broker-side facts (for asserts)."""
    history = History()
    queue = harness.new_queue(dead_letter=True)
    facts: dict[str, Any] = {"undeclared_repeats": 0, "held_expired": 0}
    started = time.monotonic()
    with ackbridge.connect(harness.url(ack_wait=ack_wait)) as conn:
        ids = [f"aw-{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
        confirms = [(mid, conn.publish(queue, mid.encode(), message_id=mid)) for mid in ids]
        for mid, confirm in confirms:
            history.attempted.add(mid)
            history.outcome(mid, confirm.result(timeout=10).status)
        consumer = conn.consume(queue, prefetch=4 * n, dedupe_window=10 * n)
        held: dict[str, tuple[Any, float]] = {}  # first deliveries the "handler" still works on
        gave_back: set[str] = set()  # ids whose first delivery was requeued
        requeue_first = set(ids[::2])
        deadline = started + deadline_s
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            delivery = consumer.get(timeout=0.1)
            now = time.monotonic()
            if delivery is not None:
                idle_since = now
                mid = str(delivery.message_id)
                if mid not in held and mid not in gave_back:
                    held[mid] = (delivery, now)
                    continue
                if not delivery.redelivered or (delivery.delivery_count or 0) < 2:
                    facts["undeclared_repeats"] += 1  # a repeat the application was not told about
                first = held.pop(mid, None)
                if first is not None and mid in requeue_first:
                    first[0].requeue()
                    gave_back.add(mid)
                delivery.ack()
                history.delivered[mid] += 1
                if first is not None and mid not in requeue_first:
                    first[0].requeue()  # after the ack: JetStream ignores it (the message is gone)
                    gave_back.add(mid)
            for mid, (first_delivery, since) in list(held.items()):
                if now - since > 3 * ack_wait:  # its redelivery never reached the application
                    held.pop(mid)
                    first_delivery.requeue()
                    gave_back.add(mid)
                    facts["held_expired"] += 1
            if not held and (len(history.delivered) == n or now - idle_since > 3 * ack_wait + 1):
                break
        facts["held_at_end"] = len(held)
        facts["duplicates_dropped"] = consumer.duplicates_dropped
        consumer.close()
    history.elapsed_s = time.monotonic() - started

    def settled_on_broker() -> bool:
        info = harness.consumer_info(queue)
        return not info.num_pending and not info.num_ack_pending

    try:
        eventually(settled_on_broker, timeout=3 * ack_wait + 5, message="broker holds nothing pending")
    except AssertionError:
        pass  # reported through the facts below
    info = harness.consumer_info(queue)
    facts.update(num_pending=int(info.num_pending or 0), num_ack_pending=int(info.num_ack_pending or 0),
                 stream_messages=harness.stream_messages(queue), dead_lettered=len(harness.dead_lettered(queue)))
    history.dead_lettered = {m.decode() for m in harness.dead_lettered(queue)}
    return score(BROKER, "consumer", FAULT, history), facts


@pytest.mark.nats
@pytest.mark.slow
def test_redelivery_within_ack_wait_is_not_acked_as_a_duplicate() -> None:
    row, facts = on_nats(row_ack_wait_shorter_than_handler)
    report = markdown([row]) + f"\nbroker and application facts: {facts}\n"
    assert row.attempted == row.confirmed, report
    assert row.lost == 0 and row.unexpected == 0, report
    assert row.passed, report
    # What the broker holds at the end: nothing pending, nothing unacked, nothing stored or dead-lettered.
    assert (facts["num_pending"], facts["num_ack_pending"], facts["stream_messages"], facts["dead_lettered"]) \
        == (0, 0, 0, 0), report
    assert facts["held_at_end"] == 0, report
    # Every repeat reaching the application was declared a redelivery; each id's acks
    # are bounded by the deliveries JetStream made of it (the first is requeued, so at most 2 acks).
    assert facts["undeclared_repeats"] == 0, report
    assert row.duplicated <= row.confirmed, report


def test_the_window_acks_only_copies_stored_apart_from_what_is_held() -> None:
    """The core rule, I/O-free: the same broker id while a delivery is held is handed out;
    another broker id, or none (no redelivery within a generation), is a copy to ack."""
    from ackbridge.kernel.guaranteed import DedupeWindow
    from ackbridge.messages import InboundMessage

    def delivery(tag: int, broker_id: Any) -> InboundMessage:
        return InboundMessage(tag, 1, b"", "q", message_id="m", broker_id=broker_id)

    window = DedupeWindow(10)
    assert not window.seen(delivery(1, ("S", 7)))
    assert not window.seen(delivery(2, ("S", 7)))  # ack_wait redelivered the held message
    assert window.seen(delivery(3, ("S", 8)))  # a retransmitted copy, stored apart
    assert window.seen(delivery(4, None))  # no broker id: the transport promises a separate copy
    window.settled("m", acked=False, broker_id=("S", 7))  # the first delivery requeued
    assert not window.seen(delivery(5, ("S", 7)))  # still held once: another redelivery is handed out
    window.settled("m", broker_id=("S", 7))
    window.settled("m", broker_id=("S", 7))
    assert window.seen(delivery(6, ("S", 7)))  # acked within the window: acking again loses nothing
    assert (window.dropped, window.redelivered_while_held) == (3, 2)


def test_a_delivery_on_a_newer_generation_than_the_held_one_is_the_message_again() -> None:
    """The core rule, I/O-free: a transport can redeliver on its new generation before the
    consumer hears the old one ended (tests/local/test_stale_race.py, under load). With no
    broker id, that delivery would otherwise read as a copy and be acked: the only stored
    message settled while the application holds a stale delivery of it (a loss)."""
    from ackbridge.kernel.guaranteed import DedupeWindow
    from ackbridge.messages import InboundMessage

    def delivery(tag: int, generation: int) -> InboundMessage:
        return InboundMessage(tag, generation, b"", "q", message_id="m")

    window = DedupeWindow(10)
    assert not window.seen(delivery(1, 1))
    assert not window.seen(delivery(2, 2))  # generation 1 ended: the message, handed out
    assert window.seen(delivery(3, 2))  # a second one on generation 2: a copy stored apart
    window.settled("m", broker_id=None, generation=2)
    window.settled("m", acked=False, broker_id=None, generation=1)  # the stale one, refused
    assert (window.dropped, window.redelivered_while_held) == (1, 0)
