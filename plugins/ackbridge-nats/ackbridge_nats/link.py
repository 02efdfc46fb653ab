"""One nats-py connection at a time, its generation and its reconnects.

nats-py's own reconnect is switched off (``allow_reconnect=False``): on a
loss this class ends the generation, reports it, and opens a *new* client
with the core's :class:`~ackbridge.kernel.backoff.Backoff` between attempts. A new
client means new inboxes, so nothing of the old generation (pull requests,
publish replies) can reach the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client

from ackbridge.errors import AckbridgeError, AuthenticationError, BrokerUnreachableError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.transport.tls import describe_tls_error
from ackbridge.urls import BrokerURL
from ackbridge_nats.options import NatsSettings

log = logging.getLogger("ackbridge.nats")

#: nats-py's ping loop sleeps ping_interval: "no heartbeat" is a very long one.
_NO_PING = 10**9

#: How often a live client is looked at for a close nats-py did not report (see _watch_closed).
CLOSED_WATCH_S = 0.25


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "closed"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: What nats-server answers (-ERR) to a CONNECT whose user, password, token or nkey it refuses.
_REFUSED_CREDENTIALS = ("authorization violation", "authentication", "user authentication expired")


def connect_error(exc: BaseException, url: BrokerURL, seen: list[BaseException]) -> AckbridgeError:
    """A failed first connect as the error tree says: refused credentials are an
    AuthenticationError (never recoverable: retrying a wrong password cannot help),
    nothing listening a BrokerUnreachableError; *seen* holds what nats-py reported
    to its error callback meanwhile (a refused TCP connect only shows there)."""
    for found in (exc, *seen):
        if isinstance(found, nats.errors.AuthorizationError) or any(
                text in str(found).lower() for text in _REFUSED_CREDENTIALS):
            return AuthenticationError(f"{url.redacted}: nats-server refused the credentials "
                                       "(Authorization Violation): check user/password, token or nkey")
    for found in (exc, *seen):
        if isinstance(found, ConnectionRefusedError):
            return BrokerUnreachableError(f"cannot connect to {url.redacted}: connection refused")
    return ConnectionLostError(f"cannot connect to {url.redacted} ({describe(exc)})")


class Link:
    """The live nats-py client (``client``), the generation it serves, and the
    reconnect loop. *on_up(client, generation)* re-creates what a generation
    needs (inboxes, pull requests); *on_lost(generation, reason)* reports the
    loss. Both run on the loop."""

    def __init__(self, url: BrokerURL, settings: NatsSettings,
                 on_up: Callable[[Client, int], Awaitable[None]],
                 on_lost: Callable[[int, str], None]) -> None:
        self.url = url
        self.settings = settings
        self.client: Client | None = None
        self.generation = 0
        self.name = f"ackbridge-{uuid.uuid4().hex[:12]}"
        self._on_up = on_up
        self._on_lost = on_lost
        self._closing = False
        self._sever_reason: str | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        #: Set while a client is up (created on the loop by open()).
        self.up: asyncio.Event | None = None

    @property
    def live(self) -> bool:
        client = self.client
        return client is not None and client.is_connected

    async def _connect_once(self) -> Client:
        s = self.settings
        heartbeat = s.connection.heartbeat
        client = Client()
        holder: list[Client] = [client]

        async def closed() -> None:
            self._closed(holder[0])

        seen: list[BaseException] = []

        async def error(exc: Exception) -> None:
            seen.append(exc)
            log.debug("%s: nats-py reported %s", self.url.redacted, describe(exc))

        options: dict[str, Any] = dict(
            # The first connect: nats-py 2.x's server selection retries a refused connect every
            # reconnect_time_wait (2 s) with max_reconnect_attempts=0 meaning "no limit" there,
            # whatever allow_reconnect says, so a wrong port used to wait out connect_timeout.
            # One retry at once, then NoServersError: nothing listening fails at once, as on the
            # other plugins (docs/broker-quirks.md).
            servers=[s.servers], name=self.name, allow_reconnect=False, max_reconnect_attempts=1,
            reconnect_time_wait=0,
            connect_timeout=s.connection.connect_timeout, closed_cb=closed, error_cb=error,
            ping_interval=heartbeat if heartbeat > 0 else _NO_PING, max_outstanding_pings=2,
            user=s.user, password=s.password, token=s.token)
        if s.tls is not None:
            options.update(tls=s.tls, tls_hostname=s.tls_hostname)
        try:
            await asyncio.wait_for(client.connect(**options), s.connection.connect_timeout + 1)
        except BaseException as exc:
            # A refused CONNECT (credentials) leaves nats-py's socket and stream writer open:
            # close the half-made client, or the garbage collector does it with a ResourceWarning.
            with contextlib.suppress(Exception):
                await client.close()
            if isinstance(exc, AckbridgeError) or not isinstance(exc, Exception):
                raise
            tls_error = describe_tls_error(exc, self.url)
            if tls_error is not None:
                raise tls_error from None
            raise connect_error(exc, self.url, seen) from None
        return client

    async def open(self) -> None:
        """The first connect: errors go to the caller."""
        client = await self._connect_once()
        self.generation = 1
        self.client = client
        self._watch(client)
        self.up = asyncio.Event()
        await self._on_up(client, self.generation)
        self.up.set()

    async def close(self) -> None:
        self._closing = True
        for task in (self._reconnect_task, self._watch_task):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
        client, self.client = self.client, None
        if client is not None and not client.is_closed:
            try:
                await client.close()
            except Exception as exc:  # already broken: nothing left to close
                log.debug("%s: close: %s", self.url.redacted, describe(exc))

    def sever(self, reason: str) -> None:
        """Close the client as a fault would: the generation ends and the loop reconnects. On the loop."""
        client = self.client
        if client is None or client.is_closed:
            return
        self._sever_reason = reason
        asyncio.get_running_loop().create_task(client.close())

    def _closed(self, client: Client) -> None:
        if client is not self.client or self._closing:
            return
        reason = self._sever_reason or describe(client.last_error) or "connection closed by the server"
        self._sever_reason = None
        self.client = None
        if self.up is not None:
            self.up.clear()
        old = self.generation
        self.generation += 1  # settlements of the old generation are stale from here on
        log.warning("ackbridge-nats: %s: connection lost (%s)", self.url.redacted, reason)
        self._on_lost(old, f"connection lost ({reason})")
        if self.settings.connection.reconnect:
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    def _watch(self, client: Client) -> None:
        self._watch_task = asyncio.get_running_loop().create_task(self._watch_closed(client))

    async def _watch_closed(self, client: Client) -> None:
        """Report *client*'s close if nats-py does not.

        nats-py 2.x (2.15 here) flushes what is buffered while it closes a client after a
        loss, and on a reset socket that flush raises inside ``Client._close`` before the
        closed callback runs: the client reads closed and nothing says so. A broker killed
        while publishes were buffered left the link on that dead client for good, every
        publish pending until the window was full (docs/broker-quirks.md). So the live
        client is looked at every CLOSED_WATCH_S; ``_closed`` runs once per client,
        whichever of the two sees the close first."""
        while client is self.client and not self._closing:
            if client.is_closed:
                self._closed(client)
                return
            await asyncio.sleep(CLOSED_WATCH_S)  # a poll: nats-py offers nothing to wait on

    async def _reconnect(self) -> None:
        backoff = Backoff(self.settings.connection.reconnect_max_delay)
        while not self._closing:
            await asyncio.sleep(backoff.next_delay())  # back-off between attempts, not a wait for state
            try:
                client = await self._connect_once()
            except Exception as exc:
                log.info("ackbridge-nats: reconnect to %s failed: %s", self.url.redacted, describe(exc))
                continue
            if self._closing:
                await client.close()
                return
            self.client = client
            self._watch(client)
            try:
                await self._on_up(client, self.generation)
            except Exception as exc:
                log.warning("ackbridge-nats: re-creating subscriptions failed: %s", describe(exc))
            if self.up is not None:
                self.up.set()
            log.info("ackbridge-nats: %s: reconnected (generation %d)", self.url.redacted, self.generation)
            return

    async def wait_reconnected(self, timeout: float) -> None:
        """Wait (at most *timeout*) for a reconnect under way to finish."""
        task = self._reconnect_task
        if self.up is None or self.live or task is None or task.done():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.up.wait(), timeout)

    def require(self, doing: str) -> Client:
        client = self.client
        if client is None or not client.is_connected:
            raise ConnectionLostError(f"{doing}: not connected to {self.url.redacted}")
        return client


def seconds_ns(seconds: float) -> int:
    return math.ceil(seconds * 1e9)
