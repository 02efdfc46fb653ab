"""RabbitMQ-specific behaviour beyond the shared conformance suite (asserted broker-side)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ackbridge.capabilities import Level, Verb
from ackbridge.connect import connect, connect_async
from ackbridge.errors import (
    AuthenticationError,
    BrokerError,
    ConnectionLostError,
    InvalidOptionError,
    StaleDeliveryError,
    UnsupportedVerbError,
)
from ackbridge.messages import ConfirmStatus
from ackbridge.testing import eventually
from ackbridge.testing.faults import transport_of
from tests.rabbitmq.harness import TEST_PASSWORD, RabbitHarness, close_connection, queue_counts

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(params=["classic", "quorum"])
def harness(request: pytest.FixtureRequest) -> Iterator[RabbitHarness]:
    h = RabbitHarness(request.param)
    yield h
    h.cleanup()


@pytest.fixture
def classic() -> Iterator[RabbitHarness]:
    h = RabbitHarness("classic")
    yield h
    h.cleanup()


@pytest.fixture
def quorum() -> Iterator[RabbitHarness]:
    h = RabbitHarness("quorum")
    yield h
    h.cleanup()


def counts(queue: str) -> tuple[int, int]:
    return queue_counts().get(queue, (0, 0))


def _ack_ids(conn: Any, queue: str, n: int) -> list[str | None]:
    """Consume *n* messages from *queue*, acking each; their message ids in arrival order."""
    ids: list[str | None] = []
    with conn.consume(queue, prefetch=n) as consumer:
        for _ in range(n):
            d = consumer.get(timeout=10)
            assert d is not None
            ids.append(d.message_id)
            d.ack()
    return ids


def test_stale_settle_after_forced_close_sends_nothing(harness: RabbitHarness) -> None:
    queue = harness.new_queue()
    with connect(harness.url(), queue_type=harness.queue_type) as conn:
        for i in range(2):
            assert conn.publish(queue, b"m%d" % i).result(10).confirmed
        consumer = conn.consume(queue, prefetch=2)
        first, second = consumer.get(10), consumer.get(10)
        assert first is not None and second is not None
        harness.break_connection(conn)
        with pytest.raises(StaleDeliveryError, match="redeliver"):
            first.ack()
        with pytest.raises(StaleDeliveryError):
            second.reject()
        # Reconnected and re-subscribed: both come back, redelivered, nothing was acked or dead-lettered.
        again = [consumer.get(20), consumer.get(20)]
        assert all(d is not None for d in again)
        assert sorted(d.body for d in again if d) == [b"m0", b"m1"]
        assert all(d.redelivered for d in again if d)
        assert all(d.generation > first.generation for d in again if d)
        eventually(lambda: counts(queue) == (0, 2), message="both unacked on the new channel")
        assert harness.dead_lettered(queue) == []
        for d in again:
            assert d is not None
            d.ack()
        eventually(lambda: counts(queue) == (0, 0), message="acked broker-side")


def test_poison_message_dead_lettered_after_n_deliveries(quorum: RabbitHarness) -> None:
    queue = quorum.new_queue(dead_letter=True)
    with connect(quorum.url(), queue_type="quorum") as conn:
        assert conn.publish(queue, b"poison").result(10).confirmed
        consumer = conn.consume(queue, prefetch=1, max_deliveries=3)
        seen = []
        for _ in range(3):
            d = consumer.get(10)
            assert d is not None
            seen.append(d.delivery_count)
            d.requeue()
        assert seen == [1, 2, 3]
        eventually(lambda: quorum.dead_lettered(queue) == [b"poison"], message="poison in QUEUE.dlq")
        assert consumer.dead_lettered_by_policy == 1
        eventually(lambda: counts(queue) == (0, 0), message="source queue empty")


def test_classic_declares_no_delivery_count(classic: RabbitHarness) -> None:
    with connect(classic.url()) as conn:
        assert conn.capabilities.support(Verb.DELIVERY_COUNT).level is Level.UNSUPPORTED
        with pytest.raises(UnsupportedVerbError, match="quorum"):
            conn.consume(classic.new_queue(), max_deliveries=2)


def test_unroutable_publish_refused(classic: RabbitHarness) -> None:
    with connect(classic.url()) as conn:
        outcome = conn.publish(f"no-such-queue-{uuid.uuid4().hex}", b"x").result(10)
        assert outcome.status is ConfirmStatus.REFUSED
        assert outcome.reason.startswith("unroutable")
        outcome = conn.publish("amq.topic/nobody.listens", b"x").result(10)
        assert outcome.status is ConfirmStatus.REFUSED


def test_unencodable_publish_refused_alone_and_confirms_stay_aligned(classic: RabbitHarness) -> None:
    """pika refuses to encode a 300-byte message id (AMQP short string) inside the
    I/O loop. Only that publish is refused; the ones around it keep their own
    confirms, and the broker holds exactly those."""
    queue = classic.new_queue()
    with connect(classic.url()) as conn:
        before = conn.publish(queue, b"before", message_id="before")
        bad = conn.publish(queue, b"bad", message_id="m" * 300)
        after = [conn.publish(queue, b"after", message_id=f"after-{i}") for i in range(50)]
        assert bad.result(10).status is ConfirmStatus.REFUSED
        assert "encode" in bad.result(10).reason
        assert before.result(10).confirmed
        assert all(c.result(10).confirmed for c in after)
        eventually(lambda: counts(queue) == (51, 0))
        assert _ack_ids(conn, queue, 51) == ["before", *[f"after-{i}" for i in range(50)]]
    eventually(lambda: counts(queue) == (0, 0))


def test_queued_publishes_go_out_in_few_writes_in_order(classic: RabbitHarness) -> None:
    """Publishes queued for the I/O thread are written to the socket together
    (three frames each would otherwise be three sends): far fewer writes than
    publishes, each confirm still lands on its own message, order kept."""
    queue = classic.new_queue()
    with connect(classic.url()) as conn:
        transport: Any = transport_of(conn)
        if not transport.fast_path:
            pytest.skip("pika's public path writes each frame itself (ACKBRIDGE_PIKA_FAST_PATH=0)")
        wire = transport.conn
        with classic.hold_confirms(conn):  # parks them on the client: one drain sends all
            confirms = [conn.publish(queue, b"%d" % i, message_id=f"m-{i}") for i in range(300)]
            before = wire.writes
        assert all(c.result(10).confirmed for c in confirms)
        assert wire.writes - before <= 5, wire.writes - before
        assert _ack_ids(conn, queue, 300) == [f"m-{i}" for i in range(300)]
    eventually(lambda: counts(queue) == (0, 0))


def test_connection_killed_with_confirms_pending(harness: RabbitHarness) -> None:
    """A real cut mid-stream (nothing parked client-side): no pending publish is
    reported confirmed or refused, and every confirmed one is on the broker."""
    queue = harness.new_queue()
    with connect(harness.url(), queue_type=harness.queue_type, reconnect=False) as conn:
        publisher = conn.publisher(window=50_000)
        confirms = []
        cut = threading.Thread(target=close_connection, args=(transport_of(conn).connection_name,))
        # Publish until the cut lands (rabbitmqctl takes a while to start): a fixed
        # count could all be confirmed before it, and then nothing is pending.
        deadline = time.monotonic() + 120
        while True:
            # Publishing during an outage never raises (one rule on every plugin): the
            # confirm comes back unknown, "not sent", at once. That marks the cut.
            confirm = publisher.publish(queue, b"p" * 64)
            confirms.append(confirm)
            if confirm.done() and confirm.outcome is not None and confirm.outcome.status is ConfirmStatus.UNKNOWN:
                break
            if len(confirms) == 2000:
                cut.start()
            assert time.monotonic() < deadline, "the cut never ended the connection"
        cut.join()
        outcomes = [c.result(60) for c in confirms]
    statuses = [o.status for o in outcomes]
    assert ConfirmStatus.REFUSED not in statuses
    assert ConfirmStatus.UNKNOWN in statuses
    # Each was reported by the loss itself, none left to expire at confirm_timeout
    # (publishes handed over while the loss was being handled used to be).
    assert not [o for o in outcomes if "confirm_timeout" in (o.reason or "")]
    confirmed = statuses.count(ConfirmStatus.CONFIRMED)
    # Confirms arrive in publish order: nothing after the first unknown is confirmed.
    first_unknown = statuses.index(ConfirmStatus.UNKNOWN)
    assert ConfirmStatus.CONFIRMED not in statuses[first_unknown:]
    eventually(lambda: counts(queue)[0] >= confirmed, message=f">= {confirmed} confirmed messages on the broker")


def test_settle_from_worker_threads(classic: RabbitHarness) -> None:
    queue = classic.new_queue()
    n = 2000
    with connect(classic.url()) as conn:
        publisher = conn.publisher(window=5000)
        for i in range(n):
            publisher.publish(queue, b"w%d" % i)
        assert publisher.flush(30)
        consumer = conn.consume(queue, prefetch=500)
        generation = transport_of(conn).generation
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                while True:
                    d = consumer.get(2)
                    if d is None:
                        return
                    (d.ack if d.body[-1] % 7 else d.reject)()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        # No 406 (unknown/double tag) closed the channel: the generation never moved.
        assert transport_of(conn).generation == generation
        eventually(lambda: counts(queue) == (0, 0), message="all settled broker-side")


def test_reconnect_resumes_consuming(harness: RabbitHarness) -> None:
    queue = harness.new_queue()
    with connect(harness.url(), queue_type=harness.queue_type) as conn:
        consumer = conn.consume(queue, prefetch=10)
        assert conn.publish(queue, b"before").result(10).confirmed
        d = consumer.get(10)
        assert d is not None
        d.ack()
        harness.break_connection(conn)

        def publish_after() -> bool:
            try:
                return conn.publish(queue, b"after").result(10).confirmed
            except ConnectionLostError:
                return False

        eventually(publish_after, timeout=30, interval=0.2, message="publish after reconnect")
        again = consumer.get(20)
        assert again is not None and again.body == b"after"
        again.ack()
        eventually(lambda: counts(queue) == (0, 0), message="acked after reconnect")


def test_async_reconnect_and_stale(classic: RabbitHarness) -> None:
    queue = classic.new_queue()

    async def run() -> None:
        conn = await connect_async(classic.url())
        try:
            await (await conn.publish(queue, b"a")).result(10)
            consumer = await conn.consume(queue, prefetch=5)
            old = await consumer.get(10)
            assert old is not None
            before = transport_of(conn).generation
            await asyncio.to_thread(close_connection, transport_of(conn).connection_name)
            for _ in range(300):  # bounded poll for the cut to be seen
                if transport_of(conn).generation > before:
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(StaleDeliveryError):
                await old.ack()
            again = await consumer.get(20)
            assert again is not None and again.body == b"a" and again.redelivered
            await again.ack()
        finally:
            await conn.close()

    asyncio.run(run())
    eventually(lambda: counts(queue) == (0, 0), message="acked broker-side")


def test_406_is_broker_error_with_code(classic: RabbitHarness) -> None:
    queue = classic.new_queue()
    with connect(classic.url(), queue_type="quorum") as conn:
        with pytest.raises(BrokerError) as err:
            conn.declare_queue(queue)  # exists as classic: inequivalent arg x-queue-type
        assert err.value.code == 406
        # The connection survives a channel-level error.
        assert conn.publish(queue, b"ok").result(10).confirmed

    async def run() -> None:
        conn = await connect_async(classic.url(), queue_type="quorum")
        try:
            with pytest.raises(BrokerError) as aerr:
                await conn.declare_queue(queue)
            assert aerr.value.code == 406
        finally:
            await conn.close()

    asyncio.run(run())


def test_missing_queue_subscribe_is_404(classic: RabbitHarness) -> None:
    with connect(classic.url()) as conn:
        with pytest.raises(BrokerError) as err:
            conn.consume(f"missing-{uuid.uuid4().hex}")
        assert err.value.code == 404


def test_bad_password_never_shown() -> None:
    secret = "not-the-" + TEST_PASSWORD
    with pytest.raises(AuthenticationError) as err:
        connect(f"amqp://ackbridge_test:{secret}@127.0.0.1:5672/", connect_timeout=5)
    assert not err.value.recoverable  # a retry loop must not retry a wrong password forever
    assert secret not in str(err.value) and secret not in repr(err.value)


def test_prefetch_above_16_bits_is_refused_and_the_connection_lives(classic: RabbitHarness) -> None:
    queue = classic.new_queue()
    with connect(classic.url()) as conn:
        with pytest.raises(InvalidOptionError, match="prefetch 70000 is above 65535"):
            conn.consume(queue, prefetch=70000)
        assert conn.publish(queue, b"still here").result(10).confirmed
        assert len(_ack_ids(conn, queue, 1)) == 1  # the message is consumable: the connection lives
    eventually(lambda: counts(queue) == (0, 0))


def test_fault_seam_sever_ends_the_generation_and_reconnects(classic: RabbitHarness) -> None:
    """faults(conn).sever on both transports: the delivery in hand goes stale, the
    message comes back on the new generation, publishing works again."""
    from ackbridge.testing.faults import faults
    from ackbridge.testing.twins import Twin

    queue = classic.new_queue()
    for kind in ("sync", "async"):
        twin = Twin(kind)
        conn = twin.connect(classic.url())
        try:
            assert conn.publish(queue, kind.encode()).result(10).confirmed
            consumer = conn.consume(queue, prefetch=1)
            first = consumer.get(timeout=10)
            seam = faults(conn)
            before = seam.generation
            seam.sever("test")
            eventually(lambda: seam.generation > before + 1, timeout=30, message="reconnected")  # noqa: B023
            with pytest.raises(StaleDeliveryError):
                first.ack()
            again = consumer.get(timeout=10)
            assert again.body == kind.encode() and again.redelivered
            again.ack()
            consumer.close()
            eventually(lambda: conn.publish(queue, b"after").result(10).confirmed, timeout=30)  # noqa: B023
            assert len(_ack_ids(conn, queue, 1)) == 1
        finally:
            conn.close()
            twin.close()
    eventually(lambda: counts(queue) == (0, 0))
