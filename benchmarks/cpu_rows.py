"""The rows of benchmarks/cpu_per_message.py: per plugin, its set-up and, per row, both sides.

A side is ``work(n)``: it prepares what it needs (an emptied or filled queue,
uncounted) and then does the row's work on n messages, timed between two
``perf_counter()`` calls that benchmarks/cpu_clock.py reads the CPU clock at.
The sides come from the per-broker benchmarks (rabbitmq_bench.py, nats_bench.py,
mqtt_bench.py, amqp10_bench.py, async_face_bench.py, spark_stream_bench.py) and,
where those have none, from cpu_raw_sides.py and cpu_ackbridge_sides.py; the embedded broker's
fair raw side (persist-queue) from cpu_raw_persistqueue.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import amqp10_bench as a10
import async_face_bench as afb
import cpu_ackbridge_sides as ab
import cpu_raw_proton_asyncio as raw_proton_asyncio
import cpu_raw_sides as raw
import mqtt_bench as mb
import nats
import nats_bench as nb
import rabbitmq_bench as rb
import spark_stream_bench as ssb
from cpu_clock import install
from nats.aio.client import Client
from rstream import Producer

try:
    import cpu_raw_persistqueue as pq
except ModuleNotFoundError:  # persist-queue comes with the `bench` extra; its rows then show no raw side
    pq = None  # type: ignore[assignment]

Work = Callable[[int], object]
BODY = rb.BODY
WINDOW = 1000
nb.BODY = BODY  # nats_bench sends 100 B by default; every row here but MQTT's sends 256 B
install(rb, afb, nb, mb, a10)


@dataclass(frozen=True)
class Row:
    name: str
    ackbridge: Work
    raw: Work | None
    raw_name: str


def _then(*steps: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        for step in steps:
            step()
    return run


def side(prepare: Callable[[], object], work: Work) -> Work:
    """A side that prepares its queue (not timed), then works."""
    def run(n: int) -> object:
        prepare()
        return work(n)
    return run


def _pq_put_fresh(folder: str, n: int) -> None:
    """persist-queue's put side, into a new queue under *folder* each round."""
    assert pq is not None
    pq.put(os.path.join(folder, f"pq-{uuid.uuid4().hex[:8]}"), n, BODY)


@contextlib.contextmanager
def rabbitmq(n: int) -> Iterator[list[Row]]:
    queue = f"ab-cpu-{uuid.uuid4().hex[:8]}"
    rb.declare(queue)
    empty = functools.partial(rb.purge, queue)
    full = _then(empty, lambda: rb.fill(queue, n))
    prefetch = 1000

    def aio(coro_fn: Callable[..., Coroutine[Any, Any, float]], *args: Any, **kw: Any) -> Work:
        return lambda k: asyncio.run(coro_fn(queue, k, *args, **kw))

    rows = [
        Row("rabbitmq sync publish+confirms", side(empty, lambda k: rb.ab_publish(queue, k, WINDOW)),
            side(empty, lambda k: rb.raw_publish(queue, k, WINDOW)), "pika SelectConnection"),
        Row("rabbitmq async publish+confirms", side(empty, aio(afb.async_publish, WINDOW)),
            side(empty, aio(afb.aio_pika_publish, WINDOW)), "aio-pika"),
        Row("rabbitmq async publish (aio-pika transport)",
            side(empty, aio(afb.async_publish, WINDOW, asyncio_transport="aio-pika")),
            side(empty, aio(afb.aio_pika_publish, WINDOW)), "aio-pika"),
        Row("rabbitmq sync consume+ack, get()", side(full, lambda k: rb.ab_consume(queue, k, prefetch, 1)),
            side(full, lambda k: raw.pika_select_consume(queue, k, prefetch)), "pika SelectConnection"),
        Row("rabbitmq sync consume+ack, handler", side(full, lambda k: ab.consume_handler(rb.URL, queue, k, prefetch)),
            side(full, lambda k: raw.pika_select_consume(queue, k, prefetch)), "pika SelectConnection"),
        Row("rabbitmq async consume+ack", side(full, aio(afb.async_consume, prefetch, 1)),
            side(full, aio(afb.aio_pika_consume, prefetch, 1)), "aio-pika"),
        Row("rabbitmq async consume (aio-pika transport)",
            side(full, aio(afb.async_consume, prefetch, 1, asyncio_transport="aio-pika")),
            side(full, aio(afb.aio_pika_consume, prefetch, 1)), "aio-pika"),
    ]
    try:
        yield rows
    finally:
        rb.delete(queue)


