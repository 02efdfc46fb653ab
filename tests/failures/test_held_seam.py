"""The fault seam's holds on the loop-driven plugins (NATS, RabbitMQ streams), whose
held work lives in the core's ``ackbridge.transport.held_work``: held publishes and
settlements stay client-side (the broker holds nothing new, settles nothing),
go out on release, and a cut ends held publishes as never sent (attempts 0)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ackbridge
from ackbridge.messages import ConfirmOutcome, ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import faults


def _nats() -> Any:
    from tests.nats.harness import NatsHarness

    return NatsHarness()


def _streams() -> Any:
    from tests.rabbitmq_streams.harness import StreamsHarness

    return StreamsHarness()


HARNESSES = [pytest.param(_nats, id="nats", marks=pytest.mark.nats),
             pytest.param(_streams, id="rabbitmq-streams", marks=pytest.mark.rabbitmq_streams)]


@pytest.fixture(params=HARNESSES)
def harness(request: pytest.FixtureRequest) -> Iterator[Any]:
    made: Callable[[], Any] = request.param
    h = made()
    try:
        yield h
    finally:
        h.cleanup()


def _held_total(harness: Any, queue: str) -> int:
    """Messages the broker holds unsettled (a stream counts them all in ready())."""
    return int(harness.ready(queue)) + (int(harness.unacked(queue)) if harness.counts_deliveries else 0)


def test_held_publishes_leave_on_release(harness: Any) -> None:
    queue = harness.new_queue(dead_letter=False)
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        with faults(conn).publishes_held():
            confirms = [conn.publish(queue, f"m-{i}".encode()) for i in range(5)]
            time.sleep(0.5)  # room for a publish that wrongly left to be confirmed
            assert not any(c.done() for c in confirms)
            assert _held_total(harness, queue) == 0, "a held publish reached the broker"
        assert {c.result(timeout=30).status for c in confirms} == {ConfirmStatus.CONFIRMED}
        eventually(lambda: _held_total(harness, queue) == 5, message="5 stored after the release")


def test_held_settlements_leave_on_release(harness: Any) -> None:
    queue = harness.new_queue(dead_letter=False)
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        for i in range(5):
            assert conn.publish(queue, f"m-{i}".encode()).result(timeout=30).confirmed
        consumer = conn.consume(queue, prefetch=10)
        deliveries = [consumer.get(timeout=30) for _ in range(5)]
        with faults(conn).writes_held():
            for delivery in deliveries:
                assert delivery is not None
                delivery.ack()
            time.sleep(0.5)  # room for an ack that wrongly left to be applied
            assert _held_total(harness, queue) == 5, "a held ack reached the broker"
        eventually(lambda: _held_total(harness, queue) == 0, message="every ack applied after the release")


def test_a_cut_ends_held_publishes_unsent(harness: Any) -> None:
    """On the asyncio face a publish is held before publish() returns, so the cut
    certainly meets them held (the sync face hands publishes to the I/O thread)."""
    queue = harness.new_queue(dead_letter=False)

    async def run() -> list[ConfirmOutcome]:
        conn = await ackbridge.connect_async(harness.url(), **harness.connect_options())
        try:
            with faults(conn).publishes_held():
                confirms = [await conn.publish(queue, f"m-{i}".encode()) for i in range(3)]
                faults(conn).sever("test cut")
                return [await c for c in confirms]
        finally:
            await conn.close()

    outcomes = asyncio.run(run())
    assert {(o.status, o.attempts) for o in outcomes} == {(ConfirmStatus.UNKNOWN, 0)}, outcomes
    assert all("never sent" in o.reason for o in outcomes), outcomes
