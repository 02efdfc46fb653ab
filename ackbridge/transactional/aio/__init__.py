"""The asyncio twins of the inbox, the outbox and the relay: the same names and
rules (:mod:`ackbridge.transactional.inbox_rules`, :mod:`.outbox_rules`), with
``await`` where the I/O is.

The application's connection is a ``psycopg.AsyncConnection``, or a sqlite3
connection, whose statements then run on the event loop's thread (they are
short local writes; a busy SQLite file holds the loop up to its busy timeout).
"""

from __future__ import annotations

from ackbridge.transactional.aio.inbox import AsyncInbox
from ackbridge.transactional.aio.outbox import AsyncOutbox
from ackbridge.transactional.aio.relay import AsyncRelay

__all__ = ["AsyncInbox", "AsyncOutbox", "AsyncRelay"]
