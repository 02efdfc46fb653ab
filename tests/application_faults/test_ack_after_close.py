"""An ack after another thread closed the consumer: it raises, it never passes silently.

The application's pull loop holds a delivery while another thread closes the consumer
(a shutdown path, a supervisor). Closing cancels the subscription, so the broker takes
the delivery back. On main the loop's later ``ack()`` returned normally and sent nothing
(a DEBUG line): the application counted the message handled, and it came back, a
duplicate no one was told about. Now it raises ``ConsumerClosedError``. The row counts
"acked, yet delivered again" (must be 0) and checks the held message was redelivered.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import StaleDeliveryError
from ackbridge.testing import BrokerHarness
from tests.application_faults.on_broker import drain, on_rabbitmq
from tests.scoreboard.checker import History, ScoreRow, markdown, score


def row_ack_after_close(harness: BrokerHarness, n: int = 40, *,
                        close_after: int = 10) -> tuple[ScoreRow, dict[str, Any]]:
    """Consume *n* ids; after *close_after* are acked, another thread closes the consumer
    while the loop holds the next one, which the loop then tries to ack."""
    queue = harness.new_queue()
    history = History()
    ids = [f"closed-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        for message_id in ids:
            history.attempted.add(message_id)
            history.outcome(message_id, conn.publish(harness.publish_target(queue), message_id.encode(),
                                                     message_id=message_id).result(10).status)
    acked: list[str] = []
    seen: dict[str, Any] = {"raised": None, "held": None}
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=n)
        holding, closed = threading.Event(), threading.Event()

        def supervisor() -> None:
            holding.wait(30)
            consumer.close()  # another thread shuts the consumer down
            closed.set()

        threading.Thread(target=supervisor, daemon=True).start()
        while len(acked) <= close_after:
            delivery = consumer.get(timeout=10)
            assert delivery is not None, "the queue ran dry before the close"
            if len(acked) == close_after:
                seen["held"] = delivery.body.decode()
                holding.set()
                closed.wait(30)
            try:
                delivery.ack()
            except StaleDeliveryError as exc:
                seen["raised"] = type(exc).__name__
                break
            acked.append(delivery.body.decode())
    drained = drain(harness, queue, n - len(acked))
    history.delivered = Counter(acked) + Counter(drained)
    seen.update({"acked": len(acked), "drained": len(drained),
                 "acked_yet_redelivered": sorted(set(acked) & set(drained)),
                 "held_redelivered": seen["held"] in drained,
                 "ready_after": _ready(harness, queue)})
    return score(harness.name, "consumer", "ack after another thread closed the consumer", history), seen


def _ready(harness: BrokerHarness, queue: str) -> int | None:
    try:
        return harness.ready(queue)
    except NotImplementedError:
        return None  # a log keeps its records: nothing to count as ready


def _check(row: ScoreRow, seen: dict[str, Any]) -> None:
    print(markdown([row]), seen)
    assert row.lost == 0 and row.unexpected == 0, markdown([row])
    assert seen["raised"] == "ConsumerClosedError", f"the ack after close passed silently: {seen}"
    assert not seen["acked_yet_redelivered"], f"acked without error, yet delivered again: {seen}"
    assert seen["held_redelivered"] and seen["ready_after"] in (0, None), seen


@pytest.mark.rabbitmq
def test_ack_after_close_raises_and_the_message_comes_back() -> None:
    row, seen = on_rabbitmq(row_ack_after_close)
    _check(row, seen)
