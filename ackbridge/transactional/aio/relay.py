"""The relay, asyncio face: the twin of :class:`ackbridge.transactional.relay.Relay`
(the same rounds, locks and outcomes; see that module), run as a task."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ackbridge.errors import AckbridgeError, InvalidOptionError
from ackbridge.messages import ConfirmOutcome, unknown
from ackbridge.transactional.aio.database import AsyncDatabase
from ackbridge.transactional.observing import log
from ackbridge.transactional.outbox_rules import OutboxRow, OutboxRules, RelayRound


class AsyncRelay:
    """Publishes the outbox *table* on *db* (its own connection) through the asyncio
    ackbridge *connection*."""

    def __init__(self, db: Any, connection: Any, *, table: str = "ackbridge_outbox", batch: int = 100,
                 poll: float = 0.2, confirm_timeout: float = 30.0) -> None:
        if batch < 1:
            raise InvalidOptionError(f"a relay batch is at least 1 row, not {batch!r}")
        self._db = AsyncDatabase(db)
        self._rules = OutboxRules(self._db.dialect, table)
        self._connection = connection
        self._publisher = connection.publisher(window=batch)
        self.batch = batch
        self.poll = poll
        self.confirm_timeout = confirm_timeout
        self.totals = RelayRound()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[RelayRound] | None = None

    async def run_once(self) -> RelayRound:
        round_ = RelayRound()
        db, rules = self._db, self._rules
        if db.dialect.shared_relays:
            async with db.transaction():
                rows = await self._take()
                await self._settle(rows, await self._publish(rows), round_)
        else:
            rows = await self._take()
            outcomes = await self._publish(rows)
            if rows:
                async with db.transaction():
                    await self._settle(rows, outcomes, round_)
        rules.backlog(round_, await db.fetchone(rules.backlog_sql))
        await db.end_read()
        for name in ("confirmed", "refused", "unknown"):
            setattr(self.totals, name, getattr(self.totals, name) + getattr(round_, name))
        self.totals.refusals += round_.refusals
        self.totals.backlog, self.totals.oldest_age = round_.backlog, round_.oldest_age
        return round_

    async def run(self, stop: asyncio.Event | None = None, *, idle_exit: float | None = None) -> RelayRound:
        stop = stop or self._stop
        idle_since = time.monotonic()
        while not stop.is_set():
            try:
                round_ = await self.run_once()
            except AckbridgeError as exc:
                log.warning("relay of %s: round failed (%s); retrying", self._rules.table, exc)
                round_ = RelayRound(backlog=1)
            if round_.sent:
                idle_since = time.monotonic()
                continue
            if idle_exit is not None and round_.backlog == 0 and time.monotonic() - idle_since >= idle_exit:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll)
        return self.totals

    def start(self) -> asyncio.Task[RelayRound]:
        """Run as a task until :meth:`stop`."""
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"ackbridge-relay-{self._rules.table}")
        return self._task

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _take(self) -> list[OutboxRow]:
        db, rules = self._db, self._rules
        claimed: list[str] = []
        if db.dialect.shared_relays:
            await db.execute(db.dialect.relay_isolation)
            claimed = [d for (d,) in await db.fetchall(rules.claim_sql, (self.batch,))]
            if not claimed:
                return []
        return [OutboxRow.of(r) for r in await db.fetchall(rules.take_sql, rules.take_params(self.batch, claimed))]

    async def _publish(self, rows: list[OutboxRow]) -> list[ConfirmOutcome]:
        confirms = [await self._publisher.publish(row.destination, row.body, **row.options()) for row in rows]
        outcomes = []
        for confirm in confirms:
            try:
                outcomes.append(await confirm.result(self.confirm_timeout))
            except TimeoutError:
                outcomes.append(unknown(f"no confirm within {self.confirm_timeout} s"))
        return outcomes

    async def _settle(self, rows: list[OutboxRow], outcomes: list[ConfirmOutcome], round_: RelayRound) -> None:
        for sql, params in self._rules.settle_statements(rows, outcomes, round_):
            await self._db.execute_many(sql, params)
