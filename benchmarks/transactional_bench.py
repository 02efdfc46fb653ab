"""What the transactional inbox and outbox cost, against plain consume and publish, in one run.

Not a test: prints figures from one run. On RabbitMQ (amqp://, classic queue), each
round fills a queue with N messages and drains it twice, back to back: once plain
(``get()`` + ``ack()``, no database), once through the inbox -- one delivery per
transaction, or 100 per transaction (``handle_batch(work_many=...)``: the ids in one
statement, the effects in one ``executemany``) -- writing one effect row per message, on
PostgreSQL (127.0.0.1:5432, database ``test``) and on a SQLite file (default
journal, ``synchronous=FULL``: each commit is fsynced). The outbox relay is timed
against a plain publisher with confirms (the same window), publishing N rows that
were committed beforehand (writing them is not timed). The figure is the median of
the per-round ratios (inbox / plain); ``rounds`` shows the lowest and highest.

    .venv/bin/python benchmarks/transactional_bench.py --n 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import ackbridge
from ackbridge.transactional import Inbox, Outbox, Relay

URL = "amqp://guest:guest@127.0.0.1:5672/"
PG = "postgresql://postgres@127.0.0.1:5432/test"
BODY = b"x" * 256
PREFETCH = 200
WINDOW = 500


def fill(conn: Any, queue: str, n: int) -> None:
    publisher = conn.publisher(window=WINDOW)
    for i in range(n):
        publisher.publish(queue, BODY, message_id=f"{queue}-{i}")
    assert publisher.flush(120)


def plain(conn: Any, queue: str, n: int) -> float:
    consumer = conn.consume(queue, prefetch=PREFETCH)
    start = time.perf_counter()
    for _ in range(n):
        delivery = consumer.get(timeout=30)
        assert delivery is not None
        delivery.ack()
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def through_inbox(conn: Any, queue: str, n: int, db: Any, table: str, batch: int) -> float:
    inbox = Inbox(db, table=f"{table}_inbox", endpoint=queue)
    mark = "?" if isinstance(db, sqlite3.Connection) else "%s"
    insert = f"INSERT INTO {table}_effects (message_id) VALUES ({mark})"

    def work(db_: Any, delivery: Any) -> None:
        db_.execute(insert, (delivery.message_id,))

    def work_many(db_: Any, deliveries: list[Any]) -> None:
        # One statement for the batch (psycopg 3 pipelines executemany).
        db_.cursor().executemany(insert, [(d.message_id,) for d in deliveries])

    consumer = conn.consume(queue, prefetch=PREFETCH)
    start = time.perf_counter()
    done = 0
    if batch == 1:
        for _ in range(n):
            delivery = consumer.get(timeout=30)
            assert delivery is not None
            inbox.handle(delivery, work)
        done = n
    else:
        while done < n:  # handle_batch directly: run_batches would wait out its idle time at the end
            deliveries = []
            while len(deliveries) < min(batch, n - done):
                delivery = consumer.get(timeout=30)
                assert delivery is not None
                deliveries.append(delivery)
            done += inbox.handle_batch(consumer, deliveries, work_many=work_many).processed
    elapsed = time.perf_counter() - start
    consumer.close()
    assert inbox.processed == n
    return n / elapsed


def relay_rate(conn: Any, db: Any, table: str, queue: str, n: int) -> float:
    outbox = Outbox(table=f"{table}_outbox")
    outbox.create_tables(db)
    for i in range(n):
        outbox.publish(db, queue, BODY, message_id=f"o-{queue}-{i}")
    db.commit()
    relay = Relay(db, conn, table=f"{table}_outbox", batch=WINDOW)
    start = time.perf_counter()
    totals = relay.run(idle_exit=0.0)
    elapsed = time.perf_counter() - start
    assert totals.confirmed == n, totals
    return n / elapsed


def plain_publish(conn: Any, queue: str, n: int) -> float:
    start = time.perf_counter()
    fill(conn, queue, n)
    return n / (time.perf_counter() - start)


def line(label: str, base: list[float], other: list[float]) -> str:
    ratios = [o / b for b, o in zip(base, other, strict=True)]
    return (f"{label:<34} plain {statistics.median(base):>8.0f}/s   this {statistics.median(other):>8.0f}/s   "
            f"rounds {min(ratios):.2f}..{max(ratios):.2f}   median ratio {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.n
    table = f"abbench_{uuid.uuid4().hex[:8]}"
    work_dir = Path(tempfile.mkdtemp(prefix="ackbridge-txbench-"))
    databases: dict[str, Callable[[], Any]] = {
        "postgres": lambda: psycopg.connect(PG),
        "sqlite": lambda: sqlite3.connect(work_dir / "app.db", timeout=30),
    }
    conns = {name: make() for name, make in databases.items()}
    for db in conns.values():
        db.execute(f"CREATE TABLE {table}_effects (message_id TEXT)")
        db.commit()
    results: dict[str, tuple[list[float], list[float]]] = {}
    print(f"# transactional_bench: n={n} rounds={args.rounds} python {platform.python_version()} "
          f"psycopg {psycopg.__version__} sqlite {sqlite3.sqlite_version}")
    try:
        with ackbridge.connect(URL) as conn:
            for round_ in range(args.rounds):
                for db_name, db in conns.items():
                    for batch in (1, 100):
                        key = f"inbox {db_name} {'per message' if batch == 1 else '100 per txn'}"
                        queue = f"abbench-{uuid.uuid4().hex[:8]}"
                        conn.declare_queue(queue, dead_letter=False)
                        try:
                            fill(conn, queue, 2 * n)
                            # Alternate which goes first, so neither always meets a fuller queue.
                            if round_ % 2:
                                other = through_inbox(conn, queue, n, db, table, batch)
                                base = plain(conn, queue, n)
                            else:
                                base = plain(conn, queue, n)
                                other = through_inbox(conn, queue, n, db, table, batch)
                        finally:
                            conn.delete_queue(queue, dead_letter=False)
                        results.setdefault(key, ([], []))[0].append(base)
                        results[key][1].append(other)
                    queue = f"abbench-{uuid.uuid4().hex[:8]}"
                    conn.declare_queue(queue, dead_letter=False)
                    try:
                        base = plain_publish(conn, queue, n)
                        other = relay_rate(conn, db, f"{table}_{round_}", queue, n)
                    finally:
                        conn.delete_queue(queue, dead_letter=False)
                    key = f"outbox relay {db_name}"
                    results.setdefault(key, ([], []))[0].append(base)
                    results[key][1].append(other)
        for key, (base, other) in results.items():
            print(line(key, base, other))
    finally:
        for db in conns.values():
            db.rollback()
            for suffix in ("effects", "inbox"):
                db.execute(f"DROP TABLE IF EXISTS {table}_{suffix}")
            for round_ in range(args.rounds):
                db.execute(f"DROP TABLE IF EXISTS {table}_{round_}_outbox")
                db.execute(f"DROP TABLE IF EXISTS {table}_{round_}_outbox_refused")
            db.commit()
            db.close()


if __name__ == "__main__":
    main()
