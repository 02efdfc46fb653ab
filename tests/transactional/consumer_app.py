"""A consumer process for the crash tests: the inbox on the application's database,
killing itself (SIGKILL) at a chosen point, and telling what it did on stdout.

    python -m tests.transactional.consumer_app URL QUEUE_TYPE QUEUE DB_KIND DB_TARGET PREFIX FACE MODE KILL AFTER

FACE: sync | async; MODE: single (one delivery per transaction) | batch;
KILL: none | before_commit (after the handler's write) | after_commit (before the ack);
AFTER: how many deliveries it handles before the kill. Lines: ``ran <id>`` and
``dup <id>`` once the delivery is acked (batch: ``ran <n>``/``dup <n>``), ``killing <n>``
(after_commit: deliveries committed and not acked) just before it kills itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import ackbridge
from ackbridge.transactional import Inbox
from ackbridge.transactional.aio import AsyncInbox
from tests.transactional.appdb import AppDb

IDLE_S = 3.0


def say(line: str) -> None:
    print(line, flush=True)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillOnAck:
    """A delivery whose ack kills the process: the commit happened, the ack never leaves."""

    def __init__(self, delivery: Any) -> None:
        self._delivery = delivery

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delivery, name)

    def ack(self) -> None:
        say("killing 1")
        die()


class KillOnSettle:
    """A consumer whose batch ack kills the process, after the batch's commit."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def settle_batch(self, deliveries: Any, *args: Any) -> Any:
        say(f"killing {len(deliveries)}")
        die()


def main() -> None:
    url, queue_type, queue, db_kind, target, prefix, face, mode, kill, after = sys.argv[1:11]
    app_db = AppDb(db_kind, target, prefix)
    options = {"queue_type": queue_type} if queue_type != "-" else {}
    args = (url, options, queue, app_db, mode, kill, int(after))
    if face == "async":
        asyncio.run(run_async(*args))
    else:
        run_sync(*args)


def run_sync(url: str, options: dict[str, Any], queue: str, app_db: AppDb, mode: str, kill: str,
             after: int) -> None:
    db = app_db.connect()
    inbox = Inbox(db, table=app_db.inbox)
    insert = app_db.insert_effect()
    handled = 0

    def work(db_: Any, delivery: Any) -> None:
        nonlocal handled
        db_.execute(insert, (delivery.message_id, delivery.body.decode()))
        handled += 1
        if kill == "before_commit" and handled >= after:
            die()

    with ackbridge.connect(url, **options) as conn:
        consumer = conn.consume(queue, prefetch=10)
        while True:
            batch = []
            first = consumer.get(timeout=IDLE_S)
            if first is None:
                break
            batch.append(first)
            while mode == "batch" and len(batch) < 5 and (more := consumer.get(timeout=0.05)) is not None:
                batch.append(more)
            armed = kill == "after_commit" and handled + len(batch) >= after
            if mode == "batch":
                outcome = inbox.handle_batch(KillOnSettle(consumer) if armed else consumer, batch, work)
                say(f"ran {outcome.processed}")
                say(f"dup {outcome.duplicates}")
            else:
                delivery = KillOnAck(first) if armed else first
                ran = inbox.handle(delivery, work)
                say(f"{'ran' if ran else 'dup'} {first.message_id}")
                if not ran:
                    handled += 1  # a copy counts toward the kill point too
        consumer.close()
    db.close()


async def run_async(url: str, options: dict[str, Any], queue: str, app_db: AppDb, mode: str, kill: str,
                    after: int) -> None:
    db = await app_db.connect_async()
    inbox = await AsyncInbox.open(db, table=app_db.inbox)
    insert = app_db.insert_effect()
    handled = 0

    async def work(db_: Any, delivery: Any) -> None:
        nonlocal handled
        result = db_.execute(insert, (delivery.message_id, delivery.body.decode()))
        if asyncio.iscoroutine(result):
            await result
        handled += 1
        if kill == "before_commit" and handled >= after:
            die()

    class AsyncKillOnAck(KillOnAck):
        async def ack(self) -> None:  # type: ignore[override]
            say("killing 1")
            die()

    conn = await ackbridge.connect_async(url, **options)
    consumer = await conn.consume(queue, prefetch=10)
    while True:
        first = await consumer.get(timeout=IDLE_S)
        if first is None:
            break
        armed = kill == "after_commit" and handled + 1 >= after
        ran = await inbox.handle(AsyncKillOnAck(first) if armed else first, work)
        say(f"{'ran' if ran else 'dup'} {first.message_id}")
        if not ran:
            handled += 1
    await consumer.close()
    await conn.close()
    close = db.close()
    if asyncio.iscoroutine(close):
        await close


if __name__ == "__main__":
    main()
