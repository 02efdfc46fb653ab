"""The asyncio face of the AMQP 1.0 transport.

The core's :class:`~ackbridge.transport.ThreadedAsyncTransport` serves asyncio
over the sync transport with a worker thread per waiting call. The steps that
wait for an attach (declare, subscribe, the reply inbox) already answer
through a future completed on the container thread, so here they are awaited
directly: no worker thread sits blocked while the broker answers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import TypeVar

from ackbridge.transport import ThreadedAsyncTransport
from ackbridge_amqp10.connection import Amqp10Transport
from ackbridge_amqp10.options import OPTIONS

T = TypeVar("T")


class Amqp10AsyncTransport(ThreadedAsyncTransport):
    sync_type = Amqp10Transport
    option_specs = OPTIONS
    sync: Amqp10Transport

    async def _await(self, future: Future[T], what: str) -> T:
        timeout = self.sync.settings.connect_timeout
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise self.sync.container.no_answer(what) from None

    async def declare_queue_async(self, name: str, *, dead_letter: bool = True) -> None:
        sync = self.sync
        address = sync.declare_address(name, dead_letter=dead_letter)
        await self._await(sync.container.call(lambda f: sync.declare(address, f)), f"the attach of {address!r}")

    async def subscribe_async(self, subscription: str, source: str, *, prefetch: int) -> None:
        await self._await(self.sync.subscribe_future(subscription, source, prefetch), f"the attach of {source!r}")

    async def open_reply_inbox_async(self) -> str:
        return await self._await(self.sync.inbox_future(), "the attach of the reply inbox")
