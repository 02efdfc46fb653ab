"""Recognising a copy that arrives twice: the policy's own duplicates, by message id.

Each step of the policy publishes a copy, waits for its confirm and then acks what it
copied. If the ack is lost (the connection drops between the two), the broker
delivers the copied message again, and both it and the copy would reach the
handler. Each attempt of a message is known by (message id, attempt number); a
delivery whose pair this consumer has finished already (handled and acked, or copied
onward) is acked without running the handler. The window is bounded and lives in
one process: a copy arriving after a restart, or at a competing consumer, is not
recognised (docs/failure-policy.md).
"""

from __future__ import annotations

import threading

#: Finished (id, attempt) pairs remembered per pipeline, at least.
WINDOW = 10_000


class FinishedAttempts:
    """A bounded, thread-safe set of finished (message id, attempt) pairs: the last
    ``size`` at least, ``2 * size`` at most.

    Asked once and told once per delivery, so both stay cheap (the pipeline's cost
    when nothing fails, benchmarks/pipeline_bench.py): two sets, the current one and
    the one before it; when the current one is full it becomes the one before, and
    the oldest set is forgotten whole. Nothing is evicted pair by pair, and only that
    rotation takes the lock: one set operation is atomic under the interpreter lock,
    and a pair added while another thread rotates lands in a set that is still asked.

    A first attempt (nearly every delivery) is kept as its bare message id, any later
    one as an (id, attempt) tuple: a str never equals a tuple, so the pairs stay
    apart, and a str is not tracked by the cyclic garbage collector. A tuple kept per
    delivery was: each one counted towards the next collection (plain consume frees
    what it allocates and counts about nothing), so the window set off collections,
    full ones included, in proportion to the messages. On RabbitMQ that was half of
    the pipeline's instructions per message (benchmarks/pipeline_bench.py).
    """

    __slots__ = ("_current", "_lock", "_previous", "size")

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self._current: set[str | tuple[str, int]] = set()
        self._previous: set[str | tuple[str, int]] = set()
        self._lock = threading.Lock()

    def finished(self, message_id: str | None, attempt: int) -> bool:
        if message_id is None:
            return False
        key = message_id if attempt == 1 else (message_id, attempt)
        return key in self._current or key in self._previous

    def finish(self, message_id: str | None, attempt: int) -> None:
        if message_id is None:
            return
        current = self._current
        current.add(message_id if attempt == 1 else (message_id, attempt))
        if len(current) >= self.size:
            with self._lock:
                if self._current is current:  # not rotated by another thread meanwhile
                    self._previous, self._current = current, set()
