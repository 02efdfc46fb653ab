"""The aio-pika asyncio transport beyond the conformance suite: selection by option, no
thread of its own, cancellation of a task awaiting a confirm, a delivery or a subscribe,
broker errors with their codes, and the password kept out of what it shows.

Counts come from the broker (rabbitmqctl through RabbitHarness: immediate, where the
management API's queue stats lag); polls wait for a condition, never for a time."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ackbridge.connect import connect_async
from ackbridge.errors import BrokerError, InvalidOptionError, StaleDeliveryError
from ackbridge.testing import eventually
from ackbridge.testing.faults import faults, transport_of
from ackbridge.transport import ThreadedAsyncTransport
from ackbridge_rabbitmq.aio.transport import RabbitAioPikaTransport
from tests.rabbitmq.harness import TEST_PASSWORD, close_connection, rabbitmqctl
from tests.rabbitmq_aio.harness import AioPikaHarness

pytestmark = pytest.mark.rabbitmq

AIO: dict[str, Any] = {"asyncio_transport": "aio-pika"}


@pytest.fixture
def harness() -> Iterator[AioPikaHarness]:
    made = AioPikaHarness("quorum")
    yield made
    made.cleanup()


def consumers(queue: str) -> int:
    """Consumers the broker counts on *queue* (rabbitmqctl: immediate)."""
    rows = json.loads(rabbitmqctl("list_queues", "--formatter", "json", "name", "consumers") or "[]")
    return next((int(r["consumers"]) for r in rows if r["name"] == queue), 0)


def counts(harness: AioPikaHarness, queue: str) -> tuple[int, int]:
    return harness.ready(queue), harness.unacked(queue)


async def until(condition: Callable[[], bool], what: str, polls: int = 600) -> None:
    """Poll *condition* on the loop (bounded number of polls, so a broken client fails, not hangs)."""
    for _ in range(polls):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not reached")


# ---- selection -------------------------------------------------------------------------------
def test_the_option_picks_the_transport(harness: AioPikaHarness) -> None:
    async def run() -> None:
        chosen = await connect_async(harness.url(), **AIO)
        default = await connect_async(harness.url())
        by_query = await connect_async(harness.url(asyncio_transport="aio-pika"))
        try:
            assert isinstance(transport_of(chosen), RabbitAioPikaTransport)
            assert isinstance(by_query._transport, RabbitAioPikaTransport)
            # The default stays the threaded pika path (docs/brokers/rabbitmq.md says why).
            assert isinstance(default._transport, ThreadedAsyncTransport)
        finally:
            for conn in (chosen, default, by_query):
                await conn.close()

    asyncio.run(run())


def test_a_bad_value_is_a_clear_error(harness: AioPikaHarness) -> None:
    async def run() -> None:
        with pytest.raises(InvalidOptionError, match="must be 'threaded' or 'aio-pika'"):
            await connect_async(harness.url(), asyncio_transport="aiopika")

    asyncio.run(run())


# ---- no thread -----------------------------------------------------------------------------------
def _threads_started_by(options: dict[str, Any], harness: AioPikaHarness) -> set[str]:
    """Names of the threads alive after a connection published, consumed and acked
    that were not alive before it (the connection still open)."""
    queue = harness.new_queue()
    started: set[str] = set()

    async def run() -> None:
        before = {t.ident for t in threading.enumerate()}
        conn = await connect_async(harness.url(), **options)
        try:
            assert (await (await conn.publish(queue, b"one")).result(10)).confirmed
            consumer = await conn.consume(queue, prefetch=5)
            delivery = await consumer.get(10)
            assert delivery is not None
            await delivery.ack()
            await consumer.flush()
            started.update(t.name for t in threading.enumerate() if t.ident not in before)
        finally:
            await conn.close()

    asyncio.run(run())
    return started


def test_aio_pika_starts_no_thread(harness: AioPikaHarness) -> None:
    assert _threads_started_by(AIO, harness) == set()
    # The check can fail: the threaded path's pika I/O thread shows up in it.
    assert _threads_started_by({}, harness) != set()


# ---- cancellation ---------------------------------------------------------------------------------
def test_cancelling_a_confirm_wait_leaves_nothing_stuck(harness: AioPikaHarness) -> None:
    queue = harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), **AIO)
        try:
            publisher = conn.publisher(window=2)
            seam = faults(conn)
            seam.hold_publishes(True)  # the confirm stays pending while the waiter is cancelled
            confirm = await publisher.publish(queue, b"held")
            waiter = asyncio.get_running_loop().create_task(confirm.result())
            await asyncio.sleep(0)  # the waiter is inside result(), awaiting the confirm
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            seam.hold_publishes(False)
            assert (await confirm.result(10)).confirmed  # the publish went on without its waiter
            # The window is not leaked: two more fill it and resolve.
            more = [await publisher.publish(queue, b"more") for _ in range(2)]
            assert await publisher.flush(timeout=10)
            assert all(c.outcome is not None and c.outcome.confirmed for c in more)
            assert transport_of(conn).publishes.in_flight == {}  # type: ignore[attr-defined]
        finally:
            await conn.close()

    asyncio.run(run())
    # A quorum queue publishes its counts once per tick, so three confirmed messages can list as
    # (0, 0) for a moment (docs/broker-quirks.md): poll until the broker shows them.
    eventually(lambda: counts(harness, queue) == (3, 0), timeout=15,
               message="the broker holds the 3 confirmed messages")


def test_cancelling_a_delivery_wait_loses_nothing(harness: AioPikaHarness) -> None:
    queue = harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), **AIO)
        try:
            consumer = await conn.consume(queue, prefetch=10)
            waiter = asyncio.get_running_loop().create_task(consumer.get())
            await asyncio.sleep(0)  # the waiter is inside get(), awaiting a delivery
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            publisher = conn.publisher()
            for i in range(5):
                await publisher.publish(queue, b"m%d" % i)
            assert await publisher.flush(timeout=10)
            got = []
            for _ in range(5):
                delivery = await consumer.get(10)
                assert delivery is not None
                got.append(delivery.body)
                await delivery.ack()
            await consumer.flush()
            assert got == [b"m%d" % i for i in range(5)]  # none swallowed by the cancelled wait
            await asyncio.to_thread(eventually, lambda: counts(harness, queue) == (0, 0),
                                    message="all acked on the broker")
        finally:
            await conn.close()

    asyncio.run(run())
    assert counts(harness, queue) == (0, 0)


def test_cancelling_a_subscribe_leaves_no_consumer(harness: AioPikaHarness) -> None:
    """consume() cancelled at each stage in turn (channel open, qos, Basic.Consume, done):
    wherever it stops, the broker holds no consumer for it, not even after a reconnect
    (which re-subscribes every subscription the transport still holds)."""
    queue = harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), **AIO)
        transport = transport_of(conn)
        try:
            cancelled = 0
            for steps in range(0, 400, 10):
                task = asyncio.get_running_loop().create_task(conn.consume(queue, prefetch=5))
                for _ in range(steps):
                    await asyncio.sleep(0)  # lets the broker's answers in: the cancel lands further on
                task.cancel()
                try:
                    consumer = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    continue
                await consumer.close()  # it finished before the cancel landed
            assert cancelled > 0
            await asyncio.to_thread(eventually, lambda: consumers(queue) == 0, message="no consumer left")
            before = transport.generation
            faults(conn).sever("test: reconnect with whatever subscriptions are held")
            await until(lambda: transport.generation != before and transport.state == "open",  # type: ignore[attr-defined]
                        "reconnected")
            assert (await (await conn.publish(queue, b"after")).result(10)).confirmed
            await asyncio.to_thread(eventually, lambda: harness.ready(queue) == 1, message="published")
            assert consumers(queue) == 0  # nothing came back with the reconnect
            consumer = await conn.consume(queue, prefetch=5)
            delivery = await consumer.get(10)
            assert delivery is not None and delivery.body == b"after"
            await delivery.ack()
            await consumer.close()
        finally:
            await conn.close()

    asyncio.run(run())
    eventually(lambda: consumers(queue) == 0 and counts(harness, queue) == (0, 0), message="nothing left")


# ---- generations, errors, secrets --------------------------------------------------------------------
def test_a_cut_makes_held_deliveries_stale(harness: AioPikaHarness) -> None:
    queue = harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), **AIO)
        try:
            assert (await (await conn.publish(queue, b"a")).result(10)).confirmed
            consumer = await conn.consume(queue, prefetch=5)
            old = await consumer.get(10)
            assert old is not None
            transport = transport_of(conn)
            before = transport.generation
            await asyncio.to_thread(close_connection, transport.connection_name)  # type: ignore[attr-defined]
            await until(lambda: transport.generation != before, "the cut seen")
            with pytest.raises(StaleDeliveryError):
                await old.ack()
            again = await consumer.get(30)
            assert again is not None and again.body == b"a" and again.redelivered
            assert again.delivery_count == 2  # quorum queues' x-delivery-count, read on the new generation
            await again.ack()
            await consumer.flush()
        finally:
            await conn.close()

    asyncio.run(run())
    eventually(lambda: counts(harness, queue) == (0, 0), message="acked broker-side")


def test_broker_errors_keep_their_code(harness: AioPikaHarness) -> None:
    queue = harness.new_queue()

    async def run() -> None:
        conn = await connect_async(harness.url(), queue_type="classic", **AIO)
        try:
            with pytest.raises(BrokerError) as declared:
                await conn.declare_queue(queue)  # exists as quorum: inequivalent x-queue-type
            assert declared.value.code == 406
            with pytest.raises(BrokerError) as missing:
                await conn.consume(f"missing-{uuid.uuid4().hex}")
            assert missing.value.code == 404
            # The connection survives channel-level errors.
            assert (await (await conn.publish(queue, b"ok")).result(10)).confirmed
        finally:
            await conn.close()

    asyncio.run(run())


def test_no_password_in_what_it_shows(harness: AioPikaHarness) -> None:
    async def run() -> None:
        conn = await connect_async(harness.url(), **AIO)
        try:
            shown = repr(conn) + repr(transport_of(conn)) + str(transport_of(conn).url)
            assert TEST_PASSWORD not in shown
        finally:
            await conn.close()
        wrong = harness.url().replace(TEST_PASSWORD, "not-the-" + TEST_PASSWORD)
        with pytest.raises(Exception) as refused:
            await connect_async(wrong, **AIO)
        assert TEST_PASSWORD not in str(refused.value) and "not-the-" not in str(refused.value)
        assert type(refused.value).__name__ == "AuthenticationError"

    asyncio.run(run())


def test_heartbeat_and_name_reach_the_broker(harness: AioPikaHarness) -> None:
    """The shared heartbeat option is what the broker negotiated; the connection name it shows
    is the transport's (what break_connection finds it by)."""
    async def run() -> None:
        conn = await connect_async(harness.url(), heartbeat=7, **AIO)
        try:
            name = transport_of(conn).connection_name  # type: ignore[attr-defined]
            out = await asyncio.to_thread(rabbitmqctl, "list_connections", "--formatter", "json", "timeout",
                                          "client_properties")
            rows = [r for r in json.loads(out or "[]") if name in json.dumps(r.get("client_properties"))]
            assert len(rows) == 1 and rows[0]["timeout"] == 7, rows
        finally:
            await conn.close()

    asyncio.run(run())


def test_a_confirm_failed_by_a_cut_is_unknown_never_refused() -> None:
    # aiormq 7.2.4 fails the confirms pending at a cut with a bare Exception
    # (FutureStore.reject_all(None)); read as an encoding refusal, the publish was final and
    # never sent again: 52 of 2,000 ids lost behind a green scoreboard row.
    from ackbridge_rabbitmq.aio.sending import outcome_of

    loop = asyncio.new_event_loop()
    try:
        cut, bad = loop.create_future(), loop.create_future()
        cut.set_exception(Exception())
        bad.set_exception(TypeError("float required"))
        assert outcome_of(cut).status.value == "unknown"
        assert outcome_of(bad).status.value == "refused"
    finally:
        loop.close()
