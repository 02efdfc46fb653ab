"""One aio-pika connection at a time, its generation and its reconnects.

aio-pika's robust connection is not used: it reopens channels behind the
caller's back, so a delivery tag of the old channel would be acked on the new
one (aio-pika#98). Here a loss ends the generation, reports it, and a *new*
plain connection is opened with the core's :class:`~ackbridge.kernel.backoff.Backoff`
between attempts; ``on_up`` re-creates the publish channel, the subscriptions
and the reply inbox on it. Everything runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection

from ackbridge.errors import AckbridgeError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.options import ConnectionSettings
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq.aio.errors import connect_error, describe
from ackbridge_rabbitmq.options import endpoint

log = logging.getLogger("ackbridge.rabbitmq")


class Link:
    """The live connection (``connection``), the generation it serves, the reconnect loop.

    *on_up(connection)* re-creates what a generation needs; *on_lost(generation,
    reason)* reports a loss. Both run on the loop."""

    def __init__(self, url: BrokerURL, settings: ConnectionSettings, name: str,
                 on_up: Callable[[AbstractConnection], Awaitable[None]],
                 on_lost: Callable[[int, str], None]) -> None:
        self.url = url
        self.settings = settings
        self.name = name
        self.connection: AbstractConnection | None = None
        self.generation = 0
        self.state = "new"  # new | open | reconnecting | lost | closing | closed
        self._on_up = on_up
        self._on_lost = on_lost
        self._sever_reason: str | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        #: Background work of the transport (channel closes, reopens), kept until done.
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Resolved (with the reason) when the current generation ends: what a write waits on.
        self._ending: asyncio.Future[str] | None = None

    @property
    def where(self) -> str:
        return self.url.redacted

    def next_generation(self, reason: str) -> int:
        """End the current generation (settle checks fail at once); return the ended one."""
        old = self.generation
        self.generation += 1
        self._end_waits(reason)
        return old

    def ended(self, generation: int) -> asyncio.Future[str]:
        """A future resolved with the reason once *generation* ends (at once if it has)."""
        if generation == self.generation and self.state == "open":
            if self._ending is None:
                self._ending = asyncio.get_running_loop().create_future()
            return self._ending
        over: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        over.set_result(f"generation {generation} has ended")
        return over

    def _end_waits(self, reason: str) -> None:
        ending, self._ending = self._ending, None
        if ending is not None and not ending.done():
            ending.set_result(reason)

    def spawn(self, work: Awaitable[Any]) -> None:
        """Run *work* as a task of the loop, kept referenced until it ends."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def require(self, doing: str) -> AbstractConnection:
        conn = self.connection
        if conn is None or conn.is_closed or self.state != "open":
            raise ConnectionLostError(f"{doing}: not connected to {self.where}")
        return conn

    async def _connect_once(self) -> AbstractConnection:
        ep = endpoint(self.url, self.settings)  # the plugin's TLS context: verified unless tls_verify=false
        try:
            conn = await aio_pika.connect(
                host=ep.host, port=ep.port, login=ep.username, password=ep.password, virtualhost=ep.vhost,
                ssl=ep.tls is not None, ssl_context=ep.tls, timeout=self.settings.connect_timeout,
                client_properties={"connection_name": self.name, "product": "ackbridge"},
                heartbeat=round(self.settings.heartbeat))
        except AckbridgeError:
            raise
        except Exception as exc:
            raise connect_error(exc, self.url) from None
        conn.close_callbacks.add(self._closed)
        return conn

    async def open(self) -> None:
        """The first connect: errors go to the caller."""
        self.state = "reconnecting"
        try:
            conn = await self._connect_once()
        except BaseException:
            self.state = "closed"
            raise
        self.generation = 1
        self.connection = conn
        self.state = "open"
        try:
            await self._on_up(conn)
        except BaseException as exc:
            # Half made (the publish channel refused, or a cancel): close it, or the caller
            # would hold nothing that could close this connection.
            self.state, self.connection = "closed", None
            with contextlib.suppress(Exception):
                await conn.close()
            if isinstance(exc, Exception) and not isinstance(exc, AckbridgeError):
                raise connect_error(exc, self.url) from None
            raise

    async def close(self) -> None:
        self.state = "closing"
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        conn, self.connection = self.connection, None
        self._end_waits("the connection was closed")
        if conn is not None and not conn.is_closed:
            try:
                await conn.close()
            except Exception as exc:  # already broken: nothing left to close
                log.debug("ackbridge-rabbitmq: close of %s: %s", self.where, describe(exc))
        self.state = "closed"

    def sever(self, reason: str) -> None:
        """Close the connection as a fault would: the generation ends and it reconnects. On the loop."""
        conn = self.connection
        if conn is None or conn.is_closed or self.state != "open":
            return
        self._sever_reason = reason
        self.spawn(conn.close())

    def _closed(self, conn: Any, exc: BaseException | None) -> None:
        if conn is not self.connection or self.state != "open":
            return
        reason = self._sever_reason or describe(exc)
        self._sever_reason = None
        self.connection = None
        why = f"connection lost ({reason})"
        old = self.next_generation(why)  # settlements of the old generation are stale from here on
        log.warning("ackbridge-rabbitmq: %s: %s", self.where, why)
        self._on_lost(old, why)
        if self.settings.reconnect:
            self.state = "reconnecting"
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())
        else:
            self.state = "lost"

    async def _reconnect(self) -> None:
        backoff = Backoff(self.settings.reconnect_max_delay)
        while self.state == "reconnecting":
            await asyncio.sleep(backoff.next_delay())  # back-off between attempts, not a wait for state
            try:
                conn = await self._connect_once()
            except Exception as exc:
                log.info("ackbridge-rabbitmq: reconnect to %s failed: %s", self.where, describe(exc))
                continue
            if self.state != "reconnecting":
                await conn.close()
                return
            self.connection = conn
            self.state = "open"
            try:
                await self._on_up(conn)
            except Exception as exc:
                log.warning("ackbridge-rabbitmq: re-creating channels after a reconnect failed: %s", describe(exc))
            log.info("ackbridge-rabbitmq: %s: reconnected (generation %d)", self.where, self.generation)
            return
