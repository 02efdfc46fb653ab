"""A connection cut while retries wait in delay queues (RabbitMQ, through the fault
proxy): LOST 0, and no attempt of any message reaches the handler twice.

30 messages each fail their first attempt; once the broker shows all 30 copies in
``QUEUE.retry.0`` and the queue empty, the proxy resets the pipeline's connection. The pump's held copy
goes back to its delay queue, the consumers come back with the reconnect, and every
message then succeeds at attempt 2. Publishing and the depth checks go around the
proxy (the management API and a direct connection).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, ORIGINAL_ID, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from ackbridge.testing.proxy import FaultProxy
from tests.pipeline.brokers import RABBIT_URL, broker, queue_name, wait_for

N = 30


@pytest.mark.rabbitmq
def test_cut_while_retries_wait_loses_nothing_and_runs_no_attempt_twice() -> None:
    with broker("rabbitmq") as b, ackbridge.connect(RABBIT_URL) as admin, FaultProxy(5672) as proxy:
        queue = queue_name("cut")
        admin.declare_queue(queue)
        # Long enough for the management API (refreshed every few seconds) to see every copy waiting.
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(10.0))
        runs: Counter[tuple[str, int]] = Counter()
        lock = threading.Lock()

        def handler(delivery: Any) -> None:
            attempt = int(delivery.headers.get(ATTEMPT, 1))
            with lock:
                runs[(delivery.headers.get(ORIGINAL_ID) or delivery.message_id, attempt)] += 1
            if attempt == 1:
                raise RuntimeError("first attempt fails")

        try:
            with ackbridge.connect(f"amqp://guest:guest@127.0.0.1:{proxy.port}/") as conn, \
                    Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(handler, prefetch=50)
                ids = [f"cut-{n}" for n in range(N)]
                for message_id in ids:
                    admin.publish(queue, b"x", message_id=message_id)
                assert admin.flush(10)
                # Every first attempt finished: its copy waits in the delay queue (on the broker's side).
                b.wait_depth(admin, queue + ".retry.0", N)
                b.wait_depth(admin, queue, 0)
                proxy.reset()
                wait_for(lambda: sum(v for (_, a), v in runs.items() if a == 2) >= N, "every second attempt", 90)
                b.wait_depth(admin, queue, 0)
                b.wait_depth(admin, queue + ".retry.0", 0)
                b.wait_depth(admin, queue + ".dlq", 0)
            assert proxy.connections_seen >= 2, "the cut did not happen"
            lost = [i for i in ids if runs[(i, 2)] == 0]
            twice = {key: count for key, count in runs.items() if count > 1}
            assert lost == [] and twice == {}, (lost, twice)
            assert set(runs) == {(i, a) for i in ids for a in (1, 2)}
        finally:
            for name in policy.delay_queues(queue):
                admin.delete_queue(name)
            admin.delete_queue(queue)


@pytest.mark.rabbitmq
@pytest.mark.asyncio
async def test_async_cut_while_retries_wait_loses_nothing_and_runs_no_attempt_twice() -> None:
    import asyncio

    from ackbridge.pipeline.aio import Pipeline as AsyncPipeline

    with broker("rabbitmq") as b, ackbridge.connect(RABBIT_URL) as admin, FaultProxy(5672) as proxy:
        queue = queue_name("a-cut")
        admin.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(10.0))
        runs: Counter[tuple[str, int]] = Counter()

        async def handler(delivery: Any) -> None:
            attempt = int(delivery.headers.get(ATTEMPT, 1))
            runs[(delivery.headers.get(ORIGINAL_ID) or delivery.message_id, attempt)] += 1
            if attempt == 1:
                raise RuntimeError("first attempt fails")

        async def until(condition: Any, timeout: float) -> None:
            deadline = asyncio.get_running_loop().time() + timeout
            while not condition():
                assert asyncio.get_running_loop().time() < deadline, "timed out"
                await asyncio.sleep(0.05)

        def depth(name: str, expected: int) -> Any:
            return asyncio.to_thread(b.wait_depth, admin, name, expected)

        ids = [f"acut-{n}" for n in range(N)]
        try:
            conn = await ackbridge.connect_async(f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
            async with conn, AsyncPipeline(conn, queue, policy=policy) as pipeline:
                await pipeline.consume(handler, prefetch=50)
                for message_id in ids:
                    admin.publish(queue, b"x", message_id=message_id)
                assert admin.flush(10)
                await depth(queue + ".retry.0", N)
                await depth(queue, 0)
                proxy.reset()
                await until(lambda: sum(v for (_, a), v in runs.items() if a == 2) >= N, 90)
                await depth(queue, 0)
                await depth(queue + ".retry.0", 0)
                await depth(queue + ".dlq", 0)
            assert proxy.connections_seen >= 2, "the cut did not happen"
            twice = {key: count for key, count in runs.items() if count > 1}
            assert twice == {} and set(runs) == {(i, a) for i in ids for a in (1, 2)}, (twice, sorted(runs))
        finally:
            for name in policy.delay_queues(queue):
                admin.delete_queue(name)
            admin.delete_queue(queue)
