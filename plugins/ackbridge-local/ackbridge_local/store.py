"""The SQLite file behind ``local://``: queues, leases, dead letters.

WAL mode lets several processes (a CLI, Spark's driver and workers) use one
file at once. A delivered message is *leased* to a consumer's owner record.
Ownership cannot be split: a lease is taken only while its owner record
exists (checked in the leasing transaction), and every leased row whose owner
record is gone, expired (no heartbeat for the owner's own ``lease_timeout``)
or whose process died returns to the queue (the sweep reads rows, not only
owners). Every SQLite error leaves as a typed error naming the file
(:mod:`ackbridge_local.errors`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ackbridge.transport.files import PRIVATE_FILE, create_private_file, dir_mode_for, private_dir, process_alive
from ackbridge_local import identity
from ackbridge_local.errors import OwnerGone, mapped
from ackbridge_local.row_changes import Settlement, apply

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    props TEXT NOT NULL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages(queue, owner, id);
CREATE INDEX IF NOT EXISTS messages_owner ON messages(owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS owners (
    owner TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    lease_timeout REAL
);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY,
    dead_letter INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

HOST = socket.gethostname()


def dead_letter_queue(queue: str) -> str:
    return f"{queue}.dlq"


@dataclass(frozen=True, slots=True)
class Row:
    id: int
    queue: str
    body: bytes
    props: str
    delivery_count: int


class Store:
    """One process's handle on the broker file (thread-safe)."""

    def __init__(self, path: str, *, lease_timeout: float, fsync: bool, file_mode: int = PRIVATE_FILE) -> None:
        self.path = path
        self.lease_timeout = lease_timeout
        self._lock = threading.Lock()
        marker = identity.check_before_open(path)
        # SQLite gives -wal, -shm and -journal files the main file's mode, so creating
        # the main file private first keeps all of them private.
        private_dir(os.path.dirname(os.path.abspath(path)), dir_mode_for(file_mode))
        create_private_file(path, file_mode)
        try:
            # Only publishes need fsync before their confirm. Leases and settlements
            # use synchronous=NORMAL: in WAL mode they still survive a process crash,
            # and one lost on power failure only means a redelivery (at-least-once).
            self._publish_db = self._open(path, "FULL" if fsync else "NORMAL")
            self._db = self._open(path, "NORMAL")
            with self._lock:
                self._db.executescript(_SCHEMA)
            self._migrate()
            stored_id = self._broker_id()
        except sqlite3.Error as exc:
            raise mapped(exc, path, "opening") from None
        identity.check_same_broker(path, marker, stored_id)
        if marker is None:
            identity.write_marker(path, stored_id, file_mode)
        self.broker_id = stored_id
        self.file = identity.OpenFile(path)
        self._last_reclaim = 0.0

    @staticmethod
    def _open(path: str, synchronous: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("PRAGMA busy_timeout=60000")
        return db

    def _migrate(self) -> None:
        # Files from before owners carried their own lease timeout: add the column.
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(owners)")}
        if "lease_timeout" not in columns:
            with contextlib.suppress(sqlite3.OperationalError):  # another process added it first
                self._db.execute("ALTER TABLE owners ADD COLUMN lease_timeout REAL")

    def _broker_id(self) -> str:
        self._db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('broker_id', ?)", (uuid.uuid4().hex,))
        row = self._db.execute("SELECT value FROM meta WHERE key='broker_id'").fetchone()
        return str(row[0])

    def close(self) -> None:
        with self._lock:
            for db in (self._db, self._publish_db):
                with contextlib.suppress(sqlite3.Error):
                    db.close()

    @contextlib.contextmanager
    def _tx(self, db: sqlite3.Connection, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; any SQLite error leaves typed and names the file.

        BEGIN IMMEDIATE takes the write lock up front, so two processes never
        lease the same row; busy_timeout makes the other one wait. SQLite rolls
        back by itself on some errors (disk full): an explicit ROLLBACK then
        fails with "no transaction is active" and must not hide the real reason.
        """
        with self._lock:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise mapped(exc, self.path, doing) from None

    def _read(self, sql: str, params: Sequence[object], doing: str) -> list[tuple[object, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise mapped(exc, self.path, doing) from None

    def check_file(self) -> None:
        """Raise DamagedFileError if the path no longer leads to the file opened here, intact."""
        self.file.check()

    # ---- queues ---------------------------------------------------------------
    def declare(self, queue: str, dead_letter: bool) -> None:
        with self._tx(self._db, "declaring a queue") as db:
            db.execute("INSERT INTO queues(name, dead_letter) VALUES (?, ?) "
                       "ON CONFLICT(name) DO UPDATE SET dead_letter=excluded.dead_letter", (queue, int(dead_letter)))

    def has_dead_letter(self, queue: str) -> bool:
        rows = self._read("SELECT dead_letter FROM queues WHERE name=?", (queue,), "reading a queue")
        return True if not rows else bool(rows[0][0])

    def probe(self, queue: str) -> None:
        """Read the file where a consumer of *queue* will read: damage shows here, not later."""
        self.check_file()
        self._read("SELECT id, length(body), props FROM messages WHERE queue=? ORDER BY id LIMIT 1", (queue,),
                   "reading a queue")
        self._read("SELECT count(*) FROM owners", (), "reading the owners")

    # ---- publishing -------------------------------------------------------------
    def insert_many(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        """Insert in one durable transaction (group commit)."""
        with self._tx(self._publish_db, "publishing") as db:
            db.executemany("INSERT INTO messages(queue, body, props) VALUES (?, ?, ?)", rows)
            # Checked inside the transaction: a file deleted or replaced since it was
            # opened gets no commit, so nothing is confirmed into an unlinked file.
            self.check_file()

    # ---- owners -------------------------------------------------------------------
    def register_owner(self, owner: str) -> None:
        with self._tx(self._db, "registering a consumer") as db:
            db.execute("INSERT OR REPLACE INTO owners(owner, pid, host, heartbeat, lease_timeout) "
                       "VALUES (?, ?, ?, ?, ?)", (owner, os.getpid(), HOST, time.time(), self.lease_timeout))

    def heartbeat(self, owner: str) -> bool:
        """Refresh *owner*'s record; False when it is gone (taken over: its leases were reclaimed)."""
        with self._tx(self._db, "heartbeat") as db:
            cur = db.execute("UPDATE owners SET heartbeat=? WHERE owner=?", (time.time(), owner))
            return cur.rowcount == 1

    def release_owner(self, owner: str) -> int:
        """Return every lease of *owner* to the queue and drop its record (connection closed or lost)."""
        with self._tx(self._db, "releasing leases") as db:
            cur = db.execute("UPDATE messages SET owner=NULL WHERE owner=?", (owner,))
            db.execute("DELETE FROM owners WHERE owner=?", (owner,))
            return int(cur.rowcount)

    def reclaim_dead(self, *, every: float = 0.5) -> int:
        """Drop owner records whose process died (this host) or that stopped heartbeating
        for their lease timeout, then release every leased row without a live owner record."""
        now = time.time()
        if now - self._last_reclaim < every:
            return 0
        self._last_reclaim = now
        with self._tx(self._db, "reclaiming leases") as db:
            # Decided inside the write transaction: an owner that heartbeats meanwhile
            # is seen with its new heartbeat, never reclaimed on an old reading.
            owners = db.execute("SELECT owner, pid, host, heartbeat, lease_timeout FROM owners").fetchall()
            dead = [
                (owner,) for owner, pid, host, beat, timeout in owners
                if (host == HOST and not process_alive(pid)) or now - beat > (timeout or self.lease_timeout)
            ]
            if dead:
                db.executemany("DELETE FROM owners WHERE owner=?", dead)
            cur = db.execute("UPDATE messages SET owner=NULL WHERE owner IS NOT NULL "
                             "AND owner NOT IN (SELECT owner FROM owners)")
            return int(cur.rowcount)

    # ---- leases ---------------------------------------------------------------------
    def lease(self, queue: str, owner: str, limit: int) -> list[Row]:
        """Lease up to *limit* ready messages to *owner*; OwnerGone if its record was taken over."""
        # Read first: an idle consumer polls every poll_ms, and a process paused (SIGSTOP,
        # a frozen VM) inside a write transaction stalls every other client of the file
        # until it resumes. Only a poll that finds a ready message takes the write lock.
        if not self._read("SELECT 1 FROM messages WHERE queue=? AND owner IS NULL LIMIT 1", (queue,),
                          "polling a queue"):
            if not self._read("SELECT 1 FROM owners WHERE owner=?", (owner,), "reading the owners"):
                raise OwnerGone(owner)
            return []
        with self._tx(self._db, "leasing messages") as db:
            if db.execute("SELECT 1 FROM owners WHERE owner=?", (owner,)).fetchone() is None:
                raise OwnerGone(owner)
            rows = db.execute(
                "UPDATE messages SET owner=?, delivery_count=delivery_count+1 WHERE id IN "
                "(SELECT id FROM messages WHERE queue=? AND owner IS NULL ORDER BY id LIMIT ?) "
                "RETURNING id, queue, body, props, delivery_count",
                (owner, queue, limit),
            ).fetchall()
        return [Row(*r) for r in sorted(rows, key=lambda r: r[0])]

    def requeue(self, owner: str, ids: Sequence[int]) -> int:
        """Return those of *ids* still leased to *owner* to the queue (no all-or-nothing match)."""
        marks = ",".join("?" * len(ids))
        with self._tx(self._db, "requeueing") as db:
            return int(db.execute(f"UPDATE messages SET owner=NULL WHERE owner=? AND id IN ({marks})",
                                  (owner, *ids)).rowcount)

    def take(self, queue: str, limit: int) -> list[Row]:
        """Remove and return ready messages (auto-ack; used for reply inboxes)."""
        with self._tx(self._db, "reading replies") as db:
            rows = db.execute(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE queue=? AND owner IS NULL "
                "ORDER BY id LIMIT ?) RETURNING id, queue, body, props, delivery_count", (queue, limit)).fetchall()
        return [Row(*r) for r in sorted(rows, key=lambda r: r[0])]

    # ---- settlement ----------------------------------------------------------------------
    def settle(self, owner: str, settlement: Settlement) -> bool:
        """Apply *settlement* of rows *owner* holds, all or nothing: whether it was applied.

        A row no longer leased by *owner* (its lease was reclaimed) does not
        match; then nothing is applied, so a stale settle never touches a
        message someone else holds.
        """
        if (one := settlement.single(owner)) is not None:
            # One row: one statement is its own transaction (autocommit takes the write
            # lock at its start, as BEGIN IMMEDIATE does) and matches all or nothing.
            with self._lock:
                try:
                    return self._db.execute(*one).rowcount == 1
                except sqlite3.Error as exc:
                    raise mapped(exc, self.path, "settling") from None
        with self._tx(self._db, "settling") as db:
            db.execute("SAVEPOINT settlement")
            if apply(db, owner, (settlement,)) == len(settlement):
                return True
            db.execute("ROLLBACK TO settlement")
            return False

    # ---- inspection (tests, CLI) ---------------------------------------------------------
    def counts(self, queue: str) -> tuple[int, int]:
        """(ready, leased) messages in *queue*."""
        rows = self._read("SELECT COALESCE(SUM(owner IS NULL),0), COALESCE(SUM(owner IS NOT NULL),0) "
                          "FROM messages WHERE queue=?", (queue,), "counting messages")
        ready, leased = rows[0]
        return int(ready), int(leased)  # type: ignore[call-overload]

    def totals(self) -> tuple[int, int]:
        """(ready, leased) messages over every queue."""
        rows = self._read("SELECT COALESCE(SUM(owner IS NULL),0), COALESCE(SUM(owner IS NOT NULL),0) FROM messages",
                          (), "counting messages")
        ready, leased = rows[0]
        return int(ready), int(leased)  # type: ignore[call-overload]

    def owner_ids(self) -> list[str]:
        return [str(r[0]) for r in self._read("SELECT owner FROM owners ORDER BY owner", (), "reading the owners")]

    def bodies(self, queue: str) -> list[bytes]:
        rows = self._read("SELECT body FROM messages WHERE queue=? ORDER BY id", (queue,), "reading messages")
        return [bytes(r[0]) for r in rows]  # type: ignore[call-overload]

    def purge(self, queue: str) -> int:
        """Drop the ready (not leased) messages of *queue*; return how many."""
        with self._tx(self._db, "purging a queue") as db:
            return int(db.execute("DELETE FROM messages WHERE queue=? AND owner IS NULL", (queue,)).rowcount)

    def delete(self, queue: str, dead_letter: bool) -> None:
        """Forget *queue* and every message in it, leased or not (and its dead-letter companion)."""
        names = [queue, dead_letter_queue(queue)] if dead_letter else [queue]
        with self._tx(self._db, "deleting a queue") as db:
            for name in names:
                db.execute("DELETE FROM messages WHERE queue=?", (name,))
                db.execute("DELETE FROM queues WHERE name=?", (name,))

    def declared(self, queue: str) -> bool | None:
        """None if *queue* was never declared, else whether it dead-letters."""
        rows = self._read("SELECT dead_letter FROM queues WHERE name=?", (queue,), "reading a queue")
        return None if not rows else bool(rows[0][0])
