"""The asyncio face's consumer and its deliveries (see :mod:`ackbridge.aio.connection`)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ackbridge import contract
from ackbridge.engine import handles
from ackbridge.engine.consumer import HANDLER_OWNS, ConsumerBase, DeliveryBase, settle_failed
from ackbridge.engine.draining import Drain, DrainResult, report
from ackbridge.engine.leases import extended
from ackbridge.errors import AckbridgeError, ConfigurationError, StaleDeliveryError
from ackbridge.kernel.guaranteed import ConsumerGuard
from ackbridge.kernel.interruptions import DRAIN_S, interrupted
from ackbridge.kernel.settlement import BatchResult, Ledger
from ackbridge.messages import ACK, InboundMessage, WireSettle, WireVerb

if TYPE_CHECKING:
    from ackbridge.aio.connection import AsyncConnection
    from ackbridge.aio.publisher import AsyncConfirm

log = logging.getLogger("ackbridge")

#: What a handler consumer is given: a function called with each delivery; it may
#: return an awaitable (an ``async def`` handler), which is awaited.
AsyncHandler = Callable[["AsyncDelivery"], Awaitable[object] | object]


class AsyncDelivery(DeliveryBase, contract.AsyncDelivery):
    """A received message (asyncio face). Settle it exactly once: await ack, requeue/nack or reject."""

    __slots__ = ()
    _consumer: AsyncConsumer

    async def ack(self) -> None:
        # The per-message verb: settled at once where it can be, with no coroutine of its own.
        waiting = self._consumer._settle_now(self, ACK)
        if waiting is not None:
            await waiting

    async def requeue(self) -> None:
        await self._consumer._settle(self, WireVerb.REQUEUE)

    async def nack(self, requeue: bool = True) -> None:
        await self._consumer._settle(self, WireVerb.REQUEUE if requeue else WireVerb.REJECT)

    async def reject(self) -> None:
        await self._consumer._settle(self, WireVerb.REJECT)

    async def acknowledge(self, label: str, status: int = 200, payload: Any = None) -> AsyncConfirm:
        return await self._consumer._connection.issue_ack(self, label, status, payload)

    async def extend(self) -> float | None:
        consumer = self._consumer
        tag, generation = consumer._check_extend(self)
        granted = await consumer._connection._transport.extend_lease_async(consumer.subscription, tag, generation)
        extended(consumer._ledger, consumer.source)
        return granted

    @contextlib.asynccontextmanager
    async def process(self, *, requeue: bool = False) -> AsyncIterator[AsyncDelivery]:
        try:
            yield self
        except Exception:
            if not self.settled and not self.stale:
                await (self.requeue() if requeue else self.reject())
            raise
        except BaseException:
            # A cancelled task, Ctrl-C, sys.exit: the work was stopped, not failed,
            # so the message goes back to the queue (see interruptions.py).
            await self._consumer._hand_back(self)
            raise
        if not self.settled and not self.stale:
            await self.ack()


class AsyncConsumer(ConsumerBase, contract.AsyncConsumer):
    """Deliveries from one source. Iterate it, or await :meth:`get`; or, when it
    was made with a ``handler``, the handler is awaited with each delivery."""

    _connection: AsyncConnection

    def __init__(self, connection: AsyncConnection, subscription: str, source: str, ledger: Ledger,
                 conflate_ms: float, handler: AsyncHandler | None = None,
                 guard: ConsumerGuard | None = None) -> None:
        super().__init__(subscription, source, ledger, guard)
        self._connection = connection
        self._broker = connection.broker  # read per delivery: one attribute, not two properties
        self._handler = handler
        self._ready: deque[AsyncDelivery] = deque()
        self._arrived = asyncio.Event()
        self._send_lock = asyncio.Lock()
        transport = connection._transport
        #: The transport's settle_nowait where settling never waits: a settlement made while
        #: no send is under way skips the lock's round trip and the coroutine chain (issue 39).
        self._settle_nowait = transport.settle_nowait if transport.settles_without_waiting else None
        self._timer: asyncio.Task[None] | None = None
        if conflate_ms > 0:
            self._timer = asyncio.get_running_loop().create_task(self._flush_on_time())
        self._runner: asyncio.Task[None] | None = None
        #: Set once a drain() has closed the consumer (close() meanwhile waits for it).
        self._drain_done: asyncio.Event | None = None
        self._drain_result = DrainResult()
        #: Set by each settlement while a drain() waits for the deliveries in flight.
        self._settled_while_closed = asyncio.Event()
        if handler is not None:
            self._runner = asyncio.get_running_loop().create_task(self._run_handler(handler))

    async def get(self, timeout: float | None = None) -> AsyncDelivery | None:
        if self._handler is not None:
            raise ConfigurationError(HANDLER_OWNS)
        if self._ready:  # most calls: a delivery is waiting
            return self._ready.popleft()
        return await self._next(timeout)

    async def _next(self, timeout: float | None) -> AsyncDelivery | None:
        end = None if timeout is None else time.monotonic() + timeout
        while not self._ready:
            if self._closed:
                return None
            if self._failure is not None:
                raise self._failure
            self._arrived.clear()
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                # asyncio.timeout, not wait_for: wait_for wraps the wait in a task of its own.
                async with asyncio.timeout(left):
                    await self._arrived.wait()
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
        async with self._send_lock:
            await self._send(self._decide_through(delivery._record))
        self._settled_while_closed.set()

    async def flush(self) -> None:
        async with self._send_lock:
            await self._send(self._ledger.flush())

    async def settle_batch(self, deliveries: Sequence[AsyncDelivery], verb: WireVerb = WireVerb.ACK) -> BatchResult:
        async with self._send_lock:
            ops, result = self._plan_batch(deliveries, verb)
            await self._send(ops)
        self._settled_while_closed.set()
        return result

    async def drain(self, timeout: float = DRAIN_S) -> DrainResult:
        if self._closed:
            await self._await_drain()  # another drain() (or close()) is under way
            return self._drain_result
        self._closed = True
        done = self._drain_done = asyncio.Event()
        drain = Drain(self._ledger, self._ready, timeout, self.source)
        self._arrived.set()
        runner = self._runner
        if runner is not None and runner is not asyncio.current_task() and not runner.done():
            try:
                await asyncio.wait({runner}, timeout=drain.left())
            except BaseException:
                done.set()  # cancelled while waiting: close() must not wait for this drain
                raise
        settled = self._settled_while_closed
        try:
            while drain.in_flight() and drain.left() > 0:
                settled.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(settled.wait(), drain.left())
            result = self._drain_result = drain.result()
            await self._close_ledger()
        finally:
            done.set()
        report(self._ledger, self.source, self._broker, self._connection._transport.generation, result)
        return result

    async def _await_drain(self) -> None:
        # The runner must not wait: the drain is waiting for it.
        done = self._drain_done
        if done is not None and self._runner is not asyncio.current_task():
            await done.wait()

    async def close(self) -> None:
        if self._closed:
            await self._await_drain()
            return
        # Nothing more is handed out; what was received and not handed out goes
        # back to the broker with the subscription.
        self._closed = True
        self._ready.clear()
        self._arrived.set()
        runner = self._runner
        if runner is not None and runner is not asyncio.current_task() and not runner.done():
            # Drain: the delivery the handler holds may still be settled (the runner
            # ends by itself once it sees the closed flag).
            done, _ = await asyncio.wait({runner}, timeout=DRAIN_S)
            if not done:
                log.warning("ackbridge: the handler of %r did not finish within %.0f s of close(); its delivery "
                            "returns to the broker and settling it will raise ConsumerClosedError",
                            self.source, DRAIN_S)
        await self._close_ledger()

    async def _close_ledger(self) -> None:
        try:
            await self.flush()
        except AckbridgeError:
            pass  # the connection is gone; the broker will redeliver
        # From here on a settlement raises ConsumerClosedError: the unsubscribe below
        # hands every undecided delivery back to the broker.
        self._ledger.close()
        if self._timer is not None:
            self._timer.cancel()
        await self._connection._drop_consumer(self)

    async def _release_untaken(self) -> None:
        """``close(leave_unsettled=True)``: requeue what was received and never handed out."""
        async with self._send_lock:
            try:
                await self._send(handles.release_untaken(self._ledger, self._ready))
            except AckbridgeError:
                pass  # the connection is gone: the broker redelivers them

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _settle(self, delivery: AsyncDelivery, verb: WireVerb) -> None:
        waiting = self._settle_now(delivery, verb)
        if waiting is not None:
            await waiting

    def _settle_now(self, delivery: AsyncDelivery, verb: WireVerb) -> Coroutine[Any, Any, None] | None:
        """Settle *delivery* at once where the transport settles without waiting and no
        send is under way (None); else the coroutine that settles it behind the send lock."""
        nowait = self._settle_nowait
        if nowait is None or self._send_lock.locked():
            return self._settle_locked(delivery, verb)
        # Nothing is being sent: this settlement's ops reach the wire after every
        # earlier one's without waiting, so the lock has nothing to order.
        ops = self._decide(delivery._record, verb)
        if ops:
            try:
                nowait(ops)
            except StaleDeliveryError:
                self._undecide(delivery._record, ops)
                raise
        if self._closed:
            self._settled_while_closed.set()
        return None

    async def _settle_locked(self, delivery: AsyncDelivery, verb: WireVerb) -> None:
        # Decide and send under one lock: cumulative acks must reach the wire in order.
        async with self._send_lock:
            ops = self._decide(delivery._record, verb)
            try:
                await self._send(ops)
            except StaleDeliveryError:
                self._undecide(delivery._record, ops)
                raise
        if self._closed:
            self._settled_while_closed.set()  # a drain() waits for the deliveries in flight

    async def _hand_back(self, delivery: AsyncDelivery) -> None:
        """Requeue (or leave) a delivery whose work was interrupted; never raises."""
        verb = interrupted(self._connection.capabilities, delivery)
        if verb is not None:
            with contextlib.suppress(AckbridgeError):
                await self._settle(delivery, verb)

    async def _send(self, ops: list[WireSettle]) -> None:
        if ops:
            await self._connection._transport.settle_async(ops)

    def _on_message(self, message: InboundMessage) -> None:
        if self._closed:
            return
        record, reject = self._admit(message)
        if reject:
            self._connection._spawn(self._send_locked(reject))
        if record is None:
            self._arrived.set()  # a get() waiting sees a failure the admission set
            return
        self._ready.append(AsyncDelivery(record, self._broker, self))
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
                verb = self._handler_failed(delivery)
                if verb is not None:
                    try:
                        await self._settle(delivery, verb)
                    except AckbridgeError as exc:
                        settle_failed(delivery, exc)
            except BaseException:
                # Cancelled (the loop is shutting down) or sys.exit in the handler:
                # hand the delivery back, never dead-letter it.
                await self._hand_back(delivery)
                raise

    async def _send_locked(self, ops: list[WireSettle]) -> None:
        async with self._send_lock:
            await self._send(ops)

    def _on_failure(self, error: AckbridgeError) -> None:
        self._failure = error
        self._arrived.set()

    def _on_generation_end(self, generation: int) -> None:
        self._end_generation(generation)
        self._settled_while_closed.set()  # what a drain() waited for went stale

    async def _flush_on_time(self) -> None:
        while not self._closed:
            wait = self._ledger.flush_wait()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            async with self._send_lock:
                try:
                    await self._send(self._ledger.due())
                except AckbridgeError:
                    pass  # stale or lost: the broker redelivers
