"""A pipeline consumer whose handler always fails: run as a child process, SIGKILLed by
test_killed_consumer.py while its retry waits in a delay queue.

``python failing_app.py URL QUEUE DELAY``: consumes QUEUE under a policy of 3 attempts,
``DELAY`` seconds apart, and writes ``failed <attempt>`` on stdout after each failure.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import ackbridge
from ackbridge.pipeline import ATTEMPT, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline


def main(url: str, queue: str, delay: float) -> None:
    def handler(delivery: Any) -> None:
        print(f"failed {delivery.headers.get(ATTEMPT, 1)}", flush=True)
        raise RuntimeError("the child always fails")

    with ackbridge.connect(url) as conn, Pipeline(conn, queue, policy=RedeliveryPolicy(
            attempts=3, schedule=Schedule.fixed(delay))) as pipeline:
        pipeline.consume(handler)
        print("ready", flush=True)
        threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
