"""Raw-client sides the older benchmarks lack, each the fastest correct code a user would write.

Each times its work between two ``CLOCK.perf_counter()`` calls (benchmarks/cpu_clock.py),
after its own set-up, as the older benchmarks' functions do.

* RabbitMQ consume: pika ``SelectConnection``, ``basic_consume``, ``basic_ack`` per message.
* NATS JetStream consume: pull requests published by hand on a subscribed inbox, as
  plugins/ackbridge-nats (receiving.py) pulls: a callback per message on nats-py's
  subscription task, ``+ACK`` published per message, more credit asked for when half
  is used. ``fetch()`` starts a task and a future per message; this does not. For the
  sync face, the same pull with nats-py's loop on a thread of its own and the caller's
  thread taking and acking each message (:func:`nats_pull_drain_on_thread`).
* RabbitMQ streams: rstream ``Producer.send_batch`` with a confirm callback, ``window``
  in flight; ``Consumer.subscribe`` decoding AMQP 1.0 (as ackbridge does), the offset
  stored every ``STORE_EVERY`` messages and at the end.
* Embedded: sqlite3 with the local broker's pragmas, the same inserts (a transaction
  per window, fsynced) and deletes (a transaction per prefetch batch).
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import threading
from typing import Any

import pika
import rabbitmq_bench as rb
from cpu_clock import CLOCK
from nats.aio.client import Client
from nats_bench import PREFETCH as NATS_PREFETCH
from nats_bench import _fill as nats_fill
from nats_bench import _new_queue as nats_new_queue
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from ackbridge_nats.naming import DEFAULT_DURABLE, stream_name

BODY = rb.BODY
STREAM_HOST, STREAM_PORT = "127.0.0.1", 5552
STORE_EVERY = 100


def pika_select_consume(queue: str, n: int, prefetch: int) -> None:
    """Consume *n* from a filled *queue*, acking each delivery on pika's I/O loop."""
    state = {"got": 0}

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        if state["got"] == 0:
            CLOCK.perf_counter()
        ch.basic_ack(method.delivery_tag)
        state["got"] += 1
        if state["got"] == n:
            CLOCK.perf_counter()
            conn.close()

    def on_channel(ch: Any) -> None:
        ch.basic_qos(prefetch_count=prefetch,
                     callback=lambda _f: ch.basic_consume(queue, on_message, auto_ack=False))

    conn = pika.SelectConnection(rb.params(), on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda c, r: c.ioloop.stop())
    conn.ioloop.start()
    assert state["got"] == n


async def nats_pull_consume(nc: Client, m: int, expires: float = 1.0) -> None:
    """Drain *m* from a new, filled JetStream queue by hand-made pull requests."""
    subject = await nats_new_queue(nc)
    await nats_fill(nc, subject, m)
    await nats_pull_drain(nc, subject, m, expires)
    await nc.jsm().delete_stream(stream_name(subject))


class _HandPull:
    """Pull requests published by hand on a subscribed inbox, as plugins/ackbridge-nats
    (receiving.py) pulls: more credit asked for when half of it is used."""

    def __init__(self, nc: Client, subject: str, expires: float) -> None:
        self.nc = nc
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name(subject)}.{DEFAULT_DURABLE}"
        self.inbox = nc.new_inbox()
        self.requested = 0
        self.expires_ns = int(expires * 1e9)

    async def top_up(self) -> None:
        free = NATS_PREFETCH - self.requested
        if free >= NATS_PREFETCH // 2:
            self.requested += free
            request = json.dumps({"batch": free, "expires": self.expires_ns}).encode()
            await self.nc.publish(self.next_subject, request, reply=self.inbox)

    async def arrived(self, msg: Any) -> bool:
        """Count *msg* in; False for a status (the request ended with its unused credit)."""
        if not msg.reply:
            unused = int((msg.headers or {}).get("Nats-Pending-Messages", "0") or 0)
            self.requested = max(0, self.requested - unused) if unused else 0
            await self.top_up()
            return False
        self.requested -= 1
        return True


async def nats_pull_drain(nc: Client, subject: str, m: int, expires: float = 1.0) -> None:
    """Consume and +ACK *m* messages of the filled queue *subject* by hand-made pull
    requests (benchmarks/instructions.py counts this alone, the queue filled apart)."""
    pull = _HandPull(nc, subject, expires)
    done = asyncio.Event()
    state = {"got": 0}

    async def on_msg(msg: Any) -> None:
        if not await pull.arrived(msg):
            return
        await nc.publish(msg.reply, b"+ACK")
        state["got"] += 1
        if state["got"] == m:
            CLOCK.perf_counter()
            done.set()
            return
        await pull.top_up()

    sub = await nc.subscribe(pull.inbox, cb=on_msg)
    CLOCK.perf_counter()
    await pull.top_up()
    await asyncio.wait_for(done.wait(), 120)
    await sub.unsubscribe()


