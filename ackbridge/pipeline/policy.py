"""The redelivery policy: how many attempts, how long between them, what happens after
the last. I/O-free: it turns a failed delivery into a :class:`Plan` (which copy to
publish where), and both faces (:mod:`ackbridge.pipeline.sync`,
:mod:`ackbridge.pipeline.aio`) carry the plan out the same way: publish the copy,
wait for its confirm, and only then ack the original.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ackbridge.kernel.backoff import Schedule
from ackbridge.pipeline import headers as h
from ackbridge.pipeline.names import dead_letter_queue, delay_queue


class Exhausted(enum.StrEnum):
    """What happens to a message whose last attempt failed."""

    #: A copy with the failure headers goes to the queue's dead-letter queue.
    DEAD_LETTER = "dead-letter"
    #: It is acked and a WARNING line says so (id, attempts, reason).
    DROP = "drop"


class Step(enum.StrEnum):
    """What a plan does with a failed delivery."""

    RETRY = "retry"
    DEAD_LETTER = "dead-letter"
    DROP = "drop"


@dataclass(frozen=True)
class Plan:
    """One failed delivery's fate: publish ``body`` with ``headers`` and ``message_id``
    (the copy's own id, :func:`~ackbridge.pipeline.headers.copy_id`) to ``destination``
    (none for DROP), confirmed, then ack the original."""

    step: Step
    attempt: int
    headers: dict[str, Any]
    message_id: str
    destination: str | None = None
    delay: float = 0.0
    level: int | None = None


@dataclass(frozen=True)
class RedeliveryPolicy:
    """``attempts`` runs of the handler at most (1: no retry); between two, the wait
    ``schedule.delay(n)`` after the n-th failure; after the last, ``exhausted``.

    ``dead_letter_queue``: where dead-lettered copies go (default ``QUEUE.dlq``, the
    companion ``declare_queue`` makes). ``delay_queue_prefix``: the delay queues are
    ``<prefix>.<level>`` (default ``QUEUE.retry``)."""

    attempts: int = 3
    schedule: Schedule = field(default_factory=lambda: Schedule.exponential(1.0))
    exhausted: Exhausted = Exhausted.DEAD_LETTER
    dead_letter_queue: str | None = None
    delay_queue_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")

    def delay_queues(self, queue: str) -> list[str]:
        """The delay queue of every level the schedule can reach within ``attempts``."""
        reachable = {self.schedule.level(n) for n in range(1, self.attempts)}
        return [delay_queue(queue, level, self.delay_queue_prefix) for level in sorted(reachable)]

    def dead_letters_to(self, queue: str) -> str:
        return self.dead_letter_queue or dead_letter_queue(queue)

    def plan(self, queue: str, headers: Mapping[str, Any], message_id: str | None, exc: BaseException,
             now: float | None = None, *, dead_letter: str | None = None) -> Plan:
        """The fate of a delivery from *queue* whose handler raised *exc*; *dead_letter*:
        the dead-letter queue the broker named for *queue* (else :meth:`dead_letters_to`)."""
        now = time.time() if now is None else now
        state = h.RetryState.read(headers)
        original = state.original_id or message_id or uuid.uuid4().hex
        failure = state.failed(queue, original, exc, now)
        if state.attempt < self.attempts:
            delay = self.schedule.delay(state.attempt)
            level = self.schedule.level(state.attempt)
            failure[h.ATTEMPT] = state.attempt + 1
            failure[h.RETRY_DUE] = h.timestamp(now + delay)
            return Plan(Step.RETRY, state.attempt, h.carried(headers, failure),
                        h.copy_id(original, str(state.attempt + 1)),
                        delay_queue(state.original_queue or queue, level, self.delay_queue_prefix), delay, level)
        if self.exhausted is Exhausted.DROP:
            return Plan(Step.DROP, state.attempt, h.carried(headers, failure), original)
        return Plan(Step.DEAD_LETTER, state.attempt, h.carried(headers, failure), h.copy_id(original, "dead"),
                    dead_letter or self.dead_letters_to(state.original_queue or queue))
