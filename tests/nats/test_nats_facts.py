"""JetStream facts the plugin relies on, checked on the server (and through ackbridge)."""

from __future__ import annotations

import json

import pytest

import ackbridge
from ackbridge.messages import ConfirmStatus
from ackbridge.testing.harness import eventually
from ackbridge_nats.naming import DEFAULT_DURABLE, stream_name
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats


def test_retransmit_with_same_message_id_is_stored_once(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    with ackbridge.connect(harness.url()) as conn:
        first = conn.publish(queue, b"once", message_id="order-42").result(timeout=10)
        again = conn.publish(queue, b"once", message_id="order-42").result(timeout=10)
        other = conn.publish(queue, b"twice", message_id="order-43").result(timeout=10)
    assert first.status is ConfirmStatus.CONFIRMED and "duplicate" not in first.reason
    assert again.status is ConfirmStatus.CONFIRMED and again.reason.startswith("duplicate")
    assert other.status is ConfirmStatus.CONFIRMED
    assert harness.stream_messages(queue) == 2


def test_pub_ack_says_duplicate_on_the_wire(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    js = harness.raw.client.jetstream()
    acks = [harness.raw.run(lambda: js.publish(queue, b"x", headers={"Nats-Msg-Id": "m-1"})) for _ in range(2)]
    assert [a.duplicate for a in acks] == [None, True]
    assert acks[0].seq == acks[1].seq
    assert harness.stream_messages(queue) == 1


def test_prefetch_is_max_ack_pending_and_pull_credit(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    with ackbridge.connect(harness.url()) as conn:
        for i in range(6):
            conn.publish(queue, f"m{i}".encode()).result(timeout=10)
        consumer = conn.consume(queue, prefetch=4)
        got = [consumer.get(timeout=10) for _ in range(4)]
        assert all(got)
        assert harness.consumer_info(queue).config.max_ack_pending == 4
        eventually(lambda: harness.unacked(queue) == 4 and harness.ready(queue) == 2, message="4 in flight")
        for d in got:
            d.ack()  # type: ignore[union-attr]
        rest = [consumer.get(timeout=10) for _ in range(2)]
        for d in rest:
            d.ack()  # type: ignore[union-attr]
        eventually(lambda: harness.stream_messages(queue) == 0, message="work queue emptied by acks")
        assert harness.redelivered(queue) == 0


def test_requeue_counts_redelivery_server_side(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    with ackbridge.connect(harness.url()) as conn:
        conn.publish(queue, b"again").result(timeout=10)
        consumer = conn.consume(queue, prefetch=2)
        first = consumer.get(timeout=10)
        assert first is not None and first.delivery_count == 1
        first.requeue()
        second = consumer.get(timeout=10)
        assert second is not None and second.delivery_count == 2 and second.redelivered
        eventually(lambda: harness.redelivered(queue) == 1, message="num_redelivered == 1")
        second.ack()
        eventually(lambda: harness.unacked(queue) == 0 and harness.stream_messages(queue) == 0,
                   message="settled")


def test_dead_lettered_copy_names_its_origin(harness: NatsHarness) -> None:
    queue = harness.new_queue(dead_letter=True)
    with ackbridge.connect(harness.url()) as conn:
        conn.publish(queue, b"poison", message_id="p-1", headers={"kind": "bad"}).result(timeout=10)
        delivery = conn.consume(queue, prefetch=1).get(timeout=10)
        assert delivery is not None
        delivery.reject()
        eventually(lambda: harness.dead_lettered(queue) == [b"poison"], message="dead-lettered")
    copy = harness.dead_letter_messages(queue)[0]
    assert copy.headers["Ackbridge-Dead-Lettered-From"] == queue
    assert copy.headers["Ackbridge-Dead-Letter-Deliveries"] == "1"
    assert copy.headers["Ackbridge-Original-Message-Id"] == "p-1"
    assert copy.headers["kind"] == "bad"
    eventually(lambda: harness.stream_messages(queue) == 0, message="terminated message left the work queue")


def test_old_reply_subject_settles_only_its_own_message(harness: NatsHarness) -> None:
    """The issue's question: can a reply-subject ack of an old delivery touch another
    message? No: the subject names the stream sequence. It does settle the SAME
    message's later delivery (nats-server 2.9), which is why the core's generation
    rule still refuses stale settlements."""
    queue = harness.new_queue()
    client = harness.raw.client
    js = client.jetstream()
    for body in (b"one", b"two"):
        harness.raw.run(lambda body=body: js.publish(queue, body))
    stream = stream_name(queue)
    inbox = client.new_inbox()

    async def pull(n: int) -> list[object]:
        sub = await client.subscribe(inbox)
        await client.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{DEFAULT_DURABLE}",
                             json.dumps({"batch": n}).encode(), reply=inbox)
        got = [await sub.next_msg(timeout=5) for _ in range(n)]
        await sub.unsubscribe()
        return got

    first_one, = harness.raw.run(lambda: pull(1))
    harness.raw.run(lambda: client.publish(first_one.reply, b"-NAK"))
    again = harness.raw.run(lambda: pull(2))
    redelivered = next(m for m in again if m.data == b"one")
    assert redelivered.reply != first_one.reply
    harness.raw.run(lambda: client.request(first_one.reply, b"+ACK", timeout=5))  # the OLD subject
    eventually(lambda: harness.unacked(queue) == 1, message="old ack settled its own message only")
    assert harness.ready(queue) == 0  # "two" is still pending, untouched
    assert harness.stream_messages(queue) == 1
