"""One transaction on the application's connection, asyncio face (see
:mod:`ackbridge.transactional.database` for why the connection must be idle)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ackbridge.errors import ConfigurationError
from ackbridge.transactional.database import BUSY, Database
from ackbridge.transactional.dialects import dialect_of


class AsyncDatabase:
    """A ``psycopg.AsyncConnection``, or a sqlite3 connection run inline on the loop."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.dialect = dialect_of(connection)
        self._inline = Database(connection) if self.dialect.name == "sqlite" else None

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run *sql*; the cursor (rowcount, fetch*: awaited on psycopg, plain on sqlite3)."""
        if self._inline is not None:
            return self._inline.execute(sql, params)
        return await self.connection.execute(sql, tuple(params))

    async def execute_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run *sql* once per parameter set (pipelined by psycopg 3)."""
        if not params:
            return
        if self._inline is not None:
            self._inline.execute_many(sql, params)
            return
        async with self.connection.cursor() as cursor:
            await cursor.executemany(sql, [tuple(p) for p in params])

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        cursor = await self.execute(sql, params)
        return list(cursor.fetchall() if self._inline is not None else await cursor.fetchall())

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = await self.execute(sql, params)
        return cursor.fetchone() if self._inline is not None else await cursor.fetchone()

    async def script(self, statements: Sequence[str]) -> None:
        async with self.transaction():
            if self.dialect.ddl_lock:
                await self.execute(self.dialect.ddl_lock)
            for statement in statements:
                await self.execute(statement)

    async def end_read(self) -> None:
        """End the implicit transaction a read opened (psycopg outside autocommit)."""
        if self._inline is None and not self.connection.autocommit:
            await self.connection.rollback()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if self._inline is not None:
            with self._inline.transaction():
                yield
            return
        from psycopg.pq import TransactionStatus

        if self.connection.info.transaction_status is not TransactionStatus.IDLE:
            raise ConfigurationError(BUSY)
        async with self.connection.transaction():
            yield
