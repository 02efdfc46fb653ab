"""Receiving: subscriptions, their deliveries to the core, settlements as wire ops; the reply inbox.

Each subscription has its own channel, so its delivery tags are its own and a
``multiple`` ack never touches another subscription's deliveries. When the
broker closes one subscription channel (e.g. consumer_timeout) every
subscription channel is reopened on a new generation, so all live deliveries
share one generation and the core's "generation ended" rule stays exact.

When the broker cancels a subscription (``basic.cancel``: its queue was
deleted; RabbitMQ sends it since pika announces ``consumer_cancel_notify``),
that subscription alone fails: its consumer raises
:class:`~ackbridge.errors.SubscriptionCancelledError` once the deliveries it
already received are taken, and one WARNING is logged. Its channel stays open
and its generation live, so those deliveries stay settle-able; it is not
subscribed again after a reconnect (the queue is gone).

Settlements are handed to the I/O thread without waiting (as publishes are);
the race with a connection loss is decided there, where every op of a batch is
checked before any is sent. Whether an op's generation is still live is the
core's guard's to decide (``check_ops``): this module reports which generation
is live for the op's channel, or None when the channel is gone.

Replies (``open_reply_inbox``) arrive on an exclusive queue of their own,
consumed with auto-ack, and go to the core's ``reply`` event.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pika.exceptions as pe
from pika.channel import Channel

from ackbridge.errors import ConnectionLostError, StaleDeliveryError, SubscriptionCancelledError
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import ACK, REQUEUE, WireSettle
from ackbridge_rabbitmq.codec import inbound
from ackbridge_rabbitmq.errors import channel_error
from ackbridge_rabbitmq.io_thread import Fut, emit

if TYPE_CHECKING:
    from ackbridge_rabbitmq.connection import Link

log = logging.getLogger("ackbridge.rabbitmq")

#: How RabbitMQ words a channel closed by consumer_timeout (406 PRECONDITION_FAILED).
CONSUMER_TIMEOUT_TEXT = "delivery acknowledgement on channel"


def consumer_timeout_text(reason: BaseException) -> str | None:
    """The report for a channel closed by the broker's ``consumer_timeout`` (a delivery held
    unsettled too long); None for any other close."""
    if not isinstance(reason, pe.ChannelClosedByBroker):
        return None
    if reason.reply_code != 406 or CONSUMER_TIMEOUT_TEXT not in str(reason.reply_text) \
            or "timed out" not in str(reason.reply_text):
        return None
    return ("consumer_timeout: a delivery was held unsettled longer than the broker's consumer_timeout, so the "
            "broker closed its channel and requeued every unsettled delivery on it; they will be delivered again "
            "(settling the old ones raises StaleDeliveryError). RabbitMQ cannot extend a delivery's lease: "
            "raise consumer_timeout above the slowest work, or split the work. Broker said: "
            f"{reason.reply_code} {reason.reply_text}")


def cancelled_by_broker(source: str) -> SubscriptionCancelledError:
    """The error (and WARNING) for a subscription to *source* the broker cancelled; both transports."""
    error = SubscriptionCancelledError(
        source, "the broker sent basic.cancel (the queue was deleted, or its node went away); deliveries already "
                "received can still be settled, nothing more will arrive: declare the queue and consume again")
    log.warning("ackbridge-rabbitmq: %s", error)
    return error


class _Sub:
    """One subscription: its own channel, so its delivery tags are its own."""

    __slots__ = ("active", "cancelled", "channel", "generation", "name", "opening", "prefetch", "source")

    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.channel: Channel | None = None
        self.generation = 0
        self.active = False
        #: The broker cancelled it (basic.cancel): never subscribed again.
        self.cancelled = False
        self.opening: Fut[None] | None = None


class Subscriptions:
    """The subscriptions of one transport and the settlements on their channels."""

    def __init__(self, link: Link, *, quorum: bool) -> None:
        self._link = link
        self._subs: dict[str, _Sub] = {}
        self._settle_q: deque[Sequence[WireSettle]] = deque()
        self._settle_wake_pending = False
        self._quorum = quorum

    # ---- any thread ----------------------------------------------------------------------
    def subscribe(self, subscription: str, source: str, prefetch: int) -> None:
        sub = _Sub(subscription, source, prefetch)

        def start(fut: Fut[None]) -> None:
            self._link.require_conn(f"subscribe to {source!r}")
            self._subs[subscription] = sub
            self._open(sub, fut)

        try:
            self._link.submit(start, f"subscribe to {source!r}")
        except Exception:
            self._link.io.call_soon(lambda: self._subs.pop(subscription, None))
            raise

    def unsubscribe(self, subscription: str) -> None:
        def stop(fut: Fut[None]) -> None:
            sub = self._subs.pop(subscription, None)
            ch = sub.channel if sub is not None else None
            if sub is not None:
                sub.channel = None
            if ch is None or not ch.is_open:
                fut.set_result(None)
                return

            def closed(_channel: object, _reason: object) -> None:
                if not fut.done():
                    fut.set_result(None)

            ch.add_on_close_callback(closed)
            ch.close()  # cancels the consumer; unacked deliveries return to the queue

        self._link.submit(stop, f"unsubscribe {subscription!r}", timeout=10)

    def settle(self, ops: Sequence[WireSettle]) -> None:
        if not ops:
            return
        link = self._link
        check_ops(ops, link.generation)
        if link.io.on_io():
            self._settle_on_io(ops)
            return
        if link.state in ("closed", "new") or not link.io.running:
            raise ConnectionLostError(f"settle: {link.where} is not open; nothing was sent")
        # Handed over without waiting: the check above refuses every op of an ended
        # generation the client knows of; one that loses the race to a loss not yet
        # seen is dropped on the I/O thread, never applied, and its message is
        # redelivered by the broker.
        self._settle_q.append(ops)
        if not self._settle_wake_pending:
            self._settle_wake_pending = True
            link.io.call_soon(self._drain_settles)

    # ---- I/O thread ------------------------------------------------------------------------
    def reopen_all(self) -> None:
        """After a (re)connect: open every subscription's channel again."""
        for sub in list(self._subs.values()):
            if not sub.cancelled:
                self._open(sub, None)

    def connection_lost(self) -> None:
        for sub in self._subs.values():
            sub.channel = None

    def _open(self, sub: _Sub, fut: Fut[None] | None) -> None:
        conn = self._link.conn
        if conn is None or not conn.is_open:
            return
        gen = self._link.generation
        sub.active = False
        sub.opening = fut

        def on_open(ch: Channel) -> None:
            if self._subs.get(sub.name) is not sub:
                ch.close()
                return
            sub.channel = ch
            sub.generation = gen
            ch.add_on_close_callback(lambda c, reason: self._on_closed(sub, c, reason))
            ch.add_on_cancel_callback(lambda _frame: self._on_cancelled(sub, ch))
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
        msg = inbound(tag=method.delivery_tag, generation=sub.generation, body=body, source=sub.source,
                      props=props, routing_key=method.routing_key, redelivered=method.redelivered,
                      quorum=self._quorum)
        deliver = self._link.events.deliver
        emit(lambda: deliver(sub.name, msg))

    def _on_cancelled(self, sub: _Sub, ch: Channel) -> None:
        if sub.channel is not ch or self._subs.get(sub.name) is not sub:
            return  # a channel being replaced, or a subscription already ended
        sub.cancelled = True
        error = cancelled_by_broker(sub.source)
        failed = self._link.events.failed
        emit(lambda: failed(error, sub.name))

    def _on_closed(self, sub: _Sub, ch: Channel, reason: BaseException) -> None:
        if sub.opening is not None and not sub.opening.done():
            sub.opening.set_exception(channel_error(reason, f"subscribe to {sub.source!r}"))
            self._subs.pop(sub.name, None)
        if sub.channel is not ch:
            return
        sub.channel = None
        if isinstance(reason, pe.ChannelClosedByBroker) and sub.active and self._link.state == "open":
            timed_out = consumer_timeout_text(reason)
            self._recycle(f"channel of subscription {sub.source!r} closed by the broker: "
                          + (timed_out or f"{reason.reply_code} {reason.reply_text}"))

    def _recycle(self, why: str) -> None:
        """Reopen every subscription channel on a new generation (see module doc)."""
        old = self._link.next_generation()
        for sub in self._subs.values():
            ch, sub.channel = sub.channel, None
            if ch is not None and ch.is_open:
                ch.close()  # the broker requeues its unacked deliveries
        ended = self._link.events.generation_ended
        emit(lambda: ended(old, why))
        log.warning("ackbridge-rabbitmq: %s", why)
        self.reopen_all()

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
        check_ops(ops, self._link.generation)
        channels: list[Channel] = []
        for op in ops:
            sub = self._subs.get(op.subscription)
            ch = sub.channel if sub is not None else None
            # The generation live on this op's channel; None when the channel is gone.
            live = sub.generation if sub is not None and ch is not None and ch.is_open else None
            check_ops((op,), live, f"delivery tag {op.wire_tag}: its channel is gone")
            assert ch is not None  # check_ops raised for a gone channel
            channels.append(ch)
        for op, ch in zip(ops, channels, strict=True):
            tag = int(op.wire_tag)  # type: ignore[call-overload]
            if op.verb is ACK:
                ch.basic_ack(tag, multiple=op.multiple)
            elif op.verb is REQUEUE:
                ch.basic_nack(tag, multiple=op.multiple, requeue=True)
            else:
                ch.basic_reject(tag, requeue=False)


