"""The outbox writer, asyncio face: the twin of
:class:`ackbridge.transactional.outbox.Outbox` (a publish is a row of the
application's open transaction; nothing is committed or sent here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ackbridge.transactional.aio.database import AsyncDatabase
from ackbridge.transactional.dialects import dialect_of
from ackbridge.transactional.outbox_rules import OutboxRules


class AsyncOutbox:
    """Writes rows to the outbox table *table* on whichever connection a publish is given."""

    def __init__(self, *, table: str = "ackbridge_outbox") -> None:
        self.table = table
        self._rules: dict[str, OutboxRules] = {}

    async def create_tables(self, db: Any) -> None:
        await AsyncDatabase(db).script(self._rules_for(db).schema)

    async def publish(self, db: Any, destination: str, body: bytes, *, message_id: str | None = None,
                      headers: Mapping[str, Any] | None = None, correlation_id: str | None = None,
                      content_type: str | None = None) -> str:
        """The twin of :meth:`Outbox.publish <ackbridge.transactional.outbox.Outbox.publish>`."""
        rules = self._rules_for(db)
        params, message_id = rules.insert_params(destination, body, message_id, headers, correlation_id,
                                                 content_type)
        await AsyncDatabase(db).execute(rules.insert_sql, params)
        return message_id

    def _rules_for(self, db: Any) -> OutboxRules:
        dialect = dialect_of(db)
        found = self._rules.get(dialect.name)
        if found is None:
            found = self._rules[dialect.name] = OutboxRules(dialect, self.table)
        return found
