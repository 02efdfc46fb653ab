"""The redelivery policy on real brokers (sync face): retries follow the schedule, the
last failure dead-letters with the documented headers, the original queue ends empty.

Delays are measured from the handler's arrival times (``time.monotonic()`` at each
run) and asserted as minimums: each gap is at least the schedule's delay minus
:data:`TOLERANCE` (the due time travels as millisecond RFC 3339 text, and the wall
clock it is written with is not the monotonic one). No upper bound is asserted.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import (
    ATTEMPT,
    FAILURE_REASON,
    FIRST_FAILURE,
    LAST_FAILURE,
    ORIGINAL_ID,
    ORIGINAL_QUEUE,
    Exhausted,
    RedeliveryPolicy,
    Schedule,
)
from ackbridge.pipeline.headers import epoch_of
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import BROKERS, Broker, broker, failing_twice, queue_name, raw_dead_letter, wait_for

TOLERANCE = 0.05
SCHEDULE = Schedule.explicit([0.4, 0.8])


def _cleanup(conn: Any, b: Broker, queue: str, policy: RedeliveryPolicy) -> None:
    if b.name == "local":
        return  # the embedded broker's file goes with its directory
    for name in policy.delay_queues(queue):
        conn.delete_queue(name)
    conn.delete_queue(queue)


@pytest.mark.parametrize("where", BROKERS)
def test_fails_twice_then_succeeds_runs_three_times_on_schedule(where: str) -> None:
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("twice")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=4, schedule=SCHEDULE)
        runs: list[tuple[float, Any]] = []
        ids: list[str | None] = []

        handler = failing_twice(runs, ids)

        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(handler)
                assert conn.publish(queue, b"order-1", message_id="m-1").result(10).status.value == "confirmed"
                wait_for(lambda: len(runs) >= 3, "the third run")
                # Acked once: the broker holds nothing, anywhere.
                b.wait_depth(conn, queue, 0)
                for name in policy.delay_queues(queue):
                    b.wait_depth(conn, name, 0)
                b.wait_depth(conn, queue + ".dlq", 0)
            assert len(runs) == 3, runs
            assert [attempt for _, attempt in runs] == [None, 2, 3]
            assert ids == ["m-1", "m-1~2", "m-1~3"]  # each copy its own id (a de-duplicating broker keeps it)
            gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(runs)]
            assert gaps[0] >= SCHEDULE.levels[0] - TOLERANCE, gaps
            assert gaps[1] >= SCHEDULE.levels[1] - TOLERANCE, gaps
        finally:
            _cleanup(conn, b, queue, policy)


@pytest.mark.parametrize("where", BROKERS)
def test_always_failing_ends_in_dead_letter_queue_with_headers(where: str) -> None:
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("poison")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.2))
        runs: list[Any] = []

        def handler(delivery: Any) -> None:
            runs.append(delivery.headers.get(ATTEMPT))
            raise KeyError(f"no such order; db at postgres://app:hunter2@db/orders (run {len(runs)})")

        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(handler)
                conn.publish(queue, b"poison", message_id="p-1", headers={"tenant": "t1"}).result(10)
                b.wait_depth(conn, queue + ".dlq", 1)
                b.wait_depth(conn, queue, 0)
                for name in policy.delay_queues(queue):
                    b.wait_depth(conn, name, 0)
            assert runs == [None, 2, 3]
            # Through ackbridge: the copy, its id, the application's header and the policy's.
            consumer = conn.consume(queue + ".dlq")
            dead = consumer.get(timeout=10)
            assert dead is not None
            headers = dict(dead.headers)
            assert (dead.body, dead.message_id, headers["tenant"]) == (b"poison", "p-1~dead", "t1")
            assert headers[ORIGINAL_ID] == "p-1"
            _check_failure_headers(headers, queue, attempts=3)
            dead.requeue()
            consumer.close()
            if b.name == "rabbitmq":
                body, raw = raw_dead_letter(queue + ".dlq")  # a foreign client reads the same set
                assert body == b"poison"
                _check_failure_headers(raw, queue, attempts=3)
                b.wait_depth(conn, queue + ".dlq", 1)
        finally:
            _cleanup(conn, b, queue, policy)


def _check_failure_headers(headers: dict[str, Any], queue: str, attempts: int) -> None:
    assert headers[ATTEMPT] == attempts
    assert headers[ORIGINAL_QUEUE] == queue
    assert epoch_of(headers[FIRST_FAILURE]) <= epoch_of(headers[LAST_FAILURE])
    assert epoch_of(headers[FIRST_FAILURE]) < epoch_of(headers[LAST_FAILURE])  # three failures, time apart
    reason = headers[FAILURE_REASON]
    assert reason.startswith("KeyError: "), reason
    assert "(run 3)" in reason, reason  # the LAST failure's message
    assert "hunter2" not in reason and "app:***@" in reason, reason


@pytest.mark.parametrize("where", BROKERS)
def test_a_copy_that_arrives_twice_runs_the_handler_once(where: str) -> None:
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("twice-copy")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(0.1))
        runs: list[Any] = []
        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(lambda d: runs.append(d.message_id))
                # The same attempt of the same message twice (a copy whose ack was lost).
                for _ in range(2):
                    conn.publish(queue, b"x", message_id="c-1", headers={ATTEMPT: 2}).result(10)
                conn.publish(queue, b"y", message_id="c-2").result(10)
                wait_for(lambda: "c-2" in runs, "the later message")
                b.wait_depth(conn, queue, 0)
            assert runs == ["c-1", "c-2"]
        finally:
            _cleanup(conn, b, queue, policy)


@pytest.mark.parametrize("where", BROKERS)
def test_drop_acks_and_logs(where: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ackbridge.pipeline")
    with broker(where) as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("drop")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=1, exhausted=Exhausted.DROP)
        runs: list[Any] = []

        def handler(delivery: Any) -> None:
            runs.append(1)
            raise RuntimeError("bad")

        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(handler)
                conn.publish(queue, b"x", message_id="d-1").result(10)
                b.wait_depth(conn, queue, 0)
            b.wait_depth(conn, queue + ".dlq", 0)
            assert runs == [1]
            dropped = [r for r in caplog.records if r.name == "ackbridge.pipeline" and "dropped" in r.getMessage()]
            assert len(dropped) == 1 and "'d-1'" in dropped[0].getMessage()
        finally:
            _cleanup(conn, b, queue, policy)


@pytest.mark.rabbitmq
def test_unconfirmed_dead_letter_copy_keeps_the_message() -> None:
    """A dead-letter copy the broker refuses (its queue deleted after the pipeline
    started: unroutable) is never followed by an ack: the original is rejected into
    the broker's own dead-lettering instead. The original is published on another
    connection: on one connection RabbitMQ's Basic.Return is matched by message id
    (docs/broker-quirks.md)."""
    with broker("rabbitmq") as b, ackbridge.connect(b.url) as conn, ackbridge.connect(b.url) as producer:
        queue, custom = queue_name("refused"), queue_name("custom-dlq")
        conn.declare_queue(queue)
        conn.declare_queue(custom, dead_letter=False)
        policy = RedeliveryPolicy(attempts=1, dead_letter_queue=custom)
        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(lambda d: 1 / 0)
                conn.delete_queue(custom, dead_letter=False)
                producer.publish(queue, b"x", message_id="r-1").result(10)
                b.wait_depth(conn, queue + ".dlq", 1)  # the broker's DLX took it: not lost
                b.wait_depth(conn, queue, 0)
        finally:
            _cleanup(conn, b, queue, policy)


@pytest.mark.rabbitmq
def test_missing_dead_letter_queue_is_refused_at_start() -> None:
    """(The embedded broker keeps a publish to any name: nothing to refuse there.)"""
    with broker("rabbitmq") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("no-dlq")
        conn.declare_queue(queue, dead_letter=False)
        policy = RedeliveryPolicy(attempts=2)
        try:
            with Pipeline(conn, queue, policy=policy) as pipeline, pytest.raises(ackbridge.ConfigurationError,
                                                                                  match="dead-letter"):
                pipeline.consume(lambda d: None)
        finally:
            conn.delete_queue(queue, dead_letter=False)


def test_sync_timeout_is_a_failure_the_policy_sees() -> None:
    """The sync face cannot stop the late run; it stops waiting for it, and the policy
    dead-letters the message with HandlerTimeoutError as the reason."""
    release = threading.Event()
    with broker("local") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("timeout")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=1)
        with Pipeline(conn, queue, policy=policy, timeout=0.2) as pipeline:
            pipeline.consume(lambda d: release.wait(30))
            conn.publish(queue, b"slow", message_id="t-1").result(10)
            b.wait_depth(conn, queue + ".dlq", 1)
            b.wait_depth(conn, queue, 0)
            release.set()
        consumer = conn.consume(queue + ".dlq")
        dead = consumer.get(timeout=10)
        assert dead is not None and dead.headers[FAILURE_REASON].startswith("HandlerTimeoutError: ")
        consumer.close()
