"""The redelivery policy on Mosquitto, sync and asyncio faces: the checks of
test_redelivery.py and test_redelivery_async.py, with the broker's side read the only
way Mosquitto shows it.

Mosquitto tells no queue depth, and looking at a session takes it over from the
consumer using it: nothing is polled during a run. Each test waits for the handler's
runs, closes the pipeline (close waits for the run in progress, whose copy is
confirmed and whose original is PUBACKed before it ends), then resumes every session
the pipeline used (the queue, each delay topic, each one's ``/dlq``) with a raw paho
client and asserts what it held (:mod:`tests.pipeline.mqtt_sessions`).

MQTT 5 carries the attempt count and due time in user properties: retries run there.
MQTT 3.1.1 carries the body only: retries are held in the consumer there
(tests/pipeline/test_held_retry.py), and the last attempt dead-letters the body alone.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

import ackbridge
from ackbridge.capabilities import Level, RetryMethod
from ackbridge.pipeline import ATTEMPT, RedeliveryPolicy, Schedule
from ackbridge.pipeline.aio import Pipeline as AsyncPipeline
from ackbridge.pipeline.sync import Pipeline
from tests.conftest import require_port
from tests.pipeline.brokers import failing_twice, failing_twice_async, queue_name, wait_for
from tests.pipeline.mqtt_sessions import URLS, Held, held_by_every_session
from tests.pipeline.test_dead_letter_headers_raw import BODY, MESSAGE_ID, _check_header_set
from tests.pipeline.test_redelivery import SCHEDULE, TOLERANCE

pytestmark = pytest.mark.mqtt

POISON = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.2))
TWICE = RedeliveryPolicy(attempts=4, schedule=SCHEDULE)


@pytest.fixture(autouse=True)
def _mosquitto() -> None:
    require_port(1883, "Mosquitto")


def _delete_sessions(conn: Any, queue: str, policy: RedeliveryPolicy) -> None:
    for name in [queue, *policy.delay_queues(queue)]:
        conn.delete_queue(name)  # with its /dlq session


def _check_ran_three_times_on_schedule(runs: list[tuple[float, Any]]) -> None:
    assert [attempt for _, attempt in runs] == [None, 2, 3], runs
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(runs)]
    assert gaps[0] >= SCHEDULE.levels[0] - TOLERANCE, gaps
    assert gaps[1] >= SCHEDULE.levels[1] - TOLERANCE, gaps


def _check_dead_letter(found: dict[str, list[Held]], queue: str) -> None:
    """Only ``QUEUE/dlq`` holds anything: the one copy, with the documented headers as
    MQTT 5 user properties (text: the attempt count is "3")."""
    assert list(found) == [queue + "/dlq"], found
    [dead] = found[queue + "/dlq"]
    assert (dead.body, dead.dup) == (BODY, False)
    assert dead.properties["ackbridge-message-id"] == MESSAGE_ID + "~dead"
    _check_header_set(dead.properties, queue, 3, attempt_value="3")


def test_mqtt5_declares_delay_queues_and_311_holding() -> None:
    for protocol, method in (("5", RetryMethod.DELAY_QUEUES), ("3.1.1", RetryMethod.HOLDING)):
        with ackbridge.connect(URLS[protocol]) as conn:
            assert conn.capabilities.delayed_retry.level is Level.EMULATED, protocol
            assert conn.capabilities.retry_method is method, protocol


def test_mqtt5_fails_twice_then_succeeds_runs_three_times_on_schedule() -> None:
    with ackbridge.connect(URLS["5"]) as conn:
        queue = queue_name("mqtt-twice")
        conn.declare_queue(queue)
        runs: list[tuple[float, Any]] = []
        ids: list[str | None] = []

        handler = failing_twice(runs, ids)

        try:
            with Pipeline(conn, queue, policy=TWICE) as pipeline:
                pipeline.consume(handler)
                assert conn.publish(queue, b"order-1", message_id="m-1").result(10).status.value == "confirmed"
                wait_for(lambda: len(runs) >= 3, "the third run")
            # Acked once: no session holds anything (the original, each copy, no dead letter).
            assert held_by_every_session(queue, TWICE) == {}
            assert len(runs) == 3, runs
            assert ids == ["m-1", "m-1~2", "m-1~3"]
            _check_ran_three_times_on_schedule(runs)
        finally:
            _delete_sessions(conn, queue, TWICE)


def test_mqtt5_always_failing_ends_in_the_dead_letter_session_with_headers() -> None:
    with ackbridge.connect(URLS["5"]) as conn:
        queue = queue_name("mqtt-poison")
        conn.declare_queue(queue)
        runs: list[Any] = []

        def handler(delivery: Any) -> None:
            runs.append(delivery.headers.get(ATTEMPT))
            raise KeyError(f"no such order; db at postgres://app:hunter2@db/orders (run {len(runs)})")

        try:
            with Pipeline(conn, queue, policy=POISON) as pipeline:
                pipeline.consume(handler)
                conn.publish(queue, BODY, message_id=MESSAGE_ID, headers={"tenant": "t1"}).result(10)
                wait_for(lambda: len(runs) >= 3, "the third run")
            assert runs == [None, 2, 3]
            _check_dead_letter(held_by_every_session(queue, POISON), queue)
        finally:
            _delete_sessions(conn, queue, POISON)


async def _until(condition: Any, what: str, timeout: float = 30.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_mqtt5_async_fails_twice_then_succeeds_on_schedule() -> None:
    import asyncio

    async with await ackbridge.connect_async(URLS["5"]) as conn:
        queue = queue_name("mqtt-a-twice")
        await conn.declare_queue(queue)
        runs: list[tuple[float, Any]] = []

        handler = failing_twice_async(runs)

        try:
            async with AsyncPipeline(conn, queue, policy=TWICE) as pipeline:
                await pipeline.consume(handler)
                await (await conn.publish(queue, b"o", message_id="am-1"))
                await _until(lambda: len(runs) >= 3, "the third run")
            assert await asyncio.to_thread(held_by_every_session, queue, TWICE) == {}
            assert len(runs) == 3, runs
            _check_ran_three_times_on_schedule(runs)
        finally:
            for name in [queue, *TWICE.delay_queues(queue)]:
                await conn.delete_queue(name)


@pytest.mark.asyncio
async def test_mqtt5_async_always_failing_dead_letters_with_headers() -> None:
    import asyncio

    async with await ackbridge.connect_async(URLS["5"]) as conn:
        queue = queue_name("mqtt-a-poison")
        await conn.declare_queue(queue)
        runs: list[Any] = []

        async def handler(delivery: Any) -> None:
            runs.append(delivery.headers.get(ATTEMPT))
            raise KeyError(f"no such order; db at postgres://app:hunter2@db/orders (run {len(runs)})")

        try:
            async with AsyncPipeline(conn, queue, policy=POISON) as pipeline:
                await pipeline.consume(handler)
                await (await conn.publish(queue, BODY, message_id=MESSAGE_ID, headers={"tenant": "t1"}))
                await _until(lambda: len(runs) >= 3, "the third run")
            assert runs == [None, 2, 3]
            _check_dead_letter(await asyncio.to_thread(held_by_every_session, queue, POISON), queue)
        finally:
            for name in [queue, *POISON.delay_queues(queue)]:
                await conn.delete_queue(name)


def test_mqtt311_one_attempt_dead_letters_the_body_alone() -> None:
    """What the 3.1.1 row says of attempts=1: the header-carrying copy cannot be sent,
    so the original is rejected and only its body reaches the dead-letter session."""
    with ackbridge.connect(URLS["3.1.1"]) as conn:
        queue = queue_name("mqtt311-one")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=1)
        runs: list[Any] = []

        def handler(delivery: Any) -> None:
            runs.append(dict(delivery.headers))
            raise KeyError("no such order")

        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(handler)
                conn.publish(queue, BODY).result(10)
                wait_for(lambda: len(runs) >= 1, "the run")
            assert runs == [{}]
            assert held_by_every_session(queue, policy, "3.1.1") == {queue + "/dlq": [Held(BODY, {}, False)]}
        finally:
            conn.delete_queue(queue)
