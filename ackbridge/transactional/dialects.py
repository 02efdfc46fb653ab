"""The SQL of the inbox and the outbox, for sqlite3 and PostgreSQL (psycopg 3).

Everything here is text: no connection is touched. Table names are checked
identifiers (never user data in SQL); values always travel as parameters.

Why the statements are what they are:

* the inbox records an id with ``INSERT ... ON CONFLICT DO NOTHING``: on
  PostgreSQL a second transaction inserting the same id waits for the first
  and then inserts nothing, so two competing consumers cannot both run the
  handler for one id; SQLite serialises writers, which gives the same;
* the relay claims whole destinations on PostgreSQL, with an advisory lock it
  holds for the transaction (``pg_try_advisory_xact_lock``), and then takes
  rows of those destinations only, ``FOR UPDATE``: several relays share the
  work and no two publish one destination at once, which keeps its order. SQLite has neither;
  one relay per database file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ackbridge.errors import InvalidOptionError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def checked_name(name: str, what: str) -> str:
    """*name* when it is a plain SQL identifier (letters, digits, underscores)."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise InvalidOptionError(f"{what} must be a plain SQL identifier (letters, digits, _), not {name!r}")
    return name


@dataclass(frozen=True)
class Dialect:
    """One database's spelling of what the inbox, outbox and relay need."""

    name: str
    #: The parameter marker of the driver (``?`` for sqlite3, ``%s`` for psycopg).
    mark: str
    blob: str
    real: str
    serial_key: str
    #: Several relays may share one outbox (row and per-destination locks).
    shared_relays: bool
    #: Run first in a relay's round: each statement gets its own snapshot, so the take sees what
    #: the destination's previous holder committed (a connection set to REPEATABLE READ would not).
    relay_isolation: str = ""
    #: The driver sends a list as one array parameter: a batch's ids travel as one value.
    arrays: bool = False
    #: Run before creating tables: PostgreSQL's CREATE TABLE IF NOT EXISTS races with itself
    #: (two processes starting at once: a unique violation on pg_type), so creation is serialised.
    ddl_lock: str = ""

    def sql(self, text: str) -> str:
        """*text* written with ``?`` markers, in this driver's markers."""
        return text if self.mark == "?" else text.replace("?", self.mark)

    # ---- inbox -------------------------------------------------------------------
    def inbox_schema(self, table: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {table} (endpoint TEXT NOT NULL, message_id TEXT NOT NULL, "
            f"received_at {self.real} NOT NULL, PRIMARY KEY (endpoint, message_id))",
            f"CREATE INDEX IF NOT EXISTS {table}_age ON {table} (endpoint, received_at)",
        ]

    def inbox_record(self, table: str) -> str:
        return self.sql(f"INSERT INTO {table} (endpoint, message_id, received_at) VALUES (?, ?, ?) "
                        "ON CONFLICT DO NOTHING")

    def inbox_record_many(self, table: str, rows: int) -> str:
        # One round trip for a batch's ids; RETURNING names the ones that were not held
        # (SQLite has RETURNING since 3.35). With arrays the ids are one parameter
        # (endpoint, ids, received_at): one statement text for every batch size, which
        # psycopg prepares once, and a third of the parameters to bind.
        if self.arrays:
            return self.sql(f"INSERT INTO {table} (endpoint, message_id, received_at) "
                            "SELECT ?, unnest(?::text[]), ? ON CONFLICT DO NOTHING RETURNING message_id")
        values = ", ".join(["(?, ?, ?)"] * rows)
        return self.sql(f"INSERT INTO {table} (endpoint, message_id, received_at) VALUES {values} "
                        "ON CONFLICT DO NOTHING RETURNING message_id")

    def inbox_prune_age(self, table: str) -> str:
        return self.sql(f"DELETE FROM {table} WHERE endpoint = ? AND received_at < ?")

    def inbox_prune_count(self, table: str) -> str:
        # Keep the newest *n* per endpoint: delete everything older than the n-th newest.
        return self.sql(f"DELETE FROM {table} WHERE endpoint = ? AND received_at < (SELECT received_at FROM {table} "
                        "WHERE endpoint = ? ORDER BY received_at DESC LIMIT 1 OFFSET ?)")

    def inbox_size(self, table: str) -> str:
        return self.sql(f"SELECT count(*) FROM {table} WHERE endpoint = ?")

    # ---- outbox ------------------------------------------------------------------
    def outbox_schema(self, table: str) -> list[str]:
        columns = (f"destination TEXT NOT NULL, message_id TEXT NOT NULL, body {self.blob} NOT NULL, headers TEXT, "
                   f"correlation_id TEXT, content_type TEXT, created_at {self.real} NOT NULL, "
                   "attempts INTEGER NOT NULL DEFAULT 0")
        return [
            f"CREATE TABLE IF NOT EXISTS {table} (seq {self.serial_key}, {columns})",
            f"CREATE INDEX IF NOT EXISTS {table}_destination ON {table} (destination, seq)",
            f"CREATE TABLE IF NOT EXISTS {table}_refused (seq BIGINT PRIMARY KEY, {columns}, "
            f"reason TEXT NOT NULL, refused_at {self.real} NOT NULL)",
        ]

    def outbox_insert(self, table: str) -> str:
        return self.sql(f"INSERT INTO {table} (destination, message_id, body, headers, correlation_id, content_type, "
                        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)")

    def outbox_take(self, table: str) -> str:
        select = (f"SELECT seq, destination, message_id, body, headers, correlation_id, content_type, created_at, "
                  f"attempts FROM {table}")
        if not self.shared_relays:
            return self.sql(f"{select} ORDER BY seq LIMIT ?")
        # Only destinations the round claimed (outbox_claim), in a statement begun after the claim:
        # its snapshot sees every row the previous holder removed before it let go.
        return self.sql(f"{select} WHERE destination = ANY(?) ORDER BY seq LIMIT ? FOR UPDATE")

    def outbox_claim(self, table: str) -> str:
        """Up to ``?`` destinations, oldest row first, whose advisory lock the round now holds."""
        # Whole destinations are claimed, never rows one by one: a per-row lock test in one scan
        # skipped a destination's early rows while another relay held it and took its later
        # rows once that relay let go, publishing them first. OFFSET 0 keeps the volatile test
        # out of the subquery (PostgreSQL pushed it into the aggregate, claiming every free
        # destination): locks are tried lazily, oldest head first, until LIMIT is met.
        return self.sql(f"SELECT destination FROM (SELECT destination, min(seq) AS head FROM {table} "
                        "GROUP BY destination ORDER BY head OFFSET 0) AS heads "
                        f"WHERE pg_try_advisory_xact_lock(hashtext('{table}:' || destination)) LIMIT ?")

    def outbox_delete(self, table: str) -> str:
        return self.sql(f"DELETE FROM {table} WHERE seq = ?")

    def outbox_attempted(self, table: str) -> str:
        return self.sql(f"UPDATE {table} SET attempts = attempts + 1 WHERE seq = ?")

    def outbox_refuse(self, table: str) -> str:
        return self.sql(f"INSERT INTO {table}_refused (seq, destination, message_id, body, headers, correlation_id, "
                        "content_type, created_at, attempts, reason, refused_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

    def outbox_backlog(self, table: str) -> str:
        return f"SELECT count(*), min(created_at) FROM {table}"


SQLITE = Dialect(name="sqlite", mark="?", blob="BLOB", real="REAL",
                 serial_key="INTEGER PRIMARY KEY AUTOINCREMENT", shared_relays=False)
POSTGRES = Dialect(name="postgresql", mark="%s", blob="BYTEA", real="DOUBLE PRECISION",
                   serial_key="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", shared_relays=True, arrays=True,
                   relay_isolation="SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
                   ddl_lock="SELECT pg_advisory_xact_lock(hashtext('ackbridge.transactional:ddl'))")


def dialect_of(connection: object) -> Dialect:
    """The dialect of a DB-API connection: sqlite3's, or psycopg 3's (sync or async)."""
    module = type(connection).__module__
    if module.startswith("sqlite3"):
        return SQLITE
    if module.startswith("psycopg"):
        return POSTGRES
    raise InvalidOptionError(f"the transactional inbox and outbox work on sqlite3 and psycopg 3 connections, "
                             f"not {type(connection).__qualname__} ({module})")
