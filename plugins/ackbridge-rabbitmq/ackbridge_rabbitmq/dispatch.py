"""Hands transport events to the core from a thread of their own.

The core's sync consumer holds its lock while it calls ``transport.settle``,
and settle waits for the pika I/O thread. If the I/O thread called
``events.deliver`` itself it could block on that same lock: a deadlock. So the
I/O thread only appends to this queue; one dispatcher thread calls the core,
in arrival order (a generation's end is never overtaken by its deliveries).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger("ackbridge.rabbitmq")

Event = Callable[[], None]


class Dispatcher:
    def __init__(self, name: str) -> None:
        self._items: deque[Event] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, event: Event) -> None:
        self._items.append(event)
        # Only take the lock when the dispatcher sleeps: a busy stream pays
        # one deque append per event, not a lock round trip.
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Deliver what is queued, then end the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _run(self) -> None:
        items = self._items
        while True:
            if not items:
                with self._cond:
                    self._waiting = True
                    # Re-check under the lock: put() may have appended just before.
                    while not items and not self._stopped:
                        self._cond.wait(0.5)
                    self._waiting = False
                    if not items and self._stopped:
                        return
            try:
                event = items.popleft()
            except IndexError:
                continue
            try:
                event()
            except Exception:  # a failing callback must not stop the stream
                log.exception("ackbridge-rabbitmq: event handler failed")
