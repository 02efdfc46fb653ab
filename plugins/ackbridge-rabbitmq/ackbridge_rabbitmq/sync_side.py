"""The sync side: pika's SelectConnection driven by one I/O thread.

pika is not thread-safe; only ``IOLoop.add_callback_threadsafe`` may be called
from other threads. Every channel call therefore runs on the I/O thread.
Publishes are handed over in batches (a lock-free deque plus at most one
pending wake-up), so many publishes cost one cross-thread hop. Core events
(deliveries, confirms, generation ends, replies) are called on the I/O thread,
in arrival order: the core never holds one of its locks across a transport call
(its consumer sends settlements after releasing its lock), so the I/O thread
only ever waits for a few microseconds of ledger work, never for itself. An
earlier design routed them through a dispatcher thread; the extra hop per
message cost a thread wake-up per message and its GIL hand-offs.

Generations: one counter for the whole connection. It rises when the
connection is lost and when a subscription channel is closed by the broker
(then every subscription channel is reopened, so all live deliveries share one
generation and the core's "generation ended" rule stays exact).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import pika
import pika.exceptions as pe
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel

from ackbridge.errors import AckbridgeError, BrokerError, ConnectionLostError, StaleDeliveryError
from ackbridge.messages import ConfirmOutcome, OutboundMessage, WireSettle, WireVerb, refused, unknown
from ackbridge_rabbitmq import common, frames
from ackbridge_rabbitmq.confirms import ConfirmTracker
from ackbridge_rabbitmq.deliveries import DecodingConnection
from ackbridge_rabbitmq.errors import channel_error, describe

log = logging.getLogger("ackbridge.rabbitmq")

Fut = concurrent.futures.Future
#: A publish waiting for the I/O thread: (seq, method payload, content header payload, body, message_id).
_Queued = tuple[int, bytes, bytes, bytes, str]
_Step = Callable[[Channel, Callable[[Any], None]], None]


class _Sub:
    """One subscription: its own channel, so its delivery tags are its own."""

    __slots__ = ("active", "channel", "generation", "name", "opening", "prefetch", "source")

    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.channel: Channel | None = None
        self.generation = 0
        self.active = False
        self.opening: Fut[None] | None = None


def _stale(op: WireSettle, now: int) -> StaleDeliveryError:
    return StaleDeliveryError(
        f"settlement of delivery tag {op.wire_tag} from generation {op.generation} refused: "
        f"its channel is gone (now generation {now}); nothing was sent and the broker redelivers it")


class SyncSide:
    """Mixin of :class:`~ackbridge_rabbitmq.transport.RabbitTransport`: the sync methods."""

    # provided by the transport
    url: Any
    options: Any
    events: Any
    connection_name: str

    def _sync_init(self) -> None:
        self._ioloop: IOLoop | None = None
        self._io_thread: threading.Thread | None = None
        self._io_ident: int | None = None
        self._conn: DecodingConnection | None = None
        self._state = "new"  # new | open | reconnecting | lost | closing | closed
        self._gen = 0
        self._subs: dict[str, _Sub] = {}
        self._pub_channel: Channel | None = None
        self._tracker = ConfirmTracker()
        self._outq: deque[_Queued] = deque()
        self._backlog: deque[_Queued] = deque()
        self._wake_pending = False
        self._settle_q: deque[Sequence[WireSettle]] = deque()
        self._settle_wake_pending = False
        self._held = False
        self._inbox_name: str | None = None
        self._inbox_channel: Channel | None = None
        self._closing_fut: Fut[None] | None = None
        self._backoff = 0.1
        self._id_prefix = f"ab-{uuid.uuid4().hex[:12]}-"
        self._quorum = common.option(self.options, "queue_type") == "quorum"

    # ---- thread plumbing -------------------------------------------------------------
    def _on_io(self) -> bool:
        return threading.get_ident() == self._io_ident

    def _submit(self, fn: Callable[[Fut[Any]], None], doing: str, timeout: float | None = None) -> Any:
        """Run *fn(fut)* on the I/O thread and wait for it to resolve *fut*."""
        if self._ioloop is None or self._state in ("closed", "new"):
            raise ConnectionLostError(f"{doing}: {self.url.redacted} is not open")
        fut: Fut[Any] = Fut()

        def run() -> None:
            try:
                fn(fut)
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(channel_error(exc, doing))

        self._ioloop.add_callback_threadsafe(run)
        wait = timeout if timeout is not None else float(common.option(self.options, "connect_timeout")) + 20
        try:
            return fut.result(wait)
        except concurrent.futures.TimeoutError:
            raise ConnectionLostError(f"{doing}: no answer from {self.url.redacted} within {wait} s") from None

    def _emit(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a failing core callback must not stop the I/O loop
            log.exception("ackbridge-rabbitmq: event handler failed")

    def _emit_confirms(self, outcomes: list[tuple[int, ConfirmOutcome]]) -> None:
        if not outcomes:
            return
        confirm = self.events.confirm

        def deliver() -> None:
            for seq, outcome in outcomes:
                confirm(seq, outcome)

        self._emit(deliver)

    # ---- lifecycle ---------------------------------------------------------------------
    @property
    def _sync_generation(self) -> int:
        return self._gen

    def open(self) -> None:
        if self._state != "new":
            return
        self._ioloop = IOLoop()
        ready = threading.Event()

        def run() -> None:
            self._io_ident = threading.get_ident()
            ready.set()
            assert self._ioloop is not None
            self._ioloop.start()

        self._io_thread = threading.Thread(target=run, name="ackbridge-rabbitmq-io", daemon=True)
        self._io_thread.start()
        ready.wait(5)
        self._state = "reconnecting"  # i.e. connecting: _submit accepts work
        try:
            self._submit(self._connect, f"connect to {self.url.redacted}",
                         timeout=float(common.option(self.options, "connect_timeout")) + 5)
        except Exception:
            self._state = "lost"
            self._shutdown_threads()
            self._state = "closed"
            raise

    def _parameters(self) -> pika.ConnectionParameters:
        ep = common.endpoint(self.url, self.options)
        ssl_options = pika.SSLOptions(ep.tls, ep.host) if ep.tls is not None else None
        return pika.ConnectionParameters(
            host=ep.host, port=ep.port, virtual_host=ep.vhost,
            credentials=pika.PlainCredentials(ep.username, ep.password),
            heartbeat=int(common.option(self.options, "heartbeat")),
            ssl_options=ssl_options, connection_attempts=1,
            socket_timeout=float(common.option(self.options, "connect_timeout")),
            stack_timeout=float(common.option(self.options, "connect_timeout")),
            client_properties={"connection_name": self.connection_name, "product": "ackbridge"},
        )

    def _connect(self, fut: Fut[None]) -> None:
        def opened(conn: pika.SelectConnection) -> None:
            self._backoff = 0.1
            self._state = "open"
            self._gen += 1
            self._open_pub_channel(fut)
            for sub in list(self._subs.values()):
                self._open_sub(sub, None)
            if self._inbox_name is not None:
                self._open_inbox(self._inbox_name, None)

        def failed(conn: pika.SelectConnection, exc: BaseException) -> None:
            self._conn = None
            if not fut.done():
                fut.set_exception(ConnectionLostError(
                    f"could not connect to {self.url.redacted}: {describe(exc)}"))

        # Coalesced writes (coalescing.py) and a short path for deliveries (deliveries.py).
        self._conn = DecodingConnection(
            self._parameters(), on_open_callback=opened, on_open_error_callback=failed,
            on_close_callback=self._on_conn_closed, custom_ioloop=self._ioloop)

    def _on_conn_closed(self, conn: pika.SelectConnection, reason: BaseException) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        self._pub_channel = None
        self._inbox_channel = None
        why = f"connection lost ({describe(reason)})"
        lost = self._tracker.lose_all(why)
        self._tracker = ConfirmTracker()
        lost += self._drop_unsent(f"{why} before the publish was sent")
        for sub in self._subs.values():
            sub.channel = None
        if self._state == "closing":
            self._emit_confirms(lost)
            if self._closing_fut is not None and not self._closing_fut.done():
                self._closing_fut.set_result(None)
            return
        old = self._gen
        self._gen += 1  # settle() checks now fail at once, before the I/O thread sees them
        self._emit_confirms(lost)
        self._emit(lambda: self.events.generation_ended(old, why))
        log.warning("ackbridge-rabbitmq: %s: %s", self.url.redacted, why)
        if common.option(self.options, "reconnect"):
            self._state = "reconnecting"
            self._schedule_reconnect()
        else:
            self._state = "lost"

    def _schedule_reconnect(self) -> None:
        assert self._ioloop is not None
        delay = self._backoff
        self._backoff = min(self._backoff * 2, float(common.option(self.options, "reconnect_max_delay")))

        def attempt() -> None:
            if self._state != "reconnecting":
                return
            fut: Fut[None] = Fut()

            def done(f: Fut[None]) -> None:
                if f.exception() is not None and self._state == "reconnecting":
                    self._schedule_reconnect()

            fut.add_done_callback(done)
            try:
                self._connect(fut)
            except Exception as exc:
                fut.set_exception(exc)

        self._ioloop.call_later(delay, attempt)

    def close(self) -> None:
        if self._state in ("new", "closed", "closing"):
            return
        previous, self._state = self._state, "closing"
        if previous == "open" and self._ioloop is not None:
            fut: Fut[None] = Fut()
            self._closing_fut = fut

            def shut() -> None:
                if self._conn is None or self._conn.is_closed:
                    fut.set_result(None)
                elif not self._conn.is_closing:
                    self._conn.close()

            self._ioloop.add_callback_threadsafe(shut)
            try:
                fut.result(10)
            except concurrent.futures.TimeoutError:
                log.warning("ackbridge-rabbitmq: close of %s timed out", self.url.redacted)
        self._shutdown_threads()
        self._state = "closed"

    def _shutdown_threads(self) -> None:
        loop = self._ioloop
        if loop is not None:
            def stop() -> None:
                if self._conn is not None and not self._conn.is_closed:
                    # An unfinished reconnect: drop its socket with the loop.
                    self._conn = None
                loop.stop()

            loop.add_callback_threadsafe(stop)
            if self._io_thread is not None and self._io_thread is not threading.current_thread():
                self._io_thread.join(10)
            loop.close()
            self._ioloop = None

    # ---- small channel helpers (I/O thread) ----------------------------------------------
    def _require_conn(self, doing: str) -> pika.SelectConnection:
        if self._conn is None or not self._conn.is_open:
            raise ConnectionLostError(f"{doing}: not connected to {self.url.redacted}")
        return self._conn

    def _with_channel(self, fut: Fut[Any], doing: str, steps: Sequence[_Step]) -> None:
        """Open a short-lived channel, run *steps* one after another, close it.
        A broker error closes the channel: it resolves *fut* with BrokerError."""
        conn = self._require_conn(doing)

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

    # ---- queues --------------------------------------------------------------------------
    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._submit(lambda fut: self._declare(fut, name, dead_letter), f"declare queue {name!r}")

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

    # ---- consuming -----------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        # pika raises on a >255-byte name inside its I/O loop, which would end the
        # connection (and every reconnect would re-subscribe it).
        common.check_queue_name(source)
        common.check_prefetch(prefetch)
        sub = _Sub(subscription, source, prefetch)

        def start(fut: Fut[None]) -> None:
            self._require_conn(f"subscribe to {source!r}")
            self._subs[subscription] = sub
            self._open_sub(sub, fut)

        try:
            self._submit(start, f"subscribe to {source!r}")
        except Exception:
            self._forget_sub(subscription)
            raise

    def _forget_sub(self, subscription: str) -> None:
        if self._ioloop is not None:
            self._ioloop.add_callback_threadsafe(lambda: self._subs.pop(subscription, None))

    def _open_sub(self, sub: _Sub, fut: Fut[None] | None) -> None:
        conn = self._conn
        if conn is None or not conn.is_open:
            return
        gen = self._gen
        sub.active = False
        sub.opening = fut

        def on_open(ch: Channel) -> None:
            if self._subs.get(sub.name) is not sub:
                ch.close()
                return
            sub.channel = ch
            sub.generation = gen
            ch.add_on_close_callback(lambda c, reason: self._on_sub_closed(sub, c, reason))
            ch.basic_qos(prefetch_count=sub.prefetch, callback=lambda _f: consume(ch))

        def consume(ch: Channel) -> None:
            ch.basic_consume(sub.source, lambda c, m, p, b: self._on_message(sub, c, m, p, b),
                             auto_ack=False, callback=lambda _f: started())

        def started() -> None:
            sub.active = True
            if fut is not None and not fut.done():
                fut.set_result(None)

        conn.channel(on_open_callback=on_open)

    def _on_message(self, sub: _Sub, ch: Channel, method: Any, props: Any, body: bytes) -> None:
        if sub.channel is not ch:
            return  # a channel being replaced: closing it requeues this delivery
        msg = common.inbound(tag=method.delivery_tag, generation=sub.generation, body=body, source=sub.source,
                             props=props, routing_key=method.routing_key, redelivered=method.redelivered,
                             quorum=self._quorum)
        self._emit(lambda: self.events.deliver(sub.name, msg))

    def _on_sub_closed(self, sub: _Sub, ch: Channel, reason: BaseException) -> None:
        if sub.opening is not None and not sub.opening.done():
            sub.opening.set_exception(channel_error(reason, f"subscribe to {sub.source!r}"))
            self._subs.pop(sub.name, None)
        if sub.channel is not ch:
            return
        sub.channel = None
        if isinstance(reason, pe.ChannelClosedByBroker) and sub.active and self._state == "open":
            self._recycle_subs(f"channel of subscription {sub.source!r} closed by the broker: "
                               f"{reason.reply_code} {reason.reply_text}")

    def _recycle_subs(self, why: str) -> None:
        """Reopen every subscription channel on a new generation (see module doc)."""
        old = self._gen
        self._gen += 1
        for sub in self._subs.values():
            ch, sub.channel = sub.channel, None
            if ch is not None and ch.is_open:
                ch.close()  # the broker requeues its unacked deliveries
        self._emit(lambda: self.events.generation_ended(old, why))
        log.warning("ackbridge-rabbitmq: %s", why)
        for sub in list(self._subs.values()):
            self._open_sub(sub, None)

    def unsubscribe(self, subscription: str) -> None:
        def stop(fut: Fut[None]) -> None:
            sub = self._subs.pop(subscription, None)
            ch = sub.channel if sub is not None else None
            if sub is not None:
                sub.channel = None
            if ch is None or not ch.is_open:
                fut.set_result(None)
                return
            ch.add_on_close_callback(lambda c, r: fut.done() or fut.set_result(None))
            ch.close()  # cancels the consumer; unacked deliveries return to the queue

        if self._state in ("open", "reconnecting"):
            self._submit(stop, f"unsubscribe {subscription!r}", timeout=10)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if not ops:
            return
        now = self._gen
        for op in ops:
            if op.generation != now:
                raise _stale(op, now)
        if self._on_io():
            self._settle_on_io(ops)
            return
        loop = self._ioloop
        if loop is None or self._state in ("closed", "new"):
            raise ConnectionLostError(f"settle: {self.url.redacted} is not open; nothing was sent")
        # Handed over without waiting (as publishes are): the caller-side check
        # above refuses every op of an ended generation the client knows of; one
        # that loses the race to a loss not yet seen is dropped on the I/O thread,
        # never applied, and its message is redelivered by the broker.
        self._settle_q.append(ops)
        if not self._settle_wake_pending:
            self._settle_wake_pending = True
            loop.add_callback_threadsafe(self._drain_settles)

    def _drain_settles(self) -> None:
        self._settle_wake_pending = False
        queue = self._settle_q
        while queue:
            ops = queue.popleft()
            try:
                self._settle_on_io(ops)
            except StaleDeliveryError as exc:
                log.debug("ackbridge-rabbitmq: %s", exc)
            except Exception:  # never let one batch stop the I/O loop
                log.exception("ackbridge-rabbitmq: settlement failed; the broker will redeliver")

    def _settle_on_io(self, ops: Sequence[WireSettle]) -> None:
        # The race with a connection loss is decided here, on the I/O thread:
        # check every op first, then send, so nothing stale reaches the wire.
        channels: list[Channel] = []
        for op in ops:
            sub = self._subs.get(op.subscription)
            ch = sub.channel if sub is not None else None
            if (sub is None or ch is None or not ch.is_open or op.generation != self._gen
                    or sub.generation != op.generation):
                raise _stale(op, self._gen)
            channels.append(ch)
        for op, ch in zip(ops, channels, strict=True):
            tag = int(op.wire_tag)  # type: ignore[call-overload]
            if op.verb is WireVerb.ACK:
                ch.basic_ack(tag, multiple=op.multiple)
            elif op.verb is WireVerb.REQUEUE:
                ch.basic_nack(tag, multiple=op.multiple, requeue=True)
            else:
                ch.basic_reject(tag, requeue=False)

    # ---- publishing ----------------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        state = self._state
        if state != "open":
            if state == "reconnecting":
                raise ConnectionLostError(f"publish: {self.url.redacted} is reconnecting; nothing was sent")
            raise ConnectionLostError(f"publish: {self.url.redacted} is not connected; nothing was sent")
        if not destination:
            self.events.confirm(seq, refused("no destination given"))
            return
        exchange, key = common.parse_destination(destination)
        message_id = message.message_id or f"{self._id_prefix}{seq}"
        try:
            # Encoded here, on the publishing thread (frames.py): the I/O thread
            # only wraps the payloads in frames, and a message the wire cannot
            # carry is refused alone before it could reach the confirm numbering.
            method = frames.publish_method(exchange, key)
            header = frames.content_header(message, message_id)
        except AckbridgeError:
            raise  # a float header: the caller's mistake, raised as before
        except Exception as exc:
            self.events.confirm(seq, refused(f"could not encode the message for AMQP 0-9-1: {describe(exc)}"))
            return
        self._outq.append((seq, method, header, message.body, message_id))
        if not self._wake_pending:
            self._wake_pending = True
            loop = self._ioloop
            if loop is not None:
                loop.add_callback_threadsafe(self._drain)

    def _drain(self) -> None:
        self._wake_pending = False
        ch = self._pub_channel
        conn = self._conn
        queue = self._outq
        if ch is None or conn is None or not ch.is_open or not conn.is_open or self._backlog or self._held:
            if self._state in ("lost", "closing", "closed"):
                # Handed over while the connection was being lost, after its close
                # callback had reported the unsent ones: no channel comes back for
                # them, so they are unknown now (they used to wait for confirm_timeout).
                self._emit_confirms(self._drop_unsent("connection lost before the publish was sent"))
                return
            # The publish channel is being (re)opened: keep order, send later.
            while queue:
                self._backlog.append(queue.popleft())
            return
        # One socket write per batch instead of three per publish (coalescing.py).
        with conn.coalesce():
            self._send_queued(conn, ch.channel_number, queue)

    def _send_queued(self, conn: DecodingConnection, channel: int, queue: deque[_Queued]) -> None:
        tracker = self._tracker
        output = conn.output_frames
        body_max = conn.body_max_length
        publish_frames = frames.publish_frames
        while queue:
            seq, method, header, body, message_id = queue.popleft()
            output(publish_frames(channel, method, header, body, body_max))
            # Counted only once its frames are out: the tracker's sequence must match
            # the broker's delivery tags exactly, or confirms land on the wrong message.
            tracker.sent(seq, message_id)

    def hold_publishes(self, hold: bool) -> None:
        """Fault injection for tests: park publishes client-side (so their
        confirms stay pending) until released; a connection cut meanwhile
        makes them unknown."""

        def apply() -> None:
            self._held = hold
            if not hold:
                pending, self._backlog = self._backlog, deque()
                pending.extend(self._outq)
                self._outq.clear()
                self._outq.extend(pending)
                self._drain()

        if self._ioloop is not None:
            self._ioloop.add_callback_threadsafe(apply)

    def _drop_unsent(self, why: str) -> list[tuple[int, ConfirmOutcome]]:
        outcome = unknown(why)
        out = [(item[0], outcome) for item in self._backlog]
        self._backlog.clear()
        while self._outq:
            out.append((self._outq.popleft()[0], outcome))
        return out

    def _open_pub_channel(self, fut: Fut[None] | None) -> None:
        conn = self._conn
        if conn is None or not conn.is_open:
            return

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(self._on_pub_closed)
            ch.add_on_return_callback(self._on_return)
            ch.confirm_delivery(self._on_confirm, callback=lambda _f: ready(ch))

        def ready(ch: Channel) -> None:
            self._tracker = ConfirmTracker()
            self._pub_channel = ch
            pending, self._backlog = self._backlog, deque()
            pending.extend(self._outq)
            self._outq.clear()
            self._outq.extend(pending)
            self._drain()
            if fut is not None and not fut.done():
                fut.set_result(None)

        conn.channel(on_open_callback=on_open)

    def _on_pub_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self._pub_channel:
            return
        self._pub_channel = None
        if not isinstance(reason, pe.ChannelClosedByBroker):
            return  # connection-level: _on_conn_closed reports
        why = f"publish channel closed by the broker ({reason.reply_code} {reason.reply_text})"
        log.warning("ackbridge-rabbitmq: %s", why)
        self._emit_confirms(self._tracker.lose_all(why))
        self._tracker = ConfirmTracker()
        self._last_channel_error = BrokerError(why, reason.reply_code)
        self._open_pub_channel(None)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        ack = isinstance(method, pika.spec.Basic.Ack)
        self._emit_confirms(self._tracker.answered(method.delivery_tag, bool(method.multiple), ack))

    def _on_return(self, ch: Channel, method: Any, props: Any, body: bytes) -> None:
        self._tracker.returned(props.message_id, (
            f"unroutable: {method.reply_code} {method.reply_text} "
            f"(exchange {method.exchange!r}, routing key {method.routing_key!r})"))

    # ---- replies ---------------------------------------------------------------------------
    def open_reply_inbox(self) -> str:
        name = self._inbox_name or f"ackbridge.reply.{uuid.uuid4().hex}"
        self._submit(lambda fut: self._open_inbox(name, fut), "open the reply inbox")
        self._inbox_name = name
        return name

    def _open_inbox(self, name: str, fut: Fut[None] | None) -> None:
        conn = self._conn
        if conn is None or not conn.is_open:
            if fut is not None:
                fut.set_exception(ConnectionLostError("open the reply inbox: not connected"))
            return

        def on_message(ch: Channel, method: Any, props: Any, body: bytes) -> None:
            msg = common.inbound(tag=method.delivery_tag, generation=self._gen, body=body, source=name,
                                 props=props, routing_key=method.routing_key, redelivered=method.redelivered,
                                 quorum=False)
            reply = self.events.reply
            self._emit(lambda: reply(msg))

        def on_close(ch: Channel, reason: BaseException) -> None:
            if fut is not None and not fut.done():
                fut.set_exception(channel_error(reason, "open the reply inbox"))

        def on_open(ch: Channel) -> None:
            self._inbox_channel = ch
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
