"""Scoreboard rows (issue 36): the connection cut while retries wait in delay queues, on every
broker with delayed retry (embedded, RabbitMQ, NATS JetStream).

N ids are published with confirms (around the fault: a direct connection); a pipeline
(``RedeliveryPolicy(attempts=3, Schedule.fixed(DELAY))``) consumes them on a connection of
its own, and its handler fails each message's first attempt. Once the broker shows all N
copies in ``QUEUE.retry.0``, ``QUEUE`` empty and no second attempt has run yet, the
pipeline's connection is cut: a FaultProxy resets its TCP connection (RabbitMQ, NATS), or
the embedded broker's connection is severed through the declared fault seam. The pump's
held copy goes back to its delay queue, the consumers come back with the reconnect, and
every message then succeeds at attempt 2.

The application's side effect is the successful run: its list, by original message id,
is what the row counts (tests/scoreboard/checker.py): LOST = confirmed and never in the
list, duplicated = in the list more than once; both must be 0, no (id, attempt) may run
twice, and the broker must end holding nothing in the queue, its delay queue and its
dead-letter queue (RabbitMQ: the management API; JetStream: its stream and consumer
counts; embedded: the broker file's rows).

The same scenario with a real broker restart (``rabbitmqctl stop_app`` / ``start_app``)
is :func:`test_rabbitmq_restart_while_retries_wait`, marked ``stops_shared_broker``: it
stops the RabbitMQ every other test shares, so scripts/test.sh runs it alone, after the rest.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import ackbridge
from ackbridge.pipeline import ATTEMPT, ORIGINAL_ID, RedeliveryPolicy, Schedule
from ackbridge.pipeline.sync import Pipeline
from ackbridge.testing.faults import faults
from ackbridge.testing.proxy import FaultProxy
from tests.pipeline.brokers import Broker, broker, queue_name, wait_for
from tests.scoreboard.checker import History, ScoreRow, markdown, score

#: ids per cell in CI
N = 300
#: Long enough for every first attempt to be copied and for the management API (refreshed
#: every few seconds) to show all N copies waiting before the first is due; the test checks
#: that no second attempt ran before the cut, so a slower machine fails loudly, never silently.
DELAY = 20.0
PORTS = {"rabbitmq": 5672, "nats": 4222}
CELLS = [pytest.param("local", id="embedded"),
         pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
         pytest.param("nats", id="nats-jetstream", marks=pytest.mark.nats)]
NAMES = {"local": "embedded", "rabbitmq": "rabbitmq-classic", "nats": "nats-jetstream"}


class FirstAttemptFails(Exception):
    pass


class Application:
    """The handler and what it did: runs per (original id, attempt), effects by original id."""

    def __init__(self) -> None:
        self.runs: Counter[tuple[str, int]] = Counter()
        self.effects: list[str] = []
        self._lock = threading.Lock()

    def handle(self, delivery: Any) -> None:
        original = str(delivery.headers.get(ORIGINAL_ID) or delivery.message_id)
        attempt = int(delivery.headers.get(ATTEMPT, 1))
        with self._lock:
            self.runs[(original, attempt)] += 1
            if attempt == 1:
                raise FirstAttemptFails(original)
            self.effects.append(original)  # the side effect: once per message, or it is a duplicate

    def second_attempts(self) -> int:
        with self._lock:
            return sum(count for (_, attempt), count in self.runs.items() if attempt >= 2)


def publish(admin: Any, queue: str, history: History, prefix: str) -> list[str]:
    """N ids with confirms, around the fault; the history records each outcome."""
    ids = [f"{prefix}-{n}" for n in range(N)]
    publisher = admin.publisher(window=200)
    confirms = []
    for message_id in ids:
        history.attempted.add(message_id)
        confirms.append(publisher.publish(queue, message_id.encode(), message_id=message_id))
    assert publisher.flush(timeout=60), "the ids were not all confirmed"
    for confirm in confirms:
        outcome = confirm.outcome
        assert outcome is not None
        history.outcome(str(confirm.message_id), outcome.status)
    return ids


def wait_all_waiting(b: Broker, admin: Any, queue: str, app: Application) -> None:
    """Every first attempt copied: the broker holds all N in the delay queue, none in the queue,
    and no second attempt has run (the cut must find every retry still waiting)."""
    b.wait_depth(admin, queue + ".retry.0", N)
    b.wait_depth(admin, queue, 0)
    assert app.second_attempts() == 0, "a retry came due before the cut: DELAY is too short for this machine"
    assert sum(app.runs.values()) == N, app.runs


def wait_all_done(b: Broker, admin: Any, queue: str, policy: RedeliveryPolicy, app: Application) -> None:
    wait_for(lambda: len(set(app.effects)) >= N, "every second attempt", 120)
    b.wait_depth(admin, queue, 0)
    for name in policy.delay_queues(queue):
        b.wait_depth(admin, name, 0)
    b.wait_depth(admin, queue + ".dlq", 0)


def row(where: str, fault: str, history: History, app: Application) -> ScoreRow:
    history.delivered.update(app.effects)
    scored = score(NAMES[where], "pipeline", fault, history)
    print(markdown([scored]))
    return scored


def check(scored: ScoreRow, app: Application, ids: list[str]) -> None:
    table = markdown([scored])
    assert scored.injections == 1, f"the fault did not happen\n{table}"
    assert scored.confirmed == N, table
    assert scored.lost == 0 and scored.unexpected == 0, table
    assert scored.duplicated == 0, f"a message reached the application twice\n{table}"
    twice = {key: count for key, count in app.runs.items() if count > 1}
    assert twice == {}, f"an attempt ran twice: {twice}"
    assert set(app.runs) == {(i, a) for i in ids for a in (1, 2)}, sorted(set(app.runs))[:10]


@contextmanager
def cut_point(where: str, b: Broker) -> Iterator[tuple[str, Callable[[Any], None], Callable[[Any], bool]]]:
    """The pipeline's URL, how to cut its connection, and whether a cut was seen."""
    if where == "local":
        url = b.url + "?lease_timeout=1"  # a severed connection's leases come back within a second
        before: dict[str, int] = {}

        def sever(conn: Any) -> None:
            seam = faults(conn)
            before["generation"] = seam.generation
            seam.sever("scoreboard: cut while retries wait")

        yield url, sever, lambda conn: faults(conn).generation > before["generation"]
        return
    with FaultProxy(PORTS[where]) as proxy:
        url = (f"amqp://guest:guest@127.0.0.1:{proxy.port}/" if where == "rabbitmq"
               else f"nats://127.0.0.1:{proxy.port}")
        yield url, lambda conn: proxy.reset(), lambda conn: proxy.connections_seen >= 2


