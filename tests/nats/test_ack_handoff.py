"""The sync face hands each ack from the application's thread to the connection's I/O
loop (ackbridge.transport.loop_thread): acks queued while the loop's drain has not yet
found the queue empty share one wake-up. Its rule -- the wake-up flag is cleared only
with the queue seen empty, under the queue's lock -- is what keeps an ack from waiting
in the queue for a next one that may never come. Asserted on what the server holds:
acks from many threads at once all reach it with the connection left open, round after
round, each round with nothing queued after it. Consecutive queued settlements go out
in one call, but never across a generation: a stale one is dropped with its whole call.
The drain lives as long as the transport: close() waits for it to write what was queued
before, and leaves no thread behind."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

import ackbridge
from ackbridge.messages import WireSettle, WireVerb
from ackbridge.sync.consumer import Delivery
from ackbridge.testing.harness import eventually
from ackbridge.transport.loop_thread import _merged
from tests.nats.harness import NatsHarness

pytestmark = pytest.mark.nats

THREADS = 8
ROUNDS = 40
PER_THREAD = 2  # acks per thread per round


def _fill(harness: NatsHarness, queue: str, n: int) -> None:
    with ackbridge.connect(harness.url()) as conn:
        publisher = conn.publisher(window=n)
        for i in range(n):
            publisher.publish(queue, f"m{i}".encode())
        assert publisher.flush(timeout=30)


def _unacked_is(harness: NatsHarness, queue: str, count: int) -> Callable[[], bool]:
    return lambda: harness.unacked(queue) == count


def _ack_from_threads(deliveries: list[Delivery]) -> None:
    """Ack *deliveries* from THREADS threads released together."""
    start = threading.Barrier(THREADS)
    shares = [deliveries[i::THREADS] for i in range(THREADS)]
    failures: list[BaseException] = []

    def ack(share: list[Delivery]) -> None:
        try:
            start.wait(10)
            for delivery in share:
                delivery.ack()
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=ack, args=(share,)) for share in shares]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not failures, failures


def test_acks_from_many_threads_reach_the_server_without_a_later_one(
        harness: NatsHarness) -> None:
    queue = harness.new_queue()
    n = THREADS * PER_THREAD * ROUNDS
    _fill(harness, queue, n)
    with ackbridge.connect(harness.url()) as conn:
        consumer = conn.consume(queue, prefetch=n)
        held = [consumer.get(timeout=10) for _ in range(n)]
        deliveries = [d for d in held if d is not None]
        assert len(deliveries) == n
        eventually(lambda: harness.unacked(queue) == n, message="every delivery held unacked")
        left = n
        for round_ in range(ROUNDS):
            batch = deliveries[round_ * THREADS * PER_THREAD:(round_ + 1) * THREADS * PER_THREAD]
            _ack_from_threads(batch)
            left -= len(batch)
            # Nothing else is queued after these: each must reach the server on its own.
            eventually(_unacked_is(harness, queue, left), timeout=5,
                       message=f"round {round_}: {left} unacked on the server")
        consumer.close()
    assert (harness.ready(queue), harness.unacked(queue), harness.redelivered(queue)) == (0, 0, 0)
    assert harness.stream_messages(queue) == 0  # work-queue stream: acked messages are gone


def test_close_writes_what_was_queued_before_it(harness: NatsHarness) -> None:
    """The transport's close() lets the drain write everything queued before it, then
    closes the client (the drain lives on until a last mark, then ends with the loop).
    Asserted on each publish's confirm: all went on the wire (none is 'unsent', as they
    would be if the client closed first), and none is confirmed that the stream lacks.
    The stream's count alone cannot show it: NATS 2.9 stores only part of a burst whose
    publisher closes before the PubAcks, even after a flush (docs/broker-quirks.md)."""
    queue = harness.new_queue()
    n = 2000
    before = set(threading.enumerate())
    conn = ackbridge.connect(harness.url())
    inner = conn._transport.inner  # type: ignore[attr-defined]
    send = inner.send_prepared

    async def send_then_yield(*args: object) -> None:
        # A loop busy elsewhere: the drain gives way after each write, so close() finds
        # most of the burst still to be written (else the drain may finish it in one turn).
        await send(*args)
        await asyncio.sleep(0)

    inner.send_prepared = send_then_yield
    try:
        publisher = conn.publisher(window=n)
        confirms = [publisher.publish(queue, f"m{i}".encode()) for i in range(n)]
        # At once, past the publisher's flush: most of these are still queued for the loop.
        conn._transport.close()
    finally:
        conn.close()
    outcomes = [confirm.result(timeout=10) for confirm in confirms]
    assert [o for o in outcomes if o.attempts == 0] == []  # every one was written
    confirmed = sum(1 for o in outcomes if o.confirmed)
    eventually(lambda: confirmed <= harness.stream_messages(queue) <= n, timeout=5,
               message=f"the stream holding at least the {confirmed} confirmed")
    assert [t.name for t in set(threading.enumerate()) - before] == []  # its I/O thread ended


def _acks(generation: int, *tags: str) -> tuple[str, list[WireSettle]]:
    return "s", [WireSettle(WireVerb.ACK, tag, generation, "sub") for tag in tags]


def test_queued_settlements_join_only_within_one_generation() -> None:
    done = object()
    items = [_acks(1, "a"), _acks(1, "b", "c"), _acks(2, "d"), ("u", "sub", done), _acks(2, "e"), _acks(2, "f")]
    joined = [(item[0], [op.wire_tag for op in item[1]] if item[0] == "s" else item[1]) for item in _merged(items)]
    # Generation 1's acks apart from generation 2's (a stale run is dropped whole), and
    # nothing moves across the unsubscribe.
    assert joined == [("s", ["a", "b", "c"]), ("s", ["d"]), ("u", "sub"), ("s", ["e", "f"])]
