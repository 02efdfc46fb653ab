"""The pipeline's I/O-free rules: schedules, the policy's plan, the header set, the
throttle and the circuit breaker."""

from __future__ import annotations

import pytest

from ackbridge.kernel.backoff import Schedule
from ackbridge.pipeline import (
    ATTEMPT,
    FAILURE_REASON,
    FIRST_FAILURE,
    LAST_FAILURE,
    ORIGINAL_ID,
    ORIGINAL_QUEUE,
    RETRY_DUE,
    Circuit,
    CircuitBreaker,
    Exhausted,
    RedeliveryPolicy,
    Step,
    Throttle,
)
from ackbridge.pipeline.headers import REASON_CHARS, describe, epoch_of, timestamp


def test_schedules() -> None:
    assert [Schedule.fixed(2).delay(n) for n in (1, 2, 5)] == [2, 2, 2]
    assert [Schedule.explicit([1, 10, 60]).delay(n) for n in (1, 2, 3, 4)] == [1, 10, 60, 60]
    exp = Schedule.exponential(0.5, factor=2, max_delay=3, levels=5, jitter=0)
    assert exp.levels == (0.5, 1.0, 2.0, 3.0, 3.0)
    jittered = Schedule.exponential(1.0, jitter=0.2)
    for _ in range(200):
        assert 0.8 <= jittered.delay(1) <= 1.2
    with pytest.raises(ValueError):
        Schedule.explicit([])
    with pytest.raises(ValueError):
        Schedule.fixed(1, jitter=1.0)


def test_plan_retries_then_dead_letters() -> None:
    policy = RedeliveryPolicy(attempts=3, schedule=Schedule.explicit([1, 10]))
    assert policy.delay_queues("q") == ["q.retry.0", "q.retry.1"]
    first = policy.plan("q", {"app": "x"}, "m", ValueError("bad"), now=1000.0)
    assert (first.step, first.destination, first.delay, first.attempt) == (Step.RETRY, "q.retry.0", 1, 1)
    assert first.headers[ATTEMPT] == 2 and first.headers["app"] == "x"
    assert first.message_id == "m~2" and first.headers[ORIGINAL_ID] == "m"
    assert epoch_of(first.headers[RETRY_DUE]) == pytest.approx(1001.0)
    assert first.headers[FIRST_FAILURE] == first.headers[LAST_FAILURE] == timestamp(1000.0)
    second = policy.plan("q", first.headers, first.message_id, ValueError("worse"), now=1002.0)
    assert (second.step, second.destination, second.headers[ATTEMPT]) == (Step.RETRY, "q.retry.1", 3)
    assert second.headers[FIRST_FAILURE] == timestamp(1000.0)
    assert second.headers[LAST_FAILURE] == timestamp(1002.0)
    last = policy.plan("q", second.headers, second.message_id, KeyError("gone"), now=1013.0)
    assert (last.step, last.destination, last.headers[ATTEMPT]) == (Step.DEAD_LETTER, "q.dlq", 3)
    assert last.message_id == "m~dead" and last.headers[ORIGINAL_ID] == "m"
    assert last.headers[FAILURE_REASON] == "KeyError: 'gone'"
    assert last.headers[ORIGINAL_QUEUE] == "q"
    assert RETRY_DUE not in last.headers


def test_plan_drop_and_one_attempt() -> None:
    policy = RedeliveryPolicy(attempts=1, exhausted=Exhausted.DROP)
    assert policy.delay_queues("q") == []
    assert policy.plan("q", {}, None, RuntimeError(), now=0).step is Step.DROP
    with pytest.raises(ValueError):
        RedeliveryPolicy(attempts=0)


def test_reason_is_bounded_and_redacted() -> None:
    text = describe(ValueError("connect amqp://user:s3cret@host/ failed " + "x" * 1000))
    assert "s3cret" not in text and "user:***@" in text
    assert text.startswith("ValueError: ") and len(text) <= len("ValueError: ") + REASON_CHARS
    assert describe(RuntimeError()) == "RuntimeError"


def test_throttle_spaces_runs() -> None:
    throttle = Throttle(rate=10, burst=2)
    assert throttle.take(0.0) == 0 and throttle.take(0.0) == 0
    assert throttle.take(0.0) == pytest.approx(0.1)
    assert throttle.take(1.0) == 0  # refilled


