"""Settling by ack handle on NATS JetStream (connection-free acks), asserted on what
the server holds: one connection receives and closes leaving its deliveries pending,
another settles them by their handles (sync and async faces)."""

from __future__ import annotations

import asyncio

import pytest

import ackbridge
from ackbridge.capabilities import Level
from ackbridge.messages import WireVerb
from ackbridge.testing.harness import eventually
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats


def _publish(harness: NatsHarness, queue: str, n: int) -> None:
    with ackbridge.connect(harness.url()) as conn:
        for i in range(n):
            conn.publish(queue, f"m{i}".encode(), message_id=f"m{i}").result(timeout=10)


def _receive_and_leave(harness: NatsHarness, queue: str, n: int) -> list[str]:
    """Take *n* deliveries on one connection, close it leaving them; their handles."""
    conn = ackbridge.connect(harness.url())
    consumer = conn.consume(queue, prefetch=n)
    got = [consumer.get(timeout=10) for _ in range(n)]
    handles = [d.ack_handle for d in got if d is not None]
    assert len(handles) == n
    conn.close(leave_unsettled=True)
    return handles


def test_sync_face_acks_what_another_connection_received(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    _publish(harness, queue, 5)
    handles = _receive_and_leave(harness, queue, 5)
    assert all(h.startswith("$JS.ACK.") for h in handles)
    # Closed without a -NAK: the server still holds all five delivered and pending.
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 5), message="left pending")
    assert harness.redelivered(queue) == 0
    with ackbridge.connect(harness.url()) as other:
        assert other.capabilities.connection_free_acks.level is Level.NATIVE
        result = other.settle_handles([*handles, handles[0]])
    assert (result.settled, result.refused) == (5, 1)
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), message="acked by handle")
    assert harness.stream_messages(queue) == 0  # work-queue stream: acked messages are gone


def test_async_face_acks_and_requeues_by_handle(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    _publish(harness, queue, 4)

    async def run() -> list[str]:
        conn = await ackbridge.connect_async(harness.url())
        consumer = await conn.consume(queue, prefetch=4)
        got = [await consumer.get(timeout=10) for _ in range(4)]
        handles = [d.ack_handle for d in got if d is not None]
        await conn.close(leave_unsettled=True)
        other = await ackbridge.connect_async(harness.url())
        try:
            acked = await other.settle_handles(handles[:2])
            requeued = await other.settle_handles(handles[2:], WireVerb.REQUEUE)
            assert (acked.settled, requeued.settled) == (2, 2)
            with pytest.raises(ackbridge.UnsupportedVerbError, match="reject by ack handle"):
                await other.settle_handles(handles[2:], WireVerb.REJECT)
            again = await other.consume(queue, prefetch=4)
            back = [await again.get(timeout=10) for _ in range(2)]
            assert all(d is not None and d.redelivered for d in back)
            assert sorted(d.message_id or "" for d in back if d is not None) == ["m2", "m3"]
            for d in back:
                assert d is not None
                await d.ack()
        finally:
            await other.close()
        return handles

    asyncio.run(run())
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), message="all settled")
    assert harness.stream_messages(queue) == 0


def test_leaving_requeues_what_was_never_handed_out(harness: NatsHarness) -> None:
    queue = harness.new_queue()
    _publish(harness, queue, 5)
    # ack_wait of an hour: nothing comes back by ack_wait while this test runs, so any
    # redelivery below is the -NAK's (an event, not a time bound).
    url = harness.url(ack_wait=3600)
    conn = ackbridge.connect(url)
    consumer = conn.consume(queue, prefetch=5)
    assert harness.consumer_info(queue).config.ack_wait == 3600
    taken = [consumer.get(timeout=10) for _ in range(2)]
    eventually(lambda: harness.unacked(queue) == 5, message="all five delivered to the consumer")
    handles = [d.ack_handle for d in taken if d is not None]
    conn.close(leave_unsettled=True)
    # A leaving connection asks for nothing more: the server delivered the five and no
    # more. (It used to ask again for the credit the -NAKs freed, and JetStream sent the
    # three straight back into that request, to a consumer that dropped them on close
    # and, leaving, never released them: pending until ack_wait, not back at once.)
    assert harness.consumer_info(queue).delivered.consumer_seq == 5
    # The three never handed out were -NAKed: back at once, not after ack_wait;
    # the two taken stay pending (nats-server counts a -NAKed one ack-pending until redelivered).
    with ackbridge.connect(url) as other:
        rest = other.consume(queue, prefetch=5)
        again = [rest.get(timeout=10) for _ in range(3)]
        assert rest.get(timeout=1) is None  # the two taken ones are not redelivered
        assert harness.unacked(queue) == 5
        assert sorted(d.message_id or "" for d in again if d is not None) == ["m2", "m3", "m4"]
        for d in again:
            assert d is not None
            d.ack()
        other.settle_handles(handles)
    eventually(lambda: (harness.ready(queue), harness.unacked(queue)) == (0, 0), message="all settled")


def test_a_handle_that_is_no_reply_subject_is_refused(harness: NatsHarness) -> None:
    with ackbridge.connect(harness.url()) as conn, pytest.raises(ackbridge.InvalidOptionError, match="reply subject"):
        conn.settle_handles(["orders.created"])
