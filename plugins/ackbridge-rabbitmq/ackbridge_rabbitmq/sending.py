"""Sending: publishes and their confirms, on one confirm-mode channel per connection.

Publishes are handed to the I/O thread in batches (a lock-free deque plus at
most one pending wake-up), so many publishes cost one cross-thread hop. Each
message is encoded on the publishing thread, so one the wire cannot carry is
refused alone, before it could reach the confirm numbering.

On the fast path (see fastpath.py) the payloads are pika's frames built by
``frames.py`` and a batch goes out as one socket write (``coalescing.py``);
on pika's public path each message goes through ``Channel.basic_publish``.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions as pe
from pika.channel import Channel

from ackbridge.errors import AckbridgeError, ConnectionLostError
from ackbridge.messages import ConfirmOutcome, OutboundMessage, refused, unsent
from ackbridge_rabbitmq import frames
from ackbridge_rabbitmq.codec import property_fields
from ackbridge_rabbitmq.confirms import ConfirmTracker
from ackbridge_rabbitmq.errors import describe
from ackbridge_rabbitmq.io_thread import Fut, emit_confirms
from ackbridge_rabbitmq.queues import parse_destination

if TYPE_CHECKING:
    from ackbridge_rabbitmq.connection import Link

log = logging.getLogger("ackbridge.rabbitmq")

#: A publish waiting for the I/O thread: (seq, route, header, body, message_id).
#: Fast path: route and header are the method and content-header frame payloads;
#: public path: (exchange, routing key) and a pika BasicProperties.
_Queued = tuple[int, Any, Any, bytes, str]


_TOO_LARGE = re.compile(r"message size (\d+) is larger than configured max size")


def oversized_body(code: int, text: str) -> int | None:
    """The body size RabbitMQ refused in a 406 channel close, if that is what it says."""
    match = _TOO_LARGE.search(text) if code == 406 else None
    return int(match[1]) if match else None


def oversized_header(size: int, frame_max: int) -> str | None:
    """Why a content header of *size* bytes cannot be sent: it must fit one frame
    (7 bytes of frame header and 1 frame-end byte around it)."""
    if frame_max and size + 8 > frame_max:
        return (f"refused before sending: the message's properties and headers take {size} bytes, more than "
                f"one frame of the negotiated frame_max ({frame_max} bytes) can carry; RabbitMQ would close "
                f"the whole connection (501 FRAME_ERROR)")
    return None


class Publishing:
    """Publishes, their confirm tracking and the publish channel of one transport."""

    def __init__(self, link: Link, id_prefix: str) -> None:
        self._link = link
        self.channel: Channel | None = None
        self.tracker = ConfirmTracker()
        self._outq: deque[_Queued] = deque()
        self._backlog: deque[_Queued] = deque()
        self._wake_pending = False
        self._held = False
        self._id_prefix = id_prefix

    def _emit(self, outcomes: list[tuple[int, ConfirmOutcome]]) -> None:
        emit_confirms(self._link.events, outcomes)

    # ---- any thread ------------------------------------------------------------------
    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        link = self._link
        state = link.state
        if state != "open":
            if state == "reconnecting":
                raise ConnectionLostError(f"publish: {link.where} is reconnecting; nothing was sent")
            raise ConnectionLostError(f"publish: {link.where} is not connected; nothing was sent")
        if not destination:
            link.events.confirm(seq, refused("no destination given"))
            return
        exchange, key = parse_destination(destination)
        message_id = message.message_id or f"{self._id_prefix}{seq}"
        try:
            if link.fast_path:
                route: Any = frames.publish_method(exchange, key)
                header: Any = frames.content_header(message, message_id)
                header_size = len(header)
            else:
                route = (exchange, key)
                header = pika.BasicProperties(**property_fields(message, message_id))
                header_size = 12 + sum(map(len, header.encode()))  # raises here, not inside the I/O loop
        except AckbridgeError:
            raise  # a float header: the caller's mistake, raised as before
        except Exception as exc:
            link.events.confirm(seq, refused(f"could not encode the message for AMQP 0-9-1: {describe(exc)}"))
            return
        too_big = oversized_header(header_size, link.frame_max)
        if too_big is not None:
            # Sent, it would make the broker close the whole connection (501 FRAME_ERROR).
            link.events.confirm(seq, refused(too_big))
            return
        self._outq.append((seq, route, header, message.body, message_id))
        if not self._wake_pending:
            self._wake_pending = True
            link.io.call_soon(self.drain)

    def hold(self, hold: bool) -> None:
        """Fault seam: park publishes client-side (their confirms stay pending)
        until released; a connection cut meanwhile makes them unknown."""

        def apply() -> None:
            self._held = hold
            if not hold:
                self._requeue_backlog()
                self.drain()

        self._link.io.call_soon(apply)

    # ---- I/O thread ------------------------------------------------------------------
    def drain(self) -> None:
        self._wake_pending = False
        ch = self.channel
        link = self._link
        conn = link.conn
        queue = self._outq
        if ch is None or conn is None or not ch.is_open or not conn.is_open or self._backlog or self._held:
            if link.state in ("lost", "closing", "closed"):
                # Handed over while the connection was being lost, after its close
                # callback had reported the unsent ones: no channel comes back for
                # them, so they are unknown now (they used to wait for confirm_timeout).
                self._emit(self.drop_unsent("connection lost before the publish was sent"))
                return
            # The publish channel is being (re)opened: keep order, send later.
            while queue:
                self._backlog.append(queue.popleft())
            return
        if link.fast_path:
            # One socket write per batch instead of three per publish (coalescing.py).
            with conn.coalesce():
                self._send_frames(conn, ch.channel_number, queue)
        else:
            self._send_public(ch, queue)

    def _send_frames(self, conn: Any, channel: int, queue: deque[_Queued]) -> None:
        tracker = self.tracker
        output = conn.output_frames
        body_max = conn.body_max_length
        publish_frames = frames.publish_frames
        while queue:
            seq, method, header, body, message_id = queue.popleft()
            output(publish_frames(channel, method, header, body, body_max))
            # Counted only once its frames are out: the tracker's sequence must match
            # the broker's delivery tags exactly, or confirms land on the wrong message.
            tracker.sent(seq, message_id, len(body))

    def _send_public(self, ch: Channel, queue: deque[_Queued]) -> None:
        tracker = self.tracker
        while queue:
            seq, (exchange, key), props, body, message_id = queue.popleft()
            ch.basic_publish(exchange, key, body, props, mandatory=True)
            tracker.sent(seq, message_id, len(body))

    def _requeue_backlog(self) -> None:
        pending, self._backlog = self._backlog, deque()
        pending.extend(self._outq)
        self._outq.clear()
        self._outq.extend(pending)

    def drop_unsent(self, why: str) -> list[tuple[int, ConfirmOutcome]]:
        outcome = unsent(why)
        out = [(item[0], outcome) for item in self._backlog]
        self._backlog.clear()
        while self._outq:
            out.append((self._outq.popleft()[0], outcome))
        return out

    def connection_lost(self, why: str) -> list[tuple[int, ConfirmOutcome]]:
        """Every publish in flight or not yet sent becomes unknown (returned, not emitted)."""
        self.channel = None
        lost = self.tracker.lose_all(why)
        self.tracker = ConfirmTracker()
        return lost + self.drop_unsent(f"{why} before the publish was sent")

    def open_channel(self, fut: Fut[None] | None) -> None:
        conn = self._link.conn
        if conn is None or not conn.is_open:
            return

        def on_open(ch: Channel) -> None:
            ch.add_on_close_callback(self._on_closed)
            ch.add_on_return_callback(self._on_return)
            ch.confirm_delivery(self._on_confirm, callback=lambda _f: ready(ch))

        def ready(ch: Channel) -> None:
            self.tracker = ConfirmTracker()
            self.channel = ch
            self._requeue_backlog()
            self.drain()
            if fut is not None and not fut.done():
                fut.set_result(None)

        conn.channel(on_open_callback=on_open)

    def _on_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self.channel:
            return
        self.channel = None
        if not isinstance(reason, pe.ChannelClosedByBroker):
            return  # connection-level: the transport's close callback reports
        why = f"publish channel closed by the broker ({reason.reply_code} {reason.reply_text})"
        log.warning("ackbridge-rabbitmq: %s", why)
        size = oversized_body(reason.reply_code, str(reason.reply_text))
        if size is not None:
            # 406 "message size N is larger than configured max size M": the broker
            # refused that message; the others on the channel are unknown.
            self._emit(self.tracker.refuse_size(size, f"refused by the broker: {reason.reply_text}"))
        self._emit(self.tracker.lose_all(why))
        self.tracker = ConfirmTracker()
        self.open_channel(None)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        ack = isinstance(method, pika.spec.Basic.Ack)
        self._emit(self.tracker.answered(method.delivery_tag, bool(method.multiple), ack))

    def _on_return(self, ch: Channel, method: Any, props: Any, body: bytes) -> None:
        self.tracker.returned(props.message_id, (
            f"unroutable: {method.reply_code} {method.reply_text} "
            f"(exchange {method.exchange!r}, routing key {method.routing_key!r})"))
