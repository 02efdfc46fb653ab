"""The sync transport: pika's SelectConnection driven by one I/O thread.

This module holds the connection's life (open, loss, reconnect with the core's
back-off, close), queue declaration and the reply inbox; its parts have their
own modules: the I/O thread (``sync_io.py``), publishing and confirms
(``sync_publishing.py``), subscriptions and settlements (``sync_consuming.py``).
An earlier design routed core events through a dispatcher thread; the extra
hop per message cost a thread wake-up per message and its GIL hand-offs.

Generations: one counter for the whole connection. It rises when the
connection is lost and when a subscription channel is closed by the broker
(then every subscription channel is reopened, see sync_consuming.py).

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
from pika.channel import Channel

from ackbridge.capabilities import CANNOT_TELL, DeadLetter, DeadLetterTarget
from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError
from ackbridge.kernel.backoff import Backoff
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_rabbitmq import common, fastpath
from ackbridge_rabbitmq.errors import channel_error, connect_error, describe
from ackbridge_rabbitmq.sync_consuming import Subscriptions
from ackbridge_rabbitmq.sync_io import Fut, IOThread, emit, emit_confirms
from ackbridge_rabbitmq.sync_publishing import Publishing

log = logging.getLogger("ackbridge.rabbitmq")

_Step = Callable[[Channel, Callable[[Any], None]], None]


class RabbitSyncTransport(SyncTransport):
    capabilities = common.CLASSIC
    option_specs = common.OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        # Per instance: delivery counts exist only for quorum queues.
        self.capabilities = common.capabilities_for(options)
        self.connection_name = common.connection_name()
        self.io = IOThread(url.redacted)
        #: The pika connection of the current generation (None while there is none).
        self.conn: pika.SelectConnection | None = None
        self.state = "new"  # new | open | reconnecting | lost | closing | closed
        #: Whether this transport uses the fast path (pika internals); fixed when it opens.
        self.fast_path = False
        self._gen = 0
        self._backoff = Backoff(self.settings.reconnect_max_delay)
        self._publishing = Publishing(self, f"ab-{uuid.uuid4().hex[:12]}-")
        self._subscriptions = Subscriptions(self)
        self._inbox_name: str | None = None
        self._closing_fut: Fut[None] | None = None
        #: Queues this connection declared, and whether with the dead-letter companion.
        self._declared: dict[str, bool] = {}

    @property
    def generation(self) -> int:
        return self._gen

    @property
    def frame_max(self) -> int:
        """The negotiated frame_max (pika writes the tuned value into its parameters)."""
        conn = self.conn
        return int(conn.params.frame_max) if conn is not None else 0

    def next_generation(self) -> int:
        """End the current generation (settle checks fail at once); return the ended one."""
        old = self._gen
        self._gen += 1
        return old

    # ---- plumbing for the parts -------------------------------------------------------
    def submit(self, fn: Callable[[Fut[Any]], None], doing: str, timeout: float | None = None) -> Any:
        """Run *fn(fut)* on the I/O thread and wait for it to resolve *fut*."""
        if not self.io.running or self.state in ("closed", "new"):
            raise ConnectionLostError(f"{doing}: {self.url.redacted} is not open")
        return self.io.submit(fn, doing, timeout if timeout is not None else self.settings.connect_timeout + 20)

    def require_conn(self, doing: str) -> pika.SelectConnection:
        if self.conn is None or not self.conn.is_open:
            raise ConnectionLostError(f"{doing}: not connected to {self.url.redacted}")
        return self.conn

    # ---- lifecycle ---------------------------------------------------------------------
    def open(self) -> None:
        if self.state != "new":
            return
        self.fast_path = fastpath.enabled()
        self.io.start()
        self.state = "reconnecting"  # i.e. connecting: submit accepts work
        try:
            self.submit(self._connect, f"connect to {self.url.redacted}", timeout=self.settings.connect_timeout + 5)
        except Exception:
            self.state = "lost"
            self._shutdown_thread()
            self.state = "closed"
            raise

    def _parameters(self) -> pika.ConnectionParameters:
        ep = common.endpoint(self.url, self.options)
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
        if self.fast_path:
            from ackbridge_rabbitmq.deliveries import DecodingConnection

            return DecodingConnection
        return pika.SelectConnection  # type: ignore[no-any-return]  # pika ships no types: its classes are Any

    def _connect(self, fut: Fut[None]) -> None:
        def opened(conn: pika.SelectConnection) -> None:
            self._backoff.reset()
            self.state = "open"
            self._gen += 1
            self._publishing.open_channel(fut)
            self._subscriptions.reopen_all()
            if self._inbox_name is not None:
                self._open_inbox(self._inbox_name, None)

        def failed(conn: pika.SelectConnection, exc: BaseException) -> None:
            self.conn = None
            if not fut.done():
                fut.set_exception(connect_error(exc, self.url))

        self.conn = self._connection_class()(
            self._parameters(), on_open_callback=opened, on_open_error_callback=failed,
            on_close_callback=self._on_conn_closed, custom_ioloop=self.io.loop)

    def _on_conn_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        why = f"connection lost ({describe(reason)})"
        lost = self._publishing.connection_lost(why)
        self._subscriptions.connection_lost()
        if self.state == "closing":
            emit_confirms(self.events, lost)
            if self._closing_fut is not None and not self._closing_fut.done():
                self._closing_fut.set_result(None)
            return
        old = self.next_generation()
        emit_confirms(self.events, lost)
        emit(lambda: self.events.generation_ended(old, why))
        log.warning("ackbridge-rabbitmq: %s: %s", self.url.redacted, why)
        if self.settings.reconnect:
            self.state = "reconnecting"
            self._schedule_reconnect()
        else:
            self.state = "lost"

    def _schedule_reconnect(self) -> None:
        def attempt() -> None:
            if self.state != "reconnecting":
                return
            fut: Fut[None] = Fut()

            def done(f: Fut[None]) -> None:
                if f.exception() is not None and self.state == "reconnecting":
                    self._schedule_reconnect()

            fut.add_done_callback(done)
            try:
                self._connect(fut)
            except Exception as exc:
                fut.set_exception(exc)

        self.io.call_later(self._backoff.next_delay(), attempt)

    def close(self) -> None:
        if self.state in ("new", "closed", "closing"):
            return
        previous, self.state = self.state, "closing"
        if previous == "open" and self.io.running:
            fut: Fut[None] = Fut()
            self._closing_fut = fut

            def shut() -> None:
                if self.conn is None or self.conn.is_closed:
                    fut.set_result(None)
                elif not self.conn.is_closing:
                    self.conn.close()

            self.io.call_soon(shut)
            try:
                fut.result(10)
            except concurrent.futures.TimeoutError:
                log.warning("ackbridge-rabbitmq: close of %s timed out", self.url.redacted)
        self._shutdown_thread()
        self.state = "closed"

    def _shutdown_thread(self) -> None:
        def drop_unfinished() -> None:
            if self.conn is not None and not self.conn.is_closed:
                self.conn = None  # an unfinished reconnect: its socket goes with the loop

        self.io.stop(drop_unfinished)

    # ---- queues ------------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self.submit(lambda fut: self._declare(fut, name, dead_letter), f"declare queue {name!r}")
        self._declared[name] = dead_letter

    def _declare(self, fut: Fut[None], name: str, dead_letter: bool) -> None:
        steps: list[_Step] = []
        if dead_letter:
            dlx, dlq = common.dead_letter_names(name)
            dlq_args = common.dead_letter_queue_arguments(self.options)
            steps += [
                lambda ch, nxt: ch.exchange_declare(dlx, "fanout", durable=True, callback=nxt),
                lambda ch, nxt: ch.queue_declare(dlq, durable=True, arguments=dlq_args, callback=nxt),
                lambda ch, nxt: ch.queue_bind(dlq, dlx, routing_key="", callback=nxt),
            ]
        args = common.queue_arguments(name, self.options, dead_letter=dead_letter)
        steps.append(lambda ch, nxt: ch.queue_declare(name, durable=True, arguments=args, callback=nxt))
        self._with_channel(fut, f"declare queue {name!r}", steps)

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        common.check_queue_name(name)
        steps: list[_Step] = [lambda ch, nxt: ch.queue_delete(name, callback=nxt)]
        if dead_letter:
            dlx, dlq = common.dead_letter_names(name)
            steps += [lambda ch, nxt: ch.queue_delete(dlq, callback=nxt),
                      lambda ch, nxt: ch.exchange_delete(dlx, callback=nxt)]
        doing = f"delete queue {name!r}"
        self._declared.pop(name, None)
        self.submit(lambda fut: self._with_channel(fut, doing, steps), doing)

    def purge_queue(self, name: str) -> int | None:
        common.check_queue_name(name)
        found: dict[str, int] = {}

        def purge(ch: Channel, nxt: Callable[[Any], None]) -> None:
            def done(frame: Any) -> None:
                found["count"] = frame.method.message_count
                nxt(frame)

            ch.queue_purge(name, callback=done)

        doing = f"purge queue {name!r}"
        self.submit(lambda fut: self._with_channel(fut, doing, [purge]), doing)
        return found.get("count")

    def inspect_queue(self, name: str) -> QueueInfo:
        messages, consumers = self._passive_declare(name)
        dlq: str | None = common.dead_letter_names(name)[1]
        try:
            dead: int | None = self._passive_declare(dlq)[0] if dlq is not None else None
        except BrokerError:
            dlq, dead = None, None  # no dead-letter companion (declared with dead_letter=False, or elsewhere)
        return QueueInfo(name, messages=messages, unacked=None, consumers=consumers, dead_letter=dlq,
                         dead_lettered=dead)

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        """Where a message rejected from *source* goes. AMQP 0-9-1 cannot read a queue's
        arguments or policies, so this answers from what ackbridge made: the queue as this
        connection declared it, else whether its companion QUEUE.dlq exists (one passive
        declare of each, on one short-lived channel)."""
        if self.io.on_io():
            return CANNOT_TELL  # it would wait for this very thread
        common.check_queue_name(source)
        dlx, dlq = common.dead_letter_names(source)
        declared = self._declared.get(source)
        if declared is False:
            return DeadLetterTarget(DeadLetter.NONE, "this connection declared it with dead_letter=False; only a "
                                    "policy could give it a dead-letter exchange")
        if declared:
            return DeadLetterTarget(DeadLetter.KNOWN, f"{dlq!r} through exchange {dlx!r}")
        seen: list[str] = []

        def passive(name: str) -> _Step:
            def step(ch: Channel, nxt: Callable[[Any], None]) -> None:
                def done(frame: Any) -> None:
                    seen.append(name)
                    nxt(frame)

                ch.queue_declare(name, passive=True, callback=done)
            return step

        doing = f"look for the dead-letter companion of {source!r}"
        try:
            self.submit(lambda fut: self._with_channel(fut, doing, [passive(source), passive(dlq)]), doing)
        except BrokerError as exc:
            if exc.code == 404 and seen == [source]:
                return DeadLetterTarget(DeadLetter.NONE, f"it has no dead-letter companion {dlq!r}; a "
                                        "dead-letter exchange its declarer or a policy set, which AMQP 0-9-1 "
                                        "cannot read, would still apply")
            return CANNOT_TELL
        except AckbridgeError:
            return CANNOT_TELL
        return DeadLetterTarget(DeadLetter.KNOWN, f"{dlq!r} (the companion ackbridge declares)")

    def _passive_declare(self, name: str) -> tuple[int, int]:
        """(ready messages, consumers) of *name*; BrokerError (404) when it does not exist."""
        common.check_queue_name(name)
        found: dict[str, int] = {}

        def declare(ch: Channel, nxt: Callable[[Any], None]) -> None:
            def done(frame: Any) -> None:
                found.update(messages=frame.method.message_count, consumers=frame.method.consumer_count)
                nxt(frame)

            ch.queue_declare(name, passive=True, callback=done)

        doing = f"inspect queue {name!r}"
        self.submit(lambda fut: self._with_channel(fut, doing, [declare]), doing)
        return found["messages"], found["consumers"]

    def _with_channel(self, fut: Fut[Any], doing: str, steps: Sequence[_Step]) -> None:
        """Open a short-lived channel, run *steps* one after another, close it.
        A broker error closes the channel: it resolves *fut* with BrokerError."""
        conn = self.require_conn(doing)

        def on_close(ch: Channel, reason: BaseException) -> None:
            if not fut.done():
                fut.set_exception(channel_error(reason, doing))

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(on_close)
            pending = iter(steps)

            def next_step(_frame: Any = None) -> None:
                step = next(pending, None)
                if step is None:
                    if not fut.done():
                        fut.set_result(None)
                    if ch.is_open:
                        ch.close()
                    return
                try:
                    step(ch, next_step)
                except Exception as exc:
                    if not fut.done():
                        fut.set_exception(channel_error(exc, doing))

            next_step()

        conn.channel(on_open_callback=on_open)

    # ---- consuming and settling (sync_consuming.py) ----------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        # pika raises on a >255-byte name inside its I/O loop, which would end the
        # connection (and every reconnect would re-subscribe it).
        common.check_queue_name(source)
        # pika fails to encode a larger prefetch_count inside its I/O loop, ending the
        # connection. The core makes the same check on consume; kept until it does.
        self.capabilities.check_prefetch(prefetch)
        self._subscriptions.subscribe(subscription, source, prefetch)

    def unsubscribe(self, subscription: str) -> None:
        if self.state in ("open", "reconnecting"):
            self._subscriptions.unsubscribe(subscription)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        self._subscriptions.settle(ops)

    # ---- publishing (sync_publishing.py) ------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self._publishing.publish(seq, destination, message)

    # ---- fault seam (ackbridge.testing.faults) --------------------------------------------------
    def sever(self, reason: str) -> None:
        """End the connection from the client side (pika's public close): the core
        sees a loss, as on a network fault, and the transport reconnects."""

        def cut() -> None:
            conn = self.conn
            if conn is not None and conn.is_open:
                conn.close(320, f"ackbridge fault seam: {reason}")

        self.io.call_soon(cut)

    def hold_publishes(self, hold: bool) -> None:
        self._publishing.hold(hold)

    # ---- replies ---------------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        name = self._inbox_name or f"ackbridge.reply.{uuid.uuid4().hex}"
        self.submit(lambda fut: self._open_inbox(name, fut), "open the reply inbox")
        self._inbox_name = name
        return name

    def _open_inbox(self, name: str, fut: Fut[None] | None) -> None:
        conn = self.conn
        if conn is None or not conn.is_open:
            if fut is not None:
                fut.set_exception(ConnectionLostError("open the reply inbox: not connected"))
            return

        def on_message(ch: Channel, method: Any, props: Any, body: bytes) -> None:
            msg = common.inbound(tag=method.delivery_tag, generation=self._gen, body=body, source=name,
                                 props=props, routing_key=method.routing_key, redelivered=method.redelivered,
                                 quorum=False)
            reply = self.events.reply
            emit(lambda: reply(msg))

        def on_close(ch: Channel, reason: BaseException) -> None:
            if fut is not None and not fut.done():
                fut.set_exception(channel_error(reason, "open the reply inbox"))

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(on_close)
            # Client-named (not server-named) so the same address survives a
            # reconnect: exclusive queues die with their connection.
            ch.queue_declare(name, exclusive=True, auto_delete=True,
                             callback=lambda _f: ch.basic_consume(name, on_message, auto_ack=True,
                                                                  callback=lambda _g: started()))

        def started() -> None:
            if fut is not None and not fut.done():
                fut.set_result(None)

        conn.channel(on_open_callback=on_open)
