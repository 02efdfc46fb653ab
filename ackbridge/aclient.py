"""The asyncio twin of :mod:`ackbridge.client`: same classes, same method names.

Transport events may come from any thread; they are moved onto the event loop
before they touch any state here.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from ackbridge import labels as labels_mod
from ackbridge._base import (
    HANDLER_OWNS,
    ConnectionBase,
    DeliveryBase,
    drop_older_than,
    handler_failed,
    next_flush_wait,
    prepare_publish,
)
from ackbridge.capabilities import Verb
from ackbridge.client import _consumer_options, _needs_inbox, _publisher_options, _reply_for
from ackbridge.errors import AckbridgeError, ConfigurationError, InvalidLabelError, InvalidOptionError
from ackbridge.labels import AckCollector, AggregatedAcks, LabelAck, check_request
from ackbridge.messages import ConfirmOutcome, InboundMessage, WireSettle, WireVerb, unknown
from ackbridge.settlement import Ledger, Record
from ackbridge.transport import Transport
from ackbridge.urls import BrokerURL

_NO_ANSWER = "no answer from the broker within confirm_timeout"

log = logging.getLogger("ackbridge")

#: What a handler consumer is given: a function called with each delivery; it may
#: return an awaitable (an ``async def`` handler), which is awaited.
AsyncHandler = Callable[["AsyncDelivery"], Awaitable[object] | object]


class AsyncConfirm:
    """The broker's answer to one publish (awaitable via :meth:`result`)."""

    __slots__ = ("_acks", "_deadline", "_future", "correlation_id", "message_id", "seq")

    def __init__(self, seq: int, message_id: str | None, correlation_id: str | None, deadline: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.seq = seq
        self.message_id = message_id
        self.correlation_id = correlation_id
        self._deadline = deadline
        self._future: asyncio.Future[ConfirmOutcome] = loop.create_future()
        self._acks: _AsyncAckWaiter | None = None

    def _resolve(self, outcome: ConfirmOutcome) -> bool:
        if self._future.done():
            return False
        self._future.set_result(outcome)
        return True

    def done(self) -> bool:
        return self._future.done()

    @property
    def outcome(self) -> ConfirmOutcome | None:
        return self._future.result() if self._future.done() else None

    def add_done_callback(self, callback: Callable[[AsyncConfirm], None]) -> None:
        self._future.add_done_callback(lambda _f: callback(self))

    async def result(self, timeout: float | None = None) -> ConfirmOutcome:
        limit = self._deadline - time.monotonic()
        wait = limit if timeout is None else min(timeout, limit)
        try:
            return await asyncio.wait_for(asyncio.shield(self._future), max(wait, 0.0))
        except TimeoutError:
            if time.monotonic() >= self._deadline:
                self._resolve(unknown(_NO_ANSWER))
                return self._future.result()
            raise TimeoutError(f"publish {self.seq} not confirmed within {timeout} s") from None

    async def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        if self._acks is None:
            raise InvalidLabelError("this publish requested no acknowledgements (use requested_acks=...)")
        return await self._acks.wait(timeout)

    def __repr__(self) -> str:
        state = self.outcome.status.value if self.outcome else "pending"
        return f"<AsyncConfirm seq={self.seq} id={self.message_id!r} {state}>"


class _AsyncAckWaiter:
    def __init__(self, collector: AckCollector, changed: asyncio.Condition) -> None:
        self.collector = collector
        self.changed = changed

    async def wait(self, timeout: float | None) -> AggregatedAcks:
        limit = self.collector.deadline
        if timeout is not None:
            limit = min(limit, time.monotonic() + timeout)
        async with self.changed:
            while not self.collector.complete:
                left = limit - time.monotonic()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(self.changed.wait(), left)
                except TimeoutError:
                    break
        return self.collector.result()


class AsyncDelivery(DeliveryBase):
    __slots__ = ("_consumer",)

    def __init__(self, record: Record, broker: str, consumer: AsyncConsumer) -> None:
        super().__init__(record, broker)
        self._consumer = consumer

    async def ack(self) -> None:
        await self._consumer._settle(self, WireVerb.ACK)

    async def requeue(self) -> None:
        await self._consumer._settle(self, WireVerb.REQUEUE)

    async def nack(self, requeue: bool = True) -> None:
        await self._consumer._settle(self, WireVerb.REQUEUE if requeue else WireVerb.REJECT)

    async def reject(self) -> None:
        await self._consumer._settle(self, WireVerb.REJECT)

    async def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> AsyncConfirm:
        return await self._consumer._connection._issue_ack(self, label, status, payload, internal=False)


class AsyncConsumer:
    """Deliveries from one source. Iterate it, or await :meth:`get`; or, when it
    was made with a ``handler``, the handler is awaited with each delivery."""

    def __init__(self, connection: AsyncConnection, subscription: str, source: str, ledger: Ledger,
                 conflate_ms: float, handler: AsyncHandler | None = None) -> None:
        self._connection = connection
        self._handler = handler
        self.subscription = subscription
        self.source = source
        self._ledger = ledger
        self._ready: deque[AsyncDelivery] = deque()
        self._arrived = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._closed = False
        self._timer: asyncio.Task[None] | None = None
        if conflate_ms > 0:
            self._timer = asyncio.get_running_loop().create_task(self._flush_on_time())
        self._runner: asyncio.Task[None] | None = None
        if handler is not None:
            self._runner = asyncio.get_running_loop().create_task(self._run_handler(handler))

    async def get(self, timeout: float | None = None) -> AsyncDelivery | None:
        """The next delivery, or None when *timeout* passes (or the consumer closes)."""
        if self._handler is not None:
            raise ConfigurationError(HANDLER_OWNS)
        return await self._next(timeout)

    async def _next(self, timeout: float | None) -> AsyncDelivery | None:
        end = None if timeout is None else time.monotonic() + timeout
        while not self._ready:
            if self._closed:
                return None
            self._arrived.clear()
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return None
        return self._ready.popleft()

    async def __aiter__(self) -> AsyncIterator[AsyncDelivery]:
        while True:
            delivery = await self.get()
            if delivery is None:
                return
            yield delivery

    async def ack_through(self, delivery: AsyncDelivery) -> None:
        self._connection.capabilities.require(Verb.CUMULATIVE_ACK)
        async with self._send_lock:
            await self._send(self._ledger.ack_through(delivery._record))

    async def flush(self) -> None:
        async with self._send_lock:
            await self._send(self._ledger.flush())

    @property
    def unsettled(self) -> int:
        return self._ledger.unsettled

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self.flush()
        except AckbridgeError:
            pass  # the connection is gone; the broker will redeliver
        self._closed = True
        self._ready.clear()
        self._arrived.set()
        if self._timer is not None:
            self._timer.cancel()
        # The handler runner sees the closed flag and ends by itself (close() may be
        # awaited from inside the handler, so it is never awaited here).
        await self._connection._drop_consumer(self)

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _settle(self, delivery: AsyncDelivery, verb: WireVerb) -> None:
        if verb is WireVerb.REQUEUE:
            self._connection.capabilities.require(Verb.REQUEUE)
        elif verb is WireVerb.REJECT:
            self._connection.capabilities.require(Verb.REJECT)
        # Decide and send under one lock: cumulative acks must reach the wire in order.
        async with self._send_lock:
            await self._send(self._ledger.settle(delivery._record, verb))

    async def _send(self, ops: list[WireSettle]) -> None:
        if ops:
            await self._connection._transport.settle_async(ops)

    def _on_message(self, message: InboundMessage) -> None:
        if self._closed:
            return
        record = self._ledger.receive_simple(message)
        if record is None:
            admission = self._ledger.receive(message)
            if admission.new_generation:
                # It may arrive before generation_ended does.
                drop_older_than(self._ready, message.generation)
            if admission.reject:
                self._connection._spawn(self._send_locked(admission.reject))
            record = admission.record
            if record is None:
                return
        self._ready.append(AsyncDelivery(record, self._connection.broker, self))
        self._arrived.set()

    async def _run_handler(self, handler: AsyncHandler) -> None:
        # One delivery at a time, in arrival order, as the sync twin does.
        while True:
            delivery = await self._next(None)
            if delivery is None:
                return
            try:
                result = handler(delivery)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                verb = handler_failed(self._connection.capabilities, self.source, delivery)
                if verb is not None:
                    try:
                        await self._settle(delivery, verb)
                    except AckbridgeError as exc:
                        log.warning("ackbridge could not settle the failed message: %s", exc)

    async def _send_locked(self, ops: list[WireSettle]) -> None:
        async with self._send_lock:
            await self._send(ops)

    def _on_generation_end(self, generation: int) -> None:
        self._ledger.generation_ended(generation)
        drop_older_than(self._ready, generation + 1)

    @property
    def dead_lettered_by_policy(self) -> int:
        """Poison messages dead-lettered by ``max_deliveries`` instead of handed out."""
        return self._ledger.dead_lettered_by_policy

    async def _flush_on_time(self) -> None:
        while not self._closed:
            deadline = self._ledger.deadline()
            left = 0.05 if deadline is None else deadline - time.monotonic()
            if left > 0:
                await asyncio.sleep(min(left, 0.05))
                continue
            async with self._send_lock:
                try:
                    await self._send(self._ledger.due())
                except AckbridgeError:
                    pass  # stale or lost: the broker redelivers


class AsyncPublisher:
    def __init__(self, connection: AsyncConnection, window: int, confirm_timeout: float) -> None:
        self._connection = connection
        self.window = window
        self._confirm_timeout = confirm_timeout
        self._pending: dict[int, AsyncConfirm] = {}
        self._changed = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def publish(
        self,
        destination: str,
        body: bytes,
        *,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        content_type: str | None = None,
        persistent: bool = True,
        requested_acks: Iterable[str] | None = None,
        ack_timeout: float = 10.0,
    ) -> AsyncConfirm:
        conn = self._connection
        wants_labels = requested_acks is not None
        if requested_acks is not None:
            requested_acks = check_request(requested_acks)
            conn.capabilities.require(Verb.LABELLED_ACKS)
        inbox = await conn._inbox() if wants_labels and _needs_inbox(requested_acks) else None
        prepared = prepare_publish(
            body, headers=headers, message_id=message_id, correlation_id=correlation_id,
            reply_to=reply_to, content_type=content_type, persistent=persistent,
            requested_acks=requested_acks, inbox=inbox,
        )
        await self._wait_for_room()
        seq = conn._next_seq()
        msg = prepared.message
        confirm = AsyncConfirm(seq, msg.message_id, msg.correlation_id,
                               time.monotonic() + self._confirm_timeout, conn._loop)
        if wants_labels:
            assert msg.correlation_id is not None
            confirm._acks = conn._collect(msg.correlation_id, prepared.all_labels, ack_timeout, confirm)
        self._pending[seq] = confirm
        conn._publishers[seq] = self
        try:
            await conn._transport.publish_async(seq, destination, msg)
        except AckbridgeError as exc:
            self._resolved(seq, unknown(str(exc)))
            raise
        return confirm

    async def _wait_for_room(self) -> None:
        while len(self._pending) >= self.window:
            oldest = next(iter(self._pending.values()))
            left = oldest._deadline - time.monotonic()
            if left <= 0:
                self._expire()
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass

    def _expire(self) -> None:
        now = time.monotonic()
        for confirm in [c for c in self._pending.values() if c._deadline <= now]:
            del self._pending[confirm.seq]
            confirm._resolve(unknown(_NO_ANSWER))
        self._changed.set()

    def _resolved(self, seq: int, outcome: ConfirmOutcome) -> None:
        confirm = self._pending.pop(seq, None)
        self._changed.set()
        if confirm is not None:
            confirm._resolve(outcome)

    async def flush(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while self._pending:
            wait = next_flush_wait(next(iter(self._pending.values()))._deadline, end, time.monotonic())
            if wait is None:
                return False
            if wait == 0.0:
                self._expire()
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass
        return True


class AsyncConnection(ConnectionBase):
    def __init__(self, url: BrokerURL, transport_type: type[Transport], options: Mapping[str, Any],
                 transport_options: Mapping[str, Any]) -> None:
        self.url = url
        self._options = dict(options)
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._transport = transport_type(url, transport_options, self)
        self._seq = itertools.count(1)
        self._consumers: dict[str, AsyncConsumer] = {}
        self._publishers: dict[int, AsyncPublisher] = {}
        self._default_publisher: AsyncPublisher | None = None
        self._inbox_address: str | None = None
        self._inbox_lock = asyncio.Lock()
        self._collect_changed = asyncio.Condition()
        self._collectors: dict[str, AckCollector] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<ackbridge.AsyncConnection {self.url.redacted}>"

    async def open(self) -> AsyncConnection:
        await self._transport.open_async()
        return self

    async def close(self) -> None:
        if self._closed:
            return
        for consumer in list(self._consumers.values()):
            await consumer.close()
        for publisher in {id(p): p for p in self._publishers.values()}.values():
            await publisher.flush(timeout=5.0)
        self._closed = True
        await self._transport.close_async()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        await self._transport.declare_queue_async(name, dead_letter=dead_letter)

    async def consume(self, source: str, *, prefetch: int | None = None, conflate_count: int | None = None,
                      conflate_ms: float | None = None, max_deliveries: int | None = None,
                      handler: AsyncHandler | None = None) -> AsyncConsumer:
        """Subscribe to *source*; see :meth:`ackbridge.client.Connection.consume`. With
        *handler*, it is called with each delivery, one at a time in arrival order, on
        the event loop, and what it returns is awaited if it is awaitable."""
        if handler is not None and not callable(handler):
            raise InvalidOptionError(f"handler must be callable, not {type(handler).__name__}")
        opts = _consumer_options(self._options, prefetch, conflate_count, conflate_ms, max_deliveries)
        if opts["max_deliveries"] is not None:
            self.capabilities.require(Verb.DELIVERY_COUNT)
            self.capabilities.require(Verb.REJECT)
        subscription = f"sub-{uuid.uuid4().hex[:12]}"
        ledger = Ledger(subscription, self.capabilities, conflate_count=opts["conflate_count"],
                        conflate_ms=opts["conflate_ms"], max_deliveries=opts["max_deliveries"])
        consumer = AsyncConsumer(self, subscription, source, ledger, opts["conflate_ms"], handler)
        self._consumers[subscription] = consumer
        await self._transport.subscribe_async(subscription, source, prefetch=opts["prefetch"])
        return consumer

    def publisher(self, *, window: int | None = None, confirm_timeout: float | None = None) -> AsyncPublisher:
        opts = _publisher_options(self._options, window, confirm_timeout)
        return AsyncPublisher(self, opts["window"], opts["confirm_timeout"])

    async def publish(self, destination: str, body: bytes, **kwargs: Any) -> AsyncConfirm:
        if self._default_publisher is None:
            self._default_publisher = self.publisher()
        return await self._default_publisher.publish(destination, body, **kwargs)

    async def flush(self, timeout: float | None = None) -> bool:
        if self._default_publisher is None:
            return True
        return await self._default_publisher.flush(timeout)

    # ---- TransportEvents (any thread) -------------------------------------------
    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def deliver(self, subscription: str, message: InboundMessage) -> None:
        self._on_loop(self._deliver, subscription, message)

    def _deliver(self, subscription: str, message: InboundMessage) -> None:
        consumer = self._consumers.get(subscription)
        if consumer is not None:
            consumer._on_message(message)

    def confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        self._on_loop(self._confirm, seq, outcome)

    def _confirm(self, seq: int, outcome: ConfirmOutcome) -> None:
        publisher = self._publishers.pop(seq, None)
        if publisher is not None:
            publisher._resolved(seq, outcome)

    def generation_ended(self, generation: int, reason: str) -> None:
        self._on_loop(self._generation_ended, generation)

    def _generation_ended(self, generation: int) -> None:
        for consumer in list(self._consumers.values()):
            consumer._on_generation_end(generation)

    def reply(self, message: InboundMessage) -> None:
        self._on_loop(self._reply, message)

    def _reply(self, message: InboundMessage) -> None:
        ack = labels_mod.parse_reply(message)
        if ack is not None and message.correlation_id is not None:
            self._add_ack(message.correlation_id, ack)

    # ---- internals ------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _next_seq(self) -> int:
        return next(self._seq)

    async def _drop_consumer(self, consumer: AsyncConsumer) -> None:
        self._consumers.pop(consumer.subscription, None)
        try:
            await self._transport.unsubscribe_async(consumer.subscription)
        except AckbridgeError:
            pass  # connection already gone

    async def _inbox(self) -> str:
        async with self._inbox_lock:
            if self._inbox_address is None:
                self._inbox_address = await self._transport.open_reply_inbox_async()
            return self._inbox_address

    def _collect(self, correlation_id: str, labels: tuple[str, ...], timeout: float,
                 confirm: AsyncConfirm) -> _AsyncAckWaiter:
        self.capabilities.require(Verb.LABELLED_ACKS)
        collector = AckCollector(correlation_id, labels, time.monotonic() + timeout)
        self._collectors[correlation_id] = collector
        if labels_mod.BROKER_PERSISTED in labels:
            def persisted(c: AsyncConfirm) -> None:
                outcome = c.outcome
                self._add_ack(correlation_id, LabelAck(
                    labels_mod.BROKER_PERSISTED,
                    labels_mod.confirm_status(outcome) if outcome else 503,
                    outcome.reason if outcome and outcome.reason else None,
                ))
            confirm.add_done_callback(persisted)
        return _AsyncAckWaiter(collector, self._collect_changed)

    def _add_ack(self, correlation_id: str, ack: LabelAck) -> None:
        collector = self._collectors.get(correlation_id)
        if collector is None or not collector.add(ack):
            return
        if collector.complete:
            del self._collectors[correlation_id]
        self._spawn(self._notify_acks())

    async def _notify_acks(self) -> None:
        async with self._collect_changed:
            self._collect_changed.notify_all()

    async def _issue_ack(self, delivery: DeliveryBase, label: str, status: int, payload: Any, *,
                         internal: bool) -> AsyncConfirm:
        reply = _reply_for(delivery, label, status, payload, internal)
        return await self.publish(delivery.reply_to or "", reply.body, headers=reply.headers,
                                  correlation_id=reply.correlation_id, content_type=reply.content_type,
                                  persistent=False)
