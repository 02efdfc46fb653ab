"""The relay, sync face: publishes committed outbox rows with confirms.

Each round takes up to ``batch`` rows in order, publishes them with their
message ids, waits for every confirm, and then, in one transaction, removes
the confirmed rows, moves the refused ones to ``<table>_refused`` with the
broker's reason, and leaves the unknown ones to be sent again next round under
the same id. A relay killed between a confirm and the removal sends the row
again when it restarts; a downstream inbox acks that copy without effect.

PostgreSQL: the round claims whole destinations (advisory locks) and holds
their rows ``FOR UPDATE`` while it publishes, so several relays (threads or
processes) share one outbox, each destination published by one at a time, in
order. SQLite: one relay per database file (the rows are read, published, then
settled in a short transaction: the application's writers are not held up).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.messages import ConfirmOutcome, unknown
from ackbridge.transactional.database import Database
from ackbridge.transactional.observing import log
from ackbridge.transactional.outbox_rules import OutboxRow, OutboxRules, RelayRound


class Relay:
    """Publishes the outbox *table* on *db* (the relay's own connection: it commits on
    it) through the ackbridge *connection*."""

    def __init__(self, db: Any, connection: Any, *, table: str = "ackbridge_outbox", batch: int = 100,
                 poll: float = 0.2, confirm_timeout: float = 30.0) -> None:
        if batch < 1:
            raise InvalidOptionError(f"a relay batch is at least 1 row, not {batch!r}")
        self._db = Database(db)
        self._rules = OutboxRules(self._db.dialect, table)
        self._connection = connection
        self._publisher = connection.publisher(window=batch)
        self.batch = batch
        self.poll = poll
        self.confirm_timeout = confirm_timeout
        self.totals = RelayRound()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> RelayRound:
        """One round: publish up to ``batch`` rows and settle their outcomes."""
        round_ = RelayRound()
        db = self._db
        if db.dialect.shared_relays:
            with db.transaction():  # rows and destinations locked while they are published
                rows = self._take()
                self._settle(rows, self._publish(rows), round_)
        else:
            rows = self._take()
            outcomes = self._publish(rows)
            if rows:
                with db.transaction():
                    self._settle(rows, outcomes, round_)
        self._backlog(round_)
        for name in ("confirmed", "refused", "unknown"):
            setattr(self.totals, name, getattr(self.totals, name) + getattr(round_, name))
        self.totals.refusals += round_.refusals
        self.totals.backlog, self.totals.oldest_age = round_.backlog, round_.oldest_age
        return round_

    def run(self, stop: threading.Event | None = None, *, idle_exit: float | None = None) -> RelayRound:
        """Rounds until *stop* (or :meth:`stop`) is set, or the outbox stayed empty for
        *idle_exit* s; waits ``poll`` s between rounds that found nothing. The totals."""
        stop = stop or self._stop
        idle_since = time.monotonic()
        while not stop.is_set():
            try:
                round_ = self.run_once()
            except AckbridgeError as exc:
                log.warning("relay of %s: round failed (%s); retrying", self._rules.table, exc)
                round_ = RelayRound(backlog=1)
            if round_.sent:
                idle_since = time.monotonic()
                continue
            if idle_exit is not None and round_.backlog == 0 and time.monotonic() - idle_since >= idle_exit:
                break
            stop.wait(self.poll)
        return self.totals

    def start(self) -> threading.Thread:
        """Run in a daemon thread (``ackbridge-relay-<table>``) until :meth:`stop`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=f"ackbridge-relay-{self._rules.table}", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the thread after its current round."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- internals ---------------------------------------------------------------------
    def _take(self) -> list[OutboxRow]:
        db, rules = self._db, self._rules
        claimed: list[str] = []
        if db.dialect.shared_relays:
            db.execute(db.dialect.relay_isolation)
            claimed = [d for (d,) in db.execute(rules.claim_sql, (self.batch,)).fetchall()]
            if not claimed:
                return []
        return [OutboxRow.of(r) for r in db.execute(rules.take_sql, rules.take_params(self.batch, claimed)).fetchall()]

    def _publish(self, rows: list[OutboxRow]) -> list[ConfirmOutcome]:
        confirms = [self._publisher.publish(row.destination, row.body, **row.options()) for row in rows]
        outcomes = []
        for confirm in confirms:
            try:
                outcomes.append(confirm.result(self.confirm_timeout))
            except TimeoutError:
                outcomes.append(unknown(f"no confirm within {self.confirm_timeout} s"))
        return outcomes

    def _settle(self, rows: list[OutboxRow], outcomes: list[ConfirmOutcome], round_: RelayRound) -> None:
        for sql, params in self._rules.settle_statements(rows, outcomes, round_):
            self._db.execute_many(sql, params)

    def _backlog(self, round_: RelayRound) -> None:
        self._rules.backlog(round_, self._db.execute(self._rules.backlog_sql).fetchone())
        if self._db.dialect.shared_relays and not self._db.connection.autocommit:
            self._db.connection.rollback()  # end the read's implicit transaction: idle for the next round
