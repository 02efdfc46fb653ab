"""The asyncio face of tests/rabbitmq/test_queue_deleted_under_consumer.py, on both asyncio
transports (``asyncio_transport=threaded``, the pika I/O thread, and ``aio-pika``): the
broker's basic.cancel for a deleted queue reaches the consumer as
SubscriptionCancelledError naming the queue, with one WARNING on ``ackbridge.rabbitmq``;
deliveries received before stay settle-able; another consumer on the connection goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from ackbridge.connect import connect_async
from ackbridge.errors import SubscriptionCancelledError
from tests.rabbitmq.harness import RabbitHarness
from tests.rabbitmq.test_queue_deleted_under_consumer import EVENT_WAIT_S, cancel_warnings, delete_queue_now

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def harness() -> Iterator[RabbitHarness]:
    made = RabbitHarness("classic")
    yield made
    made.cleanup()


@pytest.mark.parametrize("transport", ["threaded", "aio-pika"])
def test_get_and_iteration_raise_after_the_queue_is_deleted(harness: RabbitHarness, transport: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ackbridge.rabbitmq")
    doomed, other = harness.new_queue(), harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), queue_type="classic", asyncio_transport=transport)
        try:
            for i in range(2):
                assert (await (await conn.publish(doomed, f"d-{i}".encode())).result()).confirmed
            consumer = await conn.consume(doomed, prefetch=10)
            bystander = await conn.consume(other, prefetch=10)
            first = await consumer.get(timeout=EVENT_WAIT_S)
            assert first is not None
            assert harness.unacked(doomed) == 2
            delete_queue_now(doomed)
            second = await consumer.get(timeout=EVENT_WAIT_S)
            assert second is not None and second.body == b"d-1"
            with pytest.raises(SubscriptionCancelledError, match=doomed) as raised:
                await consumer.get(timeout=EVENT_WAIT_S)
            assert raised.value.source == doomed
            with pytest.raises(SubscriptionCancelledError, match=doomed):
                async for _ in consumer:
                    pytest.fail("nothing can arrive from a deleted queue")
            await first.ack()
            await second.ack()
            assert await bystander.get(timeout=0) is None  # not failed: the cancel was only doomed's
            assert (await (await conn.publish(other, b"still here")).result()).confirmed
            kept = await bystander.get(timeout=EVENT_WAIT_S)
            assert kept is not None and kept.body == b"still here"
            await kept.ack()
            await consumer.close()
            await bystander.close()
        finally:
            await conn.close()

    asyncio.run(run())
    assert len(cancel_warnings(caplog, doomed)) == 1, [r.getMessage() for r in caplog.records]
