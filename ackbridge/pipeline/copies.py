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
from collections import OrderedDict

#: Finished (id, attempt) pairs remembered per pipeline.
WINDOW = 10_000


class FinishedAttempts:
    """A bounded, thread-safe set of finished (message id, attempt) pairs."""

    __slots__ = ("_lock", "_seen", "size")

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def finished(self, message_id: str | None, attempt: int) -> bool:
        if message_id is None:
            return False
        with self._lock:
            return (message_id, attempt) in self._seen

    def finish(self, message_id: str | None, attempt: int) -> None:
        if message_id is None:
            return
        with self._lock:
            self._seen[(message_id, attempt)] = None
            if len(self._seen) > self.size:
                self._seen.popitem(last=False)
