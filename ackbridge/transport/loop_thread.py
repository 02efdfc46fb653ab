"""An event loop on a thread of its own (:class:`LoopThread`), and a sync transport
over an asyncio one: the plugin's async transport on such a loop (the counterpart
of :class:`~ackbridge.transport.ThreadedAsyncTransport`).

For asyncio-only clients (nats-py, rstream) the sync face runs the plugin's
:class:`~ackbridge.transport.AsyncTransport` on a private loop, one I/O thread
per connection (as paho and proton run theirs). Steps that wait for the broker
(open, declare, subscribe, topology) are run there and waited for. ``settle``
and ``publish`` never wait: they are checked on the caller's thread (stale
generation, bad headers), put on one queue in call order, and one drain task
on the loop writes them, for the transport's life. Items queued while the drain
has not yet found the queue empty share its wake-up (a write to the loop's
self-pipe); consecutive settlements go out in one ``settle_async`` call. A
settlement that loses the race with a loss there is dropped, not applied (the
transport contract's rule). ``unsubscribe`` goes
through the same queue, so an ack given before it leaves before the consumer
ends. Called on the I/O thread itself (a handler acking inside ``deliver``)
they queue the same way and return.

The async transport offers, beside its contract, three things this needs:

* ``spawn(coro)``: run *coro* as a task of its loop, kept until done;
* ``prepare(destination, message) -> tuple``: check *message* on the
  caller's thread (raise for what cannot be sent) and return the arguments of
* ``send_prepared(seq, *prepared)``: put it on the wire, confirm through events.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from ackbridge.capabilities import CANNOT_TELL, DeadLetterTarget
from ackbridge.errors import ConnectionLostError, StaleDeliveryError
from ackbridge.kernel.generations import check_ops
from ackbridge.messages import OutboundMessage, QueueInfo, WireSettle, WireVerb, unsent
from ackbridge.transport import AsyncTransport, ForwardedFaults, SyncTransport, TransportEvents
from ackbridge.transport.leftovers import cancel_leftovers
from ackbridge.urls import BrokerURL, redact

log = logging.getLogger("ackbridge")

T = TypeVar("T")


class LoopThread:
    """One asyncio event loop running on a daemon thread of its own: what an
    asyncio-only client needs behind a blocking face (a sync transport, an offset
    log), since its connection must keep running between calls (heartbeats, reads)."""

    def __init__(self, name: str, *, start: bool = True) -> None:
        self.loop = asyncio.new_event_loop()
        self._close_when_stopped = False
        self.thread = threading.Thread(target=self._run_forever, name=name, daemon=True)
        if start:
            self.thread.start()

    def start(self) -> None:
        self.thread.start()

    def _run_forever(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            cancel_leftovers(self.loop)
            # Closed here, by the thread that ran it, when stop() could not: stop() called from
            # the loop itself, or a join that timed out. A loop left open holds its selector's
            # socket pair until a garbage collection finds it (a ResourceWarning then).
            if self._close_when_stopped and not self.loop.is_closed():
                self.loop.close()

    def on_loop(self) -> bool:
        """True when called from the loop's own thread (where waiting for it would deadlock)."""
        return threading.get_ident() == self.thread.ident

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run *coro* on the loop and wait for its result (TimeoutError after *timeout* s)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start *coro* on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, timeout: float = 5.0, *, close: bool = True) -> None:
        """Stop the loop and, unless called from it, join its thread. With *close*, the
        loop is closed once stopped: here after the join, or by its own thread when
        called from the loop or when the join timed out. Stopping twice is harmless."""
        if self.loop.is_closed():
            return
        self._close_when_stopped = close
        if self.thread.is_alive():
            # One more turn before stopping: a transport closed in the current turn finishes
            # closing its socket in the next one (a loop stopped first leaves it open).
            self.loop.call_soon_threadsafe(self.loop.call_soon, self.loop.stop)
        if self.thread.ident is None:  # never started (an open that failed early)
            if close:
                self.loop.close()
            return
        if self.on_loop():
            return
        self.thread.join(timeout)
        if close and not self.thread.is_alive():
            self.loop.close()