def test_breaker_opens_and_probes() -> None:
    breaker = CircuitBreaker(failures=2, cooldown=5)
    breaker.failed(0.0)
    assert breaker.state is Circuit.CLOSED and breaker.wait(0.0) == 0
    breaker.failed(1.0)
    assert breaker.state is Circuit.OPEN and breaker.wait(2.0) == pytest.approx(4.0)
    assert breaker.wait(6.0) == 0 and breaker.state is Circuit.HALF_OPEN
    breaker.failed(6.5)  # the probe failed: open again
    assert breaker.state is Circuit.OPEN and breaker.wait(7.0) == pytest.approx(4.5)
    assert breaker.wait(12.0) == 0
    breaker.succeeded()
    assert breaker.state is Circuit.CLOSED


def test_the_twins_have_the_same_public_names() -> None:
    from ackbridge.pipeline import aio, sync

    def names(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("_") or n in ("__enter__", "__aenter__")}

    assert names(sync.Pipeline) - {"__enter__"} == names(aio.Pipeline) - {"__aenter__"}


def test_every_shipped_adapter_declares_delayed_retry() -> None:
    """The capability table says, per broker, how the pipeline delays a retry: never the
    "does not declare" default, and emulated only where tests/pipeline runs it (the
    held brokers in tests/pipeline/test_held_retry.py)."""
    from ackbridge.capabilities import NO_DELAYED_RETRY, Level, RetryMethod
    from ackbridge.plugins import registry

    found: dict[str, set[Level]] = {}
    for spec in registry().specs():
        for caps in (spec.capabilities, *spec.variants):
            assert caps.delayed_retry is not NO_DELAYED_RETRY and caps.delayed_retry.how, caps.broker
            found.setdefault(caps.broker, set()).add((caps.delayed_retry.level, caps.retry_method))
            if caps.delayed_retry.level is Level.EMULATED:  # the CLI's table names the method
                assert caps.retry_row()[1] == f"emulated ({caps.retry_method.value})", caps.retry_row()
    queues, holding = (Level.EMULATED, RetryMethod.DELAY_QUEUES), (Level.EMULATED, RetryMethod.HOLDING)
    expected = {"embedded": {queues}, "rabbitmq": {queues}, "nats-jetstream": {queues}, "mqtt5": {queues},
                "mqtt3.1.1": {holding}, "amqp10": {holding}, "rabbitmq-streams": {holding}}
    for broker, levels in expected.items():
        assert found.get(broker) == levels, (broker, found.get(broker))


def test_the_finished_window_keeps_first_attempts_untracked_and_apart_from_later_ones() -> None:
    """A first attempt is kept as its bare id (the collector does not track a str: one tracked
    tuple per delivery set off collections in proportion to the messages), a later one as a pair."""
    import gc

    from ackbridge.pipeline.copies import FinishedAttempts

    window = FinishedAttempts(size=100)
    window.finish("m", 1)
    assert window.finished("m", 1) and not window.finished("m", 2)
    window.finish("m", 2)
    assert window.finished("m", 2) and not window.finished("n", 1)
    firsts = [key for key in window._current if isinstance(key, str)]
    assert firsts == ["m"], window._current
    assert not any(gc.is_tracked(key) for key in firsts)


def test_held_retries_run_in_due_order_and_close_gives_the_rest_up() -> None:
    """The holder runs each held delivery once, when due, earliest first (whatever the order
    it was held in); close() runs nothing more and says how many it gave up."""
    import threading
    import time

    from ackbridge.pipeline.holding import Held, HeldRetries

    ran: list[str] = []
    done = threading.Event()

    def run(held: Held) -> None:
        ran.append(held.delivery)
        if len(ran) == 2:
            done.set()

    holder = HeldRetries(run, "rules")
    try:
        holder.hold("late", {"ackbridge-retry-attempt": 2}, 0.3)
        holder.hold("soon", {"ackbridge-retry-attempt": 2}, 0.05)
        holder.hold("never", {"ackbridge-retry-attempt": 3}, 60.0)
        assert done.wait(10), ran
        time.sleep(0.1)
        assert ran == ["soon", "late"]
    finally:
        assert holder.close() == 1  # "never": given back, not run
    assert ran == ["soon", "late"]


def test_a_held_view_shows_the_policy_headers_and_settles_the_delivery_itself() -> None:
    from ackbridge.pipeline.holding import Held

    class Delivery:
        headers = {"tenant": "t1"}
        acked = 0

        def ack(self) -> None:
            self.acked += 1

    delivery = Delivery()
    view = Held(0.0, 0, delivery, {"tenant": "t1", "ackbridge-retry-attempt": 3}).view()
    assert view.headers["ackbridge-retry-attempt"] == 3 and delivery.headers == {"tenant": "t1"}
    view.ack()
    assert delivery.acked == 1
