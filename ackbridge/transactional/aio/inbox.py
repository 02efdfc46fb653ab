"""The inbox (idempotent consumer), asyncio face: the twin of
:class:`ackbridge.transactional.inbox.Inbox`, the same rules
(:mod:`ackbridge.transactional.inbox_rules`) with ``await`` where the I/O is.

*work* may be a coroutine function (awaited) or a plain one: it is called with
the application's connection inside the inbox's transaction and the delivery.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ackbridge.errors import AckbridgeError, InvalidOptionError, MissingMessageIdError, StaleDeliveryError
from ackbridge.transactional.aio.database import AsyncDatabase
from ackbridge.transactional.identity import inbox_key
from ackbridge.transactional.inbox_rules import BatchOutcome, InboxRules, Retention
from ackbridge.transactional.observing import log

AsyncWork = Callable[[Any, Any], Awaitable[object] | object]
#: Once per batch with its new deliveries (see :data:`ackbridge.transactional.inbox.WorkMany`).
AsyncWorkMany = Callable[[Any, list[Any]], Awaitable[object] | object]


class AsyncInbox:
    """An inbox table on *db* (``psycopg.AsyncConnection`` or sqlite3). Make it with
    ``await AsyncInbox.open(db, ...)``, which creates the table."""

    def __init__(self, db: Any, *, endpoint: str = "default", table: str = "ackbridge_inbox",
                 retention: Retention | None = None) -> None:
        self._db = AsyncDatabase(db)
        self._rules = InboxRules(self._db.dialect, table=table, endpoint=endpoint, retention=retention or Retention())

    @classmethod
    async def open(cls, db: Any, *, endpoint: str = "default", table: str = "ackbridge_inbox",
                   retention: Retention | None = None, create: bool = True) -> AsyncInbox:
        inbox = cls(db, endpoint=endpoint, table=table, retention=retention)
        if create:
            await inbox.create_tables()
        return inbox

    async def create_tables(self) -> None:
        """Create the inbox table and its index (idempotent; commits), and read its size."""
        await self._db.script(self._rules.schema)
        self._rules.pruned(0, await self.size())

    @property
    def duplicates_skipped(self) -> int:
        return self._rules.duplicates_skipped

    @property
    def processed(self) -> int:
        return self._rules.processed

    async def handle(self, delivery: Any, work: AsyncWork) -> bool:
        """The twin of :meth:`Inbox.handle <ackbridge.transactional.inbox.Inbox.handle>`."""
        key = inbox_key(delivery)
        db, rules = self._db, self._rules
        async with db.transaction():
            cursor = await db.execute(rules.record_sql, rules.record_params(key))
            new: bool = cursor.rowcount == 1
            if new:
                try:
                    await _call(work, db.connection, delivery)
                except Exception as exc:
                    rules.handler_failed(key, exc)
                    raise
        try:
            await delivery.ack()
        except StaleDeliveryError as exc:
            rules.ack_lost(key, exc)
        await self._committed(int(new), int(not new), [] if new else [key])
        return new

    def handler(self, work: AsyncWork) -> Callable[[Any], Awaitable[None]]:
        """A ``consume(handler=...)`` coroutine function: :meth:`handle` of each delivery."""
        async def handle(delivery: Any) -> None:
            await self.handle(delivery, work)
        return handle

    async def handle_batch(self, consumer: Any, deliveries: Sequence[Any], work: AsyncWork | None = None, *,
                           work_many: AsyncWorkMany | None = None) -> BatchOutcome:
        """The twin of :meth:`Inbox.handle_batch <ackbridge.transactional.inbox.Inbox.handle_batch>`."""
        each = _one_work(work, work_many)
        outcome = BatchOutcome()
        keyed = await self._keyed(deliveries, outcome)
        if not keyed:
            return outcome
        db, rules = self._db, self._rules
        try:
            async with db.transaction():
                inserted: set[str] = set()
                for sql, params in rules.record_many([key for _, key in keyed]):
                    inserted.update(row[0] for row in await db.fetchall(sql, params))
                new, duplicates = rules.split(keyed, inserted)
                if work_many is not None:
                    if new:
                        await _call(work_many, db.connection, new)
                else:
                    for delivery in new:
                        await _call(each, db.connection, delivery)
        except Exception as exc:
            log.warning("inbox %s/%s: a batch of %d rolled back (%s: %s); handling each alone", rules.table,
                        rules.endpoint, len(keyed), type(exc).__name__, exc)
            return await self._one_by_one(keyed, each, outcome)
        try:
            await consumer.settle_batch([delivery for delivery, _ in keyed])
        except StaleDeliveryError as exc:
            rules.ack_lost(keyed[-1][1], exc)
        outcome.processed += len(new)
        outcome.duplicates += len(duplicates)
        await self._committed(len(new), len(duplicates), duplicates)
        return outcome

    async def run_batches(self, consumer: Any, work: AsyncWork | None = None, *,
                          work_many: AsyncWorkMany | None = None, size: int = 100, linger: float = 0.05,
                          stop: asyncio.Event | None = None, idle_exit: float | None = None) -> BatchOutcome:
        """The twin of :meth:`Inbox.run_batches <ackbridge.transactional.inbox.Inbox.run_batches>`."""
        total = BatchOutcome()
        poll = 0.2 if idle_exit is None else min(0.2, idle_exit)
        idle_since = time.monotonic()
        while stop is None or not stop.is_set():
            first = await consumer.get(timeout=poll)
            if first is None:
                if idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                    break
                continue
            batch, end = [first], time.monotonic() + linger
            while len(batch) < size:
                more = await consumer.get(timeout=max(0.0, end - time.monotonic()))
                if more is None:
                    break
                batch.append(more)
            done = await self.handle_batch(consumer, batch, work, work_many=work_many)
            total.processed += done.processed
            total.duplicates += done.duplicates
            total.rejected += done.rejected
            idle_since = time.monotonic()
        return total

    async def prune(self) -> int:
        removed = 0
        async with self._db.transaction():
            for sql, params in self._rules.prune_statements():
                cursor = await self._db.execute(sql, params)
                removed += max(0, cursor.rowcount)
        self._rules.pruned(removed, await self.size())
        return removed

    async def size(self) -> int:
        row = await self._db.fetchone(self._rules.size_sql, (self._rules.endpoint,))
        await self._db.end_read()
        return int(row[0])

    async def _keyed(self, deliveries: Sequence[Any], outcome: BatchOutcome) -> list[tuple[Any, str]]:
        keyed = []
        for delivery in deliveries:
            try:
                keyed.append((delivery, inbox_key(delivery)))
            except MissingMessageIdError as exc:
                log.error("inbox %s/%s: %s; rejected", self._rules.table, self._rules.endpoint, exc)
                await _settle_quietly(delivery.reject())
                outcome.rejected += 1
        return keyed

    async def _one_by_one(self, keyed: list[tuple[Any, str]], work: AsyncWork,
                          outcome: BatchOutcome) -> BatchOutcome:
        for delivery, _key in keyed:
            try:
                ran = await self.handle(delivery, work)
            except Exception:
                await _settle_quietly(delivery.reject())
                outcome.rejected += 1
                continue
            if ran:
                outcome.processed += 1
            else:
                outcome.duplicates += 1
        return outcome

    async def _committed(self, processed: int, duplicates: int, keys: list[str]) -> None:
        if self._rules.committed(processed, duplicates, keys):
            await self.prune()


def _one_work(work: AsyncWork | None, work_many: AsyncWorkMany | None) -> AsyncWork:
    if (work is None) == (work_many is None):
        raise InvalidOptionError("give the work per delivery (work) or per batch (work_many), one of the two")
    if work is not None:
        return work
    assert work_many is not None
    many = work_many
    return lambda db, delivery: many(db, [delivery])


async def _call(work: Callable[[Any, Any], object], connection: Any, delivery: Any) -> None:
    result = work(connection, delivery)
    if inspect.isawaitable(result):
        await result


async def _settle_quietly(settle: Awaitable[None]) -> None:
    try:
        await settle
    except AckbridgeError as exc:
        log.info("could not settle a refused delivery: %s", exc)