def nats_pull_drain_on_thread(loop: asyncio.AbstractEventLoop, nc: Client, subject: str, m: int,
                              expires: float = 1.0) -> None:
    """:func:`nats_pull_drain` in the sync face's process layout: nats-py runs on *loop*
    (its own thread, as a sync program must run it) and the caller's thread takes each
    message from a queue and acks it.

    The cheapest correct hand-off a user could write: the subscription callback puts
    the reply subject on a ``queue.SimpleQueue``; the caller appends each ack to a list
    and wakes the loop only when the list was empty, so one wake-up writes a run of
    ``+ACK``s (``run_coroutine_threadsafe(msg.ack())`` per message costs a task and two
    futures each). Credit is asked for as :func:`nats_pull_drain` asks; the durable's
    ``max_ack_pending`` (the prefetch) bounds what is unacked. Timed from the first pull
    request to the last ``+ACK`` written and flushed (a PING answered), as ackbridge's
    ``consumer.flush()`` ends its side.
    """
    pull = _HandPull(nc, subject, expires)
    handed: queue.SimpleQueue[str] = queue.SimpleQueue()
    acks: list[str] = []
    acks_lock = threading.Lock()

    async def on_msg(msg: Any) -> None:
        if await pull.arrived(msg):
            handed.put(msg.reply)
            await pull.top_up()

    async def write_acks() -> None:
        with acks_lock:
            replies = acks[:]
            acks.clear()
        for reply in replies:
            await nc.publish(reply, b"+ACK")

    def wake() -> None:
        loop.create_task(write_acks())

    async def start() -> Any:
        sub = await nc.subscribe(pull.inbox, cb=on_msg)
        CLOCK.perf_counter()
        await pull.top_up()
        return sub

    async def finish() -> None:
        await write_acks()
        await nc.flush()

    sub = asyncio.run_coroutine_threadsafe(start(), loop).result()
    for _ in range(m):
        reply = handed.get(timeout=120)
        with acks_lock:
            acks.append(reply)
            first = len(acks) == 1
        if first:
            loop.call_soon_threadsafe(wake)
    asyncio.run_coroutine_threadsafe(finish(), loop).result()
    CLOCK.perf_counter()
    asyncio.run_coroutine_threadsafe(sub.unsubscribe(), loop).result()


def nats_pull_consume_on_thread(loop: asyncio.AbstractEventLoop, nc: Client, m: int) -> None:
    """:func:`nats_pull_consume` with the messages taken and acked on the caller's thread."""
    subject = asyncio.run_coroutine_threadsafe(nats_new_queue(nc), loop).result()
    asyncio.run_coroutine_threadsafe(nats_fill(nc, subject, m), loop).result()
    nats_pull_drain_on_thread(loop, nc, subject, m)
    asyncio.run_coroutine_threadsafe(nc.jsm().delete_stream(stream_name(subject)), loop).result()


async def rstream_publish(stream: str, n: int, window: int) -> None:
    """Publish *n* AMQP 1.0 messages to *stream* with at most *window* unconfirmed."""
    producer = Producer(STREAM_HOST, STREAM_PORT, username="guest", password="guest")
    await producer.start()
    state = {"confirmed": 0}
    room = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        assert status.is_confirmed, "a publish was refused"
        state["confirmed"] += 1
        room.set()

    try:
        await producer.send_batch(stream, [AMQPMessage(body=BODY)])  # declares the publisher: not timed
        CLOCK.perf_counter()
        sent = 0
        while sent < n:
            while sent - state["confirmed"] > window // 2:
                room.clear()
                await room.wait()
            # New objects each time: rstream writes each one's publishing id into it.
            batch = [AMQPMessage(body=BODY) for _ in range(min(window // 2, n - sent))]
            await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
            sent += len(batch)
        while state["confirmed"] < n:
            room.clear()
            await room.wait()
        CLOCK.perf_counter()
    finally:
        await producer.close()


async def rstream_consume(stream: str, n: int, reference: str = "raw-bench") -> None:
    """Read *n* records from the start of *stream*, decoding each, storing the offset as it goes."""
    consumer = Consumer(STREAM_HOST, STREAM_PORT, username="guest", password="guest")
    await consumer.start()
    done = asyncio.Event()
    state = {"got": 0}

    async def on_message(_message: Any, context: Any) -> None:
        state["got"] += 1
        if state["got"] % STORE_EVERY == 0 or state["got"] == n:
            await consumer.store_offset(stream, reference, context.offset)
        if state["got"] == n:
            CLOCK.perf_counter()
            done.set()

    try:
        CLOCK.perf_counter()
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder, subscriber_name=reference,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 120)
    finally:
        await consumer.close()


def _sqlite(path: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, "
               "body BLOB NOT NULL, props TEXT NOT NULL, owner TEXT)")
    db.execute("CREATE INDEX IF NOT EXISTS messages_ready ON messages(queue, owner, id)")
    return db


def sqlite_insert(path: str, n: int, window: int) -> None:
    """*n* rows, a fsynced transaction per *window* (the confirm of a durable publish)."""
    db = _sqlite(path, "FULL")
    CLOCK.perf_counter()
    for start in range(0, n, window):
        db.execute("BEGIN")
        db.executemany("INSERT INTO messages(queue, body, props) VALUES ('q', ?, '{}')",
                       ((BODY,) for _ in range(min(window, n - start))))
        db.execute("COMMIT")
    CLOCK.perf_counter()
    db.close()


def sqlite_take_delete(path: str, n: int, prefetch: int) -> None:
    """Take *prefetch* rows at a time (leased to an owner), then delete each one (its ack)."""
    db = _sqlite(path, "NORMAL")
    CLOCK.perf_counter()
    done = 0
    while done < n:
        db.execute("BEGIN")
        rows = db.execute("UPDATE messages SET owner='me' WHERE id IN (SELECT id FROM messages WHERE queue='q' "
                          "AND owner IS NULL ORDER BY id LIMIT ?) RETURNING id, body", (prefetch,)).fetchall()
        db.execute("COMMIT")
        db.execute("BEGIN")
        db.executemany("DELETE FROM messages WHERE owner='me' AND id=?", ((row[0],) for row in rows))
        db.execute("COMMIT")
        done += len(rows)
    CLOCK.perf_counter()
    db.close()