@contextlib.contextmanager
def mqtt(n: int) -> Iterator[list[Row]]:
    url = f"mqtt://{mb.HOST}:{mb.PORT}"
    body = b"x" * 100  # mqtt_bench's raw side sends 100 B

    def topic() -> str:
        return f"bench/{uuid.uuid4().hex[:8]}/q"

    with mb.private_mosquitto() as port:  # unlimited queue for the consume backlog
        private = f"mqtt://{mb.HOST}:{port}"

        def async_consume(k: int) -> None:
            name = topic()
            mb._fill(name, k, port)
            asyncio.run(ab.consume_async(private, name, k, mb.INFLIGHT, session_expiry=1))

        yield [
            Row("mqtt sync publish+confirms (QoS 1)", lambda k: mb.ab_publish(k, topic()),
                lambda k: mb.raw_publish(k, topic()), "paho"),
            Row("mqtt async publish+confirms (QoS 1)",
                lambda k: asyncio.run(ab.publish_async(url, topic(), k, 10_000, body, publish_inflight=mb.INFLIGHT)),
                lambda k: mb.raw_publish(k, topic()), "paho"),
            Row("mqtt sync consume+ack, get()", lambda k: mb.ab_consume(k, topic(), port),
                lambda k: mb.raw_consume(k, topic(), port), "paho"),
            Row("mqtt sync consume+ack, handler", lambda k: mb.ab_consume_handler(k, topic(), port),
                lambda k: mb.raw_consume(k, topic(), port), "paho"),
            Row("mqtt async consume+ack", async_consume, lambda k: mb.raw_consume(k, topic(), port), "paho"),
        ]


@contextlib.contextmanager
def amqp10(n: int) -> Iterator[list[Row]]:
    name = f"ab10-cpu-{uuid.uuid4().hex[:8]}"
    address = f"/amq/queue/{name}"
    url = f"amqp10://guest:guest@{a10.HOST}:{a10.PORT}"
    window, prefetch = 65536, 200  # amqp10_bench's: RabbitMQ's link credit, and its prefetch
    a10._mgmt("PUT", name, {"durable": True, "auto_delete": False, "arguments": {}})
    empty = functools.partial(a10._mgmt, "DELETE", name, suffix="/contents")
    full = _then(empty, lambda: a10.raw_send(address, n, BODY))
    try:
        yield [
            Row("amqp10 sync send+settlement", side(empty, lambda k: a10.ab_send(address, k, BODY, window)),
                side(empty, lambda k: a10.raw_send(address, k, BODY)), "proton"),
            Row("amqp10 async send+settlement",
                side(empty, lambda k: asyncio.run(ab.publish_async(url, address, k, window, BODY))),
                side(empty, lambda k: a10.raw_send(address, k, BODY)), "proton"),
            Row("amqp10 sync receive+accept, get()", side(full, lambda k: a10.ab_receive(address, k, prefetch)),
                side(full, lambda k: a10.raw_receive(address, k, prefetch)), "proton"),
            Row("amqp10 sync receive+accept, handler",
                side(full, lambda k: a10.ab_receive_handler(address, k, prefetch)),
                side(full, lambda k: a10.raw_receive(address, k, prefetch)), "proton"),
            # The asyncio face against raw proton in the same layout (its container on a
            # thread, the loop taking and accepting), then against raw proton on one thread.
            Row("amqp10 async receive+accept",
                side(full, lambda k: asyncio.run(ab.consume_async(url, address, k, prefetch))),
                side(full, lambda k: asyncio.run(raw_proton_asyncio.receive(address, k, prefetch))),
                "proton, container thread"),
            Row("amqp10 async receive+accept (raw on one thread)",
                side(full, lambda k: asyncio.run(ab.consume_async(url, address, k, prefetch))),
                side(full, lambda k: a10.raw_receive(address, k, prefetch)), "proton"),
        ]
    finally:
        a10._mgmt("DELETE", name)


