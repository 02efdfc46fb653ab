"""Held retries: the delayed retry of a broker with no queue to park a copy in.

On AMQP 1.0 (no queue management), RabbitMQ streams (a stream keeps every message)
and MQTT 3.1.1 (no headers to carry a count) the pipeline cannot move a failed
message aside. It keeps the delivery instead: unsettled, so the broker still holds
it, and runs the handler on it again when its back-off is over. The rule of this
module: **a held delivery is settled by the pipeline's next attempt on it, or by
nobody** (closing the pipeline, or the broker taking it back when a connection
ends, gives it back unsettled, and it comes again as attempt 1: the count lived
here; docs/failure-policy.md).

:class:`RetryView` is what the handler is given on a held attempt: the delivery
itself, whose ``headers`` show the policy's (``ackbridge-retry-attempt`` and the
rest), as a copy from a delay queue would.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ackbridge.pipeline import headers as h

log = logging.getLogger("ackbridge.pipeline")


class RetryView:
    """A held delivery as its handler sees it: every attribute and verb the delivery's
    own, ``headers`` the application's with the policy's set (the attempt this run is)."""

    __slots__ = ("_delivery", "headers")

    def __init__(self, delivery: Any, headers: Mapping[str, Any]) -> None:
        self._delivery = delivery
        self.headers = headers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._delivery, name)

    def __repr__(self) -> str:
        return f"<held {self._delivery!r} attempt {self.headers.get(h.ATTEMPT)}>"


@dataclass(order=True)
class Held:
    """A delivery held for its next attempt: due at ``due`` (monotonic seconds), with
    ``headers`` the policy's state after its last failure (the plan's headers)."""

    due: float
    order: int
    delivery: Any = field(compare=False)
    headers: dict[str, Any] = field(compare=False)

    @property
    def attempt(self) -> int:
        return h.attempt_of(self.headers)

    def view(self) -> RetryView:
        return RetryView(self.delivery, self.headers)


class HeldRetries:
    """The sync face's holder: one thread that runs each held delivery's next attempt
    (``run(held)``) when it is due, in due order. A handler on a held attempt therefore
    runs in this thread, beside the consumer's own."""

    def __init__(self, run: Callable[[Held], None], name: str) -> None:
        self._run = run
        self._heap: list[Held] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=f"ackbridge-held-{name}", daemon=True)
        self._thread.start()

    def hold(self, delivery: Any, headers: dict[str, Any], delay: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, Held(time.monotonic() + delay, next(self._order), delivery, headers))
            self._cond.notify()

    def close(self) -> int:
        """Stop: an attempt in progress finishes first; the rest stay unsettled (the
        consumer's close gives them back). Returns how many were given up."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
        left = len(self._heap)
        self._heap.clear()
        return left

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing:
                    wait = self._heap[0].due - time.monotonic() if self._heap else None
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closing:
                    return
                held = heapq.heappop(self._heap)
            try:
                self._run(held)
            except Exception:  # the loop must outlive one attempt's surprise
                log.exception("ackbridge.pipeline: a held attempt of %r raised", held.delivery.message_id)
