"""drain() in one process, on the embedded broker: the deadline, the iteration face,
and the ``ackbridge.drained`` counter (the SIGTERM rows are in test_drain_on_sigterm.py).

* A handler that does not finish by the deadline: drain() returns with it counted
  ``abandoned``; its message is back in the queue (not acked, not dead-lettered) and
  the handler's late ack raises ConsumerClosedError.
* Iteration: deliveries the application took before the drain are waited for while
  another thread settles them (``finished``); nothing more is handed out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import ConsumerClosedError
from ackbridge.testing import eventually
from tests.local.harness import LocalHarness
from tests.observability.conftest import Metrics

N = 20


def filled(harness: LocalHarness) -> str:
    queue = harness.new_queue()
    with ackbridge.connect(harness.url()) as conn:
        assert all(conn.publish(queue, f"m-{i}".encode(), message_id=f"m-{i}").result(10).confirmed
                   for i in range(N))
    return queue


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    found = LocalHarness(tmp_path)
    try:
        yield found
    finally:
        found.cleanup()


def test_a_handler_past_the_deadline_is_abandoned_not_acked(harness: LocalHarness, metrics: Metrics) -> None:
    queue = filled(harness)
    release = threading.Event()
    late: list[BaseException] = []
    taken: list[str] = []

    def handler(delivery: ackbridge.Delivery) -> None:
        taken.append(delivery.body.decode())
        release.wait(30)  # held until the drain has given up on it
        try:
            delivery.ack()
        except ConsumerClosedError as exc:
            late.append(exc)

    with ackbridge.connect(harness.url(), prefetch=5) as conn:
        consumer = conn.consume(queue, handler=handler)
        eventually(lambda: taken, message="the handler holding a delivery")
        result = consumer.drain(timeout=0.5)
        release.set()
        eventually(lambda: late, message="the handler's late ack refused")
    assert result.abandoned == 1 and result.finished == 0 and not result.complete, result
    assert result.handed_back >= 1, result
    assert harness.dead_lettered(queue) == []
    assert harness.ready(queue) == N, "a delivery was acked or lost by the drain"
    assert metrics.total("ackbridge.drained", ackbridge__outcome="abandoned", messaging__destination__name=queue) == 1
    assert metrics.total("ackbridge.drained", ackbridge__outcome="handed_back") == result.handed_back


def began(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.getMessage().startswith("ackbridge: draining") for r in caplog.records)


def test_drain_waits_for_deliveries_the_application_took(harness: LocalHarness, metrics: Metrics,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ackbridge")
    queue = filled(harness)
    with ackbridge.connect(harness.url(), prefetch=10) as conn:
        consumer = conn.consume(queue)
        held = [consumer.get(timeout=10) for _ in range(3)]
        assert all(d is not None for d in held)
        outcome: list[Any] = []
        drainer = threading.Thread(target=lambda: outcome.append(consumer.drain(timeout=30)))
        drainer.start()
        eventually(lambda: began(caplog), message="the drain under way")
        assert consumer.get(timeout=0) is None, "handed out during a drain"
        for delivery in held:
            assert delivery is not None and drainer.is_alive(), "drain() returned before the deliveries were settled"
            delivery.ack()
        drainer.join(30)
    result = outcome[0]
    assert result.finished == 3 and result.abandoned == 0, result
    assert harness.ready(queue) == N - 3 and harness.unacked(queue) == 0 and harness.dead_lettered(queue) == []
    assert metrics.total("ackbridge.drained", ackbridge__outcome="finished") == 3


def test_async_drain_waits_for_deliveries_the_application_took(harness: LocalHarness,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ackbridge")
    queue = filled(harness)

    async def main() -> Any:
        async with await ackbridge.connect_async(harness.url(), prefetch=10) as conn:
            consumer = await conn.consume(queue)
            held = [await consumer.get(timeout=10) for _ in range(2)]
            draining = asyncio.get_running_loop().create_task(consumer.drain(timeout=30))
            while not began(caplog):
                await asyncio.sleep(0)  # the task runs up to its first wait: the drain began
            assert await consumer.get(timeout=0) is None, "handed out during a drain"
            for delivery in held:
                assert delivery is not None and not draining.done()
                await delivery.ack()
            return await draining

    result = asyncio.run(main())
    assert result.finished == 2 and result.abandoned == 0, result
    assert harness.ready(queue) == N - 2 and harness.unacked(queue) == 0 and harness.dead_lettered(queue) == []