#: Waits for the loop beyond connect_timeout (a subscribe may make a few requests).
_SLACK = 5.0


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., Any], *args: Any) -> None:
    """Call *fn* on *loop*: at once when already on it (or when there is no loop
    yet), else scheduled there from this thread (a fault seam called from a test)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise
        # The connection closed its loop: nothing is left there to act on.


def _describe(exc: BaseException) -> str:
    """*exc* for a log line or an outcome: its type and text, any credentials hidden."""
    text = redact(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class LoopInner(Protocol):
    """What :class:`LoopThreadTransport` needs of the async transport beyond its contract."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    def prepare(self, destination: str, message: OutboundMessage) -> tuple[Any, ...]: ...

    async def send_prepared(self, seq: int, *prepared: Any) -> None: ...


class LoopThreadTransport(ForwardedFaults, SyncTransport):
    """Subclass with ``inner_type`` (the plugin's async transport, a :class:`LoopInner`),
    ``capabilities`` and ``option_specs``."""

    inner_type: ClassVar[type[AsyncTransport]]

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.inner: Any = self.inner_type(url, options, events)
        self.wrapped = self.inner
        self._io = LoopThread(f"ackbridge-{self.capabilities.broker}-io", start=False)
        self.loop = self._io.loop
        self._thread = self._io.thread
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._queue_lock = threading.Lock()
        #: Set by the enqueue that sends a wake-up, cleared by the drain only when it finds
        #: the queue empty (both under _queue_lock): meanwhile no other wake-up is sent.
        self._awake = False
        #: On the loop only: the drain task, and the future it sleeps on when the queue is empty.
        self._drainer: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url.redacted} generation={self.generation}>"

    @property
    def generation(self) -> int:
        return int(self.inner.generation)

    def _on_io_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def _run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run *coro* on the loop and wait for it (from the I/O thread: start it and return None)."""
        if self._closed or not self._thread.is_alive():
            coro.close()
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        if self._on_io_thread():
            self.inner.spawn(coro)
            return None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        wait = timeout or self.settings.connect_timeout + _SLACK
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ConnectionLostError(f"{self.url.redacted}: no answer from the broker within {wait:.0f} s") from None

    # ---- SyncTransport ------------------------------------------------------------------------
    def open(self) -> None:
        self._io.start()
        try:
            self._run(self.inner.open_async(), self.settings.connect_timeout * 2 + _SLACK)
        except BaseException:
            self._stop_loop()
            raise

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._on_io_thread():
                self.inner.spawn(self._close_after_drain())
                self._closed = True
                return
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._close_after_drain(), self.loop).result(
                    self.settings.connect_timeout + _SLACK)
        except Exception as exc:
            log.debug("ackbridge: closing %s: %s", self.url.redacted, _describe(exc))
        self._closed = True
        self._stop_loop()

    async def _close_after_drain(self) -> None:
        # What was queued before close() is written first, in order. What comes while the
        # inner transport closes is still taken (written, or refused as on a lost connection)
        # until the last mark, where the drain ends: no task is left on the loop it stops.
        await self._mark(last=False)
        try:
            await self.inner.close_async()
        finally:
            await self._mark(last=True)

    async def _mark(self, *, last: bool) -> None:
        """Queue a mark and wait until the drain reaches it (all queued before it written)."""
        reached: asyncio.Future[None] = self.loop.create_future()
        self._enqueue(("x", reached, last))
        await reached

    def _stop_loop(self) -> None:
        # Closed (its self-pipe sockets released); a late call from a fault seam or a
        # publish after close finds it closed and is dropped (call_on_loop, _enqueue).
        self._io.stop(timeout=10)

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._run(self.inner.declare_queue_async(name, dead_letter=dead_letter))

    def delete_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._run(self.inner.delete_queue_async(name, dead_letter=dead_letter))

    def purge_queue(self, name: str) -> int | None:
        count = self._run(self.inner.purge_queue_async(name))
        return None if count is None else int(count)

    def inspect_queue(self, name: str) -> QueueInfo:
        info = self._run(self.inner.inspect_queue_async(name))
        if info is None:
            raise ConnectionLostError("a queue cannot be inspected from the connection's own I/O thread")
        return info  # type: ignore[no-any-return]

    def dead_letter_target(self, source: str) -> DeadLetterTarget:
        found = self._run(self.inner.dead_letter_target_async(source))
        return CANNOT_TELL if found is None else found

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        self._run(self.inner.subscribe_async(subscription, source, prefetch=prefetch))

    def unsubscribe(self, subscription: str) -> None:
        # In call order with settlements: an ack queued before it must leave first
        # (else the delivery would come back).
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._enqueue(("u", subscription, done))
        if not self._on_io_thread():
            done.result(self.settings.connect_timeout + _SLACK)

    def settle_handles(self, handles: Sequence[str], verb: WireVerb) -> None:
        if self._on_io_thread():
            raise ConnectionLostError("settle_handles() waits for the broker: not from the connection's own I/O thread")
        self._run(self.inner.settle_handles_async(handles, verb))

    def leave_unsettled(self) -> None:
        self._run(self.inner.leave_unsettled_async())

    def extend_lease(self, subscription: str, wire_tag: Hashable, generation: int) -> float | None:
        if self._on_io_thread():
            raise ConnectionLostError("extend() waits for the broker: not from the connection's own I/O thread")
        granted = self._run(self.inner.extend_lease_async(subscription, wire_tag, generation))
        return None if granted is None else float(granted)

    def open_reply_inbox(self) -> str:
        inbox = self._run(self.inner.open_reply_inbox_async())
        if inbox is None:
            raise ConnectionLostError("the reply inbox cannot be opened from the connection's own I/O thread")
        return str(inbox)

    # ---- the hot path: queued, never waited for ------------------------------------------------
    def settle(self, ops: Sequence[WireSettle]) -> None:
        check_ops(ops, self.inner.generation)
        self._enqueue(("s", ops))

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        self._enqueue(("p", seq, self.inner.prepare(destination, message)))

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        with self._queue_lock:
            self._queue.append(item)
            if self._awake:
                return  # the drain has not yet seen the queue empty: it takes this one too
            self._awake = True
        # The one wake-up of a burst: a write to the loop's self-pipe from another thread.
        try:
            if self._on_io_thread():
                self.loop.call_soon(self._wake)
            else:
                self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:
            if not self.loop.is_closed():
                raise
            # Closed: the item stays queued and is never sent, as on a stopped loop.

    def _wake(self) -> None:
        # On the loop. The first wake-up starts the drain; each later one ends its wait.
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
        elif self._drainer is None:
            self._drainer = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        """The one writer of queued items, in call order, for the transport's life: it
        ends at the last mark :meth:`_close_after_drain` queues."""
        queue = self._queue
        while True:
            with self._queue_lock:
                items = list(queue)
                queue.clear()
                if not items:
                    # Cleared only here, the queue seen empty under the lock: what is queued
                    # after this wakes the drain, what was queued before was taken.
                    self._awake = False
                    waiter = self._waiter = self.loop.create_future()
            if not items:
                await waiter
                continue
            for item in _merged(items):
                if item[0] == "x":
                    if not item[1].done():  # a close that timed out cancelled its wait
                        item[1].set_result(None)
                    if item[2]:
                        return
                    continue
                await self._write(item)

    async def _write(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        try:
            if kind == "s":
                await self.inner.settle_async(item[1])
            elif kind == "u":
                try:
                    await self.inner.unsubscribe_async(item[1])
                finally:
                    item[2].set_result(None)
            else:
                await self.inner.send_prepared(item[1], *item[2])
        except StaleDeliveryError:
            pass  # lost the race with a loss: dropped, the broker delivers it again
        except ConnectionLostError as exc:
            # An outage: expected, and a line per message would flood the log (the
            # connection's loss and its reconnects are logged by the plugin).
            log.debug("ackbridge: not sent on %s: %s", self.url.redacted, _describe(exc))
            if kind == "p":
                self.events.confirm(item[1], unsent(f"not sent: {_describe(exc)}"))
        except Exception as exc:
            what = {"s": "settle", "u": "unsubscribe"}.get(kind, "publish")
            log.warning("ackbridge: %s failed on the I/O thread of %s: %s", what, self.url.redacted,
                        _describe(exc))
            if kind == "p":
                self.events.confirm(item[1], unsent(f"not sent: {_describe(exc)}"))


def _merged(items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """*items* with each run of settlements of one generation joined into one: one
    ``settle_async`` call writes them all. A stale generation drops its run whole,
    as it would drop each; runs of two generations stay apart."""
    out: list[tuple[Any, ...]] = []
    run: list[WireSettle] = []  # the ops of out[-1] when it is a run being joined
    for item in items:
        ops = item[1] if item[0] == "s" else None
        if ops and run and run[0].generation == ops[0].generation:
            run.extend(ops)
            continue
        run = list(ops) if ops else []
        out.append(("s", run) if ops else item)
    return out