class ReplyInbox:
    """The exclusive, client-named reply queue of one transport, consumed with auto-ack.

    Client-named (not server-named) so the same address survives a reconnect:
    exclusive queues die with their connection, and :meth:`reopen` declares it again."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self.name: str | None = None

    def open(self) -> str:
        name = self.name or f"ackbridge.reply.{uuid.uuid4().hex}"
        self._link.submit(lambda fut: self._open(name, fut), "open the reply inbox")
        self.name = name
        return name

    def reopen(self) -> None:
        """On the I/O thread, after a (re)connect: declare and consume it again, if it was opened."""
        if self.name is not None:
            self._open(self.name, None)

    def _open(self, name: str, fut: Fut[None] | None) -> None:
        link = self._link
        conn = link.conn
        if conn is None or not conn.is_open:
            if fut is not None:
                fut.set_exception(ConnectionLostError("open the reply inbox: not connected"))
            return

        def on_message(ch: Channel, method: Any, props: Any, body: bytes) -> None:
            msg = inbound(tag=method.delivery_tag, generation=link.generation, body=body, source=name,
                          props=props, routing_key=method.routing_key, redelivered=method.redelivered,
                          quorum=False)
            reply = link.events.reply
            emit(lambda: reply(msg))

        def on_close(ch: Channel, reason: BaseException) -> None:
            if fut is not None and not fut.done():
                fut.set_exception(channel_error(reason, "open the reply inbox"))

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(on_close)
            ch.queue_declare(name, exclusive=True, auto_delete=True,
                             callback=lambda _f: ch.basic_consume(name, on_message, auto_ack=True,
                                                                  callback=lambda _g: started()))

        def started() -> None:
            if fut is not None and not fut.done():
                fut.set_result(None)

        conn.channel(on_open_callback=on_open)
