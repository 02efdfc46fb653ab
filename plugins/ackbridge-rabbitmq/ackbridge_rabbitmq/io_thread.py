"""The transport's I/O thread: pika's IOLoop and the hand-offs to it.

pika is not thread-safe; only ``IOLoop.add_callback_threadsafe`` may be called
from other threads, so every channel call runs on this one thread. Core events
(deliveries, confirms, generation ends, replies) are called on it too, in
arrival order: the core never holds one of its locks across a transport call,
so this thread only ever waits for a few microseconds of ledger work, never
for itself.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from pika.adapters.select_connection import IOLoop

from ackbridge.errors import ConnectionLostError
from ackbridge.messages import ConfirmOutcome
from ackbridge.transport import TransportEvents
from ackbridge_rabbitmq.errors import channel_error

log = logging.getLogger("ackbridge.rabbitmq")

Fut = concurrent.futures.Future


class IOThread:
    """One IOLoop on one daemon thread."""

    def __init__(self, what: str) -> None:
        self.what = what  # the redacted URL, for messages
        self.loop: IOLoop | None = None
        self._thread: threading.Thread | None = None
        self._ident: int | None = None

    @property
    def running(self) -> bool:
        return self.loop is not None

    def on_io(self) -> bool:
        """True on the I/O thread itself."""
        return threading.get_ident() == self._ident

    def start(self) -> None:
        self.loop = IOLoop()
        ready = threading.Event()
        loop = self.loop

        def run() -> None:
            self._ident = threading.get_ident()
            ready.set()
            loop.start()

        self._thread = threading.Thread(target=run, name="ackbridge-rabbitmq-io", daemon=True)
        self._thread.start()
        ready.wait(5)

    def stop(self, before_stop: Callable[[], None]) -> None:
        """Run *before_stop* on the I/O thread, stop the loop and wait for the thread."""
        loop = self.loop
        if loop is None:
            return

        def stop() -> None:
            before_stop()
            loop.stop()

        loop.add_callback_threadsafe(stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        loop.close()
        self.loop = None

    def call_soon(self, fn: Callable[[], object]) -> bool:
        """Hand *fn* to the I/O thread without waiting; False if the loop is gone."""
        loop = self.loop
        if loop is None:
            return False
        loop.add_callback_threadsafe(fn)
        return True

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """On the I/O thread only: run *fn* after *delay* seconds."""
        assert self.loop is not None
        self.loop.call_later(delay, fn)

    def submit(self, fn: Callable[[Fut[Any]], None], doing: str, timeout: float) -> Any:
        """Run *fn(fut)* on the I/O thread and wait (at most *timeout* s) for it to resolve *fut*."""
        fut: Fut[Any] = Fut()

        def run() -> None:
            try:
                fn(fut)
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(channel_error(exc, doing))

        if not self.call_soon(run):
            raise ConnectionLostError(f"{doing}: {self.what} is not open")
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            raise ConnectionLostError(f"{doing}: no answer from {self.what} within {timeout} s") from None


def emit(fn: Callable[[], None]) -> None:
    """Call a core event; a failing one must not stop the I/O loop."""
    try:
        fn()
    except Exception:
        log.exception("ackbridge-rabbitmq: event handler failed")


def emit_confirms(events: TransportEvents, outcomes: list[tuple[int, ConfirmOutcome]]) -> None:
    """Report *outcomes* in one event (a ``multiple`` ack answers many publishes)."""
    if outcomes:
        emit(lambda: events.confirm_batch(outcomes))
