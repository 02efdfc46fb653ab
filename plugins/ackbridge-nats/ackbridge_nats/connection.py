"""The asyncio transport: nats-py on the caller's event loop.

Maps the core's operations onto one :class:`~ackbridge_nats.link.Link` (the
connection and its generations), one
:class:`~ackbridge_nats.receiving.PullSubscription` per consumer and one
:class:`~ackbridge_nats.sending.Publishes` (PubAck answers). Settlements
are plain publishes to the delivery's reply subject.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import uuid
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from ackbridge.errors import InvalidOptionError
from ackbridge.kernel.generations import check_generation, check_ops
from ackbridge.messages import ACK as ACK_VERB
from ackbridge.messages import REQUEUE as REQUEUE_VERB
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle, WireVerb, refused
from ackbridge.transport import AsyncTransport, TransportEvents
from ackbridge.transport.held_work import HeldWork
from ackbridge.transport.loop_thread import LoopThreadTransport, call_on_loop
from ackbridge.urls import BrokerURL
from ackbridge_nats import codec, fastpath, queues, wire
from ackbridge_nats.capabilities import CAPABILITIES
from ackbridge_nats.dead_letters import dead_letter
from ackbridge_nats.errors import nats_error
from ackbridge_nats.link import Link, describe, seconds_ns
from ackbridge_nats.naming import check_subject
from ackbridge_nats.options import OPTIONS, NatsSettings
from ackbridge_nats.receiving import NAK, PROGRESS, PullSubscription
from ackbridge_nats.sending import Publishes
from ackbridge_nats.settle_queue import SettleQueue

log = logging.getLogger("ackbridge.nats")

ACK = b"+ACK"
Prepared = tuple[str, bytes, dict[str, str] | None]


class NatsAsyncTransport(AsyncTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.nats = NatsSettings.resolve(url, options, self.settings)
        self.link = Link(url, self.nats, self._up, self._lost)
        self.publishes = Publishes(events.confirm)
        self.subs: dict[str, PullSubscription] = {}
        self.reply_inbox: str | None = None
        #: Deliveries of closed consumers not released yet (the connection was down): on the next one.
        self.unreleased: list[str] = []
        #: close(leave_unsettled=True): consumers stop without releasing what the application took.
        self.leaving = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        self.held = HeldWork(events, lambda: self.generation)
        #: nats-py's internals in use (fastpath.py): deliveries and settlements past its per-message API.
        self.fast_path = fastpath.enabled()
        #: Settlements are queued (checked) and one writer task writes the queue from the next loop turn:
        #: the asyncio face settles one delivery per call, and a write per call cost more than the rest
        #: of its settle path. NatsSyncTransport turns it off: its drain hands over whole runs already.
        self.settles_without_waiting = True
        self.settles = SettleQueue(lambda: self.link.client, lambda client, ops: self.apply(client, ops))
        self._nak = NAK if not self.nats.requeue_delay else (
            NAK + b" " + json.dumps({"delay": seconds_ns(self.nats.requeue_delay)}).encode())
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def generation(self) -> int:
        return self.link.generation

    def __repr__(self) -> str:
        return f"<NatsAsyncTransport {self.url.redacted} generation={self.generation}>"

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- generations ----------------------------------------------------------------------
    async def _up(self, client: Client, generation: int) -> None:
        await self.publishes.start(client)
        for sub in list(self.subs.values()):
            earlier = list(sub.outstanding)
            await sub.start(client, generation)
            await sub.release(client, earlier)  # the old generation's deliveries come back now
        orphans, self.unreleased = self.unreleased, []
        for reply in orphans:
            await client.publish(reply, NAK)
        if self.reply_inbox is not None:
            await self._open_inbox(client, self.reply_inbox)

    def _lost(self, generation: int, reason: str) -> None:
        self.settles.drop()
        self.held.lost(reason)
        self.publishes.lost(reason)
        self.events.generation_ended(generation, reason)

    # ---- lifecycle ----------------------------------------------------------------------------
    async def open_async(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.link.open()

    async def close_async(self) -> None:
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
        if self.leaving:
            self.unreleased = []  # left to the broker with the rest
        elif self.unreleased or any(sub.outstanding for sub in self.subs.values()):
            # Deliveries of a lost generation are released by the reconnect: let one under way finish,
            # or they come back only after ack_wait.
            await self.link.wait_reconnected(self.settings.connect_timeout)
        subs = list(self.subs.values())
        self.subs.clear()
        # Only a consumer holding deliveries needs its pull requests to end before it releases them.
        for left in await asyncio.gather(*(sub.stop(wait=bool(sub.outstanding) or self.leaving, leave=self.leaving)
                                           for sub in subs), return_exceptions=True):
            if isinstance(left, list):
                self.unreleased.extend(left)
        if self.unreleased:
            log.warning("ackbridge-nats: %d deliveries could not be released (connection down): JetStream "
                        "redelivers them after ack_wait", len(self.unreleased))
        await self.link.close()
        self.publishes.lost("connection closed")
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    # ---- queues and consumers -------------------------------------------------------------
    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        doing = f"declare queue {name!r}"
        client = self.link.require(doing)
        try:
            await queues.declare(client, name, self.nats, dead_letter=dead_letter)
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        check_subject(source, "queue")
        doing = f"subscribe to {source!r}"
        client = self.link.require(doing)
        try:
            stream = await queues.find_stream(client, source)
            await queues.ensure_consumer(client, stream, source, self.nats,
                                         max_ack_pending=self.nats.max_ack_pending or prefetch)
            sub = PullSubscription(subscription, source, stream, self.nats.durable, prefetch,
                                   self.nats.pull_expires, self.events.deliver, direct=self.fast_path)
            self.subs[subscription] = sub
            await sub.start(client, self.generation)
        except Exception as exc:
            self.subs.pop(subscription, None)
            raise nats_error(exc, doing, self.url) from None

    async def unsubscribe_async(self, subscription: str) -> None:
        # Settlements queued before this go out first: the stop releases (-NAKs) what is unsettled.
        await self.settles.written()
        sub = self.subs.pop(subscription, None)
        if sub is not None:
            # In the background: the release waits for the consumer's open pull requests to end.
            # (even one holding nothing: deliveries may be on the way to its open request).
            task = asyncio.get_running_loop().create_task(self._stop(sub))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _stop(self, sub: PullSubscription) -> None:
        self.unreleased.extend(await sub.stop(leave=self.leaving))

    # ---- settling -----------------------------------------------------------------------------
    async def settle_async(self, ops: Sequence[WireSettle]) -> None:
        client = self._checked(ops)
        if client is None:
            return
        if self.settles_without_waiting:
            self.settles.add(client, ops)
        else:
            await self.apply(client, ops)

    def settle_nowait(self, ops: Sequence[WireSettle]) -> None:
        client = self._checked(ops)
        if client is not None:
            self.settles.add(client, ops)

    def _checked(self, ops: Sequence[WireSettle]) -> Client | None:
        """The client *ops* go out on (raises when one is stale or the link is down); None
        when the fault seam holds them."""
        link = self.link
        check_ops(ops, link.generation)
        client = link.client
        if client is None or not client.is_connected:
            check_ops(ops, None, "the connection is down")
        return None if self.held.keep_settle(ops) else client

    async def apply(self, client: Client, ops: Sequence[WireSettle]) -> None:
        touched: list[PullSubscription] = []
        confirms: list[Coroutine[Any, Any, Any]] = []
        publishes: list[tuple[str, bytes]] = []  # +ACK and -NAK, in order, written together (wire.py)
        subs = self.subs
        double_ack = self.nats.double_ack
        nak = self._nak
        last: PullSubscription | None = None
        for op in ops:
            tag = str(op.wire_tag)
            sub = subs.get(op.subscription)
            if sub is not None:
                sub.settled(tag)
                if sub is not last and sub not in touched:
                    touched.append(sub)
                last = sub
            verb = op.verb  # compared with module constants: a WireVerb.X read costs ~0.4 us (messages.py)
            if verb is ACK_VERB:
                if double_ack:
                    confirms.append(client.request(tag, ACK, timeout=self.settings.connect_timeout))
                else:
                    publishes.append((tag, ACK))
            elif verb is REQUEUE_VERB:
                publishes.append((tag, nak))
            else:
                self.spawn(dead_letter(client, op, self.nats.dead_letter_template, self.settings.connect_timeout,
                                       nak))
        if publishes:
            await wire.publish_all(client, publishes, direct=self.fast_path)
        if confirms:
            for result in await asyncio.gather(*confirms, return_exceptions=True):
                if isinstance(result, BaseException):
                    log.warning("ackbridge-nats: an ack was not confirmed by the server (%s); JetStream "
                                "redelivers the message after ack_wait if it was lost", describe(result))
        for sub in touched:
            if sub.credit_to_ask():
                await sub.top_up()

    # ---- connection-free acks (the core checked verb and repeats: ackbridge.engine.handles) ----------
    async def settle_handles_async(self, handles: Sequence[str], verb: WireVerb) -> None:
        for handle in handles:
            if not handle.startswith(codec.ACK_PREFIX):
                raise InvalidOptionError("a NATS ack handle is a delivery's JetStream reply subject "
                                         f"({codec.ACK_PREFIX}...); nothing was sent")
        doing = f"settle {len(handles)} deliveries by handle"
        client = self.link.require(doing)
        body = ACK if verb is WireVerb.ACK else self._nak
        try:
            for handle in handles:
                await client.publish(handle, body)
            await client.flush(timeout=max(1, math.ceil(self.settings.connect_timeout)))
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None

    async def leave_unsettled_async(self) -> None:
        self.leaving = True
        # The core -NAKs next what its consumers received and never handed out. Settling
        # frees credit, and a subscription still receiving would ask for it again at once:
        # JetStream sends the -NAKed messages straight back into that request, to consumers
        # about to close, which drop them, and a leaving stop releases only what arrived
        # after it began -- so they sat pending until ack_wait. From here nothing more is
        # asked for or handed to the core; what still arrives is released by the stop.
        for sub in self.subs.values():
            sub.closed = True

    # ---- leases (the core checked the delivery is pending: ackbridge.engine.leases) -----------------
    async def extend_lease_async(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        client = self.link.client
        # No live connection is no live generation: the core's rule words the error.
        live = client is not None and client.is_connected
        check_generation(generation, self.generation if live else None,
                         "this delivery" if live else "this delivery (the connection is down)")
        assert client is not None
        doing = "extend a delivery's ack_wait (+WPI)"
        try:
            await client.publish(str(wire_tag), PROGRESS)
            # Flushed before returning: the deadline is pushed back once extend() returns.
            await client.flush(timeout=max(1, math.ceil(self.settings.connect_timeout)))
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None
        return self.nats.ack_wait

    async def inspect_queue_async(self, name: str) -> QueueInfo:
        check_subject(name, "queue")
        doing = f"inspect queue {name!r}"
        client = self.link.require(doing)
        try:
            return await queues.inspect(client, name, self.nats)
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None

    async def delete_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        check_subject(name, "queue")
        doing = f"delete queue {name!r}"
        client = self.link.require(doing)
        try:
            await queues.delete(client, name, self.nats, dead_letter=dead_letter)
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None

    async def purge_queue_async(self, name: str) -> int | None:
        check_subject(name, "queue")
        doing = f"purge queue {name!r}"
        client = self.link.require(doing)
        try:
            return await queues.purge(client, name)
        except Exception as exc:
            raise nats_error(exc, doing, self.url) from None

    # ---- publishing ---------------------------------------------------------------------------
    def prepare(self, destination: str, message: OutboundMessage) -> Prepared:
        """Check *message* before anything is sent (raises InvalidOptionError for bad
        headers); the arguments of :meth:`send_prepared` after ``seq``."""
        return destination, message.body, codec.headers_for(message)

    async def publish_async(self, seq: int, destination: str, message: OutboundMessage) -> None:
        await self.send_prepared(seq, *self.prepare(destination, message))

    async def send_prepared(self, seq: int, subject: str, body: bytes, headers: dict[str, str] | None) -> None:
        try:
            check_subject(subject, "destination")
        except InvalidOptionError as exc:
            self.events.confirm(seq, refused(f"not sent: {exc}"))
            return
        if not self.held.keep_publish(seq, subject, body, headers):
            await self.publishes.send(seq, subject, body, headers)

    # ---- labelled-ack replies -------------------------------------------------------------
    async def open_reply_inbox_async(self) -> str:
        if self.reply_inbox is not None:
            return self.reply_inbox
        client = self.link.require("open the reply inbox")
        inbox = f"_INBOX.ackbridge-reply-{uuid.uuid4().hex}"
        try:
            await self._open_inbox(client, inbox)
        except Exception as exc:
            raise nats_error(exc, "open the reply inbox", self.url) from None
        self.reply_inbox = inbox
        return inbox

    async def _open_inbox(self, client: Client, inbox: str) -> None:
        async def on_reply(msg: Msg) -> None:
            if msg.reply:
                await client.publish(msg.reply, b"")  # the issuer's confirm: the reply reached its inbox
            self.events.reply(codec.inbound(msg, self.generation, inbox))

        await client.subscribe(inbox, cb=on_reply)

    # ---- the declared fault seam (TransportBase); callable from any thread ----------------------
    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        call_on_loop(self.loop, fn, *args)

    def sever(self, reason: str) -> None:
        self.on_loop(self.link.sever, reason)

    def hold_publishes(self, hold: bool) -> None:
        self.on_loop(self._hold_publishes, hold)

    def hold_writes(self, hold: bool) -> None:
        self.on_loop(self._hold_writes, hold)
        self.on_loop(self._hold_publishes, hold)

    def _hold_publishes(self, hold: bool) -> None:
        for seq, prepared in self.held.hold_publishes(hold):
            self.spawn(self.publishes.send(seq, *prepared))

    def _hold_writes(self, hold: bool) -> None:
        live = self.held.hold_writes(hold)
        client = self.link.client
        if live and client is not None:
            self.spawn(self.apply(client, live))


class NatsSyncTransport(LoopThreadTransport):
    """The blocking transport: :class:`NatsAsyncTransport` on an event loop of its own
    thread (nats-py is asyncio-only); the hand-off lives in :mod:`ackbridge.transport.loop_thread`."""

    capabilities = CAPABILITIES
    option_specs = OPTIONS
    inner_type = NatsAsyncTransport

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.inner.settles_without_waiting = False  # the drain on the loop hands settle_async whole runs already
