"""Publishes and their confirms on one confirm-mode channel per connection (aio-pika).

The transport contract says a publish does not wait for its confirm. Two ways
to put one on the wire, chosen when the publish channel opens:

* the fast path (``fastpublish.py``, aiormq internals behind a version check):
  publishes made in one turn of the loop are numbered on the channel and
  written as one frame, their confirm futures kept here;
* the public path: aiormq's ``basic_publish``, which awaits the broker's
  answer, runs as a task per publish. Tasks start in call order and aiormq
  numbers publishes under its channel lock, so the wire order is the call order.

Either way each answer settles that publish's own future in aiormq (no counter
kept here), so a publish that fails before it is numbered cannot shift the
others' confirms. Outcomes, each reported once per ``seq``: Basic.Ack ->
confirmed; Basic.Return of the mandatory publish -> refused (unroutable);
Basic.Nack -> refused; the channel or connection gone -> unknown; a message
that cannot be encoded -> refused. While the publish channel is being reopened
(the broker closed it) publishes wait in call order; a loss makes them unsent.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq.exceptions as ae
from aio_pika.abc import AbstractChannel, AbstractConnection
from aiormq.abc import AbstractChannel as WireChannel
from aiormq.abc import ChannelFrame
from pamqp.commands import Basic

from ackbridge.messages import CONFIRMED, ConfirmOutcome, refused, unknown, unsent
from ackbridge.transport import TransportEvents
from ackbridge_rabbitmq.aio import fastpublish
from ackbridge_rabbitmq.aio.errors import describe, is_broker_channel_close, reply_code, reply_text

log = logging.getLogger("ackbridge.rabbitmq")

#: A publish ready for the wire: (exchange, routing key, properties, body).
Prepared = tuple[str, str, Basic.Properties, bytes]


def outcome_of(answer: asyncio.Future[Any]) -> ConfirmOutcome:
    """What the broker answered the publish whose confirm (or public-path task) is *answer*."""
    if answer.cancelled():
        return unknown("the publish was cancelled with its channel")
    exc = answer.exception()
    if exc is None:
        return CONFIRMED  # aiormq resolves with the Basic.Ack frame; a nack or a return raises
    if isinstance(exc, ae.PublishError):
        frame: Any = exc.frame
        return refused(f"unroutable: {frame.reply_code} {frame.reply_text} "
                       f"(exchange {frame.exchange!r}, routing key {frame.routing_key!r})")
    if isinstance(exc, ae.DeliveryError):
        return refused("the broker nacked the publish (Basic.Nack: internal error)")
    if isinstance(exc, ENCODING_ERRORS):
        return encode_refusal(exc)  # the public path's task encodes: refused before it was sent
    # A channel or connection gone, or what else aiormq fails a pending confirm with (7.2.4's
    # FutureStore.reject_all(None) uses a bare Exception): the broker may hold it. Unknown,
    # never refused: a refusal is final, and an unknown is sent again under its id.
    return unknown(f"publish channel gone before the confirm ({describe(exc)})")


#: What pamqp raises when a message cannot be encoded (it was never sent).
ENCODING_ERRORS = (TypeError, ValueError, struct.error, UnicodeError, OverflowError)


def encode_refusal(exc: BaseException) -> ConfirmOutcome:
    """pamqp could not encode it (a value, a name too long): refused before it was numbered."""
    return refused(f"could not encode the message for AMQP 0-9-1: {describe(exc)}")


class Publishes:
    """The publish channel of one transport and the publishes in flight on it."""

    def __init__(self, events: TransportEvents, spawn: Callable[[Awaitable[Any]], None]) -> None:
        self._events = events
        self._spawn = spawn
        self.channel: AbstractChannel | None = None
        self._wire: WireChannel | None = None
        #: Whether the open channel uses the fast path (fixed when it opens).
        self.fast_path = False
        #: seq -> the future of its answer; reported publishes leave it, so each is reported once.
        self.in_flight: dict[int, asyncio.Future[Any]] = {}
        self._waiting: deque[tuple[int, Prepared]] = deque()
        #: Fast path: publishes of this turn of the loop, written together at its end.
        self._burst: list[fastpublish.Publish] = []
        #: Fast path: frames the writer's bounded queue had no room for, queued in order by one task.
        self._overflow: deque[ChannelFrame] = deque()
        self._connection: AbstractConnection | None = None

    async def start(self, connection: AbstractConnection) -> None:
        """Open the confirm-mode channel on *connection* (a new generation) and send what waited."""
        self._connection = connection
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        channel.close_callbacks.add(self._closed)
        wire = await channel.get_underlay_channel()
        self.channel, self._wire, self.fast_path = channel, wire, fastpublish.enabled()
        waiting, self._waiting = self._waiting, deque()
        for seq, prepared in waiting:
            self.send(seq, prepared)

    def send(self, seq: int, prepared: Prepared) -> None:
        """Put one publish on the wire (or in line while the channel reopens); never waits."""
        wire = self._wire
        if wire is None or self._waiting:
            self._waiting.append((seq, prepared))
            return
        exchange, key, props, body = prepared
        if self.fast_path:
            if not self._burst:
                asyncio.get_running_loop().call_soon(self._write_burst)
            self._burst.append((seq, exchange, key, props, body))
            return
        task = asyncio.get_running_loop().create_task(wire.basic_publish(
            body, exchange=exchange, routing_key=key, properties=props, mandatory=True))
        self._track(seq, task)

    def _track(self, seq: int, answer: asyncio.Future[Any]) -> None:
        self.in_flight[seq] = answer
        answer.add_done_callback(lambda done: self._answered(seq, done))

    def _write_burst(self) -> None:
        burst, self._burst = self._burst, []
        wire = self._wire
        if not burst:
            return
        if wire is None or self._waiting or wire.is_closed:
            # The channel went and its close is not reported yet: they wait in order for
            # the channel that comes next, or the loss reports them unsent.
            self._waiting.extend((seq, (ex, key, props, body)) for seq, ex, key, props, body in burst)
            return
        if not fastpublish.usable(wire):
            # A public call holds the channel's lock: queue behind it, in order, the public way.
            for seq, exchange, key, props, body in burst:
                self._track(seq, asyncio.get_running_loop().create_task(wire.basic_publish(
                    body, exchange=exchange, routing_key=key, properties=props, mandatory=True)))
            return
        frame = fastpublish.write_burst(wire, burst, self._track,
                                        lambda seq, exc: self._events.confirm(seq, encode_refusal(exc)))
        if frame is None:
            return
        if not self._overflow:
            try:
                wire.write_queue.put_nowait(frame)  # type: ignore[attr-defined]  # fastpublish checked it
                return
            except asyncio.QueueFull:
                pass
        self._overflow.append(frame)
        if len(self._overflow) == 1:
            self._spawn(self._drain_overflow(wire))

    async def _drain_overflow(self, wire: Any) -> None:
        """Queue the frames the writer had no room for, in order (back-pressure from the socket)."""
        while self._overflow:
            try:
                await wire.write_queue.put(self._overflow[0])
            except Exception as exc:  # the connection went: lost() reports their publishes
                log.debug("ackbridge-rabbitmq: publish frames not queued: %s", describe(exc))
                self._overflow.clear()
                return
            self._overflow.popleft()

    def _answered(self, seq: int, answer: asyncio.Future[Any]) -> None:
        if self.in_flight.get(seq) is not answer:
            if not answer.cancelled():
                answer.exception()  # reported already (a loss): retrieved so asyncio does not log it
            return
        del self.in_flight[seq]
        self._events.confirm(seq, outcome_of(answer))

    def _closed(self, channel: Any, exc: BaseException | None) -> None:
        if channel is not self.channel:
            return
        self.channel, self._wire = None, None
        self._overflow.clear()
        if not is_broker_channel_close(exc):
            return  # connection-level: lost() reports
        assert exc is not None
        why = f"publish channel closed by the broker ({reply_code(exc)} {reply_text(exc)})"
        log.warning("ackbridge-rabbitmq: %s", why)
        self._report_in_flight(unknown(why))
        connection = self._connection
        if connection is not None and not connection.is_closed:
            self._spawn(self._reopen(connection))

    async def _reopen(self, connection: AbstractConnection) -> None:
        try:
            await self.start(connection)
        except Exception as exc:  # the connection went too: lost() ends what waits
            log.debug("ackbridge-rabbitmq: reopening the publish channel failed: %s", describe(exc))

    def _report_in_flight(self, outcome: ConfirmOutcome) -> None:
        lost, self.in_flight = self.in_flight, {}
        if lost:
            self._events.confirm_batch([(seq, outcome) for seq in lost])

    def lost(self, reason: str) -> None:
        """The connection went: in flight -> unknown, not yet written -> unsent."""
        self.channel, self._wire, self._connection = None, None, None
        self._overflow.clear()
        self._report_in_flight(unknown(reason))
        waiting = list(self._waiting) + [(seq, (ex, key, props, body)) for seq, ex, key, props, body in self._burst]
        self._waiting, self._burst = deque(), []
        if waiting:
            outcome = unsent(f"{reason} before the publish was sent")
            self._events.confirm_batch([(seq, outcome) for seq, _prepared in waiting])
