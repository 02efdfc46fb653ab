"""Which offset an ack stores: the last of the acked prefix, never past a delivery not acked,
for single and cumulative acks in any order, one StoreOffset frame for the acks settled
before the loop turns, and what waits sent when the consumer stops. The consumer's bookkeeping runs against fakes
of the rstream client and the chunk subscription (a log of the StoreOffset calls); the
broker side of a store is covered in test_streams_transport.py."""

from __future__ import annotations

import asyncio
import collections

import pytest

from ackbridge.errors import UnsupportedVerbError
from ackbridge.messages import ACK, REJECT, InboundMessage, WireSettle
from ackbridge_rabbitmq_streams import sections
from ackbridge_rabbitmq_streams.receiving import StreamConsumer

pytestmark = pytest.mark.rabbitmq_streams


class FakeClient:
    def __init__(self) -> None:
        self.stored: list[int] = []

    def is_connection_alive(self) -> bool:
        return True

    async def store_offset(self, stream: str, reference: str, offset: int) -> None:
        self.stored.append(offset)


class FakeSubscription:
    async def credit(self, chunks: int = 1) -> None:
        return None

    async def close(self) -> None:
        return None


def _consumer(offsets: range, prefetch: int = 100) -> tuple[StreamConsumer, FakeClient, list[InboundMessage]]:
    """A consumer that has handed out *offsets* on generation 1."""
    delivered: list[InboundMessage] = []
    consumer = StreamConsumer("sub", "s", prefetch=prefetch, reference="ref", initial="first",
                              deliver=lambda _sub, message: delivered.append(message), fast=True)
    client = FakeClient()
    consumer.client, consumer.generation = client, 1  # type: ignore[assignment]
    consumer.sub = FakeSubscription()  # type: ignore[assignment]
    consumer._buffer = collections.deque((o, sections.data_section(b"m%d" % o)) for o in offsets)
    consumer.hand_out()
    return consumer, client, delivered


def _ack(tag: int, *, multiple: bool = False) -> WireSettle:
    return WireSettle(ACK, tag, 1, "sub", multiple=multiple)


async def _turns(count: int = 3) -> None:
    """Let the loop turn: the store waits for one, its frame's task and the credit task run."""
    for _ in range(count):
        await asyncio.sleep(0)


async def _settle(consumer: StreamConsumer, *ops: WireSettle) -> None:
    await consumer.settle(ops)
    await _turns()


@pytest.mark.asyncio
async def test_single_acks_store_the_end_of_the_acked_prefix_only() -> None:
    consumer, client, delivered = _consumer(range(10, 16))
    assert [m.wire_tag for m in delivered] == list(range(10, 16))
    await _settle(consumer, _ack(12))
    await _settle(consumer, _ack(11))
    assert client.stored == []  # 10 is not acked: nothing may be stored past it
    await _settle(consumer, _ack(10))
    assert client.stored == [12]
    await _settle(consumer, _ack(14))
    await _settle(consumer, _ack(14))  # acked twice: counted once
    assert client.stored == [12]
    await _settle(consumer, _ack(13))
    assert client.stored == [12, 14]
    assert consumer.resume_at == 15
    assert consumer._unsettled == 1


@pytest.mark.asyncio
async def test_a_cumulative_ack_settles_through_its_tag_and_not_past_it() -> None:
    consumer, client, _ = _consumer(range(0, 8))
    await _settle(consumer, _ack(6))
    await _settle(consumer, _ack(3, multiple=True))
    assert client.stored == [3]  # 4 and 5 are open: 6 waits
    await _settle(consumer, _ack(5, multiple=True))
    assert client.stored == [3, 6]
    await _settle(consumer, _ack(7), _ack(9, multiple=True))  # a tag past every delivery: through the last
    assert client.stored == [3, 6, 7]
    assert consumer._unsettled == 0


@pytest.mark.asyncio
async def test_acks_free_prefetch_room_and_the_next_records_are_handed_out() -> None:
    consumer, client, delivered = _consumer(range(0, 6), prefetch=2)
    assert [m.wire_tag for m in delivered] == [0, 1]
    await _settle(consumer, _ack(1))
    assert [m.wire_tag for m in delivered] == [0, 1, 2]  # one slot free: one more
    await _settle(consumer, _ack(2, multiple=True))
    assert [m.wire_tag for m in delivered] == [0, 1, 2, 3, 4]
    assert client.stored == [2]


@pytest.mark.asyncio
async def test_requeue_or_reject_of_a_log_record_is_refused() -> None:
    consumer, client, _ = _consumer(range(0, 2))
    with pytest.raises(UnsupportedVerbError):
        await _settle(consumer, WireSettle(REJECT, 0, 1, "sub"))
    assert client.stored == []


@pytest.mark.asyncio
async def test_acks_settled_before_the_loop_turns_send_one_store_frame() -> None:
    consumer, client, _ = _consumer(range(0, 10))
    for tag in range(0, 6):  # six acks, each its own settle call, no turn of the loop between
        await consumer.settle([_ack(tag)])
    assert client.stored == []
    await _turns()
    assert client.stored == [5]  # one frame, the end of the acked prefix
    await consumer.settle([_ack(8)])
    await consumer.settle([_ack(6)])
    await _turns()
    assert client.stored == [5, 6]  # 7 is open: 8 waits


@pytest.mark.asyncio
async def test_stopping_sends_the_offset_still_waiting() -> None:
    consumer, client, _ = _consumer(range(0, 4))
    await _turns()  # the credit task ends: stop() has nothing to wait for, the loop does not turn
    await consumer.settle([_ack(2, multiple=True)])
    await consumer.stop()  # before the loop turned
    assert client.stored == [2]
    await _turns()
    assert client.stored == [2]  # the scheduled turn finds nothing left to store
