"""A settlement that loses the race with a loss (the core's stale-settle race).

The transport learns of a loss before the core does: between the two, the
ledger still takes an ack, and the transport refuses it as stale. The caller
gets StaleDeliveryError ("nothing was sent and the broker will redeliver it"),
so the delivery must read undecided and stale, and the redelivery must be
handed out, not dropped as a copy of an acked message (``dedupe_window``).
The embedded broker holds the loss's event back to open that window on demand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge import StaleDeliveryError, State
from ackbridge.testing.faults import transport_of
from tests.local.harness import LocalHarness


class HeldLoss:
    """The transport's events, with ``generation_ended`` held until :meth:`release`."""

    def __init__(self, events: Any) -> None:
        self._events = events
        self.held: list[tuple[int, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)

    def generation_ended(self, generation: int, reason: str = "") -> None:
        self.held.append((generation, reason))

    def release(self) -> None:
        for generation, reason in self.held:
            self._events.generation_ended(generation, reason)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[LocalHarness]:
    made = LocalHarness(tmp_path)
    yield made
    made.cleanup()


def end_unheard(connection: Any) -> HeldLoss:
    """End the connection's generation in its transport; the core does not hear of it yet."""
    transport = transport_of(connection)
    held = HeldLoss(transport.events)
    transport.events = held
    transport.end_generation("test: the loss reached the transport first")
    assert held.held, "the embedded transport no longer reports the loss through events.generation_ended"
    return held


@pytest.mark.parametrize("dedupe", [False, True], ids=["plain", "dedupe_window"])
def test_an_ack_refused_as_stale_by_the_transport_reads_pending_and_the_message_returns(
        harness: LocalHarness, dedupe: bool) -> None:
    queue = harness.new_queue()
    options = {"dedupe_window": 100} if dedupe else {}
    with ackbridge.connect(harness.url()) as conn:
        conn.publish(queue, b"one", message_id="m-1").result(10)
        consumer = conn.consume(queue, prefetch=1, **options)
        old = consumer.get(timeout=10)
        assert old is not None
        held = end_unheard(conn)
        with pytest.raises(StaleDeliveryError, match="redeliver"):
            old.ack()
        assert old.state is State.PENDING
        assert old.stale
        held.release()
        # The broker gives it back on the next generation, and it is handed out:
        # the refused ack left no acked id behind to drop it as a copy.
        again = consumer.get(timeout=10)
        assert again is not None and again.body == b"one"
        again.ack()
    assert harness.ready(queue) == 0 and harness.unacked(queue) == 0


@pytest.mark.parametrize("dedupe", [False, True], ids=["plain", "dedupe_window"])
def test_async_an_ack_refused_as_stale_by_the_transport_reads_pending_and_the_message_returns(
        harness: LocalHarness, dedupe: bool) -> None:
    queue = harness.new_queue()
    options = {"dedupe_window": 100} if dedupe else {}

    async def run() -> None:
        conn = await ackbridge.connect_async(harness.url())
        try:
            await (await conn.publish(queue, b"one", message_id="m-1")).result(10)
            consumer = await conn.consume(queue, prefetch=1, **options)
            old = await consumer.get(timeout=10)
            assert old is not None
            held = end_unheard(conn)
            with pytest.raises(StaleDeliveryError, match="redeliver"):
                await old.ack()
            assert old.state is State.PENDING
            assert old.stale
            held.release()
            again = await consumer.get(timeout=10)
            assert again is not None and again.body == b"one"
            await again.ack()
        finally:
            await conn.close()

    asyncio.run(run())
    assert harness.ready(queue) == 0 and harness.unacked(queue) == 0
