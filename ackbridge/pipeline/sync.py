"""The pipeline on the sync face: a handler wrapper over the public API.

``Pipeline(conn, queue, policy=...).consume(handler)`` runs *handler* through the
stages in one order (outermost first): the redelivery policy, the circuit breaker,
the throttle, the timeout. Each delivery is settled exactly once: by the handler,
or by the pipeline when the handler returns (ack) or raises (a confirmed copy to a
delay queue or the dead-letter queue, then ack). The delay queues are moved back by
pumps, one handler consumer per back-off level; on a broker whose ``retry_method`` is
holding, the failed delivery is kept unsettled and run again when due instead
(:mod:`ackbridge.pipeline.holding`; see docs/failure-policy.md).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Unpack

from ackbridge.capabilities import RetryMethod, Topology
from ackbridge.errors import AckbridgeError, BrokerError, ConfigurationError, HandlerTimeoutError
from ackbridge.kernel.settlement import PENDING
from ackbridge.keywords import ConsumeOptions
from ackbridge.messages import ConfirmStatus
from ackbridge.pipeline import headers as h
from ackbridge.pipeline.copies import FinishedAttempts
from ackbridge.pipeline.holding import Held, HeldRetries
from ackbridge.pipeline.policy import Exhausted, Plan, RedeliveryPolicy, Step
from ackbridge.pipeline.report import Report
from ackbridge.pipeline.stages import CircuitBreaker, Throttle
from ackbridge.sync.connection import Connection
from ackbridge.sync.consumer import Consumer, Delivery

log = logging.getLogger("ackbridge.pipeline")
ATTEMPT = h.ATTEMPT  # a global, not a module attribute, on the per-delivery path

Handler = Callable[[Delivery], object]


class Pipeline:
    """Middleware around one queue's handler (see the module docstring).

    ``timeout``: seconds a handler run may take; past it the run counts as failed
    (:class:`~ackbridge.errors.HandlerTimeoutError`). Python cannot stop a thread: the
    late run goes on in its worker thread and any settle it makes then raises
    AlreadySettledError there. ``throttle``, ``breaker``: see
    :mod:`ackbridge.pipeline.stages`. ``confirm_wait``: seconds to wait for a copy's
    confirm before treating it as unknown (the original is then requeued, not acked).
    """

    def __init__(self, connection: Connection, queue: str, *, policy: RedeliveryPolicy | None = None,
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
        self._closing = threading.Event()
        self._consumers: list[Consumer] = []
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._held: HeldRetries | None = None

    # ---- public -------------------------------------------------------------
    def consume(self, handler: Handler, **options: Unpack[ConsumeOptions]) -> Consumer:
        """Declare the delay queues, start their pumps, and consume the queue with *handler*."""
        delays = self.policy.delay_queues(self.queue)
        if delays:
            # Never silently weaker: a broker that cannot hold a retry back refuses the policy.
            self.connection.capabilities.require_retry()
        self._check_dead_letter_queue()
        if delays and self.connection.capabilities.retry_method is RetryMethod.HOLDING:
            self._held = HeldRetries(functools.partial(self._retry, handler=handler), self.queue)
            delays = []
        for name in delays:
            # With its dead-letter companion: a copy the pump could not handle is kept, not discarded.
            self.connection.declare_queue(name)
            self._consumers.append(self.connection.consume(name, handler=self._pump, prefetch=1))
        # A partial, not a lambda: called from C, one Python frame less per delivery.
        main = self.connection.consume(self.queue, handler=functools.partial(self.handle, handler=handler), **options)
        self._consumers.append(main)
        return main

    def handle(self, delivery: Delivery, handler: Handler) -> None:
        """Run *handler* on *delivery* through every stage and settle it once."""
        # The path every delivery takes: read only the attempt, look it up once, and
        # skip the stages' frames when none is set (benchmarks/pipeline_bench.py). The
        # delivery's record is read directly: its four properties (headers, message id,
        # settled, stale) were four Python calls per message, about a third of what the
        # pipeline added on RabbitMQ (+5.1% -> +3.3% instructions, docs/benchmarks.md).
        record = delivery._record
        message = record.message
        headers = message.headers
        attempt = h.attempt_of(headers) if ATTEMPT in headers else 1
        message_id = message.message_id
        if self._finished.finished(message_id, attempt):
            self.report.duplicate(message_id, attempt)
            delivery.ack()
            return
        if self.report.recording:
            self.report.attempt(attempt)
        try:
            if self.breaker is None and self.throttle is None and self.timeout is None:
                handler(delivery)
            else:
                self._guarded(delivery, handler)
        except Exception as exc:
            if delivery.settled or delivery.stale:
                self.report.settled_by_handler(exc)
                return
            self._failed(delivery, exc)
            return
        if record.state is PENDING and not record.stale:
            # Finished before the ack goes: if the ack is lost, the redelivery is recognised.
            self._finished.finish(message_id, attempt)
            delivery.ack()

    def close(self) -> None:
        """Stop the pumps (a copy waiting for its time goes back to its delay queue)
        and the consumer; a run in progress finishes first. A held delivery is given
        back unsettled with the rest."""
        self._closing.set()
        if self._held is not None:
            self.report.given_back(self._held.close())
        for consumer in reversed(self._consumers):
            consumer.close()
        self._consumers.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_dead_letter_queue(self) -> None:
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
                found = self.connection.inspect_queue(self.queue).dead_letter
                if found is not None:
                    self._dead_letter = found
                    return
                target = self.policy.dead_letters_to(self.queue)
            self.connection.inspect_queue(target)
        except BrokerError as exc:
            named = repr(target) if target is not None else "companion"
            raise ConfigurationError(f"the dead-letter {named} of {self.queue!r} cannot be found ({exc}); "
                                     "declare the queue with dead_letter=True, or name an existing one in "
                                     "RedeliveryPolicy(dead_letter_queue=...)") from exc

    # ---- stages ---------------------------------------------------------------
    def _guarded(self, delivery: Delivery, handler: Handler) -> None:
        breaker = self.breaker
        if breaker is not None:
            self.report.circuit(breaker.state)
            self._wait(breaker.wait(time.monotonic()))
            self.report.circuit(breaker.state)
        if self.throttle is not None:
            self._wait(self.throttle.take(time.monotonic()))
        try:
            self._timed(delivery, handler)
        except Exception:
            if breaker is not None:
                breaker.failed(time.monotonic())
                self.report.circuit(breaker.state)
            raise
        if breaker is not None:
            breaker.succeeded()
            self.report.circuit(breaker.state)

    def _timed(self, delivery: Delivery, handler: Handler) -> None:
        if self.timeout is None:
            handler(delivery)
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ackbridge-timed")
        run = self._pool.submit(handler, delivery)
        try:
            run.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise HandlerTimeoutError(f"the handler of {self.queue!r} ran longer than {self.timeout:g} s") from None

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)

    # ---- the policy's steps ----------------------------------------------------
    def _failed(self, delivery: Delivery, exc: Exception, state: dict[str, object] | None = None) -> None:
        """*state*: a held delivery's retry headers (None: they are the delivery's own)."""
        plan = self.policy.plan(self.queue, delivery.headers if state is None else state, delivery.message_id,
                                exc, dead_letter=self._dead_letter)
        if plan.step is Step.RETRY and self._held is not None:
            self._held.hold(delivery, plan.headers, plan.delay)
            self.report.held(plan)
            return
        # The attempt the broker's delivery is (a held one's is its first, whatever the run).
        delivered_as = plan.attempt if state is None else h.attempt_of(delivery.headers)
        if plan.step is Step.DROP:
            self.report.dropped(plan)
            self._finished.finish(delivery.message_id, delivered_as)
            delivery.ack()
            return
        if self._copy(plan, delivery.body):
            # The copy is confirmed: from here the original is a duplicate of it.
            self._finished.finish(delivery.message_id, delivered_as)
            delivery.ack()
            self.report.copied(plan)
            return
        # No confirmed copy: the original must not go. A retry copy that failed costs
        # no attempt (requeued: the broker redelivers it as it is); a dead-letter copy
        # that failed falls back to the broker's own dead-lettering (without reasons).
        if plan.step is Step.RETRY:
            delivery.requeue()
        else:
            delivery.reject()
        self.report.copy_failed(plan)

    def _copy(self, plan: Plan, body: bytes) -> bool:
        assert plan.destination is not None
        try:
            confirm = self.connection.publish(plan.destination, body, headers=plan.headers,
                                              message_id=plan.message_id)
            outcome = confirm.result(self.confirm_wait)
        except (AckbridgeError, TimeoutError) as exc:
            log.error("ackbridge.pipeline: copying a message of %r to %r failed: %s", self.queue,
                      plan.destination, type(exc).__name__)
            return False
        if outcome.status is not ConfirmStatus.CONFIRMED:
            log.error("ackbridge.pipeline: the copy of a message of %r to %r was %s (%s)", self.queue,
                      plan.destination, outcome.status.value, outcome.reason)
            return False
        return True

    def _retry(self, held: Held, handler: Handler) -> None:
        """A held delivery's next attempt, in the holder's thread (see
        :mod:`ackbridge.pipeline.holding`): run, then settle as :meth:`handle` does."""
        delivery: Delivery = held.delivery
        if delivery.settled or delivery.stale or self._closing.is_set():
            self.report.lost_hold(delivery.message_id, held.attempt, delivery.stale)
            return
        if self.report.recording:
            self.report.attempt(held.attempt)
        try:
            try:
                self._guarded(held.view(), handler)  # type: ignore[arg-type]  # a Delivery in all but type
            except Exception as exc:
                if delivery.settled or delivery.stale:
                    self.report.settled_by_handler(exc)
                    return
                self._failed(delivery, exc, held.headers)
                return
            if not delivery.settled and not delivery.stale:
                # The broker's attempt (1 but for a replayed copy): its redelivery is what may come again.
                self._finished.finish(delivery.message_id, h.attempt_of(delivery.headers))
                delivery.ack()
        except AckbridgeError as exc:
            # The connection ended under the attempt: the broker has the message back.
            log.warning("ackbridge.pipeline: a held attempt of %r on %r could not be settled (%s); the broker "
                        "delivers it again", delivery.message_id, self.queue, type(exc).__name__)

    def _pump(self, delivery: Delivery) -> None:
        """A delay queue's handler: hold the head copy until it is due, then move it
        back to the queue (confirmed, then acked). Left unsettled on close."""
        self._wait(h.seconds_until(delivery.headers.get(h.RETRY_DUE), time.time()))
        if self._closing.is_set():
            return  # unsettled: close() hands it back to its delay queue
        back = str(delivery.headers.get(h.ORIGINAL_QUEUE) or self.queue)
        confirm = self.connection.publish(back, delivery.body, headers=dict(delivery.headers),
                                          message_id=delivery.message_id)
        try:
            outcome = confirm.result(self.confirm_wait)
        except TimeoutError:
            outcome = None
        if outcome is not None and outcome.status is ConfirmStatus.CONFIRMED:
            delivery.ack()
            self.report.moved_back(delivery.message_id, back)
        else:
            log.error("ackbridge.pipeline: moving a copy back to %r failed (%s); it stays in its delay queue",
                      back, outcome.status.value if outcome is not None else "no answer")
            self._wait(1.0)  # a broker refusing every copy would otherwise spin
            delivery.requeue()


__all__ = ["Handler", "Pipeline"]
