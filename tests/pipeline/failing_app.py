"""A pipeline consumer whose handler always fails: run as a child process, SIGKILLed by
test_killed_consumer.py while its retry waits in a delay queue.

``python failing_app.py URL QUEUE DELAY``: consumes QUEUE under a policy of 3 attempts,
``DELAY`` seconds apart, and writes ``failed <attempt>`` on stdout after each failure and
``waits <next attempt>`` once its retry copy is confirmed and the original acked (on
MQTT the parent cannot look at the delay queue while this process holds its session),
or, where the broker's retries are held by the consumer, once the delivery is held.
A ``close-main`` line on stdin closes the queue's consumer only (its acks read by the
broker: an MQTT PUBACK has no answer, and one sent just before a SIGKILL can be lost)
and is answered ``main closed``; the delay queues' pumps go on holding their copies.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import ackbridge
from ackbridge.pipeline import ATTEMPT, RedeliveryPolicy, Schedule
from ackbridge.pipeline.policy import Plan, Step
from ackbridge.pipeline.report import Report
from ackbridge.pipeline.sync import Pipeline


class _Told(Report):
    """The pipeline's report, also telling the parent when a retry copy waits."""

    __slots__ = ()

    def copied(self, plan: Plan) -> None:
        super().copied(plan)
        if plan.step is Step.RETRY:
            print(f"waits {plan.headers[ATTEMPT]}", flush=True)

    def held(self, plan: Plan) -> None:  # a broker whose retries the consumer holds
        super().held(plan)
        print(f"waits {plan.headers[ATTEMPT]}", flush=True)


def main(url: str, queue: str, delay: float) -> None:
    def handler(delivery: Any) -> None:
        print(f"failed {delivery.headers.get(ATTEMPT, 1)}", flush=True)
        raise RuntimeError("the child always fails")

    with ackbridge.connect(url) as conn, Pipeline(conn, queue, policy=RedeliveryPolicy(
            attempts=3, schedule=Schedule.fixed(delay))) as pipeline:
        pipeline.report = _Told(conn.capabilities.broker, queue)
        main_consumer = pipeline.consume(handler)
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() == "close-main":
                main_consumer.close()
                print("main closed", flush=True)
        threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
