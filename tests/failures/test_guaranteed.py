"""Issue 15 items 1-3: retransmission, duplicate detection and loss detection on the real brokers."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import DataLossError
from ackbridge.kernel.guaranteed import PRODUCER_HEADER, SEQUENCE_HEADER, GapDetector
from ackbridge.messages import ConfirmStatus, InboundMessage
from ackbridge.testing.faults import faults
from ackbridge.testing.harness import eventually
from ackbridge.testing.twins import Twin, unwrap
from tests.mqtt.harness import delete_session
from tests.rabbitmq.harness import ProxiedRabbitHarness

BROKERS = [
    pytest.param("amqp://guest:guest@127.0.0.1:5672/", {}, id="rabbitmq", marks=pytest.mark.rabbitmq),
    pytest.param("mqtt://127.0.0.1:1883", {"protocol": "5"}, id="mqtt-5", marks=pytest.mark.mqtt),
]


def _drain(consumer: Any, quiet: float = 2.0) -> list[bytes]:
    got = []
    while (delivery := consumer.get(timeout=quiet)) is not None:
        got.append(delivery.body)
        delivery.ack()
    return got


@pytest.mark.parametrize(("url", "options"), BROKERS)
def test_unknowns_from_a_cut_are_retransmitted_and_resolve_once(url: str, options: dict[str, Any]) -> None:
    """Published during the outage a cut leaves: nothing goes on the wire until the
    connection is back, and that wait uses up no attempt (max_attempts=1 suffices).
    A publish already on the wire when the cut comes is sent again: see
    test_rabbitmq_unknowns_held_on_the_wire_are_retransmitted_and_each_id_reaches_the_queue_once."""
    queue = f"abtest-rt-{uuid.uuid4().hex[:8]}"
    with ackbridge.connect(url, **options) as conn:
        conn.declare_queue(queue, dead_letter=False)
        try:
            consumer = conn.consume(queue, dedupe_window=1000)
            publisher = conn.publisher(retransmit=True, confirm_timeout=2.0, max_attempts=1)
            faults(conn).sever("test cut")
            confirms = [publisher.publish(queue, str(i).encode()) for i in range(50)]
            outcomes = [c.result(timeout=60) for c in confirms]
            assert all(o.status is ConfirmStatus.CONFIRMED for o in outcomes), outcomes
            # Each went on the wire once: tries during the outage are not attempts.
            assert {o.attempts for o in outcomes} == {1}, outcomes
            assert all(c.message_id for c in confirms), "an id is assigned when the caller gave none"
            got = _drain(consumer)
            assert sorted(got, key=int) == [str(i).encode() for i in range(50)]
        finally:
            conn.delete_queue(queue, dead_letter=False)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_rabbitmq_unknowns_held_on_the_wire_are_retransmitted_and_each_id_reaches_the_queue_once(
        kind: str, queue_type: str) -> None:
    """Confirms held on the wire (a FaultProxy holds RabbitMQ's bytes, the publishes reach the
    queue), then the connection is reset: the held confirms are lost, each publish is unknown,
    is sent again after the reconnect (attempts > 1) and resolves once, confirmed. The queue
    then holds every copy that went on the wire (read with rabbitmqctl), and dedupe_window
    hands each id out once and acks the copies, leaving the queue empty."""
    harness = ProxiedRabbitHarness(queue_type)
    twin = Twin(kind)
    conn = twin.connect(harness.url(), **harness.connect_options())
    try:
        queue = harness.new_queue(dead_letter=False)
        publisher = conn.publisher(retransmit=True, confirm_timeout=5.0, max_attempts=20, retransmit_deadline=90.0)
        bodies = [f"held-{i}".encode() for i in range(20)]
        resolutions: dict[int, list[ConfirmStatus]] = {i: [] for i in range(len(bodies))}

        def publish(i: int) -> Any:
            confirm = publisher.publish(queue, bodies[i])
            confirm.add_done_callback(lambda c, i=i: resolutions[i].append(unwrap(c).outcome.status))
            return confirm

        # One confirmed first: its confirm is not held, so it goes once.
        confirms = [publish(0)]
        assert confirms[0].result(timeout=30).status is ConfirmStatus.CONFIRMED
        with harness.hold_confirms(unwrap(conn)):
            confirms += [publish(i) for i in range(1, len(bodies))]
            harness.break_connection(unwrap(conn))  # waits until the publishes reached the broker
        outcomes = [c.result(timeout=120) for c in confirms]
        assert [o.status for o in outcomes] == [ConfirmStatus.CONFIRMED] * len(bodies), outcomes
        held = outcomes[1:]
        assert all(o.attempts > 1 for o in held), [o.attempts for o in held]
        assert publisher.retransmitted >= len(held), publisher.retransmitted
        assert len({c.message_id for c in confirms}) == len(bodies), "one id per publish, kept across attempts"
        # What the broker holds: every attempt that went on the wire is a copy in the queue.
        copies = sum(o.attempts for o in outcomes)
        eventually(lambda: harness.ready(queue) == copies, message=f"{copies} copies in {queue}")
        consumer = conn.consume(queue, prefetch=100, dedupe_window=1000)
        got = _drain(consumer)
        assert sorted(got) == sorted(bodies), f"each id handed out once: {sorted(got)}"
        assert consumer.duplicates_dropped == copies - len(bodies)
        eventually(lambda: harness.ready(queue) == 0 and harness.unacked(queue) == 0,
                   message=f"{queue} empty: every copy acked")
        assert all(len(r) == 1 for r in resolutions.values()), resolutions  # each confirm resolved once
    finally:
        try:
            conn.close()
        finally:
            twin.close()
            harness.cleanup()


@pytest.mark.rabbitmq
def test_a_hold_right_after_a_cut_waits_for_the_reconnect_so_the_next_cut_is_seen() -> None:
    """Two cuts in a row, as the competing-consumers row makes them: the second hold begins
    while the client is still reconnecting from the first cut. The proxy holds every
    connection's replies, so a hold begun then would hold the reconnect's handshake too: it
    times out and tries again, never opening, and the second cut is never seen (30 s, then
    "client saw the cut" failed). ``hold_confirms`` waits for an open connection first."""
    harness = ProxiedRabbitHarness()
    conn = ackbridge.connect(harness.url(), **harness.connect_options())
    try:
        queue = harness.new_queue(dead_letter=False)
        publisher = conn.publisher(retransmit=True, confirm_timeout=5.0, max_attempts=20, retransmit_deadline=90.0)
        assert publisher.publish(queue, b"first").result(timeout=30).status is ConfirmStatus.CONFIRMED
        confirms = []
        for cut in range(2):
            with harness.hold_confirms(conn):
                confirms += [publisher.publish(queue, f"cut{cut}-{i}".encode()) for i in range(5)]
                harness.break_connection(conn)  # the first returns as soon as the client saw its cut
        outcomes = [c.result(timeout=120) for c in confirms]
        assert {o.status for o in outcomes} == {ConfirmStatus.CONFIRMED}, outcomes
        # What the broker holds: the first, and every send of the held ten (the cuts made copies).
        assert all(o.attempts > 1 for o in outcomes), [o.attempts for o in outcomes]
        copies = 1 + sum(o.attempts for o in outcomes)
        eventually(lambda: harness.ready(queue) == copies, message=f"{copies} copies in {queue}")
    finally:
        try:
            conn.close()
        finally:
            harness.cleanup()


@pytest.mark.parametrize(("url", "options"), BROKERS[:1])  # the MQTT transport offers no hold_publishes seam
def test_duplicates_of_retransmitted_publishes_never_reach_the_application(url: str, options: dict[str, Any]) -> None:
    """Originals held client-side past confirm_timeout: the copies go out, then the
    originals too; the consumer acks the second of each and hands out one."""
    queue = f"abtest-dup-{uuid.uuid4().hex[:8]}"
    with ackbridge.connect(url, **options) as conn:
        conn.declare_queue(queue, dead_letter=False)
        try:
            publisher = conn.publisher(retransmit=True, confirm_timeout=0.5, max_attempts=3)
            with faults(conn).publishes_held():
                confirms = [publisher.publish(queue, str(i).encode()) for i in range(20)]
                time.sleep(1.5)  # the first attempts time out; the copies are held too
            outcomes = [c.result(timeout=30) for c in confirms]
            assert {o.status for o in outcomes} == {ConfirmStatus.CONFIRMED}, outcomes
            consumer = conn.consume(queue, dedupe_window=100)
            got = _drain(consumer)
            assert sorted(got, key=int) == [str(i).encode() for i in range(20)], got
            assert consumer.duplicates_dropped >= 1
        finally:
            conn.delete_queue(queue, dead_letter=False)


def test_refused_is_never_retransmitted(tmp_path: Any) -> None:
    with ackbridge.connect(f"local://{tmp_path}/r.db", max_message_bytes=10) as conn:
        conn.declare_queue("q")
        publisher = conn.publisher(retransmit=True)
        outcome = publisher.publish("q", bytes(11)).result(timeout=10)
        assert outcome.status is ConfirmStatus.REFUSED and outcome.attempts == 1
        assert publisher.retransmitted == 0


def test_async_face_retransmits_too() -> None:
    async def run() -> None:
        queue = f"abtest-art-{uuid.uuid4().hex[:8]}"
        conn = await ackbridge.connect_async("amqp://guest:guest@127.0.0.1:5672/")
        try:
            await conn.declare_queue(queue, dead_letter=False)
            publisher = conn.publisher(retransmit=True, confirm_timeout=2.0, max_attempts=1)
            faults(conn).sever("test cut")
            confirms = [await publisher.publish(queue, str(i).encode()) for i in range(20)]
            outcomes = [await c for c in confirms]
            assert {o.status for o in outcomes} == {ConfirmStatus.CONFIRMED}, outcomes
            assert {o.attempts for o in outcomes} == {1}, "the outage used up no attempt"
            # What the broker holds: every message (a retransmitted one may be there twice).
            info = await conn.inspect_queue(queue)
            assert info.messages is not None and info.messages >= 20, info
            await conn.delete_queue(queue, dead_letter=False)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.mark.rabbitmq
def test_a_batch_settled_cumulatively_counts_for_dedupe_on_both_faces() -> None:
    """settle_batch's cumulative ack records the acked ids in the dedupe window: copies
    published after a reconnect (which forgets what was merely in flight) are still
    dropped, on the sync and the async face alike."""
    url = "amqp://guest:guest@127.0.0.1:5672/"
    ids = [f"id-{i}" for i in range(5)]

    def sync_face(queue: str) -> int:
        with ackbridge.connect(url) as conn:
            conn.declare_queue(queue, dead_letter=False)
            consumer = conn.consume(queue, dedupe_window=100, prefetch=10)
            for message_id in ids:
                conn.publish(queue, b"x", message_id=message_id)
            got = [consumer.get(timeout=10) for _ in ids]
            assert consumer.settle_batch(got).cumulative  # type: ignore[arg-type]
            faults(conn).sever("test cut")
            copies = conn.publisher(retransmit=True, confirm_timeout=2.0, max_attempts=10)
            confirms = [copies.publish(queue, b"x", message_id=message_id) for message_id in ids]
            assert {c.result(timeout=60).status for c in confirms} == {ConfirmStatus.CONFIRMED}
            assert consumer.get(timeout=2.0) is None  # the copies were acked, not handed out
            assert (conn.inspect_queue(queue).messages or 0) == 0
            conn.delete_queue(queue, dead_letter=False)
            return consumer.duplicates_dropped

    async def async_face(queue: str) -> int:
        conn = await ackbridge.connect_async(url)
        try:
            await conn.declare_queue(queue, dead_letter=False)
            consumer = await conn.consume(queue, dedupe_window=100, prefetch=10)
            for message_id in ids:
                await conn.publish(queue, b"x", message_id=message_id)
            got = [await consumer.get(timeout=10) for _ in ids]
            assert (await consumer.settle_batch(got)).cumulative  # type: ignore[arg-type]
            faults(conn).sever("test cut")
            copies = conn.publisher(retransmit=True, confirm_timeout=2.0, max_attempts=10)
            confirms = [await copies.publish(queue, b"x", message_id=message_id) for message_id in ids]
            assert {(await c).status for c in confirms} == {ConfirmStatus.CONFIRMED}
            assert await consumer.get(timeout=2.0) is None
            assert ((await conn.inspect_queue(queue)).messages or 0) == 0  # what the broker holds
            await conn.delete_queue(queue, dead_letter=False)
            return consumer.duplicates_dropped
        finally:
            await conn.close()

    assert sync_face(f"abtest-bd-{uuid.uuid4().hex[:8]}") == len(ids)
    assert asyncio.run(async_face(f"abtest-abd-{uuid.uuid4().hex[:8]}")) == len(ids)


# ---- loss detection ----------------------------------------------------------------------
def _stamped(producer: str, number: int) -> InboundMessage:
    return InboundMessage(number, 1, b"", "q", headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: number})


def test_gap_detector_reports_count_and_numbers_once() -> None:
    seen: list[tuple[str, tuple[int, ...]]] = []
    detector = GapDetector(lambda p, missing: seen.append((p, missing)), "q")
    for n in (1, 2, 5, 3, 5, 6, 9):
        detector.check(_stamped("p", n))
    assert seen == [("p", (3, 4)), ("p", (7, 8))] and detector.gaps == 4
    raising = GapDetector("raise", "q")
    raising.check(_stamped("p", 1))
    with pytest.raises(DataLossError) as info:
        raising.check(_stamped("p", 3))
    assert info.value.missing == (2,)


@pytest.mark.mqtt
@pytest.mark.slow
def test_3000_to_an_offline_mqtt_session_the_gap_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Default Mosquitto limits queue 1000 for an offline session and drop the rest
    (PUBACKed all the same). The subscribe warns first; the consumer reports the gap."""
    topic = f"abtest/gap/{uuid.uuid4().hex[:10]}"
    url = "mqtt://127.0.0.1:1883"
    with caplog.at_level("WARNING"), ackbridge.connect(url, protocol="5") as conn:
        consumer = conn.consume(topic)  # creates the persistent session
        assert any("max_queued_messages" in r.getMessage() for r in caplog.records), "subscribe-time warning"
        consumer.close()
    try:
        with ackbridge.connect(url, protocol="5") as conn:
            publisher = conn.publisher(sequence=True, producer_id="gap-producer")
            confirms = [publisher.publish(topic, str(i).encode()) for i in range(1, 3001)]
            assert all(c.result(timeout=60).confirmed for c in confirms), "the broker confirmed every one"
            seen: list[tuple[str, tuple[int, ...]]] = []
            consumer = conn.consume(topic, on_gap=lambda p, m: seen.append((p, m)))
            got = _drain(consumer, quiet=2.0)
            assert len(got) < 3000
            publisher.publish(topic, b"after").result(timeout=10)  # the next number reveals the gap
            got += _drain(consumer, quiet=2.0)
            assert consumer.gaps == 3000 - (len(got) - 1), (consumer.gaps, len(got))
            assert seen and seen[0][0] == "gap-producer" and len(seen[0][1]) == consumer.gaps
            consumer.close()
    finally:
        from ackbridge_mqtt.sessions import derived_session_id

        delete_session(derived_session_id(topic))
