"""Consume with a handler on the embedded broker: ack what works, dead-letter what raises.

    .venv/bin/python examples/consume_with_handler.py /tmp/ackbridge-handler

The handler runs on the connection's own I/O thread, one delivery at a time, so
it stays short; any broker URL works the same way (amqp://, mqtt://, amqp10://).
"""

from __future__ import annotations

import json
import os
import sys
import threading

import ackbridge

work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ackbridge-handler"
os.makedirs(work, exist_ok=True)
url = f"local://{os.path.abspath(work)}/broker.db"
total = 100
handled = threading.Semaphore(0)
totals = {"ok": 0}


def on_order(delivery: ackbridge.Delivery) -> None:
    try:
        order = json.loads(delivery.body)  # a malformed body raises: the consumer rejects it
        totals["ok"] += order["qty"]
        delivery.ack()
    finally:
        handled.release()


with ackbridge.connect(url) as conn:
    conn.declare_queue("orders")  # with a dead-letter queue, orders.dlq
    for i in range(total):
        body = b"not json" if i % 25 == 0 else json.dumps({"id": i, "qty": 1}).encode()
        conn.publish("orders", body, message_id=f"order-{i}")
    assert conn.flush(timeout=30)
    consumer = conn.consume("orders", handler=on_order)
    for _ in range(total):
        assert handled.acquire(timeout=30), "the handler stopped being called"
    consumer.close()
    dead = conn.consume("orders.dlq")
    dead_letters = []
    while (delivery := dead.get(timeout=1)) is not None:
        dead_letters.append(delivery.body)
        delivery.ack()
print(f"{totals['ok']} orders handled and acked; {len(dead_letters)} malformed ones dead-lettered to orders.dlq")