@contextlib.contextmanager
def nats_jetstream(n: int) -> Iterator[list[Row]]:
    # The raw client and queue set-up on a loop of their own thread, as nats_bench.py does:
    # the sync ackbridge sides run on the main thread as an application's would.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Coroutine[Any, Any, object]) -> object:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    nc = run(nats.connect(nb.URL))
    assert isinstance(nc, Client)
    try:
        yield [
            Row("nats sync publish+PubAck", lambda k: nb.ab_publish(loop, nc, k),
                lambda k: run(nb.raw_publish(nc, k)), "nats-py publish_async"),
            Row("nats async publish+PubAck", lambda k: run(nb.ab_publish_async(nc, k)),
                lambda k: run(nb.raw_publish(nc, k)), "nats-py publish_async"),
            # The sync face against raw nats-py in the same layout (its loop on a thread, the
            # caller's thread taking and acking), then against raw nats-py on one thread.
            Row("nats sync consume+ack", lambda k: nb.ab_consume(loop, nc, k),
                lambda k: raw.nats_pull_consume_on_thread(loop, nc, k), "nats-py, hand pull, loop thread"),
            Row("nats sync consume+ack (raw on one thread)", lambda k: nb.ab_consume(loop, nc, k),
                lambda k: run(raw.nats_pull_consume(nc, k)), "nats-py, hand pull"),
            Row("nats async consume+ack", lambda k: run(nb.ab_consume_async(nc, k)),
                lambda k: run(raw.nats_pull_consume(nc, k)), "nats-py, hand pull"),
        ]
    finally:
        run(nc.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _create_stream(stream: str) -> None:
    producer = Producer(raw.STREAM_HOST, raw.STREAM_PORT, username="guest", password="guest")
    await producer.start()
    try:
        await producer.create_stream(stream)
    finally:
        await producer.close()


@contextlib.contextmanager
def streams(n: int) -> Iterator[list[Row]]:
    url = f"rabbitmq-stream://guest:guest@{raw.STREAM_HOST}:{raw.STREAM_PORT}/"
    made: list[str] = []

    def fresh(fill: bool) -> str:
        stream = f"ab-cpu-{uuid.uuid4().hex[:8]}"
        made.append(stream)
        if fill:
            ssb.fill([stream], n, len(BODY))
        else:
            asyncio.run(_create_stream(stream))
        return stream

    try:
        yield [
            Row("streams sync publish+confirms", lambda k: ab.publish(url, fresh(False), k, WINDOW, BODY),
                lambda k: asyncio.run(raw.rstream_publish(fresh(False), k, WINDOW)), "rstream send_batch"),
            Row("streams async publish+confirms",
                lambda k: asyncio.run(ab.publish_async(url, fresh(False), k, WINDOW, BODY)),
                lambda k: asyncio.run(raw.rstream_publish(fresh(False), k, WINDOW)), "rstream send_batch"),
            Row("streams sync consume+ack", lambda k: ab.consume(url, fresh(True), k, 1000),
                lambda k: asyncio.run(raw.rstream_consume(fresh(True), k)), "rstream Consumer"),
            Row("streams async consume+ack", lambda k: asyncio.run(ab.consume_async(url, fresh(True), k, 1000)),
                lambda k: asyncio.run(raw.rstream_consume(fresh(True), k)), "rstream Consumer"),
        ]
    finally:
        ssb.drop_streams(made)


@contextlib.contextmanager
def embedded(n: int) -> Iterator[list[Row]]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"local://{tmp}/bench.db"
        published, leased = os.path.join(tmp, "raw-publish.db"), os.path.join(tmp, "raw-consume.db")
        prefetch = 500  # core_bench's

        def ab_full(queue: str) -> Callable[[], None]:
            return lambda: ab.publish(url, queue, n, WINDOW, BODY)

        def queue() -> str:
            return f"q-{uuid.uuid4().hex[:8]}"

        def sync_consume(k: int) -> None:
            name = queue()
            ab_full(name)()
            ab.consume(url, name, k, prefetch)

        def async_consume(k: int) -> None:
            name = queue()
            ab_full(name)()
            asyncio.run(ab.consume_async(url, name, k, prefetch))

        insert = functools.partial(raw.sqlite_insert, published)
        take = side(lambda: raw.sqlite_insert(leased, n, WINDOW), lambda k: raw.sqlite_take_delete(leased, k, prefetch))
        pq_put: Work | None = None
        pq_take: Work | None = None
        pq_name = "persist-queue not installed (the bench extra)"
        if pq is not None:
            pq_path = os.path.join(tmp, "pq-consume")
            pq_put = functools.partial(_pq_put_fresh, tmp)
            pq_take = side(lambda: pq.put(pq_path, n, BODY), lambda k: pq.get_ack(pq_path, k))
        yield [
            Row("embedded sync publish+confirms", lambda k: ab.publish(url, queue(), k, WINDOW, BODY),
                lambda k: insert(k, WINDOW), "sqlite3 inserts"),
            Row("embedded async publish+confirms",
                lambda k: asyncio.run(ab.publish_async(url, queue(), k, WINDOW, BODY)),
                lambda k: insert(k, WINDOW), "sqlite3 inserts"),
            Row("embedded sync consume+ack", sync_consume, take, "sqlite3 lease+delete"),
            Row("embedded async consume+ack", async_consume, take, "sqlite3 lease+delete"),
            # The fair raw side: a durable SQLite queue with per-message acks a user would pick instead.
            Row("embedded sync publish+confirms (persist-queue)", lambda k: ab.publish(url, queue(), k, WINDOW, BODY),
                pq_put, "persist-queue SQLiteAckQueue put" if pq is not None else pq_name),
            Row("embedded sync consume+ack, get() (persist-queue)", sync_consume, pq_take,
                "persist-queue SQLiteAckQueue get+ack" if pq is not None else pq_name),
        ]


SUITES: dict[str, Callable[[int], contextlib.AbstractContextManager[list[Row]]]] = {
    "rabbitmq": rabbitmq, "mqtt": mqtt, "amqp10": amqp10, "nats": nats_jetstream, "streams": streams,
    "embedded": embedded}
