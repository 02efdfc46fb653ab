"""Where the pipeline tests run, and how they read what the broker holds.

Depths come from the broker's side: RabbitMQ's management API (``messages``: ready
plus unacked), the embedded broker's file (``inspect_queue`` counts its rows).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import require_port

RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_MGMT = "http://127.0.0.1:15672/api/queues/%2F/"
_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()

#: Each test runs on these; RabbitMQ carries its marker (a CI failure when it is missing).
BROKERS = [pytest.param("local", id="local"), pytest.param("rabbitmq", id="rabbitmq", marks=pytest.mark.rabbitmq),
           pytest.param("nats", id="nats", marks=pytest.mark.nats)]
NATS_URL = "nats://127.0.0.1:4222"


def queue_name(what: str) -> str:
    return f"ab-test-pipeline-{what}-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll *condition* until true; AssertionError naming *what* after *timeout* s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def rabbit_queue(name: str) -> dict[str, Any] | None:
    """The management API's view of *name* (None: no such queue)."""
    request = urllib.request.Request(_MGMT + urllib.parse.quote(name, safe=""), headers={"Authorization": _AUTH})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            found: dict[str, Any] = json.loads(response.read())
            return found
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@dataclass
class Broker:
    """One broker under test: its URL and a broker-side depth reader."""

    name: str
    url: str

    def depth(self, conn: Any, queue: str) -> int | None:
        """Messages *queue* holds (ready + unacked), read on the broker's side (the
        management API; JetStream's and the embedded file's own counts)."""
        if self.name == "rabbitmq":
            found = rabbit_queue(queue)
            return None if found is None else found.get("messages")
        if self.name == "nats" and queue.endswith(".dlq"):
            # JetStream's dead-letter stream has no consumer to inspect: its queue tells the count.
            return conn.inspect_queue(queue.removesuffix(".dlq")).dead_lettered
        info = conn.inspect_queue(queue)
        return (info.messages or 0) + (info.unacked or 0)

    def wait_depth(self, conn: Any, queue: str, expected: int) -> None:
        # The management API refreshes its counts every few seconds: poll, never sleep.
        wait_for(lambda: self.depth(conn, queue) == expected, f"{queue} to hold {expected}")


@contextmanager
def broker(name: str) -> Iterator[Broker]:
    if name == "rabbitmq":
        require_port(5672, "RabbitMQ")
        require_port(15672, "RabbitMQ management API")
        yield Broker(name, RABBIT_URL)
        return
    if name == "nats":
        require_port(4222, "nats-server (JetStream)")
        yield Broker(name, NATS_URL)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield Broker(name, f"local://{os.path.join(tmp, 'b.db')}")


def raw_dead_letter(queue: str) -> tuple[bytes, dict[str, Any]]:
    """Read the one message of *queue* with a raw pika client (body, headers); it is
    given back (nack requeue) so the broker still holds it."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        channel = connection.channel()
        method, properties, body = channel.basic_get(queue, auto_ack=False)
        assert method is not None, f"pika found nothing in {queue}"
        channel.basic_nack(method.delivery_tag, requeue=True)
        return body, dict(properties.headers or {})
    finally:
        connection.close()


def failing_twice(runs: list[tuple[float, Any]], ids: list[str | None]) -> Callable[[Any], None]:
    """A handler that notes each run (its time and attempt header, the delivery's id) and
    raises on the first two: the "fails twice, then succeeds" case of every broker's test."""
    from ackbridge.pipeline import ATTEMPT

    def handler(delivery: Any) -> None:
        runs.append((time.monotonic(), delivery.headers.get(ATTEMPT)))
        ids.append(delivery.message_id)
        if len(runs) < 3:
            raise ValueError(f"not yet ({len(runs)})")

    return handler


def failing_twice_async(runs: list[tuple[float, Any]]) -> Callable[[Any], Awaitable[None]]:
    """:func:`failing_twice` for the asyncio pipeline."""
    ids: list[str | None] = []
    handler = failing_twice(runs, ids)

    async def run(delivery: Any) -> None:
        handler(delivery)

    return run