def cleanup(admin: Any, b: Broker, queue: str, policy: RedeliveryPolicy) -> None:
    if b.name == "local":
        return  # the embedded broker's file goes with its directory
    for name in policy.delay_queues(queue):
        admin.delete_queue(name)
    admin.delete_queue(queue)


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("where", CELLS)
def test_cut_while_retries_wait_row(where: str) -> None:
    with broker(where) as b, ackbridge.connect(b.url) as admin, cut_point(where, b) as (url, cut, was_cut):
        queue = queue_name("row-cut")
        admin.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(DELAY))
        app, history = Application(), History()
        started = time.monotonic()
        try:
            with ackbridge.connect(url) as conn, Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(app.handle, prefetch=50)
                ids = publish(admin, queue, history, f"cut-{where}")
                wait_all_waiting(b, admin, queue, app)
                cut(conn)
                wait_all_done(b, admin, queue, policy, app)
                history.injections = int(was_cut(conn))
            history.elapsed_s = time.monotonic() - started
            check(row(where, "connection cut while retries wait", history, app), app, ids)
        finally:
            cleanup(admin, b, queue, policy)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.slow
@pytest.mark.rabbitmq
@pytest.mark.stops_shared_broker
@pytest.mark.timeout(600)
def test_rabbitmq_restart_while_retries_wait() -> None:
    """The row's real restart: ``stop_app`` while all N copies wait, ``start_app``; the
    durable delay queue keeps them, the pipeline reconnects and runs each attempt 2 once."""
    with broker("rabbitmq") as b, ackbridge.connect(b.url) as conn:
        queue = queue_name("row-restart")
        conn.declare_queue(queue)
        policy = RedeliveryPolicy(attempts=3, schedule=Schedule.fixed(DELAY))
        app, history = Application(), History()
        started = time.monotonic()
        generation = faults(conn).generation
        try:
            with Pipeline(conn, queue, policy=policy) as pipeline:
                pipeline.consume(app.handle, prefetch=50)
                ids = publish(conn, queue, history, "restart")
                wait_all_waiting(b, conn, queue, app)
                try:
                    _rabbitmqctl("stop_app")
                finally:
                    _rabbitmqctl("start_app")  # the shared broker is always started again
                    _rabbitmqctl("await_startup")
                wait_all_done(b, conn, queue, policy, app)
                history.injections = int(faults(conn).generation > generation)
            history.elapsed_s = time.monotonic() - started
            check(row("rabbitmq", "broker restart while retries wait", history, app), app, ids)
        finally:
            cleanup(conn, b, queue, policy)
