"""The transport: pika's SelectConnection driven by one I/O thread.

This module holds the connection's life (open, loss, reconnect with the core's
back-off, close) and its generations; the parts have their own modules: the
I/O thread (``io_thread.py``), publishing and confirms (``sending.py``),
subscriptions, settlements and the reply inbox (``receiving.py``), queue
declaration and inspection (``topology.py``). The parts get a :class:`Link`,
the few live things they need, not the transport. An earlier design routed
core events through a dispatcher thread; the extra hop per message cost a
thread wake-up per message and its GIL hand-offs.

Generations: one counter for the whole connection. It rises when the
connection is lost and when a subscription channel is closed by the broker
(then every subscription channel is reopened, see receiving.py).

The connection class is ``DecodingConnection`` (pika internals: coalesced
writes, a short path for deliveries) when ``fastpath.enabled()`` says so when
the transport opens, and plain ``pika.SelectConnection`` otherwise.
"""

from __future__ import annotations

import concurrent.futures
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pika

from ackbridge.capabilities import DeadLetterTarget
from ackbridge.errors import ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq import fastpath, queues
from ackbridge_rabbitmq.capabilities import CLASSIC, capabilities_for
from ackbridge_rabbitmq.errors import connect_error, describe
from ackbridge_rabbitmq.io_thread import Fut, IOThread, emit, emit_confirms
from ackbridge_rabbitmq.options import OPTIONS, RabbitSettings, endpoint
from ackbridge_rabbitmq.receiving import ReplyInbox, Subscriptions
from ackbridge_rabbitmq.sending import Publishing
from ackbridge_rabbitmq.topology import QueueAdmin
from ackbridge_rabbitmq.unfinished import close_unfinished

log = logging.getLogger("ackbridge.rabbitmq")


def connection_name() -> str:
    """A unique name the broker shows (rabbitmqctl list_connections client_properties);
    lets tests find one connection."""
    return f"ackbridge-{uuid.uuid4().hex[:16]}"


class Link:
    """What the transport's parts share: the I/O thread, the core's events, and
    the current pika connection with its state and generation. The transport
    writes the connection, state and generation (on the I/O thread); the parts
    read them and hand work to the I/O thread through :meth:`submit`."""

    __slots__ = ("conn", "events", "fast_path", "generation", "io", "state", "wait", "where")

    def __init__(self, io: IOThread, events: TransportEvents, where: str, wait: float) -> None:
        self.io = io
        self.events = events
        self.where = where  # the redacted URL, for messages
        self.wait = wait  # how long submit() waits unless told
        #: The pika connection of the current generation (None while there is none).
        self.conn: pika.SelectConnection | None = None
        self.state = "new"  # new | open | reconnecting | lost | closing | closed
        self.generation = 0
        #: Whether this connection uses the fast path (pika internals); fixed when it opens.
        self.fast_path = False

    @property
    def frame_max(self) -> int:
        """The negotiated frame_max (pika writes the tuned value into its parameters)."""
        conn = self.conn
        return int(conn.params.frame_max) if conn is not None else 0

    def next_generation(self) -> int:
        """End the current generation (settle checks fail at once); return the ended one."""
        old = self.generation
        self.generation += 1
        return old

    def submit(self, fn: Callable[[Fut[Any]], None], doing: str, timeout: float | None = None) -> Any:
        """Run *fn(fut)* on the I/O thread and wait for it to resolve *fut*."""
        if not self.io.running or self.state in ("closed", "new"):
            raise ConnectionLostError(f"{doing}: {self.where} is not open")
        return self.io.submit(fn, doing, timeout if timeout is not None else self.wait)

    def require_conn(self, doing: str) -> pika.SelectConnection:
        if self.conn is None or not self.conn.is_open:
            raise ConnectionLostError(f"{doing}: not connected to {self.where}")
        return self.conn


