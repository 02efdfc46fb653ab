"""Exactly-once effects in the application's own database: an inbox and an outbox
on its DB-API connection (sqlite3, psycopg 3), and the relay (docs/transactional.md).

- :mod:`.inbox` (:class:`Inbox`): a delivery's writes and its id commit together; ack after;
- :mod:`.outbox` (:class:`Outbox`): a publish is a row of the application's transaction;
- :mod:`.relay` (:class:`Relay`): publishes committed rows with confirms;
- :mod:`.aio`: the asyncio twins (:class:`AsyncInbox`, :class:`AsyncOutbox`, :class:`AsyncRelay`);
- :mod:`.dialects`, :mod:`.database`, :mod:`.identity`, :mod:`.inbox_rules`,
  :mod:`.outbox_rules`, :mod:`.observing`: the SQL, the transaction, the id, the rules
  written once for both faces, and what is recorded.

Underneath, delivery stays at-least-once; what is exactly once is the effect inside
the application's transaction. Logs: ``ackbridge.transactional``.
"""

from __future__ import annotations

from ackbridge.transactional.inbox import Inbox
from ackbridge.transactional.inbox_rules import BatchOutcome, Retention
from ackbridge.transactional.outbox import Outbox
from ackbridge.transactional.outbox_rules import OutboxRow, RelayRound
from ackbridge.transactional.relay import Relay

__all__ = ["BatchOutcome", "Inbox", "Outbox", "OutboxRow", "Relay", "RelayRound", "Retention"]
