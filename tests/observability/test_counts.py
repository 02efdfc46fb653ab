"""300 published, 100 acked, 100 rejected, 100 requeued: the same numbers in the
metrics and in what the broker holds, on every broker, both faces.

Where the broker declares a verb unsupported (RabbitMQ streams: requeue and reject,
a stream is a log), the call is made anyway: it must raise ``UnsupportedVerbError``,
count nothing, and leave the delivery pending, which is then acked; the expected
numbers follow the declared capabilities."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import Capabilities, Verb
from ackbridge.errors import UnsupportedVerbError
from ackbridge.testing import eventually
from tests.observability.conftest import Metrics

N = 100
TIMEOUT = 30.0


def verb_for(body: bytes) -> str:
    index = int(body.split(b"-")[1])
    return ("ack", "reject", "requeue")[index // N]


_VERBS = {"reject": Verb.REJECT, "requeue": Verb.REQUEUE}


def supported(capabilities: Capabilities, verb: str) -> bool:
    return verb == "ack" or capabilities.support(_VERBS[verb]).available


def expected_settled(capabilities: Capabilities) -> dict[str, int]:
    """Settlements by verb: a verb the broker does not support is acked instead."""
    found = {"ack": N, "reject": 0, "requeue": 0}
    for verb in ("reject", "requeue"):
        found[verb if supported(capabilities, verb) else "ack"] += N
    return found


def check_counts(metrics: Metrics, harness: Any, queue: str, capabilities: Capabilities) -> None:
    settled = "ackbridge.settled"
    assert metrics.total("ackbridge.published", ackbridge__outcome="confirmed") == 3 * N
    assert metrics.total("ackbridge.published", ackbridge__outcome="refused") == 0
    assert metrics.total("ackbridge.published", ackbridge__outcome="unknown") == 0
    for verb, count in expected_settled(capabilities).items():
        got = metrics.total(settled, messaging__operation__name=verb, messaging__destination__name=queue)
        assert got == count, (verb, got, count)
    assert metrics.count("ackbridge.confirm.duration") == 3 * N
    assert metrics.count("ackbridge.settle.duration", messaging__destination__name=queue) == 3 * N
    assert metrics.total("ackbridge.unconfirmed") == 0
    assert metrics.total("ackbridge.stale_refused") == 0
    assert metrics.total("ackbridge.reconnects") == 0
    received = metrics.total("ackbridge.received", messaging__destination__name=queue)
    if supported(capabilities, "requeue"):
        # Every one of the 300 was received; requeued copies may come back before the close.
        assert received >= 3 * N, received
    else:
        # Nothing goes back: each message is received once, none redelivered.
        assert received == 3 * N, received
        assert metrics.total("ackbridge.redeliveries", messaging__destination__name=queue) == 0
    if not supported(capabilities, "requeue"):
        # A log (RabbitMQ streams): all 300 acked, the stored offset is past every one.
        eventually(lambda: harness.ready(queue) == 0, timeout=TIMEOUT, message=f"nothing left after {queue}'s offset")
        assert not supported(capabilities, "reject")  # no dead-letter target to look at either
        return
    # What the broker holds: the requeued hundred ready, the rejected hundred dead-lettered.
    if harness.name.startswith("mosquitto"):
        check_mqtt_held(harness, queue)
    else:
        # JetStream keeps the copies delivered to the closed consumer ack-pending until
        # ack_wait: unacked there, ready again on RabbitMQ, AMQP 1.0 and embedded.
        seen: list[tuple[int, int]] = []

        def held() -> bool:
            seen.append((harness.ready(queue), harness.unacked(queue)))
            return sum(seen[-1]) == N

        try:
            eventually(held, timeout=TIMEOUT, message=f"{N} held (ready or unacked) in {queue}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; (ready, unacked) seen: {sorted(set(seen))}") from None
    eventually(lambda: len(harness.dead_lettered(queue)) == N, timeout=TIMEOUT, message=f"{N} dead-lettered")
    for value in metrics.attribute_values():  # never a credential
        assert "guest" not in str(value) and "canary" not in str(value)


def check_mqtt_held(harness: Any, queue: str) -> None:
    """MQTT requeue is emulated (copy published, then the original PUBACKed): a copy
    and its original can both survive the consumer's close, so the broker may hold a
    requeued message twice (at least once, never lost). Drain it: exactly the
    requeued hundred, by body."""
    eventually(lambda: harness.ready(queue) >= N, timeout=TIMEOUT, message=f"{N} held in {queue}")
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn, conn.consume(queue) as consumer:
        bodies = []
        while (delivery := consumer.get(timeout=5)) is not None:
            bodies.append(delivery.body)
            delivery.ack()
    assert {verb_for(b) for b in bodies} == {"requeue"} and len(set(bodies)) == N, (len(bodies), len(set(bodies)))


def test_counts_sync(metrics: Metrics, harness: Any) -> None:
    queue = harness.new_queue()
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        publisher = conn.publisher()
        for i in range(3 * N):
            publisher.publish(harness.publish_target(queue), f"m-{i}".encode(), message_id=f"m-{i}")
        assert publisher.flush(timeout=TIMEOUT)
        consumer = conn.consume(queue, prefetch=400)
        decided: set[bytes] = set()
        while len(decided) < 3 * N:
            delivery = consumer.get(timeout=TIMEOUT)
            assert delivery is not None, f"{len(decided)} of {3 * N} decided"
            if delivery.body in decided:
                continue  # a requeued copy: left unsettled, back to the broker on close
            decided.add(delivery.body)
            verb = verb_for(delivery.body)
            if not supported(conn.capabilities, verb):
                with pytest.raises(UnsupportedVerbError):
                    getattr(delivery, verb)()
                verb = "ack"  # still pending: the refused call decided nothing
            getattr(delivery, verb)()
        # Requeued copies may still be arriving: the gauge and the consumer agree once they stop.
        eventually(lambda: metrics.total("ackbridge.unsettled", messaging__destination__name=queue)
                   == consumer.unsettled, timeout=TIMEOUT, message="the unsettled gauge reads consumer.unsettled")
        capabilities = conn.capabilities
        consumer.close()
    check_counts(metrics, harness, queue, capabilities)


def test_counts_async(metrics: Metrics, harness: Any) -> None:
    queue = harness.new_queue()

    async def run() -> Capabilities:
        async with await ackbridge.connect_async(harness.url(), **harness.connect_options()) as conn:
            publisher = conn.publisher()
            for i in range(3 * N):
                await publisher.publish(harness.publish_target(queue), f"m-{i}".encode(), message_id=f"m-{i}")
            assert await publisher.flush(timeout=TIMEOUT)
            consumer = await conn.consume(queue, prefetch=400)
            decided: set[bytes] = set()
            while len(decided) < 3 * N:
                delivery = await consumer.get(timeout=TIMEOUT)
                assert delivery is not None, f"{len(decided)} of {3 * N} decided"
                if delivery.body in decided:
                    continue
                decided.add(delivery.body)
                verb = verb_for(delivery.body)
                if not supported(conn.capabilities, verb):
                    with pytest.raises(UnsupportedVerbError):
                        await getattr(delivery, verb)()
                    verb = "ack"
                await getattr(delivery, verb)()
            await consumer.close()
            return conn.capabilities

    check_counts(metrics, harness, queue, asyncio.run(run()))


def test_off_records_nothing() -> None:
    """No provider configured (the API's proxy only): connections get no observer."""
    from ackbridge.observability import connection_observer
    from ackbridge.urls import parse_url

    assert connection_observer(parse_url("amqp://user:secret@127.0.0.1:5672/"), "rabbitmq") is None


@pytest.mark.parametrize("url", ["amqp://user:s3cret@host:5672/", "nats://tok:s3cret@host:4222"])
def test_no_credential_in_attributes(url: str) -> None:
    from ackbridge.observability.attributes import connection_attributes
    from ackbridge.urls import parse_url

    values = [str(v) for v in connection_attributes(parse_url(url), "rabbitmq").values()]
    assert not any("s3cret" in v or "user" in v or "tok" in v for v in values)


def test_a_settlement_after_close_is_counted_as_stale_refused(metrics: Metrics, tmp_path: Any) -> None:
    from tests.local.harness import LocalHarness

    harness = LocalHarness(tmp_path)
    try:
        queue = harness.new_queue()
        with ackbridge.connect(harness.url()) as conn:
            for i in range(2):
                conn.publish(queue, f"m-{i}".encode(), message_id=f"m-{i}").result(10)
            consumer = conn.consume(queue, prefetch=10)
            first, second = consumer.get(timeout=TIMEOUT), consumer.get(timeout=TIMEOUT)
            assert first is not None and second is not None
            first.ack()
            consumer.close()
            with pytest.raises(ackbridge.ConsumerClosedError):
                second.ack()
            with pytest.raises(ackbridge.AlreadySettledError):
                first.ack()  # settled before: refused, but not stale
        assert metrics.total("ackbridge.stale_refused") == 1
    finally:
        harness.cleanup()