class RabbitSyncTransport(SyncTransport):
    capabilities = CLASSIC
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.rabbit = RabbitSettings.from_options(options)
        # Per instance: delivery counts exist only for quorum queues.
        self.capabilities = capabilities_for(self.rabbit.quorum)
        self.connection_name = connection_name()
        self.io = IOThread(url.redacted)
        self.link = Link(self.io, events, url.redacted, self.settings.connect_timeout + 20)
        self._backoff = Backoff(self.settings.reconnect_max_delay)
        self._publishing = Publishing(self.link, f"ab-{uuid.uuid4().hex[:12]}-")
        self._subscriptions = Subscriptions(self.link, quorum=self.rabbit.quorum)
        self._inbox = ReplyInbox(self.link)
        self._queues = QueueAdmin(self.link, self.rabbit)
        self._closing_fut: Fut[None] | None = None

    # ---- what tests and the fault seam read --------------------------------------------
    @property
    def generation(self) -> int:
        return self.link.generation

    @property
    def conn(self) -> pika.SelectConnection | None:
        """The pika connection of the current generation (None while there is none)."""
        return self.link.conn

    @property
    def state(self) -> str:
        return self.link.state

    @property
    def fast_path(self) -> bool:
        """Whether this transport uses the fast path (pika internals); fixed when it opens."""
        return self.link.fast_path

    @property
    def frame_max(self) -> int:
        return self.link.frame_max

    # ---- lifecycle ---------------------------------------------------------------------
    def open(self) -> None:
        link = self.link
        if link.state != "new":
            return
        link.fast_path = fastpath.enabled()
        self.io.start()
        link.state = "reconnecting"  # i.e. connecting: submit accepts work
        try:
            link.submit(self._connect, f"connect to {self.url.redacted}", timeout=self.settings.connect_timeout + 5)
        except Exception:
            link.state = "lost"
            self._shutdown_thread()
            link.state = "closed"
            raise

    def _parameters(self) -> pika.ConnectionParameters:
        ep = endpoint(self.url, self.settings)
        ssl_options = pika.SSLOptions(ep.tls, ep.host) if ep.tls is not None else None
        timeout = self.settings.connect_timeout
        return pika.ConnectionParameters(
            host=ep.host, port=ep.port, virtual_host=ep.vhost,
            credentials=pika.PlainCredentials(ep.username, ep.password),
            heartbeat=round(self.settings.heartbeat),
            ssl_options=ssl_options, connection_attempts=1, socket_timeout=timeout, stack_timeout=timeout,
            client_properties={"connection_name": self.connection_name, "product": "ackbridge"},
        )

    def _connection_class(self) -> type[pika.SelectConnection]:
        if self.link.fast_path:
            from ackbridge_rabbitmq.deliveries import DecodingConnection

            return DecodingConnection
        return pika.SelectConnection  # type: ignore[no-any-return]  # pika ships no types: its classes are Any

    def _connect(self, fut: Fut[None]) -> None:
        link = self.link

        def opened(conn: pika.SelectConnection) -> None:
            self._backoff.reset()
            link.state = "open"
            link.generation += 1
            self._publishing.open_channel(fut)
            self._subscriptions.reopen_all()
            self._inbox.reopen()

        def failed(conn: pika.SelectConnection, exc: BaseException) -> None:
            link.conn = None
            if not fut.done():
                fut.set_exception(connect_error(exc, self.url))

        link.conn = self._connection_class()(
            self._parameters(), on_open_callback=opened, on_open_error_callback=failed,
            on_close_callback=self._on_conn_closed, custom_ioloop=self.io.loop)

    def _on_conn_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        link = self.link
        if conn is not link.conn:
            return
        link.conn = None
        why = f"connection lost ({describe(reason)})"
        lost = self._publishing.connection_lost(why)
        self._subscriptions.connection_lost()
        if link.state == "closing":
            emit_confirms(self.events, lost)
            if self._closing_fut is not None and not self._closing_fut.done():
                self._closing_fut.set_result(None)
            return
        old = link.next_generation()
        emit_confirms(self.events, lost)
        emit(lambda: self.events.generation_ended(old, why))
        log.warning("ackbridge-rabbitmq: %s: %s", self.url.redacted, why)
        if self.settings.reconnect:
            link.state = "reconnecting"
            self._schedule_reconnect()
        else:
            link.state = "lost"

    def _schedule_reconnect(self) -> None:
        def attempt() -> None:
            if self.link.state != "reconnecting":
                return
            fut: Fut[None] = Fut()

            def done(f: Fut[None]) -> None:
                if f.exception() is not None and self.link.state == "reconnecting":
                    self._schedule_reconnect()

            fut.add_done_callback(done)
            try:
                self._connect(fut)
            except Exception as exc:
                fut.set_exception(exc)

        self.io.call_later(self._backoff.next_delay(), attempt)

    def close(self) -> None:
        link = self.link
        if link.state in ("new", "closed", "closing"):
            return
        previous, link.state = link.state, "closing"
        if previous == "open" and self.io.running:
            fut: Fut[None] = Fut()
            self._closing_fut = fut

            def shut() -> None:
                conn = link.conn
                if conn is None or conn.is_closed:
                    fut.set_result(None)
                elif not conn.is_closing:
                    conn.close()

            self.io.call_soon(shut)
            try:
                fut.result(10)
            except concurrent.futures.TimeoutError:
                log.warning("ackbridge-rabbitmq: close of %s timed out", self.url.redacted)
        self._shutdown_thread()
        link.state = "closed"

    def _shutdown_thread(self) -> None:
        link = self.link

        unfinished: list[Any] = []

        def drop_unfinished() -> None:
            if link.conn is not None and not link.conn.is_closed:
                unfinished.append(link.conn)  # an unfinished reconnect, or a close that timed out
                link.conn = None

        self.io.stop(drop_unfinished)
        for conn in unfinished:
            if close_unfinished(conn):
                log.debug("ackbridge-rabbitmq: closed the socket of an unfinished connection to %s",
                          self.url.redacted)

    # ---- queues (topology.py) --------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._queues.declare(name, dead_letter=dead_letter)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._queues.delete(name, dead_letter=dead_letter)

    def purge_queue(self, name: str) -> int | None:
        return self._queues.purge(name)

    def inspect_queue(self, name: str) -> QueueInfo:
        return self._queues.inspect(name)

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        return self._queues.dead_letter_target(source)

    # ---- consuming and settling (receiving.py) ----------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        # pika raises on a >255-byte name inside its I/O loop, which would end the
        # connection (and every reconnect would re-subscribe it).
        queues.check_queue_name(source)
        # pika fails to encode a larger prefetch_count inside its I/O loop, ending the
        # connection. The core makes the same check on consume; kept until it does.
        self.capabilities.check_prefetch(prefetch)
        self._subscriptions.subscribe(subscription, source, prefetch)

    def unsubscribe(self, subscription: str) -> None:
        if self.link.state in ("open", "reconnecting"):
            self._subscriptions.unsubscribe(subscription)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        self._subscriptions.settle(ops)

    def open_reply_inbox(self) -> str:
        return self._inbox.open()

    # ---- publishing (sending.py) ------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self._publishing.publish(seq, destination, message)

    # ---- the declared fault seam (TransportBase) --------------------------------------------------
    def sever(self, reason: str) -> None:
        """End the connection from the client side (pika's public close): the core
        sees a loss, as on a network fault, and the transport reconnects."""
        link = self.link

        def cut() -> None:
            conn = link.conn
            if conn is not None and conn.is_open:
                conn.close(320, f"ackbridge fault seam: {reason}")

        self.io.call_soon(cut)

    def hold_publishes(self, hold: bool) -> None:
        self._publishing.hold(hold)
