"""The application's database in the transactional tests: a sqlite3 file or a
PostgreSQL database (``test``), with table names unique to one test, dropped after."""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class AppDb:
    kind: str  # "sqlite" or "postgres"
    target: str  # the sqlite file, or the PostgreSQL conninfo
    prefix: str = field(default_factory=lambda: f"abtx_{uuid.uuid4().hex[:10]}")

    @classmethod
    def sqlite(cls, directory: Path) -> AppDb:
        return cls("sqlite", str(directory / "app.db"))

    @classmethod
    def postgres(cls) -> AppDb:
        return cls("postgres", PG_DSN)

    @property
    def mark(self) -> str:
        return "?" if self.kind == "sqlite" else "%s"

    @property
    def effects(self) -> str:
        return f"{self.prefix}_effects"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}_inbox"

    @property
    def outbox(self) -> str:
        return f"{self.prefix}_outbox"

    def connect(self) -> Any:
        if self.kind == "sqlite":
            # timeout: competing processes wait for SQLite's one writer instead of failing at once.
            return sqlite3.connect(self.target, timeout=60, check_same_thread=False)
        import psycopg

        return psycopg.connect(self.target)

    async def connect_async(self) -> Any:
        if self.kind == "sqlite":
            return self.connect()
        import psycopg

        return await psycopg.AsyncConnection.connect(self.target)

    def create_effects(self) -> None:
        """The application's effect table: no unique constraint, so a second run of a
        handler for one id shows as a second row."""
        with self._conn() as db:
            db.execute(f"CREATE TABLE {self.effects} (message_id TEXT NOT NULL, body TEXT)")

    def insert_effect(self) -> str:
        return f"INSERT INTO {self.effects} (message_id, body) VALUES ({self.mark}, {self.mark})"

    def effect_counts(self) -> Counter[str]:
        return Counter(row[0] for row in self.rows(f"SELECT message_id FROM {self.effects}"))

    def rows(self, sql: str) -> list[Any]:
        db = self.connect()
        try:
            return list(db.execute(sql).fetchall())
        finally:
            db.close()

    def drop_all(self) -> None:
        names = [self.effects, self.inbox, self.outbox, f"{self.outbox}_refused"]
        with self._conn() as db:
            for name in names:
                db.execute(f"DROP TABLE IF EXISTS {name}")

    def _conn(self) -> Any:
        return _Committing(self.connect())


class _Committing:
    """``with`` a connection: commit and close (sqlite3's own ``with`` does not close)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def __enter__(self) -> Any:
        return self.db

    def __exit__(self, kind: object, *rest: object) -> None:
        try:
            if kind is None:
                self.db.commit()
            else:
                self.db.rollback()
        finally:
            self.db.close()
