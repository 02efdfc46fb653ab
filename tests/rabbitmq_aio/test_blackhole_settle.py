"""A settle on the aio-pika transport never hangs when the network goes silent (issue 38).

aiormq hands every frame to its writer task through a bounded queue (10 frames).
Under a blackhole (a proxy that stops forwarding without closing) the writer stalls
in ``drain()`` behind a large publish, the queue fills, and an ack's ``Queue.put``
waits for room that never comes: aiormq closes the connection when its heartbeat
check fires, but nothing wakes a put already waiting. Here the acks run while that
happens; each must return or raise (StaleDeliveryError / ConnectionLostError) once
the loss is seen, and the broker must hold every message again: none was acked on it.

Two ways out, one test each: with heartbeats the link sees aiormq close the connection
and withdraws the waiting put; with heartbeats off (nothing notices the silence) the
transport's stall limit ends the generation itself (``aio/stalls.py``).

The stall is made on demand: the public publish path (``ACKBRIDGE_AIORMQ_FAST_PATH=0``,
``Channel.basic_publish``) waits for the writer to drain each publish, so one publish
larger than the socket buffers between client and proxy parks the writer. The cap
(``HANG_CAP``) only detects a hang; the assertions are on outcomes and broker counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from ackbridge.connect import connect, connect_async
from ackbridge.errors import ConnectionLostError, StaleDeliveryError
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from ackbridge.testing.proxy import FaultProxy
from tests.rabbitmq.harness import AMQP_PORT, TEST_PASSWORD, TEST_USER, queue_counts
from tests.rabbitmq_aio.harness import AioPikaHarness

pytestmark = pytest.mark.rabbitmq

#: A hang detector, far above the loss-detection bound (aiormq: 3 x (heartbeat + 1) s).
HANG_CAP = 60.0
#: More acks than aiormq's frame queue holds (10), so some must wait for room.
DELIVERIES = 40
#: Larger than what the loopback socket buffers take before the writer's drain() waits.
STALL_BYTES = 24 * 1024 * 1024


@pytest.fixture
def harness() -> Iterator[AioPikaHarness]:
    made = AioPikaHarness("classic")
    yield made
    made.cleanup()


def _fill(queue: str, harness: AioPikaHarness, count: int) -> None:
    with connect(harness.url(), reconnect=False) as conn:
        handles = [conn.publish(queue, f"m{i}".encode()) for i in range(count)]
        assert all(h.result(10).confirmed for h in handles)


@pytest.mark.parametrize(("heartbeat", "seen_as"), [
    (1, "connection lost"),  # aiormq's heartbeat check closed it; the link withdrew the put
    (0, "presumed dead"),  # no heartbeat: the stall limit (6 x (connect_timeout + 1) s) ended it
])
def test_acks_in_flight_at_a_blackhole_return_or_raise(harness: AioPikaHarness, monkeypatch: pytest.MonkeyPatch,
                                                       heartbeat: int, seen_as: str) -> None:
    queue, stall_queue = harness.new_queue(), harness.new_queue()
    _fill(queue, harness, DELIVERIES)
    monkeypatch.setenv("ACKBRIDGE_AIORMQ_FAST_PATH", "0")  # publishes wait for the writer's drain()
    proxy = FaultProxy(AMQP_PORT)
    outcomes: list[str] = []
    refusals: list[str] = []

    async def run() -> None:
        url = f"amqp://{TEST_USER}:{TEST_PASSWORD}@127.0.0.1:{proxy.port}/"
        conn = await connect_async(url, heartbeat=heartbeat, connect_timeout=2, reconnect=False,
                                   asyncio_transport="aio-pika")
        try:
            consumer = await conn.consume(queue, prefetch=DELIVERIES)
            held = []
            for _ in range(DELIVERIES):
                delivery = await consumer.get(10)
                assert delivery is not None
                held.append(delivery)
            transport = transport_of(conn)
            before = transport.generation
            proxy.blackhole(True)
            # Nothing reaches the broker from here on: this publish parks aiormq's writer.
            await conn.publish(stall_queue, b"x" * STALL_BYTES)
            for delivery in held:
                try:
                    await asyncio.wait_for(delivery.ack(), HANG_CAP)
                    outcomes.append("returned")
                except (StaleDeliveryError, ConnectionLostError) as exc:
                    outcomes.append(type(exc).__name__)
                    refusals.append(str(exc))
                except TimeoutError:
                    pytest.fail(f"ack {len(outcomes) + 1} of {DELIVERIES} hung for {HANG_CAP:.0f} s on a "
                                f"blackholed connection (outcomes so far: {outcomes})")
            assert transport.generation > before  # the loss ended the generation: the broker redelivers
        finally:
            await asyncio.wait_for(conn.close(), HANG_CAP)

    try:
        asyncio.run(run())
    finally:
        proxy.close()  # resets the sockets: the broker sees the connection go
    assert len(outcomes) == DELIVERIES, outcomes
    # aiormq's queue took some acks before it filled; the one that found it full, and every
    # later one, was refused: the connection was gone before it could be written.
    assert outcomes[-1] == "StaleDeliveryError", outcomes
    assert outcomes.count("returned") <= 12, outcomes  # at most what the queue and the writer held
    assert seen_as in refusals[0], refusals[0]  # the first refusal names how the loss was found
    # Nothing was acked on the broker: every message is ready again, none is held.
    eventually(lambda: queue_counts().get(queue) == (DELIVERIES, 0), timeout=60,
               message="every message ready again on the broker")
