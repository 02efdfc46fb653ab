"""Settlements as row changes: the SQL that acks, requeues and rejects leased rows.

Every statement names the owner: a row no longer leased by it (its lease was
reclaimed, another consumer may hold it now) does not match, and the caller
(:meth:`ackbridge_local.store.Store.settle`) applies nothing of a settlement
that did not match whole. The statements' text never varies, so SQLite
prepares each once per connection (the sqlite3 module's statement cache) and
``executemany`` runs a settle call's rows through one of them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

_ACK = "DELETE FROM messages WHERE owner=? AND id=?"
_REQUEUE = "UPDATE messages SET owner=NULL WHERE owner=? AND id=?"
_DEAD_LETTER = ("INSERT INTO messages(queue, body, props, delivery_count) "
                "SELECT ?, body, props, delivery_count FROM messages WHERE owner=? AND id=?")


@dataclass(slots=True)
class Settlement:
    """One settle call's row changes: rows to delete (acks), to release (requeues) and to
    move to their target queue (rejects: row id and target; "" deletes the row)."""

    acks: list[int]
    requeues: list[int]
    rejects: list[tuple[int, str]]

    def __len__(self) -> int:
        return len(self.acks) + len(self.requeues) + len(self.rejects)

    def single(self, owner: str) -> tuple[str, tuple[str, int]] | None:
        """The statement and its parameters when this is one ack or one requeue, else None."""
        if self.rejects or len(self.acks) + len(self.requeues) != 1:
            return None
        return (_ACK, (owner, self.acks[0])) if self.acks else (_REQUEUE, (owner, self.requeues[0]))


def apply(db: sqlite3.Connection, owner: str, settlements: Sequence[Settlement]) -> int:
    """Apply *settlements* in the open transaction: how many rows matched."""
    matched = 0
    acks = [(owner, row_id) for settlement in settlements for row_id in settlement.acks]
    if acks:
        matched += db.executemany(_ACK, acks).rowcount
    requeues = [(owner, row_id) for settlement in settlements for row_id in settlement.requeues]
    if requeues:
        matched += db.executemany(_REQUEUE, requeues).rowcount
    rejects = [reject for settlement in settlements for reject in settlement.rejects]
    if rejects:
        moved = [(target, owner, row_id) for row_id, target in rejects if target]
        if moved:  # copied before the rows are deleted below
            db.executemany(_DEAD_LETTER, moved)
        matched += db.executemany(_ACK, [(owner, row_id) for row_id, _ in rejects]).rowcount
    return matched
