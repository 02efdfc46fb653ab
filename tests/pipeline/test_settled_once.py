"""Whatever the handler does under the whole pipeline (policy, breaker, throttle,
timeout), each delivery is settled exactly once: every delivery the handler saw ends
settled, nothing is settled twice (a second settle raises AlreadySettledError, which
the consumer would log), and the broker ends holding exactly the dead-lettered ones.
Hypothesis picks the handler's behaviour per message; the broker is the embedded one.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackbridge
from ackbridge.pipeline import ORIGINAL_ID, CircuitBreaker, RedeliveryPolicy, Schedule, Throttle
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import broker, queue_name, wait_for

#: behaviour -> (handler runs, ends in the dead-letter queue) with attempts=2.
BEHAVIOURS = {
    "ok": (1, False),
    "self_ack": (1, False),
    "raise_once": (2, False),
    "raise_always": (2, True),
    "self_ack_then_raise": (1, False),
    "self_reject": (1, True),
}


def _act(behaviour: str, delivery: Any, runs: int) -> None:
    if behaviour == "self_ack":
        delivery.ack()
    elif behaviour == "raise_once" and runs == 1:
        raise RuntimeError("transient")
    elif behaviour == "raise_always":
        raise RuntimeError("poison")
    elif behaviour == "self_ack_then_raise":
        delivery.ack()
        raise RuntimeError("after acking")
    elif behaviour == "self_reject":
        delivery.reject()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(behaviours=st.lists(st.sampled_from(sorted(BEHAVIOURS)), min_size=1, max_size=8))
def test_each_delivery_is_settled_exactly_once(behaviours: list[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="ackbridge")
    seen: list[Any] = []
    runs: dict[str, int] = {}
    lock = threading.Lock()
    with broker("local") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("once")
        conn.declare_queue(queue)

        def handler(delivery: Any) -> None:
            key = delivery.headers.get(ORIGINAL_ID) or delivery.message_id  # copies have ids of their own
            with lock:
                seen.append(delivery)
                runs[key] = runs.get(key, 0) + 1
                count = runs[key]
            _act(key.partition("-")[0], delivery, count)

        pipeline = Pipeline(conn, queue, policy=RedeliveryPolicy(attempts=2, schedule=Schedule.fixed(0.01)),
                            timeout=10.0, throttle=Throttle(rate=1000, burst=5),
                            breaker=CircuitBreaker(failures=3, cooldown=0.02))
        with pipeline:
            pipeline.consume(handler)
            for n, behaviour in enumerate(behaviours):
                conn.publish(queue, b"x", message_id=f"{behaviour}-{n}").result(10)
            expected_runs = sum(BEHAVIOURS[b_][0] for b_ in behaviours)
            wait_for(lambda: len(seen) >= expected_runs, f"{expected_runs} handler runs")
            dead = sum(BEHAVIOURS[b_][1] for b_ in behaviours)
            b.wait_depth(conn, queue + ".dlq", dead)
            b.wait_depth(conn, queue, 0)
            for name in pipeline.policy.delay_queues(queue):
                b.wait_depth(conn, name, 0)
        assert len(seen) == expected_runs
        assert all(d.settled for d in seen), [(d.message_id, d.state) for d in seen if not d.settled]
        assert sorted(runs) == sorted(f"{behaviour}-{n}" for n, behaviour in enumerate(behaviours))
        for n, behaviour in enumerate(behaviours):
            assert runs[f"{behaviour}-{n}"] == BEHAVIOURS[behaviour][0], (behaviour, runs)
    # A double settle would surface as the consumer's "could not settle" or "handler raised" lines.
    bad = [r.getMessage() for r in caplog.records if r.name == "ackbridge" and r.levelno >= logging.WARNING
           and ("could not settle" in r.getMessage() or "raised" in r.getMessage())]
    assert not bad, bad
