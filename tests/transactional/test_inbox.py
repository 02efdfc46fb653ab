"""The inbox in one process, both faces, sqlite3 and PostgreSQL, embedded broker and
RabbitMQ: copies the broker stored are acked without running the handler and counted,
the effect table holds each id once, and the queue ends empty on the broker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import ackbridge
from ackbridge.errors import MissingMessageIdError
from ackbridge.testing import eventually
from ackbridge.transactional import Inbox, Retention
from ackbridge.transactional.aio import AsyncInbox
from tests.transactional.appdb import AppDb
from tests.transactional.scenario import assert_exactly_once, assert_queue_empty, ids, publish_with_copies, work_for

COUNT, COPIES = 40, 12


def test_handler_mode_skips_stored_copies(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(COUNT)
    publish_with_copies(harness, queue, names, COPIES)
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox)
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=10, handler=inbox.handler(work_for(app_db)))
        eventually(lambda: inbox.processed + inbox.duplicates_skipped == COUNT + COPIES, timeout=60,
                   message="every stored message handled")
        consumer.close()
    assert inbox.duplicates_skipped == COPIES
    assert inbox.processed == COUNT
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
    assert inbox.size() == COUNT
    db.close()


def test_batches_ack_after_one_commit(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(COUNT)
    publish_with_copies(harness, queue, names, COPIES)
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox)
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=50)
        stop = threading.Event()
        seen = 0

        def until_all(db_: Any, delivery: Any) -> None:
            work_for(app_db)(db_, delivery)

        while seen < COUNT + COPIES:
            done = inbox.run_batches(consumer, until_all, size=16, linger=0.2, idle_exit=2.0, stop=stop)
            seen += done.processed + done.duplicates
            assert done.rejected == 0
        consumer.close()
    assert inbox.duplicates_skipped == COPIES
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
    db.close()


def test_batches_with_work_many_in_one_statement(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(COUNT)
    publish_with_copies(harness, queue, names, COPIES)
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox)
    insert = app_db.insert_effect()
    sizes: list[int] = []

    def write_all(db_: Any, deliveries: list[Any]) -> None:
        sizes.append(len(deliveries))
        db_.cursor().executemany(insert, [(d.message_id, d.body.decode()) for d in deliveries])

    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=60)
        while inbox.processed + inbox.duplicates_skipped < COUNT + COPIES:
            inbox.run_batches(consumer, work_many=write_all, size=20, linger=0.2, idle_exit=1.0)
        consumer.close()
    assert sum(sizes) == COUNT and max(sizes) > 1  # copies left out, several per call
    assert inbox.duplicates_skipped == COPIES
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
    db.close()


def test_async_face_handler_and_batches(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(COUNT)
    publish_with_copies(harness, queue, names, COPIES)
    insert = app_db.insert_effect()

    async def work(db: Any, delivery: Any) -> None:
        cursor = db.execute(insert, (delivery.message_id, delivery.body.decode()))
        if asyncio.iscoroutine(cursor):
            await cursor

    async def work_many(db: Any, deliveries: list[Any]) -> None:
        for delivery in deliveries:
            await work(db, delivery)

    async def main() -> tuple[int, int]:
        db = await app_db.connect_async()
        inbox = await AsyncInbox.open(db, table=app_db.inbox)
        conn = await ackbridge.connect_async(harness.url(), **harness.connect_options())
        try:
            # Half through a handler consumer, the rest in batches on a second consumer.
            consumer = await conn.consume(queue, prefetch=5, handler=inbox.handler(work))
            deadline = asyncio.get_running_loop().time() + 60
            while inbox.processed + inbox.duplicates_skipped < (COUNT + COPIES) // 2:
                assert asyncio.get_running_loop().time() < deadline, "the handler consumer stalled"
                await asyncio.sleep(0.05)
            await consumer.close()
            batch_consumer = await conn.consume(queue, prefetch=50)
            while inbox.processed + inbox.duplicates_skipped < COUNT + COPIES:
                assert asyncio.get_running_loop().time() < deadline, "the batch consumer stalled"
                await inbox.run_batches(batch_consumer, work_many=work_many, size=16, linger=0.2, idle_exit=1.0)
            await batch_consumer.close()
            return inbox.processed, inbox.duplicates_skipped
        finally:
            await conn.close()
            close = db.close()
            if asyncio.iscoroutine(close):
                await close

    processed, duplicates = asyncio.run(main())
    assert (processed, duplicates) == (COUNT, COPIES)
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)


def test_delivery_without_message_id_is_refused(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox)
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        if harness.name.startswith("rabbitmq"):
            # ackbridge's RabbitMQ publisher always stamps an id; another client may not.
            from tests.rabbitmq.harness import mgmt

            answer = mgmt("POST", "/exchanges/%2F/amq.default/publish",
                          {"properties": {}, "routing_key": queue, "payload": "anonymous",
                           "payload_encoding": "string"})
            assert answer["routed"]
        else:
            assert conn.publish(queue, b"anonymous").result(30).confirmed
        consumer = conn.consume(queue, prefetch=1)
        delivery = consumer.get(timeout=30)
        assert delivery is not None and delivery.message_id is None
        with pytest.raises(MissingMessageIdError, match="no message id"):
            inbox.handle(delivery, work_for(app_db))
        assert not delivery.settled  # refused before anything: the caller decides (reject here)
        delivery.reject()
        consumer.close()
    assert app_db.effect_counts() == {}
    assert inbox.size() == 0
    db.close()


def test_broker_id_is_the_key_when_there_is_no_message_id() -> None:
    from ackbridge.transactional.identity import inbox_key

    class JetStreamLike:
        message_id = None
        broker_id = ("ORDERS", 42)
        source, broker = "orders", "nats"

    assert inbox_key(JetStreamLike()) == "broker:ORDERS/42"


@pytest.mark.parametrize("db_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_pruning_by_count_and_age_bounds_the_inbox(db_kind: str, tmp_path: Any) -> None:
    from tests.transactional.conftest import make_db

    app_db = make_db(db_kind, tmp_path)
    try:
        db = app_db.connect()
        inbox = Inbox(db, table=app_db.inbox, retention=Retention(max_age_s=3600, max_rows=5, every=1_000_000))

        class Fake:
            def __init__(self, name: str) -> None:
                self.message_id, self.source, self.broker, self.acked = name, "q", "test", False

            def ack(self) -> None:
                self.acked = True

        for name in ids(12):
            assert inbox.handle(Fake(name), lambda _db, _d: None)
        assert inbox.size() == 12
        assert inbox.prune() == 7
        assert inbox.size() == 5
        # The five newest stay: the newest id is still caught as a copy, the oldest one is not.
        assert not inbox.handle(Fake("m0011"), lambda _db, _d: None)
        assert inbox.handle(Fake("m0000"), lambda _db, _d: None)
        # By age: everything recorded is younger than an hour; with a zero-ish window it all goes.
        aged = Inbox(db, table=app_db.inbox, retention=Retention(max_age_s=1e-9), create=False)
        assert aged.prune() == 6 and aged.size() == 0
        db.close()
    finally:
        app_db.drop_all()


@pytest.mark.parametrize("db_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_busy_connection_is_refused(db_kind: str, tmp_path: Any) -> None:
    from ackbridge.errors import ConfigurationError
    from tests.transactional.conftest import make_db

    app_db = make_db(db_kind, tmp_path)
    app_db.create_effects()
    db = app_db.connect()
    try:
        inbox = Inbox(db, table=app_db.inbox)

        class Fake:
            message_id, source, broker, body = "busy-1", "q", "test", b""

            def ack(self) -> None:
                raise AssertionError("acked on a refused transaction")

        db.execute(app_db.insert_effect(), ("the application's own", "open"))  # opens a transaction
        with pytest.raises(ConfigurationError, match="transaction open"):
            inbox.handle(Fake(), work_for(app_db))
        db.rollback()
        assert inbox.size() == 0 and app_db.effect_counts() == {}
    finally:
        db.close()  # before the drop: an open transaction of it would hold the tables' locks
        app_db.drop_all()


@pytest.mark.nats
def test_jetstream_names_a_message_without_an_id_by_stream_and_sequence(tmp_path: Any) -> None:
    """On a real JetStream: a message published without an id is recorded under the broker's
    own name for it, ``broker:<stream>/<sequence>`` (``delivery.broker_id``), not refused."""
    from tests.conftest import require_port
    from tests.nats.harness import NatsHarness
    from tests.transactional.conftest import make_db

    require_port(4222, "NATS (JetStream)")
    app_db = make_db("sqlite", tmp_path)
    app_db.create_effects()
    harness = NatsHarness()
    db = app_db.connect()
    try:
        queue = harness.new_queue()
        inbox = Inbox(db, table=app_db.inbox)
        insert = app_db.insert_effect()
        with ackbridge.connect(harness.url()) as conn:
            for n in range(3):
                assert conn.publish(queue, f"no id {n}".encode()).result(30).confirmed
            consumer = conn.consume(queue, prefetch=3)
            for _ in range(3):
                delivery = consumer.get(timeout=30)
                assert delivery is not None and delivery.message_id is None
                assert delivery.broker_id is not None
                inbox.handle(delivery, lambda d, delivery=delivery: d.execute(insert, (
                    f"broker:{delivery.broker_id[0]}/{delivery.broker_id[1]}", delivery.body.decode())))
                assert delivery.settled
            consumer.close()
        held = sorted(row[0] for row in app_db.rows(f"SELECT message_id FROM {app_db.effects}"))
        assert len(held) == 3 and all(name.startswith("broker:") for name in held), held
        assert inbox.size() == 3
        eventually(lambda: harness.ready(queue) == 0 and harness.unacked(queue) == 0)
    finally:
        db.close()
        harness.cleanup()
