"""The outbox's rules, written once for both faces: what a row holds, what the
relay does with each outcome. No I/O here (:mod:`.outbox`, :mod:`.relay` and
their :mod:`.aio` twins run the statements).

A row is removed only once the broker confirmed it; a refused row moves to
``<table>_refused`` with the broker's reason, in the same transaction that
removes it; a row whose outcome is unknown stays and is sent again, under the
same message id, in a later round (so a downstream inbox sees one effect).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ackbridge.errors import InvalidOptionError
from ackbridge.keywords import PublishOptions
from ackbridge.messages import ConfirmOutcome, ConfirmStatus
from ackbridge.transactional.dialects import Dialect, checked_name
from ackbridge.transactional.observing import Recorder, log


@dataclass(frozen=True)
class OutboxRow:
    """One message waiting in the outbox."""

    seq: int
    destination: str
    message_id: str
    body: bytes
    headers: str | None
    correlation_id: str | None
    content_type: str | None
    created_at: float
    attempts: int

    @classmethod
    def of(cls, row: Any) -> OutboxRow:
        seq, destination, message_id, body, headers, correlation_id, content_type, created_at, attempts = row
        return cls(int(seq), destination, message_id, bytes(body), headers, correlation_id, content_type,
                   float(created_at), int(attempts))

    def options(self) -> PublishOptions:
        """The publish options that carry the row's identity and properties."""
        options: PublishOptions = {"message_id": self.message_id}
        if self.headers:
            options["headers"] = json.loads(self.headers)
        if self.correlation_id is not None:
            options["correlation_id"] = self.correlation_id
        if self.content_type is not None:
            options["content_type"] = self.content_type
        return options


@dataclass
class RelayRound:
    """What one relay round did, and the backlog it left."""

    confirmed: int = 0
    refused: int = 0
    unknown: int = 0
    #: Rows left in the outbox after the round, and the age (s) of the oldest.
    backlog: int = 0
    oldest_age: float = 0.0
    #: Per-outcome message ids (refused: with the broker's reason), for logs and callers.
    refusals: list[tuple[str, str]] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return self.confirmed + self.refused + self.unknown


class OutboxRules:
    """One outbox table's statements and the relay's bookkeeping."""

    def __init__(self, dialect: Dialect, table: str) -> None:
        self.dialect = dialect
        self.table = checked_name(table, "the outbox table")
        self.schema = dialect.outbox_schema(self.table)
        self.insert_sql = dialect.outbox_insert(self.table)
        self.take_sql = dialect.outbox_take(self.table)
        self.claim_sql = dialect.outbox_claim(self.table) if dialect.shared_relays else ""
        self.delete_sql = dialect.outbox_delete(self.table)
        self.attempted_sql = dialect.outbox_attempted(self.table)
        self.refuse_sql = dialect.outbox_refuse(self.table)
        self.backlog_sql = dialect.outbox_backlog(self.table)
        self._recorder: Recorder | None = None

    @property
    def recorder(self) -> Recorder:
        # Made on first use: a writer that only inserts rows records nothing.
        if self._recorder is None:
            self._recorder = Recorder(outbox=self.table)
        return self._recorder

    def insert_params(self, destination: str, body: bytes, message_id: str | None,
                      headers: Mapping[str, Any] | None, correlation_id: str | None,
                      content_type: str | None) -> tuple[tuple[Any, ...], str]:
        """The row for a publish, and its message id (a new one when none was given)."""
        if not isinstance(destination, str) or not destination:
            raise InvalidOptionError(f"an outbox destination is a non-empty name, not {destination!r}")
        if not isinstance(body, bytes | bytearray | memoryview):
            raise InvalidOptionError(f"an outbox body is bytes, not {type(body).__name__}")
        if message_id is not None and (not isinstance(message_id, str) or not message_id):
            raise InvalidOptionError(f"message_id is a non-empty string, not {message_id!r}")
        message_id = message_id or uuid.uuid4().hex
        encoded = None
        if headers:
            try:
                encoded = json.dumps(dict(headers), sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise InvalidOptionError(f"outbox headers must be JSON values (text, numbers, booleans): {exc}"
                                         ) from None
        return (destination, message_id, bytes(body), encoded, correlation_id, content_type, time.time()), message_id

    def take_params(self, batch: int, claimed: list[str]) -> tuple[Any, ...]:
        """The take's parameters: the *claimed* destinations (shared relays) and the batch."""
        return (claimed, batch) if self.dialect.shared_relays else (batch,)

    def apply(self, row: OutboxRow, outcome: ConfirmOutcome, round_: RelayRound
              ) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements that record *outcome* of *row* (run in the round's transaction)."""
        status = outcome.status
        self.recorder.relay_outcome(row.destination, status.value)
        if status is ConfirmStatus.CONFIRMED:
            round_.confirmed += 1
            return [(self.delete_sql, (row.seq,))]
        if status is ConfirmStatus.REFUSED:
            round_.refused += 1
            round_.refusals.append((row.message_id, outcome.reason))
            log.warning("outbox %s: the broker refused %r to %r (%s); moved to %s_refused", self.table,
                        row.message_id, row.destination, outcome.reason, self.table)
            return [(self.refuse_sql, (row.seq, row.destination, row.message_id, row.body, row.headers,
                                       row.correlation_id, row.content_type, row.created_at, row.attempts + 1,
                                       outcome.reason or "refused", time.time())),
                    (self.delete_sql, (row.seq,))]
        round_.unknown += 1
        log.info("outbox %s: outcome of %r to %r unknown (%s); it stays and is sent again under the same id",
                 self.table, row.message_id, row.destination, outcome.reason)
        return [(self.attempted_sql, (row.seq,))]

    def settle_statements(self, rows: list[OutboxRow], outcomes: list[ConfirmOutcome], round_: RelayRound
                          ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """Every outcome of a round, grouped by statement (one ``executemany`` each; the
        order between groups does not matter inside the round's one transaction)."""
        grouped: dict[str, list[tuple[Any, ...]]] = {}
        for row, outcome in zip(rows, outcomes, strict=True):
            for sql, params in self.apply(row, outcome, round_):
                grouped.setdefault(sql, []).append(params)
        return list(grouped.items())

    def backlog(self, round_: RelayRound, row: Any) -> None:
        count, oldest = row
        round_.backlog = int(count or 0)
        round_.oldest_age = max(0.0, time.time() - float(oldest)) if oldest is not None else 0.0
        self.recorder.reading("outbox.backlog", round_.backlog)
        self.recorder.reading("outbox.age", round_.oldest_age)
