"""Held retries on the brokers with no queue to park a copy in (``retry_method`` holding):
AMQP 1.0 on RabbitMQ, RabbitMQ streams and MQTT 3.1.1.

The same cases as tests/pipeline/test_redelivery.py, read on each broker's side:
a handler failing twice then succeeding runs three times, the gaps at least the
schedule's (arrival times, :data:`~tests.pipeline.test_redelivery.TOLERANCE`), its
delivery settled once and nothing left (RabbitMQ's management API; the stream's stored
offset, read with rstream; the MQTT session resumed with paho); an always-failing
handler runs exactly N times and its message ends in the dead-letter destination,
read with the raw client (proton's application-properties; rstream's decoder on the
dead-letter stream; on MQTT 3.1.1, which carries no headers, the body alone).
Closing the pipeline while a delivery is held gives it back unsettled: nothing
dead-lettered, and the next consumer gets it again as attempt 1.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import Level, RetryMethod
from ackbridge.pipeline import ATTEMPT, RedeliveryPolicy, Schedule
from ackbridge.pipeline.aio import Pipeline as AsyncPipeline
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import failing_twice, wait_for
from tests.pipeline.held_brokers import HELD, WHERE, HeldBroker
from tests.pipeline.test_dead_letter_headers_raw import BODY, MESSAGE_ID, _always_failing, _check_header_set
from tests.pipeline.test_redelivery import SCHEDULE, TOLERANCE

POISON = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.2))
TWICE = RedeliveryPolicy(attempts=4, schedule=SCHEDULE)


def _policy(base: RedeliveryPolicy, b: HeldBroker) -> RedeliveryPolicy:
    return RedeliveryPolicy(attempts=base.attempts, schedule=base.schedule, dead_letter_queue=b.dlq)


def _check_schedule(runs: list[tuple[float, Any]]) -> None:
    assert len(runs) == 3, runs
    assert [attempt for _, attempt in runs] == [None, 2, 3]  # the held view shows the attempt
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(runs)]
    assert gaps[0] >= SCHEDULE.levels[0] - TOLERANCE, gaps
    assert gaps[1] >= SCHEDULE.levels[1] - TOLERANCE, gaps


@pytest.mark.parametrize("where", WHERE)
def test_held_brokers_declare_holding(where: str) -> None:
    with HELD[where]() as b, ackbridge.connect(b.url) as conn:
        caps = conn.capabilities
        assert caps.delayed_retry.level is Level.EMULATED, caps.delayed_retry
        assert caps.retry_method is RetryMethod.HOLDING


@pytest.mark.parametrize("where", WHERE)
def test_held_fails_twice_then_succeeds_runs_three_times_on_schedule(where: str) -> None:
    with HELD[where]() as b:
        runs: list[tuple[float, Any]] = []
        ids: list[str | None] = []
        with ackbridge.connect(b.url) as conn, Pipeline(conn, b.queue, policy=_policy(TWICE, b)) as pipeline:
            pipeline.consume(failing_twice(runs, ids))
            assert conn.publish(b.queue, b"order-1", message_id="m-1").result(10).status.value == "confirmed"
            wait_for(lambda: len(runs) >= 3, "the third run")
            time.sleep(0.3)  # a fourth run, were the success not settled, would show by now
        _check_schedule(runs)
        if b.carries_headers:
            assert ids == ["m-1"] * 3  # one delivery, held: no copy, no id of its own
        b.wait_drained(f"{b.queue} settled once, nothing dead-lettered")
        assert b.dead(0) == []


@pytest.mark.parametrize("where", WHERE)
def test_held_always_failing_dead_letters_after_exactly_n_attempts(where: str) -> None:
    with HELD[where]() as b:
        runs: list[Any] = []
        policy = _policy(POISON, b)
        with ackbridge.connect(b.url) as conn, Pipeline(conn, b.queue, policy=policy) as pipeline:
            pipeline.consume(_always_failing(runs))
            # MQTT 3.1.1 carries no headers: there the application's own header is left out.
            conn.publish(b.queue, BODY, message_id=MESSAGE_ID,
                         headers={"tenant": "t1"} if b.carries_headers else None).result(10)
            wait_for(lambda: len(runs) >= 3, "the third run")
            time.sleep(0.5)  # a fourth run would show by now (the schedule's 0.2 s, twice over)
        assert runs == [None, 2, 3]
        [(body, headers)] = b.dead(1)
        assert body == BODY
        if b.carries_headers:
            assert headers["message-id"] == MESSAGE_ID + "~dead"
            _check_header_set(headers, b.queue, 3, attempt_value=3)
        else:
            assert headers == {}  # MQTT 3.1.1: the body alone (docs/failure-policy.md, "Per broker")
        b.wait_drained(f"{b.queue} settled")


@pytest.mark.parametrize("where", WHERE)
def test_held_async_fails_twice_then_succeeds_on_schedule(where: str) -> None:
    with HELD[where]() as b:
        runs: list[tuple[float, Any]] = []

        async def main() -> None:
            async with await ackbridge.connect_async(b.url) as conn:
                async with AsyncPipeline(conn, b.queue, policy=_policy(TWICE, b)) as pipeline:
                    async def handler(delivery: Any) -> None:
                        runs.append((time.monotonic(), delivery.headers.get(ATTEMPT)))
                        if len(runs) < 3:
                            raise ValueError(f"not yet ({len(runs)})")

                    await pipeline.consume(handler)
                    await (await conn.publish(b.queue, b"order-1", message_id="m-1")).result(10)
                    deadline = time.monotonic() + 30
                    while len(runs) < 3 and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(0.3)

        asyncio.run(main())
        _check_schedule(runs)
        b.wait_drained(f"{b.queue} settled once, nothing dead-lettered")


@pytest.mark.parametrize("how", ["close", "drain"])
@pytest.mark.parametrize("where", WHERE)
def test_closing_while_held_gives_the_delivery_back_as_attempt_one(where: str, how: str) -> None:
    """Closing the pipeline, or draining its consumer first (what a service does on
    SIGTERM): the held delivery is neither acked nor dead-lettered (the drain counts it in
    flight and gives it back at its deadline); the next consumer runs it again, as
    attempt 1 (the count lived in the closed pipeline)."""
    with HELD[where]() as b:
        runs: list[Any] = []
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(60.0), dead_letter_queue=b.dlq)
        with ackbridge.connect(b.url) as conn, Pipeline(conn, b.queue, policy=policy) as pipeline:
            main = pipeline.consume(_always_failing(runs))
            conn.publish(b.queue, BODY, message_id=MESSAGE_ID).result(10)
            wait_for(lambda: len(runs) >= 1, "the first run")
            if how == "drain":
                result = main.drain(1.0)
                assert result.abandoned == 1, result  # the held one, given back at the deadline
        assert runs == [None]  # closed within the 60 s back-off: one run
        again: list[Any] = []
        with ackbridge.connect(b.url) as conn:
            consumer = conn.consume(b.queue)
            delivery = consumer.get(timeout=30)
            assert delivery is not None, "the held delivery did not come back"
            again.append((delivery.body, delivery.headers.get(ATTEMPT)))
            delivery.ack()
            consumer.close()
        assert again == [(BODY, None)]
        b.wait_drained(f"{b.queue} settled once")
        assert b.dead(0) == []  # nothing was dead-lettered on the way

