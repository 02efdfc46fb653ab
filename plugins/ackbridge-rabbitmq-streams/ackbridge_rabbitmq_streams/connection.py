"""The connection: rstream clients, the transport's generations, lifecycle and topology.

One stream connection per transport, its generation, and the reconnect loop;
the consumers live in :mod:`ackbridge_rabbitmq_streams.receiving`, the
publishers in :mod:`ackbridge_rabbitmq_streams.sending`. rstream's own
recovery is not used: on a loss this transport ends the generation (pending
confirms unknown), opens a new connection with the core's
:class:`~ackbridge.kernel.backoff.Backoff` between attempts, and subscribes
each consumer again after its stored offset.

The plugin talks to rstream's client layer (``rstream.client.Client`` and the
``rstream.schema`` frames, public modules) rather than its ``Producer`` and
``Consumer``: those recover on their own, pick subscription ids and grant
credit before a chunk is processed, where ackbridge needs each of those under
its own control (generations, prefetch, exact offset ranges).

The blocking face, :class:`StreamSyncTransport`, is :class:`StreamAsyncTransport`
on an event loop of its own thread (rstream is asyncio-only); the hand-off lives
in :mod:`ackbridge.transport.loop_thread`. ``unsubscribe`` is queued behind
earlier acks there, so their offset is stored before the consumer ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rstream import exceptions as rx
from rstream.client import Client
from rstream.utils import OnClosedErrorInfo

from ackbridge.errors import AckbridgeError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import OutboundMessage, WireSettle
from ackbridge.transport import AsyncTransport, TransportEvents
from ackbridge.transport.held_work import HeldWork
from ackbridge.transport.loop_thread import LoopThreadTransport, call_on_loop
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq_streams import fastpath
from ackbridge_rabbitmq_streams.capabilities import CAPABILITIES
from ackbridge_rabbitmq_streams.chunks import SubscriptionIds
from ackbridge_rabbitmq_streams.errors import describe, stream_error
from ackbridge_rabbitmq_streams.log_filter import hide_credentials_in_frame_logs
from ackbridge_rabbitmq_streams.naming import check_name
from ackbridge_rabbitmq_streams.options import OPTIONS, Endpoint, StreamSettings
from ackbridge_rabbitmq_streams.receiving import StreamConsumers
from ackbridge_rabbitmq_streams.sending import StreamPublishers, prepare

log = logging.getLogger("ackbridge.rabbitmq_streams")
hide_credentials_in_frame_logs()

#: rstream's own default; a chunk is delivered whole whatever this says.
FRAME_MAX = 1024 * 1024
#: Marks a client so rstream calls its closed handler (it only does so for
#: clients that serve at least one stream).
WATCHED = "ackbridge"


async def open_client(endpoint: Endpoint, name: str,
                      on_closed: Callable[[str], Awaitable[None] | None] | None = None) -> Client:
    """A started, authenticated client; *on_closed(reason)* runs on the loop when
    the connection ends without :func:`close_client`."""

    async def closed(info: OnClosedErrorInfo) -> None:
        if on_closed is not None:
            result = on_closed(info.reason)
            if result is not None:
                await result

    timeout = endpoint.connection.connect_timeout
    heartbeat = endpoint.connection.heartbeat
    client = Client(endpoint.host, endpoint.port, ssl_context=endpoint.tls, frame_max=FRAME_MAX,
                    heartbeat=0 if heartbeat == 0 else max(1, math.ceil(heartbeat)), connection_name=name,
                    connection_closed_handler=closed)
    try:
        await asyncio.wait_for(client.start(), timeout)
        await asyncio.wait_for(
            client.authenticate(endpoint.vhost, endpoint.username, endpoint.password.reveal()), timeout)
    except (Exception, asyncio.CancelledError) as exc:
        await close_client(client)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise stream_error(exc, "connect", endpoint.url) from None
    client.add_stream(WATCHED)
    return client


async def close_client(client: Client) -> None:
    """Close *client* without waiting long for a broker that is gone; never raises."""
    if client.is_connection_alive():
        await client.remove_stream(WATCHED)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), 6)
    # rstream 1.1.1's close() leaves the socket open when it finds the connection already
    # broken (the broker hung up: refused credentials, a cut): close it here, or the
    # socket and its stream writer live on until the garbage collector (docs/broker-quirks.md).
    conn = getattr(client, "_conn", None)
    if conn is not None:
        client._conn = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), 6)


class StreamAsyncTransport(AsyncTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.endpoint = Endpoint.resolve(url, self.settings)
        self.stream_settings = StreamSettings.resolve(options)
        self.client: Client | None = None
        self.ids = SubscriptionIds()
        #: Hand-written AMQP 1.0 sections and rstream's Producer's frame sending (fastpath.py),
        #: decided when the transport is created.
        self.fast_path = fastpath.enabled()
        self.consumers = StreamConsumers(url, self.stream_settings, events.deliver, fast=self.fast_path)
        self.publishes = StreamPublishers(events.confirm, events.confirm_batch, self.stream_settings.publisher_name,
                                          FRAME_MAX, self.spawn, fast=self.fast_path)
        self._generation = 0
        #: The generation whose connection was opened last.
        self._connected = 0
        self._closing = False
        self._reconnecting: asyncio.Task[None] | None = None
        self.held = HeldWork(events, lambda: self._generation)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.name = f"ackbridge-{uuid.uuid4().hex[:12]}"
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def generation(self) -> int:
        return self._generation

    def __repr__(self) -> str:
        return f"<StreamAsyncTransport {self.url.redacted} generation={self._generation}>"

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- generations ------------------------------------------------------------------------
    async def _connect(self) -> None:
        # A loss moves the generation on at once (settlements of the old one are stale from
        # then on, whether or not a new connection opens); a connection takes the number.
        if self._generation == self._connected:
            self._generation += 1
        generation = self._generation

        def closed(reason: str) -> None:
            self._lost(generation, f"connection closed ({reason})")

        client = await open_client(self.endpoint, self.name, closed)
        self.client, self._connected, self.ids = client, generation, SubscriptionIds()
        self.publishes.start(client)
        await self.consumers.start_all(client, self.ids, generation)

    def _lost(self, generation: int, reason: str) -> None:
        """End *generation* (once): confirms unknown, consumers forgotten, reconnect if allowed."""
        if generation != self._generation or self.client is None:
            return
        client, self.client = self.client, None
        self.held.lost(reason)
        self.consumers.lost()
        self.publishes.lost(reason)
        self._generation = generation + 1
        self.events.generation_ended(generation, reason)
        self.spawn(close_client(client))
        if not self._closing and self.settings.reconnect and self._reconnecting is None:
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        backoff = Backoff(self.settings.reconnect_max_delay)
        try:
            while not self._closing:
                await asyncio.sleep(backoff.next_delay())
                try:
                    await self._connect()
                    return
                except AckbridgeError as exc:
                    log.info("ackbridge-rabbitmq-streams: reconnect to %s failed: %s", self.url.redacted, exc)
                    if self.client is not None:
                        self._lost(self._generation, f"re-subscribe failed: {describe(exc)}")
                        return
                except Exception as exc:
                    log.info("ackbridge-rabbitmq-streams: reconnect to %s failed: %s", self.url.redacted,
                             describe(exc))
                    if self.client is not None:
                        self._lost(self._generation, f"re-subscribe failed: {describe(exc)}")
                        return
        finally:
            self._reconnecting = None

    def _live(self, doing: str) -> Client:
        if self.client is None or not self.client.is_connection_alive():
            raise ConnectionLostError(f"{doing}: the connection to {self.url.redacted} is down")
        return self.client

    # ---- lifecycle --------------------------------------------------------------------------------
    async def open_async(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._connect()

    async def close_async(self) -> None:
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reconnecting
        await self.consumers.stop_all()
        client, self.client = self.client, None
        if client is not None:
            if self.publishes.pending:
                # The core waited for its confirms already; what is left is unknown.
                self.publishes.lost("the connection was closed")
            await self.publishes.close(client)
            await close_client(client)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ---- topology ---------------------------------------------------------------------------------
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        check_name(name, "stream name")
        client = self._live(f"declare stream {name!r}")
        try:
            await client.create_stream(name)
        except rx.StreamAlreadyExists:
            pass
        except Exception as exc:
            raise stream_error(exc, f"declare stream {name!r}", self.url) from None

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        check_name(name, "stream name")
        client = self._live(f"delete stream {name!r}")
        try:
            await client.delete_stream(name)
        except rx.StreamDoesNotExist:
            pass
        except Exception as exc:
            raise stream_error(exc, f"delete stream {name!r}", self.url) from None

    # ---- consuming (receiving.py) -------------------------------------------------------------------
    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        client = self._live(f"consume {source!r}")
        await self.consumers.subscribe(client, self.ids, self._generation, subscription, source, prefetch=prefetch)

    async def unsubscribe_async(self, subscription: str) -> None:
        await self.consumers.unsubscribe(subscription)

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        self.settle_nowait(ops)

    #: Settling records offsets for the next StoreOffset (receiving.py): it never waits.
    settles_without_waiting = True

    def settle_nowait(self, ops: Sequence[WireSettle]) -> None:
        if self.client is None:
            check_ops(ops, None, "the connection is down")
        check_ops(ops, self._generation)
        if not self.held.keep_settle(ops):
            self.consumers.settle(ops)

    # ---- publishing (sending.py) --------------------------------------------------------------------
    def prepare(self, destination: str, message: OutboundMessage) -> tuple[str, bytes, str | None]:
        """The arguments of :meth:`send_prepared` after ``seq`` (checked on the caller's thread)."""
        return prepare(destination, message, fast=self.fast_path)

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        # Not an await of send_prepared: a coroutine less per publish.
        self._send(seq, *prepare(destination, message, fast=self.fast_path))

    async def send_prepared(self, seq: int, destination: str, data: bytes, message_id: str | None = None) -> None:
        self._send(seq, destination, data, message_id)

    def _send(self, seq: int, destination: str, data: bytes, message_id: str | None) -> None:
        """Queue the publish for the sender task (held instead while the fault seam holds)."""
        if self.held.keep_publish(seq, destination, data, message_id):
            return
        if self.client is None:
            raise ConnectionLostError(f"publish: the connection to {self.url.redacted} is down")
        self.publishes.send(seq, destination, data, message_id)

    # ---- fault seam -----------------------------------------------------------------------------------
    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call *fn* on the transport's loop (at once when already there)."""
        call_on_loop(self.loop, fn, *args)

    def sever(self, reason: str) -> None:
        self.on_loop(lambda: self._lost(self._generation, reason))

    def hold_publishes(self, hold: bool) -> None:
        self.on_loop(self._hold_publishes, hold)

    def hold_writes(self, hold: bool) -> None:
        self.on_loop(self._hold_writes, hold)

    def _hold_publishes(self, hold: bool) -> None:
        for seq, prepared in self.held.hold_publishes(hold):
            self.spawn(self.send_prepared(seq, *prepared))

    def _hold_writes(self, hold: bool) -> None:
        self._hold_publishes(hold)
        live = self.held.hold_writes(hold)
        if live:
            self.consumers.settle(live)


class StreamSyncTransport(LoopThreadTransport):
    """The blocking face: :class:`StreamAsyncTransport` on a loop of its own I/O thread."""

    capabilities = CAPABILITIES
    option_specs = OPTIONS
    inner_type = StreamAsyncTransport

    @property
    def fast_path(self) -> bool:
        """Whether the transport writes and reads the common records by hand (fastpath.py)."""
        return bool(self.inner.fast_path)
