"""The inbox (idempotent consumer), sync face: a delivery's effects and its id
commit in one transaction of the application's own connection; the ack follows
the commit.

::

    inbox = Inbox(db)                       # sqlite3 or psycopg 3 connection
    def work(db, delivery): db.execute("INSERT INTO orders ...", ...)
    conn.consume(queue, handler=inbox.handler(work))        # one per transaction
    inbox.run_batches(consumer, work, size=100)              # many per transaction

A crash before the commit undoes the effects and the id together (the broker
redelivers, the handler runs again, once); a crash after the commit and before
the ack leaves both (the broker redelivers, the inbox finds the id, acks the
copy, and the handler does not run). Competing consumers share the table, so
an id is handled once across processes and restarts. See docs/transactional.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ackbridge.errors import AckbridgeError, InvalidOptionError, MissingMessageIdError, StaleDeliveryError
from ackbridge.transactional.database import Database
from ackbridge.transactional.identity import inbox_key
from ackbridge.transactional.inbox_rules import BatchOutcome, InboxRules, Retention
from ackbridge.transactional.observing import log

#: The application's work for one delivery: called with its DB connection (inside the
#: inbox's transaction) and the delivery. It writes; it neither commits nor settles.
Work = Callable[[Any, Any], object]
#: The same for a batch: called once with the connection and the batch's new deliveries
#: (copies left out), so it can write them in one statement (``executemany``).
WorkMany = Callable[[Any, list[Any]], object]


class Inbox:
    """An inbox table on the application's connection *db* (sqlite3 or psycopg 3).

    *endpoint* names the consumer (one table may serve several: each endpoint has
    its own ids). The connection is used from one thread at a time (a handler
    consumer calls on its handler thread: open sqlite3 with ``check_same_thread=False``).
    """

    def __init__(self, db: Any, *, endpoint: str = "default", table: str = "ackbridge_inbox",
                 retention: Retention | None = None, create: bool = True) -> None:
        self._db = Database(db)
        self._rules = InboxRules(self._db.dialect, table=table, endpoint=endpoint, retention=retention or Retention())
        if create:
            self.create_tables()

    def create_tables(self) -> None:
        """Create the inbox table and its index (idempotent; commits), and read its size."""
        self._db.script(self._rules.schema)
        self._rules.pruned(0, self.size())

    @property
    def duplicates_skipped(self) -> int:
        """Deliveries this inbox acked without running the handler (their id was held)."""
        return self._rules.duplicates_skipped

    @property
    def processed(self) -> int:
        """Deliveries whose handler ran and whose effects committed."""
        return self._rules.processed

    # ---- one delivery per transaction ------------------------------------------------
    def handle(self, delivery: Any, work: Work) -> bool:
        """Run *work* for *delivery* and record its id in one transaction, then ack it;
        a held id is acked without running *work*. True when *work* ran.

        Raises :class:`~ackbridge.errors.MissingMessageIdError` (nothing recorded, the
        delivery unsettled) when it has no usable id, and what *work* raised (rolled
        back, the delivery unsettled: a handler consumer rejects it)."""
        key = inbox_key(delivery)
        db, rules = self._db, self._rules
        with db.transaction():
            new: bool = db.execute(rules.record_sql, rules.record_params(key)).rowcount == 1
            if new:
                try:
                    work(db.connection, delivery)
                except Exception as exc:
                    rules.handler_failed(key, exc)
                    raise
        self._ack(delivery, key)
        self._committed(int(new), int(not new), [] if new else [key])
        return new

    def handler(self, work: Work) -> Callable[[Any], None]:
        """A ``consume(handler=...)`` function: :meth:`handle` of each delivery."""
        def handle(delivery: Any) -> None:
            self.handle(delivery, work)
        return handle

    # ---- many deliveries per transaction ---------------------------------------------
    def handle_batch(self, consumer: Any, deliveries: Sequence[Any], work: Work | None = None, *,
                     work_many: WorkMany | None = None) -> BatchOutcome:
        """Handle *deliveries* (received in this order from *consumer*) in one transaction,
        then ack them together (cumulatively where the broker can): *work* per new delivery,
        or *work_many* once with all of them. The batch's ids are recorded in one statement.
        A delivery without a usable id is rejected; when the work raises, the transaction
        rolls back and each delivery is handled alone, the failing one rejected."""
        each = _one_work(work, work_many)
        outcome = BatchOutcome()
        keyed = self._keyed(deliveries, outcome)
        if not keyed:
            return outcome
        db, rules = self._db, self._rules
        try:
            with db.transaction():
                inserted: set[str] = set()
                for sql, params in rules.record_many([key for _, key in keyed]):
                    inserted.update(row[0] for row in db.execute(sql, params).fetchall())
                new, duplicates = rules.split(keyed, inserted)
                if work_many is not None:
                    if new:
                        work_many(db.connection, new)
                else:
                    for delivery in new:
                        each(db.connection, delivery)
        except Exception as exc:
            log.warning("inbox %s/%s: a batch of %d rolled back (%s: %s); handling each alone", rules.table,
                        rules.endpoint, len(keyed), type(exc).__name__, exc)
            return self._one_by_one(keyed, each, outcome)
        try:
            consumer.settle_batch([delivery for delivery, _ in keyed])
        except StaleDeliveryError as exc:
            rules.ack_lost(keyed[-1][1], exc)
        outcome.processed += len(new)
        outcome.duplicates += len(duplicates)
        self._committed(len(new), len(duplicates), duplicates)
        return outcome

    def run_batches(self, consumer: Any, work: Work | None = None, *, work_many: WorkMany | None = None,
                    size: int = 100, linger: float = 0.05, stop: threading.Event | None = None,
                    idle_exit: float | None = None) -> BatchOutcome:
        """Take up to *size* deliveries (waiting *linger* s for more after the first) and
        :meth:`handle_batch` them, until *stop* is set or nothing came for *idle_exit* s.
        Give the consumer a ``prefetch`` of at least *size*. The totals."""
        total = BatchOutcome()
        poll = 0.2 if idle_exit is None else min(0.2, idle_exit)
        idle_since = time.monotonic()
        while stop is None or not stop.is_set():
            first = consumer.get(timeout=poll)
            if first is None:
                if idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                    break
                continue
            batch, end = [first], time.monotonic() + linger
            while len(batch) < size:
                more = consumer.get(timeout=max(0.0, end - time.monotonic()))
                if more is None:
                    break
                batch.append(more)
            done = self.handle_batch(consumer, batch, work, work_many=work_many)
            total.processed += done.processed
            total.duplicates += done.duplicates
            total.rejected += done.rejected
            idle_since = time.monotonic()
        return total

    # ---- retention ---------------------------------------------------------------------
    def prune(self) -> int:
        """Apply the retention now; the ids removed."""
        removed = 0
        with self._db.transaction():
            for sql, params in self._rules.prune_statements():
                removed += max(0, self._db.execute(sql, params).rowcount)
        self._rules.pruned(removed, self.size())
        return removed

    def size(self) -> int:
        """Ids this endpoint's inbox holds now."""
        row = self._db.execute(self._rules.size_sql, (self._rules.endpoint,)).fetchone()
        self._end_read()
        return int(row[0])

    # ---- internals ---------------------------------------------------------------------
    def _keyed(self, deliveries: Sequence[Any], outcome: BatchOutcome) -> list[tuple[Any, str]]:
        keyed = []
        for delivery in deliveries:
            try:
                keyed.append((delivery, inbox_key(delivery)))
            except MissingMessageIdError as exc:
                log.error("inbox %s/%s: %s; rejected", self._rules.table, self._rules.endpoint, exc)
                self._settle_quietly(delivery.reject)
                outcome.rejected += 1
        return keyed

    def _one_by_one(self, keyed: list[tuple[Any, str]], work: Work, outcome: BatchOutcome) -> BatchOutcome:
        for delivery, _key in keyed:
            try:
                ran = self.handle(delivery, work)
            except Exception:
                self._settle_quietly(delivery.reject)
                outcome.rejected += 1
                continue
            if ran:
                outcome.processed += 1
            else:
                outcome.duplicates += 1
        return outcome

    def _ack(self, delivery: Any, key: str) -> None:
        try:
            delivery.ack()
        except StaleDeliveryError as exc:
            self._rules.ack_lost(key, exc)

    def _committed(self, processed: int, duplicates: int, keys: list[str]) -> None:
        if self._rules.committed(processed, duplicates, keys):
            self.prune()

    def _end_read(self) -> None:
        # A read opened an implicit transaction (psycopg outside autocommit): end it, so the
        # connection is idle again for the next transaction the inbox begins.
        if self._db.dialect.name == "postgresql" and not self._db.connection.autocommit:
            self._db.connection.rollback()

    @staticmethod
    def _settle_quietly(settle: Callable[[], None]) -> None:
        try:
            settle()
        except AckbridgeError as exc:
            log.info("could not settle a refused delivery: %s", exc)


def _one_work(work: Work | None, work_many: WorkMany | None) -> Work:
    """The per-delivery work (given, or made of *work_many*); exactly one of them must be given."""
    if (work is None) == (work_many is None):
        raise InvalidOptionError("give the work per delivery (work) or per batch (work_many), one of the two")
    if work is not None:
        return work
    assert work_many is not None
    many = work_many
    return lambda db, delivery: many(db, [delivery])
