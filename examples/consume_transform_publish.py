"""Consume, transform, publish with exactly-once effects: the inbox and the outbox in
one transaction of the application's own database (docs/transactional.md).

    .venv/bin/python examples/consume_transform_publish.py /tmp/ackbridge-ctp [DATABASE]

Orders arrive on ``orders`` (some twice: a retransmitted publish the broker stored
again). For each order, in one SQLite (or PostgreSQL: pass postgresql://...)
transaction: the order's id goes into the inbox, its total into ``totals``, and a
message for ``invoices`` into the outbox. The ack follows the commit; a relay thread
publishes the committed outbox rows with confirms. A copy is acked without effect.
Any broker URL works the same way (amqp://, mqtt://, amqp10://, nats://).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from typing import Any

import ackbridge
from ackbridge.transactional import Inbox, Outbox, Relay

work_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ackbridge-ctp"
os.makedirs(work_dir, exist_ok=True)
url = f"local://{os.path.abspath(work_dir)}/broker.db"
database = sys.argv[2] if len(sys.argv) > 2 else os.path.join(work_dir, "app.db")


def open_db() -> Any:
    if database.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(database)
    # check_same_thread=False: the handler runs on the consumer's handler thread.
    return sqlite3.connect(database, timeout=30, check_same_thread=False)


app_db, relay_db = open_db(), open_db()  # the relay commits on a connection of its own
mark = "%s" if database.startswith("postgresql://") else "?"
for statement in ("DROP TABLE IF EXISTS totals", "DROP TABLE IF EXISTS ackbridge_inbox",
                  "DROP TABLE IF EXISTS ackbridge_outbox", "DROP TABLE IF EXISTS ackbridge_outbox_refused",
                  "CREATE TABLE totals (order_id TEXT, total REAL)"):
    app_db.execute(statement)
app_db.commit()

inbox = Inbox(app_db, endpoint="invoicing")
outbox = Outbox()
outbox.create_tables(app_db)


def invoice(db: Any, delivery: Any) -> None:
    """The transform: inside the inbox's transaction; it writes, it never commits or acks."""
    order = json.loads(delivery.body)
    total = order["qty"] * order["price"]
    db.execute(f"INSERT INTO totals (order_id, total) VALUES ({mark}, {mark})", (delivery.message_id, total))
    outbox.publish(db, "invoices", json.dumps({"order": delivery.message_id, "total": total}).encode(),
                   message_id=f"invoice-{delivery.message_id}")  # derived: a second run would send the same id


orders = 50
with ackbridge.connect(url) as conn:
    for queue in ("orders", "invoices"):
        conn.declare_queue(queue)
        conn.purge_queue(queue)
    for i in [*range(orders), 0, 1, 2]:  # three orders stored twice
        conn.publish("orders", json.dumps({"qty": i % 5 + 1, "price": 2.5}).encode(), message_id=f"order-{i}")
    conn.flush(30)

    relay = Relay(relay_db, conn, batch=20)
    relay.start()
    consumer = conn.consume("orders", prefetch=20, handler=inbox.handler(invoice))
    deadline = time.monotonic() + 60
    while inbox.processed + inbox.duplicates_skipped < orders + 3 or relay.totals.confirmed < orders:
        if time.monotonic() > deadline:
            sys.exit("timed out")
        time.sleep(0.05)
    consumer.close()
    relay.stop()
    invoices = conn.inspect_queue("invoices").messages

rows = app_db.execute("SELECT count(*), count(DISTINCT order_id) FROM totals").fetchone()
print(f"{inbox.processed} orders invoiced, {inbox.duplicates_skipped} copies acked without effect; "
      f"totals rows {rows[0]} ({rows[1]} distinct); {relay.totals.confirmed} invoices published "
      f"({invoices} waiting on 'invoices')")
app_db.close()
relay_db.close()
