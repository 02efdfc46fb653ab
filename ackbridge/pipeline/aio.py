"""The pipeline on the asyncio face: the twin of :mod:`ackbridge.pipeline.sync`, the
same names, the waits awaited. The rules (the policy's plan, throttle, breaker) are
the same objects; only the waiting differs (a held retry waits in a task of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Unpack

from ackbridge.aio.connection import AsyncConnection
from ackbridge.aio.consumer import AsyncConsumer, AsyncDelivery
from ackbridge.capabilities import RetryMethod, Topology
from ackbridge.errors import AckbridgeError, BrokerError, ConfigurationError, HandlerTimeoutError
from ackbridge.kernel.settlement import PENDING
from ackbridge.keywords import ConsumeOptions
from ackbridge.messages import ConfirmStatus
from ackbridge.pipeline import headers as h
from ackbridge.pipeline.copies import FinishedAttempts
from ackbridge.pipeline.holding import Held
from ackbridge.pipeline.policy import Exhausted, Plan, RedeliveryPolicy, Step
from ackbridge.pipeline.report import Report
from ackbridge.pipeline.stages import CircuitBreaker, Throttle

log = logging.getLogger("ackbridge.pipeline")
ATTEMPT = h.ATTEMPT  # a global, not a module attribute, on the per-delivery path

Handler = Callable[[AsyncDelivery], Awaitable[object] | object]


class Pipeline:
    """See :class:`ackbridge.pipeline.sync.Pipeline`; here a timed-out handler is
    cancelled (the cancellation is the failure the policy sees)."""

    def __init__(self, connection: AsyncConnection, queue: str, *, policy: RedeliveryPolicy | None = None,
                 timeout: float | None = None, throttle: Throttle | None = None,
                 breaker: CircuitBreaker | None = None, confirm_wait: float = 30.0) -> None:
        self.connection = connection
        self.queue = queue
        self.policy = policy or RedeliveryPolicy()
        self.timeout = timeout
        self.throttle = throttle
        self.breaker = breaker
        self.confirm_wait = confirm_wait
        self.report = Report(connection.capabilities.broker, queue)
        self._finished = FinishedAttempts()
        self._dead_letter: str | None = None
        self._closing = asyncio.Event()
        self._consumers: list[AsyncConsumer] = []
        #: Holding (see ackbridge.pipeline.holding): the handler and each held delivery's task.
        self._holding: Handler | None = None
        self._held: set[asyncio.Task[bool]] = set()

    # ---- public -------------------------------------------------------------
    async def consume(self, handler: Handler, **options: Unpack[ConsumeOptions]) -> AsyncConsumer:
        """See :meth:`ackbridge.pipeline.sync.Pipeline.consume`."""
        delays = self.policy.delay_queues(self.queue)
        if delays:
            # Never silently weaker: a broker that cannot hold a retry back refuses the policy.
            self.connection.capabilities.require_retry()
        await self._check_dead_letter_queue()
        if delays and self.connection.capabilities.retry_method is RetryMethod.HOLDING:
            self._holding = handler
            delays = []
        for name in delays:
            await self.connection.declare_queue(name)
            self._consumers.append(await self.connection.consume(name, handler=self._pump, prefetch=1))

        # A partial handing over handle()'s coroutine, not a coroutine awaiting it: one
        # coroutine less per delivery (the consumer awaits what its handler returns), and
        # called from C, no lambda frame either.
        main = await self.connection.consume(self.queue, handler=functools.partial(self.handle, handler=handler),
                                             **options)
        self._consumers.append(main)
        return main

    async def handle(self, delivery: AsyncDelivery, handler: Handler) -> None:
        """See :meth:`ackbridge.pipeline.sync.Pipeline.handle`."""
        record = delivery._record  # see the sync twin: the record, not four property calls
        message = record.message
        headers = message.headers
        attempt = h.attempt_of(headers) if ATTEMPT in headers else 1
        message_id = message.message_id
        if self._finished.finished(message_id, attempt):
            self.report.duplicate(message_id, attempt)
            await delivery.ack()
            return
        if self.report.recording:
            self.report.attempt(attempt)
        try:
            if self.breaker is None and self.throttle is None and self.timeout is None:
                result = handler(delivery)  # no stage set: skip their frames (see the sync twin)
                if inspect.isawaitable(result):
                    await result
            else:
                await self._guarded(delivery, handler)
        except Exception as exc:
            if delivery.settled or delivery.stale:
                self.report.settled_by_handler(exc)
                return
            await self._failed(delivery, exc)
            return
        if record.state is PENDING and not record.stale:
            # Finished before the ack goes: if the ack is lost, the redelivery is recognised.
            self._finished.finish(message_id, attempt)
            await delivery.ack()

    async def close(self) -> None:
        """See :meth:`ackbridge.pipeline.sync.Pipeline.close`."""
        self._closing.set()
        if self._held:
            # Each wakes at once; an attempt in progress finishes first.
            ran = await asyncio.gather(*self._held)
            self.report.given_back(ran.count(False))
        for consumer in reversed(self._consumers):
            await consumer.close()
        self._consumers.clear()

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _check_dead_letter_queue(self) -> None:
        """Refuse to start when the dead-letter queue is missing (where the broker can tell):
        a copy to it would be refused, and on RabbitMQ a Basic.Return is matched to an
        unconfirmed publish by message id, so the refusal could be booked against the
        original's own publish (docs/broker-quirks.md)."""
        if self.policy.exhausted is not Exhausted.DEAD_LETTER:
            return
        if not self.connection.capabilities.topology_support(Topology.INSPECT_QUEUE).available:
            return
        target = self.policy.dead_letter_queue
        try:
            if target is None:
                # The companion the broker names for the queue (it exists, or it would not be named).
                found = (await self.connection.inspect_queue(self.queue)).dead_letter
                if found is not None:
                    self._dead_letter = found
                    return
                target = self.policy.dead_letters_to(self.queue)
            await self.connection.inspect_queue(target)
        except BrokerError as exc:
            named = repr(target) if target is not None else "companion"
            raise ConfigurationError(f"the dead-letter {named} of {self.queue!r} cannot be found ({exc}); "
                                     "declare the queue with dead_letter=True, or name an existing one in "
                                     "RedeliveryPolicy(dead_letter_queue=...)") from exc

    # ---- stages ---------------------------------------------------------------
    async def _guarded(self, delivery: AsyncDelivery, handler: Handler) -> None:
        breaker = self.breaker
        if breaker is not None:
            self.report.circuit(breaker.state)
            await self._wait(breaker.wait(time.monotonic()))
            self.report.circuit(breaker.state)
        if self.throttle is not None:
            await self._wait(self.throttle.take(time.monotonic()))
        try:
            await self._timed(delivery, handler)
        except Exception:
            if breaker is not None:
                breaker.failed(time.monotonic())
                self.report.circuit(breaker.state)
            raise
        if breaker is not None:
            breaker.succeeded()
            self.report.circuit(breaker.state)

    async def _timed(self, delivery: AsyncDelivery, handler: Handler) -> None:
        result = handler(delivery)
        if not inspect.isawaitable(result):
            return
        if self.timeout is None:
            await result
            return
        try:
            await asyncio.wait_for(result, self.timeout)
        except TimeoutError:
            raise HandlerTimeoutError(f"the handler of {self.queue!r} ran longer than {self.timeout:g} s") from None

    async def _wait(self, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), seconds)

    # ---- the policy's steps ----------------------------------------------------
    async def _failed(self, delivery: AsyncDelivery, exc: Exception, state: dict[str, object] | None = None) -> None:
        """See the sync twin."""
        plan = self.policy.plan(self.queue, delivery.headers if state is None else state, delivery.message_id,
                                exc, dead_letter=self._dead_letter)
        if plan.step is Step.RETRY and self._holding is not None:
            if self._closing.is_set():
                return  # left unsettled: the consumer's close gives it back
            held = Held(time.monotonic() + plan.delay, 0, delivery, plan.headers)
            task = asyncio.get_running_loop().create_task(self._hold(held, self._holding))
            self._held.add(task)
            task.add_done_callback(self._held.discard)
            self.report.held(plan)
            return
        delivered_as = plan.attempt if state is None else h.attempt_of(delivery.headers)
        if plan.step is Step.DROP:
            self.report.dropped(plan)
            self._finished.finish(delivery.message_id, delivered_as)
            await delivery.ack()
            return
        if await self._copy(plan, delivery.body):
            # The copy is confirmed: from here the original is a duplicate of it.
            self._finished.finish(delivery.message_id, delivered_as)
            await delivery.ack()
            self.report.copied(plan)
            return
        # See the sync twin: no confirmed copy, so the original stays with the broker.
        if plan.step is Step.RETRY:
            await delivery.requeue()
        else:
            await delivery.reject()
        self.report.copy_failed(plan)

    async def _copy(self, plan: Plan, body: bytes) -> bool:
        assert plan.destination is not None
        try:
            confirm = await self.connection.publish(plan.destination, body, headers=plan.headers,
                                                    message_id=plan.message_id)
            outcome = await confirm.result(self.confirm_wait)
        except (AckbridgeError, TimeoutError) as exc:
            log.error("ackbridge.pipeline: copying a message of %r to %r failed: %s", self.queue,
                      plan.destination, type(exc).__name__)
            return False
        if outcome.status is not ConfirmStatus.CONFIRMED:
            log.error("ackbridge.pipeline: the copy of a message of %r to %r was %s (%s)", self.queue,
                      plan.destination, outcome.status.value, outcome.reason)
            return False
        return True

    async def _hold(self, held: Held, handler: Handler) -> bool:
        """A held delivery's next attempt when due (see the sync twin's ``_retry``);
        False when it was given back unrun."""
        await self._wait(held.due - time.monotonic())
        delivery: AsyncDelivery = held.delivery
        if delivery.settled or delivery.stale or self._closing.is_set():
            self.report.lost_hold(delivery.message_id, held.attempt, delivery.stale)
            return False
        if self.report.recording:
            self.report.attempt(held.attempt)
        try:
            try:
                await self._guarded(held.view(), handler)  # type: ignore[arg-type]  # a delivery in all but type
            except Exception as exc:
                if delivery.settled or delivery.stale:
                    self.report.settled_by_handler(exc)
                    return True
                await self._failed(delivery, exc, held.headers)
                return True
            if not delivery.settled and not delivery.stale:
                self._finished.finish(delivery.message_id, h.attempt_of(delivery.headers))
                await delivery.ack()
        except AckbridgeError as exc:
            log.warning("ackbridge.pipeline: a held attempt of %r on %r could not be settled (%s); the broker "
                        "delivers it again", delivery.message_id, self.queue, type(exc).__name__)
        return True

    async def _pump(self, delivery: AsyncDelivery) -> None:
        """See :meth:`ackbridge.pipeline.sync.Pipeline._pump`."""
        await self._wait(h.seconds_until(delivery.headers.get(h.RETRY_DUE), time.time()))
        if self._closing.is_set():
            return  # unsettled: close() hands it back to its delay queue
        back = str(delivery.headers.get(h.ORIGINAL_QUEUE) or self.queue)
        try:
            confirm = await self.connection.publish(back, delivery.body, headers=dict(delivery.headers),
                                                    message_id=delivery.message_id)
            outcome = await confirm.result(self.confirm_wait)
        except TimeoutError:
            outcome = None
        if outcome is not None and outcome.status is ConfirmStatus.CONFIRMED:
            await delivery.ack()
            self.report.moved_back(delivery.message_id, back)
        else:
            log.error("ackbridge.pipeline: moving a copy back to %r failed (%s); it stays in its delay queue",
                      back, outcome.status.value if outcome is not None else "no answer")
            await self._wait(1.0)  # a broker refusing every copy would otherwise spin
            await delivery.requeue()


__all__ = ["Handler", "Pipeline"]
