"""The asyncio side: aiormq (the engine under aio-pika) on the caller's loop.

aiormq is used directly rather than aio-pika's Exchange.publish, which awaits
each confirm and, with mandatory publishes, RETURNS an unroutable message
instead of raising unless ``on_return_raises`` is set. Here every publish is
a small task on a confirm channel opened with ``on_return_raises=True``; the
task turns Basic.Ack / Nack / Return / channel loss into exactly one outcome.

Generations follow the same rule as the sync side (see sync_side's doc).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import aiormq
import aiormq.exceptions as ae
from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from pamqp import commands as spec
from yarl import URL

from ackbridge.errors import ConnectionLostError, StaleDeliveryError
from ackbridge.messages import CONFIRMED, ConfirmOutcome, OutboundMessage, WireSettle, WireVerb, refused, unknown
from ackbridge_rabbitmq import common
from ackbridge_rabbitmq.errors import aiormq_error, describe

log = logging.getLogger("ackbridge.rabbitmq")


class _ASub:
    __slots__ = ("active", "channel", "generation", "name", "prefetch", "source")

    def __init__(self, name: str, source: str, prefetch: int) -> None:
        self.name = name
        self.source = source
        self.prefetch = prefetch
        self.channel: AbstractChannel | None = None
        self.generation = 0
        self.active = False


class AsyncSide:
    """Mixin of :class:`~ackbridge_rabbitmq.transport.RabbitTransport`: the ``*_async`` methods."""

    url: Any
    options: Any
    events: Any
    connection_name: str

    def _async_init(self) -> None:
        self._aconn: AbstractConnection | None = None
        self._apub: AbstractChannel | None = None
        self._asubs: dict[str, _ASub] = {}
        self._agen = 0
        self._astate = "new"
        self._atasks: set[asyncio.Task[Any]] = set()
        self._ainbox: str | None = None
        self._arelease: asyncio.Event | None = None
        self._aid_prefix = f"ab-{uuid.uuid4().hex[:12]}-"
        self._aquorum = common.option(self.options, "queue_type") == "quorum"

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._atasks.add(task)
        task.add_done_callback(self._atasks.discard)
        return task

    # ---- lifecycle --------------------------------------------------------------------------
    def _amqp_url(self) -> URL:
        ep = common.endpoint(self.url, self.options)
        return URL.build(
            scheme=self.url.scheme, user=ep.username, password=ep.password, host=ep.host, port=ep.port,
            path="/" + ep.vhost,
            query={"heartbeat": str(common.option(self.options, "heartbeat"))},
        )

    async def _aconnect(self) -> None:
        ep = common.endpoint(self.url, self.options)
        timeout = float(common.option(self.options, "connect_timeout"))
        try:
            conn = await asyncio.wait_for(aiormq.connect(
                self._amqp_url(), context=ep.tls,
                client_properties={"connection_name": self.connection_name, "product": "ackbridge"},
            ), timeout)
        except Exception as exc:
            raise ConnectionLostError(f"could not connect to {self.url.redacted}: {describe(exc)}") from None
        self._aconn = conn
        self._agen += 1
        self._apub = await conn.channel(publisher_confirms=True, on_return_raises=True)
        self._spawn(self._watch_pub(self._apub))
        for sub in list(self._asubs.values()):
            await self._aopen_sub(sub)
        if self._ainbox is not None:
            await self._aopen_inbox(self._ainbox)
        self._astate = "open"
        self._spawn(self._watch_connection(conn))

    async def open_async(self) -> None:
        if self._astate != "new":
            return
        await self._aconnect()

    async def close_async(self) -> None:
        if self._astate in ("new", "closed"):
            return
        self._astate = "closed"
        conn, self._aconn = self._aconn, None
        if conn is not None and not conn.is_closed:
            try:
                await conn.close()
            except Exception as exc:  # already broken: nothing left to close
                log.debug("ackbridge-rabbitmq: close: %s", describe(exc))
        for task in list(self._atasks):
            if task is not asyncio.current_task():
                task.cancel()

    async def _watch_connection(self, conn: AbstractConnection) -> None:
        try:
            await conn.closing
            reason: BaseException | None = None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            reason = exc
        if self._aconn is not conn or self._astate == "closed":
            return
        self._aconn = None
        self._apub = None
        for sub in self._asubs.values():
            sub.channel = None
        old = self._agen
        self._agen += 1
        why = f"connection lost ({describe(reason)})"
        log.warning("ackbridge-rabbitmq: %s: %s", self.url.redacted, why)
        self.events.generation_ended(old, why)
        if not common.option(self.options, "reconnect"):
            self._astate = "lost"
            return
        self._astate = "reconnecting"
        delay = 0.1
        limit = float(common.option(self.options, "reconnect_max_delay"))
        while self._astate == "reconnecting":
            await asyncio.sleep(delay)  # back-off between attempts, not a wait for state
            try:
                await self._aconnect()
                return
            except Exception as exc:
                log.info("ackbridge-rabbitmq: reconnect failed: %s", describe(exc))
                delay = min(delay * 2, limit)

    async def _watch_pub(self, ch: AbstractChannel) -> None:
        try:
            await ch.closing
            reason: BaseException | None = None
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            reason = exc
        if ch is not self._apub or self._astate != "open" or self._aconn is None or self._aconn.is_closed:
            return
        # Closed by the broker (e.g. 404 on an unknown exchange): its pending
        # publishes fail in their own tasks (unknown); open a fresh channel.
        log.warning("ackbridge-rabbitmq: publish channel closed: %s", describe(reason))
        self._apub = None
        try:
            self._apub = await self._aconn.channel(publisher_confirms=True, on_return_raises=True)
            self._spawn(self._watch_pub(self._apub))
        except Exception as exc:
            log.warning("ackbridge-rabbitmq: could not reopen the publish channel: %s", describe(exc))

    def _aconn_or_raise(self, doing: str) -> AbstractConnection:
        if self._aconn is None or self._aconn.is_closed or self._astate not in ("open", "new"):
            raise ConnectionLostError(f"{doing}: not connected to {self.url.redacted}")
        return self._aconn

    # ---- queues ------------------------------------------------------------------------------
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        doing = f"declare queue {name!r}"
        conn = self._aconn_or_raise(doing)
        try:
            ch = await conn.channel(publisher_confirms=False)
            if dead_letter:
                dlx, dlq = common.dead_letter_names(name)
                await ch.exchange_declare(dlx, exchange_type="fanout", durable=True)
                await ch.queue_declare(dlq, durable=True, arguments=common.dead_letter_queue_arguments(self.options))
                await ch.queue_bind(dlq, dlx, routing_key="")
            await ch.queue_declare(name, durable=True,
                                   arguments=common.queue_arguments(name, self.options, dead_letter=dead_letter))
            await ch.close()
        except Exception as exc:
            raise aiormq_error(exc, doing) from None

    # ---- consuming ---------------------------------------------------------------------------
    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        common.check_queue_name(source)  # a >255-byte name would end the connection (see the sync side)
        common.check_prefetch(prefetch)
        self._aconn_or_raise(f"subscribe to {source!r}")
        sub = _ASub(subscription, source, prefetch)
        self._asubs[subscription] = sub
        try:
            await self._aopen_sub(sub)
        except Exception as exc:
            self._asubs.pop(subscription, None)
            raise aiormq_error(exc, f"subscribe to {source!r}") from None

    async def _aopen_sub(self, sub: _ASub) -> None:
        conn = self._aconn
        if conn is None:
            return
        gen = self._agen
        sub.active = False
        ch = await conn.channel(publisher_confirms=False)
        sub.channel = ch
        sub.generation = gen
        await ch.basic_qos(prefetch_count=sub.prefetch)

        async def on_message(message: DeliveredMessage) -> None:
            if sub.channel is not ch:
                return  # channel being replaced: its close requeues this delivery
            delivery = message.delivery
            self.events.deliver(sub.name, common.inbound(
                tag=delivery.delivery_tag, generation=sub.generation, body=message.body, source=sub.source,
                props=message.header.properties, routing_key=delivery.routing_key,
                redelivered=bool(delivery.redelivered), quorum=self._aquorum))

        await ch.basic_consume(sub.source, on_message, no_ack=False)
        sub.active = True
        self._spawn(self._watch_sub(sub, ch))

    async def _watch_sub(self, sub: _ASub, ch: AbstractChannel) -> None:
        try:
            await ch.closing
            return  # closed by us
        except asyncio.CancelledError:
            raise
        except ae.ChannelClosed as exc:
            reason: BaseException = exc
        except BaseException:
            return  # connection-level: _watch_connection handles it
        if sub.channel is not ch or self._astate != "open" or self._aconn is None or self._aconn.is_closed:
            return
        # Same rule as the sync side: reopen every subscription channel on a new generation.
        why = f"channel of subscription {sub.source!r} closed by the broker ({describe(reason)})"
        old = self._agen
        self._agen += 1
        for other in self._asubs.values():
            chan, other.channel = other.channel, None
            if chan is not None and not chan.is_closed:
                await chan.close()
        self.events.generation_ended(old, why)
        for other in list(self._asubs.values()):
            try:
                await self._aopen_sub(other)
            except Exception as exc:
                log.warning("ackbridge-rabbitmq: could not resubscribe %r: %s", other.source, describe(exc))

    async def unsubscribe_async(self, subscription: str) -> None:
        sub = self._asubs.pop(subscription, None)
        if sub is None or sub.channel is None:
            return
        ch, sub.channel = sub.channel, None
        if not ch.is_closed:
            try:
                await ch.close()  # cancels the consumer; unacked deliveries return to the queue
            except Exception as exc:
                raise aiormq_error(exc, f"unsubscribe {subscription!r}") from None

    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        # Check every op before sending any: the loop is single-threaded, so
        # nothing can close a channel between this check and the writes below
        # except the writes' own awaits (then the op fails as stale).
        channels: list[AbstractChannel] = []
        for op in ops:
            sub = self._asubs.get(op.subscription)
            ch = sub.channel if sub is not None else None
            if (sub is None or ch is None or ch.is_closed or op.generation != self._agen
                    or sub.generation != op.generation):
                raise StaleDeliveryError(
                    f"settlement of delivery tag {op.wire_tag} from generation {op.generation} refused: its "
                    f"channel is gone (now generation {self._agen}); nothing was sent and the broker redelivers it")
            channels.append(ch)
        for op, ch in zip(ops, channels, strict=True):
            tag = int(op.wire_tag)  # type: ignore[call-overload]
            try:
                if op.verb is WireVerb.ACK:
                    await ch.basic_ack(tag, multiple=op.multiple, wait=False)
                elif op.verb is WireVerb.REQUEUE:
                    await ch.basic_nack(tag, multiple=op.multiple, requeue=True, wait=False)
                else:
                    await ch.basic_reject(tag, requeue=False, wait=False)
            except ae.ChannelInvalidStateError:
                raise StaleDeliveryError(
                    f"settlement of delivery tag {tag}: its channel closed meanwhile; nothing was sent") from None
            except Exception as exc:
                raise aiormq_error(exc, "settle") from None

    # ---- publishing ---------------------------------------------------------------------------
    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        ch = self._apub
        if self._astate != "open" or ch is None or ch.is_closed:
            raise ConnectionLostError(f"publish: {self.url.redacted} is not connected; nothing was sent")
        if not destination:
            self.events.confirm(seq, refused("no destination given"))
            return
        exchange, key = common.parse_destination(destination)
        fields = common.property_fields(message, message.message_id or f"{self._aid_prefix}{seq}")
        props = spec.Basic.Properties(**fields)
        self._spawn(self._publish_one(ch, seq, exchange, key, message.body, props))

    async def _publish_one(self, ch: AbstractChannel, seq: int, exchange: str, key: str, body: bytes,
                           props: spec.Basic.Properties) -> None:
        outcome: ConfirmOutcome
        try:
            if self._arelease is not None:
                await self._arelease.wait()
            result = await ch.basic_publish(body, exchange=exchange, routing_key=key, properties=props,
                                            mandatory=True)
            if isinstance(result, spec.Basic.Ack):
                outcome = CONFIRMED
            elif isinstance(result, spec.Basic.Nack):
                outcome = refused("the broker nacked the publish (Basic.Nack: internal error)")
            else:  # a returned message (only when on_return_raises is off): never "confirmed"
                outcome = refused("unroutable: returned by the broker")
        except ae.PublishError as exc:
            frame = exc.frame
            outcome = refused(f"unroutable: {getattr(frame, 'reply_code', '')} {getattr(frame, 'reply_text', '')} "
                              f"(exchange {exchange!r}, routing key {key!r})")
        except ae.DeliveryError:
            outcome = refused("the broker nacked the publish (Basic.Nack: internal error)")
        except asyncio.CancelledError:
            self.events.confirm(seq, unknown("publish cancelled (connection closing)"))
            raise
        except Exception as exc:
            outcome = unknown(f"channel or connection lost before the confirm ({describe(exc)})")
        self.events.confirm(seq, outcome)

    def hold_publishes_async(self, hold: bool) -> None:
        """Fault injection for tests (on the loop): park publishes until released."""
        if hold and self._arelease is None:
            self._arelease = asyncio.Event()
        elif not hold and self._arelease is not None:
            self._arelease.set()
            self._arelease = None

    # ---- replies ------------------------------------------------------------------------------
    async def open_reply_inbox_async(self) -> str:
        name = self._ainbox or f"ackbridge.reply.{uuid.uuid4().hex}"
        self._aconn_or_raise("open the reply inbox")
        try:
            await self._aopen_inbox(name)
        except Exception as exc:
            raise aiormq_error(exc, "open the reply inbox") from None
        self._ainbox = name
        return name

    async def _aopen_inbox(self, name: str) -> None:
        conn = self._aconn
        if conn is None:
            return
        ch = await conn.channel(publisher_confirms=False)
        # Client-named so the address survives a reconnect (exclusive queues die with the connection).
        await ch.queue_declare(name, exclusive=True, auto_delete=True)

        async def on_message(message: DeliveredMessage) -> None:
            delivery = message.delivery
            self.events.reply(common.inbound(
                tag=delivery.delivery_tag, generation=self._agen, body=message.body, source=name,
                props=message.header.properties, routing_key=delivery.routing_key,
                redelivered=bool(delivery.redelivered), quorum=False))

        await ch.basic_consume(name, on_message, no_ack=True)
