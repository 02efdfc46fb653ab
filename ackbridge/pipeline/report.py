"""What the pipeline tells: log lines under ``ackbridge.pipeline`` and metrics through
:mod:`ackbridge.observability` (nothing recorded without a meter provider)."""

from __future__ import annotations

import logging
from typing import Any

from ackbridge.observability.metrics import instruments_in_use
from ackbridge.pipeline import headers as h
from ackbridge.pipeline.policy import Plan, Step
from ackbridge.pipeline.stages import Circuit

log = logging.getLogger("ackbridge.pipeline")


class Report:
    """The logs and metrics of one pipeline (one queue)."""

    __slots__ = ("_base", "_circuit", "_instruments", "broker", "queue", "recording")

    def __init__(self, broker: str, queue: str) -> None:
        self.broker = broker
        self.queue = queue
        self._base: dict[str, Any] = {"messaging.system": broker, "messaging.destination.name": queue}
        self._circuit: Circuit | None = None
        # Resolved once, as a connection's observer is: with recording off, each
        # recording point costs one ``is None`` check per message.
        self._instruments = instruments_in_use()
        #: Metrics are recorded: the per-delivery path asks this before calling attempt().
        self.recording = self._instruments is not None

    def _add(self, counter: str, **attributes: Any) -> None:
        if self._instruments is not None:
            getattr(self._instruments, counter).add(1, {**self._base, **attributes})

    def attempt(self, attempt: int) -> None:
        if self._instruments is not None:
            self._add("pipeline_attempts", **{"ackbridge.attempt": attempt})

    def duplicate(self, message_id: str | None, attempt: int) -> None:
        log.info("ackbridge.pipeline: message %r attempt %d from %r was finished before (a copy that came "
                 "twice): acked, handler not run [broker %s]", message_id, attempt, self.queue, self.broker)

    def copied(self, plan: Plan) -> None:
        reason = plan.headers.get(h.FAILURE_REASON, "")
        if plan.step is Step.RETRY:
            self._add("retries_scheduled", **{"ackbridge.level": plan.level})
            log.info("ackbridge.pipeline: message %r from %r failed attempt %d (%s); retry in %.3g s via %r "
                     "[broker %s]", plan.message_id, self.queue, plan.attempt, reason, plan.delay,
                     plan.destination, self.broker)
            return
        self._dead(plan)
        log.warning("ackbridge.pipeline: message %r from %r failed its last attempt (%d): %s; dead-lettered "
                    "to %r with the failure headers [broker %s]", plan.message_id, self.queue, plan.attempt,
                    reason, plan.destination, self.broker)

    def settled_by_handler(self, exc: BaseException) -> None:
        log.warning("ackbridge.pipeline: the handler of %r raised %s after settling its delivery itself; nothing "
                    "more is done [broker %s]", self.queue, type(exc).__name__, self.broker)

    def held(self, plan: Plan) -> None:
        self._add("retries_scheduled", **{"ackbridge.level": plan.level})
        log.info("ackbridge.pipeline: message %r from %r failed attempt %d (%s); held unsettled, retry in %.3g s "
                 "[broker %s]", plan.message_id, self.queue, plan.attempt, plan.headers.get(h.FAILURE_REASON, ""),
                 plan.delay, self.broker)

    def lost_hold(self, message_id: str | None, attempt: int, stale: bool) -> None:
        if stale:
            log.warning("ackbridge.pipeline: held message %r of %r went back to the broker before its attempt %d "
                        "(its connection ended); it comes again as attempt 1 [broker %s]", message_id, self.queue,
                        attempt, self.broker)

    def given_back(self, count: int) -> None:
        if count:
            log.info("ackbridge.pipeline: closing %r gave %d held message(s) back unsettled; they come again as "
                     "attempt 1 [broker %s]", self.queue, count, self.broker)

    def dropped(self, plan: Plan) -> None:
        self._dead(plan)
        log.warning("ackbridge.pipeline: message %r from %r failed its last attempt (%d): %s; dropped (the "
                    "policy says drop) [broker %s]", plan.message_id, self.queue, plan.attempt,
                    plan.headers.get(h.FAILURE_REASON, ""), self.broker)

    def _dead(self, plan: Plan) -> None:
        reason = str(plan.headers.get(h.FAILURE_REASON, ""))
        self._add("dead_lettered", **{"error.type": reason.partition(":")[0], "ackbridge.outcome": plan.step.value})

    def copy_failed(self, plan: Plan) -> None:
        log.error("ackbridge.pipeline: message %r from %r: the %s copy was not confirmed; the original is %s "
                  "[broker %s]", plan.message_id, self.queue, plan.step.value,
                  "requeued (the attempt is not counted)" if plan.step is Step.RETRY
                  else "rejected (the broker's own dead-lettering, without the failure headers)", self.broker)

    def moved_back(self, message_id: str | None, queue: str) -> None:
        log.debug("ackbridge.pipeline: message %r moved back to %r", message_id, queue)

    def circuit(self, state: Circuit) -> None:
        if state is not self._circuit:
            self._circuit = state
            self._add("circuit_changes", **{"ackbridge.circuit": state.value})
