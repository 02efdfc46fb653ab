"""The asyncio face's publisher and its confirms (see :mod:`ackbridge.aio.connection`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Unpack

from ackbridge import contract
from ackbridge.engine import plans
from ackbridge.engine.publisher import NO_ANSWER, ConfirmBase, PublisherBase, build_message, left_to_wait, wait_limit
from ackbridge.errors import AckbridgeError
from ackbridge.kernel import guaranteed
from ackbridge.kernel.labels import AckCollector, AggregatedAcks
from ackbridge.keywords import PublishOptions
from ackbridge.messages import ConfirmOutcome, OutboundMessage, unknown, unsent

if TYPE_CHECKING:
    from ackbridge.aio.connection import AsyncConnection


class AsyncConfirm(ConfirmBase, contract.AsyncConfirm):
    """The broker's answer to one publish. ``await confirm`` gives its
    :class:`~ackbridge.ConfirmOutcome` (as ``await confirm.result()`` does)."""

    __slots__ = ("_future",)
    _acks: _AsyncAckWaiter | None
    #: Set for a guaranteed publish: its expiry may send it again instead of resolving it.
    _publisher: AsyncPublisher | None

    def __init__(self, seq: int, message: OutboundMessage, deadline: float, loop: asyncio.AbstractEventLoop,
                 attempts: guaranteed.Attempts | None, publisher: AsyncPublisher | None = None) -> None:
        ConfirmBase.__init__(self, publisher, seq, message, attempts)
        self._deadline = deadline
        self._future: asyncio.Future[ConfirmOutcome] = loop.create_future()

    def _resolve(self, outcome: ConfirmOutcome) -> bool:
        if self._outcome is not None:
            return False
        self._outcome = outcome
        self._future.set_result(outcome)
        return True

    def add_done_callback(self, callback: Callable[[AsyncConfirm], None]) -> None:
        """Call *callback(confirm)* on the loop once the outcome is known."""
        self._future.add_done_callback(lambda _f: callback(self))

    def __await__(self) -> Generator[Any, None, ConfirmOutcome]:
        return self.result().__await__()

    async def result(self, timeout: float | None = None) -> ConfirmOutcome:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            limit = self._deadline - now
            wait = limit if end is None else min(end - now, limit)
            try:
                return await asyncio.wait_for(asyncio.shield(self._future), max(wait, 0.0))
            except TimeoutError:
                if time.monotonic() >= self._deadline:
                    if self._publisher is not None:
                        self._publisher._expire()  # a guaranteed publish may go again
                    else:
                        self._resolve(unknown(NO_ANSWER))
                    if self._future.done():
                        return self._future.result()
                    continue
                raise TimeoutError(f"publish {self.seq} not confirmed within {timeout} s") from None

    async def wait_acks(self, timeout: float | None = None) -> AggregatedAcks:
        waiter: _AsyncAckWaiter = self._requested_acks()
        return await waiter.wait(timeout)


class _AsyncAckWaiter:
    def __init__(self, collector: AckCollector, changed: asyncio.Condition) -> None:
        self.collector = collector
        self.changed = changed

    async def wait(self, timeout: float | None) -> AggregatedAcks:
        limit = wait_limit(self.collector.deadline, timeout)
        async with self.changed:
            while (left := left_to_wait(self.collector, limit)) is not None:
                try:
                    await asyncio.wait_for(self.changed.wait(), left)
                except TimeoutError:
                    break
        return self.collector.result()


class AsyncPublisher(PublisherBase, contract.AsyncPublisher):
    """Publishes with confirms on an asyncio connection, at most ``window`` unconfirmed at once."""

    _connection: AsyncConnection

    def _init_waiting(self) -> None:
        self._retry_handle: asyncio.TimerHandle | None = None
        self._changed = asyncio.Event()

    async def publish(self, destination: str, body: bytes, **options: Unpack[PublishOptions]) -> AsyncConfirm:
        conn = self._connection
        labels = self._labels(options) if options and "requested_acks" in options else None
        inbox = await conn._inbox() if labels is not None and plans.needs_inbox(labels) else None
        msg, attempts = build_message(body, options, labels, inbox), None
        if self._guarantee is not None:
            msg, attempts = self._guaranteed(destination, msg)
        await self._wait_for_room()
        seq = next(conn._seq)
        confirm = AsyncConfirm(seq, msg, time.monotonic() + self._confirm_timeout, conn._loop, attempts,
                               self if attempts is not None else None)
        if self._observer is not None:  # one check per publish when nothing records
            self._observe(confirm, destination, msg)
        if labels is not None:
            assert msg.correlation_id is not None
            confirm._acks = conn._collect(msg.correlation_id, labels, options.get("ack_timeout", 10.0), confirm)
        self._pending[seq] = confirm
        await self._send(seq, destination, msg, again=False)
        return confirm

    async def _send(self, seq: int, destination: str, msg: OutboundMessage, *, again: bool) -> None:
        conn = self._connection
        conn._publishers[seq] = self
        try:
            await conn._transport.publish_async(seq, destination, msg)
        except AckbridgeError as exc:
            self._send_failed(seq, exc, again)

    async def _wait_for_room(self) -> None:
        while self.in_flight >= self.window:
            left = self._oldest()._deadline - time.monotonic()
            if left <= 0:
                self._expire()
                continue
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass

    def _expire(self) -> None:
        for confirm, outcome in self._take_expired(time.monotonic()):
            self._finish(confirm, outcome)
        self._changed.set()

    def _resolved(self, seq: int, outcome: ConfirmOutcome) -> None:
        confirm = self._pending.pop(seq, None)
        self._changed.set()
        if confirm is not None:
            self._finish(confirm, outcome)

    def _finish(self, confirm: AsyncConfirm, outcome: ConfirmOutcome) -> None:
        final = self._final(confirm, outcome)
        if final is None:
            self._schedule_retry(confirm)
        else:
            confirm._resolve(final)

    # ---- retransmission (retransmit=True) --------------------------------------------------
    def _schedule_retry(self, confirm: AsyncConfirm) -> None:
        self._due_retry(confirm)
        self._retry.append(confirm)
        if self._retry_handle is None:
            loop = self._connection._loop
            self._retry_handle = loop.call_later(self._backoff.next_delay(),
                                                 lambda: loop.create_task(self._resend()))

    async def _resend(self) -> None:
        self._retry_handle = None
        self._start_resend()
        while True:  # in the order they were first published
            seq = next(self._connection._seq)
            taken = self._next_resend(seq, time.monotonic())
            if taken is None:
                return
            confirm, attempts = taken
            if attempts is None:
                self._finish(confirm, unsent("not sent again"))
            else:
                await self._send(seq, attempts.destination, attempts.message, again=True)

    async def flush(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while (wait := self._flush_wait(end)) is not None:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass
        return not self.in_flight
