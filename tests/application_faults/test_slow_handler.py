"""A handler slower than the connection's heartbeats allow: every message acked once.

prefetch x handler time is made longer than three heartbeat intervals. A handler
run inline on the transport's I/O thread held back heartbeats and acks until the
broker dropped the connection: every ack was lost and the same batch came back
(on main before the handler thread: 0 acked, the batch handled again and again).
The row counts on the broker's side: what the queue still holds, unacked and
dead-lettered, and whether the consumer's connection survived (one generation).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import ackbridge
from ackbridge.testing import BrokerHarness, eventually
from tests.application_faults.on_broker import on_rabbitmq
from tests.scoreboard.checker import History, ScoreRow, markdown, score

#: Heartbeat, prefetch and handler time of the CI row: 10 x 0.4 s = 4 s, over 3 heartbeats of 1 s.
HEARTBEAT_S, PREFETCH, HANDLER_S = 1.0, 10, 0.4


def row_slow_handler(harness: BrokerHarness, n: int = 30, *, prefetch: int = PREFETCH, handler_s: float = HANDLER_S,
                     heartbeat: float = HEARTBEAT_S) -> tuple[ScoreRow, dict[str, Any]]:
    """Publish *n* ids, consume them with a handler taking *handler_s* each; the row
    and what the broker and the consumer saw (generations, ready, unacked, dead)."""
    assert prefetch * handler_s > 3 * heartbeat, "the row must outlast three heartbeats per prefetched batch"
    queue = harness.new_queue()
    history = History()
    delivered: Counter[str] = Counter()
    generations: set[int] = set()
    lock = threading.Lock()
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        ids = [f"slow-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
        for message_id in ids:
            history.attempted.add(message_id)
            history.outcome(message_id, conn.publish(harness.publish_target(queue), message_id.encode(),
                                                     message_id=message_id).result(10).status)
    start = time.monotonic()
    with ackbridge.connect(harness.url(heartbeat=heartbeat), prefetch=prefetch, **harness.connect_options()) as conn:

        def handler(delivery: ackbridge.Delivery) -> None:
            time.sleep(handler_s)
            with lock:
                delivered[delivery.body.decode()] += 1
                generations.add(delivery.generation)
            delivery.ack()

        consumer = conn.consume(queue, handler=handler)
        # Every id handled (or the time a livelock would take), then two more handler runs'
        # worth of time in which a lost ack would bring a message back.
        with contextlib.suppress(AssertionError):
            eventually(lambda: len(delivered) >= n, timeout=n * handler_s * 3 + 15, message="every id handled")
        time.sleep(max(2 * heartbeat, handler_s * 2))
        consumer.close()
    history.elapsed_s = time.monotonic() - start
    history.delivered = delivered
    seen: dict[str, Any] = {"generations": sorted(generations), "ready": _told(harness.ready, queue),
                            "unacked": _told(harness.unacked, queue),
                            "dead": _told(lambda q: len(harness.dead_lettered(q)), queue)}
    history.dead_lettered = {f"dead-{i}" for i in range(seen["dead"] or 0)}
    return score(harness.name, "consumer", f"slow handler ({prefetch} x {handler_s} s > 3 x {heartbeat} s heartbeat)",
                 history), seen


def _told(count: Callable[[str], int], queue: str) -> int | None:
    """What the broker says, or None where it cannot tell (a stream keeps no unacked count)."""
    try:
        return count(queue)
    except NotImplementedError:
        return None


@pytest.mark.rabbitmq
@pytest.mark.slow
def test_slow_handler_keeps_the_connection_and_acks_each_message_once() -> None:
    row, seen = on_rabbitmq(row_slow_handler)
    print(markdown([row]), seen)
    assert row.lost == 0 and row.unexpected == 0, markdown([row])
    assert row.duplicated == 0, f"handled twice: the acks were lost with the connection\n{markdown([row])}"
    assert len(seen["generations"]) == 1, f"the connection was dropped and reopened: {seen}"
    assert (seen["ready"], seen["unacked"], seen["dead"]) == (0, 0, 0), f"the broker still holds some: {seen}"
