"""Leases for slow work: ``delivery.extend()`` keeps the broker from redelivering a
delivery under work three times its ack deadline; without it the broker's
redelivery is reported, never hidden (issue 36, item 3).

JetStream (``ack_wait=1``): with ``extend()`` every 0.3 s the consumer info's
``num_redelivered`` stays 0 and the one delivery is acked once; without it the
broker delivers the message again while it is held, which ackbridge logs as a
lapsed lease. The embedded broker (``lease_timeout=1``): the row keeps its one
lease (delivery count 1, same owner) through 3 s of work with ``extend()``, and
``extend()`` on a lease this connection lost raises StaleDeliveryError. RabbitMQ:
``extend()`` refuses (UnsupportedVerbError naming consumer_timeout) before anything
is sent, and a channel closed by consumer_timeout is reported as such.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika.exceptions as pe
import pytest

import ackbridge
from ackbridge.errors import AlreadySettledError, StaleDeliveryError, UnsupportedVerbError
from ackbridge.testing import eventually
from tests.conftest import require_port
from tests.observability.conftest import Metrics

#: The broker's deadline (s), and how long the "work" runs: three of them.
DEADLINE_S = 1.0
WORK_S = 3 * DEADLINE_S + 0.2
EXTEND_EVERY_S = 0.3
LAPSED = "again while an earlier delivery of it was held unsettled"


@pytest.fixture
def nats() -> Iterator[Any]:
    require_port(4222, "nats-server (JetStream)")
    from tests.nats.harness import NatsHarness

    harness = NatsHarness()
    try:
        yield harness
    finally:
        harness.cleanup()


def work(delivery: ackbridge.Delivery, *, extend: bool) -> list[float | None]:
    """Hold *delivery* for WORK_S (the slow work), extending its lease every EXTEND_EVERY_S."""
    granted: list[float | None] = []
    end = time.monotonic() + WORK_S
    while time.monotonic() < end:
        time.sleep(EXTEND_EVERY_S)
        if extend:
            granted.append(delivery.extend())
    return granted


async def work_async(delivery: ackbridge.AsyncDelivery, *, extend: bool) -> list[float | None]:
    granted: list[float | None] = []
    end = time.monotonic() + WORK_S
    while time.monotonic() < end:
        await asyncio.sleep(EXTEND_EVERY_S)
        if extend:
            granted.append(await delivery.extend())
    return granted


def run_face(face: str, url: str, queue: str, *, extend: bool, broker_side: Any) -> dict[str, Any]:
    """Take the one message, work on it (extending or not), read *broker_side()* while it
    is still held, then ack the first delivery; what the consumer saw (deliveries of it
    while held), what the broker said and what extend() returned."""
    if face == "sync":
        with ackbridge.connect(url, prefetch=10) as conn:
            consumer = conn.consume(queue)
            first = consumer.get(timeout=10)
            assert first is not None
            granted = work(first, extend=extend)
            again = consumer.get(timeout=0.5 if extend else 10)  # without extend: the redelivery held meanwhile
            held = broker_side()
            first.ack()
            if again is not None:
                again.ack()
            consumer.close()
        return {"granted": granted, "again": again is not None, "first_count": first.delivery_count, "held": held}

    async def main() -> dict[str, Any]:
        async with await ackbridge.connect_async(url, prefetch=10) as conn:
            consumer = await conn.consume(queue)
            first = await consumer.get(timeout=10)
            assert first is not None
            granted = await work_async(first, extend=extend)
            again = await consumer.get(timeout=0.5 if extend else 10)
            held = broker_side()
            await first.ack()
            if again is not None:
                await again.ack()
            await consumer.close()
        return {"granted": granted, "again": again is not None, "first_count": first.delivery_count, "held": held}

    return asyncio.run(main())


@pytest.mark.nats
@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async"])
def test_jetstream_extend_keeps_a_slow_delivery_from_redelivery(nats: Any, face: str, metrics: Metrics,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    queue = nats.new_queue()
    url = nats.url(ack_wait=DEADLINE_S)
    with ackbridge.connect(url) as conn:
        assert conn.publish(queue, b"slow", message_id="slow-1").result(10).confirmed
    caplog.set_level(logging.WARNING, logger="ackbridge")
    seen = run_face(face, url, queue, extend=True, broker_side=lambda: nats.consumer_info(queue))
    info = seen["held"]  # read after three ack_waits of work, before the ack
    assert info.config.ack_wait == DEADLINE_S
    assert info.num_redelivered == 0 and info.delivered.consumer_seq == 1, f"redelivered despite extend(): {info}"
    assert info.num_ack_pending == 1, info
    assert seen["first_count"] == 1 and not seen["again"], seen
    assert seen["granted"] and all(g == DEADLINE_S for g in seen["granted"]), seen
    eventually(lambda: nats.consumer_info(queue).num_ack_pending == 0, message="the one delivery acked")
    assert nats.consumer_info(queue).num_pending == 0
    assert not [r for r in caplog.records if LAPSED in r.getMessage()]
    assert metrics.total("ackbridge.leases_extended", messaging__destination__name=queue) == len(seen["granted"])
    assert metrics.total("ackbridge.leases_lapsed") == 0


@pytest.mark.nats
@pytest.mark.slow
@pytest.mark.parametrize("face", ["sync", "async"])
def test_jetstream_without_extend_the_redelivery_is_reported(nats: Any, face: str, metrics: Metrics,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    queue = nats.new_queue()
    url = nats.url(ack_wait=DEADLINE_S)
    with ackbridge.connect(url) as conn:
        assert conn.publish(queue, b"slow", message_id="slow-1").result(10).confirmed
    caplog.set_level(logging.WARNING, logger="ackbridge")
    seen = run_face(face, url, queue, extend=False, broker_side=lambda: nats.consumer_info(queue))
    assert seen["again"], "JetStream did not redeliver after ack_wait: the row proves nothing"
    assert seen["held"].num_redelivered >= 1 and seen["held"].delivered.consumer_seq >= 2, seen["held"]
    lapsed = [r for r in caplog.records if LAPSED in r.getMessage()]
    assert lapsed, "the broker's redelivery of a held delivery went unreported"
    assert lapsed[0].levelno == logging.WARNING and getattr(lapsed[0], "ackbridge_destination", None) == queue
    assert metrics.total("ackbridge.leases_lapsed", messaging__destination__name=queue) == len(lapsed)
    assert metrics.total("ackbridge.leases_extended") == 0


def leased_rows(path: Path, queue: str) -> list[tuple[int, str | None]]:
    """(delivery_count, owner) of every row of *queue*, read from the file itself."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return [(int(c), o) for c, o in db.execute("SELECT delivery_count, owner FROM messages WHERE queue=?",
                                                     (queue,))]


