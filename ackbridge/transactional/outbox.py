"""The outbox writer, sync face: a publish made inside the application's transaction
is a row of that transaction.

::

    outbox = Outbox()                       # create_tables(db) once
    with db:                                # the application's own transaction
        db.execute("UPDATE accounts ...")
        outbox.publish(db, "payments", body, message_id=f"pay-{order}")

Nothing reaches the broker here: a :class:`~ackbridge.transactional.relay.Relay`
publishes committed rows. Committed together or not at all, the write and the
message cannot part: no message for a write that rolled back, no write whose
message is lost because the process died after the commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ackbridge.transactional.database import Database
from ackbridge.transactional.dialects import dialect_of
from ackbridge.transactional.outbox_rules import OutboxRules


class Outbox:
    """Writes rows to the outbox table *table* on whichever connection a publish is given."""

    def __init__(self, *, table: str = "ackbridge_outbox") -> None:
        self.table = table
        self._rules: dict[str, OutboxRules] = {}

    def create_tables(self, db: Any) -> None:
        """Create the outbox and its ``_refused`` table on *db* (idempotent; commits)."""
        database = Database(db)
        database.script(self._rules_for(db).schema)

    def publish(self, db: Any, destination: str, body: bytes, *, message_id: str | None = None,
                headers: Mapping[str, Any] | None = None, correlation_id: str | None = None,
                content_type: str | None = None) -> str:
        """Add a message for *destination* to *db*'s current transaction (nothing is
        committed here); its message id (a new one when none is given). Give an id
        derived from the write (``f"order-{id}"``) so a retried transaction sends one."""
        rules = self._rules_for(db)
        params, message_id = rules.insert_params(destination, body, message_id, headers, correlation_id,
                                                 content_type)
        db.execute(rules.insert_sql, params)
        return message_id

    def _rules_for(self, db: Any) -> OutboxRules:
        dialect = dialect_of(db)
        found = self._rules.get(dialect.name)
        if found is None:
            found = self._rules[dialect.name] = OutboxRules(dialect, self.table)
        return found
