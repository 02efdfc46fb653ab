"""Scoreboard rows (issue 36) for the brokers whose delayed retry is held by the consumer
(AMQP 1.0 on RabbitMQ, RabbitMQ streams, MQTT 3.1.1; ackbridge.pipeline.holding).

**Cut while retries are held.** N ids are published with confirms on a direct
connection; a pipeline (``RedeliveryPolicy(attempts=3, Schedule.fixed(DELAY))``)
consumes them through a FaultProxy with prefetch N, and its handler fails each
message's first attempt, so every delivery is held unsettled for its retry. Once all
N first attempts have run and no second one has, the proxy resets the pipeline's
connection. The broker takes the held deliveries back (AMQP 1.0 releases them, the
MQTT session keeps them in flight, the stream is read again from the stored offset)
and delivers them again on the new connection, as attempt 1: the count lived in the
consumer (documented in docs/failure-policy.md). Each then fails once more, is held
again and succeeds at attempt 2.

Counted on the application's side effect, the successful run, by message id
(tests/scoreboard/checker.py): LOST 0 and duplicated 0; a held attempt whose delivery
went back to the broker never runs (the held view of the old connection is dropped);
and the broker ends holding nothing (RabbitMQ: a passive declare; streams: the stored
offset at the last record; MQTT: the session resumed with paho).

**SIGKILL while a retry is held.** A child pipeline (tests/pipeline/failing_app.py) fails
attempt 1 and holds the delivery; it is SIGKILLed while the retry waits. The next
pipeline gets the message again as attempt 1 (the count died with the child; the
delay-queue brokers keep it, tests/pipeline/test_killed_consumer.py), runs it once and
settles it; nothing is dead-lettered.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from ackbridge.testing.proxy import FaultProxy
from tests.pipeline.brokers import wait_for
from tests.pipeline.failing_child import kill, said, start
from tests.pipeline.held_brokers import HELD, PORTS, WHERE, HeldBroker
from tests.scoreboard.checker import History, ScoreRow, markdown, score

#: ids per cell: all held at once, so no more than the broker lets one consumer hold
#: (Mosquitto keeps 20 QoS 1 messages in flight per client by default).
N = {"amqp10": 200, "rabbitmq-streams": 200, "mqtt3.1.1": 20}
#: Long enough for every first attempt to run before the first retry is due; the test
#: checks that no second attempt ran before the cut, so a slow machine fails loudly.
DELAY = 6.0


class FirstAttemptFails(Exception):
    pass


class Application:
    """The handler and what it did: runs per (id, attempt), effects by id (the body: MQTT
    3.1.1 carries no message id)."""

    def __init__(self) -> None:
        self.runs: Counter[tuple[str, int]] = Counter()
        self.effects: list[str] = []
        self._lock = threading.Lock()

    def handle(self, delivery: Any) -> None:
        message_id = delivery.body.decode()
        attempt = int(delivery.headers.get(ATTEMPT, 1))
        with self._lock:
            self.runs[(message_id, attempt)] += 1
            if attempt == 1:
                raise FirstAttemptFails(message_id)
            self.effects.append(message_id)

    def count(self, attempt: int) -> int:
        with self._lock:
            return sum(n for (_, a), n in self.runs.items() if a == attempt)


def _proxied(b: HeldBroker, proxy: FaultProxy) -> str:
    port = PORTS[b.name]
    assert f":{port}" in b.url, b.url
    return b.url.replace(f":{port}", f":{proxy.port}")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", WHERE)
def test_cut_while_retries_are_held_row(where: str) -> None:
    n = N[where]
    with HELD[where]() as b, FaultProxy(PORTS[where]) as proxy:
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(DELAY), dead_letter_queue=b.dlq)
        app, history = Application(), History()
        ids = [f"held-{where}-{i}" for i in range(n)]
        started = time.monotonic()
        with ackbridge.connect(_proxied(b, proxy)) as conn, Pipeline(conn, b.queue, policy=policy) as pipeline:
            pipeline.consume(app.handle, prefetch=n)
            with ackbridge.connect(b.url) as direct:
                confirms = []
                for message_id in ids:
                    history.attempted.add(message_id)
                    confirms.append((message_id, direct.publish(b.queue, message_id.encode())))
                for message_id, confirm in confirms:
                    history.outcome(message_id, confirm.result(30).status)
            wait_for(lambda: app.count(1) >= n, "every first attempt")
            assert app.count(2) == 0, "a retry came due before the cut: DELAY is too short for this machine"
            proxy.reset()
            wait_for(lambda: len(set(app.effects)) >= n, "every second attempt", 120)
            history.injections = int(proxy.connections_seen >= 2)
            time.sleep(DELAY + 1)  # the old connection's held views come due: none may run
        history.elapsed_s = time.monotonic() - started
        history.delivered.update(app.effects)
        scored = score(where, "pipeline (held retries)", "connection cut while retries are held", history)
        print(markdown([scored]))
        _check(scored, app, ids, n)
        b.wait_drained(f"{b.queue} settled, every message once")
        assert b.dead(0) == []


def _check(scored: ScoreRow, app: Application, ids: list[str], n: int) -> None:
    table = markdown([scored])
    assert scored.injections == 1, f"the fault did not happen\n{table}"
    assert scored.confirmed == n, table
    assert scored.lost == 0 and scored.unexpected == 0, table
    assert scored.duplicated == 0, f"a message reached the application twice\n{table}"
    # Attempt 2 ran once per message; attempt 1 ran once, or twice where the broker took the
    # held delivery back and delivered it again (the count lived in the consumer).
    assert {i: app.runs[(i, 2)] for i in ids} == dict.fromkeys(ids, 1)
    assert {app.runs[(i, 1)] for i in ids} <= {1, 2}, app.runs
    assert max(a for (_, a) in app.runs) == 2, app.runs


@pytest.mark.parametrize("where", WHERE)
def test_sigkill_while_a_retry_is_held_the_message_comes_back_as_attempt_one(where: str) -> None:
    with HELD[where]() as b:
        child = start(b.url, b.queue, 60.0)
        try:
            with ackbridge.connect(b.url) as conn:
                conn.publish(b.queue, b"k").result(10)
            assert said(child) == "failed 1"
            assert said(child) == "waits 2"  # held, unsettled, for 60 s
        finally:
            kill(child)
        runs: list[Any] = []
        done = threading.Event()

        def handler(delivery: Any) -> None:
            runs.append((delivery.body, delivery.headers.get(ATTEMPT)))
            done.set()

        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(60.0), dead_letter_queue=b.dlq)
        with ackbridge.connect(b.url) as conn, Pipeline(conn, b.queue, policy=policy) as pipeline:
            pipeline.consume(handler)
            assert done.wait(60), "the held message never came back"
            time.sleep(0.3)  # a second run, were the message delivered twice, would show by now
        assert runs == [(b"k", None)]  # attempt 1 again: the count died with the child; once
        b.wait_drained(f"{b.queue} settled once")
        assert b.dead(0) == []