@pytest.mark.slow
def test_embedded_extend_keeps_the_lease_through_three_lease_timeouts(tmp_path: Path) -> None:
    from tests.local.harness import LocalHarness

    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        url = harness.url(lease_timeout=DEADLINE_S)
        with ackbridge.connect(url, prefetch=1) as conn:
            assert conn.publish(queue, b"slow", message_id="slow-1").result(10).confirmed
            consumer = conn.consume(queue)
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            before = leased_rows(harness.path, queue)
            granted = work(delivery, extend=True)
            after = leased_rows(harness.path, queue)
            assert consumer.get(timeout=0.2) is None
            delivery.ack()
            consumer.close()
        assert before == after and after[0][0] == 1 and after[0][1] is not None, (before, after)
        assert granted and all(g == DEADLINE_S for g in granted)
        assert harness.ready(queue) == 0 and harness.unacked(queue) == 0
    finally:
        harness.cleanup()


def test_embedded_extend_on_a_lost_lease_raises_stale(tmp_path: Path) -> None:
    from tests.local.harness import LocalHarness

    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url(), prefetch=1) as conn:
            assert conn.publish(queue, b"m", message_id="m-1").result(10).confirmed
            consumer = conn.consume(queue)
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            harness.break_connection(conn)  # the lease returns to the queue; the generation ends
            with pytest.raises(StaleDeliveryError):
                delivery.extend()
            consumer.close()
    finally:
        harness.cleanup()


def test_extend_after_settling_raises_and_sends_nothing(tmp_path: Path) -> None:
    from tests.local.harness import LocalHarness

    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url(), prefetch=1) as conn:
            assert conn.publish(queue, b"m", message_id="m-1").result(10).confirmed
            consumer = conn.consume(queue)
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            delivery.ack()
            with pytest.raises(AlreadySettledError):
                delivery.extend()
            consumer.close()
    finally:
        harness.cleanup()


@pytest.mark.rabbitmq
def test_rabbitmq_extend_refuses_and_names_consumer_timeout() -> None:
    require_port(5672, "RabbitMQ")
    from tests.rabbitmq.harness import RabbitHarness

    harness = RabbitHarness()
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url(), prefetch=1) as conn:
            assert conn.capabilities.lease_row()[1] == "unsupported"
            assert conn.publish(queue, b"m", message_id="m-1").result(10).confirmed
            consumer = conn.consume(queue)
            delivery = consumer.get(timeout=10)
            assert delivery is not None
            with pytest.raises(UnsupportedVerbError, match="consumer_timeout"):
                delivery.extend()
            delivery.ack()  # still pending: extend() sent and changed nothing
            consumer.close()
        eventually(lambda: harness.ready(queue) == 0 and harness.unacked(queue) == 0, message="acked once")
    finally:
        harness.cleanup()


def test_rabbitmq_consumer_timeout_close_is_reported_as_such() -> None:
    from ackbridge_rabbitmq.receiving import consumer_timeout_text

    timed_out = pe.ChannelClosedByBroker(406, "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed "
                                              "out. Timeout value used: 1800000 ms. This timeout value can be "
                                              "configured, see consumers doc guide to learn more")
    report = consumer_timeout_text(timed_out)
    assert report is not None and report.startswith("consumer_timeout:") and "1800000 ms" in report
    assert consumer_timeout_text(pe.ChannelClosedByBroker(406, "PRECONDITION_FAILED - unknown delivery tag 7")) is None
    assert consumer_timeout_text(pe.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'x'")) is None
