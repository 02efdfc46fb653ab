"""A consumer SIGKILLed while a retry waits: the copy stays in its delay queue with its
attempt count, and the next pipeline on the queue runs it as attempt 2, once.

The child (failing_app.py) fails attempt 1; the parent waits until the broker holds
the copy in ``QUEUE.retry.0`` and nothing in ``QUEUE``, kills the child, and consumes
with a pipeline of its own. The embedded broker gives a killed process's leases back
after ``lease_timeout`` (set to 1 s here); RabbitMQ when the connection drops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, ORIGINAL_ID, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import broker, queue_name, wait_for

APP = Path(__file__).with_name("failing_app.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("where", [pytest.param("local", id="local"),
                                   pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq)])
def test_sigkill_while_a_retry_waits_keeps_the_message_and_its_attempt(where: str) -> None:
    with broker(where) as b:
        url = b.url + ("?lease_timeout=1" if where == "local" else "")
        # Long enough for the management API (refreshed every few seconds) to show the copy waiting.
        delay = 2.0 if where == "local" else 15.0
        queue = queue_name("killed")
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(delay))
        with ackbridge.connect(url) as conn:
            conn.declare_queue(queue)
            child = subprocess.Popen([sys.executable, str(APP), url, queue, str(delay)], stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
            try:
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "ready"
                conn.publish(queue, b"k", message_id="k-1").result(10)
                assert child.stdout.readline().strip() == "failed 1"
                b.wait_depth(conn, queue + ".retry.0", 1)  # the copy waits (held by the child's pump)
                b.wait_depth(conn, queue, 0)
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait(30)
            assert child.stdout is not None
            assert child.stdout.read() == "", "the child ran attempt 2 before it was killed"
            child.stdout.close()
            runs: list[tuple[Any, Any]] = []
            done = threading.Event()

            def handler(delivery: Any) -> None:
                runs.append((delivery.headers.get(ATTEMPT), delivery.headers.get(ORIGINAL_ID)))
                done.set()

            try:
                with Pipeline(conn, queue, policy=policy) as pipeline:
                    pipeline.consume(handler)
                    assert done.wait(60), "the waiting retry never came back"
                    b.wait_depth(conn, queue, 0)
                    b.wait_depth(conn, queue + ".retry.0", 0)
                    b.wait_depth(conn, queue + ".dlq", 0)
                    wait_for(lambda: len(runs) >= 1, "the run")
                assert runs == [(2, "k-1")]  # attempt 2: its count kept; once
            finally:
                if where == "rabbitmq":
                    for name in policy.delay_queues(queue):
                        conn.delete_queue(name)
                    conn.delete_queue(queue)
