"""The inbox's rules, written once for both faces: what is recorded, when it is
pruned, what is counted. No I/O here; :mod:`.inbox` and :mod:`.aio.inbox` run
the statements on the application's connection.

The window: an id is remembered from the commit that recorded it until pruning
removes it -- by age (``Retention.max_age_s``, default 7 days) and/or by count
(``Retention.max_rows`` newest per endpoint). A copy of a message that arrives
after its id was pruned is handled again. Choose the window longer than the
longest time a copy can reach the consumer: the broker's redelivery of an
unacked message (immediate after a crash), a relay's or publisher's
retransmission (``retransmit_deadline``), a replay of a stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ackbridge.errors import InvalidOptionError
from ackbridge.transactional.dialects import Dialect, checked_name
from ackbridge.transactional.observing import Recorder, log

#: Ids recorded per statement in a batch (3 parameters each: well under PostgreSQL's 65535
#: and SQLite's 32766 parameters per statement).
RECORD_CHUNK = 500


@dataclass(frozen=True)
class Retention:
    """How long the inbox remembers an id (see the module's note on the window)."""

    #: Ids recorded longer ago than this are pruned (None: never by age).
    max_age_s: float | None = 7 * 24 * 3600.0
    #: At most this many newest ids are kept per endpoint (None: no count bound).
    max_rows: int | None = None
    #: Prune after this many commits (pruning is its own short transaction).
    every: int = 1000

    def __post_init__(self) -> None:
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise InvalidOptionError(f"Retention.max_age_s must be positive, not {self.max_age_s!r}")
        if self.max_rows is not None and self.max_rows < 1:
            raise InvalidOptionError(f"Retention.max_rows must be at least 1, not {self.max_rows!r}")
        if self.every < 1:
            raise InvalidOptionError(f"Retention.every must be at least 1, not {self.every!r}")


@dataclass
class BatchOutcome:
    """What one batch transaction did."""

    #: Deliveries whose handler ran and whose effects committed.
    processed: int = 0
    #: Deliveries whose id the inbox held: acked, handler not run.
    duplicates: int = 0
    #: Deliveries rejected: no usable id, or their handler raised (alone, after the batch rolled back).
    rejected: int = 0


class InboxRules:
    """One inbox's table, endpoint, retention and counters."""

    def __init__(self, dialect: Dialect, *, table: str, endpoint: str, retention: Retention) -> None:
        self.dialect = dialect
        self.table = checked_name(table, "the inbox table")
        if not isinstance(endpoint, str) or not endpoint:
            raise InvalidOptionError(f"an inbox endpoint is a non-empty name, not {endpoint!r}")
        self.endpoint = endpoint
        self.retention = retention
        self.schema = dialect.inbox_schema(self.table)
        self.record_sql = dialect.inbox_record(self.table)
        self.size_sql = dialect.inbox_size(self.table)
        self.recorder = Recorder(inbox=self.table, endpoint=endpoint)
        #: Deliveries acked without running the handler since this inbox was made.
        self.duplicates_skipped = 0
        self.processed = 0
        self._commits_since_prune = 0
        #: The ids held as this process last knew it: counted exactly at each pruning, and
        #: grown by this process's own commits in between (not by other processes' commits).
        self.size_seen = 0

    def record_params(self, key: str) -> tuple[str, str, float]:
        return (self.endpoint, key, time.time())

    def record_many(self, keys: list[str]) -> list[tuple[str, tuple[Any, ...]]]:
        """The statements that record *keys* (a batch's): one with the ids as an array
        where the driver sends arrays, else ``RECORD_CHUNK`` ids each; each returns the
        ids it inserted (the ones not held before)."""
        statements: list[tuple[str, tuple[Any, ...]]] = []
        now = time.time()
        if self.dialect.arrays:
            return [(self.dialect.inbox_record_many(self.table, len(keys)), (self.endpoint, keys, now))]
        for start in range(0, len(keys), RECORD_CHUNK):
            chunk = keys[start:start + RECORD_CHUNK]
            params = tuple(value for key in chunk for value in (self.endpoint, key, now))
            statements.append((self.dialect.inbox_record_many(self.table, len(chunk)), params))
        return statements

    @staticmethod
    def split(keyed: list[tuple[Any, str]], inserted: set[str]) -> tuple[list[Any], list[str]]:
        """The deliveries whose id the batch inserted (the first of each: a second delivery
        of one id in the same batch is a copy), and the ids of the rest (duplicates)."""
        new: list[Any] = []
        duplicates: list[str] = []
        for delivery, key in keyed:
            if key in inserted:
                inserted.discard(key)
                new.append(delivery)
            else:
                duplicates.append(key)
        return new, duplicates

    def committed(self, processed: int, duplicates: int, keys: list[str]) -> bool:
        """Count a committed transaction; True when pruning is due."""
        self.processed += processed
        if processed:
            self.size_seen += processed
            self.recorder.reading("inbox.size", self.size_seen)
        if duplicates:
            self.duplicates_skipped += duplicates
            self.recorder.duplicate(duplicates)
            log.debug("inbox %s/%s: %d duplicate(s) acked without running the handler: %s", self.table,
                      self.endpoint, duplicates, ", ".join(keys[:10]))
        self._commits_since_prune += 1
        return self._commits_since_prune >= self.retention.every

    def prune_statements(self) -> list[tuple[str, tuple[Any, ...]]]:
        """The deletes that apply the retention now (run them in one transaction)."""
        self._commits_since_prune = 0
        statements: list[tuple[str, tuple[Any, ...]]] = []
        retention = self.retention
        if retention.max_age_s is not None:
            statements.append((self.dialect.inbox_prune_age(self.table),
                               (self.endpoint, time.time() - retention.max_age_s)))
        if retention.max_rows is not None:
            statements.append((self.dialect.inbox_prune_count(self.table),
                               (self.endpoint, self.endpoint, retention.max_rows - 1)))
        return statements

    def pruned(self, removed: int, size: int) -> None:
        self.size_seen = size
        self.recorder.reading("inbox.size", size)
        if removed:
            log.info("inbox %s/%s: pruned %d id(s) past the retention window; %d held", self.table, self.endpoint,
                     removed, size)

    def handler_failed(self, key: str, exc: BaseException) -> None:
        log.warning("inbox %s/%s: the handler raised on %r (%s); its transaction rolled back, nothing recorded",
                    self.table, self.endpoint, key, type(exc).__name__)

    def ack_lost(self, key: str, exc: BaseException) -> None:
        log.info("inbox %s/%s: %r committed but its ack was not sent (%s); the broker redelivers it and the inbox "
                 "acks the copy without running the handler", self.table, self.endpoint, key, exc)
