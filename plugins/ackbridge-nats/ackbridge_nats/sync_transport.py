"""The blocking transport: the asyncio transport on an event loop of its own thread.

nats-py is asyncio-only, so the sync face runs :class:`NatsAsyncTransport` on
a private loop (one I/O thread per connection, as paho and proton run theirs).
Steps that wait for the server (open, declare, subscribe) are run there and
waited for. ``settle`` and ``publish`` never wait: they are checked on the
caller's thread (stale generation, bad headers), put on one queue in call
order, and a single drain task on the loop writes them; a settlement that
loses the race with a loss there is dropped, not applied (the contract's rule).
Called on the I/O thread itself (a handler acking inside ``deliver``) they
queue the same way and return.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from ackbridge.errors import ConnectionLostError, StaleDeliveryError
from ackbridge.generations import check_ops
from ackbridge.messages import OutboundMessage, WireSettle, unknown
from ackbridge.transport import SyncTransport, TransportEvents
from ackbridge.urls import BrokerURL
from ackbridge_nats.async_transport import NatsAsyncTransport
from ackbridge_nats.capabilities import CAPABILITIES
from ackbridge_nats.link import describe
from ackbridge_nats.options import OPTIONS

log = logging.getLogger("ackbridge.nats")

#: Waits for the loop beyond connect_timeout (a subscribe makes a few API requests).
_SLACK = 5.0


class NatsSyncTransport(SyncTransport):
    capabilities = CAPABILITIES
    option_specs = OPTIONS

    def __init__(self, url: BrokerURL, options: Mapping[str, Any], events: TransportEvents) -> None:
        super().__init__(url, options, events)
        self.inner = NatsAsyncTransport(url, options, events)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ackbridge-nats-io", daemon=True)
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._queue_lock = threading.Lock()
        self._draining = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<NatsSyncTransport {self.url.redacted} generation={self.generation}>"

    @property
    def generation(self) -> int:
        return self.inner.generation

    def _on_io_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def _run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run *coro* on the loop and wait for it (from the I/O thread: start it and return)."""
        if self._closed or not self._thread.is_alive():
            coro.close()
            raise ConnectionLostError(f"{self.url.redacted}: not open")
        if self._on_io_thread():
            self.inner.spawn(coro)
            return None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout or self.settings.connect_timeout + _SLACK)

    # ---- SyncTransport --------------------------------------------------------------------
    def open(self) -> None:
        self._thread.start()
        try:
            self._run(self.inner.open_async())
        except BaseException:
            self._stop_loop()
            raise

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._thread.is_alive() and not self._on_io_thread():
                asyncio.run_coroutine_threadsafe(self._close_after_drain(), self.loop).result(
                    self.settings.connect_timeout + _SLACK)
            elif self._on_io_thread():
                self.inner.spawn(self._close_after_drain())
                self._closed = True
                return
        except Exception as exc:
            log.debug("ackbridge-nats: close: %s", describe(exc))
        self._closed = True
        self._stop_loop()

    async def _close_after_drain(self) -> None:
        await self._drain()
        await self.inner.close_async()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if not self._on_io_thread():
                self._thread.join(timeout=10)

    def declare_queue(self, name: str, *, dead_letter: bool = True) -> None:
        self._run(self.inner.declare_queue_async(name, dead_letter=dead_letter))

    def subscribe(self, subscription: str, source: str, *, prefetch: int) -> None:
        self._run(self.inner.subscribe_async(subscription, source, prefetch=prefetch))

    def unsubscribe(self, subscription: str) -> None:
        # In call order with settlements: an ack queued before it must leave first
        # (else the delivery would be released with -NAK and come back).
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._enqueue(("u", subscription, done))
        if not self._on_io_thread():
            done.result(self.settings.connect_timeout + _SLACK)

    def open_reply_inbox(self) -> str:
        if self.inner.reply_inbox is not None:
            return self.inner.reply_inbox
        inbox = self._run(self.inner.open_reply_inbox_async())
        if inbox is None:
            raise ConnectionLostError("the reply inbox cannot be opened from the connection's own I/O thread")
        return str(inbox)

    # ---- the hot path: queued, never waited for ------------------------------------------
    def settle(self, ops: Sequence[WireSettle]) -> None:
        check_ops(ops, self.inner.generation)
        self._enqueue(("s", ops))

    def publish(self, seq: int, destination: str, message: OutboundMessage) -> None:
        subject, headers = self.inner.prepare(destination, message)
        self._enqueue(("p", seq, subject, message.body, headers))

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        with self._queue_lock:
            self._queue.append(item)
            if self._draining:
                return
            self._draining = True
        self.loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.inner.spawn(self._drain())

    async def _drain(self) -> None:
        queue = self._queue
        while True:
            with self._queue_lock:
                if not queue:
                    self._draining = False
                    return
                item = queue.popleft()
            try:
                if item[0] == "s":
                    await self.inner.settle_async(item[1])
                elif item[0] == "u":
                    try:
                        await self.inner.unsubscribe_async(item[1])
                    finally:
                        item[2].set_result(None)
                else:
                    await self.inner.send_prepared(item[1], item[2], item[3], item[4])
            except StaleDeliveryError:
                pass  # lost the race with a loss: dropped, the server redelivers
            except Exception as exc:
                log.warning("ackbridge-nats: %s failed on the I/O thread: %s",
                            "settle" if item[0] == "s" else "publish", describe(exc))
                if item[0] == "p":
                    self.events.confirm(item[1], unknown(f"publish failed: {describe(exc)}"))

    # ---- fault seam -----------------------------------------------------------------------
    def sever(self, reason: str) -> None:
        self.inner.sever(reason)

    def hold_publishes(self, hold: bool) -> None:
        self.inner.hold_publishes(hold)

    def hold_writes(self, hold: bool) -> None:
        self.inner.hold_writes(hold)
