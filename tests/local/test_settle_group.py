"""Settles that arrive together share one transaction (issue 39), and each one still
returns only after its own rows changed in the file, refused whole when stale.

To make settles queue up behind a commit on demand these tests hold what the
commit waits for: the file's write lock (as another process's transaction
would) or the transport's lock (white box: every settle takes it to commit).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge import StaleDeliveryError
from ackbridge.messages import WireSettle
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge_local.connection import LocalTransport
from ackbridge_local.receiving import PendingSettle, SettleGroup
from tests.local.harness import LocalHarness
from tests.local.rows import ack_of, delivered, one, publish, rows_with, take_lease, transport_on, write_lock_held

THREADS = 8


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[LocalHarness]:
    made = LocalHarness(tmp_path)
    yield made
    made.cleanup()


def test_acks_arriving_together_share_one_commit_and_each_returns_after_its_row_is_gone(
        harness: LocalHarness) -> None:
    queue = harness.new_queue()
    bodies = [f"m{i}".encode() for i in range(THREADS)]
    publish(harness, queue, bodies)
    with ackbridge.connect(harness.url()) as conn:
        # One consumer per thread: a consumer puts its own settles on the wire one call
        # at a time (the core's drain pass), so only several of them meet in the transport.
        consumers = [conn.consume(queue, prefetch=1) for _ in range(THREADS)]
        deliveries = [consumer.get(timeout=10) for consumer in consumers]
        group = transport_of(conn)._settles  # type: ignore[attr-defined]
        groups, settles = group.groups, group.settles
        returned: list[tuple[bytes, int]] = []

        def ack(delivery: Any) -> None:
            delivery.ack()
            returned.append((delivery.body, rows_with(harness.path, delivery.body)))

        threads = [threading.Thread(target=ack, args=(delivery,)) for delivery in deliveries]
        with write_lock_held(harness.path):
            for thread in threads:
                thread.start()
            eventually(lambda: group.unfinished == THREADS, message="every ack waiting for a commit")
            assert returned == [], "an ack() returned before its commit"
            assert [rows_with(harness.path, body) for body in bodies] == [1] * THREADS
        for thread in threads:
            thread.join(30)
        # Each row was gone from the file when its ack() returned.
        assert sorted(returned) == sorted((body, 0) for body in bodies)
        assert group.settles - settles == THREADS
        # The first waited for the write lock alone; every other one went in the next transaction.
        assert group.groups - groups <= 2, f"{group.groups - groups} transactions for {THREADS} acks"
    assert harness.ready(queue) == 0 and harness.unacked(queue) == 0


def settle_as_a_group(transport: LocalTransport, first: list[WireSettle],
                      second: list[WireSettle]) -> tuple[str, str]:
    """Settle *first* and *second* on two threads, queued while the transport's lock is
    held here, so that one group takes both: how each ended."""
    outcomes = {}

    def settle(name: str, ops: list[WireSettle]) -> None:
        try:
            transport.settle(ops)
            outcomes[name] = "settled"
        except StaleDeliveryError:
            outcomes[name] = "stale"

    group = transport._settles
    groups, settles = group.groups, group.settles
    threads = [threading.Thread(target=settle, args=("first", first)),
               threading.Thread(target=settle, args=("second", second))]
    with transport._lock:
        for count, thread in enumerate(threads, start=1):
            thread.start()
            eventually(lambda count=count: group.unfinished == count,
                       message=f"{count} settle(s) waiting")
    for thread in threads:
        thread.join(30)
    assert (group.groups - groups, group.settles - settles) == (1, 2), "not settled as one group"
    return outcomes["first"], outcomes["second"]


@pytest.mark.parametrize("stale_first", [False, True], ids=["stale-queued-behind", "stale-queued-first"])
def test_a_stale_settle_in_a_group_is_refused_and_writes_nothing(harness: LocalHarness,
                                                                 stale_first: bool) -> None:
    queue = harness.new_queue()
    publish(harness, queue, [b"a", b"b"])
    with transport_on(harness, queue) as (transport, events):
        before = delivered(events, 2)
        # A cut: both rows return to the queue and are leased again, under the next
        # generation and with the same row ids; the old delivery's tag now names the new one's row.
        transport.end_generation("test: the generation ends")
        after = eventually(lambda: events.delivered[2:] if len(events.delivered) == 4 else None)
        stale, valid = one(before, b"a"), one(after, b"b")
        assert stale.wire_tag == one(after, b"a").wire_tag and stale.generation < valid.generation
        if stale_first:
            assert settle_as_a_group(transport, ack_of(stale), ack_of(valid)) == ("stale", "settled")
        else:
            assert settle_as_a_group(transport, ack_of(valid), ack_of(stale)) == ("settled", "stale")
        assert rows_with(harness.path, b"b") == 0
        # The stale ack touched nothing: "a" is still leased, to the live generation.
        assert rows_with(harness.path, b"a") == 1 and harness.unacked(queue) == 1


def test_a_settle_whose_lease_was_taken_leaves_the_rest_of_its_group_applied(harness: LocalHarness) -> None:
    """The settle that lost a lease is refused whole (its other row stays leased), the
    settle beside it in the group is applied."""
    queue = harness.new_queue()
    publish(harness, queue, [b"a", b"b", b"c"])
    with transport_on(harness, queue, prefetch=3) as (transport, events):
        messages = delivered(events, 3)
        take_lease(harness.path, b"a")
        lost, kept, beside_lost = one(messages, b"a"), one(messages, b"b"), one(messages, b"c")
        assert settle_as_a_group(transport, ack_of(kept), ack_of(beside_lost) + ack_of(lost)) == ("settled", "stale")
        assert rows_with(harness.path, b"b") == 0
        assert rows_with(harness.path, b"a") == 1, "the ack of a row this owner no longer held was applied"
        assert rows_with(harness.path, b"c") == 1, "part of a refused settle was applied"
        assert events.ended == [1], "the owner that lost a lease kept its generation"


class Interrupted(BaseException):
    """What the test's signal raises in the main thread, as SIGINT raises KeyboardInterrupt."""


