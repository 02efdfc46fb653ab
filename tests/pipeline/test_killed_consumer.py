"""A consumer SIGKILLed while a retry waits: the copy stays in its delay queue with its
attempt count, and the next pipeline on the queue runs it as attempt 2, once.

The child (failing_app.py) fails attempt 1 and says when its retry copy is confirmed
and the original acked; the parent checks that the broker holds the copy in
``QUEUE.retry.0`` and nothing in ``QUEUE``, kills the child, and consumes with a
pipeline of its own. The embedded broker gives a killed process's leases back after
``lease_timeout`` (set to 1 s here); RabbitMQ and Mosquitto when the connection drops;
JetStream when the pump's ``ack_wait`` runs out.

Mosquitto tells no depth, and looking at a session takes it over from the child: on
MQTT 5 the sessions are read after the kill with a raw paho client
(:mod:`tests.pipeline.mqtt_sessions`), the delay topic's without acking (its copy stays
for the next pipeline), and every session drained at the end. There the child's queue
consumer is closed before the kill (``close-main``): a PUBACK has no answer, and one
written a moment before a SIGKILL was seen lost (1 run in 7: the original came back as
attempt 1). The SIGKILL still hits the pump that holds the copy unacked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, ORIGINAL_ID, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from tests.conftest import require_port
from tests.pipeline.brokers import Broker, broker, queue_name, wait_for
from tests.pipeline.failing_child import kill, said, start
from tests.pipeline.mqtt_sessions import URLS, held, held_by_every_session


@contextmanager
def _broker(where: str) -> Iterator[Broker]:
    if where == "mqtt5":
        require_port(1883, "Mosquitto")
        yield Broker(where, URLS["5"])
        return
    with broker(where) as b:
        yield b


@pytest.mark.parametrize("where", [pytest.param("local", id="local"),
                                   pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
                                   pytest.param("nats", id="nats", marks=pytest.mark.nats),
                                   pytest.param("mqtt5", id="mqtt5", marks=pytest.mark.mqtt)])
def test_sigkill_while_a_retry_waits_keeps_the_message_and_its_attempt(where: str) -> None:
    with _broker(where) as b:
        mqtt = where == "mqtt5"
        url = b.url + ("?lease_timeout=1" if where == "local" else "")
        # Long enough for the management API (refreshed every few seconds) to show the copy waiting.
        delay = 15.0 if where == "rabbitmq" else 2.0
        queue = queue_name("killed")
        retry = queue + ".retry.0"
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(delay))
        with ackbridge.connect(url) as conn:
            conn.declare_queue(queue)
            child = start(url, queue, delay)
            try:
                conn.publish(queue, b"k", message_id="k-1").result(10)
                assert said(child) == "failed 1"
                assert said(child) == "waits 2"  # copy confirmed, original acked
                if not mqtt:
                    b.wait_depth(conn, retry, 1)  # the copy waits (held by the child's pump)
                    b.wait_depth(conn, queue, 0)
                else:
                    assert child.stdin is not None
                    child.stdin.write("close-main\n")
                    child.stdin.flush()
                    assert said(child) == "main closed"
            finally:
                kill(child)
            if mqtt:
                # The dead child's sessions: QUEUE holds nothing, its delay topic the copy (left
                # unacked by this look, so the next pipeline's pump gets it).
                assert held(queue) == []
                [waiting] = held(retry, keep=True)
                assert (waiting.body, waiting.properties[ATTEMPT], waiting.properties[ORIGINAL_ID]) == (
                    b"k", "2", "k-1")
            runs: list[tuple[Any, Any]] = []
            done = threading.Event()

            def handler(delivery: Any) -> None:
                runs.append((delivery.headers.get(ATTEMPT), delivery.headers.get(ORIGINAL_ID)))
                done.set()

            try:
                with Pipeline(conn, queue, policy=policy) as pipeline:
                    pipeline.consume(handler)
                    assert done.wait(60), "the waiting retry never came back"
                    if not mqtt:
                        b.wait_depth(conn, queue, 0)
                        b.wait_depth(conn, retry, 0)
                        b.wait_depth(conn, queue + ".dlq", 0)
                    wait_for(lambda: len(runs) >= 1, "the run")
                if mqtt:
                    assert held_by_every_session(queue, policy) == {}  # acked once, nothing left anywhere
                assert runs == [(2, "k-1")]  # attempt 2: its count kept; once
            finally:
                if where != "local":
                    for name in policy.delay_queues(queue):
                        conn.delete_queue(name)
                    conn.delete_queue(queue)
