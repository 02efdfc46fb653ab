"""The embedded broker's fair raw side: persist-queue's ``SQLiteAckQueue`` (not a test).

The sqlite3 "floor" of cpu_raw_sides.py does no messaging work (no lease, no delivery, no
ack of one message), so a ratio against it says little. What a Python user picks instead
of ackbridge's embedded broker for a durable local queue with acks is persist-queue
(https://github.com/peter-wangxu/persist-queue): ``put()`` per message (its own
committed transaction, SQLite's WAL mode), ``get()`` (marked unacked, committed) and
``ack()`` per message (committed) -- the same per-message guarantees as ackbridge's
``publish`` with a confirm, ``get()`` and ``ack()``. Its bodies are pickled, as its
default serializer does. Timed between two ``CLOCK.perf_counter()`` calls, after set-up.
"""

from __future__ import annotations

from cpu_clock import CLOCK
from persistqueue import SQLiteAckQueue


def put(path: str, n: int, body: bytes) -> None:
    """*n* ``put()``s into the queue at *path*: each one committed before the next."""
    queue = SQLiteAckQueue(path)
    CLOCK.perf_counter()
    for _ in range(n):
        queue.put(body)
    CLOCK.perf_counter()
    queue.close()


def get_ack(path: str, n: int) -> None:
    """*n* ``get()`` and ``ack()`` pairs from the queue at *path* (filled beforehand)."""
    queue = SQLiteAckQueue(path)
    CLOCK.perf_counter()
    for _ in range(n):
        queue.ack(queue.get(block=False))
    CLOCK.perf_counter()
    queue.clear_acked_data(max_delete=n, keep_latest=0)
    queue.close()