@contextlib.contextmanager
def signal_raises(signum: int) -> Iterator[None]:
    def interrupt(*_: object) -> None:
        raise Interrupted

    previous = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def test_a_settle_interrupted_while_it_waits_is_not_applied_and_the_one_behind_it_returns() -> None:
    """KeyboardInterrupt in a settle waiting behind a commit: its settle leaves the queue
    unapplied, and the settle queued behind it is committed and returns."""
    assert threading.current_thread() is threading.main_thread(), "signals are handled in the main thread"
    committing, release = threading.Event(), threading.Event()
    committed: list[PendingSettle] = []

    def commit(group: list[PendingSettle]) -> None:
        committed.extend(group)
        committing.set()
        release.wait(30)  # the first commit runs until the test lets it end

    settles = SettleGroup(threading.Lock(), commit)
    first, interrupted, behind = PendingSettle([]), PendingSettle([]), PendingSettle([])
    leader = threading.Thread(target=settles.settle, args=(first,), daemon=True)
    leader.start()
    assert committing.wait(10)
    follower = threading.Thread(target=settles.settle, args=(behind,), daemon=True)

    def orchestrate() -> None:
        eventually(lambda: settles.unfinished == 2, message="the main thread's settle queued")
        follower.start()
        eventually(lambda: settles.unfinished == 3, message="a settle queued behind it")
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

    helper = threading.Thread(target=orchestrate, daemon=True)
    with signal_raises(signal.SIGUSR1), pytest.raises(Interrupted):
        helper.start()
        settles.settle(interrupted)
    release.set()
    for thread in (helper, leader, follower):
        thread.join(10)
    assert not follower.is_alive(), "the settle queued behind the interrupted one never returned"
    assert committed == [first, behind], "the interrupted settle was applied, or the one behind it was not"
    assert behind.done and behind.error is None and not interrupted.done
    assert settles.unfinished == 0
