"""Running ``ackbridge dead-letters`` as a user would (a subprocess) and reading what
the broker holds: RabbitMQ's management API, JetStream's durable counts, the embedded
broker's file (through ``inspect_queue``, which counts its rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ackbridge.errors import BrokerError
from ackbridge.pipeline import RedeliveryPolicy
from ackbridge.pipeline.sync import Pipeline
from tests.pipeline.brokers import RABBIT_URL, Broker, rabbit_queue, wait_for

ACKBRIDGE = str(Path(sys.executable).with_name("ackbridge"))
COUNT = 100


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="100")
    return subprocess.run([ACKBRIDGE, "dead-letters", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def cli_json(*args: str, cwd: Path, code: int = 0) -> dict[str, Any]:
    result = cli(*args, "--json", cwd=cwd)
    assert result.returncode == code, result.stdout + result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def depth(b: Broker, conn: Any, name: str, *, queue: str | None = None) -> int | None:
    """Messages *name* holds (ready + unacked), read on the broker's side. On JetStream a
    dead-letter stream keeps what was acked: its durable's pending count is what is left,
    and before anything consumed it (no durable yet) the stream's own count."""
    if b.name == "rabbitmq":
        found = rabbit_queue(name)
        managed: int | None = None if found is None else found.get("messages")
        # The management API's counts can be seconds old: a count unchanged there may be
        # stale. A passive declare answers with the queue's ready count now (what a
        # closed CLI process left is all ready), so both must agree.
        return managed if managed == live_rabbit_depth(name) else None
    try:
        info = conn.inspect_queue(name)
    except BrokerError:
        if b.name == "nats" and queue is not None:
            dead: int | None = conn.inspect_queue(queue).dead_lettered
            return dead
        raise
    return (info.messages or 0) + (info.unacked or 0)


def live_rabbit_depth(name: str) -> int | None:
    """The ready count of *name* now, from a raw pika passive declare (None: no such queue)."""
    import pika
    import pika.exceptions

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        frame = connection.channel().queue_declare(name, passive=True)
        return int(frame.method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return None
    finally:
        connection.close()


def wait_depths(b: Broker, conn: Any, queue: str, *, main: int, dead: int) -> None:
    """Poll until *queue* holds *main* and its dead-letter queue *dead* (the management
    API refreshes its counts every few seconds: never a sleep)."""
    dlq = queue + ".dlq"
    wait_for(lambda: depth(b, conn, queue) == main and depth(b, conn, dlq, queue=queue) == dead,
             f"{queue} to hold {main} and {dlq} {dead} (now {depth(b, conn, queue)}, "
             f"{depth(b, conn, dlq, queue=queue)})", timeout=60)


def publish(conn: Any, queue: str, count: int = COUNT, **extra: Any) -> list[str]:
    ids = [f"m-{i}" for i in range(count)]
    publisher = conn.publisher(window=count)
    confirms = [publisher.publish(queue, f"body {i}".encode(), message_id=ids[i], **extra) for i in range(count)]
    publisher.flush()
    assert all(c.result(30).confirmed for c in confirms)
    return ids


def dead_letter_by_policy(conn: Any, queue: str, expected: int = COUNT) -> None:
    """Run an always-failing handler through the pipeline (one attempt): each message
    ends in QUEUE.dlq as the policy's copy with the documented header set."""
    failed: list[str] = []

    def handler(delivery: Any) -> None:
        failed.append(delivery.message_id)
        raise ValueError(f"cannot parse order {delivery.message_id}")

    with Pipeline(conn, queue, policy=RedeliveryPolicy(attempts=1)) as pipeline:
        pipeline.consume(handler, prefetch=20)
        wait_for(lambda: len(failed) >= expected, f"{expected} failed runs", timeout=60)


def dead_letter_by_reject(conn: Any, queue: str, expected: int = COUNT) -> None:
    """reject() each message: the broker's (or plugin's) own dead-lettering."""
    with conn.consume(queue, prefetch=50) as consumer:
        for _ in range(expected):
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            delivery.reject()


def drain_ids(conn: Any, queue: str, idle: float = 3.0, headers: list[dict[str, Any]] | None = None) -> Counter[str]:
    """Consume and ack everything *queue* holds; each message id with its count (and
    each message's headers appended to *headers*)."""
    seen: Counter[str] = Counter()
    with conn.consume(queue, prefetch=100) as consumer:
        while (delivery := consumer.get(timeout=idle)) is not None:
            seen[delivery.message_id or ""] += 1
            if headers is not None:
                headers.append(dict(delivery.headers))
            delivery.ack()
    return seen


def cleanup(b: Broker, conn: Any, queue: str) -> None:
    if b.name != "local":  # the embedded broker's file goes with its directory
        conn.delete_queue(queue)

