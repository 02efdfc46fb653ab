"""One transaction on the application's own DB-API connection (sqlite3, psycopg 3).

The inbox and the relay own the transaction boundary: they begin it, the
application writes inside it, they commit it, and only then is anything acked.
So the connection must be idle when they begin (no transaction of the
application's own open on it): otherwise the commit would also commit, or a
rollback also undo, work the inbox knows nothing of.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ackbridge.errors import ConfigurationError
from ackbridge.transactional.dialects import SQLITE, Dialect, dialect_of

BUSY = ("the connection has a transaction open; the inbox and the relay begin and commit their own, so call them "
        "with the connection idle (commit or roll back first)")


class Database:
    """The application's connection, and how its dialect begins and ends a transaction."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.dialect: Dialect = dialect_of(connection)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run *sql*; the cursor (rowcount, fetch*)."""
        return self.connection.execute(sql, tuple(params))

    def execute_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run *sql* once per parameter set (psycopg 3 pipelines them: one round trip)."""
        if params:
            self.connection.cursor().executemany(sql, [tuple(p) for p in params])

    def script(self, statements: Sequence[str]) -> None:
        """Run DDL *statements* in one committed transaction."""
        with self.transaction():
            if self.dialect.ddl_lock:
                self.execute(self.dialect.ddl_lock)
            for statement in statements:
                self.execute(statement)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Begin; commit when the block ends, roll back when it raises."""
        conn = self.connection
        if self.dialect is SQLITE:
            if conn.in_transaction:
                raise ConfigurationError(BUSY)
            if conn.isolation_level is None:  # autocommit: sqlite3 begins nothing itself
                conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            return
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status is not TransactionStatus.IDLE:
            raise ConfigurationError(BUSY)
        # Idle: transaction() opens a real transaction (not a savepoint), in either autocommit mode.
        with conn.transaction():
            yield
