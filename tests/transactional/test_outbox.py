"""The outbox and the relay: only committed rows are published, each under its
message id; a confirmed row is removed, a refused one moved aside with the broker's
reason; a relay SIGKILLed between a confirm and the removal sends the rows again,
and a downstream inbox applies each id once; several relays on PostgreSQL keep each
destination's order."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import ackbridge
from ackbridge.testing import eventually
from ackbridge.transactional import Inbox, Outbox, Relay
from ackbridge.transactional.aio import AsyncOutbox, AsyncRelay
from tests.transactional.appdb import AppDb
from tests.transactional.scenario import assert_exactly_once, assert_queue_empty, ids, work_for

ROOT = Path(__file__).resolve().parents[2]


def write_rows(app_db: AppDb, queue: str, names: list[str], *, roll_back: list[str] = ()) -> None:  # type: ignore[assignment]
    """Each name a row of its own application transaction (with an effect row beside it);
    the ones in *roll_back* are rolled back."""
    db = app_db.connect()
    outbox = Outbox(table=app_db.outbox)
    outbox.create_tables(db)
    for name in [*names, *roll_back]:
        outbox.publish(db, queue, name.encode(), message_id=name, headers={"origin": "test"})
        db.rollback() if name in roll_back else db.commit()
    db.close()


def drain_through_inbox(app_db: AppDb, harness: Any, queue: str, expected: int) -> Inbox:
    """Consume *queue* through an inbox (endpoint "downstream") until at least *expected* are
    handled and the broker holds nothing more of it."""
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox, endpoint="downstream")
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        consumer = conn.consume(queue, prefetch=20, handler=inbox.handler(work_for(app_db)))
        # Until the broker holds nothing more: the number of copies is not known in advance.
        eventually(lambda: inbox.processed + inbox.duplicates_skipped >= expected
                   and (harness.ready(queue), harness.unacked(queue)) == (0, 0), timeout=60,
                   message="downstream handled everything")
        consumer.close()
    db.close()  # the inbox's counters stay readable; its connection must not outlive the test
    return inbox


def outbox_left(app_db: AppDb) -> tuple[int, int]:
    return (app_db.rows(f"SELECT count(*) FROM {app_db.outbox}")[0][0],
            app_db.rows(f"SELECT count(*) FROM {app_db.outbox}_refused")[0][0])


def test_relay_publishes_committed_rows_once(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(30, "o")
    write_rows(app_db, queue, names, roll_back=["never-1", "never-2"])
    db = app_db.connect()
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        relay = Relay(db, conn, table=app_db.outbox, batch=8)
        totals = relay.run(idle_exit=0.5)
    assert (totals.confirmed, totals.refused, totals.unknown, totals.backlog) == (30, 0, 0, 0)
    assert outbox_left(app_db) == (0, 0)
    inbox = drain_through_inbox(app_db, harness, queue, 30)
    assert inbox.duplicates_skipped == 0
    assert_exactly_once(app_db, names)  # the rolled-back rows were never published
    assert_queue_empty(harness, queue)
    db.close()


def test_refused_publish_moves_to_refused_table_with_reason(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    target = harness.unroutable_target()
    body = b"refuse me"
    if target is None:
        target, body = queue, harness.oversized_body()
    db = app_db.connect()
    outbox = Outbox(table=app_db.outbox)
    outbox.create_tables(db)
    outbox.publish(db, target, body, message_id="bad-1")
    outbox.publish(db, queue, b"fine", message_id="good-1")
    db.commit()
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        totals = Relay(db, conn, table=app_db.outbox).run(idle_exit=0.5)
    assert (totals.confirmed, totals.refused) == (1, 1)
    refused = app_db.rows(f"SELECT message_id, destination, reason, attempts FROM {app_db.outbox}_refused")
    assert len(refused) == 1
    message_id, destination, reason, attempts = refused[0]
    assert (message_id, destination, attempts) == ("bad-1", target, 1)
    assert reason and reason == totals.refusals[0][1]
    assert outbox_left(app_db) == (0, 1)
    db.close()


def test_relay_killed_between_confirm_and_removal(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(40, "k")
    write_rows(app_db, queue, names)
    queue_type = harness.connect_options().get("queue_type", "-")
    command = [sys.executable, "-m", "tests.transactional.relay_app", harness.url(), queue_type, app_db.kind,
               app_db.target, app_db.prefix]
    killed = subprocess.run([*command, "25"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # Round 3 (rows 21-30) was confirmed in part and not removed: its rows are still there.
    assert outbox_left(app_db)[0] >= 20
    again = subprocess.run([*command, "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert outbox_left(app_db) == (0, 0)
    inbox = drain_through_inbox(app_db, harness, queue, 40 + 5)
    assert_queue_empty(harness, queue)
    assert inbox.duplicates_skipped >= 5  # the confirmed and not removed rows came twice
    assert_exactly_once(app_db, names)


@pytest.mark.rabbitmq
def test_broker_cut_mid_publish(app_db: AppDb, tmp_path: Path) -> None:
    # RabbitMQ: its confirms trail the publishes, so a cut after the 15th confirm leaves some
    # of the round unanswered (unknown). The embedded broker answers a round before the next
    # confirm is read: a cut there lands between rounds, which tests nothing new.
    from tests.transactional.conftest import make_harness
    from tests.transactional.relay_app import KillAfterConfirms

    harness = make_harness("rabbitmq", tmp_path)
    queue = harness.new_queue()
    names = ids(40, "c")
    write_rows(app_db, queue, names)
    db = app_db.connect()
    with ackbridge.connect(harness.url(), **harness.connect_options()) as conn:
        cut = KillAfterConfirms(conn, 15, lambda: harness.break_connection(conn))
        totals = Relay(db, cut, table=app_db.outbox, batch=10, confirm_timeout=10).run(idle_exit=0.5)
    assert cut.confirmed >= 15  # the cut happened in the middle of the second round
    assert totals.unknown >= 1 and totals.refused == 0, totals
    assert outbox_left(app_db) == (0, 0)
    drain_through_inbox(app_db, harness, queue, 40)
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
    db.close()
    harness.cleanup()


def run_relays(tmp_path: Path, destinations: int, rows: int, batch: int) -> tuple[list[int], dict[str, list[int]]]:
    """Three relays (threads, a connection each) on one PostgreSQL outbox of *rows* rows over
    *destinations* queues of the embedded broker: what each relay confirmed, and what each
    queue then held, in order."""
    from tests.local.harness import LocalHarness
    from tests.transactional.conftest import make_db

    app_db = make_db("postgres", tmp_path)
    harness = LocalHarness(tmp_path)
    try:
        queues = [harness.new_queue() for _ in range(destinations)]
        db = app_db.connect()
        outbox = Outbox(table=app_db.outbox)
        outbox.create_tables(db)
        for i in range(rows):
            outbox.publish(db, queues[i % destinations], str(i).encode(), message_id=f"r-{i:04d}")
            if i % 10 == 9:
                db.commit()
        db.commit()
        db.close()
        held: dict[str, list[int]] = {}
        with ackbridge.connect(harness.url()) as conn:
            # A database connection and a broker connection each: the relays' publishes interleave.
            connections = [app_db.connect() for _ in range(3)]
            brokers = [ackbridge.connect(harness.url()) for _ in range(3)]
            relays = [Relay(c, b, table=app_db.outbox, batch=batch) for c, b in zip(connections, brokers, strict=True)]
            threads = [threading.Thread(target=relay.run, kwargs={"idle_exit": 0.5}) for relay in relays]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            for queue in queues:
                consumer = conn.consume(queue, prefetch=500)
                got = held[queue] = []
                while (d := consumer.get(timeout=2)) is not None:
                    got.append(int(d.body))
                    d.ack()
                consumer.close()
            for c in connections:
                c.close()
            for b in brokers:
                b.close()
        assert outbox_left(app_db) == (0, 0)
        return [r.totals.confirmed for r in relays], held
    finally:
        app_db.drop_all()
        harness.cleanup()


@pytest.mark.postgres
def test_a_postgres_round_claims_whole_destinations_oldest_first_and_at_most_a_batch(tmp_path: Path) -> None:
    # The claim is what keeps a destination's order: while one round holds a destination,
    # another round takes none of its rows, and it claims no more destinations than its batch.
    from ackbridge.transactional.database import Database
    from ackbridge.transactional.outbox_rules import OutboxRules
    from tests.transactional.conftest import make_db

    app_db = make_db("postgres", tmp_path)
    try:
        db = app_db.connect()
        outbox = Outbox(table=app_db.outbox)
        outbox.create_tables(db)
        for i in range(12):  # heads: d5 (row 0), d4, d3, d2, d1, d0
            outbox.publish(db, f"d{5 - i % 6}", str(i).encode())
        db.commit()
        db.close()
        first, second = Database(app_db.connect()), Database(app_db.connect())
        rules = OutboxRules(first.dialect, app_db.outbox)
        with first.transaction():
            first.execute(first.dialect.relay_isolation)
            held = [d for (d,) in first.execute(rules.claim_sql, (2,)).fetchall()]
            assert held == ["d5", "d4"]
            with second.transaction():
                second.execute(second.dialect.relay_isolation)
                others = [d for (d,) in second.execute(rules.claim_sql, (10,)).fetchall()]
                assert others == ["d3", "d2", "d1", "d0"]
                rows = second.execute(rules.take_sql, rules.take_params(10, others)).fetchall()
                assert {row[1] for row in rows} == set(others) and len(rows) == 8
        first.connection.close()
        second.connection.close()
    finally:
        app_db.drop_all()


@pytest.mark.postgres
def test_several_relays_on_postgres_keep_each_destinations_order(tmp_path: Path) -> None:
    # Few destinations, rounds that take rows of all of them: without the per-destination
    # lock two relays would publish one destination's rows at once.
    confirmed, held = run_relays(tmp_path, destinations=3, rows=600, batch=50)
    assert sum(confirmed) == 600
    for queue, got in held.items():
        assert got == sorted(got) and len(got) == 200, f"{queue} out of order or incomplete: {got}"


@pytest.mark.postgres
def test_several_relays_on_postgres_share_the_destinations(tmp_path: Path) -> None:
    # More destinations than a round takes: a relay holds at most two at once, the others find one free.
    confirmed, held = run_relays(tmp_path, destinations=6, rows=600, batch=2)
    assert sum(confirmed) == 600
    assert sum(1 for n in confirmed if n) >= 2, f"one relay did all the work: {confirmed}"
    assert sorted(v for got in held.values() for v in got) == list(range(600))
    assert all(got == sorted(got) for got in held.values())


def test_async_outbox_and_relay(app_db: AppDb, harness: Any) -> None:
    queue = harness.new_queue()
    names = ids(20, "a")

    async def main() -> Any:
        db = await app_db.connect_async()
        outbox = AsyncOutbox(table=app_db.outbox)
        await outbox.create_tables(db)
        for name in names:
            await outbox.publish(db, queue, name.encode(), message_id=name)
        close = db.commit()
        if asyncio.iscoroutine(close):
            await close
        conn = await ackbridge.connect_async(harness.url(), **harness.connect_options())
        try:
            relay = AsyncRelay(db, conn, table=app_db.outbox, batch=6)
            relay.start()
            deadline = asyncio.get_running_loop().time() + 60
            while relay.totals.confirmed < len(names):
                assert asyncio.get_running_loop().time() < deadline, "the relay task stalled"
                await asyncio.sleep(0.05)
            await relay.stop()
            return relay.totals
        finally:
            await conn.close()
            closing = db.close()
            if asyncio.iscoroutine(closing):
                await closing

    totals = asyncio.run(main())
    assert (totals.confirmed, totals.refused, totals.unknown) == (20, 0, 0)
    assert outbox_left(app_db) == (0, 0)
    drain_through_inbox(app_db, harness, queue, 20)
    assert_exactly_once(app_db, names)
    assert_queue_empty(harness, queue)
