"""The asyncio twin of test_redelivery.py: the same schedule and dead-letter checks on
``ackbridge.pipeline.aio.Pipeline``, the same tolerance (minimum delays only), and the
handler timeout, which only this face can enforce by cancelling."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, FAILURE_REASON, ORIGINAL_QUEUE, RedeliveryPolicy, Schedule
from ackbridge.pipeline.aio import Pipeline
from tests.pipeline.brokers import BROKERS, Broker, broker, failing_twice_async, queue_name, raw_dead_letter
from tests.pipeline.test_redelivery import SCHEDULE, TOLERANCE, _check_failure_headers


async def _until(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _depth(b: Broker, conn: Any, queue: str, expected: int) -> None:
    async def read() -> int | None:
        if b.name == "rabbitmq":
            return await asyncio.to_thread(b.depth, None, queue)
        if b.name == "nats" and queue.endswith(".dlq"):
            return (await conn.inspect_queue(queue.removesuffix(".dlq"))).dead_lettered
        info = await conn.inspect_queue(queue)
        return int((info.messages or 0) + (info.unacked or 0))

    deadline = time.monotonic() + 30
    while (found := await read()) != expected:
        assert time.monotonic() < deadline, f"{queue} holds {found}, not {expected}"
        await asyncio.sleep(0.05)


async def _cleanup(conn: Any, b: Broker, queue: str, policy: RedeliveryPolicy) -> None:
    if b.name != "local":
        for name in policy.delay_queues(queue):
            await conn.delete_queue(name)
        await conn.delete_queue(queue)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", BROKERS)
async def test_async_fails_twice_then_succeeds_on_schedule(where: str) -> None:
    with broker(where) as b:
        async with await ackbridge.connect_async(b.url) as conn:
            queue = queue_name("a-twice")
            await conn.declare_queue(queue)
            policy = RedeliveryPolicy(attempts=4, schedule=SCHEDULE)
            runs: list[tuple[float, Any]] = []

            handler = failing_twice_async(runs)

            try:
                async with Pipeline(conn, queue, policy=policy) as pipeline:
                    await pipeline.consume(handler)
                    await (await conn.publish(queue, b"o", message_id="am-1"))
                    await _until(lambda: len(runs) >= 3, "the third run")
                    await _depth(b, conn, queue, 0)
                    for name in policy.delay_queues(queue):
                        await _depth(b, conn, name, 0)
                    await _depth(b, conn, queue + ".dlq", 0)
                assert [attempt for _, attempt in runs] == [None, 2, 3]
                gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(runs)]
                assert gaps[0] >= SCHEDULE.levels[0] - TOLERANCE, gaps
                assert gaps[1] >= SCHEDULE.levels[1] - TOLERANCE, gaps
            finally:
                await _cleanup(conn, b, queue, policy)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", BROKERS)
async def test_async_always_failing_dead_letters_with_headers(where: str) -> None:
    with broker(where) as b:
        async with await ackbridge.connect_async(b.url) as conn:
            queue = queue_name("a-poison")
            await conn.declare_queue(queue)
            policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.2))
            runs: list[Any] = []

            async def handler(delivery: Any) -> None:
                runs.append(delivery.headers.get(ATTEMPT))
                raise KeyError(f"no such order; db at postgres://app:hunter2@db/orders (run {len(runs)})")

            try:
                async with Pipeline(conn, queue, policy=policy) as pipeline:
                    await pipeline.consume(handler)
                    await (await conn.publish(queue, b"poison", message_id="ap-1"))
                    await _depth(b, conn, queue + ".dlq", 1)
                    await _depth(b, conn, queue, 0)
                assert runs == [None, 2, 3]
                consumer = await conn.consume(queue + ".dlq")
                dead = await consumer.get(timeout=10)
                assert dead is not None and dead.body == b"poison" and dead.message_id == "ap-1~dead"
                _check_failure_headers(dict(dead.headers), queue, attempts=3)
                await dead.requeue()
                await consumer.close()
                if b.name == "rabbitmq":
                    _, raw = await asyncio.to_thread(raw_dead_letter, queue + ".dlq")
                    _check_failure_headers(raw, queue, attempts=3)
            finally:
                await _cleanup(conn, b, queue, policy)


@pytest.mark.asyncio
async def test_async_timeout_is_a_failure_the_policy_sees() -> None:
    with broker("local") as b:
        async with await ackbridge.connect_async(b.url) as conn:
            queue = queue_name("a-timeout")
            await conn.declare_queue(queue)
            policy = RedeliveryPolicy(attempts=2, schedule=Schedule.fixed(0.05))
            runs: list[Any] = []

            async def handler(delivery: Any) -> None:
                runs.append(delivery.headers.get(ATTEMPT))
                await asyncio.Event().wait()  # never ends by itself

            async with Pipeline(conn, queue, policy=policy, timeout=0.2) as pipeline:
                await pipeline.consume(handler)
                await (await conn.publish(queue, b"slow", message_id="at-1"))
                await _depth(b, conn, queue + ".dlq", 1)
                await _depth(b, conn, queue, 0)
            assert runs == [None, 2]
            consumer = await conn.consume(queue + ".dlq")
            dead = await consumer.get(timeout=10)
            assert dead is not None
            assert dead.headers[FAILURE_REASON].startswith("HandlerTimeoutError: ")
            assert dead.headers[ORIGINAL_QUEUE] == queue
            await consumer.close()
