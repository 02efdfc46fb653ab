"""The SQLite file behind ``local://``: queues, leases, dead letters.

WAL mode lets several processes (a CLI, Spark's driver and workers) use one
file at once. A delivered message is *leased* to a consumer (``owner``); an
owner whose process died, or whose heartbeat is older than the lease timeout,
loses its leases and the messages become ready again.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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
CREATE TABLE IF NOT EXISTS owners (
    owner TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    heartbeat REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY,
    dead_letter INTEGER NOT NULL
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """One process's handle on the broker file (thread-safe)."""

    def __init__(self, path: str, *, lease_timeout: float, fsync: bool) -> None:
        self.path = path
        self.lease_timeout = lease_timeout
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._lock = threading.Lock()
        # Only publishes need fsync before their confirm. Leases and settlements
        # use synchronous=NORMAL: in WAL mode they still survive a process crash,
        # and one lost on power failure only means a redelivery (at-least-once).
        self._publish_db = self._open(path, "FULL" if fsync else "NORMAL")
        self._db = self._open(path, "NORMAL")
        with self._lock:
            self._db.executescript(_SCHEMA)
        self._last_reclaim = 0.0

    @staticmethod
    def _open(path: str, synchronous: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("PRAGMA busy_timeout=60000")
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._publish_db.close()

    def _write(self, sql: str, params: Iterable[Any] = ()) -> _Done:
        # BEGIN IMMEDIATE takes the write lock up front, so two processes never
        # lease the same row; busy_timeout makes the other one wait.
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(sql, tuple(params))
                rows = cur.fetchall()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return _Done(cur.rowcount, rows)

    # ---- queues ---------------------------------------------------------------
    def declare(self, queue: str, dead_letter: bool) -> None:
        self._write("INSERT INTO queues(name, dead_letter) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET dead_letter=excluded.dead_letter", (queue, int(dead_letter)))

    def has_dead_letter(self, queue: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT dead_letter FROM queues WHERE name=?", (queue,)).fetchone()
        return True if row is None else bool(row[0])

    # ---- publishing -------------------------------------------------------------
    def insert_many(self, rows: Sequence[tuple[str, bytes, str]]) -> None:
        """Insert in one durable transaction (group commit)."""
        with self._lock:
            db = self._publish_db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT INTO messages(queue, body, props) VALUES (?, ?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    # ---- leases ---------------------------------------------------------------------
    def register_owner(self, owner: str) -> None:
        self._write("INSERT OR REPLACE INTO owners(owner, pid, host, heartbeat) VALUES (?, ?, ?, ?)",
                    (owner, os.getpid(), HOST, time.time()))

    def heartbeat(self, owner: str) -> None:
        self._write("UPDATE owners SET heartbeat=? WHERE owner=?", (time.time(), owner))

    def release_owner(self, owner: str) -> int:
        """Return every lease of *owner* to the queue (connection closed or lost)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute("UPDATE messages SET owner=NULL WHERE owner=?", (owner,))
                self._db.execute("DELETE FROM owners WHERE owner=?", (owner,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return cur.rowcount

    def reclaim_dead(self, *, every: float = 0.5) -> int:
        """Release leases of owners that died (same host) or stopped heartbeating."""
        now = time.time()
        if now - self._last_reclaim < every:
            return 0
        self._last_reclaim = now
        with self._lock:
            owners = self._db.execute("SELECT owner, pid, host, heartbeat FROM owners").fetchall()
        dead = [
            owner for owner, pid, host, beat in owners
            if (host == HOST and not _pid_alive(pid)) or now - beat > self.lease_timeout
        ]
        return sum(self.release_owner(owner) for owner in dead)

    def lease(self, queue: str, owner: str, limit: int) -> list[Row]:
        done = self._write(
            "UPDATE messages SET owner=?, delivery_count=delivery_count+1 WHERE id IN "
            "(SELECT id FROM messages WHERE queue=? AND owner IS NULL ORDER BY id LIMIT ?) "
            "RETURNING id, queue, body, props, delivery_count",
            (owner, queue, limit),
        )
        rows = sorted(done.rows, key=lambda r: r[0])
        return [Row(*r) for r in rows]

    def take(self, queue: str, limit: int) -> list[Row]:
        """Remove and return ready messages (auto-ack; used for reply inboxes)."""
        done = self._write(
            "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE queue=? AND owner IS NULL "
            "ORDER BY id LIMIT ?) RETURNING id, queue, body, props, delivery_count", (queue, limit))
        return [Row(*r) for r in sorted(done.rows, key=lambda r: r[0])]

    # ---- settlement ----------------------------------------------------------------------
    def settle(self, owner: str, acks: Sequence[int], requeues: Sequence[int],
               rejects: Sequence[tuple[int, str]]) -> int:
        """Apply settlements held by *owner* atomically; return how many rows matched.

        A row no longer leased by *owner* (its lease was reclaimed) does not
        match, so a stale settle never touches a message someone else holds.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                matched = 0
                if acks:
                    marks = ",".join("?" * len(acks))
                    cur = self._db.execute(f"DELETE FROM messages WHERE owner=? AND id IN ({marks})", (owner, *acks))
                    matched += cur.rowcount
                if requeues:
                    marks = ",".join("?" * len(requeues))
                    cur = self._db.execute(f"UPDATE messages SET owner=NULL WHERE owner=? AND id IN ({marks})",
                                           (owner, *requeues))
                    matched += cur.rowcount
                for row_id, target in rejects:
                    if target:
                        cur = self._db.execute(
                            "INSERT INTO messages(queue, body, props, delivery_count) "
                            "SELECT ?, body, props, delivery_count FROM messages WHERE owner=? AND id=?",
                            (target, owner, row_id))
                    cur = self._db.execute("DELETE FROM messages WHERE owner=? AND id=?", (owner, row_id))
                    matched += cur.rowcount
                expected = len(acks) + len(requeues) + len(rejects)
                if matched != expected:
                    self._db.execute("ROLLBACK")
                    return matched
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return matched

    # ---- inspection (tests, CLI) ---------------------------------------------------------
    def counts(self, queue: str) -> tuple[int, int]:
        """(ready, leased) messages in *queue*."""
        with self._lock:
            ready, leased = self._db.execute(
                "SELECT COALESCE(SUM(owner IS NULL),0), COALESCE(SUM(owner IS NOT NULL),0) "
                "FROM messages WHERE queue=?", (queue,)).fetchone()
        return int(ready), int(leased)

    def bodies(self, queue: str) -> list[bytes]:
        with self._lock:
            return [bytes(r[0]) for r in self._db.execute(
                "SELECT body FROM messages WHERE queue=? ORDER BY id", (queue,))]

    def purge(self, queue: str) -> None:
        self._write("DELETE FROM messages WHERE queue=?", (queue,))


@dataclass(frozen=True, slots=True)
class _Done:
    rowcount: int
    rows: list[Any]
